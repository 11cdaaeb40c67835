# cython: language_level=3
"""One ALE-exact Atari 2600 environment over the portable core (cuda/ale_env.h).

``Emulator`` reproduces what ``ale_py.ALEInterface`` (ale-py 0.12.1) computes for one
loaded ROM: the same RAM, screen, rewards, lives, game-over flag and frame counters,
frame by frame, including its load and reset sequences and its sticky actions.

    Emulator(rom, game, *, cart_type="4K", ystart=34, height=210, display_format="AUTO",
             left_controller="JOYSTICK", right_controller="JOYSTICK", swap_ports=False,
             swap_paddles=False, hmove_blanks=True, left_difficulty="B",
             right_difficulty="B", tv_type="COLOR", random_seed=0, frame_skip=1,
             repeat_action_probability=0.25, max_num_frames_per_episode=0,
             reward_min=-2**31, reward_max=2**31-1, mode=0, mode_select=None,
             difficulty=0, starting_actions=(),
             truncate_on_loss_of_life=False, color_averaging=False,
             system_random_seed=4753849, paddle_min=-1, paddle_max=-1, sound=False)

  rom            bytes of the cartridge image (size must match cart_type)
  game           game-settings id of cuda/games_ids.h (GAME_IDS maps names to ids)
  cart_type      "2K", "4K", "F8", "F8 swapped", "F6", "E0", "FE", "F8SC", "F6SC", "DPC"
  ystart/height  Display.YStart / Display.Height (height becomes 250 on PAL if 210)
  display_format "AUTO" (ALE's default: 60 frames of detection at load), "NTSC", "PAL"
  *_controller   "JOYSTICK" or "PADDLES" (Controller.Left / Controller.Right)
  swap_ports, swap_paddles, hmove_blanks, *_difficulty, tv_type: the ROM's properties
  random_seed    ALE's random_seed (environment RNG for sticky actions); must be >= 0
  system_random_seed: ALE's system_random_seed (RIOT RAM/timer and cartridge RAM at
                 power-on; ALE's default 4753849)
  mode           the game mode (ALE setMode argument)
  mode_select    None (ALE's default setMode: nothing) or the game's recipe as a dict:
                 ram, value[, value_alt][, ram2, value2], hold, before=[steps]; see
                 hybridsim.console_props.mode_select_for (steps: ("act", action, n),
                 ("select", hold), ("soft_reset",)); ram 0x100 + i watches byte i of
                 the cartridge's extra RAM; or {"custom": "double_dunk"}, or
                 {"custom": "video_cube", "value": variant byte, "cube": n}
  starting_actions: ALE action ids run one frame each at the end of every reset
  sound          ALE's sound_obs: each act makes 512 sound samples (get_audio;
                 cuda/tia_sound.h); the attribute makes_sound says so

  The constructor does what ALEInterface.loadROM does (console power-on, TV detection,
  environment creation, reset_game).

Methods (ALE names):
  reset_game()
  set_mode(mode, mode_select=None)   next reset_game selects this mode (ALE setMode)
  set_difficulty(d)                  difficulty switches from the next frame on
  act(action_a, action_b=18, paddle_strength=1.0, paddle_strength_b=0.0) -> int reward
      ALE action ids; player B uses 18-35 (0-17 are accepted and shifted by 18).
      ALEInterface.act(a, s) is act(a, 18, s, 0.0).
  game_over(with_truncation=True) -> bool
  lives() -> int
  frame_number() / episode_frame_number() -> int
  get_ram(out=None) -> uint8[128]
  get_screen(out=None) -> uint8[height, 160] palette indices (ALE getScreen)
  get_screen_rgb(out=None) -> uint8[height, 160, 3]
  get_screen_grayscale(out=None) -> uint8[height, 160]
  get_audio(out=None) -> uint8[512]  the last act's sound samples (zeros without sound)
  clone_state(include_rng=False) -> bytes ; restore_state(bytes)
      As ALE: the environment RNG travels only when include_rng; sticky actions, input
      events and the frame buffers are not part of a state.
  tv_standard -> "NTSC" or "PAL" ; screen_shape -> (height, 160)
Errors raise ValueError/TypeError with the reason; nothing in here aborts the process.

VectorEmulator(rom, game, num_envs, seeds=None, num_threads=0, **same keywords)
  n independent environments stepped together (OpenMP when built with it; num_threads
  0 = OpenMP's default). act(actions int32[n], paddle_strength=1.0) -> int32[n] rewards;
  game_over() -> bool[n]; lives() -> int32[n]; reset(mask=None) resets the masked
  environments (all if None); get_ram(out=None) -> uint8[n, 128];
  get_screen(out=None) -> uint8[n, height, 160]. Each environment behaves exactly as an
  Emulator built with the same arguments and its seed (sound=True is refused: its worker
  threads do not record sound). Threads sharing one VectorEmulator
  take turns; a call made inside another on the same thread (a signal handler) raises
  RuntimeError.
"""
from libc.stdint cimport uint8_t, int32_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset
from cython.parallel cimport prange

import threading
import zlib

import numpy as np
cimport numpy as cnp

from ale_env cimport (AleEnv, EnvConfig, FrameBuffers, FrameReplay, StateFault, console_materialize,
                     console_materialize_shown,
                     env_clone_canonical, env_state_check, kFrameBytes, state_fault_text)

cdef extern from "ale_env.h" namespace "hs" nogil:
    cdef struct ConsoleProps:
        int32_t cart_type
        int32_t ystart
        int32_t height
        int32_t format
        uint8_t left_paddles
        uint8_t right_paddles
        uint8_t swap_ports
        uint8_t swap_paddles
        uint8_t hmove_blanks
        uint8_t left_difficulty_a
        uint8_t right_difficulty_a
        uint8_t black_white
        uint32_t system_seed
    void env_load(AleEnv& e, const ConsoleProps& props, const EnvConfig& cfg, uint32_t seed,
                  const uint8_t* rom, FrameBuffers& fbs)
    void env_reset(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs)
    int32_t env_act(AleEnv& e, const uint8_t* rom, FrameBuffers& fbs, int32_t a, int32_t b,
                    float sa, float sb)
    bint env_terminal(const AleEnv& e)
    bint game_terminal(int32_t game, const GameState& g)
    int32_t env_lives(const AleEnv& e)
    void env_restore(AleEnv& cur, const AleEnv& saved, bint with_rng)
    cdef struct GameState:
        int32_t score

cdef extern from "tia_sound.h" namespace "hs" nogil:
    const int32_t kSoundSamplesPerAct
    cdef struct TiaSound:
        uint8_t samples[512]
    void tia_sound_reset(TiaSound& s)
    TiaSound* tia_sound_recorder  # thread-local: the sound the TIA's audio writes go to

cdef extern from "screen_rgb.h" namespace "hs" nogil:
    void screen_rgb(const uint8_t* rgb4, const uint8_t* src, uint8_t* dst, int32_t n)
    void screen_rgb_loop(const uint8_t* rgb4, const uint8_t* src, uint8_t* dst, int32_t begin,
                         int32_t end, int32_t n)

cdef extern from "palette.h" namespace "hs" nogil:
    const uint32_t* palette_table(int32_t tv)
    uint8_t palette_gray(const uint32_t* table, uint8_t pixel)

cdef extern from "ale_env.h" nogil:
    """
    static inline bool hs_game_terminal_of(const hs::AleEnv& e) {
      return hs::game_terminal(e.cfg.game, e.game);
    }
    // Random TIA states drawn by the fast and the reference renderer (and run through the
    // collisions-only path); counts differences in pixels or collision latches.
    static int hs_tia_render_selftest(uint32_t seed, int trials) {
      hs::MT19937 g;
      hs::mt_seed(g, seed);
      uint8_t fast[160], ref[160], memo_drawn[160];
      int bad = 0;
      hs::TiaMasks memo, draw_memo;  // shared by all trials: a stale mask would show as a wrong latch or pixel
      hs::tia_masks_clear(memo);
      hs::tia_masks_clear(draw_memo);
      for (int n = 0; n < trials; ++n) {
        hs::Tia t;
        uint8_t* raw = (uint8_t*)&t;
        for (unsigned k = 0; k < sizeof(t); ++k) raw[k] = 0;
        for (int k = 0; k < 5; ++k) t.pos[k] = (int16_t)(hs::mt_next(g) % 160);
        t.nusiz[0] = (uint8_t)hs::mt_next(g);
        t.nusiz[1] = (uint8_t)hs::mt_next(g);
        t.ctrlpf = (uint8_t)hs::mt_next(g);
        t.pf_prio_score = (uint8_t)((t.ctrlpf & 0x06) << 5);
        t.pf = hs::mt_next(g) & ((hs::mt_next(g) & 1) ? 0xFFFFFu : 0u);
        for (int p = 0; p < 2; ++p) t.grp_shown[p] = (hs::mt_next(g) & 1) ? (uint8_t)hs::mt_next(g) : 0;
        t.enabled = (uint8_t)(hs::mt_next(g) & (hs::OBJ_M0 | hs::OBJ_M1 | hs::OBJ_BL));
        if (t.grp_shown[0]) t.enabled |= hs::OBJ_P0;  // as refresh_player and the PFx writes keep it
        if (t.grp_shown[1]) t.enabled |= hs::OBJ_P1;
        if (t.pf) t.enabled |= hs::OBJ_PF;
        t.p_hide_first[0] = hs::mt_next(g) & 1;
        t.p_hide_first[1] = hs::mt_next(g) & 1;
        t.m0_shape = (uint8_t)(hs::mt_next(g) % 3);
        t.pf_reflect_shape = hs::mt_next(g) & 1;
        for (int k = 0; k < 4; ++k) t.color[k] = (uint8_t)(hs::mt_next(g) & 0xFE);
        t.vblank = (hs::mt_next(g) % 16 == 0) ? 2 : 0;
        for (int k = 0; k < 2; ++k) t.shape_pos[k] = t.pos[hs::OB_M0 + k];
        t.shape_pos[2] = t.pos[hs::OB_BL];
        t.shape_nusiz[0] = t.nusiz[0];
        t.shape_nusiz[1] = t.nusiz[1];
        t.shape_bl_size = (uint8_t)((t.ctrlpf >> 4) & 3);
        // some latches already set: those pairs are skipped
        t.collisions = (hs::mt_next(g) & 1) ? (uint16_t)(hs::mt_next(g) & hs::mt_next(g) & 0x7FFF) : 0;
        int x = (int)(hs::mt_next(g) % 160);
        int count = 1 + (int)(hs::mt_next(g) % (uint32_t)(160 - x));
        hs::Tia a = t, b = t, m = t;
        hs::tia_draw_span(a, fast, x, count);
        hs::tia_draw_span(m, memo_drawn, x, count, &draw_memo);  // masks from the shared memo
        hs::tia_draw_span_reference(b, ref, x, count);
        hs::Tia c = t, d = t;  // collisions only, as lazily drawn frames compute them
        hs::tia_span_collisions(c, x, count, nullptr);
        hs::tia_span_collisions(d, x, count, &memo);
        bool same = a.collisions == b.collisions && c.collisions == b.collisions &&
                    d.collisions == b.collisions && m.collisions == b.collisions;
        for (int k = 0; k < count; ++k) same = same && fast[k] == ref[k] && memo_drawn[k] == ref[k];
        if (!same) ++bad;
      }
      return bad;
    }
    // Random catch-ups of a lazily drawn frame with nothing to latch: the closed form
    // (tia_skip_spans) against the line-by-line loop; counts states that differ.
    static int hs_tia_skip_spans_selftest(uint32_t seed, int trials) {
      hs::MT19937 g;
      hs::mt_seed(g, seed);
      int bad = 0;
      for (int n = 0; n < trials; ++n) {
        hs::Tia t;
        uint8_t* raw = (uint8_t*)&t;
        for (unsigned k = 0; k < sizeof(t); ++k) raw[k] = (uint8_t)hs::mt_next(g);
        t.skip_pixels = 1;
        t.cosmic_ark = 0;
        t.hmove_blank_pending = hs::mt_next(g) & 1;
        t.display_start_clock = -(int32_t)(hs::mt_next(g) % 20000);
        t.display_stop_clock = t.display_start_clock + hs::H_CLOCKS * 250;
        t.clocks_left_in_line = (int32_t)(hs::mt_next(g) % (hs::H_CLOCKS + 1));  // 0-228
        const int32_t lines = (int32_t)(hs::mt_next(g) % 250);
        t.drawn_until_clock = t.display_start_clock + hs::H_CLOCKS * lines + hs::H_CLOCKS - t.clocks_left_in_line;
        t.fb_pos = (int32_t)(hs::mt_next(g) % 8000);
        const uint32_t reach = (hs::mt_next(g) & 3) == 0 ? 3u * hs::H_CLOCKS : 2u * hs::H_CLOCKS;
        int32_t clock = t.drawn_until_clock + 1 + (int32_t)(hs::mt_next(g) % reach);
        if (clock > t.display_stop_clock) clock = t.display_stop_clock;
        if (clock <= t.drawn_until_clock) continue;
        switch (hs::mt_next(g) % 3) {  // nothing to latch, three ways
          case 0: t.vblank = 2; break;
          case 1: t.vblank = 0; t.collisions = 0x7FFF; break;
          default:
            t.vblank = 0;
            t.collisions = 0;
            t.enabled = (uint8_t)(hs::mt_next(g) & hs::OBJ_BL);
            t.grp_shown[0] = t.grp_shown[1] = 0;
            t.pf = 0;
            break;
        }
        if (hs::tia_open_latches(t) != 0) { ++bad; continue; }
        hs::Tia fast = t, loop = t, dispatched = t;
        hs::tia_skip_spans(fast, clock);
        hs::tia_catch_up_spans(loop, nullptr, clock, nullptr);
        hs::tia_catch_up(dispatched, nullptr, clock, nullptr);
        if (__builtin_memcmp(&fast, &loop, sizeof(t)) != 0 || __builtin_memcmp(&dispatched, &loop, sizeof(t)) != 0)
          ++bad;
      }
      return bad;
    }
    """
    bint hs_game_terminal_of(const AleEnv& e)
    int hs_tia_render_selftest(uint32_t seed, int trials)
    int hs_tia_skip_spans_selftest(uint32_t seed, int trials)
    void hs_set_simd_enabled(bint on)
    bint hs_simd_available()

cdef str state_fault_message(StateFault fault, int cart_type):
    """env_state_check's verdict as a sentence (the field, its value, the range)."""
    field = (<bytes>fault.field).decode()
    text = "state field " + state_fault_text(fault)
    if field.startswith("console.cart."):
        names = {v[0]: k for k, v in CART_TYPES.items()}
        text += f" for a{'n' if names.get(cart_type, '?')[0] in 'EF' else ''} {names.get(cart_type, '?')} cartridge"
    return text + " (corrupted or crafted state)"


CART_TYPES = {"2K": (0, 2048), "4K": (1, 4096), "F8": (2, 8192), "F8 swapped": (3, 8192),
              "F6": (4, 16384), "E0": (5, 8192), "FE": (6, 8192), "F8SC": (7, 8192),
              "F6SC": (8, 16384), "DPC": (9, 10240)}
from hybridsim import _games as _game_table
# Game-settings ids of cuda/games_ids.h (generated with data/games.json); 0 = no settings
# (reward 0, never over), used for ROMs ALE has no settings for and for console tests.
GAME_IDS = {name: _game_table.game_id(name) for name in _game_table.game_names() if name}
GAME_IDS["none"] = 0
MODE_STEPS = {"act": 0, "select": 1, "soft_reset": 2}

# Palette entry -> R, G, B, 0 for NTSC (0) and PAL (1), as screen_rgb (screen_rgb.h) reads it.
cdef uint8_t RGB_BYTES[2 * 256 * 4]


cdef void _fill_rgb_bytes():
    cdef int tv, v
    cdef const uint32_t* table
    for tv in range(2):
        table = palette_table(tv)
        for v in range(256):
            RGB_BYTES[(tv * 256 + v) * 4] = (table[v] >> 16) & 0xFF
            RGB_BYTES[(tv * 256 + v) * 4 + 1] = (table[v] >> 8) & 0xFF
            RGB_BYTES[(tv * 256 + v) * 4 + 2] = table[v] & 0xFF
            RGB_BYTES[(tv * 256 + v) * 4 + 3] = 0


_fill_rgb_bytes()

# clone_state()'s bytes: magic, ROM/config fingerprint (16), include_rng flag (1), AleEnv,
# and since format 3 a CRC-32 of all that (little-endian), so that a state damaged on disk
# or in transit is refused instead of restoring as another plausible state
cdef bytes STATE_MAGIC = b"HSENV3"
cdef bytes STATE_MAGIC_V2 = b"HSENV2"  # format 2, without the CRC: still restored
cdef Py_ssize_t STATE_HEAD = len(STATE_MAGIC) + 16 + 1
SOUND_SAMPLES_PER_ACT = kSoundSamplesPerAct  # getAudio's length (tia_sound.h)


def _state_body_end(bytes state):
    """Where the AleEnv of Emulator.clone_state()'s bytes ends (the CRC checked, for format
    3), or -1 for bytes of another shape; ValueError for a format-3 state whose CRC fails."""
    cdef Py_ssize_t end = STATE_HEAD + <Py_ssize_t>sizeof(AleEnv)
    if len(state) == end + 4 and state.startswith(STATE_MAGIC):
        if zlib.crc32(memoryview(state)[:end]) != int.from_bytes(state[end:], "little"):
            raise ValueError("state is damaged: its CRC-32 does not match its bytes (they changed "
                             "after cloneState)")
        return end
    if len(state) == end and state.startswith(STATE_MAGIC_V2):
        return end
    return -1


def state_summary(state):
    """(frame_number, episode_frame_number, mode, difficulty) held in Emulator.clone_state()'s
    bytes, or None for bytes of another shape (ALEState(bytes) reads them, as ale-py's does)."""
    state = bytes(state)
    try:
        if _state_body_end(state) < 0:
            return None
    except ValueError:  # damaged: restoreState says so
        return None
    cdef AleEnv env  # a copy: the bytes need not be aligned for the struct
    cdef const char* raw = state
    memcpy(&env, raw + STATE_HEAD, sizeof(AleEnv))
    return (int(env.frame_number), int(env.episode_frame_number), int(env.cfg.mode),
            int(env.cfg.difficulty))


def tia_render_selftest(uint32_t seed=1, int trials=100000, simd=None):
    """Random TIA states through the fast and the reference renderer: mismatch count.
    simd=True / False forces the fast renderer's AVX2 / portable pixel loop (None: the
    one this CPU runs); ValueError if the CPU has no AVX2 for simd=True."""
    if simd is None:
        return hs_tia_render_selftest(seed, trials)
    hs_set_simd_enabled(bool(simd))
    try:
        if simd and not hs_simd_available():
            raise ValueError("tia_render_selftest: simd=True but this CPU has no AVX2")
        return hs_tia_render_selftest(seed, trials)
    finally:
        hs_set_simd_enabled(True)


def screen_rgb_selftest(uint32_t seed=1, int trials=200):
    """Random screens (NTSC and PAL tables, runs of one colour, some odd indices) through screen_rgb's
    AVX2 path and the portable loop: count of screens that differ. 0 without AVX2."""
    if not hs_simd_available():
        return 0
    rng = np.random.default_rng(seed)
    cdef int bad = 0, t, n
    cdef cnp.ndarray[cnp.uint8_t, ndim=1] src
    cdef cnp.ndarray[cnp.uint8_t, ndim=1] fast, slow
    cdef const uint8_t* table
    for t in range(trials):
        n = 160 * int(rng.integers(1, 251))
        src = (rng.integers(0, 128, n) * 2).astype(np.uint8)
        if t % 2:  # odd bytes (PAL colour loss) in some blocks of 32
            src[rng.integers(0, n, int(rng.integers(1, 20)))] |= 1
        for _ in range(int(rng.integers(0, 40))):  # runs of one colour, as screens have
            start = int(rng.integers(0, n))
            src[start:start + int(rng.integers(1, 400))] = src[start]
        fast = np.full(3 * n + 8, 0xAB, np.uint8)
        slow = fast.copy()
        table = &RGB_BYTES[(t % 2) * 256 * 4]
        screen_rgb(table, &src[0], &fast[0], n)
        screen_rgb_loop(table, &src[0], &slow[0], 0, n, n)
        if not np.array_equal(fast, slow):
            bad += 1
    return bad


def tia_skip_spans_selftest(uint32_t seed=1, int trials=100000):
    """Random catch-ups of a lazily drawn frame that cannot latch a collision, through the
    closed form and the line-by-line loop (and the dispatcher): count of differing states."""
    return hs_tia_skip_spans_selftest(seed, trials)


cdef int _bool_prop(value, str name, str yes, str no) except -1:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, str) and value.upper() in (yes, no):
        return 1 if value.upper() == yes else 0
    raise ValueError(f"{name} must be a bool or {yes!r}/{no!r}, got {value!r}")


cdef int _set_mode_select(EnvConfig* cfg, spec) except -1:
    cfg.mode_ram = -1
    cfg.mode_value_alt = -1
    cfg.mode_ram2 = -1
    cfg.num_mode_before = 0
    cfg.mode_custom = 0
    if spec is None:
        return 0
    if spec == {"custom": "double_dunk"}:
        cfg.mode_custom = 1
        return 0
    if spec == {"custom": "adventure"}:
        cfg.mode_custom = 2  # MODE_CUSTOM_ADVENTURE
        return 0
    if isinstance(spec, dict) and spec.get("custom") == "video_cube":
        cfg.mode_custom = 3  # MODE_CUSTOM_VIDEO_CUBE: variant byte and cube number, see env_video_cube_mode
        cfg.mode_value = int(spec["value"])
        cfg.mode_value2 = int(spec["cube"])
        return 0
    if not isinstance(spec, dict) or "ram" not in spec or "value" not in spec:
        raise ValueError(f"mode_select must be None, {{'custom': 'double_dunk' | 'adventure' | 'video_cube', ...}} or a dict with 'ram' "
                         f"and 'value', got {spec!r}")
    unknown = set(spec) - {"ram", "value", "value_alt", "ram2", "value2", "hold", "before"}
    if unknown:
        raise ValueError(f"mode_select has unknown keys {sorted(unknown)}")
    cfg.mode_ram = int(spec["ram"]) & 0x17F  # 0x100 + i: byte i of the cartridge's extra RAM
    cfg.mode_value = int(spec["value"])
    cfg.mode_value_alt = int(spec.get("value_alt", -1))
    cfg.mode_ram2 = int(spec["ram2"]) & 0x7F if spec.get("ram2") is not None else -1
    cfg.mode_value2 = int(spec.get("value2", 0))
    cfg.mode_hold = int(spec.get("hold", 1))
    before = list(spec.get("before", ()))
    if len(before) > 4:
        raise ValueError(f"mode_select['before'] holds at most 4 steps, got {len(before)}")
    for k, step in enumerate(before):
        kind = step[0]
        if kind not in MODE_STEPS:
            raise ValueError(f"mode_select step kind must be one of {sorted(MODE_STEPS)}, got {kind!r}")
        cfg.mode_before[k][0] = MODE_STEPS[kind]
        if kind == "act":
            if not (0 <= int(step[1]) < 18) or int(step[2]) < 0:
                raise ValueError(f"mode_select act step needs an action 0-17 and a count >= 0, got {step!r}")
            cfg.mode_before[k][1], cfg.mode_before[k][2] = int(step[1]), int(step[2])
        elif kind == "select":
            cfg.mode_before[k][1], cfg.mode_before[k][2] = int(step[1]), 1
        else:
            cfg.mode_before[k][1], cfg.mode_before[k][2] = 0, 1
    cfg.num_mode_before = len(before)
    return 0


_BLEND_CACHE = {}


def palette_rgb(tv="NTSC"):
    """ALE's 256-entry palette (0xRRGGBB) as a uint32 array."""
    cdef const uint32_t* table = palette_table(1 if tv == "PAL" else 0)
    return np.array([table[i] for i in range(256)], dtype=np.uint32)


def phosphor_tables(tv="NTSC"):
    """ALE's colour_averaging tables (PhosphorBlend, blend ratio 77%): the blended RGB of
    every pair of even palette entries, and the nearest even entry (L1 distance, first
    wins) for every RGB on a 4-step grid. Odd pixel values (PAL colour loss) are not
    defined by ALE; they map as their even neighbour here."""
    if tv in _BLEND_CACHE:
        return _BLEND_CACHE[tv]
    pal = palette_rgb(tv).astype(np.int64)
    rgb = np.stack([(pal >> 16) & 0xFF, (pal >> 8) & 0xFF, pal & 0xFF], axis=1)[0::2]  # 128 x 3
    hi = np.maximum(rgb[:, None, :], rgb[None, :, :])
    lo = np.minimum(rgb[:, None, :], rgb[None, :, :])
    blend = np.minimum(((hi - lo) * 77) // 100 + lo, 255)  # [current, previous, channel]
    grid = np.arange(0, 256, 4)
    nearest = np.empty((64, 64, 64), dtype=np.uint8)
    for ri, r in enumerate(grid):
        dist = (np.abs(rgb[:, 0] - r)[None, None, :] + np.abs(rgb[None, None, :, 1] - grid[:, None, None])
                + np.abs(rgb[None, None, :, 2] - grid[None, :, None]))
        nearest[ri] = (np.argmin(dist, axis=2) * 2).astype(np.uint8)
    avg_index = nearest[blend[..., 0] >> 2, blend[..., 1] >> 2, blend[..., 2] >> 2]  # 128 x 128
    _BLEND_CACHE[tv] = avg_index
    return avg_index


class OutputShapeError(ValueError, RuntimeError):
    """An output array of the wrong shape (ale-py raises RuntimeError for it: both catch it)."""


class OutputTypeError(ValueError, TypeError):
    """An output that is no writable C-contiguous uint8 array (ale-py: TypeError)."""


cdef class Emulator:
    # Every method keeps the GIL, as ale-py's ALEInterface does (two threads acting on two
    # of its consoles took as long as one thread acting on both): threads sharing one
    # console take turns instead of stepping it or reading it at the same time.
    cdef AleEnv* env
    cdef FrameBuffers fbs
    cdef bytes rom
    cdef cnp.ndarray frames
    cdef readonly int height
    cdef object blend
    cdef object _blended
    cdef bytes fingerprint
    # Frames are emulated without drawing unless the screen will probably be read after
    # this act (_arm_replay); a screen read draws what is pending by running the frame
    # again (console.h, FrameReplay). The pixels are the same either way.
    cdef FrameReplay* replay
    cdef uint64_t read_history  # bit k: the screen was read after the act k acts back
    # ALE's sound observation (sound_obs): the two channels and the samples of the last act
    # (tia_sound.h). Without it the TIA's audio writes are not recorded.
    cdef TiaSound sound
    cdef readonly bint makes_sound

    def __cinit__(self):
        self.env = <AleEnv*>malloc(sizeof(AleEnv))
        self.replay = <FrameReplay*>malloc(sizeof(FrameReplay))
        if self.env == NULL or self.replay == NULL:
            raise MemoryError("cannot allocate the environment state")
        memset(self.env, 0, sizeof(AleEnv))
        memset(self.replay, 0, sizeof(FrameReplay))
        self.fbs.replay = self.replay
        self.fbs.ram_cache = NULL  # the console's own RAM (console.h)
        self.read_history = 0

    def __dealloc__(self):
        if self.env != NULL:
            free(self.env)
            self.env = NULL
        if self.replay != NULL:
            free(self.replay)
            self.replay = NULL

    def __init__(self, rom, int game, *, cart_type="4K", int ystart=34, int height=210,
                 display_format="AUTO", left_controller="JOYSTICK", right_controller="JOYSTICK",
                 swap_ports=False, swap_paddles=False, hmove_blanks=True, left_difficulty="B",
                 right_difficulty="B", tv_type="COLOR", random_seed=0, int frame_skip=1,
                 float repeat_action_probability=0.25, int max_num_frames_per_episode=0,
                 int reward_min=-2147483648, int reward_max=2147483647, int mode=0,
                 mode_select=None, int difficulty=0,
                 starting_actions=(), truncate_on_loss_of_life=False, color_averaging=False,
                 system_random_seed=4753849, int paddle_min=-1, int paddle_max=-1, sound=False):
        cdef ConsoleProps props
        cdef EnvConfig cfg
        rom = bytes(rom)
        if cart_type not in CART_TYPES:
            raise ValueError(f"cart_type must be one of {sorted(CART_TYPES)}, got {cart_type!r}")
        ctype, size = CART_TYPES[cart_type]
        if len(rom) != size and not (cart_type == "DPC" and len(rom) > size):
            raise ValueError(f"a {cart_type} cartridge holds {size} bytes, the ROM has {len(rom)}")
        # Combat's properties ask for 256 rows from line 39 (ALE cannot load it; hybridsim can).
        if not (0 <= ystart <= 100) or not (100 <= height <= 256) or ystart + height > 300:
            raise ValueError(f"display window out of range (0-100, 100-256, sum <= 300): "
                             f"ystart={ystart}, height={height}")
        if display_format not in ("AUTO", "AUTO-DETECT", "NTSC", "PAL"):
            raise ValueError(f"display_format must be AUTO, NTSC or PAL, got {display_format!r}")
        if frame_skip < 1:
            raise ValueError(f"frame_skip must be >= 1, got {frame_skip}")
        if random_seed is None or int(random_seed) < 0 or int(random_seed) > 0xFFFFFFFF:
            raise ValueError(f"random_seed must be an integer in [0, 2**32), got {random_seed!r}")
        if not (0 <= difficulty <= 3):
            raise ValueError(f"difficulty must be 0-3, got {difficulty}")
        starting_actions = [int(a) for a in starting_actions]
        if any(not (0 <= a < 18 or a == 40) for a in starting_actions):
            raise ValueError(f"starting_actions must be player-A action ids (0-17, 40), got {starting_actions}")
        runs = []  # (action, frames); no negative indexing: wraparound is off in this build
        for a in starting_actions:
            if runs and runs[len(runs) - 1][0] == a:
                runs[len(runs) - 1][1] += 1
            else:
                runs.append([a, 1])
        if len(runs) > 16:
            raise ValueError(f"starting_actions may change action at most 16 times, got {len(runs)} runs")
        if game not in GAME_IDS.values():
            raise ValueError(f"unknown game id {game}; this build knows {GAME_IDS}")
        for name, value in (("left_controller", left_controller), ("right_controller", right_controller)):
            if value not in ("JOYSTICK", "PADDLES"):
                raise ValueError(f"{name} must be 'JOYSTICK' or 'PADDLES', got {value!r}")
        props.cart_type = ctype
        props.ystart = ystart
        props.height = height
        props.format = -1 if display_format.startswith("AUTO") else (1 if display_format == "PAL" else 0)
        props.left_paddles = left_controller == "PADDLES"
        props.right_paddles = right_controller == "PADDLES"
        props.swap_ports = _bool_prop(swap_ports, "swap_ports", "YES", "NO")
        props.swap_paddles = _bool_prop(swap_paddles, "swap_paddles", "YES", "NO")
        props.hmove_blanks = _bool_prop(hmove_blanks, "hmove_blanks", "YES", "NO")
        props.left_difficulty_a = _bool_prop(left_difficulty, "left_difficulty", "A", "B")
        props.right_difficulty_a = _bool_prop(right_difficulty, "right_difficulty", "A", "B")
        props.black_white = _bool_prop(tv_type, "tv_type", "BLACKWHITE", "COLOR")
        if not (0 <= int(system_random_seed) <= 0xFFFFFFFF):
            raise ValueError(f"system_random_seed must be in [0, 2**32), got {system_random_seed!r}")
        props.system_seed = <uint32_t>int(system_random_seed)
        memset(&cfg, 0, sizeof(EnvConfig))
        cfg.game = game
        cfg.frame_skip = frame_skip
        cfg.repeat_action_probability = repeat_action_probability
        cfg.max_num_frames_per_episode = max_num_frames_per_episode
        cfg.reward_min = reward_min
        cfg.reward_max = reward_max
        cfg.mode = mode
        _set_mode_select(&cfg, mode_select)
        cfg.difficulty = difficulty
        cfg.num_starting_runs = len(runs)
        for k, (a, n) in enumerate(runs):
            cfg.starting_runs[k][0] = a
            cfg.starting_runs[k][1] = n
        cfg.use_paddles = props.left_paddles or props.right_paddles
        cfg.truncate_on_loss_of_life = bool(truncate_on_loss_of_life)
        if (paddle_min >= 0 and paddle_max >= 0 and paddle_min > paddle_max) or paddle_min < -1 or paddle_max < -1:
            raise ValueError(f"paddle_min/paddle_max must be -1 (ALE's default) or 0 <= min <= max, "
                             f"got {paddle_min}, {paddle_max}")
        cfg.paddle_min = paddle_min
        cfg.paddle_max = paddle_max
        self.rom = rom
        self.frames = np.zeros((2, kFrameBytes), dtype=np.uint8)
        self.fbs.buf[0] = <uint8_t*>cnp.PyArray_DATA(self.frames)
        self.fbs.buf[1] = self.fbs.buf[0] + kFrameBytes
        self.fbs.shown = 0
        cdef const uint8_t* rom_ptr = self.rom
        cdef uint32_t seed = <uint32_t>int(random_seed)
        self.makes_sound = bool(sound)
        tia_sound_reset(self.sound)  # ALE makes its sound object anew at loadROM, and only then
        self._record_sound(True)
        env_load(self.env[0], props, cfg, seed, rom_ptr, self.fbs)
        self._record_sound(False)
        self.height = self.env.console.height
        self.blend = phosphor_tables(self.tv_standard) if color_averaging else None
        # A state only fits the same ROM, mapper, display window and TV standard (ALE
        # checks the ROM's md5 likewise); restore_state refuses anything else.
        import hashlib
        self.fingerprint = hashlib.md5(rom + repr((cart_type, ystart, height, self.tv_standard,
                                                    sizeof(AleEnv))).encode()).digest()

    @property
    def tv_standard(self):
        return "PAL" if self.env.console.pal else "NTSC"

    @property
    def screen_shape(self):
        return (self.height, 160)

    def set_mode(self, int mode, mode_select=None):
        """ALE's setMode: the mode (and its selection recipe) used from the next reset_game."""
        cdef EnvConfig cfg = self.env.cfg
        cfg.mode = mode
        _set_mode_select(&cfg, mode_select)
        self.env.cfg = cfg

    def set_ram(self, int index, int value):
        """ALE's setRAM: a bus write of `value` at $80 + index (the data bus keeps it)."""
        if not 0 <= index < 128:
            raise IndexError(f"RAM index {index} out of range 0..127")
        if not 0 <= value <= 255:
            raise ValueError(f"RAM value {value} out of range 0..255")
        self.env.console.riot.ram[index] = <uint8_t>value
        self.env.console.data_bus = <uint8_t>value

    def set_difficulty(self, int difficulty):
        """ALE's setDifficulty: difficulty switches (bit 0 left A, bit 1 right A), applied
        with the inputs of the next emulated frame."""
        if not (0 <= difficulty <= 3):
            raise ValueError(f"difficulty must be 0-3, got {difficulty}")
        self.env.cfg.difficulty = difficulty

    def reset_game(self):
        cdef const uint8_t* rom_ptr = self.rom
        self._arm_replay()
        self._record_sound(True)
        env_reset(self.env[0], rom_ptr, self.fbs)
        self._record_sound(False)

    def act(self, int action_a, int action_b=18, float paddle_strength=1.0,
            float paddle_strength_b=0.0):
        if not (0 <= action_a < 18 or action_a == 40):
            raise ValueError(f"player A action must be an ALE action id 0-17 (or 40 RESET), got {action_a}")
        if 0 <= action_b < 18:
            action_b += 18
        if not (18 <= action_b < 36 or action_b == 40):
            raise ValueError(f"player B action must be 18-35 (or 0-17, or 40 RESET), got {action_b}")
        cdef const uint8_t* rom_ptr = self.rom
        cdef int32_t reward
        self._arm_replay()
        self._record_sound(True)
        reward = env_act(self.env[0], rom_ptr, self.fbs, action_a, action_b,
                         paddle_strength, paddle_strength_b)
        self._record_sound(False)
        return reward

    cdef void _record_sound(self, bint on):
        """While on, the TIA's audio writes go to this emulator's channels (the core's
        thread-local recorder, tia_sound.h). Emulation keeps the GIL, so no other emulator
        runs on this thread meanwhile. Without sound the recorder is null already: no
        thread-local write (a call in a shared object) per act."""
        global tia_sound_recorder
        if self.makes_sound:
            tia_sound_recorder = &self.sound if on else NULL

    def get_audio(self, out=None):
        """ALE's getAudio: the 512 samples (uint8, silence 128) of the last act, zeros before
        the first act or without sound; into `out` (uint8, 512) if given."""
        out = self._check_out(out, (kSoundSamplesPerAct,), OutputTypeError)
        cdef uint8_t[::1] view = out
        memcpy(&view[0], self.sound.samples, kSoundSamplesPerAct)
        return out

    def game_over(self, with_truncation=True):
        if with_truncation:
            return bool(env_terminal(self.env[0]))
        return bool(hs_game_terminal_of(self.env[0]))

    def lives(self):
        return env_lives(self.env[0])

    def frame_number(self):
        return self.env.frame_number

    def episode_frame_number(self):
        return self.env.episode_frame_number

    def get_ram(self, out=None):
        out = self._check_out(out, (128,), OutputTypeError)
        cdef uint8_t[::1] view = out
        memcpy(&view[0], self.env.console.riot.ram, 128)
        return out

    cdef const uint8_t* _screen(self):
        self._materialize(False)
        return self.fbs.buf[self.fbs.shown]

    cdef void _arm_replay(self):
        """Before emulating: draw the frames as they run if the screen will probably be
        read after this act (else a read runs the frame again), leave them undrawn if not.
        The guess: the reads of the last 16 acts repeat with the shortest period p <= 16
        they show (p 1: every act; 4: once per frame skip of 4, or its last two acts, as a
        max-pool reads them), else "the last act's was read"."""
        cdef uint64_t history = self.read_history
        cdef bint draw = history & 1
        cdef int p
        for p in range(1, 17):
            if ((history ^ (history >> p)) & 0xFFFF) == 0:
                draw = (history >> (p - 1)) & 1
                break
        self.replay.lazy = not draw
        self.read_history = history << 1

    def screen_pending(self):
        """Whether the last frame waits to be drawn: a screen read would run it again."""
        return bool(self.replay.pending[self.fbs.shown])

    cdef void _materialize(self, bint both=True):
        """Draws the frames left undrawn: both buffers, or the shown one (all a screen read
        without colour averaging needs); every pixel read goes through here."""
        cdef const uint8_t* rom_ptr = self.rom
        self.read_history |= 1
        if both:
            console_materialize(rom_ptr, self.fbs)
        else:
            console_materialize_shown(rom_ptr, self.fbs)

    def _check_out(self, out, shape, shape_error=OutputShapeError):
        """`out`, or a new array, of `shape`; refused as ale-py refuses it: a wrong type, dtype,
        layout or a read-only array as TypeError, then a wrong shape as `shape_error`
        (its screens say RuntimeError, its getRAM's binding TypeError); all ValueErrors too."""
        if out is None:
            return np.empty(shape, dtype=np.uint8)
        if not isinstance(out, np.ndarray):
            raise OutputTypeError(f"out must be a C-contiguous uint8 array of shape {shape}, got "
                                  f"{type(out).__name__}")
        if out.dtype != np.uint8 or not out.flags.c_contiguous:
            layout = "" if out.flags.c_contiguous else "non-contiguous "
            raise OutputTypeError(f"out must be a C-contiguous uint8 array of shape {shape}, got "
                                  f"{layout}{out.dtype} of shape {out.shape}")
        if not out.flags.writeable:  # Cython's own words: "buffer source array is read-only"
            raise OutputTypeError("out must be a writable array; this one is read-only")
        if tuple(out.shape) != shape:
            raise shape_error(f"out must be a C-contiguous uint8 array of shape {shape}, got shape {out.shape}")
        return out

    cdef const uint8_t* _indices(self):
        """The screen ALE reports: the last frame, or with colour averaging the blend of
        the last two frame buffers (ALE's phosphor blend, mapped back to palette indices)."""
        if self.blend is None:
            return self._screen()
        n = self.height * 160
        self._materialize()
        cur = self.frames[self.fbs.shown, :n] >> 1
        prev = self.frames[self.fbs.shown ^ 1, :n] >> 1
        self._blended = np.ascontiguousarray(self.blend[cur, prev])
        cdef uint8_t[::1] view = self._blended
        return &view[0]

    def get_screen(self, out=None):
        out = self._check_out(out, (self.height, 160))
        cdef uint8_t[:, ::1] view = out
        memcpy(&view[0, 0], self._indices(), self.height * 160)
        return out

    def get_screen_rgb(self, out=None):
        out = self._check_out(out, (self.height, 160, 3))
        cdef uint8_t[:, :, ::1] view = out
        cdef const uint8_t* rgb = &RGB_BYTES[(1 if self.env.console.pal else 0) * 256 * 4]
        cdef const uint8_t* src = self._indices()
        screen_rgb(rgb, src, &view[0, 0, 0], self.height * 160)
        return out

    def get_screen_grayscale(self, out=None):
        out = self._check_out(out, (self.height, 160))
        cdef uint8_t[:, ::1] view = out
        cdef const uint32_t* table = palette_table(1 if self.env.console.pal else 0)
        cdef const uint8_t* src = self._indices()
        cdef uint8_t* dst = &view[0, 0]
        cdef int i, n = self.height * 160
        for i in range(n):
            dst[i] = palette_gray(table, src[i])
        return out

    def clone_state(self, include_rng=False):
        """Bytes: magic, ROM/config fingerprint (16), include_rng flag (1), AleEnv (its
        settings zeroed but for the mode and the difficulty), CRC-32 of those."""
        cdef AleEnv* copy = <AleEnv*>malloc(sizeof(AleEnv))
        if copy == NULL:
            raise MemoryError("cannot allocate a state")
        memcpy(copy, self.env, sizeof(AleEnv))
        env_clone_canonical(copy[0], bool(include_rng))
        # the settings are zeroed (a restore keeps the live ones) but for the mode and the
        # difficulty: ale-py's serialized states hold them, and ALEState(bytes) reports them
        copy.cfg.mode = self.env.cfg.mode
        copy.cfg.difficulty = self.env.cfg.difficulty
        cdef bytes state = (STATE_MAGIC + self.fingerprint + (b"\x01" if include_rng else b"\x00")
                            + (<char*>copy)[:sizeof(AleEnv)])
        free(copy)
        return state + zlib.crc32(state).to_bytes(4, "little")

    def raw_state(self):
        """(AleEnv bytes, both frame buffers as uint8[2, kFrameBytes], index of the one
        shown): everything this emulator holds, for hybridsim._vector's engine."""
        self._materialize()
        return (<char*>self.env)[:sizeof(AleEnv)], self.frames.copy(), self.fbs.shown

    def restore_state(self, state):
        state = bytes(state)
        cdef Py_ssize_t head = STATE_HEAD
        n = head + sizeof(AleEnv)
        if _state_body_end(state) < 0:
            raise ValueError(f"not a state of this emulator build (expected {n + 4} bytes starting "
                             f"{STATE_MAGIC!r})")
        if state[len(STATE_MAGIC):len(STATE_MAGIC) + 16] != self.fingerprint:
            raise ValueError("state was saved by an emulator with another ROM, mapper, display window or TV standard")
        cdef AleEnv* saved = <AleEnv*>malloc(sizeof(AleEnv))
        if saved == NULL:
            raise MemoryError("cannot allocate a state")
        cdef const char* raw = state
        memcpy(saved, raw + head, sizeof(AleEnv))
        if state[head - 1] > 1:  # cloneState writes 0 or 1 (a forged byte read as "no RNG")
            free(saved)
            raise ValueError(f"not a state of this emulator build (its include_rng byte is "
                             f"{state[head - 1]}, not 0 or 1)")
        cdef bint with_rng = state[head - 1] == 1
        cdef StateFault fault = env_state_check(saved[0], self.env[0], with_rng, False)
        if fault.field != NULL:
            free(saved)
            raise ValueError(state_fault_message(fault, self.env.console.cart.type))
        env_restore(self.env[0], saved[0], with_rng)
        free(saved)



cdef class _Turn


cdef class VectorEmulator:
    """n environments stepped in parallel (see the module docstring)."""
    cdef list envs
    cdef AleEnv** ptrs
    cdef FrameBuffers** fbs  # each Emulator's own buffers (the objects stay alive in envs)
    cdef bytes rom
    cdef readonly int num_envs
    cdef readonly int height
    cdef int num_threads
    # act and reset step the consoles without the GIL (prange): a second thread calling in
    # then would step or read the same consoles at the same time, so calls take turns.
    cdef object _turn
    cdef object _turn_holder

    def __cinit__(self):
        self.ptrs = NULL
        self.fbs = NULL
        self._turn = threading.Lock()
        self._turn_holder = None

    def __dealloc__(self):
        free(self.ptrs)
        free(self.fbs)

    def __init__(self, rom, int game, int num_envs, seeds=None, int num_threads=0, **kwargs):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if num_threads < 0:
            raise ValueError(f"num_threads must be >= 0 (0: OpenMP default), got {num_threads}")
        if seeds is None:
            seeds = list(range(num_envs))
        seeds = [int(x) for x in seeds]
        if len(seeds) != num_envs:
            raise ValueError(f"seeds must hold num_envs={num_envs} values, got {len(seeds)}")
        if kwargs.get("color_averaging"):
            raise ValueError("color_averaging is not supported by VectorEmulator")
        if kwargs.get("sound"):  # its worker threads do not record (tia_sound.h); ale-py's vector env has none either
            raise ValueError("sound is not supported by VectorEmulator; use one Emulator(sound=True) per environment")
        self.envs = [Emulator(rom, game, random_seed=seed, **kwargs) for seed in seeds]
        self.num_envs = num_envs
        self.num_threads = num_threads
        self.height = (<Emulator>self.envs[0]).height
        self.rom = (<Emulator>self.envs[0]).rom
        self.ptrs = <AleEnv**>malloc(num_envs * sizeof(AleEnv*))
        self.fbs = <FrameBuffers**>malloc(num_envs * sizeof(FrameBuffers*))
        if self.ptrs == NULL or self.fbs == NULL:
            raise MemoryError("cannot allocate the environment table")
        cdef Emulator e
        for k in range(num_envs):
            e = self.envs[k]
            self.ptrs[k] = e.env
            self.fbs[k] = &e.fbs

    cdef _Turn _turn_of(self, str name):
        """A with block holding this VectorEmulator for one call `name`."""
        cdef _Turn turn = _Turn.__new__(_Turn)
        turn.owner, turn.name = self, name
        return turn

    def act(self, actions, float paddle_strength=1.0):
        with self._turn_of("act"):
            return self._act(actions, paddle_strength)

    cdef object _act(self, actions, float paddle_strength):
        cdef int32_t[::1] acts = np.ascontiguousarray(actions, dtype=np.int32)
        if acts.shape[0] != self.num_envs:
            raise ValueError(f"actions must hold {self.num_envs} values, got {acts.shape[0]}")
        for a in np.asarray(acts):
            if not (0 <= a < 18):
                raise ValueError(f"actions must be ALE player-A action ids 0-17, got {a}")
        rewards = np.empty(self.num_envs, dtype=np.int32)
        cdef int32_t[::1] out = rewards
        cdef const uint8_t* rom_ptr = self.rom
        cdef int k, n = self.num_envs
        if self.num_threads > 0:
            for k in prange(n, nogil=True, schedule="dynamic", num_threads=self.num_threads):
                out[k] = env_act(self.ptrs[k][0], rom_ptr, self.fbs[k][0], acts[k], 18, paddle_strength, 0.0)
        else:
            for k in prange(n, nogil=True, schedule="dynamic"):
                out[k] = env_act(self.ptrs[k][0], rom_ptr, self.fbs[k][0], acts[k], 18, paddle_strength, 0.0)
        return rewards

    def reset(self, mask=None):
        with self._turn_of("reset"):
            self._reset(mask)

    cdef object _reset(self, mask):
        cdef uint8_t[::1] which = (np.ones(self.num_envs, dtype=np.uint8) if mask is None
                                   else np.ascontiguousarray(mask, dtype=np.uint8))
        if which.shape[0] != self.num_envs:
            raise ValueError(f"mask must hold {self.num_envs} values, got {which.shape[0]}")
        cdef const uint8_t* rom_ptr = self.rom
        cdef int k, n = self.num_envs
        if self.num_threads > 0:  # as _act: num_threads holds for resets too
            for k in prange(n, nogil=True, schedule="dynamic", num_threads=self.num_threads):
                if which[k]:
                    env_reset(self.ptrs[k][0], rom_ptr, self.fbs[k][0])
        else:
            for k in prange(n, nogil=True, schedule="dynamic"):
                if which[k]:
                    env_reset(self.ptrs[k][0], rom_ptr, self.fbs[k][0])

    def game_over(self):
        with self._turn_of("game_over"):
            return np.array([bool(env_terminal(self.ptrs[k][0])) for k in range(self.num_envs)])

    def lives(self):
        with self._turn_of("lives"):
            return np.array([env_lives(self.ptrs[k][0]) for k in range(self.num_envs)], dtype=np.int32)

    def get_ram(self, out=None):
        if out is None:
            out = np.empty((self.num_envs, 128), dtype=np.uint8)
        with self._turn_of("get_ram"):
            for k in range(self.num_envs):
                (<Emulator>self.envs[k]).get_ram(out[k])
        return out

    def get_screen(self, out=None):
        if out is None:
            out = np.empty((self.num_envs, self.height, 160), dtype=np.uint8)
        with self._turn_of("get_screen"):
            for k in range(self.num_envs):
                (<Emulator>self.envs[k]).get_screen(out[k])
        return out


cdef class _Turn:
    """One call's turn at a VectorEmulator: waits for the calls of other threads to end;
    a call from inside another on the same thread (a signal handler) is refused."""
    cdef VectorEmulator owner
    cdef str name

    def __enter__(self):
        me = threading.get_ident()
        if self.owner._turn_holder == me:
            raise RuntimeError(f"VectorEmulator.{self.name}() called while this thread is inside another "
                               f"call of the same VectorEmulator (from a signal handler?)")
        self.owner._turn.acquire()
        self.owner._turn_holder = me

    def __exit__(self, *exc):
        self.owner._turn_holder = None
        self.owner._turn.release()
        return False
