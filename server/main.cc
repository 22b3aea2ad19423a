// fresneld: serves the Fresnel workloads over gRPC until SIGTERM/SIGINT, then drains.
#include <csignal>
#include <iostream>

#include "fresnel/core/gpu.h"
#include "server/config.h"
#include "server/server.h"

int main(int argc, char** argv) {
  auto config = fresnel::server::ParseConfig(argc, argv);
  if (!config.ok()) {
    bool info = config.status().code() == absl::StatusCode::kCancelled;
    (info ? std::cout : std::cerr) << config.status().message();
    if (!info) std::cerr << "\nRun with --help for the flags.\n";
    return info ? 0 : 2;
  }

  // Block the stop signals in every thread (they inherit the mask) and wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto server = fresnel::server::FresnelServer::Start(*config);
  if (!server.ok()) {
    std::cerr << "fresneld: " << server.status() << "\n";
    return 1;
  }
  std::cerr << "fresneld: listening on port " << (*server)->port() << " ("
            << fresnel::GpuCount() << " visible GPU(s), gpus=" << config->gpus
            << ", metrics " << config->metrics << ")" << std::endl;

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "fresneld: signal " << sig << ", draining (up to " << config->drain_timeout_s
            << " s)" << std::endl;
  bool drained = (*server)->Shutdown();
  std::cerr << "fresneld: " << (drained ? "all accepted work finished" : "drain timed out")
            << ", exiting" << std::endl;
  return 0;
}
