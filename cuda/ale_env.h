// ale_env.h: ALE's environment layer (StellaEnvironment, ALEState; ale-py 0.12.1) over
// the console: load and reset sequences, act with frame skip and sticky actions drawn
// from the environment RNG, paddles, reward clamping, frame counters, truncation.
// Facts: ALE_FACTS.md and ALE's environment/stella_environment.cpp, ale_state.cpp.
#pragma once
#include "console.h"
#include "games.h"

namespace hs {

// ALE action ids (common/Constants.h).
enum : int32_t {
  A_NOOP = 0, A_FIRE = 1, A_UP = 2, A_RIGHT = 3, A_LEFT = 4, A_DOWN = 5, A_UPRIGHT = 6,
  A_UPLEFT = 7, A_DOWNRIGHT = 8, A_DOWNLEFT = 9, A_UPFIRE = 10, A_RIGHTFIRE = 11,
  A_LEFTFIRE = 12, A_DOWNFIRE = 13, A_UPRIGHTFIRE = 14, A_UPLEFTFIRE = 15,
  A_DOWNRIGHTFIRE = 16, A_DOWNLEFTFIRE = 17, B_NOOP = 18, ACTION_RESET = 40
};

enum : int32_t {
  PADDLE_MIN = 27450,      // ALE's paddle resistance range (ale_state.hpp)
  PADDLE_MAX = 790196,
  PADDLE_DELTA = 23000,    // per frame of LEFT/RIGHT at strength 1
  PADDLE_DEFAULT = (PADDLE_MIN + PADDLE_MAX) / 2,
  RESET_FRAMES = 4,        // a soft reset holds RESET this many frames
  NOOP_RESET_FRAMES = 60,  // ALE's fixed no-op frames after a system reset
  kMaxStartingRuns = 16    // starting actions as (action, repeat) runs: ALE has up to 486
};

enum : int32_t { MODE_STEP_ACT = 0, MODE_STEP_SELECT = 1, MODE_STEP_SOFT_RESET = 2 };
enum : int32_t {
  MODE_CUSTOM_NONE = 0, MODE_CUSTOM_DOUBLE_DUNK = 1, MODE_CUSTOM_ADVENTURE = 2, MODE_CUSTOM_VIDEO_CUBE = 3
};

struct EnvConfig {
  int32_t game;                   // game id for games.h
  int32_t frame_skip;             // >= 1
  float repeat_action_probability;
  int32_t max_num_frames_per_episode;  // 0 = no limit
  int32_t reward_min, reward_max;
  int32_t mode;                   // the game mode (ALE's setMode argument)
  // Mode selection (the game's setMode). mode_ram < 0: the default setMode, which does
  // nothing. Otherwise: run `before` steps, then press SELECT (held mode_hold frames)
  // until RAM[mode_ram] is mode_value or mode_value_alt and, when mode_ram2 >= 0,
  // RAM[mode_ram2] is mode_value2; then a soft reset. RAM indices are address & $7F;
  // mode_ram 0x100 + i reads the cartridge's extra RAM byte i instead (Klax).
  int32_t mode_ram, mode_value, mode_value_alt, mode_ram2, mode_value2, mode_hold;
  int32_t num_mode_before;
  int32_t mode_before[4][3];      // {MODE_STEP_*, action or hold, count}
  int32_t mode_custom;            // MODE_CUSTOM_*: a game-specific setMode instead
  int32_t difficulty;             // 0-3: bit 0 left A, bit 1 right A
  int32_t num_starting_runs;
  int32_t starting_runs[kMaxStartingRuns][2];  // {action, frames}: one emulate per frame
  uint8_t use_paddles;            // Controller.Left or .Right is PADDLES
  uint8_t truncate_on_loss_of_life;
  uint8_t pad_[2];
  int32_t max_lives;              // lives() right after the environment is created
  int32_t paddle_min, paddle_max; // ALE's paddle_min/paddle_max settings (PADDLE_MIN/MAX)
};

struct AleEnv {
  Console console;
  MT19937 env_rng;
  GameState game;
  EnvConfig cfg;
  int32_t frame_number;
  int32_t episode_frame_number;
  int32_t left_paddle, right_paddle;   // ALEState paddle positions (resistances)
  int32_t player_a_action, player_b_action;  // the sticky actions
  float paddle_a_strength, paddle_b_strength;
  int32_t last_reward;
};

// ---- events (ALEState) ----

HS_HD inline void env_release_keys(AleEnv& e) {
  Controls& ev = e.console.controls;
  ev.reset = ev.select = 0;
  ev.joy[0] = ev.joy[1] = 0;
  ev.paddle_fire[0] = ev.paddle_fire[1] = 0;
  ev.left_a = (uint8_t)(e.cfg.difficulty & 1);
  ev.left_b = (uint8_t)!(e.cfg.difficulty & 1);
  ev.right_a = (uint8_t)((e.cfg.difficulty >> 1) & 1);
  ev.right_b = (uint8_t)!((e.cfg.difficulty >> 1) & 1);
}

HS_HD inline void env_set_paddles(AleEnv& e, int32_t left, int32_t right) {
  e.left_paddle = left;
  e.right_paddle = right;
  e.console.controls.paddle_resistance[0] = left;
  e.console.controls.paddle_resistance[1] = right;
}

HS_HD HS_INLINE int32_t clamp_paddle(const EnvConfig& c, int32_t v) {
  return v < c.paddle_min ? c.paddle_min : (v > c.paddle_max ? c.paddle_max : v);
}

// ALEState::resetPaddles: both paddles at the middle of the range.
HS_HD HS_INLINE int32_t paddle_centre(const EnvConfig& c) { return (c.paddle_min + c.paddle_max) / 2; }

// Joystick bits of a player action (0-17; player B's are given minus 18).
HS_HD HS_INLINE uint8_t joystick_bits(int32_t a) {
  // NOOP FIRE UP RIGHT LEFT DOWN UR UL DR DL UF RF LF DF URF ULF DRF DLF
  const uint8_t kBits[18] = {
      0, JOY_FIRE, JOY_UP, JOY_RIGHT, JOY_LEFT, JOY_DOWN,
      JOY_UP | JOY_RIGHT, JOY_UP | JOY_LEFT, JOY_DOWN | JOY_RIGHT, JOY_DOWN | JOY_LEFT,
      JOY_UP | JOY_FIRE, JOY_RIGHT | JOY_FIRE, JOY_LEFT | JOY_FIRE, JOY_DOWN | JOY_FIRE,
      JOY_UP | JOY_RIGHT | JOY_FIRE, JOY_UP | JOY_LEFT | JOY_FIRE,
      JOY_DOWN | JOY_RIGHT | JOY_FIRE, JOY_DOWN | JOY_LEFT | JOY_FIRE};
  return (a >= 0 && a < 18) ? kBits[a] : (uint8_t)0;
}

HS_HD inline void env_apply_joysticks(AleEnv& e, int32_t a, int32_t b) {
  env_release_keys(e);
  Controls& ev = e.console.controls;
  if (a == ACTION_RESET || b == ACTION_RESET) ev.reset = 1;
  ev.joy[0] = joystick_bits(a);
  ev.joy[1] = joystick_bits(b - B_NOOP);
}

// Paddle delta of an action: RIGHT turns the resistance down (ALE's sign). The caller
// clamps the sum to the paddle range, so a magnitude past 1e9 (a strength over about
// 43,000, or NaN) saturates there: ALE's float-to-int conversion is undefined beyond
// int32, and x86 and CUDA would disagree.
HS_HD HS_INLINE int32_t paddle_delta(int32_t action, float strength) {
  uint8_t bits = joystick_bits(action);
  float magnitude = (float)PADDLE_DELTA * (strength < 0.0f ? -strength : strength);
  if (!(magnitude <= 1e9f)) magnitude = 1e9f;
  if (bits & JOY_RIGHT) return (int32_t)(-magnitude);
  if (bits & JOY_LEFT) return (int32_t)magnitude;
  return 0;
}

HS_HD inline void env_apply_paddles(AleEnv& e, int32_t a, float sa, int32_t b, float sb) {
  env_release_keys(e);
  int32_t da = paddle_delta(a, sa);
  int32_t db = paddle_delta(b - B_NOOP, sb);
  env_set_paddles(e, clamp_paddle(e.cfg, e.left_paddle + da), clamp_paddle(e.cfg, e.right_paddle + db));
  Controls& ev = e.console.controls;
  if (a == ACTION_RESET || b == ACTION_RESET) ev.reset = 1;
  if (joystick_bits(a) & JOY_FIRE) ev.paddle_fire[0] = 1;
  if (joystick_bits(b - B_NOOP) & JOY_FIRE) ev.paddle_fire[1] = 1;
}

// ---- emulation (StellaEnvironment::emulate) ----

HS_HD inline void env_game_step(AleEnv& e) {
  int32_t reward = 0;
  game_step(e.cfg.game, e.game, e.console.riot.ram, &reward, e.console.cart.ram);
  e.last_reward = reward;
}

HS_HD inline void env_emulate(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t a, int32_t b,
                              float sa, float sb, int32_t frames) {
  if (e.cfg.use_paddles) {
    for (int32_t k = 0; k < frames; ++k) {
      env_apply_paddles(e, a, sa, b, sb);
      console_run_frame(e.console, rom, fbs);
      env_game_step(e);
    }
  } else {
    env_apply_joysticks(e, a, b);
    for (int32_t k = 0; k < frames; ++k) {
      console_run_frame(e.console, rom, fbs);
      env_game_step(e);
    }
  }
  // processRAM peeks $80-$FF through the bus: the last byte read stays on it.
  e.console.data_bus = e.console.riot.ram[127];
}

HS_HD inline void env_soft_reset(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  env_emulate(e, rom, fbs, ACTION_RESET, B_NOOP, 1.0f, 1.0f, RESET_FRAMES);
  e.player_a_action = A_NOOP;
  e.player_b_action = B_NOOP;
}

// StellaEnvironment::pressSelect: SELECT held for n frames (no settings step), then one
// ordinary no-op frame, which ALE counts as an agent frame.
HS_HD inline void env_press_select(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t n) {
  env_release_keys(e);
  e.console.controls.select = 1;
  for (int32_t k = 0; k < n; ++k) console_run_frame(e.console, rom, fbs);
  env_emulate(e, rom, fbs, A_NOOP, B_NOOP, 1.0f, 1.0f, 1);
  e.frame_number += 1;
  e.episode_frame_number += 1;
}

HS_HD inline bool env_truncated(const AleEnv& e) {
  bool t = false;
  if (e.cfg.max_num_frames_per_episode > 0)
    t = t || e.episode_frame_number >= e.cfg.max_num_frames_per_episode;
  if (e.cfg.truncate_on_loss_of_life)
    t = t || game_lives(e.cfg.game, e.game) < e.cfg.max_lives;
  return t;
}

HS_HD inline bool env_terminal(const AleEnv& e) {
  return game_terminal(e.cfg.game, e.game) || env_truncated(e);
}

HS_HD inline int32_t env_act(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t a, int32_t b,
                             float sa, float sb);

HS_HD HS_INLINE bool env_mode_reached(AleEnv& e) {
  const EnvConfig& c = e.cfg;
  uint8_t v;
  if (c.mode_ram >= 0x100) {  // a peek at the cartridge RAM's read port
    v = e.console.cart.ram[c.mode_ram & 0x7F];
    e.console.data_bus = v;
  } else {
    v = console_read_ram(e.console, c.mode_ram);
  }
  bool first = v == (uint8_t)c.mode_value || (c.mode_value_alt >= 0 && v == (uint8_t)c.mode_value_alt);
  if (!first) return false;
  return c.mode_ram2 < 0 || console_read_ram(e.console, c.mode_ram2) == (uint8_t)c.mode_value2;
}

// A game's setMode as the generic recipe describes it (see EnvConfig).
HS_HD inline void env_select_mode(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  for (int32_t k = 0; k < e.cfg.num_mode_before; ++k) {
    const int32_t* step = e.cfg.mode_before[k];
    for (int32_t n = 0; n < step[2]; ++n) {
      if (step[0] == MODE_STEP_ACT) env_act(e, rom, fbs, step[1], B_NOOP, 1.0f, 1.0f);
      else if (step[0] == MODE_STEP_SELECT) env_press_select(e, rom, fbs, step[1]);
      else env_soft_reset(e, rom, fbs);
    }
  }
  int32_t guard = 0;  // ALE loops forever on a mode that never shows; we give up
  while (!env_mode_reached(e) && guard++ < 1000) env_press_select(e, rom, fbs, e.cfg.mode_hold);
  game_set_mode(e.cfg.game, e.game, e.cfg.mode, e.console.riot.ram);
  env_soft_reset(e, rom, fbs);
}

// Double Dunk's setMode walks its option menu with the joystick (DoubleDunk.cpp):
// SELECT, two rows down, then per option bit a row down and RIGHT/LEFT until the RAM
// flag matches the mode bit; each move is an act() pair (move, NOOP).
HS_HD inline void env_act_pair(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t a) {
  env_act(e, rom, fbs, a, B_NOOP, 1.0f, 1.0f);
  env_act(e, rom, fbs, A_NOOP, B_NOOP, 1.0f, 1.0f);
}

HS_HD inline void env_double_dunk_down(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  uint8_t before = console_read_ram(e.console, 0x30);  // $B0: menu row
  int32_t guard = 0;
  while (before == console_read_ram(e.console, 0x30) && guard++ < 1000) env_act_pair(e, rom, fbs, A_DOWN);
}

HS_HD inline void env_double_dunk_mode(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  const uint8_t kBits[4] = {0x08, 0x10, 0x04, 0x20};  // option flags in $80 for mode bits 0-3
  env_press_select(e, rom, fbs, 1);
  env_double_dunk_down(e, rom, fbs);
  for (int32_t k = 0; k < 4; ++k) {
    env_double_dunk_down(e, rom, fbs);
    bool want = (e.cfg.mode >> k) & 1;
    int32_t guard = 0;
    while (((console_read_ram(e.console, 0x00) & kBits[k]) != 0) != want && guard++ < 1000)
      env_act_pair(e, rom, fbs, want ? A_RIGHT : A_LEFT);
  }
  game_set_mode(e.cfg.game, e.game, e.cfg.mode, e.console.riot.ram);
  env_soft_reset(e, rom, fbs);
  env_act(e, rom, fbs, A_UPFIRE, B_NOOP, 1.0f, 1.0f);
  env_act(e, rom, fbs, A_NOOP, B_NOOP, 1.0f, 1.0f);
}

// Adventure's setMode: the mode is bits 1-2 of $DD; each SELECT press is held for
// 2 + (a 32-bit draw of the environment RNG) % 256 frames and followed by an act(NOOP).
HS_HD inline void env_adventure_mode(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  int32_t guard = 0;
  while (((console_read_ram(e.console, 0x5D) >> 1) & 3) != e.cfg.mode && guard++ < 1000) {
    int32_t hold = 2 + (int32_t)(mt_next(e.env_rng) % 256u);
    env_press_select(e, rom, fbs, hold);
    env_act(e, rom, fbs, A_NOOP, B_NOOP, 1.0f, 1.0f);
  }
  game_set_mode(e.cfg.game, e.game, e.cfg.mode, e.console.riot.ram);
  env_soft_reset(e, rom, fbs);
}

// Video Cube's setMode: mode_value is the wanted variant byte (RAM[$FB] & $1F), mode_value2
// the cube number; SELECT presses for the variant, a soft reset, then RIGHT acts until the
// cube number shows in $9F (packed decimal).
HS_HD inline void env_video_cube_mode(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  int32_t guard = 0;
  while ((console_read_ram(e.console, 0x7B) & 0x1F) != e.cfg.mode_value && guard++ < 1000)
    env_press_select(e, rom, fbs, 2);
  env_soft_reset(e, rom, fbs);
  guard = 0;
  while (true) {
    uint8_t b = console_read_ram(e.console, 0x1F);
    if ((b >> 4) * 10 + (b & 0x0F) == e.cfg.mode_value2 || guard++ >= 1000) break;
    env_act(e, rom, fbs, A_RIGHT, B_NOOP, 1.0f, 1.0f);
  }
  game_set_mode(e.cfg.game, e.game, e.cfg.mode, e.console.riot.ram);
}

// StellaEnvironment::reset (reset_game).
HS_HD inline void env_reset(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs) {
  e.episode_frame_number = 0;
  env_set_paddles(e, paddle_centre(e.cfg), paddle_centre(e.cfg));
  console_system_reset(e.console, rom, fbs);
  env_emulate(e, rom, fbs, A_NOOP, B_NOOP, 1.0f, 1.0f, NOOP_RESET_FRAMES);
  env_soft_reset(e, rom, fbs);
  game_reset(e.cfg.game, e.game);
  if (e.cfg.mode_custom == MODE_CUSTOM_DOUBLE_DUNK) env_double_dunk_mode(e, rom, fbs);
  else if (e.cfg.mode_custom == MODE_CUSTOM_ADVENTURE) env_adventure_mode(e, rom, fbs);
  else if (e.cfg.mode_custom == MODE_CUSTOM_VIDEO_CUBE) env_video_cube_mode(e, rom, fbs);
  else if (e.cfg.mode_ram >= 0) env_select_mode(e, rom, fbs);
  else game_set_mode(e.cfg.game, e.game, e.cfg.mode, e.console.riot.ram);  // default setMode
  env_soft_reset(e, rom, fbs);
  for (int32_t k = 0; k < e.cfg.num_starting_runs; ++k)
    for (int32_t n = 0; n < e.cfg.starting_runs[k][1]; ++n)
      env_emulate(e, rom, fbs, e.cfg.starting_runs[k][0], B_NOOP, 1.0f, 1.0f, 1);
}

// ALEInterface::loadROM: console construction, environment construction, reset.
HS_HD inline void env_load(AleEnv& e, const ConsoleProps& props, const EnvConfig& cfg, uint32_t seed,
                           const uint8_t* rom, FrameBuffers& fbs) {
  uint8_t* raw = (uint8_t*)&e;
  for (uint32_t k = 0; k < (uint32_t)sizeof(AleEnv); ++k) raw[k] = 0;
  e.cfg = cfg;
  // ALE applies paddle_min/paddle_max only to games with paddles; others keep the
  // defaults (which only set the unused paddle events).
  if (!e.cfg.use_paddles || e.cfg.paddle_min < 0) e.cfg.paddle_min = PADDLE_MIN;
  if (!e.cfg.use_paddles || e.cfg.paddle_max < 0) e.cfg.paddle_max = PADDLE_MAX;
  console_power_on(e.console, props, rom, fbs);
  if (e.cfg.use_paddles) env_set_paddles(e, paddle_centre(e.cfg), paddle_centre(e.cfg));
  mt_seed(e.env_rng, seed);
  game_reset(e.cfg.game, e.game);
  e.cfg.max_lives = game_lives(e.cfg.game, e.game);
  e.player_a_action = A_NOOP;
  e.player_b_action = B_NOOP;
  e.paddle_a_strength = 1.0f;  // ALE leaves these unset until the first act
  e.paddle_b_strength = 1.0f;
  env_reset(e, rom, fbs);
}

// StellaEnvironment::act. Actions use ALE ids (player B: 18-35, or 40 = RESET).
HS_HD inline int32_t env_act(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t a, int32_t b,
                             float sa, float sb) {
  int32_t sum = 0;
  for (int32_t k = 0; k < e.cfg.frame_skip; ++k) {
    if (mt_next_double(e.env_rng) >= (double)e.cfg.repeat_action_probability) {
      e.player_a_action = a;
      e.paddle_a_strength = sa;
    }
    if (mt_next_double(e.env_rng) >= (double)e.cfg.repeat_action_probability) {
      e.player_b_action = b;
      e.paddle_b_strength = sb;
    }
    if (env_terminal(e)) continue;  // oneStepAct returns 0 once the episode is over
    int32_t pa = e.player_a_action, pb = e.player_b_action;
    // Actions the game's settings call illegal (game_action_legal) become NOOP; so does RESET.
    if (pa == ACTION_RESET || (pa >= 0 && pa < B_NOOP && !game_action_legal(e.cfg.game, pa))) pa = A_NOOP;
    if (pb == ACTION_RESET || (pb >= B_NOOP && pb < B_NOOP + 18 && !game_action_legal(e.cfg.game, pb - B_NOOP)))
      pb = B_NOOP;
    env_emulate(e, rom, fbs, pa, pb, e.paddle_a_strength, e.paddle_b_strength, 1);
    e.frame_number += 1;
    e.episode_frame_number += 1;
    sum += e.last_reward;
  }
  HS_TIA_AUDIO_ACT_END();  // ALE's processAudio, after the last of the frame_skip frames
  if (sum < e.cfg.reward_min) sum = e.cfg.reward_min;
  if (sum > e.cfg.reward_max) sum = e.cfg.reward_max;
  return sum;
}

HS_HD inline int32_t env_lives(const AleEnv& e) { return game_lives(e.cfg.game, e.game); }

}  // namespace hs

namespace hs {

// ALE serialises the DPC's fractional music clock as an integer count of 1e-8 (Stella's
// CartDPC::save, uInt32 of fraction x 1e8) and restores count / 1e8. x lies in [0, 2)
// (env_state_check).
HS_HD HS_INLINE uint32_t dpc_fraction_count(double x) { return (uint32_t)(x * 100000000.0); }

// The value a clone stores for fraction x: a function of x's count alone (equal counts,
// equal bytes, as ALE's), from which restore recovers that count exactly. count / 1e8
// itself would not do: (count / 1e8) * 1e8 can round below count, and the truncation
// then loses one.
HS_HD HS_INLINE double dpc_fraction_canonical(double x) {
  uint32_t n = dpc_fraction_count(x);
  return n == 0u ? 0.0 : ((double)n + 0.5) / 100000000.0;
}

// ALE's restoreState: what ALE serialises comes back; what it does not save (the TIA's
// per-line shape selections, missile and ball masks, drawing position, input events, the sticky actions, the
// bus value, the environment RNG unless it was saved) keeps its current value.
HS_HD inline void env_restore(AleEnv& cur, const AleEnv& saved, bool with_rng) {
  AleEnv keep = cur;
  cur = saved;
  Tia& t = cur.console.tia;
  const Tia& k = keep.console.tia;
  t.p_hide_first[0] = k.p_hide_first[0];
  t.p_hide_first[1] = k.p_hide_first[1];
  t.pf_reflect_shape = k.pf_reflect_shape;
  t.m0_shape = k.m0_shape;
  for (int32_t m = 0; m < 3; ++m) t.shape_pos[m] = k.shape_pos[m];
  t.shape_nusiz[0] = k.shape_nusiz[0];
  t.shape_nusiz[1] = k.shape_nusiz[1];
  t.shape_bl_size = k.shape_bl_size;
  t.fb_pos = k.fb_pos;
  t.partial_frame = k.partial_frame;
  t.frame_greyed = k.frame_greyed;
  cur.console.data_bus = keep.console.data_bus;
  cur.console.switches = keep.console.switches;
  cur.console.controls = keep.console.controls;
  cur.cfg = keep.cfg;
  cur.player_a_action = keep.player_a_action;
  cur.player_b_action = keep.player_b_action;
  cur.paddle_a_strength = keep.paddle_a_strength;
  cur.paddle_b_strength = keep.paddle_b_strength;
  cur.last_reward = keep.last_reward;
  game_keep_unsaved(keep.cfg.game, cur.game, keep.game);
  if (!with_rng) cur.env_rng = keep.env_rng;
  game_after_restore(cur.cfg.game, cur.game, keep.game);
  cur.console.cart.dpc_fraction = (double)(int32_t)dpc_fraction_count(saved.console.cart.dpc_fraction) / 100000000.0;
}

}  // namespace hs

namespace hs {

// The bytes of a cloned state: the fields env_restore takes from the live environment
// instead (ALE does not save them) are zeroed, so equal saved game states serialize
// equally, as ALE's do. Restoring the result behaves exactly as restoring `s` did.
HS_HD inline void env_clone_canonical(AleEnv& s, bool with_rng) {
  const int32_t game = s.cfg.game;
  Tia& t = s.console.tia;
  t.p_hide_first[0] = t.p_hide_first[1] = 0;
  t.pf_reflect_shape = 0;
  t.m0_shape = 0;
  for (int32_t m = 0; m < 3; ++m) t.shape_pos[m] = 0;
  t.shape_nusiz[0] = t.shape_nusiz[1] = 0;
  t.shape_bl_size = 0;
  t.fb_pos = 0;
  t.partial_frame = 0;
  t.frame_greyed = 0;
  s.console.data_bus = 0;
  s.console.switches = 0;
  uint8_t* raw = (uint8_t*)&s.console.controls;
  for (uint32_t k = 0; k < (uint32_t)sizeof(Controls); ++k) raw[k] = 0;
  raw = (uint8_t*)&s.cfg;
  for (uint32_t k = 0; k < (uint32_t)sizeof(EnvConfig); ++k) raw[k] = 0;
  s.player_a_action = s.player_b_action = 0;
  s.paddle_a_strength = s.paddle_b_strength = 0.0f;
  s.last_reward = 0;
  if (!with_rng) {
    raw = (uint8_t*)&s.env_rng;
    for (uint32_t k = 0; k < (uint32_t)sizeof(MT19937); ++k) raw[k] = 0;
  }
  game_clone_canonical(game, s.game);
  s.console.cart.dpc_fraction = dpc_fraction_canonical(s.console.cart.dpc_fraction);
}

// ---- restoring untrusted bytes ----
// A saved AleEnv is plain bytes (a file, a pickle, a network peer). Fields that the
// emulator uses as an array index, shift, pointer offset, loop bound or mode selector
// must lie where the emulator itself keeps them, or a restored state reads and writes
// outside its arrays. env_state_check names the first field that does not (field is
// null when every one fits); nothing else is refused: any register, RAM or counter
// value the emulator can reach is accepted.
struct StateFault {
  const char* field;          // null: the state fits
  long long value, lo, hi;    // the field's value and the range it must lie in
  const char* allowed;        // non-null: what the value must be (a set, "finite")
  double real;                // a floating-point field's value (is_real: must lie in [lo, hi))
  int32_t is_real;
};

HS_HD HS_INLINE void state_fault_clear(StateFault& f) {
  f.field = nullptr;
  f.allowed = nullptr;
  f.value = f.lo = f.hi = 0;
  f.real = 0.0;
  f.is_real = 0;
}

HS_HD HS_INLINE bool state_bad(StateFault& f, const char* field, long long value, long long lo, long long hi) {
  if (value >= lo && value <= hi) return false;
  f.field = field;
  f.value = value;
  f.lo = lo;
  f.hi = hi;
  return true;
}

HS_HD HS_INLINE bool state_bad_real(StateFault& f, const char* field, double value, long long lo, long long hi) {
  if (value >= (double)lo && value < (double)hi) return false;  // NaN fails too
  f.field = field;
  f.real = value;
  f.is_real = 1;
  f.lo = lo;
  f.hi = hi;
  return true;
}

// An MT19937 whose 19937 state bits are all zero draws zeros for ever (rejection loops
// such as vec_uniform_int's never end); seeding can never produce it. 1: degenerate.
HS_HD inline int32_t mt_degenerate(const MT19937& g) {
  uint32_t any = g.words[0] & 0x80000000u;
  for (int32_t k = 1; k < MT_N; ++k) any |= g.words[k];
  return any == 0u ? 1 : 0;
}

// `live` is the environment the state goes into (same ROM and display window).
// kept_too: also check what env_restore keeps from `live` (a vector engine copies whole
// rows, so there those fields come from the state as well).
HS_HD inline StateFault env_state_check(const AleEnv& saved, const AleEnv& live, bool with_rng, bool kept_too) {
  StateFault f;
  state_fault_clear(f);
#define HS_CHECK(name, value, lo, hi) \
  if (state_bad(f, name, (long long)(value), (long long)(lo), (long long)(hi))) return f
  const Console& c = saved.console;
  const Console& lc = live.console;
  // The mapper, display window and TV standard are the ROM's (ROM fingerprint).
  HS_CHECK("console.cart.type", c.cart.type, lc.cart.type, lc.cart.type);
  HS_CHECK("console.ystart", c.ystart, lc.ystart, lc.ystart);
  HS_CHECK("console.height", c.height, lc.height, lc.height);
  HS_CHECK("console.pal", c.pal, lc.pal, lc.pal);
  for (int32_t p = 0; p < 2; ++p) {
    HS_CHECK(p ? "console.port_type[1]" : "console.port_type[0]", c.port_type[p], 0, 1);
    // indexes the events
    HS_CHECK(p ? "console.port_jack[1]" : "console.port_jack[0]", c.port_jack[p], 0, 1);
  }
  HS_CHECK("console.swap_paddles", c.swap_paddles, 0, 1);
  // act adds a delta to the paddle positions and clamps the sum: no int32 overflow
  HS_CHECK("left_paddle", saved.left_paddle, -(1 << 30), 1 << 30);
  HS_CHECK("right_paddle", saved.right_paddle, -(1 << 30), 1 << 30);
  HS_CHECK("console.hmove_blanks", c.hmove_blanks, 0, 1);
  // Cycles since the frame started: colour clocks (x3) must stay positive int32.
  HS_CHECK("console.cycles", c.cycles, 0, 0x20000000);
  HS_CHECK("console.system_rng.next_index", c.system_rng.next_index, 0, MT_N);
  HS_CHECK("console.system_rng (all-zero words)", mt_degenerate(c.system_rng), 0, 0);
  if (with_rng) {
    HS_CHECK("env_rng.next_index", saved.env_rng.next_index, 0, MT_N);
    HS_CHECK("env_rng (all-zero words)", mt_degenerate(saved.env_rng), 0, 0);
  }

  // CPU flags are single bits (arithmetic adds the carry).
  const M6502& cpu = c.cpu;
  HS_CHECK("console.cpu.n", cpu.n, 0, 1);
  HS_CHECK("console.cpu.v", cpu.v, 0, 1);
  HS_CHECK("console.cpu.b", cpu.b, 0, 1);
  HS_CHECK("console.cpu.d", cpu.d, 0, 1);
  HS_CHECK("console.cpu.i", cpu.i, 0, 1);
  HS_CHECK("console.cpu.notz", cpu.notz, 0, 1);
  HS_CHECK("console.cpu.c", cpu.c, 0, 1);
  HS_CHECK("console.cpu.last_access_was_read", cpu.last_access_was_read, 0, 1);
  HS_CHECK("console.cpu.jammed", cpu.jammed, 0, 1);

  // RIOT: the timer register is a byte and the divider one of four shifts.
  const Riot& r = c.riot;
  HS_CHECK("console.riot.timer", r.timer, 0, 255);
  if (r.interval_shift != 0 && r.interval_shift != 3 && r.interval_shift != 6 && r.interval_shift != 10) {
    f.field = "console.riot.interval_shift";
    f.value = r.interval_shift;
    f.allowed = "0, 3, 6 or 10";
    return f;
  }
  HS_CHECK("console.riot.irq_read_seen", r.irq_read_seen, 0, 1);

  // TIA: the display window is the console's; the frame clocks keep the relations
  // tia_start_frame / tia_frame_reset set up (drawing indexes the frame buffer with them).
  const Tia& t = c.tia;
  HS_CHECK("console.tia.ystart", t.ystart, lc.ystart, lc.ystart);
  HS_CHECK("console.tia.height", t.height, lc.height, lc.height);
  HS_CHECK("console.tia.max_lines", t.max_lines, lc.tia.max_lines, lc.tia.max_lines);
  HS_CHECK("console.tia.colour_loss", t.colour_loss, lc.tia.colour_loss, lc.tia.colour_loss);
  HS_CHECK("console.tia.frame_start_clock", t.frame_start_clock, -(H_CLOCKS - 1), 0);
  HS_CHECK("console.tia.display_start_clock", t.display_start_clock,
           (long long)t.frame_start_clock + (long long)H_CLOCKS * t.ystart,
           (long long)t.frame_start_clock + (long long)H_CLOCKS * t.ystart);
  HS_CHECK("console.tia.display_stop_clock", t.display_stop_clock,
           (long long)t.display_start_clock + (long long)H_CLOCKS * t.height,
           (long long)t.display_start_clock + (long long)H_CLOCKS * t.height);
  HS_CHECK("console.tia.drawn_until_clock", t.drawn_until_clock, t.frame_start_clock, t.display_stop_clock);
  HS_CHECK("console.tia.clocks_left_in_line", t.clocks_left_in_line, 0, H_CLOCKS);
  // The line position the clocks give and the one the counter holds agree.
  HS_CHECK("console.tia.clocks_left_in_line (line position)",
           ((long long)t.drawn_until_clock - t.frame_start_clock + t.clocks_left_in_line) % H_CLOCKS, 0, 0);
  HS_CHECK("console.tia.pf", t.pf, 0, 0xFFFFF);
  const char* const kPos[5] = {"console.tia.pos[0]", "console.tia.pos[1]", "console.tia.pos[2]",
                               "console.tia.pos[3]", "console.tia.pos[4]"};
  const char* const kHm[5] = {"console.tia.hm[0]", "console.tia.hm[1]", "console.tia.hm[2]",
                              "console.tia.hm[3]", "console.tia.hm[4]"};
  for (int32_t k = 0; k < 5; ++k) {
    HS_CHECK(kPos[k], t.pos[k], 0, SCREEN_WIDTH - 1);  // object masks index by it
    HS_CHECK(kHm[k], t.hm[k], 0, 15);
  }
  HS_CHECK("console.tia.pf_prio_score", t.pf_prio_score, (t.ctrlpf & 0x06) << 5, (t.ctrlpf & 0x06) << 5);
  HS_CHECK("console.tia.refp[0]", t.refp[0], 0, 1);
  HS_CHECK("console.tia.refp[1]", t.refp[1], 0, 1);
  HS_CHECK("console.tia.hmove_blank_pending", t.hmove_blank_pending, 0, 1);
  HS_CHECK("console.tia.cosmic_ark", t.cosmic_ark, 0, 1);
  HS_CHECK("console.tia.dump_active", t.dump_active, 0, 1);
  HS_CHECK("console.tia.hmove_blanks_allowed", t.hmove_blanks_allowed, 0, 1);
  HS_CHECK("console.tia.skip_pixels", t.skip_pixels, 0, 1);

  // Cartridge: the bank / slices select 4 KiB / 1 KiB pieces of the ROM.
  const Cart& k = c.cart;
  switch (k.type) {
    case CART_F8: case CART_F8_SWAPPED: case CART_F8SC: case CART_DPC:
      HS_CHECK("console.cart.bank", k.bank, 0, 1);
      break;
    case CART_F6: case CART_F6SC:
      HS_CHECK("console.cart.bank", k.bank, 0, 3);
      break;
    default:  // 2K, 4K, FE, E0: the window starts at rom + bank * 4096
      HS_CHECK("console.cart.bank", k.bank, 0, 0);
      break;
  }
  if (k.type == CART_E0) {
    const char* const kSlice[3] = {"console.cart.slice[0]", "console.cart.slice[1]", "console.cart.slice[2]"};
    for (int32_t s = 0; s < 3; ++s) HS_CHECK(kSlice[s], k.slice[s], 0, 7);
    HS_CHECK("console.cart.slice[3]", k.slice[3], 7, 7);  // the fixed slice
  }
  if (k.type == CART_DPC) {
    const char* const kCounter[8] = {
        "console.cart.dpc_counter[0]", "console.cart.dpc_counter[1]", "console.cart.dpc_counter[2]",
        "console.cart.dpc_counter[3]", "console.cart.dpc_counter[4]", "console.cart.dpc_counter[5]",
        "console.cart.dpc_counter[6]", "console.cart.dpc_counter[7]"};
    const char* const kMusic[3] = {"console.cart.dpc_music[0]", "console.cart.dpc_music[1]",
                                   "console.cart.dpc_music[2]"};
    for (int32_t s = 0; s < 8; ++s) HS_CHECK(kCounter[s], k.dpc_counter[s], 0, 0x07FF);
    for (int32_t s = 0; s < 3; ++s) HS_CHECK(kMusic[s], k.dpc_music[s], 0, 1);
  }
  // The music clock's fraction: the emulator keeps it in [0, 1); a restore can give 1.0
  // (count 1e8), and a clone of that stores a little more (dpc_fraction_canonical).
  if (state_bad_real(f, "console.cart.dpc_fraction", k.dpc_fraction, 0, 2)) return f;

  if (kept_too) {  // what env_restore keeps from the live environment
    bool same = true;
    const uint8_t* a = (const uint8_t*)&saved.cfg;
    const uint8_t* b = (const uint8_t*)&live.cfg;
    for (uint32_t i = 0; i < (uint32_t)sizeof(EnvConfig); ++i) same = same && a[i] == b[i];
    HS_CHECK("cfg (the environment's settings)", same ? 0 : 1, 0, 0);
    HS_CHECK("console.tia.fb_pos", t.fb_pos, 0, kFrameBytes);
    HS_CHECK("console.tia.partial_frame", t.partial_frame, 0, 1);
    HS_CHECK("console.tia.frame_greyed", t.frame_greyed, 0, 1);
    HS_CHECK("console.tia.p_hide_first[0]", t.p_hide_first[0], 0, 1);
    HS_CHECK("console.tia.p_hide_first[1]", t.p_hide_first[1], 0, 1);
    HS_CHECK("console.tia.pf_reflect_shape", t.pf_reflect_shape, 0, 1);
    HS_CHECK("console.tia.m0_shape", t.m0_shape, M0_NORMAL, M0_HIDDEN);
    const char* const kShapePos[3] = {"console.tia.shape_pos[0]", "console.tia.shape_pos[1]",
                                      "console.tia.shape_pos[2]"};
    for (int32_t m = 0; m < 3; ++m) HS_CHECK(kShapePos[m], t.shape_pos[m], 0, SCREEN_WIDTH - 1);
    // any finite strength plays (paddle_delta saturates); step refuses non-finite ones
    const float kStrength[2] = {saved.paddle_a_strength, saved.paddle_b_strength};
    for (int32_t p = 0; p < 2; ++p) {
      if (!(kStrength[p] >= -3.4e38f && kStrength[p] <= 3.4e38f)) {
        f.field = p ? "paddle_b_strength" : "paddle_a_strength";
        f.real = kStrength[p];
        f.is_real = 1;
        f.allowed = "finite";
        return f;
      }
    }
    HS_CHECK("console.tia.shape_bl_size", t.shape_bl_size, 0, 3);
  }
#undef HS_CHECK
  return f;
}

}  // namespace hs
