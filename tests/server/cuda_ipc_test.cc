// CUDA IPC regions (issue 10 item 4): registration is validated field by field without a GPU
// (a CPU-only server answers FAILED_PRECONDITION), device regions stay out of the calls that read
// host memory, and — on a GPU — a second process's device memory serves Upfirdn / ResamplePoly
// with the gRPC path's bits (tests/server/cuda_ipc_peer.cc).
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "server/shm.h"
#include "server_fixture.h"
#include "support/test_support.h"

extern char** environ;

namespace fresnel::testing {
namespace {

using server::ShmRegistry;
using server::ShmRegistryOptions;

v1::RegisterRegionRequest IpcReq(const std::string& handle, const std::string& uuid,
                                 int64_t size = 4096, int64_t offset = 0) {
  v1::RegisterRegionRequest r;
  r.set_name("dev");
  r.set_size_bytes(size);
  r.mutable_cuda_ipc()->set_handle(handle);
  r.mutable_cuda_ipc()->set_device_uuid(uuid);
  r.mutable_cuda_ipc()->set_offset_bytes(offset);
  return r;
}

bool Names(const absl::Status& st, absl::StatusCode code, const std::string& text) {
  INFO(st.ToString());
  return st.code() == code && st.message().find(text) != absl::string_view::npos;
}

const std::string kHandle(64, '\x07');
const std::string kUuidA(16, 'a');
const std::string kUuidB(16, 'b');

TEST_CASE("CUDA IPC registration: malformed fields are INVALID_ARGUMENT naming them",
          "[server][shm][ipc]") {
  ShmRegistryOptions o;
  o.cuda_devices = {{0, kUuidA}};
  ShmRegistry reg(o);
  v1::RegisterRegionRequest both = IpcReq(kHandle, kUuidA);
  both.set_shm_name("/fresnel-x");
  CHECK(Names(reg.Register("c", both).status(), absl::StatusCode::kInvalidArgument, "shm_name"));
  CHECK(Names(reg.Register("c", IpcReq("short", kUuidA)).status(),
              absl::StatusCode::kInvalidArgument, "cuda_ipc.handle"));
  CHECK(Names(reg.Register("c", IpcReq(kHandle + "x", kUuidA)).status(),
              absl::StatusCode::kInvalidArgument, "cuda_ipc.handle"));
  CHECK(Names(reg.Register("c", IpcReq(kHandle, "abc")).status(),
              absl::StatusCode::kInvalidArgument, "cuda_ipc.device_uuid"));
  CHECK(Names(reg.Register("c", IpcReq(kHandle, kUuidA, 4096, -8)).status(),
              absl::StatusCode::kInvalidArgument, "cuda_ipc.offset_bytes"));
  CHECK(Names(reg.Register("c", IpcReq(kHandle, kUuidA, 0)).status(),
              absl::StatusCode::kInvalidArgument, "size_bytes"));
  v1::RegisterRegionRequest bad_name = IpcReq(kHandle, kUuidA);
  bad_name.set_name("");
  CHECK(Names(reg.Register("c", bad_name).status(), absl::StatusCode::kInvalidArgument, "name"));
  CHECK(reg.List("c").empty());
}

TEST_CASE("CUDA IPC registration: no such device, or a CPU-only server, is FAILED_PRECONDITION",
          "[server][shm][ipc]") {
  ShmRegistry cpu_only(ShmRegistryOptions{});
  CHECK(Names(cpu_only.Register("c", IpcReq(kHandle, kUuidA)).status(),
              absl::StatusCode::kFailedPrecondition, "CPU-only"));
  ShmRegistryOptions o;
  o.cuda_devices = {{0, kUuidA}};
  ShmRegistry one_gpu(o);
  const absl::Status other = one_gpu.Register("c", IpcReq(kHandle, kUuidB)).status();
  CHECK(Names(other, absl::StatusCode::kFailedPrecondition, "cuda_ipc.device_uuid"));
  CHECK(Names(other, absl::StatusCode::kFailedPrecondition, "GPU-61616161"));  // what it has
  // A device the registry believes in but the process cannot open (no CUDA here, or a fake UUID
  // on a GPU machine: the handle is garbage either way): refused, naming the handle.
  const absl::Status open = one_gpu.Register("c", IpcReq(kHandle, kUuidA)).status();
  CHECK_FALSE(open.ok());
  CHECK(Names(open, open.code(), "cuda_ipc.handle"));
  CHECK(one_gpu.List("c").empty());
}

TEST_CASE("CUDA IPC over gRPC: a CPU-only fresneld refuses, a host pointer is refused locally",
          "[server][shm][ipc]") {
  TestServer ts;  // gpus = none
  ClientOptions co;
  co.address = ts.address;
  co.default_timeout = std::chrono::milliseconds(30000);
  auto client = Client::Connect(co);
  REQUIRE(client.ok());
  CHECK(Names((*client)->RegisterRegion(IpcReq(kHandle, kUuidA)).status(),
              absl::StatusCode::kFailedPrecondition, "CPU-only"));
  CHECK(Names((*client)->RegisterRegion(IpcReq("x", kUuidA)).status(),
              absl::StatusCode::kInvalidArgument, "cuda_ipc.handle"));
  std::vector<float> host(1024);
  // No driver on a CPU machine, or not device memory on a GPU one: FAILED_PRECONDITION either way.
  CHECK((RegisterCudaRegion(client->get(), "host", host.data(), 4096).status().code() ==
         absl::StatusCode::kFailedPrecondition));
  CHECK(RegisterCudaRegion(client->get(), "null", nullptr, 4096).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

#if defined(FRESNEL_CUDA_IPC_PEER)
// Runs the peer binary against `address`; its exit status.
int RunPeer(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  // The build's binary, or $FRESNEL_CUDA_IPC_PEER (a bundle run elsewhere).
  const char* env = std::getenv("FRESNEL_CUDA_IPC_PEER");
  std::string path = env != nullptr && *env != '\0' ? env : FRESNEL_CUDA_IPC_PEER;
  argv.push_back(path.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
#endif

// Another process's device memory serves Upfirdn and ResamplePoly with the gRPC path's bits.
TEST_CASE("CUDA IPC regions: a second process's device memory", "[server][shm][ipc][gpu]") {
  if (SkipWithoutGpu()) return;
#if defined(FRESNEL_CUDA_IPC_PEER)
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  // The peer registers its cudaMalloc memory, runs x / y in the region, x only, y only, 1-D and
  // 3 rows, Upfirdn 4/1 with 64 taps and ResamplePoly 160/147, comparing each result with the
  // inline call byte for byte, then the errors (bounds, host-only calls, bad registrations).
  CHECK(RunPeer({"check", ts.address}) == 0);
#else
  FAIL("built without the CUDA IPC peer");
#endif
}

}  // namespace
}  // namespace fresnel::testing
