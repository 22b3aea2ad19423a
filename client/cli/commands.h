// The `fresnel` CLI's commands, separate from argument parsing (cli.cc) so that tests can call
// the validation and the commands directly. Every Run* function prints its result to `out`,
// errors to `err`, and returns the process exit code.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "format.h"
#include "fresnel/client/client.h"

namespace fresnel::cli {

// Process exit codes, documented in `fresnel --help` and docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,  // a bug or an unexpected condition in the CLI itself
  kExitUsage = 2,     // bad command line: unknown option, invalid value, conflicting flags
  kExitRpc = 3,       // the server could not be reached or answered with an error
  kExitIo = 4,        // an input file is missing or malformed, or an output cannot be written
};

inline constexpr char kExitCodeHelp[] =
    "Exit codes: 0 success, 1 internal error, 2 usage error, 3 RPC error (server unreachable or "
    "request failed), 4 file error (missing, malformed or unwritable file).";

// Prints "fresnel: error: <CODE>: <message>" (CODE as gRPC names it, e.g. UNAVAILABLE) and
// returns `exit_code`. For UNAVAILABLE it adds which server was tried.
int ReportError(std::ostream& err, int exit_code, const absl::Status& status,
                const std::string& server = "");
// Prints "fresnel: error: usage: <message>" plus a pointer to --help; returns kExitUsage.
int ReportUsageError(std::ostream& err, const std::string& message, const std::string& command);

struct GlobalOptions {
  std::string server = "localhost:50051";
  double timeout_s = 60;  // per call (a whole stream counts as one call); 0 = none
  // Security (docs/security.md): TLS files (PEM), the name the server's certificate must carry,
  // and the bearer token: the first line of token_file, else $FRESNEL_TOKEN (never a flag: a
  // command line is visible to every user of the machine).
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string token_file;
};

// own_connection: ClientOptions::own_connection (a TCP connection not shared with other clients).
absl::StatusOr<std::unique_ptr<Client>> ConnectClient(const GlobalOptions& global,
                                                      bool own_connection = false);

// Appends where and how long a call ran, in this order: device, queue_wait_seconds, h2d_seconds,
// compute_seconds, d2h_seconds, server_seconds (the server's total) and round_trip_seconds.
void AddExecutionJson(const v1::ExecutionInfo& exec, double round_trip_s, JsonObject* json);

// --device any|gpu|cpu as the request's DeviceKind (anything else: any).
v1::DeviceKind DeviceKindFromFlag(const std::string& name);

struct InfoOptions {
  bool stats = false;
  bool json = false;
};

struct HealthOptions {
  std::string service;  // "" = the whole server
};

// `fresnel health`: grpc.health.v1 Check. Prints the status; exit 0 only for SERVING, 3 for
// anything else (NOT_SERVING while draining, SERVICE_UNKNOWN, unreachable). For container
// HEALTHCHECKs and scripts.
int RunHealth(const GlobalOptions& global, const HealthOptions& options, std::ostream& out,
              std::ostream& err);

struct InterpOptions {
  std::string input;
  std::string output;
  int up = 0;
  int down = 1;
  std::string mode = "resample";  // resample | upfirdn | fft | decimate
  std::string taps_file;          // 1-D .npy
  std::string taps_design;        // "numtaps,cutoff" (upfirdn)
  std::string window;             // "" = the service default (fft: the spectral window, none)
  bool freq_domain = false;       // fft: the input is the spectrum (SciPy's domain='freq')
  double beta = 0;                // Kaiser beta; 0 = default (5)
  double gain = 0;                // design gain; 0 = up
  std::string padtype = "constant";
  double cval = 0;
  std::string device = "any";  // any | gpu | cpu
  int64_t chunk = 0;           // > 0: ResampleStream with this many samples per chunk
  bool shm = false;            // x and y through a shared-memory region (same host only)
  bool scipy_dtypes = false;   // the result dtype SciPy gives (DTYPE_SCIPY), not x's precision
  int raw_channels = 1;
  double rate_hz = 48000;  // input sample rate when the file has none (.npy, raw)
  std::string png;
  int64_t plot_samples = 1000;
  int plot_width = 1200;
  int plot_height = 500;
  bool json = false;
  // The axis filtered (SciPy's `axis`), negative from the end; the server moves it. Any rank
  // >= 1 is read from .npy files; streams (--chunk) take the last axis of [n] or [channels, n].
  int axis = -1;

  // Filled in by ValidateInterpOptions from window: the name and get_window's parameters.
  std::string window_name;
  std::vector<double> window_params;
  // Filled in by ValidateInterpOptions from taps_design.
  int design_numtaps = 0;
  double design_cutoff = 0;
};

// Checks everything that can be checked without reading files or calling the server, and fills
// the parsed fields. InvalidArgument names the offending flag.
absl::Status ValidateInterpOptions(InterpOptions* options);

struct BenchOptions {
  // upfirdn | resample_poly | stream | fuse | mix | hologram | unwrap | volume
  std::string op = "resample_poly";
  int concurrency = 1;
  double duration_s = 5;
  int64_t count = 0;  // > 0: stop after this many requests instead of after duration_s
  int warmup = -1;    // warm-up requests (not measured); -1 = one per concurrent worker
  int64_t samples = 65536;  // per channel
  int channels = 1;
  int up = 3;
  int down = 2;
  int taps = 0;  // filter length; 0 = the service default design
  std::string dtype = "float32";
  std::string device = "any";
  int64_t chunk = 0;  // stream op: samples per chunk; 0 = samples / 8
  bool json = false;
  // fuse op (fuse_cmd.cc): concurrency = sessions.
  double fps = 90;
  std::string frame_size = "848x480";
  int64_t budget_mib = 0;
  // TCP connections the workers (fuse: sessions) share round robin; 0 = one shared by every
  // worker for upfirdn / resample_poly / stream, one each for fuse, hologram, unwrap and volume.
  int connections = 0;
  std::string phase = "random";  // fuse op: FuseBenchOptions::phase
  std::string variant;         // fuse op: FuseBenchOptions::variant
  // mix op (bench_mix.cc): the server's pid on this host, for its resident memory (0 = not read).
  int server_pid = 0;
  // hologram, unwrap and volume ops (bench_device.cc): one device-heavy request per call.
  std::string image_size;         // WxH; "" = 2048x2048 (hologram), 4096x4096 (unwrap), 1024x1024
  int64_t points = 100000;        // hologram: points in the cloud
  std::string algorithm = "auto";  // hologram: auto | reference | triangular | piecewise | tensor
  std::string method = "goldstein";  // unwrap: goldstein | lsq
  std::string mesh = "box:64";    // volume: render's --generate (box:N, hole:N, tets:COUNT)
  int meshes = 0;                 // volume: distinct meshes the workers render; 0 = one each
  bool shm = false;               // hologram, unwrap, volume: arrays through a region per worker
};

// `bench --op hologram|unwrap|volume` (bench_device.cc).
int RunDeviceBench(const GlobalOptions& global, const BenchOptions& options, std::ostream& out,
                   std::ostream& err);
bool IsDeviceBenchOp(const std::string& op);
absl::Status ValidateDeviceBenchOptions(const BenchOptions& options);

absl::Status ValidateBenchOptions(const BenchOptions& options);

struct UnwrapOptions {
  std::string input;               // .npy / .tif / .tiff, [rows, cols] float32 or float64
  std::string output;              // .npy
  std::string method = "goldstein";  // goldstein | lsq
  std::string mask;                // optional, nonzero = excluded
  std::string quality;             // optional (goldstein)
  std::string seed;                // "ROW,COL" (goldstein)
  int iterations = 0;              // iterations per radius (goldstein); 0 = the server's default
  bool no_congruent = false;       // lsq: the least-squares solution itself
  bool save_maps = false;          // goldstein: also write OUT_residues.npy, _cuts, _regions...
  std::string png;                 // before/after preview
  int png_max_side = 1024;
  std::string device = "any";
  bool sync = false;               // the Unwrap RPC instead of a job
  bool shm = false;                // arrays both ways through a POSIX shared-memory region
  std::string idempotency_key;
  bool json = false;

  // Filled in by ValidateUnwrapOptions.
  int64_t seed_row = -1, seed_col = -1;
};

// Checks the flags and fills the parsed fields; InvalidArgument names the offending flag.
absl::Status ValidateUnwrapOptions(UnwrapOptions* options);

struct JobsOptions {
  std::string action;  // list | get | cancel
  std::string job_id;
  int limit = 100;     // list: at most this many jobs (newest first)
  bool wait = false;   // get: watch until the job is finished
  std::string output;  // get: write the unwrapped phase here (.npy)
  bool save_maps = false;
  bool json = false;
};

absl::Status ValidateJobsOptions(const JobsOptions& options);

int RunInfo(const GlobalOptions& global, const InfoOptions& options, std::ostream& out,
            std::ostream& err);
int RunInterp(const GlobalOptions& global, InterpOptions options, std::ostream& out,
              std::ostream& err);
// `bench --op mix` (bench_mix.cc).
int RunMixBench(const GlobalOptions& global, const BenchOptions& options, std::ostream& out,
                std::ostream& err);
int RunBench(const GlobalOptions& global, const BenchOptions& options, std::ostream& out,
             std::ostream& err);
int RunUnwrap(const GlobalOptions& global, UnwrapOptions options, std::ostream& out,
              std::ostream& err);
int RunJobs(const GlobalOptions& global, const JobsOptions& options, std::ostream& out,
            std::ostream& err);

// Parses the command line and runs the command: the whole of `main`.
int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace fresnel::cli
