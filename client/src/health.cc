#include "health_codec.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace fresnel::internal {

using google::protobuf::internal::WireFormatLite;

std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3 omits default values
  google::protobuf::io::StringOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  WireFormatLite::WriteString(1, service, &coded);
  coded.Trim();
  return out;
}

absl::StatusOr<int> DecodeHealthCheckResponse(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  int status = 0;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t value = 0;
      if (!in.ReadVarint32(&value)) {
        return absl::InvalidArgumentError("malformed grpc.health.v1.HealthCheckResponse");
      }
      status = static_cast<int>(value);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::InvalidArgumentError("malformed grpc.health.v1.HealthCheckResponse");
    }
  }
  if (!in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError("malformed grpc.health.v1.HealthCheckResponse");
  }
  return status;
}

}  // namespace fresnel::internal
