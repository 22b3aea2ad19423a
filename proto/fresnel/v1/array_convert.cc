#include "fresnel/v1/array_convert.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fresnel {

absl::StatusOr<DType> FromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::FLOAT32: return DType::kFloat32;
    case v1::FLOAT64: return DType::kFloat64;
    case v1::COMPLEX64: return DType::kComplex64;
    case v1::COMPLEX128: return DType::kComplex128;
    case v1::UINT8: return DType::kUint8;
    case v1::UINT16: return DType::kUint16;
    case v1::INT16: return DType::kInt16;
    case v1::INT32: return DType::kInt32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: unknown or unspecified dtype (", static_cast<int>(dtype), ")"));
  }
}

v1::DType ToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return v1::FLOAT32;
    case DType::kFloat64: return v1::FLOAT64;
    case DType::kComplex64: return v1::COMPLEX64;
    case DType::kComplex128: return v1::COMPLEX128;
    case DType::kUint8: return v1::UINT8;
    case DType::kUint16: return v1::UINT16;
    case DType::kInt16: return v1::INT16;
    case DType::kInt32: return v1::INT32;
  }
  return v1::DTYPE_UNSPECIFIED;
}

namespace {
absl::StatusOr<HostArray> Convert(const v1::NdArray& a, std::string bytes, absl::string_view field) {
  auto dtype = FromProto(a.dtype(), field);
  if (!dtype.ok()) return dtype.status();
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  return HostArray::FromBytes(*dtype, std::move(shape), std::move(bytes), field);
}

absl::Status NoShmHere(const v1::NdArray& a, absl::string_view field) {
  if (!a.has_shm()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ".shm: this call does not accept shared-memory arrays; send the bytes in ", field,
      ".data"));
}
}  // namespace

absl::StatusOr<int64_t> ArrayBytes(v1::DType dtype, const std::vector<int64_t>& shape,
                                   absl::string_view field) {
  auto d = FromProto(dtype, field);
  if (!d.ok()) return d.status();
  const int64_t elements = ShapeElements(shape);
  const int64_t itemsize = static_cast<int64_t>(DTypeSize(*d));
  if (elements < 0 || elements > std::numeric_limits<int64_t>::max() / itemsize) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape ", ShapeString(shape), ": negative dimension or too many elements"));
  }
  return elements * itemsize;
}

absl::StatusOr<HostArray> FromProto(const v1::NdArray& array, absl::string_view field) {
  if (absl::Status st = NoShmHere(array, field); !st.ok()) return st;
  return Convert(array, array.data(), field);
}

absl::StatusOr<HostArray> FromProto(v1::NdArray&& array, absl::string_view field) {
  if (absl::Status st = NoShmHere(array, field); !st.ok()) return st;
  std::string bytes = std::move(*array.mutable_data());
  return Convert(array, std::move(bytes), field);
}

absl::StatusOr<HostArray> FromProto(v1::NdArray&& array, absl::string_view field,
                                    const ShmResolver& resolver) {
  if (!array.has_shm() || !resolver) return FromProto(std::move(array), field);
  if (!array.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": set data or shm, not both (data has ", array.data().size(),
                     " bytes)"));
  }
  std::vector<int64_t> shape(array.shape().begin(), array.shape().end());
  absl::StatusOr<int64_t> nbytes = ArrayBytes(array.dtype(), shape, field);
  if (!nbytes.ok()) return nbytes.status();
  absl::StatusOr<ShmSpan> span = resolver(array.shm(), *nbytes, absl::StrCat(field, ".shm"));
  if (!span.ok()) return span.status();
  if (span->size < *nbytes) {
    return absl::InternalError(absl::StrCat(field, ".shm: the resolver returned ", span->size,
                                            " bytes, need ", *nbytes));
  }
  // One pass over the region (no zero fill first): the array owns its bytes from here on, so a
  // client that rewrites the region while the request runs cannot change what is computed.
  std::string bytes(span->data, static_cast<size_t>(*nbytes));
  return Convert(array, std::move(bytes), field);
}

v1::NdArray ShmArray(DType dtype, const std::vector<int64_t>& shape, const std::string& region,
                     int64_t offset_bytes) {
  v1::NdArray a;
  a.set_dtype(ToProto(dtype));
  a.mutable_shape()->Assign(shape.begin(), shape.end());
  a.mutable_shm()->set_region(region);
  a.mutable_shm()->set_offset_bytes(offset_bytes);
  return a;
}

namespace {
void CollectNdArrays(google::protobuf::Message* message, const std::string& prefix,
                     std::vector<NdArrayField>* out) {
  const google::protobuf::Reflection* r = message->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(*message, &fields);  // the set fields, by field number
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    const bool is_array = f->message_type() == v1::NdArray::descriptor();
    if (f->is_repeated()) {
      if (f->is_map()) continue;
      for (int i = 0, n = r->FieldSize(*message, f); i < n; ++i) {
        google::protobuf::Message* m = r->MutableRepeatedMessage(message, f, i);
        const std::string item = absl::StrCat(path, "[", i, "]");
        if (is_array) {
          out->push_back({item, static_cast<v1::NdArray*>(m)});
        } else {
          CollectNdArrays(m, item, out);
        }
      }
    } else if (is_array) {
      out->push_back({path, static_cast<v1::NdArray*>(r->MutableMessage(message, f))});
    } else {
      CollectNdArrays(r->MutableMessage(message, f), path, out);
    }
  }
}
}  // namespace

std::vector<NdArrayField> NdArrayFields(google::protobuf::Message* message) {
  std::vector<NdArrayField> out;
  CollectNdArrays(message, "", &out);
  return out;
}

int64_t RegionSlotBytes(int64_t nbytes) {
  if (nbytes < 0 || nbytes > std::numeric_limits<int64_t>::max() - kRegionSlotAlign) return -1;
  return (nbytes + kRegionSlotAlign - 1) / kRegionSlotAlign * kRegionSlotAlign;
}

int64_t OutputRegionBytes(const std::vector<int64_t>& nbytes) {
  int64_t total = 0;
  for (int64_t n : nbytes) {
    const int64_t slot = RegionSlotBytes(n);
    if (slot < 0 || total > std::numeric_limits<int64_t>::max() - slot) return -1;
    total += slot;
  }
  return total;
}

void ToProto(const HostArray& array, v1::NdArray* out) {
  out->set_dtype(ToProto(array.dtype()));
  out->mutable_shape()->Assign(array.shape().begin(), array.shape().end());
  out->set_data(array.bytes().data(), array.nbytes());
}

void ToProto(HostArray&& array, v1::NdArray* out) {
  out->set_dtype(ToProto(array.dtype()));
  out->mutable_shape()->Assign(array.shape().begin(), array.shape().end());
  *out->mutable_data() = std::move(array).TakeBytes();
}

v1::ArrayChunk ArrayChunkAt(const HostArray& array, int64_t offset, int64_t chunk_bytes) {
  const std::string_view bytes = array.bytes();
  const int64_t total = static_cast<int64_t>(bytes.size());
  chunk_bytes = std::max<int64_t>(chunk_bytes, 1);
  offset = std::clamp<int64_t>(offset, 0, total);
  v1::ArrayChunk c;
  if (offset == 0) {
    c.set_dtype(ToProto(array.dtype()));
    c.mutable_shape()->Assign(array.shape().begin(), array.shape().end());
  }
  const int64_t n = std::min(chunk_bytes, total - offset);
  c.set_offset_bytes(offset);
  c.set_total_bytes(total);
  c.set_data(bytes.data() + offset, static_cast<size_t>(n));
  c.set_last(offset + n >= total);
  return c;
}

std::vector<v1::ArrayChunk> SplitIntoChunks(const HostArray& array, int64_t chunk_bytes) {
  std::vector<v1::ArrayChunk> chunks;
  const int64_t total = static_cast<int64_t>(array.nbytes());
  chunk_bytes = std::max<int64_t>(chunk_bytes, 1);
  int64_t offset = 0;
  do {
    chunks.push_back(ArrayChunkAt(array, offset, chunk_bytes));
    offset += chunk_bytes;
  } while (offset < total);
  return chunks;
}

absl::StatusOr<bool> ChunkAssembler::Add(v1::ArrayChunk&& chunk, absl::string_view field,
                                         int64_t max_total_bytes) {
  if (done_) return absl::InvalidArgumentError(absl::StrCat(field, ": chunk after the last one"));
  if (!started_) {
    started_ = true;
    dtype_ = chunk.dtype();
    shape_.assign(chunk.shape().begin(), chunk.shape().end());
    total_ = chunk.total_bytes();
    if (total_ < 0 || total_ > max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(field, ".total_bytes ", total_,
                                                       " exceeds the limit of ", max_total_bytes));
    }
  }
  if (chunk.offset_bytes() != static_cast<int64_t>(bytes_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".offset_bytes is ", chunk.offset_bytes(),
                                                   ", expected ", bytes_.size()));
  }
  if (static_cast<int64_t>(bytes_.size() + chunk.data().size()) > total_) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".data runs past total_bytes ", total_));
  }
  // Grow with what arrives, not with what the first chunk claims: a client that declares 4 GiB
  // and sends 3 bytes must not make the server reserve 4 GiB. Doubling keeps the copies linear.
  const size_t need = bytes_.size() + chunk.data().size();
  if (need > bytes_.capacity()) {
    bytes_.reserve(std::min<size_t>(static_cast<size_t>(total_),
                                    std::max<size_t>(need, 2 * bytes_.capacity())));
  }
  bytes_ += chunk.data();
  if (chunk.last()) {
    if (static_cast<int64_t>(bytes_.size()) != total_) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": last chunk at ", bytes_.size(),
                                                     " of ", total_, " bytes"));
    }
    done_ = true;
  }
  return done_;
}

absl::StatusOr<HostArray> ChunkAssembler::Take(absl::string_view field) {
  if (!done_) return absl::FailedPreconditionError(absl::StrCat(field, ": array incomplete"));
  auto dtype = FromProto(dtype_, field);
  if (!dtype.ok()) return dtype.status();
  return HostArray::FromBytes(*dtype, shape_, std::move(bytes_), field);
}

}  // namespace fresnel
