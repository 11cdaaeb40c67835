"""Helpers shared by the game-settings tests: ale-py as the oracle for cuda/games.h.

How the tracker is brought into ALE's post-reset state
------------------------------------------------------
ale-py's reset_game steps its game settings on every emulated frame, resets them after
the first 64 frames, and then keeps stepping them through mode selection, a 4-frame
soft reset and the starting actions. Only the RAM after the last of those frames is
visible from Python, so the test "primes" the tracker: game_reset() followed by one
game_step() on the RAM that reset_game left behind. This is exact whenever the settings'
memory after reset depends on the last frame only, which holds for every game as long
as the game's latched flags and lives counters are already settled on that frame; it is
CHECKED rather than assumed: after every reset the primed state is compared field by
field with the settings state ALE serialises in cloneState() (see ale_settings_fields).
The reward field is not compared there (ALE's is that of its last reset frame and is
never reported), nor is Chopper Command's "started" latch, which ALE does not serialise.
"""
import os
import struct

import pathlib

import numpy as np

REPO_DIR = pathlib.Path(__file__).resolve().parent.parent

TRUE_PATTERN = 0xFAB1FAB2
FALSE_PATTERN = 0xBAD1BAD2

# What each game's settings serialise, in order, at the end of cloneState():
# r = last reward, s = score, t = terminal (bool), l = lives, b = a latch (bool),
# p = previous lives byte, d/g = previous point / game difference (tennis),
# c = the other side's score (hangman), h/v = health / level (darkchambers),
# m = matches (haunted_house) or misses (human_cannonball).
NO_LIVES = {"bowling", "boxing", "double_dunk", "enduro", "fishing_derby", "freeway",
            "ice_hockey", "pong", "private_eye", "skiing", "surround",
            "air_raid", "atlantis2", "basic_math", "blackjack", "carnival", "casino", "crossbow",
            "earthworld", "entombed", "flag_capture", "journey_escape"}
# n = Othello's no-move counter, c = Video Cube's cube number; upper-case letters are
# ints ALE writes as bools (Miniature Golf's level, par, carried hits, last stroke
# counter and strokes at the start of the level).
LAYOUT_EXCEPTIONS = {
    "adventure": "rt",
    "backgammon": "rt",
    "darkchambers": "rthvs",
    "et": "rslt",
    "hangman": "rcst",
    "haunted_house": "rmlt",
    "human_cannonball": "rsmt",
    "breakout": "rstbl",
    "kaboom": "rst",
    "klax": "rst",
    "koolaid": "rst",
    "laser_gates": "rst",
    "mario_bros": "rslt",
    "miniature_golf": "rtLPHSA",
    "othello": "rstn",
    "qbert": "rstpl",
    "riverraid": "rstp",
    "space_war": "rst",
    "star_gunner": "rstlb",
    "superman": "rst",
    "tennis": "rtdg",
    "tetris": "rstbl",
    "tic_tac_toe_3d": "rt",
    "video_checkers": "rt",
    "video_chess": "rtl",
    "video_cube": "csrt",
    "word_zapper": "rst",
}
# Games whose rule also reads the cartridge's extra RAM (fed to the tracker after the
# 128 RIOT bytes; ale-py does not expose it, so it is read out of cloneState()).
CART_RAM_GAMES = {"klax"}
# Games whose setMode leaves something in the settings that no later frame rewrites
# (Video Checkers' reverse flag, Video Cube's cube number): the primed tracker needs it.
SET_MODE_GAMES = {"video_checkers", "video_cube"}


def layout(name):
    if name in LAYOUT_EXCEPTIONS:
        return LAYOUT_EXCEPTIONS[name]
    return "rst" if name in NO_LIVES else "rstl"


def ale_settings_fields(ale, name):
    """The game settings' own variables as ALE serialises them: dict letter -> int."""
    blob = ale.cloneState().serialize()
    # ALEState::serialize: six int32, then a length-prefixed string (the system and
    # settings state, ending with a bool "rng included"), then two int32.
    (inner_len,) = struct.unpack_from("<i", blob, 24)
    inner = blob[28:28 + inner_len]
    lay = layout(name)
    n = len(lay)
    raw = struct.unpack_from(f"<{n + 1}I", inner, len(inner) - 4 * (n + 1))
    assert raw[-1] in (TRUE_PATTERN, FALSE_PATTERN), "unexpected serialisation layout"
    out = {}
    for letter, value in zip(lay, raw[:-1]):
        if letter in "tb" or letter.isupper():
            assert value in (TRUE_PATTERN, FALSE_PATTERN), (name, letter, hex(value))
            out[letter] = int(value == TRUE_PATTERN)
        else:
            out[letter] = struct.unpack("<i", struct.pack("<I", value))[0]
    return out


def tracker_fields(tracker, name):
    """The tracker's state expressed with the same letters as ale_settings_fields."""
    score, reward, lives, terminal, a0, a1, _a2, _a3 = tracker.get_state()
    lay = layout(name)
    out = {"r": reward}
    if "s" in lay:
        out["s"] = score
    # ALE keeps Chopper Command's raw game-over condition; the tracker's terminal field
    # already has the "started" latch applied, its raw one is aux[1].
    out["t"] = a1 if name == "chopper_command" else terminal
    if "l" in lay:
        out["l"] = lives
    if name in ("breakout", "star_gunner"):
        out["b"] = a0
    if name in ("qbert", "riverraid"):
        out["p"] = a0
    if name == "tennis":
        out["d"], out["g"] = a0, a1
    if name == "darkchambers":
        out["h"], out["v"] = a0, a1
    if name == "hangman":
        out["c"] = a0
    if name in ("haunted_house", "human_cannonball"):
        out["m"] = a0
    if name == "tetris":
        out["b"] = a0
    if name == "othello":
        out["n"] = a0
    if name == "video_cube":
        out["c"] = _a2
    if name == "miniature_golf":
        for letter, value in zip("LPHSA", (a0, a1, _a2, _a3, score)):
            out[letter] = int(value != 0)
    return out


def cart_ram(ale):
    """The 128 bytes of an F8SC/F6SC cartridge's extra RAM, from ALE's serialised state
    (the cartridge saves its name, its bank, then 128 and one int per byte)."""
    blob = ale.cloneState().serialize()
    for tag in (b"CartridgeF6SC", b"CartridgeF8SC"):
        at = blob.find(tag)
        if at >= 0:
            at += len(tag)
            count = struct.unpack_from("<i", blob, at + 4)[0]
            assert count == 128, "unexpected cartridge serialisation"
            return np.array(struct.unpack_from("<128i", blob, at + 8), np.uint8)
    raise AssertionError("no Superchip cartridge in this state")


def frame_ram(ale, name):
    """What the tracker is fed for a frame: RIOT RAM, plus cartridge RAM where needed."""
    ram = ale.getRAM()
    return np.concatenate([ram, cart_ram(ale)]) if name in CART_RAM_GAMES else ram


def make_ale(name, seed=0):
    from ale_py import ALEInterface, LoggerMode, roms
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("frame_skip", 1)
    ale.setInt("max_num_frames_per_episode", 0)
    ale.loadROM(roms.get_rom_path(name))
    return ale


def frames_per_game(default):
    """HYBRIDSIM_GAMES_FRAMES=N runs N frames per game instead (the long mode)."""
    return int(os.environ.get("HYBRIDSIM_GAMES_FRAMES", default))


class Divergence(AssertionError):
    pass


def run_stream(name, frames, seed=0, resets=2, check_internal=True, tracker_cls=None,
               mode=None, difficulty=None):
    """Play a seeded random stream of minimal actions in ale-py and feed every frame's
    RAM to a GameTracker; raise Divergence at the first frame where anything differs.

    mode / difficulty, when given, are selected through ale-py before the first reset.
    Returns a dict of counts (frames, episodes, nonzero rewards, game overs, lives lost).
    """
    if tracker_cls is None:
        from hybridsim._games import GameTracker as tracker_cls

    ale = make_ale(name, seed)
    if mode is not None:
        ale.setMode(mode)  # both take effect at the next reset_game
    if difficulty is not None:
        ale.setDifficulty(difficulty)
    tracker = tracker_cls(name)
    rng = np.random.default_rng([seed, tracker.game])
    actions = list(ale.getMinimalActionSet())
    stats = dict(frames=0, episodes=0, rewards=0, game_overs=0, life_losses=0)
    reset_at = set(int(x) for x in rng.integers(frames // 4, frames, size=resets))

    def restart():
        ale.reset_game()
        tracker.reset()
        if mode is not None and name in SET_MODE_GAMES:
            tracker.set_mode(mode, ale.getRAM())
        tracker.step(frame_ram(ale, name))
        stats["episodes"] += 1
        where = f"{name}: after reset_game #{stats['episodes']}"
        want = ale_settings_fields(ale, name)
        got = tracker_fields(tracker, name)
        for k in want:
            if k != "r" and want[k] != got[k]:
                raise Divergence(f"{where}: settings field {k!r} ale={want[k]} ours={got[k]}"
                                 f" (all ale={want} ours={got})")
        check_public(where)

    def check_public(where, reward_ale=None, reward_ours=None):
        if reward_ale is not None and reward_ale != reward_ours:
            raise Divergence(f"{where}: reward ale={reward_ale} ours={reward_ours}")
        if ale.lives() != tracker.lives():
            raise Divergence(f"{where}: lives ale={ale.lives()} ours={tracker.lives()}")
        if ale.game_over() != tracker.terminal():
            raise Divergence(f"{where}: game_over ale={ale.game_over()} ours={tracker.terminal()}")

    restart()
    action, hold = actions[0], 0
    prev_lives = tracker.lives()
    for f in range(frames):
        if hold <= 0:
            action = actions[int(rng.integers(len(actions)))]
            hold = int(rng.geometric(0.15))
        hold -= 1
        r_ale = ale.act(action)
        r_ours = tracker.step(frame_ram(ale, name))
        stats["frames"] += 1
        where = f"{name}: frame {f} of episode {stats['episodes']}"
        check_public(where, r_ale, r_ours)
        if check_internal:
            want = ale_settings_fields(ale, name)
            got = tracker_fields(tracker, name)
            if want != got:
                raise Divergence(f"{where}: settings state ale={want} ours={got}")
        stats["rewards"] += r_ale != 0
        lives = tracker.lives()
        stats["life_losses"] += lives < prev_lives
        prev_lives = lives
        if ale.game_over():
            stats["game_overs"] += 1
            restart()
            prev_lives = tracker.lives()
        elif f in reset_at:
            restart()
            prev_lives = tracker.lives()
    return stats


# Values that sit on the edges of the rules in games_step.h (blank digits, wrap points,
# game-over markers, sign bits); pokes pick from these or a random byte.
EDGE_VALUES = (0x00, 0x01, 0x02, 0x03, 0x05, 0x09, 0x0A, 0x10, 0x15, 0x21, 0x24, 0x40, 0x41,
               0x48, 0x53, 0x58, 0x59, 0x60, 0x68, 0x80, 0x84, 0x90, 0x99, 0xA0, 0xAB, 0xBD,
               0xC0, 0xCD, 0xE7, 0xEA, 0xF8, 0xFE, 0xFF)


def run_poked(name, frames, seed=0, poke_prob=0.2):
    """Like run_stream, but before some frames overwrite the RAM bytes the game's rule
    reads (data/games.json "settings_ram") with edge or random values through
    ale.setRAM, so that branches random play rarely reaches (score wrap-arounds, blank
    digits, game-over markers, latches) are compared too. The game itself runs on
    whatever it makes of the poked bytes; reward, lives, game_over and the settings'
    serialised state must still agree on every frame."""
    import json
    from hybridsim._games import GameTracker

    table = json.loads((REPO_DIR / "data" / "games.json").read_text())["games"]
    watched = [a - 0x80 for a in next(g for g in table if g["name"] == name)["settings_ram"]]
    ale = make_ale(name, seed)
    tracker = GameTracker(name)
    rng = np.random.default_rng([seed, tracker.game, 7])
    actions = list(ale.getMinimalActionSet())
    stats = dict(frames=0, episodes=0, pokes=0, game_overs=0)

    def compare(where, r_ale=None, r_ours=None):
        if r_ale is not None and r_ale != r_ours:
            raise Divergence(f"{where}: reward ale={r_ale} ours={r_ours}")
        if ale.lives() != tracker.lives() or ale.game_over() != tracker.terminal():
            raise Divergence(f"{where}: lives/game_over ale={ale.lives()}/{ale.game_over()} "
                             f"ours={tracker.lives()}/{tracker.terminal()}")
        want, got = ale_settings_fields(ale, name), tracker_fields(tracker, name)
        if r_ale is None:
            want.pop("r"), got.pop("r")
        if want != got:
            raise Divergence(f"{where}: settings state ale={want} ours={got}")

    def restart():
        ale.reset_game()
        tracker.reset()
        tracker.step(frame_ram(ale, name))
        stats["episodes"] += 1
        compare(f"{name}: after reset_game #{stats['episodes']}")

    restart()
    for f in range(frames):
        if rng.random() < poke_prob:
            k = int(rng.integers(1, len(watched) + 1))
            for idx in rng.choice(watched, size=k, replace=False):
                v = int(rng.integers(256)) if rng.random() < 0.15 else int(rng.choice(EDGE_VALUES))
                ale.setRAM(int(idx), v)
            stats["pokes"] += 1
        r_ale = ale.act(actions[int(rng.integers(len(actions)))])
        r_ours = tracker.step(frame_ram(ale, name))
        stats["frames"] += 1
        compare(f"{name}: poked run, frame {f}", r_ale, r_ours)
        if ale.game_over():
            stats["game_overs"] += 1
            restart()
    return stats
