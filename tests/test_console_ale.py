"""The emulator against ale-py 0.12.1, frame by frame (RAM, screen, reward, lives, ...)."""
import numpy as np
import pytest

from console_oracle import Lockstep

GAMES = ["pong", "breakout", "space_invaders"]


@pytest.mark.parametrize("sticky", [0.0, 0.25])
@pytest.mark.parametrize("game", GAMES)
def test_random_play_matches_ale(game, sticky):
    run = Lockstep(game, seed=7, sticky=sticky)
    rng = np.random.default_rng(11)
    run.check(colour=True)
    for f in range(1, 401):
        run.step(run.actions[rng.integers(len(run.actions))])
        run.check(colour=f % 50 == 0)
        if run.ale.game_over() or f == 250:  # also a reset in the middle of an episode
            run.reset()
            run.check(colour=True)


@pytest.mark.parametrize("game", GAMES)
def test_clone_restore_round_trip(game):
    run = Lockstep(game, seed=3, sticky=0.25)
    rng = np.random.default_rng(5)
    for _ in range(120):
        run.step(run.actions[rng.integers(len(run.actions))])
    saved_ale, saved_emu = run.ale.cloneState(), run.emu.clone_state()
    branch = [run.actions[rng.integers(len(run.actions))] for _ in range(60)]
    for a in branch:
        run.step(a)
    run.check()
    run.ale.restoreState(saved_ale)
    run.emu.restore_state(saved_emu)
    run.check()
    for a in branch[::-1]:
        run.step(a)
        run.check()


def test_frame_skip_and_truncation():
    run = Lockstep("pong", seed=1, sticky=0.25, frame_skip=4, max_frames=200)
    rng = np.random.default_rng(2)
    for _ in range(80):
        run.step(run.actions[rng.integers(len(run.actions))])
        run.check()
        if run.ale.game_over():
            run.reset()
            run.check()


def test_state_errors():
    run = Lockstep("pong")
    with pytest.raises(ValueError):
        run.emu.restore_state(b"nonsense")
    with pytest.raises(ValueError):
        run.emu.act(99)


@pytest.mark.parametrize("game", ["space_invaders", "pong"])
def test_color_averaging_matches_ale(game):
    from hybridsim._console import GAME_IDS, Emulator
    from console_oracle import PROPS, ale_py

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setBool("color_averaging", True)
    path = ale_py.roms.get_rom_path(game)
    ale.loadROM(path)
    with open(path, "rb") as f:
        emu = Emulator(f.read(), GAME_IDS[game], repeat_action_probability=0.0, color_averaging=True,
                       **PROPS[game])
    actions = [int(a.value) for a in ale.getMinimalActionSet()]
    rng = np.random.default_rng(3)
    for frame in range(120):
        a = actions[rng.integers(len(actions))]
        ale.act(ale_py.Action(a))
        emu.act(a)
        assert np.array_equal(ale.getScreen(), emu.get_screen()), f"frame {frame}: averaged screen"
        if frame % 30 == 0:
            assert np.array_equal(ale.getScreenRGB(), emu.get_screen_rgb()), f"frame {frame}: RGB"
            assert np.array_equal(ale.getScreenGrayscale(), emu.get_screen_grayscale()), f"frame {frame}"


def test_truncation_on_life_loss_and_reward_clamp():
    from hybridsim._console import GAME_IDS, Emulator
    from console_oracle import PROPS, ale_py

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.25)
    ale.setInt("random_seed", 4)
    ale.setBool("truncate_on_loss_of_life", True)
    ale.setInt("reward_min", -1)
    ale.setInt("reward_max", 1)
    ale.setInt("frame_skip", 3)
    path = ale_py.roms.get_rom_path("space_invaders")
    ale.loadROM(path)
    with open(path, "rb") as f:
        emu = Emulator(f.read(), GAME_IDS["space_invaders"], random_seed=4, repeat_action_probability=0.25,
                       truncate_on_loss_of_life=True, reward_min=-1, reward_max=1, frame_skip=3,
                       **PROPS["space_invaders"])
    actions = [int(a.value) for a in ale.getMinimalActionSet()]
    rng = np.random.default_rng(6)
    resets = 0
    for frame in range(700):
        a = actions[rng.integers(len(actions))]
        assert ale.act(ale_py.Action(a)) == emu.act(a), f"step {frame}: reward"
        assert ale.game_over() == emu.game_over(), f"step {frame}: game_over"
        assert ale.lives() == emu.lives()
        assert np.array_equal(ale.getRAM(), emu.get_ram()), f"step {frame}: RAM"
        if ale.game_over():
            resets += 1
            ale.reset_game()
            emu.reset_game()
    assert resets > 0


def test_clone_with_rng_restores_sticky_draws():
    from console_oracle import Lockstep

    run = Lockstep("breakout", seed=12, sticky=0.25)
    rng = np.random.default_rng(1)
    for _ in range(50):
        run.step(run.actions[rng.integers(len(run.actions))])
    s1, s2 = run.ale.cloneState(include_rng=True), run.emu.clone_state(include_rng=True)
    branch = [run.actions[rng.integers(len(run.actions))] for _ in range(40)]
    for a in branch:
        run.step(a)
    run.ale.restoreState(s1)
    run.emu.restore_state(s2)
    for a in branch:
        run.step(a)
        run.check()


def test_vector_emulator_matches_single_emulators():
    from hybridsim._console import GAME_IDS, Emulator, VectorEmulator
    from console_oracle import PROPS, ale_py

    with open(ale_py.roms.get_rom_path("breakout"), "rb") as f:
        rom = f.read()
    seeds = [3, 4, 5, 6]
    vec = VectorEmulator(rom, GAME_IDS["breakout"], 4, seeds=seeds, num_threads=2,
                         repeat_action_probability=0.25, **PROPS["breakout"])
    singles = [Emulator(rom, GAME_IDS["breakout"], random_seed=s, repeat_action_probability=0.25,
                        **PROPS["breakout"]) for s in seeds]
    rng = np.random.default_rng(0)
    for step in range(200):
        actions = rng.integers(0, 4, size=4).astype(np.int32)
        rewards = vec.act(actions)
        assert list(rewards) == [e.act(int(a)) for e, a in zip(singles, actions)]
        assert np.array_equal(vec.get_ram(), np.stack([e.get_ram() for e in singles]))
        assert np.array_equal(vec.get_screen(), np.stack([e.get_screen() for e in singles]))
        over = vec.game_over()
        assert list(over) == [e.game_over() for e in singles]
        if step == 120 or over.any():
            mask = over | (step == 120)
            vec.reset(mask)
            for e, m in zip(singles, mask):
                if m:
                    e.reset_game()


VECTOR_EMULATOR_SHARED = """
import sys, threading
import numpy as np
import ale_py
from hybridsim._console import GAME_IDS, VectorEmulator
sys.path.insert(0, sys.argv[1])
from console_oracle import PROPS

rom = open(ale_py.roms.get_rom_path("breakout"), "rb").read()
def build():
    return VectorEmulator(rom, GAME_IDS["breakout"], 16, num_threads=2, repeat_action_probability=0.25,
                          **PROPS["breakout"])
actions = np.full(16, 3, np.int32)
alone = build()
for _ in range(300):
    alone.act(actions)
shared = build()
def play():
    for _ in range(150):
        shared.act(actions)
        shared.get_ram()
threads = [threading.Thread(target=play) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(np.array_equal(alone.get_ram(), shared.get_ram()), np.array_equal(alone.get_screen(), shared.get_screen()))
"""


def test_vector_emulator_shared_by_threads_takes_turns():
    """act() steps the consoles without the GIL: two threads acting on one VectorEmulator
    (while reading its RAM) end where one thread acting as often does, the same action
    every time so that the order does not matter. In a subprocess: a regression may crash."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", VECTOR_EMULATOR_SHARED, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "True True\n", (done.returncode, done.stdout,
                                                                    done.stderr[-2000:])


def test_vector_emulator_call_inside_its_own_call_is_refused():
    """A call made while the same thread is inside act() (here from the actions' __array__,
    standing in for a signal handler) is refused instead of waiting for itself for ever."""
    from hybridsim._console import GAME_IDS, VectorEmulator
    from console_oracle import PROPS, ale_py

    with open(ale_py.roms.get_rom_path("pong"), "rb") as f:
        vec = VectorEmulator(f.read(), GAME_IDS["pong"], 2, **PROPS["pong"])
    inner = []

    class Actions:
        def __array__(self, dtype=None, copy=None):
            try:
                vec.get_ram()
            except RuntimeError as exc:
                inner.append(str(exc))
            return np.zeros(2, dtype=np.int32)

    vec.act(Actions())
    assert len(inner) == 1 and "VectorEmulator.get_ram() called while this thread is inside" in inner[0]
    assert vec.get_ram().shape == (2, 128)  # the turn was handed back


def test_restore_refuses_foreign_states():
    from console_oracle import Lockstep

    pong, breakout = Lockstep("pong"), Lockstep("breakout")
    with pytest.raises(ValueError):
        breakout.emu.restore_state(pong.emu.clone_state())
    state = pong.emu.clone_state()
    with pytest.raises(ValueError):
        pong.emu.restore_state(state[:-1])
    pong.emu.restore_state(state)  # its own state is fine


@pytest.mark.parametrize("seed", [4753849, 99])
def test_system_random_seed_fills_ram_like_ale(tmp_path, seed):
    """ALE's system RNG fills RIOT RAM at power-on and starts the timer at each reset. A ROM
    that never writes RAM (except the timer value it finds at reset) shows both; saved as
    seaquest.bin ALE applies Seaquest's settings (no mode selection), and only the state
    after loadROM is compared (Seaquest's settings may call the game over at once)."""
    from hybridsim.asm6502 import Assembler
    from hybridsim._console import GAME_IDS, Emulator
    from console_oracle import ale_py
    from romgen import cartridge_4k, emit_end_frame

    asm = Assembler(0xF000)
    asm.label("reset")
    asm.op("LDA", "abs", 0x284)  # INTIM as the reset left it
    asm.op("STA", "zp", 0x90)
    asm.label("frame")
    emit_end_frame(asm)
    asm.op("JMP", "abs", "frame")
    rom = cartridge_4k(asm, "reset")
    path = tmp_path / "seaquest.bin"
    path.write_bytes(rom)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("system_random_seed", seed)
    ale.loadROM(str(path))
    emu = Emulator(rom, GAME_IDS["none"], cart_type="4K", system_random_seed=seed)
    assert np.array_equal(ale.getRAM(), emu.get_ram())
    assert np.array_equal(ale.getScreen(), emu.get_screen())


def test_paddle_limits_mode_and_difficulty_match_ale():
    """paddle_min/paddle_max settings, setDifficulty mid-episode and setMode + reset_game."""
    from hybridsim._console import GAME_IDS, Emulator
    from console_oracle import PROPS, ale_py

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("paddle_min", 100000)
    ale.setInt("paddle_max", 500000)
    path = ale_py.roms.get_rom_path("pong")
    ale.loadROM(path)
    with open(path, "rb") as f:
        emu = Emulator(f.read(), GAME_IDS["pong"], repeat_action_probability=0.0, paddle_min=100000,
                       paddle_max=500000, **PROPS["pong"])
    rng = np.random.default_rng(2)
    actions = [0, 1, 3, 4, 11, 12]
    for frame in range(400):
        if frame == 100:
            ale.setDifficulty(3)
            emu.set_difficulty(3)
        if frame == 250:
            ale.setMode(1)
            ale.reset_game()
            emu.set_mode(1, dict(ram=0x96, value=1, hold=2))
            emu.reset_game()
        a = actions[rng.integers(len(actions))]
        assert ale.act(ale_py.Action(a)) == emu.act(a)
        assert np.array_equal(ale.getRAM(), emu.get_ram()), f"frame {frame}: RAM"
        assert np.array_equal(ale.getScreen(), emu.get_screen()), f"frame {frame}: screen"
        assert ale.getEpisodeFrameNumber() == emu.episode_frame_number()
