// cart.h: cartridge mappers of the ROMs ale-py 0.12.1 ships (ALE_FACTS.md), as ALE's
// Cart*.cxx behave. The ROM bytes live outside the state (read-only, shared by all
// environments); the state holds only the bank selection and any cartridge RAM.
// Hot spots switch banks on reads and writes alike, at their exact address.
#pragma once
#include "mt19937.h"

namespace hs {

enum : int32_t {
  CART_2K = 0,       // 2 KiB mirrored twice
  CART_4K = 1,
  CART_F8 = 2,       // 2 x 4 KiB, hot spots $1FF8/$1FF9, starts in bank 1
  CART_F8_SWAPPED = 3,  // F8 that starts in bank 0 (two md5s in ALE)
  CART_F6 = 4,       // 4 x 4 KiB, hot spots $1FF6-$1FF9, starts in bank 0
  CART_E0 = 5,       // 8 x 1 KiB slices in three switchable windows + fixed slice 7
  CART_FE = 6,       // 2 x 4 KiB chosen by address line A13
  CART_F8SC = 7,     // F8 + 128 bytes RAM (write $1000-$107F, read $1080-$10FF)
  CART_F6SC = 8,     // F6 + the same RAM
  CART_DPC = 9,      // Pitfall II: F8 banks + David Crane's display processor (DPC)
  CART_NUM_TYPES = 10
};

struct Cart {
  int32_t type;
  uint16_t bank;        // F8/F6 bank
  uint8_t slice[4];     // E0 windows at $1000, $1400, $1800 (and $1C00 = 7)
  uint8_t pad_[2];
  uint8_t ram[128];     // SC RAM
  // DPC registers (CartDPC.cxx): 8 data fetchers with top/bottom/counter/flag, three
  // music modes, an 8-bit random number generator and the music clock's bookkeeping.
  uint16_t dpc_counter[8];
  uint8_t dpc_top[8], dpc_bottom[8], dpc_flag[8];
  uint8_t dpc_music[3];
  uint8_t dpc_random;
  int32_t dpc_cycles;          // system cycle of the last music update
  double dpc_fraction;         // fractional music clocks carried over
};

HS_HD HS_INLINE uint32_t cart_rom_size(int32_t type) {
  switch (type) {
    case CART_2K: return 2048;
    case CART_4K: return 4096;
    case CART_F6: case CART_F6SC: return 16384;
    case CART_DPC: return 8192 + 2048;  // program + display data (ALE's files carry 255 more)
    default: return 8192;
  }
}

HS_HD HS_INLINE bool cart_has_sc_ram(int32_t type) { return type == CART_F8SC || type == CART_F6SC; }

// System reset. SC cartridges refill their RAM from the system RNG on every reset.
HS_HD inline void cart_reset(Cart& c, MT19937& system_rng) {
  switch (c.type) {
    case CART_F8: c.bank = 1; break;
    case CART_F8_SWAPPED: c.bank = 0; break;
    case CART_F8SC:
      for (int k = 0; k < 128; ++k) c.ram[k] = (uint8_t)mt_next(system_rng);
      c.bank = 1;
      break;
    case CART_F6SC:
      for (int k = 0; k < 128; ++k) c.ram[k] = (uint8_t)mt_next(system_rng);
      c.bank = 0;
      break;
    case CART_F6: c.bank = 0; break;
    case CART_E0: c.slice[0] = 4; c.slice[1] = 5; c.slice[2] = 6; c.slice[3] = 7; break;
    case CART_DPC:  // fetchers keep their values; the system counter was just zeroed
      c.dpc_cycles = 0;
      c.dpc_fraction = 0.0;
      c.bank = 1;
      break;
    default: break;
  }
}

// The system cycle counter returns to zero (each frame start).
HS_HD HS_INLINE void cart_cycles_rebased(Cart& c, uint32_t cycles) {
  if (c.type == CART_DPC) c.dpc_cycles = (int32_t)((uint32_t)c.dpc_cycles - cycles);
}

HS_HD inline void cart_init(Cart& c, int32_t type) {
  c.type = type;
  c.bank = 0;
  c.slice[0] = 4; c.slice[1] = 5; c.slice[2] = 6; c.slice[3] = 7;
  c.pad_[0] = c.pad_[1] = 0;
  for (int k = 0; k < 128; ++k) c.ram[k] = 0;
  for (int k = 0; k < 8; ++k) { c.dpc_counter[k] = 0; c.dpc_top[k] = c.dpc_bottom[k] = c.dpc_flag[k] = 0; }
  c.dpc_music[0] = c.dpc_music[1] = c.dpc_music[2] = 0;
  c.dpc_random = 1;
  c.dpc_cycles = 0;
  c.dpc_fraction = 0.0;
  // Installation selects the power-on bank (F8 variants install bank 1 even when swapped;
  // the reset that always follows picks the real start bank).
  if (type == CART_F8 || type == CART_F8_SWAPPED || type == CART_F8SC || type == CART_DPC) c.bank = 1;
}

// Bank switching triggered by any access to `offset` (address & $0FFF).
HS_HD HS_INLINE void cart_touch(Cart& c, uint32_t offset) {
  switch (c.type) {
    case CART_F8: case CART_F8_SWAPPED: case CART_F8SC: case CART_DPC:
      if (offset == 0x0FF8) c.bank = 0;
      else if (offset == 0x0FF9) c.bank = 1;
      break;
    case CART_F6: case CART_F6SC:
      if (offset >= 0x0FF6 && offset <= 0x0FF9) c.bank = (uint16_t)(offset - 0x0FF6);
      break;
    case CART_E0:
      if (offset >= 0x0FE0 && offset <= 0x0FF7) c.slice[(offset - 0x0FE0) >> 3] = (uint8_t)(offset & 7);
      break;
    default: break;
  }
}

// DPC random number generator: shift left, feeding back a function of bits 3-5 and 7.
HS_HD HS_INLINE void dpc_clock_random(Cart& c) {
  const uint32_t kFeedback = 0x9669;  // bit i = feedback for index i (CartDPC's table)
  uint32_t index = ((c.dpc_random >> 3) & 0x07) | ((c.dpc_random & 0x80) ? 0x08 : 0x00);
  c.dpc_random = (uint8_t)((c.dpc_random << 1) | ((kFeedback >> index) & 1));
}

// Music-mode fetchers 5-7 count down at 15.75 kHz of the CPU's 1.19 MHz, in ALE's
// floating-point bookkeeping.
HS_HD inline void dpc_update_music(Cart& c, uint32_t cycles) {
  int32_t elapsed = (int32_t)(cycles - (uint32_t)c.dpc_cycles);
  c.dpc_cycles = (int32_t)cycles;
  double clocks = ((15750.0 * elapsed) / 1193191.66666667) + c.dpc_fraction;
  int32_t whole = (int32_t)clocks;
  c.dpc_fraction = clocks - (double)whole;
  if (whole <= 0) return;
  for (int32_t x = 5; x <= 7; ++x) {
    if (!c.dpc_music[x - 5]) continue;
    int32_t top = c.dpc_top[x] + 1;
    int32_t low = (int32_t)(c.dpc_counter[x] & 0x00FF);
    if (c.dpc_top[x] != 0) {
      low -= whole % top;
      if (low < 0) low += top;
    } else {
      low = 0;
    }
    if (low <= c.dpc_bottom[x]) c.dpc_flag[x] = 0x00;
    else if (low <= c.dpc_top[x]) c.dpc_flag[x] = 0xFF;
    c.dpc_counter[x] = (uint16_t)((c.dpc_counter[x] & 0x0700) | (uint16_t)low);
  }
}

// DPC read through the device (offsets $000-$07F and $FC0-$FFF; ALE maps the rest of
// the bank directly, without clocking the random number generator).
HS_HD inline uint8_t dpc_peek(Cart& c, const uint8_t* rom, uint32_t offset, uint32_t cycles) {
  dpc_clock_random(c);
  if (offset >= 0x40) {
    cart_touch(c, offset);
    return rom[(uint32_t)c.bank * 4096u + offset];
  }
  const uint32_t index = offset & 0x07, function = (offset >> 3) & 0x07;
  if ((c.dpc_counter[index] & 0x00FF) == c.dpc_top[index]) c.dpc_flag[index] = 0xFF;
  else if ((c.dpc_counter[index] & 0x00FF) == c.dpc_bottom[index]) c.dpc_flag[index] = 0x00;
  const uint8_t* display = rom + 8192;
  uint8_t result = 0;
  switch (function) {
    case 0:
      if (index < 4) {
        result = c.dpc_random;
      } else {  // music amplitude from the three music-mode flags
        dpc_update_music(c, cycles);
        uint32_t i = 0;
        if (c.dpc_music[0] && c.dpc_flag[5]) i |= 1;
        if (c.dpc_music[1] && c.dpc_flag[6]) i |= 2;
        if (c.dpc_music[2] && c.dpc_flag[7]) i |= 4;
        const uint8_t kAmplitude[8] = {0x00, 0x04, 0x05, 0x09, 0x06, 0x0A, 0x0B, 0x0F};
        result = kAmplitude[i];
      }
      break;
    case 1: result = display[2047 - c.dpc_counter[index]]; break;
    case 2: result = display[2047 - c.dpc_counter[index]] & c.dpc_flag[index]; break;
    case 7: result = c.dpc_flag[index]; break;
    default: result = 0; break;
  }
  if (index < 5 || !c.dpc_music[index - 5]) c.dpc_counter[index] = (uint16_t)((c.dpc_counter[index] - 1) & 0x07FF);
  return result;
}

HS_HD inline void dpc_poke(Cart& c, uint32_t offset, uint8_t value) {
  dpc_clock_random(c);
  if (offset < 0x40 || offset >= 0x80) {
    cart_touch(c, offset);
    return;
  }
  const uint32_t index = offset & 0x07, function = (offset >> 3) & 0x07;
  switch (function) {
    case 0: c.dpc_top[index] = value; c.dpc_flag[index] = 0x00; break;
    case 1: c.dpc_bottom[index] = value; break;
    case 2:
      if (index >= 5 && c.dpc_music[index - 5])
        c.dpc_counter[index] = (uint16_t)((c.dpc_counter[index] & 0x0700) | c.dpc_top[index]);
      else
        c.dpc_counter[index] = (uint16_t)((c.dpc_counter[index] & 0x0700) | value);
      break;
    case 3:
      c.dpc_counter[index] = (uint16_t)((((uint16_t)value & 0x07) << 8) | (c.dpc_counter[index] & 0x00FF));
      if (index >= 5) c.dpc_music[index - 5] = (value & 0x10) ? 1 : 0;
      break;
    case 6: c.dpc_random = 1; break;
    default: break;
  }
}

// A read in $1000-$1FFF (addr is the CPU's full 16-bit address: FE looks at A13).
HS_HD inline uint8_t cart_peek(Cart& c, const uint8_t* rom, uint16_t addr, uint32_t cycles) {
  uint32_t offset = addr & 0x0FFF;
  switch (c.type) {
    case CART_DPC:
      if (offset < 0x80 || offset >= 0xFC0) return dpc_peek(c, rom, offset, cycles);
      return rom[(uint32_t)c.bank * 4096u + offset];
    case CART_2K: return rom[offset & 0x07FF];
    case CART_4K: return rom[offset];
    case CART_FE: return rom[offset + ((addr & 0x2000) ? 0u : 4096u)];
    case CART_E0: {
      cart_touch(c, offset);
      return rom[((uint32_t)c.slice[offset >> 10] << 10) + (offset & 0x03FF)];
    }
    default: {
      if (cart_has_sc_ram(c.type) && offset >= 0x80 && offset < 0x100) return c.ram[offset & 0x7F];
      cart_touch(c, offset);  // $1000-$107F of an SC cart reads ROM (the write port)
      return rom[(uint32_t)c.bank * 4096u + offset];
    }
  }
}

HS_HD inline void cart_poke(Cart& c, uint16_t addr, uint8_t value) {
  uint32_t offset = addr & 0x0FFF;
  if (c.type == CART_DPC) {  // every cartridge write reaches the DPC
    dpc_poke(c, offset, value);
    return;
  }
  if (cart_has_sc_ram(c.type) && offset < 0x100) {
    if (offset < 0x80) c.ram[offset] = value;  // writes to the read port are lost
    return;
  }
  cart_touch(c, offset);
}

}  // namespace hs
