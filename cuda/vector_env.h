// vector_env.h: one environment of ale-py 0.12.1's AtariVectorEnv (its C++
// PreprocessedEnv and the per-environment part of EnvVectorizer) over the ALE layer of
// ale_env.h: an agent step is frame_skip ALE frames, the last two kept (grayscale or RGB)
// for a max-pool, resized as cv2.resize(INTER_AREA) does (preprocess.h) into a ring of
// stack_num frames; noop starts from a per-environment std::mt19937, FIRE on reset,
// episodic life / life-loss termination, reward clipping, a frame limit per episode, and
// the NEXT_STEP / SAME_STEP autoreset of one environment.
//
// Contract: compiles under g++, nvcc and NVRTC (only ale_env.h, palette.h and
// preprocess.h; no heap, no libc). The CPU engine (pyx/_vector.pyx) calls vec_execute
// once per environment from an OpenMP loop; a GPU kernel can call it per thread.
//
// ale-py behaviours reproduced on purpose (checked side by side in tests/test_vector.py):
//   * the inner ALE runs with frame_skip 1 and no frame limit; elapsed_steps counts the
//     agent-step frames since the reset (not the noop/FIRE frames) against the limit;
//   * a frame-skip loop that ends early (game over, frame limit, episodic life loss)
//     keeps the raw frames of earlier steps, and the max-pool writes into raw frame 0,
//     so the final observation of such a step is built from those older frames;
//   * an episode end under episodic_life resets the whole game (reset_game), as ale-py
//     does; life lost = lives fell below the step's starting lives and is still > 0;
//   * the noop count is uniform_int_distribution(0, noop_max - 1) of libstdc++ (64-bit
//     multiply, Lemire's rejection), minus one when FIRE was pressed.
#pragma once
#include "ale_env.h"
#include "palette.h"
#include "preprocess.h"

namespace hs {

enum : int32_t { kMaxActionSet = 18 };

// Settings shared by all environments of a vector (AtariVectorEnv's arguments).
struct VecConfig {
  int32_t frame_skip;            // ALE frames per agent step, >= 1
  int32_t stack_num;             // frames in an observation, >= 1
  int32_t grayscale;             // 1: one channel; 0: RGB
  int32_t channels;              // 1 or 3
  int32_t raw_height, raw_width; // the screen (210 or 250 rows, 160 columns)
  int32_t raw_size;              // raw_height * raw_width * channels
  int32_t obs_size;              // img_height * img_width * channels (one stacked frame)
  int32_t maxpool;
  int32_t noop_max;              // draws 0 .. noop_max - 1 noops (0: none)
  int32_t fire_reset;            // use_fire_reset and FIRE is in the action set
  int32_t episodic_life;
  int32_t life_loss_info;
  int32_t reward_clipping;
  int32_t max_episode_steps;     // ale-py's max_num_frames_per_episode
  int32_t same_step;             // autoreset SAME_STEP (else NEXT_STEP)
  int32_t num_actions;
  int32_t action_set[kMaxActionSet];  // ALE action id of each action index
  uint8_t gray[256];             // grayscale of each palette index (vec_config_palette)
  uint8_t rgb[256][3];           // RGB of each palette index
};

// The palette lookups of the console's TV standard (the same for every environment of a
// vector: one ROM), so a captured pixel is one table read.
HS_HD inline void vec_config_palette(VecConfig& c, bool pal) {
  const uint32_t* table = palette_table(pal ? TV_PAL : TV_NTSC);
  for (int32_t i = 0; i < 256; ++i) {
    c.gray[i] = palette_gray(table, (uint8_t)i);
    c.rgb[i][0] = (uint8_t)(table[i] >> 16);
    c.rgb[i][1] = (uint8_t)(table[i] >> 8);
    c.rgb[i][2] = (uint8_t)table[i];
  }
}

// PreprocessedEnv's bookkeeping for one environment (plain data, part of a snapshot).
struct VecEnvState {
  MT19937 noop_rng;       // seeded with the reset seed (std::mt19937)
  int32_t elapsed_steps;  // agent-step frames since the reset
  int32_t game_over;
  int32_t lives;          // lives at the end of the last step / reset
  int32_t was_life_lost;
  int32_t reward;         // last step's (clipped) reward
  int32_t stack_head;     // ring slot the next frame goes to (= the oldest frame)
  int32_t reset_done;     // 1: the console already ran reset_game (copied after a load)
  int32_t pad_;
};

// Where one environment's buffers live (the engine owns them).
struct VecEnvBuffers {
  FrameBuffers fbs;  // the console's two palette-index frames
  uint8_t* raw0;     // last frame of a step (after the max-pool: the pooled frame)
  uint8_t* raw1;     // the frame before it
  uint8_t* stack;    // stack_num * obs_size bytes, a ring starting at stack_head
};

// One environment's row of the batch outputs (null final_obs: not wanted).
struct VecOutput {
  uint8_t* obs;        // stack_num * obs_size bytes, oldest frame first
  uint8_t* final_obs;  // SAME_STEP: the observation that ended the episode
  int32_t* reward;
  uint8_t* terminated;
  uint8_t* truncated;
  int32_t* lives;
  int32_t* frame_number;
  int32_t* episode_frame_number;
};

// std::uniform_int_distribution<int>(0, hi)(g) for std::mt19937 as libstdc++ (GCC 11+)
// computes it: a 32 x 32 -> 64-bit product, rejecting low words under 2^32 mod range.
HS_HD inline int32_t vec_uniform_int(MT19937& g, uint32_t hi) {
  const uint32_t range = hi + 1u;  // 0 means the full 32-bit range
  if (range == 0u) return (int32_t)mt_next(g);
  uint64_t product = (uint64_t)mt_next(g) * range;
  uint32_t low = (uint32_t)product;
  if (low < range) {
    const uint32_t threshold = (0u - range) % range;
    while (low < threshold) {
      product = (uint64_t)mt_next(g) * range;
      low = (uint32_t)product;
    }
  }
  return (int32_t)(product >> 32);
}

// The screen ALE reports (last frame) as grayscale or RGB bytes.
HS_HD inline void vec_capture(const VecConfig& c, const FrameBuffers& fbs, uint8_t* __restrict__ dst) {
  const uint8_t* __restrict__ src = fbs.buf[fbs.shown];
  const int32_t n = c.raw_height * c.raw_width;
  if (c.grayscale) {
    pp::palette_lookup(c.gray, src, dst, n);
  } else {
    for (int32_t i = 0; i < n; ++i) {
      const uint8_t* rgb = c.rgb[src[i]];
      dst[3 * i] = rgb[0];
      dst[3 * i + 1] = rgb[1];
      dst[3 * i + 2] = rgb[2];
    }
  }
}

// The work of process_screen for ring slot `slot`: max-pool into raw0 (in place), resize
// into the slot.
HS_HD inline void vec_screen_into(const VecConfig& c, const pp::ResizePlan& plan, VecEnvBuffers& b,
                                  int32_t slot) {
  if (c.maxpool) pp::maxpool_frames(b.raw0, b.raw0, b.raw1, c.raw_size);
  pp::resize_image(plan, b.raw0, b.stack + (long long)slot * c.obs_size);
}

// The ring slot the last process_screen wrote (or, deferred, is to write).
HS_HD HS_INLINE int32_t vec_last_slot(const VecConfig& c, const VecEnvState& s) {
  return s.stack_head == 0 ? c.stack_num - 1 : s.stack_head - 1;
}

// process_screen: max-pool into raw0 (in place), resize into the ring, advance it.
// kDefer (the GPU's split design, cuda/vector_kernels.cu): only advance the ring; the
// pixel work of the last process_screen of a vec_execute (and, after a reset, the
// stack_clear and the observation copy) is left to kernels with many threads per
// environment, which find everything they need in the state: the slot is
// vec_last_slot, and elapsed_steps == 0 exactly when that screen is a reset's.
template <bool kDefer = false>
HS_HD inline void vec_process_screen(const VecConfig& c, const pp::ResizePlan& plan,
                                     VecEnvState& s, VecEnvBuffers& b) {
  if (!kDefer) vec_screen_into(c, plan, b, s.stack_head);
  s.stack_head = s.stack_head + 1 == c.stack_num ? 0 : s.stack_head + 1;
}

// ALEInterface::act(action) as the vector env's inner ALE calls it (paddle strength 1).
HS_HD HS_INLINE int32_t vec_ale_act(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs,
                                    int32_t action, float strength) {
  return env_act(e, rom, fbs, action, B_NOOP, strength, 0.0f);
}

// Frames whose screen is not captured are emulated without drawing (console.h,
// FrameReplay); `draw` says whether the coming frames will be read.
HS_HD HS_INLINE void vec_will_read(FrameBuffers& fbs, bool draw) {
  if (fbs.replay != nullptr) fbs.replay->lazy = draw ? 0 : 1;
}

// vec_capture after drawing the shown frame if it was left undrawn.
HS_HD HS_INLINE void vec_capture_drawn(const VecConfig& c, const uint8_t* rom, FrameBuffers& fbs,
                                       uint8_t* dst) {
  console_materialize_shown(rom, fbs);
  vec_capture(c, fbs, dst);
}

// PreprocessedEnv::reset after any reseed: reset_game, FIRE, noops, fresh stack.
// reset_game is skipped once when the state was copied from a load that already ran it.
template <bool kDefer = false>
HS_HD inline void vec_reset(const VecConfig& c, const pp::ResizePlan& plan, const uint8_t* rom,
                            AleEnv& e, VecEnvState& s, VecEnvBuffers& b) {
  vec_will_read(b.fbs, false);
  if (!s.reset_done) env_reset(e, rom, b.fbs);
  s.reset_done = 0;
  if (c.fire_reset) vec_ale_act(e, rom, b.fbs, A_FIRE, 1.0f);
  int32_t noops = vec_uniform_int(s.noop_rng, (uint32_t)(c.noop_max > 0 ? c.noop_max - 1 : 0)) -
                  (c.fire_reset ? 1 : 0);
  for (; noops > 0; --noops) {
    vec_ale_act(e, rom, b.fbs, A_NOOP, 1.0f);
    if (env_terminal(e)) env_reset(e, rom, b.fbs);
  }
  if (!kDefer) pp::stack_clear(b.stack, c.stack_num, c.obs_size);
  s.stack_head = 0;
  vec_capture_drawn(c, rom, b.fbs, b.raw0);
  for (int32_t i = 0; i < c.raw_size; ++i) b.raw1[i] = 0;
  vec_process_screen<kDefer>(c, plan, s, b);
  s.elapsed_steps = 0;
  s.reward = 0;
  s.game_over = 0;
  s.lives = env_lives(e);
  s.was_life_lost = 0;
}

// PreprocessedEnv::step with an action index into the action set (checked by the caller).
template <bool kDefer = false>
HS_HD inline void vec_step(const VecConfig& c, const pp::ResizePlan& plan, const uint8_t* rom,
                           AleEnv& e, VecEnvState& s, VecEnvBuffers& b, int32_t action_index,
                           float strength) {
  const int32_t action = c.action_set[action_index];
  int32_t reward = 0;
  for (int32_t skip = c.frame_skip; skip > 0; --skip) {
    vec_will_read(b.fbs, skip <= 2);  // only the last two frames are captured
    reward += vec_ale_act(e, rom, b.fbs, action, strength);
    s.game_over = env_terminal(e) ? 1 : 0;
    s.elapsed_steps += 1;
    const int32_t lives = env_lives(e);
    s.was_life_lost = (lives < s.lives && lives > 0) ? 1 : 0;
    if (s.game_over || s.elapsed_steps >= c.max_episode_steps || (c.episodic_life && s.was_life_lost))
      break;
    if (skip <= 2) vec_capture_drawn(c, rom, b.fbs, skip == 1 ? b.raw0 : b.raw1);
  }
  vec_process_screen<kDefer>(c, plan, s, b);
  s.lives = env_lives(e);
  s.reward = c.reward_clipping ? (reward < -1 ? -1 : (reward > 1 ? 1 : reward)) : reward;
}

HS_HD HS_INLINE bool vec_episode_over(const VecConfig& c, const VecEnvState& s) {
  return s.game_over || s.elapsed_steps >= c.max_episode_steps || (c.episodic_life && s.was_life_lost);
}

// The ring as an observation, oldest frame first.
HS_HD inline void vec_write_obs(const VecConfig& c, const VecEnvState& s, const VecEnvBuffers& b,
                                uint8_t* dst) {
  const int32_t n = c.obs_size;
  for (int32_t k = 0; k < c.stack_num; ++k) {
    int32_t slot = s.stack_head + k;
    if (slot >= c.stack_num) slot -= c.stack_num;
    const uint8_t* src = b.stack + (long long)slot * n;
    uint8_t* d = dst + (long long)k * n;
    for (int32_t i = 0; i < n; ++i) d[i] = src[i];
  }
}

// PreprocessedEnv::write_to (kDefer: without the observation, which the split GPU
// design copies with many threads per environment).
template <bool kDefer = false>
HS_HD inline void vec_write(const VecConfig& c, const AleEnv& e, const VecEnvState& s,
                            const VecEnvBuffers& b, const VecOutput& out) {
  const bool terminated = s.game_over || ((c.life_loss_info || c.episodic_life) && s.was_life_lost);
  *out.reward = s.reward;
  *out.terminated = terminated ? 1 : 0;
  *out.truncated = (s.elapsed_steps >= c.max_episode_steps && !terminated) ? 1 : 0;
  *out.lives = s.lives;
  *out.frame_number = e.frame_number;
  *out.episode_frame_number = e.episode_frame_number;
  if (!kDefer) vec_write_obs(c, s, b, out.obs);
}

// One environment's part of a batch (EnvVectorizer::execute_env): a forced reset
// (reset() call, after the caller's reseed), or a step with NEXT_STEP / SAME_STEP
// autoreset. Returns 1 when out.final_obs was written (SAME_STEP episode end).
// kDefer: the last screen's pixel work and the observation are left to the caller (see
// vec_process_screen); a SAME_STEP episode end processes its step's screen here, since
// the final observation needs it before the reset's.
template <bool kDefer = false>
HS_HD inline int32_t vec_execute(const VecConfig& c, const pp::ResizePlan& plan, const uint8_t* rom,
                                 AleEnv& e, VecEnvState& s, VecEnvBuffers& b, bool force_reset,
                                 int32_t action_index, float strength, const VecOutput& out) {
  if (!c.same_step) {
    if (force_reset || vec_episode_over(c, s)) vec_reset<kDefer>(c, plan, rom, e, s, b);
    else vec_step<kDefer>(c, plan, rom, e, s, b, action_index, strength);
    vec_write<kDefer>(c, e, s, b, out);
    return 0;
  }
  if (force_reset) {
    vec_reset<kDefer>(c, plan, rom, e, s, b);
    vec_write<kDefer>(c, e, s, b, out);
    return 0;
  }
  vec_step<kDefer>(c, plan, rom, e, s, b, action_index, strength);
  if (!vec_episode_over(c, s)) {
    vec_write<kDefer>(c, e, s, b, out);
    return 0;
  }
  if (kDefer) vec_screen_into(c, plan, b, vec_last_slot(c, s));
  if (out.final_obs) vec_write_obs(c, s, b, out.final_obs);
  vec_write<kDefer>(c, e, s, b, out);
  const int32_t reward = *out.reward;
  const uint8_t terminated = *out.terminated, truncated = *out.truncated;
  vec_reset<kDefer>(c, plan, rom, e, s, b);
  vec_write<kDefer>(c, e, s, b, out);
  *out.reward = reward;
  *out.terminated = terminated;
  *out.truncated = truncated;
  return 1;
}

// A seeded reset reloads the ROM (ALE's loadROM) and then runs reset_game. When neither
// draws from the environment RNG (true unless a game's mode selection acts; the engine
// checks it once against a second load), the result is the same for every seed but for
// that RNG, so a copy of one loaded-and-reset state is reseeded instead (reset_done = 1).
HS_HD inline void vec_reseed_from(const AleEnv& loaded, const uint8_t* loaded_frames,
                                  int32_t loaded_shown, int32_t frame_bytes, uint32_t seed,
                                  AleEnv& e, VecEnvState& s, VecEnvBuffers& b) {
  e = loaded;
  mt_seed(e.env_rng, seed);
  for (int32_t i = 0; i < frame_bytes; ++i) b.fbs.buf[0][i] = loaded_frames[i];
  for (int32_t i = 0; i < frame_bytes; ++i) b.fbs.buf[1][i] = loaded_frames[frame_bytes + i];
  b.fbs.shown = loaded_shown;
  if (b.fbs.replay != nullptr) b.fbs.replay->pending[0] = b.fbs.replay->pending[1] = 0;
  mt_seed(s.noop_rng, seed);
  s.reset_done = 1;
}

}  // namespace hs

namespace hs {

// env_state_check's counterpart for the vector env's bookkeeping: the ring slot indexes
// the frame stack and the no-op RNG's index its words.
HS_HD inline StateFault vec_state_check(const VecConfig& c, const VecEnvState& s) {
  StateFault f;
  state_fault_clear(f);
  if (state_bad(f, "noop_rng.next_index", s.noop_rng.next_index, 0, MT_N)) return f;
  if (state_bad(f, "noop_rng (all-zero words)", mt_degenerate(s.noop_rng), 0, 0)) return f;
  if (state_bad(f, "stack_head", s.stack_head, 0, (long long)c.stack_num - 1)) return f;
  return f;
}

}  // namespace hs
