// m6502.h: the 6507 CPU as ALE (ale-py 0.12.1, Stella 2.x "M6502Low") executes it.
//
// The CPU is generic over its bus: `Bus` provides
//   uint8_t peek(uint16_t addr);                       // a read; updates the data bus
//   uint8_t peek_poll(uint16_t addr, uint16_t pc, uint32_t& left);
//                                                      // peek for LDA/LDX/LDY abs; may run
//                                                      // a timer-polling loop ahead (console.h)
//   uint8_t peek_low(uint16_t addr);                   // peek of an address below $200
//   bool    poke(uint16_t addr, uint8_t v, bool last_access_was_read);  // a write; true:
//                                                      // stop after this instruction (the
//                                                      // TIA ended a frame)
//   bool    poke_low(uint16_t addr, uint8_t v, bool last_access_was_read);  // below $200
//   void    add_cycles(uint32_t n);                    // advance the system clock (CPU cycles)
//   const uint8_t* code_at(uint16_t pc);               // the 3 bytes at pc when reading them has
//                                                      // no side effects (plain ROM), else null
//   void    latch(uint8_t v);                          // a read through code_at's pointer: the
//                                                      // data bus takes its value
// The console bus lives in console.h; FlatBus below is a 64 KiB test memory.
// Timing model (ALE_FACTS.md): the opcode's whole base cycle count is charged right
// after the opcode fetch (first thing in each handler of m6502_ops.inc), so the TIA and
// RIOT see the instruction's accesses at its end-of-instruction time. Page-crossing and branch cycles are added when found.
#pragma once
#include "hs_prelude.h"

namespace hs {

// Status byte bits (6502 P register).
enum : uint8_t {
  P_C = 0x01, P_Z = 0x02, P_I = 0x04, P_D = 0x08, P_B = 0x10, P_U = 0x20, P_V = 0x40, P_N = 0x80
};

// ALE's BCD helpers. bcd_to_bin reads any byte as two decimal digits (0xFF -> 165).
HS_HD HS_INLINE int bcd_to_bin(uint8_t v) { return (v >> 4) * 10 + (v & 0x0F); }
// ALE indexes a 2x256 table with a value that can be as low as -66 after a decimal SBC
// of non-BCD operands; the negative index lands in the first row (bcd_to_bin of 256+v).
HS_HD HS_INLINE uint8_t bin_to_bcd(int v) {
  if (v < 0) return (uint8_t)bcd_to_bin((uint8_t)(256 + v));
  return (uint8_t)((((v % 100) / 10) << 4) | (v % 10));
}

struct M6502 {
  uint16_t pc;
  uint8_t a, x, y, sp;
  uint8_t ir;                    // the JAM opcode that halted the CPU (0 while it runs)
  uint8_t n, v, b, d, i, notz, c;  // flags, each 0 or 1 (notz = Z flag clear)
  uint8_t last_access_was_read;  // always 1 between runs: each instruction starts with a read
  uint8_t jammed;                // a JAM opcode ran: ALE treats it as a fatal error
  uint8_t pad_[2];
};

HS_HD HS_INLINE uint8_t m6502_status_byte(const M6502& s) {
  return (uint8_t)(P_U | (s.n << 7) | (s.v << 6) | (s.b << 4) | (s.d << 3) | (s.i << 2) |
                   ((!s.notz) << 1) | s.c);
}

HS_HD HS_INLINE void m6502_set_status_byte(M6502& s, uint8_t p) {
  s.n = (p >> 7) & 1;
  s.v = (p >> 6) & 1;
  s.b = 1;  // the 6507's B flag always reads as set (ALE)
  s.d = (p >> 3) & 1;
  s.i = (p >> 2) & 1;
  s.notz = !(p & P_Z);
  s.c = p & 1;
}

// Power-on/reset as ALE does it: A=X=Y=0, SP=$FF, P=$20 read back with B set (so I is
// clear), PC from the reset vector.
template <class Bus>
HS_HD void m6502_reset(M6502& s, Bus& bus) {
  s.a = s.x = s.y = 0;
  s.sp = 0xFF;
  s.ir = 0;
  m6502_set_status_byte(s, P_U);
  s.last_access_was_read = 1;
  s.jammed = 0;
  s.pad_[0] = s.pad_[1] = 0;
  uint8_t lo = bus.peek(0xFFFC);
  uint8_t hi = bus.peek(0xFFFD);
  s.pc = (uint16_t)(lo | (hi << 8));
}

// Helpers of m6502_run's opcode handlers (called through its macros). N and Z live in one
// value `nz`: Z is set when its low byte is 0, N when bit 7 or 8 is set (bit 8 lets BIT
// and PLP set N apart from the byte that decides Z). D and I sit at their P bits in `di`.

// Instruction bytes. When the whole instruction (up to 3 bytes) lies in plain ROM, the
// opcode fetch leaves `code` pointing past the opcode and the operands are read through
// it, without decoding their addresses again; otherwise `code` is null and they are read
// through the bus like any byte. Nothing an instruction does before its last operand
// fetch can switch banks (only its data accesses can), so the pointer stays valid.
template <class Bus>
HS_HD HS_INLINE uint8_t m6502_fetch(Bus& bus, uint16_t& pc, const uint8_t*& code) {
  uint8_t value;
  if (code != nullptr) {
    value = *code++;
    bus.latch(value);
  } else {
    value = bus.peek(pc);
  }
  pc = (uint16_t)(pc + 1);
  return value;
}
template <class Bus>
HS_HD HS_INLINE uint16_t m6502_fetch_word(Bus& bus, uint16_t& pc, const uint8_t*& code) {
  const uint16_t lo = m6502_fetch(bus, pc, code);
  const uint16_t hi = m6502_fetch(bus, pc, code);
  return (uint16_t)(lo | (hi << 8));
}
template <class Bus>
HS_HD HS_INLINE uint16_t m6502_pull(Bus& bus, uint8_t& sp) {
  const uint8_t value = bus.peek_low((uint16_t)(0x100 + sp));
  sp = (uint8_t)(sp + 1);
  return value;
}
template <class Bus>
HS_HD HS_INLINE void m6502_branch(Bus& bus, uint16_t& pc, uint8_t displacement) {
  const uint16_t target = (uint16_t)(pc + (int8_t)displacement);
  bus.add_cycles(((pc ^ target) & 0xFF00) ? 2 : 1);
  pc = target;
}
HS_HD HS_INLINE uint8_t m6502_packed_status(uint32_t nz, uint8_t v, uint8_t di, uint8_t c) {
  // B always reads as set on the 6507 (ALE)
  return (uint8_t)(P_U | P_B | ((nz & 0x180) ? P_N : 0) | (v << 6) | di | ((nz & 0xFF) ? 0 : P_Z) | c);
}
HS_HD HS_INLINE void m6502_unpack_status(uint8_t p, uint32_t& nz, uint8_t& v, uint8_t& di, uint8_t& c) {
  nz = ((uint32_t)(p & P_N) << 1) | ((p & P_Z) ? 0u : 1u);
  v = (p >> 6) & 1;
  di = p & (P_D | P_I);
  c = p & 1;
}
HS_HD HS_INLINE void m6502_compare(uint8_t reg, uint8_t value, uint32_t& nz, uint8_t& c) {
  const uint16_t r = (uint16_t)(reg - value);
  nz = r & 0xFF;
  c = !(r & 0x100);
}
// Binary ADC; binary SBC is the same sum with the operand's complement.
HS_HD HS_INLINE void m6502_add_binary(uint8_t value, uint8_t& a, uint8_t& c, uint8_t& v, uint32_t& nz) {
  const int sum_signed = (int8_t)a + (int8_t)value + c;
  v = sum_signed > 127 || sum_signed < -128;
  const int sum = a + value + c;
  a = (uint8_t)sum;
  c = sum > 0xFF;
  nz = a;
}
HS_HD HS_INLINE void m6502_adc(uint8_t value, uint8_t& a, uint8_t& c, uint8_t& v, uint32_t& nz, uint8_t di) {
  if (!(di & P_D)) {
    m6502_add_binary(value, a, c, v, nz);
  } else {  // ALE: BCD tables; N, V, Z from the BCD result (not NMOS silicon)
    const uint8_t old_a = a;
    const int sum = bcd_to_bin(a) + bcd_to_bin(value) + c;
    c = sum > 99;
    a = bin_to_bcd(sum & 0xFF);
    nz = a;
    v = ((old_a ^ a) & 0x80) && ((a ^ value) & 0x80);
  }
}
HS_HD HS_INLINE void m6502_sbc(uint8_t value, uint8_t& a, uint8_t& c, uint8_t& v, uint32_t& nz, uint8_t di) {
  if (!(di & P_D)) {
    m6502_add_binary((uint8_t)~value, a, c, v, nz);
  } else {
    const uint8_t old_a = a;
    int diff = bcd_to_bin(a) - bcd_to_bin(value) - (c ? 0 : 1);
    if (diff < 0) diff += 100;
    a = bin_to_bcd(diff);
    nz = a;
    c = old_a >= value + (c ? 0 : 1);
    v = ((old_a ^ a) & 0x80) && ((a ^ value) & 0x80);
  }
}
HS_HD HS_INLINE void m6502_arr(uint8_t value, uint8_t& a, uint8_t& c, uint8_t& v, uint32_t& nz, uint8_t di) {
  if (!(di & P_D)) {
    a &= value;
    a = (uint8_t)((a >> 1) | (c << 7));
    c = (a >> 6) & 1;
    v = ((a >> 6) ^ (a >> 5)) & 1;
    nz = a;
  } else {  // ALE's decimal ARR (from 64doc)
    const uint8_t anded = a & value;
    a = (uint8_t)((anded >> 1) | (c << 7));
    nz = ((uint32_t)c << 8) | (a != 0 ? 1u : 0u);  // N from the carry in, Z from this a
    v = ((anded ^ a) & 0x40) != 0;
    if (((anded & 0x0F) + (anded & 0x01)) > 0x05) a = (uint8_t)((a & 0xF0) | ((a + 0x06) & 0x0F));
    if (((anded & 0xF0) + (anded & 0x10)) > 0x50) { a = (uint8_t)(a + 0x60); c = 1; } else { c = 0; }
  }
}

// Opcode dispatch: host compilers with labels as values (GCC, Clang) jump from handler to
// handler; CUDA (nvcc, NVRTC), HS_SWITCH_DISPATCH builds and m6502_run<Bus, true> use the
// switch. The handlers (m6502_ops.inc) are the same code either way; the CPU tests run both.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && \
    !defined(HS_SWITCH_DISPATCH)
#define HS_THREADED_DISPATCH 1
#else
#define HS_THREADED_DISPATCH 0
#endif
#ifdef HS_PC_HOOK
#define HS_PC_HOOK_CALL HS_PC_HOOK(pc)
#else
#define HS_PC_HOOK_CALL ((void)0)
#endif

// Runs instructions until `max_instructions` have run, a write asks to stop (the
// instruction completes first), or a JAM opcode halts the CPU. Returns the number run.
template <class Bus, bool kSwitchDispatch = false>
HS_HD uint32_t m6502_run(M6502& s, Bus& bus_in, uint32_t max_instructions) {
  if (s.jammed) return 0;
  // A private copy of the bus (its address never escapes) lets the compiler keep its
  // fields in registers; it is copied back at the end.
  Bus bus = bus_in;
  // Registers live in locals for the loop; written back once at the end.
  uint16_t pc = s.pc;
  uint8_t a = s.a, x = s.x, y = s.y, sp = s.sp;
  uint8_t v = s.v, c = s.c;
  uint8_t di = (uint8_t)((s.d ? P_D : 0) | (s.i ? P_I : 0));  // D and I at their P bits
  uint32_t nz = ((uint32_t)s.n << 8) | s.notz;  // N and Z (see the helpers above)
  uint32_t left = max_instructions;  // instructions still allowed
  const uint32_t kNotStopped = 0xFFFFFFFFu;
  uint32_t left_at_stop = kNotStopped;

  // The handlers' vocabulary (m6502_ops.inc): fetch, fetch_word, rd, rd_low, rd_poll, wr,
  // wr_low, push, push_after_write, pull, set_nz, status_byte, set_status_byte, compare, branch,
  // adc, sbc, arr. Macros over the m6502_* helpers above rather than lambdas: a lambda made
  // here holds the addresses of the state it captures in every handler, across the
  // computed gotos, where GCC cannot fold them away; the bus and nz then stay in memory
  // (the bus is not split into registers at all), and every instruction pays for it.
  // All are #undef'd at the end of this function.
  // Writes tell the bus whether the previous access was a read (the TIA's WSYNC asks).
  // Every instruction starts with the opcode read, and only JSR and BRK write twice in a
  // row (their later pushes use push_after_write), so a write follows a read otherwise.
  // A write that ends the run zeroes `left` (one test per instruction) and keeps the real
  // count in left_at_stop.
#define HS_STOP_IF(stopped) \
  do {                      \
    if (stopped) {          \
      left_at_stop = left;  \
      left = 0;             \
    }                       \
  } while (0)
#define fetch() m6502_fetch(bus, pc, code)
#define fetch_opcode() (code = bus.code_at(pc), fetch())
#define fetch_word() m6502_fetch_word(bus, pc, code)
#define rd(address) bus.peek((uint16_t)(address))
#define rd_low(address) bus.peek_low((uint16_t)(address))
  // An absolute load (LDA/LDX/LDY abs): the bus may recognise a loop that polls a timer
  // and run its iterations in one step (Bus::peek_poll; pc is past the operand).
#define rd_poll(address) bus.peek_poll((uint16_t)(address), pc, left)
#define wr(address, value) HS_STOP_IF(bus.poke((uint16_t)(address), (uint8_t)(value), true))
#define wr_low(address, value) HS_STOP_IF(bus.poke_low((uint16_t)(address), (uint8_t)(value), true))
#define push(value)                  \
  do {                               \
    wr_low(0x100 + sp, value);       \
    sp = (uint8_t)(sp - 1);          \
  } while (0)
#define push_after_write(value)                                                     \
  do {                                                                              \
    HS_STOP_IF(bus.poke_low((uint16_t)(0x100 + sp), (uint8_t)(value), false));      \
    sp = (uint8_t)(sp - 1);                                                         \
  } while (0)
#define pull() m6502_pull(bus, sp)
#define set_nz(value) (nz = (uint8_t)(value))
#define status_byte() m6502_packed_status(nz, v, di, c)
#define set_status_byte(p) m6502_unpack_status((uint8_t)(p), nz, v, di, c)
#define compare(reg, value) m6502_compare((uint8_t)(reg), (uint8_t)(value), nz, c)
#define branch(displacement) m6502_branch(bus, pc, (uint8_t)(displacement))
#define adc(value) m6502_adc((uint8_t)(value), a, c, v, nz, di)
#define sbc(value) m6502_sbc((uint8_t)(value), a, c, v, nz, di)
#define arr(value) m6502_arr((uint8_t)(value), a, c, v, nz, di)

  const uint8_t* code = nullptr;  // the running instruction's next byte (m6502_fetch)
  uint16_t addr = 0;    // effective address of the instruction running
  uint8_t operand = 0;  // its operand
  (void)addr;
  (void)operand;
  if (left != 0) {
#if HS_THREADED_DISPATCH
#define HS_OP(opcode_value, label) label:
#define HS_DISPATCH()                    \
  do {                                   \
    HS_PC_HOOK_CALL;                     \
    const uint8_t opcode = fetch_opcode(); \
    --left;                              \
    goto* kDispatch[opcode];             \
  } while (0)
#define HS_NEXT()            \
  do {                       \
    if (left == 0) goto done; \
    HS_DISPATCH();           \
  } while (0)
    if constexpr (!kSwitchDispatch) {
      // Each handler ends with its own fetch and indirect jump (GCC's labels as values):
      // one jump per instruction, and the branch predictor sees which opcode follows which.
      static const void* const kDispatch[256] = {
#include "m6502_dispatch.inc"
      };
      HS_DISPATCH();
#include "m6502_ops.inc"
    } else  // NOLINT: the switch below is this else branch
#undef HS_DISPATCH
#undef HS_OP
#undef HS_NEXT
#endif
#define HS_OP(opcode_value, label) case opcode_value:
#define HS_NEXT() break
    {
      for (;;) {
        HS_PC_HOOK_CALL;
        const uint8_t opcode = fetch_opcode();
        --left;
        switch (opcode) {
#include "m6502_ops.inc"
        }
        if (left == 0) break;
      }
    }
#undef HS_OP
#undef HS_NEXT
  }
done:
  if (left_at_stop != kNotStopped) left = left_at_stop;
  const uint32_t count = max_instructions - left;
  bus_in = bus;

  s.pc = pc; s.a = a; s.x = x; s.y = y; s.sp = sp;
  s.n = (nz & 0x180) ? 1 : 0; s.v = v; s.b = 1; s.d = (di & P_D) ? 1 : 0; s.i = (di & P_I) ? 1 : 0;
  s.notz = (nz & 0xFF) ? 1 : 0; s.c = c;
  s.last_access_was_read = 1;  // what the next instruction's first write sees (see wr)
  return count;
}
#undef HS_STOP_IF
#undef fetch
#undef fetch_opcode
#undef rd
#undef rd_low
#undef rd_poll
#undef wr
#undef wr_low
#undef fetch_word
#undef push
#undef push_after_write
#undef pull
#undef set_nz
#undef status_byte
#undef set_status_byte
#undef compare
#undef branch
#undef adc
#undef sbc
#undef arr

// A flat 64 KiB memory with no I/O, for CPU tests (Klaus Dormann, SingleStepTests).
struct FlatBus {
  uint8_t* mem;
  uint64_t cycles;
  HS_HD HS_INLINE uint8_t peek(uint16_t address) { return mem[address]; }
  HS_HD HS_INLINE uint8_t peek_poll(uint16_t address, uint16_t, uint32_t&) { return mem[address]; }
  HS_HD HS_INLINE uint8_t peek_low(uint16_t address) { return mem[address]; }
  HS_HD HS_INLINE bool poke(uint16_t address, uint8_t value, bool) { mem[address] = value; return false; }
  HS_HD HS_INLINE bool poke_low(uint16_t address, uint8_t value, bool) { mem[address] = value; return false; }
  HS_HD HS_INLINE void add_cycles(uint32_t k) { cycles += k; }
  HS_HD HS_INLINE const uint8_t* code_at(uint16_t address) { return address <= 0xFFFD ? mem + address : nullptr; }
  HS_HD HS_INLINE void latch(uint8_t) {}
};

}  // namespace hs
