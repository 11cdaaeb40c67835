// tia_simd.h: AVX2 versions of tia_draw_span's per-pixel loop (each pixel's colour and
// the collisions of a span, from the pixels' object bits) and of fill_blocks (the
// playfield's 4-pixel blocks), for x86-64 host builds.
// tia.h includes it only there and calls it when hs_simd_available() (hs_prelude.h);
// the portable loops stay the reference, and tia_render_selftest compares both with
// tia_draw_span_reference.
//
// The colour loop's lookups are 64-entry byte tables indexed by the object bits v
// (0..63): four shuffle rows each (simd_lookup.h).
#pragma once

#include <immintrin.h>

#include "simd_lookup.h"

namespace hs {

// kTiaCollisions split into its low and high bytes, as shuffle rows.
struct TiaCollisionRows {
  ShuffleTable<4> low, high;
};

__attribute__((target("avx2"))) inline const TiaCollisionRows& tia_collision_rows() {
  static const TiaCollisionRows rows = [] {
    alignas(16) uint8_t low[64], high[64];
    for (int v = 0; v < 64; ++v) {
      low[v] = (uint8_t)kTiaCollisions[v];
      high[v] = (uint8_t)(kTiaCollisions[v] >> 8);
    }
    __m128i lo[4], hi[4];
    for (int k = 0; k < 4; ++k) {
      lo[k] = _mm_load_si128((const __m128i*)(low + 16 * k));
      hi[k] = _mm_load_si128((const __m128i*)(high + 16 * k));
    }
    TiaCollisionRows r;
    r.low = shuffle_table<4>(lo);
    r.high = shuffle_table<4>(hi);
    return r;
  }();
  return rows;
}

// fill_blocks's whole 32-pixel chunks (x on a block boundary): returns the pixels done.
__attribute__((target("avx2"))) inline int32_t tia_fill_blocks_avx2(uint8_t* out, int32_t x, int32_t count,
                                                                    uint64_t blocks, uint8_t on,
                                                                    uint8_t off) {
  // Lane i shows block bit i >> 2 of the chunk's 8 blocks.
  const __m256i lane_bit = _mm256_setr_epi8(1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 16, 16, 16, 16,
                                            32, 32, 32, 32, 64, 64, 64, 64, -128, -128, -128, -128);
  const __m256i on_v = _mm256_set1_epi8((char)on), off_v = _mm256_set1_epi8((char)off);
  int32_t k = 0;
  for (; k + 32 <= count; k += 32) {
    const __m256i bits = _mm256_set1_epi8((char)(blocks >> ((x + k) >> 2)));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bits, lane_bit), lane_bit);
    _mm256_storeu_si256((__m256i*)(out + k), _mm256_blendv_epi8(off_v, on_v, set));
  }
  return k;
}

// OR of the 32 bytes of v.
__attribute__((target("avx2"))) inline uint32_t tia_or_bytes(__m256i v) {
  __m128i x = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_or_si128(x, _mm_srli_si128(x, 8));
  x = _mm_or_si128(x, _mm_srli_si128(x, 4));
  x = _mm_or_si128(x, _mm_srli_si128(x, 2));
  x = _mm_or_si128(x, _mm_srli_si128(x, 1));
  return (uint32_t)_mm_cvtsi128_si32(x) & 0xFF;
}

// out[k] = the colour of pixel k and the collisions of all pixels, k < count, from the
// object bits e[k] (e has 32 readable bytes past count); pixels from left_end on are
// right of centre (the priority table's second half). Same result as the portable loop.
__attribute__((target("avx2"))) inline void tia_colour_span_avx2(Tia& t, const uint8_t* e,
                                                                 uint8_t* out, int32_t count,
                                                                 int32_t left_end) {
  // Lanes [0, n) of a 32-byte chunk: the first n bytes of keep + 32 - n.
  alignas(32) static const int8_t keep[64] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                              -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                              -1, -1, -1, -1, -1, -1};
  const TiaCollisionRows& hits = tia_collision_rows();
  const __m128i colours = _mm_setr_epi8((char)t.color[0], (char)t.color[1], (char)t.color[2],
                                        (char)t.color[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  __m256i hit_low = _mm256_setzero_si256(), hit_high = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    const int32_t begin = half ? left_end : 0, end = half ? count : left_end;
    if (begin >= end) continue;
    const uint8_t* pick = kTiaColourPick + 256 * half + t.pf_prio_score;  // v | prio = v + prio
    __m128i rows[4];
    for (int k = 0; k < 4; ++k)
      rows[k] = _mm_shuffle_epi8(colours, _mm_loadu_si128((const __m128i*)(pick + 16 * k)));
    const ShuffleTable<4> colour = shuffle_table<4>(rows);
    for (int32_t k = begin; k < end; k += 32) {
      const int32_t n = end - k < 32 ? end - k : 32;
      const ShuffleIndex<4> ix = shuffle_index<4>(_mm256_loadu_si256((const __m256i*)(e + k)));
      const __m256i lanes = _mm256_loadu_si256((const __m256i*)(keep + 32 - n));
      hit_low = _mm256_or_si256(hit_low, _mm256_and_si256(lanes, shuffle_lookup(hits.low, ix)));
      hit_high = _mm256_or_si256(hit_high, _mm256_and_si256(lanes, shuffle_lookup(hits.high, ix)));
      const __m256i pixels = shuffle_lookup(colour, ix);
      if (n == 32) {
        _mm256_storeu_si256((__m256i*)(out + k), pixels);
      } else {  // never write past the span: it ends inside the frame buffer
        alignas(32) uint8_t staged[32];
        _mm256_store_si256((__m256i*)staged, pixels);
        __builtin_memcpy(out + k, staged, (size_t)n);
      }
    }
  }
  t.collisions |= (uint16_t)(tia_or_bytes(hit_low) | tia_or_bytes(hit_high) << 8);
}

}  // namespace hs
