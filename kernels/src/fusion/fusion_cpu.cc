// TBB backend of fusion::Volume: the same layout and per-element math (fusion_math.h) as the CUDA
// backend, with serial, sorted allocation so that it is deterministic. It is the test oracle.
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fusion/fusion_internal.h"

namespace fresnel::fusion {
namespace {

using namespace detail;  // NOLINT: the backend is written in terms of the shared math.

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CpuBackend : public VolumeBackend {
 public:
  explicit CpuBackend(const FusionConfig& config) : config_(config) {
    sizes_ = ComputeSizes(config);
    keys_.assign(sizes_.slots, kEmptyKey);
    vals_.assign(sizes_.slots, -1);
    brick_keys_.assign(sizes_.capacity, kEmptyKey);
    free_list_.resize(sizes_.capacity);
    for (int64_t i = 0; i < sizes_.capacity; ++i) free_list_[i] = static_cast<int32_t>(i);
    voxels_.assign(sizes_.capacity * kBrickVoxels, Voxel{0, 0});
    if (config.color) colors_.assign(sizes_.capacity * kBrickVoxels, Color4{0, 0, 0, 0});
    top_keys_.assign(sizes_.top_slots, kEmptyKey);
    top_masks_.assign(sizes_.top_slots, 0);
    top_mids_.assign(sizes_.top_slots * 64, 0);
    cam_ = ToCameraF(config.camera);
    for (int l = 0; l < kLevels; ++l) {
      CameraF c = ScaleCamera(cam_, l);
      depth_[l].assign(static_cast<size_t>(c.width) * c.height, 0.0f);
      vtx_[l].assign(depth_[l].size(), F4{0, 0, 0, 0});
      nrm_[l].assign(depth_[l].size(), F4{0, 0, 0, 0});
    }
    filtered_.assign(sizes_.pixels, 0.0f);
    model_v_.assign(sizes_.pixels, F4{0, 0, 0, 0});
    model_n_.assign(sizes_.pixels, F4{0, 0, 0, 0});
    std::memset(&counters_, 0, sizeof(counters_));
    std::memset(&st_, 0, sizeof(st_));
    PoseD id = ToPoseD(RigidTransform::Identity());
    st_.prev_pose = id;
    SetPose(&st_, id);
  }

  VolumeView View() {
    VolumeView v;
    v.keys = keys_.data();
    v.vals = vals_.data();
    v.slot_mask = static_cast<uint32_t>(sizes_.slots - 1);
    v.voxels = voxels_.data();
    v.colors = config_.color ? colors_.data() : nullptr;
    v.brick_keys = brick_keys_.data();
    v.top_keys = top_keys_.data();
    v.top_masks = top_masks_.data();
    v.top_mids = top_mids_.data();
    v.top_mask = static_cast<uint32_t>(sizes_.top_slots - 1);
    v.voxel_size = static_cast<float>(config_.voxel_size_m);
    v.mu = static_cast<float>(config_.truncation_m);
    v.max_weight = config_.max_weight;
    return v;
  }

  absl::StatusOr<FrameResult> ProcessFrame(const Device&, const FrameInput& frame,
                                           const FrameParams& params) override {
    const double t0 = Now();
    st_.prior = params.prior;
    st_.has_prior = params.has_prior;
    st_.has_fixed = params.has_fixed;
    st_.prior_weight = params.prior_weight;
    const bool was_lost = st_.lost != 0;
    BeginFrame(&st_, config_.tracking ? 1 : 0);
    // Relocalisation: after a loss, the model is raycast again from the prior before ICP.
    if (config_.tracking && params.has_prior && !params.has_fixed && was_lost && st_.has_model)
      RaycastModel();
    PrepareFrame(frame);
    if (st_.do_track) Track();
    FinishTracking(&st_);
    if (!params.integrate) st_.integrate = 0;
    const double t1 = Now();
    counters_.dropped = 0;
    if (st_.integrate) {
      Allocate();
      Integrate(frame);
    }
    const double t2 = Now();
    if (config_.tracking && st_.integrate) RaycastModel();
    const double t3 = Now();

    FrameResult r;
    r.T_world_camera = FromPoseD(st_.pose);
    r.state = st_.lost ? TrackingState::kLost : TrackingState::kOk;
    r.relocalized = st_.relocalized != 0;
    r.integrated = st_.integrate != 0;
    r.inliers = static_cast<int64_t>(st_.inliers);
    r.residual_m = st_.residual;
    r.icp_iterations = st_.iterations;
    r.bricks_in_use = counters_.used;
    r.bricks_dropped = counters_.dropped;
    r.track_s = t1 - t0;
    r.integrate_s = t2 - t1;
    r.raycast_s = t3 - t2;
    return r;
  }

  absl::StatusOr<HostArray> Render(const Device&, const RigidTransform& T_wc,
                                   const CameraIntrinsics& camera, RenderMode mode) override {
    const CameraF cam = ToCameraF(camera);
    const PoseF pose = ToFloat(ToPoseD(T_wc));
    const int w = cam.width, h = cam.height;
    HostArray out;
    switch (mode) {
      case RenderMode::kDepth: out = HostArray(DType::kFloat32, {h, w}); break;
      case RenderMode::kNormals: out = HostArray(DType::kFloat32, {h, w, 3}); break;
      case RenderMode::kShaded: out = HostArray(DType::kUint8, {h, w}); break;
      case RenderMode::kColor: out = HostArray(DType::kUint8, {h, w, 3}); break;
    }
    VolumeView v = View();
    const bool oct = counters_.octree_overflow == 0;
    const float mn = static_cast<float>(config_.min_depth_m), mx = static_cast<float>(config_.max_depth_m);
    tbb::parallel_for(tbb::blocked_range<int>(0, h), [&](const tbb::blocked_range<int>& rows) {
      for (int y = rows.begin(); y < rows.end(); ++y)
        for (int x = 0; x < w; ++x) {
          PixelHit p = RaycastPixel(v, oct, pose, cam, x, y, mn, mx);
          const int64_t i = static_cast<int64_t>(y) * w + x;
          switch (mode) {
            case RenderMode::kDepth: out.data<float>()[i] = p.depth_z; break;
            case RenderMode::kNormals:
              out.data<float>()[3 * i] = p.hit ? p.normal_w.x : 0.0f;
              out.data<float>()[3 * i + 1] = p.hit ? p.normal_w.y : 0.0f;
              out.data<float>()[3 * i + 2] = p.hit ? p.normal_w.z : 0.0f;
              break;
            case RenderMode::kShaded:
              out.data<uint8_t>()[i] = p.hit ? ShadeValue(p.normal_w, p.dir_w) : 0;
              break;
            case RenderMode::kColor:
              out.data<uint8_t>()[3 * i] = p.hit ? p.color.r : 0;
              out.data<uint8_t>()[3 * i + 1] = p.hit ? p.color.g : 0;
              out.data<uint8_t>()[3 * i + 2] = p.hit ? p.color.b : 0;
              break;
          }
        }
    });
    return out;
  }

  absl::StatusOr<Mesh> ExtractMesh(const Device&) override {
    std::vector<std::pair<uint64_t, int32_t>> bricks;
    for (int32_t i = 0; i < counters_.hwm; ++i)
      if (brick_keys_[i] != kEmptyKey) bricks.emplace_back(brick_keys_[i], i);
    std::sort(bricks.begin(), bricks.end());
    const int64_t nb = static_cast<int64_t>(bricks.size());
    const float span = MeshMaxSpan(static_cast<float>(config_.voxel_size_m),
                                   static_cast<float>(config_.truncation_m));
    std::vector<int64_t> counts(nb + 1, 0);
    tbb::parallel_for(int64_t{0}, nb, [&](int64_t i) {
      const Voxel* brick = voxels_.data() + static_cast<int64_t>(bricks[i].second) * kBrickVoxels;
      int64_t n = 0;
      CellCounter counter;
      for (int z = 0; z < 8; ++z)
        for (int y = 0; y < 8; ++y)
          for (int x = 0; x < 8; ++x) {
            float c[8];
            if (LoadCell(brick, x, y, z, span, c)) n += CellTriangles(c, counter);
          }
      counts[i + 1] = n;
    });
    for (int64_t i = 0; i < nb; ++i) counts[i + 1] += counts[i];
    const int64_t nt = counts[nb];
    Mesh mesh;
    mesh.vertices.resize(nt * 9);
    mesh.normals.resize(nt * 9);
    if (config_.color) mesh.colors.resize(nt * 9);
    mesh.triangles.resize(nt * 3);
    for (int64_t i = 0; i < nt * 3; ++i) mesh.triangles[i] = static_cast<int32_t>(i);
    const float vs = static_cast<float>(config_.voxel_size_m);
    tbb::parallel_for(int64_t{0}, nb, [&](int64_t i) {
      const int64_t base = static_cast<int64_t>(bricks[i].second) * kBrickVoxels;
      const Voxel* brick = voxels_.data() + base;
      I3 b = UnpackKey(bricks[i].first);
      CellWriter wr;
      wr.out = MeshOut{mesh.vertices.data(), mesh.normals.data(),
                       config_.color ? mesh.colors.data() : nullptr};
      wr.next = counts[i];
      wr.vs = vs;
      for (int z = 0; z < 8; ++z)
        for (int y = 0; y < 8; ++y)
          for (int x = 0; x < 8; ++x) {
            float c[8];
            if (!LoadCell(brick, x, y, z, span, c)) continue;
            Color4 cc[8];
            if (config_.color)
              for (int k = 0; k < 8; ++k)
                cc[k] = colors_[base + x + 9 * y + 81 * z + CornerOffset(k)];
            wr.c = c;
            wr.corner_colors = config_.color ? cc : nullptr;
            wr.origin = V3{static_cast<float>(8 * b.x + x) * vs, static_cast<float>(8 * b.y + y) * vs,
                           static_cast<float>(8 * b.z + z) * vs};
            CellTriangles(c, wr);
          }
    });
    return mesh;
  }

  absl::StatusOr<VolumeState> Export(const Device&) override {
    VolumeState s;
    s.counters = counters_;
    s.keys = keys_;
    s.vals = vals_;
    s.brick_keys = brick_keys_;
    s.free_list = free_list_;
    for (int32_t i = 0; i < static_cast<int32_t>(sizes_.capacity); ++i)
      if (brick_keys_[i] != kEmptyKey) s.used_bricks.push_back(i);
    s.voxels.resize(s.used_bricks.size() * kBrickVoxels);
    if (config_.color) s.colors.resize(s.voxels.size());
    for (size_t k = 0; k < s.used_bricks.size(); ++k) {
      const int64_t src = static_cast<int64_t>(s.used_bricks[k]) * kBrickVoxels;
      std::memcpy(&s.voxels[k * kBrickVoxels], &voxels_[src], kBrickVoxels * sizeof(Voxel));
      if (config_.color)
        std::memcpy(&s.colors[k * kBrickVoxels], &colors_[src], kBrickVoxels * sizeof(Color4));
    }
    s.prev_pose = st_.prev_pose;
    s.model_T_cw = st_.model_T_cw;
    s.model_T_wc = st_.model_T_wc;
    s.has_model = st_.has_model;
    return s;
  }

  absl::Status Import(const Device&, const VolumeState& s) override {
    counters_ = s.counters;
    keys_ = s.keys;
    vals_ = s.vals;
    brick_keys_ = s.brick_keys;
    free_list_ = s.free_list;
    std::fill(voxels_.begin(), voxels_.end(), Voxel{0, 0});
    for (size_t k = 0; k < s.used_bricks.size(); ++k) {
      const int64_t dst = static_cast<int64_t>(s.used_bricks[k]) * kBrickVoxels;
      std::memcpy(&voxels_[dst], &s.voxels[k * kBrickVoxels], kBrickVoxels * sizeof(Voxel));
      if (config_.color)
        std::memcpy(&colors_[dst], &s.colors[k * kBrickVoxels], kBrickVoxels * sizeof(Color4));
    }
    st_.prev_pose = s.prev_pose;
    SetPose(&st_, s.prev_pose);
    st_.model_T_cw = s.model_T_cw;
    st_.model_T_wc = s.model_T_wc;
    st_.has_model = s.has_model;
    RebuildOctree();
    // A snapshot of this version changes nothing here; one of an earlier version may hold aprons
    // that its refresh of visible bricks would have caught up later.
    RefreshAllAprons();
    if (st_.has_model) RaycastInto(st_.model_T_wc);
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Evict(const Device&, const double center[3], double radius) override {
    const float vs = static_cast<float>(config_.voxel_size_m);
    int64_t evicted = 0;
    for (int32_t i = 0; i < counters_.hwm; ++i) {
      if (brick_keys_[i] == kEmptyKey) continue;
      I3 b = UnpackKey(brick_keys_[i]);
      double dx = (8.0 * b.x + 4) * vs - center[0], dy = (8.0 * b.y + 4) * vs - center[1],
             dz = (8.0 * b.z + 4) * vs - center[2];
      if (dx * dx + dy * dy + dz * dz <= radius * radius) continue;
      brick_keys_[i] = kEmptyKey;
      free_list_[--counters_.used] = i;
      ++evicted;
    }
    // Rebuild the hash table (drops tombstones too) and the octree from the pool.
    std::fill(keys_.begin(), keys_.end(), kEmptyKey);
    std::fill(vals_.begin(), vals_.end(), -1);
    for (int32_t i = 0; i < counters_.hwm; ++i)
      if (brick_keys_[i] != kEmptyKey) InsertKey(brick_keys_[i], i);
    counters_.tombstones = 0;
    RebuildOctree();
    return evicted;
  }

  absl::StatusOr<std::vector<TsdfSample>> Sample(const Device&,
                                                 const std::vector<float>& pts) override {
    std::vector<TsdfSample> out(pts.size() / 3);
    VolumeView v = View();
    const float inv = 1.0f / v.voxel_size;
    tbb::parallel_for(size_t{0}, out.size(), [&](size_t i) {
      BrickCache cache{kEmptyKey, -1};
      float f;
      out[i].valid = SampleTsdf(v, V3{pts[3 * i] * inv, pts[3 * i + 1] * inv, pts[3 * i + 2] * inv},
                                &cache, &f, nullptr, nullptr);
      out[i].tsdf = out[i].valid ? f : 0.0f;
    });
    return out;
  }

  int64_t bricks_in_use() const override { return counters_.used; }
  int64_t allocated_bytes() const override {
    return static_cast<int64_t>(voxels_.size() * sizeof(Voxel) + colors_.size() * sizeof(Color4) +
                                keys_.size() * 12 + brick_keys_.size() * 12 +
                                top_keys_.size() * 16 + top_mids_.size() * 8);
  }

 private:
  void PrepareFrame(const FrameInput& frame) {
    const bool is_float = config_.depth_format == DepthFormat::kFloat32;
    const float scale_inv = static_cast<float>(1.0 / config_.depth_scale);
    const float mn = static_cast<float>(config_.min_depth_m), mx = static_cast<float>(config_.max_depth_m);
    const int64_t n = sizes_.pixels;
    tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
      depth_[0][i] = RawDepth(frame.depth.data(), is_float, scale_inv, static_cast<int>(i), mn, mx);
    });
    rgb_ = (config_.color && !frame.rgb.empty())
               ? reinterpret_cast<const uint8_t*>(frame.rgb.data())
               : nullptr;
    if (!config_.tracking) return;
    tbb::parallel_for(0, cam_.height, [&](int v) {
      for (int u = 0; u < cam_.width; ++u)
        filtered_[v * cam_.width + u] = BilateralDepth(depth_[0].data(), cam_.width, cam_.height, u, v);
    });
    for (int l = 1; l < kLevels; ++l) {
      CameraF src = ScaleCamera(cam_, l - 1), dst = ScaleCamera(cam_, l);
      tbb::parallel_for(0, dst.height, [&](int v) {
        for (int u = 0; u < dst.width; ++u)
          depth_[l][v * dst.width + u] =
              DownsampleDepth(l == 1 ? filtered_.data() : depth_[l - 1].data(), src.width,
                              src.height, u, v);
      });
    }
    for (int l = 0; l < kLevels; ++l) {
      CameraF c = ScaleCamera(cam_, l);
      int valid = tbb::parallel_reduce(
          tbb::blocked_range<int>(0, c.height), 0,
          [&](const tbb::blocked_range<int>& rows, int acc) {
            for (int v = rows.begin(); v < rows.end(); ++v)
              for (int u = 0; u < c.width; ++u) {
                V3 p, nn;
                const int i = v * c.width + u;
                if (VertexNormal(l == 0 ? filtered_.data() : depth_[l].data(), c, u, v, &p, &nn)) {
                  vtx_[l][i] = F4{p.x, p.y, p.z, 1};
                  nrm_[l][i] = F4{nn.x, nn.y, nn.z, 0};
                  ++acc;
                } else {
                  vtx_[l][i].w = 0;
                }
              }
            return acc;
          },
          [](int a, int b) { return a + b; });
      if (l == 0) st_.valid_pixels = valid;
    }
  }

  void Track() {
    const IcpParams ip{0.1f, 0.7f};
    for (int l = kLevels - 1; l >= 0; --l) {
      CameraF c = ScaleCamera(cam_, l);
      for (int it = 0; it < config_.icp_iterations[l] && !st_.converged[l]; ++it) {
        using Sums = std::array<double, kIcpSums>;
        Sums zero{};
        const PoseF T_wc = st_.T_wc, model = st_.model_T_cw;
        Sums s = tbb::parallel_deterministic_reduce(
            tbb::blocked_range<int>(0, c.height, 8), zero,
            [&](const tbb::blocked_range<int>& rows, Sums acc) {
              for (int v = rows.begin(); v < rows.end(); ++v)
                for (int u = 0; u < c.width; ++u) {
                  const int i = v * c.width + u;
                  const F4 p = vtx_[l][i];
                  if (p.w <= 0) continue;
                  const F4 n = nrm_[l][i];
                  float J[6], r;
                  if (IcpTerm(V3{p.x, p.y, p.z}, V3{n.x, n.y, n.z}, T_wc, model, cam_,
                              model_v_.data(), model_n_.data(), ip, J, &r))
                    AccumulateIcp(J, r, acc.data());
                }
              return acc;
            },
            [](Sums a, const Sums& b) {
              for (int k = 0; k < kIcpSums; ++k) a[k] += b[k];
              return a;
            });
        IcpSolveStep(&st_, s.data(), l, kMinInliers);
      }
    }
  }

  // Serial insert of a key that is known to be absent.
  void InsertKey(uint64_t key, int32_t brick) {
    uint32_t mask = static_cast<uint32_t>(sizes_.slots - 1);
    uint32_t h = HashKey(key) & mask;
    while (keys_[h] != kEmptyKey) h = (h + 1) & mask;
    keys_[h] = key;
    vals_[h] = brick;
  }

  void SetOctree(uint64_t key) {
    I3 b = UnpackKey(key);
    uint64_t tk = PackKey(TopCell(b));
    uint32_t mask = static_cast<uint32_t>(sizes_.top_slots - 1);
    uint32_t h = HashKey(tk) & mask;
    for (uint32_t i = 0; i <= mask; ++i) {
      if (top_keys_[h] == tk || top_keys_[h] == kEmptyKey) {
        top_keys_[h] = tk;
        int mb = MidBit(b);
        top_masks_[h] |= uint64_t{1} << mb;
        top_mids_[static_cast<int64_t>(h) * 64 + mb] |= uint64_t{1} << BrickBit(b);
        return;
      }
      h = (h + 1) & mask;
    }
    counters_.octree_overflow = 1;
  }

  void RebuildOctree() {
    std::fill(top_keys_.begin(), top_keys_.end(), kEmptyKey);
    std::fill(top_masks_.begin(), top_masks_.end(), 0);
    std::fill(top_mids_.begin(), top_mids_.end(), 0);
    counters_.octree_overflow = 0;
    for (int32_t i = 0; i < counters_.hwm; ++i)
      if (brick_keys_[i] != kEmptyKey) SetOctree(brick_keys_[i]);
  }

  void Allocate() {
    fresh_.clear();
    tbb::enumerable_thread_specific<std::vector<uint64_t>> local;
    const PoseF T_wc = st_.T_wc;
    const float mu = static_cast<float>(config_.truncation_m), vs = static_cast<float>(config_.voxel_size_m);
    tbb::parallel_for(0, cam_.height, [&](int v) {
      std::vector<uint64_t>& out = local.local();
      auto push = [&out](uint64_t k) { out.push_back(k); };
      for (int u = 0; u < cam_.width; ++u) {
        float d = depth_[0][v * cam_.width + u];
        if (d > 0) ForEachBandBrick(cam_, T_wc, u, v, d, mu, vs, push);
      }
    });
    std::vector<uint64_t> all;
    for (auto& l : local) all.insert(all.end(), l.begin(), l.end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const uint32_t mask = static_cast<uint32_t>(sizes_.slots - 1);
    for (uint64_t key : all) {
      if (FindSlot(keys_.data(), mask, key) >= 0) continue;
      if (counters_.used >= sizes_.capacity) {
        ++counters_.dropped;
        continue;
      }
      int32_t bi = free_list_[counters_.used++];
      fresh_.push_back(bi);
      counters_.hwm = std::max(counters_.hwm, bi + 1);
      InsertKey(key, bi);
      brick_keys_[bi] = key;
      std::fill(voxels_.begin() + static_cast<int64_t>(bi) * kBrickVoxels,
                voxels_.begin() + static_cast<int64_t>(bi + 1) * kBrickVoxels, Voxel{0, 0});
      if (config_.color)
        std::fill(colors_.begin() + static_cast<int64_t>(bi) * kBrickVoxels,
                  colors_.begin() + static_cast<int64_t>(bi + 1) * kBrickVoxels,
                  Color4{0, 0, 0, 0});
      SetOctree(key);
    }
  }

  void Integrate(const FrameInput&) {
    VolumeView v = View();
    FrameView f{depth_[0].data(), rgb_, cam_, static_cast<float>(config_.min_depth_m),
                static_cast<float>(config_.max_depth_m)};
    const PoseF T_cw = st_.T_cw;
    const float vs = v.voxel_size, mu = v.mu;
    std::vector<uint8_t> visible(counters_.hwm, 0);
    tbb::parallel_for(int32_t{0}, counters_.hwm, [&](int32_t bi) {
      if (brick_keys_[bi] == kEmptyKey) return;
      I3 b = UnpackKey(brick_keys_[bi]);
      if (!BrickVisible(b, T_cw, f, vs, mu)) return;
      visible[bi] = 1;
      const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
      for (int li = 0; li < kBrickVoxels; ++li)
        IntegrateVoxel(&voxels_[base + li], v.colors ? &v.colors[base + li] : nullptr,
                       VoxelWorld(b, li, vs), T_cw, f, mu, config_.max_weight);
    });
    int count = 0;
    for (uint8_t x : visible) count += x;
    counters_.visible = count;
    // Aprons: only around this frame's new bricks (RefreshFreshBrick; the CUDA backend's
    // ApronFreshKernel says why the others still equal their owners). A few hundred bricks a
    // frame, in order: two new neighbours write the same values into each other's aprons.
    for (int32_t bi : fresh_) RefreshFreshBrick(v, bi, UnpackKey(brick_keys_[bi]));
  }

  // Every used brick's apron from its owners (after a restore).
  void RefreshAllAprons() {
    VolumeView v = View();
    tbb::parallel_for(int32_t{0}, counters_.hwm, [&](int32_t bi) {
      if (brick_keys_[bi] == kEmptyKey) return;
      I3 b = UnpackKey(brick_keys_[bi]);
      int32_t nb[8];
      nb[0] = bi;
      for (int code = 1; code < 8; ++code) nb[code] = FindBrick(v, PackKey(NeighbourBrick(b, code)));
      for (int li = 0; li < kBrickVoxels; ++li) RefreshApronVoxel(v, bi, nb, li);
    });
  }

  void RaycastInto(const PoseF& T_wc) {
    VolumeView v = View();
    const bool oct = counters_.octree_overflow == 0;
    const float mn = static_cast<float>(config_.min_depth_m), mx = static_cast<float>(config_.max_depth_m);
    tbb::parallel_for(0, cam_.height, [&](int y) {
      for (int x = 0; x < cam_.width; ++x) {
        PixelHit p = RaycastPixel(v, oct, T_wc, cam_, x, y, mn, mx);
        const int i = y * cam_.width + x;
        model_v_[i] = F4{p.point_w.x, p.point_w.y, p.point_w.z, p.hit ? 1.0f : 0.0f};
        model_n_[i] = F4{p.normal_w.x, p.normal_w.y, p.normal_w.z, 0};
      }
    });
  }

  void RaycastModel() {
    RaycastInto(st_.T_wc);
    st_.model_T_wc = st_.T_wc;
    st_.model_T_cw = st_.T_cw;
    st_.has_model = 1;
  }

  FusionConfig config_;
  Sizes sizes_;
  CameraF cam_;
  std::vector<uint64_t> keys_;
  std::vector<int32_t> vals_;
  std::vector<uint64_t> brick_keys_;
  std::vector<int32_t> free_list_;
  std::vector<Voxel> voxels_;
  std::vector<Color4> colors_;
  std::vector<uint64_t> top_keys_, top_masks_, top_mids_;
  std::vector<float> depth_[kLevels];
  std::vector<F4> vtx_[kLevels], nrm_[kLevels];
  std::vector<float> filtered_;
  std::vector<F4> model_v_, model_n_;
  const uint8_t* rgb_ = nullptr;
  std::vector<int32_t> fresh_;  // pool indices of the bricks allocated in this frame
  Counters counters_;
  TrackState st_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VolumeBackend>> MakeCpuBackend(const FusionConfig& config) {
  return std::unique_ptr<VolumeBackend>(new CpuBackend(config));
}

}  // namespace fresnel::fusion
