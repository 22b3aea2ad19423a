// Command-line parsing for `fresnel` (CLI11). Turns argv into the option structs of
// commands.h and dispatches; parse errors become exit code 2 with a one-line message.
#include <CLI/CLI.hpp>

#include <exception>

#include "absl/strings/str_cat.h"
#include "commands.h"
#include "fuse_cmd.h"
#include "hologram_cmd.h"
#include "render_cmd.h"

#ifndef FRESNEL_VERSION
#define FRESNEL_VERSION "unknown"
#endif

namespace fresnel::cli {
namespace {

const std::vector<std::string> kPadTypes = {
    "constant", "symmetric", "reflect", "edge",   "wrap",    "smooth",  "antisymmetric",
    "antireflect", "line",   "mean",    "median", "maximum", "minimum"};

// Bounds checks with readable messages ("--up: must be >= 1, got 0"); CLI11's stock
// PositiveNumber prints the whole range of a double.
CLI::Validator AtLeast(double min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v)) return "not a number: " + value;
        if (v < min) return "must be >= " + absl::StrCat(min) + ", got " + value;
        return std::string();
      },
      ">= " + absl::StrCat(min));
}

CLI::Validator Positive() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v)) return "not a number: " + value;
        if (!(v > 0)) return "must be > 0, got " + value;
        return std::string();
      },
      "> 0");
}

}  // namespace

int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"fresnel: command-line client for the Fresnel GPU compute service (fresneld).",
               "fresnel"};
  app.set_version_flag("--version", std::string("fresnel ") + FRESNEL_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the command
  app.footer(kExitCodeHelp);

  GlobalOptions global;
  app.add_option("--server", global.server,
                 "Server address HOST:PORT, a comma list of IP:PORT (round_robin over them), or "
                 "a gRPC URI such as dns:///NAME:PORT")
      ->envname("FRESNEL_SERVER")
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_s,
                 "Deadline of each call in seconds (a whole stream is one call; 0 = none)")
      ->check(AtLeast(0))
      ->capture_default_str();
  app.add_flag("--tls", global.tls, "Connect with TLS, verifying the server against the system's roots")
      ->envname("FRESNEL_CLIENT_TLS");
  app.add_option("--tls-ca", global.tls_ca, "PEM CA bundle that signed the server's certificate (implies --tls)")
      ->envname("FRESNEL_CLIENT_TLS_CA");
  app.add_option("--tls-cert", global.tls_cert, "PEM client certificate, for servers with mutual TLS")
      ->envname("FRESNEL_CLIENT_TLS_CERT");
  app.add_option("--tls-key", global.tls_key, "PEM private key of --tls-cert")
      ->envname("FRESNEL_CLIENT_TLS_KEY");
  app.add_option("--tls-server-name", global.tls_server_name,
                 "Name the server's certificate must carry (default: the --server host)")
      ->envname("FRESNEL_CLIENT_TLS_SERVER_NAME");
  app.add_option("--token-file", global.token_file,
                 "File whose first line is the bearer token (servers with --token-file)")
      ->envname("FRESNEL_CLIENT_TOKEN_FILE");
  // fresnel info
  InfoOptions info;
  CLI::App* info_cmd =
      app.add_subcommand("info", "Server version, devices, CPU workers, limits and services");
  info_cmd->add_flag("--stats", info.stats, "Also show live statistics (queues, requests, load)");
  info_cmd->add_flag("--json", info.json, "Print JSON instead of tables");
  info_cmd->footer(kExitCodeHelp);

  // fresnel health
  HealthOptions health;
  CLI::App* health_cmd = app.add_subcommand(
      "health", "grpc.health.v1 check: prints SERVING and exits 0, else exits 3");
  health_cmd->add_option("--service", health.service,
                         "Service to check, e.g. fresnel.v1.UnwrapService (default: the server)");
  health_cmd->footer(kExitCodeHelp);

  // fresnel interp
  InterpOptions interp;
  CLI::App* interp_cmd = app.add_subcommand(
      "interp",
      "Resample a signal file on the server: out = resample_poly(in, up, down) (or upfirdn)");
  interp_cmd->add_option("input", interp.input,
                         "Input signal: .wav (or any audio libsndfile reads), .npy, .f32/.raw")
      ->required();
  interp_cmd->add_option("output", interp.output, "Output signal: .wav (float), .npy, .f32/.raw")
      ->required();
  interp_cmd->add_option("--up", interp.up, "Upsampling factor L")
      ->required()
      ->check(AtLeast(1));
  interp_cmd->add_option("--down", interp.down, "Downsampling factor M")
      ->check(AtLeast(1))
      ->capture_default_str();
  interp_cmd->add_option("--mode", interp.mode,
                         "resample = scipy.signal.resample_poly (same duration), upfirdn = "
                         "scipy.signal.upfirdn (full filter length), fft = scipy.signal.resample "
                         "(FFT method, ceil(n up / down) samples), decimate = "
                         "scipy.signal.decimate (FIR, q = --down, --up 1)")
      ->check(CLI::IsMember({"resample", "upfirdn", "fft", "decimate"}))
      ->capture_default_str();
  CLI::Option* taps_opt = interp_cmd->add_option(
      "--taps", interp.taps_file, "Filter taps from a 1-D .npy file (float32, float64, complex64 or complex128)");
  CLI::Option* design_opt = interp_cmd->add_option(
      "--taps-design", interp.taps_design,
      "Design the filter on the server: NUMTAPS,CUTOFF (cutoff relative to Nyquist; upfirdn)");
  taps_opt->excludes(design_opt);
  interp_cmd->add_option("--window", interp.window,
                         "Window of the designed filter, scipy.signal.get_window's NAME[,PARAM...]"
                         " (kaiser,8.0  gaussian,3.5  chebwin,60  tukey,0.3  flattop ...; "
                         "default: kaiser for resample, hamming for --taps-design; for fft the "
                         "spectral window, periodic as SciPy's resample uses it, default none)");
  interp_cmd->add_flag("--freq-domain", interp.freq_domain,
                       "--mode fft: the input already is the spectrum (SciPy's domain='freq')");
  interp_cmd->add_option("--beta", interp.beta, "Kaiser window beta (default 5)")
      ->check(Positive());
  interp_cmd->add_option("--gain", interp.gain, "Gain of a designed upfirdn filter (default: up)")
      ->check(Positive());
  interp_cmd->add_option("--padtype", interp.padtype,
                         "Signal extension at the edges (upfirdn takes the first nine)")
      ->check(CLI::IsMember(kPadTypes))
      ->capture_default_str();
  interp_cmd->add_option("--cval", interp.cval, "Value beyond the edges for --padtype constant");
  interp_cmd->add_flag("--scipy-dtypes", interp.scipy_dtypes,
                       "Return SciPy's dtype (numpy.result_type(taps, x, float32), e.g. float64 "
                       "for float32 input with float64 taps) instead of the input's precision");
  interp_cmd->add_option("--device", interp.device, "Where the server may run the request")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  interp_cmd->add_option("--chunk", interp.chunk,
                         "Stream through ResampleStream in chunks of this many samples per "
                         "channel (inputs larger than the server's message cap stream "
                         "automatically)")
      ->check(AtLeast(1));
  interp_cmd->add_flag("--shm", interp.shm,
                       "Pass the signal and the result through a POSIX shared-memory region "
                       "instead of gRPC messages (the server must run on this host as this "
                       "user); no message cap applies");
  interp_cmd->add_option("--raw-channels", interp.raw_channels,
                         "Channels of a raw float32 input (interleaved frames)")
      ->check(AtLeast(1))
      ->capture_default_str();
  interp_cmd->add_option("--rate", interp.rate_hz,
                         "Input sample rate in Hz when the file has none (.npy, raw)")
      ->check(Positive())
      ->capture_default_str();
  interp_cmd->add_option("--png", interp.png,
                         "Also plot the first channel, input and output time-aligned, to a PNG");
  interp_cmd->add_option("--plot-samples", interp.plot_samples,
                         "Input samples shown in the plot (from the start)")
      ->check(CLI::Range(int64_t{2}, int64_t{10000000}))
      ->capture_default_str();
  interp_cmd->add_option("--plot-width", interp.plot_width, "Plot width in pixels")
      ->check(CLI::Range(64, 8192))
      ->capture_default_str();
  interp_cmd->add_option("--plot-height", interp.plot_height, "Plot height in pixels")
      ->check(CLI::Range(64, 8192))
      ->capture_default_str();
  interp_cmd->add_option("--axis", interp.axis,
                         "Axis of the input array to filter, negative from the end (SciPy's "
                         "axis; any rank from a .npy file); the other axes are channels")
      ->capture_default_str();
  interp_cmd->add_flag("--json", interp.json, "Print the summary as JSON");
  interp_cmd->footer(kExitCodeHelp);

  // fresnel bench
  BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "Load generator: concurrent requests, throughput and latency percentiles");
  bench_cmd->add_option("--op", bench.op, "Which RPC to exercise")
      ->check(CLI::IsMember({"upfirdn", "resample_poly", "stream", "fuse", "mix", "hologram",
                             "unwrap", "volume"}))
      ->capture_default_str();
  bench_cmd->add_option("--server-pid", bench.server_pid,
                        "mix: the server's pid on this host, to report its resident memory");
  bench_cmd->add_option("--concurrency,-c", bench.concurrency, "Requests in flight at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  CLI::Option* duration_opt =
      bench_cmd->add_option("--duration,-d", bench.duration_s, "Measure for this many seconds")
          ->check(Positive())
          ->capture_default_str();
  CLI::Option* count_opt =
      bench_cmd->add_option("--count,-n", bench.count, "Measure this many requests instead")
          ->check(Positive());
  duration_opt->excludes(count_opt);
  bench_cmd->add_option("--warmup", bench.warmup,
                        "Unmeasured warm-up requests first (default: one per worker)")
      ->check(AtLeast(0));
  bench_cmd->add_option("--samples", bench.samples, "Samples per channel in each request")
      ->check(AtLeast(1))
      ->capture_default_str();
  bench_cmd->add_option("--channels", bench.channels, "Channels in each request")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  bench_cmd->add_option("--up", bench.up, "Upsampling factor L")
      ->check(AtLeast(1))
      ->capture_default_str();
  bench_cmd->add_option("--down", bench.down, "Downsampling factor M")
      ->check(AtLeast(1))
      ->capture_default_str();
  bench_cmd->add_option("--taps", bench.taps,
                        "Filter length (default: the service's design, 20*max(L,M)+1)")
      ->check(AtLeast(1));
  bench_cmd->add_option("--dtype", bench.dtype, "Sample type")
      ->check(CLI::IsMember({"float32", "float64", "complex64"}))
      ->capture_default_str();
  bench_cmd->add_option("--device", bench.device, "Where the server may run the requests")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  bench_cmd->add_option("--chunk", bench.chunk,
                        "--op stream: samples per chunk (default: samples / 8)")
      ->check(AtLeast(1));
  bench_cmd->add_flag("--json", bench.json, "Print the results as JSON");
  // --op fuse (fuse_cmd.cc): --concurrency sessions, each at --fps for --duration.
  bench_cmd->add_option("--fps", bench.fps, "--op fuse: frames per second each session sends")
      ->check(Positive())
      ->capture_default_str();
  bench_cmd->add_option("--frame-size", bench.frame_size, "--op fuse: WxH depth frames")
      ->capture_default_str();
  bench_cmd->add_option("--budget-mib", bench.budget_mib,
                        "--op fuse: brick budget per session in MiB (default 512)")
      ->check(AtLeast(1));
  bench_cmd->add_option("--connections", bench.connections,
                        "TCP connections the workers share round robin (default: one for "
                        "upfirdn, resample_poly and stream; one each for fuse, hologram, unwrap "
                        "and volume)")
      ->check(AtLeast(1));
  // --op hologram | unwrap | volume (bench_device.cc): one device-heavy request per call.
  bench_cmd->add_option("--image-size", bench.image_size,
                        "hologram, unwrap, volume: WxH (default 2048x2048, 4096x4096, 1024x1024)");
  bench_cmd->add_option("--points", bench.points, "--op hologram: points in the cloud")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  bench_cmd->add_option("--algorithm", bench.algorithm, "--op hologram: the algorithm asked for")
      ->check(CLI::IsMember({"auto", "reference", "triangular", "piecewise", "tensor"}))
      ->capture_default_str();
  bench_cmd->add_option("--method", bench.method, "--op unwrap: goldstein or lsq")
      ->check(CLI::IsMember({"goldstein", "lsq"}))
      ->capture_default_str();
  bench_cmd->add_option("--mesh", bench.mesh,
                        "--op volume: the mesh, as `fresnel render --generate` (box:N, hole:N, "
                        "tets:COUNT)")
      ->capture_default_str();
  bench_cmd->add_option("--meshes", bench.meshes,
                        "--op volume: distinct meshes uploaded (each placed on a device); worker "
                        "w renders mesh w % MESHES (default: one per worker)")
      ->check(CLI::Range(1, 1024));
  bench_cmd->add_flag("--shm", bench.shm,
                      "hologram, unwrap, volume: same host as fresneld; each worker's arrays "
                      "through a shared-memory region of its own (the devices measured, not gRPC)");
  bench_cmd->add_option("--phase", bench.phase,
                        "--op fuse: when in the frame period each session sends: random "
                        "(independent cameras) or even (taking turns), once all sessions are open; "
                        "open: each from its own open on, while the others still open")
      ->check(CLI::IsMember({"open", "even", "random"}))
      ->capture_default_str();
  bench_cmd->add_option("--variant", bench.variant,
                        "--op fuse: OFF[+ON], the sessions' cuda_disable / cuda_enable bits "
                        "(A/B runs of the CUDA kernels; fusion.proto)");
  bench_cmd->footer(kExitCodeHelp);

  // fresnel fuse (fuse_cmd.cc)
  FuseOptions fuse;
  CLI::App* fuse_cmd = AddFuseCommand(&app, &fuse);

  // fresnel hologram (hologram_cmd.cc)
  HologramCmdOptions hologram;
  CLI::App* hologram_cmd = AddHologramCommand(&app, &hologram);

  // fresnel render (render_cmd.cc)
  RenderCmdOptions render;
  CLI::App* render_cmd = AddRenderCommand(&app, &render);

  // fresnel unwrap
  UnwrapOptions unwrap;
  CLI::App* unwrap_cmd = app.add_subcommand(
      "unwrap", "Unwrap a wrapped phase image on the server (Goldstein branch cuts or least "
                "squares), as a job with a progress bar or as one call (--sync)");
  unwrap_cmd->add_option("input", unwrap.input,
                         "Wrapped phase [rows, cols] in radians: .npy or single-channel "
                         ".tif/.tiff, float32 or float64")
      ->required();
  unwrap_cmd->add_option("--out,-o", unwrap.output, "Unwrapped phase (.npy, the input's dtype)")
      ->required();
  unwrap_cmd->add_option("--method", unwrap.method,
                         "goldstein = branch cuts (exact multiples of 2 pi, maps), lsq = "
                         "unweighted least squares (smooth, for noisy data), wlsq = weighted "
                         "least squares (--quality in [0, 1] as weights)")
      ->check(CLI::IsMember({"goldstein", "lsq", "wlsq"}))
      ->capture_default_str();
  unwrap_cmd->add_option("--mask", unwrap.mask,
                         "Mask image (.npy/.tif): nonzero EXCLUDES the pixel (NaN phase is fine "
                         "there)");
  unwrap_cmd->add_option("--quality", unwrap.quality,
                         "Quality map (.npy/.tif), larger = more trustworthy: picks each "
                         "region's starting pixel (goldstein); the weights in [0, 1] (wlsq)");
  unwrap_cmd->add_option("--seed", unwrap.seed,
                         "ROW,COL: the pixel whose region keeps k = 0 (goldstein)");
  unwrap_cmd->add_option("--iterations", unwrap.iterations,
                         "Pairing iterations per search radius, 1..64 (goldstein; default 8)")
      ->check(CLI::Range(1, 64));
  unwrap_cmd->add_flag("--no-congruent", unwrap.no_congruent,
                       "lsq, wlsq: return the least-squares solution itself instead of the input plus "
                       "whole multiples of 2 pi");
  unwrap_cmd->add_flag("--save-maps", unwrap.save_maps,
                       "goldstein: also write OUT_residues.npy, OUT_cuts.npy, OUT_regions.npy "
                       "and OUT_unreached.npy");
  unwrap_cmd->add_option("--png", unwrap.png,
                         "Before/after preview: wrapped and unwrapped side by side (cuts red, "
                         "masked pixels blue)");
  unwrap_cmd->add_option("--png-max-side", unwrap.png_max_side,
                         "Longest side of each preview half in pixels (larger images are "
                         "reduced)")
      ->check(CLI::Range(16, 8192))
      ->capture_default_str();
  unwrap_cmd->add_option("--device", unwrap.device, "Where the server may run the job")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  unwrap_cmd->add_flag("--sync", unwrap.sync,
                       "One Unwrap call instead of a job (small images: request and result "
                       "must each fit in one message; no progress)");
  unwrap_cmd->add_flag("--shm", unwrap.shm,
                       "Pass the phase, mask, quality and the results through a POSIX "
                       "shared-memory region instead of gRPC messages (the server must run on "
                       "this host as this user); no message cap applies");
  unwrap_cmd->add_option("--idempotency-key", unwrap.idempotency_key,
                         "Submitting again with the same key returns the same job");
  unwrap_cmd->add_flag("--json", unwrap.json, "Print the summary as JSON (and no progress)");
  unwrap_cmd->footer(kExitCodeHelp);

  // fresnel jobs list|get|cancel
  JobsOptions jobs;
  CLI::App* jobs_cmd =
      app.add_subcommand("jobs", "Asynchronous jobs on the server: list, get (state and result), "
                                 "cancel");
  jobs_cmd->require_subcommand(1);
  jobs_cmd->fallthrough();
  CLI::App* jobs_list = jobs_cmd->add_subcommand("list", "Jobs the server holds, newest first");
  jobs_list->add_option("--limit", jobs.limit, "Show at most this many jobs")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  jobs_list->add_flag("--json", jobs.json, "Print JSON");
  CLI::App* jobs_get = jobs_cmd->add_subcommand(
      "get", "A job's state; with --out also its result (the job must be done)");
  jobs_get->add_option("id", jobs.job_id, "Job id (from fresnel unwrap or jobs list)")
      ->required();
  jobs_get->add_flag("--wait", jobs.wait, "Watch the job with a progress bar until it finishes");
  jobs_get->add_option("--out,-o", jobs.output, "Write the unwrapped phase here (.npy)");
  jobs_get->add_flag("--save-maps", jobs.save_maps,
                     "Also write the Goldstein maps next to --out (when the job returned them)");
  jobs_get->add_flag("--json", jobs.json, "Print JSON");
  CLI::App* jobs_cancel = jobs_cmd->add_subcommand(
      "cancel", "Cancel a job (queued: at once; running: at its next progress report)");
  jobs_cancel->add_option("id", jobs.job_id, "Job id")->required();
  jobs_cancel->add_flag("--json", jobs.json, "Print JSON");
  for (CLI::App* sub : {jobs_cmd, jobs_list, jobs_get, jobs_cancel}) {
    sub->fallthrough();
    sub->footer(kExitCodeHelp);
  }

  // CLI11 reports a mistyped command only as "A subcommand is required"; name it instead.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--server" || arg == "--timeout" || arg == "--tls-ca" || arg == "--tls-cert" ||
        arg == "--tls-key" || arg == "--tls-server-name" || arg == "--token-file") {
      ++i;  // skip the value
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    if (arg != "info" && arg != "health" && arg != "interp" && arg != "bench" && arg != "unwrap" &&
        arg != "jobs" && arg != "hologram" && arg != "fuse" && arg != "render") {
      return ReportUsageError(
          err,
          absl::StrCat("unknown command '", arg,
                       "' (commands: info, health, interp, unwrap, jobs, hologram, fuse, render, "
                       "bench)"),
          "");
    }
    if (arg == "jobs" && i + 1 < argc && argv[i + 1][0] != '-') {
      const std::string action = argv[i + 1];
      if (action != "list" && action != "get" && action != "cancel") {
        return ReportUsageError(
            err, absl::StrCat("unknown jobs action '", action, "' (list, get, cancel)"), "jobs");
      }
    }
    break;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e, out, err);  // --help or --version
      return kExitOk;
    }
    std::string command;
    for (const CLI::App* sub : app.get_subcommands()) {
      command = sub->get_name();
      for (const CLI::App* subsub : sub->get_subcommands()) {
        command += " " + subsub->get_name();
      }
    }
    return ReportUsageError(err, e.what(), command);
  }

  try {
    if (info_cmd->parsed()) return RunInfo(global, info, out, err);
    if (health_cmd->parsed()) return RunHealth(global, health, out, err);
    if (interp_cmd->parsed()) return RunInterp(global, interp, out, err);
    if (bench_cmd->parsed()) return RunBench(global, bench, out, err);
    if (hologram_cmd->parsed()) return RunHologram(global, hologram, out, err);
    if (fuse_cmd->parsed()) return RunFuse(global, fuse, out, err);
    if (render_cmd->parsed()) return RunRender(global, render, out, err);
    if (unwrap_cmd->parsed()) return RunUnwrap(global, unwrap, out, err);
    if (jobs_cmd->parsed()) {
      jobs.action = jobs_list->parsed() ? "list" : jobs_get->parsed() ? "get" : "cancel";
      return RunJobs(global, jobs, out, err);
    }
  } catch (const std::exception& e) {
    return ReportError(err, kExitInternal, absl::InternalError(e.what()));
  }
  return ReportUsageError(err, "no command given", "");
}

}  // namespace fresnel::cli
