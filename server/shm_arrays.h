// Shared-memory arrays in any request and response (issue 10; docs/transport.md, "Which requests
// accept it" and "Outputs to a region"). Every service goes through these two pieces instead of
// resolving regions by itself:
//
//  - InlineShmInputs: a request's NdArray inputs that name a region (NdArray.shm) are copied out
//    of it into their `data` when the request is accepted, so the rest of the service sees an
//    inline request (and the client may rewrite the region as soon as the call returns).
//  - OutputRegion: a request's out_shm. Reserve resolves the range the response's arrays need
//    before any compute; Store / Write put the arrays there (each in a 64-byte slot, in the
//    response's field order) and leave dtype, shape and a ShmRef in the response.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/common.pb.h"
#include "google/protobuf/message.h"
#include "server/call.h"

namespace fresnel::server {

// The client's host-memory regions (a CUDA IPC region is INVALID_ARGUMENT naming the field: these
// services read and write host memory); an empty resolver when the server has no registry.
ShmResolver ClientRegions(ServiceContext* ctx, const std::string& client);
ShmResolver ClientRegions(ServiceContext* ctx, const grpc::ServerContextBase* context);

// Copies the bytes of every NdArray of `request` whose `shm` is set into its `data` and clears
// `shm`. Errors name the array's path (with `prefix` before it): NOT_FOUND `phase.shm.region`
// (unknown, or another client's region), INVALID_ARGUMENT `phase.shm.offset_bytes` (outside the
// region), `phase.shape` (overflowing), `phase` (data and shm both set), `phase.shm.region` (a
// CUDA IPC region), `phase.shm` (no resolver: the server takes no regions). Stops at the first.
absl::Status InlineShmInputs(google::protobuf::Message* request, const ShmResolver& resolver,
                             absl::string_view prefix = "");

// An input read where it lies instead (a kernel's input that is copied to the device or into
// memory of its own before use, so that a client rewriting the region meanwhile cannot break
// more than its own result): the NdArray's bytes in the region as a HostArray::Borrow view, and
// the span that keeps the region mapped while the view is used. Errors as InlineShmInputs's,
// naming `field`.
struct RegionArray {
  HostArray array;
  ShmSpan span;
};
absl::StatusOr<RegionArray> BorrowShmInput(const v1::NdArray& array, const ShmResolver& resolver,
                                           const std::string& field);

// Where a response's arrays go when the request set out_shm. Inactive (default): inline.
class OutputRegion {
 public:
  OutputRegion() = default;

  // Inactive when !has_ref. Otherwise resolves OutputRegionBytes(nbytes) bytes at ref of the
  // caller's region now and holds the mapping: NOT_FOUND `field`.region, INVALID_ARGUMENT
  // `field`.offset_bytes when they are not inside it, INVALID_ARGUMENT `field` when the server
  // takes no regions or the sizes overflow. `nbytes`: the byte count of every array the
  // response will carry (their order does not matter).
  static absl::StatusOr<OutputRegion> Reserve(bool has_ref, const v1::ShmRef& ref,
                                              const std::vector<int64_t>& nbytes,
                                              const ShmResolver& resolver, std::string field);

  bool active() const { return active_; }
  const std::string& field() const { return field_; }

  // Copies `arrays` into consecutive slots and sets each NdArray to the array's dtype, shape and
  // its ShmRef (data empty). Nothing is written unless all fit: arrays larger than what Reserve
  // checked are resolved again (INVALID_ARGUMENT `field`.offset_bytes when they do not fit).
  absl::Status Write(const std::vector<std::pair<const HostArray*, v1::NdArray*>>& arrays);
  // The same for every inline NdArray of `message` (NdArrayFields order), whose bytes are then
  // dropped from the message.
  absl::Status Store(google::protobuf::Message* message);
  // Instead of Write: views (HostArray::Borrow) of the slots that arrays of these dtypes and
  // shapes, in this order, occupy, for a kernel to write its result into the region directly
  // (checked as Write checks; valid while this OutputRegion holds the mapping). RefOf(view) is
  // then what the response carries for it.
  absl::StatusOr<std::vector<HostArray>> Views(
      const std::vector<std::pair<DType, std::vector<int64_t>>>& arrays);
  absl::StatusOr<v1::NdArray> RefOf(const HostArray& view) const;
  // Lets the mapping go (the region may then be unmapped if it was unregistered).
  void Release() { span_ = ShmSpan(); }

 private:
  struct Piece {
    const char* data;
    int64_t size;
  };
  // Makes sure arrays of these byte counts fit from ref_ on (resolving the range again when it
  // is larger than Reserve's).
  absl::Status Fit(const std::vector<int64_t>& sizes);
  // Makes sure `pieces` fit, copies them, and returns each one's offset in the region.
  absl::StatusOr<std::vector<int64_t>> CopyIn(const std::vector<Piece>& pieces);

  bool active_ = false;
  v1::ShmRef ref_;
  std::string field_;
  ShmResolver resolver_;
  ShmSpan span_;
};

}  // namespace fresnel::server
