// CUDA backend of fusion::Volume. Same layout and per-element math as the CPU oracle
// (fusion_math.h); this file adds the parallel allocation (atomicCAS on hash keys, free-list
// positions by atomicAdd), the block-level select-and-update integration, the ICP reduction whose
// last block solves the 6x6 system (no host round trip in the ICP loop) and deterministic mesh
// extraction (bricks sorted by key, per-brick block scans). Built with -fmad=false so that float
// results equal the CPU's.
#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include <algorithm>
#include <mutex>
#include <map>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "fusion/fusion_internal.h"

namespace fresnel::fusion {
namespace {

using namespace detail;  // NOLINT: the backend is written in terms of the shared math.
using cuda::DeviceBuffer;
using cuda::StreamOf;

constexpr int kThreads = 256;
constexpr int kMcThreads = 512;  // one thread per cell of a brick
constexpr int kMaxIcpBlocks = 1024;

// ---------------------------------------------------------------------------------------------
// Frame preparation

// Per-level ICP convergence thresholds that replace kIcpStopXi2 where > 0 (A/B measurements:
// FusionConfig::cuda_icp_stop_xi2, see CudaBackend::Init).
struct IcpStop {
  double xi2[kLevels];
};

__device__ void BeginState(TrackState* s, const FrameParams& p, int tracking, const IcpStop& stop) {
  s->prior = p.prior;
  s->has_prior = p.has_prior;
  s->has_fixed = p.has_fixed;
  s->prior_weight = p.prior_weight;
  s->blocks_done = 0;
  s->level_runs = 0;
  BeginFrame(s, tracking);
  for (int l = 0; l < kLevels; ++l)
    if (stop.xi2[l] > 0) s->stop_xi2[l] = stop.xi2[l];
}

__global__ void BeginKernel(TrackState* s, FrameParams p, int tracking, IcpStop stop) {
  BeginState(s, p, tracking, stop);
}

// The frame's start in PrepareDepthKernel's first thread instead of a kernel of its own
// (kOffFuseLaunches; nothing in PrepareDepthKernel reads the state).
struct FusedBegin {
  TrackState* s;  // null: BeginKernel ran
  FrameParams p;
  int tracking;
  IcpStop stop;
};

// Depth tiles of kTile x kTile pixels (a block each, a thread per pixel): the metric depth and,
// per tile, the largest valid depth (0 when none), which lets the integration skip bricks that
// lie wholly behind every depth they can project to (OccludedBrick).
constexpr int kTile = 8;
__host__ __device__ inline int TilesX(int width) { return (width + kTile - 1) / kTile; }
__host__ __device__ inline int TilesY(int height) { return (height + kTile - 1) / kTile; }

__global__ void __launch_bounds__(kTile * kTile) PrepareDepthKernel(
    const void* raw, bool is_float, float scale_inv, int w, int h, float mn, float mx,
    float* depth, float* tile_max, FusedBegin begin) {
  if (begin.s != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
    BeginState(begin.s, begin.p, begin.tracking, begin.stop);
  const int tx = blockIdx.x % TilesX(w), ty = blockIdx.x / TilesX(w);
  const int u = kTile * tx + threadIdx.x % kTile, v = kTile * ty + threadIdx.x / kTile;
  float d = 0;
  if (u < w && v < h) {
    const int i = v * w + u;
    d = RawDepth(raw, is_float, scale_inv, i, mn, mx);
    depth[i] = d;
  }
  // Non-negative floats order like their bit patterns, so an unsigned max reduces them.
  const unsigned m = __reduce_max_sync(0xffffffffu, __float_as_uint(d));
  __shared__ unsigned warp_max[kTile * kTile / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned t = warp_max[0];
    for (int k = 1; k < kTile * kTile / 32; ++k) t = max(t, warp_max[k]);
    tile_max[blockIdx.x] = __uint_as_float(t);
  }
}

__global__ void BilateralKernel(const float* src, int w, int h, float* dst) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < w * h) dst[i] = BilateralDepth(src, w, h, i % w, i / w);
}

__global__ void DownsampleKernel(const float* src, int sw, int sh, float* dst, int dw, int dh) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= dw * dh) return;
  dst[i] = DownsampleDepth(src, sw, sh, i % dw, i / dw);
}

// Vertex and normal of pixel i of a level (w = 0 when invalid); `count`: the block adds its valid
// pixels to s->valid_pixels (every thread of the block must take the same `count`).
__device__ __forceinline__ void VertexNormalPixel(const float* depth, const CameraF& c, int i,
                                                  F4* vtx, F4* nrm, TrackState* s, bool count) {
  int valid = 0;
  if (i < c.width * c.height) {
    V3 p, n;
    if (VertexNormal(depth, c, i % c.width, i / c.width, &p, &n)) {
      vtx[i] = F4{p.x, p.y, p.z, 1};
      nrm[i] = F4{n.x, n.y, n.z, 0};
      valid = 1;
    } else {
      vtx[i].w = 0;
    }
  }
  if (count) {
    int total = __syncthreads_count(valid);
    if (threadIdx.x == 0 && total > 0) atomicAdd(&s->valid_pixels, total);
  }
}

__global__ void VertexNormalKernel(const float* depth, CameraF c, F4* vtx, F4* nrm,
                                   TrackState* s, int count) {
  VertexNormalPixel(depth, c, blockIdx.x * blockDim.x + threadIdx.x, vtx, nrm, s, count != 0);
}

// The vertex and normal maps of all levels in one launch (kOffFuseLaunches): blocks
// [first[l], first[l + 1]) do level l, whose source depth is src[l]; level 0 counts the valid
// pixels. Same per-pixel code as VertexNormalKernel.
struct PyramidMaps {
  const float* src[kLevels];
  CameraF cam[kLevels];
  F4* vtx[kLevels];
  F4* nrm[kLevels];
  int first[kLevels + 1];
};
__global__ void VertexNormalLevelsKernel(PyramidMaps m, TrackState* s) {
  int l = 0;
  while (l + 1 < kLevels && static_cast<int>(blockIdx.x) >= m.first[l + 1]) ++l;
  // A block never spans two levels, so the whole block takes the same `count`.
  VertexNormalPixel(m.src[l], m.cam[l], (blockIdx.x - m.first[l]) * blockDim.x + threadIdx.x,
                    m.vtx[l], m.nrm[l], s, l == 0);
}

// ---------------------------------------------------------------------------------------------
// ICP: per-pixel terms, warp shuffles, one double atomicAdd per sum and block, and the last block
// to finish solves and updates the pose in TrackState.
//
// The default ICP graph launches all 19 kernels and those of a converged level return at once.
// In the conditional graph (kOnIcpWhile, EnqueueIcp; slower on the H200) the kernel is the body
// of one WHILE node per level; `max_runs` > 0 says so: the solving thread then counts the level's
// iterations in s->level_runs and sets the loop's condition `more` to 0 once the level has
// converged or run max_runs iterations, so a converged level launches nothing more. A level
// always starts unconverged (BeginFrame), so the body's first run does real work and the one
// thread that solves is the only writer of the condition.
__global__ void __launch_bounds__(kThreads) IcpKernel(const F4* vtx, const F4* nrm, int n,
                                                      CameraF cam0, const F4* mv, const F4* mn,
                                                      IcpParams ip, TrackState* s, int level,
                                                      double* partials, int max_runs,
                                                      cudaGraphConditionalHandle more,
                                                      int batched_tail) {
  if (s->converged[level]) {
    // Not reached in a WHILE node (see above); should it be, the loop must still end.
    if (max_runs > 0 && blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(more, 0u);
    return;
  }
  const PoseF T = s->T_wc;
  const PoseF M = s->model_T_cw;
  float acc[kIcpSums];
  for (int k = 0; k < kIcpSums; ++k) acc[k] = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    F4 p = vtx[i];
    if (p.w <= 0) continue;
    F4 q = nrm[i];
    float J[6], r;
    if (IcpTerm(V3{p.x, p.y, p.z}, V3{q.x, q.y, q.z}, T, M, cam0, mv, mn, ip, J, &r))
      AccumulateIcp(J, r, acc);
  }
  __shared__ float part[kThreads / 32][kIcpSums];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int k = 0; k < kIcpSums; ++k) {
    float v = acc[k];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) part[warp][k] = v;
  }
  __syncthreads();
  if (threadIdx.x < kIcpSums) {
    double t = 0;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w][threadIdx.x];
    partials[blockIdx.x * kIcpSums + threadIdx.x] = t;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&s->blocks_done, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  // The last block sums the block partials in a fixed order (deterministic, so a restored
  // snapshot tracks bit for bit like the original): thread (g, k) of 8 x 29 adds sum k of blocks
  // g, g + 8, ..., then thread k adds the 8 groups in order; thread 0 solves. (No double-precision
  // shuffle tree: the serial tail of this block is what bounds an ICP iteration.)
  __threadfence();
  constexpr int kGroups = kThreads / kIcpSums;  // 8
  __shared__ double gpart[kGroups][kIcpSums];
  __shared__ double sums[kIcpSums];
  if (threadIdx.x < kGroups * kIcpSums) {
    const int k = threadIdx.x % kIcpSums, g = threadIdx.x / kIcpSums;
    double a = 0;
    if (batched_tail) {
      // The loads of a batch are all issued before its adds (in the plain loop each add of the
      // loop-carried chain can wait for its own L2 load); the adds keep the plain loop's order,
      // so the sums are the same bit for bit. 16 x 8 groups = 128 blocks a batch (264 blocks on
      // a 132-SM H200: 3 batches instead of ~33 dependent loads).
      constexpr int kBatch = 16;
      for (unsigned b0 = g; b0 < gridDim.x; b0 += kBatch * kGroups) {
        double t[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const unsigned b = b0 + j * kGroups;
          t[j] = b < gridDim.x ? __ldcg(partials + b * kIcpSums + k) : 0.0;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (b0 + j * kGroups < gridDim.x) a += t[j];
      }
    } else {
      for (unsigned b = g; b < gridDim.x; b += kGroups) a += __ldcg(partials + b * kIcpSums + k);
    }
    gpart[g][k] = a;
  }
  __syncthreads();
  if (threadIdx.x < kIcpSums) {
    double t = 0;
    for (int g = 0; g < kGroups; ++g) t += gpart[g][threadIdx.x];
    sums[threadIdx.x] = t;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    s->blocks_done = 0;
    IcpSolveStep(s, sums, level, kMinInliers);
    if (max_runs > 0) {
      const int runs = s->level_runs + 1;
      const bool again = !s->converged[level] && runs < max_runs;
      s->level_runs = again ? runs : 0;
      cudaGraphSetConditional(more, again ? 1u : 0u);
    }
  }
}

// `c` non-null (kOffFuseLaunches): also zero this frame's counters that the memset and
// CommitKernel used to zero (dropped before AllocKernel; visible and update_count before
// SelectKernel, which the previous frame's ApronKernel and IntegrateKernel read last).
__global__ void FinishKernel(TrackState* s, int integrate, Counters* c, int* update_count) {
  if (c != nullptr) {
    c->dropped = 0;
    c->visible = 0;
    *update_count = 0;
  }
  FinishTracking(s);
  if (!integrate) s->integrate = 0;
}

// ---------------------------------------------------------------------------------------------
// Allocation

__device__ void InsertPending(uint64_t* keys, int32_t* vals, uint32_t mask, uint64_t key,
                              Counters* c, int32_t* new_slots, int cap) {
  uint32_t h = HashKey(key) & mask;
  for (uint32_t i = 0; i <= mask; ++i) {
    uint64_t k = *reinterpret_cast<volatile uint64_t*>(&keys[h]);
    if (k == key) return;
    if (k == kEmptyKey) {
      unsigned long long old = atomicCAS(reinterpret_cast<unsigned long long*>(&keys[h]),
                                         static_cast<unsigned long long>(kEmptyKey),
                                         static_cast<unsigned long long>(key));
      if (old == kEmptyKey) {
        vals[h] = kPendingBrick;
        int pos = atomicAdd(&c->new_count, 1);
        if (pos < cap) {
          new_slots[pos] = static_cast<int32_t>(h);
        } else {
          keys[h] = kTombKey;
          atomicAdd(&c->tombstones, 1);
          atomicAdd(&c->dropped, 1);
        }
        return;
      }
      if (old == key) return;
    }
    h = (h + 1) & mask;
  }
  atomicAdd(&c->dropped, 1);
}

struct PendingInserter {
  uint64_t* keys;
  int32_t* vals;
  uint32_t mask;
  Counters* c;
  int32_t* new_slots;
  int cap;
  __device__ void operator()(uint64_t key) { InsertPending(keys, vals, mask, key, c, new_slots, cap); }
};

__global__ void AllocKernel(const float* depth, CameraF cam, TrackState* s, VolumeView v,
                            Counters* c, int32_t* new_slots, int cap) {
  if (!s->integrate) return;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= cam.width * cam.height) return;
  float d = depth[i];
  if (d <= 0) return;
  PendingInserter ins{v.keys, v.vals, v.slot_mask, c, new_slots, cap};
  const PoseF T = s->T_wc;
  ForEachBandBrick(cam, T, i % cam.width, i / cam.width, d, v.mu, v.voxel_size, ins);
}

__device__ void SetOctreeDevice(const VolumeView& v, uint64_t key, Counters* c) {
  I3 b = UnpackKey(key);
  uint64_t tk = PackKey(TopCell(b));
  uint32_t h = HashKey(tk) & v.top_mask;
  for (uint32_t i = 0; i <= v.top_mask; ++i) {
    uint64_t k = *reinterpret_cast<volatile uint64_t*>(&v.top_keys[h]);
    bool found = k == tk;
    if (!found && k == kEmptyKey) {
      unsigned long long old = atomicCAS(reinterpret_cast<unsigned long long*>(&v.top_keys[h]),
                                         static_cast<unsigned long long>(kEmptyKey),
                                         static_cast<unsigned long long>(tk));
      found = old == kEmptyKey || old == tk;
    }
    if (found) {
      int mb = MidBit(b);
      atomicOr(reinterpret_cast<unsigned long long*>(&v.top_masks[h]), 1ull << mb);
      atomicOr(reinterpret_cast<unsigned long long*>(&v.top_mids[static_cast<int64_t>(h) * 64 + mb]),
               1ull << BrickBit(b));
      return;
    }
    h = (h + 1) & v.top_mask;
  }
  c->octree_overflow = 1;
}

// Block per new brick: take the free-list entry at used + i, zero the brick, publish the index.
__global__ void AssignKernel(VolumeView v, Counters* c, const int32_t* new_slots,
                             const int32_t* free_list, int cap) {
  const int n = min(c->new_count, cap);
  const int used = c->used;
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const int slot = new_slots[i];
    const int pos = used + i;
    if (pos >= cap) {
      if (threadIdx.x == 0) {
        v.keys[slot] = kTombKey;
        v.vals[slot] = -1;
        atomicAdd(&c->tombstones, 1);
        atomicAdd(&c->dropped, 1);
      }
      continue;
    }
    const int bi = free_list[pos];
    const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
    for (int li = threadIdx.x; li < kBrickVoxels; li += blockDim.x) {
      v.voxels[base + li] = Voxel{0, 0};
      if (v.colors != nullptr) v.colors[base + li] = Color4{0, 0, 0, 0};
    }
    if (threadIdx.x == 0) {
      const uint64_t key = v.keys[slot];
      v.vals[slot] = bi;
      v.brick_keys[bi] = key;
      atomicMax(&c->hwm, bi + 1);
      SetOctreeDevice(v, key, c);
    }
  }
}

// Advances `used` past this frame's new bricks and records them for ApronFreshKernel as the
// free-list range fresh[0] .. fresh[0] + fresh[1] - 1 (AssignKernel gave new key i the entry at
// used + i; keys beyond the capacity became tombstones).
__device__ void CommitNew(Counters* c, int cap, int* fresh) {
  int n = min(c->new_count, cap);
  int take = min(n, cap - c->used);
  fresh[0] = c->used;
  fresh[1] = take;
  c->used += take;
  c->new_count = 0;
}

// update_count[0]: bricks listed for IntegrateKernel; [1], [2]: the fresh range (CommitNew).
__global__ void CommitKernel(Counters* c, int cap, int* update_count) {
  CommitNew(c, cap, update_count + 1);
  c->visible = 0;
  *update_count = 0;
}

// ---------------------------------------------------------------------------------------------
// Integration, in two kernels: a thread per pool brick (up to the high-water mark read on the
// device) runs the frustum test and lists the visible bricks; then a block per listed brick
// updates its stored voxels (core + apron). (One block per pool brick with the test inside left
// most blocks walking invisible bricks one after another.)

// True when no voxel of brick b can change in this frame because the whole brick lies more than
// mu behind every depth it can read: IntegrateVoxel writes only when the bilinear depth d of
// the 4 pixels around a voxel's projection satisfies d - z >= -mu, and d is at most the largest
// of those 4 depths. The bound follows BrickVisible: the bounding sphere (centre pc, radius r)
// projects within +-ru, +-rv pixels of (uc, vc) (|x/z - xc/zc| <= r/zn + |xc| r/zn^2 for
// z >= zn = zc - r), its voxels read pixel columns floor(u) and floor(u) + 1 (one more of margin
// each side), and the tile maxima bound the depths there. A margin of one voxel covers the float
// rounding of z and d. Bricks near the camera or over more than 64 tiles are kept. Such a brick
// is not integrated (its voxels would be read and left unchanged) but still gets its aprons
// refreshed, so the result is the same bit for bit.
__device__ bool OccludedBrick(I3 b, const PoseF& T_cw, const FrameView& f, float vs, float mu,
                              const float* tile_max) {
  V3 c = V3{(8.0f * b.x + 4.0f) * vs, (8.0f * b.y + 4.0f) * vs, (8.0f * b.z + 4.0f) * vs};
  const float r = 7.8f * vs;
  V3 pc = Apply(T_cw, c);
  const float zn = pc.z - r;
  if (zn <= 0.5f * f.min_depth) return false;
  const float uc = f.cam.fx * pc.x / pc.z + f.cam.cx, vc = f.cam.fy * pc.y / pc.z + f.cam.cy;
  const float ru = f.cam.fx * (r + fabsf(pc.x) * r / zn) / zn;
  const float rv = f.cam.fy * (r + fabsf(pc.y) * r / zn) / zn;
  const float u0 = floorf(uc - ru) - 1.0f, u1 = floorf(uc + ru) + 2.0f;
  const float v0 = floorf(vc - rv) - 1.0f, v1 = floorf(vc + rv) + 2.0f;
  if (u1 < 0.0f || v1 < 0.0f || u0 > f.cam.width - 1 || v0 > f.cam.height - 1) return false;
  // Clamp in float before converting: the projection of a brick beside the camera can be huge.
  const int tw = TilesX(f.cam.width);
  const int tx0 = static_cast<int>(fmaxf(0.0f, u0)) / kTile;
  const int tx1 = static_cast<int>(fminf(static_cast<float>(f.cam.width - 1), u1)) / kTile;
  const int ty0 = static_cast<int>(fmaxf(0.0f, v0)) / kTile;
  const int ty1 = static_cast<int>(fminf(static_cast<float>(f.cam.height - 1), v1)) / kTile;
  if ((tx1 - tx0 + 1) * (ty1 - ty0 + 1) > 64) return false;
  float dmax = 0;
  for (int ty = ty0; ty <= ty1; ++ty)
    for (int tx = tx0; tx <= tx1; ++tx) dmax = fmaxf(dmax, __ldg(tile_max + ty * tw + tx));
  return zn > dmax + mu + vs;
}

// Lists the frustum-visible bricks (`visible`, for ApronKernel's refresh of every visible brick,
// which only the cuda_disable bit kOffFreshApron runs; null: neither listed nor counted) and among
// them those that are not wholly occluded (`update`, for IntegrateKernel; `cull` = 0 lists every
// visible brick).
// With `nb_out` (kOffNeighbourList clear) it also writes each visible brick's neighbour list,
// nb_out[8 bi + code] = pool index of neighbour `code` (-1 = none; 0 = bi itself), which
// IntegrateKernel (cuda_enable kOnSkipOwnedApron) and ApronKernel read instead of looking the 7
// neighbours up again (the hash table does not change from here to the
// end of the frame: AssignKernel has finished).
__global__ void SelectKernel(VolumeView v, Counters* c, TrackState* s, FrameView f,
                             int32_t* visible, int32_t* update, int* update_count,
                             const float* tile_max, int cull, int commit_cap, int32_t* nb_out) {
  // commit_cap > 0 (kOffFuseLaunches): CommitKernel's advance of `used` runs here (FinishKernel
  // zeroed the lists' counts). AssignKernel has finished; no thread of this kernel reads `used`
  // or `new_count`.
  if (commit_cap > 0 && blockIdx.x == 0 && threadIdx.x == 0)
    CommitNew(c, commit_cap, update_count + 1);
  if (!s->integrate) return;
  const PoseF T = s->T_cw;
  const int hwm = c->hwm;
  for (int bi = blockIdx.x * blockDim.x + threadIdx.x; bi < hwm; bi += gridDim.x * blockDim.x) {
    const uint64_t key = v.brick_keys[bi];
    if (key == kEmptyKey) continue;
    const I3 b = UnpackKey(key);
    if (!BrickVisible(b, T, f, v.voxel_size, v.mu)) continue;
    if (visible != nullptr) visible[atomicAdd(&c->visible, 1)] = bi;
    if (nb_out != nullptr) {
      int32_t nb[8];
      nb[0] = bi;
#pragma unroll
      for (int code = 1; code < 8; ++code)
        nb[code] = FindBrick(v, PackKey(NeighbourBrick(b, code)));
      int4* const dst = reinterpret_cast<int4*>(nb_out + 8 * static_cast<int64_t>(bi));
      dst[0] = make_int4(nb[0], nb[1], nb[2], nb[3]);
      dst[1] = make_int4(nb[4], nb[5], nb[6], nb[7]);
    }
    if (!cull || !OccludedBrick(b, T, f, v.voxel_size, v.mu, tile_max))
      update[atomicAdd(update_count, 1)] = bi;
  }
}

constexpr int kVoxelsPerThread = (kBrickVoxels + kThreads - 1) / kThreads;  // 3

// True when stored voxel li of a brick with neighbour list nb is not overwritten by ApronKernel:
// a core voxel, or an apron voxel whose owning neighbour is not allocated.
__device__ __forceinline__ bool OwnApronVoxel(const int32_t* nb, int li) {
  const int code = ApronCode(li);
  return code == 0 || nb[code] < 0;
}

// IntegrateKernel's kIlp update of the brick at `base` (key b): this thread's voxels
// threadIdx.x + j kThreads are projected, then all of their depth and voxel loads issued, then
// updated (ProjectVoxel, UpdateVoxel: IntegrateVoxel's arithmetic in the same order).
// With `nb` (the brick's neighbour list, kSkipOwned), apron voxels whose owning neighbour
// exists are left alone: ApronKernel overwrites them with the owner's core voxel later in the
// frame (every listed brick is also visible), so their update would be dead work.
__device__ __forceinline__ void IntegrateBrickIlp(const VolumeView& v, I3 b, int64_t base,
                                                  const PoseF& T, const FrameView& f,
                                                  const int32_t* nb) {
  VoxelProjection pr[kVoxelsPerThread];
  bool ok[kVoxelsPerThread];
#pragma unroll
  for (int j = 0; j < kVoxelsPerThread; ++j) {
    const int li = threadIdx.x + j * kThreads;
    ok[j] = li < kBrickVoxels && (nb == nullptr || OwnApronVoxel(nb, li)) &&
            ProjectVoxel(VoxelWorld(b, li, v.voxel_size), T, f, &pr[j]);
  }
  float d[kVoxelsPerThread][4];
  LoadedVoxel old[kVoxelsPerThread];
#pragma unroll
  for (int j = 0; j < kVoxelsPerThread; ++j) {
    if (!ok[j]) continue;
    const float* r0 = f.depth + pr[j].corner;
    const float* r1 = r0 + f.cam.width;
    d[j][0] = __ldg(r0);
    d[j][1] = __ldg(r0 + 1);
    d[j][2] = __ldg(r1);
    d[j][3] = __ldg(r1 + 1);
    old[j].v = v.voxels[base + threadIdx.x + j * kThreads];
  }
#pragma unroll
  for (int j = 0; j < kVoxelsPerThread; ++j) {
    if (!ok[j]) continue;
    const int64_t k = base + threadIdx.x + j * kThreads;
    UpdateVoxel(&v.voxels[k], v.colors != nullptr ? &v.colors[k] : nullptr, old[j], pr[j],
                d[j][0], d[j][1], d[j][2], d[j][3], f, v.mu, v.max_weight);
  }
}

// A block of kThreads per listed brick, updating its 729 stored voxels. kIlp: IntegrateBrickIlp
// (the loads of a thread's 3 voxels before their updates); without it the thread runs
// IntegrateVoxel voxel after voxel, whose loads wait for the previous voxel's stores (the
// compiler must assume they alias): 40 registers, against 78 for kIlp (64 and 20 bytes of spills
// with kMinBlocks = 4, the __launch_bounds__ occupancy bound; 0 = none). The voxels are equal to
// the CPU's either way. kSkipOwned (with kIlp; `nb_list` from SelectKernel): the apron voxels
// that ApronKernel overwrites are not integrated (OwnApronVoxel).
template <bool kIlp, int kMinBlocks, bool kSkipOwned = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks) IntegrateKernel(VolumeView v,
                                                                        const int* count,
                                                                        TrackState* s, FrameView f,
                                                                        const int32_t* bricks,
                                                                        const int32_t* nb_list) {
  if (!s->integrate) return;
  const PoseF T = s->T_cw;
  const int n = *count;
  __shared__ int32_t nb[8];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const int bi = bricks[i];
    const I3 b = UnpackKey(v.brick_keys[bi]);
    const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
    if constexpr (kSkipOwned) {
      __syncthreads();  // the previous brick's reads of nb are done
      if (threadIdx.x < 8) nb[threadIdx.x] = nb_list[8 * static_cast<int64_t>(bi) + threadIdx.x];
      __syncthreads();
    }
    if constexpr (kIlp) {
      IntegrateBrickIlp(v, b, base, T, f, kSkipOwned ? nb : nullptr);
    } else {
      for (int li = threadIdx.x; li < kBrickVoxels; li += blockDim.x)
        IntegrateVoxel(&v.voxels[base + li], v.colors != nullptr ? &v.colors[base + li] : nullptr,
                       VoxelWorld(b, li, v.voxel_size), T, f, v.mu, v.max_weight);
    }
  }
}

// Stored index of apron voxel j (0..216): the z = 8 face (81), then y = 8 with z < 8 (72), then
// x = 8 with y, z < 8 (64).
__device__ __forceinline__ int ApronVoxel(int j) {
  if (j < 81) return j + 81 * 8;
  if (j < 153) {
    const int k = j - 81;
    return k % 9 + 9 * 8 + 81 * (k / 9);
  }
  const int k = j - 153;
  return 8 + 9 * (k % 8) + 81 * (k / 8);
}
constexpr int kApronVoxels = 217;

// Pool index of brick bi's neighbour `code` (bit 0/1/2 = +x/+y/+z; 0 = bi itself), -1 when it
// is not allocated: the nb[] of ApronSource.
__device__ __forceinline__ int32_t NeighbourIndex(const VolumeView& v, int32_t bi, int code) {
  return code == 0 ? bi : FindBrick(v, PackKey(NeighbourBrick(UnpackKey(v.brick_keys[bi]), code)));
}

// One warp per visible brick: lanes 0-7 look up the neighbours, then the warp copies the 217
// apron voxels (the core voxels are not touched, so a block per brick idled 2/3 of its threads).
// Each lane issues all of its (up to 7) loads before its stores: the sources are core voxels of
// other bricks and the destinations apron voxels, which no thread of this kernel reads, so the
// reordering is safe, and a lane waits for one memory latency per brick instead of seven (the
// copy loop's loads and stores otherwise alternate, since the compiler must assume they alias).
// `ilp` = 0 keeps the plain loop (A/B measurements).
constexpr int kApronPerLane = (kApronVoxels + 31) / 32;  // 7
// 96 registers (128 before the packed copies and the shared neighbour list). Bounding it to 3
// or 4 blocks of 256 an SM (80 / 64 registers, 64 / 136 bytes of spills) was slower on the H200
// (2026-12-01: +0.014 / +0.029 ms a 848x480 frame; docs/fusion.md).
// `nb_list` (kOffNeighbourList clear): SelectKernel's neighbour lists, read instead of the lookups.
// The bricks are list[0 .. n), n = *count, or n_fixed without `count`; with `s` (a frame) nothing
// runs unless the frame integrates.
__global__ void ApronKernel(VolumeView v, const int* count, int n_fixed, const TrackState* s,
                            const int32_t* visible, int ilp, const int32_t* nb_list) {
  if (s != nullptr && !s->integrate) return;
  const int n = count != nullptr ? *count : n_fixed;
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  __shared__ int32_t nb_warp[kThreads / 32][8];
  for (int i = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < n; i += warps) {
    const int32_t bi = visible[i];
    // The neighbours go to shared memory, not 8 registers a lane (register pressure).
    int32_t* const nb = nb_warp[threadIdx.x >> 5];
    __syncwarp();  // the previous brick's reads of nb are done
    if (lane < 8)
      nb[lane] = nb_list != nullptr ? nb_list[8 * static_cast<int64_t>(bi) + lane]
                                    : NeighbourIndex(v, bi, lane);
    __syncwarp();
    if (!ilp) {
      for (int j = lane; j < kApronVoxels; j += 32) RefreshApronVoxel(v, bi, nb, ApronVoxel(j));
      continue;
    }
    // A lane's copies as li | source local << 10 | code << 20 (code != 0 in the apron; 0 = none):
    // one register each instead of a 64-bit source index and a recomputed destination.
    const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
    uint32_t pk[kApronPerLane];
    Voxel val[kApronPerLane];
#pragma unroll
    for (int k = 0; k < kApronPerLane; ++k) {
      const int j = lane + 32 * k;
      pk[k] = 0;
      if (j >= kApronVoxels) continue;
      const int li = ApronVoxel(j), code = ApronCode(li);
      if (nb[code] < 0) continue;
      const int sl = ApronSourceLocal(li, code);
      pk[k] = static_cast<uint32_t>(li) | static_cast<uint32_t>(sl) << 10 |
              static_cast<uint32_t>(code) << 20;
      val[k] = v.voxels[static_cast<int64_t>(nb[code]) * kBrickVoxels + sl];
    }
#pragma unroll
    for (int k = 0; k < kApronPerLane; ++k)
      if (pk[k] != 0) v.voxels[base + (pk[k] & 1023u)] = val[k];
    if (v.colors != nullptr) {
      Color4 col[kApronPerLane];
#pragma unroll
      for (int k = 0; k < kApronPerLane; ++k)
        if (pk[k] != 0)
          col[k] = v.colors[static_cast<int64_t>(nb[pk[k] >> 20]) * kBrickVoxels +
                            ((pk[k] >> 10) & 1023u)];
#pragma unroll
      for (int k = 0; k < kApronPerLane; ++k)
        if (pk[k] != 0) v.colors[base + (pk[k] & 1023u)] = col[k];
    }
  }
}

// The apron refresh of the sixth speed pass: only around this frame's new bricks. An apron voxel
// and the core voxel it copies are the same world point, so IntegrateVoxel gives them the same
// value from the same old value, and a brick that SelectKernel does not list for the update (not
// visible, or wholly occluded) has no voxel, apron included, that the frame could change
// (BrickVisible and OccludedBrick are conservative for every stored voxel). So once an apron voxel
// equals its owner's core voxel it stays equal, frame after frame, without copies; the pair comes
// apart only when the owner is new: it starts from zero while the apron voxel kept its history,
// and the new brick's own apron voxels start from zero while their owners have theirs. A warp per
// new brick N (pool index free_list[fresh[0] + i], i < fresh[1]; CommitNew) therefore copies,
// after the integration, (1) N's 217 apron voxels from its + neighbours, and (2) into each -
// neighbour M = N - offset(code) the part of M's apron that N owns (ApronCode = code: a face of
// 64, an edge of 8 or the corner), 217 voxels in all. Sources are core voxels, targets apron
// voxels, so the copies are independent; when M is new too, its own pass writes the same values.
// Lanes 0-7 look up the + neighbours, lanes 8-15 the - neighbours (14 hash lookups a new brick
// instead of 7 a visible one), and each lane issues its 14 loads before its stores. This replaces
// ApronKernel over every visible brick (cuda_disable kOffFreshApron runs that one as well, after
// this one: it must then change nothing, which the [gpu] switch test checks bit for bit).
__global__ void ApronFreshKernel(VolumeView v, const int* fresh, const int32_t* free_list,
                                 const TrackState* s) {
  if (!s->integrate) return;
  const int first = fresh[0], n = fresh[1];
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  __shared__ int32_t nb_warp[kThreads / 32][16];
  for (int i = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < n; i += warps) {
    const int32_t bi = free_list[first + i];
    int32_t* const nb = nb_warp[threadIdx.x >> 5];  // [code]: + neighbour, [8 + code]: - neighbour
    __syncwarp();  // the previous brick's reads of nb are done
    if (lane < 16) {
      const int code = lane & 7;
      int32_t idx = bi;
      if (code != 0) {
        const I3 b = UnpackKey(v.brick_keys[bi]);
        const int sx = code & 1, sy = (code >> 1) & 1, sz = (code >> 2) & 1;
        const I3 o = lane < 8 ? I3{b.x + sx, b.y + sy, b.z + sz} : I3{b.x - sx, b.y - sy, b.z - sz};
        idx = KeyInRange(o) ? FindBrick(v, PackKey(o)) : -1;
      }
      nb[lane] = idx;
    }
    __syncwarp();
    // Copy k of this lane: apron voxel li = ApronVoxel(lane + 32 k) of code c, packed as in
    // ApronKernel (li | sl << 10 | c << 20, 0 = none); (1) N[li] <- nb[c][sl], (2) nb[8 + c][li]
    // <- N[sl], sl = ApronSourceLocal(li, c).
    const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
    uint32_t pk[kApronPerLane];
    Voxel own[kApronPerLane], owned[kApronPerLane];
#pragma unroll
    for (int k = 0; k < kApronPerLane; ++k) {
      const int j = lane + 32 * k;
      pk[k] = 0;
      if (j >= kApronVoxels) continue;
      const int li = ApronVoxel(j), code = ApronCode(li);
      const int sl = ApronSourceLocal(li, code);
      pk[k] = static_cast<uint32_t>(li) | static_cast<uint32_t>(sl) << 10 |
              static_cast<uint32_t>(code) << 20;
      if (nb[code] >= 0) own[k] = v.voxels[static_cast<int64_t>(nb[code]) * kBrickVoxels + sl];
      if (nb[8 + code] >= 0) owned[k] = v.voxels[base + sl];
    }
#pragma unroll
    for (int k = 0; k < kApronPerLane; ++k) {
      if (pk[k] == 0) continue;
      const int li = pk[k] & 1023u, code = pk[k] >> 20;
      if (nb[code] >= 0) v.voxels[base + li] = own[k];
      if (nb[8 + code] >= 0) v.voxels[static_cast<int64_t>(nb[8 + code]) * kBrickVoxels + li] = owned[k];
    }
    if (v.colors != nullptr) {
#pragma unroll
      for (int k = 0; k < kApronPerLane; ++k) {
        if (pk[k] == 0) continue;
        const int li = pk[k] & 1023u, sl = (pk[k] >> 10) & 1023u, code = pk[k] >> 20;
        if (nb[code] >= 0)
          v.colors[base + li] = v.colors[static_cast<int64_t>(nb[code]) * kBrickVoxels + sl];
        if (nb[8 + code] >= 0)
          v.colors[static_cast<int64_t>(nb[8 + code]) * kBrickVoxels + li] = v.colors[base + sl];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Raycasting

// Model-raycast options (bits of RaycastModelKernel's `opts`), all on. For A/B measurements
// FusionConfig::cuda_disable turns optimisations off by these bits and by kOffApronIlp / kOffCull
// (`fresnel_bench_fusion --variants`). What turning one off cost per 848x480 frame on the H200 (2026-12-01, GPU time,
// against 0.79 ms with all on and the old ICP stop; docs/fusion.md): end 0.125 ms, resume 0.118,
// tiles 0.055, apron ILP 0.035, cull 0.027, tight start 0.028 (0.018 with secant), secant 0.060.
constexpr unsigned kRayEndNearDepth = 1;  // end each hinted ray at NearDepthEnd(z)
constexpr unsigned kRayResumeInBand = 2;  // CastRay's resume_in_band
constexpr unsigned kRayTiles = 4;         // a warp casts an 8 x 4 pixel tile, not 32 pixels of a row
constexpr unsigned kOffApronIlp = 8;      // ApronKernel's ilp
constexpr unsigned kOffCull = 16;         // SelectKernel's occlusion cull (OccludedBrick)
constexpr unsigned kRayTightStart = 32;   // start at NearDepthStart(z) + mu (with kRayResumeInBand)
constexpr unsigned kRaySecant = 64;       // RayOptions::secant (with kRayResumeInBand)
constexpr unsigned kRayDefault =
    kRayEndNearDepth | kRayResumeInBand | kRayTiles | kRayTightStart | kRaySecant;
// Bits of FusionConfig::cuda_enable: variants that measured slower, kept for A/B runs.
// kOnIcpWhile: the ICP graph of WHILE nodes (EnqueueIcp) cost +0.020 / +0.023 ms a 848x480 /
// 640x480 frame on the H200 and 2 % fewer frames/s with 32 sessions (2026-12-01, driver
// 580.159.04; docs/fusion.md "Fourth speed pass"): a WHILE iteration costs more than the
// converged plain kernels it saves.
constexpr unsigned kOnIcpWhile = 1;
// More cuda_disable bits (fourth speed pass, same run; what turning one off cost a 848x480 /
// 640x480 frame, measured with kOnIcpWhile on): fused launches 0.012 / 0.011 ms, batched ICP tail
// 0.006 / 0.004, integrate ILP 0.008 / 0.006 (0.005 / 0.010 with kOnIcpWhile off), its occupancy
// bound 0.017 / 0.021 (the ILP kernel without it was slower than the plain one).
constexpr unsigned kOffFuseLaunches = 256;  // Begin, the counter memset and Commit folded into
                                            // neighbouring kernels; the 3 vertex maps in 1 launch
constexpr unsigned kOffIcpBatchedTail = 512;  // IcpKernel's batched partial sums (batched_tail)
constexpr unsigned kOffIntegrateIlp = 1024;   // IntegrateKernel's kIlp (the plain voxel loop)
constexpr unsigned kOffIntegrateBound = 2048;  // the kIlp kernel without its occupancy bound
// Fifth speed pass (2026-12-01, session 6 round 2): SelectKernel writes each visible brick's 7
// neighbours once and ApronKernel reads them instead of 7 hash lookups a brick (turning it off
// cost 0.001-0.003 ms a frame and 0.7-0.9 % of the frames/s with 32 sessions on the H200).
constexpr unsigned kOffNeighbourList = 4096;
// cuda_enable bit: IntegrateKernel skips the apron voxels that ApronKernel overwrites (needs the
// neighbour list and the default ILP kernel). Same voxels, but slower on the H200 (2026-12-01:
// integrate +0.025 / +0.034 ms a 848x480 / 640x480 frame, 5 % fewer frames/s with 32 sessions:
// the block's barriers around the shared list and the skipped lanes' divergence cost more than
// the dead apron updates), so off by default.
constexpr unsigned kOnSkipOwnedApron = 2;
// Sixth speed pass (2026-12-01, session 7): the apron refresh covers only the new bricks and
// their - neighbours (ApronFreshKernel), and SelectKernel lists no visible bricks and writes no
// neighbour lists. This bit also runs the fifth pass's refresh of every visible brick (ApronKernel,
// with SelectKernel's lists unless kOffNeighbourList) after it, which must change nothing; so
// does kOnSkipOwnedApron, which needs that refresh.
constexpr unsigned kOffFreshApron = 8192;
// ProcessFrame waits for its frame on an event made with cudaEventBlockingSync (the thread sleeps
// until the GPU is done) instead of cudaStreamSynchronize, which spins a core for the whole frame
// under the runtime's default schedule (one context, many cores): fresneld's K workers a GPU
// then spin while the gRPC threads and the clients need the cores. fresnel_bench_fusion
// --sessions, whose 32 sessions meet 90 fps with p99 1.8 ms, blocks the same way (its
// cudaDeviceScheduleBlockingSync); this bit spins as before (2026-12-01; not measured apart).
constexpr unsigned kOffBlockingWait = 16384;
// A volume's device arrays come from the device's default stream-ordered pool (cudaMallocAsync
// on the creating stream) and go back with cudaFreeAsync, and its three pinned host buffers are
// kept for the next volume (PinnedCache), so that closing a session never calls cudaFree /
// cudaFreeHost: both synchronise the whole device, and with 32 sessions a closing one held the
// others' frames (session 8: the bench's slowest 1 % spent ~9 ms waiting in ProcessFrame while
// sessions ended). This bit allocates with cudaMalloc / cudaMallocHost and frees as before.
constexpr unsigned kOffAsyncFree = 32768;
// cuda_enable bit: the ICP model maps at half resolution (the level-1 camera: a quarter of the
// model rays; each frame's ray window from its level-1 depth), which the ICP of every level
// projects into instead of the full-resolution maps. Changes tracking (not bit for bit).
constexpr unsigned kOnHalfModel = 4;

// Pixel of thread `threadIdx.x` in block `blockIdx.x` of a raycast. Row order: pixel i of the
// image. Tiles: a block of 256 covers a 32 x 8 pixel tile (tiles in row order over the image)
// and its warp w the 8 x 4 sub-tile (w % 4, w / 4), lane l pixel (l % 8, l / 8) in it, so that a
// warp's rays are 8 x 4 neighbours (nearby depths, the same bricks) rather than a 32-pixel strip.
// The grid has TileBlocks(cam) blocks; threads beyond the image get false.
__host__ __device__ inline int TileBlocks(const CameraF& cam) {
  return ((cam.width + 31) / 32) * ((cam.height + 7) / 8);
}
__device__ inline bool RayPixel(const CameraF& cam, bool tiles, int* u, int* v) {
  if (!tiles) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    *u = i % cam.width;
    *v = i / cam.width;
    return i < cam.width * cam.height;
  }
  const int tiles_x = (cam.width + 31) / 32;
  const int bx = blockIdx.x % tiles_x, by = blockIdx.x / tiles_x;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  *u = 32 * bx + 8 * (w & 3) + (l & 7);
  *v = 8 * by + 4 * (w >> 2) + (l >> 3);
  return *u < cam.width && *v < cam.height;
}

// Model maps for the next frame's ICP from the pose in TrackState (or an explicit pose). With
// hint_depth (the depth frame just integrated) each ray covers only [NearDepthStart(z),
// NearDepthEnd(z)] around the measured z (see `opts`); without it, the full [mn, mx].
__global__ void __launch_bounds__(kThreads) RaycastModelKernel(
    VolumeView v, const Counters* c, TrackState* s, CameraF cam, float mn, float mx, F4* model_v,
    F4* model_n, int use_state, PoseF explicit_pose, const float* hint_depth, unsigned opts) {
  if (use_state && !s->integrate) return;
  const PoseF T = use_state ? s->T_wc : explicit_pose;
  if (use_state && blockIdx.x == 0 && threadIdx.x == 0) {
    s->model_T_wc = s->T_wc;
    s->model_T_cw = s->T_cw;
    s->has_model = 1;
  }
  int u, vv;
  if (!RayPixel(cam, (opts & kRayTiles) != 0, &u, &vv)) return;
  const int i = vv * cam.width + u;
  float start = mn, end = mx;
  RayOptions ro;
  if (hint_depth != nullptr) {
    // Near-depth start: every ray of a warp is short (a fallback to the full ray for pixels
    // without depth would make the warp as slow as before); such pixels have no model point.
    const float z = hint_depth[i];
    if (!(z > 0)) {
      model_v[i] = F4{0, 0, 0, 0};
      model_n[i] = F4{0, 0, 0, 0};
      return;
    }
    ro.resume_in_band = (opts & kRayResumeInBand) != 0;
    // Tight start, one mu later: a first sample that is already negative (a surface more than
    // mu + 3 sigma in front of z) sends the ray back by mu to the usual start, so only a surface
    // thinner than mu in that stretch goes unseen; otherwise it saves a stage-1 step.
    if (ro.resume_in_band && (opts & kRayTightStart)) ro.lead = v.mu;
    ro.secant = ro.resume_in_band && (opts & kRaySecant) != 0;
    start = fmaxf(mn, NearDepthStart(z, v.mu));
    if (opts & kRayEndNearDepth) end = fminf(mx, NearDepthEnd(z, v.mu));
  }
  PixelHit p = RaycastPixel(v, c->octree_overflow == 0, T, cam, u, vv, start, end, ro);
  model_v[i] = F4{p.point_w.x, p.point_w.y, p.point_w.z, p.hit ? 1.0f : 0.0f};
  model_n[i] = F4{p.normal_w.x, p.normal_w.y, p.normal_w.z, 0};
}

__global__ void RenderKernel(VolumeView v, const Counters* c, PoseF T, CameraF cam, float mn,
                             float mx, int mode, float* out_f, uint8_t* out_u8) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= cam.width * cam.height) return;
  PixelHit p = RaycastPixel(v, c->octree_overflow == 0, T, cam, i % cam.width, i / cam.width, mn, mx);
  switch (mode) {
    case 0: out_f[i] = p.depth_z; break;
    case 1:
      out_f[3 * i] = p.hit ? p.normal_w.x : 0.0f;
      out_f[3 * i + 1] = p.hit ? p.normal_w.y : 0.0f;
      out_f[3 * i + 2] = p.hit ? p.normal_w.z : 0.0f;
      break;
    case 2: out_u8[i] = p.hit ? ShadeValue(p.normal_w, p.dir_w) : 0; break;
    default:
      out_u8[3 * i] = p.hit ? p.color.r : 0;
      out_u8[3 * i + 1] = p.hit ? p.color.g : 0;
      out_u8[3 * i + 2] = p.hit ? p.color.b : 0;
      break;
  }
}

__global__ void SampleKernel(VolumeView v, const float* pts, int n, float* out_f, int* out_ok) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float inv = 1.0f / v.voxel_size;
  BrickCache cache{kEmptyKey, -1};
  float f = 0;
  bool ok = SampleTsdf(v, V3{pts[3 * i] * inv, pts[3 * i + 1] * inv, pts[3 * i + 2] * inv}, &cache,
                       &f, nullptr, nullptr);
  out_f[i] = ok ? f : 0.0f;
  out_ok[i] = ok ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Mesh extraction

__global__ void CollectKernel(const uint64_t* brick_keys, int hwm, uint64_t* keys_out,
                              int32_t* idx_out, int* count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= hwm || brick_keys[i] == kEmptyKey) return;
  int pos = atomicAdd(count, 1);
  keys_out[pos] = brick_keys[i];
  idx_out[pos] = i;
}

__device__ int CellCount(const Voxel* brick, int cell, float span) {
  float c[8];
  if (!LoadCell(brick, cell & 7, (cell >> 3) & 7, cell >> 6, span, c)) return 0;
  CellCounter counter;
  return CellTriangles(c, counter);
}

__global__ void __launch_bounds__(kMcThreads) McCountKernel(const Voxel* voxels,
                                                            const int32_t* bricks,
                                                            int64_t* counts, float span) {
  using Reduce = cub::BlockReduce<int, kMcThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const Voxel* brick = voxels + static_cast<int64_t>(bricks[blockIdx.x]) * kBrickVoxels;
  int n = CellCount(brick, threadIdx.x, span);
  int total = Reduce(tmp).Sum(n);
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kMcThreads) McWriteKernel(VolumeView v, const uint64_t* keys,
                                                            const int32_t* bricks,
                                                            const int64_t* offsets, MeshOut out) {
  using Scan = cub::BlockScan<int, kMcThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int64_t base = static_cast<int64_t>(bricks[blockIdx.x]) * kBrickVoxels;
  const Voxel* brick = v.voxels + base;
  const int cell = threadIdx.x;
  const int x = cell & 7, y = (cell >> 3) & 7, z = cell >> 6;
  float c[8];
  const bool ok = LoadCell(brick, x, y, z, MeshMaxSpan(v.voxel_size, v.mu), c);
  CellCounter counter;
  int n = ok ? CellTriangles(c, counter) : 0;
  int prefix;
  Scan(tmp).ExclusiveSum(n, prefix);
  if (n == 0) return;
  const I3 b = UnpackKey(keys[blockIdx.x]);
  Color4 cc[8];
  if (v.colors != nullptr)
    for (int k = 0; k < 8; ++k) cc[k] = v.colors[base + x + 9 * y + 81 * z + CornerOffset(k)];
  CellWriter wr;
  wr.out = out;
  wr.next = offsets[blockIdx.x] + prefix;
  wr.c = c;
  wr.corner_colors = v.colors != nullptr ? cc : nullptr;
  wr.vs = v.voxel_size;
  wr.origin = V3{static_cast<float>(8 * b.x + x) * v.voxel_size,
                 static_cast<float>(8 * b.y + y) * v.voxel_size,
                 static_cast<float>(8 * b.z + z) * v.voxel_size};
  CellTriangles(c, wr);
}

// ---------------------------------------------------------------------------------------------
// Snapshots, eviction and rebuilds

__global__ void GatherKernel(const Voxel* voxels, const Color4* colors, const int32_t* bricks,
                             int n, Voxel* vout, Color4* cout) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * kBrickVoxels) return;
  int64_t src = static_cast<int64_t>(bricks[i / kBrickVoxels]) * kBrickVoxels + i % kBrickVoxels;
  vout[i] = voxels[src];
  if (colors != nullptr) cout[i] = colors[src];
}

__global__ void ScatterKernel(Voxel* voxels, Color4* colors, const int32_t* bricks, int n,
                              const Voxel* vin, const Color4* cin) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * kBrickVoxels) return;
  int64_t dst = static_cast<int64_t>(bricks[i / kBrickVoxels]) * kBrickVoxels + i % kBrickVoxels;
  voxels[dst] = vin[i];
  if (colors != nullptr) colors[dst] = cin[i];
}

__global__ void EvictKernel(VolumeView v, Counters* c, int32_t* free_list, int hwm, double cx,
                            double cy, double cz, double r2) {
  int bi = blockIdx.x * blockDim.x + threadIdx.x;
  if (bi >= hwm) return;
  uint64_t key = v.brick_keys[bi];
  if (key == kEmptyKey) return;
  I3 b = UnpackKey(key);
  double vs = v.voxel_size;
  double dx = (8.0 * b.x + 4) * vs - cx, dy = (8.0 * b.y + 4) * vs - cy, dz = (8.0 * b.z + 4) * vs - cz;
  if (dx * dx + dy * dy + dz * dz <= r2) return;
  v.brick_keys[bi] = kEmptyKey;
  int pos = atomicSub(&c->used, 1) - 1;
  free_list[pos] = bi;
  atomicAdd(&c->scratch, 1);
}

__global__ void ResetRebuildKernel(Counters* c) {
  c->tombstones = 0;
  c->octree_overflow = 0;
}

// Re-inserts every pool brick into the (cleared) hash table and octree.
__global__ void ReinsertKernel(VolumeView v, Counters* c, int hwm, int rehash) {
  int bi = blockIdx.x * blockDim.x + threadIdx.x;
  if (bi >= hwm) return;
  uint64_t key = v.brick_keys[bi];
  if (key == kEmptyKey) return;
  if (rehash) {
    uint32_t h = HashKey(key) & v.slot_mask;
    for (uint32_t i = 0; i <= v.slot_mask; ++i) {
      unsigned long long old = atomicCAS(reinterpret_cast<unsigned long long*>(&v.keys[h]),
                                         static_cast<unsigned long long>(kEmptyKey),
                                         static_cast<unsigned long long>(key));
      if (old == kEmptyKey) {
        v.vals[h] = bi;
        break;
      }
      h = (h + 1) & v.slot_mask;
    }
  }
  SetOctreeDevice(v, key, c);
}

// ---------------------------------------------------------------------------------------------

// Pinned host buffers of closed volumes, by size, for the next ones (a few MB each; at most
// kPinnedCacheBytes kept, the rest freed). Process-wide: pinned memory belongs to no device.
class PinnedCache {
 public:
  static constexpr size_t kPinnedCacheBytes = size_t{256} << 20;

  static absl::Status Get(size_t bytes, void** p) {
    {
      std::lock_guard<std::mutex> lock(mu());
      auto& m = entries();
      auto it = m.find(bytes);
      if (it != m.end()) {
        *p = it->second;
        m.erase(it);
        held() -= bytes;
        return absl::OkStatus();
      }
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMallocHost(p, bytes));
    return absl::OkStatus();
  }

  static void Put(size_t bytes, void* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu());
      if (held() + bytes <= kPinnedCacheBytes) {
        entries().emplace(bytes, p);
        held() += bytes;
        return;
      }
    }
    cudaFreeHost(p);
  }

 private:
  static std::mutex& mu() {
    static std::mutex* m = new std::mutex;
    return *m;
  }
  static size_t& held() {
    static size_t bytes = 0;
    return bytes;
  }
  static std::multimap<size_t, void*>& entries() {
    static auto* m = new std::multimap<size_t, void*>;  // never destroyed: outlives the volumes
    return *m;
  }
};

class CudaBackend : public VolumeBackend {
 public:
  CudaBackend(const Device& device, const FusionConfig& config)
      : ordinal_(device.ordinal), config_(config) {
    sizes_ = ComputeSizes(config);
    cam_ = ToCameraF(config.camera);
  }

  ~CudaBackend() override {
    cudaSetDevice(ordinal_);
    if (async_free_) {
      // Every operation waited for its own work, so nothing of this volume is in flight; the
      // frees are ordered on the creating stream and synchronise nothing else.
      if (icp_graph_ != nullptr) cudaGraphExecDestroy(icp_graph_);
      if (done_event_ != nullptr) cudaEventDestroy(done_event_);
      for (void* p : allocations_) cudaFreeAsync(p, alloc_stream_);
      PinnedCache::Put(sizeof(TrackState), h_state_);
      PinnedCache::Put(sizeof(Counters), h_counters_);
      PinnedCache::Put(staging_bytes_, h_staging_);
      return;
    }
    cudaDeviceSynchronize();
    if (icp_graph_ != nullptr) cudaGraphExecDestroy(icp_graph_);
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
    for (void* p : allocations_) cudaFree(p);
    if (h_state_ != nullptr) cudaFreeHost(h_state_);
    if (h_counters_ != nullptr) cudaFreeHost(h_counters_);
    if (h_staging_ != nullptr) cudaFreeHost(h_staging_);
  }

  template <class T>
  absl::Status Alloc(T** p, int64_t count) {
    size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
    void* q = nullptr;
    if (async_free_) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&q, bytes, alloc_stream_));
    } else {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMalloc(&q, bytes));
    }
    allocations_.push_back(q);
    allocated_ += static_cast<int64_t>(bytes);
    *p = static_cast<T*>(q);
    return absl::OkStatus();
  }

  absl::Status Init(const Device& device) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, ordinal_));
    off_ = config_.cuda_disable;
    async_free_ = (off_ & kOffAsyncFree) == 0;
    alloc_stream_ = StreamOf(device);
    model_ray_opts_ = kRayDefault & ~off_;
    // The half-resolution model needs the level-1 depth of a tracked frame as its ray hint.
    model_cam_ = (config_.cuda_enable & kOnHalfModel) != 0 && config_.tracking && kLevels > 1
                     ? ScaleCamera(cam_, 1)
                     : cam_;
    for (int l = 0; l < kLevels; ++l) {
      if (config_.cuda_icp_stop_xi2[l] > 0) icp_stop_.xi2[l] = config_.cuda_icp_stop_xi2[l];
    }
    const int64_t cap = sizes_.capacity, px = sizes_.pixels;
    FRESNEL_RETURN_IF_ERROR(Alloc(&keys_, sizes_.slots));
    FRESNEL_RETURN_IF_ERROR(Alloc(&vals_, sizes_.slots));
    FRESNEL_RETURN_IF_ERROR(Alloc(&brick_keys_, cap));
    FRESNEL_RETURN_IF_ERROR(Alloc(&free_list_, cap));
    FRESNEL_RETURN_IF_ERROR(Alloc(&voxels_, cap * kBrickVoxels));
    if (config_.color) FRESNEL_RETURN_IF_ERROR(Alloc(&colors_, cap * kBrickVoxels));
    FRESNEL_RETURN_IF_ERROR(Alloc(&top_keys_, sizes_.top_slots));
    FRESNEL_RETURN_IF_ERROR(Alloc(&top_masks_, sizes_.top_slots));
    FRESNEL_RETURN_IF_ERROR(Alloc(&top_mids_, sizes_.top_slots * 64));
    FRESNEL_RETURN_IF_ERROR(Alloc(&new_slots_, cap));
    FRESNEL_RETURN_IF_ERROR(Alloc(&visible_, cap));
    FRESNEL_RETURN_IF_ERROR(Alloc(&nb_list_, cap * 8));
    FRESNEL_RETURN_IF_ERROR(Alloc(&update_count_, 3));
    FRESNEL_RETURN_IF_ERROR(Alloc(&tile_max_, TilesX(cam_.width) * TilesY(cam_.height)));
    FRESNEL_RETURN_IF_ERROR(Alloc(&raw_, px * 4));
    FRESNEL_RETURN_IF_ERROR(Alloc(&rgb_, px * 3));
    for (int l = 0; l < kLevels; ++l) {
      CameraF c = ScaleCamera(cam_, l);
      const int64_t n = static_cast<int64_t>(c.width) * c.height;
      FRESNEL_RETURN_IF_ERROR(Alloc(&depth_[l], n + 1));
      FRESNEL_RETURN_IF_ERROR(Alloc(&vtx_[l], n + 1));
      FRESNEL_RETURN_IF_ERROR(Alloc(&nrm_[l], n + 1));
    }
    FRESNEL_RETURN_IF_ERROR(Alloc(&filtered_, px));
    FRESNEL_RETURN_IF_ERROR(Alloc(&model_v_, px));
    FRESNEL_RETURN_IF_ERROR(Alloc(&model_n_, px));
    FRESNEL_RETURN_IF_ERROR(Alloc(&counters_, 1));
    FRESNEL_RETURN_IF_ERROR(Alloc(&state_, 1));
    FRESNEL_RETURN_IF_ERROR(Alloc(&partials_, kMaxIcpBlocks * kIcpSums));
    staging_bytes_ = static_cast<size_t>(px * 7);
    if (async_free_) {
      FRESNEL_RETURN_IF_ERROR(
          PinnedCache::Get(sizeof(TrackState), reinterpret_cast<void**>(&h_state_)));
      FRESNEL_RETURN_IF_ERROR(
          PinnedCache::Get(sizeof(Counters), reinterpret_cast<void**>(&h_counters_)));
      FRESNEL_RETURN_IF_ERROR(PinnedCache::Get(staging_bytes_, &h_staging_));
    } else {
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMallocHost(reinterpret_cast<void**>(&h_state_), sizeof(TrackState)));
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMallocHost(reinterpret_cast<void**>(&h_counters_), sizeof(Counters)));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_staging_, staging_bytes_));
    }
    if ((off_ & kOffBlockingWait) == 0)
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&done_event_, cudaEventBlockingSync | cudaEventDisableTiming));

    cudaStream_t st = StreamOf(device);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(keys_, 0xFF, sizes_.slots * 8, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(vals_, 0xFF, sizes_.slots * 4, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(brick_keys_, 0xFF, cap * 8, st));
    std::vector<int32_t> fl(cap);
    for (int64_t i = 0; i < cap; ++i) fl[i] = static_cast<int32_t>(i);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(free_list_, fl.data(), cap * 4, cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(voxels_, 0, cap * kBrickVoxels * sizeof(Voxel), st));
    if (colors_ != nullptr)
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(colors_, 0, cap * kBrickVoxels * sizeof(Color4), st));
    FRESNEL_RETURN_IF_ERROR(ClearOctree(st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(depth_[0], 0, px * 4, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(update_count_, 0, 3 * sizeof(int), st));
    std::memset(h_counters_, 0, sizeof(Counters));
    std::memset(h_state_, 0, sizeof(TrackState));
    PoseD id = ToPoseD(RigidTransform::Identity());
    h_state_->prev_pose = id;
    SetPose(h_state_, id);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counters_, h_counters_, sizeof(Counters), cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state_, h_state_, sizeof(TrackState), cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    return absl::OkStatus();
  }

  // The ICP kernel of level l (`max_runs`, `more`: see IcpKernel; 0 outside a WHILE node).
  void LaunchIcpLevel(cudaStream_t st, int l, int max_runs, cudaGraphConditionalHandle more) {
    const IcpParams ip{0.1f, 0.7f};
    CameraF c = ScaleCamera(cam_, l);
    const int n = c.width * c.height;
    const int blocks = std::max(1, std::min<int>({static_cast<int>(cuda::BlocksFor(n, kThreads)), sms_ * 2, kMaxIcpBlocks}));
    IcpKernel<<<blocks, kThreads, 0, st>>>(vtx_[l], nrm_[l], n, model_cam_, model_v_, model_n_, ip,
                                           state_, l, partials_, max_runs, more,
                                           (off_ & kOffIcpBatchedTail) == 0 ? 1 : 0);
  }

  // The ICP loop (every iteration of every level, coarse to fine) on stream st. The kernels read
  // and write only persistent buffers, so the sequence is the same every frame.
  void LaunchIcp(cudaStream_t st) {
    for (int l = kLevels - 1; l >= 0; --l)
      for (int it = 0; it < config_.icp_iterations[l]; ++it) LaunchIcpLevel(st, l, 0, 0);
  }

  // The ICP loop as a graph of one WHILE node per level (coarse to fine, each after the previous
  // one), whose body is the level's IcpKernel: the kernel ends the loop when the level has
  // converged or run its iterations, so converged levels launch nothing (CUDA 12.4+ conditional
  // nodes). False when the runtime refuses any step (the caller then captures the plain loop).
  bool BuildIcpWhileGraph(cudaGraph_t* out) {
    cudaGraph_t g = nullptr;
    cudaStream_t cap = nullptr;
    bool ok = cudaGraphCreate(&g, 0) == cudaSuccess &&
              cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking) == cudaSuccess;
    cudaGraphNode_t prev = nullptr;
    for (int l = kLevels - 1; ok && l >= 0; --l) {
      const int iterations = config_.icp_iterations[l];
      if (iterations <= 0) continue;
      cudaGraphConditionalHandle more = 0;
      // Default 1, assigned at every launch: each level's loop starts with one run.
      ok = cudaGraphConditionalHandleCreate(&more, g, 1, cudaGraphCondAssignDefault) == cudaSuccess;
      cudaGraphNodeParams np{};
      np.type = cudaGraphNodeTypeConditional;
      np.conditional.handle = more;
      np.conditional.type = cudaGraphCondTypeWhile;
      np.conditional.size = 1;
      cudaGraphNode_t node = nullptr;
      if (ok)
        ok = cudaGraphAddNode(&node, g, prev != nullptr ? &prev : nullptr, nullptr,
                              prev != nullptr ? 1 : 0, &np) == cudaSuccess;
      if (ok)
        ok = cudaStreamBeginCaptureToGraph(cap, np.conditional.phGraph_out[0], nullptr, nullptr,
                                           0, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
      if (ok) {
        LaunchIcpLevel(cap, l, iterations, more);
        cudaGraph_t body = nullptr;  // the node's own body graph, owned by the node
        ok = cudaStreamEndCapture(cap, &body) == cudaSuccess;
      }
      prev = node;
    }
    if (cap != nullptr) cudaStreamDestroy(cap);
    if (!ok && g != nullptr) {
      cudaGraphDestroy(g);
      g = nullptr;
    }
    *out = g;
    return ok;
  }

  // Enqueues the ICP loop as one CUDA graph, built once at the first tracked frame (a graph
  // launch replaces the 19 default kernel launches): the plain loop captured on a private
  // stream, or with kOnIcpWhile the WHILE-node graph (the plain one where that cannot be built).
  // If both fail the loop is launched kernel by kernel from then on.
  absl::Status EnqueueIcp(cudaStream_t st) {
    if (icp_graph_ == nullptr && !icp_graph_failed_) {
      cudaGraph_t g = nullptr;
      bool ok = (config_.cuda_enable & kOnIcpWhile) != 0 && BuildIcpWhileGraph(&g) &&
                cudaGraphInstantiate(&icp_graph_, g, 0) == cudaSuccess;
      if (g != nullptr) cudaGraphDestroy(g);
      g = nullptr;
      if (!ok) {
        cudaGetLastError();
        icp_graph_ = nullptr;
        cudaStream_t cap = nullptr;
        ok = cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking) == cudaSuccess &&
             cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        if (ok) {
          LaunchIcp(cap);
          ok = cudaStreamEndCapture(cap, &g) == cudaSuccess && g != nullptr;
        }
        if (ok) ok = cudaGraphInstantiate(&icp_graph_, g, 0) == cudaSuccess;
        if (g != nullptr) cudaGraphDestroy(g);
        if (cap != nullptr) cudaStreamDestroy(cap);
      }
      if (!ok) {
        cudaGetLastError();
        icp_graph_ = nullptr;
        icp_graph_failed_ = true;
      }
    }
    if (icp_graph_ != nullptr) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(icp_graph_, st));
    } else {
      LaunchIcp(st);
    }
    return absl::OkStatus();
  }

  // The ICP model raycast (pose from TrackState or `pose`; hint: see RaycastModelKernel; a frame's
  // level-0 depth, replaced by its level-1 depth for the half-resolution model of kOnHalfModel).
  void LaunchModelRaycast(cudaStream_t st, bool use_state, const PoseF& pose, const float* hint) {
    const CameraF& mc = model_cam_;
    if (hint != nullptr && mc.width != cam_.width) hint = depth_[1];
    const int blocks = (model_ray_opts_ & kRayTiles) != 0
                           ? TileBlocks(mc)
                           : static_cast<int>(cuda::BlocksFor(mc.width * mc.height, kThreads));
    RaycastModelKernel<<<blocks, kThreads, 0, st>>>(
        View(), counters_, state_, mc, static_cast<float>(config_.min_depth_m),
        static_cast<float>(config_.max_depth_m), model_v_, model_n_, use_state ? 1 : 0, pose, hint,
        model_ray_opts_);
  }

  VolumeView View() const {
    VolumeView v;
    v.keys = keys_;
    v.vals = vals_;
    v.slot_mask = static_cast<uint32_t>(sizes_.slots - 1);
    v.voxels = voxels_;
    v.colors = colors_;
    v.brick_keys = brick_keys_;
    v.top_keys = top_keys_;
    v.top_masks = top_masks_;
    v.top_mids = top_mids_;
    v.top_mask = static_cast<uint32_t>(sizes_.top_slots - 1);
    v.voxel_size = static_cast<float>(config_.voxel_size_m);
    v.mu = static_cast<float>(config_.truncation_m);
    v.max_weight = config_.max_weight;
    return v;
  }

  absl::StatusOr<FrameResult> ProcessFrame(const Device& device, const FrameInput& frame,
                                           const FrameParams& params) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int px = static_cast<int>(sizes_.pixels);
    const bool is_float = config_.depth_format == DepthFormat::kFloat32;
    const bool has_rgb = config_.color && !frame.rgb.empty();
    cuda::StageClock clock(st);
    // Upload through pinned staging (the previous call has synchronised, so it is free). The
    // host copy into staging comes before the first mark: it is host time (in the wall time),
    // not GPU time of the track stage; the upload itself is in the track stage.
    char* stage = static_cast<char*>(h_staging_);
    std::memcpy(stage, frame.depth.data(), frame.depth.size());
    if (has_rgb) std::memcpy(stage + px * 4, frame.rgb.data(), frame.rgb.size());
    FRESNEL_RETURN_IF_ERROR(clock.Mark());
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(raw_, stage, frame.depth.size(), cudaMemcpyHostToDevice, st));
    if (has_rgb) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rgb_, stage + px * 4, frame.rgb.size(), cudaMemcpyHostToDevice, st));
    }
    const bool was_lost = h_state_->lost != 0;
    const bool fuse = (off_ & kOffFuseLaunches) == 0;
    // Relocalisation: after a loss, the model is raycast again from the prior before ICP.
    const bool relocalize = config_.tracking && params.has_prior && !params.has_fixed && was_lost &&
                            h_state_->has_model;
    FusedBegin begin{nullptr, params, config_.tracking ? 1 : 0, icp_stop_};
    if (fuse && !relocalize) {
      begin.s = state_;
    } else {
      BeginKernel<<<1, 1, 0, st>>>(state_, params, config_.tracking ? 1 : 0, icp_stop_);
    }
    if (relocalize) LaunchModelRaycast(st, /*use_state=*/true, PoseF{}, nullptr);
    PrepareDepthKernel<<<TilesX(cam_.width) * TilesY(cam_.height), kTile * kTile, 0, st>>>(
        raw_, is_float, static_cast<float>(1.0 / config_.depth_scale), cam_.width, cam_.height,
        static_cast<float>(config_.min_depth_m), static_cast<float>(config_.max_depth_m), depth_[0],
        tile_max_, begin);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion prepare");
    if (config_.tracking) {
      BilateralKernel<<<cuda::BlocksFor(px, kThreads), kThreads, 0, st>>>(depth_[0], cam_.width,
                                                                          cam_.height, filtered_);
      for (int l = 1; l < kLevels; ++l) {
        CameraF s = ScaleCamera(cam_, l - 1), d = ScaleCamera(cam_, l);
        DownsampleKernel<<<cuda::BlocksFor(d.width * d.height, kThreads), kThreads, 0, st>>>(
            l == 1 ? filtered_ : depth_[l - 1], s.width, s.height, depth_[l], d.width, d.height);
      }
      if (fuse) {
        PyramidMaps m;
        m.first[0] = 0;
        for (int l = 0; l < kLevels; ++l) {
          m.cam[l] = ScaleCamera(cam_, l);
          m.src[l] = l == 0 ? filtered_ : depth_[l];
          m.vtx[l] = vtx_[l];
          m.nrm[l] = nrm_[l];
          m.first[l + 1] =
              m.first[l] + static_cast<int>(cuda::BlocksFor(m.cam[l].width * m.cam[l].height, kThreads));
        }
        VertexNormalLevelsKernel<<<m.first[kLevels], kThreads, 0, st>>>(m, state_);
      } else {
        for (int l = 0; l < kLevels; ++l) {
          CameraF c = ScaleCamera(cam_, l);
          VertexNormalKernel<<<cuda::BlocksFor(c.width * c.height, kThreads), kThreads, 0, st>>>(
              l == 0 ? filtered_ : depth_[l], c, vtx_[l], nrm_[l], state_, l == 0 ? 1 : 0);
        }
      }
      // Host knows whether tracking can run this frame: it mirrors has_model and the pose source.
      const bool track = !params.has_fixed && h_state_->has_model;
      if (track) FRESNEL_RETURN_IF_ERROR(EnqueueIcp(st));
    }
    FinishKernel<<<1, 1, 0, st>>>(state_, params.integrate, fuse ? counters_ : nullptr,
                                  update_count_);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion track");
    FRESNEL_RETURN_IF_ERROR(clock.Mark());

    const VolumeView v = View();
    const int cap = static_cast<int>(sizes_.capacity);
    if (!fuse) FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&counters_->dropped, 0, sizeof(int32_t), st));
    AllocKernel<<<cuda::BlocksFor(px, kThreads), kThreads, 0, st>>>(depth_[0], cam_, state_, v,
                                                                   counters_, new_slots_, cap);
    AssignKernel<<<sms_ * 8, kThreads, 0, st>>>(v, counters_, new_slots_, free_list_, cap);
    if (!fuse) CommitKernel<<<1, 1, 0, st>>>(counters_, cap, update_count_);
    FrameView f{depth_[0], has_rgb ? rgb_ : nullptr, cam_, static_cast<float>(config_.min_depth_m),
                static_cast<float>(config_.max_depth_m)};
    // The update list reuses new_slots_, which is dead from CommitKernel to the next frame.
    int32_t* update = new_slots_;
    // The refresh of every visible brick (and so its lists) runs only for A/B runs.
    const bool full_refresh =
        (off_ & kOffFreshApron) != 0 || (config_.cuda_enable & kOnSkipOwnedApron) != 0;
    int32_t* const nb_list =
        full_refresh && (off_ & kOffNeighbourList) == 0 ? nb_list_ : nullptr;
    SelectKernel<<<sms_ * 8, kThreads, 0, st>>>(v, counters_, state_, f,
                                                full_refresh ? visible_ : nullptr, update,
                                                update_count_, tile_max_,
                                                (off_ & kOffCull) == 0 ? 1 : 0, fuse ? cap : 0,
                                                nb_list);
    if ((off_ & kOffIntegrateIlp) != 0) {
      IntegrateKernel<false, 0><<<sms_ * 16, kThreads, 0, st>>>(v, update_count_, state_, f, update,
                                                                nullptr);
    } else if ((off_ & kOffIntegrateBound) != 0) {
      IntegrateKernel<true, 0><<<sms_ * 16, kThreads, 0, st>>>(v, update_count_, state_, f, update,
                                                               nullptr);
    } else if (nb_list != nullptr && (config_.cuda_enable & kOnSkipOwnedApron) != 0) {
      IntegrateKernel<true, 4, true><<<sms_ * 16, kThreads, 0, st>>>(v, update_count_, state_, f,
                                                                     update, nb_list);
    } else {
      IntegrateKernel<true, 4><<<sms_ * 16, kThreads, 0, st>>>(v, update_count_, state_, f, update,
                                                               nullptr);
    }
    // A few hundred new bricks a frame in the benches' room (and thousands at the start), against
    // ~10^4 visible ones: 2 blocks an SM are plenty.
    ApronFreshKernel<<<sms_ * 2, kThreads, 0, st>>>(v, update_count_ + 1, free_list_, state_);
    if (full_refresh)
      ApronKernel<<<sms_ * 8, kThreads, 0, st>>>(v, &counters_->visible, 0, state_, visible_,
                                                  (off_ & kOffApronIlp) == 0 ? 1 : 0, nb_list);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion integrate");
    FRESNEL_RETURN_IF_ERROR(clock.Mark());
    if (config_.tracking) {
      LaunchModelRaycast(st, /*use_state=*/true, PoseF{}, depth_[0]);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion raycast");
    }
    FRESNEL_RETURN_IF_ERROR(clock.Mark());
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_state_, state_, sizeof(TrackState), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_counters_, counters_, sizeof(Counters), cudaMemcpyDeviceToHost, st));
    if (done_event_ != nullptr) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_event_, st));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_event_));
    } else {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    }

    FrameResult r;
    r.T_world_camera = FromPoseD(h_state_->pose);
    r.state = h_state_->lost ? TrackingState::kLost : TrackingState::kOk;
    r.relocalized = h_state_->relocalized != 0;
    r.integrated = h_state_->integrate != 0;
    r.inliers = static_cast<int64_t>(h_state_->inliers);
    r.residual_m = h_state_->residual;
    r.icp_iterations = h_state_->iterations;
    r.bricks_in_use = h_counters_->used;
    r.bricks_dropped = h_counters_->dropped;
    r.track_s = clock.Seconds(0);
    r.integrate_s = clock.Seconds(1);
    r.raycast_s = clock.Seconds(2);
    return r;
  }

  absl::StatusOr<HostArray> Render(const Device& device, const RigidTransform& T_wc,
                                   const CameraIntrinsics& camera, RenderMode mode) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const CameraF cam = ToCameraF(camera);
    const int64_t n = static_cast<int64_t>(cam.width) * cam.height;
    HostArray out;
    int m = 0;
    switch (mode) {
      case RenderMode::kDepth: out = HostArray(DType::kFloat32, {cam.height, cam.width}); m = 0; break;
      case RenderMode::kNormals: out = HostArray(DType::kFloat32, {cam.height, cam.width, 3}); m = 1; break;
      case RenderMode::kShaded: out = HostArray(DType::kUint8, {cam.height, cam.width}); m = 2; break;
      case RenderMode::kColor: out = HostArray(DType::kUint8, {cam.height, cam.width, 3}); m = 3; break;
    }
    DeviceBuffer<uint8_t> buf;
    FRESNEL_RETURN_IF_ERROR(buf.Allocate(device, static_cast<int64_t>(out.nbytes())));
    RenderKernel<<<cuda::BlocksFor(n, kThreads), kThreads, 0, st>>>(
        View(), counters_, ToFloat(ToPoseD(T_wc)), cam, static_cast<float>(config_.min_depth_m),
        static_cast<float>(config_.max_depth_m), m, reinterpret_cast<float*>(buf.get()), buf.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion render");
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.raw(), buf.get(), out.nbytes(), cudaMemcpyDeviceToHost, st));
    buf.Reset();
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    return out;
  }

  absl::StatusOr<Mesh> ExtractMesh(const Device& device) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int nb = h_counters_->used, hwm = h_counters_->hwm;
    Mesh mesh;
    if (nb == 0) return mesh;
    DeviceBuffer<uint64_t> k_in, k_out;
    DeviceBuffer<int32_t> i_in, i_out;
    DeviceBuffer<int> count;
    DeviceBuffer<int64_t> counts, offsets;
    FRESNEL_RETURN_IF_ERROR(k_in.Allocate(device, nb));
    FRESNEL_RETURN_IF_ERROR(k_out.Allocate(device, nb));
    FRESNEL_RETURN_IF_ERROR(i_in.Allocate(device, nb));
    FRESNEL_RETURN_IF_ERROR(i_out.Allocate(device, nb));
    FRESNEL_RETURN_IF_ERROR(count.Allocate(device, 1));
    FRESNEL_RETURN_IF_ERROR(counts.Allocate(device, nb + 1));
    FRESNEL_RETURN_IF_ERROR(offsets.Allocate(device, nb + 1));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count.get(), 0, sizeof(int), st));
    CollectKernel<<<cuda::BlocksFor(hwm, kThreads), kThreads, 0, st>>>(brick_keys_, hwm, k_in.get(),
                                                                      i_in.get(), count.get());
    size_t sort_bytes = 0, scan_bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, k_in.get(), k_out.get(), i_in.get(),
                                    i_out.get(), nb, 0, 64, st);
    cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts.get(), offsets.get(), nb + 1, st);
    DeviceBuffer<uint8_t> tmp;
    FRESNEL_RETURN_IF_ERROR(tmp.Allocate(device, static_cast<int64_t>(std::max(sort_bytes, scan_bytes))));
    FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
        tmp.get(), sort_bytes, k_in.get(), k_out.get(), i_in.get(), i_out.get(), nb, 0, 64, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counts.get() + nb, 0, sizeof(int64_t), st));
    McCountKernel<<<nb, kMcThreads, 0, st>>>(
        voxels_, i_out.get(), counts.get(),
        MeshMaxSpan(static_cast<float>(config_.voxel_size_m), static_cast<float>(config_.truncation_m)));
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion mesh count");
    FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(tmp.get(), scan_bytes, counts.get(),
                                                               offsets.get(), nb + 1, st));
    int64_t total = 0;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&total, offsets.get() + nb, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    mesh.vertices.resize(total * 9);
    mesh.normals.resize(total * 9);
    if (config_.color) mesh.colors.resize(total * 9);
    mesh.triangles.resize(total * 3);
    for (int64_t i = 0; i < total * 3; ++i) mesh.triangles[i] = static_cast<int32_t>(i);
    if (total > 0) {
      DeviceBuffer<float> dv, dn;
      DeviceBuffer<uint8_t> dc;
      FRESNEL_RETURN_IF_ERROR(dv.Allocate(device, total * 9));
      FRESNEL_RETURN_IF_ERROR(dn.Allocate(device, total * 9));
      if (config_.color) FRESNEL_RETURN_IF_ERROR(dc.Allocate(device, total * 9));
      MeshOut out{dv.get(), dn.get(), config_.color ? dc.get() : nullptr};
      McWriteKernel<<<nb, kMcThreads, 0, st>>>(View(), k_out.get(), i_out.get(), offsets.get(), out);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion mesh write");
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mesh.vertices.data(), dv.get(), total * 36, cudaMemcpyDeviceToHost, st));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mesh.normals.data(), dn.get(), total * 36, cudaMemcpyDeviceToHost, st));
      if (config_.color)
        FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mesh.colors.data(), dc.get(), total * 9, cudaMemcpyDeviceToHost, st));
      dv.Reset();
      dn.Reset();
      dc.Reset();
    }
    k_in.Reset();
    k_out.Reset();
    i_in.Reset();
    i_out.Reset();
    count.Reset();
    counts.Reset();
    offsets.Reset();
    tmp.Reset();
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    return mesh;
  }

  absl::StatusOr<VolumeState> Export(const Device& device) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int64_t cap = sizes_.capacity;
    VolumeState s;
    s.keys.resize(sizes_.slots);
    s.vals.resize(sizes_.slots);
    s.brick_keys.resize(cap);
    s.free_list.resize(cap);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&s.counters, counters_, sizeof(Counters), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.keys.data(), keys_, sizes_.slots * 8, cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.vals.data(), vals_, sizes_.slots * 4, cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.brick_keys.data(), brick_keys_, cap * 8, cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.free_list.data(), free_list_, cap * 4, cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_state_, state_, sizeof(TrackState), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    for (int32_t i = 0; i < static_cast<int32_t>(cap); ++i)
      if (s.brick_keys[i] != kEmptyKey) s.used_bricks.push_back(i);
    const int n = static_cast<int>(s.used_bricks.size());
    s.voxels.resize(static_cast<size_t>(n) * kBrickVoxels);
    if (config_.color) s.colors.resize(s.voxels.size());
    if (n > 0) {
      DeviceBuffer<int32_t> idx;
      DeviceBuffer<Voxel> vout;
      DeviceBuffer<Color4> cout;
      FRESNEL_RETURN_IF_ERROR(idx.Allocate(device, n));
      FRESNEL_RETURN_IF_ERROR(vout.Allocate(device, static_cast<int64_t>(n) * kBrickVoxels));
      if (config_.color) FRESNEL_RETURN_IF_ERROR(cout.Allocate(device, static_cast<int64_t>(n) * kBrickVoxels));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(idx.get(), s.used_bricks.data(), n * 4, cudaMemcpyHostToDevice, st));
      GatherKernel<<<cuda::BlocksFor(static_cast<int64_t>(n) * kBrickVoxels, kThreads), kThreads, 0, st>>>(
          voxels_, colors_, idx.get(), n, vout.get(), config_.color ? cout.get() : nullptr);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion gather");
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.voxels.data(), vout.get(), s.voxels.size() * sizeof(Voxel), cudaMemcpyDeviceToHost, st));
      if (config_.color)
        FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.colors.data(), cout.get(), s.colors.size() * sizeof(Color4), cudaMemcpyDeviceToHost, st));
      idx.Reset();
      vout.Reset();
      cout.Reset();
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    }
    s.prev_pose = h_state_->prev_pose;
    s.model_T_cw = h_state_->model_T_cw;
    s.model_T_wc = h_state_->model_T_wc;
    s.has_model = h_state_->has_model;
    return s;
  }

  absl::Status Import(const Device& device, const VolumeState& s) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int64_t cap = sizes_.capacity;
    *h_counters_ = s.counters;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counters_, h_counters_, sizeof(Counters), cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(keys_, s.keys.data(), sizes_.slots * 8, cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(vals_, s.vals.data(), sizes_.slots * 4, cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(brick_keys_, s.brick_keys.data(), cap * 8, cudaMemcpyHostToDevice, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(free_list_, s.free_list.data(), cap * 4, cudaMemcpyHostToDevice, st));
    const int n = static_cast<int>(s.used_bricks.size());
    DeviceBuffer<int32_t> idx;
    DeviceBuffer<Voxel> vin;
    DeviceBuffer<Color4> cin;
    if (n > 0) {
      FRESNEL_RETURN_IF_ERROR(idx.Allocate(device, n));
      FRESNEL_RETURN_IF_ERROR(vin.Allocate(device, static_cast<int64_t>(n) * kBrickVoxels));
      if (config_.color) FRESNEL_RETURN_IF_ERROR(cin.Allocate(device, static_cast<int64_t>(n) * kBrickVoxels));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(idx.get(), s.used_bricks.data(), n * 4, cudaMemcpyHostToDevice, st));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(vin.get(), s.voxels.data(), s.voxels.size() * sizeof(Voxel), cudaMemcpyHostToDevice, st));
      if (config_.color)
        FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(cin.get(), s.colors.data(), s.colors.size() * sizeof(Color4), cudaMemcpyHostToDevice, st));
      ScatterKernel<<<cuda::BlocksFor(static_cast<int64_t>(n) * kBrickVoxels, kThreads), kThreads, 0, st>>>(
          voxels_, colors_, idx.get(), n, vin.get(), config_.color ? cin.get() : nullptr);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion scatter");
    }
    h_state_->prev_pose = s.prev_pose;
    SetPose(h_state_, s.prev_pose);
    h_state_->model_T_cw = s.model_T_cw;
    h_state_->model_T_wc = s.model_T_wc;
    h_state_->has_model = s.has_model;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state_, h_state_, sizeof(TrackState), cudaMemcpyHostToDevice, st));
    FRESNEL_RETURN_IF_ERROR(Rebuild(st, /*rehash=*/false));
    // Every apron from its owner, once: a snapshot of this version changes nothing (aprons equal
    // their owners: ApronFreshKernel), one of an earlier version may hold aprons that the refresh
    // of visible bricks would have caught up later.
    if (n > 0) {
      ApronKernel<<<sms_ * 8, kThreads, 0, st>>>(View(), nullptr, n, nullptr, idx.get(), 1, nullptr);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion restore aprons");
    }
    if (s.has_model) {
      LaunchModelRaycast(st, /*use_state=*/false, s.model_T_wc, nullptr);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion raycast");
    }
    idx.Reset();
    vin.Reset();
    cin.Reset();
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_counters_, counters_, sizeof(Counters), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Evict(const Device& device, const double c[3], double radius) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int hwm = h_counters_->hwm;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&counters_->scratch, 0, sizeof(int32_t), st));
    EvictKernel<<<cuda::BlocksFor(hwm, kThreads), kThreads, 0, st>>>(View(), counters_, free_list_, hwm,
                                                                     c[0], c[1], c[2], radius * radius);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion evict");
    FRESNEL_RETURN_IF_ERROR(Rebuild(st, /*rehash=*/true));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_counters_, counters_, sizeof(Counters), cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    return static_cast<int64_t>(h_counters_->scratch);
  }

  absl::StatusOr<std::vector<TsdfSample>> Sample(const Device& device,
                                                 const std::vector<float>& pts) override {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    cudaStream_t st = StreamOf(device);
    const int n = static_cast<int>(pts.size() / 3);
    std::vector<TsdfSample> out(n);
    if (n == 0) return out;
    DeviceBuffer<float> dp, df;
    DeviceBuffer<int> dok;
    FRESNEL_RETURN_IF_ERROR(dp.Allocate(device, 3 * n));
    FRESNEL_RETURN_IF_ERROR(df.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(dok.Allocate(device, n));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dp.get(), pts.data(), 12 * n, cudaMemcpyHostToDevice, st));
    SampleKernel<<<cuda::BlocksFor(n, kThreads), kThreads, 0, st>>>(View(), dp.get(), n, df.get(), dok.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion sample");
    std::vector<float> f(n);
    std::vector<int> ok(n);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(f.data(), df.get(), 4 * n, cudaMemcpyDeviceToHost, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ok.data(), dok.get(), 4 * n, cudaMemcpyDeviceToHost, st));
    dp.Reset();
    df.Reset();
    dok.Reset();
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
    for (int i = 0; i < n; ++i) out[i] = TsdfSample{f[i], ok[i] != 0};
    return out;
  }

  int64_t bricks_in_use() const override { return h_counters_ != nullptr ? h_counters_->used : 0; }
  int64_t allocated_bytes() const override { return allocated_; }

 private:
  absl::Status ClearOctree(cudaStream_t st) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(top_keys_, 0xFF, sizes_.top_slots * 8, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(top_masks_, 0, sizes_.top_slots * 8, st));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(top_mids_, 0, sizes_.top_slots * 64 * 8, st));
    return absl::OkStatus();
  }

  // Clears the octree (and with rehash the hash table, dropping tombstones) and re-inserts every
  // pool brick. hwm comes from the host mirror, which every call refreshes.
  absl::Status Rebuild(cudaStream_t st, bool rehash) {
    FRESNEL_RETURN_IF_ERROR(ClearOctree(st));
    if (rehash) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(keys_, 0xFF, sizes_.slots * 8, st));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(vals_, 0xFF, sizes_.slots * 4, st));
    }
    ResetRebuildKernel<<<1, 1, 0, st>>>(counters_);
    const int hwm = h_counters_->hwm;
    if (hwm > 0)
      ReinsertKernel<<<cuda::BlocksFor(hwm, kThreads), kThreads, 0, st>>>(View(), counters_, hwm,
                                                                          rehash ? 1 : 0);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR("fusion rebuild");
    return absl::OkStatus();
  }

  int ordinal_;
  FusionConfig config_;
  Sizes sizes_;
  CameraF cam_;
  CameraF model_cam_;  // camera of the ICP model maps: cam_, or its level 1 (kOnHalfModel)
  int sms_ = 1;
  std::vector<void*> allocations_;
  int64_t allocated_ = 0;
  bool async_free_ = true;           // !(cuda_disable & kOffAsyncFree)
  cudaStream_t alloc_stream_ = nullptr;  // where the arrays were allocated and are freed
  size_t staging_bytes_ = 0;
  uint64_t* keys_ = nullptr;
  int32_t* vals_ = nullptr;
  uint64_t* brick_keys_ = nullptr;
  int32_t* free_list_ = nullptr;
  Voxel* voxels_ = nullptr;
  Color4* colors_ = nullptr;
  uint64_t *top_keys_ = nullptr, *top_masks_ = nullptr, *top_mids_ = nullptr;
  int32_t* new_slots_ = nullptr;
  int32_t* visible_ = nullptr;
  int32_t* nb_list_ = nullptr;   // 8 a pool brick: SelectKernel's neighbour lists (visible bricks)
  int* update_count_ = nullptr;  // [0]: bricks listed for IntegrateKernel; [1], [2]: the fresh
                                 // free-list range of this frame's new bricks (CommitNew)
  float* tile_max_ = nullptr;    // largest depth per kTile x kTile pixel tile
  uint8_t* raw_ = nullptr;
  uint8_t* rgb_ = nullptr;
  float* depth_[kLevels] = {};
  F4* vtx_[kLevels] = {};
  F4* nrm_[kLevels] = {};
  float* filtered_ = nullptr;
  F4* model_v_ = nullptr;
  F4* model_n_ = nullptr;
  Counters* counters_ = nullptr;
  TrackState* state_ = nullptr;
  double* partials_ = nullptr;
  unsigned off_ = 0;    // FusionConfig::cuda_disable
  IcpStop icp_stop_{};  // defaults, or FusionConfig::cuda_icp_stop_xi2
  unsigned model_ray_opts_ = kRayDefault;
  cudaGraphExec_t icp_graph_ = nullptr;  // the ICP loop, captured at the first tracked frame
  bool icp_graph_failed_ = false;
  cudaEvent_t done_event_ = nullptr;  // ProcessFrame's blocking wait (null: kOffBlockingWait)
  TrackState* h_state_ = nullptr;
  Counters* h_counters_ = nullptr;
  void* h_staging_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VolumeBackend>> MakeCudaBackend(const Device& device,
                                                               const FusionConfig& config) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  if (device.ordinal < 0 || device.ordinal >= count)
    return absl::InvalidArgumentError(absl::StrCat("device.ordinal must be in [0, ", count, "), got ",
                                                   device.ordinal));
  auto b = std::make_unique<CudaBackend>(device, config);
  FRESNEL_RETURN_IF_ERROR(b->Init(device));
  return std::unique_ptr<VolumeBackend>(std::move(b));
}

}  // namespace fresnel::fusion
