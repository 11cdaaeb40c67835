// cpu_harness.h: the CPU on a flat 64 KiB memory, for the CPU tests and the CPU benchmark.
#pragma once
#include "m6502.h"

namespace hs {

// Registers travel as uint16 [pc, a, x, y, sp, p]; p is the pushed status byte.
HS_HD HS_INLINE void m6502_load_regs(M6502& s, const uint16_t* regs) {
  s.pc = regs[0];
  s.a = (uint8_t)regs[1];
  s.x = (uint8_t)regs[2];
  s.y = (uint8_t)regs[3];
  s.sp = (uint8_t)regs[4];
  m6502_set_status_byte(s, (uint8_t)regs[5]);
  s.ir = 0;
  s.last_access_was_read = 1;
  s.jammed = 0;
}

HS_HD HS_INLINE void m6502_store_regs(const M6502& s, uint16_t* regs) {
  regs[0] = s.pc;
  regs[1] = s.a;
  regs[2] = s.x;
  regs[3] = s.y;
  regs[4] = s.sp;
  regs[5] = m6502_status_byte(s);
}

// Runs up to max_instructions. With stop_on_trap, stops at the first instruction that
// jumps or branches to itself (how Klaus Dormann's test signals success and failure),
// checking every `chunk` instructions so the hot loop stays free of the test.
// Returns the number of instructions run; *cycles and *jammed report the rest.
// switch_dispatch selects m6502_run's switch dispatch instead of the threaded one.
template <bool kSwitchDispatch>
HS_HD inline uint64_t flat_run_with(uint8_t* mem, uint16_t* regs, uint64_t max_instructions,
                                    int stop_on_trap, uint64_t* cycles, int* jammed) {
  M6502 s;
  m6502_load_regs(s, regs);
  FlatBus bus;
  bus.mem = mem;
  bus.cycles = 0;
  uint64_t done = 0;
  const uint32_t chunk = stop_on_trap ? 4096 : 0xFFFFFFFFu;
  while (done < max_instructions && !s.jammed) {
    uint64_t left = max_instructions - done;
    done += m6502_run<FlatBus, kSwitchDispatch>(s, bus, (uint32_t)(left < chunk ? left : chunk));
    if (stop_on_trap && done < max_instructions && !s.jammed) {
      uint16_t before = s.pc;
      done += m6502_run<FlatBus, kSwitchDispatch>(s, bus, 1);
      if (s.pc == before) break;
    }
  }
  m6502_store_regs(s, regs);
  *cycles = bus.cycles;
  *jammed = s.jammed;
  return done;
}

HS_HD inline uint64_t flat_run(uint8_t* mem, uint16_t* regs, uint64_t max_instructions, int stop_on_trap,
                               uint64_t* cycles, int* jammed, int switch_dispatch = 0) {
  if (switch_dispatch) return flat_run_with<true>(mem, regs, max_instructions, stop_on_trap, cycles, jammed);
  return flat_run_with<false>(mem, regs, max_instructions, stop_on_trap, cycles, jammed);
}

}  // namespace hs
