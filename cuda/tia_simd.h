// tia_simd.h: AVX2 versions of tia_draw_span's pixel loop (each pixel's colour from the
// line's colour planes, tia_colour_planes) and of fill_blocks (the playfield's 4-pixel
// blocks), for x86-64 host builds.
// tia.h includes it only there and calls it when hs_simd_available() (hs_prelude.h);
// the portable loops stay the reference, and tia_render_selftest compares both with
// tia_draw_span_reference.
#pragma once

#include <immintrin.h>

namespace hs {

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

// 64 bits of a 160-bit mask (with a fourth word) from pixel p, 0-159.
inline uint64_t tia_mask_bits64(const uint64_t* m, int32_t p) {
  const int32_t w = p >> 6, s = p & 63;
  return (m[w] >> s) | ((m[w + 1] << 1) << (63 - s));
}

// Pixels x + k .. x + k + 31 (up to x + count) of tia_fill_colour_planes_avx2: `bits0` and
// `bits1` hold the planes' bits in every 64-bit lane, `bytes` picks each pixel's byte.
__attribute__((target("avx2"), always_inline)) inline void tia_colour_chunk_avx2(
    uint8_t* out, int32_t k, int32_t count, __m256i bits0, __m256i bits1, __m256i bytes, __m256i table) {
  const __m256i bit_of_lane = _mm256_set1_epi64x((long long)0x8040201008040201ull);  // lane i: bit i & 7
  const __m256i on0 = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(bits0, bytes), bit_of_lane), bit_of_lane);
  const __m256i on1 = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(bits1, bytes), bit_of_lane), bit_of_lane);
  // on0, on1: 0 or -1 per pixel; the register index is 2 * (bit 1) + (bit 0)
  const __m256i pixels = _mm256_shuffle_epi8(table, _mm256_sub_epi8(_mm256_and_si256(on1, _mm256_set1_epi8(2)), on0));
  if (count - k >= 32) {
    _mm256_storeu_si256((__m256i*)(out + k), pixels);
  } else {  // never write past the span: it ends inside the frame buffer
    alignas(32) uint8_t staged[32];
    _mm256_store_si256((__m256i*)staged, pixels);
    __builtin_memcpy(out + k, staged, (size_t)(count - k));
  }
}

// out[k] = colour[c] for pixel x + k, k < count, where c = bit x + k of plane0 plus twice
// that of plane1 (tia_colour_planes).
__attribute__((target("avx2"))) inline void tia_fill_colour_planes_avx2(uint8_t* out, int32_t x, int32_t count,
                                                                        const uint64_t* plane0,
                                                                        const uint64_t* plane1,
                                                                        const uint8_t colour[4]) {
  // Lane i of a 32-pixel chunk reads byte i >> 3 (first chunk of 64 pixels) or 4 + (i >> 3)
  // (second chunk) of the broadcast 64-bit words.
  const __m256i first_bytes = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                               2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i second_bytes = _mm256_add_epi8(first_bytes, _mm256_set1_epi8(4));
  uint32_t colours;
  __builtin_memcpy(&colours, colour, 4);
  const __m256i table = _mm256_set1_epi32((int)colours);  // bytes 0-3 of each lane: the four registers
  for (int32_t k = 0; k < count; k += 64) {
    const __m256i bits0 = _mm256_set1_epi64x((long long)tia_mask_bits64(plane0, x + k));
    const __m256i bits1 = _mm256_set1_epi64x((long long)tia_mask_bits64(plane1, x + k));
    tia_colour_chunk_avx2(out, k, count, bits0, bits1, first_bytes, table);
    if (k + 32 < count) tia_colour_chunk_avx2(out, k + 32, count, bits0, bits1, second_bytes, table);
  }
}

}  // namespace hs
