// console.h: the Atari 2600 as ALE (ale-py 0.12.1) assembles it: 6507 CPU, TIA, RIOT and
// cartridge on a 13-bit bus, the controllers and console switches, and the frame loop.
// Facts: ALE_FACTS.md, ALE's emucore/System, Console, Switches, Joystick, Paddles.
//
// The state (struct Console) is plain data. The ROM and the two frame buffers live
// outside it: ALE draws each frame into the buffer not shown last, and a frame that ends
// early leaves the older picture below the point it reached, so callers keep two.
#pragma once
#include "cart.h"
#include "m6502.h"
#include "mt19937.h"
#include "riot.h"
#include "tia.h"

namespace hs {

enum : uint32_t { kSystemSeed = 4753849u };  // ALE's fixed "system_random_seed"
enum : uint32_t { kMaxInstructionsPerFrame = 25000u };

// Controller port wiring (Console.cxx): a port holds a joystick or a pair of paddles and
// reads the events of one "jack" (0: player A / paddles 0-1, 1: player B / paddles 2-3).
enum : uint8_t { PORT_JOYSTICK = 0, PORT_PADDLES = 1 };

// Joystick event bits in Controls::joy.
enum : uint8_t { JOY_UP = 0x01, JOY_DOWN = 0x02, JOY_LEFT = 0x04, JOY_RIGHT = 0x08, JOY_FIRE = 0x10 };

// Input events as ALE's Event object holds them (set by the environment before a frame).
struct Controls {
  int32_t paddle_resistance[4];  // 0 until the environment sets it
  uint8_t joy[2];                // JOY_* bits pressed, per jack
  uint8_t paddle_fire[4];
  uint8_t reset, select;
  uint8_t left_a, left_b, right_a, right_b;  // difficulty switch events
  uint8_t pad_[2];
};

struct Console {
  M6502 cpu;
  Riot riot;
  Tia tia;
  Cart cart;
  MT19937 system_rng;
  Controls controls;
  uint32_t cycles;         // CPU cycles since the last rebase (each frame start)
  uint8_t data_bus;        // last value on the bus (TIA reads keep its low 6 bits)
  uint8_t stop;            // the TIA ended the CPU's run
  uint8_t switches;        // SWCHB latch (Switches.cxx keeps difficulty/colour state)
  uint8_t pal;             // detected or forced TV standard
  uint8_t port_type[2];    // PORT_* for the left and right port
  uint8_t port_jack[2];    // which events each port reads (SwapPorts exchanges them)
  uint8_t swap_paddles;    // Controller.SwapPaddles
  uint8_t hmove_blanks;    // Emulation.HmoveBlanks
  uint8_t pad_[2];
  int32_t ystart, height;  // Display.YStart / Display.Height (height already 250 for PAL)
};

// Per-ROM properties (DefProps.hxx) the console needs.
struct ConsoleProps {
  int32_t cart_type;        // CART_*
  int32_t ystart, height;   // 34 / 210 by default
  int32_t format;           // -1 auto-detect (ALE's default), 0 NTSC, 1 PAL
  uint8_t left_paddles, right_paddles;  // Controller.Left/Right == PADDLES
  uint8_t swap_ports, swap_paddles, hmove_blanks;
  uint8_t left_difficulty_a, right_difficulty_a;  // Console.*Difficulty == A
  uint8_t black_white;      // Console.TelevisionType == BLACKWHITE
  uint32_t system_seed;     // ALE's "system_random_seed" setting (default kSystemSeed)
};

struct FrameReplay;

// Frame buffers kept by the caller; `shown` indexes the one holding the last frame.
// With `replay` set, frames may be emulated without drawing and drawn on demand.
// With `ram_cache` set, the CPU works on a copy of RIOT RAM there during a run (a GPU
// kernel's shared memory: cuda/vector_kernels.cu, the split_shared design).
struct FrameBuffers {
  uint8_t* buf[2];
  int32_t shown;
  FrameReplay* replay = nullptr;
  uint8_t* ram_cache = nullptr;
};

// Lazily drawn frames (caller-owned, not part of the emulator state). A frame emulated
// with `lazy` set computes only what the emulation can observe (the collision latches),
// and its start state is kept, so console_materialize can draw it later by running the
// frame again: emulation is deterministic, so the pixels are those an eager run draws.
// A frame may leave old pixels of its buffer visible (it ended before the bottom of the
// display, or without VSYNC); such a frame is drawn at once, so a pending buffer always
// depends on its start state alone.
// The start states live here rather than on the stack (a GPU thread's stack is local
// memory, sized for the deepest call chain: two Console copies there made the emulator
// kernels' frames 19 KB): a frame's start goes into the spare slot, which becomes its
// buffer's slot when the frame is left undrawn, and a redraw runs on the slot itself.
struct FrameReplay {
  Console slot[3];     // the console before the frame of buffer 0 and of buffer 1; a spare
  uint8_t slot_of[2];  // buffer k's start is slot[slot_of[k] ^ k] (zeroed memory: 0, 1)
  uint8_t pending[2];  // buffer k still has to be drawn
  uint8_t lazy;        // the next frames may be left undrawn (set by the caller)
  uint8_t pad_[3];
};

HS_HD HS_INLINE int32_t replay_start_slot(const FrameReplay& r, int32_t k) { return r.slot_of[k] ^ k; }
HS_HD HS_INLINE int32_t replay_spare_slot(const FrameReplay& r) {
  return 3 - replay_start_slot(r, 0) - replay_start_slot(r, 1);
}

// ---- controller pins ----

// Digital pin of a port (pins 1-4 feed SWCHA, pin 6 the fire input); true = high.
HS_HD inline bool port_digital(const Console& c, int32_t port, int32_t pin) {
  const Controls& ev = c.controls;
  int32_t jack = c.port_jack[port];
  if (c.port_type[port] == PORT_JOYSTICK) {
    uint8_t j = ev.joy[jack];
    switch (pin) {
      case 1: return !(j & JOY_UP);
      case 2: return !(j & JOY_DOWN);
      case 3: return !(j & JOY_LEFT);
      case 4: return !(j & JOY_RIGHT);
      case 6: return !(j & JOY_FIRE);
      default: return true;
    }
  }
  // Paddles: pin 4 is the first paddle's button and pin 3 the second's, unless swapped.
  int32_t base = jack * 2;
  if (pin == 3) return ev.paddle_fire[base + (c.swap_paddles ? 0 : 1)] == 0;
  if (pin == 4) return ev.paddle_fire[base + (c.swap_paddles ? 1 : 0)] == 0;
  return true;
}

// Analog pin resistance (pin 9 -> INPT0/2, pin 5 -> INPT1/3).
HS_HD inline int32_t port_analog(const Console& c, int32_t port, int32_t pin) {
  if (c.port_type[port] == PORT_JOYSTICK) return 0x7FFFFFFF;  // not connected
  int32_t base = c.port_jack[port] * 2;
  int32_t which = (pin == 9) ? (c.swap_paddles ? 1 : 0) : (c.swap_paddles ? 0 : 1);
  return c.controls.paddle_resistance[base + which];
}

HS_HD inline uint8_t console_swcha(const Console& c) {
  uint8_t v = 0;
  for (int32_t pin = 1; pin <= 4; ++pin) {
    if (port_digital(c, 0, pin)) v |= (uint8_t)(0x10 << (pin - 1));
    if (port_digital(c, 1, pin)) v |= (uint8_t)(0x01 << (pin - 1));
  }
  return v;
}

HS_HD inline TiaInputs console_tia_inputs(const Console& c) {
  TiaInputs in;
  in.resistance[0] = port_analog(c, 0, 9);
  in.resistance[1] = port_analog(c, 0, 5);
  in.resistance[2] = port_analog(c, 1, 9);
  in.resistance[3] = port_analog(c, 1, 5);
  in.fire[0] = port_digital(c, 0, 6) ? 1 : 0;
  in.fire[1] = port_digital(c, 1, 6) ? 1 : 0;
  in.pad_[0] = in.pad_[1] = 0;
  return in;
}

// SWCHB as Switches::read computes it: events update the latch, which then reads back.
HS_HD inline uint8_t console_read_switches(Console& c) {
  const Controls& ev = c.controls;
  uint8_t s = c.switches;
  if (ev.right_a) s |= 0x80; else if (ev.right_b) s &= (uint8_t)~0x80;
  if (ev.left_a) s |= 0x40; else if (ev.left_b) s &= (uint8_t)~0x40;
  if (ev.select) s &= (uint8_t)~0x02; else s |= 0x02;
  if (ev.reset) s &= (uint8_t)~0x01; else s |= 0x01;
  c.switches = s;
  return s;
}

// ---- the bus ----

// Reads and writes that reach a device (TIA, RIOT I/O, cartridge logic). Kept out of line
// so the CPU loop stays small; c.cycles and c.data_bus must be current on entry.
// `masks`: the TIA's mask memo for this run, or null.
HS_HD HS_NOINLINE uint8_t console_peek_device(Console& c, const uint8_t* rom, uint8_t* fb,
                                              const TiaInputs& inputs, uint8_t swcha, uint16_t addr,
                                              TiaMasks* masks) {
  const uint16_t a = addr & 0x1FFF;
  if (a & 0x1000) return cart_peek(c.cart, rom, addr, c.cycles);
  if (!(a & 0x0080)) return tia_peek(c.tia, fb, addr, c.cycles, c.data_bus, inputs, masks);
  if (!(a & 0x0200)) return c.riot.ram[a & 0x7F];  // ConsoleBus reads RAM itself, never via here
  if ((a & 0x07) == 2) return console_read_switches(c);
  return riot_peek(c.riot, addr, c.cycles, swcha, 0);
}

// Returns the TIA's answer (WSYNC cycles, end of frame); other devices return zeros.
HS_HD HS_NOINLINE TiaPokeResult console_poke_device(Console& c, uint8_t* fb, uint16_t addr, uint8_t value,
                                                    bool last_access_was_read, TiaMasks* masks) {
  const uint16_t a = addr & 0x1FFF;
  TiaPokeResult r;
  r.extra_cycles = 0;
  r.stop = 0;
  if (a & 0x1000) cart_poke(c.cart, addr, value);
  else if (!(a & 0x0080)) r = tia_poke(c.tia, fb, addr, value, c.cycles, last_access_was_read, masks);
  else if (!(a & 0x0200)) c.riot.ram[a & 0x7F] = value;
  else riot_poke(c.riot, addr, value, c.cycles);
  return r;
}

// The iterations of a timer poll `L: LDA/LDX/LDY INTIM; BNE L` ending at `next_pc` that
// can be run at once (each is two instructions; `left` instructions remain in the
// budget), and the clock after them. A function of values: had it the bus's address (as
// a member, or a reference to a field), all of the bus's fields would live in memory
// (GCC's scalar replacement of aggregates gives up on a struct whose address escapes).
struct PollSkip {
  uint32_t iterations, cycles;
};
HS_HD HS_NOINLINE PollSkip console_poll_skip(const Console& c, const uint8_t* window, uint32_t window_start,
                                             uint32_t window_len, uint32_t cycles, uint16_t next_pc,
                                             uint32_t left) {
  const PollSkip none = {0, cycles};
  // The loop's code (the load 3 bytes back, BNE -5 here) must be plain window ROM.
  const uint32_t first = (uint32_t)((next_pc - 3) & 0x1FFF) - window_start;
  const uint32_t last = (uint32_t)((next_pc + 1) & 0x1FFF) - window_start;
  if (first >= window_len || last >= window_len || last < first) return none;
  if (window[first + 3] != 0xD0 || window[first + 4] != 0xFB) return none;
  // One iteration: the load (4 cycles) and the taken BNE (3, or 4 across a page).
  const uint32_t per = 7u + ((((uint32_t)next_pc + 2u) ^ ((uint32_t)next_pc - 3u)) & 0xFF00u ? 1u : 0u);
  uint32_t k = riot_timer_steady_cycles(c.riot, cycles) / per;
  if (k > left / 2) k = left / 2;
  return PollSkip{k, cycles + k * per};
}

// The CPU's view of the console for one run. m6502_run works on a private copy, so the
// clock, the data bus value and the ROM window stay in registers; they are written to
// the Console only around device accesses (and by console_bus_finish).
struct ConsoleBus {
  Console* c;
  uint8_t* ram;      // RIOT RAM: c->riot.ram, or the run's copy (FrameBuffers::ram_cache)
  const uint8_t* rom;
  uint8_t* fb;
  const TiaInputs* inputs;
  TiaMasks* masks;   // the TIA's mask memo (lazily drawn frames; drawn ones on the AVX2 host), or null
  uint8_t swcha;
  uint8_t data_bus;  // last value on the bus (TIA reads keep its low 6 bits)
  uint8_t stop;      // the TIA ended the CPU's run
  uint32_t cycles;   // the system clock (Console::cycles while the CPU runs)
  // The cartridge's plain-ROM window: reads of [window_start, window_start + window_len)
  // (13-bit addresses) return window[addr - window_start] with no side effects (no hot
  // spot, RAM port or DPC register inside). Bank switches happen only outside it, so it
  // is refreshed after every other cartridge access.
  const uint8_t* window;
  uint32_t window_start, window_len;
  uint32_t code_len;  // window_len - 2 (0 for an empty window): where a 3-byte instruction fits

  HS_HD HS_INLINE void refresh_window() {
    const Cart& k = c->cart;
    const uint8_t* bank = rom + (uint32_t)k.bank * 4096u;
    uint32_t lo = 0;  // offset of the window in the 4 KiB cartridge space
    switch (k.type) {
      case CART_2K:  // mirrored twice: the window is the copy the CPU ran in last
        bank = rom; lo = (c->cpu.pc & 0x0800) ? 0x800 : 0; window_len = 0x800; break;
      case CART_4K: window_len = 0x1000; break;
      case CART_F8: case CART_F8_SWAPPED: window_len = 0x0FF8; break;
      case CART_F6: window_len = 0x0FF6; break;
      case CART_F8SC: lo = 0x100; window_len = 0x0FF8 - 0x100; break;
      case CART_F6SC: lo = 0x100; window_len = 0x0FF6 - 0x100; break;
      case CART_DPC: lo = 0x80; window_len = 0x0FC0 - 0x80; break;
      case CART_E0:  // the fixed slice 7 at $1C00, below its hot spots
        bank = rom + 7u * 1024u - 0x0C00u; lo = 0x0C00; window_len = 0x0FE0 - 0x0C00; break;
      default: window_len = 0; break;  // FE decodes A13: always the device path
    }
    window = bank + (k.type == CART_2K ? 0u : lo);
    window_start = 0x1000u + lo;
    code_len = window_len >= 2 ? window_len - 2 : 0;
  }
  // The instruction at pc, when all of its (up to 3) bytes are in the window.
  HS_HD HS_INLINE const uint8_t* code_at(uint16_t pc) const {
    const uint32_t from_window = (uint32_t)(pc & 0x1FFF) - window_start;
    if (from_window >= code_len) return nullptr;
    const uint8_t* code = window + from_window;
    HS_ASSUME(code != nullptr);  // spares m6502_fetch's test of it
    return code;
  }
  HS_HD HS_INLINE void latch(uint8_t value) { data_bus = value; }

  // Address decoding on A12, A7 and A9 (13-bit bus); devices see the full address.
  HS_HD HS_INLINE uint8_t peek(uint16_t addr) {
    const uint32_t from_window = (uint32_t)(addr & 0x1FFF) - window_start;
    if (from_window < window_len) data_bus = window[from_window];
    else if ((addr & 0x1280) == 0x0080) data_bus = ram[addr & 0x7F];
    else data_bus = peek_device(addr);
    return data_bus;
  }
  // An address below $200 (zero page, stack, indirect pointers): A12 and A9 are low, so
  // A7 alone picks RIOT RAM or the TIA.
  HS_HD HS_INLINE uint8_t peek_low(uint16_t addr) {
    if (addr & 0x0080) data_bus = ram[addr & 0x7F];
    else data_bus = peek_device(addr);
    return data_bus;
  }
  // peek for an absolute load that ends at `next_pc`. A timer poll `L: LDA/LDX/LDY INTIM;
  // BNE L` (ROM code in the window) touches nothing but the timer until INTIM reads 0, so
  // the iterations before the one that reads 0 (or reaches the instruction budget) are run
  // at once: same cycles, count, data bus and value as stepping them (the reads in between
  // take riot_read_timer's counting branch, which has no side effects).
  // `left`: instructions left in the CPU's budget after this one (lowered by the skip).
  HS_HD HS_INLINE uint8_t peek_poll(uint16_t addr, uint16_t next_pc, uint32_t& left) {
    const uint32_t from_window = (uint32_t)(addr & 0x1FFF) - window_start;
    if (from_window < window_len) data_bus = window[from_window];
    else if ((addr & 0x1280) == 0x0080) data_bus = ram[addr & 0x7F];
    else {
      data_bus = peek_device(addr);
      if ((addr & 0x1285) == 0x0284 && data_bus != 0) {  // INTIM ($284/$286) not yet 0
        const PollSkip skip = console_poll_skip(*c, window, window_start, window_len, cycles, next_pc, left);
        if (skip.iterations != 0) {
          left -= 2 * skip.iterations;
          cycles = skip.cycles;
          data_bus = riot_read_timer(c->riot, cycles);
        }
      }
    }
    return data_bus;
  }
  HS_HD HS_INLINE uint8_t peek_device(uint16_t addr) {
    c->cycles = cycles;
    c->data_bus = data_bus;
    uint8_t v = console_peek_device(*c, rom, fb, *inputs, swcha, addr, masks);
    if (addr & 0x1000) refresh_window();
    return v;
  }
  // Returns true when the write ended the frame (the CPU stops after this instruction).
  HS_HD HS_INLINE bool poke(uint16_t addr, uint8_t value, bool last_access_was_read) {
    if ((addr & 0x1280) == 0x0080) {
      ram[addr & 0x7F] = value;
      data_bus = value;
      return false;
    }
    return poke_device(addr, value, last_access_was_read);
  }
  // A write below $200 (see peek_low).
  HS_HD HS_INLINE bool poke_low(uint16_t addr, uint8_t value, bool last_access_was_read) {
    if (addr & 0x0080) {
      ram[addr & 0x7F] = value;
      data_bus = value;
      return false;
    }
    return poke_device(addr, value, last_access_was_read);
  }
  HS_HD HS_INLINE bool poke_device(uint16_t addr, uint8_t value, bool last_access_was_read) {
    uint32_t wsync_cycles;  // WSYNC ($02 on the TIA), a sixth of all writes, stays inline
    if ((addr & 0x10BF) == 0x0002 && tia_wsync(c->tia, cycles, last_access_was_read, wsync_cycles)) {
      cycles += wsync_cycles;
      data_bus = value;
      return false;
    }
    c->cycles = cycles;
    c->data_bus = data_bus;
    TiaPokeResult r = console_poke_device(*c, fb, addr, value, last_access_was_read, masks);
    cycles += r.extra_cycles;
    stop |= r.stop;
    if (addr & 0x1000) refresh_window();
    data_bus = value;
    return r.stop != 0;
  }
  HS_HD HS_INLINE void add_cycles(uint32_t n) { cycles += n; }
};

// Reads memory as the game-settings code does (System::peek: also sets the data bus).
HS_HD inline uint8_t console_read_ram(Console& c, int32_t index) {
  uint8_t v = c.riot.ram[index & 0x7F];
  c.data_bus = v;
  return v;
}

// ---- lifecycle ----

// The bus the CPU sees for one run: the console, its ROM, the frame buffer being drawn
// and the port inputs (kept by the caller in `inputs`).
HS_HD inline ConsoleBus console_bus(Console& c, const uint8_t* rom, FrameBuffers& fbs, TiaInputs& inputs) {
  ConsoleBus bus;
  bus.c = &c;
  bus.ram = c.riot.ram;
  if (fbs.ram_cache != nullptr) {
    bus.ram = fbs.ram_cache;
    for (int32_t i = 0; i < 128; ++i) bus.ram[i] = c.riot.ram[i];
  }
  bus.rom = rom;
  bus.fb = fbs.buf[fbs.shown];
  inputs = console_tia_inputs(c);
  bus.inputs = &inputs;
  bus.masks = nullptr;
  bus.swcha = console_swcha(c);
  bus.data_bus = c.data_bus;
  bus.stop = c.stop;
  bus.cycles = c.cycles;
  bus.refresh_window();
  return bus;
}

// Writes back what the bus kept in registers (and RAM from the run's copy).
HS_HD inline void console_bus_finish(Console& c, const ConsoleBus& bus) {
  if (bus.ram != c.riot.ram) {
    for (int32_t i = 0; i < 128; ++i) c.riot.ram[i] = bus.ram[i];
  }
  c.cycles = bus.cycles;
  c.data_bus = bus.data_bus;
  c.stop = bus.stop;
}

// System::reset: rebase the counter, reset RIOT (one RNG draw), TIA, cartridge, then CPU.
HS_HD inline void console_system_reset(Console& c, const uint8_t* rom, FrameBuffers& fbs) {
  riot_cycles_rebased(c.riot, c.cycles);
  tia_cycles_rebased(c.tia, c.cycles);
  cart_cycles_rebased(c.cart, c.cycles);
  c.cycles = 0;
  riot_reset(c.riot, c.system_rng);
  tia_set_display(c.tia, c.ystart, c.height);
  tia_reset(c.tia, fbs.buf[0], fbs.buf[1], 0, c.pal != 0, c.hmove_blanks != 0);
  cart_reset(c.cart, c.system_rng);
  if (fbs.replay != nullptr) fbs.replay->pending[0] = fbs.replay->pending[1] = 0;  // both cleared
  TiaInputs inputs;
  ConsoleBus bus = console_bus(c, rom, fbs, inputs);
  m6502_reset(c.cpu, bus);
  console_bus_finish(c, bus);
}

// One TIA::update, drawing into fbs.buf[fbs.shown] (after flipping at a frame start).
HS_HD inline void console_run_frame_into(Console& c, const uint8_t* rom, FrameBuffers& fbs, bool skip_pixels) {
  if (!c.tia.partial_frame) {
    fbs.shown ^= 1;  // draw into the older buffer
    tia_start_frame(c.tia, c.cycles);
    riot_cycles_rebased(c.riot, c.cycles);
    cart_cycles_rebased(c.cart, c.cycles);
    c.cycles = 0;
  }
  c.tia.partial_frame = 1;
  c.tia.skip_pixels = skip_pixels ? 1 : 0;
  c.stop = 0;
  TiaInputs inputs;
  ConsoleBus bus = console_bus(c, rom, fbs, inputs);
  TiaMasks masks;
  if (skip_pixels || HS_HOST_SIMD) {  // the host's AVX2 drawing colours pixels from these masks too
    tia_masks_clear(masks);
    bus.masks = &masks;
  }
  m6502_run(c.cpu, bus, kMaxInstructionsPerFrame);
  console_bus_finish(c, bus);
  tia_finish_frame(c.tia, bus.fb, c.cycles);
  c.tia.skip_pixels = 0;
}

// Draws buffer k by running the frame that starts in `start` again, on `start` itself
// (a start state is not needed once its frame is drawn).
HS_HD inline void console_redraw(const uint8_t* rom, const FrameBuffers& fbs, int32_t k, Console& start) {
  FrameBuffers target = fbs;
  target.shown = k ^ 1;  // the run flips to buffer k
  target.replay = nullptr;
  SoundRecorderPause already_heard;
  (void)already_heard;
  console_run_frame_into(start, rom, target, false);
}

// Draws pending buffer k from its saved start state.
HS_HD inline void console_draw_pending(const uint8_t* rom, FrameBuffers& fbs, int32_t k) {
  FrameReplay& r = *fbs.replay;
  if (!r.pending[k]) return;
  console_redraw(rom, fbs, k, r.slot[replay_start_slot(r, k)]);
  r.pending[k] = 0;
}

// Draws every pending buffer: call before reading pixels.
HS_HD inline void console_materialize(const uint8_t* rom, FrameBuffers& fbs) {
  if (fbs.replay == nullptr) return;
  console_draw_pending(rom, fbs, 0);
  console_draw_pending(rom, fbs, 1);
}

// Draws the buffer holding the last frame, if pending (enough to read the screen).
HS_HD inline void console_materialize_shown(const uint8_t* rom, FrameBuffers& fbs) {
  if (fbs.replay != nullptr) console_draw_pending(rom, fbs, fbs.shown);
}

// One TIA::update: run the CPU until the frame ends (VSYNC, scanline limit) or 25,000
// instructions. Returns the number of scanlines of the frame.
HS_HD inline int32_t console_run_frame(Console& c, const uint8_t* rom, FrameBuffers& fbs) {
  FrameReplay* r = fbs.replay;
  if (r == nullptr || c.tia.partial_frame) {  // a continued frame's buffer is already drawn
    console_run_frame_into(c, rom, fbs, false);
    return c.tia.lines_this_frame;
  }
  const int32_t k = fbs.shown ^ 1;  // the buffer this frame goes to
  const bool lazy = r->lazy != 0;
  if (!lazy && !r->pending[k]) {
    console_run_frame_into(c, rom, fbs, false);
    return c.tia.lines_this_frame;
  }
  const int32_t spare = replay_spare_slot(*r);
  r->slot[spare] = c;
  console_run_frame_into(c, rom, fbs, lazy);
  const bool whole = !c.tia.partial_frame && c.tia.drawn_until_clock >= c.tia.display_stop_clock;
  if (whole) {  // every pixel of the display is this frame's
    if (lazy) r->slot_of[k] = (uint8_t)(spare ^ k);  // k's old slot is the spare now
    r->pending[k] = lazy ? 1 : 0;
  } else {  // old pixels stay visible: draw the frame under them, then this one again
    console_draw_pending(rom, fbs, k);
    console_redraw(rom, fbs, k, r->slot[spare]);
  }
  return c.tia.lines_this_frame;
}

// Console construction as ALE does it (Console.cxx): RIOT RAM from the system RNG, then,
// when the format is auto-detected, a reset and 60 frames with no input, counting frames
// 30-59 of more than 285 lines (15 or more: PAL); then the final reset. Controls must be
// zero (ALE's events before the environment exists).
HS_HD inline void console_power_on(Console& c, const ConsoleProps& p, const uint8_t* rom,
                                   FrameBuffers& fbs) {
  uint8_t* raw = (uint8_t*)&c;
  for (uint32_t k = 0; k < (uint32_t)sizeof(Console); ++k) raw[k] = 0;
  mt_seed(c.system_rng, p.system_seed);
  riot_power_on(c.riot, c.system_rng);
  tia_power_on(c.tia);
  cart_init(c.cart, p.cart_type);
  c.port_type[0] = p.left_paddles ? PORT_PADDLES : PORT_JOYSTICK;
  c.port_type[1] = p.right_paddles ? PORT_PADDLES : PORT_JOYSTICK;
  c.port_jack[0] = 0;
  c.port_jack[1] = 1;
  if (p.swap_ports) {  // the left property's controller is plugged into the right port
    uint8_t t = c.port_type[0]; c.port_type[0] = c.port_type[1]; c.port_type[1] = t;
    c.port_jack[0] = 1;
    c.port_jack[1] = 0;
  }
  c.swap_paddles = p.swap_paddles;
  c.hmove_blanks = p.hmove_blanks;
  c.switches = 0xFF;
  if (!p.right_difficulty_a) c.switches &= (uint8_t)~0x80;
  if (!p.left_difficulty_a) c.switches &= (uint8_t)~0x40;
  if (p.black_white) c.switches &= (uint8_t)~0x08;
  c.ystart = p.ystart;
  c.height = p.height;
  fbs.shown = 0;
  if (p.format < 0) {
    c.pal = 0;  // the detection run uses NTSC settings
    console_system_reset(c, rom, fbs);
    int32_t pal_frames = 0;
    for (int32_t i = 0; i < 60; ++i) {
      int32_t lines = console_run_frame(c, rom, fbs);
      if (i >= 30 && lines > 285) ++pal_frames;
    }
    c.pal = pal_frames >= 15 ? 1 : 0;
  } else {
    c.pal = (uint8_t)p.format;
  }
  if (c.pal && c.height == 210) c.height = 250;
  console_system_reset(c, rom, fbs);
}

}  // namespace hs
