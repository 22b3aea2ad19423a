// `fresnel info` and `fresnel interp`, plus the error reporting shared by every command.
#include "commands.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <optional>

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "format.h"
#include "fresnel/client/shm.h"
#include "fresnel/core/status.h"
#include "fresnel/interp/interp.h"
#include "fresnel/io/npy.h"
#include "fresnel/v1/array_convert.h"
#include "plot.h"
#include "fresnel/io/signal.h"

namespace fresnel::cli {

int ReportError(std::ostream& err, int exit_code, const absl::Status& status,
                const std::string& server) {
  err << "fresnel: error: " << absl::StatusCodeToString(status.code()) << ": " << status.message();
  if (status.code() == absl::StatusCode::kUnavailable && !server.empty()) {
    err << " (is fresneld running at " << server << "? set --server or FRESNEL_SERVER)";
  }
  err << "\n";
  return exit_code;
}

int ReportUsageError(std::ostream& err, const std::string& message, const std::string& command) {
  err << "fresnel: error: usage: " << message << "\n"
      << "Run 'fresnel " << (command.empty() ? "" : command + " ") << "--help' for the options.\n";
  return kExitUsage;
}

void AddExecutionJson(const v1::ExecutionInfo& exec, double round_trip_s, JsonObject* json) {
  json->Add("device", exec.device())
      .Add("queue_wait_seconds", exec.queue_wait_seconds())
      .Add("h2d_seconds", exec.h2d_seconds())
      .Add("compute_seconds", exec.compute_seconds())
      .Add("d2h_seconds", exec.d2h_seconds())
      .Add("server_seconds", exec.total_seconds())
      .Add("round_trip_seconds", round_trip_s);
}

v1::DeviceKind DeviceKindFromFlag(const std::string& name) {
  if (name == "gpu") return v1::DEVICE_KIND_GPU;
  if (name == "cpu") return v1::DEVICE_KIND_CPU;
  return v1::DEVICE_KIND_ANY;
}

absl::StatusOr<std::unique_ptr<Client>> ConnectClient(const GlobalOptions& global,
                                                      bool own_connection) {
  ClientOptions options;
  options.address = global.server;
  options.own_connection = own_connection;
  // The server enforces its own cap (ServerInfo.limits); the CLI accepts anything gRPC can carry.
  options.max_message_bytes = INT_MAX;
  options.default_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(global.timeout_s * 1e3)));
  options.tls = global.tls;
  options.tls_ca_file = global.tls_ca;
  options.tls_cert_file = global.tls_cert;
  options.tls_key_file = global.tls_key;
  options.tls_server_name = global.tls_server_name;
  if (const char* token = std::getenv("FRESNEL_TOKEN")) options.token = token;
  if (!global.token_file.empty()) {
    std::ifstream in(global.token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: cannot read a token from '", global.token_file, "'"));
    }
    options.token = std::string(absl::StripAsciiWhitespace(line));
  }
  return Client::Connect(options);
}

namespace {

std::string HealthName(const absl::StatusOr<ServingStatus>& health) {
  if (!health.ok()) {
    return absl::StrCat("unknown (", absl::StatusCodeToString(health.status().code()), ")");
  }
  switch (*health) {
    case ServingStatus::kServing: return "SERVING";
    case ServingStatus::kNotServing: return "NOT_SERVING";
    case ServingStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown: break;
  }
  return "UNKNOWN";
}

std::string ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "null";
  return json;
}

// ServerInfo.limits grouped by workload. A server older than the groups sends only the flat
// (deprecated) fields and ServerInfo.fusion: the groups are filled from those.
v1::Limits GroupedLimits(const v1::ServerInfo& info) {
  v1::Limits l = info.limits();
  if (!l.has_server()) {
    l.mutable_server()->set_max_message_bytes(l.max_message_bytes());
    l.mutable_server()->set_queue_capacity(l.queue_capacity());
    l.mutable_server()->set_max_streams(l.max_streams());
    l.mutable_server()->set_stream_state_bytes(l.stream_state_bytes());
  }
  if (!l.has_interpolation()) {
    l.mutable_interpolation()->set_max_rate(l.max_rate());
    l.mutable_interpolation()->set_max_taps(l.max_taps());
    l.mutable_interpolation()->set_max_output_samples(l.max_output_samples());
  }
  if (!l.has_unwrap() && l.unwrap_max_side() > 0) {
    l.mutable_unwrap()->set_max_side(l.unwrap_max_side());
    l.mutable_unwrap()->set_max_pixels(l.unwrap_max_pixels());
  }
  if (!l.has_jobs() && l.max_jobs() > 0) {
    l.mutable_jobs()->set_max_jobs(l.max_jobs());
    l.mutable_jobs()->set_ttl_seconds(l.job_ttl_seconds());
    l.mutable_jobs()->set_memory_bytes(l.job_memory_bytes());
  }
  if (!l.has_hologram() && l.hologram_max_pixels() > 0) {
    l.mutable_hologram()->set_max_width(l.hologram_max_width());
    l.mutable_hologram()->set_max_height(l.hologram_max_height());
    l.mutable_hologram()->set_max_pixels(l.hologram_max_pixels());
    l.mutable_hologram()->set_max_points(l.hologram_max_points());
  }
  if (!l.has_volume() && l.volume_max_tets() > 0) {
    l.mutable_volume()->set_max_points(l.volume_max_points());
    l.mutable_volume()->set_max_tets(l.volume_max_tets());
    l.mutable_volume()->set_max_image_side(l.volume_max_image_side());
  }
  if (!l.has_fusion() && info.has_fusion()) *l.mutable_fusion() = info.fusion();
  return l;
}

std::string Seconds(double s) { return absl::StrFormat("%g s", s); }

// One row per group that the server reports; `transport` when it reports the server-wide group
// itself (shared memory and the GPU memory cap are not among the flat fields).
void PrintLimits(const v1::Limits& l, bool transport, Table& head) {
  const v1::ServerLimits& s = l.server();
  std::string server = absl::StrCat("message ", FormatBytes(s.max_message_bytes()), ", queue ",
                                    s.queue_capacity(), " per device");
  if (s.max_streams() > 0) {
    absl::StrAppend(&server, ", <= ", s.max_streams(), " open streams",
                    transport ? absl::StrCat(" (", s.max_streams_per_client(), " per client)")
                              : std::string(),
                    ", ",
                    FormatBytes(s.stream_state_bytes()), " of derived and uploaded state");
  }
  head.AddRow({"limits", server});
  const v1::InterpolationLimits& i = l.interpolation();
  head.AddRow({"interpolation", absl::StrCat("up/down <= ", i.max_rate(), ", taps <= ",
                                             i.max_taps(), ", output <= ",
                                             i.max_output_samples(), " samples")});
  if (l.has_unwrap()) {
    head.AddRow({"unwrap", absl::StrCat("images <= ", l.unwrap().max_side(), " px a side and ",
                                        l.unwrap().max_pixels(), " px")});
  }
  if (l.has_jobs()) {
    head.AddRow({"jobs", absl::StrCat("<= ", l.jobs().max_jobs(), " unfinished, results kept ",
                                      Seconds(l.jobs().ttl_seconds()), " within ",
                                      FormatBytes(l.jobs().memory_bytes()))});
  }
  if (l.has_hologram()) {
    const v1::HologramLimits& h = l.hologram();
    head.AddRow({"hologram", absl::StrCat("<= ", h.max_width(), " x ", h.max_height(), " px and ",
                                          h.max_pixels(), " px, <= ", h.max_points(),
                                          " points")});
  }
  if (l.has_fusion()) {
    const v1::FusionLimits& f = l.fusion();
    head.AddRow({"fusion", absl::StrCat("sessions <= ", f.max_sessions_per_device(),
                                        " per device and ", f.max_sessions_per_client(),
                                        " per client, idle TTL ", Seconds(f.session_ttl_seconds()),
                                        ", ", f.max_pending(), " messages in flight per stream")});
  }
  if (l.has_volume()) {
    const v1::VolumeLimits& v = l.volume();
    head.AddRow({"volume", absl::StrCat("meshes <= ", v.max_points(), " points and ",
                                        v.max_tets(), " tets, images <= ", v.max_image_side(),
                                        " px a side")});
  }
  if (l.has_sessions()) {
    const v1::SessionLimits& se = l.sessions();
    head.AddRow({"sessions",
                 absl::StrCat("per GPU ",
                              se.gpu_cap_bytes() > 0 ? FormatBytes(se.gpu_cap_bytes())
                                                     : std::string("90 % of its memory"),
                              ", host ", FormatBytes(se.cpu_cap_bytes()), ", idle TTL ",
                              Seconds(se.ttl_seconds()))});
  }
  if (transport) {
    head.AddRow({"shm", s.shm_bytes() > 0
                            ? absl::StrCat(FormatBytes(s.shm_bytes()), " mapped at most, idle TTL ",
                                           Seconds(s.shm_ttl_seconds()), ", staging cache ",
                                           FormatBytes(s.staging_cache_bytes()),
                                           s.pin_regions() ? ", regions pinned (GPU servers)" : "")
                            : std::string("off")});
    head.AddRow({"overlap", s.overlap_chunk_bytes() > 0
                                ? absl::StrCat("direct-path copies and compute overlapped in ",
                                               FormatBytes(s.overlap_chunk_bytes()),
                                               " chunks of y (GPU servers)")
                                : std::string("off: one H2D, kernel, D2H")});
  }
  if (transport) {
    head.AddRow({"gpu memory",
                 absl::StrCat(s.gpu_memory_bytes() > 0
                                  ? absl::StrCat(FormatBytes(s.gpu_memory_bytes()), " per GPU")
                                  : std::string("the whole device"),
                              s.gpu_partitions() > 1
                                  ? absl::StrCat(", ", s.gpu_partitions(), " pool devices per GPU")
                                  : std::string(),

                              s.fault_injection() ? "; FAULT INJECTION ON (--fault-injection)"
                                                  : "")});
    if (s.cpu_partitions() > 1) {
      head.AddRow({"cpu devices", absl::StrCat("the CPU as ", s.cpu_partitions(),
                                               " pool devices, workers and host session memory "
                                               "split between them (--cpu-partitions)")});
    }
    head.AddRow({"placement", s.small_job_bytes() > 0
                                  ? absl::StrCat("kind ANY up to ", FormatBytes(s.small_job_bytes()),
                                                 " of device memory runs on the CPU while it has "
                                                 "room (--small-job-bytes)")
                                  : std::string("kind ANY goes to a GPU when there is one")});
  }
}

void PrintServerInfo(const std::string& server, const std::string& health,
                     const v1::ServerInfo& info, std::ostream& out) {
  Table head;
  head.AddRow({"server", absl::StrCat(server, " (", health, ")")});
  if (!info.instance().empty()) head.AddRow({"instance", info.instance()});
  head.AddRow({"version", absl::StrCat(info.version().empty() ? "?" : info.version(),
                                       info.cuda_compiled() ? ", CUDA compiled" : ", no CUDA")});
  head.AddRow({"services", info.services().empty()
                               ? std::string("-")
                               : absl::StrJoin(info.services(), ", ")});
  head.AddRow({"cpu workers", absl::StrCat(info.cpu_workers())});
  PrintLimits(GroupedLimits(info), info.limits().has_server(), head);
  head.Print(out);
  out << "\n";
  Table devices;
  devices.AddRow({"DEVICE", "KIND", "NAME", "MEMORY", "STREAMS", "CC", "SMS/THREADS"});
  for (const v1::DeviceInfo& d : info.devices()) {
    const bool gpu = d.kind() == "cuda";
    devices.AddRow({d.id(), d.kind(), d.name().empty() ? "-" : d.name(),
                    d.total_memory_bytes() > 0 ? FormatBytes(d.total_memory_bytes()) : "-",
                    absl::StrCat(d.streams()),
                    gpu ? absl::StrCat(d.compute_capability_major(), ".",
                                       d.compute_capability_minor())
                        : "-",
                    d.multiprocessors() > 0 ? absl::StrCat(d.multiprocessors()) : "-"});
  }
  if (info.devices().empty()) devices.AddRow({"(none)"});
  devices.Print(out);
}

void PrintServerStats(const v1::ServerStats& stats, std::ostream& out) {
  out << "\n";
  Table head;
  head.AddRow({"uptime", FormatUptime(stats.uptime_seconds())});
  head.AddRow({"serving", stats.serving() ? "yes" : "no"});
  head.AddRow({"requests", absl::StrCat(stats.requests_total(), " total, ",
                                        stats.requests_failed(), " failed, ",
                                        stats.in_flight(), " in flight")});
  head.Print(out);
  out << "\n";
  Table devices;
  devices.AddRow({"DEVICE", "QUEUED", "RUNNING", "COMPLETED", "FAILED", "REJECTED", "MEM IN USE",
                  "BUSY", "UTIL"});
  for (const v1::DeviceStats& d : stats.devices()) {
    const double util =
        stats.uptime_seconds() > 0 ? 100.0 * d.busy_seconds() / stats.uptime_seconds() : 0;
    devices.AddRow({d.id(), absl::StrCat(d.queued()), absl::StrCat(d.running()),
                    absl::StrCat(d.completed()), absl::StrCat(d.failed()),
                    absl::StrCat(d.rejected()), FormatBytes(d.memory_in_use_bytes()),
                    FormatSeconds(d.busy_seconds()), absl::StrFormat("%.1f %%", util)});
  }
  if (stats.devices().empty()) devices.AddRow({"(none)"});
  devices.Print(out);
}

}  // namespace

int RunInfo(const GlobalOptions& global, const InfoOptions& options, std::ostream& out,
            std::ostream& err) {
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
  absl::StatusOr<v1::ServerInfo> info = (*client)->GetServerInfo();
  if (!info.ok()) return ReportError(err, kExitRpc, info.status(), global.server);
  const std::string health = HealthName((*client)->CheckHealth(""));
  std::optional<v1::ServerStats> stats;
  if (options.stats) {
    absl::StatusOr<v1::ServerStats> s = (*client)->GetStats();
    if (!s.ok()) return ReportError(err, kExitRpc, s.status(), global.server);
    stats = *std::move(s);
  }
  if (options.json) {
    JsonObject json;
    json.Add("server", global.server).Add("health", health).AddRaw("info", ProtoJson(*info));
    if (stats) json.AddRaw("stats", ProtoJson(*stats));
    out << json.Str() << "\n";
    return kExitOk;
  }
  PrintServerInfo(global.server, health, *info, out);
  if (stats) PrintServerStats(*stats, out);
  return kExitOk;
}

int RunHealth(const GlobalOptions& global, const HealthOptions& options, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
  absl::StatusOr<ServingStatus> health = (*client)->CheckHealth(options.service);
  if (!health.ok()) return ReportError(err, kExitRpc, health.status(), global.server);
  const std::string name = HealthName(health);
  const std::string what = options.service.empty() ? "server" : options.service;
  if (*health != ServingStatus::kServing) {
    // The server answered: no "is fresneld running" hint.
    return ReportError(err, kExitRpc, absl::UnavailableError(absl::StrCat(what, " is ", name)));
  }
  out << what << " " << name << "\n";
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// fresnel interp

namespace {

struct NamedPad {
  const char* name;
  v1::PadMode mode;
};
constexpr NamedPad kPadModes[] = {
    {"constant", v1::PAD_CONSTANT},  {"symmetric", v1::PAD_SYMMETRIC},
    {"reflect", v1::PAD_REFLECT},    {"edge", v1::PAD_EDGE},
    {"wrap", v1::PAD_WRAP},          {"smooth", v1::PAD_SMOOTH},
    {"antisymmetric", v1::PAD_ANTISYMMETRIC}, {"antireflect", v1::PAD_ANTIREFLECT},
    {"line", v1::PAD_LINE},          {"mean", v1::PAD_MEAN},
    {"median", v1::PAD_MEDIAN},      {"maximum", v1::PAD_MAXIMUM},
    {"minimum", v1::PAD_MINIMUM},
};

std::optional<v1::PadMode> PadModeFromName(const std::string& name) {
  for (const NamedPad& p : kPadModes) {
    if (name == p.name) return p.mode;
  }
  return std::nullopt;
}

v1::Window WindowFromName(const std::string& name) {
  if (name == "boxcar") return v1::BOXCAR;
  if (name == "hamming") return v1::HAMMING;
  if (name == "hann") return v1::HANN;
  if (name == "blackman") return v1::BLACKMAN;
  if (name == "kaiser") return v1::KAISER;
  return v1::WINDOW_UNSPECIFIED;
}

int64_t Gcd(int64_t a, int64_t b) { return b == 0 ? a : Gcd(b, a % b); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-channel output length of the request, as SciPy defines it.
int64_t OutputLength(const InterpOptions& o, int64_t n, int64_t numtaps) {
  if (n == 0) return 0;
  if (o.mode == "upfirdn") return ((n - 1) * o.up + numtaps - 1) / o.down + 1;
  const int64_t g = Gcd(o.up, o.down);
  return CeilDiv(n * (o.up / g), o.down / g);
}

// The filter length resample_poly designs for itself (and upfirdn uses by default).
int DefaultNumtaps(int up, int down) {
  return static_cast<int>(interp::ResamplePolyDefaultNumtaps(up, down));
}

constexpr int64_t kMessageOverheadBytes = 64 << 10;  // headers, taps, framing

}  // namespace

absl::Status ValidateInterpOptions(InterpOptions* o) {
  if (o->up < 1) return absl::InvalidArgumentError("--up must be >= 1");
  if (o->down < 1) return absl::InvalidArgumentError("--down must be >= 1");
  if (o->mode != "resample" && o->mode != "upfirdn" && o->mode != "fft" &&
      o->mode != "decimate") {
    return absl::InvalidArgumentError("--mode must be resample, upfirdn, fft or decimate");
  }
  if (o->freq_domain && o->mode != "fft") {
    return absl::InvalidArgumentError("--freq-domain applies to --mode fft only");
  }
  if (o->mode == "fft" || o->mode == "decimate") {
    // Neither takes a filter, an extension mode or a stream; fft takes a spectral window.
    const bool window = !o->window.empty() || o->beta != 0;
    if (!o->taps_file.empty() || !o->taps_design.empty() || o->gain != 0 ||
        (window && o->mode == "decimate")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mode ", o->mode, " designs no filter from flags (no --taps, --taps-design, --gain",
          o->mode == "decimate" ? ", --window, --beta" : "; --window is its spectral window",
          ")"));
    }
    if (o->padtype != "constant" || o->cval != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mode ", o->mode, " takes no --padtype or --cval"));
    }
    if (o->chunk != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--mode ", o->mode, " cannot --chunk"));
    }
    if (o->shm) {  // Resample and Decimate have no shared-memory form
      return absl::InvalidArgumentError(absl::StrCat("--mode ", o->mode, " cannot --shm"));
    }
    if (o->mode == "decimate" && (o->up != 1 || o->down < 2)) {
      return absl::InvalidArgumentError("--mode decimate needs --up 1 and --down q >= 2");
    }
  }
  const std::optional<v1::PadMode> pad = PadModeFromName(o->padtype);
  if (!pad) return absl::InvalidArgumentError(absl::StrCat("--padtype ", o->padtype, " is unknown"));
  if (o->mode == "upfirdn" && *pad >= v1::PAD_MEAN) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--padtype ", o->padtype, " exists for --mode resample only (upfirdn takes constant, "
        "symmetric, reflect, edge, wrap, smooth, antisymmetric, antireflect, line)"));
  }
  if (!o->taps_file.empty() && !o->taps_design.empty()) {
    return absl::InvalidArgumentError("--taps and --taps-design exclude each other");
  }
  if (!o->taps_design.empty()) {
    if (o->mode != "upfirdn") {
      return absl::InvalidArgumentError(
          "--taps-design needs --mode upfirdn (resample designs its filter from --window)");
    }
    std::vector<std::string> parts = absl::StrSplit(o->taps_design, ',');
    int numtaps = 0;
    double cutoff = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[0]), &numtaps) ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(parts[1]), &cutoff)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--taps-design '", o->taps_design, "' must be NUMTAPS,CUTOFF, e.g. 64,0.25"));
    }
    if (numtaps < 1) return absl::InvalidArgumentError("--taps-design NUMTAPS must be >= 1");
    if (!(cutoff > 0 && cutoff < 1)) {
      return absl::InvalidArgumentError(
          "--taps-design CUTOFF must lie in (0, 1) (relative to the Nyquist frequency)");
    }
    o->design_numtaps = numtaps;
    o->design_cutoff = cutoff;
  }
  if (!o->window.empty()) {
    std::vector<std::string> parts = absl::StrSplit(o->window, ',');
    o->window_name = std::string(absl::StripAsciiWhitespace(parts[0]));
    o->window_params.clear();
    for (size_t i = 1; i < parts.size(); ++i) {
      double v = 0;
      if (!absl::SimpleAtod(absl::StripAsciiWhitespace(parts[i]), &v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--window '", o->window, "': parameter '", parts[i], "' is not a number"));
      }
      o->window_params.push_back(v);
    }
    FRESNEL_RETURN_IF_ERROR(
        interp::WindowFromName(o->window_name, o->window_params, "--window").status());
  }
  if (o->beta < 0) return absl::InvalidArgumentError("--beta must be positive");
  if (o->beta != 0 && !o->taps_file.empty()) {
    return absl::InvalidArgumentError("--beta applies to designed filters, not to --taps");
  }
  if (o->beta != 0 && !o->window.empty() && (o->window_name != "kaiser" ||
                                               !o->window_params.empty())) {
    return absl::InvalidArgumentError("--beta applies to --window kaiser only");
  }
  if (o->beta != 0) o->window = o->window_name = "kaiser";
  if (o->gain != 0 && o->mode != "upfirdn") {
    return absl::InvalidArgumentError("--gain applies to designed upfirdn filters only");
  }
  if (o->gain != 0 && !o->taps_file.empty()) {
    return absl::InvalidArgumentError("--gain applies to designed filters, not to --taps");
  }
  if (!o->taps_file.empty() && !o->window.empty()) {
    return absl::InvalidArgumentError("--window designs a filter and cannot be used with --taps");
  }
  if (o->device != "any" && o->device != "gpu" && o->device != "cpu") {
    return absl::InvalidArgumentError("--device must be any, gpu or cpu");
  }
  if (o->chunk < 0) return absl::InvalidArgumentError("--chunk must be >= 1");
  if (o->chunk > 0 && o->shm) {
    return absl::InvalidArgumentError("--chunk and --shm exclude each other");
  }
  if (o->chunk > 0 && *pad != v1::PAD_CONSTANT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk streams the signal, which supports --padtype constant only (got ", o->padtype,
        ")"));
  }
  if (o->raw_channels < 1) return absl::InvalidArgumentError("--raw-channels must be >= 1");
  if (!(o->rate_hz > 0)) return absl::InvalidArgumentError("--rate must be > 0");
  if (o->input.empty() || o->output.empty()) {
    return absl::InvalidArgumentError("INPUT and OUTPUT files are required");
  }
  if (absl::Status s = CheckWritablePath(o->output); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  if (!o->png.empty() && (o->png.size() < 4 || o->png.substr(o->png.size() - 4) != ".png")) {
    return absl::InvalidArgumentError(absl::StrCat("--png '", o->png, "' must end in .png"));
  }
  if (o->plot_samples < 2) return absl::InvalidArgumentError("--plot-samples must be >= 2");
  if (o->plot_width < 64 || o->plot_width > 8192 || o->plot_height < 64 ||
      o->plot_height > 8192) {
    return absl::InvalidArgumentError("--plot-width/--plot-height must lie in 64..8192");
  }
  return absl::OkStatus();
}

namespace {

// Channel 0 along `axis` (normalised): a[0, ..., 0, :, 0, ..., 0] as doubles.
std::vector<double> FirstChannel(const HostArray& a, int axis) {
  int64_t stride = 1;
  for (int d = axis + 1; d < a.ndim(); ++d) stride *= a.dim(d);
  const std::vector<double> all = ToDoubles(a);
  std::vector<double> line(static_cast<size_t>(a.dim(axis)));
  for (size_t i = 0; i < line.size(); ++i) line[i] = all[i * static_cast<size_t>(stride)];
  return line;
}

// Draws channel 0 of x and y on one time axis. resample_poly's output is already aligned with
// its input; upfirdn's is delayed by the filter's (numtaps - 1) / 2 upsampled samples.
absl::Status PlotSignals(const InterpOptions& o, const HostArray& x, const HostArray& y,
                         int axis, double rate_in_hz, int64_t numtaps) {
  const std::vector<double> xv = FirstChannel(x, axis);
  const std::vector<double> yv = FirstChannel(y, axis);
  const int64_t n = static_cast<int64_t>(xv.size());
  const int64_t m = static_cast<int64_t>(yv.size());
  const int64_t shown_in = std::min(n, o.plot_samples);
  PlotTrace in_trace, out_trace;
  in_trace.color = kPlotBlue;
  in_trace.thickness_px = 2;
  in_trace.label = "input";
  out_trace.color = kPlotOrange;
  out_trace.label = "output";
  for (int64_t i = 0; i < shown_in; ++i) {
    in_trace.x.push_back(i / rate_in_hz);
    in_trace.y.push_back(xv[i]);
  }
  const double delay = o.mode == "upfirdn" ? (numtaps - 1) / 2.0 : 0.0;  // upsampled samples
  const double t_end = shown_in > 0 ? (shown_in - 1) / rate_in_hz : 0;
  for (int64_t j = 0; j < m; ++j) {
    const double t = (static_cast<double>(j) * o.down - delay) / o.up / rate_in_hz;
    if (t > t_end + 1e-12) break;
    if (t < 0) continue;
    out_trace.x.push_back(t);
    out_trace.y.push_back(yv[j]);
  }
  // Mark the output samples when they are far enough apart to tell apart.
  if (static_cast<int64_t>(out_trace.x.size()) * 5 < o.plot_width) out_trace.marker_px = 3;
  PlotOptions plot;
  plot.width_px = o.plot_width;
  plot.height_px = o.plot_height;
  plot.x_label = "time (s)";
  const char* op = o.mode == "upfirdn"  ? "upfirdn"
                   : o.mode == "fft"    ? "resample (FFT)"
                   : o.mode == "decimate" ? "decimate"
                                          : "resample_poly";
  plot.title = o.mode == "decimate"
                   ? absl::StrCat(op, " q=", o.down, ", channel 0")
                   : absl::StrCat(op, " up=", o.up, " down=", o.down, ", channel 0");
  return WritePlotPng(o.png, {in_trace, out_trace}, plot);
}

}  // namespace

int RunInterp(const GlobalOptions& global, InterpOptions o, std::ostream& out,
              std::ostream& err) {
  if (absl::Status s = ValidateInterpOptions(&o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "interp");
  }
  const v1::PadMode pad = *PadModeFromName(o.padtype);

  // Input and filter files.
  SignalReadOptions read_options;
  read_options.raw_channels = o.raw_channels;
  absl::StatusOr<Signal> signal = ReadSignal(o.input, read_options);
  if (!signal.ok()) return ReportError(err, kExitIo, signal.status());
  HostArray x = std::move(signal->samples);
  if (x.ndim() < 1) {
    return ReportError(err, kExitIo,
                       absl::InvalidArgumentError(absl::StrCat(
                           o.input, ": expected a signal of rank >= 1 ([n], [channels, n], ...), "
                           "got a 0-d array")));
  }
  if (o.axis < -x.ndim() || o.axis >= x.ndim()) {
    return ReportUsageError(err,
                            absl::StrCat("--axis ", o.axis, " is out of range for ", o.input,
                                         " of shape ", ShapeString(x.shape())),
                            "interp");
  }
  // The filtered axis, normalised; `along_last`: the layout every path takes ([n] or
  // [channels, n] along the last axis), else the request names the axis and only whole-array
  // calls (unary, staged, --shm) take it.
  const int axis = o.axis < 0 ? o.axis + x.ndim() : o.axis;
  const bool along_last = axis == x.ndim() - 1 && x.ndim() <= 2;
  if (!along_last && o.chunk > 0) {
    return ReportUsageError(
        err,
        absl::StrCat("--chunk streams along the last axis of an [n] or [channels, n] signal; ",
                     o.input, " has shape ", ShapeString(x.shape()), " and --axis ", o.axis),
        "interp");
  }
  switch (x.dtype()) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kComplex64:
      break;
    case DType::kComplex128:
      return ReportError(err, kExitIo,
                         absl::InvalidArgumentError(absl::StrCat(
                             o.input, ": complex128 is not supported; use complex64")));
    default: {  // integer samples: the service computes in floating point
      absl::StatusOr<HostArray> f = ToFloat32(x);
      if (!f.ok()) return ReportError(err, kExitIo, f.status());
      x = *std::move(f);
    }
  }
  const double rate_in = signal->sample_rate_hz > 0 ? signal->sample_rate_hz : o.rate_hz;
  std::optional<HostArray> taps;
  if (!o.taps_file.empty()) {
    absl::StatusOr<HostArray> t = ReadNpy(o.taps_file);
    if (!t.ok()) return ReportError(err, kExitIo, t.status());
    if (t->ndim() != 1 || t->dim(0) < 1 ||
        (t->dtype() != DType::kFloat32 && t->dtype() != DType::kFloat64 &&
         t->dtype() != DType::kComplex64 && t->dtype() != DType::kComplex128)) {
      return ReportError(err, kExitIo,
                         absl::InvalidArgumentError(absl::StrCat(
                             o.taps_file, ": taps must be a non-empty 1-D float32, float64, "
                             "complex64 or complex128 array, got ", DTypeName(t->dtype()), " ",
                             ShapeString(t->shape()))));
    }
    taps = *std::move(t);
  }
  const int64_t numtaps = taps ? taps->dim(0)
                          : o.design_numtaps > 0 ? o.design_numtaps
                                                 : DefaultNumtaps(o.up, o.down);

  // Build the request (x is attached below, unless it is streamed).
  v1::UpfirdnRequest upfirdn;
  v1::ResamplePolyRequest resample;
  if (o.mode == "upfirdn") {
    upfirdn.set_up(o.up);
    upfirdn.set_down(o.down);
    upfirdn.set_mode(pad);
    upfirdn.set_cval(o.cval);
    upfirdn.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
    if (o.scipy_dtypes) upfirdn.set_dtype_rule(v1::DTYPE_SCIPY);
    if (taps) {
      ToProto(*taps, upfirdn.mutable_taps());
    } else {
      // An explicit design, or resample_poly's own: firwin(20 max(L, M) + 1, 1 / max(L, M)).
      v1::FirwinDesign* d = upfirdn.mutable_design();
      const int64_t g = Gcd(o.up, o.down);
      d->set_numtaps(static_cast<int32_t>(numtaps));
      d->set_cutoff(o.design_numtaps > 0 ? o.design_cutoff
                                         : 1.0 / std::max(o.up / g, o.down / g));
      d->set_window(o.window.empty() && o.design_numtaps == 0 ? v1::KAISER
                                                              : WindowFromName(o.window_name));
      if (!o.window_name.empty() &&
          (WindowFromName(o.window_name) == v1::WINDOW_UNSPECIFIED || !o.window_params.empty())) {
        d->set_window_name(o.window_name);  // a get_window name beyond the enum, or parameters
        for (double p : o.window_params) d->add_window_params(p);
      }
      d->set_kaiser_beta(o.beta);
      d->set_gain(o.gain != 0 ? o.gain : o.up);
    }
    if (axis != x.ndim() - 1) upfirdn.set_axis(axis);
  } else if (o.mode == "resample") {
    if (axis != x.ndim() - 1) resample.set_axis(axis);
    resample.set_up(o.up);
    resample.set_down(o.down);
    resample.set_window(WindowFromName(o.window_name));
    if (!o.window_name.empty() &&
        (WindowFromName(o.window_name) == v1::WINDOW_UNSPECIFIED || !o.window_params.empty())) {
      resample.set_window_name(o.window_name);  // a get_window name beyond the enum, or parameters
      for (double p : o.window_params) resample.add_window_params(p);
    }
    resample.set_kaiser_beta(o.beta);
    resample.set_padtype(pad);
    resample.set_cval(o.cval);
    resample.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
    if (o.scipy_dtypes) resample.set_dtype_rule(v1::DTYPE_SCIPY);
    if (taps) ToProto(*taps, resample.mutable_taps());
  }

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);

  // Messages larger than the server's cap go through ResampleStream.
  int64_t cap = (*client)->options().max_message_bytes;
  absl::StatusOr<v1::ServerInfo> server_info = (*client)->GetServerInfo();
  if (server_info.ok()) {
    if (server_info->limits().max_message_bytes() > 0) {
      cap = std::min(cap, server_info->limits().max_message_bytes());
    }
  } else if (server_info.status().code() != absl::StatusCode::kUnimplemented) {
    return ReportError(err, kExitRpc, server_info.status(), global.server);
  }
  const int64_t n = x.dim(axis);
  int64_t channels = 1;  // every other axis
  for (int d = 0; d < x.ndim(); ++d) channels *= d == axis ? 1 : x.dim(d);
  // The result's dtype: complex taps make it complex, --scipy-dtypes may widen it.
  const bool filtered = o.mode == "upfirdn" || o.mode == "resample";
  const DType y_dtype =
      filtered ? interp::ResultDType(x.dtype(), taps ? taps->dtype() : DType::kFloat64,
                                     o.scipy_dtypes ? interp::DTypeRule::kSciPy
                                                    : interp::DTypeRule::kKeepPrecision)
               : x.dtype();
  const bool complex_taps =
      taps && (taps->dtype() == DType::kComplex64 || taps->dtype() == DType::kComplex128);
  const int64_t item = static_cast<int64_t>(DTypeSize(y_dtype));
  const int64_t request_bytes =
      static_cast<int64_t>(x.nbytes()) + (taps ? static_cast<int64_t>(taps->nbytes()) : 0);
  const int64_t response_bytes = channels * OutputLength(o, n, numtaps) * item;
  int64_t chunk = o.chunk;
  const bool over_cap = chunk == 0 && !o.shm &&
                        std::max(request_bytes, response_bytes) + kMessageOverheadBytes > cap;
  // Over the cap, upfirdn and resample_poly go through a staging region on the server first
  // (Client::UpfirdnArray: chunked over parallel streams, any padtype); a server without staging
  // regions (UNIMPLEMENTED: no SharedMemoryService; RESOURCE_EXHAUSTED: --shm-bytes 0 or full)
  // gets ResampleStream instead, which takes --padtype constant only.
  if (complex_taps && (chunk > 0 || over_cap)) {
    return ReportUsageError(
        err,
        absl::StrCat("complex --taps need the whole call within the server's message cap of ",
                     FormatBytes(cap), " (this one is ",
                     FormatBytes(std::max(request_bytes, response_bytes)),
                     "), or --shm; they cannot be streamed or --chunk'ed"),
        "interp");
  }
  // Within the cap too, upfirdn and resample_poly with real taps go through the client
  // library's transfer (Client::UpfirdnArray / ResamplePolyArray), which picks one unary call up
  // to TransferOptions::unary_max_bytes (16 MiB) of x + y and the staging region's chunked,
  // parallel streams above: one big gRPC message is several times slower than the same bytes in
  // 4 MiB messages (docs/transport.md). --chunk and --shm keep their own paths.
  const bool try_staged = chunk == 0 && !o.shm && (over_cap || !complex_taps) &&
                          (o.mode == "upfirdn" || o.mode == "resample");

  // Call.
  HostArray y;
  v1::ExecutionInfo exec;
  int64_t chunks = 0;
  bool staged = false;  // through a staging region
  bool sent = false;    // by the library's transfer (unary or staged)
  TransferReport transfer;
  const auto start = std::chrono::steady_clock::now();
  if (try_staged) {
    if (!o.json && over_cap) {
      err << "fresnel: note: " << FormatBytes(std::max(request_bytes, response_bytes))
          << " exceeds the server's message cap of " << FormatBytes(cap)
          << ": sending it through a staging region in chunks\n";
    }
    absl::StatusOr<HostArray> r =
        o.mode == "upfirdn"
            ? (*client)->UpfirdnArray(upfirdn, x, TransferOptions(), CallOptions(), &transfer)
            : (*client)->ResamplePolyArray(resample, x, TransferOptions(), CallOptions(),
                                           &transfer);
    if (r.ok()) {
      y = *std::move(r);
      exec = transfer.info;
      staged = transfer.segments > 0;  // 0: the library sent one unary call
      sent = true;
    } else if (r.status().code() != absl::StatusCode::kUnimplemented &&
               r.status().code() != absl::StatusCode::kResourceExhausted) {
      return ReportError(err, kExitRpc, r.status(), global.server);
    } else if (!o.json && over_cap) {
      err << "fresnel: note: the server has no staging region for it ("
          << r.status().message() << ")\n";
    }
    // Within the cap, a server without staging regions gets the unary call below.
  }
  if (!sent && over_cap) {
    if (!along_last) {
      return ReportUsageError(
          err,
          absl::StrCat("the request (", FormatBytes(std::max(request_bytes, response_bytes)),
                       ") exceeds the server's message cap of ", FormatBytes(cap),
                       ", and only the last axis of an [n] or [channels, n] signal can be "
                       "streamed (", o.input, ": ", ShapeString(x.shape()), ", --axis ", o.axis,
                       ")"),
          "interp");
    }
    if (pad != v1::PAD_CONSTANT || o.mode == "fft" || o.mode == "decimate") {
      return ReportUsageError(
          err,
          absl::StrCat("the request (", FormatBytes(std::max(request_bytes, response_bytes)),
                       ") exceeds the server's message cap of ", FormatBytes(cap),
                       ", and only --padtype constant can be streamed (with --mode resample "
                       "or upfirdn)"),
          "interp");
    }
    chunk = StreamChunkSamples(cap, channels, x.dtype(), o.up, o.down);
    if (!o.json) {
      err << "fresnel: note: " << FormatBytes(std::max(request_bytes, response_bytes))
          << " exceeds the server's message cap of " << FormatBytes(cap)
          << ": streaming in chunks of " << chunk << " samples\n";
    }
  }

  if (sent) {
    // done above
  } else if (chunk > 0) {
    v1::ResampleStreamConfig config;
    if (o.mode == "upfirdn") {
      *config.mutable_upfirdn() = upfirdn;
    } else {
      *config.mutable_resample_poly() = resample;
    }
    chunks = std::max<int64_t>(1, CeilDiv(n, chunk));
    absl::StatusOr<HostArray> r =
        (*client)->ResampleStream(config, x, chunk, CallOptions(), nullptr, &exec);
    if (!r.ok()) return ReportError(err, kExitRpc, r.status(), global.server);
    y = *std::move(r);
  } else if (o.shm) {
    // x at 0, y after it (64-byte aligned); the region goes when this scope ends.
    const int64_t y_offset = CeilDiv(static_cast<int64_t>(x.nbytes()), 64) * 64;
    absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(
        client->get(), absl::StrCat("fresnel-cli-", getpid()),
        std::max<int64_t>(1, y_offset + response_bytes));
    if (!region.ok()) return ReportError(err, kExitRpc, region.status(), global.server);
    if (absl::Status s = (*region)->Write(x, 0); !s.ok()) return ReportError(err, kExitIo, s);
    v1::NdArray x_shape;  // dtype and shape; the bytes are in the region
    x_shape.set_dtype(ToProto(x.dtype()));
    x_shape.mutable_shape()->Assign(x.shape().begin(), x.shape().end());
    absl::StatusOr<v1::InterpolationResponse> r;
    if (o.mode == "upfirdn") {
      *upfirdn.mutable_x() = x_shape;
      r = (*client)->Upfirdn(upfirdn, **region, 0, y_offset);
    } else {
      *resample.mutable_x() = x_shape;
      r = (*client)->ResamplePoly(resample, **region, 0, y_offset);
    }
    if (!r.ok()) return ReportError(err, kExitRpc, r.status(), global.server);
    exec = r->info();
    absl::StatusOr<HostArray> yy = (*region)->Read(r->y());
    if (!yy.ok()) return ReportError(err, kExitRpc, yy.status(), global.server);
    y = *std::move(yy);
  } else {
    absl::StatusOr<v1::InterpolationResponse> r;
    if (o.mode == "upfirdn") {
      ToProto(x, upfirdn.mutable_x());
      r = (*client)->Upfirdn(upfirdn);
    } else if (o.mode == "fft") {
      v1::ResampleRequest fft;
      fft.set_num(OutputLength(o, n, numtaps));
      fft.set_window_name(o.window_name);
      for (double p : o.window_params) fft.add_window_params(p);
      if (o.beta != 0 && o.window_params.empty()) fft.add_window_params(o.beta);  // --beta B
      fft.set_freq_domain(o.freq_domain);
      if (axis != x.ndim() - 1) fft.set_axis(axis);
      fft.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
      ToProto(x, fft.mutable_x());
      r = (*client)->Resample(fft);
    } else if (o.mode == "decimate") {
      v1::DecimateRequest dec;
      dec.set_q(o.down);
      if (axis != x.ndim() - 1) dec.set_axis(axis);
      dec.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
      ToProto(x, dec.mutable_x());
      r = (*client)->Decimate(dec);
    } else {
      ToProto(x, resample.mutable_x());
      r = (*client)->ResamplePoly(resample);
    }
    if (!r.ok()) return ReportError(err, kExitRpc, r.status(), global.server);
    exec = r->info();
    absl::StatusOr<HostArray> yy = FromProto(std::move(*r->mutable_y()), "y");
    if (!yy.ok()) return ReportError(err, kExitRpc, yy.status(), global.server);
    y = *std::move(yy);
  }
  const double round_trip_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Output files.
  const double rate_out = rate_in * o.up / o.down;
  if (absl::Status s = WriteSignal(o.output, y, rate_out); !s.ok()) {
    return ReportError(err, kExitIo, s);
  }
  if (!o.png.empty() && y.ndim() >= 1) {
    if (absl::Status s = PlotSignals(o, x, y, axis, rate_in, numtaps); !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
  }

  const int64_t m = y.ndim() == x.ndim() ? y.dim(axis) : 0;
  const std::string op = o.mode == "upfirdn"    ? "upfirdn"
                         : o.mode == "fft"      ? "resample"
                         : o.mode == "decimate" ? "decimate"
                                                : "resample_poly";
  if (o.json) {
    JsonObject json;
    json.Add("input", o.input)
        .Add("output", o.output)
        .Add("op", op)
        .Add("up", o.up)
        .Add("down", o.down)
        .Add("dtype", DTypeName(x.dtype()))
        .Add("axis", axis)
        .Add("channels", channels)
        .Add("samples_in", n)
        .Add("samples_out", m)
        .Add("sample_rate_in_hz", rate_in)
        .Add("sample_rate_out_hz", rate_out)
        .Add("streamed", chunk > 0)
        .Add("chunks", chunks)
        .Add("staged", staged)
        .Add("segments", staged ? transfer.segments : 0)
        .Add("shm", o.shm);
    AddExecutionJson(exec, round_trip_s, &json);
    out << json.Str() << "\n";
    return kExitOk;
  }
  // [channels x n] along the last axis; other layouts print their shape and the axis.
  auto dims = [&](const HostArray& a, int64_t samples) {
    return along_last ? absl::StrCat("[", channels, " x ", samples, "]")
                      : absl::StrCat("[", absl::StrJoin(a.shape(), " x "), "]");
  };
  out << absl::StrCat(
             o.input, " ", dims(x, n), " ", DTypeName(x.dtype()), " ",
             absl::StrFormat("%g", rate_in), " Hz -> ", o.output, " ", dims(y, m), " ",
             absl::StrFormat("%g", rate_out), " Hz | ", op, " ", o.up, "/", o.down,
             along_last ? std::string() : absl::StrCat(" along axis ", axis),
             chunk > 0 ? absl::StrCat(", streamed in ", chunks, " chunk(s)") : std::string(),
             staged ? absl::StrCat(", through a staging region (", transfer.path, ", ",
                                   transfer.segments, " segment(s))")
                    : std::string(),
             o.shm ? ", through shared memory" : "",
             " | ", exec.device().empty() ? std::string("?") : exec.device(), " | server ",
             FormatSeconds(exec.total_seconds()), " (queue ",
             FormatSeconds(exec.queue_wait_seconds()), ", h2d ", FormatSeconds(exec.h2d_seconds()),
             ", compute ", FormatSeconds(exec.compute_seconds()), ", d2h ",
             FormatSeconds(exec.d2h_seconds()), ") | round trip ", FormatSeconds(round_trip_s))
      << "\n";
  return kExitOk;
}

}  // namespace fresnel::cli
