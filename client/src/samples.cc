// Sample-axis slicing and concatenation for streamed signals ([n] or [channels, n], row-major).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/client/client.h"

namespace fresnel {
namespace {

absl::Status CheckSignalRank(const HostArray& x, const char* field) {
  if (x.ndim() != 1 && x.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected shape [n] or [channels, n], got ", ShapeString(x.shape())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostArray> SliceSamples(const HostArray& x, int64_t begin, int64_t count) {
  if (absl::Status s = CheckSignalRank(x, "x"); !s.ok()) return s;
  const int64_t channels = x.ndim() == 2 ? x.dim(0) : 1;
  const int64_t n = x.dim(x.ndim() - 1);
  if (begin < 0 || count < 0 || begin > n || count > n - begin) {
    return absl::InvalidArgumentError(absl::StrCat("samples [", begin, ", ", begin + count,
                                                   ") lie outside [0, ", n, "]"));
  }
  const size_t item = DTypeSize(x.dtype());
  HostArray out(x.dtype(), {channels, count});
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t c = 0; c < channels; ++c) {
    if (count > 0) {
      std::memcpy(dst + c * count * item, src + (c * n + begin) * item, count * item);
    }
  }
  return out;
}

absl::StatusOr<HostArray> ConcatSamples(const std::vector<HostArray>& pieces, int64_t channels,
                                        DType dtype) {
  if (channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("channels must be >= 1, got ", channels));
  }
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const HostArray& p = pieces[i];
    if (absl::Status s = CheckSignalRank(p, "piece"); !s.ok()) return s;
    const int64_t rows = p.ndim() == 2 ? p.dim(0) : 1;
    if (p.dtype() != dtype || rows != channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "piece ", i, ": ", DTypeName(p.dtype()), " ", ShapeString(p.shape()), " does not match ",
          DTypeName(dtype), " with ", channels, " channel(s)"));
    }
    total += p.dim(p.ndim() - 1);
  }
  const size_t item = DTypeSize(dtype);
  HostArray out(dtype, {channels, total});
  char* dst = static_cast<char*>(out.raw());
  int64_t offset = 0;
  for (const HostArray& p : pieces) {
    const int64_t k = p.dim(p.ndim() - 1);
    const char* src = static_cast<const char*>(p.raw());
    for (int64_t c = 0; c < channels && k > 0; ++c) {
      std::memcpy(dst + (c * total + offset) * item, src + c * k * item, k * item);
    }
    offset += k;
  }
  return out;
}

int64_t StreamChunkSamples(int64_t max_message_bytes, int64_t channels, DType dtype, int up,
                           int down) {
  up = std::max(up, 1);
  down = std::max(down, 1);
  // A quarter of the cap leaves room for the framing and for the response's rounding; the
  // response of a k-sample chunk holds at most ceil(k * up / down) + taps outputs per channel.
  const double budget = static_cast<double>(std::max<int64_t>(max_message_bytes, 1)) / 4;
  const double bytes_per_sample =
      static_cast<double>(std::max<int64_t>(channels, 1) * DTypeSize(dtype));
  const double growth = std::max(1.0, static_cast<double>(up) / down);
  const double k = budget / (bytes_per_sample * growth);
  return std::max<int64_t>(1, static_cast<int64_t>(k));
}

}  // namespace fresnel
