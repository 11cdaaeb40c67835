// preprocess.h: observation preprocessing for the portable core (host and device).
//
// What ale-py's AtariVectorEnv does to each emulated frame, on plain uint8 arrays:
//   * max-pool of the last two frames of the frame-skip loop   (maxpool_*)
//   * resize to (dst_h, dst_w) as OpenCV's cv::resize(INTER_AREA) does, bit for bit;
//     cv::resize(INTER_LINEAR) for uint8 is also reproduced bit for bit  (ResizePlan)
//   * frame stacking, as a shifted stack or as ALE's ring buffer     (stack_*, ring_*)
//
// Contract: compiles unchanged under g++ (C++17), nvcc and NVRTC; no libc beyond
// hs_prelude.h's types, no heap, no exceptions, no virtuals.
//
// Images are row-major HWC uint8 (H rows of W pixels of C interleaved channels; C = 1..4),
// contiguous. Every operation has a per-output-element function (one GPU thread per
// element) and a whole-image loop built on it, so the CPU and GPU run the same code (the
// host's float area loop goes row by row with exactly the same float operations).
// Verified byte for byte against cv2 5.0 (also 4.10 and 4.14) and against ale-py
// 0.12.1's AtariVectorEnv, which bundles OpenCV 4.10 (tests/test_preprocess.py).
//
// Resize plan. resize_plan_init() runs once per shape on the host (it is HS_HD and
// allocation-free, so a device can build one too) and fills a plain fixed-size struct
// (~22 KB, no pointers): copy it to the device as is (global or __constant__ memory).
// What the plan reproduces, from OpenCV's resize for 8-bit images (facts, own code):
//   * dst size == src size: a copy.
//   * INTER_AREA with both factors src/dst >= 1 and both integers (tested in double as
//     |1/(dst/src) - round(..)| < DBL_EPSILON): block average; for 2x2 blocks with
//     C in {1,3,4} the sum is rounded half up, (s + 2) >> 2; otherwise int sum times
//     the float 1/(kx*ky), rounded half to even.
//   * INTER_AREA with both factors >= 1 otherwise: separable box weights per axis
//     (OpenCV's "decimate alpha" tables: fractional first/last cells, weight
//     1/cellWidth for whole cells), accumulated in float: per source row,
//     buf = buf + src*alpha over the x entries in increasing source order, then
//     sum = sum + beta*buf over the y entries in increasing source order; the result
//     is rounded half to even and saturated.
//   * INTER_AREA with any factor < 1 (upscaling on either axis): OpenCV falls back to
//     its fixed-point bilinear code with "area" coefficients; reproduced.
//   * INTER_LINEAR: 11-bit fixed-point weights, horizontal pass in int, vertical pass
//     ((b0*(h0>>4))>>16) + ((b1*(h1>>4))>>16) + 2) >> 2; an exact 2x2 downscale uses
//     the INTER_AREA 2x2 path, as OpenCV does.
//
// Floating point (INTER_AREA general case only). The float sums must be evaluated as
// separate IEEE single-precision multiplies and adds in OpenCV's order, never fused
// into FMA. This header enforces that itself: on the device it uses __fmul_rn and
// __fadd_rn (never contracted, whatever --fmad says); on the host every product
// passes through an empty asm barrier wherever the compiler could emit FMA (see
// HS_PP_FP_BARRIER), so g++ cannot contract it under any -ffp-contract / -march.
// No build flag is therefore required; do NOT build with
// -ffast-math / --use_fast_math (they may reorder sums or flush denormals), and on
// 32-bit x86 without SSE2 (x87) results are not guaranteed. The table builder uses
// double with the same barriers, matching OpenCV's SSE2 (non-FMA) baseline build.
#pragma once

#include "hs_prelude.h"

namespace hs {
namespace pp {

// Largest supported height/width, source or destination (Atari frames are 210x160).
enum { MAX_DIM = 512, MAX_CHANNELS = 4 };

// Interpolation codes: the same numbers as cv2.INTER_LINEAR and cv2.INTER_AREA.
enum { INTERP_LINEAR = 1, INTERP_AREA = 3 };

// Which algorithm a plan runs.
enum { KIND_COPY = 0, KIND_AREA_2X2 = 1, KIND_AREA_INT = 2, KIND_AREA = 3, KIND_LINEAR = 4 };

// resize_plan_init() results.
enum {
  PLAN_OK = 0,
  PLAN_ERR_CHANNELS = -1,  // channels outside 1..MAX_CHANNELS
  PLAN_ERR_SIZE = -2,      // a dimension outside 1..MAX_DIM
  PLAN_ERR_INTERP = -3,    // interpolation not INTERP_LINEAR / INTERP_AREA
  PLAN_ERR_TABLE = -4      // area table overflow (cannot happen for valid sizes)
};

// ---------------------------------------------------------------------------------------
// Exact arithmetic helpers.

// Empty asm that makes a value opaque to the host optimiser: a product passed through
// it cannot be fused with a following add into an FMA. HS_PP_FP_BARRIER is the one used
// in the pixel loops: it is a no-op where the compiler has no FMA instruction to fuse
// into (x86 without -mfma / -march=haswell or later), so those loops stay vectorisable,
// and the barrier wherever fusion is possible (FMA-enabled x86, ARM, anything else).
#if defined(__CUDA_ARCH__)
#define HS_PP_OPAQUE(v) ((void)0)
#elif defined(__x86_64__) || (defined(__i386__) && defined(__SSE2__))
#define HS_PP_OPAQUE(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define HS_PP_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define HS_PP_OPAQUE(v) __asm__("" : "+m"(v))
#endif

#if defined(__CUDA_ARCH__)
#define HS_PP_FP_BARRIER(v) ((void)0)
#elif (defined(__x86_64__) || defined(__i386__)) && !defined(__FMA__) && !defined(__FMA4__)
#define HS_PP_FP_BARRIER(v) ((void)0)
#else
#define HS_PP_FP_BARRIER(v) HS_PP_OPAQUE(v)
#endif

HS_HD HS_INLINE float f_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
  HS_PP_FP_BARRIER(p);
  return p;
#endif
}

HS_HD HS_INLINE float f_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

HS_HD HS_INLINE double d_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double p = a * b;
  HS_PP_OPAQUE(p);
  return p;
#endif
}

// cvRound for float: round half to even (the SSE2 conversion in the default mode).
// Valid for |v| < 2^31.
HS_HD HS_INLINE int round_even_f(float v) {
  int i = (int)v;            // toward zero
  float r = v - (float)i;    // exact: the fractional part of a float is representable
  if (r > 0.5f || (r == 0.5f && (i & 1))) return i + 1;
  if (r < -0.5f || (r == -0.5f && (i & 1))) return i - 1;
  return i;
}

HS_HD HS_INLINE int round_even_d(double v) {
  int i = (int)v;
  double r = v - (double)i;
  if (r > 0.5 || (r == 0.5 && (i & 1))) return i + 1;
  if (r < -0.5 || (r == -0.5 && (i & 1))) return i - 1;
  return i;
}

HS_HD HS_INLINE int floor_d(double v) {
  int i = (int)v;
  return (double)i > v ? i - 1 : i;
}

HS_HD HS_INLINE int ceil_d(double v) {
  int i = (int)v;
  return (double)i < v ? i + 1 : i;
}

HS_HD HS_INLINE int floor_f(float v) {
  int i = (int)v;
  return (float)i > v ? i - 1 : i;
}

HS_HD HS_INLINE double min_d(double a, double b) { return a < b ? a : b; }
HS_HD HS_INLINE int min_i(int a, int b) { return a < b ? a : b; }
HS_HD HS_INLINE int clamp_i(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
HS_HD HS_INLINE double abs_d(double v) { return v < 0 ? -v : v; }

HS_HD HS_INLINE uint8_t sat_u8(int v) { return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

HS_HD HS_INLINE int16_t sat_i16(int v) {
  return (int16_t)(v < -32768 ? -32768 : (v > 32767 ? 32767 : v));
}

// ---------------------------------------------------------------------------------------
// Max-pool of two frames (ALE: the last two frames of the frame-skip loop).

HS_HD HS_INLINE uint8_t maxpool_pixel(uint8_t a, uint8_t b) { return a > b ? a : b; }

// dst[i] = max(a[i], b[i]) for i < n; dst may alias a or b.
HS_HD inline void maxpool_frames(uint8_t* dst, const uint8_t* a, const uint8_t* b, int n) {
  for (int i = 0; i < n; ++i) dst[i] = maxpool_pixel(a[i], b[i]);
}

// ---------------------------------------------------------------------------------------
// Source accessors: the resize reads its input through one of these, so max-pooling can
// be fused into the resize (each tap reads max(a, b)) without an intermediate frame.

// Element indices are 64-bit: Python extensions are built with -fwrapv, under which
// 32-bit index arithmetic keeps g++ from vectorising these loops (about 8x slower).
typedef long long Index;

struct Src1 {
  const uint8_t* p;
  HS_HD HS_INLINE uint8_t operator()(Index i) const { return p[i]; }
};

struct SrcMax2 {
  const uint8_t* a;
  const uint8_t* b;
  HS_HD HS_INLINE uint8_t operator()(Index i) const { return maxpool_pixel(a[i], b[i]); }
};

// ---------------------------------------------------------------------------------------
// Resize plan.

// OpenCV INTER_AREA weights along one axis: the entries of destination index d are
// [start[d], start[d + 1]), in increasing source order.
struct AreaAxis {
  uint16_t start[MAX_DIM + 1];
  uint16_t src[2 * MAX_DIM];
  float weight[2 * MAX_DIM];
};

// Two-tap fixed-point weights along one axis (INTER_LINEAR; INTER_AREA upscaling).
// i0/i1 are source indices already clamped to the image; weights sum to ~2048.
struct LinearAxis {
  uint16_t i0[MAX_DIM];
  uint16_t i1[MAX_DIM];
  int16_t w0[MAX_DIM];
  int16_t w1[MAX_DIM];
};

struct ResizePlan {
  int32_t kind;        // KIND_*
  int32_t interp;      // INTERP_* requested
  int32_t src_h, src_w, dst_h, dst_w, channels;
  int32_t iscale_x, iscale_y;  // integer factors (KIND_AREA_2X2, KIND_AREA_INT)
  float inv_area;              // 1.f / (iscale_x * iscale_y) (KIND_AREA_INT)
  int32_t x_entries, y_entries;  // used entries of ax / ay (KIND_AREA)
  AreaAxis ax, ay;
  LinearAxis lx, ly;
};
// Only 2- and 4-byte fields, no pointers: the host-built bytes are the device's plan.
static_assert(sizeof(ResizePlan) == 22584, "ResizePlan layout changed: update RESIZE_PLAN_BYTES users");

// OpenCV's area table for one axis (ssize -> dsize, scale = ssize/dsize as OpenCV
// computes it). Returns the number of entries, or -1 if it would overflow.
HS_HD inline int build_area_axis(AreaAxis* t, int ssize, int dsize, double scale) {
  int k = 0;
  for (int d = 0; d < dsize; ++d) {
    t->start[d] = (uint16_t)k;
    double f1 = d_mul((double)d, scale);
    HS_PP_OPAQUE(f1);
    double f2 = f1 + scale;
    double cell = min_d(scale, (double)ssize - f1);
    int s1 = ceil_d(f1), s2 = floor_d(f2);
    s2 = min_i(s2, ssize - 1);
    s1 = min_i(s1, s2);
    int need = (s2 - s1) + 2;
    if (k + need > 2 * MAX_DIM) return -1;
    if ((double)s1 - f1 > 1e-3) {
      t->src[k] = (uint16_t)(s1 - 1);
      t->weight[k++] = (float)(((double)s1 - f1) / cell);
    }
    for (int s = s1; s < s2; ++s) {
      t->src[k] = (uint16_t)s;
      t->weight[k++] = (float)(1.0 / cell);
    }
    if (f2 - (double)s2 > 1e-3) {
      t->src[k] = (uint16_t)s2;
      t->weight[k++] = (float)(min_d(min_d(f2 - (double)s2, 1.0), cell) / cell);
    }
  }
  t->start[dsize] = (uint16_t)k;
  return k;
}

// OpenCV's fixed-point bilinear coefficients for one axis. area_mode: the INTER_AREA
// upscaling variant. clamp_src: the x axis clamps the tap position and zeroes the
// fraction at the borders; the y axis only clamps the rows it reads.
HS_HD inline void build_linear_axis(LinearAxis* t, int ssize, int dsize, double inv_scale,
                                    double scale, bool area_mode, bool clamp_src) {
  for (int d = 0; d < dsize; ++d) {
    int s;
    float f;
    if (!area_mode) {
      double pos = d_mul((double)d + 0.5, scale);
      HS_PP_OPAQUE(pos);
      f = (float)(pos - 0.5);
      s = floor_f(f);
      f -= (float)s;
    } else {
      s = floor_d(d_mul((double)d, scale));
      double q = d_mul((double)(s + 1), inv_scale);
      HS_PP_OPAQUE(q);
      f = (float)((double)(d + 1) - q);
      f = f <= 0.f ? 0.f : f - (float)floor_f(f);
    }
    if (clamp_src) {
      if (s < 0) { f = 0.f; s = 0; }
      if (s >= ssize - 1) { f = 0.f; s = ssize - 1; }
    }
    // 2048 is a power of two: the products below are exact, only the roundings matter.
    t->w0[d] = sat_i16(round_even_f((1.f - f) * 2048.f));
    t->w1[d] = sat_i16(round_even_f(f * 2048.f));
    t->i0[d] = (uint16_t)clamp_i(s, 0, ssize - 1);
    t->i1[d] = (uint16_t)clamp_i(s + 1, 0, ssize - 1);
  }
}

// Fill *p for resizing (src_h, src_w, channels) -> (dst_h, dst_w, channels) with
// interp (INTERP_AREA or INTERP_LINEAR). Returns PLAN_OK or a PLAN_ERR_* code.
HS_HD inline int resize_plan_init(ResizePlan* p, int src_h, int src_w, int dst_h, int dst_w,
                                  int channels, int interp) {
  uint8_t* bytes = (uint8_t*)p;  // unused table slots are zero: equal plans are equal bytes
  for (uint32_t i = 0; i < (uint32_t)sizeof(ResizePlan); ++i) bytes[i] = 0;
  if (channels < 1 || channels > MAX_CHANNELS) return PLAN_ERR_CHANNELS;
  if (src_h < 1 || src_w < 1 || dst_h < 1 || dst_w < 1 || src_h > MAX_DIM ||
      src_w > MAX_DIM || dst_h > MAX_DIM || dst_w > MAX_DIM)
    return PLAN_ERR_SIZE;
  if (interp != INTERP_LINEAR && interp != INTERP_AREA) return PLAN_ERR_INTERP;
  p->interp = interp;
  p->src_h = src_h; p->src_w = src_w; p->dst_h = dst_h; p->dst_w = dst_w;
  p->channels = channels;
  p->iscale_x = p->iscale_y = 1;
  p->inv_area = 1.f;
  p->x_entries = p->y_entries = 0;
  if (src_h == dst_h && src_w == dst_w) {
    p->kind = KIND_COPY;
    return PLAN_OK;
  }
  double inv_x = (double)dst_w / src_w, inv_y = (double)dst_h / src_h;
  double scale_x = 1. / inv_x, scale_y = 1. / inv_y;
  int ix = round_even_d(scale_x), iy = round_even_d(scale_y);
  const double dbl_eps = 2.2204460492503131e-16;
  bool area_fast = abs_d(scale_x - ix) < dbl_eps && abs_d(scale_y - iy) < dbl_eps;
  int mode = interp;
  if (mode == INTERP_LINEAR && area_fast && ix == 2 && iy == 2) mode = INTERP_AREA;
  if (mode == INTERP_AREA && scale_x >= 1 && scale_y >= 1) {
    if (area_fast) {
      p->iscale_x = ix;
      p->iscale_y = iy;
      p->inv_area = 1.f / (float)(ix * iy);
      p->kind = (ix == 2 && iy == 2 && channels != 2) ? KIND_AREA_2X2 : KIND_AREA_INT;
      return PLAN_OK;
    }
    int nx = build_area_axis(&p->ax, src_w, dst_w, scale_x);
    int ny = build_area_axis(&p->ay, src_h, dst_h, scale_y);
    if (nx < 0 || ny < 0) return PLAN_ERR_TABLE;
    p->x_entries = nx;
    p->y_entries = ny;
    p->kind = KIND_AREA;
    return PLAN_OK;
  }
  bool area_mode = mode == INTERP_AREA;
  build_linear_axis(&p->lx, src_w, dst_w, inv_x, scale_x, area_mode, true);
  build_linear_axis(&p->ly, src_h, dst_h, inv_y, scale_y, area_mode, false);
  p->kind = KIND_LINEAR;
  return PLAN_OK;
}

// A short description of a resize_plan_init() result.
HS_HD inline const char* resize_plan_error(int code) {
  switch (code) {
    case PLAN_OK: return "ok";
    case PLAN_ERR_CHANNELS: return "channels must be 1..4";
    case PLAN_ERR_SIZE: return "heights and widths must be 1..512";
    case PLAN_ERR_INTERP: return "interpolation must be INTER_LINEAR (1) or INTER_AREA (3)";
    case PLAN_ERR_TABLE: return "area table overflow";
    default: return "unknown error";
  }
}

// One output element (dy, dx, channel c) of a plan of kind KIND with C channels, reading
// the source through `src` (an accessor over a contiguous HWC image of the plan's shape).
template <int KIND, class Src>
HS_HD HS_INLINE uint8_t resize_element_kind(const ResizePlan& p, const Src& src, int dy, int dx,
                                            int c, int C) {
  const Index W = p.src_w;
  if constexpr (KIND == KIND_COPY) {
    return src((dy * W + dx) * C + c);
  } else if constexpr (KIND == KIND_AREA_2X2) {
    const Index i = ((2 * dy) * W + 2 * (Index)dx) * C + c, row = W * C;
    const int s = src(i) + src(i + C) + src(i + row) + src(i + row + C);
    return (uint8_t)((s + 2) >> 2);
  } else if constexpr (KIND == KIND_AREA_INT) {
    int sum = 0;
    for (int sy = 0; sy < p.iscale_y; ++sy) {
      const Index base = ((dy * p.iscale_y + sy) * W + (Index)dx * p.iscale_x) * C + c;
      for (int sx = 0; sx < p.iscale_x; ++sx) sum += src(base + (Index)sx * C);
    }
    return sat_u8(round_even_f(f_mul((float)sum, p.inv_area)));
  } else if constexpr (KIND == KIND_AREA) {
    const int k0 = p.ax.start[dx], k1 = p.ax.start[dx + 1];
    float sum = 0.f;
    for (int j = p.ay.start[dy], j1 = p.ay.start[dy + 1]; j < j1; ++j) {
      const Index row = p.ay.src[j] * W;
      float buf = 0.f;
      for (int k = k0; k < k1; ++k)
        buf = f_add(buf, f_mul((float)src((row + p.ax.src[k]) * C + c), p.ax.weight[k]));
      sum = f_add(sum, f_mul(p.ay.weight[j], buf));
    }
    return sat_u8(round_even_f(sum));
  } else {  // KIND_LINEAR
    const Index x0 = (Index)p.lx.i0[dx] * C + c, x1 = (Index)p.lx.i1[dx] * C + c;
    const Index r0 = p.ly.i0[dy] * W * C, r1 = p.ly.i1[dy] * W * C;
    const int a0 = p.lx.w0[dx], a1 = p.lx.w1[dx];
    const int h0 = src(r0 + x0) * a0 + src(r0 + x1) * a1;
    const int h1 = src(r1 + x0) * a0 + src(r1 + x1) * a1;
    return sat_u8((((p.ly.w0[dy] * (h0 >> 4)) >> 16) + ((p.ly.w1[dy] * (h1 >> 4)) >> 16) + 2) >> 2);
  }
}

// One output element (dy, dx, channel c) of the plan, whatever its kind.
template <class Src>
HS_HD HS_INLINE uint8_t resize_element(const ResizePlan& p, const Src& src, int dy, int dx,
                                       int c) {
  const int C = p.channels;
  switch (p.kind) {
    case KIND_COPY: return resize_element_kind<KIND_COPY>(p, src, dy, dx, c, C);
    case KIND_AREA_2X2: return resize_element_kind<KIND_AREA_2X2>(p, src, dy, dx, c, C);
    case KIND_AREA_INT: return resize_element_kind<KIND_AREA_INT>(p, src, dy, dx, c, C);
    case KIND_AREA: return resize_element_kind<KIND_AREA>(p, src, dy, dx, c, C);
    default: return resize_element_kind<KIND_LINEAR>(p, src, dy, dx, c, C);
  }
}

// Output element number i (0 .. dst_h*dst_w*channels - 1, HWC order): the form a GPU
// thread per element uses.
template <class Src>
HS_HD HS_INLINE uint8_t resize_element_at(const ResizePlan& p, const Src& src, int i) {
  const int C = p.channels;
  const int pix = i / C, c = i - pix * C;
  const int dy = pix / p.dst_w, dx = pix - dy * p.dst_w;
  return resize_element(p, src, dy, dx, c);
}

HS_HD HS_INLINE int resize_dst_size(const ResizePlan& p) { return p.dst_h * p.dst_w * p.channels; }
HS_HD HS_INLINE int resize_src_size(const ResizePlan& p) { return p.src_h * p.src_w * p.channels; }

// Whole image from the per-element function, with the kind and channel count fixed at
// compile time so the loop body is only the arithmetic.
// dst is __restrict__: a uint8_t store may otherwise alias the plan, forcing the
// compiler to reload its fields and tables after every output byte.
template <int KIND, int C, class Src>
HS_HD inline void resize_loop(const ResizePlan& p, const Src& src, uint8_t* __restrict__ dst) {
  const int dst_h = p.dst_h, dst_w = p.dst_w;
  for (int dy = 0; dy < dst_h; ++dy)
    for (int dx = 0; dx < dst_w; ++dx)
      for (int c = 0; c < C; ++c) *dst++ = resize_element_kind<KIND>(p, src, dy, dx, c, C);
}

template <int KIND, class Src>
HS_HD inline void resize_loop_channels(const ResizePlan& p, const Src& src, uint8_t* dst) {
  switch (p.channels) {
    case 1: resize_loop<KIND, 1>(p, src, dst); break;
    case 2: resize_loop<KIND, 2>(p, src, dst); break;
    case 3: resize_loop<KIND, 3>(p, src, dst); break;
    default: resize_loop<KIND, 4>(p, src, dst); break;
  }
}

// Whole image, one resize_element per output byte (what a GPU thread per byte computes).
template <class Src>
HS_HD inline void resize_image_elementwise(const ResizePlan& p, const Src& src, uint8_t* dst) {
  switch (p.kind) {
    case KIND_COPY: resize_loop_channels<KIND_COPY>(p, src, dst); break;
    case KIND_AREA_2X2: resize_loop_channels<KIND_AREA_2X2>(p, src, dst); break;
    case KIND_AREA_INT: resize_loop_channels<KIND_AREA_INT>(p, src, dst); break;
    case KIND_AREA: resize_loop_channels<KIND_AREA>(p, src, dst); break;
    default: resize_loop_channels<KIND_LINEAR>(p, src, dst); break;
  }
}

}  // namespace pp
}  // namespace hs

#if HS_HOST_SIMD
#include "preprocess_simd.h"  // AVX2 area resize and palette lookup, chosen at run time
#endif

namespace hs {
namespace pp {

#if !defined(__CUDA_ARCH__)
// KIND_AREA for a whole image on the host, row by row as OpenCV does: every output byte
// gets exactly the float operations of resize_element, in the same order (so the same
// bytes), without the per-element overhead. The horizontal pass of a source row is
// kept for the next output row (area cells share their boundary rows).
template <int C, class Src>
inline void area_image_rows_c(const ResizePlan& p, const Src& src, uint8_t* __restrict__ dst) {
  const Index W = p.src_w;
  const int n = p.dst_w * C;
  float buf[2][MAX_DIM * MAX_CHANNELS], sum[MAX_DIM * MAX_CHANNELS];
  float row_values[MAX_DIM * MAX_CHANNELS];  // one source row as floats
  int buf_row[2] = {-1, -1};
  for (int dy = 0; dy < p.dst_h; ++dy) {
    for (int i = 0; i < n; ++i) sum[i] = 0.f;
    for (int j = p.ay.start[dy], j1 = p.ay.start[dy + 1]; j < j1; ++j) {
      const int sy = p.ay.src[j];
      const int slot = sy & 1;  // rows of one output row are consecutive: no clash
      float* b = buf[slot];
      if (buf_row[slot] != sy) {
        buf_row[slot] = sy;
        const Index row = sy * W;
        // Each source pixel feeds one or two cells: read and convert it once.
        for (int i = 0; i < W * C; ++i) row_values[i] = (float)src(row * C + i);
        for (int dx = 0; dx < p.dst_w; ++dx) {
          const int k0 = p.ax.start[dx], k1 = p.ax.start[dx + 1];
          for (int c = 0; c < C; ++c) {
            float acc = 0.f;
            for (int k = k0; k < k1; ++k) acc = f_add(acc, f_mul(row_values[p.ax.src[k] * C + c], p.ax.weight[k]));
            b[dx * C + c] = acc;
          }
        }
      }
      const float beta = p.ay.weight[j];
      for (int i = 0; i < n; ++i) sum[i] = f_add(sum[i], f_mul(beta, b[i]));
    }
    uint8_t* d = dst + dy * n;
    for (int i = 0; i < n; ++i) d[i] = sat_u8(round_even_f(sum[i]));
  }
}

// The AVX2 path for a plain one-channel source (false: not taken, run the loop above).
template <class Src>
inline bool area_image_simd(const ResizePlan&, const Src&, uint8_t*) { return false; }

inline bool area_image_simd(const ResizePlan& p, const Src1& src, uint8_t* dst) {
#if HS_HOST_SIMD
  if (p.channels != 1 || !hs_simd_available()) return false;
  AreaShuffles shuffles;
  if (!area_shuffles_init(p, &shuffles)) return false;
  area_gray_simd(p, shuffles, src.p, dst);
  return true;
#else
  (void)p; (void)src; (void)dst;
  return false;
#endif
}

template <class Src>
inline void area_image_rows(const ResizePlan& p, const Src& src, uint8_t* dst) {
  if (area_image_simd(p, src, dst)) return;
  switch (p.channels) {
    case 1: area_image_rows_c<1>(p, src, dst); break;
    case 2: area_image_rows_c<2>(p, src, dst); break;
    case 3: area_image_rows_c<3>(p, src, dst); break;
    default: area_image_rows_c<4>(p, src, dst); break;
  }
}
#endif

// dst[i] = table[src[i]] for i < n (a palette-index frame to gray or one RGB channel).
HS_HD inline void palette_lookup_loop(const uint8_t* __restrict__ table, const uint8_t* __restrict__ src,
                                      uint8_t* __restrict__ dst, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {  // four lookups per trip: the loop control is most of the cost
    dst[i] = table[src[i]];
    dst[i + 1] = table[src[i + 1]];
    dst[i + 2] = table[src[i + 2]];
    dst[i + 3] = table[src[i + 3]];
  }
  for (; i < n; ++i) dst[i] = table[src[i]];
}

HS_HD inline void palette_lookup(const uint8_t* table, const uint8_t* src, uint8_t* dst, int n) {
#if HS_HOST_SIMD
  if (hs_simd_available()) {
    palette_lookup_avx2(table, src, dst, n);
    return;
  }
#endif
  palette_lookup_loop(table, src, dst, n);
}

// Whole image: dst (dst_h x dst_w x channels) from src (src_h x src_w x channels).
// Identical bytes to resize_image_elementwise; on the host the float area path runs
// row by row.
template <class Src>
HS_HD inline void resize_image_from(const ResizePlan& p, const Src& src, uint8_t* dst) {
#if !defined(__CUDA_ARCH__)
  if (p.kind == KIND_AREA) {
    area_image_rows(p, src, dst);
    return;
  }
#endif
  resize_image_elementwise(p, src, dst);
}

HS_HD inline void resize_image(const ResizePlan& p, const uint8_t* src, uint8_t* dst) {
  Src1 s = {src};
  resize_image_from(p, s, dst);
}

// resize(max(a, b)): ALE's max-pool then resize in one pass (dst must not alias a or b).
HS_HD inline void maxpool_resize_image(const ResizePlan& p, const uint8_t* a, const uint8_t* b,
                                       uint8_t* dst) {
  SrcMax2 s = {a, b};
  resize_image_from(p, s, dst);
}

// ---------------------------------------------------------------------------------------
// Frame stacks. A stack holds n frames of frame_size bytes each.
//
// Shifted stack: frames ordered oldest (index 0) to newest (index n-1), as the
// observation is returned. Push = shift every frame one slot towards 0, then write the
// new frame into slot n-1 (or resize straight into stack_newest()).
//
// Ring (ALE's layout): the new frame goes into slot `head`, then head advances; the
// observation is the ring read from `head` onwards (oldest first). After a reset ALE
// clears the ring, sets head = 0 and pushes the first frame, so the observation is
// [0, ..., 0, frame]; both layouts give identical observations for the same pushes.

HS_HD HS_INLINE uint8_t* stack_newest(uint8_t* stack, int n, int frame_size) {
  return stack + (n - 1) * frame_size;
}

// The per-element shift: byte i (< frame_size) of every frame moves one slot down.
HS_HD HS_INLINE void stack_shift_element(uint8_t* stack, int n, int frame_size, int i) {
  for (int s = 0; s + 1 < n; ++s) stack[s * frame_size + i] = stack[(s + 1) * frame_size + i];
}

HS_HD inline void stack_shift(uint8_t* stack, int n, int frame_size) {
  for (int i = 0; i < frame_size; ++i) stack_shift_element(stack, n, frame_size, i);
}

HS_HD inline void stack_push(uint8_t* stack, int n, int frame_size, const uint8_t* frame) {
  stack_shift(stack, n, frame_size);
  uint8_t* last = stack_newest(stack, n, frame_size);
  for (int i = 0; i < frame_size; ++i) last[i] = frame[i];
}

HS_HD inline void stack_clear(uint8_t* stack, int n, int frame_size) {
  for (int i = 0; i < n * frame_size; ++i) stack[i] = 0;
}

HS_HD HS_INLINE uint8_t* ring_slot(uint8_t* ring, int head, int frame_size) {
  return ring + head * frame_size;
}

HS_HD HS_INLINE int ring_advance(int head, int n) { return head + 1 == n ? 0 : head + 1; }

// Byte i (0 .. n*frame_size - 1) of the observation, oldest frame first.
HS_HD HS_INLINE uint8_t ring_observation_element(const uint8_t* ring, int n, int head,
                                                 int frame_size, int i) {
  int s = i / frame_size, k = i - s * frame_size;
  int slot = head + s;
  if (slot >= n) slot -= n;
  return ring[slot * frame_size + k];
}

HS_HD inline void ring_observation(const uint8_t* ring, int n, int head, int frame_size,
                                   uint8_t* out) {
  for (int i = 0; i < n * frame_size; ++i) out[i] = ring_observation_element(ring, n, head, frame_size, i);
}

// Write frame into slot *head and advance *head.
HS_HD inline void ring_push(uint8_t* ring, int n, int* head, int frame_size, const uint8_t* frame) {
  uint8_t* slot = ring_slot(ring, *head, frame_size);
  for (int i = 0; i < frame_size; ++i) slot[i] = frame[i];
  *head = ring_advance(*head, n);
}

}  // namespace pp
}  // namespace hs
