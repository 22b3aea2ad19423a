#include "server/rpc/host_tasks.h"

#include <utility>

#include "tbb/task_arena.h"

namespace fresnel::server {

void PostHostTask(std::function<void()> task) {
  // One arena for the process (all cores), never destroyed: tasks may be in flight at exit.
  static tbb::task_arena* const arena = new tbb::task_arena();
  arena->enqueue(std::move(task));
}

}  // namespace fresnel::server
