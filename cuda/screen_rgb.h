// screen_rgb.h: a screen of palette indices as packed RGB bytes (getScreenRGB), with an
// AVX2 path for x86-64 host builds, chosen at run time like tia_simd.h's; the portable
// loop stays the reference (tests/test_console_tia.py compares both).
#pragma once
#include "hs_prelude.h"

#if HS_HOST_SIMD
#include <immintrin.h>

#include "simd_lookup.h"
#endif

namespace hs {

// dst[3i .. 3i + 2] = rgb4[4 src[i] .. 4 src[i] + 2] for from <= i < to; rgb4 holds four
// bytes a palette index (R, G, B, then any). Each pixel is one 4-byte copy whose fourth
// byte the next pixel overwrites, but for pixel n - 1, the last of the screen.
HS_HD inline void screen_rgb_loop(const uint8_t* rgb4, const uint8_t* src, uint8_t* dst, int32_t from,
                                  int32_t to, int32_t n) {
  const int32_t last = to < n ? to : n - 1;
  for (int32_t i = from; i < last; ++i) hs_copy_bytes(dst + 3 * i, rgb4 + 4 * src[i], 4);
  if (last < to) hs_copy_bytes(dst + 3 * last, rgb4 + 4 * src[last], 3);
}

#if HS_HOST_SIMD
// screen_rgb for blocks of 32 pixels: a block of one colour repeats its three bytes;
// otherwise even indices (every byte but PAL colour loss's) look up each channel's 128 even
// entries (8 shuffle rows, simd_lookup.h) and interleave the three channels with byte
// shuffles, and a block with an odd index goes through the loop.
__attribute__((target("avx2"))) inline void screen_rgb_avx2(const uint8_t* rgb4, const uint8_t* src, uint8_t* dst,
                                                            int32_t n) {
  ShuffleTable<8> channel[3];
  for (int32_t c = 0; c < 3; ++c) {
    alignas(16) uint8_t even[8][16];
    for (int32_t k = 0; k < 8; ++k)
      for (int32_t j = 0; j < 16; ++j) even[k][j] = rgb4[4 * (32 * k + 2 * j) + c];
    __m128i rows[8];
    for (int32_t k = 0; k < 8; ++k) rows[k] = _mm_load_si128((const __m128i*)even[k]);
    channel[c] = shuffle_table<8>(rows);
  }
  // Packed byte j of the 48 bytes of 16 pixels (one 128-bit lane) is channel j % 3 of
  // pixel j / 3: place[v][c] moves channel c's pixels into output bytes 16v .. 16v + 15.
  alignas(16) static const int8_t place[3][3][16] = {
      {{0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1, 5},
       {-1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1},
       {-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1}},
      {{-1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10, -1},
       {5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10},
       {-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1}},
      {{-1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1, -1},
       {-1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1},
       {10, -1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15}}};
  __m256i shuffle[3][3];
  for (int32_t v = 0; v < 3; ++v)
    for (int32_t c = 0; c < 3; ++c)
      shuffle[v][c] = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)place[v][c]));
  // A block of one colour (most of a screen) is its R, G, B repeated: output byte j of the
  // 96 is channel j % 3, from the colour's 4 bytes broadcast.
  const __m256i repeat[3] = {
      _mm256_setr_epi8(0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1),
      _mm256_setr_epi8(2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0),
      _mm256_setr_epi8(1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2)};
  const __m256i low7 = _mm256_set1_epi8(0x7F);
  int32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i bytes = _mm256_loadu_si256((const __m256i*)(src + i));
    uint8_t* d = dst + 3 * i;
    const __m256i first = _mm256_broadcastb_epi8(_mm256_castsi256_si128(bytes));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, first)) == -1) {  // one colour (any index)
      uint32_t colour;
      __builtin_memcpy(&colour, rgb4 + 4 * src[i], 4);
      const __m256i rgbx = _mm256_set1_epi32((int)colour);
      for (int32_t v = 0; v < 3; ++v) _mm256_storeu_si256((__m256i*)(d + 32 * v), _mm256_shuffle_epi8(rgbx, repeat[v]));
      continue;
    }
    if (_mm256_movemask_epi8(_mm256_slli_epi16(bytes, 7)) != 0) {  // an odd index
      screen_rgb_loop(rgb4, src, dst, i, i + 32, n);
      continue;
    }
    const ShuffleIndex<8> ix = shuffle_index<8>(_mm256_and_si256(_mm256_srli_epi16(bytes, 1), low7));
    const __m256i rgb[3] = {shuffle_lookup(channel[0], ix), shuffle_lookup(channel[1], ix),
                            shuffle_lookup(channel[2], ix)};
    __m256i out[3];  // lane 0: bytes 16v .. of pixels i .. i + 15; lane 1: of i + 16 .. i + 31
    for (int32_t v = 0; v < 3; ++v)
      out[v] = _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(rgb[0], shuffle[v][0]),
                                               _mm256_shuffle_epi8(rgb[1], shuffle[v][1])),
                               _mm256_shuffle_epi8(rgb[2], shuffle[v][2]));
    _mm256_storeu_si256((__m256i*)d, _mm256_permute2x128_si256(out[0], out[1], 0x20));
    _mm256_storeu_si256((__m256i*)(d + 32), _mm256_permute2x128_si256(out[2], out[0], 0x30));
    _mm256_storeu_si256((__m256i*)(d + 64), _mm256_permute2x128_si256(out[1], out[2], 0x31));
  }
  screen_rgb_loop(rgb4, src, dst, i, n, n);
}
#endif

// dst (3n bytes) = the RGB of the n palette indices at src; rgb4 as for screen_rgb_loop.
HS_HD inline void screen_rgb(const uint8_t* rgb4, const uint8_t* src, uint8_t* dst, int32_t n) {
#if HS_HOST_SIMD
  if (hs_simd_available()) {
    screen_rgb_avx2(rgb4, src, dst, n);
    return;
  }
#endif
  screen_rgb_loop(rgb4, src, dst, 0, n, n);
}

}  // namespace hs
