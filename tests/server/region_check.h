// Checks shared by the services' shared-memory tests (docs/transport.md, "Which requests accept
// it", "Outputs to a region"): a response whose arrays went to a region against the same
// response inline.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/v1/array_convert.h"
#include "google/protobuf/message.h"

namespace fresnel::testing {

// `st` has `code` and its message names `text`.
inline bool StatusNames(const absl::Status& st, absl::StatusCode code, const std::string& text) {
  INFO(st.ToString());
  return st.code() == code && st.message().find(text) != absl::string_view::npos;
}

// `got` carries the same arrays as `want` (same fields, dtypes and shapes), each lying in
// `region` (data empty, shm naming it, at a 64-byte slot from `base`), with `want`'s bytes there;
// every other field is equal. Returns how many arrays were compared.
inline int CheckArraysInRegion(google::protobuf::Message* want, google::protobuf::Message* got,
                               const SharedRegion& region, int64_t base) {
  std::vector<NdArrayField> w = NdArrayFields(want), g = NdArrayFields(got);
  REQUIRE(w.size() == g.size());
  int64_t at = base;
  for (size_t i = 0; i < w.size(); ++i) {
    INFO(g[i].path);
    CHECK(g[i].path == w[i].path);
    CHECK(g[i].array->data().empty());
    REQUIRE(g[i].array->has_shm());
    CHECK(g[i].array->shm().region() == region.name());
    CHECK(g[i].array->shm().offset_bytes() == at);
    at += RegionSlotBytes(static_cast<int64_t>(w[i].array->data().size()));
    CHECK(g[i].array->dtype() == w[i].array->dtype());
    CHECK(std::vector<int64_t>(g[i].array->shape().begin(), g[i].array->shape().end()) ==
          std::vector<int64_t>(w[i].array->shape().begin(), w[i].array->shape().end()));
    absl::StatusOr<HostArray> bytes = region.Read(*g[i].array);
    REQUIRE(bytes.ok());
    CHECK(bytes->bytes() == w[i].array->data());
    // With the arrays out of the way, the rest of the two messages must be equal.
    g[i].array->clear_shm();
    *g[i].array->mutable_data() = w[i].array->data();
  }
  return static_cast<int>(w.size());
}

// Every message of a server-streaming call's `reader` (from a raw stub), and the call's status in
// *status.
template <class Response, class Reader>
std::vector<Response> ReadToEnd(Reader& reader, absl::Status* status) {
  std::vector<Response> out;
  Response m;
  while (reader->Read(&m)) out.push_back(m);
  const grpc::Status st = reader->Finish();
  *status = FromGrpcStatus(static_cast<int>(st.error_code()), st.error_message());
  return out;
}

// The timing fields differ between two runs: cleared before messages are compared.
inline void ClearTimes(google::protobuf::Message* m) {
  const google::protobuf::Reflection* r = m->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->name() == "info" || f->name() == "stage_seconds" || f->name() == "stats_seconds") {
      r->ClearField(m, f);
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE &&
               !f->is_repeated()) {
      ClearTimes(r->MutableMessage(m, f));
    }
  }
}

}  // namespace fresnel::testing
