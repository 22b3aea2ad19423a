// fresnel::SharedRegion: a POSIX shared-memory region that this process and a fresneld on the
// same host both map, so that request and result arrays need not travel through gRPC
// (SharedMemoryService, docs/transport.md).
//
//   FRESNEL_ASSIGN_OR_RETURN(auto region, SharedRegion::Create(client.get(), "io", 3 << 28));
//   FRESNEL_RETURN_IF_ERROR(region->Write(x, 0));            // or fill region->data() directly
//   v1::UpfirdnRequest req;  ...;  req.mutable_x()->set_dtype(...); shape ...
//   auto r = client->Upfirdn(req, *region, /*x_offset=*/0, /*y_offset=*/x.nbytes());
//   FRESNEL_ASSIGN_OR_RETURN(HostArray y, region->Read(r->y()));
//
// Any other request (UnwrapRequest, RenderRequest, ...): `region->PutArrays(&request, 0)` moves
// its arrays into the region, `*request.mutable_out_shm() = region->OutRef(end)` asks for the
// outputs there, and the client's calls (Unwrap, GetUnwrapResult with out_shm, Render,
// RenderStream, Reconstruct) read results that name a live SharedRegion of the same Client back
// out of it, so their results look as they do inline.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/common.pb.h"
#include "fresnel/v1/shm.pb.h"
#include "google/protobuf/message.h"

namespace fresnel {

class SharedRegion {
 public:
  // Creates a fresh POSIX shared-memory object ("/fresnel-PID-N-RANDOM", mode 0600: the server
  // must run as the same user), sizes it to `size_bytes` (> 0), maps it and registers it with
  // the server as `name` (1-128 printable characters, unique among this client's regions).
  // Errors: the server's (shm.proto: RESOURCE_EXHAUSTED over its --shm-bytes, NOT_FOUND when the
  // server is on another host, ...), or INTERNAL/RESOURCE_EXHAUSTED for a local shm_open,
  // ftruncate or mmap failure. Nothing is left behind on failure. `client` must outlive the
  // region. Blocks for one RPC.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(Client* client, std::string name,
                                                              int64_t size_bytes,
                                                              const CallOptions& call = {});
  // Unregisters (best effort, 5 s deadline, unless Unregister() was called), unmaps and unlinks.
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Unregisters now and reports the server's answer; the mapping stays until destruction.
  absl::Status Unregister(const CallOptions& call = {});

  const std::string& name() const { return name_; }
  const std::string& shm_name() const { return shm_name_; }
  int64_t size_bytes() const { return size_; }
  // The region's bytes, shared with the server: what a request reads is what is here when the
  // server reads it (during the call), so do not modify an input until its call returned.
  void* data() { return data_; }
  const void* data() const { return data_; }

  // Copies `array`'s bytes to `offset_bytes`; INVALID_ARGUMENT when they do not fit.
  absl::Status Write(const HostArray& array, int64_t offset_bytes);
  // An NdArray naming `array`'s dtype and shape at `offset_bytes` of this region (no bytes).
  v1::NdArray Ref(DType dtype, const std::vector<int64_t>& shape, int64_t offset_bytes) const;
  // Copies the array an NdArray names out of this region (array.shm.region must be name());
  // INVALID_ARGUMENT for another region, a bad dtype/shape or a range outside the region.
  absl::StatusOr<HostArray> Read(const v1::NdArray& array) const;
  // The same array without the copy: a view of the region (HostArray::Borrow), valid while
  // this SharedRegion lives and showing whatever is written to that range later.
  absl::StatusOr<HostArray> View(const v1::NdArray& array) const;

  // Any request's inline arrays into this region (docs/transport.md, "Which requests accept
  // it"): every NdArray of `request` that carries data (fresnel::NdArrayFields order: phase,
  // mask, quality; points; field; ...) is copied to the next slot of RegionSlotBytes(its bytes)
  // from `offset_bytes` and replaced by a reference (dtype, shape, shm). Returns the offset
  // after the last slot (where an out_shm may start). INVALID_ARGUMENT, nothing written or
  // changed, when they do not all fit.
  absl::StatusOr<int64_t> PutArrays(google::protobuf::Message* request, int64_t offset_bytes);
  // Where a request's outputs go (its out_shm): this region at `offset_bytes`.
  v1::ShmRef OutRef(int64_t offset_bytes) const;

 private:
  SharedRegion() = default;
  Client* client_ = nullptr;
  std::string name_, shm_name_;
  int64_t size_ = 0;
  void* data_ = nullptr;
  bool registered_ = false;
};

// CUDA IPC regions (docs/transport.md, "CUDA IPC regions"): device memory this process holds,
// registered so that Upfirdn / ResamplePoly read x from it and write y into it on the server's
// GPU, with no host round trip. `device_ptr` must lie in a cudaMalloc allocation (not
// cudaMallocAsync pool memory, not managed memory) of a device the server also uses (matched by
// UUID); [device_ptr, device_ptr + bytes) must lie inside that allocation. The request names the
// region like any other (x.shm, y_shm, with offsets from device_ptr); unregister with
// Client::UnregisterRegion before freeing the memory (the server keeps its mapping until then,
// or until --shm-ttl). Needs the CUDA driver (libcuda.so.1, loaded at the first call; the
// client library links no CUDA): FAILED_PRECONDITION without it or for a host pointer.
//
// What the server is told: the allocation's IPC handle, the device's UUID and ordinal, and
// device_ptr's offset in the allocation.
absl::StatusOr<v1::CudaIpcRegion> CudaIpcRegionOf(const void* device_ptr, int64_t bytes);
// CudaIpcRegionOf, then RegisterRegion{name, size_bytes: bytes, cuda_ipc}. Blocks for one RPC.
absl::StatusOr<v1::RegisterRegionResponse> RegisterCudaRegion(Client* client,
                                                              const std::string& name,
                                                              const void* device_ptr,
                                                              int64_t bytes,
                                                              const CallOptions& call = {});

}  // namespace fresnel
