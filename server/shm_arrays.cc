#include "server/shm_arrays.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/core/copy.h"
#include "fresnel/core/status.h"
#include "server/shm.h"

namespace fresnel::server {

ShmResolver ClientRegions(ServiceContext* ctx, const std::string& client) {
  if (ctx == nullptr || ctx->shm == nullptr) return ShmResolver();
  return ctx->shm->ResolverFor(client);
}

ShmResolver ClientRegions(ServiceContext* ctx, const grpc::ServerContextBase* context) {
  return ClientRegions(ctx, ClientOf(context));
}

namespace {

// The bytes an NdArray with `shm` set names, checked and resolved (InlineShmInputs' errors).
absl::StatusOr<ShmSpan> ResolveShmInput(const v1::NdArray& a, const ShmResolver& resolver,
                                        const std::string& field, int64_t* nbytes) {
  if (!resolver) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shm: this server accepts no shared-memory regions; send the bytes in ", field,
        ".data"));
  }
  if (!a.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": set data or shm, not both (data has ", a.data().size(), " bytes)"));
  }
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  FRESNEL_ASSIGN_OR_RETURN(*nbytes, ArrayBytes(a.dtype(), shape, field));
  FRESNEL_ASSIGN_OR_RETURN(ShmSpan span, resolver(a.shm(), *nbytes, absl::StrCat(field, ".shm")));
  if (span.size < *nbytes) {
    return absl::InternalError(absl::StrCat(field, ".shm: the resolver returned ", span.size,
                                            " bytes, need ", *nbytes));
  }
  return span;
}

}  // namespace

absl::Status InlineShmInputs(google::protobuf::Message* request, const ShmResolver& resolver,
                             absl::string_view prefix) {
  for (const NdArrayField& f : NdArrayFields(request)) {
    v1::NdArray* a = f.array;
    if (!a->has_shm()) continue;
    int64_t nbytes = 0;
    FRESNEL_ASSIGN_OR_RETURN(ShmSpan span,
                             ResolveShmInput(*a, resolver, absl::StrCat(prefix, f.path), &nbytes));
    // One copy, when the request is accepted: the region is not read again.
    a->mutable_data()->assign(span.data, static_cast<size_t>(nbytes));
    a->clear_shm();
  }
  return absl::OkStatus();
}

absl::StatusOr<RegionArray> BorrowShmInput(const v1::NdArray& array, const ShmResolver& resolver,
                                           const std::string& field) {
  int64_t nbytes = 0;
  RegionArray out;
  FRESNEL_ASSIGN_OR_RETURN(out.span, ResolveShmInput(array, resolver, field, &nbytes));
  FRESNEL_ASSIGN_OR_RETURN(DType dtype, FromProto(array.dtype(), field));
  FRESNEL_ASSIGN_OR_RETURN(
      out.array, HostArray::Borrow(dtype, {array.shape().begin(), array.shape().end()},
                                   out.span.data, static_cast<size_t>(nbytes), field));
  return out;
}

absl::StatusOr<OutputRegion> OutputRegion::Reserve(bool has_ref, const v1::ShmRef& ref,
                                                   const std::vector<int64_t>& nbytes,
                                                   const ShmResolver& resolver,
                                                   std::string field) {
  OutputRegion out;
  if (!has_ref) return out;
  if (!resolver) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": this server accepts no shared-memory regions"));
  }
  const int64_t total = OutputRegionBytes(nbytes);
  if (total < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the outputs' byte count overflows int64"));
  }
  FRESNEL_ASSIGN_OR_RETURN(out.span_, resolver(ref, total, field));
  out.active_ = true;
  out.ref_ = ref;
  out.field_ = std::move(field);
  out.resolver_ = resolver;
  return out;
}

absl::Status OutputRegion::Fit(const std::vector<int64_t>& sizes) {
  if (!active_) return absl::InternalError(absl::StrCat(field_, ": no output region"));
  const int64_t total = OutputRegionBytes(sizes);
  if (total < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_, ": the outputs' byte count overflows int64"));
  }
  if (total > span_.size) {
    // More than the request's sizes promised: the range is checked again, and nothing is written
    // unless all of it lies in the region.
    FRESNEL_ASSIGN_OR_RETURN(span_, resolver_(ref_, total, field_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> OutputRegion::CopyIn(const std::vector<Piece>& pieces) {
  std::vector<int64_t> sizes;
  for (const Piece& p : pieces) sizes.push_back(p.size);
  FRESNEL_RETURN_IF_ERROR(Fit(sizes));
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Piece& p : pieces) {
    offsets.push_back(at);
    if (p.size > 0) {
      GatherBytes({BytePiece{p.data, static_cast<size_t>(p.size)}}, span_.data + at);
    }
    at += RegionSlotBytes(p.size);
  }
  return offsets;
}

absl::Status OutputRegion::Write(
    const std::vector<std::pair<const HostArray*, v1::NdArray*>>& arrays) {
  std::vector<Piece> pieces;
  for (const auto& [array, out] : arrays) {
    pieces.push_back({static_cast<const char*>(array->raw()),
                      static_cast<int64_t>(array->nbytes())});
  }
  FRESNEL_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, CopyIn(pieces));
  for (size_t i = 0; i < arrays.size(); ++i) {
    *arrays[i].second = ShmArray(arrays[i].first->dtype(), arrays[i].first->shape(),
                                 ref_.region(), ref_.offset_bytes() + offsets[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostArray>> OutputRegion::Views(
    const std::vector<std::pair<DType, std::vector<int64_t>>>& arrays) {
  std::vector<int64_t> sizes;
  for (const auto& [dtype, shape] : arrays) {
    const int64_t n = ShapeElements(shape);
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(field_, ": an invalid shape"));
    sizes.push_back(n * static_cast<int64_t>(DTypeSize(dtype)));
  }
  FRESNEL_RETURN_IF_ERROR(Fit(sizes));
  std::vector<HostArray> views;
  int64_t at = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    FRESNEL_ASSIGN_OR_RETURN(HostArray view,
                             HostArray::Borrow(arrays[i].first, arrays[i].second, span_.data + at,
                                               static_cast<size_t>(sizes[i]), field_));
    views.push_back(std::move(view));
    at += RegionSlotBytes(sizes[i]);
  }
  return views;
}

absl::StatusOr<v1::NdArray> OutputRegion::RefOf(const HostArray& view) const {
  const char* at = static_cast<const char*>(view.raw());
  if (!active_ || !view.borrowed() || at < span_.data ||
      at + view.nbytes() > span_.data + span_.size) {
    return absl::InternalError(absl::StrCat(field_, ": the array is not in the output region"));
  }
  return ShmArray(view.dtype(), view.shape(), ref_.region(),
                  ref_.offset_bytes() + static_cast<int64_t>(at - span_.data));
}

absl::Status OutputRegion::Store(google::protobuf::Message* message) {
  std::vector<v1::NdArray*> arrays;
  std::vector<Piece> pieces;
  for (const NdArrayField& f : NdArrayFields(message)) {
    if (f.array->has_shm()) continue;
    arrays.push_back(f.array);
    pieces.push_back({f.array->data().data(), static_cast<int64_t>(f.array->data().size())});
  }
  FRESNEL_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, CopyIn(pieces));
  for (size_t i = 0; i < arrays.size(); ++i) {
    std::string().swap(*arrays[i]->mutable_data());  // the bytes are in the region now
    arrays[i]->mutable_shm()->set_region(ref_.region());
    arrays[i]->mutable_shm()->set_offset_bytes(ref_.offset_bytes() + offsets[i]);
  }
  return absl::OkStatus();
}

}  // namespace fresnel::server
