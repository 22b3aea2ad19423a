// fresneld: serves the Fresnel workloads over gRPC until SIGTERM/SIGINT, then drains. SIGHUP
// reloads --token-file.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "fresnel/core/gpu.h"
#include "server/config.h"
#include "server/server.h"

// civetweb, the HTTP server behind prometheus-cpp's exposer, starts its threads with a fixed
// 100 KiB stack, and glibc carves each thread's static TLS out of its stack. cuBLASLt alone
// (linked for the hologram tensor path) brings 94 KiB of TLS, so civetweb's pthread_create failed
// and /metrics could not start ("null context when constructing CivetServer"). fresneld therefore
// raises explicit thread stack sizes below 1 MiB; the symbol is exported (see CMakeLists.txt) so
// that it interposes on glibc's for every library in the process.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attr, std::max<size_t>(size, size_t{1} << 20));
}

int main(int argc, char** argv) {
  auto config = fresnel::server::ParseConfig(argc, argv);
  if (!config.ok()) {
    bool info = config.status().code() == absl::StatusCode::kCancelled;
    (info ? std::cout : std::cerr) << config.status().message();
    if (!info) std::cerr << "\nRun with --help for the flags.\n";
    return info ? 0 : 2;
  }

  // Block the stop signals and SIGHUP in every thread (they inherit the mask) and wait for them
  // here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto server = fresnel::server::FresnelServer::Start(*config);
  if (!server.ok()) {
    std::cerr << "fresneld: " << server.status() << "\n";
    return 1;
  }
  std::cerr << "fresneld: listening on port " << (*server)->port() << " (instance "
            << (*server)->instance() << ", "
            << fresnel::GpuCount() << " visible GPU(s), gpus=" << config->gpus
            << ", metrics " << config->metrics << ", "
            << (config->tls_cert.empty() ? "plaintext"
                                         : config->tls_client_ca.empty() ? "TLS" : "mutual TLS")
            << ", " << (config->token_file.empty() ? "no tokens" : "bearer tokens")
            << ")" << std::endl;

  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGHUP) break;
    absl::Status reloaded = (*server)->ReloadTokens();
    std::cerr << "fresneld: SIGHUP: "
              << (reloaded.ok() ? "reloaded " + config->token_file
                                : "kept the previous tokens: " + reloaded.ToString())
              << std::endl;
  }
  std::cerr << "fresneld: signal " << sig << ", draining (up to " << config->drain_timeout_s
            << " s)" << std::endl;
  // The drain must end: work that neither finishes nor stops when cancelled (a kernel that does
  // not poll) is abandoned a few seconds after the drain timeout, and the process exits anyway.
  const double limit_s = config->drain_timeout_s + 5;
  std::thread([limit_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit_s));
    std::cerr << "fresneld: running work did not stop " << limit_s
              << " s after SIGTERM; abandoning it and exiting" << std::endl;
    std::_Exit(0);
  }).detach();
  bool drained = (*server)->Shutdown();
  std::cerr << "fresneld: " << (drained ? "all accepted work finished" : "drain timed out")
            << ", exiting" << std::endl;
  return 0;
}
