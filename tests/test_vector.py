"""hybridsim.AtariVectorEnv against ale_py.vector_env.AtariVectorEnv (ale-py 0.12.1).

With noop_max=0 and repeat_action_probability=0 ale-py is deterministic, so both must
return identical observations, rewards, terminations, truncations and info for the same
action stream. Short frame limits, episodic life and random play make episodes end
(truncation, life loss, game over) inside each run.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("gymnasium")
from ale_py.vector_env import AtariVectorEnv as AleVectorEnv  # noqa: E402

from async_util import ShuffledPool  # noqa: E402
from hybridsim.vector import AtariVectorEnv  # noqa: E402


def assert_same(step, ours, theirs, same_step=False):
    names = ("obs", "rewards", "terminations", "truncations")
    for name, x, y in zip(names, ours[:4], theirs[:4]):
        assert x.shape == y.shape, f"step {step}: {name} shape {x.shape} != {y.shape}"
        assert x.dtype == y.dtype, f"step {step}: {name} dtype {x.dtype} != {y.dtype}"
        if not np.array_equal(x, y):
            where = np.argwhere(x != y)[:3].tolist()
            raise AssertionError(f"step {step}: {name} differs at {where}")
    for key in ("env_id", "lives", "frame_number", "episode_frame_number"):
        np.testing.assert_array_equal(ours[-1][key], theirs[-1][key], err_msg=f"step {step}: info[{key!r}]")
        assert ours[-1][key].dtype == theirs[-1][key].dtype, f"info[{key!r}] dtype"
    if same_step and len(ours) == 5:
        done = theirs[2] | theirs[3]
        assert ("final_obs" in ours[4]) == ("final_obs" in theirs[4]), f"step {step}: final_obs presence"
        if done.any():  # without life_loss_info, done rows are the episodes that ended
            np.testing.assert_array_equal(ours[4]["final_obs"][done], theirs[4]["final_obs"][done],
                                          err_msg=f"step {step}: final_obs")


def run_side_by_side(game, num_envs, steps, seed=7, action_seed=0, **kwargs):
    kwargs = dict(dict(noop_max=0, repeat_action_probability=0.0, num_threads=1), **kwargs)
    ours = AtariVectorEnv(game, num_envs, **kwargs)
    theirs = AleVectorEnv(game, num_envs, **kwargs)
    assert ours.single_observation_space == theirs.single_observation_space
    assert ours.single_action_space == theirs.single_action_space
    same_step = str(kwargs.get("autoreset_mode", "NextStep")) in ("SameStep", "AutoresetMode.SAME_STEP")
    r_ours, r_theirs = ours.reset(seed=seed), theirs.reset(seed=seed)
    assert_same("reset", (r_ours[0], np.zeros(1), np.zeros(1), np.zeros(1), r_ours[1]),
                (r_theirs[0], np.zeros(1), np.zeros(1), np.zeros(1), r_theirs[1]))
    rng = np.random.default_rng(action_seed)
    n_actions = ours.single_action_space.n
    ends = 0
    for t in range(steps):
        actions = rng.integers(0, n_actions, num_envs)
        a, b = ours.step(actions), theirs.step(actions)
        assert_same(t, a, b, same_step)
        ends += int((b[2] | b[3]).sum())
    theirs.close()
    return ends


# (game, num_envs, steps, keyword arguments): each preprocessing option at least once,
# every case crossing several episode ends.
CASES = {
    "pong-default": ("pong", 3, 150, dict(max_num_frames_per_episode=400)),
    "breakout-gameover": ("breakout", 3, 450, dict(max_num_frames_per_episode=4000)),
    "ms_pacman-default": ("ms_pacman", 3, 150, dict(max_num_frames_per_episode=500)),
    "space_invaders-rgb": ("space_invaders", 2, 120, dict(grayscale=False, max_num_frames_per_episode=300)),
    "breakout-nomaxpool": ("breakout", 2, 150, dict(maxpool=False, max_num_frames_per_episode=400)),
    "pong-sizes": ("pong", 2, 100, dict(img_height=100, img_width=64, max_num_frames_per_episode=250)),
    "pong-fullsize": ("pong", 2, 60, dict(img_height=210, img_width=160, max_num_frames_per_episode=150)),
    "breakout-stack1": ("breakout", 2, 120, dict(stack_num=1, max_num_frames_per_episode=300)),
    "breakout-episodic": ("breakout", 3, 250, dict(episodic_life=True)),
    "breakout-lifeinfo": ("breakout", 2, 200, dict(life_loss_info=True, max_num_frames_per_episode=3000)),
    "breakout-samestep": ("breakout", 2, 250, dict(autoreset_mode="SameStep", episodic_life=True,
                                                   max_num_frames_per_episode=600)),
    "ms_pacman-samestep-trunc": ("ms_pacman", 2, 120, dict(autoreset_mode="SameStep",
                                                           max_num_frames_per_episode=200)),
    "seaquest-frameskip3-full": ("seaquest", 2, 120, dict(frameskip=3, full_action_space=True,
                                                          reward_clipping=False, use_fire_reset=False,
                                                          max_num_frames_per_episode=250)),
    # the load draws from the environment RNG (mode selection acts): one load per seed
    "berzerk-loads": ("berzerk", 2, 80, dict(max_num_frames_per_episode=150, repeat_action_probability=0.25)),
    "pong-frameskip1": ("pong", 2, 200, dict(frameskip=1, max_num_frames_per_episode=90)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_ale_py(case):
    game, num_envs, steps, kwargs = CASES[case]
    ends = run_side_by_side(game, num_envs, steps, **kwargs)
    assert ends >= 2, f"{case}: only {ends} episode ends; the case does not cross episodes"


def test_partial_reset_matches_ale_py():
    kwargs = dict(noop_max=0, num_threads=1, max_num_frames_per_episode=300)
    ours, theirs = AtariVectorEnv("breakout", 3, **kwargs), AleVectorEnv("breakout", 3, **kwargs)
    ours.reset(seed=1), theirs.reset(seed=1)
    for t in range(20):
        actions = np.full(3, t % 4)
        assert_same(t, ours.step(actions), theirs.step(actions))
    mask = np.array([True, False, True])
    a, b = ours.reset(seed=5, options={"reset_mask": mask}), theirs.reset(seed=5, options={"reset_mask": mask})
    assert_same("partial reset", (a[0], np.zeros(1), np.zeros(1), np.zeros(1), a[1]),
                (b[0], np.zeros(1), np.zeros(1), np.zeros(1), b[1]))
    for t in range(20):
        actions = np.full(3, (t + 1) % 4)
        assert_same(t, ours.step(actions), theirs.step(actions))
    theirs.close()


def test_noop_starts_match_ale_py():
    """noop_max > 0 (FIRE and no FIRE games): the per-environment noop RNG is std::mt19937
    seeded with the reset seed, drawn as libstdc++'s uniform_int_distribution."""
    for game in ("freeway", "breakout"):
        kwargs = dict(noop_max=30, num_threads=1, max_num_frames_per_episode=150)
        ours, theirs = AtariVectorEnv(game, 4, **kwargs), AleVectorEnv(game, 4, **kwargs)
        seeds = np.array([3, 100, 2**31 - 1, 0])
        a, b = ours.reset(seed=seeds), theirs.reset(seed=seeds)
        np.testing.assert_array_equal(a[1]["episode_frame_number"], b[1]["episode_frame_number"])
        np.testing.assert_array_equal(a[0], b[0])
        for t in range(45):  # crosses the 150-frame limit: autoresets draw again
            actions = np.full(4, t % 3)
            assert_same(t, ours.step(actions), theirs.step(actions))
        theirs.close()


def test_continuous_actions_match_ale_py():
    """continuous=True: (radius, theta, fire) mapped to the full action set, radius as the
    paddle strength (breakout has paddles in ALE)."""
    kwargs = dict(noop_max=0, num_threads=1, continuous=True, max_num_frames_per_episode=300)
    ours, theirs = AtariVectorEnv("breakout", 2, **kwargs), AleVectorEnv("breakout", 2, **kwargs)
    assert ours.single_action_space == theirs.single_action_space
    ours.reset(seed=4), theirs.reset(seed=4)
    rng = np.random.default_rng(2)
    for t in range(60):
        actions = np.stack([rng.uniform(0, 1, 2), rng.uniform(-np.pi, np.pi, 2), rng.uniform(0, 1, 2)],
                           axis=1).astype(np.float32)
        assert_same(t, ours.step(actions), theirs.step(actions))
    theirs.close()


@pytest.mark.parametrize("game,gym_id", [("skiing", "ALE/Skiing-v5"), ("lost_luggage", "ALE/LostLuggage-v5")])
def test_continuous_actions_on_games_with_fewer_legal_actions(game, gym_id):
    """Skiing's and Lost Luggage's legal sets hold 9 actions, not 18: a continuous action's
    ALE id must act as that id (as ale-py's AtariEnv does), not as a position in the set.
    (ale-py's vector env hangs on these, so its single environment is the reference.)"""
    import ale_py
    import gymnasium as gym
    gym.register_envs(ale_py)
    ours = AtariVectorEnv(game, 1, noop_max=0, num_threads=1, continuous=True, repeat_action_probability=0.0,
                          img_height=210, img_width=160, stack_num=1, maxpool=False, episodic_life=False,
                          use_fire_reset=False, reward_clipping=False)
    theirs = gym.make(gym_id, continuous=True, obs_type="grayscale", frameskip=4, repeat_action_probability=0.0)
    assert np.array_equal(ours.reset(seed=3)[0][0, 0], theirs.reset(seed=3)[0])
    rng = np.random.default_rng(0)
    for t in range(120):
        a = np.array([[rng.uniform(0, 1), rng.uniform(-np.pi, np.pi), rng.uniform(0, 1)]], np.float32)
        mine, ref = ours.step(a), theirs.step(a[0])
        assert np.array_equal(mine[0][0, 0], ref[0]) and mine[1][0] == ref[1], f"step {t}, action {a[0]}"
    theirs.close()


def test_seeded_load_is_a_copy_of_one_load():
    """A seeded reset copies one loaded console and reseeds its RNG; exact where the load
    never draws from the environment RNG (checked at construction)."""
    env = AtariVectorEnv("pong", 1, noop_max=0)
    assert env._template_copyable
    for seed in (1, 77, 2**31 - 1):
        loaded = env._load(seed)
        env._engine.reseed(np.array([0], np.int32), np.array([seed]))
        assert bytes(env._engine.env_mem[0]) == loaded[0]
        assert np.array_equal(env._engine.frame_mem[0], np.asarray(loaded[1]).reshape(2, -1))


# ---- determinism and the asynchronous mode -------------------------------------------

RANDOM_KW = dict(repeat_action_probability=0.25, noop_max=30, max_num_frames_per_episode=150)


def per_env_trajectories(env, steps_per_env, action_seed=0):
    """Drive env (sync or async) until every environment took steps_per_env steps; each
    environment's actions come from its own stream. Returns {env: [result tuples]}."""
    n = env.num_envs
    streams = [np.random.default_rng([action_seed, k]) for k in range(n)]
    traj = {k: [] for k in range(n)}
    obs, info = env.reset(seed=11)
    for j, k in enumerate(info["env_id"]):
        traj[int(k)].append((obs[j].copy(), 0, False, False, int(info["lives"][j]),
                             int(info["frame_number"][j]), int(info["episode_frame_number"][j])))
    ids = info["env_id"]
    while min(len(t) for t in traj.values()) <= steps_per_env:
        actions = np.array([streams[k].integers(0, env.single_action_space.n) for k in ids])
        env.send(actions)
        obs, rew, term, trunc, info = env.recv()
        ids = info["env_id"]
        for j, k in enumerate(ids):
            traj[int(k)].append((obs[j].copy(), int(rew[j]), bool(term[j]), bool(trunc[j]),
                                 int(info["lives"][j]), int(info["frame_number"][j]),
                                 int(info["episode_frame_number"][j])))
    return traj


def assert_same_trajectories(a, b, steps):
    for k in a:
        for t in range(steps):
            x, y = a[k][t], b[k][t]
            for u, v in zip(x, y):
                if isinstance(u, np.ndarray):
                    assert np.array_equal(u, v), f"env {k} step {t}: observation differs"
                else:
                    assert u == v, f"env {k} step {t}: {x[1:]} != {y[1:]}"


def test_sync_determinism_with_sticky_actions_and_noops():
    a = per_env_trajectories(AtariVectorEnv("breakout", 3, num_threads=2, **RANDOM_KW), 80)
    b = per_env_trajectories(AtariVectorEnv("breakout", 3, num_threads=1, **RANDOM_KW), 80)
    assert_same_trajectories(a, b, 80)


def test_async_matches_sync_per_environment():
    """batch_size < num_envs: whatever order environments finish in, each one's results
    are those of the synchronous engine (same seed, same per-environment actions), and two
    async runs agree; sticky actions and noop starts on."""
    steps = 60
    sync = per_env_trajectories(AtariVectorEnv("pong", 4, num_threads=1, **RANDOM_KW), steps)
    async_a = per_env_trajectories(AtariVectorEnv("pong", 4, batch_size=2, num_threads=2, **RANDOM_KW), steps)
    async_b = per_env_trajectories(AtariVectorEnv("pong", 4, batch_size=3, num_threads=2, **RANDOM_KW), steps)
    assert_same_trajectories(sync, async_a, steps)
    assert_same_trajectories(sync, async_b, steps)


def test_async_send_with_env_ids():
    env = AtariVectorEnv("pong", 4, batch_size=2, num_threads=2, noop_max=0)
    obs, info = env.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and len(set(info["env_id"].tolist())) == 2
    first = info["env_id"]
    # the two environments still resetting arrive next
    env.send(np.zeros(2, np.int64), env_ids=first)
    seen = set(first.tolist())
    for _ in range(20):  # completion order varies; every environment shows up
        obs, rew, term, trunc, info = env.recv()
        seen |= set(info["env_id"].tolist())
        if len(seen) == 4:
            break
        env.send(np.zeros(2, np.int64), env_ids=info["env_id"])
    assert seen == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="still running"):
        running = np.flatnonzero(env._in_flight)
        env.send(np.zeros(1, np.int64), env_ids=running[:1])
    env.recv()
    env.send(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"send\(\) twice without recv\(\)"):  # blamed env_ids
        env.send(np.zeros(2, np.int64))


def test_state_snapshot_resumes_exactly():
    env = AtariVectorEnv("breakout", 2, **RANDOM_KW)
    env.reset(seed=5)
    rng = np.random.default_rng(1)
    for _ in range(30):
        last = env.step(rng.integers(0, 4, 2))
    state = env.get_state()
    actions = rng.integers(0, 4, (60, 2))
    first = [env.step(a) for a in actions]
    other = AtariVectorEnv("breakout", 2, **RANDOM_KW)
    obs, info = other.set_state(state)  # the last result's observations, to act on
    assert np.array_equal(obs, last[0]) and np.array_equal(info["lives"], last[4]["lives"])
    second = [other.step(a) for a in actions]
    for t, (x, y) in enumerate(zip(first, second)):
        assert_same(t, x, y)
    with pytest.raises(ValueError, match="another game"):
        AtariVectorEnv("pong", 2, **RANDOM_KW).set_state(state)


def _take(result, rows):
    """A step result's rows; env_id is left out (a composed environment's ids differ)."""
    obs, rewards, terminations, truncations, info = result
    return (obs[rows], rewards[rows], terminations[rows], truncations[rows],
            {k: info[k][rows] for k in ("lives", "frame_number", "episode_frame_number")})


def _assert_rows_same(step, ours, theirs):
    for x, y in zip(ours[:4] + tuple(ours[4].values()), theirs[:4] + tuple(theirs[4].values())):
        assert x.dtype == y.dtype and np.array_equal(x, y), f"step {step}"


def test_composed_segments_replay_one_trajectory():
    """compose_state: a 3 x 20-step trajectory of 2 environments, replayed as 6
    environments started from its snapshots at steps 0, 20 and 40 (gpu_bench's exact
    phase does this on the device), gives every step's outputs and ends in the states the
    trajectory went through, episode ends (150-frame cap) included."""
    segments, length = 3, 20
    source = AtariVectorEnv("breakout", 2, **RANDOM_KW)
    source.reset(seed=4)
    actions = np.random.default_rng(2).integers(0, 4, (segments, length, 2))
    states, results = [source.get_state()], []
    for k in range(segments):
        results.append([source.step(a) for a in actions[k]])
        states.append(source.get_state())
    assert sum(int(r[2].sum() + r[3].sum()) for seg in results for r in seg) >= 2
    replay = AtariVectorEnv("breakout", 2 * segments, **RANDOM_KW)
    obs, info = replay.set_state(replay.compose_state([(st, [0, 1]) for st in states[:-1]]))
    assert obs.shape == (6, 4, 84, 84)
    for j in range(length):
        out = replay.step(actions[:, j].reshape(-1))  # segment-major, as composed
        for k in range(segments):
            _assert_rows_same((k, j), _take(out, slice(2 * k, 2 * k + 2)), _take(results[k][j], slice(None)))
    assert replay.get_state() == replay.compose_state([(st, [0, 1]) for st in states[1:]])
    # any environments, in any order, repeated
    picked = AtariVectorEnv("breakout", 4, **RANDOM_KW)
    picked.set_state(picked.compose_state([(states[2], [1]), (states[1], np.array([1, 0, 0]))]))
    out = picked.step(np.array([actions[2, 0, 1], actions[1, 0, 1], actions[1, 0, 0], actions[1, 0, 0]]))
    _assert_rows_same("picked", _take(out, [0]), _take(results[2][0], [1]))
    _assert_rows_same("picked", _take(out, [1, 2, 3]), _take(results[1][0], [1, 0, 0]))
    # a part may take nothing (an empty Python list is float64 to numpy)
    picked.set_state(picked.compose_state([(states[0], []), (states[1], [1, 0, 0, 1])]))


def test_snapshots_hold_the_state_about_once():
    """get_state writes the header, digest and payload into one buffer; set_state reads
    the payload in place and the big arrays one at a time (tracemalloc peaks: np.savez
    plus the header join took twice the state; slicing the payload off and decoding every
    array before loading took twice again for set_state)."""
    from memory_util import snapshot_peaks
    env = AtariVectorEnv("pong", 48, num_threads=1, **RANDOM_KW)
    env.reset(seed=0)
    env.step(np.ones(48, np.int64))
    largest = max(int(np.prod(shape)) * dtype.itemsize for shape, dtype in env._snapshot_layout().values())
    state, get_peak, set_peak = snapshot_peaks(env)
    assert get_peak < 1.35 * len(state), (get_peak, len(state))
    assert set_peak < 0.15 * len(state) + largest, (set_peak, len(state), largest)


def test_compose_state_refuses_what_does_not_fit():
    source = AtariVectorEnv("breakout", 2, **RANDOM_KW)
    source.reset(seed=0)
    state = source.get_state()
    target = AtariVectorEnv("breakout", 3, **RANDOM_KW)
    cases = [([(state, [0, 1])], "take 2 environments, this AtariVectorEnv has 3"),
             ([(state, [0, 1, 2])], r"ids must be a 1-D list of environments in 0..1"),
             ([(state, [[0, 1, 1]])], r"ids must be a 1-D list"),
             ([(state, [0.0, 1.0, 1.0])], r"ids must be a 1-D list"),
             ([(state,)], TypeError),
             ([(AtariVectorEnv("breakout", 2, **RANDOM_KW).get_state(), [0, 1, 1])], "before its first reset"),
             ([(AtariVectorEnv("pong", 2, **RANDOM_KW).get_state(), [0, 1, 1])], "another game"),
             ([(state[:-50], [0, 1, 1])], "digest does not match")]
    for parts, match in cases:
        if isinstance(match, type):
            with pytest.raises(match, match="part 0 must be a"):
                target.compose_state(parts)
        else:
            with pytest.raises(ValueError, match=match):
                target.compose_state(parts)
    async_source = AtariVectorEnv("breakout", 2, batch_size=1, num_threads=1, **RANDOM_KW)
    async_source.reset(seed=0)
    with pytest.raises(ValueError, match="batch_size below its num_envs"):
        target.compose_state([(async_source.get_state(), [0, 1, 1])])
    with pytest.raises(ValueError, match="needs a synchronous AtariVectorEnv"):
        async_source.compose_state([(state, [0, 1])])
    # checked before any row is copied: 10**6 ids of row 0 took 89 GiB on the way to the error
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="take 1000000 environments, this AtariVectorEnv has 3"):
            target.compose_state([(state, np.zeros(10**6, np.int64))])
        assert tracemalloc.get_traced_memory()[1] < 50 * 2**20
    finally:
        tracemalloc.stop()
    for bad, message in ((None, "parts must be a list of .state, ids. pairs, got NoneType"),
                         ([(2**40, [0, 1, 1])], "part 0's state must be the bytes get_state.. returned, got int"),
                         ([("abc", [0, 1, 1])], "part 0's state must be the bytes get_state.. returned, got str")):
        with pytest.raises(TypeError, match=message):
            target.compose_state(bad)
    for bad in (2**40, "abc", None):  # bytes(2**40) made a terabyte of zeros
        with pytest.raises(TypeError, match="state must be the bytes get_state.. returned"):
            target.set_state(bad)
    target.set_state(np.frombuffer(target.compose_state([(state, [0, 1, 1])]), np.uint8))


# ---- bad input ----------------------------------------------------------------------

def test_bad_input_names_the_expected_value():
    env = AtariVectorEnv("pong", 2, noop_max=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="integer array"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"0\.\.5"):
        env.step(np.array([0, 6]))
    with pytest.raises(ValueError, match=r"0\.\.5"):
        env.step(np.array([-1, 0]))
    with pytest.raises(ValueError, match="env_ids must be all"):
        env.send(np.zeros(1, np.int64), env_ids=[1])
    with pytest.raises(ValueError, match="num_threads must be >= 0"):
        AtariVectorEnv("pong", 2, num_threads=-1)
    with pytest.raises(ValueError, match=r"batch_size must be an int in 0..num_envs=2"):
        AtariVectorEnv("pong", 2, batch_size=3)
    with pytest.raises(ValueError, match=r"batch_size"):
        AtariVectorEnv("pong", 2, batch_size=-1)
    with pytest.raises(ValueError, match="synchronous"):
        AtariVectorEnv("pong", 2, backend="gpu", batch_size=1)
    with pytest.raises(ValueError, match="backend must be one of"):
        AtariVectorEnv("pong", 2, backend="tpu")
    with pytest.raises(TypeError, match="game must be a game's name, such as 'pong', got None"):
        AtariVectorEnv(None, 2)
    with pytest.raises(ValueError, match="continuous_action_threshold must be finite, got nan"):
        AtariVectorEnv("pong", 2, continuous=True, continuous_action_threshold=float("nan"))
    with pytest.raises(ValueError, match=r"async_order must be one of \('completion', 'submission'\), got 'fifo'"):
        AtariVectorEnv("pong", 2, batch_size=1, async_order="fifo")
    with pytest.raises(ValueError, match="img_height"):
        AtariVectorEnv("pong", 2, img_height=0)
    async_env = AtariVectorEnv("pong", 3, batch_size=1, noop_max=0)
    with pytest.raises(RuntimeError, match="before reset"):
        async_env.send(np.zeros(1, np.int64))
    with pytest.raises(RuntimeError, match=r"recv\(\) called before reset\(\)"):
        async_env.recv()
    with pytest.raises(RuntimeError, match=r"recv\(\) called before reset\(\)"):
        AtariVectorEnv("pong", 2, noop_max=0).recv()
    async_env.reset(seed=0)
    with pytest.raises(ValueError, match=r"env_ids must be in 0..2"):
        async_env.send(np.zeros(1, np.int64), env_ids=[3])


def test_settings_and_seeds_are_checked_not_coerced():
    """No truthiness, truncation or wrap-around: each of these is an error naming the setting."""
    for kw, match in ((dict(grayscale="no"), "grayscale must be a bool"),
                      (dict(continuous=1), "continuous must be a bool"),
                      (dict(episodic_life=None), "episodic_life must be a bool"),
                      (dict(stack_num=2**40), "stack_num must be < 2"),
                      (dict(stack_num=608710), "under 2 GiB")):
        with pytest.raises((TypeError, ValueError), match=match):
            AtariVectorEnv("pong", 1, **kw)
    for num_envs in (2.9, 2**31):  # 2**31 failed converting to a C int, naming nothing
        with pytest.raises(ValueError, match=r"num_envs must be an int in 1\.\.2\*\*31-1"):
            AtariVectorEnv("pong", num_envs)
    env = AtariVectorEnv("pong", 2, noop_max=0)
    # negative seeds mean "keep this environment's seed" (ale-py); below a C int they are errors
    for seed, match in ((-2**31 - 1, r"seed must be in \[-2\*\*31"), (2**31 - 1, r"seed must be in \[-2\*\*31"),
                        (np.array([1.9, 2.9]), "must hold integers"),
                        (np.array([-2**31 - 1, 5]), r"seeds must be in \[-2\*\*31, 2\*\*31\)"),
                        (np.array([2**64 - 1, 3], np.uint64), r"seeds must be in \[-2\*\*31, 2\*\*31\)"),
                        ([1, 2], "seed must be None, an int")):
        with pytest.raises((TypeError, ValueError), match=match):
            env.reset(seed=seed)
    with pytest.raises(TypeError, match="options must be a dict"):
        env.reset(seed=0, options="x")
    env.reset(seed=0)
    cont = AtariVectorEnv("pong", 2, noop_max=0, continuous=True)
    cont.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        cont.step(np.array([[0.5, 0.0, 0.0], [np.nan, 0.0, 1.0]], np.float32))
    env.close()
    for call in (lambda: env.step(np.zeros(2, np.int64)), lambda: env.reset(seed=0)):
        with pytest.raises(RuntimeError, match="closed AtariVectorEnv"):
            call()


def _npz_with_short(short: str, arrays: dict) -> bytes:
    """np.savez's payload, but member `short` holds its whole array's .npy header and one
    byte less of data (a crafted state: zipfile's CRC is right for what it holds)."""
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as npz:
        for name, array in arrays.items():
            with npz.open(name + ".npy", "w", force_zip64=True) as fh:
                if name == short:
                    np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(array))
                    fh.write(np.ascontiguousarray(array).tobytes()[:-1])
                else:
                    np.lib.format.write_array(fh, array, allow_pickle=False)
    return buf.getvalue()


def test_corrupted_snapshot_is_refused_before_anything_changes():
    """A state whose bytes were cut or altered, or whose arrays do not fit, is refused with
    a message and leaves the environment as it was (no crash, no hang, no broadcast)."""
    import io
    env = AtariVectorEnv("breakout", 4, batch_size=2, num_threads=1, **RANDOM_KW)
    obs, info = env.reset(seed=2)
    env.send(np.ones(2, np.int64), env_ids=info["env_id"])
    state = env.get_state()
    head = len(b"HSVEC2") + 32 + 32
    arrays = dict(np.load(io.BytesIO(state[head:])))

    def rebuilt(**changes):  # a well-formed state (fresh digest) with other arrays
        buf = io.BytesIO()
        np.savez(buf, **dict(arrays, **changes))
        payload = buf.getvalue()
        import hashlib
        return state[:head - 32] + hashlib.blake2b(payload, digest_size=16).hexdigest().encode() + payload

    def resealed(payload: bytes) -> bytes:  # altered bytes under a fresh digest (crafted)
        import hashlib
        return state[:head - 32] + hashlib.blake2b(payload, digest_size=16).hexdigest().encode() + payload

    flipped = bytearray(state)
    flipped[len(state) // 2] ^= 0x40
    # set_state reads frames, raw frames and stacks one at a time after the checks: a
    # member whose data no longer matches its CRC, or is shorter than its .npy header
    # says, must be refused before the first array is loaded
    raw_start = state.index(b"raw.npy") - head
    crc_broken = bytearray(state[head:])
    crc_broken[raw_start + 4096] ^= 0x01
    cases = [(state[: len(state) - 100], "digest does not match"),
             (resealed(bytes(crc_broken)), "CRC does not match"),
             (resealed(_npz_with_short("raw", arrays)), "array 'raw': its data does not fit its header"),
             (bytes(flipped), "digest does not match"),
             (b"HSVEC2" + b"\xff" * 32 + state[38:], "another game"),
             (rebuilt(last_ids=np.array([0, 100000], np.int32)), "'last_ids' must be distinct"),
             (rebuilt(last_ids=np.array([0, -7], np.int32)), "'last_ids' must be distinct"),
             (rebuilt(shown=np.full(4, 7, arrays["shown"].dtype)), "'shown' must hold 0 or 1"),
             (rebuilt(env=arrays["env"][:1]), "array 'env' is"),
             (rebuilt(env=arrays["env"].astype(np.float32)), "array 'env' is"),
             (rebuilt(ready=np.array([], np.int32)), "'ready' must list exactly")]
    before = env.get_state()
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            env.set_state(bad)
    assert env.get_state() == before
    env.set_state(state)  # the good one still restores


def test_async_snapshot_resumes_exactly():
    """Async mode, steps still running at get_state: after set_state each environment
    continues exactly as the original does (completion order aside)."""
    def send(env, ids, counts):
        actions = np.array([np.random.default_rng([int(k), int(counts[k])]).integers(0, 4) for k in ids])
        counts[ids] += 1
        env.send(actions, env_ids=ids)

    def drive(env, counts, recvs):
        out = {}
        for _ in range(recvs):
            obs, rew, term, trunc, info = env.recv()
            ids = info["env_id"]
            for j, k in enumerate(ids):
                out.setdefault(int(k), []).append((obs[j].tobytes(), int(rew[j]), bool(term[j]),
                                                   bool(trunc[j]), int(info["frame_number"][j])))
            send(env, ids, counts)
        return out

    kw = dict(batch_size=2, num_threads=2, **RANDOM_KW)
    env = AtariVectorEnv("breakout", 4, **kw)
    counts = np.zeros(4, np.int64)
    obs, info = env.reset(seed=3)
    send(env, info["env_id"], counts)
    drive(env, counts, 10)
    assert env._in_flight.all()  # every environment is busy at the snapshot
    state, saved_counts = env.get_state(), counts.copy()
    first = drive(env, counts, 15)
    other = AtariVectorEnv("breakout", 4, **kw)
    other.set_state(state)
    second = drive(other, saved_counts, 15)
    assert set(first) & set(second)
    for k in set(first) & set(second):
        n = min(len(first[k]), len(second[k]))
        assert n > 0 and first[k][:n] == second[k][:n], f"env {k}"


def _drive(env, counts, info, recvs):
    """recv after send, `recvs` times: every recv's (env ids, observations, rewards,
    terminations, truncations, frames), and the last info. Actions are drawn from
    (environment, its step count), so they do not depend on the order."""
    out = []
    n = env.single_action_space.n
    for _ in range(recvs):
        ids = info["env_id"]
        env.send(np.array([np.random.default_rng([int(k), int(counts[k])]).integers(0, n) for k in ids]))
        counts[ids] += 1
        obs, rew, term, trunc, info = env.recv()
        out.append((info["env_id"].tolist(), obs.tobytes(), rew.tolist(), term.tolist(),
                    trunc.tolist(), info["frame_number"].tolist()))
    return out, info


def _async_run(env, recvs, seed=3):
    """reset(seed), then _drive's record of `recvs` recvs (the reset's batch first)."""
    obs, info = env.reset(seed=seed)
    out, _ = _drive(env, np.zeros(env.num_envs, np.int64), info, recvs)
    return [(info["env_id"].tolist(), obs.tobytes())] + out


def test_submission_order_gives_the_same_batches_whatever_the_completion_order():
    """async_order="submission": each recv returns the batch_size environments sent longest
    ago, so the batches do not depend on which step finishes first (here shuffled on
    purpose; with "completion" the same shuffle changes them)."""
    kw = dict(batch_size=2, **RANDOM_KW)
    plain = _async_run(AtariVectorEnv("breakout", 5, num_threads=1, async_order="submission", **kw), 40)
    runs = []
    for seed in (0, 1):
        env = AtariVectorEnv("breakout", 5, num_threads=2, async_order="submission", **kw)
        ShuffledPool(env, seed)
        runs.append(_async_run(env, 40))
    # 5 environments, 2 a batch: sent in order, so batches cycle through ids 0..4
    expected = [[(2 * t + j) % 5 for j in range(2)] for t in range(41)]
    assert [r[0] for r in plain] == expected
    for run in runs:
        for t, (a, b) in enumerate(zip(plain, run)):
            assert a == b, f"recv {t}: {a[0]} vs {b[0]}"
    shuffled = AtariVectorEnv("breakout", 5, num_threads=2, async_order="completion", **kw)
    ShuffledPool(shuffled, 0)
    assert [r[0] for r in _async_run(shuffled, 40)] != expected


def test_submission_order_after_a_reset_with_steps_running():
    """reset() while steps run drops them: the batches then are a fresh env's."""
    kw = dict(batch_size=2, num_threads=2, async_order="submission", **RANDOM_KW)
    env = AtariVectorEnv("breakout", 5, **kw)
    _async_run(env, 7, seed=4)
    env.send(np.zeros(2, np.int64))  # running at the reset
    assert _async_run(env, 12, seed=9) == _async_run(AtariVectorEnv("breakout", 5, **kw), 12, seed=9)
    assert sorted(env._sent) == sorted(set(env._sent))


def test_a_result_lost_between_pool_and_env_is_an_error_not_a_hang():
    """A completion taken from the pool behind the env's back (as a Ctrl-C between the two
    could): waiting for it would never end; recv() says so, and reset() recovers."""
    env = AtariVectorEnv("pong", 4, batch_size=2, num_threads=2, async_order="submission", noop_max=0)
    env.reset(seed=0)
    env.send(np.zeros(2, np.int64))
    env._settle()  # every result taken from the pool; then one is lost
    env._ready.remove(env._sent[0])
    with pytest.raises(RuntimeError, match="lost track of its running steps"):
        env.recv()
    obs, info = env.reset(seed=0)
    assert info["env_id"].tolist() == [0, 1]
    env.send(np.zeros(2, np.int64))
    assert env.recv()[-1]["env_id"].tolist() == [2, 3]


def test_submission_order_snapshot_resumes_the_same_batches():
    """get_state with steps running, set_state into another env: the same batches follow,
    in the same order."""
    kw = dict(batch_size=3, num_threads=2, async_order="submission", **RANDOM_KW)
    env = AtariVectorEnv("pong", 5, **kw)
    ShuffledPool(env, 4)  # get_state must save the steps in the order sent, not finished
    counts = np.zeros(5, np.int64)

    _, info = env.reset(seed=2)
    _, info = _drive(env, counts, info, 9)
    env.send(np.zeros(3, np.int64))  # steps running at the snapshot
    counts[info["env_id"]] += 1
    state, saved_counts, saved_info = env.get_state(), counts.copy(), info
    first, _ = _drive(env, counts, env.recv()[-1], 20)
    other = AtariVectorEnv("pong", 5, **kw)
    other.set_state(state)
    ShuffledPool(other, 5)
    second, _ = _drive(other, saved_counts, other.recv()[-1], 20)
    assert saved_info["env_id"].tolist() != first[0][0]
    assert first == second


def test_bilinear_resize_matches_opencv():
    """resize_interpolation="linear" (not in ale-py): cv2.INTER_LINEAR of the frame."""
    cv2 = pytest.importorskip("cv2")
    kw = dict(noop_max=0, stack_num=1, maxpool=False, max_num_frames_per_episode=200)
    full = AtariVectorEnv("ms_pacman", 2, img_height=210, img_width=160, **kw)
    small = AtariVectorEnv("ms_pacman", 2, img_height=84, img_width=84, resize_interpolation="linear", **kw)
    a, b = full.reset(seed=1)[0], small.reset(seed=1)[0]
    for t in range(30):
        for k in range(2):
            expected = cv2.resize(a[k, 0], (84, 84), interpolation=cv2.INTER_LINEAR)
            assert np.array_equal(b[k, 0], expected), f"step {t} env {k}"
        actions = np.full(2, t % 5)
        a, b = full.step(actions)[0], small.step(actions)[0]
    with pytest.raises(ValueError, match="resize_interpolation"):
        AtariVectorEnv("pong", 1, resize_interpolation="cubic")


def test_keywords_and_defaults_are_ale_pys():
    import inspect
    ours = inspect.signature(AtariVectorEnv.__init__).parameters
    for name, p in inspect.signature(AleVectorEnv.__init__).parameters.items():
        assert name in ours, f"missing keyword {name}"
        assert ours[name].default == p.default, f"{name}: default {ours[name].default!r} != {p.default!r}"
        assert ours[name].kind == p.kind, name
    assert ours["backend"].default == "cpu" and ours["num_threads"].default == 0


def _all_games():
    """Every game with ALE settings (ale-py cannot load the others: combat, joust, ...),
    and the first of each cartridge mapper, which run by default."""
    from hybridsim import games_table
    games = sorted((g["name"], g["mapper"]) for g in games_table.games() if g.get("ale_settings", True))
    firsts = {}
    for name, mapper in games:
        firsts.setdefault(mapper, name)
    return [name if name in firsts.values() else pytest.param(name, marks=pytest.mark.skipif(
        not os.environ.get("HYBRIDSIM_ALL_GAMES"),
        reason="one game per mapper by default; all 104 (about 2 minutes): HYBRIDSIM_ALL_GAMES=1"))
            for name, _ in games]


@pytest.mark.parametrize("game", _all_games())
def test_every_game_matches_ale_py(game):
    """Every game with ALE settings, sticky actions on (seeded), across a truncation each."""
    ends = run_side_by_side(game, 2, 50, max_num_frames_per_episode=120, repeat_action_probability=0.25)
    assert ends >= 2


# ---- thread_affinity_offset: pinned worker threads -------------------------------------

def _threads() -> dict[int, set[int]]:
    """This process's threads and the cores each may run on."""
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}


needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no thread affinity (not Linux)")


@needs_affinity
@pytest.mark.parametrize("batch_size", [0, 2])
def test_workers_are_pinned_to_cores_offset_on(batch_size):
    """Worker t runs on core offset + t only, counted among the cores this process may use
    (ale-py's rule, within the allocation); the caller's thread stays as it was."""
    usable = sorted(os.sched_getaffinity(0))
    before = _threads()
    env = AtariVectorEnv("pong", 4, batch_size=batch_size, num_threads=2, thread_affinity_offset=1, noop_max=0)
    workers = {t: cores for t, cores in _threads().items() if t not in before}
    expected = [usable[(1 + t) % len(usable)] for t in range(2)]
    assert env.worker_cores == expected
    assert sorted(sorted(c) for c in workers.values()) == sorted([c] for c in expected)
    assert os.sched_getaffinity(0) == set(usable)
    env.close()


@pytest.mark.parametrize("fails_in", ["settings", "seeding"])
def test_close_after_a_failed_start_does_nothing(monkeypatch, fails_in):
    """A subclass (or a caller holding the object) may close() an environment whose
    __init__ raised: an AttributeError from the half-built object hid the first error."""
    if fails_in == "seeding":
        def refuse(*args):
            raise RuntimeError("no seeds today")
        monkeypatch.setattr(AtariVectorEnv, "_reseed", refuse)
    env = AtariVectorEnv.__new__(AtariVectorEnv)
    with pytest.raises((ValueError, RuntimeError)):
        env.__init__("pong", 4, batch_size=2, num_threads=2, noop_max=0 if fails_in == "seeding" else -1)
    env.close()
    assert env.closed


def test_unpinned_workers_keep_the_process_affinity():
    env = AtariVectorEnv("pong", 4, batch_size=2, num_threads=2, noop_max=0)
    assert env.worker_cores is None
    env.close()


def test_pinned_sync_steps_match_ale_py_pinned():
    """Pinned synchronous steps run on the worker pool, writing the batch rows directly:
    ale-py (pinned the same way) gives the same results, SAME_STEP final observations too."""
    ends = run_side_by_side("breakout", 3, 250, num_threads=2, thread_affinity_offset=0, autoreset_mode="SameStep",
                            episodic_life=True, max_num_frames_per_episode=600)
    assert ends >= 2


@pytest.mark.parametrize("batch_size", [0, 2])
def test_pinned_workers_give_the_unpinned_results(batch_size):
    """Sticky actions, noop starts and episode ends: every environment's trajectory is the
    OpenMP engine's, in sync and async mode, and after a partial reset."""
    steps = 60
    plain = per_env_trajectories(AtariVectorEnv("pong", 4, num_threads=2, **RANDOM_KW), steps)
    pinned = AtariVectorEnv("pong", 4, batch_size=batch_size, num_threads=2, thread_affinity_offset=0, **RANDOM_KW)
    assert_same_trajectories(plain, per_env_trajectories(pinned, steps), steps)
    if batch_size == 0:  # a partial reset, then steps: rows of the reset and of the others
        envs = [pinned, AtariVectorEnv("pong", 4, num_threads=2, **RANDOM_KW)]
        for env in envs:
            env.reset(seed=11)
        mask = np.array([False, True, True, False])
        results = [[env.reset(seed=3, options={"reset_mask": mask})] for env in envs]
        for t in range(30):
            for env, result in zip(envs, results):
                result.append(env.step(np.full(4, t % 6)))
        for t, (a, b) in enumerate(zip(*results)):
            for x, y in zip(a, b):
                if isinstance(x, dict):
                    assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), t
                else:
                    np.testing.assert_array_equal(x, y, err_msg=f"after the partial reset, result {t}")


@needs_affinity
def test_offset_counts_within_the_allocation():
    """Under taskset or Slurm the process may use a few cores: offset 0 is the first of
    them, and an offset past them wraps around inside them."""
    last = max(os.sched_getaffinity(0))
    code = ("import os, warnings\n"
            f"os.sched_setaffinity(0, {{{last}}})\n"
            "warnings.simplefilter('error')\n"
            "from hybridsim.vector import AtariVectorEnv\n"
            "for offset in (0, 5):\n"
            "    env = AtariVectorEnv('pong', 2, num_threads=2, thread_affinity_offset=offset, noop_max=0)\n"
            "    print(env.worker_cores)\n"
            "    env.close()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"[{last}, {last}]"] * 2


def test_a_worker_that_cannot_be_pinned_is_named(monkeypatch):
    import hybridsim.vector as vector
    monkeypatch.setattr(vector, "worker_cores", lambda offset, threads: [10**6] * threads)
    with pytest.warns(RuntimeWarning, match=r"thread_affinity_offset=0: could not pin worker 0 to core 1000000: "
                                            r"Invalid argument; worker 1 to core 1000000: Invalid argument \(those "
                                            r"keep the caller's affinity\)"):
        env = AtariVectorEnv("pong", 2, num_threads=2, thread_affinity_offset=0, noop_max=0)
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    env.close()


def _run_seconds(tid: int) -> float:
    """CPU time thread tid of this process has run (schedstat, nanoseconds)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


@needs_affinity
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="no /proc")
def test_pinned_synchronous_steps_run_on_the_pinned_workers():
    """Not on OpenMP's threads (which may already exist from other tests): the pinned
    workers are the threads that did the stepping."""
    before = set(_threads())
    env = AtariVectorEnv("breakout", 8, num_threads=2, thread_affinity_offset=0, noop_max=0)
    workers = [t for t in _threads() if t not in before]
    env.reset(seed=0)
    start = [_run_seconds(t) for t in workers]
    t0 = time.perf_counter()
    for _ in range(40):
        env.step(np.zeros(8, np.int64))
    wall = time.perf_counter() - t0
    worked = sum(_run_seconds(t) - s for t, s in zip(workers, start))
    assert worked > 0.5 * wall, f"the pinned workers ran {worked:.3f} s of a {wall:.3f} s stepping loop"
    env.close()


@needs_affinity
def test_close_joins_the_worker_threads():
    before = set(_threads())
    env = AtariVectorEnv("pong", 4, num_threads=2, thread_affinity_offset=0, noop_max=0)
    assert len(set(_threads()) - before) == 2
    env.reset(seed=0)
    env.close()
    assert not set(_threads()) - before


@needs_affinity
@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs 2 cores")
def test_cores_are_the_process_s_under_omp_proc_bind():
    """libgomp binds the calling thread to one core after a parallel region under
    OMP_PROC_BIND: the workers still spread over the process's cores (they all went to
    that one core), and num_threads=0 still means one per core."""
    usable = sorted(os.sched_getaffinity(0))
    code = ("import os, numpy as np\n"
            "from hybridsim.vector import AtariVectorEnv, resolve_num_threads\n"
            "env = AtariVectorEnv('pong', 4, num_threads=2, noop_max=0)\n"
            "env.reset(seed=0)\n"
            "env.step(np.zeros(4, np.int64))\n"  # an OpenMP region: the caller is bound now
            "print(len(os.sched_getaffinity(0)))\n"
            "pinned = AtariVectorEnv('pong', 4, num_threads=2, thread_affinity_offset=0, noop_max=0)\n"
            "print(pinned.worker_cores, resolve_num_threads(0, 1000))\n")
    env = dict(os.environ, OMP_PROC_BIND="true", OMP_PLACES="cores")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    bound, rest = done.stdout.splitlines()
    if bound != "1":
        pytest.skip(f"this libgomp did not bind the calling thread (it may run on {bound} cores)")
    assert rest == f"{usable[:2]} {len(usable)}"


def test_same_step_final_obs_with_life_loss_info():
    """SameStep with life_loss_info: a lost life sets terminated without a reset; its
    final_obs row is zeros (ale-py's holds an older frame: docs/VECTOR.md), the rows of
    episodes that ended equal ale-py's, and everything else matches as always."""
    kwargs = dict(noop_max=0, repeat_action_probability=0.0, num_threads=1, autoreset_mode="SameStep",
                  life_loss_info=True, max_num_frames_per_episode=1500)
    ours, theirs = AtariVectorEnv("breakout", 2, **kwargs), AleVectorEnv("breakout", 2, **kwargs)
    ours.reset(seed=3), theirs.reset(seed=3)
    rng = np.random.default_rng(1)
    before = np.zeros(2, np.int64)
    lives_lost = games_ended = 0
    for t in range(400):
        actions = rng.integers(0, 4, 2)
        a, b = ours.step(actions), theirs.step(actions)
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y, err_msg=f"step {t}")
        went_on = a[4]["episode_frame_number"] > before  # no reset in this step
        before = a[4]["episode_frame_number"].astype(np.int64)
        lost = a[2] & went_on
        ended = (a[2] | a[3]) & ~went_on
        assert ("final_obs" in a[4]) == ("final_obs" in b[4]) == bool((a[2] | a[3]).any()), t
        if "final_obs" in a[4]:
            assert not a[4]["final_obs"][lost].any(), t
            np.testing.assert_array_equal(a[4]["final_obs"][ended], b[4]["final_obs"][ended], err_msg=f"step {t}")
        lives_lost += int(lost.sum())
        games_ended += int(ended.sum())
    theirs.close()
    assert lives_lost >= 2 and games_ended >= 1, (lives_lost, games_ended)


def test_xla_says_there_is_no_jax_interface():
    with pytest.raises(NotImplementedError, match="no JAX/XLA interface"):
        AtariVectorEnv("pong", 1).xla()


THREADS_SHARING_AN_ENV = """
import hashlib, sys, threading, numpy as np
from hybridsim.vector import AtariVectorEnv
kw = dict(num_threads=2, thread_affinity_offset=int(sys.argv[1]), repeat_action_probability=0.25,
          noop_max=30, max_num_frames_per_episode=150)
shared, alone = AtariVectorEnv("breakout", 6, **kw), AtariVectorEnv("breakout", 6, **kw)
shared.reset(seed=5)
alone.reset(seed=5)
actions = np.full(6, 3, np.int64)
snapshots = []
def stepper():
    for _ in range(150):
        shared.step(actions)
def snapshotter():
    for _ in range(30):
        snapshots.append(shared.get_state())
threads = [threading.Thread(target=f) for f in (stepper, stepper, snapshotter)]
[t.start() for t in threads]
[t.join() for t in threads]
between_steps = {hashlib.md5(alone.get_state()).digest()}
for _ in range(300):
    alone.step(actions)
    between_steps.add(hashlib.md5(alone.get_state()).digest())
torn = sum(hashlib.md5(state).digest() not in between_steps for state in snapshots)
print(shared.get_state() == alone.get_state(), len(snapshots), torn)
"""


@pytest.mark.parametrize("pinned", [False, pytest.param(True, marks=needs_affinity)], ids=["openmp", "pinned-workers"])
def test_threads_sharing_an_environment_take_turns(pinned):
    """Two threads stepping one environment while a third snapshots it: the engine releases
    the GIL, and two calls ran in it at once (a crash; with pinned workers, snapshots taken
    in the middle of a step). Each call now waits for the others, so 2 x 150 steps from two
    threads end where 300 steps from one thread do, and every snapshot is the state between
    two of those steps. In a subprocess: a regression crashes."""
    done = subprocess.run([sys.executable, "-c", THREADS_SHARING_AN_ENV, "0" if pinned else "-1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "True 30 0\n", (done.returncode, done.stdout, done.stderr[-2000:])


def test_a_call_from_inside_another_on_the_same_thread_is_refused():
    """A signal handler calling get_state() inside an async step took the results the step
    was collecting, which then failed with "lost track of its running steps"."""
    env = AtariVectorEnv("pong", 4, batch_size=2, num_threads=1, noop_max=0)
    env.reset(seed=0)
    inner = []
    settle = env._settle

    def settle_then_reenter():  # stands in for a handler that runs while the call is under way
        settle()
        try:
            env.get_state()
        except RuntimeError as exc:
            inner.append(str(exc))

    env._settle = settle_then_reenter
    env.get_state()
    assert inner and "get_state() called while this thread is inside another call" in inner[0], inner
    env._settle = settle
    env.step(np.zeros(2, np.int64))  # nothing was lost
    env.close()
