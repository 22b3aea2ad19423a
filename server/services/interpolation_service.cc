#include "server/services/interpolation_service.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/copy.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/region_wire.h"
#include "fresnel/interp/into.h"
#include "server/rpc/ordered_stream.h"
#include "server/services/interpolation_params.h"
#include "server/shm.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.InterpolationService";
// Inline arrays from this size go through staging buffers. Below it a pageable copy takes well
// under 0.1 ms, less than pinning a new buffer for each new size would cost, and the staging
// cache would fill with small buffers.
constexpr int64_t kMinStagedBytes = int64_t{1} << 20;
using v1::kEnvelopeBytes;

absl::Status CheckResponseFits(int64_t channels, int64_t samples, DType dtype,
                               int64_t max_message_bytes, absl::string_view hint) {
  double bytes = static_cast<double>(channels) * static_cast<double>(samples) *
                 static_cast<double>(DTypeSize(dtype));
  if (bytes + kEnvelopeBytes > static_cast<double>(max_message_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "y: the output would be ", static_cast<int64_t>(bytes),
        " bytes, over the server's max message size of ", max_message_bytes, " bytes; ", hint));
  }
  return absl::OkStatus();
}

// The calling client's shared-memory regions (none when the server has no registry).
ShmResolver ResolverOf(ServiceContext* ctx, const grpc::CallbackServerContext* context) {
  if (ctx->shm == nullptr) return ShmResolver();
  return ctx->shm->ResolverFor(ClientOf(context));
}

// The same, for the direct path, which also reads and writes CUDA IPC regions (device memory).
PlacedResolver PlacedResolverOf(ServiceContext* ctx, const grpc::CallbackServerContext* context) {
  if (ctx->shm == nullptr) return PlacedResolver();
  return ctx->shm->PlacedResolverFor(ClientOf(context));
}

// The request's x, moved out of the (gRPC-owned, const) request: the request lives until the RPC
// finishes and nothing reads x again, so taking its bytes saves a copy of the largest payload.
// An x in a shared-memory region (x.shm) is copied out of it here.
absl::StatusOr<HostArray> TakeX(const v1::NdArray& x, const ShmResolver& resolver) {
  return FromProto(std::move(*const_cast<v1::NdArray*>(&x)), "x", resolver);
}

// A raw Upfirdn / ResamplePoly request (region_wire.h): the message without x's data, and x's
// data still in the received slices. Shared by the call's jobs, which copy x from the slices.
template <class Request>
struct RawRequest {
  Request msg;
  v1::InlineArrayRequest x;
  // Puts x's data into msg.x (one copy) for the paths that read x from the message.
  void MaterializeX() {
    if (x.data_bytes() > 0 && msg.x().data().empty()) msg.mutable_x()->set_data(x.DataString());
  }
};

// The answer of a one-shot call and where it goes: the call fills `msg`; a raw method (Upfirdn,
// ResamplePoly) then serialises it into `raw`, with y's bytes sent straight from the staging
// buffer the kernel wrote them into when y went to one; a generated method (Resample, Decimate)
// leaves the rest to gRPC.
struct Answer {
  v1::InterpolationResponse* msg = nullptr;
  grpc::ByteBuffer* raw = nullptr;
  std::shared_ptr<v1::InterpolationResponse> owned;  // raw methods: msg's storage
};

Answer RawAnswer(grpc::ByteBuffer* raw) {
  Answer a;
  a.owned = std::make_shared<v1::InterpolationResponse>();
  a.msg = a.owned.get();
  a.raw = raw;
  return a;
}

// The last step of every one-shot answer, once msg is complete. `y_staged` (nullable, raw methods
// only): y's bytes, not in msg.y, which carries only y's dtype and shape.
absl::Status Send(const Answer& a, const ShmSpan* y_staged) {
  if (a.raw == nullptr) return absl::OkStatus();
  if (y_staged != nullptr && y_staged->keepalive != nullptr) {
    v1::NdArray meta = std::move(*a.msg->mutable_y());
    a.msg->clear_y();
    *a.raw = v1::MessageWithArrayBuffer(*a.msg, v1::InterpolationResponse::kYFieldNumber, meta,
                                        y_staged->data, static_cast<size_t>(y_staged->size),
                                        y_staged->keepalive);
    return absl::OkStatus();
  }
  bool own_buffer = false;
  grpc::Status st = grpc::SerializationTraits<v1::InterpolationResponse>::Serialize(
      *a.msg, a.raw, &own_buffer);
  if (!st.ok()) return absl::InternalError(absl::StrCat("response: ", st.error_message()));
  return absl::OkStatus();
}

// Joins two arrays of equal leading dims along the last axis.
HostArray ConcatLastAxis(const HostArray& a, const HostArray& b) {
  if (b.size() == 0) return a;
  if (a.size() == 0) return b;
  std::vector<int64_t> shape = a.shape();
  int64_t na = a.shape().back(), nb = b.shape().back();
  shape.back() = na + nb;
  HostArray out(a.dtype(), shape);
  int64_t rows = a.ndim() == 2 ? a.dim(0) : 1;
  size_t es = DTypeSize(a.dtype());
  auto* dst = static_cast<char*>(out.raw());
  auto* pa = static_cast<const char*>(a.raw());
  auto* pb = static_cast<const char*>(b.raw());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * (na + nb) * es, pa + r * na * es, na * es);
    std::memcpy(dst + (r * (na + nb) + na) * es, pb + r * nb * es, nb * es);
  }
  return out;
}

// A validated signal split at the filtered axis: its length there and the product of the other
// dimensions (the channels the kernels see).
struct AxisSplit {
  int64_t len = 0;
  int64_t channels = 1;
};
AxisSplit SplitAt(const HostArray& x, int axis) {
  const int nd = static_cast<int>(x.ndim());
  const int a = axis < 0 ? axis + nd : axis;
  AxisSplit s;
  for (int d = 0; d < nd; ++d) {
    if (d == a) {
      s.len = x.dim(d);
    } else {
      s.channels *= x.dim(d);
    }
  }
  return s;
}

// The shape and dtype of a one-shot answer.
struct OutputSize {
  int64_t channels = 1;
  int64_t samples = 0;  // per channel
  DType dtype = DType::kFloat32;
};

// Where y goes when the request names an output region: the span the result is copied into,
// holding the region's mapping until the response is sent. Empty span = y travels inline.
// With `placed` (the direct path) y may be a CUDA IPC region's device memory.
absl::StatusOr<PlacedSpan> OutputSpan(bool has_y_shm, const v1::ShmRef& y_shm,
                                      const ShmResolver& resolver, const OutputSize& out,
                                      const PlacedResolver* placed) {
  if (!has_y_shm) return PlacedSpan();
  if (!resolver) {
    return absl::InvalidArgumentError("y_shm: this server accepts no shared-memory regions");
  }
  const int64_t itemsize = static_cast<int64_t>(DTypeSize(out.dtype));
  if (out.samples < 0 || out.channels < 0 ||
      (out.samples > 0 && out.channels > INT64_MAX / out.samples / itemsize)) {
    return absl::InvalidArgumentError("y_shm: the output's byte count overflows int64");
  }
  const int64_t nbytes = out.channels * out.samples * itemsize;
  if (placed != nullptr && *placed) return (*placed)(y_shm, nbytes, "y_shm");
  FRESNEL_ASSIGN_OR_RETURN(ShmSpan span, resolver(y_shm, nbytes, "y_shm"));
  return PlacedSpan{std::move(span), -1};
}

using Compute =
    std::function<absl::StatusOr<HostArray>(const Device&, const HostArray&, StageTimes*)>;

// What both one-shot paths check before submitting: y's region when the request names one, that
// an inline y fits one message, and the device hint. nullopt after rejecting the call.
struct Accepted {
  ShmSpan y_span;  // empty: y travels inline
  int y_cuda_device = -1;  // >= 0: y_span is device memory (a CUDA IPC region)
  DevicePreference preference = DevicePreference::kAny;
};
std::optional<Accepted> AcceptOneShot(ServiceContext* ctx, UnaryJobCall* call,
                                      const OutputSize& out, const v1::DeviceHint& hint,
                                      const ShmResolver& resolver, bool has_y_shm,
                                      const v1::ShmRef& y_shm,
                                      const PlacedResolver* placed = nullptr) {
  absl::StatusOr<PlacedSpan> y_span = OutputSpan(has_y_shm, y_shm, resolver, out, placed);
  if (!y_span.ok()) {
    call->Reject(y_span.status());
    return std::nullopt;
  }
  const bool y_in_shm = y_span->span.keepalive != nullptr;
  absl::Status fits = y_in_shm ? absl::OkStatus()
                               : CheckResponseFits(out.channels, out.samples, out.dtype,
                                                   ctx->max_message_bytes,
                                                   "use ResampleStream or y_shm for long signals");
  absl::StatusOr<DevicePreference> preference = PreferenceOf(hint);
  if (!fits.ok() || !preference.ok()) {
    call->Reject(!fits.ok() ? fits : preference.status());
    return std::nullopt;
  }
  return Accepted{std::move(y_span->span), y_span->cuda_device, *preference};
}

// The common tail of the unary calls once the request is parsed and validated: checks that the
// answer fits in one message, submits `compute` as a pool job and fills the response from it.
void SubmitOneShot(ServiceContext* ctx, UnaryJobCall* call, HostArray x, const OutputSize& out,
                   int64_t device_bytes, const v1::DeviceHint& hint, const std::string& request_id,
                   const ShmResolver& resolver, bool has_y_shm, const v1::ShmRef& y_shm,
                   const Answer& answer, Compute compute) {
  std::optional<Accepted> accepted =
      AcceptOneShot(ctx, call, out, hint, resolver, has_y_shm, y_shm);
  if (!accepted) return;
  Metrics* metrics = ctx->metrics;
  if (metrics) metrics->AddPayload(kService, call->method(), "in", static_cast<double>(x.nbytes()));
  v1::InterpolationResponse* response = answer.msg;
  response->set_request_id(RequestIdOr(request_id));
  struct State {
    HostArray x, y;
    ShmSpan y_span;  // the output region's bytes (and mapping) when y goes to shared memory
  };
  auto state = std::make_shared<State>();
  state->y_span = std::move(accepted->y_span);
  auto job = std::make_shared<Job>();
  job->preference = accepted->preference;
  job->device_bytes = device_bytes;  // the kernel's <Op>DeviceBytes
  state->x = std::move(x);
  job->run = [state, compute = std::move(compute)](const Device& device,
                                                   StageTimes* times) -> absl::Status {
    FRESNEL_ASSIGN_OR_RETURN(state->y, compute(device, state->x, times));
    state->x = HostArray();  // the input is no longer needed: free it before the reply
    return absl::OkStatus();
  };
  std::string method = call->method();
  call->Start(std::move(job), [state, answer, response, metrics, method, y_shm](
                                  const JobReport& report, double total) {
    if (metrics) {
      metrics->AddPayload(kService, method, "out", static_cast<double>(state->y.nbytes()));
    }
    if (state->y_span.keepalive != nullptr) {
      const HostArray& y = state->y;
      if (static_cast<int64_t>(y.nbytes()) > state->y_span.size) {
        return absl::InternalError(absl::StrCat("y_shm: the result has ", y.nbytes(),
                                                " bytes, ", state->y_span.size, " were checked"));
      }
      if (y.nbytes() > 0) std::memcpy(state->y_span.data, y.raw(), y.nbytes());
      *response->mutable_y() = ShmArray(y.dtype(), y.shape(), y_shm.region(), y_shm.offset_bytes());
      state->y = HostArray();
      state->y_span = ShmSpan();  // the mapping may go now (the region may be unregistered)
    } else {
      ToProto(std::move(state->y), response->mutable_y());
    }
    FillExecutionInfo(report, total, response->mutable_info());
    return Send(answer, nullptr);
  });
}

// The direct path (fresnel/interp/into.h) of Upfirdn and ResamplePoly when x or y lies in a
// region: x is read where it lies (a region, or the request's own bytes) and y written straight
// into its region (or one new array for an inline answer) — no copy region -> HostArray ->
// device -> HostArray -> region, nothing zero-filled, DMA when the region is pinned.
struct DirectX {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  ShmSpan span;   // x in a region or a staging buffer (span.keepalive holds its mapping)
  HostArray own;  // or x inline, moved out of the request
  // x inline and `span` a staging buffer: the received bytes, copied into span when the job runs.
  std::shared_ptr<const v1::InlineArrayRequest> pending;
  int cuda_device = -1;  // >= 0: span is device memory of that ordinal (a CUDA IPC region)
  const void* data() const { return span.keepalive != nullptr ? span.data : own.raw(); }
};

// x for the direct path, when the call may take it: nullopt = use the HostArray path (x or y in
// a region without a resolver, or both inline without a staging pool). Errors name the field as
// FromProto's.
absl::StatusOr<std::optional<DirectX>> DirectInput(const v1::NdArray& x, bool has_y_shm,
                                                   const ShmResolver& resolver,
                                                   const ShmRegistry* staging) {
  const bool any_region = x.has_shm() || has_y_shm;
  if (any_region ? !resolver : staging == nullptr) return std::optional<DirectX>();
  DirectX d;
  FRESNEL_ASSIGN_OR_RETURN(d.dtype, FromProto(x.dtype(), "x"));
  d.shape.assign(x.shape().begin(), x.shape().end());
  FRESNEL_RETURN_IF_ERROR(ArrayBytes(x.dtype(), d.shape, "x.shape").status());
  return std::optional<DirectX>(std::move(d));
}

// Resolves or takes x's bytes once the call is known to go the direct way. An inline x of a raw
// request (`raw`, whose message holds x without its data) gets a staging buffer from `staging`
// when there is one and it has room; it is copied there by the job (BindX only checks its size).
template <class Request>
absl::Status BindX(const ShmResolver& resolver, const PlacedResolver& placed,
                   ShmRegistry* staging, const std::shared_ptr<RawRequest<Request>>& raw,
                   DirectX* d) {
  const v1::NdArray& x = raw->msg.x();
  FRESNEL_ASSIGN_OR_RETURN(const int64_t nbytes, ArrayBytes(x.dtype(), d->shape, "x.shape"));
  if (!x.has_shm()) {
    if (staging != nullptr && nbytes >= kMinStagedBytes) {
      if (raw->x.data_bytes() != nbytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("x.data has ", raw->x.data_bytes(), " bytes but x.shape of ",
                         DTypeName(d->dtype), " needs ", nbytes));
      }
      absl::StatusOr<ShmSpan> span = staging->AcquireStaging(nbytes);
      if (span.ok()) {
        d->span = *std::move(span);
        d->pending = std::shared_ptr<const v1::InlineArrayRequest>(raw, &raw->x);
        return absl::OkStatus();
      }  // --shm-bytes is full: x stays pageable
    }
    raw->MaterializeX();
    FRESNEL_ASSIGN_OR_RETURN(d->own, TakeX(x, resolver));
    return absl::OkStatus();
  }
  if (!x.data().empty() || raw->x.data_bytes() > 0) {
    return absl::InvalidArgumentError("x: set data or shm, not both");
  }
  if (placed) {
    FRESNEL_ASSIGN_OR_RETURN(PlacedSpan span, placed(x.shm(), nbytes, "x.shm"));
    d->span = std::move(span.span);
    d->cuda_device = span.cuda_device;
    return absl::OkStatus();
  }
  FRESNEL_ASSIGN_OR_RETURN(d->span, resolver(x.shm(), nbytes, "x.shm"));
  return absl::OkStatus();
}

// The answer's size on the direct path: x's dtype, `samples` along the (normalised) axis.
OutputSize DirectOutput(const DirectX& x, int axis, int64_t samples) {
  OutputSize out;
  for (int d = 0; d < static_cast<int>(x.shape.size()); ++d) {
    if (d != axis) out.channels *= x.shape[d];
  }
  out.samples = samples;
  out.dtype = x.dtype;
  return out;
}
int NormalAxis(const DirectX& x, int axis) {
  return axis < 0 ? axis + static_cast<int>(x.shape.size()) : axis;
}

using DirectCompute =
    std::function<absl::Status(const Device&, const interp::HostSignalRef&, void* y,
                               int64_t y_bytes, StageTimes*, const interp::IntoOptions&)>;

// SubmitOneShot for the direct path: y goes to y_shm's span when set, else into a staging buffer
// that is sent as the inline answer (raw methods, when the staging pool has room), else into one
// array that becomes the inline answer.
void SubmitDirect(ServiceContext* ctx, UnaryJobCall* call, DirectX x, const OutputSize& out,
                  int axis, int64_t device_bytes, const v1::DeviceHint& hint, const std::string& request_id,
                  const ShmResolver& resolver, const PlacedResolver& placed, bool has_y_shm,
                  const v1::ShmRef& y_shm, const Answer& answer, DirectCompute compute) {
  std::optional<Accepted> accepted =
      AcceptOneShot(ctx, call, out, hint, resolver, has_y_shm, y_shm, &placed);
  if (!accepted) return;
  std::vector<int64_t> y_shape = x.shape;
  const int nd = static_cast<int>(y_shape.size());
  y_shape[axis < 0 ? axis + nd : axis] = out.samples;
  const int64_t x_bytes = ShapeElements(x.shape) * static_cast<int64_t>(DTypeSize(x.dtype));
  const int64_t y_bytes = out.channels * out.samples * static_cast<int64_t>(DTypeSize(out.dtype));
  Metrics* metrics = ctx->metrics;
  if (metrics) metrics->AddPayload(kService, call->method(), "in", static_cast<double>(x_bytes));
  v1::InterpolationResponse* response = answer.msg;
  response->set_request_id(RequestIdOr(request_id));
  struct State {
    DirectX x;
    ShmSpan y_span;
    ShmSpan y_staged;  // the inline answer in a staging buffer (raw methods)
    HostArray y;       // or in an array
  };
  auto state = std::make_shared<State>();
  state->x = std::move(x);
  state->y_span = std::move(accepted->y_span);
  if (state->y_span.keepalive == nullptr && answer.raw != nullptr && ctx->shm != nullptr &&
      y_bytes >= kMinStagedBytes) {
    absl::StatusOr<ShmSpan> staged = ctx->shm->AcquireStaging(y_bytes);
    if (staged.ok()) state->y_staged = *std::move(staged);  // else: --shm-bytes is full
  }
  auto job = std::make_shared<Job>();
  job->preference = accepted->preference;
  job->device_bytes = device_bytes;  // the kernel's <Op>DeviceBytes
  interp::IntoOptions into;
  into.x_cuda_device = state->x.cuda_device;
  into.y_cuda_device = accepted->y_cuda_device;
  into.overlap_chunk_bytes = ctx->shm != nullptr ? ctx->shm->overlap_chunk_bytes() : 0;
  // A CUDA IPC region is device memory of one device: the call runs there (x's when x and y lie
  // on different devices; y then moves by one peer copy).
  const int home = into.x_cuda_device >= 0 ? into.x_cuda_device : into.y_cuda_device;
  if (home >= 0) job->affinity = absl::StrCat("cuda:", home);
  job->run = [state, y_shape, y_bytes, into, compute = std::move(compute)](
                 const Device& device, StageTimes* times) -> absl::Status {
    double staging_s = 0;
    if (state->x.pending != nullptr) {
      // x from the received slices into its (pinned) staging buffer, on several cores: this and
      // the DMA that follows are the host-to-device leg, reported together as h2d. All of it
      // before the first chunk: gathering each chunk's part just before its H2D
      // (IntoOptions::x_prefix_ready) measured slower on the H200, 55.9 ms against 28.8 for
      // issue 10's case (docs/BENCHMARKS.md, session 9; why is not measured).
      const Clock::time_point t0 = Clock::now();
      std::vector<BytePiece> pieces;
      for (const v1::InlineArrayRequest::Piece& p : state->x.pending->DataPieces()) {
        pieces.push_back({p.data, p.size});
      }
      GatherBytes(pieces, state->x.span.data);
      state->x.pending.reset();
      staging_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    interp::HostSignalRef ref{state->x.dtype, state->x.shape, state->x.data()};
    void* y = nullptr;
    if (state->y_span.keepalive != nullptr) {
      y = state->y_span.data;
    } else if (state->y_staged.keepalive != nullptr) {
      y = state->y_staged.data;
    } else {
      state->y = HostArray(state->x.dtype, y_shape);
      y = state->y.raw();
    }
    FRESNEL_RETURN_IF_ERROR(compute(device, ref, y, y_bytes, times, into));
    if (times != nullptr) times->h2d_s += staging_s;
    state->x = DirectX();  // the input (and its region's mapping) is no longer needed
    return absl::OkStatus();
  };
  std::string method = call->method();
  const DType y_dtype = out.dtype;
  call->Start(std::move(job), [state, answer, response, metrics, method, y_shm, y_shape, y_bytes,
                               y_dtype](const JobReport& report, double total) {
    if (metrics) metrics->AddPayload(kService, method, "out", static_cast<double>(y_bytes));
    if (state->y_span.keepalive != nullptr) {
      *response->mutable_y() = ShmArray(y_dtype, y_shape, y_shm.region(), y_shm.offset_bytes());
      state->y_span = ShmSpan();  // the mapping may go now (the region may be unregistered)
    } else if (state->y_staged.keepalive != nullptr) {
      v1::NdArray* y = response->mutable_y();  // dtype and shape; the bytes follow as a slice
      y->set_dtype(ToProto(y_dtype));
      for (int64_t d : y_shape) y->add_shape(d);
    } else {
      ToProto(std::move(state->y), response->mutable_y());
    }
    FillExecutionInfo(report, total, response->mutable_info());
    absl::Status sent = Send(answer, &state->y_staged);
    state->y_staged = ShmSpan();  // the slice holds the buffer until gRPC has sent it
    return sent;
  });
}

}  // namespace

grpc::ServerUnaryReactor* InterpolationService::Upfirdn(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw_request,
                                                        grpc::ByteBuffer* raw_response) {
  auto* call = new UnaryJobCall(ctx_, context, kService, "Upfirdn");
  auto raw = std::make_shared<RawRequest<v1::UpfirdnRequest>>();
  absl::Status wire = raw->x.Parse(*raw_request, v1::UpfirdnRequest::kXFieldNumber, "request",
                                   &raw->msg);
  if (!wire.ok()) {
    call->Reject(wire);
    return call;
  }
  const v1::UpfirdnRequest* request = &raw->msg;
  const Answer response = RawAnswer(raw_response);
  const ShmResolver resolver = ResolverOf(ctx_, context);
  auto parsed = ParseUpfirdn(*request, limits_, resolver);
  const PlacedResolver placed = PlacedResolverOf(ctx_, context);
  if (parsed.ok()) {
    absl::StatusOr<std::optional<DirectX>> direct =
        DirectInput(request->x(), request->has_y_shm(), resolver, ctx_->shm);
    absl::Status st = direct.status();
    if (st.ok() && direct->has_value() &&
        interp::UpfirdnIntoSupported((*direct)->dtype, (*direct)->shape, parsed->options)) {
      DirectX& x = **direct;
      st = interp::ValidateUpfirdnShape(parsed->taps, x.dtype, x.shape, parsed->options,
                                        limits_);
      if (st.ok()) st = BindX(resolver, placed, ctx_->shm, raw, &x);
      if (st.ok()) {
        const int axis = NormalAxis(x, parsed->options.axis);
        const OutputSize out = DirectOutput(
            x, axis,
            interp::UpfirdnOutputLength(x.shape[axis], static_cast<int64_t>(parsed->taps.size()),
                                        parsed->options.up, parsed->options.down));
        const int64_t device_bytes = interp::UpfirdnDeviceBytes(
            x.dtype, out.channels, x.shape[axis], static_cast<int64_t>(parsed->taps.size()),
            parsed->options);
        SubmitDirect(ctx_, call, std::move(x), out, axis, device_bytes, request->device(),
                     request->request_id(), resolver, placed, request->has_y_shm(),
                     request->y_shm(), response,
                     [p = std::move(*parsed)](const Device& device,
                                              const interp::HostSignalRef& in, void* y,
                                              int64_t y_bytes, StageTimes* times,
                                              const interp::IntoOptions& into) {
                       return interp::UpfirdnInto(device, p.taps, in, p.options, y, y_bytes,
                                                  times, into);
                     });
        return call;
      }
    }
    if (!st.ok()) {
      call->Reject(st);
      return call;
    }
  }
  raw->MaterializeX();
  absl::StatusOr<HostArray> x = parsed.ok() ? TakeX(request->x(), resolver) : parsed.status();
  absl::Status valid = x.status();
  if (valid.ok()) {
    valid = interp::ValidateUpfirdn(parsed->taps, *x, parsed->options, limits_);
  }
  if (!valid.ok()) {
    call->Reject(valid);
    return call;
  }
  const AxisSplit split = SplitAt(*x, parsed->options.axis);
  OutputSize out;
  out.channels = split.channels;
  out.samples = interp::UpfirdnOutputLength(split.len, static_cast<int64_t>(parsed->taps.size()),
                                            parsed->options.up, parsed->options.down);
  out.dtype = interp::UpfirdnResultDType(x->dtype(), parsed->options);
  const int64_t device_bytes =
      interp::UpfirdnDeviceBytes(x->dtype(), split.channels, split.len,
                                 static_cast<int64_t>(parsed->taps.size()), parsed->options);
  SubmitOneShot(ctx_, call, std::move(*x), out, device_bytes, request->device(),
                request->request_id(), resolver, request->has_y_shm(), request->y_shm(), response,
                [p = std::move(*parsed)](const Device& device, const HostArray& in,
                                         StageTimes* times) {
                  return interp::Upfirdn(device, p.taps, in, p.options, times);
                });
  return call;
}

grpc::ServerUnaryReactor* InterpolationService::ResamplePoly(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request,
    grpc::ByteBuffer* raw_response) {
  auto* call = new UnaryJobCall(ctx_, context, kService, "ResamplePoly");
  auto raw = std::make_shared<RawRequest<v1::ResamplePolyRequest>>();
  absl::Status wire = raw->x.Parse(*raw_request, v1::ResamplePolyRequest::kXFieldNumber,
                                   "request", &raw->msg);
  if (!wire.ok()) {
    call->Reject(wire);
    return call;
  }
  const v1::ResamplePolyRequest* request = &raw->msg;
  const Answer response = RawAnswer(raw_response);
  const ShmResolver resolver = ResolverOf(ctx_, context);
  auto options = ParseResamplePoly(*request, resolver);
  const PlacedResolver placed = PlacedResolverOf(ctx_, context);
  if (options.ok()) {
    absl::StatusOr<std::optional<DirectX>> direct =
        DirectInput(request->x(), request->has_y_shm(), resolver, ctx_->shm);
    absl::Status st = direct.status();
    if (st.ok() && direct->has_value() &&
        interp::ResamplePolyIntoSupported((*direct)->dtype, (*direct)->shape, *options)) {
      DirectX& x = **direct;
      st = interp::ValidateResamplePolyShape(x.dtype, x.shape, *options, limits_);
      if (st.ok()) st = BindX(resolver, placed, ctx_->shm, raw, &x);
      if (st.ok()) {
        const int axis = NormalAxis(x, options->axis);
        const OutputSize out = DirectOutput(
            x, axis, interp::ResamplePolyOutputLength(x.shape[axis], options->up, options->down));
        const int64_t device_bytes =
            interp::ResamplePolyDeviceBytes(x.dtype, out.channels, x.shape[axis], *options);
        SubmitDirect(ctx_, call, std::move(x), out, axis, device_bytes, request->device(),
                     request->request_id(), resolver, placed, request->has_y_shm(),
                     request->y_shm(), response,
                     [o = std::move(*options)](const Device& device,
                                               const interp::HostSignalRef& in, void* y,
                                               int64_t y_bytes, StageTimes* times,
                                               const interp::IntoOptions& into) {
                       return interp::ResamplePolyInto(device, in, o, y, y_bytes, times, into);
                     });
        return call;
      }
    }
    if (!st.ok()) {
      call->Reject(st);
      return call;
    }
  }
  raw->MaterializeX();
  absl::StatusOr<HostArray> x = options.ok() ? TakeX(request->x(), resolver) : options.status();
  absl::Status valid = x.status();
  if (valid.ok()) valid = interp::ValidateResamplePoly(*x, *options, limits_);
  if (!valid.ok()) {
    call->Reject(valid);
    return call;
  }
  const AxisSplit split = SplitAt(*x, options->axis);
  OutputSize out;
  out.channels = split.channels;
  out.samples = interp::ResamplePolyOutputLength(split.len, options->up, options->down);
  out.dtype = interp::ResamplePolyResultDType(x->dtype(), *options);
  const int64_t device_bytes =
      interp::ResamplePolyDeviceBytes(x->dtype(), split.channels, split.len, *options);
  SubmitOneShot(ctx_, call, std::move(*x), out, device_bytes, request->device(),
                request->request_id(), resolver, request->has_y_shm(), request->y_shm(), response,
                [o = std::move(*options)](const Device& device, const HostArray& in,
                                          StageTimes* times) {
                  return interp::ResamplePoly(device, in, o, times);
                });
  return call;
}

grpc::ServerUnaryReactor* InterpolationService::Resample(grpc::CallbackServerContext* context,
                                                         const v1::ResampleRequest* request,
                                                         v1::InterpolationResponse* response) {
  auto* call = new UnaryJobCall(ctx_, context, kService, "Resample");
  absl::StatusOr<interp::ResampleOptions> parsed = ParseResample(*request);
  const interp::ResampleOptions options = parsed.ok() ? *parsed : interp::ResampleOptions{};
  const ShmResolver resolver = ResolverOf(ctx_, context);
  absl::StatusOr<HostArray> x = parsed.ok() ? TakeX(request->x(), resolver) : parsed.status();
  absl::Status valid = x.status();
  if (valid.ok()) valid = interp::ValidateResample(*x, options, limits_);
  if (!valid.ok()) {
    call->Reject(valid);
    return call;
  }
  const AxisSplit split = SplitAt(*x, options.axis);
  OutputSize out;
  out.channels = split.channels;
  out.samples = options.num;
  out.dtype = interp::ResampleResultDType(x->dtype());
  const int64_t device_bytes =
      interp::ResampleDeviceBytes(x->dtype(), split.channels, split.len, options);
  SubmitOneShot(ctx_, call, std::move(*x), out, device_bytes, request->device(),
                request->request_id(), resolver, false, v1::ShmRef(), Answer{response},
                [options](const Device& device, const HostArray& in, StageTimes* times) {
                  return interp::Resample(device, in, options, times);
                });
  return call;
}

grpc::ServerUnaryReactor* InterpolationService::Decimate(grpc::CallbackServerContext* context,
                                                         const v1::DecimateRequest* request,
                                                         v1::InterpolationResponse* response) {
  auto* call = new UnaryJobCall(ctx_, context, kService, "Decimate");
  interp::DecimateOptions options;
  options.q = request->q();
  options.n = request->n();
  options.zero_phase = request->has_zero_phase() ? request->zero_phase() : true;
  options.axis = request->has_axis() ? request->axis() : -1;
  const ShmResolver resolver = ResolverOf(ctx_, context);
  absl::StatusOr<HostArray> x = TakeX(request->x(), resolver);
  absl::Status valid = x.status();
  if (valid.ok()) valid = interp::ValidateDecimate(*x, options, limits_);
  if (!valid.ok()) {
    call->Reject(valid);
    return call;
  }
  const AxisSplit split = SplitAt(*x, options.axis);
  OutputSize out;
  out.channels = split.channels;
  out.samples = interp::DecimateOutputLength(split.len, options.q);
  out.dtype = interp::DecimateResultDType(x->dtype());
  const int64_t device_bytes =
      interp::DecimateDeviceBytes(x->dtype(), split.channels, split.len, options);
  SubmitOneShot(ctx_, call, std::move(*x), out, device_bytes, request->device(),
                request->request_id(), resolver, false, v1::ShmRef(), Answer{response},
                [options](const Device& device, const HostArray& in, StageTimes* times) {
                  return interp::Decimate(device, in, options, times);
                });
  return call;
}

namespace {

// One ResampleStream call, pipelined on OrderedStream (server/rpc/ordered_stream.h): up to
// kStreamReadAhead messages are read and converted while earlier chunks compute and their
// answers are written, so receiving chunk i+1, filtering chunk i and sending chunk i-1 overlap
// (it used to read the next message only after the last answer was written). The chunks' jobs
// still run one at a time, in order: the resampler (the delay line) is touched by one job at a
// time. Memory per stream: at most kStreamReadAhead chunks and their answers.
constexpr int kStreamReadAhead = 3;
// A CUDA chunk's job cuts its call into windows of at most this many bytes of y (no more than
// --overlap-chunk-bytes; 0 there turns it off) so that their H2D, kernels and D2H overlap: stream
// chunks are a few MiB, well under the one-shot calls' 32 MiB windows.
constexpr int64_t kStreamOverlapBytes = int64_t{4} << 20;

// A stream's kept page-locked buffers (issue 10 item 3): taken from the server's staging pool
// (ShmRegistry::AcquireStaging: counted in --shm-bytes while held, back to the staging cache when
// dropped), handed to a chunk's job and given back when it is done with them, so a stream of
// equal chunks pins its buffers once. At most kKeep are kept between chunks.
class StagingRing {
 public:
  // The smallest kept buffer of at least `bytes`, else a new one from `shm` (RESOURCE_EXHAUSTED
  // when --shm-bytes is full).
  absl::StatusOr<ShmSpan> Take(ShmRegistry* shm, int64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = spans_.end();
      for (auto it = spans_.begin(); it != spans_.end(); ++it) {
        if (it->size >= bytes && (best == spans_.end() || it->size < best->size)) best = it;
      }
      if (best != spans_.end()) {
        ShmSpan span = std::move(*best);
        spans_.erase(best);
        return span;
      }
    }
    return shm->AcquireStaging(bytes);
  }
  void Give(ShmSpan span) {
    if (span.keepalive == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    spans_.push_back(std::move(span));
    if (spans_.size() > kKeep) {  // the smallest goes back to the server's cache
      auto smallest = std::min_element(
          spans_.begin(), spans_.end(),
          [](const ShmSpan& a, const ShmSpan& b) { return a.size < b.size; });
      spans_.erase(smallest);
    }
  }

 private:
  static constexpr size_t kKeep = 4;  // x and y of one chunk, and room for a change of size
  std::mutex mu_;
  std::vector<ShmSpan> spans_;
};

class ResampleStreamCall
    : public OrderedStream<v1::ResampleStreamRequest, v1::ResampleStreamResponse> {
 public:
  ResampleStreamCall(ServiceContext* ctx, const interp::Limits& limits,
                     grpc::CallbackServerContext* context)
      : OrderedStream(ctx->metrics, kService, "ResampleStream", kStreamReadAhead),
        ctx_(ctx),
        limits_(limits),
        context_(context),
        resolver_(ResolverOf(ctx, context)) {
    absl::Status slot = ReserveStream(ctx, context, "a ResampleStream", &stream_slot_);
    if (slot.ok() && ctx->drain != nullptr) {
      // SIGTERM's drain timeout: a stream waiting for its client's next message ends at once; one
      // with chunks in flight has them cancelled and ends when the running job completes.
      slot = ctx->drain->Register("ResampleStream", [this](const absl::Status& st) { Abort(st); },
                                  &ticket_);
    }
    if (!slot.ok()) {
      End(slot);  // nothing read: finishes at once
      return;
    }
    StartReading();
  }

 private:
  // A chunk read and converted, waiting for the job before it.
  struct Pending {
    int64_t seq = 0;
    int64_t index = -1;  // the response's chunk_index (-1: an end without a chunk)
    std::optional<HostArray> chunk;
    bool end = false;
    Clock::time_point received;
  };

  void OnRequest(int64_t seq, v1::ResampleStreamRequest* request) override {
    if (end_seen_) {  // messages after the end are not read (as before: the stream was over)
      Skip(seq);
      return;
    }
    if (!resampler_) {
      if (request->msg_case() != v1::ResampleStreamRequest::kConfig) {
        Fail(seq, absl::InvalidArgumentError("config: the first message must carry config"));
        return;
      }
      absl::Status st = Configure(request->config());
      if (!st.ok()) {
        Fail(seq, st);
        return;
      }
      if (request->end()) {
        end_seen_ = true;
        Enqueue(Pending{seq, -1, std::nullopt, true, Clock::now()});
      } else {
        Skip(seq);  // the config has no answer of its own
      }
      return;
    }
    if (request->msg_case() == v1::ResampleStreamRequest::kConfig) {
      Fail(seq, absl::InvalidArgumentError("config: only the first message may carry config"));
      return;
    }
    Pending p;
    p.seq = seq;
    p.received = Clock::now();
    p.end = request->end();
    if (request->msg_case() == v1::ResampleStreamRequest::kChunk) {
      auto a = FromProto(std::move(*request->mutable_chunk()), "chunk", resolver_);
      if (!a.ok()) {
        Fail(seq, a.status());
        return;
      }
      int64_t k = a->ndim() > 0 ? a->shape().back() : 0;
      const int64_t out_estimate = resampler_->MaxPushOutputSamples(k);
      absl::Status fits = CheckResponseFits(resampler_->channels(), out_estimate, a->dtype(),
                                            ctx_->max_message_bytes, "send smaller chunks");
      if (!fits.ok()) {
        Fail(seq, fits);
        return;
      }
      p.chunk = std::move(*a);
      p.index = chunks_read_++;
    } else if (!p.end) {
      Fail(seq, absl::InvalidArgumentError("chunk: a message needs a chunk or end"));
      return;
    }
    end_seen_ = p.end;
    Enqueue(std::move(p));
  }

  void OnHalfClose() override {
    if (end_seen_) return;  // the end's job finishes the stream
    if (!resampler_) {
      End(absl::InvalidArgumentError(
          "config: the stream ended before a config message (or it could not be parsed)"));
      return;
    }
    // No `end` came. gRPC reports a message it could not parse the same way as a half-close,
    // so this is never taken for the end of the signal: the outputs sent may be incomplete.
    End(absl::InvalidArgumentError(absl::StrCat(
        "end: the stream closed after ", chunks_read_,
        " chunk(s) without a message that sets end: it was cut short or a message could not "
        "be parsed, so the outputs sent may be incomplete")));
  }

  void OnAbort() override {
    std::deque<Pending> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      dropped.swap(queue_);
    }
    slot_.Cancel();
    for (const Pending& p : dropped) Skip(p.seq);
  }

  void OnStreamDone() override { ticket_.Close(); }

  // Ends the stream with `status` after the answers before `seq`; `seq` itself has none.
  void Fail(int64_t seq, const absl::Status& status) {
    End(status);
    Skip(seq);
  }

  absl::Status Configure(const v1::ResampleStreamConfig& config) {
    request_id_ = RequestIdOr(config.request_id());
    const v1::NdArray* x = nullptr;
    if (config.op_case() == v1::ResampleStreamConfig::kUpfirdn) {
      FRESNEL_ASSIGN_OR_RETURN(UpfirdnCall call,
                               ParseUpfirdn(config.upfirdn(), limits_, resolver_));
      x = &config.upfirdn().x();
      FRESNEL_ASSIGN_OR_RETURN(DType dtype, FromProto(x->dtype(), "config.upfirdn.x"));
      int64_t channels = x->shape_size() == 2 ? x->shape(0) : 1;
      FRESNEL_ASSIGN_OR_RETURN(
          auto r, interp::StreamingResampler::ForUpfirdn(std::move(call.taps), call.options,
                                                         channels, dtype, limits_));
      resampler_.emplace(std::move(r));
      FRESNEL_ASSIGN_OR_RETURN(preference_,
                               PreferenceOf(config.upfirdn().device(), "config.upfirdn.device"));
    } else if (config.op_case() == v1::ResampleStreamConfig::kResamplePoly) {
      FRESNEL_ASSIGN_OR_RETURN(interp::ResamplePolyOptions opts,
                               ParseResamplePoly(config.resample_poly(), resolver_));
      x = &config.resample_poly().x();
      FRESNEL_ASSIGN_OR_RETURN(DType dtype, FromProto(x->dtype(), "config.resample_poly.x"));
      int64_t channels = x->shape_size() == 2 ? x->shape(0) : 1;
      FRESNEL_ASSIGN_OR_RETURN(auto r, interp::StreamingResampler::ForResamplePoly(
                                           opts, channels, dtype, limits_));
      resampler_.emplace(std::move(r));
      FRESNEL_ASSIGN_OR_RETURN(
          preference_, PreferenceOf(config.resample_poly().device(), "config.resample_poly.device"));
    } else {
      return absl::InvalidArgumentError("config: set upfirdn or resample_poly");
    }
    // The filter and the delay line of every channel live as long as the stream: charged before
    // the first chunk is accepted.
    return ReserveIn(ctx_->stream_state_bytes, resampler_->StateBytes(),
                     "this ResampleStream's filter and delay line", &state_);
  }

  // Runs `p` now when no job is running, else after the ones before it.
  void Enqueue(Pending p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) {
        Skip(p.seq);
        return;
      }
      if (running_) {
        queue_.push_back(std::move(p));
        return;
      }
      running_ = true;
    }
    RunChunk(std::move(p));
  }

  // The next queued chunk's job, from the completion of the one before; false when none is
  // queued (running_ is then false).
  bool RunNext() {
    std::optional<Pending> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() || stopped_) {
        running_ = false;
        return false;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    RunChunk(*std::move(next));
    return true;
  }

  void RunChunk(Pending p) {
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = "ResampleStream";
    job->preference = preference_;
    job->deadline = DeadlineOf(context_);
    auto input = std::make_shared<std::optional<HostArray>>(std::move(p.chunk));
    auto output = std::make_shared<HostArray>();
    if (input->has_value()) {
      const int64_t k = (*input)->ndim() > 0 ? (*input)->shape().back() : 0;
      job->device_bytes = resampler_->PushDeviceBytes(k);
    }
    const bool end = p.end;
    const int64_t seq = p.seq, index = p.index;
    const Clock::time_point received = p.received;
    job->run = [this, input, output, end](const Device& device, StageTimes* times) -> absl::Status {
      HostArray y;
      if (input->has_value()) {
        FRESNEL_ASSIGN_OR_RETURN(y, PushChunk(device, **input, times));
        input->reset();  // the chunk is consumed: free it before the answer is built
      }
      if (end) {
        StageTimes tail_times;
        FRESNEL_ASSIGN_OR_RETURN(HostArray tail, resampler_->Finish(device, &tail_times));
        y = y.ndim() > 0 ? ConcatLastAxis(y, tail) : std::move(tail);
        times->h2d_s += tail_times.h2d_s;
        times->compute_s += tail_times.compute_s;
        times->d2h_s += tail_times.d2h_s;
      }
      *output = std::move(y);
      return absl::OkStatus();
    };
    job->done = [this, output, end, seq, index, received, raw = job.get()](
                    const absl::Status& status, const JobReport& report) {
      slot_.Remove(raw);
      if (!status.ok()) {
        // The delay line may be half-updated: no later chunk may run.
        OnAbort();
        Fail(seq, status);  // the last touch of `this`
        return;
      }
      v1::ResampleStreamResponse response;
      response.set_request_id(request_id_);
      response.set_chunk_index(index);
      ToProto(std::move(*output), response.mutable_y());
      response.set_samples_out(resampler_->samples_out());
      double total = std::chrono::duration<double>(Clock::now() - received).count();
      FillExecutionInfo(report, total, response.mutable_info());
      ToItemStatus(absl::OkStatus(), response.mutable_status());
      // The next job starts before this answer is given: while it is outstanding the stream
      // cannot finish, so `this` stays valid here. Answer / End are the last touches.
      if (end) {
        End(absl::OkStatus());
      } else {
        RunNext();
      }
      Answer(seq, std::move(response));
    };
    job->continues_call = true;  // a stream open when a drain began may go on
    absl::Status submitted = slot_.Submit(ctx_->pool, job);
    if (!submitted.ok()) {
      OnAbort();
      Fail(seq, submitted);
    }
  }

  // One chunk's outputs. On CUDA, chunks of at least kMinStagedBytes go through the stream's
  // staging ring: gathered (on all cores) into a page-locked buffer, one DMA up, the kernel, one
  // DMA down into another, then copied into an answer array that is not zero-filled first (the
  // D2H used to read the chunk's pageable bytes and write a fresh zero-filled array). The ring's
  // gather counts as h2d, the copy out as d2h. Elsewhere, or when --shm-bytes is full, Push. The
  // same bits either way (StreamingResampler::PushInto).
  absl::StatusOr<HostArray> PushChunk(const Device& device, const HostArray& chunk,
                                      StageTimes* times) {
    if (device.kind != DeviceKind::kCuda || ctx_->shm == nullptr ||
        static_cast<int64_t>(chunk.nbytes()) < kMinStagedBytes) {
      return resampler_->Push(device, chunk, times);
    }
    const int64_t es = static_cast<int64_t>(DTypeSize(chunk.dtype()));
    const int64_t k = chunk.ndim() > 0 ? chunk.shape().back() : 0;
    const int64_t y_room = resampler_->channels() * resampler_->MaxPushOutputSamples(k) * es;
    absl::StatusOr<ShmSpan> xs = ring_.Take(ctx_->shm, static_cast<int64_t>(chunk.nbytes()));
    absl::StatusOr<ShmSpan> ys =
        xs.ok() ? ring_.Take(ctx_->shm, std::max<int64_t>(y_room, 1)) : xs.status();
    if (!ys.ok()) {  // --shm-bytes is full: the pageable way
      if (xs.ok()) ring_.Give(*std::move(xs));
      return resampler_->Push(device, chunk, times);
    }
    const Clock::time_point t0 = Clock::now();
    GatherBytes({{static_cast<const char*>(chunk.raw()), chunk.nbytes()}}, xs->data);
    const double gather_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const interp::HostSignalRef ref{chunk.dtype(), chunk.shape(), xs->data};
    const int64_t overlap = std::min(ctx_->shm->overlap_chunk_bytes(), kStreamOverlapBytes);
    absl::StatusOr<int64_t> count =
        resampler_->PushInto(device, ref, ys->data, ys->size, times, overlap);
    ring_.Give(*std::move(xs));
    if (!count.ok()) {
      ring_.Give(*std::move(ys));
      return count.status();
    }
    std::vector<int64_t> shape = chunk.shape();
    shape.back() = *count;
    HostArray y = UninitializedArray(chunk.dtype(), shape, FirstTouch::kOnWrite);
    const Clock::time_point t1 = Clock::now();
    GatherBytes({{ys->data, y.nbytes()}}, static_cast<char*>(y.raw()));
    const double copy_s = std::chrono::duration<double>(Clock::now() - t1).count();
    ring_.Give(*std::move(ys));
    if (times != nullptr) {
      times->h2d_s += gather_s;
      times->d2h_s += copy_s;
    }
    return y;
  }

  ServiceContext* ctx_;
  const interp::Limits limits_;
  grpc::CallbackServerContext* context_;
  ShmResolver resolver_;  // chunks may lie in the client's shared-memory regions
  StagingRing ring_;      // page-locked buffers for the chunks' jobs (PushChunk)
  StreamSlot stream_slot_;
  Budget::Reservation state_;
  // Configured by the first message (on a gRPC thread, before any job); then used by one job at
  // a time.
  std::optional<interp::StreamingResampler> resampler_;
  DevicePreference preference_ = DevicePreference::kAny;
  std::string request_id_;
  // OnRequest / OnHalfClose only (gRPC calls them one at a time, in order).
  int64_t chunks_read_ = 0;
  bool end_seen_ = false;
  JobSlot slot_;  // the job in flight, for cancellation
  std::mutex mu_;
  std::deque<Pending> queue_;  // read, waiting for the running job
  bool running_ = false;       // a chunk's job is submitted and not complete
  bool stopped_ = false;       // aborted or failed: queued chunks are dropped, no new job runs
  DrainGate::Ticket ticket_;   // while open (server/drain.h)
};

}  // namespace

grpc::ServerBidiReactor<v1::ResampleStreamRequest, v1::ResampleStreamResponse>*
InterpolationService::ResampleStream(grpc::CallbackServerContext* context) {
  return new ResampleStreamCall(ctx_, limits_, context);
}

}  // namespace fresnel::server
