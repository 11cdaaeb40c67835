// simd_lookup.h: byte-table lookups of 16 * ROWS entries with AVX2 shuffles, shared by
// preprocess_simd.h and screen_rgb.h (the palette's even entries, 8 rows). Host x86-64
// builds only, like its includers.
//
// Row k is kept as (row k) XOR (row k - 1). For an index v < 16 * ROWS (bit 7 clear),
// v - 16k has bit 7 set (a shuffle gives 0) exactly when v < 16k, so the rows that
// contribute are 0 .. v >> 4 and their XOR telescopes to row v >> 4.
#pragma once

#include <immintrin.h>

namespace hs {

template <int ROWS>
struct ShuffleTable {
  __m256i row[ROWS];
};

// v - 16k for k < ROWS, once per 32 indices (several tables can share it).
template <int ROWS>
struct ShuffleIndex {
  __m256i v[ROWS];
};

template <int ROWS>
__attribute__((target("avx2"))) inline ShuffleTable<ROWS> shuffle_table(const __m128i rows[ROWS]) {
  ShuffleTable<ROWS> t;
  t.row[0] = _mm256_broadcastsi128_si256(rows[0]);
  for (int k = 1; k < ROWS; ++k)
    t.row[k] = _mm256_broadcastsi128_si256(_mm_xor_si128(rows[k], rows[k - 1]));
  return t;
}

template <int ROWS>
__attribute__((target("avx2"))) inline ShuffleIndex<ROWS> shuffle_index(__m256i v) {
  ShuffleIndex<ROWS> ix;
  ix.v[0] = v;
  for (int k = 1; k < ROWS; ++k) ix.v[k] = _mm256_sub_epi8(ix.v[k - 1], _mm256_set1_epi8(16));
  return ix;
}

template <int ROWS>
__attribute__((target("avx2"))) inline __m256i shuffle_lookup(const ShuffleTable<ROWS>& t,
                                                              const ShuffleIndex<ROWS>& ix) {
  __m256i out = _mm256_shuffle_epi8(t.row[0], ix.v[0]);
  for (int k = 1; k < ROWS; ++k) out = _mm256_xor_si256(out, _mm256_shuffle_epi8(t.row[k], ix.v[k]));
  return out;
}

}  // namespace hs
