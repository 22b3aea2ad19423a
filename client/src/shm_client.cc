#include "fresnel/client/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "call_util.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel {

using internal::ApplyDeadline;
using internal::FromGrpc;

absl::StatusOr<v1::RegisterRegionResponse> Client::RegisterRegion(
    const v1::RegisterRegionRequest& request, const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::RegisterRegionResponse response;
  grpc::Status status =
      v1::SharedMemoryService::NewStub(channel())->RegisterRegion(&context, request, &response);
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
      v1::SharedMemoryService::NewStub(channel())->UnregisterRegion(&context, request, &response));
}

absl::StatusOr<v1::ListRegionsResponse> Client::ListRegions(const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::ListRegionsResponse response;
  grpc::Status status = v1::SharedMemoryService::NewStub(channel())->ListRegions(
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

}  // namespace fresnel
