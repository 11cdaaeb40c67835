// tia.h: the TIA video chip as ALE (ale-py 0.12.1, a Stella 2.x TIA) draws it.
// Facts: ALE_FACTS.md and ALE's emucore/TIA.cxx. The model is ALE's, not silicon's:
// registers take effect when the CPU writes them (plus fixed write delays), pixels are
// drawn lazily up to the current colour clock before each TIA access, object shapes are
// fixed at the moment an object is positioned or resized, and a handful of game-specific
// positioning quirks are reproduced. Audio register writes only go to the recorder of
// an emulator making sound (tia_sound.h: ALE's sound observation).
//
// Clocks are colour clocks (3 per CPU cycle) measured from the system cycle counter,
// which the TIA rebases to zero at each frame start, so every "clock" below is relative.
// The frame buffer is outside the state (160 x kFrameRows bytes, palette indices).
#pragma once
#include "hs_prelude.h"
#include "tia_sound.h"

namespace hs {

enum : int32_t {
  H_CLOCKS = 228,       // colour clocks per scanline
  H_BLANK = 68,         // colour clocks of horizontal blank
  SCREEN_WIDTH = 160,   // visible pixels per scanline
  kFrameRows = 300,     // rows of ALE's frame buffers (display may start early after a reset)
  kFrameBytes = SCREEN_WIDTH * kFrameRows,
};

// Object bits of the pixel "enabled" set (ALE's encoding, also used for collisions).
enum : uint8_t {
  OBJ_P0 = 0x01, OBJ_M0 = 0x02, OBJ_P1 = 0x04, OBJ_M1 = 0x08, OBJ_BL = 0x10, OBJ_PF = 0x20,
  PF_SCORE = 0x40, PF_PRIORITY = 0x80
};

// Object indices for positions and motion registers.
enum : int32_t { OB_P0 = 0, OB_P1 = 1, OB_M0 = 2, OB_M1 = 3, OB_BL = 4 };

// Missile 0 shape modes for ALE's "Cosmic Ark" star effect.
enum : uint8_t { M0_NORMAL = 0, M0_STRETCHED = 1, M0_HIDDEN = 2 };

// Horizontal motion applied by HMOVE, by CPU cycle within the line (0-75) and motion
// nibble (0-15), reproducing ALE's 76 x 16 table of early/late HMOVE motion (checked
// entry by entry). m is the nibble's nominal motion (0..-7 for 0-7, 8..1 for 8-15):
// early in the line (cycles 0-20) the motion has a floor that rises with the cycle,
// late (55-74) a ceiling of zero after an offset falling with the cycle, cycle 75 acts
// like cycle 0, and an HMOVE in mid-line (21-54) moves nothing.
HS_CONSTANT static const int8_t kHmoveEarlyFloor[21] = {-7, -7, -7, -7, -6, -5, -5, -4, -3, -2, -2,
                                                       -1, 0,  1,  1,  2,  3,  4,  4,  5,  6};
HS_CONSTANT static const int8_t kHmoveLateOffset[20] = {6,  5,  4,  4,  3,  2,  1,  1,  0,  -1,
                                                       -2, -2, -3, -4, -5, -5, -6, -7, -8, -8};
HS_HD HS_INLINE int32_t tia_motion(int32_t cycle, int32_t nibble) {
  int32_t m = nibble < 8 ? -nibble : 16 - nibble;
  if (cycle <= 20) return m > kHmoveEarlyFloor[cycle] ? m : kHmoveEarlyFloor[cycle];
  if (cycle == 75) return m;
  if (cycle >= 55) { int32_t v = m + kHmoveLateOffset[cycle - 55]; return v < 0 ? v : 0; }
  return 0;
}

// tia_motion at one cycle for every nibble, as one clamp of the nominal motion:
// min(max(m + add, lo), hi). HMOVE picks it once for its five objects.
struct HmoveClamp {
  int32_t add, lo, hi;
};
HS_HD HS_INLINE HmoveClamp tia_hmove_clamp(int32_t cycle) {
  if (cycle <= 20) return HmoveClamp{0, kHmoveEarlyFloor[cycle], 8};
  if (cycle == 75) return HmoveClamp{0, -16, 8};
  if (cycle >= 55) return HmoveClamp{kHmoveLateOffset[cycle - 55], -16, 0};
  return HmoveClamp{0, 0, 0};
}
HS_HD HS_INLINE int32_t tia_hmove_motion(const HmoveClamp& c, int32_t nibble) {
  int32_t v = 8 - (nibble ^ 8) + c.add;  // nominal motion m, as in tia_motion, plus add
  v = v < c.lo ? c.lo : v;
  return v > c.hi ? c.hi : v;
}

struct Tia {
  // frame timing (colour clocks, relative to the system counter)
  int32_t frame_start_clock;     // clock of the frame's first colour clock (<= 0)
  int32_t display_start_clock;   // first drawn clock (YStart lines in)
  int32_t display_stop_clock;    // end of the last drawn line
  int32_t drawn_until_clock;     // pixels are drawn up to here
  int32_t clocks_left_in_line;   // of the line being drawn
  int32_t vsync_end_clock;       // VSYNC off at or after this ends the frame
  int32_t lines_last_frame;
  int32_t lines_this_frame;
  int32_t max_lines;             // runaway frame limit (NTSC 290, PAL 342)
  int32_t fb_pos;                // next frame-buffer byte to draw
  int32_t ystart, height;        // Display.YStart, Display.Height
  int32_t last_hmove_clock;
  int32_t last_access_clock;     // latest TIA access whose drawing was deferred
  int32_t dump_released_cycle;   // paddle capacitors started charging (CPU cycles)
  uint32_t cosmic_counter;
  uint32_t pf;                   // PF0 | PF1 | PF2 as 20 bits (PF0 in bits 0-3)
  int16_t pos[5];                // P0, P1, M0, M1, BL: pixel 0-159
  uint16_t collisions;           // 15 latches, ALE's bit order
  int8_t hm[5];                  // motion nibbles 0-15
  uint8_t color[4];              // BK, PF, P0, P1 (already & 0xFE, colour-loss bit added)
  uint8_t vsync, vblank, nusiz[2], ctrlpf, pf_prio_score;
  uint8_t refp[2], grp[2], grp_delayed[2], grp_shown[2];
  uint8_t enam[2], enabl, enabl_delayed, vdel[3], resmp[2];
  uint8_t enabled;               // OBJ_* bits of objects that can show
  uint8_t p_hide_first[2];       // RESPx this line: the first copy is not drawn
  uint8_t pf_reflect_shape;      // reflection used for the rest of this line
  uint8_t m0_shape;              // M0_NORMAL / M0_STRETCHED / M0_HIDDEN
  // Missile and ball shapes as ALE's mask pointers hold them: taken from pos, NUSIZ and
  // CTRLPF only where ALE recomputes those masks (NUSIZ, CTRLPF, RESMx, RESBL, RESMPx,
  // HMOVE, Cosmic Ark lines), and not part of a saved state, so after restoreState ALE
  // draws these objects where they were before the restore until such a write.
  int16_t shape_pos[3];          // M0, M1, BL
  uint8_t shape_nusiz[2];        // NUSIZ0/1 of the missile masks (copies mode, size bits)
  uint8_t shape_bl_size;         // CTRLPF bits 4-5 of the ball mask
  uint8_t hmove_blank_pending;
  uint8_t cosmic_ark;
  uint8_t dump_active;           // VBLANK bit 7: paddle inputs grounded
  uint8_t partial_frame;         // the last frame stopped without VSYNC
  uint8_t frame_greyed;
  uint8_t colour_loss;           // PAL
  uint8_t hmove_blanks_allowed;  // Emulation.HmoveBlanks
  uint8_t skip_pixels;           // this run computes collisions only (see console.h, FrameReplay)
  uint8_t pad_[2];
};

// ---- object shapes (functions of the distance d = (x - position) mod 160) ----

HS_HD HS_INLINE uint8_t reverse_bits(uint8_t v) {
  v = (uint8_t)(((v & 0xF0) >> 4) | ((v & 0x0F) << 4));
  v = (uint8_t)(((v & 0xCC) >> 2) | ((v & 0x33) << 2));
  return (uint8_t)(((v & 0xAA) >> 1) | ((v & 0x55) << 1));
}

// Start of copy k (0-2) for NUSIZ modes 0-7 (one, two close, two medium, three close,
// two wide, double, three medium, quad); -1 when the mode has no such copy.
HS_HD HS_INLINE int32_t copy_offset(int32_t mode, int32_t k) {
  if (k == 0) return 0;
  switch (mode) {
    case 1: return k == 1 ? 16 : -1;
    case 2: return k == 1 ? 32 : -1;
    case 3: return k == 1 ? 16 : 32;
    case 4: return k == 1 ? 64 : -1;
    case 6: return k == 1 ? 32 : 64;
    default: return -1;
  }
}

// Which player bit (of the shown graphics byte) is at distance d; 0 if none.
HS_HD HS_INLINE uint8_t player_bit(int32_t mode, bool hide_first, int32_t d) {
  if (mode == 5 || mode == 7) {  // double / quad width start one pixel late (ALE)
    int32_t scale = mode == 5 ? 2 : 4;
    if (hide_first || d < 1 || d > 8 * scale) return 0;
    return (uint8_t)(0x80 >> ((d - 1) / scale));
  }
  for (int32_t k = hide_first ? 1 : 0; k < 3; ++k) {
    int32_t start = copy_offset(mode, k);
    if (start < 0) break;
    if (d >= start && d < start + 8) return (uint8_t)(0x80 >> (d - start));
  }
  return 0;
}

HS_HD HS_INLINE bool missile_on(int32_t mode, int32_t width, int32_t d) {
  for (int32_t k = 0; k < 3; ++k) {
    int32_t start = copy_offset(mode, k);
    if (start < 0) break;
    if (d >= start && d < start + width) return true;
  }
  return false;
}

// Playfield bit (of the 20-bit pf) shown at pixel x; `reflect` mirrors the right half.
HS_HD HS_INLINE uint32_t playfield_bit(bool reflect, int32_t x) {
  int32_t h = x < 80 ? x : x - 80;
  if (x >= 80 && reflect) {  // right half mirrored: PF2 reversed, PF1 reversed, PF0 reversed
    if (h < 32) return 0x80000u >> (h / 4);
    if (h < 64) return 0x10u << ((h - 32) / 4);
    return 0x8u >> ((h - 64) / 4);
  }
  if (h < 16) return 1u << (h / 4);
  if (h < 48) return 0x800u >> ((h - 16) / 4);
  return 0x1000u << ((h - 48) / 4);
}

// The 40 playfield blocks (4 pixels each) of a line as bits 0-39: the same pixels as
// playfield_bit, computed once per span. Left half: PF0 bits 0-3, PF1 bits 7-0, PF2
// bits 0-7 (pf bits 0-3, 11-4, 12-19); the right half repeats it or mirrors it.
HS_HD HS_INLINE uint32_t reverse_bits32(uint32_t v) {
  v = ((v >> 1) & 0x55555555u) | ((v & 0x55555555u) << 1);
  v = ((v >> 2) & 0x33333333u) | ((v & 0x33333333u) << 2);
  v = ((v >> 4) & 0x0F0F0F0Fu) | ((v & 0x0F0F0F0Fu) << 4);
  v = ((v >> 8) & 0x00FF00FFu) | ((v & 0x00FF00FFu) << 8);
  return (v >> 16) | (v << 16);
}

HS_HD HS_INLINE uint64_t playfield_blocks(uint32_t pf, bool reflect) {
  uint32_t pf1_reversed = reverse_bits32((pf >> 4) & 0xFFu) >> 24;
  uint32_t left = (pf & 0xFu) | (pf1_reversed << 4) | (pf & 0xFF000u);
  uint32_t right = reflect ? reverse_bits32(left) >> 12 : left;
  return (uint64_t)left | ((uint64_t)right << 20);
}

HS_HD HS_INLINE uint16_t collision_bits(uint8_t e) {
  auto both = [e](uint8_t a, uint8_t b) { return (e & a) && (e & b); };
  uint16_t c = 0;
  if (both(OBJ_M0, OBJ_P1)) c |= 0x0001;
  if (both(OBJ_M0, OBJ_P0)) c |= 0x0002;
  if (both(OBJ_M1, OBJ_P0)) c |= 0x0004;
  if (both(OBJ_M1, OBJ_P1)) c |= 0x0008;
  if (both(OBJ_P0, OBJ_PF)) c |= 0x0010;
  if (both(OBJ_P0, OBJ_BL)) c |= 0x0020;
  if (both(OBJ_P1, OBJ_PF)) c |= 0x0040;
  if (both(OBJ_P1, OBJ_BL)) c |= 0x0080;
  if (both(OBJ_M0, OBJ_PF)) c |= 0x0100;
  if (both(OBJ_M0, OBJ_BL)) c |= 0x0200;
  if (both(OBJ_M1, OBJ_PF)) c |= 0x0400;
  if (both(OBJ_M1, OBJ_BL)) c |= 0x0800;
  if (both(OBJ_BL, OBJ_PF)) c |= 0x1000;
  if (both(OBJ_P0, OBJ_P1)) c |= 0x2000;
  if (both(OBJ_M0, OBJ_M1)) c |= 0x4000;
  return c;
}

// Which colour register (0 BK, 1 PF, 2 P0, 3 P1) shows, as ALE's priority encoder picks.
HS_HD HS_INLINE uint8_t pick_colour(uint8_t e, bool left_half) {
  uint8_t c = 0;
  if (e & PF_PRIORITY) {  // playfield and ball in front of the players
    if (e & (OBJ_P1 | OBJ_M1)) c = 3;
    if (e & (OBJ_P0 | OBJ_M0)) c = 2;
    if (e & (OBJ_BL | OBJ_PF)) c = 1;  // score mode is ignored under priority
    return c;
  }
  if (e & OBJ_BL) c = 1;
  if (e & OBJ_PF) c = (e & PF_SCORE) ? (left_half ? 2 : 3) : 1;
  if (e & (OBJ_P1 | OBJ_M1)) c = (c != 2) ? 3 : 2;  // a score-coloured PF keeps P0's colour
  if (e & (OBJ_P0 | OBJ_M0)) c = 2;
  return c;
}

HS_HD HS_INLINE int32_t wrap_distance(int32_t x, int32_t pos) {
  int32_t d = x - pos;
  return d < 0 ? d + 160 : d;
}

// ALE recomputes missile m's mask / the ball's mask (see Tia::shape_pos).
HS_HD HS_INLINE void missile_shape_follows(Tia& t, int32_t m) {
  t.shape_pos[m] = t.pos[OB_M0 + m];
  t.shape_nusiz[m] = t.nusiz[m];
}
HS_HD HS_INLINE void ball_shape_follows(Tia& t) {
  t.shape_pos[2] = t.pos[OB_BL];
  t.shape_bl_size = (uint8_t)((t.ctrlpf >> 4) & 3);
}

// ---- drawing ----

#include "tia_tables.inc"  // kTiaColourPick, kTiaCollisions: pick_colour and collision_bits as tables

// Reference renderer: every object tested at every pixel. Slow and obvious; the tests
// compare tia_draw_span against it.
HS_HD inline void tia_draw_span_reference(Tia& t, uint8_t* fb, int32_t x, int32_t count) {
  uint8_t* out = fb + t.fb_pos;
  if (t.vblank & 0x02) {
    for (int32_t k = 0; k < count; ++k) out[k] = 0;
    return;
  }
  const int32_t mode0 = t.nusiz[0] & 7, mode1 = t.nusiz[1] & 7;
  const int32_t m_mode0 = t.shape_nusiz[0] & 7, m_mode1 = t.shape_nusiz[1] & 7;
  const int32_t m0_width = (t.m0_shape == M0_STRETCHED) ? (1 << (((t.shape_nusiz[0] >> 4) & 3) | 1))
                                                          : (1 << ((t.shape_nusiz[0] >> 4) & 3));
  const int32_t m1_width = 1 << ((t.shape_nusiz[1] >> 4) & 3);
  const int32_t bl_width = 1 << t.shape_bl_size;
  const bool m0_can = (t.enabled & OBJ_M0) && t.m0_shape != M0_HIDDEN;
  const bool m1_can = (t.enabled & OBJ_M1) != 0;
  const bool bl_can = (t.enabled & OBJ_BL) != 0;
  // With no movable object enabled ALE takes its playfield-only path, where score mode
  // applies even under priority.
  const bool pf_only = !m0_can && !m1_can && !bl_can && (t.grp_shown[0] | t.grp_shown[1]) == 0 &&
                       !((t.enabled & OBJ_M0) && t.m0_shape == M0_HIDDEN);
  const uint8_t prio_score = pf_only && (t.pf_prio_score & PF_SCORE) ? (uint8_t)PF_SCORE : t.pf_prio_score;
  for (int32_t k = 0; k < count; ++k, ++x) {
    uint8_t e = 0;
    if (t.pf & playfield_bit(t.pf_reflect_shape != 0, x)) e |= OBJ_PF;
    if (bl_can && wrap_distance(x, t.shape_pos[2]) < bl_width) e |= OBJ_BL;
    if (t.grp_shown[1] & player_bit(mode1, t.p_hide_first[1] != 0, wrap_distance(x, t.pos[OB_P1]))) e |= OBJ_P1;
    if (m1_can && missile_on(m_mode1, m1_width, wrap_distance(x, t.shape_pos[1]))) e |= OBJ_M1;
    if (t.grp_shown[0] & player_bit(mode0, t.p_hide_first[0] != 0, wrap_distance(x, t.pos[OB_P0]))) e |= OBJ_P0;
    if (m0_can && missile_on(m_mode0, m0_width, wrap_distance(x, t.shape_pos[0]))) e |= OBJ_M0;
    t.collisions |= collision_bits(e);
    out[k] = t.color[pick_colour((uint8_t)(e | prio_score), x < 80)];
  }
}

// Marks the pixels of [x0, x0 + count) covered by [start, start + width) (mod 160) in e.
HS_HD HS_INLINE void mark_range(uint8_t* e, int32_t x0, int32_t count, int32_t start, int32_t width,
                                uint8_t bit) {
  // The object's range may wrap past pixel 159; test both unwrapped images.
  for (int32_t base = start - 160; base <= start; base += 160) {
    int32_t lo = base > x0 ? base : x0;
    int32_t hi = base + width < x0 + count ? base + width : x0 + count;
    for (int32_t x = lo; x < hi; ++x) e[x - x0] |= bit;
  }
}

// Player pixels: copy k of a player starts at pos + offset; each graphics bit covers
// 1 << shift pixels, and double/quad players start one pixel late (ALE).
HS_HD HS_INLINE void mark_player(uint8_t* e, int32_t x0, int32_t count, int32_t pos, int32_t mode,
                                 bool hide_first, uint8_t graphics, uint8_t bit) {
  if (graphics == 0) return;
  const bool wide = mode == 5 || mode == 7;
  const int32_t shift = mode == 5 ? 1 : (mode == 7 ? 2 : 0);
  for (int32_t k = hide_first ? 1 : 0; k < 3; ++k) {
    int32_t offset = copy_offset(mode, k);
    if (offset < 0) break;
    int32_t start = pos + offset + (wide ? 1 : 0);
    for (int32_t base = start - 160; base <= start; base += 160) {
      int32_t lo = base > x0 ? base : x0;
      int32_t hi = base + (8 << shift) < x0 + count ? base + (8 << shift) : x0 + count;
      for (int32_t x = lo; x < hi; ++x)
        if (graphics & (0x80 >> ((x - base) >> shift))) e[x - x0] |= bit;
    }
  }
}

}  // namespace hs

#if HS_HOST_SIMD
#include "tia_simd.h"  // AVX2 playfield fill, colour and collision loops, chosen at run time
#endif

namespace hs {

// Eight bytes at p (byte i = bits 8i .. 8i + 7 of word), any alignment: one 64-bit
// store on the (little-endian) host; the playfield's blocks were most of the drawing's
// stores.
HS_HD HS_INLINE void store8(uint8_t* p, uint64_t word) {
#if defined(__CUDA_ARCH__)
  for (int32_t i = 0; i < 8; ++i) p[i] = (uint8_t)(word >> (8 * i));
#else
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "store8 assumes a little-endian host");
  __builtin_memcpy(p, &word, 8);
#endif
}

// out[k] = (block of pixel x + k set in `blocks`) ? on : off, k < count; two 4-pixel
// blocks per store once x + k is on a block boundary.
HS_HD HS_INLINE void fill_blocks(uint8_t* out, int32_t x, int32_t count, uint64_t blocks,
                                 uint8_t on, uint8_t off) {
  int32_t k = 0;
  for (; k < count && ((x + k) & 3); ++k) out[k] = ((blocks >> ((x + k) >> 2)) & 1) ? on : off;
#if HS_HOST_SIMD
  if (count - k >= 32 && hs_simd_available())  // a call (no inlining across targets): worth it from one chunk
    k += tia_fill_blocks_avx2(out + k, x + k, count - k, blocks, on, off);
#endif
  const uint64_t on4 = on * 0x01010101ull, off4 = off * 0x01010101ull;
  for (; k + 8 <= count; k += 8) {
    const uint64_t pair = blocks >> ((x + k) >> 2);
    store8(out + k, ((pair & 1) ? on4 : off4) | ((pair & 2) ? on4 : off4) << 32);
  }
  for (; k < count; ++k) out[k] = ((blocks >> ((x + k) >> 2)) & 1) ? on : off;
}

// The playfield's colours: on_left for set blocks of pixels below 80, on_right from 80
// (score mode colours the halves differently), off elsewhere.
HS_HD HS_INLINE void fill_playfield(uint8_t* out, int32_t x, int32_t count, uint64_t blocks,
                                    uint8_t on_left, uint8_t on_right, uint8_t off) {
  const int32_t left = 80 - x < count ? (80 - x > 0 ? 80 - x : 0) : count;
  fill_blocks(out, x, left, blocks, on_left, off);
  fill_blocks(out + left, x + left, count - left, blocks, on_right, off);
}

// Object bits (OBJ_*) of each pixel of [x, x + count) into e; `blocks` is
// playfield_blocks() of the line (0 without playfield).
HS_HD HS_INLINE void tia_mark_objects(const Tia& t, uint8_t* e, int32_t x, int32_t count, uint64_t blocks) {
  if (blocks == 0) {
    for (int32_t k = 0; k < count; ++k) e[k] = 0;
  } else {
    fill_blocks(e, x, count, blocks, OBJ_PF, 0);
  }
  const int32_t mode0 = t.nusiz[0] & 7, mode1 = t.nusiz[1] & 7;
  if (t.enabled & OBJ_BL) mark_range(e, x, count, t.shape_pos[2], 1 << t.shape_bl_size, OBJ_BL);
  mark_player(e, x, count, t.pos[OB_P0], mode0, t.p_hide_first[0] != 0, t.grp_shown[0], OBJ_P0);
  mark_player(e, x, count, t.pos[OB_P1], mode1, t.p_hide_first[1] != 0, t.grp_shown[1], OBJ_P1);
  for (int32_t m = 0; m < 2; ++m) {
    if (!(t.enabled & (m ? OBJ_M1 : OBJ_M0))) continue;
    if (m == 0 && t.m0_shape == M0_HIDDEN) continue;
    int32_t size = (t.shape_nusiz[m] >> 4) & 3;
    if (m == 0 && t.m0_shape == M0_STRETCHED) size |= 1;
    int32_t mode = t.shape_nusiz[m] & 7;
    for (int32_t k = 0; k < 3; ++k) {
      int32_t offset = copy_offset(mode, k);
      if (offset < 0) break;
      mark_range(e, x, count, t.shape_pos[m] + offset, 1 << size, m ? OBJ_M1 : OBJ_M0);
    }
  }
}

// ---- collisions without drawing (lazily drawn frames) ----
// Each object's pixels on the line as a 160-bit mask (three words); a span's latches are
// the pairs of masks that meet inside it. Same latches as tia_draw_span (the selftest in
// pyx/_console.pyx compares them).

// ORs `bits` (fewer than 64 pixels) in at pixel pos (0-159) without wrapping.
HS_HD HS_INLINE void mask_or(uint64_t* m, int32_t pos, uint64_t bits) {
  const int32_t word = pos >> 6, off = pos & 63;
  m[word] |= bits << off;
  if (off != 0 && word < 2) m[word + 1] |= bits >> (64 - off);
}

// Places `len` (<= 33) pixels starting at `start` (0-319), wrapping past pixel 159.
HS_HD HS_INLINE void mask_place(uint64_t* m, int32_t start, uint64_t bits, int32_t len) {
  if (start >= 160) start -= 160;
  if (start + len <= 160) {
    mask_or(m, start, bits);
  } else {
    const int32_t first = 160 - start;
    mask_or(m, start, bits & ((1ull << first) - 1));
    mask_or(m, 0, bits >> first);
  }
}

// 16 playfield blocks (bits) -> 64 pixels, 4 per block.
HS_HD HS_INLINE uint64_t spread_blocks(uint64_t x) {
  x &= 0xFFFFull;
  x = (x | (x << 24)) & 0x000000FF000000FFull;
  x = (x | (x << 12)) & 0x000F000F000F000Full;
  x = (x | (x << 6)) & 0x0303030303030303ull;
  x = (x | (x << 3)) & 0x1111111111111111ull;
  return x * 0xFull;
}

// A player's graphics byte as pixels (bit 0 = leftmost): bit 7 of g first, each bit
// 1 << shift pixels wide (shift 1: double, 2: quad size).
HS_HD HS_INLINE uint32_t player_pixels(uint8_t g, int32_t shift) {
  uint32_t r = reverse_bits(g);
  if (shift == 0) return r;
  if (shift == 1) {  // bit i -> bits 2i, 2i + 1
    r = (r | (r << 4)) & 0x0F0Fu;
    r = (r | (r << 2)) & 0x3333u;
    r = (r | (r << 1)) & 0x5555u;
    return r * 3u;
  }
  r = (r | (r << 12)) & 0x000F000Fu;  // bit i -> bits 4i .. 4i + 3
  r = (r | (r << 6)) & 0x03030303u;
  r = (r | (r << 3)) & 0x11111111u;
  return r * 0xFu;
}

// The pixels of object o (OBJ_* bit index: P0, M0, P1, M1, BL, PF) on this line.
HS_HD HS_INLINE void object_mask(const Tia& t, int32_t o, uint64_t* m) {
  m[0] = m[1] = m[2] = 0;
  if (o == 0 || o == 2) {  // players
    const int32_t p = o >> 1;
    const int32_t mode = t.nusiz[p] & 7;
    const int32_t shift = mode == 5 ? 1 : (mode == 7 ? 2 : 0);
    const uint64_t pattern = player_pixels(t.grp_shown[p], shift);
    for (int32_t k = t.p_hide_first[p] ? 1 : 0; k < 3; ++k) {
      const int32_t offset = copy_offset(mode, k);
      if (offset < 0) break;
      mask_place(m, t.pos[p] + offset + (shift ? 1 : 0), pattern, 8 << shift);
    }
  } else if (o == 1 || o == 3) {  // missiles
    const int32_t q = o >> 1;
    int32_t size = (t.shape_nusiz[q] >> 4) & 3;
    if (q == 0 && t.m0_shape == M0_STRETCHED) size |= 1;
    const int32_t mode = t.shape_nusiz[q] & 7;
    for (int32_t k = 0; k < 3; ++k) {
      const int32_t offset = copy_offset(mode, k);
      if (offset < 0) break;
      mask_place(m, t.shape_pos[q] + offset, (1ull << (1 << size)) - 1, 1 << size);
    }
  } else if (o == 4) {  // ball
    const int32_t width = 1 << t.shape_bl_size;
    mask_place(m, t.shape_pos[2], (1ull << width) - 1, width);
  } else {  // playfield
    const uint64_t blocks = playfield_blocks(t.pf, t.pf_reflect_shape != 0);
    m[0] = spread_blocks(blocks);
    m[1] = spread_blocks(blocks >> 16);
    m[2] = spread_blocks(blocks >> 32);
  }
}

// The object masks of earlier spans, reused while the registers that shape them are
// unchanged (each mask is stored with a key of those registers). A memo for lazily drawn
// frames that lives for one CPU run (console_run_frame_into); not emulator state.
struct TiaMasks {
  uint32_t key[6];  // 0: empty (real keys have bit 31 set)
  uint64_t mask[6][3];
};

HS_HD HS_INLINE void tia_masks_clear(TiaMasks& k) {
  for (int32_t o = 0; o < 6; ++o) k.key[o] = 0;
}

// Everything object_mask(t, o) reads, packed into one value.
HS_HD HS_INLINE uint32_t object_mask_key(const Tia& t, int32_t o) {
  if (o == 0 || o == 2) {
    const int32_t p = o >> 1;
    return 0x80000000u | t.grp_shown[p] | ((uint32_t)(t.nusiz[p] & 7) << 8) |
           ((uint32_t)t.p_hide_first[p] << 11) | ((uint32_t)(uint16_t)t.pos[p] << 12);
  }
  if (o == 1 || o == 3) {
    const int32_t q = o >> 1;
    return 0x80000000u | t.shape_nusiz[q] | ((uint32_t)(uint16_t)t.shape_pos[q] << 8) |
           (q == 0 ? (uint32_t)t.m0_shape << 24 : 0u);
  }
  if (o == 4) return 0x80000000u | t.shape_bl_size | ((uint32_t)(uint16_t)t.shape_pos[2] << 8);
  return 0x80000000u | t.pf | ((uint32_t)t.pf_reflect_shape << 20);
}

// The latches that the objects showing now could still set (latches only ever get set
// until CXCLR, so pairs whose latch is set need no test).
HS_HD HS_INLINE uint32_t tia_open_latches(const Tia& t) {
  if (t.vblank & 0x02) return 0;
  // `enabled` holds P0, P1 and PF exactly when their graphics are non-zero (refresh_player,
  // the PFx writes).
  uint8_t present = (uint8_t)(t.enabled & (OBJ_P0 | OBJ_M0 | OBJ_P1 | OBJ_M1 | OBJ_BL | OBJ_PF));
  if (t.m0_shape == M0_HIDDEN) present &= (uint8_t)~OBJ_M0;
  return kTiaCollisions[present] & (uint32_t)(uint16_t)~t.collisions;
}

// The mask of object o on this line: from the memo when its key still matches (or
// computed into `scratch` without a memo).
HS_HD HS_INLINE const uint64_t* tia_object_mask(const Tia& t, int32_t o, TiaMasks* masks, uint64_t* scratch) {
  if (masks == nullptr) {
    object_mask(t, o, scratch);
    return scratch;
  }
  const uint32_t key = object_mask_key(t, o);
  if (masks->key[o] != key) {
    object_mask(t, o, masks->mask[o]);
    masks->key[o] = key;
  }
  return masks->mask[o];
}

// tia_span_collisions for a non-empty set of open latches (out of line: most spans have
// none, and that test stays inline in the caller). Each open latch tests its two objects'
// masks: first on the whole line (most pairs never meet), then inside the span.
HS_HD HS_NOINLINE void tia_span_collisions_open(Tia& t, int32_t x, int32_t count, TiaMasks* masks,
                                                uint32_t open) {
  uint64_t scratch[6][3];
  uint64_t span[3];
  bool span_known = false;
  uint16_t hits = 0;
  for (uint32_t rest = open; rest != 0; rest &= rest - 1) {
    const int32_t latch = hs_lowest_bit(rest);
    const uint32_t pair = kTiaLatchObjects[latch];
    const int32_t a = hs_lowest_bit(pair), b = hs_lowest_bit(pair & (pair - 1));
    const uint64_t* ma = tia_object_mask(t, a, masks, scratch[a]);
    const uint64_t* mb = tia_object_mask(t, b, masks, scratch[b]);
    const uint64_t both0 = ma[0] & mb[0], both1 = ma[1] & mb[1], both2 = ma[2] & mb[2];
    if ((both0 | both1 | both2) == 0) continue;
    if (!span_known) {  // pixels [x, x + count)
      for (int32_t w = 0; w < 3; ++w) {
        const int32_t lo = x > 64 * w ? x - 64 * w : 0;
        const int32_t hi = x + count < 64 * (w + 1) ? x + count - 64 * w : 64;
        span[w] = hi <= lo ? 0 : (hi - lo == 64 ? ~0ull : ((1ull << (hi - lo)) - 1)) << lo;
      }
      span_known = true;
    }
    if ((both0 & span[0]) | (both1 & span[1]) | (both2 & span[2])) hits |= (uint16_t)(1u << latch);
  }
  t.collisions |= hits;
}

// Collision latches of the span [x, x + count) of the current line. `masks` may be null.
HS_HD HS_INLINE void tia_span_collisions(Tia& t, int32_t x, int32_t count, TiaMasks* masks) {
  const uint32_t open = tia_open_latches(t);
  if (open != 0) tia_span_collisions_open(t, x, count, masks, open);
}

// The colour register (0 BK, 1 PF, 2 P0, 3 P1) that each pixel of the line shows, as two
// 160-bit planes (register = plane0 bit + 2 * plane1 bit; a fourth, zero word ends each):
// pick_colour on 64 pixels at a time, from the objects' masks. For lines with a movable
// object (the playfield-only path colours score mode differently).
HS_HD HS_INLINE void tia_colour_planes(const Tia& t, TiaMasks* masks, uint64_t plane0[4], uint64_t plane1[4]) {
  const uint64_t none[3] = {0, 0, 0};
  uint64_t scratch[6][3];
  const bool shows[6] = {t.grp_shown[0] != 0,
                         (t.enabled & OBJ_M0) != 0 && t.m0_shape != M0_HIDDEN,
                         t.grp_shown[1] != 0,
                         (t.enabled & OBJ_M1) != 0,
                         (t.enabled & OBJ_BL) != 0,
                         t.pf != 0};
  const uint64_t* m[6];
  for (int32_t o = 0; o < 6; ++o) m[o] = shows[o] ? tia_object_mask(t, o, masks, scratch[o]) : none;
  const bool priority = (t.pf_prio_score & PF_PRIORITY) != 0;
  const uint64_t score = (t.pf_prio_score & PF_SCORE) ? ~0ull : 0;
  const uint64_t left_half[3] = {~0ull, 0xFFFFull, 0};  // pixels 0-79
  for (int32_t w = 0; w < 3; ++w) {
    const uint64_t p0 = m[0][w] | m[1][w], p1 = m[2][w] | m[3][w], pf_bl = m[4][w] | m[5][w];
    uint64_t c1, c2, c3;
    if (priority) {  // playfield and ball, then P0/M0, then P1/M1; score ignored
      c1 = pf_bl;
      c2 = p0 & ~pf_bl;
      c3 = p1 & ~pf_bl & ~p0;
    } else {  // P0/M0 (and a score playfield's left half), P1/M1 (its right half), PF/BL
      const uint64_t score_pf = m[5][w] & score;
      c2 = p0 | (score_pf & left_half[w]);
      c3 = (p1 | (score_pf & ~left_half[w])) & ~c2;
      c1 = pf_bl & ~c2 & ~c3;
    }
    plane0[w] = c1 | c3;
    plane1[w] = c2 | c3;
  }
  plane0[3] = plane1[3] = 0;
}

// Draws `count` pixels of the current line starting at visible pixel x (same output and
// collisions as tia_draw_span_reference, object by object instead of pixel by pixel).
// `masks` (the memo of object masks, or null) serves the AVX2 path.
HS_HD inline void tia_draw_span(Tia& t, uint8_t* fb, int32_t x, int32_t count, TiaMasks* masks = nullptr) {
  uint8_t* out = fb + t.fb_pos;
  if (t.vblank & 0x02) {
    for (int32_t k = 0; k < count; ++k) out[k] = 0;
    return;
  }
  // Playfield: one bit per 4-pixel block.
  const bool reflect = t.pf_reflect_shape != 0;
  const bool any_movable = (t.grp_shown[0] | t.grp_shown[1]) != 0 ||
                           (t.enabled & (OBJ_M0 | OBJ_M1 | OBJ_BL)) != 0;
  const uint64_t blocks = t.pf ? playfield_blocks(t.pf, reflect) : 0;
  if (!any_movable) {  // background and playfield only: no collisions possible
    // ALE's playfield-only path colours a score-mode playfield by half even when the
    // priority bit is set (its general path would use COLUPF then).
    const bool score = (t.pf_prio_score & PF_SCORE) != 0;
    const uint8_t bk = t.color[0];
    if (blocks == 0) {
      for (int32_t k = 0; k < count; ++k) out[k] = bk;
      return;
    }
    const uint8_t pf_left = score ? t.color[2] : t.color[1], pf_right = score ? t.color[3] : t.color[1];
    fill_playfield(out, x, count, blocks, pf_left, pf_right, bk);
    return;
  }
#if HS_HOST_SIMD
  if (hs_simd_available()) {  // whole-line colour planes from the (memoized) object masks
    uint64_t plane0[4], plane1[4];
    tia_colour_planes(t, masks, plane0, plane1);
    tia_fill_colour_planes_avx2(out, x, count, plane0, plane1, t.color);
    tia_span_collisions(t, x, count, masks);
    return;
  }
#endif
  uint8_t e[SCREEN_WIDTH];
  tia_mark_objects(t, e, x, count, blocks);
  const int32_t left_end = 80 - x < count ? (80 - x > 0 ? 80 - x : 0) : count;
  // Branch-free per pixel: the colour from the priority table, and the set of object
  // combinations seen (collisions depend only on which combinations occur).
  const uint8_t prio = t.pf_prio_score;
  uint64_t seen = 0;
  for (int32_t k = 0; k < left_end; ++k) {
    const uint8_t v = e[k];
    seen |= 1ull << v;
    out[k] = t.color[kTiaColourPick[v | prio]];
  }
  for (int32_t k = left_end; k < count; ++k) {
    const uint8_t v = e[k];
    seen |= 1ull << v;
    out[k] = t.color[kTiaColourPick[256 + (v | prio)]];
  }
  uint16_t hits = 0;
  for (; seen != 0; seen &= seen - 1) hits |= kTiaCollisions[hs_lowest_bit(seen)];
  t.collisions |= hits;
}

// Whether the range [start, start + width) (mod 160; start 0-319) covers one of the
// pixels group .. group + 3 (group 0-156).
HS_HD HS_INLINE bool range_meets_group(int32_t group, int32_t start, int32_t width) {
  int32_t d = group - start;
  d += d < 0 ? 160 : 0;
  d += d < 0 ? 160 : 0;          // how far past the range's start the group starts, 0-159
  return d < width || d > 156;   // it starts inside the range, or reaches its start
}

// Whether object `bit`'s shape as ALE's masks hold it (graphics ignored: every pixel of
// each copy) covers one of the pixels group .. group + 3.
HS_HD HS_INLINE bool shape_meets_group(const Tia& t, uint8_t bit, int32_t group) {
  if (bit == OBJ_BL) return range_meets_group(group, t.shape_pos[2], 1 << t.shape_bl_size);
  const int32_t i = (bit == OBJ_P1 || bit == OBJ_M1) ? 1 : 0;
  int32_t mode, start, width, first = 0;
  if (bit == OBJ_P0 || bit == OBJ_P1) {
    mode = t.nusiz[i] & 7;
    start = t.pos[i];
    if (mode == 5 || mode == 7)  // one double / quad copy, one pixel late (player_bit)
      return !t.p_hide_first[i] && range_meets_group(group, start + 1, mode == 5 ? 16 : 32);
    width = 8;
    first = t.p_hide_first[i] ? 1 : 0;
  } else {
    if (i == 0 && t.m0_shape == M0_HIDDEN) return false;
    int32_t size = (t.shape_nusiz[i] >> 4) & 3;
    if (i == 0 && t.m0_shape == M0_STRETCHED) size |= 1;
    mode = t.shape_nusiz[i] & 7;
    start = t.shape_pos[i];
    width = 1 << size;
  }
  for (int32_t k = first; k < 3; ++k) {
    const int32_t offset = copy_offset(mode, k);
    if (offset < 0) break;
    if (range_meets_group(group, start + offset, width)) return true;
  }
  return false;
}

// ALE's renderer stores 4 pixels at a time on some paths and can write up to 3 pixels
// past the end of a span (to the next 4-pixel boundary). Those pixels are normally
// redrawn by the next span; they stay only when the frame stops there. This reproduces
// what ALE leaves in them: which path ALE takes depends on the enabled objects and the
// priority/score bits; the 4-pixel store happens when the last aligned group of the span
// is all playfield/background (for object paths: no object shape covers it).
HS_HD inline void tia_draw_overrun(Tia& t, uint8_t* fb, int32_t x, int32_t count) {
  const int32_t end = x + count;  // visible pixel after the span
  const int32_t group = end & ~3;
  if ((end & 3) == 0 || group < x || (t.vblank & 0x02)) return;
  const uint8_t objects = t.enabled & (OBJ_P0 | OBJ_M0 | OBJ_P1 | OBJ_M1 | OBJ_BL | OBJ_PF);
  const uint8_t key = (uint8_t)(objects | t.pf_prio_score);
  const uint8_t score = key & PF_SCORE;
  const bool pf_on = (t.pf & playfield_bit(t.pf_reflect_shape != 0, group)) != 0;
  auto group_clear = [&](uint8_t movable) HS_LAMBDA_INLINE -> bool {
    for (uint8_t bit = OBJ_P0; bit <= OBJ_BL; bit = (uint8_t)(bit << 1))
      if ((movable & bit) && shape_meets_group(t, bit, group)) return false;
    return true;
  };
  uint8_t colour;
  const uint8_t movable = objects & (uint8_t)~OBJ_PF;
  if (objects == 0) {
    return;  // plain background: ALE fills exactly
  } else if (objects == OBJ_PF) {
    colour = pf_on ? (score ? t.color[group < 80 ? 2 : 3] : t.color[1]) : t.color[0];
  } else {
    // The object paths ALE special-cases (others draw pixel by pixel, exactly).
    const bool has_pf = (objects & OBJ_PF) != 0;
    bool special = false;
    if (has_pf) {
      special = !score && (movable == OBJ_P0 || movable == OBJ_P1 || movable == OBJ_BL);
    } else {
      switch (movable) {
        case OBJ_P0: case OBJ_P1: case OBJ_P0 | OBJ_P1: case OBJ_M0: case OBJ_M1: case OBJ_BL:
        case OBJ_M0 | OBJ_M1: case OBJ_BL | OBJ_M0: case OBJ_BL | OBJ_M1: case OBJ_BL | OBJ_P1:
          special = true;
          break;
        default:
          break;
      }
    }
    if (!special || !group_clear(movable)) return;
    colour = ((objects & OBJ_PF) && pf_on) ? t.color[1] : t.color[0];
  }
  uint8_t* out = fb + t.fb_pos;  // fb_pos already points just past the span
  for (int32_t k = 0; k < group + 4 - end; ++k) out[k] = colour;
}

// End of a scanline: shapes that ALE re-derives once per line.
HS_HD inline void tia_line_done(Tia& t) {
  t.pf_reflect_shape = t.ctrlpf & 0x01;
  t.p_hide_first[0] = t.p_hide_first[1] = 0;
  if (t.cosmic_ark) {  // ALE's missile-0 star motion: a fixed 4-line pattern
    t.cosmic_counter = (t.cosmic_counter + 1) & 3;
    const int32_t step = t.cosmic_counter == 0 ? 18 : (t.cosmic_counter == 1 ? 33 : (t.cosmic_counter == 2 ? 0 : 17));
    int32_t p = t.pos[OB_M0] - step;
    if (p >= 160) p -= 160;
    else if (p < 0) p += 160;
    t.pos[OB_M0] = (int16_t)p;
    t.m0_shape = t.cosmic_counter == 1 ? M0_STRETCHED : (t.cosmic_counter == 2 ? M0_HIDDEN : M0_NORMAL);
    missile_shape_follows(t, 0);
  }
}

// Visible clocks of a line before position x (0-228).
HS_HD HS_INLINE int32_t visible_before(int32_t x) { return x > H_BLANK ? x - H_BLANK : 0; }

// tia_catch_up's loop in closed form, for a lazily drawn frame whose spans cannot set a
// latch (no open latches; they stay none, as only the Cosmic Ark lines change an object
// between lines): the same line counters, frame-buffer position, HMOVE-blank flag and
// end-of-line updates, without visiting the lines one by one. Most catch-ups of a lazily
// drawn frame are these (seaquest: about three in four).
HS_HD HS_INLINE void tia_skip_spans(Tia& t, int32_t clock) {
  const uint32_t from = (uint32_t)(H_CLOCKS - t.clocks_left_in_line);  // 0-228 (228: a line ended exactly)
  const uint32_t end = from + (uint32_t)(clock - t.drawn_until_clock);  // > from
  // The loop ends a line when clocks remain past its end, so the last line holds 1-228.
  const uint32_t lines_ended = (end - 1) / H_CLOCKS;
  const uint32_t end_in_line = end - H_CLOCKS * lines_ended;
  t.fb_pos += (int32_t)(SCREEN_WIDTH * lines_ended) + visible_before((int32_t)end_in_line) -
              visible_before((int32_t)from);
  // The loop lowers the flag in a span that starts before pixel 8 and reaches it: the
  // first line position H_BLANK + 8 after `from` lies inside the caught-up clocks.
  if (t.hmove_blank_pending && (from < H_BLANK + 8 ? H_BLANK + 8u : H_CLOCKS + H_BLANK + 8u) <= end)
    t.hmove_blank_pending = 0;
  t.drawn_until_clock = clock;
  t.clocks_left_in_line = H_CLOCKS - (int32_t)end_in_line;
  if (lines_ended != 0) tia_line_done(t);  // the same effect once or many times without Cosmic Ark
}

HS_HD void tia_catch_up_spans(Tia& t, uint8_t* fb, int32_t clock, TiaMasks* masks);

// Draws everything between the last update and `clock` (ALE's updateFrame).
HS_HD HS_INLINE void tia_catch_up(Tia& t, uint8_t* fb, int32_t clock, TiaMasks* masks = nullptr) {
  if (clock < t.display_start_clock || t.drawn_until_clock >= t.display_stop_clock ||
      t.drawn_until_clock >= clock)
    return;
  if (clock > t.display_stop_clock) clock = t.display_stop_clock;
  // Nothing to latch, and room for every span (a line's worth past all of them): no span
  // needs visiting.
  if (t.skip_pixels && !t.cosmic_ark && tia_open_latches(t) == 0 &&
      t.fb_pos + (clock - t.drawn_until_clock) + H_CLOCKS <= kFrameBytes) {
    tia_skip_spans(t, clock);
    return;
  }
  tia_catch_up_spans(t, fb, clock, masks);
}

// tia_catch_up line by line, span by span (`clock` inside the display, past drawn_until_clock).
HS_HD HS_NOINLINE void tia_catch_up_spans(Tia& t, uint8_t* fb, int32_t clock, TiaMasks* masks) {
  do {
    int32_t in_line = H_CLOCKS - t.clocks_left_in_line;
    int32_t todo;
    if (clock > t.drawn_until_clock + t.clocks_left_in_line) {
      todo = t.clocks_left_in_line;
      t.clocks_left_in_line = H_CLOCKS;
      t.drawn_until_clock += todo;
    } else {
      todo = clock - t.drawn_until_clock;
      t.clocks_left_in_line -= todo;
      t.drawn_until_clock = clock;
    }
    if (in_line < H_BLANK) {  // nothing to draw in horizontal blank
      int32_t skip = H_BLANK - in_line < todo ? H_BLANK - in_line : todo;
      in_line += skip;
      todo -= skip;
    }
    int32_t span_start = t.fb_pos;
    const bool room = t.fb_pos + H_CLOCKS <= kFrameBytes;  // false only for impossible windows
    if (!room) todo = 0;
    if (todo != 0) {
      if (t.skip_pixels) {
        tia_span_collisions(t, in_line - H_BLANK, todo, masks);
        t.fb_pos += todo;
      } else {
        tia_draw_span(t, fb, in_line - H_BLANK, todo, masks);
        t.fb_pos += todo;
        tia_draw_overrun(t, fb, in_line - H_BLANK, todo);
      }
    }
    // HMOVE blanks: ALE blacks out from this span's start to pixel 8 while the flag is
    // up; a span that reaches pixel 8 lowers it.
    if (t.hmove_blank_pending && in_line < H_BLANK + 8 && room) {
      int32_t blanks = H_BLANK + 8 - in_line;
      if (!t.skip_pixels)
        for (int32_t k = 0; k < blanks; ++k) fb[span_start + k] = 0;
      if (todo + in_line >= H_BLANK + 8) t.hmove_blank_pending = 0;
    }
    if (t.clocks_left_in_line == H_CLOCKS) tia_line_done(t);
  } while (t.drawn_until_clock < clock);
}

// ---- frame control ----

HS_HD inline void tia_set_display(Tia& t, int32_t ystart, int32_t height) {
  t.ystart = ystart;
  t.height = height;
}

// ALE's frameReset: clears both frame buffers and restarts drawing at `cycles`.
HS_HD inline void tia_frame_reset(Tia& t, uint8_t* fb_a, uint8_t* fb_b, uint32_t cycles) {
  for (int32_t k = 0; k < kFrameBytes; ++k) { fb_a[k] = 0; fb_b[k] = 0; }
  t.fb_pos = 0;
  t.frame_start_clock = (int32_t)(cycles * 3);
  t.display_start_clock = t.frame_start_clock + H_CLOCKS * t.ystart;
  t.display_stop_clock = t.display_start_clock + H_CLOCKS * t.height;
  t.drawn_until_clock = t.frame_start_clock;
  t.clocks_left_in_line = H_CLOCKS;
  t.vsync_end_clock = 0x7FFFFFFF;
  t.lines_last_frame = 0;
  t.lines_this_frame = 0;
}

// System reset (power-on state of the registers). `pal` selects PAL timing/colour loss.
HS_HD inline void tia_reset(Tia& t, uint8_t* fb_a, uint8_t* fb_b, uint32_t cycles, bool pal,
                            bool hmove_blanks) {
  t.enabled = 0;
  t.vsync = t.vblank = 0;
  t.nusiz[0] = t.nusiz[1] = 0;
  for (int k = 0; k < 4; ++k) t.color[k] = 0;
  t.pf_prio_score = 0;
  t.ctrlpf = 0;
  t.refp[0] = t.refp[1] = 0;
  t.pf = 0;
  t.grp[0] = t.grp[1] = t.grp_delayed[0] = t.grp_delayed[1] = 0;
  t.grp_shown[0] = t.grp_shown[1] = 0;
  t.enam[0] = t.enam[1] = 0;
  t.enabl = t.enabl_delayed = 0;
  for (int k = 0; k < 5; ++k) { t.hm[k] = 0; t.pos[k] = 0; }
  missile_shape_follows(t, 0);
  missile_shape_follows(t, 1);
  ball_shape_follows(t);
  t.vdel[0] = t.vdel[1] = t.vdel[2] = 0;
  t.resmp[0] = t.resmp[1] = 0;
  t.collisions = 0;
  t.p_hide_first[0] = t.p_hide_first[1] = 0;
  t.pf_reflect_shape = 0;
  t.m0_shape = M0_NORMAL;
  t.last_hmove_clock = 0;
  t.last_access_clock = (int32_t)(cycles * 3);
  t.hmove_blank_pending = 0;
  t.cosmic_ark = 0;
  t.cosmic_counter = 0;
  t.dump_active = 0;
  t.dump_released_cycle = 0;
  t.hmove_blanks_allowed = hmove_blanks ? 1 : 0;
  t.colour_loss = pal ? 1 : 0;
  t.max_lines = pal ? 342 : 290;
  t.skip_pixels = 0;
  t.pad_[0] = t.pad_[1] = 0;
  tia_frame_reset(t, fb_a, fb_b, cycles);
}

HS_HD inline void tia_power_on(Tia& t) {
  // Fields the reset does not touch start as ALE's constructor leaves them.
  t.partial_frame = 0;
  t.frame_greyed = 0;
  t.ystart = 34;
  t.height = 210;
}

// The system counter is about to return to zero: keep remembered clocks relative.
HS_HD inline void tia_cycles_rebased(Tia& t, uint32_t cycles) {
  t.dump_released_cycle = (int32_t)((uint32_t)t.dump_released_cycle - cycles);
  int32_t clocks = (int32_t)(cycles * 3);
  t.frame_start_clock -= clocks;
  t.display_start_clock -= clocks;
  t.display_stop_clock -= clocks;
  t.drawn_until_clock -= clocks;
  t.vsync_end_clock = (int32_t)((uint32_t)t.vsync_end_clock - (uint32_t)clocks);
  t.last_hmove_clock = (int32_t)((uint32_t)t.last_hmove_clock - (uint32_t)clocks);
  t.last_access_clock -= clocks;
}

// Clock position within the current line (ALE measures from the frame's start).
HS_HD HS_INLINE int32_t tia_line_clock(const Tia& t, int32_t clock) {
  return (clock - t.frame_start_clock) % H_CLOCKS;
}

// ---- registers ----

HS_HD HS_INLINE void set_enabled(Tia& t, uint8_t bit, bool on) {
  if (on) t.enabled |= bit; else t.enabled &= (uint8_t)~bit;
}

HS_HD HS_INLINE void refresh_player(Tia& t, int32_t p) {
  uint8_t g = t.vdel[p] ? t.grp_delayed[p] : t.grp[p];
  t.grp_shown[p] = t.refp[p] ? reverse_bits(g) : g;
  set_enabled(t, p ? OBJ_P1 : OBJ_P0, t.grp_shown[p] != 0);
}

HS_HD HS_INLINE void refresh_ball(Tia& t) {
  set_enabled(t, OBJ_BL, (t.vdel[2] ? t.enabl_delayed : t.enabl) != 0);
}

HS_HD HS_INLINE uint8_t tia_colour(const Tia& t, uint8_t value) {
  uint8_t c = value & 0xFE;
  if (t.colour_loss && (t.lines_last_frame & 1)) c |= 0x01;  // PAL colour loss (ALE)
  return c;
}

// Where RESPx puts a player relative to its old copies: 1 inside a drawn copy, -1 in
// the 4 clocks before a copy, 0 elsewhere (ALE's rule).
HS_HD inline int32_t resp_when(int32_t mode, int32_t old_x, int32_t new_x) {
  int32_t u = new_x - old_x;
  if (u < 0) u += 160;
  if (mode == 5 || mode == 7) {
    if (u < 4) return -1;
    return u < 4 + (mode == 5 ? 16 : 32) ? 1 : 0;
  }
  for (int32_t k = 0; k < 3; ++k) {
    int32_t start = copy_offset(mode, k);
    if (start < 0) break;
    if (u >= start && u < start + 4) return -1;
    if (u >= start + 4 && u < start + 12) return 1;
  }
  return 0;
}

// A position moved less than a screen width either way, back into 0-159 (branch-free:
// HMOVE moves five objects on most lines).
HS_HD HS_INLINE int16_t wrap_position(int32_t p) {
  p += p < 0 ? 160 : 0;
  p -= p >= 160 ? 160 : 0;
  return (int16_t)p;
}

// Paddle and fire inputs as the ports present them to the TIA this frame.
struct TiaInputs {
  int32_t resistance[4];  // INPT0-3: 0 = charged at once, 0x7FFFFFFF = never
  uint8_t fire[2];        // INPT4/5 bit 7 (1 = button up)
  uint8_t pad_[2];
};

HS_HD inline uint8_t tia_peek(Tia& t, uint8_t* fb, uint16_t addr, uint32_t cycles, uint8_t data_bus,
                              const TiaInputs& in, TiaMasks* masks = nullptr) {
  // ALE draws up to every TIA access. Only collision reads depend on the picture, so other
  // reads just remember the clock (the drawing is the same whenever it is done).
  if ((addr & 0x0F) < 0x08) tia_catch_up(t, fb, (int32_t)(cycles * 3), masks);
  else t.last_access_clock = (int32_t)(cycles * 3);
  uint8_t noise = data_bus & 0x3F;  // undriven bits keep the last bus value
  uint16_t c = t.collisions;
  auto pair = [c, noise](uint16_t hi, uint16_t lo) -> uint8_t {
    return (uint8_t)(((c & hi) ? 0x80 : 0) | ((c & lo) ? 0x40 : 0) | noise);
  };
  switch (addr & 0x0F) {
    case 0x0: return pair(0x0001, 0x0002);  // CXM0P
    case 0x1: return pair(0x0004, 0x0008);  // CXM1P
    case 0x2: return pair(0x0010, 0x0020);  // CXP0FB
    case 0x3: return pair(0x0040, 0x0080);  // CXP1FB
    case 0x4: return pair(0x0100, 0x0200);  // CXM0FB
    case 0x5: return pair(0x0400, 0x0800);  // CXM1FB
    case 0x6: return pair(0x1000, 0x0000);  // CXBLPF
    case 0x7: return pair(0x2000, 0x4000);  // CXPPMM
    case 0x8: case 0x9: case 0xA: case 0xB: {  // INPT0-3: paddle capacitor charged?
      int32_t r = in.resistance[addr & 0x03];
      if (r == 0) return (uint8_t)(0x80 | noise);
      if (r == 0x7FFFFFFF || t.dump_active) return noise;
      // ALE's RC model: t = 1.6 * R * 0.01uF, in CPU cycles at 1.19 MHz.
      double seconds = (1.6 * r * 0.01E-6);
      uint32_t needed = (uint32_t)(seconds * 1.19E6);
      return cycles > (uint32_t)t.dump_released_cycle + needed ? (uint8_t)(0x80 | noise) : noise;
    }
    case 0xC: return in.fire[0] ? (uint8_t)(0x80 | noise) : noise;  // INPT4
    case 0xD: return in.fire[1] ? (uint8_t)(0x80 | noise) : noise;  // INPT5
    default: return noise;
  }
}

// What a TIA write asks of the rest of the console.
struct TiaPokeResult {
  uint32_t extra_cycles;  // WSYNC
  uint8_t stop;           // end the CPU's run (frame finished or runaway)
};

// Write delays in colour clocks (ALE): NUSIZx and RESMx 8, VBLANK/REFPx/GRPx 1; PFx
// depend on the position within the 4-clock playfield block.
HS_HD HS_INLINE int32_t tia_write_delay(uint32_t reg, int32_t since_frame_start) {
  switch (reg) {
    case 0x01: case 0x0B: case 0x0C: case 0x1B: case 0x1C: return 1;
    case 0x04: case 0x05: case 0x12: case 0x13: return 8;
    case 0x0D: case 0x0E: case 0x0F: {
      const int32_t k = ((since_frame_start % H_CLOCKS) / 3) & 3;
      return k == 0 ? 4 : (k == 1 ? 5 : (k == 2 ? 2 : 3));
    }
    default: return 0;
  }
}

// Whether writing `value` to register `reg` leaves every input of the collision masks as
// it was: the shown graphics and enable bits, the playfield, the ball's size and the
// playfield's reflection. Most kernels rewrite these registers on every line, often with
// the same values, or write a vertically delayed copy that is not shown yet. Such a write,
// like an invisible one, lets a lazily drawn frame defer its catch-up: the deferred spans
// see the same collision state. (The register itself is still written.)
HS_HD HS_INLINE bool tia_write_changes_nothing(const Tia& t, uint32_t reg, uint8_t value) {
  // Bitwise tests, not && and ||: the outcomes vary from line to line, so branches on
  // them would be mispredicted.
  switch (reg) {
    case 0x0A:  // CTRLPF: priority and score only colour pixels; reflection and ball size count
      return ((((value ^ t.ctrlpf) & 0x01) | ((value & 0x01) ^ t.pf_reflect_shape) |
               (((value >> 4) & 3) ^ t.shape_bl_size) | (t.shape_pos[2] ^ t.pos[OB_BL])) == 0);
    case 0x0D: return ((value >> 4) & 0x0Fu) == (t.pf & 0x0Fu);  // PF0
    case 0x0E: return (uint32_t)value == ((t.pf >> 4) & 0xFFu);  // PF1
    case 0x0F: return (uint32_t)value == ((t.pf >> 12) & 0xFFu); // PF2
    // GRP0 shows P0's new byte unless delayed, and P1's current byte from now on (its
    // delayed copy takes it); GRP1 likewise, and the ball's current enable bit.
    case 0x1B: return ((t.vdel[0] | (t.grp[0] == value)) & ((t.vdel[1] ^ 1) | (t.grp_delayed[1] == t.grp[1]))) != 0;
    case 0x1C:
      return ((t.vdel[1] | (t.grp[1] == value)) & ((t.vdel[0] ^ 1) | (t.grp_delayed[0] == t.grp[0])) &
              ((t.vdel[2] ^ 1) | (t.enabl_delayed == t.enabl))) != 0;
    case 0x1D: return (t.resmp[0] | (t.enam[0] == (value & 0x02))) != 0;  // ENAM0 (a missile locked to its player stays off)
    case 0x1E: return (t.resmp[1] | (t.enam[1] == (value & 0x02))) != 0;  // ENAM1
    case 0x1F: return (t.vdel[2] | (t.enabl == (value & 0x02))) != 0;     // ENABL (shown delayed: the copy is unchanged)
    default: return false;
  }
}

// tia_write_changes_nothing for a drawn frame: the write must also keep every pixel's
// colour (the colour registers, CTRLPF's priority and score bits). Same-value rewrites and
// vertically delayed graphics are common, and a drawn frame's deferred spans draw the same
// pixels: a span and the next one on its line, drawn as one, colour the same pixels, and
// the next one redraws the pixels past the first one's end (tia_draw_overrun).
HS_HD HS_INLINE bool tia_write_changes_no_pixel(const Tia& t, uint32_t reg, uint8_t value) {
  switch (reg) {
    case 0x06: return tia_colour(t, value) == t.color[2];  // COLUP0
    case 0x07: return tia_colour(t, value) == t.color[3];  // COLUP1
    case 0x08: return tia_colour(t, value) == t.color[1];  // COLUPF
    case 0x09: return tia_colour(t, value) == t.color[0];  // COLUBK
    case 0x0A:  // CTRLPF
      return ((((value & 0x06) << 5) ^ t.pf_prio_score) == 0) & tia_write_changes_nothing(t, reg, value);
    default: return tia_write_changes_nothing(t, reg, value);
  }
}

// A frame that runs past the scanline limit ends at the next TIA write.
HS_HD HS_INLINE bool tia_runaway(const Tia& t, int32_t since_frame_start) {
  return since_frame_start >= (t.max_lines + 1) * H_CLOCKS;
}

// CPU cycles that a WSYNC written at `cycles` halts the CPU for (to the next line).
HS_HD HS_INLINE uint32_t tia_wsync_cycles(const Tia& t, uint32_t cycles) {
  const uint32_t since = cycles - (uint32_t)(t.frame_start_clock / 3);
  const uint32_t left = 76 - since % 76;
  return left < 76 ? left : 0;
}

// A WSYNC write as tia_poke does it, for the bus to handle the commonest TIA write
// inline: false when it needs tia_poke (the frame ran past its scanline limit).
HS_HD HS_INLINE bool tia_wsync(Tia& t, uint32_t cycles, bool last_access_was_read, uint32_t& extra_cycles) {
  const int32_t clock = (int32_t)(cycles * 3);
  if (tia_runaway(t, clock - t.frame_start_clock)) return false;
  t.last_access_clock = clock;  // nothing drawn changes: the next access draws (tia_poke)
  extra_cycles = last_access_was_read ? tia_wsync_cycles(t, cycles) : 0;
  return true;
}

// Inlined into its one caller (console_poke_device, out of line itself).
HS_HD HS_INLINE TiaPokeResult tia_poke(Tia& t, uint8_t* fb, uint16_t addr, uint8_t value,
                                       uint32_t cycles, bool last_access_was_read,
                                       TiaMasks* masks = nullptr) {
  TiaPokeResult res;
  res.extra_cycles = 0;
  res.stop = 0;
  const uint32_t reg = addr & 0x3F;
  const int32_t clock = (int32_t)(cycles * 3);
  const int32_t since_frame_start = clock - t.frame_start_clock;  // never negative
  // The clock within the line (tia_line_clock) is computed only by the registers that need it.
  const bool runaway = tia_runaway(t, since_frame_start);
  // Writes that change nothing drawn (WSYNC, RSYNC, audio, motion registers, HMCLR)
  // defer ALE's catch-up drawing; the next access draws the same pixels. Without pixels
  // (a lazily drawn frame) the colour registers (COLUP0-COLUBK) change nothing either.
  const uint64_t kInvisible = (1ull << 0x02) | (1ull << 0x03) | (0x3Full << 0x15) | (0x1Full << 0x20) |
                              (1ull << 0x2B);
  const uint64_t kColours = 0xFull << 0x06;
  const bool invisible = (((t.skip_pixels ? kInvisible | kColours : kInvisible) >> reg) & 1) != 0 ||
                         (t.skip_pixels ? tia_write_changes_nothing(t, reg, value)
                                        : tia_write_changes_no_pixel(t, reg, value));
  if (invisible && !runaway) t.last_access_clock = clock;
  else tia_catch_up(t, fb, clock + tia_write_delay(reg, since_frame_start), masks);
  if (runaway) {
    res.stop = 1;
    t.partial_frame = 0;
  }

  switch (reg) {
    case 0x00:  // VSYNC
      t.vsync = value;
      if (value & 0x02) {
        t.vsync_end_clock = clock + H_CLOCKS;  // ALE accepts one line of VSYNC
      } else if (clock >= t.vsync_end_clock) {
        t.vsync_end_clock = 0x7FFFFFFF;
        res.stop = 1;
        t.partial_frame = 0;
      }
      break;
    case 0x01:  // VBLANK
      if (!(t.vblank & 0x80) && (value & 0x80)) t.dump_active = 1;
      if ((t.vblank & 0x80) && !(value & 0x80)) {
        t.dump_active = 0;
        t.dump_released_cycle = (int32_t)cycles;
      }
      t.vblank = value;
      break;
    case 0x02:  // WSYNC: the CPU halts only on a read cycle (ALE)
      if (last_access_was_read) res.extra_cycles = tia_wsync_cycles(t, cycles);
      break;
    case 0x04: case 0x05: {  // NUSIZ0/1
      int32_t p = reg - 0x04;
      t.nusiz[p] = value;
      t.p_hide_first[p] = 0;
      if (p == 0) t.m0_shape = M0_NORMAL;
      missile_shape_follows(t, p);
      break;
    }
    case 0x06: t.color[2] = tia_colour(t, value); break;  // COLUP0
    case 0x07: t.color[3] = tia_colour(t, value); break;  // COLUP1
    case 0x08: t.color[1] = tia_colour(t, value); break;  // COLUPF
    case 0x09: t.color[0] = tia_colour(t, value); break;  // COLUBK
    case 0x0A:  // CTRLPF
      t.ctrlpf = value;
      t.pf_prio_score = (uint8_t)((value & 0x06) << 5);
      if (tia_line_clock(t, clock) < H_BLANK + 79) t.pf_reflect_shape = value & 0x01;
      ball_shape_follows(t);
      break;
    case 0x0B: case 0x0C: {  // REFP0/1
      int32_t p = reg - 0x0B;
      uint8_t on = (value & 0x08) ? 1 : 0;
      if (on != t.refp[p]) {
        t.refp[p] = on;
        t.grp_shown[p] = reverse_bits(t.grp_shown[p]);
      }
      break;
    }
    case 0x0D: t.pf = (t.pf & 0xFFFF0u) | ((value >> 4) & 0x0Fu); set_enabled(t, OBJ_PF, t.pf != 0); break;
    case 0x0E: t.pf = (t.pf & 0xFF00Fu) | ((uint32_t)value << 4); set_enabled(t, OBJ_PF, t.pf != 0); break;
    case 0x0F: t.pf = (t.pf & 0x00FFFu) | ((uint32_t)value << 12); set_enabled(t, OBJ_PF, t.pf != 0); break;
    case 0x10: case 0x11: {  // RESP0/1
      int32_t p = reg - 0x10;
      const int32_t line_clock = tia_line_clock(t, clock);
      int32_t new_x = line_clock < H_BLANK ? 3 : ((line_clock - H_BLANK) + 5) % 160;
      int32_t when = resp_when(t.nusiz[p] & 7, t.pos[p], new_x);
      if (when == 1) tia_catch_up(t, fb, clock + 11, masks);  // finish the copy being drawn
      t.pos[p] = (int16_t)new_x;
      t.p_hide_first[p] = when == -1 ? 0 : 1;
      break;
    }
    case 0x12: case 0x13: {  // RESM0/1
      int32_t m = reg - 0x12;
      const int32_t line_clock = tia_line_clock(t, clock);
      int32_t x = line_clock < H_BLANK ? 2 : ((line_clock - H_BLANK) + 4) % 160;
      // ALE's game-specific fixes for a RESMx just after HMOVE (Dolphin, Pitfall II).
      if (m == 0 && clock - t.last_hmove_clock == 20 * 3 && line_clock == 69) x = 8;
      if (m == 1 && clock - t.last_hmove_clock == 3 * 3 && line_clock == 18) x = 3;
      t.pos[OB_M0 + m] = (int16_t)x;
      if (m == 0) t.m0_shape = M0_NORMAL;
      missile_shape_follows(t, m);
      break;
    }
    case 0x14: {  // RESBL
      const int32_t line_clock = tia_line_clock(t, clock);
      int32_t x = line_clock < H_BLANK ? 2 : ((line_clock - H_BLANK) + 4) % 160;
      int32_t since = clock - t.last_hmove_clock;
      // ALE's fixes for RESBL just after HMOVE (Mindmaster, Decathlon, Robot Tank, Hole Hunter).
      if (since == 18 * 3 && (line_clock == 60 || line_clock == 69)) x = 10;
      else if (since == 3 * 3 && line_clock == 18) x = 3;
      else if (since == 7 * 3 && line_clock == 30) x = 6;
      else if (since == 6 * 3 && line_clock == 27) x = 5;
      t.pos[OB_BL] = (int16_t)x;
      ball_shape_follows(t);
      break;
    }
    case 0x1B: case 0x1C: {  // GRP0/1: each write latches the other player's delayed copy
      int32_t p = reg - 0x1B;
      t.grp[p] = value;
      t.grp_delayed[1 - p] = t.grp[1 - p];
      if (p == 1) t.enabl_delayed = t.enabl;
      refresh_player(t, 0);
      refresh_player(t, 1);
      if (p == 1) refresh_ball(t);
      break;
    }
    case 0x15: case 0x16: case 0x17: case 0x18: case 0x19: case 0x1A:  // AUDC0-AUDV1
      HS_TIA_AUDIO_WRITE(reg, value);  // queued for an emulator making sound (tia_sound.h)
      break;
    case 0x1D: case 0x1E: {  // ENAM0/1
      int32_t m = reg - 0x1D;
      t.enam[m] = value & 0x02;
      set_enabled(t, m ? OBJ_M1 : OBJ_M0, t.enam[m] && !t.resmp[m]);
      break;
    }
    case 0x1F: t.enabl = value & 0x02; refresh_ball(t); break;  // ENABL
    case 0x20: t.hm[OB_P0] = (int8_t)(value >> 4); break;
    case 0x21: t.hm[OB_P1] = (int8_t)(value >> 4); break;
    case 0x22: {  // HMM0; ALE turns on its Cosmic Ark star effect for one exact sequence
      int8_t nibble = (int8_t)(value >> 4);
      if (clock == t.last_hmove_clock + 21 * 3 && t.hm[OB_M0] == 7 && nibble == 6) {
        t.cosmic_ark = 1;
        t.cosmic_counter = 0;
      }
      t.hm[OB_M0] = nibble;
      break;
    }
    case 0x23: t.hm[OB_M1] = (int8_t)(value >> 4); break;
    case 0x24: t.hm[OB_BL] = (int8_t)(value >> 4); break;
    case 0x25: case 0x26: {  // VDELP0/1
      int32_t p = reg - 0x25;
      t.vdel[p] = value & 0x01;
      refresh_player(t, p);
      break;
    }
    case 0x27: t.vdel[2] = value & 0x01; refresh_ball(t); break;  // VDELBL
    case 0x28: case 0x29: {  // RESMP0/1: releasing centres the missile on its player
      int32_t m = reg - 0x28;
      if (t.resmp[m] && !(value & 0x02)) {
        int32_t mode = t.nusiz[m] & 7;
        int32_t middle = mode == 5 ? 8 : (mode == 7 ? 16 : 4);
        t.pos[OB_M0 + m] = (int16_t)((t.pos[m] + middle) % 160);
        if (m == 0) t.m0_shape = M0_NORMAL;
        missile_shape_follows(t, m);
      }
      t.resmp[m] = value & 0x02;
      set_enabled(t, m ? OBJ_M1 : OBJ_M0, t.enam[m] && !t.resmp[m]);
      break;
    }
    case 0x2A: {  // HMOVE
      int32_t cpu_cycle = tia_line_clock(t, clock) / 3;
      if (t.hmove_blanks_allowed && (cpu_cycle <= 20 || cpu_cycle == 75)) t.hmove_blank_pending = 1;
      const HmoveClamp rule = tia_hmove_clamp(cpu_cycle);
      for (int32_t k = 0; k < 5; ++k) t.pos[k] = wrap_position(t.pos[k] + tia_hmove_motion(rule, t.hm[k]));
      t.p_hide_first[0] = t.p_hide_first[1] = 0;
      t.m0_shape = M0_NORMAL;
      missile_shape_follows(t, 0);
      missile_shape_follows(t, 1);
      ball_shape_follows(t);
      t.last_hmove_clock = clock;
      t.cosmic_ark = 0;
      break;
    }
    case 0x2B: for (int32_t k = 0; k < 5; ++k) t.hm[k] = 0; break;  // HMCLR
    case 0x2C: t.collisions = 0; break;                            // CXCLR
    default: break;  // RSYNC (ignored by ALE)
  }
  return res;
}

// Frame start (ALE's startFrame). Returns the colour-clock offset into the line, which
// the console uses to rebase the system counter; `fb` is the buffer now drawn into.
HS_HD inline void tia_start_frame(Tia& t, uint32_t cycles_before_rebase) {
  int32_t clocks = (int32_t)(((cycles_before_rebase * 3) - (uint32_t)t.frame_start_clock) % H_CLOCKS);
  tia_cycles_rebased(t, cycles_before_rebase);
  t.frame_start_clock = -clocks;
  t.display_start_clock = t.frame_start_clock + H_CLOCKS * t.ystart;
  t.display_stop_clock = t.display_start_clock + H_CLOCKS * t.height;
  t.drawn_until_clock = t.display_start_clock;
  t.clocks_left_in_line = H_CLOCKS;
  t.fb_pos = 0;
  if (t.colour_loss) {
    for (int k = 0; k < 4; ++k) {
      if (t.lines_last_frame & 1) t.color[k] |= 0x01;
      else t.color[k] &= 0xFE;
    }
  }
  t.frame_greyed = 0;
}

// After the CPU ran: count lines; a frame that never reached VSYNC is shown greyed.
HS_HD inline void tia_finish_frame(Tia& t, uint8_t* fb, uint32_t cycles) {
  tia_catch_up(t, fb, t.last_access_clock);  // drawing deferred by the last accesses
  uint32_t total = cycles * 3 - (uint32_t)t.frame_start_clock;
  t.lines_this_frame = (int32_t)(total / H_CLOCKS);
  if (t.partial_frame) {
    if (!t.frame_greyed && !t.skip_pixels) {
      uint32_t first = (uint32_t)t.lines_this_frame;
      if (first < (uint32_t)t.ystart) first = (uint32_t)t.ystart;
      for (uint32_t row = first; row < (uint32_t)(t.height + t.ystart); ++row) {
        uint8_t* line = fb + (row - (uint32_t)t.ystart) * SCREEN_WIDTH;
        for (int32_t x = 0; x < SCREEN_WIDTH; ++x) line[x] = (uint8_t)((line[x] & 0x0F) >> 1);
      }
    }
    t.frame_greyed = 1;
  } else {
    t.lines_last_frame = t.lines_this_frame;
    t.frame_greyed = 0;
  }
}

}  // namespace hs
