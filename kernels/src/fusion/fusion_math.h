// Device-agnostic fusion math, compiled by the TBB backend (fusion_cpu.cc) and the CUDA backend
// (fusion_cuda.cu, built with -fmad=false so that float results match the CPU bit for bit).
//
// Layout (shared by both backends, so snapshots move between them):
//  - Voxel v (integer coordinates) has its centre at world v * voxel_size. Brick b holds voxels
//    8b .. 8b+7 per axis plus an apron at 8b+8 (a copy of the neighbour's first voxel), stored as
//    9^3 = 729 voxels, index x + 9y + 81z. Trilinear interpolation at a point p (voxel units) reads
//    the cell floor(p) .. floor(p)+1, which always lies in the brick floorDiv(floor(p), 8).
//  - Hash table: open addressing with linear probing, 2^k slots (>= 2 x capacity, load <= 0.5),
//    keys are packed brick coordinates (21 bits per axis), values brick indices into the pool.
//    Tombstones (bricks that did not fit) are never reused; a rebuild clears them.
//  - Occupancy octree: a top cell covers 16^3 bricks (128^3 voxels) and is found in a second small
//    hash table; its 64-bit descriptor has one bit per 4^3-brick mid cell, and each mid cell has a
//    64-bit word with one bit per brick. Bits are set with atomicOr when bricks are allocated and
//    only cleared by a rebuild; the raycast skips unset cells whole.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define FHD __host__ __device__ __forceinline__
#else
#define FHD inline
#endif

namespace fresnel::fusion::detail {

constexpr int kBrickSide = 8;
constexpr int kBrickStored = 9;
constexpr int kBrickVoxels = 729;
constexpr uint64_t kEmptyKey = ~uint64_t{0};
constexpr uint64_t kTombKey = ~uint64_t{0} - 1;
constexpr int32_t kPendingBrick = -2;
constexpr int kKeyOffset = 1 << 20;
constexpr float kTsdfScale = 32767.0f;
// Stored TSDF -> units of mu by a multiplication, not an IEEE division (a division is a ~10
// instruction sequence on the GPU; the raycast reads 8 voxels a sample). 1536 of the 65535 codes
// come out one ulp away from q / 32767, +-32767 give exactly +-1 (the raycast's band test is
// `f < 1`). Both backends use it, so they stay equal bit for bit.
constexpr float kTsdfInvScale = 1.0f / kTsdfScale;
FHD float StoredTsdf(int16_t q) { return static_cast<float>(q) * kTsdfInvScale; }
constexpr int kIcpSums = 29;  // 21 (upper A) + 6 (b) + count + sum r^2
constexpr int kLevels = 3;

struct V3 {
  float x, y, z;
};
FHD V3 MakeV3(float x, float y, float z) { return V3{x, y, z}; }
FHD V3 operator+(V3 a, V3 b) { return V3{a.x + b.x, a.y + b.y, a.z + b.z}; }
FHD V3 operator-(V3 a, V3 b) { return V3{a.x - b.x, a.y - b.y, a.z - b.z}; }
FHD V3 operator*(V3 a, float s) { return V3{a.x * s, a.y * s, a.z * s}; }
FHD float Dot(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
FHD V3 Cross(V3 a, V3 b) {
  return V3{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
FHD float Norm(V3 a) { return sqrtf(Dot(a, a)); }
FHD V3 Normalized(V3 a) {
  float n = Norm(a);
  return n > 0 ? a * (1.0f / n) : V3{0, 0, 0};
}

struct I3 {
  int x, y, z;
};
FHD int FloorDiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
FHD I3 FloorDiv(I3 a, int b) { return I3{FloorDiv(a.x, b), FloorDiv(a.y, b), FloorDiv(a.z, b)}; }

FHD bool KeyInRange(I3 b) {
  return b.x > -kKeyOffset && b.x < kKeyOffset - 1 && b.y > -kKeyOffset &&
         b.y < kKeyOffset - 1 && b.z > -kKeyOffset && b.z < kKeyOffset - 1;
}
FHD uint64_t PackKey(I3 b) {
  return (static_cast<uint64_t>(b.x + kKeyOffset) << 42) |
         (static_cast<uint64_t>(b.y + kKeyOffset) << 21) | static_cast<uint64_t>(b.z + kKeyOffset);
}
FHD I3 UnpackKey(uint64_t k) {
  return I3{static_cast<int>((k >> 42) & 0x1FFFFF) - kKeyOffset,
            static_cast<int>((k >> 21) & 0x1FFFFF) - kKeyOffset,
            static_cast<int>(k & 0x1FFFFF) - kKeyOffset};
}
// Spatial hash of Teschner et al. (2003): large primes per axis, xor-combined.
FHD uint32_t HashKey(uint64_t key) {
  I3 b = UnpackKey(key);
  return (static_cast<uint32_t>(b.x) * 73856093u) ^ (static_cast<uint32_t>(b.y) * 19349669u) ^
         (static_cast<uint32_t>(b.z) * 83492791u);
}

struct Voxel {
  int16_t tsdf;     // tsdf * 32767, tsdf in [-1, 1] (units of the truncation distance)
  uint16_t weight;  // observations, <= max_weight; 0 = unobserved
};
struct Color4 {
  uint8_t r, g, b, a;
};

// Hash table and pool, as raw pointers (host or device).
struct VolumeView {
  uint64_t* keys;
  int32_t* vals;
  uint32_t slot_mask;
  Voxel* voxels;
  Color4* colors;  // nullptr without colour
  uint64_t* brick_keys;  // pool index -> key (kEmptyKey when free)
  // Octree top cells.
  uint64_t* top_keys;
  uint64_t* top_masks;
  uint64_t* top_mids;  // 64 words per top slot
  uint32_t top_mask;
  float voxel_size;  // metres
  float mu;          // truncation, metres
  int max_weight;
};

FHD int32_t FindSlot(const uint64_t* keys, uint32_t mask, uint64_t key) {
  uint32_t h = HashKey(key) & mask;
  for (uint32_t i = 0; i <= mask; ++i) {
    uint64_t k = keys[h];
    if (k == key) return static_cast<int32_t>(h);
    if (k == kEmptyKey) return -1;
    h = (h + 1) & mask;
  }
  return -1;
}
FHD int32_t FindBrick(const VolumeView& v, uint64_t key) {
  int32_t s = FindSlot(v.keys, v.slot_mask, key);
  return s < 0 ? -1 : v.vals[s];
}

// Octree addressing of brick b: top cell, mid bit (0..63) in the top descriptor, brick bit in the
// mid word.
FHD I3 TopCell(I3 b) { return FloorDiv(b, 16); }
FHD int MidBit(I3 b) {
  I3 m = FloorDiv(b, 4);
  I3 t = FloorDiv(b, 16);
  return (m.x - 4 * t.x) + 4 * (m.y - 4 * t.y) + 16 * (m.z - 4 * t.z);
}
FHD int BrickBit(I3 b) {
  I3 m = FloorDiv(b, 4);
  return (b.x - 4 * m.x) + 4 * (b.y - 4 * m.y) + 16 * (b.z - 4 * m.z);
}

// Float pose (R row-major, t) for kernels.
struct PoseF {
  float r[9];
  float t[3];
};
FHD V3 Apply(const PoseF& p, V3 a) {
  return V3{p.r[0] * a.x + p.r[1] * a.y + p.r[2] * a.z + p.t[0],
            p.r[3] * a.x + p.r[4] * a.y + p.r[5] * a.z + p.t[1],
            p.r[6] * a.x + p.r[7] * a.y + p.r[8] * a.z + p.t[2]};
}
FHD V3 Rotate(const PoseF& p, V3 a) {
  return V3{p.r[0] * a.x + p.r[1] * a.y + p.r[2] * a.z, p.r[3] * a.x + p.r[4] * a.y + p.r[5] * a.z,
            p.r[6] * a.x + p.r[7] * a.y + p.r[8] * a.z};
}

// Double pose [R | t] row-major 3x4.
struct PoseD {
  double m[12];
};
FHD PoseD Compose(const PoseD& a, const PoseD& b) {
  PoseD c;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double s = (j == 3) ? a.m[i * 4 + 3] : 0.0;
      for (int k = 0; k < 3; ++k) s += a.m[i * 4 + k] * b.m[k * 4 + j];
      c.m[i * 4 + j] = s;
    }
  }
  return c;
}
FHD PoseD InversePose(const PoseD& a) {
  PoseD c;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c.m[i * 4 + j] = a.m[j * 4 + i];
  for (int i = 0; i < 3; ++i)
    c.m[i * 4 + 3] = -(c.m[i * 4 + 0] * a.m[3] + c.m[i * 4 + 1] * a.m[7] + c.m[i * 4 + 2] * a.m[11]);
  return c;
}
FHD PoseF ToFloat(const PoseD& a) {
  PoseF f;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) f.r[i * 3 + j] = static_cast<float>(a.m[i * 4 + j]);
    f.t[i] = static_cast<float>(a.m[i * 4 + 3]);
  }
  return f;
}
// se(3) exponential: xi = (omega, upsilon); R by Rodrigues, t = V upsilon.
FHD PoseD ExpSe3(const double xi[6]) {
  double wx = xi[0], wy = xi[1], wz = xi[2];
  double th2 = wx * wx + wy * wy + wz * wz, th = sqrt(th2);
  double a, b, c;  // sin/th, (1-cos)/th^2, (th - sin)/th^3
  if (th < 1e-6) {
    a = 1 - th2 / 6;
    b = 0.5 - th2 / 24;
    c = 1.0 / 6 - th2 / 120;
  } else {
    a = sin(th) / th;
    b = (1 - cos(th)) / th2;
    c = (th - sin(th)) / (th2 * th);
  }
  double W[9] = {0, -wz, wy, wz, 0, -wx, -wy, wx, 0};
  double W2[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += W[i * 3 + k] * W[k * 3 + j];
      W2[i * 3 + j] = s;
    }
  PoseD p;
  for (int i = 0; i < 3; ++i) {
    double t = 0;
    for (int j = 0; j < 3; ++j) {
      double id = i == j ? 1.0 : 0.0;
      p.m[i * 4 + j] = id + a * W[i * 3 + j] + b * W2[i * 3 + j];
      t += (id + b * W[i * 3 + j] + c * W2[i * 3 + j]) * xi[3 + j];
    }
    p.m[i * 4 + 3] = t;
  }
  return p;
}
// First-order se(3) coordinates of a pose near the identity: (log R, t). Used only for the prior
// penalty, where the V^-1 correction of t is second order.
FHD void LogSe3Approx(const PoseD& p, double xi[6]) {
  double tr = p.m[0] + p.m[5] + p.m[10];
  double c = (tr - 1) * 0.5;
  c = c > 1 ? 1 : (c < -1 ? -1 : c);
  double th = acos(c);
  double s = th < 1e-6 ? 0.5 : th / (2 * sin(th));
  xi[0] = s * (p.m[9] - p.m[6]);
  xi[1] = s * (p.m[2] - p.m[8]);
  xi[2] = s * (p.m[4] - p.m[1]);
  xi[3] = p.m[3];
  xi[4] = p.m[7];
  xi[5] = p.m[11];
}

// Index of A(i, j), i <= j, in the packed upper triangle.
FHD int UpperIndex(int i, int j) { return i * 6 - (i * (i - 1)) / 2 + (j - i); }

// Solves (A + lambda I) xi = b + lambda xi_prior by Cholesky; false when not positive definite.
FHD bool SolveNormalEquations(const double* sums, double lambda, const double* xi_prior,
                              double xi[6]) {
  double L[36];
  double A[36];
  for (int i = 0; i < 6; ++i)
    for (int j = i; j < 6; ++j) {
      double v = sums[UpperIndex(i, j)];
      A[i * 6 + j] = v;
      A[j * 6 + i] = v;
    }
  double b[6];
  for (int i = 0; i < 6; ++i) {
    A[i * 6 + i] += lambda;
    b[i] = sums[21 + i] + (xi_prior != nullptr ? lambda * xi_prior[i] : 0.0);
  }
  for (int i = 0; i < 36; ++i) L[i] = 0;
  for (int j = 0; j < 6; ++j) {
    double d = A[j * 6 + j];
    for (int k = 0; k < j; ++k) d -= L[j * 6 + k] * L[j * 6 + k];
    if (!(d > 1e-12)) return false;
    L[j * 6 + j] = sqrt(d);
    for (int i = j + 1; i < 6; ++i) {
      double s = A[i * 6 + j];
      for (int k = 0; k < j; ++k) s -= L[i * 6 + k] * L[j * 6 + k];
      L[i * 6 + j] = s / L[j * 6 + j];
    }
  }
  double y[6];
  for (int i = 0; i < 6; ++i) {
    double s = b[i];
    for (int k = 0; k < i; ++k) s -= L[i * 6 + k] * y[k];
    y[i] = s / L[i * 6 + i];
  }
  for (int i = 5; i >= 0; --i) {
    double s = y[i];
    for (int k = i + 1; k < 6; ++k) s -= L[k * 6 + i] * xi[k];
    xi[i] = s / L[i * 6 + i];
  }
  return true;
}

// Per-frame camera and depth, as kernels see them.
struct CameraF {
  float fx, fy, cx, cy;
  int width, height;
};
FHD CameraF ScaleCamera(CameraF c, int level) {
  // Level l averages 2^l x 2^l blocks: pixel u' covers u in [2^l u', 2^l u' + 2^l - 1], whose
  // centre is 2^l u' + (2^l - 1)/2, hence cx' = (cx - (2^l - 1)/2) / 2^l.
  float s = 1.0f / static_cast<float>(1 << level);
  float off = 0.5f * static_cast<float>((1 << level) - 1);
  return CameraF{c.fx * s, c.fy * s, (c.cx - off) * s, (c.cy - off) * s, c.width >> level,
                 c.height >> level};
}

// Depth of raw pixel i in metres, 0 when missing or outside [min, max].
FHD float RawDepth(const void* raw, bool is_float, float scale_inv, int i, float min_d,
                   float max_d) {
  float d;
  if (is_float) {
    d = static_cast<const float*>(raw)[i];
    if (!(d == d) || d > 1e30f) d = 0;
  } else {
    d = static_cast<float>(static_cast<const uint16_t*>(raw)[i]) * scale_inv;
  }
  return (d >= min_d && d <= max_d) ? d : 0.0f;
}

// Level l+1 pixel (u, v) from the 2x2 block of level l: mean of the valid depths within 3 cm of
// the block's first valid depth (keeps edges from smearing into the background).
FHD float DownsampleDepth(const float* src, int src_w, int src_h, int u, int v) {
  float first = 0, sum = 0;
  int n = 0;
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      int x = 2 * u + dx, y = 2 * v + dy;
      if (x >= src_w || y >= src_h) continue;
      float d = src[y * src_w + x];
      if (d <= 0) continue;
      if (n == 0) first = d;
      if (fabsf(d - first) <= 0.03f) {
        sum += d;
        ++n;
      }
    }
  return n > 0 ? sum / static_cast<float>(n) : 0.0f;
}

// 5x5 bilateral filter of the level-0 depth for tracking only (integration uses the raw depth):
// spatial sigma 1.5 px, range sigma 2 cm + 1% of depth. Normals from raw noisy depth at 1-2 cm
// noise and 5 mm pixel spacing disagree with the model by more than the ICP's normal test.
FHD float BilateralDepth(const float* d, int w, int h, int u, int v) {
  float c = d[v * w + u];
  if (c <= 0) return 0;
  float sr = 0.02f + 0.01f * c;
  float inv_r = 1.0f / (2 * sr * sr), inv_s = 1.0f / (2 * 1.5f * 1.5f);
  float sum = 0, wsum = 0;
  for (int dy = -2; dy <= 2; ++dy)
    for (int dx = -2; dx <= 2; ++dx) {
      int x = u + dx, y = v + dy;
      if (x < 0 || y < 0 || x >= w || y >= h) continue;
      float q = d[y * w + x];
      if (q <= 0) continue;
      float wt = expf(-(dx * dx + dy * dy) * inv_s - (q - c) * (q - c) * inv_r);
      sum += wt * q;
      wsum += wt;
    }
  return sum / wsum;
}

// Camera-frame vertex and normal of pixel (u, v) at one level; normal from the forward
// differences, pointing towards the camera. Returns false when invalid.
FHD bool VertexNormal(const float* depth, const CameraF& c, int u, int v, V3* vert, V3* normal) {
  float d = depth[v * c.width + u];
  if (d <= 0 || u + 1 >= c.width || v + 1 >= c.height) return false;
  float dx = depth[v * c.width + u + 1], dy = depth[(v + 1) * c.width + u];
  if (dx <= 0 || dy <= 0) return false;
  // Depth jumps larger than 5% of the depth are edges, not surface.
  if (fabsf(dx - d) > 0.05f * d || fabsf(dy - d) > 0.05f * d) return false;
  V3 p = V3{(u - c.cx) / c.fx * d, (v - c.cy) / c.fy * d, d};
  V3 px = V3{(u + 1 - c.cx) / c.fx * dx, (v - c.cy) / c.fy * dx, dx};
  V3 py = V3{(u - c.cx) / c.fx * dy, (v + 1 - c.cy) / c.fy * dy, dy};
  V3 n = Normalized(Cross(py - p, px - p));
  if (Dot(n, p) > 0) n = n * -1.0f;
  if (Norm(n) < 0.5f) return false;
  *vert = p;
  *normal = n;
  return true;
}

// Updates one voxel with one depth frame: projective (z) signed distance, truncated at mu,
// running weighted average D <- (W D + d)/(W + 1), W <- min(W + 1, W_max).
struct FrameView {
  const float* depth;  // level 0, metres, 0 = missing
  const uint8_t* rgb;  // nullptr when absent
  CameraF cam;
  float min_depth, max_depth;
};
// IntegrateVoxel in two halves, so that the CUDA kernel can issue the loads of several voxels
// before it updates any (IntegrateKernel): ProjectVoxel finds the voxel's pixels, the caller
// reads the 4 depths at `corner`, corner + 1, corner + width, corner + width + 1 and the voxel,
// and UpdateVoxel applies them. The arithmetic is IntegrateVoxel's, in the same order.
struct VoxelProjection {
  float z;       // camera-frame depth of the voxel (m)
  float ax, ay;  // bilinear weights of the right / lower pixels
  int corner;    // pixel index of the upper-left of the 4 pixels around the projection
  int pix;       // nearest pixel (colour)
};
FHD bool ProjectVoxel(V3 world, const PoseF& T_cw, const FrameView& f, VoxelProjection* p) {
  V3 pc = Apply(T_cw, world);
  if (pc.z <= 0) return false;
  // Reciprocals instead of divisions (2 IEEE divisions a voxel instead of 5, 8 with colour: the
  // kernel is bound by per-voxel arithmetic under -fmad=false); 1 / mu is loop-invariant.
  const float inv_z = 1.0f / pc.z;
  float uf = f.cam.fx * pc.x * inv_z + f.cam.cx;
  float vf = f.cam.fy * pc.y * inv_z + f.cam.cy;
  float x0 = floorf(uf), y0 = floorf(vf);
  int u0 = static_cast<int>(x0), v0 = static_cast<int>(y0);
  if (u0 < 0 || v0 < 0 || u0 + 1 >= f.cam.width || v0 + 1 >= f.cam.height) return false;
  p->z = pc.z;
  p->ax = uf - x0;
  p->ay = vf - y0;
  p->corner = v0 * f.cam.width + u0;
  int u = static_cast<int>(floorf(uf + 0.5f)), v = static_cast<int>(floorf(vf + 0.5f));
  p->pix = v * f.cam.width + u;
  return true;
}

// Bilinear depth from the 4 neighbouring pixels, which must be valid and continuous (spread <=
// max(mu/2, 4 sigma(z)) with the structured-light noise model sigma(z) = 1.2 mm + 1.9 mm
// (z - 0.4)^2 of Nguyen et al. 2012: 2.4 cm at 2 m, 5.6 cm at 3 m); otherwise the voxel is not
// updated. The spread limit also rejects grazing views, whose projective distance overestimates
// most. The nearest pixel alone errs by half a pixel footprint times the surface slope (most of a
// voxel at 1 cm footprints and oblique views), and next to a depth edge it carves free space into
// the foreground object's band (the projective TSDF's edge artefact), so such pixels are left out.
// `old` gives the voxel's current value (*vox) and is called only when the voxel changes (so
// IntegrateVoxel reads it only then); *vox is written only when it changes.
template <class OldVoxel>
FHD void UpdateVoxel(Voxel* vox, Color4* col, const OldVoxel& old_voxel, const VoxelProjection& p,
                     float d00, float d10, float d01, float d11, const FrameView& f, float mu,
                     int max_weight) {
  float lo = fminf(fminf(d00, d10), fminf(d01, d11));
  float hi = fmaxf(fmaxf(d00, d10), fmaxf(d01, d11));
  const float sigma = 0.0012f + 0.0019f * (lo - 0.4f) * (lo - 0.4f);
  if (!(lo > 0) || hi - lo > fmaxf(0.5f * mu, 4.0f * sigma)) return;
  float top = d00 + p.ax * (d10 - d00), bot = d01 + p.ax * (d11 - d01);
  float d = top + p.ay * (bot - top);
  float sdf = d - p.z;
  if (sdf < -mu) return;
  float tsdf = fminf(1.0f, sdf * (1.0f / mu));
  const Voxel old = old_voxel();
  int w = old.weight;
  float D = StoredTsdf(old.tsdf);
  float wf = static_cast<float>(w);
  const float inv_w1 = 1.0f / (wf + 1.0f);
  float Dn = (wf * D + tsdf) * inv_w1;
  Dn = fmaxf(-1.0f, fminf(1.0f, Dn));
  vox->tsdf = static_cast<int16_t>(rintf(Dn * kTsdfScale));
  vox->weight = static_cast<uint16_t>(w + 1 < max_weight ? w + 1 : max_weight);
  if (col != nullptr && f.rgb != nullptr) {
    const uint8_t* c = f.rgb + 3 * p.pix;
    col->r = static_cast<uint8_t>(rintf((wf * col->r + c[0]) * inv_w1));
    col->g = static_cast<uint8_t>(rintf((wf * col->g + c[1]) * inv_w1));
    col->b = static_cast<uint8_t>(rintf((wf * col->b + c[2]) * inv_w1));
  }
}

// UpdateVoxel's `old_voxel`: the value already read (LoadedVoxel) or read when needed (VoxelAt).
struct LoadedVoxel {
  Voxel v;
  FHD Voxel operator()() const { return v; }
};
struct VoxelAt {
  const Voxel* p;
  FHD Voxel operator()() const { return *p; }
};

FHD void IntegrateVoxel(Voxel* vox, Color4* col, V3 world, const PoseF& T_cw, const FrameView& f,
                        float mu, int max_weight) {
  VoxelProjection p;
  if (!ProjectVoxel(world, T_cw, f, &p)) return;
  const float* r0 = f.depth + p.corner;
  const float* r1 = r0 + f.cam.width;
  UpdateVoxel(vox, col, VoxelAt{vox}, p, r0[0], r0[1], r1[0], r1[1], f, mu, max_weight);
}

// Conservative frustum test of brick b (bounding sphere of its 9^3 stored voxels): false only
// when IntegrateVoxel can change none of its stored voxels, apron included (the apron refresh
// relies on it: fusion_cuda.cu, ApronFreshKernel). Voxels nearer than min_depth are not spared:
// a depth behind them carves them (sdf > 0), so only a sphere wholly behind the camera is out
// (until 2026-12-01 a sphere wholly nearer than min_depth was too).
FHD bool BrickVisible(I3 b, const PoseF& T_cw, const FrameView& f, float voxel_size, float mu) {
  V3 c = V3{(8.0f * b.x + 4.0f) * voxel_size, (8.0f * b.y + 4.0f) * voxel_size,
            (8.0f * b.z + 4.0f) * voxel_size};
  float r = 7.8f * voxel_size;  // sqrt(3) * 4.5 voxels
  V3 pc = Apply(T_cw, c);
  if (pc.z + r <= 0.0f || pc.z - r > f.max_depth + mu) return false;
  if (pc.z - r <= 0.5f * f.min_depth) return true;
  float zn = pc.z - r;
  float uc = f.cam.fx * pc.x / pc.z + f.cam.cx, vc = f.cam.fy * pc.y / pc.z + f.cam.cy;
  float ru = f.cam.fx * (r + fabsf(pc.x) * r / zn) / zn, rv = f.cam.fy * (r + fabsf(pc.y) * r / zn) / zn;
  return uc + ru >= -0.5f && uc - ru <= f.cam.width - 0.5f && vc + rv >= -0.5f &&
         vc - rv <= f.cam.height - 0.5f;
}

// Voxel index offsets of the 8 cell corners (bit 0 = x, 1 = y, 2 = z).
FHD int CornerOffset(int c) { return (c & 1) + 9 * ((c >> 1) & 1) + 81 * ((c >> 2) & 1); }

struct BrickCache {
  uint64_t key;
  int32_t idx;
};

// Trilinear TSDF at p (voxel units) and its gradient (per voxel). False when a corner is
// unobserved or the brick is not allocated.
FHD bool SampleTsdf(const VolumeView& v, V3 p, BrickCache* cache, float* f, V3* grad,
                    Color4* color) {
  float bx = floorf(p.x), by = floorf(p.y), bz = floorf(p.z);
  I3 base = I3{static_cast<int>(bx), static_cast<int>(by), static_cast<int>(bz)};
  I3 b = FloorDiv(base, 8);
  if (!KeyInRange(b)) return false;
  uint64_t key = PackKey(b);
  int32_t idx;
  if (key == cache->key) {
    idx = cache->idx;
  } else {
    idx = FindBrick(v, key);
    cache->key = key;
    cache->idx = idx;
  }
  if (idx < 0) return false;
  int local = (base.x - 8 * b.x) + 9 * (base.y - 8 * b.y) + 81 * (base.z - 8 * b.z);
  const Voxel* vb = v.voxels + static_cast<int64_t>(idx) * kBrickVoxels + local;
  float c[8];
  for (int i = 0; i < 8; ++i) {
    Voxel x = vb[CornerOffset(i)];
    if (x.weight == 0) return false;
    c[i] = StoredTsdf(x.tsdf);
  }
  float fx = p.x - bx, fy = p.y - by, fz = p.z - bz;
  float c00 = c[0] + fx * (c[1] - c[0]), c10 = c[2] + fx * (c[3] - c[2]);
  float c01 = c[4] + fx * (c[5] - c[4]), c11 = c[6] + fx * (c[7] - c[6]);
  float c0 = c00 + fy * (c10 - c00), c1 = c01 + fy * (c11 - c01);
  *f = c0 + fz * (c1 - c0);
  if (grad != nullptr) {
    float gx = (1 - fy) * (1 - fz) * (c[1] - c[0]) + fy * (1 - fz) * (c[3] - c[2]) +
               (1 - fy) * fz * (c[5] - c[4]) + fy * fz * (c[7] - c[6]);
    float gy = (1 - fz) * (c10 - c00) + fz * (c11 - c01);
    float gz = c1 - c0;
    *grad = V3{gx, gy, gz};
  }
  if (color != nullptr && v.colors != nullptr) {
    int nearest = (fx >= 0.5f ? 1 : 0) | (fy >= 0.5f ? 2 : 0) | (fz >= 0.5f ? 4 : 0);
    *color = v.colors[static_cast<int64_t>(idx) * kBrickVoxels + local + CornerOffset(nearest)];
  }
  return true;
}

// Parameter t at which the ray o + t d leaves the axis-aligned cube [lo, lo + size)^3.
FHD float CubeExit(V3 o, V3 d, V3 lo, float size) {
  float t = 1e30f;
  if (d.x > 0) t = fminf(t, (lo.x + size - o.x) / d.x);
  if (d.x < 0) t = fminf(t, (lo.x - o.x) / d.x);
  if (d.y > 0) t = fminf(t, (lo.y + size - o.y) / d.y);
  if (d.y < 0) t = fminf(t, (lo.y - o.y) / d.y);
  if (d.z > 0) t = fminf(t, (lo.z + size - o.z) / d.z);
  if (d.z < 0) t = fminf(t, (lo.z - o.z) / d.z);
  return t;
}

// Empty-space skip: the exit parameter of the largest empty octree cell containing voxel-space
// point p, or -1 when p's brick is allocated (or the octree overflowed and cannot be trusted).
FHD float OctreeSkip(const VolumeView& v, bool octree_ok, V3 o, V3 d, V3 p, BrickCache* top) {
  if (!octree_ok) return -1;
  I3 base = I3{static_cast<int>(floorf(p.x)), static_cast<int>(floorf(p.y)),
               static_cast<int>(floorf(p.z))};
  I3 b = FloorDiv(base, 8);
  if (!KeyInRange(b)) return -1;
  I3 t = TopCell(b);
  const uint64_t tk = PackKey(t);
  int32_t s;
  if (tk == top->key) {
    s = top->idx;
  } else {
    s = FindSlot(v.top_keys, v.top_mask, tk);
    top->key = tk;
    top->idx = s;
  }
  if (s < 0) return CubeExit(o, d, V3{128.0f * t.x, 128.0f * t.y, 128.0f * t.z}, 128.0f);
  int mb = MidBit(b);
  if (((v.top_masks[s] >> mb) & 1u) == 0) {
    I3 m = FloorDiv(b, 4);
    return CubeExit(o, d, V3{32.0f * m.x, 32.0f * m.y, 32.0f * m.z}, 32.0f);
  }
  if (((v.top_mids[static_cast<int64_t>(s) * 64 + mb] >> BrickBit(b)) & 1u) == 0)
    return CubeExit(o, d, V3{8.0f * b.x, 8.0f * b.y, 8.0f * b.z}, 8.0f);
  return -1;
}

struct RayHit {
  bool hit;
  float t;  // voxel units along the unit direction
  V3 normal;
  Color4 color;
};

// Options of the ICP-model raycast on CUDA (the defaults are the plain two-stage raycast that
// Render and the CPU backend use).
//  - resume_in_band: a first band sample t that is still positive does not send the ray back to
//    t - mu; stage 2 goes on from t, since a + to - crossing before t would need the TSDF to turn
//    positive again within one mu (a surface thinner than mu seen from behind), which the default
//    rescan finds and this mode misses. It saves the voxel steps that re-read the free space in
//    front of t (the stage-2 grid stays the same when mu is a whole number of voxels).
//  - lead (voxel units along the ray, with resume_in_band): start at t_min + lead; a first band
//    sample that is already negative still sends the ray back by mu, to t_min at most.
//  - secant (with resume_in_band): in stage 2, step from a positive sample f by f * mu (the
//    distance to the surface that the TSDF predicts, at least half a voxel) instead of one voxel.
//    The crossing is then interpolated between samples up to mu apart where the TSDF is close to
//    linear along the ray, so the hit differs from the voxel-step one by a fraction of a voxel.
struct RayOptions {
  bool resume_in_band = false;
  float lead = 0.0f;
  bool secant = false;
};

// Two-stage raycast (voxel units): steps of mu (with octree skips) until a sample lies in the
// truncation band, then voxel steps over [t - mu, t + mu] to the +/- zero crossing, located by
// linear interpolation of the two samples around it. Back faces (- to +) are ignored.
FHD RayHit CastRay(const VolumeView& v, bool octree_ok, V3 o, V3 d, float t_min, float t_max,
                   float mu_vox, const RayOptions& opt = RayOptions()) {
  RayHit r;
  r.hit = false;
  r.t = 0;
  r.normal = V3{0, 0, 0};
  r.color = Color4{0, 0, 0, 0};
  BrickCache cache{kEmptyKey, -1};
  BrickCache top_cache{kEmptyKey, -1};
  float t = t_min + opt.lead;
  float band_end = -1;  // stage 2 while t < band_end
  bool prev_ok = false;
  float prev_t = 0, prev_f = 0;
  int guard = 0;
  while (t < t_max && ++guard < 100000) {
    V3 p = o + d * t;
    float f;
    if (t >= band_end) {
      float skip = OctreeSkip(v, octree_ok, o, d, p, &top_cache);
      if (skip >= 0) {
        t = fmaxf(skip + 1e-3f, t + 1e-3f);
        continue;
      }
      if (SampleTsdf(v, p, &cache, &f, nullptr, nullptr) && f < 1.0f) {
        band_end = t + mu_vox;
        if (opt.resume_in_band && f > 0) {
          prev_ok = true;
          prev_t = t;
          prev_f = f;
          t += opt.secant ? fmaxf(0.5f, f * mu_vox) : 1.0f;
          if (t >= band_end) t = band_end;
          continue;
        }
        t = fmaxf(t_min, t - mu_vox);
        prev_ok = false;
        continue;
      }
      t += mu_vox;
      continue;
    }
    float step = 1.0f;
    if (SampleTsdf(v, p, &cache, &f, nullptr, nullptr)) {
      if (prev_ok && prev_f > 0 && f <= 0) {
        float th = prev_t + (t - prev_t) * prev_f / (prev_f - f);
        V3 ph = o + d * th;
        float fh;
        V3 g;
        Color4 c = Color4{0, 0, 0, 0};
        if (SampleTsdf(v, ph, &cache, &fh, &g, &c)) {
          r.hit = true;
          r.t = th;
          r.normal = Normalized(g);
          r.color = c;
          return r;
        }
      }
      prev_ok = true;
      prev_t = t;
      prev_f = f;
      if (opt.secant && f > 0) step = fmaxf(0.5f, f * mu_vox);
    } else {
      prev_ok = false;
    }
    t += step;
    if (t >= band_end) t = band_end;
  }
  return r;
}

// Unit ray direction of pixel (u, v) in camera coordinates.
FHD V3 PixelRay(const CameraF& c, float u, float v) {
  return Normalized(V3{(u - c.cx) / c.fx, (v - c.cy) / c.fy, 1.0f});
}

// Model maps for ICP: world-frame vertex (w = 1 valid) and normal per full-resolution pixel.
struct F4 {
  float x, y, z, w;
};

// Point-to-plane term of one source point: J (6) and residual r; false when not associated.
struct IcpParams {
  float dist_thresh;  // metres
  float cos_thresh;   // normal agreement
};
FHD bool IcpTerm(V3 vc, V3 nc, const PoseF& T_wc, const PoseF& model_T_cw, const CameraF& cam0,
                 const F4* model_v, const F4* model_n, const IcpParams& ip, float J[6],
                 float* res) {
  V3 p = Apply(T_wc, vc);
  V3 n = Rotate(T_wc, nc);
  V3 q = Apply(model_T_cw, p);
  if (q.z <= 0) return false;
  int u = static_cast<int>(floorf(cam0.fx * q.x / q.z + cam0.cx + 0.5f));
  int v = static_cast<int>(floorf(cam0.fy * q.y / q.z + cam0.cy + 0.5f));
  if (u < 0 || v < 0 || u >= cam0.width || v >= cam0.height) return false;
  F4 mv = model_v[v * cam0.width + u];
  if (mv.w <= 0) return false;
  F4 mn4 = model_n[v * cam0.width + u];
  V3 m = V3{mv.x, mv.y, mv.z}, mn = V3{mn4.x, mn4.y, mn4.z};
  V3 diff = p - m;
  if (Norm(diff) > ip.dist_thresh) return false;
  if (Dot(n, mn) < ip.cos_thresh) return false;
  float r = Dot(mn, diff);
  V3 pxn = Cross(p, mn);
  J[0] = pxn.x;
  J[1] = pxn.y;
  J[2] = pxn.z;
  J[3] = mn.x;
  J[4] = mn.y;
  J[5] = mn.z;
  *res = r;
  return true;
}
// Adds J J^T, -J r, 1 and r^2 to the 29 partial sums.
template <class T>
FHD void AccumulateIcp(const float J[6], float r, T* s) {
  int k = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = i; j < 6; ++j) s[k++] += static_cast<T>(J[i] * J[j]);
  for (int i = 0; i < 6; ++i) s[21 + i] += static_cast<T>(-J[i] * r);
  s[27] += 1;
  s[28] += static_cast<T>(r * r);
}

// Tracking state that lives on the device (CUDA) or in host memory (CPU); kernels read poses from
// it so that the ICP loop never returns to the host.
struct TrackState {
  PoseD pose;        // current estimate / final T_world_camera
  PoseD prev_pose;   // last frame's final pose
  PoseD prior;       // pose prior of this frame
  PoseD init_pose;   // the ICP's starting estimate
  PoseF T_wc, T_cw;  // float copies of pose and its inverse
  PoseF model_T_cw;  // camera of the model maps (pose of the last raycast)
  PoseF model_T_wc;
  double sums[kIcpSums];
  double prior_weight;
  int has_prior, has_fixed, do_track, has_model;
  int converged[kLevels];
  int failed;
  int iterations;
  int valid_pixels;
  int lost, relocalized, integrate;
  double inliers, residual;
  int blocks_done;  // CUDA: blocks of the running ICP reduction that have finished
  int level_runs;   // CUDA, conditional ICP loop: iterations run so far at the current level
  double stop_xi2[kLevels];  // a level has converged when |xi|^2 of its step falls below this
};

FHD void SetPose(TrackState* s, const PoseD& p) {
  s->pose = p;
  s->T_wc = ToFloat(p);
  s->T_cw = ToFloat(InversePose(p));
}

// One Gauss-Newton step at `level` from the reduced sums: solve, left-multiply the increment,
// record the statistics. The caller zeroes the accumulators.
FHD void IcpSolveStep(TrackState* s, const double* sums, int level, int min_inliers) {
  if (s->converged[level]) return;
  double count = sums[27];
  s->iterations += 1;
  if (level == 0) {
    s->inliers = count;
    s->residual = count > 0 ? sqrt(sums[28] / count) : 0;
  }
  double xi[6];
  bool ok = false;
  if (count >= min_inliers) {
    double lambda = 0;
    double xp[6];
    if (s->has_prior && s->prior_weight > 0) {
      lambda = s->prior_weight * count;
      LogSe3Approx(Compose(s->prior, InversePose(s->pose)), xp);
    }
    ok = SolveNormalEquations(sums, lambda, lambda > 0 ? xp : nullptr, xi);
  }
  if (!ok) {
    if (level == 0) s->failed = 1;
    s->converged[level] = 1;
    return;
  }
  SetPose(s, Compose(ExpSe3(xi), s->pose));
  double n2 = 0;
  for (int i = 0; i < 6; ++i) n2 += xi[i] * xi[i];
  if (n2 < s->stop_xi2[level]) s->converged[level] = 1;
}

constexpr int kMinInliers = 100;
// Convergence test of every level: |xi|^2 < 1e-7 (a step under 0.32 mm / 3.2e-4 rad, a twelfth
// of a 4 mm voxel). On the H200 bench (docs/fusion.md) 1e-10 (10 um) ran 13.1 / 15.9 of the 19
// iterations per frame at 848x480 / 640x480, 1e-8 8.6 / 9.6 and 1e-7 7.2 / 6.9, at the same ATE
// (2.22 / 3.88, 2.18 / 3.77 and 2.05 / 3.58 mm); 1e-7 saved 0.019-0.023 / 0.031-0.036 ms a
// frame against 1e-8 (two runs).
constexpr double kIcpStopXi2 = 1e-7;

// Start of a frame: initial estimate from the fixed pose, the prior or the previous pose.
FHD void BeginFrame(TrackState* s, int tracking_enabled) {
  s->failed = 0;
  s->iterations = 0;
  s->valid_pixels = 0;
  s->lost = 0;
  s->relocalized = 0;
  s->integrate = 1;
  s->inliers = 0;
  s->residual = 0;
  for (int l = 0; l < kLevels; ++l) {
    s->converged[l] = 0;
    s->stop_xi2[l] = kIcpStopXi2;
  }
  for (int i = 0; i < kIcpSums; ++i) s->sums[i] = 0;
  s->do_track = tracking_enabled && !s->has_fixed && s->has_model;
  if (s->has_fixed) {
    SetPose(s, s->prior);
  } else if (s->has_prior) {
    SetPose(s, s->prior);
  } else {
    SetPose(s, s->prev_pose);
  }
  s->init_pose = s->pose;
}

// Projective ICP converges only within about 30 cm / 30 degrees of its start: a larger step means
// it slid into a wrong alignment.
constexpr double kMaxIcpStepM = 0.3;
constexpr double kMaxIcpStepCos = 0.866;

// After ICP: lost when the final level failed, associated too few points (20% of the valid
// pixels, at least kMinInliers; a tracked frame associates 60-95%) or jumped beyond the basin. Lost with a prior -> relocalise to it; lost without -> keep the
// previous pose and do not integrate.
FHD void FinishTracking(TrackState* s) {
  if (s->do_track) {
    double need = 0.2 * s->valid_pixels;
    if (need < kMinInliers) need = kMinInliers;
    PoseD step = Compose(InversePose(s->init_pose), s->pose);
    double t2 = step.m[3] * step.m[3] + step.m[7] * step.m[7] + step.m[11] * step.m[11];
    double cos_angle = 0.5 * (step.m[0] + step.m[5] + step.m[10] - 1);
    bool jumped = t2 > kMaxIcpStepM * kMaxIcpStepM || cos_angle < kMaxIcpStepCos;
    if (s->failed || s->inliers < need || jumped) {
      s->lost = 1;
      if (s->has_prior) {
        s->relocalized = 1;
        SetPose(s, s->prior);
      } else {
        s->integrate = 0;
        SetPose(s, s->prev_pose);
      }
    }
  }
  s->prev_pose = s->pose;
}

// Marching tetrahedra: the cube splits into 6 tetrahedra around its main diagonal 0-7 (Kuhn
// triangulation: corners 0, e_a, e_a + e_b, 7 for each axis order a, b, c), which matches across
// neighbouring cubes so the surface is watertight. Each tetrahedron contributes 0, 1 or 2
// triangles. `emit(p0, p1, p2, corner_near0, corner_near1, corner_near2)` receives vertices in
// cell-local coordinates [0, 1]^3 and, per vertex, the corner nearer to it (for colour).
FHD int KuhnTet(int t, int k) {
  // Axis orders: (x,y,z), (x,z,y), (y,x,z), (y,z,x), (z,x,y), (z,y,x); bits x=1, y=2, z=4.
  const int a[6] = {1, 1, 2, 2, 4, 4};
  const int b[6] = {2, 4, 1, 4, 1, 2};
  switch (k) {
    case 0: return 0;
    case 1: return a[t];
    case 2: return a[t] | b[t];
    default: return 7;
  }
}
FHD V3 CornerPos(int c) {
  return V3{static_cast<float>(c & 1), static_cast<float>((c >> 1) & 1),
            static_cast<float>((c >> 2) & 1)};
}
struct EdgeVertex {
  V3 p;
  int near_corner;
};
FHD EdgeVertex EdgeCross(int ca, int cb, const float* f) {
  float s = f[ca] / (f[ca] - f[cb]);
  EdgeVertex e;
  e.p = CornerPos(ca) + (CornerPos(cb) - CornerPos(ca)) * s;
  e.near_corner = s < 0.5f ? ca : cb;
  return e;
}
// Triangles of one cell with corner values f (negative = inside). Emit is a functor.
template <class Emit>
FHD int CellTriangles(const float f[8], Emit& emit) {
  int n = 0;
  for (int t = 0; t < 6; ++t) {
    int c[4] = {KuhnTet(t, 0), KuhnTet(t, 1), KuhnTet(t, 2), KuhnTet(t, 3)};
    int in[4], out[4], ni = 0, no = 0;
    for (int k = 0; k < 4; ++k) {
      if (f[c[k]] < 0)
        in[ni++] = c[k];
      else
        out[no++] = c[k];
    }
    if (ni == 0 || ni == 4) continue;
    if (ni == 1 || ni == 3) {
      int apex = ni == 1 ? in[0] : out[0];
      const int* others = ni == 1 ? out : in;
      EdgeVertex e0 = EdgeCross(apex, others[0], f), e1 = EdgeCross(apex, others[1], f),
                 e2 = EdgeCross(apex, others[2], f);
      emit(e0, e1, e2);
      ++n;
    } else {
      EdgeVertex e00 = EdgeCross(in[0], out[0], f), e01 = EdgeCross(in[0], out[1], f),
                 e10 = EdgeCross(in[1], out[0], f), e11 = EdgeCross(in[1], out[1], f);
      // Quad e00-e01-e11-e10 split along e00-e11.
      emit(e00, e01, e11);
      emit(e00, e11, e10);
      n += 2;
    }
  }
  return n;
}

// Trilinear gradient in a cell at local coordinates q (for vertex normals).
FHD V3 CellGradient(const float c[8], V3 q) {
  float fx = q.x, fy = q.y, fz = q.z;
  float c00 = c[0] + fx * (c[1] - c[0]), c10 = c[2] + fx * (c[3] - c[2]);
  float c01 = c[4] + fx * (c[5] - c[4]), c11 = c[6] + fx * (c[7] - c[6]);
  float gx = (1 - fy) * (1 - fz) * (c[1] - c[0]) + fy * (1 - fz) * (c[3] - c[2]) +
             (1 - fy) * fz * (c[5] - c[4]) + fy * fz * (c[7] - c[6]);
  float gy = (1 - fz) * (c10 - c00) + fz * (c11 - c01);
  float gz = (c01 + fy * (c11 - c01)) - (c00 + fy * (c10 - c00));
  return V3{gx, gy, gz};
}

// Reads the cell at brick-local voxel (x, y, z) in 0..7; false when a corner is unobserved.
// Cells whose corner values spread by more than `max_span` (tsdf units) are skipped: a true
// distance field changes by at most sqrt(3) voxels across a cell, so a larger spread (typically a
// truncated +1 next to a negative value at an occlusion edge) is a projective artefact, not a
// surface.
FHD bool LoadCell(const Voxel* brick, int x, int y, int z, float max_span, float c[8]) {
  const Voxel* b = brick + x + 9 * y + 81 * z;
  float lo = 2, hi = -2;
  for (int i = 0; i < 8; ++i) {
    Voxel v = b[CornerOffset(i)];
    if (v.weight == 0) return false;
    c[i] = StoredTsdf(v.tsdf);
    lo = fminf(lo, c[i]);
    hi = fmaxf(hi, c[i]);
  }
  return hi - lo <= max_span;
}
// Spread limit for LoadCell: 4 voxels of distance (about twice the diagonal, for the projective
// overestimate at oblique views), in tsdf units.
FHD float MeshMaxSpan(float voxel_size, float mu) { return 4.0f * voxel_size / mu; }

// Writes triangles of one cell to the output arrays (world coordinates), oriented so that the face
// normal agrees with the TSDF gradient.
struct MeshOut {
  float* vertices;
  float* normals;
  uint8_t* colors;  // may be nullptr
};
struct CellWriter {
  MeshOut out;
  int64_t next;  // next triangle index
  const float* c;
  const Color4* corner_colors;  // 8 or nullptr
  V3 origin;                    // world position of corner 0
  float vs;
  FHD void operator()(EdgeVertex a, EdgeVertex b, EdgeVertex e) {
    V3 ga = CellGradient(c, a.p), gb = CellGradient(c, b.p), ge = CellGradient(c, e.p);
    V3 face = Cross(b.p - a.p, e.p - a.p);
    if (Dot(face, ga + gb + ge) < 0) {
      EdgeVertex t = b;
      b = e;
      e = t;
      V3 tg = gb;
      gb = ge;
      ge = tg;
    }
    EdgeVertex vs3[3] = {a, b, e};
    V3 gs[3] = {ga, gb, ge};
    for (int k = 0; k < 3; ++k) {
      int64_t vi = 3 * next + k;
      V3 w = origin + vs3[k].p * vs;
      V3 n = Normalized(gs[k]);
      out.vertices[3 * vi] = w.x;
      out.vertices[3 * vi + 1] = w.y;
      out.vertices[3 * vi + 2] = w.z;
      out.normals[3 * vi] = n.x;
      out.normals[3 * vi + 1] = n.y;
      out.normals[3 * vi + 2] = n.z;
      if (out.colors != nullptr && corner_colors != nullptr) {
        Color4 cc = corner_colors[vs3[k].near_corner];
        out.colors[3 * vi] = cc.r;
        out.colors[3 * vi + 1] = cc.g;
        out.colors[3 * vi + 2] = cc.b;
      }
    }
    ++next;
  }
};
struct CellCounter {
  FHD void operator()(EdgeVertex, EdgeVertex, EdgeVertex) {}
};

// Calls fn(key) for the bricks that the truncation band [d - mu, d + mu] of pixel (u, v) passes
// through (samples one voxel apart along the ray; consecutive repeats skipped).
template <class F>
FHD void ForEachBandBrick(const CameraF& cam, const PoseF& T_wc, int u, int v, float d, float mu,
                          float vs, F& fn) {
  V3 ray = V3{(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, 1.0f};
  float inv_vs = 1.0f / vs;
  int n = static_cast<int>(ceilf(2.0f * mu / vs)) + 1;
  uint64_t prev = kEmptyKey;
  for (int i = 0; i < n; ++i) {
    float z = d - mu + (2.0f * mu) * static_cast<float>(i) / static_cast<float>(n - 1);
    if (z <= 0) continue;
    V3 w = Apply(T_wc, ray * z) * inv_vs;
    I3 vox = I3{static_cast<int>(floorf(w.x + 0.5f)), static_cast<int>(floorf(w.y + 0.5f)),
                static_cast<int>(floorf(w.z + 0.5f))};
    I3 b = FloorDiv(vox, 8);
    if (!KeyInRange(b)) continue;
    uint64_t k = PackKey(b);
    if (k != prev) {
      fn(k);
      prev = k;
    }
  }
}

// World position (metres) of stored voxel `li` (0..728) of brick b.
FHD V3 VoxelWorld(I3 b, int li, float vs) {
  int x = li % 9, y = (li / 9) % 9, z = li / 81;
  return V3{static_cast<float>(8 * b.x + x) * vs, static_cast<float>(8 * b.y + y) * vs,
            static_cast<float>(8 * b.z + z) * vs};
}

// Neighbour code of a stored voxel: bit 0/1/2 set when it is in the +x/+y/+z apron.
FHD int ApronCode(int li) {
  int x = li % 9, y = (li / 9) % 9, z = li / 81;
  return (x == 8 ? 1 : 0) | (y == 8 ? 2 : 0) | (z == 8 ? 4 : 0);
}
FHD I3 NeighbourBrick(I3 b, int code) {
  return I3{b.x + (code & 1), b.y + ((code >> 1) & 1), b.z + ((code >> 2) & 1)};
}
// Pool index (brick * 729 + voxel) of the voxel that owns apron voxel li, a core voxel of the
// neighbour nb[code] (-1 = none); -1 when li is a core voxel or the neighbour does not exist.
// Brick-local index, in neighbour `code` (ApronCode(li) != 0), of the voxel that apron voxel li
// copies.
FHD int ApronSourceLocal(int li, int code) {
  int x = li % 9, y = (li / 9) % 9, z = li / 81;
  return (x - 8 * (code & 1)) + 9 * (y - 8 * ((code >> 1) & 1)) + 81 * (z - 8 * ((code >> 2) & 1));
}
FHD int64_t ApronSource(const int32_t nb[8], int li) {
  int code = ApronCode(li);
  if (code == 0) return -1;
  int32_t src = nb[code];
  if (src < 0) return -1;
  return static_cast<int64_t>(src) * kBrickVoxels + ApronSourceLocal(li, code);
}
// Copies apron voxel li of brick bi from the neighbour that owns it (nb[code], -1 = none).
FHD void RefreshApronVoxel(const VolumeView& v, int32_t bi, const int32_t nb[8], int li) {
  const int64_t s = ApronSource(nb, li);
  if (s < 0) return;
  int64_t dst = static_cast<int64_t>(bi) * kBrickVoxels + li;
  v.voxels[dst] = v.voxels[s];
  if (v.colors != nullptr) v.colors[dst] = v.colors[s];
}

// The apron copies that a brick new in this frame (pool index bi, key b) calls for, after the
// integration (fusion_cuda.cu, ApronFreshKernel, explains why no others are needed): its own apron
// voxels from its + neighbours, and in each - neighbour M = b - offset(code) the apron voxels of
// that code, which this brick owns. Sources are core voxels only, so the order is free.
FHD void RefreshFreshBrick(const VolumeView& v, int32_t bi, I3 b) {
  int32_t pos[8], neg[8];
  pos[0] = neg[0] = bi;
  for (int code = 1; code < 8; ++code) {
    const int sx = code & 1, sy = (code >> 1) & 1, sz = (code >> 2) & 1;
    const I3 p = I3{b.x + sx, b.y + sy, b.z + sz}, m = I3{b.x - sx, b.y - sy, b.z - sz};
    pos[code] = KeyInRange(p) ? FindBrick(v, PackKey(p)) : -1;
    neg[code] = KeyInRange(m) ? FindBrick(v, PackKey(m)) : -1;
  }
  const int64_t base = static_cast<int64_t>(bi) * kBrickVoxels;
  for (int li = 0; li < kBrickVoxels; ++li) {
    const int code = ApronCode(li);
    if (code == 0) continue;
    RefreshApronVoxel(v, bi, pos, li);
    if (neg[code] < 0) continue;
    const int64_t dst = static_cast<int64_t>(neg[code]) * kBrickVoxels + li;
    const int64_t src = base + ApronSourceLocal(li, code);
    v.voxels[dst] = v.voxels[src];
    if (v.colors != nullptr) v.colors[dst] = v.colors[src];
  }
}

struct PixelHit {
  bool hit;
  float depth_z;  // metres along the optical axis
  V3 point_w;     // metres
  V3 normal_w;
  V3 dir_w;
  Color4 color;
};
// min_d, max_d: metres along the optical axis; opt: see RayOptions, its lead here in metres
// along the optical axis.
FHD PixelHit RaycastPixel(const VolumeView& v, bool octree_ok, const PoseF& T_wc,
                          const CameraF& cam, int u, int vv, float min_d, float max_d,
                          RayOptions opt = RayOptions()) {
  V3 dc = PixelRay(cam, static_cast<float>(u), static_cast<float>(vv));
  V3 dw = Rotate(T_wc, dc);
  float inv = 1.0f / v.voxel_size;
  V3 o = V3{T_wc.t[0] * inv, T_wc.t[1] * inv, T_wc.t[2] * inv};
  opt.lead = opt.lead * inv / dc.z;
  RayHit h = CastRay(v, octree_ok, o, dw, min_d * inv / dc.z, max_d * inv / dc.z, v.mu * inv, opt);
  PixelHit p;
  p.hit = h.hit;
  p.depth_z = h.hit ? h.t * v.voxel_size * dc.z : 0.0f;
  p.point_w = (o + dw * h.t) * v.voxel_size;
  p.normal_w = h.normal;
  p.dir_w = dw;
  p.color = h.color;
  return p;
}

// Where the ICP model ray of a pixel starts when the depth frame just integrated measured z
// (metres along the optical axis) there: 2 mu + 3 sigma(z) in front of it (sigma: the noise model
// of IntegrateVoxel). The ray finds the first crossing behind that start; a surface in front of it
// (rare: the frame has just carved that space) is not seen.
FHD float NearDepthStart(float z, float mu) {
  const float sigma = 0.0012f + 0.0019f * (z - 0.4f) * (z - 0.4f);
  return z - 2.0f * mu - 3.0f * sigma;
}
// Where that ray ends: as far behind z (2 mu + 3 sigma(z)). A ray that finds no crossing there
// gives no model point instead of marching on through the space behind the surface to max_depth
// (a warp runs as long as its longest ray).
FHD float NearDepthEnd(float z, float mu) {
  const float sigma = 0.0012f + 0.0019f * (z - 0.4f) * (z - 0.4f);
  return z + 2.0f * mu + 3.0f * sigma;
}

FHD uint8_t ShadeValue(V3 n, V3 dir) {
  float l = -Dot(n, dir);
  l = l > 0 ? l : 0;
  return static_cast<uint8_t>(rintf(255.0f * (0.15f + 0.85f * l)));
}

}  // namespace fresnel::fusion::detail
