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
  CART_NUM_TYPES = 9
};

struct Cart {
  int32_t type;
  uint16_t bank;        // F8/F6 bank
  uint8_t slice[4];     // E0 windows at $1000, $1400, $1800 (and $1C00 = 7)
  uint8_t pad_[2];
  uint8_t ram[128];     // SC RAM
};

HS_HD HS_INLINE uint32_t cart_rom_size(int32_t type) {
  switch (type) {
    case CART_2K: return 2048;
    case CART_4K: return 4096;
    case CART_F6: case CART_F6SC: return 16384;
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
    default: break;
  }
}

HS_HD inline void cart_init(Cart& c, int32_t type) {
  c.type = type;
  c.bank = 0;
  c.slice[0] = 4; c.slice[1] = 5; c.slice[2] = 6; c.slice[3] = 7;
  c.pad_[0] = c.pad_[1] = 0;
  for (int k = 0; k < 128; ++k) c.ram[k] = 0;
  // Installation selects the power-on bank (F8 variants install bank 1 even when swapped;
  // the reset that always follows picks the real start bank).
  if (type == CART_F8 || type == CART_F8_SWAPPED || type == CART_F8SC) c.bank = 1;
}

// Bank switching triggered by any access to `offset` (address & $0FFF).
HS_HD HS_INLINE void cart_touch(Cart& c, uint32_t offset) {
  switch (c.type) {
    case CART_F8: case CART_F8_SWAPPED: case CART_F8SC:
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

// A read in $1000-$1FFF (addr is the CPU's full 16-bit address: FE looks at A13).
HS_HD inline uint8_t cart_peek(Cart& c, const uint8_t* rom, uint16_t addr) {
  uint32_t offset = addr & 0x0FFF;
  switch (c.type) {
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
  if (cart_has_sc_ram(c.type) && offset < 0x100) {
    if (offset < 0x80) c.ram[offset] = value;  // writes to the read port are lost
    return;
  }
  cart_touch(c, offset);
}

}  // namespace hs
