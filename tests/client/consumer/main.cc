// Links against the installed fresnel::client and exercises it without a server: chunking
// helpers, the array conversion, and a call that must fail cleanly with UNAVAILABLE.
#include <cstdio>

#include "fresnel/client/client.h"
#include "fresnel/v1/array_convert.h"

int main() {
  fresnel::HostArray x(fresnel::DType::kFloat32, {2, 100});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i);
  auto slice = fresnel::SliceSamples(x, 10, 20);
  if (!slice.ok() || slice->data<float>()[0] != 10.0f) {
    std::fprintf(stderr, "SliceSamples failed\n");
    return 1;
  }
  fresnel::v1::UpfirdnRequest request;
  fresnel::ToProto(x, request.mutable_x());
  request.set_up(2);

  fresnel::ClientOptions options;
  options.address = "127.0.0.1:1";  // nothing listens there
  options.default_timeout = std::chrono::seconds(5);
  auto client = fresnel::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "Connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto response = (*client)->Upfirdn(request);
  if (response.status().code() != absl::StatusCode::kUnavailable) {
    std::fprintf(stderr, "expected UNAVAILABLE, got %s\n", response.status().ToString().c_str());
    return 1;
  }
  std::printf("consumer OK: %s\n", response.status().ToString().c_str());
  return 0;
}
