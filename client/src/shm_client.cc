#include "fresnel/client/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "call_util.h"
#include "fresnel/core/status.h"
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
  return region;
}

SharedRegion::~SharedRegion() {
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

absl::StatusOr<HostArray> SharedRegion::Read(const v1::NdArray& array) const {
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
  return HostArray::FromBytes(*dtype, std::move(shape),
                              std::string(static_cast<const char*>(data_) + offset,
                                          static_cast<size_t>(*nbytes)),
                              "array");
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

absl::StatusOr<HostArray> Client::TransferThroughRegion(
    const HostArray& x, int64_t channels, int64_t y_samples, int64_t item, const TransferOptions& transfer,
    const CallOptions& call, TransferReport* report,
    const std::function<absl::StatusOr<v1::InterpolationResponse>(v1::NdArray x,
                                                                  const v1::ShmRef* y_shm)>&
        call_fn) {
  if (UseUnary(x, channels, y_samples, item, transfer, MessageCap(call))) {
    if (report != nullptr) *report = TransferReport();
    v1::NdArray inline_x;
    ToProto(x, &inline_x);
    const auto start = std::chrono::steady_clock::now();
    FRESNEL_ASSIGN_OR_RETURN(v1::InterpolationResponse r, call_fn(std::move(inline_x), nullptr));
    if (report != nullptr) {
      report->call_s = Since(start);
      report->info = r.info();
    }
    return FromProto(std::move(*r.mutable_y()), "y");
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
  if (report != nullptr) {
    report->path = streams > 1 ? "parallel" : "stream";
    report->streams = streams;
  }

  v1::RegisterRegionRequest reg;
  reg.set_name(absl::StrFormat("transfer-%08x%08x", std::random_device()(),
                               std::random_device()()));
  reg.set_size_bytes(std::max<int64_t>(1, y_off + y_bytes));
  FRESNEL_RETURN_IF_ERROR(RegisterRegion(reg, call).status());
  const std::string& name = reg.name();
  absl::Cleanup unregister = [&] {
    CallOptions quick;
    quick.timeout = std::chrono::milliseconds(5000);
    (void)UnregisterRegion(name, quick);
  };

  // y's buffer is made on its own thread while x is uploaded and the call runs (HostArray
  // prefaults large buffers in parallel on huge pages, then std::string zero-fills it on one
  // thread: ~100 ms per GiB on the H200 host), so the download only copies into it. The
  // future's destructor waits for it on every early return.
  std::future<std::string> y_buffer = std::async(std::launch::async, [y_bytes] {
    return HostArray(DType::kUint8, {y_bytes}).TakeBytes();
  });

  auto start = std::chrono::steady_clock::now();
  const char* x_data = static_cast<const char*>(x.raw());
  FRESNEL_RETURN_IF_ERROR(Parallel(streams, [&](int i) -> absl::Status {
    const auto [begin, end] = Slice(x_bytes, streams, i, chunk);
    if (begin >= end) return absl::OkStatus();
    grpc::ClientContext context;
    ApplyDeadline(&context, options_, call);
    v1::WriteRegionResponse response;
    // Raw RegionChunk buffers whose data slice is x itself: no copy into a message or a
    // serialisation buffer (x outlives the call).
    const std::shared_ptr<grpc::Channel> channel = TransferChannel(i);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel.get(), WriteRegionMethod(), &context, &response));
    for (int64_t off = begin; off < end; off += chunk) {
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
  }));
  if (report != nullptr) report->upload_s = Since(start);

  start = std::chrono::steady_clock::now();
  v1::ShmRef y_ref;
  y_ref.set_region(name);
  y_ref.set_offset_bytes(y_off);
  FRESNEL_ASSIGN_OR_RETURN(v1::InterpolationResponse response,
                           call_fn(ShmArray(x.dtype(), x.shape(), name, 0), &y_ref));
  if (report != nullptr) {
    report->call_s = Since(start);
    report->info = response.info();
  }
  std::vector<int64_t> shape(response.y().shape().begin(), response.y().shape().end());
  FRESNEL_ASSIGN_OR_RETURN(const int64_t got_bytes,
                           ArrayBytes(response.y().dtype(), shape, "y"));
  if (got_bytes > y_bytes) {
    return absl::InternalError(absl::StrCat("y: the server answered ", got_bytes,
                                            " bytes, more than the ", y_bytes, " reserved"));
  }
  FRESNEL_ASSIGN_OR_RETURN(const DType y_dtype, FromProto(response.y().dtype(), "y"));

  start = std::chrono::steady_clock::now();
  std::string y_bytes_buffer = y_buffer.get();  // usually ready by now
  y_bytes_buffer.resize(static_cast<size_t>(got_bytes));  // never larger: checked above
  FRESNEL_ASSIGN_OR_RETURN(HostArray y,
                           HostArray::FromBytes(y_dtype, shape, std::move(y_bytes_buffer), "y"));
  char* const y_data = static_cast<char*>(y.raw());
  FRESNEL_RETURN_IF_ERROR(Parallel(streams, [&](int i) -> absl::Status {
    const auto [begin, end] = Slice(got_bytes, streams, i, chunk);
    if (begin >= end) return absl::OkStatus();
    grpc::ClientContext context;
    ApplyDeadline(&context, options_, call);
    v1::ReadRegionRequest request;
    request.set_region(name);
    request.set_offset_bytes(y_off + begin);
    request.set_length_bytes(end - begin);
    request.set_chunk_bytes(chunk);
    // Raw RegionChunk buffers parsed in place: each chunk's bytes are copied once, from the
    // received slices straight to their place in y.
    const std::shared_ptr<grpc::Channel> channel = TransferChannel(i);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel.get(), ReadRegionMethod(), &context, request));
    grpc::ByteBuffer buffer;
    v1::RegionChunkView message;
    int64_t received = 0;
    while (reader->Read(&buffer)) {
      absl::Status parsed = message.Parse(buffer);
      const int64_t at = message.offset_bytes() - y_off;
      const int64_t n = message.data_bytes();
      if (!parsed.ok() || at < begin || n > end - at) {
        context.TryCancel();
        return absl::DataLossError(absl::StrCat("ReadRegion sent bytes at ", message.offset_bytes(),
                                                " outside the range asked for ",
                                                parsed.ToString()));
      }
      message.CopyData(y_data + at);
      received += n;
    }
    FRESNEL_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
    if (received != end - begin) {
      return absl::DataLossError(absl::StrCat("ReadRegion sent ", received, " of ", end - begin,
                                              " bytes"));
    }
    return absl::OkStatus();
  }));
  if (report != nullptr) report->download_s = Since(start);
  return y;
}


absl::StatusOr<HostArray> Client::UpfirdnArray(v1::UpfirdnRequest request, const HostArray& x,
                                               const TransferOptions& transfer,
                                               const CallOptions& call, TransferReport* report) {
  const int64_t n = SamplesOf(x, request.has_axis() ? request.axis() : -1);
  const int64_t channels = ChannelsOf(x, n);
  const int64_t item = OutputItemBound(x.dtype(), request.dtype_rule() == v1::DTYPE_KEEP_PRECISION,
                                       request.has_taps() && IsComplex(request.taps().dtype()));
  const int64_t up = std::max(1, request.up()), down = std::max(1, request.down());
  const int64_t taps = request.has_taps()
                           ? std::max<int64_t>(0, ShapeElements(std::vector<int64_t>(
                                                      request.taps().shape().begin(),
                                                      request.taps().shape().end())))
                           : std::max(0, request.design().numtaps());
  // SciPy's full output length (interp.h UpfirdnOutputLength).
  const int64_t y_samples = n == 0 ? 0 : ((n - 1) * up + taps - 1) / down + 1;
  return TransferThroughRegion(
      x, channels, y_samples, item, transfer, call, report,
      [&](v1::NdArray x_wire, const v1::ShmRef* y_shm) {
        *request.mutable_x() = std::move(x_wire);
        if (y_shm != nullptr) *request.mutable_y_shm() = *y_shm;
        return Upfirdn(request, call);
      });
}

absl::StatusOr<HostArray> Client::ResamplePolyArray(v1::ResamplePolyRequest request,
                                                    const HostArray& x,
                                                    const TransferOptions& transfer,
                                                    const CallOptions& call,
                                                    TransferReport* report) {
  const int64_t n = SamplesOf(x, request.has_axis() ? request.axis() : -1);
  const int64_t channels = ChannelsOf(x, n);
  const int64_t item = OutputItemBound(x.dtype(), request.dtype_rule() == v1::DTYPE_KEEP_PRECISION,
                                       request.has_taps() && IsComplex(request.taps().dtype()));
  const int64_t up = std::max(1, request.up()), down = std::max(1, request.down());
  const int64_t y_samples = (n * up + down - 1) / down;  // ceil(n * up / down)
  return TransferThroughRegion(
      x, channels, y_samples, item, transfer, call, report,
      [&](v1::NdArray x_wire, const v1::ShmRef* y_shm) {
        *request.mutable_x() = std::move(x_wire);
        if (y_shm != nullptr) *request.mutable_y_shm() = *y_shm;
        return ResamplePoly(request, call);
      });
}

}  // namespace fresnel
