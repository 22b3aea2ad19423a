#include "fresnel/client/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "call_util.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/region_wire.h"
#include "fresnel/v1/wire_limits.h"
#include "grpcpp/support/sync_stream.h"

namespace fresnel {

using internal::ApplyDeadline;
using internal::FromGrpc;

absl::StatusOr<v1::RegisterRegionResponse> Client::RegisterRegion(
    const v1::RegisterRegionRequest& request, const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::RegisterRegionResponse response;
  grpc::Status status =
      ShmStub(0)->RegisterRegion(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::Status Client::UnregisterRegion(const std::string& name, const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::UnregisterRegionRequest request;
  request.set_name(name);
  v1::UnregisterRegionResponse response;
  return FromGrpc(
      ShmStub(0)->UnregisterRegion(&context, request, &response));
}

absl::StatusOr<v1::ListRegionsResponse> Client::ListRegions(const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::ListRegionsResponse response;
  grpc::Status status = ShmStub(0)->ListRegions(
      &context, v1::ListRegionsRequest(), &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

namespace {

template <class Request>
absl::Status PointAtRegion(Request* request, const SharedRegion& region, int64_t x_offset,
                           int64_t y_offset) {
  if (!request->x().data().empty()) {
    return absl::InvalidArgumentError(
        "x: with a shared region x carries dtype and shape only (its data must be empty)");
  }
  request->mutable_x()->mutable_shm()->set_region(region.name());
  request->mutable_x()->mutable_shm()->set_offset_bytes(x_offset);
  request->mutable_y_shm()->set_region(region.name());
  request->mutable_y_shm()->set_offset_bytes(y_offset);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::InterpolationResponse> Client::Upfirdn(v1::UpfirdnRequest request,
                                                          const SharedRegion& region,
                                                          int64_t x_offset, int64_t y_offset,
                                                          const CallOptions& call) {
  if (absl::Status st = PointAtRegion(&request, region, x_offset, y_offset); !st.ok()) return st;
  return Upfirdn(request, call);
}

absl::StatusOr<v1::InterpolationResponse> Client::ResamplePoly(v1::ResamplePolyRequest request,
                                                               const SharedRegion& region,
                                                               int64_t x_offset, int64_t y_offset,
                                                               const CallOptions& call) {
  if (absl::Status st = PointAtRegion(&request, region, x_offset, y_offset); !st.ok()) return st;
  return ResamplePoly(request, call);
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(Client* client,
                                                                   std::string name,
                                                                   int64_t size_bytes,
                                                                   const CallOptions& call) {
  if (client == nullptr) return absl::InvalidArgumentError("client: null");
  if (size_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("size_bytes: must be > 0 (got ", size_bytes, ")"));
  }
  static std::atomic<uint64_t> sequence{0};
  std::unique_ptr<SharedRegion> region(new SharedRegion());
  region->client_ = client;
  region->name_ = std::move(name);
  region->size_ = size_bytes;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    region->shm_name_ = absl::StrFormat("/fresnel-%d-%d-%08x", static_cast<int>(getpid()),
                                        sequence.fetch_add(1), std::random_device()());
    fd = shm_open(region->shm_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("shm_open('", region->shm_name_,
                                            "'): ", strerror(errno)));
  }
  // From here the destructor unlinks the object (and unmaps it once mapped).
  auto fail = [&](absl::Status status) {
    close(fd);
    return status;
  };
  if (ftruncate(fd, static_cast<off_t>(size_bytes)) != 0) {
    const int err = errno;
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("ftruncate('", region->shm_name_, "', ", size_bytes, "): ", strerror(err))));
  }
  void* addr = mmap(nullptr, static_cast<size_t>(size_bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                    fd, 0);
  if (addr == MAP_FAILED) {
    const int err = errno;
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("mmap('", region->shm_name_, "', ", size_bytes, "): ", strerror(err))));
  }
  close(fd);
  region->data_ = addr;
  v1::RegisterRegionRequest request;
  request.set_name(region->name_);
  request.set_shm_name(region->shm_name_);
  request.set_size_bytes(size_bytes);
  absl::StatusOr<v1::RegisterRegionResponse> registered = client->RegisterRegion(request, call);
  if (!registered.ok()) return registered.status();
  region->registered_ = true;
  internal::AddLiveRegion(client, region->name_, region.get());
  return region;
}

SharedRegion::~SharedRegion() {
  if (client_ != nullptr) internal::RemoveLiveRegion(client_, name_, this);
  if (registered_) {
    CallOptions call;
    call.timeout = std::chrono::milliseconds(5000);
    (void)Unregister(call);
  }
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
  if (!shm_name_.empty()) shm_unlink(shm_name_.c_str());
}

absl::Status SharedRegion::Unregister(const CallOptions& call) {
  if (!registered_) return absl::FailedPreconditionError(
      absl::StrCat("region '", name_, "' is not registered"));
  registered_ = false;
  return client_->UnregisterRegion(name_, call);
}

namespace {
absl::Status CheckRange(int64_t offset, int64_t nbytes, int64_t size, const std::string& name) {
  if (offset < 0 || nbytes < 0 || offset > size || nbytes > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(nbytes, " bytes at offset ", offset,
                                                   " are not inside region '", name, "' of ",
                                                   size, " bytes"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status SharedRegion::Write(const HostArray& array, int64_t offset_bytes) {
  const int64_t n = static_cast<int64_t>(array.nbytes());
  if (absl::Status st = CheckRange(offset_bytes, n, size_, name_); !st.ok()) return st;
  if (n > 0) std::memcpy(static_cast<char*>(data_) + offset_bytes, array.raw(), n);
  return absl::OkStatus();
}

v1::NdArray SharedRegion::Ref(DType dtype, const std::vector<int64_t>& shape,
                              int64_t offset_bytes) const {
  return ShmArray(dtype, shape, name_, offset_bytes);
}

absl::StatusOr<HostArray> SharedRegion::View(const v1::NdArray& array) const {
  if (!array.has_shm() || array.shm().region() != name_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the array does not lie in region '", name_, "' (shm.region '", array.shm().region(), "')"));
  }
  std::vector<int64_t> shape(array.shape().begin(), array.shape().end());
  absl::StatusOr<int64_t> nbytes = ArrayBytes(array.dtype(), shape, "array");
  if (!nbytes.ok()) return nbytes.status();
  const int64_t offset = array.shm().offset_bytes();
  if (absl::Status st = CheckRange(offset, *nbytes, size_, name_); !st.ok()) return st;
  absl::StatusOr<DType> dtype = FromProto(array.dtype(), "array");
  if (!dtype.ok()) return dtype.status();
  return HostArray::Borrow(*dtype, std::move(shape), static_cast<char*>(data_) + offset,
                           static_cast<size_t>(*nbytes), "array");
}

absl::StatusOr<HostArray> SharedRegion::Read(const v1::NdArray& array) const {
  absl::StatusOr<HostArray> view = View(array);
  if (!view.ok()) return view.status();
  return HostArray(*view);  // a copy owns its bytes
}

absl::StatusOr<int64_t> SharedRegion::PutArrays(google::protobuf::Message* request,
                                                int64_t offset_bytes) {
  std::vector<v1::NdArray*> arrays;
  std::vector<int64_t> sizes;
  for (const NdArrayField& f : NdArrayFields(request)) {
    if (f.array->has_shm()) continue;
    arrays.push_back(f.array);
    sizes.push_back(static_cast<int64_t>(f.array->data().size()));
  }
  const int64_t total = OutputRegionBytes(sizes);
  if (total < 0) return absl::InvalidArgumentError("the arrays' byte count overflows int64");
  if (absl::Status st = CheckRange(offset_bytes, total, size_, name_); !st.ok()) return st;
  int64_t at = offset_bytes;
  for (v1::NdArray* a : arrays) {
    const int64_t n = static_cast<int64_t>(a->data().size());
    if (n > 0) std::memcpy(static_cast<char*>(data_) + at, a->data().data(), n);
    std::string().swap(*a->mutable_data());
    a->mutable_shm()->set_region(name_);
    a->mutable_shm()->set_offset_bytes(at);
    at += RegionSlotBytes(n);
  }
  return at;
}

v1::ShmRef SharedRegion::OutRef(int64_t offset_bytes) const {
  v1::ShmRef r;
  r.set_region(name_);
  r.set_offset_bytes(offset_bytes);
  return r;
}

// The SharedRegions alive in this process, by (Client, name): a response's arrays that name one
// are read back out of it (TakeRegionArrays), so that results look as they do inline.
namespace {
std::mutex& LiveMu() {
  static std::mutex mu;
  return mu;
}
std::map<std::pair<const Client*, std::string>, const SharedRegion*>& Live() {
  static auto* live = new std::map<std::pair<const Client*, std::string>, const SharedRegion*>();
  return *live;
}
}  // namespace

void internal::AddLiveRegion(const Client* client, const std::string& name,
                             const SharedRegion* region) {
  std::lock_guard<std::mutex> lock(LiveMu());
  Live()[{client, name}] = region;
}

void internal::RemoveLiveRegion(const Client* client, const std::string& name,
                                const SharedRegion* region) {
  std::lock_guard<std::mutex> lock(LiveMu());
  auto it = Live().find({client, name});
  if (it != Live().end() && it->second == region) Live().erase(it);
}

namespace {

// The live SharedRegion `array` names (LiveMu held): FAILED_PRECONDITION naming `path` if none.
absl::StatusOr<const SharedRegion*> LiveRegionOf(const Client* client, const v1::NdArray& array,
                                                 const std::string& path) {
  auto it = Live().find({client, array.shm().region()});
  if (it == Live().end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ".shm: the result lies in region '", array.shm().region(),
        "', which is not a live SharedRegion of this Client: read it with SharedRegion::Read"));
  }
  return it->second;
}

}  // namespace

absl::Status internal::TakeRegionArrays(const Client* client,
                                        google::protobuf::Message* response) {
  std::lock_guard<std::mutex> lock(LiveMu());  // the region cannot go while it is read
  for (const NdArrayField& f : NdArrayFields(response)) {
    if (!f.array->has_shm()) continue;
    absl::StatusOr<const SharedRegion*> region = LiveRegionOf(client, *f.array, f.path);
    if (!region.ok()) return region.status();
    absl::StatusOr<HostArray> a = (*region)->Read(*f.array);
    if (!a.ok()) return a.status();
    f.array->clear_shm();
    *f.array->mutable_data() = std::move(*a).TakeBytes();
  }
  return absl::OkStatus();
}

absl::StatusOr<HostArray> internal::ViewRegionArray(const Client* client,
                                                    const v1::NdArray& array,
                                                    const std::string& path) {
  std::lock_guard<std::mutex> lock(LiveMu());
  absl::StatusOr<const SharedRegion*> region = LiveRegionOf(client, array, path);
  if (!region.ok()) return region.status();
  return (*region)->View(array);
}

// --- chunked transfer through a staging region (issue 10 item 2) ---

namespace {

// Samples along the filtered axis (negative from the end) and the product of the other dims.
int64_t SamplesOf(const HostArray& x, int axis) {
  const int nd = x.ndim();
  const int a = axis < 0 ? axis + nd : axis;
  return a >= 0 && a < nd ? x.dim(a) : 0;
}
int64_t ChannelsOf(const HostArray& x, int64_t samples) {
  return samples > 0 ? x.size() / samples : 1;
}

// Bytes per output element, at most: the input's precision is kept (DTYPE_KEEP_PRECISION) for
// float and complex x with real filters; anything else (integers, DTYPE_SCIPY, complex taps)
// may give complex128. A staging region sized for more than y needs only accounting: its
// unwritten pages cost no memory.
int64_t OutputItemBound(DType x, bool keep_precision, bool complex_taps) {
  if (keep_precision && !complex_taps &&
      (x == DType::kFloat32 || x == DType::kFloat64 || x == DType::kComplex64 ||
       x == DType::kComplex128)) {
    return static_cast<int64_t>(DTypeSize(x));
  }
  return 16;
}

bool IsComplex(v1::DType d) { return d == v1::COMPLEX64 || d == v1::COMPLEX128; }

// [begin, end) of slice `i` of `parts` over `total` bytes, slices a multiple of `align` long
// (the last one takes the rest).
std::pair<int64_t, int64_t> Slice(int64_t total, int parts, int i, int64_t align) {
  const int64_t per = ((total / parts + align - 1) / align) * align;
  const int64_t begin = std::min(total, per * i);
  const int64_t end = i == parts - 1 ? total : std::min(total, begin + per);
  return {begin, end};
}

// Runs fn(i) for i in [0, n) on n threads (the first on this one); the first error wins.
absl::Status Parallel(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back([&, i] { results[i] = fn(i); });
  results[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : results) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The two streaming methods, called with raw ByteBuffer messages (region_wire.h).
grpc::internal::RpcMethod WriteRegionMethod() {
  return grpc::internal::RpcMethod("/fresnel.v1.SharedMemoryService/WriteRegion",
                                   grpc::internal::RpcMethod::CLIENT_STREAMING);
}
grpc::internal::RpcMethod ReadRegionMethod() {
  return grpc::internal::RpcMethod("/fresnel.v1.SharedMemoryService/ReadRegion",
                                   grpc::internal::RpcMethod::SERVER_STREAMING);
}

// Whether x + y fit one unary call under `transfer` and the message cap.
bool UseUnary(const HostArray& x, int64_t channels, int64_t y_samples, int64_t item,
              const TransferOptions& transfer, int64_t cap) {
  const double bytes = static_cast<double>(x.nbytes()) + static_cast<double>(channels) *
                                                             static_cast<double>(y_samples) *
                                                             static_cast<double>(item);
  const double largest = std::max(static_cast<double>(x.nbytes()), bytes - x.nbytes());
  return bytes <= static_cast<double>(transfer.unary_max_bytes) &&
         largest + v1::kEnvelopeBytes <= static_cast<double>(cap);
}

}  // namespace

// --- segments: the call cut into independent sub-calls, pipelined ---

namespace {

// One sub-call of a segmented transfer: `rows` channel rows from `row0`, x samples [s, e) of
// each; it delivers y samples [ja, jb) of each row (whole rows when rows > 1), which are its own
// output samples [ja - shift, jb - shift); its y goes to region offset `scratch`.
struct Segment {
  int64_t row0 = 0, rows = 1;
  int64_t s = 0, e = 0;
  int64_t ja = 0, jb = 0;
  int64_t shift = 0;
  int64_t sub_out = 0;  // the sub-call's output samples per row
  int64_t scratch = 0;
  int64_t x_begin = 0, x_end = 0;  // x bytes the sub-call reads
};

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The segments of a call of `channels` rows of n samples into y_samples each, at most `want`
// of them; empty when it is not worth cutting (one segment) or the geometry does not allow it.
// x rows are contiguous in the region from offset 0; the segments' y areas follow from y_off.
std::vector<Segment> PlanSegments(const internal::FilterSplit& f, int64_t channels, int64_t n,
                                  int64_t y_samples, int want, int64_t x_item, int64_t y_item,
                                  int64_t y_off) {
  std::vector<Segment> plan;
  if (!f.ok || want <= 1 || channels <= 0 || n <= 0 || y_samples <= 0) return plan;
  if (channels >= want) {  // blocks of whole rows: no halo, each row's y exactly
    for (int i = 0; i < want; ++i) {
      Segment g;
      g.row0 = channels * i / want;
      g.rows = channels * (i + 1) / want - g.row0;
      if (g.rows == 0) continue;
      g.s = 0;
      g.e = n;
      g.ja = 0;
      g.jb = y_samples;
      g.sub_out = y_samples;
      plan.push_back(g);
    }
  } else {  // windows of each row's output, each with the x it reads
    const int64_t windows = std::min<int64_t>(std::max<int64_t>(1, want / channels), y_samples);
    const int64_t g_ud = std::gcd(f.up, f.down);
    const int64_t align = f.down / g_ud;  // s * up / down must be whole
    for (int64_t r = 0; r < channels; ++r) {
      for (int64_t w = 0; w < windows; ++w) {
        Segment g;
        g.row0 = r;
        g.rows = 1;
        g.ja = y_samples * w / windows;
        g.jb = y_samples * (w + 1) / windows;
        if (g.jb <= g.ja) continue;
        // Overflow-safe enough: the server caps samples far below 2^63 / (up + down).
        int64_t lo = std::max<int64_t>(0, FloorDiv(g.ja * f.down, f.up) - f.halo);
        g.s = lo - lo % align;
        g.e = std::min(n, FloorDiv((g.jb - 1) * f.down, f.up) + f.halo + 2);
        if (g.e <= g.s) return {};
        g.shift = g.s * f.up / f.down;
        g.sub_out = f.OutputLength(g.e - g.s);
        // The sub-call must produce the window; the halo makes it so, checked anyway.
        if (g.shift > g.ja || g.sub_out < g.jb - g.shift) return {};
        plan.push_back(g);
      }
    }
  }
  if (plan.size() <= 1) return {};
  int64_t at = y_off;
  for (Segment& g : plan) {
    g.x_begin = (g.row0 * n + g.s) * x_item;
    g.x_end = ((g.row0 + g.rows - 1) * n + g.e) * x_item;
    g.scratch = at;
    at += (g.rows * g.sub_out * y_item + 63) / 64 * 64;
  }
  return plan;
}

// x's shape for a sub-call: x's rank and axis, `rows` in the first leading dimension (the others
// 1) and `samples` along the axis.
std::vector<int64_t> SubShape(const std::vector<int64_t>& shape, int axis, int64_t rows,
                              int64_t samples) {
  std::vector<int64_t> sub = shape;
  for (int d = 0; d < axis; ++d) sub[d] = d == 0 ? rows : 1;
  sub[axis] = samples;
  return sub;
}

// Segment progress shared by the upload, call and download threads: the first error stops all.
struct Pipeline {
  std::mutex mu;
  std::condition_variable cv;
  int uploaded = 0;             // segments whose x is all in the region
  std::vector<char> answered;   // per segment: its call returned OK
  std::vector<v1::InterpolationResponse> responses;
  absl::Status error;
  std::atomic<bool> failed{false};

  void Fail(absl::Status st) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(st);
    failed = true;
    cv.notify_all();
  }
  // Waits until pred() or a failure; false on failure.
  template <class Pred>
  bool Wait(Pred pred) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return failed.load() || pred(); });
    return !failed.load();
  }
};

void AddInfo(const v1::ExecutionInfo& a, v1::ExecutionInfo* sum) {
  if (sum->device().empty()) sum->set_device(a.device());
  sum->set_queue_wait_seconds(sum->queue_wait_seconds() + a.queue_wait_seconds());
  sum->set_h2d_seconds(sum->h2d_seconds() + a.h2d_seconds());
  sum->set_compute_seconds(sum->compute_seconds() + a.compute_seconds());
  sum->set_d2h_seconds(sum->d2h_seconds() + a.d2h_seconds());
  sum->set_total_seconds(sum->total_seconds() + a.total_seconds());
}

}  // namespace

int64_t internal::FilterSplit::OutputLength(int64_t n) const {
  if (n <= 0) return 0;
  if (resample_poly) return (n * up + down - 1) / down;  // ceil(n * up / down), reduced
  return ((n - 1) * up + taps - 1) / down + 1;
}

absl::Status Client::TransferThroughRegion(
    const HostArray& x, int64_t channels, int64_t y_samples, int64_t item,
    const internal::FilterSplit& split, const TransferOptions& transfer, const CallOptions& call,
    TransferReport* report, HostArray* y_out,
    const std::function<absl::StatusOr<v1::InterpolationResponse>(v1::NdArray x,
                                                                  const v1::ShmRef* y_shm)>&
        call_fn) {
  if (report != nullptr) *report = TransferReport();
  if (UseUnary(x, channels, y_samples, item, transfer, MessageCap(call))) {
    v1::NdArray inline_x;
    ToProto(x, &inline_x);
    const auto start = std::chrono::steady_clock::now();
    FRESNEL_ASSIGN_OR_RETURN(v1::InterpolationResponse r, call_fn(std::move(inline_x), nullptr));
    if (report != nullptr) {
      report->call_s = Since(start);
      report->info = r.info();
    }
    FRESNEL_ASSIGN_OR_RETURN(*y_out, FromProto(std::move(*r.mutable_y()), "y"));
    return absl::OkStatus();
  }
  if (y_samples < 0 || (y_samples > 0 && channels > INT64_MAX / y_samples / item / 2)) {
    return absl::InvalidArgumentError("x: the output would be too large to transfer");
  }
  const int64_t x_bytes = static_cast<int64_t>(x.nbytes());
  const int64_t y_off = (x_bytes + 63) / 64 * 64;
  const int64_t y_bytes = channels * y_samples * item;
  const int64_t total = x_bytes + y_bytes;
  const int streams =
      total >= transfer.parallel_min_bytes ? std::clamp(transfer.streams, 1, 16) : 1;
  const int64_t max_chunk = std::max<int64_t>(1 << 10, MessageCap(call) - v1::kEnvelopeBytes);
  const int64_t chunk = std::clamp<int64_t>(transfer.chunk_bytes, 1 << 10, max_chunk);

  // The segments (one = the whole call).
  const int64_t n = channels > 0 ? static_cast<int64_t>(x.size()) / channels : 0;
  const int want = static_cast<int>(std::clamp<int64_t>(
      total / std::max<int64_t>(1, transfer.segment_bytes), 1, std::clamp(transfer.segments, 1, 16)));
  std::vector<Segment> plan = PlanSegments(split, channels, n, y_samples, want,
                                           static_cast<int64_t>(DTypeSize(x.dtype())), item, y_off);
  const bool whole = plan.empty();
  if (whole) {
    Segment g;
    g.rows = channels;
    g.s = 0;
    g.e = n;
    g.jb = y_samples;
    g.sub_out = y_samples;
    g.scratch = y_off;
    g.x_begin = 0;
    g.x_end = x_bytes;
    plan.push_back(g);
  }
  const int segments = static_cast<int>(plan.size());
  const int64_t region_bytes =
      whole ? y_off + y_bytes
            : plan.back().scratch + plan.back().rows * plan.back().sub_out * item;
  if (report != nullptr) {
    report->path = streams > 1 ? "parallel" : "stream";
    report->streams = streams;
    report->segments = segments;
  }

  v1::RegisterRegionRequest reg;
  reg.set_name(absl::StrFormat("transfer-%08x%08x", std::random_device()(),
                               std::random_device()()));
  reg.set_size_bytes(std::max<int64_t>(1, region_bytes));
  FRESNEL_RETURN_IF_ERROR(RegisterRegion(reg, call).status());
  const std::string& name = reg.name();
  absl::Cleanup unregister = [&] {
    CallOptions quick;
    quick.timeout = std::chrono::milliseconds(5000);
    (void)UnregisterRegion(name, quick);
  };

  // y's buffer: *y_out's when it has the result's dtype and size, else a new one that is not
  // zero-filled (UninitializedArray; the zero-filled constructor's fill took ~100 ms per GiB on
  // one thread on the H200 host, and the first segment's download waited for it): the
  // segments' windows cover every byte of y. With transfer.prefault_y it is made and faulted in
  // on its own thread while x is uploaded, so that the download only copies into it; without,
  // it is made (no faults yet) when the first answer comes and the download threads fault its
  // pages in as they write them. The future's destructor waits for it on every early return.
  const DType y_dtype_expected = x.dtype();  // segments only where y keeps x's dtype
  const bool reuse = y_out->dtype() == y_dtype_expected &&
                     static_cast<int64_t>(y_out->nbytes()) == channels * y_samples * item;
  std::future<std::string> y_buffer;
  if (!reuse) {
    const FirstTouch touch = transfer.prefault_y ? FirstTouch::kPrefault : FirstTouch::kOnWrite;
    y_buffer = std::async(transfer.prefault_y ? std::launch::async : std::launch::deferred,
                          [y_bytes, touch] {
                            return UninitializedArray(DType::kUint8, {y_bytes}, touch).TakeBytes();
                          });
  }

  Pipeline pipe;
  pipe.answered.assign(static_cast<size_t>(segments), 0);
  pipe.responses.resize(static_cast<size_t>(segments));
  const char* x_data = static_cast<const char*>(x.raw());

  // x bytes [begin, end) over `streams` parallel WriteRegion streams. Raw RegionChunk buffers
  // whose data slice is x itself: no copy into a message or a serialisation buffer (x outlives
  // the call).
  auto upload = [&](int64_t begin_all, int64_t end_all) {
    return Parallel(streams, [&](int i) -> absl::Status {
      auto [b, e] = Slice(end_all - begin_all, streams, i, chunk);
      const int64_t begin = begin_all + b, end = begin_all + e;
      if (begin >= end) return absl::OkStatus();
      grpc::ClientContext context;
      ApplyDeadline(&context, options_, call);
      v1::WriteRegionResponse response;
      const std::shared_ptr<grpc::Channel> channel = TransferChannel(i);
      std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
          grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
              channel.get(), WriteRegionMethod(), &context, &response));
      for (int64_t off = begin; off < end && !pipe.failed; off += chunk) {
        const grpc::ByteBuffer message = v1::RegionChunkBuffer(
            name, off, x_data + off, static_cast<size_t>(std::min(chunk, end - off)));
        if (!writer->Write(message)) break;  // Finish says why
      }
      writer->WritesDone();
      FRESNEL_RETURN_IF_ERROR(FromGrpc(writer->Finish()));
      if (response.bytes_written() != end - begin) {
        return absl::DataLossError(absl::StrCat("WriteRegion stored ", response.bytes_written(),
                                                " of ", end - begin, " bytes"));
      }
      return absl::OkStatus();
    });
  };
  // Region bytes [src, src + len) into dst over `streams` parallel ReadRegion streams: raw
  // RegionChunk buffers parsed in place, each chunk copied once, from the received slices
  // straight to its place.
  auto download = [&](int64_t src, int64_t len, char* dst) {
    return Parallel(streams, [&](int i) -> absl::Status {
      const auto [begin, end] = Slice(len, streams, i, chunk);
      if (begin >= end) return absl::OkStatus();
      grpc::ClientContext context;
      ApplyDeadline(&context, options_, call);
      v1::ReadRegionRequest request;
      request.set_region(name);
      request.set_offset_bytes(src + begin);
      request.set_length_bytes(end - begin);
      request.set_chunk_bytes(chunk);
      const std::shared_ptr<grpc::Channel> channel = TransferChannel(i);
      std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
          grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
              channel.get(), ReadRegionMethod(), &context, request));
      grpc::ByteBuffer buffer;
      v1::RegionChunkView message;
      int64_t received = 0;
      while (reader->Read(&buffer)) {
        absl::Status parsed = message.Parse(buffer);
        const int64_t at = message.offset_bytes() - src;
        const int64_t got = message.data_bytes();
        if (!parsed.ok() || at < begin || got > end - at || pipe.failed) {
          context.TryCancel();
          if (pipe.failed) return absl::CancelledError("another part of the transfer failed");
          return absl::DataLossError(absl::StrCat("ReadRegion sent bytes at ",
                                                  message.offset_bytes(),
                                                  " outside the range asked for ",
                                                  parsed.ToString()));
        }
        message.CopyData(dst + at);
        received += got;
      }
      FRESNEL_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
      if (received != end - begin) {
        return absl::DataLossError(absl::StrCat("ReadRegion sent ", received, " of ",
                                                end - begin, " bytes"));
      }
      return absl::OkStatus();
    });
  };

  const auto start = std::chrono::steady_clock::now();
  double uploaded_at = 0, answered_at = 0;
  std::vector<std::thread> threads;
  // Joined before anything they use goes (cleanups run in reverse order: this one first).
  absl::Cleanup join = [&] {
    for (std::thread& t : threads) t.join();
  };
  // Uploads x segment by segment (each segment's x ends no earlier than the one before's).
  threads.emplace_back([&] {
    int64_t done = 0;
    for (int k = 0; k < segments && !pipe.failed; ++k) {
      const int64_t end = std::max(done, plan[k].x_end);
      if (end > done) {
        if (absl::Status st = upload(done, end); !st.ok()) return pipe.Fail(std::move(st));
        done = end;
      }
      std::lock_guard<std::mutex> lock(pipe.mu);
      pipe.uploaded = k + 1;
      if (k + 1 == segments) uploaded_at = Since(start);
      pipe.cv.notify_all();
    }
  });
  // One thread per segment's call, each as soon as its x is there: the server may run them
  // concurrently (one copy engine uploading the next while another downloads the last).
  for (int k = 0; k < segments; ++k) {
    threads.emplace_back([&, k] {
      if (!pipe.Wait([&] { return pipe.uploaded > k; })) return;
      const Segment& g = plan[k];
      v1::ShmRef y_ref;
      y_ref.set_region(name);
      y_ref.set_offset_bytes(g.scratch);
      v1::NdArray sub_x = whole ? ShmArray(x.dtype(), x.shape(), name, 0)
                                : ShmArray(x.dtype(), SubShape(x.shape(), split.axis, g.rows,
                                                               g.e - g.s),
                                           name, g.x_begin);
      absl::StatusOr<v1::InterpolationResponse> r = call_fn(std::move(sub_x), &y_ref);
      if (!r.ok()) return pipe.Fail(r.status());
      std::lock_guard<std::mutex> lock(pipe.mu);
      pipe.responses[k] = *std::move(r);
      pipe.answered[k] = 1;
      answered_at = std::max(answered_at, Since(start));
      pipe.cv.notify_all();
    });
  }

  // Downloads here, segment by segment, as their answers come.
  HostArray& y = *y_out;
  std::vector<int64_t> y_shape = x.shape();
  int64_t got_bytes = 0;
  for (int k = 0; k < segments; ++k) {
    if (!pipe.Wait([&] { return pipe.answered[k] != 0; })) break;
    const Segment& g = plan[k];
    const v1::NdArray& ry = pipe.responses[k].y();
    std::vector<int64_t> shape(ry.shape().begin(), ry.shape().end());
    absl::StatusOr<int64_t> bytes = ArrayBytes(ry.dtype(), shape, "y");
    absl::StatusOr<DType> dtype = FromProto(ry.dtype(), "y");
    if (!bytes.ok() || !dtype.ok()) {
      pipe.Fail(!bytes.ok() ? bytes.status() : dtype.status());
      break;
    }
    if (k == 0) {
      // The first answer fixes y's dtype and shape.
      if (whole) {
        if (*bytes > y_bytes) {
          pipe.Fail(absl::InternalError(absl::StrCat("y: the server answered ", *bytes,
                                                     " bytes, more than the ", y_bytes,
                                                     " reserved")));
          break;
        }
        y_shape = shape;
        got_bytes = *bytes;
      } else {
        y_shape[split.axis] = y_samples;
        got_bytes = channels * y_samples * static_cast<int64_t>(DTypeSize(*dtype));
      }
      if (reuse && *dtype == y.dtype() && static_cast<int64_t>(y.nbytes()) == got_bytes) {
        if (absl::Status st = y.Reshape(y_shape); !st.ok()) {
          pipe.Fail(st);
          break;
        }
      } else {
        std::string buffer =  // y_buffer is usually ready by now
            reuse ? UninitializedArray(DType::kUint8, {got_bytes}, FirstTouch::kOnWrite).TakeBytes()
                  : y_buffer.get();
        buffer.resize(static_cast<size_t>(got_bytes));  // never larger: checked above
        absl::StatusOr<HostArray> made = HostArray::FromBytes(*dtype, y_shape, std::move(buffer), "y");
        if (!made.ok()) {
          pipe.Fail(made.status());
          break;
        }
        y = *std::move(made);
      }
    }
    int64_t src = g.scratch, len = *bytes, dst = 0;
    if (!whole) {
      // The segment's own window of its answer, and where it goes in y.
      const int64_t y_item = static_cast<int64_t>(DTypeSize(*dtype));
      if (*dtype != y.dtype() || shape.empty() || shape[split.axis] != g.sub_out ||
          *bytes != g.rows * g.sub_out * y_item) {
        pipe.Fail(absl::InternalError(absl::StrCat(
            "y: segment ", k, " answered ", DTypeName(*dtype), " ", ShapeString(shape),
            ", expected ", g.sub_out, " samples of ", DTypeName(y.dtype()), " per row")));
        break;
      }
      src = g.scratch + (g.ja - g.shift) * y_item;
      len = g.rows * (g.jb - g.ja) * y_item;
      dst = (g.row0 * y_samples + g.ja) * y_item;
    }
    if (len > 0) {
      if (absl::Status st = download(src, len, static_cast<char*>(y.raw()) + dst); !st.ok()) {
        pipe.Fail(std::move(st));
        break;
      }
    }
  }
  std::move(join).Invoke();
  if (pipe.failed) return pipe.error;
  const double end_s = Since(start);
  if (report != nullptr) {
    report->upload_s = uploaded_at;
    report->call_s = std::max(0.0, answered_at - uploaded_at);
    report->download_s = std::max(0.0, end_s - std::max(uploaded_at, answered_at));
    for (const v1::InterpolationResponse& r : pipe.responses) AddInfo(r.info(), &report->info);
  }
  return absl::OkStatus();
}

namespace {

// Whether the call's result is the same bits when cut into windows of the filtered axis (see
// TransferOptions::segments) and x's layout allows it.
bool Splittable(const HostArray& x, int axis, bool keep_precision, bool complex_taps,
                v1::PadMode mode) {
  const int nd = x.ndim();
  const int a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd || mode != v1::PAD_CONSTANT || complex_taps || !keep_precision) {
    return false;
  }
  const DType d = x.dtype();
  if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kComplex64 &&
      d != DType::kComplex128) {
    return false;
  }
  for (int i = a + 1; i < nd; ++i) {
    if (x.dim(i) != 1) return false;
  }
  return true;
}

// What UpfirdnArrayInto and ResamplePolyArrayInto read off their request alike.
struct ArrayCall {
  int axis = -1;             // the filtered axis, normalised
  int64_t n = 0;             // x's samples along it
  int64_t channels = 1;      // the product of x's other dimensions
  int64_t item = 16;         // bytes per output element, at most
  int64_t up = 1, down = 1;  // as given (at least 1)
  int64_t taps = -1;         // the explicit taps' count; -1 when the filter is designed
  bool splittable = false;   // Splittable() with the request's padding
};

template <class Request>
ArrayCall ArrayCallOf(const Request& request, const HostArray& x, v1::PadMode mode) {
  ArrayCall c;
  const int axis = request.has_axis() ? request.axis() : -1;
  c.axis = axis < 0 ? axis + x.ndim() : axis;
  c.n = SamplesOf(x, axis);
  c.channels = ChannelsOf(x, c.n);
  const bool keep = request.dtype_rule() == v1::DTYPE_KEEP_PRECISION;
  const bool complex_taps = request.has_taps() && IsComplex(request.taps().dtype());
  c.item = OutputItemBound(x.dtype(), keep, complex_taps);
  c.up = std::max(1, request.up());
  c.down = std::max(1, request.down());
  if (request.has_taps()) {
    c.taps = std::max<int64_t>(0, ShapeElements(std::vector<int64_t>(
                                      request.taps().shape().begin(), request.taps().shape().end())));
  }
  c.splittable = Splittable(x, axis, keep, complex_taps, mode);
  return c;
}

// The sub-call of a transfer: a copy of `request` (one per concurrent sub-call) with x and, when
// given, y_shm set, sent by send(sub). `request` must outlive the transfer.
template <class Request, class Send>
auto SubCall(const Request& request, Send send) {
  return [&request, send](v1::NdArray x_wire, const v1::ShmRef* y_shm) {
    Request sub = request;
    *sub.mutable_x() = std::move(x_wire);
    if (y_shm != nullptr) *sub.mutable_y_shm() = *y_shm;
    return send(sub);
  };
}

}  // namespace

absl::Status Client::UpfirdnArrayInto(v1::UpfirdnRequest request, const HostArray& x,
                                      HostArray* y, const TransferOptions& transfer,
                                      const CallOptions& call, TransferReport* report) {
  if (y == nullptr) return absl::InvalidArgumentError("y: null");
  request.clear_x();  // copied once per sub-call below: x travels through the region
  const ArrayCall c = ArrayCallOf(request, x, request.mode());
  const int64_t taps = c.taps >= 0 ? c.taps : std::max(0, request.design().numtaps());
  // SciPy's full output length (interp.h UpfirdnOutputLength).
  const int64_t y_samples = c.n == 0 ? 0 : ((c.n - 1) * c.up + taps - 1) / c.down + 1;
  internal::FilterSplit split;
  split.ok = taps > 0 && c.splittable;
  split.axis = c.axis;
  split.up = c.up;
  split.down = c.down;
  // Output j reads x samples [ceil((j * down - taps + 1) / up), floor(j * down / up)].
  split.halo = (taps + c.up - 1) / c.up + 2;
  split.taps = taps;
  return TransferThroughRegion(
      x, c.channels, y_samples, c.item, split, transfer, call, report, y,
      SubCall(request, [&](const v1::UpfirdnRequest& sub) { return Upfirdn(sub, call); }));
}

absl::Status Client::ResamplePolyArrayInto(v1::ResamplePolyRequest request, const HostArray& x,
                                           HostArray* y, const TransferOptions& transfer,
                                           const CallOptions& call, TransferReport* report) {
  if (y == nullptr) return absl::InvalidArgumentError("y: null");
  request.clear_x();  // copied once per sub-call below: x travels through the region
  const ArrayCall c = ArrayCallOf(request, x, request.padtype());
  const int64_t y_samples = (c.n * c.up + c.down - 1) / c.down;  // ceil(n * up / down)
  const int64_t g = std::gcd(c.up, c.down);
  internal::FilterSplit split;
  // up/down reducing to 1/1 is a copy (no filter): nothing to gain from cutting it.
  split.ok = c.up / g != c.down / g && c.splittable;
  split.axis = c.axis;
  split.up = c.up / g;
  split.down = c.down / g;
  split.resample_poly = true;
  // The designed filter (interp.h): explicit taps or 20 * max(up, down) + 1 of them, after up
  // to `down` leading zeros; output j is the full upfirdn's output j + skip, skip * down at
  // most half the filter + down. So output j reads x samples within (j * down +- (taps + down))
  // / up.
  const int64_t taps = c.taps >= 0 ? c.taps : 20 * std::max(split.up, split.down) + 1;
  split.halo = (taps + split.down + split.up - 1) / split.up + 2;
  return TransferThroughRegion(
      x, c.channels, y_samples, c.item, split, transfer, call, report, y,
      SubCall(request, [&](const v1::ResamplePolyRequest& sub) { return ResamplePoly(sub, call); }));
}

absl::StatusOr<HostArray> Client::UpfirdnArray(v1::UpfirdnRequest request, const HostArray& x,
                                               const TransferOptions& transfer,
                                               const CallOptions& call, TransferReport* report) {
  HostArray y;
  FRESNEL_RETURN_IF_ERROR(
      UpfirdnArrayInto(std::move(request), x, &y, transfer, call, report));
  return y;
}

absl::StatusOr<HostArray> Client::ResamplePolyArray(v1::ResamplePolyRequest request,
                                                    const HostArray& x,
                                                    const TransferOptions& transfer,
                                                    const CallOptions& call,
                                                    TransferReport* report) {
  HostArray y;
  FRESNEL_RETURN_IF_ERROR(
      ResamplePolyArrayInto(std::move(request), x, &y, transfer, call, report));
  return y;
}

}  // namespace fresnel
