"""hybridsim.ALEVectorInterface against ale_py.ALEVectorInterface, side by side per step."""
import inspect
import os
import shutil

import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("gymnasium")

import hybridsim  # noqa: E402
from hybridsim.ale_vector import ALEVectorInterface  # noqa: E402
from hybridsim.vector import AtariVectorEnv  # noqa: E402


def assert_same(ours, theirs, where):
    assert len(ours) == len(theirs), where
    for mine, want in zip(ours, theirs):
        if isinstance(want, dict):
            assert mine.keys() == want.keys(), where
            for key in want:
                # final_obs rows of environments that did not end are unspecified (ale-py's
                # hold whatever its buffer had, docs/VECTOR.md)
                rows = (theirs[2] | theirs[3]) if key == "final_obs" else slice(None)
                np.testing.assert_array_equal(mine[key][rows], want[key][rows], err_msg=f"{where}: info[{key!r}]")
        else:
            np.testing.assert_array_equal(mine, want, err_msg=str(where))


def play_side_by_side(game, num_envs, steps, **kwargs):
    """Both interfaces from one ROM path: seeded reset, random actions and paddle strengths,
    partial resets (unsorted ids, kept and new seeds) now and then."""
    path = ale_py.roms.get_rom_path(game)
    theirs = ale_py.ALEVectorInterface(path, num_envs, **kwargs)
    ours = ALEVectorInterface(path, num_envs, **kwargs)
    assert ours.get_action_set() == theirs.get_action_set()  # ale_py.Action members, as theirs
    assert ours.get_observation_shape() == theirs.get_observation_shape()
    assert ours.get_num_envs() == theirs.get_num_envs() == num_envs
    ids, seeds = list(range(num_envs)), list(range(11, 11 + num_envs))
    assert_same(ours.reset(ids, seeds), theirs.reset(ids, seeds), "reset")
    rng = np.random.default_rng(5)
    n = len(theirs.get_action_set())
    for t in range(steps):
        actions = rng.integers(0, n, num_envs)
        strengths = rng.uniform(-0.2, 1.2, num_envs).astype(np.float32)
        theirs.send(actions, strengths)
        ours.send(actions.tolist(), strengths)
        assert_same(ours.recv(), theirs.recv(), f"step {t}")
        if t % 61 == 30:
            ids, seeds = [num_envs - 1, 0], [-1, 500 + t]
            assert_same(ours.reset(ids, seeds), theirs.reset(ids, seeds), f"partial reset at {t}")


@pytest.mark.parametrize("game,kwargs", [
    ("breakout", dict(repeat_action_probability=0.25)),
    ("kaboom", dict(repeat_action_probability=0.25, episodic_life=True)),  # paddles: strengths count
    ("pong", dict(grayscale=False, img_height=100, img_width=80, stack_num=2, full_action_space=True,
                  noop_max=5, reward_clipping=False, max_episode_steps=900, frame_skip=3,
                  autoreset_mode="SameStep")),
])
def test_matches_ale_py(game, kwargs):
    play_side_by_side(game, 5, 300, num_threads=2, **kwargs)


def test_paddle_strengths_reach_the_paddles():
    """The check above can fail: with every strength 1.0 on our side, Kaboom differs."""
    path = ale_py.roms.get_rom_path("kaboom")
    theirs, ours = ale_py.ALEVectorInterface(path, 2), ALEVectorInterface(path, 2)
    theirs.reset([0, 1], [1, 2]), ours.reset([0, 1], [1, 2])
    differed = False
    for _ in range(100):
        theirs.send([2, 3], [0.3, 0.7])
        ours.send([2, 3], [1.0, 1.0])
        differed |= not np.array_equal(ours.recv()[0], theirs.recv()[0])
    assert differed


def test_async_environments_each_follow_ale_py():
    """batch_size < num_envs: whichever environments come back, each one's steps are those
    of ale-py's synchronous interface with that environment's actions."""
    path = ale_py.roms.get_rom_path("breakout")
    num_envs, steps = 4, 60
    def action(env, k):
        return (3 * env + k) % 4
    reference = ale_py.ALEVectorInterface(path, num_envs, repeat_action_probability=0.25)
    want = {e: [] for e in range(num_envs)}
    obs, info = reference.reset(list(range(num_envs)), [3, 4, 5, 6])
    for e in range(num_envs):
        want[e].append(obs[e])
    for k in range(steps):
        reference.send([action(e, k) for e in range(num_envs)], [1.0] * num_envs)
        obs = reference.recv()[0]
        for e in range(num_envs):
            want[e].append(obs[e])

    ours = ALEVectorInterface(path, num_envs, repeat_action_probability=0.25, batch_size=2, num_threads=2)
    got = {e: [] for e in range(num_envs)}
    obs, info = ours.reset(list(range(num_envs)), [3, 4, 5, 6])
    while True:
        for row, e in enumerate(info["env_id"]):
            got[int(e)].append(obs[row])
        ids = [int(e) for e in info["env_id"]]
        if all(len(got[e]) > steps for e in range(num_envs)):
            break
        ours.send([action(e, len(got[e]) - 1) for e in ids], [1.0] * len(ids))
        obs, _, _, _, info = ours.recv()
    for e in range(num_envs):
        np.testing.assert_array_equal(np.array(got[e][: steps + 1]), np.array(want[e]), err_msg=f"env {e}")


def test_env_ale_drives_the_environment_itself():
    """AtariVectorEnv(...).ale, as ale-py's: its calls step that environment."""
    theirs = ale_py.vector_env.AtariVectorEnv("breakout", 3, num_threads=1)
    ours = AtariVectorEnv("breakout", 3, num_threads=1)
    assert_same(ours.ale.reset([0, 1, 2], [7, 8, 9]), theirs.ale.reset([0, 1, 2], [7, 8, 9]), "reset")
    for t in range(50):
        ours.ale.send([1, 2, 3], [0.5, 1.0, 1.0])
        theirs.ale.send([1, 2, 3], [0.5, 1.0, 1.0])
        assert_same(ours.ale.recv(), theirs.ale.recv(), t)
    actions = np.array([0, 1, 2])  # and gymnasium's calls go on from there
    assert_same(ours.step(actions), theirs.step(actions), "step")
    ours.close(), theirs.close()


def test_bad_input_is_refused_as_ale_py_refuses_it():
    path = ale_py.roms.get_rom_path("pong")
    theirs, ours = ale_py.ALEVectorInterface(path, 3), ALEVectorInterface(path, 3)
    with pytest.raises(RuntimeError, match="first reset"):
        ours.reset([1], [5])
    for ids, seeds, error in (([3], [1], IndexError), ([0, 1, 2], [1, 2], ValueError),
                              ([0, 0, 1], [1, 1, 1], ValueError), ([0, 1, 2], [1.5, 2, 3], TypeError)):
        with pytest.raises(error):
            theirs.reset(ids, seeds)
        with pytest.raises(error):
            ours.reset(ids, seeds)
    # uint64 ids and seeds wrapped to negative ones (a seed of 2**64-1 kept the old seed)
    for ids, seeds in (([0], [2**64 - 1]), ([0], [2**63]), (np.array([2**64 - 1], np.uint64), [5])):
        with pytest.raises(TypeError):
            theirs.reset(ids, seeds)
        with pytest.raises(TypeError, match="must fit in a signed 64-bit int"):
            ours.reset(ids, seeds)
    ours.reset([0, 1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="actions must have shape"):
        ours.send([0, 1], [1.0, 1.0])
    with pytest.raises(ValueError, match="same size"):
        ours.send([0, 1, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="actions must be in 0..5"):
        ours.send([0, 1, 6], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        ours.send([0, 1, 2], [1.0, float("nan"), 1.0])
    with pytest.raises(NotImplementedError, match="XLA"):
        ours.handle()
    ours.send([0, 1, 2], [1.0, 2.0, float("inf")])  # nothing was queued by the refusals
    assert ours.recv()[0].shape == (3, 4, 84, 84)


def test_signature_is_ale_pys():
    """Parameter names, order and defaults as ale_py.ALEVectorInterface's (read from its
    nanobind docstring)."""
    doc = ale_py.ALEVectorInterface.__init__.__doc__.splitlines()[0]
    namespace = {"os": os}
    exec("def reference" + doc[len("__init__"): doc.index(" -> ")] + ": pass", namespace)
    want = inspect.signature(namespace["reference"]).parameters
    ours = inspect.signature(ALEVectorInterface.__init__).parameters
    assert list(ours)[: len(want)] == list(want)
    for name, p in want.items():
        assert ours[name].default == p.default, name
        assert ours[name].kind == p.kind, name
    assert hybridsim.ALEVectorInterface is ALEVectorInterface


def test_rom_file_is_known_by_md5_then_by_stem(tmp_path):
    shipped = ale_py.roms.get_rom_path("breakout")
    renamed = tmp_path / "my_copy.bin"
    shutil.copy(shipped, renamed)
    from hybridsim import roms
    reads = []
    real_read = roms.read_rom
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(roms, "read_rom", lambda path: reads.append(path) or real_read(path))
        env = AtariVectorEnv(None, 2, rom_file=renamed)  # by md5: it is breakout
    assert env.game == "breakout"
    assert reads == [renamed]  # once, however often the template loads: one file's bytes throughout
    reference = AtariVectorEnv("breakout", 2)
    assert_same(env.reset(seed=3), reference.reset(seed=3), "reset")
    with pytest.raises(ValueError, match="is the 'breakout' ROM, but game='pong'"):
        AtariVectorEnv("pong", 2, rom_file=renamed)
    unknown = tmp_path / "no_such_game.bin"
    unknown.write_bytes(bytes(4096))
    with pytest.raises(ValueError, match="unsupported ROM"):
        ALEVectorInterface(unknown, 2)
    with pytest.raises(FileNotFoundError, match="ROM file not found"):
        ALEVectorInterface(tmp_path / "missing.bin", 2)
    with pytest.raises(TypeError, match="game must be a game's name"):
        AtariVectorEnv(None, 2)
