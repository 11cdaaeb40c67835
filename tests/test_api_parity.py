"""API details where hybridsim follows ale-py or names a misuse: positional cloneState,
closed-env get_state, pickling refused with a pointer to the snapshot API, gpu_options,
negative reset seeds, state bytes equal after a restore, and shallow copies."""
import copy
import pickle

import numpy as np
import pytest

from hybridsim.ale import ALEInterface, ALEState
from hybridsim.roms import rom_path
from hybridsim.vector import AtariVectorEnv


def _ale():
    a = ALEInterface()
    a.loadROM(str(rom_path("pong")))
    return a


def _load(a, game):
    """ale-py's or hybridsim's ALEInterface `a` on `game`, seed 0, no sticky actions."""
    a.setInt("random_seed", 0)
    a.setFloat("repeat_action_probability", 0.0)
    a.loadROM(str(rom_path(game)))
    a.reset_game()


def test_clone_state_takes_include_rng_positionally():
    a = _ale()
    assert a.cloneState(True).serialize() == a.cloneState(include_rng=True).serialize()
    assert a.cloneState(False).serialize() == a.cloneState().serialize()


def test_get_state_after_close_is_refused_like_set_state():
    e = AtariVectorEnv("pong", 1, num_threads=1)
    e.reset(seed=0)
    state = e.get_state()
    e.close()
    with pytest.raises(RuntimeError, match="closed"):
        e.get_state()
    with pytest.raises(RuntimeError, match="closed"):
        e.set_state(state)


def test_pickling_names_the_class_and_the_snapshot_api():
    a = _ale()
    with pytest.raises(TypeError, match=r"ALEInterface.*cloneState"):
        pickle.dumps(a)
    e = AtariVectorEnv("pong", 1, num_threads=1)
    try:
        with pytest.raises(TypeError, match=r"AtariVectorEnv.*get_state"):
            pickle.dumps(e)
    finally:
        e.close()
    # the snapshot APIs are the way: their bytes pickle
    s = pickle.loads(pickle.dumps(a.cloneState().serialize()))
    a.restoreState(ALEState(s, a._md5))


def test_gpu_options_are_checked_for_the_cpu_backend():
    with pytest.raises(ValueError, match="backend='cpu'"):
        AtariVectorEnv("pong", 1, num_threads=1, gpu_options={"design": "split"})
    with pytest.raises(ValueError, match="gpu_options must be a dict"):
        AtariVectorEnv("pong", 1, num_threads=1, gpu_options=5)
    with pytest.raises(ValueError, match="gpu_options must be a dict"):
        AtariVectorEnv("pong", 1, backend="gpu", gpu_options=5)
    e = AtariVectorEnv("pong", 1, num_threads=1, gpu_options={})  # empty: nothing to apply
    e.close()


@pytest.mark.parametrize("spec", [-1, -3, np.array([-1, 5]), np.array([7, -2]), np.array([-1, -1])])
def test_negative_seeds_keep_the_environment_seed_as_in_ale_py(spec):
    """ale-py's vector env passes a negative seed through as 'keep this environment's
    seed' (reset(seed=-1): environment 0 keeps its seed, environment 1 gets 0)."""
    ale_vector = pytest.importorskip("ale_py.vector_env")

    def play(env):
        env.reset(seed=11)
        for _ in range(4):
            env.step(np.array([1, 3]))
        obs, _ = env.reset(seed=spec.copy() if isinstance(spec, np.ndarray) else spec)
        seen = [np.asarray(obs).copy()]
        for _ in range(40):
            obs, *_ = env.step(np.array([2, 3]))
            seen.append(np.asarray(obs).copy())
        env.close()
        return np.stack(seen)

    want = play(ale_vector.AtariVectorEnv("pong", num_envs=2, num_threads=1))
    got = play(AtariVectorEnv("pong", 2, num_threads=1))
    np.testing.assert_array_equal(got, want)


# pitfall2: the DPC's music clock fraction, which restore rounds to a count of 1e-8
@pytest.mark.parametrize("game", ["pong", "breakout", "seaquest", "pitfall2"])
def test_state_bytes_after_restore_equal_the_clone_as_in_ale_py(game):
    """clone, act, restore, clone again: the same bytes (ale-py: the same ALEState), since
    the fields restore keeps from the live emulator are not part of a clone's bytes."""
    ale_py = pytest.importorskip("ale_py")

    def round_trip(a, raw):
        _load(a, game)
        for _ in range(50):
            a.act(1)
        s = a.cloneState()
        for _ in range(37):
            a.act(3)
        a.restoreState(s)
        return raw(s) == raw(a.cloneState())

    assert round_trip(ale_py.ALEInterface(), lambda s: s)
    assert round_trip(ALEInterface(), lambda s: s.serialize())


@pytest.mark.parametrize("game, mode, difficulty", [
    ("space_invaders", 5, 1), ("pong", 1, 3), ("breakout", 12, 1), ("adventure", 2, 2), ("video_cube", 101, 1),
    ("backgammon", 0, 3)])  # backgammon's default difficulty, 0, is not among its selectable ones
def test_a_restored_state_brings_back_its_mode_and_difficulty_as_in_ale_py(game, mode, difficulty):
    """A state cloned in the default mode and difficulty, restored after setMode/
    setDifficulty and a reset: ale-py plays the state's difficulty from the next frame and
    resets into the state's mode; the other way round too (cloned in the set ones, restored
    after going back to the defaults). RAM, screen and the mode a clone reports agree."""
    ale_py = pytest.importorskip("ale_py")

    def play(a):
        _load(a, game)
        seen = []

        def record():  # after the restore, then after a reset_game
            for _ in range(2):
                for _ in range(60):
                    a.act(4)
                state = a.cloneState()
                seen.append((a.getRAM().copy(), a.getScreenRGB().copy(), state.getCurrentMode(),
                             state.getDifficulty()))
                a.reset_game()

        def select(m, d):
            a.setMode(m)
            a.setDifficulty(d)
            a.reset_game()
            for _ in range(30):
                a.act(3)

        for _ in range(40):
            a.act(1)
        default = a.cloneState()
        select(mode, difficulty)
        chosen = a.cloneState()
        a.restoreState(default)
        record()
        select(a.getAvailableModes()[0], a.getAvailableDifficulties()[0])
        a.restoreState(chosen)
        record()
        return seen

    want, got = play(ale_py.ALEInterface()), play(ALEInterface())
    assert len(want) == len(got)
    for k, (w, g) in enumerate(zip(want, got)):
        assert w[2:] == g[2:], (k, w[2:], g[2:])
        np.testing.assert_array_equal(g[0], w[0], err_msg=f"RAM at check {k}")
        np.testing.assert_array_equal(g[1], w[1], err_msg=f"screen at check {k}")


def test_a_state_whose_include_rng_byte_is_neither_0_nor_1_is_refused():
    """cloneState writes 0 or 1; another value, with the CRC made to match, restored as
    "no RNG" without a word."""
    import zlib
    a = ALEInterface()
    a.loadROM(str(rom_path("pong")))
    state = bytearray(a.cloneState(include_rng=True).serialize())
    flag_at = len(b"HSENV3") + 16
    assert state[flag_at] == 1
    state[flag_at] = 7
    state[-4:] = zlib.crc32(bytes(state[:-4])).to_bytes(4, "little")
    with pytest.raises(ValueError, match="include_rng byte is 7, not 0 or 1"):
        a.restoreState(ALEState(bytes(state)))


def test_a_state_restore_names_foreign_bytes_before_a_mode_the_game_lacks():
    """air_raid has no mode 0, the mode ALEState(bytes) reads from bytes it cannot parse:
    garbage and another game's state still get the emulator's own words; a state of this
    game with a mode it lacks is refused as setMode refuses it, and changes nothing."""
    from hybridsim.ale import UnavailableSettingError
    air_raid, pong = ALEInterface(), ALEInterface()
    air_raid.loadROM(str(rom_path("air_raid")))
    pong.loadROM(str(rom_path("pong")))
    with pytest.raises(ValueError, match="not a state of this emulator build"):
        air_raid.restoreState(ALEState(b"garbage" * 100))
    with pytest.raises(ValueError, match="saved by an emulator with another ROM"):
        air_raid.restoreState(ALEState(pong.cloneState().serialize()))
    for _ in range(30):
        air_raid.act(1)
    own = air_raid.cloneState()
    ram = air_raid.getRAM().copy()
    crafted = ALEState(own.serialize(), air_raid._md5, own.getFrameNumber(), own.getEpisodeFrameNumber(), 0, 0)
    for _ in range(30):
        air_raid.act(3)
    before = air_raid.cloneState().serialize(), air_raid.getRAM().copy()
    with pytest.raises(UnavailableSettingError, match="state fields mode and difficulty hold 0 and 0, which air_raid does not have"):
        air_raid.restoreState(crafted)
    assert air_raid.cloneState().serialize() == before[0]
    np.testing.assert_array_equal(air_raid.getRAM(), before[1])
    air_raid.restoreState(own)
    np.testing.assert_array_equal(air_raid.getRAM(), ram)


@pytest.mark.parametrize("game", ["pong", "breakout"])
def test_a_modified_rom_under_a_games_name_plays_as_in_ale_py(game, tmp_path):
    """One byte changed (the unused $FFF9): ale-py takes the image by its file name with a
    warning, its game settings, but Stella's default properties (its properties are found
    by md5), so the paddle games get joysticks; isSupportedROM knows it not. hybridsim
    played it with the shipped image's paddles, silently, from the first frame apart."""
    ale_py = pytest.importorskip("ale_py")
    image = bytearray(rom_path(game).read_bytes())
    image[-7] ^= 1
    rom = tmp_path / f"{game}.bin"
    rom.write_bytes(bytes(image))

    def play(a):
        a.setInt("random_seed", 3)
        a.setFloat("repeat_action_probability", 0.0)
        a.loadROM(str(rom))
        actions = a.getMinimalActionSet()
        rng = np.random.default_rng(0)
        seen = []
        for _ in range(400):
            reward = a.act(actions[rng.integers(len(actions))])
            seen.append((reward, a.getRAM().copy(), a.getScreenRGB().copy()))
        return seen

    want = play(ale_py.ALEInterface())
    with pytest.warns(RuntimeWarning, match=rf"{game}.bin is an image ale-py does not ship .*by its file name"):
        got = play(ALEInterface())
    for frame, (w, g) in enumerate(zip(want, got)):
        assert w[0] == g[0], frame
        np.testing.assert_array_equal(g[1], w[1], err_msg=f"RAM at frame {frame}")
        np.testing.assert_array_equal(g[2], w[2], err_msg=f"screen at frame {frame}")
    assert ALEInterface.isSupportedROM(str(rom)) is ale_py.ALEInterface.isSupportedROM(str(rom)) is None


def test_miniature_golf_rewards_after_a_restore_match_ale_py():
    """ALE saves Miniature Golf's five counters as bools and reads them back as ints (the
    serializer's bool patterns); the clone's bytes must not apply that twice. The RAM
    writes move the ball to another hole so that the counters decide the reward."""
    ale_py = pytest.importorskip("ale_py")

    def rewards(a):
        _load(a, "miniature_golf")
        for _ in range(5):
            a.act(0)
        s = a.cloneState()
        for _ in range(10):
            a.act(3)
        a.restoreState(s)
        out = []
        for k in range(60):
            if k == 3:
                a.setRAM(0x08, 0)
            if k == 6:
                a.setRAM(0x2F, 0x05)
            out.append(a.act(0))
        return out

    want = rewards(ale_py.ALEInterface())
    assert any(want)  # the scenario reaches the counters
    assert rewards(ALEInterface()) == want


def test_shallow_copy_shares_the_engine_as_in_ale_py():
    """copy.copy works on ale-py's AtariVectorEnv (a Python object around its C++ one);
    pickling and deepcopy do not, in either."""
    ale_vector = pytest.importorskip("ale_py.vector_env")
    for env in (ale_vector.AtariVectorEnv("pong", num_envs=2, num_threads=1),
                AtariVectorEnv("pong", 2, num_threads=1)):
        env.reset(seed=3)
        twin = copy.copy(env)
        twin.step(np.zeros(2, dtype=np.int64))
        after_twin = env.step(np.zeros(2, dtype=np.int64))[0]
        env.reset(seed=3)
        env.step(np.zeros(2, dtype=np.int64))
        np.testing.assert_array_equal(env.step(np.zeros(2, dtype=np.int64))[0], after_twin)
        for refused in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError):
                refused(env)
        env.close()


def test_a_state_made_from_bytes_knows_its_frames_mode_and_difficulty():
    """ALEState(serialized bytes) reads them from the bytes in ale-py; they were zeros here."""
    import ale_py
    seen = {}
    for name, a, state_type in (("ale-py", ale_py.ALEInterface(), ale_py.ALEState),
                                ("hybridsim", ALEInterface(), ALEState)):
        a.setInt("random_seed", 0)
        a.setFloat("repeat_action_probability", 0.0)
        a.loadROM(str(rom_path("breakout")))
        a.setMode(4)
        a.setDifficulty(1)
        a.reset_game()
        for _ in range(77):
            a.act(1)
        s = state_type(a.cloneState().serialize())
        seen[name] = (s.getFrameNumber(), s.getEpisodeFrameNumber(), s.getCurrentMode(), s.getDifficulty())
    assert seen["hybridsim"] == seen["ale-py"] and seen["ale-py"][2:] == (4, 1), seen
    with pytest.raises(ValueError, match="11 bytes are not a serialized hybridsim state"):
        ALEState(b"not a state").getFrameNumber()  # ale-py's getters raise too (SystemError)


@pytest.mark.parametrize("continuous", [False, True])
def test_vector_map_action_idx_is_ale_py_s_in_both_modes(continuous):
    """ale-py's AtariVectorEnv sets map_action_idx[h + 1, v + 1, fire] from AtariEnv's
    mapping whether or not the actions are continuous (ours had it only when they were)."""
    from ale_py.env import AtariEnv
    expected = np.zeros((3, 3, 2), np.int32)
    for h in (-1, 0, 1):
        for v in (-1, 0, 1):
            for fire in (0, 1):
                expected[h + 1, v + 1, fire] = AtariEnv.map_action_idx(h, v, bool(fire)).value
    env = AtariVectorEnv("pong", num_envs=1, num_threads=1, continuous=continuous)
    try:
        assert env.map_action_idx.dtype == np.int32
        np.testing.assert_array_equal(env.map_action_idx, expected)
    finally:
        env.close()
