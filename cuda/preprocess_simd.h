// preprocess_simd.h: AVX2 versions of two host loops of preprocess.h, for x86-64 g++ and
// clang builds (preprocess.h includes this header only there; NVRTC and nvcc never see it).
//
//   * area_gray_avx2: KIND_AREA resize of a one-channel image (ale-py's default 84x84
//     grayscale observation). The same float operations in the same order as
//     area_image_rows_c<1>, so the same bytes; 8 outputs per instruction.
//   * palette_lookup_avx2: dst[i] = table[src[i]] for a 256-byte table (the
//     palette-to-gray capture of vector_env.h).
//
// Both are compiled for AVX2 with a function attribute and chosen at run time
// (hs_simd_available(), hs_prelude.h), so the extension still runs on any x86-64. The portable loops of
// preprocess.h stay the reference: tests compare the two paths and both with cv2.
//
// Exactness. The horizontal pass reads each output's taps with byte shuffles and pads
// outputs with fewer taps with weight-0 taps that read 0; the sums are non-negative,
// so adding +0 changes nothing and the order of the real taps is OpenCV's. Products pass
// through an empty asm so that no build (-march=native, -mfma) can fuse them into FMA.
// Rounding is explicit (round to nearest even), not the MXCSR mode.
#pragma once

#include <immintrin.h>
#include <string.h>

#include "simd_lookup.h"

namespace hs {
namespace pp {

enum {
  kSimdMaxTaps = 4,                  // source pixels per output along x (scale < 3)
  kSimdMaxRows = 8,                  // source rows per output row (scale < 7)
  kSimdLaneOutputs = 4,              // outputs per 128-bit lane (int32 / float)
  kSimdMaxLanes = MAX_DIM / 4 + 2,   // lanes of the widest row, even
};

// The horizontal pass of a one-channel KIND_AREA plan as shuffles. Lane L computes
// outputs 4L .. 4L+3 from the 16 source bytes starting at window[L]: tap t of output j
// is byte shuffle[L][t][4j] of that window (0x80: reads 0), times weight[L][t][j].
struct AreaShuffles {
  int lanes;    // even: two lanes fill one 256-bit vector
  int taps;     // the most taps of any output
  int max_window;
  int32_t window[kSimdMaxLanes];
  alignas(32) uint8_t shuffle[kSimdMaxLanes][kSimdMaxTaps][16];
  alignas(32) float weight[kSimdMaxLanes][kSimdMaxTaps][4];
};

// Fills *s from the plan's axes; false when an output has more than kSimdMaxTaps taps or
// kSimdMaxRows rows, or a lane's taps do not fit one 16-byte window (the portable loop
// runs instead).
inline bool area_shuffles_init(const ResizePlan& p, AreaShuffles* s) {
  const int dst_w = p.dst_w;
  for (int dy = 0; dy < p.dst_h; ++dy)
    if (p.ay.start[dy + 1] - p.ay.start[dy] > kSimdMaxRows) return false;
  int taps = 1;
  for (int dx = 0; dx < dst_w; ++dx) {
    const int n = p.ax.start[dx + 1] - p.ax.start[dx];
    if (n > kSimdMaxTaps) return false;
    if (n > taps) taps = n;
  }
  const int lanes = (dst_w + 7) / 8 * 2;
  if (lanes > kSimdMaxLanes) return false;
  s->lanes = lanes;
  s->taps = taps;
  s->max_window = 0;
  for (int lane = 0; lane < lanes; ++lane) {
    memset(s->shuffle[lane], 0x80, sizeof(s->shuffle[lane]));
    memset(s->weight[lane], 0, sizeof(s->weight[lane]));
    const int first = lane * kSimdLaneOutputs;
    const int window = first < dst_w ? p.ax.src[p.ax.start[first]] : 0;
    s->window[lane] = window;
    if (window > s->max_window) s->max_window = window;
    for (int j = 0; j < kSimdLaneOutputs && first + j < dst_w; ++j) {
      const int k0 = p.ax.start[first + j], k1 = p.ax.start[first + j + 1];
      for (int k = k0; k < k1; ++k) {
        const int offset = p.ax.src[k] - window;
        if (offset < 0 || offset > 15) return false;
        s->shuffle[lane][k - k0][4 * j] = (uint8_t)offset;
        s->weight[lane][k - k0][j] = p.ax.weight[k];
      }
    }
  }
  return true;
}

__attribute__((target("avx2"))) inline __m256 simd_opaque(__m256 v) {
  __asm__("" : "+x"(v));  // no FMA contraction across this value
  return v;
}

// One source row's horizontal pass: out[0 .. 4*lanes) (outputs past dst_w are 0).
template <int TAPS>
__attribute__((target("avx2"))) inline void area_row_avx2(const AreaShuffles& s,
                                                          const uint8_t* row, float* out) {
  for (int lane = 0; lane < s.lanes; lane += 2) {
    const __m128i lo = _mm_loadu_si128((const __m128i*)(row + s.window[lane]));
    const __m128i hi = _mm_loadu_si128((const __m128i*)(row + s.window[lane + 1]));
    const __m256i bytes = _mm256_set_m128i(hi, lo);
    __m256 acc = _mm256_setzero_ps();
    for (int t = 0; t < TAPS; ++t) {
      const __m256i mask = _mm256_set_m128i(_mm_load_si128((const __m128i*)s.shuffle[lane + 1][t]),
                                            _mm_load_si128((const __m128i*)s.shuffle[lane][t]));
      const __m256 weight = _mm256_set_m128(_mm_load_ps(s.weight[lane + 1][t]),
                                            _mm_load_ps(s.weight[lane][t]));
      const __m256 value = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, mask));
      acc = _mm256_add_ps(acc, simd_opaque(_mm256_mul_ps(value, weight)));
    }
    _mm256_storeu_ps(out + lane * kSimdLaneOutputs, acc);
  }
}

// area_image_rows_c<1> with the passes above; src is H x W bytes, dst dst_h x dst_w.
// Each source row's horizontal pass is kept in a ring slot for the next output row
// (area cells share their boundary rows).
template <int TAPS>
__attribute__((target("avx2"))) inline void area_gray_avx2(const ResizePlan& p,
                                                           const AreaShuffles& s,
                                                           const uint8_t* src, uint8_t* dst) {
  const Index W = p.src_w, total = (Index)p.src_h * W;
  const int vectors = s.lanes / 2;
  alignas(32) float buf[kSimdMaxRows][kSimdMaxLanes * kSimdLaneOutputs];
  alignas(32) uint8_t padded_row[MAX_DIM + 32];
  alignas(32) uint8_t out_row[kSimdMaxLanes * kSimdLaneOutputs];
  int buf_row[kSimdMaxRows];
  for (int k = 0; k < kSimdMaxRows; ++k) buf_row[k] = -1;
  for (int dy = 0; dy < p.dst_h; ++dy) {
    const int j0 = p.ay.start[dy], rows = p.ay.start[dy + 1] - j0;
    const float* b[kSimdMaxRows];
    for (int r = 0; r < rows; ++r) {
      const int sy = p.ay.src[j0 + r];
      const int slot = sy & (kSimdMaxRows - 1);  // an output's rows are consecutive
      b[r] = buf[slot];
      if (buf_row[slot] == sy) continue;
      buf_row[slot] = sy;
      const uint8_t* row = src + sy * W;
      // A window may run past the row (into bytes that only feed zeroed taps); past the
      // image's end it reads a padded copy instead.
      if (sy * W + s.max_window + 16 > total) {
        memset(padded_row, 0, sizeof(padded_row));
        memcpy(padded_row, row, (size_t)W);
        row = padded_row;
      }
      area_row_avx2<TAPS>(s, row, buf[slot]);
    }
    for (int v = 0; v < vectors; ++v) {
      __m256 sum = _mm256_setzero_ps();
      for (int r = 0; r < rows; ++r) {
        const __m256 beta = _mm256_set1_ps(p.ay.weight[j0 + r]);
        sum = _mm256_add_ps(sum, simd_opaque(_mm256_mul_ps(beta, _mm256_load_ps(b[r] + 8 * v))));
      }
      const __m256 rounded = _mm256_round_ps(sum, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i ints = _mm256_cvtps_epi32(rounded);  // exact: already integral
      const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(ints), _mm256_extracti128_si256(ints, 1));
      _mm_storel_epi64((__m128i*)(out_row + 8 * v), _mm_packus_epi16(words, words));
    }
    memcpy(dst + (Index)dy * p.dst_w, out_row, (size_t)p.dst_w);
  }
}

inline void area_gray_simd(const ResizePlan& p, const AreaShuffles& s, const uint8_t* src,
                           uint8_t* dst) {
  switch (s.taps) {
    case 1: area_gray_avx2<1>(p, s, src, dst); break;
    case 2: area_gray_avx2<2>(p, s, src, dst); break;
    case 3: area_gray_avx2<3>(p, s, src, dst); break;
    default: area_gray_avx2<4>(p, s, src, dst); break;
  }
}

// dst[i] = table[src[i]], i < n, by byte shuffles of 16-entry rows of the table.
// Even indices (every screen byte but PAL colour loss's) look up the even entries, 8 rows
// indexed by src >> 1 (simd_lookup.h). A block of 32 with an odd index uses 16 rows and
// the full index: a saturating add of 0x70 to index - 16k sets bit 7 (a shuffle of 0)
// for all indices outside row k.
__attribute__((target("avx2"))) inline void palette_lookup_avx2(const uint8_t* table,
                                                                const uint8_t* src,
                                                                uint8_t* dst, int n) {
  alignas(16) uint8_t even[8][16];
  for (int k = 0; k < 8; ++k)
    for (int j = 0; j < 16; ++j) even[k][j] = table[32 * k + 2 * j];
  __m128i even_rows[8];
  for (int k = 0; k < 8; ++k) even_rows[k] = _mm_load_si128((const __m128i*)even[k]);
  const ShuffleTable<8> even_table = shuffle_table<8>(even_rows);
  __m256i rows[16];
  for (int k = 0; k < 16; ++k)
    rows[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(table + 16 * k)));
  const __m256i sixteen = _mm256_set1_epi8(16), bias = _mm256_set1_epi8(0x70);
  const __m256i low7 = _mm256_set1_epi8(0x7F);
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i bytes = _mm256_loadu_si256((const __m256i*)(src + i));
    __m256i out;
    if (_mm256_movemask_epi8(_mm256_slli_epi16(bytes, 7)) == 0) {  // all indices even
      const __m256i half = _mm256_and_si256(_mm256_srli_epi16(bytes, 1), low7);
      out = shuffle_lookup(even_table, shuffle_index<8>(half));
    } else {
      __m256i index = bytes;
      out = _mm256_setzero_si256();
      for (int k = 0; k < 16; ++k) {
        out = _mm256_or_si256(out, _mm256_shuffle_epi8(rows[k], _mm256_adds_epu8(index, bias)));
        index = _mm256_sub_epi8(index, sixteen);
      }
    }
    _mm256_storeu_si256((__m256i*)(dst + i), out);
  }
  for (; i < n; ++i) dst[i] = table[src[i]];
}

}  // namespace pp
}  // namespace hs
