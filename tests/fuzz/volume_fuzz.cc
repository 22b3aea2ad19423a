// VolumeRenderService parsing (server/services/volume_params.cc) and its UploadMesh state machine
// (server/services/volume_service.cc, UploadCall): byte 0 picks the mode.
//   even: a sequence of UploadMeshRequest messages (fuzz_util.h SplitMessages): the header
//         (ParseMeshHeader), chunks into the three ChunkAssemblers under the header's byte
//         budgets, then MeshFromArrays and volume::ValidateMesh, as UploadCall's Take/Complete.
//   odd:  a VolumeRenderRequest, parsed by ParseVolumeRender against the report of a small grid
//         mesh, then the image size.
// The reactor is bound to gRPC; the harness repeats its transitions.
#include <array>
#include <cstddef>
#include <cstdint>

#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/volume.pb.h"
#include "fresnel/volume/mesh.h"
#include "server/services/volume_params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace fresnel;

void Upload(const uint8_t* data, size_t size) {
  server::VolumeLimits limits;
  limits.max_points = 1 << 14;
  limits.max_tets = 1 << 15;
  bool have_header = false;
  server::MeshUploadBudget budget;
  std::array<int64_t, 3> max_bytes{};
  std::array<ChunkAssembler, 3> assemblers;
  std::array<bool, 3> complete{};
  for (absl::string_view bytes : fuzz::SplitMessages(data, size, 32)) {
    v1::UploadMeshRequest request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
    if (!have_header) {
      if (request.msg_case() != v1::UploadMeshRequest::kHeader) return;
      auto b = server::ParseMeshHeader(request.header(), limits);
      if (!b.ok()) return;
      budget = *b;
      max_bytes = {budget.points_bytes(), budget.tets_bytes(), budget.scalars_bytes()};
      have_header = true;
      continue;
    }
    if (request.msg_case() != v1::UploadMeshRequest::kChunk) return;
    v1::MeshChunk& c = *request.mutable_chunk();
    int i;
    switch (c.array()) {
      case v1::MESH_ARRAY_POINTS: i = 0; break;
      case v1::MESH_ARRAY_TETS: i = 1; break;
      case v1::MESH_ARRAY_SCALARS: i = 2; break;
      default: return;
    }
    auto done = assemblers[i].Add(std::move(*c.mutable_chunk()), server::MeshArrayName(c.array()),
                                  max_bytes[i]);
    if (!done.ok()) return;
    complete[i] = *done;
  }
  if (!have_header) return;
  std::array<HostArray, 3> arrays;
  for (int i = 0; i < 3; ++i) {
    if (!complete[i]) return;
    auto a = assemblers[i].Take("array");
    if (!a.ok()) return;
    arrays[i] = *std::move(a);
  }
  auto mesh = server::MeshFromArrays(budget, std::move(arrays[0]), std::move(arrays[1]),
                                     std::move(arrays[2]));
  if (!mesh.ok()) return;
  auto report = volume::ValidateMesh(*mesh);
  if (!report.ok()) return;
  v1::UploadMeshResponse response;
  server::FillMeshReport(*report, &response);
}

const volume::MeshReport& GridReport() {
  static const volume::MeshReport report = [] {
    volume::GridMeshSpec spec;
    spec.cells_x = spec.cells_y = spec.cells_z = 2;
    return *volume::ValidateMesh(*volume::GenerateGridMesh(spec));
  }();
  return report;
}

void Render(const uint8_t* data, size_t size) {
  v1::VolumeRenderRequest request;
  if (!fuzz::ParseMessage(data, size, &request)) return;
  auto in = server::ParseVolumeRender(request, GridReport());
  if (!in.ok()) return;
  (void)in->ImageBytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    Upload(data + 1, size - 1);
  } else {
    Render(data + 1, size - 1);
  }
  return 0;
}
