// `fresnel unwrap` and `fresnel jobs`: phase unwrapping on the server, as a job watched with a
// progress bar (the default) or as one synchronous call (--sync), and the job commands.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "commands.h"
#include "format.h"
#include "fresnel/client/shm.h"
#include "fresnel/io/npy.h"
#include "fresnel/io/png.h"
#include "fresnel/v1/array_convert.h"
#include "image_io.h"
#include "fresnel/io/signal.h"

namespace fresnel::cli {
namespace {

bool HasSuffix(const std::string& path, const std::string& suffix) {
  const std::string lower = absl::AsciiStrToLower(path);
  return lower.size() >= suffix.size() &&
         lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// out.npy -> out_residues.npy
std::string MapPath(const std::string& output, const char* name) {
  const std::string stem = output.substr(0, output.size() - 4);
  return absl::StrCat(stem, "_", name, ".npy");
}

const char* StateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED: return "queued";
    case v1::JOB_STATE_RUNNING: return "running";
    case v1::JOB_STATE_DONE: return "done";
    case v1::JOB_STATE_FAILED: return "failed";
    case v1::JOB_STATE_CANCELLED: return "cancelled";
    default: return "unknown";
  }
}

const char* MethodName(v1::UnwrapMethod method) {
  switch (method) {
    case v1::UNWRAP_METHOD_LEAST_SQUARES: return "lsq";
    case v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES: return "wlsq";
    default: return "goldstein";
  }
}

bool Terminal(v1::JobState state) {
  return state == v1::JOB_STATE_DONE || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrJoin(shape, " x ");
}

std::string TimeText(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const std::time_t s = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%SZ", &tm);
  return buffer;
}

std::string ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "null";
  return json;
}

// The job's failure as a status: its own code and message, prefixed with the job id.
absl::Status JobFailure(const v1::UnwrapJob& job) {
  if (job.state() == v1::JOB_STATE_CANCELLED) {
    return absl::CancelledError(absl::StrCat("job ", job.job_id(), " was cancelled",
                                             job.status().message().empty() ? "" : ": ",
                                             job.status().message()));
  }
  const int code =
      job.status().code() != 0 ? job.status().code() : static_cast<int>(absl::StatusCode::kUnknown);
  return FromGrpcStatus(code,
                        absl::StrCat("job ", job.job_id(), " failed: ", job.status().message()));
}

// The Watch feed on stderr: a progress bar redrawn in place on a terminal; elsewhere (logs,
// pipes) one line per state or stage change and per 10 % of progress.
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& err, bool quiet)
      : err_(err), quiet_(quiet), tty_(&err == &std::cerr && isatty(STDERR_FILENO) == 1) {}

  void Update(const v1::UnwrapJob& job) {
    if (quiet_) return;
    const std::string id = job.job_id().substr(0, 8);
    if (job.state() != last_state_) {
      if (job.state() == v1::JOB_STATE_QUEUED) {
        err_ << "fresnel: job " << id << " queued\n";
      } else if (job.state() == v1::JOB_STATE_RUNNING) {
        EndBar();
        err_ << "fresnel: job " << id << " running on " << job.device() << "\n";
      }
    }
    if (job.state() == v1::JOB_STATE_RUNNING || job.state() == v1::JOB_STATE_DONE) {
      const int percent = static_cast<int>(std::floor(100 * job.progress()));
      const std::string stage = job.state() == v1::JOB_STATE_DONE ? "done" : job.stage();
      if (tty_) {
        // Padded so that a shorter stage name overwrites a longer one.
        err_ << "\r" << absl::StrFormat("%-50s", Bar(percent, stage)) << std::flush;
        bar_open_ = true;
      } else if (stage != last_stage_ || percent / 10 != last_percent_ / 10) {
        err_ << Bar(percent, stage) << "\n";
      }
      last_stage_ = stage;
      last_percent_ = percent;
    }
    if (Terminal(job.state()) && job.state() != last_state_) {
      EndBar();
      err_ << "fresnel: job " << id << " " << StateName(job.state());
      if (job.state() != v1::JOB_STATE_DONE && !job.status().message().empty()) {
        err_ << ": " << job.status().message();
      }
      err_ << "\n";
    }
    last_state_ = job.state();
  }

 private:
  static std::string Bar(int percent, const std::string& stage) {
    constexpr int kWidth = 30;
    const int filled = std::clamp(percent, 0, 100) * kWidth / 100;
    return absl::StrFormat("[%s%s] %3d%% %s", std::string(filled, '#'),
                           std::string(kWidth - filled, '-'), percent, stage);
  }

  void EndBar() {
    if (bar_open_) err_ << "\n";
    bar_open_ = false;
  }

  std::ostream& err_;
  const bool quiet_;
  const bool tty_;
  bool bar_open_ = false;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
  std::string last_stage_;
  int last_percent_ = -1;
};

absl::StatusOr<HostArray> ReadMask(const std::string& path, const HostArray& phase) {
  absl::StatusOr<HostArray> m = ReadImage(path);
  if (!m.ok()) return m.status();
  if (m->shape() != phase.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the mask's shape ", ShapeString(m->shape()),
                     " differs from the phase's ", ShapeString(phase.shape())));
  }
  if (m->dtype() == DType::kUint8) return m;
  if (m->dtype() == DType::kComplex64 || m->dtype() == DType::kComplex128) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a mask cannot be complex"));
  }
  const std::vector<double> v = ToDoubles(*m);
  HostArray out(DType::kUint8, m->shape());
  for (size_t i = 0; i < v.size(); ++i) out.data<uint8_t>()[i] = v[i] != 0 ? 1 : 0;
  return out;
}

absl::Status WriteResult(const std::string& output, bool save_maps, const UnwrapResult& r,
                         std::vector<std::string>* written) {
  if (absl::Status s = WriteNpy(output, r.unwrapped); !s.ok()) return s;
  written->push_back(output);
  if (!save_maps) return absl::OkStatus();
  const std::pair<const char*, const HostArray*> maps[] = {{"residues", &r.residues},
                                                           {"cuts", &r.cuts},
                                                           {"regions", &r.regions},
                                                           {"unreached", &r.unreached}};
  for (const auto& [name, array] : maps) {
    if (array->ndim() == 0) continue;
    const std::string path = MapPath(output, name);
    if (absl::Status s = WriteNpy(path, *array); !s.ok()) return s;
    written->push_back(path);
  }
  return absl::OkStatus();
}

std::string StatsText(const UnwrapResult& r) {
  const v1::UnwrapStats& s = r.stats;
  if (r.method == v1::UNWRAP_METHOD_LEAST_SQUARES) {
    return absl::StrCat("masked ", s.masked_pixels(), " px");
  }
  if (r.method == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES) {
    return absl::StrCat("masked ", s.masked_pixels(), " px, ", s.pcg_iterations(),
                        " PCG iteration(s), residual ", absl::StrFormat("%.3g", s.pcg_residual()));
  }
  return absl::StrCat("residues ", s.positive_residues() + s.negative_residues(), " (+",
                      s.positive_residues(), "/-", s.negative_residues(), "), ", s.residue_pairs(),
                      " pair(s), ", s.border_cuts(), " to border, ", s.mask_cuts(),
                      " to mask, cut length ", s.cut_length(), " px, ", s.regions(), " region(s), ",
                      s.unreached_pixels(), " unreached px, ", s.masked_pixels(), " masked px");
}

JsonObject StatsJson(const v1::UnwrapStats& s) {
  JsonObject j;
  j.Add("residues", static_cast<int64_t>(s.positive_residues() + s.negative_residues()))
      .Add("positive_residues", static_cast<int64_t>(s.positive_residues()))
      .Add("negative_residues", static_cast<int64_t>(s.negative_residues()))
      .Add("residue_pairs", static_cast<int64_t>(s.residue_pairs()))
      .Add("border_cuts", static_cast<int64_t>(s.border_cuts()))
      .Add("mask_cuts", static_cast<int64_t>(s.mask_cuts()))
      .Add("island_cuts", static_cast<int64_t>(s.island_cuts()))
      .Add("cut_pixels", static_cast<int64_t>(s.cut_pixels()))
      .Add("cut_length", static_cast<int64_t>(s.cut_length()))
      .Add("regions", static_cast<int64_t>(s.regions()))
      .Add("unreached_pixels", static_cast<int64_t>(s.unreached_pixels()))
      .Add("masked_pixels", static_cast<int64_t>(s.masked_pixels()))
      .Add("pairing_radius", static_cast<int>(s.pairing_radius()))
      .Add("pcg_iterations", static_cast<int>(s.pcg_iterations()))
      .Add("pcg_residual", s.pcg_residual());
  return j;
}

void PrintJob(const v1::UnwrapJob& job, std::ostream& out) {
  Table t;
  t.AddRow({"job", job.job_id()});
  std::string state = StateName(job.state());
  if (job.state() == v1::JOB_STATE_RUNNING) {
    state += absl::StrFormat(" (%s, %.0f %%)", job.stage().empty() ? "starting" : job.stage(),
                             100 * job.progress());
  }
  if (job.cancel_requested() && !Terminal(job.state())) state += ", cancel requested";
  t.AddRow({"state", state});
  if (job.status().code() != 0 || !job.status().message().empty()) {
    t.AddRow({"status", absl::StrCat(absl::StatusCodeToString(
                                         static_cast<absl::StatusCode>(job.status().code())),
                                     ": ", job.status().message())});
  }
  t.AddRow({"method", MethodName(job.method())});
  t.AddRow({"image", absl::StrCat("[", ShapeText(job.shape()), "] ",
                                  absl::AsciiStrToLower(v1::DType_Name(job.dtype())))});
  t.AddRow({"device", job.device().empty() ? "-" : job.device()});
  t.AddRow({"created", TimeText(job.created())});
  t.AddRow({"started", TimeText(job.started())});
  t.AddRow({"finished", TimeText(job.finished())});
  t.AddRow({"expires", TimeText(job.expires())});
  if (job.state() == v1::JOB_STATE_DONE) t.AddRow({"result", FormatBytes(job.result_bytes())});
  if (!job.request_id().empty()) t.AddRow({"request id", job.request_id()});
  t.Print(out);
}

CallOptions NoDeadline() {
  CallOptions c;
  c.timeout = std::chrono::milliseconds(-1);
  return c;
}

}  // namespace

absl::Status ValidateUnwrapOptions(UnwrapOptions* o) {
  if (o->input.empty()) return absl::InvalidArgumentError("the input phase file is required");
  const std::pair<const char*, const std::string*> images[] = {
      {"the input", &o->input}, {"--mask", &o->mask}, {"--quality", &o->quality}};
  for (const auto& [what, path] : images) {
    if (path->empty()) continue;
    if (!HasSuffix(*path, ".npy") && !HasSuffix(*path, ".tif") && !HasSuffix(*path, ".tiff")) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", *path, "' must be a .npy, .tif or .tiff image"));
    }
  }
  if (o->output.empty()) return absl::InvalidArgumentError("--out is required");
  if (!HasSuffix(o->output, ".npy")) {
    return absl::InvalidArgumentError(absl::StrCat("--out '", o->output, "' must end in .npy"));
  }
  if (o->method != "goldstein" && o->method != "lsq" && o->method != "wlsq") {
    return absl::InvalidArgumentError("--method must be goldstein, lsq or wlsq");
  }
  const bool lsq = o->method != "goldstein";
  if (lsq) {
    if (!o->quality.empty() && o->method == "lsq") {
      return absl::InvalidArgumentError("--quality applies to --method goldstein or wlsq only");
    }
    if (!o->seed.empty()) {
      return absl::InvalidArgumentError("--seed applies to --method goldstein only");
    }
    if (o->iterations != 0) {
      return absl::InvalidArgumentError("--iterations applies to --method goldstein only");
    }
    if (o->save_maps) {
      return absl::InvalidArgumentError(
          "--save-maps applies to --method goldstein only (least squares has no maps)");
    }
  } else if (o->no_congruent) {
    return absl::InvalidArgumentError("--no-congruent applies to --method lsq or wlsq only");
  }
  if (o->iterations < 0 || o->iterations > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--iterations must lie in 1..64, got ", o->iterations));
  }
  if (!o->seed.empty()) {
    std::vector<std::string> parts = absl::StrSplit(o->seed, ',');
    if (parts.size() != 2 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[0]), &o->seed_row) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[1]), &o->seed_col) || o->seed_row < 0 ||
        o->seed_col < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seed '", o->seed, "' must be ROW,COL (non-negative), e.g. 10,20"));
    }
  }
  if (!o->png.empty() && !HasSuffix(o->png, ".png")) {
    return absl::InvalidArgumentError(absl::StrCat("--png '", o->png, "' must end in .png"));
  }
  if (o->png_max_side < 16 || o->png_max_side > 8192) {
    return absl::InvalidArgumentError("--png-max-side must lie in 16..8192");
  }
  if (o->device != "any" && o->device != "gpu" && o->device != "cpu") {
    return absl::InvalidArgumentError("--device must be any, gpu or cpu");
  }
  if (o->sync && !o->idempotency_key.empty()) {
    return absl::InvalidArgumentError("--idempotency-key applies to jobs, not to --sync");
  }
  return absl::OkStatus();
}

int RunUnwrap(const GlobalOptions& global, UnwrapOptions o, std::ostream& out, std::ostream& err) {
  if (absl::Status s = ValidateUnwrapOptions(&o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "unwrap");
  }
  const bool goldstein = o.method == "goldstein";

  // Input files.
  absl::StatusOr<HostArray> phase = ReadImage(o.input);
  if (!phase.ok()) return ReportError(err, kExitIo, phase.status());
  if (phase->dtype() != DType::kFloat32 && phase->dtype() != DType::kFloat64) {
    return ReportError(err, kExitIo,
                       absl::InvalidArgumentError(absl::StrCat(
                           o.input, ": the phase must be float32 or float64 radians, got ",
                           DTypeName(phase->dtype()))));
  }
  std::optional<HostArray> mask, quality;
  if (!o.mask.empty()) {
    absl::StatusOr<HostArray> m = ReadMask(o.mask, *phase);
    if (!m.ok()) return ReportError(err, kExitIo, m.status());
    mask = *std::move(m);
  }
  if (!o.quality.empty()) {
    absl::StatusOr<HostArray> q = ReadImage(o.quality);
    if (q.ok() && q->dtype() != DType::kFloat32 && q->dtype() != DType::kFloat64) q = ToFloat32(*q);
    if (!q.ok()) return ReportError(err, kExitIo, q.status());
    quality = *std::move(q);
  }

  // The request. Maps are asked for only when they are written or drawn.
  const bool want_maps = goldstein && (o.save_maps || !o.png.empty());
  v1::UnwrapRequest request;
  request.set_method(goldstein             ? v1::UNWRAP_METHOD_GOLDSTEIN
                     : o.method == "wlsq" ? v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES
                                          : v1::UNWRAP_METHOD_LEAST_SQUARES);
  request.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
  ToProto(*phase, request.mutable_phase());
  if (mask) ToProto(*mask, request.mutable_mask());
  if (quality) ToProto(*quality, request.mutable_quality());
  v1::UnwrapOptions* options = request.mutable_options();
  if (goldstein) {
    options->set_return_maps(want_maps);
    options->set_iterations_per_radius(o.iterations);
    if (o.seed_row >= 0) {
      options->mutable_seed()->set_row(o.seed_row);
      options->mutable_seed()->set_col(o.seed_col);
    }
  } else {
    options->set_congruent(!o.no_congruent);
  }

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);

  const auto start = std::chrono::steady_clock::now();
  // --shm: the inputs, then the outputs, in a region made for the command (removed at the end).
  std::unique_ptr<SharedRegion> region;
  if (o.shm) {
    const int64_t pixels = phase->size();
    std::vector<int64_t> outputs = {static_cast<int64_t>(phase->nbytes())};
    if (want_maps) {
      for (int64_t itemsize : {2, 1, 4, 1}) outputs.push_back(pixels * itemsize);
    }
    std::vector<int64_t> inputs = {static_cast<int64_t>(phase->nbytes())};
    if (mask) inputs.push_back(static_cast<int64_t>(mask->nbytes()));
    if (quality) inputs.push_back(static_cast<int64_t>(quality->nbytes()));
    absl::StatusOr<std::unique_ptr<SharedRegion>> r =
        SharedRegion::Create(client->get(), absl::StrCat("fresnel-cli-", getpid()),
                             OutputRegionBytes(inputs) + OutputRegionBytes(outputs));
    if (!r.ok()) return ReportError(err, kExitRpc, r.status(), global.server);
    region = *std::move(r);
    absl::StatusOr<int64_t> end = region->PutArrays(&request, 0);
    if (!end.ok()) return ReportError(err, kExitIo, end.status());
    // A job writes its result there when it finishes; Get then only says where.
    *request.mutable_out_shm() = region->OutRef(*end);
  }
  absl::StatusOr<UnwrapResult> result;
  std::string job_id;
  if (o.sync) {
    result = (*client)->Unwrap(request);
  } else {
    SubmitOptions submit;
    submit.idempotency_key = o.idempotency_key;
    absl::StatusOr<v1::SubmitResponse> submitted =
        (*client)->SubmitUnwrap(std::move(request), submit);
    if (!submitted.ok()) return ReportError(err, kExitRpc, submitted.status(), global.server);
    job_id = submitted->job().job_id();
    if (!o.json) {
      err << "fresnel: job " << job_id
          << (submitted->existing() ? " (existing: same --idempotency-key)" : " submitted") << "\n";
    }
    ProgressPrinter progress(err, o.json);
    // Watching lasts as long as the job; --timeout bounds the other calls.
    absl::StatusOr<v1::UnwrapJob> final_state = (*client)->WatchUnwrap(
        job_id, [&progress](const v1::UnwrapJob& job) { progress.Update(job); }, NoDeadline());
    if (!final_state.ok()) return ReportError(err, kExitRpc, final_state.status(), global.server);
    if (final_state->state() != v1::JOB_STATE_DONE) {
      return ReportError(err, kExitRpc, JobFailure(*final_state), global.server);
    }
    result = (*client)->GetUnwrapResult(job_id);
  }
  if (!result.ok()) return ReportError(err, kExitRpc, result.status(), global.server);
  if (!result->out_shm_error.empty()) {
    err << "fresnel: warning: the result came through gRPC, not the region: "
        << result->out_shm_error << "\n";
  }
  const double round_trip_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Output files.
  std::vector<std::string> written;
  if (absl::Status s = WriteResult(o.output, o.save_maps, *result, &written); !s.ok()) {
    return ReportError(err, kExitIo, s);
  }
  if (!o.png.empty()) {
    absl::StatusOr<HostArray> preview =
        RenderUnwrapPreview(*phase, result->unwrapped, mask ? &*mask : nullptr,
                            result->cuts.ndim() == 2 ? &result->cuts : nullptr, o.png_max_side);
    absl::Status s = preview.ok() ? WritePng(o.png, *preview) : preview.status();
    if (!s.ok()) return ReportError(err, kExitIo, s);
    written.push_back(o.png);
  }

  const v1::ExecutionInfo& exec = result->info;
  const std::string method =
      goldstein ? "goldstein"
                : absl::StrCat(o.method, o.no_congruent ? " (solution)" : " (congruent)");
  if (o.json) {
    JsonObject json;
    json.Add("input", o.input)
        .Add("output", o.output)
        .Add("files", absl::StrJoin(written, ","))
        .Add("method", o.method)
        .Add("shape", phase->shape())
        .Add("dtype", DTypeName(phase->dtype()))
        .Add("masked", mask.has_value())
        .Add("sync", o.sync)
        .Add("shm", o.shm)
        .Add("job_id", job_id)
        .Add("stats", StatsJson(result->stats));
    AddExecutionJson(exec, round_trip_s, &json);
    out << json.Str() << "\n";
    return kExitOk;
  }
  out << absl::StrCat(
             o.input, " [", phase->dim(0), " x ", phase->dim(1), "] ", DTypeName(phase->dtype()),
             " -> ", o.output, " | ", method, " | ", StatsText(*result), " | ",
             job_id.empty() ? std::string("sync") : absl::StrCat("job ", job_id.substr(0, 8)),
             o.shm ? " through shared memory" : "", " | ", exec.device().empty() ? std::string("?") : exec.device(), " | server ",
             FormatSeconds(exec.total_seconds()), " (queue ",
             FormatSeconds(exec.queue_wait_seconds()), ", compute ",
             FormatSeconds(exec.compute_seconds()), ") | round trip ", FormatSeconds(round_trip_s))
      << "\n";
  if (written.size() > 1) out << "wrote " << absl::StrJoin(written, ", ") << "\n";
  return kExitOk;
}

absl::Status ValidateJobsOptions(const JobsOptions& o) {
  if (o.action != "list" && o.action != "get" && o.action != "cancel") {
    return absl::InvalidArgumentError("jobs: the action must be list, get or cancel");
  }
  if (o.action != "list" && o.job_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("jobs ", o.action, ": a job id is required"));
  }
  if (o.limit < 1) return absl::InvalidArgumentError("--limit must be >= 1");
  if (!o.output.empty() && !HasSuffix(o.output, ".npy")) {
    return absl::InvalidArgumentError(absl::StrCat("--out '", o.output, "' must end in .npy"));
  }
  if (o.save_maps && o.output.empty()) {
    return absl::InvalidArgumentError("--save-maps needs --out (the maps go next to it)");
  }
  return absl::OkStatus();
}

int RunJobs(const GlobalOptions& global, const JobsOptions& o, std::ostream& out,
            std::ostream& err) {
  const std::string command = absl::StrCat("jobs ", o.action);
  if (absl::Status s = ValidateJobsOptions(o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), command);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);

  if (o.action == "list") {
    std::vector<v1::UnwrapJob> jobs;
    v1::ListJobsRequest request;
    do {
      request.set_page_size(std::min(o.limit - static_cast<int>(jobs.size()), 1000));
      absl::StatusOr<v1::ListUnwrapJobsResponse> page = (*client)->ListUnwrapJobs(request);
      if (!page.ok()) return ReportError(err, kExitRpc, page.status(), global.server);
      for (const v1::UnwrapJob& j : page->jobs()) jobs.push_back(j);
      request.set_page_token(page->next_page_token());
    } while (!request.page_token().empty() && static_cast<int>(jobs.size()) < o.limit);
    if (o.json) {
      std::vector<std::string> items;
      for (const v1::UnwrapJob& j : jobs) items.push_back(ProtoJson(j));
      out << "{\"jobs\": [" << absl::StrJoin(items, ", ") << "]}\n";
      return kExitOk;
    }
    if (jobs.empty()) {
      out << "(no jobs)\n";
      return kExitOk;
    }
    Table t;
    t.AddRow(
        {"JOB", "STATE", "METHOD", "SHAPE", "DTYPE", "PROGRESS", "DEVICE", "CREATED", "RESULT"});
    for (const v1::UnwrapJob& j : jobs) {
      std::string progress = "-";
      if (j.state() == v1::JOB_STATE_RUNNING) {
        progress = absl::StrFormat("%.0f%% %s", 100 * j.progress(), j.stage());
      } else if (j.state() == v1::JOB_STATE_DONE) {
        progress = "100%";
      } else if (j.state() != v1::JOB_STATE_QUEUED) {
        progress = absl::StatusCodeToString(static_cast<absl::StatusCode>(j.status().code()));
      }
      t.AddRow({j.job_id(), StateName(j.state()), MethodName(j.method()), ShapeText(j.shape()),
                absl::AsciiStrToLower(v1::DType_Name(j.dtype())), progress,
                j.device().empty() ? "-" : j.device(), TimeText(j.created()),
                j.state() == v1::JOB_STATE_DONE ? FormatBytes(j.result_bytes()) : "-"});
    }
    t.Print(out);
    return kExitOk;
  }

  if (o.action == "cancel") {
    absl::StatusOr<v1::UnwrapJob> job = (*client)->CancelUnwrap(o.job_id);
    if (!job.ok()) return ReportError(err, kExitRpc, job.status(), global.server);
    if (o.json) {
      out << ProtoJson(*job) << "\n";
      return kExitOk;
    }
    if (job->state() == v1::JOB_STATE_CANCELLED) {
      out << "job " << job->job_id() << ": cancelled\n";
    } else if (Terminal(job->state())) {
      out << "job " << job->job_id() << ": already " << StateName(job->state())
          << ", nothing to cancel\n";
    } else {
      out << "job " << job->job_id() << ": " << StateName(job->state())
          << ", cancel requested (it stops at its next progress report)\n";
    }
    return kExitOk;
  }

  // get
  absl::StatusOr<v1::UnwrapJob> job;
  if (o.wait) {
    ProgressPrinter progress(err, o.json);
    job = (*client)->WatchUnwrap(
        o.job_id, [&progress](const v1::UnwrapJob& j) { progress.Update(j); }, NoDeadline());
  } else {
    job = (*client)->GetUnwrapJob(o.job_id);
  }
  if (!job.ok()) return ReportError(err, kExitRpc, job.status(), global.server);
  std::vector<std::string> written;
  if (!o.output.empty()) {
    if (job->state() != v1::JOB_STATE_DONE) {
      return ReportError(err, kExitRpc,
                         Terminal(job->state())
                             ? JobFailure(*job)
                             : absl::FailedPreconditionError(absl::StrCat(
                                   "job ", job->job_id(), " is ", StateName(job->state()),
                                   "; add --wait to wait for its result")),
                         global.server);
    }
    absl::StatusOr<UnwrapResult> result = (*client)->GetUnwrapResult(o.job_id);
    if (!result.ok()) return ReportError(err, kExitRpc, result.status(), global.server);
    if (absl::Status s = WriteResult(o.output, o.save_maps, *result, &written); !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
  }
  if (o.json) {
    JsonObject json;
    json.AddRaw("job", ProtoJson(*job)).Add("files", absl::StrJoin(written, ","));
    out << json.Str() << "\n";
    return kExitOk;
  }
  PrintJob(*job, out);
  if (!written.empty()) out << "wrote " << absl::StrJoin(written, ", ") << "\n";
  return kExitOk;
}

}  // namespace fresnel::cli
