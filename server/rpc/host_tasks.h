// Host work of a pipelined stream that must hold back neither the gRPC thread reading the stream
// (the next message is read only after OnRequest returns) nor a device worker (the next job
// starts only after the last one's completion returns): converting a frame's points into the
// kernels' layout, serialising an answer (gRPC's StartWrite serialises on the calling thread).
// Measured on the H200 machine (docs/BENCHMARKS.md, "Session 9"): a 1e5-point hologram frame
// spent 2.6-3.0 ms in OnRequest and 1.6-2.3 ms in StartWrite, which capped one Stream at
// ~220 frames/s and took device workers' time from the other streams.
#pragma once

#include <functional>

namespace fresnel::server {

// Runs `task` soon on a thread of the process's TBB pool (the one the kernels' parallel loops
// use; a task may itself run parallel loops). Fire and forget: returns at once, in no order
// with other tasks; `task` must keep alive what it touches (a stream does by leaving the answer
// the task gives outstanding until then) and must not throw (wrap it in Guarded).
void PostHostTask(std::function<void()> task);

}  // namespace fresnel::server
