// tia_sound.h: the TIA's two sound channels as ALE's sound observation produces them
// (ale-py 0.12.1, `sound_obs`; ALE's SoundRaw and Stella 1.4's TIASound, read for the facts).
//
// What ALE does, and so what this does:
// - A CPU write to AUDC0/1, AUDF0/1 or AUDV0/1 is queued, not heard: the queue is applied
//   in order (so the last value of each register counts) when the samples of an act() are
//   made, once per act() after its last frame (ALE's processAudio, on the frame_skip-th
//   frame). Writes during reset_game wait for the next act().
// - Each act() then makes 512 samples (31,400 Hz TIA sound clock / 60 Hz, rounded:
//   SoundRaw::SamplesPerFrame) from the registers as they stand, one sound clock a sample:
//   ALE's output and TIA rates are both 31,400, so the resampler never skips or repeats.
// - Per sound clock each channel's frequency divider counts to AUDF; on its pulse the
//   channel's 4-bit and 5-bit shift registers advance as AUDC's mode says. A sample is
//   128 + 4 AUDV0 (if bit 3 of channel 0's 4-bit register is set) + 4 AUDV1 (likewise).
// - Nothing else touches it: ALE never initializes its SoundRaw, and so its reset (at
//   reset_game), save and load do nothing (a state saves six zeros instead of the
//   registers). The channels start at loadROM (a new sound object) and go on through
//   reset_game and restoreState; writes queued before those are applied all the same.
//
// Host only: the vector engine and the GPU never make sound. The TIA records audio writes,
// and env_act makes the samples, through tia_sound_recorder, a thread-local pointer that an
// emulator making sound sets around its own emulation. The hooks exist only in builds that
// define HS_TIA_SOUND_HOOKS (setup.py: hybridsim._console); elsewhere, and on the GPU,
// they are no-ops (a thread-local lookup in a shared object is a call: 2% of Breakout's
// frame rate when every audio write and act made one).
#pragma once

#include "hs_prelude.h"

namespace hs {

constexpr int32_t kSoundSamplesPerAct = 512;
constexpr int32_t kSoundRegisters = 6;  // AUDC0, AUDC1, AUDF0, AUDF1, AUDV0, AUDV1 ($15-$1A)

struct TiaSound {
  uint8_t reg[kSoundRegisters];      // as the channels use them (masked: 4, 4, 5, 5, 4, 4 bits)
  uint8_t written[kSoundRegisters];  // queued writes: the last value of each register
  uint8_t written_mask;              // bit k: register k was written since the last samples
  uint8_t poly4[2];                  // 4-bit shift registers (ALE keeps 8 bits; bit 3 is heard)
  uint8_t poly5[2];                  // 5-bit shift registers (8 bits kept; bits 0-5 used)
  uint8_t divider[2];                // frequency divider counts, 0..AUDF
  uint8_t samples[kSoundSamplesPerAct];  // the last act()'s (zeros before the first, as ALE's)
};

HS_HD inline void tia_sound_reset(TiaSound& s) {
  for (int32_t k = 0; k < kSoundSamplesPerAct; ++k) s.samples[k] = 0;
  for (int32_t k = 0; k < kSoundRegisters; ++k) s.reg[k] = s.written[k] = 0;
  s.written_mask = 0;
  for (int32_t c = 0; c < 2; ++c) {
    s.poly4[c] = s.poly5[c] = 1;
    s.divider[c] = 0;
  }
}

// A CPU write to TIA register $15 + k (k < 6), queued.
HS_HD inline void tia_sound_write(TiaSound& s, uint32_t k, uint8_t value) {
  const uint8_t bits = (k == 2 || k == 3) ? 0x1F : 0x0F;  // AUDF: 5 bits, AUDC and AUDV: 4
  s.written[k] = (uint8_t)(value & bits);
  s.written_mask = (uint8_t)(s.written_mask | (1u << k));
}

// ---- one sound clock of a channel ----

// The 4-bit register as a maximal-length LFSR (taps at bits 3 and 2); an all-zero low
// nibble restarts it at 1.
HS_HD HS_INLINE uint8_t sound_lfsr4(uint8_t p) {
  if ((p & 0x0F) == 0) return 1;
  return (uint8_t)((p << 1) | (((p >> 3) ^ (p >> 2)) & 1));
}
// The 5-bit register likewise (taps at bits 4 and 2).
HS_HD HS_INLINE uint8_t sound_lfsr5(uint8_t p) {
  if ((p & 0x1F) == 0) return 1;
  return (uint8_t)((p << 1) | (((p >> 4) ^ (p >> 2)) & 1));
}
// Divide by 2: shift in the complement of bit 0.
HS_HD HS_INLINE uint8_t sound_toggle(uint8_t p) { return (uint8_t)((p << 1) | (~p & 1)); }
// Divide by 6 (000111...): shift the complement left and bring in a 1 exactly when bit 2
// is clear and one of bits 0-1 is set.
HS_HD HS_INLINE uint8_t sound_div6(uint8_t p) {
  const uint8_t in = ((p & 4) == 0 && (p & 3) != 0) ? 1 : 0;
  return (uint8_t)((uint8_t)(~p << 1) | in);
}

// The AUDC modes: what the 4-bit register does on a divider pulse. Modes that pass through
// the 5-bit register advance it first, then clock the 4-bit stage only when it says so:
// "div 31" modes when its low nibble reads 8 (13:18 duty), "poly 5" modes when bit 4 is set.
HS_HD inline void sound_pulse(uint8_t mode, uint8_t& p4, uint8_t& p5) {
  switch (mode) {
    case 0x0: case 0xB: p4 = (uint8_t)((p4 << 1) | 1); return;  // constant high
    case 0x1: p4 = sound_lfsr4(p4); return;
    case 0x4: case 0x5: p4 = sound_toggle(p4); return;
    case 0xC: case 0xD: p4 = sound_div6(p4); return;
    case 0x8: {  // 9-bit LFSR across both registers (taps: 4-bit bit 3, 5-bit bit 4)
      const bool running = (p5 & 0x1F) != 0 || (p4 & 0x0F) != 0;
      p5 = running ? (uint8_t)((p5 << 1) | (((p4 >> 3) ^ (p5 >> 4)) & 1)) : (uint8_t)1;
      p4 = (uint8_t)((p4 << 1) | ((p5 >> 5) & 1));
      return;
    }
    default: break;
  }
  p5 = sound_lfsr5(p5);
  const bool div31 = (p5 & 0x0F) == 0x08, poly5 = (p5 & 0x10) != 0;
  switch (mode) {
    case 0x2: if (div31) p4 = sound_lfsr4(p4); return;
    case 0x3: if (poly5) p4 = sound_lfsr4(p4); return;
    case 0x6: if (div31) p4 = sound_toggle(p4); return;
    case 0x7: if (poly5) p4 = sound_toggle(p4); return;
    case 0x9: p4 = (uint8_t)((p4 << 1) | ((p5 >> 5) & 1)); return;  // the 5-bit output, delayed
    case 0xA: if (div31) p4 = (uint8_t)((p4 << 1) | ((p5 >> 4) & 1)); return;
    case 0xE: if (div31) p4 = sound_div6(p4); return;
    default: if (poly5) p4 = sound_div6(p4); return;  // 0xF
  }
}

// One act()'s samples into s.samples: the queued writes applied, then a sound clock a sample.
HS_HD inline void tia_sound_make_samples(TiaSound& s) {
  for (int32_t k = 0; k < kSoundRegisters; ++k)
    if (s.written_mask & (1u << k)) s.reg[k] = s.written[k];
  s.written_mask = 0;
  const int32_t volume[2] = {s.reg[4] * 4, s.reg[5] * 4};
  for (int32_t i = 0; i < kSoundSamplesPerAct; ++i) {
    int32_t sample = 128;
    for (int32_t c = 0; c < 2; ++c) {
      if (++s.divider[c] > s.reg[2 + c]) {
        s.divider[c] = 0;
        sound_pulse(s.reg[c], s.poly4[c], s.poly5[c]);
      }
      if (s.poly4[c] & 8) sample += volume[c];
    }
    s.samples[i] = (uint8_t)sample;
  }
}

}  // namespace hs

#if HS_GPU || !defined(HS_TIA_SOUND_HOOKS)
#define HS_TIA_AUDIO_WRITE(reg, value) ((void)0)
#define HS_TIA_AUDIO_ACT_END() ((void)0)
namespace hs {
struct SoundRecorderPause {};
}  // namespace hs
#else
namespace hs {
// The sound of the emulator now running on this thread, or null (no sound made).
inline thread_local TiaSound* tia_sound_recorder = nullptr;
// No recording while it lives: a frame emulated again only to draw its pixels (console.h,
// FrameReplay) was heard when it first ran.
struct SoundRecorderPause {
  TiaSound* saved;
  SoundRecorderPause() : saved(tia_sound_recorder) { tia_sound_recorder = nullptr; }
  ~SoundRecorderPause() { tia_sound_recorder = saved; }
  SoundRecorderPause(const SoundRecorderPause&) = delete;
  SoundRecorderPause& operator=(const SoundRecorderPause&) = delete;
};
}  // namespace hs
#define HS_TIA_AUDIO_WRITE(reg, value)                                                   \
  do {                                                                                   \
    if (::hs::TiaSound* recorder_ = ::hs::tia_sound_recorder)                            \
      ::hs::tia_sound_write(*recorder_, (uint32_t)(reg) - 0x15u, (uint8_t)(value));      \
  } while (0)
// The end of an act() (env_act, also those inside reset_game's mode selection for Berzerk,
// Adventure, Double Dunk and Video Cube, whose ALE settings call act()): its samples.
#define HS_TIA_AUDIO_ACT_END()                                                            \
  do {                                                                                   \
    if (::hs::TiaSound* recorder_ = ::hs::tia_sound_recorder)                            \
      ::hs::tia_sound_make_samples(*recorder_);                                          \
  } while (0)
#endif
