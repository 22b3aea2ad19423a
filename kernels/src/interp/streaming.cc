// StreamingResampler: chunked upfirdn / resample_poly on the window primitive.
//
// After n input samples per channel, full-upfirdn output k is final when every input it reads is
// known: it reads s[q - m] for m in [0, P), q = floor(k*down/up), so it is final iff q <= n - 1,
// i.e. k < ceil(n*up/down). An upfirdn output must also exist in the final result,
// k < UpfirdnOutputLength(n) (monotone in n); resample_poly keeps [skip, skip + ceil(N*up/down))
// for the final N >= n, which contains every final k >= skip. The next output to emit reads
// inputs from index q - (P - 1) >= n_previous - (P - 1) onwards, so the delay line keeps the last
// P - 1 samples. (When up > L an upfirdn output can be held back although final in the sense
// above; it then reads the samples it has lost only through zero taps, so the value is the same.)
#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/interp/interp.h"
#include "fresnel/interp/into.h"
#include "interp/interp_internal.h"
#include "interp/window_internal.h"

namespace fresnel::interp {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Copies columns [from, from + count) of each row of `src` ([channels, len] view) into `dst`
// ([channels, dst_len]) starting at column dst_col.
void CopyColumns(const internal::HostSignalView& src, int64_t from, int64_t count, HostArray& dst,
                 int64_t dst_col) {
  const size_t es = DTypeSize(src.dtype);
  const int64_t dst_len = dst.dim(1);
  for (int64_t c = 0; c < src.channels; ++c) {
    const char* s = static_cast<const char*>(src.data) + (c * src.stride + from) * es;
    char* d = static_cast<char*>(dst.raw()) + (c * dst_len + dst_col) * es;
    if (count > 0) std::memcpy(d, s, static_cast<size_t>(count) * es);
  }
}

// What a stream cannot do: it filters the last axis of float or complex chunks with real taps,
// and returns the chunks' dtype.
absl::Status CheckStreamable(DType dtype, const std::vector<double>& taps_imag, int axis,
                             DTypeRule rule, DType taps_dtype) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateDType(dtype));
  if (!taps_imag.empty()) {
    return absl::InvalidArgumentError("taps_imag: a stream supports real taps only");
  }
  if (axis != -1 && axis != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, ": a stream filters the last axis of [channels, k] chunks"));
  }
  if (ResultDType(dtype, taps_dtype, rule) != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype_rule: SciPy's promotion would turn ", DTypeName(dtype), " into ",
        DTypeName(ResultDType(dtype, taps_dtype, rule)), "; a stream keeps the chunks' dtype"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StreamingResampler> StreamingResampler::ForUpfirdn(std::vector<double> taps,
                                                                  const UpfirdnOptions& options,
                                                                  int64_t channels, DType dtype,
                                                                  const Limits& limits) {
  if (channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("x.shape: a stream needs at least one channel, got ", channels));
  }
  if (options.mode != PadMode::kConstant) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode '", internal::PadModeName(options.mode),
        "' needs the whole signal; a stream supports only 'constant'"));
  }
  FRESNEL_RETURN_IF_ERROR(CheckStreamable(dtype, options.taps_imag, options.axis,
                                          options.dtype_rule, options.taps_dtype));
  FRESNEL_RETURN_IF_ERROR(ValidateUpfirdn(taps, HostArray(dtype, {channels, 0}), options, limits));
  StreamingResampler s;
  s.taps_ = std::move(taps);
  s.up_ = options.up;
  s.down_ = options.down;
  s.cval_ = options.cval;
  s.channels_ = channels;
  s.dtype_ = dtype;
  s.one_dim_ = channels == 1;
  s.history_ = HostArray(dtype, {channels, 0});
  return s;
}

absl::StatusOr<StreamingResampler> StreamingResampler::ForResamplePoly(
    const ResamplePolyOptions& options, int64_t channels, DType dtype, const Limits& limits) {
  if (channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("x.shape: a stream needs at least one channel, got ", channels));
  }
  FRESNEL_RETURN_IF_ERROR(CheckStreamable(dtype, options.taps_imag, options.axis,
                                          options.dtype_rule,
                                          options.taps.empty() ? dtype : options.taps_dtype));
  FRESNEL_RETURN_IF_ERROR(ValidateResamplePoly(HostArray(dtype, {channels, 0}), options, limits));
  if (options.padtype != PadMode::kConstant) {
    return absl::InvalidArgumentError(absl::StrCat(
        "padtype '", internal::PadModeName(options.padtype),
        "' needs the whole signal; a stream supports only 'constant'"));
  }
  FRESNEL_ASSIGN_OR_RETURN(internal::ResamplePolyDesign design,
                           internal::DesignResamplePoly(options, dtype));
  StreamingResampler s;
  s.taps_ = std::move(design.filter.taps);
  s.up_ = design.filter.up;
  s.down_ = design.filter.down;
  s.cval_ = options.cval;
  s.channels_ = channels;
  s.dtype_ = dtype;
  s.one_dim_ = channels == 1;
  s.resample_poly_ = true;
  s.skip_ = design.skip;
  s.history_ = HostArray(dtype, {channels, 0});
  return s;
}

absl::Status StreamingResampler::CheckChunk(DType dtype, const std::vector<int64_t>& shape) const {
  if (finished_) return absl::FailedPreconditionError("the stream has already finished");
  if (dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("x.dtype ", DTypeName(dtype),
                                                   " differs from the stream's ",
                                                   DTypeName(dtype_)));
  }
  const bool shape_ok = (shape.size() == 2 && shape[0] == channels_) ||
                        (shape.size() == 1 && channels_ == 1);
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "x.shape ", ShapeString(shape), " does not match the stream's ", channels_,
        channels_ == 1 ? " channel ([k] or [1, k])" : " channels ([channels, k])"));
  }
  return absl::OkStatus();
}

StreamingResampler::Step StreamingResampler::StepFor(int64_t k) const {
  const int64_t h = history_.dim(1);
  const int64_t n_new = samples_in_ + k;
  Step st;
  st.end = CeilDiv(n_new * up_, down_);
  if (!resample_poly_) {
    st.end = std::min(st.end, UpfirdnOutputLength(n_new, static_cast<int64_t>(taps_.size()), up_,
                                                  down_));
  }
  st.start = std::max(full_emitted_, skip_);
  st.count = std::max<int64_t>(st.end - st.start, 0);
  const int64_t taps_per_phase = (static_cast<int64_t>(taps_.size()) + up_ - 1) / up_;
  st.keep = std::min<int64_t>(taps_per_phase - 1, h + k);
  return st;
}

void StreamingResampler::Advance(const Step& st, const void* chunk, int64_t k, int chunk_ndim) {
  const int64_t h = history_.dim(1);
  const internal::HostSignalView in{dtype_, channels_, k, k, chunk};
  // The last st.keep samples of [delay line | chunk]: from the delay line, then from the chunk.
  const int64_t from = h + k - st.keep;
  const int64_t from_history = std::max<int64_t>(h - from, 0);
  HostArray history(dtype_, {channels_, st.keep});
  CopyColumns(internal::ViewOf(history_), std::min(from, h), from_history, history, 0);
  CopyColumns(in, std::max<int64_t>(from - h, 0), st.keep - from_history, history,
              from_history);
  history_ = std::move(history);
  full_emitted_ = std::max(full_emitted_, st.end);
  samples_in_ += k;
  samples_out_ += st.count;
  one_dim_ = chunk_ndim == 1;
}

namespace {

// The delay line followed by the chunk, as one [channels, h + k] array.
HostArray WindowOf(const HostArray& history, const internal::HostSignalView& chunk) {
  const int64_t h = history.dim(1);
  HostArray window(chunk.dtype, {chunk.channels, h + chunk.len});
  CopyColumns(internal::ViewOf(history), 0, h, window, 0);
  CopyColumns(chunk, 0, chunk.len, window, h);
  return window;
}

}  // namespace

absl::StatusOr<HostArray> StreamingResampler::Push(const Device& device, const HostArray& chunk,
                                                   StageTimes* times) {
  if (times != nullptr) *times = StageTimes{};
  FRESNEL_RETURN_IF_ERROR(CheckChunk(chunk.dtype(), chunk.shape()));
  internal::Polyphase filter{taps_, up_, down_};
  const internal::HostSignalView in = internal::ViewOf(chunk);
  const int64_t k = in.len;
  const int64_t h = history_.dim(1);
  const Step st = StepFor(k);
  HostArray y(dtype_, {channels_, st.count});
  if (st.count > 0) {
    // The window: delay line followed by the chunk, starting at input index samples_in_ - h.
    const HostArray window = WindowOf(history_, in);
    FRESNEL_ASSIGN_OR_RETURN(y, internal::UpfirdnWindow(device, filter, internal::ViewOf(window),
                                                        samples_in_ - h, cval_, st.start,
                                                        st.count, times));
  }
  Advance(st, in.data, k, chunk.ndim());
  if (one_dim_) FRESNEL_RETURN_IF_ERROR(y.Reshape({st.count}));
  return y;
}

absl::StatusOr<int64_t> StreamingResampler::PushInto(const Device& device,
                                                     const HostSignalRef& chunk, void* y,
                                                     int64_t y_bytes, StageTimes* times,
                                                     int64_t overlap_chunk_bytes) {
  if (times != nullptr) *times = StageTimes{};
  FRESNEL_RETURN_IF_ERROR(CheckChunk(chunk.dtype, chunk.shape));
  const int64_t k = chunk.shape.back();
  if (channels_ * k > 0 && chunk.data == nullptr) {
    return absl::InvalidArgumentError("x.data: null");
  }
  const Step st = StepFor(k);
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype_));
  const int64_t need = channels_ * st.count * es;
  if (need > y_bytes || (need > 0 && y == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("y: the chunk's ", st.count,
                                                   " outputs per channel need ", need,
                                                   " bytes, the buffer has ", y_bytes));
  }
  const int64_t h = history_.dim(1);
  internal::Polyphase filter{taps_, up_, down_};
  const internal::HostSignalView in{dtype_, channels_, k, k, chunk.data};
  if (st.count > 0 && device.kind == DeviceKind::kCuda) {
#if defined(FRESNEL_WITH_CUDA)
    // [delay line | chunk] goes up in two pieces straight from where they lie.
    internal::PlacedWindow w;
    w.filter = &filter;
    w.dtype = dtype_;
    w.channels = channels_;
    w.len = k;
    w.x = chunk.data;
    w.head = history_.raw();
    w.head_len = h;
    w.x_first = samples_in_ - h;
    w.cval = cval_;
    w.out_first = st.start;
    w.out_count = st.count;
    w.y = y;
    if (overlap_chunk_bytes > 0 && need >= 2 * overlap_chunk_bytes) {
      w.chunk_outputs = std::max<int64_t>(1, overlap_chunk_bytes / (channels_ * es));
    }
    FRESNEL_RETURN_IF_ERROR(internal::UpfirdnWindowCudaPlaced(device, w, times));
#else
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device.Name(), ": this build has no CUDA support"));
#endif
  } else if (st.count > 0) {
    const HostArray window = WindowOf(history_, in);
    FRESNEL_ASSIGN_OR_RETURN(HostArray out,
                             internal::UpfirdnWindow(device, filter, internal::ViewOf(window),
                                                     samples_in_ - h, cval_, st.start, st.count,
                                                     times));
    std::memcpy(y, out.raw(), static_cast<size_t>(need));
  }
  Advance(st, chunk.data, k, static_cast<int>(chunk.shape.size()));
  return st.count;
}

absl::StatusOr<HostArray> StreamingResampler::Finish(const Device& device, StageTimes* times) {
  if (finished_) return absl::FailedPreconditionError("the stream has already finished");
  if (times != nullptr) *times = StageTimes{};
  internal::Polyphase filter{taps_, up_, down_};
  const int64_t n = samples_in_;
  const int64_t end =
      resample_poly_ ? skip_ + CeilDiv(n * up_, down_)
                     : UpfirdnOutputLength(n, static_cast<int64_t>(taps_.size()), up_, down_);
  const int64_t start = std::max(full_emitted_, skip_);
  const int64_t count = std::max<int64_t>(end - start, 0);
  HostArray y(dtype_, {channels_, count});
  if (count > 0) {
    const int64_t h = history_.dim(1);
    FRESNEL_ASSIGN_OR_RETURN(y, internal::UpfirdnWindow(device, filter,
                                                        internal::ViewOf(history_), n - h, cval_,
                                                        start, count, times));
  }
  finished_ = true;
  full_emitted_ = std::max(full_emitted_, end);
  samples_out_ += count;
  history_ = HostArray(dtype_, {channels_, 0});
  if (one_dim_) FRESNEL_RETURN_IF_ERROR(y.Reshape({count}));
  return y;
}

}  // namespace fresnel::interp
