"""Gymnasium registration: hybridsim/<Game>-v5 and friends against ale-py's ALE/<Game>-v5."""
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")

import hybridsim  # noqa: E402,F401  (registers the hybridsim/ ids)


def test_ids_mirror_ale_py():
    ids = set(gymnasium.registry)
    for name in ("Pong", "Breakout", "MsPacman"):
        for suffix in ("-v5", "NoFrameskip-v5", "-v4", "NoFrameskip-v4", "-v0", "NoFrameskip-v0"):
            assert f"hybridsim/{name}{suffix}" in ids
    spec = gymnasium.spec("hybridsim/Pong-v5")
    assert spec.kwargs == gymnasium.spec("ALE/Pong-v5").kwargs


def test_ids_load_with_the_module_named_in_the_id():
    """gymnasium 1.x loads no plugins: in a fresh interpreter the ids exist after `import
    hybridsim`, or with gymnasium's `module:id` form (as the docs say), not before. The
    environment does not print ale-py's banner (it printed one per environment)."""
    import subprocess
    import sys
    script = """
import gymnasium
try:
    gymnasium.make("hybridsim/Pong-v5")
except gymnasium.error.NamespaceNotFound:
    print("not registered before the import")
env = gymnasium.make("hybridsim:hybridsim/Pong-v5")
print(type(env.unwrapped).__module__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["not", "registered", "before", "the", "import", "hybridsim.env"]
    assert "Stella" not in done.stderr, done.stderr  # no ale-py banner for hybridsim's environment


@pytest.mark.parametrize("env_id", ["Pong-v5", "BreakoutNoFrameskip-v4"])
def test_single_env_matches_ale_py(env_id):
    """Same seeds (one of them a negative ALE seed after ale-py's SeedSequence), sticky
    actions on in v5: identical observations, rewards, flags and info."""
    ours = gymnasium.make(f"hybridsim/{env_id}")
    ale_id = f"ALE/{env_id}" if env_id.endswith("v5") else env_id
    theirs = gymnasium.make(ale_id)
    for seed in (2, 12345):  # 12345 gives ALE random_seed < 0 as np.int32
        a, ia = ours.reset(seed=seed)
        b, ib = theirs.reset(seed=seed)
        assert np.array_equal(a, b) and ia == ib
        for t in range(150):
            x, y = ours.step(t % 4), theirs.step(t % 4)
            assert np.array_equal(x[0], y[0]) and x[1:] == y[1:], f"seed {seed} step {t}"


def test_make_vec_uses_the_batched_engine():
    env = gymnasium.make_vec("hybridsim/Breakout-v5", num_envs=2, noop_max=0)
    from hybridsim.vector import AtariVectorEnv
    assert isinstance(env, AtariVectorEnv)
    obs, info = env.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and list(info["env_id"]) == [0, 1]
    obs, rew, term, trunc, info = env.step(np.array([1, 2]))
    assert obs.shape == (2, 4, 84, 84)
    import ale_py
    gymnasium.register_envs(ale_py)
    for bad in ((2, 5), 2.0):  # the single environment's random range: gymnasium's error on both
        with pytest.raises(gymnasium.error.Error, match=f"Invalid frameskip type: {type(bad)}"):
            gymnasium.make_vec("ALE/Breakout-v5", num_envs=2, vectorization_mode="vector_entry_point", frameskip=bad)
        with pytest.raises(gymnasium.error.Error, match=f"Invalid frameskip type: {type(bad)}"):
            gymnasium.make_vec("hybridsim/Breakout-v5", num_envs=2, frameskip=bad)


def test_other_ids_vectorize_the_single_environment_as_ale_py():
    """Only <Game>-v5 has the batched engine (as ale-py registers only ALE/<Game>-v5 with
    its vector env): -v4 (random frameskip) and NoFrameskip ids give raw frames from a
    vector of single environments, like ale-py's."""
    import ale_py
    gymnasium.register_envs(ale_py)
    ours = gymnasium.make_vec("hybridsim/Pong-v4", num_envs=2)
    theirs = gymnasium.make_vec("Pong-v4", num_envs=2)
    assert type(ours).__name__ == type(theirs).__name__ == "SyncVectorEnv"
    assert ours.observation_space == theirs.observation_space
    ours.close(), theirs.close()


def test_action_meanings_and_atari_preprocessing_work_as_on_ale_py():
    """The single environment's action set holds ale_py.Action members, so ale-py's
    get_action_meanings / get_keys_to_action and gymnasium's AtariPreprocessing (which
    calls the first) work, and give what they give on ale-py."""
    import ale_py
    from gymnasium.wrappers import AtariPreprocessing
    gymnasium.register_envs(ale_py)
    ours = AtariPreprocessing(gymnasium.make("hybridsim/Pong-v5", frameskip=1))
    theirs = AtariPreprocessing(gymnasium.make("ALE/Pong-v5", frameskip=1))
    assert ours.unwrapped.get_action_meanings() == theirs.unwrapped.get_action_meanings()
    assert ours.unwrapped.get_keys_to_action() == theirs.unwrapped.get_keys_to_action()
    assert ale_py.Action.FIRE in ours.unwrapped._action_set
    assert np.array_equal(ours.reset(seed=0)[0], theirs.reset(seed=0)[0])
    for t in range(40):
        a, b = ours.step(t % 6), theirs.step(t % 6)
        assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4], t
    ours.close(), theirs.close()


def test_arguments_the_environments_do_not_have_are_errors():
    """make_vec refuses the single environment's obs_type/mode/difficulty/render_mode (as
    ale-py's vector environment does) instead of dropping them; the single environment
    refuses an action index outside its action set (ale-py's would wrap -1)."""
    for key, value in (("obs_type", "ram"), ("mode", 99), ("difficulty", 1), ("render_mode", "rgb_array")):
        with pytest.raises(TypeError, match=f"no '{key}' argument"):
            gymnasium.make_vec("hybridsim/Pong-v5", num_envs=2, vectorization_mode="vector_entry_point",
                               **{key: value})
    env = gymnasium.make("hybridsim/Pong-v5")
    env.reset(seed=0)
    for action, error in ((-1, ValueError), (6, ValueError), (1.0, TypeError), (np.bool_(True), TypeError)):
        with pytest.raises(error, match="action"):
            env.step(action)
    for action in (6, 2**70, np.uint64(2**63)):  # IndexError: what ale-py raises (not for -1)
        with pytest.raises(IndexError, match="action must be in 0..5"):
            env.step(action)
    env.step(np.int64(5))
    env.close()


def test_a_closed_single_environment_refuses_to_play():
    """ale-py's AtariEnv played on after close(); code that does that is wrong."""
    env = gymnasium.make("hybridsim/Pong-v5")
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.step(0), lambda: env.reset(seed=1)):
        with pytest.raises(RuntimeError, match="on a closed environment"):
            call()


def test_single_env_arguments_ale_py_lets_through_are_refused():
    """ale-py only warns about an unknown game and then fails inside loadROM ("got None"),
    and a NaN threshold makes every continuous action NOOP (each comparison is false)."""
    with pytest.raises(FileNotFoundError, match="no ROM for game 'nosuch'.*installed ROMs"):
        gymnasium.make("hybridsim/Pong-v5", game="nosuch")
    for game in ("", None, 3):
        with pytest.raises(TypeError, match="game must be a game's name"):
            gymnasium.make("hybridsim/Pong-v5", game=game)
    for threshold in (float("nan"), float("inf"), "0.5", True):
        with pytest.raises(ValueError, match="continuous_action_threshold must be a finite number"):
            gymnasium.make("hybridsim/Breakout-v5", continuous=True, continuous_action_threshold=threshold)
    gymnasium.make("hybridsim/Breakout-v5", continuous=True, continuous_action_threshold=np.float32(0.3)).close()
    # a CamelCase name passed the check above, then ale-py's lookup found no ROM ("got None");
    # it is the game AtariVectorEnv("MsPacman") plays
    env = gymnasium.make("hybridsim/Pong-v5", game="MsPacman")
    assert env.unwrapped._game == "ms_pacman" and env.action_space.n == 9
    env.close()


def test_v4_ids_are_not_called_out_of_date_as_ale_pys_are_not():
    """hybridsim/<Game>-v5 shares the namespace with the -v4 ids (ale-py's have none), so
    gymnasium.make called PongNoFrameskip-v4 out of date; -v0 warns as ale-py's -v0 does."""
    import subprocess
    import sys
    script = """
import gymnasium, hybridsim
for env_id in ("hybridsim/PongNoFrameskip-v4", "hybridsim/Pong-v4", "hybridsim/Pong-v0"):
    gymnasium.make(env_id).close()
"""
    done = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "hybridsim/Pong-v0 is out of date" in done.stderr
    assert "-v4 is out of date" not in done.stderr


def test_continuous_actions_are_checked_and_match_ale_py():
    """ale-py only asserts (a bare AssertionError) that the action is a float32 array of
    shape (3,); hybridsim names the problem, takes other real arrays as float32 and plays
    the same frames as ale-py."""
    ours = gymnasium.make("hybridsim/Breakout-v5", continuous=True, repeat_action_probability=0.0)
    theirs = gymnasium.make("ALE/Breakout-v5", continuous=True, repeat_action_probability=0.0)
    ours.reset(seed=3)
    theirs.reset(seed=3)
    rng = np.random.default_rng(0)
    for t in range(60):
        action = np.array([rng.random(), rng.uniform(-np.pi, np.pi), rng.random()], np.float32)
        mine = ours.step(action.astype(np.float64) if t % 2 else list(map(float, action)))
        ref = theirs.step(action)
        assert np.array_equal(mine[0], ref[0]) and mine[1:] == ref[1:], t
    for bad, error in (([0.5, 0.1], TypeError), (np.zeros((1, 3)), TypeError), ("abc", TypeError),
                       ([np.nan, 0, 0], ValueError)):
        with pytest.raises(error, match="continuous action"):
            ours.step(bad)
    ours.close()
    theirs.close()


def test_gymnasiums_env_checker_passes_and_human_mode_uses_human_rendering():
    """metadata listed "human", which needs a display window hybridsim does not have:
    the env checker (which makes every listed mode) failed on every id. Only rgb_array
    is listed now, so gymnasium wraps a "human" env in its HumanRendering (pygame)."""
    from gymnasium.utils.env_checker import check_env
    from gymnasium.wrappers import HumanRendering
    for kwargs in ({}, {"obs_type": "ram"}, {"continuous": True}):
        check_env(gymnasium.make("hybridsim/Pong-v5", **kwargs).unwrapped)
    with pytest.warns(UserWarning, match="HumanRendering wrapper is being applied"):
        env = gymnasium.make("hybridsim/Pong-v5", render_mode="human")
    assert isinstance(env, HumanRendering) and env.unwrapped.render_mode == "rgb_array"


def test_bool_actions_and_unavailable_modes_behave_as_on_ale_py():
    """True is a member of Discrete(n) (ale-py plays action 1; it was refused; numpy's bool
    is not, and ale-py fails on it too), and a mode
    the game lacks is a RuntimeError as in ale-py (hybridsim's is also a ValueError)."""
    ours, theirs = gymnasium.make("hybridsim/Pong-v5"), gymnasium.make("ALE/Pong-v5")
    ours.reset(seed=4)
    theirs.reset(seed=4)
    for action in (True, False, 1, 0):
        x, y = ours.step(action), theirs.step(action)
        assert np.array_equal(x[0], y[0]) and x[1:] == y[1:]
    for kwargs in ({"mode": 99}, {"difficulty": 99}):
        for env_id in ("hybridsim/Pong-v5", "ALE/Pong-v5"):
            with pytest.raises(RuntimeError):
                gymnasium.make(env_id, **kwargs)
        with pytest.raises(ValueError, match="is not available for pong"):
            gymnasium.make("hybridsim/Pong-v5", **kwargs)


def test_an_action_is_whatever_indexes_ale_py_s_action_set():
    """A one-element int tensor (a policy run on obs[None]) plays on ale-py, which indexes
    its action set with it; it was refused here. A float or longer one is refused by both."""
    torch = pytest.importorskip("torch")
    ours, theirs = gymnasium.make("hybridsim/Pong-v5"), gymnasium.make("ALE/Pong-v5")
    ours.reset(seed=5)
    theirs.reset(seed=5)
    for action in (torch.tensor([3]), torch.tensor(2), np.array(1, np.uint8), np.int16(4)):
        x, y = ours.step(action), theirs.step(action)
        assert np.array_equal(x[0], y[0]) and x[1:] == y[1:]
    for action in (torch.tensor([1.0]), torch.tensor([1, 2]), np.array([1])):
        with pytest.raises(TypeError):
            theirs.step(action)
        with pytest.raises(TypeError, match="action must be an int index into the action set"):
            ours.step(action)
    ours.close(), theirs.close()
