// riot.h: the 6532 RIOT (128 bytes of RAM, interval timer, I/O ports) as ALE's
// M6532 (ale-py 0.12.1) behaves. Facts: ALE_FACTS.md and ALE's emucore/M6532.cxx.
// The system clock is CPU cycles since the last cycle-counter reset (done by the TIA at
// each frame start); the timer remembers the cycle it was written at, so counters are
// shifted on that reset. Arithmetic mirrors ALE's 32-bit mix of signed and unsigned.
#pragma once
#include "mt19937.h"

namespace hs {

struct Riot {
  uint8_t ram[128];
  uint32_t timer;                 // value last written to a timer register
  uint32_t interval_shift;        // log2 of the divider: 0, 3, 6 or 10
  int32_t cycle_timer_written;
  int32_t cycle_irq_read;         // when the expired timer was first read past -1
  uint8_t irq_read_seen;          // after that read the counter runs at 1 per cycle
  uint8_t ddra, ddrb;
  uint8_t pad_;
};

// Power-on: RAM is 128 draws from the system RNG, then a reset (one more draw).
HS_HD inline void riot_reset(Riot& r, MT19937& system_rng) {
  r.timer = 25 + (mt_next(system_rng) % 75);  // ALE starts the timer at a random value
  r.interval_shift = 6;
  r.cycle_timer_written = 0;
  r.cycle_irq_read = 0;
  r.irq_read_seen = 0;
  r.ddra = 0;
  r.ddrb = 0;
  r.pad_ = 0;
}

HS_HD inline void riot_power_on(Riot& r, MT19937& system_rng) {
  for (int k = 0; k < 128; ++k) r.ram[k] = (uint8_t)mt_next(system_rng);
  riot_reset(r, system_rng);
}

// The system cycle counter goes back to zero: keep the remembered cycles relative.
HS_HD HS_INLINE void riot_cycles_rebased(Riot& r, uint32_t cycles) {
  r.cycle_timer_written = (int32_t)((uint32_t)r.cycle_timer_written - cycles);
  r.cycle_irq_read = (int32_t)((uint32_t)r.cycle_irq_read - cycles);
}

// INTIM. `cycles` includes the whole current instruction (the reading access happens at
// its end), and ALE measures from one cycle earlier.
HS_HD inline uint8_t riot_read_timer(Riot& r, uint32_t cycles) {
  uint32_t elapsed = (cycles - 1) - (uint32_t)r.cycle_timer_written;
  int32_t count = (int32_t)r.timer - (int32_t)(elapsed >> r.interval_shift) - 1;
  if (count >= 0) return (uint8_t)count;
  // Expired: the counter keeps falling one per cycle below zero.
  count = (int32_t)(r.timer << r.interval_shift) - (int32_t)elapsed - 1;
  if (count <= -2 && !r.irq_read_seen) {
    r.irq_read_seen = 1;
    r.cycle_irq_read = (int32_t)cycles;
  }
  if (r.irq_read_seen) {
    int32_t expiry = (int32_t)((uint32_t)r.cycle_timer_written + (r.timer << r.interval_shift));
    int32_t offset = (int32_t)((uint32_t)r.cycle_irq_read - (uint32_t)expiry);
    count = (int32_t)r.timer - (int32_t)(elapsed >> r.interval_shift) - offset;
  }
  return (uint8_t)count;
}

// How many more cycles INTIM keeps reading 1 or more through the counting branch of
// riot_read_timer (no side effects there), given that a read at `cycles` does: reads at
// cycles + 0 .. cycles + result all return timer - (elapsed >> shift) - 1 >= 1.
// 0 when the read at `cycles` is not such a read (or no later one is).
HS_HD inline uint32_t riot_timer_steady_cycles(const Riot& r, uint32_t cycles) {
  if (r.timer < 2) return 0;
  const uint32_t elapsed = (cycles - 1) - (uint32_t)r.cycle_timer_written;
  const uint32_t limit = (r.timer - 1) << r.interval_shift;  // count >= 1 iff elapsed < limit
  if (elapsed >= limit) return 0;
  return limit - 1 - elapsed;
}

// TIMINT: bit 7 while the timer has expired and no read past expiry has been seen.
HS_HD inline uint8_t riot_read_irq_flag(const Riot& r, uint32_t cycles) {
  uint32_t elapsed = (cycles - 1) - (uint32_t)r.cycle_timer_written;
  int32_t count = (int32_t)r.timer - (int32_t)(elapsed >> r.interval_shift) - 1;
  return (count >= 0 || r.irq_read_seen) ? (uint8_t)0x00 : (uint8_t)0x80;
}

// Reads of the I/O half ($280-$297 and mirrors). ALE returns the controller pins on
// SWCHA whatever DDRA says, and the console switches on SWCHB.
HS_HD inline uint8_t riot_peek(Riot& r, uint16_t addr, uint32_t cycles, uint8_t swcha_pins,
                               uint8_t swchb_switches) {
  switch (addr & 0x07) {
    case 0: return swcha_pins;
    case 1: return r.ddra;
    case 2: return swchb_switches;
    case 3: return r.ddrb;
    case 4: case 6: return riot_read_timer(r, cycles);
    default: return riot_read_irq_flag(r, cycles);  // 5, 7
  }
}

// Writes: DDRA is kept; SWCHA/SWCHB/DDRB writes reach nothing ALE models (joysticks and
// paddles ignore output pins); the edge-detect control is ignored.
HS_HD inline void riot_poke(Riot& r, uint16_t addr, uint8_t value, uint32_t cycles) {
  uint32_t low3 = addr & 0x07;
  if (low3 == 1) { r.ddra = value; return; }
  if (low3 == 0 || low3 == 2 || low3 == 3) return;
  if ((addr & 0x14) == 0x14) {  // TIM1T, TIM8T, TIM64T, T1024T
    uint32_t k = addr & 0x03;
    r.timer = value;
    r.interval_shift = k == 3 ? 10u : 3u * k;  // dividers 1, 8, 64, 1024
    r.cycle_timer_written = (int32_t)cycles;
    r.irq_read_seen = 0;
  }
}

}  // namespace hs
