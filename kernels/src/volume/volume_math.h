// Device-agnostic float32 math shared by the CPU ray caster and the CUDA cell projection: camera
// rays, ray–tetrahedron intersection, transfer-function segment integration and the "over"
// operator. Both backends run exactly these operations (the CUDA file is built with
// --fmad=false so that no multiply-add is contracted), which is why their images agree to
// rounding and the GPU test can ask for PSNR >= 40 dB against the CPU with a wide margin.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FRESNEL_VHD __host__ __device__ __forceinline__
#else
#define FRESNEL_VHD inline
#endif

namespace fresnel::volume::math {

struct V3 {
  float x, y, z;
};
FRESNEL_VHD V3 operator+(V3 a, V3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
FRESNEL_VHD V3 operator-(V3 a, V3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
FRESNEL_VHD V3 operator*(float s, V3 a) { return {s * a.x, s * a.y, s * a.z}; }
FRESNEL_VHD float Dot(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
FRESNEL_VHD V3 Cross(V3 a, V3 b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}

// Premultiplied RGBA.
struct Rgba {
  float r, g, b, a;
};
// front over back.
FRESNEL_VHD Rgba Over(Rgba f, Rgba b) {
  const float k = 1.0f - f.a;
  return {f.r + k * b.r, f.g + k * b.g, f.b + k * b.b, f.a + k * b.a};
}

// ---- camera --------------------------------------------------------------------------------

// The camera reduced to what a ray needs, built on the host (render.cc) in double and rounded.
// Pixel (px, py) has normalised coordinates u = (px + 0.5)·2/W − 1 (right), v = 1 − (py + 0.5)·2/H
// (up). Perspective: origin = eye, direction = normalise(forward + u·sx·right + v·sy·up) with
// sy = tan(fov/2), sx = sy·W/H. Orthographic: origin = eye + u·sx·right + v·sy·up with
// sy = height/2, direction = forward. t is the distance along the (unit) direction.
struct CameraFrame {
  V3 eye, right, up, forward;
  float sx, sy;
  int width, height;
  int orthographic;
};

FRESNEL_VHD void PixelRay(const CameraFrame& c, int px, int py, V3* origin, V3* dir) {
  const float u = (static_cast<float>(px) + 0.5f) * (2.0f / static_cast<float>(c.width)) - 1.0f;
  const float v = 1.0f - (static_cast<float>(py) + 0.5f) * (2.0f / static_cast<float>(c.height));
  const V3 offset = (u * c.sx) * c.right + (v * c.sy) * c.up;
  if (c.orthographic) {
    *origin = c.eye + offset;
    *dir = c.forward;
  } else {
    const V3 d = c.forward + offset;
    const float inv = 1.0f / std::sqrt(Dot(d, d));
    *origin = c.eye;
    *dir = inv * d;
  }
}

// Continuous pixel coordinates (centre of pixel i at i) of a point, and whether it projects
// (perspective: strictly in front of the eye).
FRESNEL_VHD bool ProjectPoint(const CameraFrame& c, V3 p, float* px, float* py) {
  const V3 rel = p - c.eye;
  float x = Dot(rel, c.right), y = Dot(rel, c.up);
  if (!c.orthographic) {
    const float z = Dot(rel, c.forward);
    if (!(z > 0.0f)) return false;
    x = x / z;
    y = y / z;
  }
  // u = x / sx  →  px = (u + 1)·W/2 − 0.5; v = y / sy → py = (1 − v)·H/2 − 0.5.
  *px = (x / c.sx + 1.0f) * (0.5f * static_cast<float>(c.width)) - 0.5f;
  *py = (1.0f - y / c.sy) * (0.5f * static_cast<float>(c.height)) - 0.5f;
  return true;
}

// ---- ray / tetrahedron ---------------------------------------------------------------------

// Barycentric coordinates along the ray: λ_i(t) = (a_i + t·b_i) / D_i for face i (opposite
// vertex i, through vertices j, k, l = the other three in cyclic order), with
//   n_i = (p_k − p_j) × (p_l − p_j),  a_i = n_i·(o − p_j),  b_i = n_i·d,  D_i = n_i·(p_i − p_j).
// Inside means every λ_i >= 0. Face i is crossed at t_i = −a_i / b_i: entering where λ_i grows
// (b_i/D_i > 0), leaving where it falls. t_entry = max entering t_i (and 0: the eye may sit
// inside), t_exit = min leaving t_i.
struct TetHit {
  float t_in, t_out;
  float s_in, s_out;
  int face_in, face_out;  // -1 when the segment starts at the eye (t_in clamped to 0)
};

// The per-tetrahedron part of the intersection (face normals n_i, a point q_i = p_j of each
// face and 1/D_i), computed once and reused for every pixel of a tetrahedron. False for a
// degenerate tetrahedron (callers skip those beforehand).
struct TetPlanes {
  V3 n[4], q[4];
  float inv[4];
  float s[4];
};

FRESNEL_VHD bool PrepareTet(const V3 p[4], const float s[4], TetPlanes* tp) {
  for (int i = 0; i < 4; ++i) {
    const V3 pj = p[(i + 1) & 3], pk = p[(i + 2) & 3], pl = p[(i + 3) & 3];
    const V3 n = Cross(pk - pj, pl - pj);
    const float den = Dot(n, p[i] - pj);
    if (den == 0.0f) return false;
    tp->n[i] = n;
    tp->q[i] = pj;
    tp->inv[i] = 1.0f / den;
    tp->s[i] = s[i];
  }
  return true;
}

// a_i of every face for a ray origin: the same for all pixels of a perspective camera, so the
// CUDA kernels compute it once per tetrahedron (the values are the same either way).
FRESNEL_VHD void RayOffsets(const TetPlanes& tp, V3 o, float a[4]) {
  for (int i = 0; i < 4; ++i) a[i] = Dot(tp.n[i], o - tp.q[i]) * tp.inv[i];
}

// The segment is also clamped to [min, max] of (p_i − o)·d over the vertices, the depths the
// tetrahedron spans along the ray: for a sliver (Blunt Fin has ~900 with volume < 1e-6 of
// their longest edge cubed) the plane crossings can come out far outside it when a ray grazes
// it, and the GPU, which tests every tetrahedron under a pixel, then drew long bogus segments.
FRESNEL_VHD bool IntersectWithOffsets(const TetPlanes& tp, const float a[4], V3 o, V3 d,
                                      TetHit* hit) {
  float t_in = -INFINITY, t_out = INFINITY;
  int f_in = -1, f_out = -1;
  float b[4];
  for (int i = 0; i < 4; ++i) {
    b[i] = Dot(tp.n[i], d) * tp.inv[i];
    if (b[i] > 0.0f) {
      const float t = -a[i] / b[i];
      if (t > t_in) {
        t_in = t;
        f_in = i;
      }
    } else if (b[i] < 0.0f) {
      const float t = -a[i] / b[i];
      if (t < t_out) {
        t_out = t;
        f_out = i;
      }
    } else if (a[i] < 0.0f) {
      hit->face_out = -1;
      return false;  // parallel to face i and outside it
    }
  }
  if (t_in < 0.0f) {
    t_in = 0.0f;
    f_in = -1;
  }
  float span_lo = INFINITY, span_hi = -INFINITY;
  for (int i = 0; i < 4; ++i) {
    const float t = Dot(tp.q[i] - o, d);
    span_lo = fminf(span_lo, t);
    span_hi = fmaxf(span_hi, t);
  }
  t_in = fmaxf(t_in, span_lo);
  t_out = fminf(t_out, span_hi);
  // Filled on a miss too: the CPU walk steps through a grazed tetrahedron by its exit face.
  hit->t_in = t_in;
  hit->t_out = t_out;
  hit->face_in = f_in;
  hit->face_out = f_out;
  if (!(t_out > t_in)) return false;
  float si = 0, so = 0, wi = 0, wo = 0;
  for (int i = 0; i < 4; ++i) {
    const float li = fmaxf(a[i] + t_in * b[i], 0.0f);
    const float lo = fmaxf(a[i] + t_out * b[i], 0.0f);
    si += li * tp.s[i];
    so += lo * tp.s[i];
    wi += li;
    wo += lo;
  }
  hit->s_in = wi > 0.0f ? si / wi : tp.s[0];
  hit->s_out = wo > 0.0f ? so / wo : tp.s[0];
  return true;
}

FRESNEL_VHD bool IntersectPrepared(const TetPlanes& tp, V3 o, V3 d, TetHit* hit) {
  float a[4];
  RayOffsets(tp, o, a);
  return IntersectWithOffsets(tp, a, o, d, hit);
}

FRESNEL_VHD bool IntersectRayTet(const V3 p[4], const float s[4], V3 o, V3 d, TetHit* hit) {
  TetPlanes tp;
  if (!PrepareTet(p, s, &tp)) {
    hit->face_out = -1;
    return false;
  }
  return IntersectPrepared(tp, o, d, hit);
}

// ---- transfer function ---------------------------------------------------------------------

// Control points as plain arrays (x strictly increasing), n in [1, kTfMax].
inline constexpr int kTfMax = 64;
struct TfTable {
  int n;
  float x[kTfMax];
  float r[kTfMax], g[kTfMax], b[kTfMax], tau[kTfMax];
  Rgba background;  // straight (not premultiplied) RGBA
};

// First control point index with x > s (0..n).
FRESNEL_VHD int TfUpper(const TfTable& tf, float s) {
  int lo = 0, hi = tf.n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (tf.x[mid] > s) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// TfUpper(tf, s) found by stepping from `hint` (any index in 0..n): the walk's next scalar is
// mostly in the interval of the last one, where this takes two comparisons instead of the
// binary search's dependent loads. The same index for every s (x strictly increasing: one
// boundary between x <= s and x > s), NaN included (TfUpper gives n).
FRESNEL_VHD int TfUpperFrom(const TfTable& tf, float s, int hint) {
  if (!(s == s)) return tf.n;
  int i = hint;
  while (i < tf.n && !(tf.x[i] > s)) ++i;
  while (i > 0 && tf.x[i - 1] > s) --i;
  return i;
}

// Colour (r, g, b) and extinction (a) at scalar s, with upper = TfUpper(tf, s).
FRESNEL_VHD Rgba TfEval(const TfTable& tf, float s, int upper) {
  if (upper <= 0) return {tf.r[0], tf.g[0], tf.b[0], tf.tau[0]};
  if (upper >= tf.n) {
    const int k = tf.n - 1;
    return {tf.r[k], tf.g[k], tf.b[k], tf.tau[k]};
  }
  const int k = upper - 1;
  const float w = (s - tf.x[k]) / (tf.x[upper] - tf.x[k]);
  const float w0 = 1.0f - w;
  return {w0 * tf.r[k] + w * tf.r[upper], w0 * tf.g[k] + w * tf.g[upper],
          w0 * tf.b[k] + w * tf.b[upper], w0 * tf.tau[k] + w * tf.tau[upper]};
}

// The colour (r, g, b) and extinction (a) of the transfer function at a scalar, with the index
// TfUpper gave: what a segment needs at its ends, and what the next segment of a ray starts
// from when it starts where this one ended (the walk carries it; TfAt of the same scalar gives
// the same bits).
struct TfAt {
  float s;
  int upper;
  Rgba c;
};
FRESNEL_VHD TfAt TfAtScalar(const TfTable& tf, float s) {
  const int upper = TfUpper(tf, s);
  return {s, upper, TfEval(tf, s, upper)};
}

// The premultiplied colour and opacity of a segment of `length` whose scalar runs linearly from
// s0 to s1 (render.h gives the model): split at the control points crossed; per piece optical
// depth = length_piece · (τ_a + τ_b)/2 and colour (c_a + c_b)/2; pieces composited front to back;
// the total opacity is 1 − exp(−Σ optical depth), computed once (exact for absorption).
// `from` = TfAtScalar(tf, s0); *to receives TfAtScalar(tf, s1).
FRESNEL_VHD Rgba IntegrateSegmentFrom(const TfTable& tf, const TfAt& from, float s1, float length,
                                      TfAt* to) {
  Rgba out = {0, 0, 0, 0};
  const float s0 = from.s;
  if (!(length > 0.0f)) {
    *to = TfAtScalar(tf, s1);
    return out;
  }
  const int up = from.upper;
  Rgba c0 = from.c;
  const float ds = s1 - s0;
  float od = 0.0f;  // optical depth so far
  float u0 = s0;
  // Walk the control points strictly between s0 and s1 in the direction of travel, then s1.
  const bool rising = ds > 0.0f;
  int k = rising ? up : up - 1;
  if (!rising) {
    // Points with x < s0 in descending order; skip one equal to s0.
    while (k >= 0 && tf.x[k] >= s0) --k;
  }
  // One piece (the usual case: most segments cross no control point) needs one expm1 and no
  // division: the first piece's transmittance exp(−0) is 1, the total opacity is that piece's
  // and its length the segment's. Skipping the other calls there gives the same bits.
  int pieces = 0;
  float first_alpha = 0.0f;
  bool reached = false;
  for (int guard = 0; guard <= kTfMax; ++guard) {
    float u1;
    bool last = false;
    if (rising && k < tf.n && tf.x[k] < s1) {
      u1 = tf.x[k];
    } else if (!rising && ds < 0.0f && k >= 0 && tf.x[k] > s1) {
      u1 = tf.x[k];
    } else {
      u1 = s1;
      last = true;
    }
    const int up1 = TfUpperFrom(tf, u1, up);
    const Rgba c1 = TfEval(tf, u1, up1);
    // The only piece (guard 0 and last: u0 = s0, u1 = s1) is the whole length: ds / ds is 1.
    const float piece =
        ds != 0.0f && !(guard == 0 && last) ? length * ((u1 - u0) / ds) : length;
    const float piece_od = piece * 0.5f * (c0.a + c1.a);
    if (piece_od > 0.0f) {
      const float trans = pieces == 0 ? 1.0f : std::exp(-od);
      const float alpha = -std::expm1(-piece_od);
      const float w = trans * alpha * 0.5f;
      out.r += w * (c0.r + c1.r);
      out.g += w * (c0.g + c1.g);
      out.b += w * (c0.b + c1.b);
      od += piece_od;
      if (pieces++ == 0) first_alpha = alpha;
    }
    if (last) {
      *to = {s1, up1, c1};
      reached = true;
      break;
    }
    u0 = u1;
    c0 = c1;
    k += rising ? 1 : -1;
  }
  if (!reached) *to = TfAtScalar(tf, s1);
  out.a = pieces == 1 ? first_alpha : -std::expm1(-od);
  return out;
}

FRESNEL_VHD Rgba IntegrateSegment(const TfTable& tf, float s0, float s1, float length) {
  TfAt to;
  return IntegrateSegmentFrom(tf, TfAtScalar(tf, s0), s1, length, &to);
}

// Final pixel: composited colour over the background (straight alpha in the table).
FRESNEL_VHD Rgba OverBackground(Rgba c, const Rgba& bg) {
  const Rgba bgp = {bg.r * bg.a, bg.g * bg.a, bg.b * bg.a, bg.a};
  return Over(c, bgp);
}

}  // namespace fresnel::volume::math
