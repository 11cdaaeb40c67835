// mt19937.h: a 32-bit Mersenne Twister that reproduces std::mt19937 bit for bit.
// ALE draws from two of them (ALE_FACTS.md): the system RNG (fixed seed 4753849: RIOT RAM,
// timer start, cartridge RAM) and the environment RNG (sticky actions). Plain state, so
// it is cloned with the rest of an environment. Constants: Matsumoto & Nishimura (1998).
#pragma once
#include "hs_prelude.h"

namespace hs {

enum : int32_t { MT_N = 624, MT_M = 397 };

struct MT19937 {
  uint32_t words[MT_N];
  int32_t next_index;  // MT_N means "regenerate before the next draw"
  int32_t pad_;
};

// std::mt19937::seed(value): Knuth's linear recurrence with multiplier 1812433253.
HS_HD inline void mt_seed(MT19937& g, uint32_t value) {
  g.words[0] = value;
  for (int32_t k = 1; k < MT_N; ++k) {
    uint32_t prev = g.words[k - 1];
    g.words[k] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)k;
  }
  g.next_index = MT_N;
  g.pad_ = 0;
}

HS_HD inline void mt_regenerate(MT19937& g) {
  for (int32_t k = 0; k < MT_N; ++k) {
    uint32_t mixed = (g.words[k] & 0x80000000u) | (g.words[(k + 1) % MT_N] & 0x7FFFFFFFu);
    uint32_t shifted = mixed >> 1;
    if (mixed & 1u) shifted ^= 0x9908B0DFu;
    g.words[k] = g.words[(k + MT_M) % MT_N] ^ shifted;
  }
  g.next_index = 0;
}

HS_HD inline uint32_t mt_next(MT19937& g) {
  if (g.next_index >= MT_N) mt_regenerate(g);
  uint32_t y = g.words[g.next_index++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9D2C5680u;
  y ^= (y << 15) & 0xEFC60000u;
  y ^= y >> 18;
  return y;
}

// ALE's nextDouble: one draw divided by 2^32, in [0, 1).
HS_HD inline double mt_next_double(MT19937& g) { return (double)mt_next(g) / 4294967296.0; }

}  // namespace hs
