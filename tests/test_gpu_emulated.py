"""The GPU kernels (cuda/vector_kernels.cu) run as host code over a sequential grid
(hybridsim.gpu.HostEmulatedDevice) against the CPU backend: AtariVectorEnv(backend="gpu")
and backend="hybrid" driven by the same Python code that drives a CUDA device, on the
same seeds, must return the same observations, rewards, terminations, truncations and
info as backend="cpu", bit for bit, across episode ends, sticky actions and noop starts.
No GPU needed: this proves the kernels' logic and indexing before any device run."""
import contextlib
import shutil

import numpy as np
import pytest

from hybridsim import AtariVectorEnv
from hybridsim.hybrid import balance_split, gpu_step_model, rebalanced_split, step_time_balance

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="host emulation of the kernels needs g++")


@pytest.fixture(scope="module")
def emulation_library():
    from hybridsim.gpu import build_emulation_library
    return build_emulation_library()


def _pair(game, n, backend, options, emulate=True, **kw):
    cpu = AtariVectorEnv(game, n, backend="cpu", num_threads=1 if emulate else 0, **kw)
    other = AtariVectorEnv(game, n, backend=backend, gpu_options=dict(options, emulate=emulate), **kw)
    return cpu, other


def to_numpy(x):
    """numpy view of a numpy array, torch tensor (any device) or cupy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "get") and not isinstance(x, dict):
        return x.get()
    return np.asarray(x)


def _assert_same(a, b, what):
    a, b = to_numpy(a), to_numpy(b)
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    if not np.array_equal(a, b):
        bad = np.argwhere(a != b)
        raise AssertionError(f"{what} differs at {len(bad)} places, first {bad[:3].tolist()}")


def _compare(cpu, other, steps, seed=7, action_seed=3, reset_every=None):
    obs_c, info_c = cpu.reset(seed=seed)
    obs_o, info_o = other.reset(seed=seed)
    _assert_same(obs_c, obs_o, "reset obs")
    for key in ("lives", "frame_number", "episode_frame_number", "env_id"):
        _assert_same(info_c[key], info_o[key], f"reset info[{key}]")
    rng = np.random.default_rng(action_seed)
    ends = 0
    for t in range(steps):
        actions = rng.integers(0, cpu.single_action_space.n, cpu.num_envs)
        rc = cpu.step(actions)
        ro = other.step(actions)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated"), rc[:4], ro[:4]):
            _assert_same(x, y, f"step {t} {name}")
        for key in ("lives", "frame_number", "episode_frame_number"):
            _assert_same(rc[4][key], ro[4][key], f"step {t} info[{key}]")
        assert ("final_obs" in rc[4]) == ("final_obs" in ro[4])
        if "final_obs" in rc[4]:
            _assert_same(rc[4]["final_obs"], ro[4]["final_obs"], f"step {t} final_obs")
        ends += int(np.sum(to_numpy(rc[2]) | to_numpy(rc[3])))
    return ends


# Episode ends within a few hundred steps: episodic life (breakout, ms_pacman lose lives
# under random play) and a frame limit (pong's games last longer than the run).
GAMES = [
    ("pong", dict(max_num_frames_per_episode=600)),
    ("breakout", dict(episodic_life=True)),
    ("ms_pacman", dict(life_loss_info=True, max_num_frames_per_episode=1500)),
]


@pytest.mark.parametrize("design", ["split", "fused", "split_shared"])
@pytest.mark.parametrize("game,kw", GAMES, ids=[g for g, _ in GAMES])
def test_emulated_gpu_equals_cpu(emulation_library, game, kw, design):
    cpu, gpu = _pair(game, 5, "gpu", dict(design=design, block=2), repeat_action_probability=0.25,
                     noop_max=30, **kw)
    ends = _compare(cpu, gpu, steps=300)
    assert ends >= 2, f"only {ends} episode ends: the run does not cover resets"
    # the whole state too (RAM, CPU, TIA, RNGs), which the outputs may not show yet
    assert cpu.get_state() == gpu.get_state()


# One game for each cartridge mapper GAMES leaves out (they have 2K and F8), so the device
# layout of every mapper's bank state and cartridge RAM and of the larger ROM images (DPC's
# 10,495 bytes) goes through the kernels; klax is also a PAL game.
MAPPER_GAMES = {"4K": "space_invaders", "F6": "road_runner", "F6SC": "klax", "F8SC": "elevator_action",
                "E0": "montezuma_revenge", "FE": "robotank", "DPC": "pitfall2"}


def test_mapper_games_have_those_mappers():
    from hybridsim import games_table
    assert {m: games_table.by_name(g)["mapper"] for m, g in MAPPER_GAMES.items()} == \
        {m: m for m in MAPPER_GAMES}
    covered = set(MAPPER_GAMES) | {games_table.by_name(g)["mapper"] for g, _ in GAMES}
    assert covered >= {g["mapper"] for g in games_table.games() if g.get("ale_settings", True)}


@pytest.mark.parametrize("game", MAPPER_GAMES.values())
def test_emulated_gpu_equals_cpu_on_every_mapper(emulation_library, game):
    cpu, gpu = _pair(game, 4, "gpu", dict(block=2), repeat_action_probability=0.25, noop_max=30,
                     max_num_frames_per_episode=400)
    ends = _compare(cpu, gpu, steps=250)
    assert ends >= 4, f"only {ends} episode ends: the run does not cover resets"


@pytest.mark.parametrize("design", ["split", "fused", "split_shared"])
def test_emulated_gpu_same_step_autoreset_rgb(emulation_library, design):
    """SAME_STEP (final_obs, a reset inside the step; split design processes the ending
    step's screen inline) and RGB observations without max-pool."""
    cpu, gpu = _pair("breakout", 4, "gpu", dict(design=design), autoreset_mode="SameStep",
                     episodic_life=True, grayscale=False, maxpool=False, img_height=64, img_width=48,
                     repeat_action_probability=0.25)
    assert _compare(cpu, gpu, steps=150) >= 2


def test_emulated_hybrid_same_step_autoreset(emulation_library):
    """final_obs rows of CPU-part environments that did not end are zeros, as on the other
    backends (the pinned rows kept an earlier episode's last frame)."""
    cpu, hyb = _pair("breakout", 6, "hybrid", dict(cpu_envs=3, cpu_threads=1, copy_chunks=2), autoreset_mode="SameStep",
                     episodic_life=True, repeat_action_probability=0.25)
    assert _compare(cpu, hyb, steps=150) >= 3


def test_emulated_gpu_partial_reset_and_snapshot(emulation_library):
    cpu, gpu = _pair("breakout", 4, "gpu", dict(design="split"), repeat_action_probability=0.25)
    _compare(cpu, gpu, steps=20)
    mask = np.array([True, False, True, False])
    oc, ic = cpu.reset(seed=99, options={"reset_mask": mask})
    og, ig = gpu.reset(seed=99, options={"reset_mask": mask})
    _assert_same(oc, og, "partial reset obs")
    _assert_same(ic["lives"], ig["lives"], "partial reset lives")
    state_c, state_g = cpu.get_state(), gpu.get_state()
    rng = np.random.default_rng(1)
    acts = [rng.integers(0, cpu.single_action_space.n, 4) for _ in range(10)]
    first = [to_numpy(gpu.step(a)[0]).copy() for a in acts]
    gpu.set_state(state_g)
    again = [gpu.step(a)[0] for a in acts]
    for x, y in zip(first, again):
        _assert_same(x, y, "replay after set_state")
    cpu.set_state(state_c)
    for a, y in zip(acts, again):
        _assert_same(cpu.step(a)[0], y, "cpu vs gpu after set_state")


@pytest.mark.parametrize("cpu_envs,chunks", [(0, None), (2, None), (5, None), (2, 3), (5, 3)])
def test_emulated_hybrid_equals_cpu(emulation_library, cpu_envs, chunks):
    """chunks: the CPU part in pieces, each copied up while the next steps (an empty piece
    where there are fewer rows than pieces)."""
    cpu, hyb = _pair("ms_pacman", 5, "hybrid", dict(cpu_envs=cpu_envs, cpu_threads=1, copy_chunks=chunks),
                     repeat_action_probability=0.25, life_loss_info=True, max_num_frames_per_episode=1200)
    assert hyb._engine.split["cpu_envs"] == cpu_envs and not hyb._engine.split["measured"]
    assert hyb._engine.copy_chunks == (chunks or 1)
    assert f"cpu_envs={cpu_envs}" in repr(hyb)
    assert _compare(cpu, hyb, steps=200) >= 1


def test_emulated_hybrid_measures_its_split(emulation_library):
    hyb = AtariVectorEnv("pong", 6, backend="hybrid",
                         gpu_options=dict(emulate=True, cpu_threads=1, calibrate_steps=2))
    s = hyb._engine.split
    assert s["measured"] and s["cpu_rate"] > 0 and s["gpu_rate"] > 0 and s["gpu_latency"] >= 0
    assert s["cpu_envs"] + s["gpu_envs"] == 6
    assert s["cpu_envs"] == balance_split(6, s["cpu_rate"], s["gpu_rate"], gpu_latency=s["gpu_latency"])
    assert "measured" in repr(hyb._engine)


class _DeviceArray:
    """Stands for a device array: not a numpy array, readable only through the device."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.dtype, self.shape = self.a.dtype, self.a.shape

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


def test_emulated_hybrid_cpu_part_overlaps_the_gpu_part(emulation_library):
    """With device inputs (actions from a policy on the GPU), the CPU part's copies of them
    are taken before the GPU kernels launch. On CUDA a device-to-host copy waits for the
    stream, so taking it after the launch would run the two parts one after the other."""
    from hybridsim.gpu import HostEmulatedDevice

    events = []

    class RecordingDevice(HostEmulatedDevice):
        def launch(self, name, threads, block, args, shared_mem=0):
            events.append(("launch", name))
            super().launch(name, threads, block, args, shared_mem)

        def to_host(self, a):
            events.append(("to_host",))
            return super().to_host(a)

        def begin_side_copies(self):
            events.append(("begin_side",))

        def copy_to_device(self, dst, src, side=False):
            events.append(("copy", side))
            super().copy_to_device(dst, src, side)

        def end_side_copies(self):
            events.append(("end_side",))

    cpu = AtariVectorEnv("pong", 4, backend="cpu", num_threads=1)
    hyb = AtariVectorEnv("pong", 4, backend="hybrid", device=RecordingDevice(emulation_library),
                         gpu_options=dict(cpu_envs=2, cpu_threads=1, copy_chunks=2))
    engine = hyb._engine

    class RecordingCpuPart:
        def __init__(self, part):
            self.part = part

        def run(self, *args):
            events.append(("cpu_run",))
            return self.part.run(*args)

        def __getattr__(self, name):
            return getattr(self.part, name)

    engine.cpu = RecordingCpuPart(engine.cpu)
    cpu.reset(seed=3)
    hyb.reset(seed=3)
    rng = np.random.default_rng(0)
    n = 4
    out = dict(obs=np.zeros((n, engine.obs_bytes), np.uint8), final_obs=None, reward=np.zeros(n, np.int32),
               terminated=np.zeros(n, np.uint8), truncated=np.zeros(n, np.uint8), lives=np.zeros(n, np.int32),
               frame_number=np.zeros(n, np.int32), episode_frame_number=np.zeros(n, np.int32), has_final=None)
    for _ in range(3):
        actions = rng.integers(0, hyb.single_action_space.n, n)
        events.clear()
        engine.run(np.arange(n, dtype=np.int32), _DeviceArray(np.zeros(n, np.uint8)),
                   _DeviceArray(actions.astype(np.int32)), _DeviceArray(np.ones(n, np.float32)), *out.values())
        first_launch = next(i for i, e in enumerate(events) if e[0] == "launch")
        cpu_run = events.index(("cpu_run",))
        assert first_launch < cpu_run, events
        assert ("to_host",) not in events[first_launch:cpu_run], f"the CPU part waited for the GPU part: {events}"
        assert events.count(("to_host",)) >= 1, events  # the device inputs did come to the host
        # the CPU rows go up on the side stream, ordered after earlier work but not after
        # the launch, the first chunk's while the second steps; then the host waits for them
        runs = [i for i, e in enumerate(events) if e == ("cpu_run",)]
        assert len(runs) == 2, events
        assert events.index(("begin_side",)) < first_launch, events
        assert ("copy", True) in events[runs[0]:runs[1]], events
        end = events.index(("end_side",))
        assert end > runs[1] and ("copy", True) not in events[end:], events
        expected = cpu.step(actions)[0]
        _assert_same(expected.reshape(n, -1), out["obs"], "hybrid with device inputs vs cpu")


class _CupyLikeArray:
    """A device array as host code sees CuPy's: numpy refuses to convert it implicitly
    (CuPy raises TypeError), only the device's array module and to_host read it."""

    def __init__(self, a):
        self.data = np.asarray(a)
        self.dtype, self.shape = self.data.dtype, self.data.shape

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (a device array)")


def _strict_device(library):
    """A host-emulated device that checks what a CUDA device needs of its callers: every
    array-module call inside the device's scope (CuPy allocates and runs on the current
    device, which a multi-GPU process may have left elsewhere), device arrays read only
    through the array module or to_host."""
    from hybridsim.gpu import HostEmulatedDevice

    def unwrap(a):
        return a.data if isinstance(a, _CupyLikeArray) else a

    class ScopedNumpy:
        def __init__(self, dev):
            self.dev = dev

        def __getattr__(self, name):
            f = getattr(np, name)
            if not callable(f) or isinstance(f, type):
                return f

            def checked(*args, **kwargs):
                if self.dev.depth == 0:
                    self.dev.outside.append(name)
                return f(*[unwrap(a) for a in args], **kwargs)
            return checked

    class StrictDevice(HostEmulatedDevice):
        def __init__(self, lib):
            super().__init__(lib)
            self.depth = 0
            self.outside = []
            self.xp = ScopedNumpy(self)

        @contextlib.contextmanager
        def scope(self):
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1

        def asarray(self, a, dtype=None):
            return super().asarray(unwrap(a), dtype)

        def to_host(self, a):
            return np.asarray(unwrap(a))

    return StrictDevice(library)


@pytest.mark.parametrize("backend,options", [("gpu", {}), ("hybrid", dict(cpu_envs=1, cpu_threads=1))])
def test_emulated_engines_stay_on_their_device(emulation_library, backend, options):
    """Every device-array call of the vector env and the engines happens inside the device's
    scope, and device actions (discrete and continuous) are read without numpy's implicit
    conversion; results equal the CPU backend's."""
    for kw in (dict(repeat_action_probability=0.25), dict(continuous=True, noop_max=0)):
        cpu = AtariVectorEnv("breakout", 3, backend="cpu", num_threads=1, **kw)
        dev = _strict_device(emulation_library)
        other = AtariVectorEnv("breakout", 3, backend=backend, device=dev, gpu_options=options, **kw)
        _assert_same(cpu.reset(seed=5)[0], other.reset(seed=5)[0], "reset")
        rng = np.random.default_rng(1)
        for t in range(12):
            if kw.get("continuous"):
                a = rng.uniform([0, -np.pi, 0], [1, np.pi, 1], (3, 3)).astype(np.float32)
            else:
                a = rng.integers(0, cpu.single_action_space.n, 3)
            rc, ro = cpu.step(a), other.step(_CupyLikeArray(a))
            for name, x, y in zip(("obs", "reward", "terminated", "truncated"), rc[:4], ro[:4]):
                _assert_same(x, y, f"{kw} step {t} {name}")
            if t == 5:
                state = other.get_state()
                other.set_state(state)
        other.reset(options=dict(reset_mask=np.array([True, False, True])))
        assert dev.outside == [], f"{backend} {kw}: array calls outside the device scope: {sorted(set(dev.outside))}"


def test_emulated_gpu_rejects_async_and_unknown_options(emulation_library):
    with pytest.raises(ValueError, match="synchronous"):
        AtariVectorEnv("pong", 4, batch_size=2, backend="gpu", gpu_options=dict(emulate=True))
    with pytest.raises(ValueError, match="unknown gpu_options"):
        AtariVectorEnv("pong", 2, backend="gpu", gpu_options=dict(emulate=True, bogus=1))
    with pytest.raises(ValueError, match="design"):
        AtariVectorEnv("pong", 2, backend="gpu", gpu_options=dict(emulate=True, design="x"))


@pytest.mark.parametrize("backend,options", [("gpu", {}), ("hybrid", dict(cpu_envs=1)),
                                             ("hybrid", dict(cpu_envs=2))])
def test_emulated_backends_check_tensor_actions(emulation_library, backend, options):
    """Torch tensors (the backends' own output type) get the CPU backend's action checks on
    every split, all environments on the CPU side included."""
    torch = pytest.importorskip("torch")
    env = AtariVectorEnv("pong", 2, backend=backend, num_threads=1,
                         gpu_options=dict(options, emulate=True, output="numpy"))
    env.reset(seed=0)
    for actions, match in ((torch.tensor([1.7, 2.9]), "integer array"),
                           (torch.tensor([0, 1, 2]), r"shape \(2,\)"),
                           (torch.tensor([-1, 3]), r"0\.\.5"),
                           (torch.tensor([10**6, 0]), r"0\.\.5"),
                           (torch.tensor(1), r"shape \(2,\)")):
        with pytest.raises(ValueError, match=match):
            env.step(actions)
    env.step(torch.tensor([1, 2]))


# ---- the split rule, no engine needed -----------------------------------------------------

def test_balance_split_equalises_times():
    for n, c, g in [(1000, 2000.0, 8000.0), (4096, 30000.0, 10000.0), (7, 1.0, 1.0), (65536, 1e4, 1e6)]:
        k = balance_split(n, c, g)
        t_cpu, t_gpu = step_time_balance(k, n, c, g)
        # one environment more or less on either side would not be closer
        for other in (k - 1, k + 1):
            if 0 <= other <= n:
                a, b = step_time_balance(other, n, c, g)
                assert abs(t_cpu - t_gpu) <= abs(a - b) + 1e-12


@pytest.mark.parametrize("n,c,g,latency", [
    (16384, 65000.0, 120000.0, 0.17),  # an H200's pong: the GPU's latency floor dominates
    (131072, 65000.0, 110000.0, 0.17),
    (4096, 56000.0, 20000.0, 0.15),    # the CPU steps them all within the latency: all to the CPU
    (1000, 2000.0, 8000.0, 0.0),
    (300, 10.0, 1000.0, 0.05),
])
def test_balance_split_with_latency_is_the_fastest_split(n, c, g, latency):
    """Against a brute force over every split: the step takes the longer part's time (a
    part with no environments takes none), and balance_split's is the shortest but for
    rounding (one environment's time on either side)."""
    def step(k):
        return max(step_time_balance(k, n, c, g, latency))
    best = min(step(k) for k in range(n + 1))
    k = balance_split(n, c, g, gpu_latency=latency)
    assert step(k) <= best + 1.0 / c + 1.0 / g + 1e-12
    if n / c <= latency:
        assert k == n


def test_gpu_step_model_fits_two_steps():
    rate, latency = gpu_step_model(2048, 0.17 + 2048 / 1e5, 16384, 0.17 + 16384 / 1e5)
    assert rate == pytest.approx(1e5) and latency == pytest.approx(0.17)
    # a flat or falling step time (all latency, or noise): a finite rate, the latency below the step
    rate, latency = gpu_step_model(2048, 0.30, 16384, 0.29)
    assert np.isfinite(rate) and rate > 0 and 0 <= latency < 0.29
    assert latency + 16384 / rate == pytest.approx(0.29)


def test_rebalanced_split_from_the_hybrids_own_steps():
    """The calibration's GPU line scaled through the measured GPU step, the CPU rate from
    the measured CPU step: the new split's modelled part times agree (brute force over
    every split: none is faster by more than one environment's time)."""
    n, c, rate, latency = 1000, 500, 1000.0, 0.1
    # the CPU part was the long pole (1.0 s against the GPU's 0.6 s, which the line predicts)
    k = rebalanced_split(n, c, 1.0, 0.6, rate, latency)
    assert k == 367  # 367 / 500 = 0.734 s, 0.1 + 633 / 1000 = 0.733 s
    # the GPU ran 1.5x slower than its line: latency and slope scale together
    k = rebalanced_split(n, c, 0.6, 0.9, rate, latency)
    cpu_rate, g_rate, g_lat = c / 0.6, rate / 1.5, latency * 1.5

    def step(j):
        return max(step_time_balance(j, n, cpu_rate, g_rate, g_lat))
    assert k > c and step(k) <= min(step(j) for j in range(n + 1)) + 1 / cpu_rate + 1 / g_rate
    # balanced already, a change under 1% of N, or a part with nothing to time: kept
    assert rebalanced_split(n, c, 0.6, 0.6, rate, latency) == c
    assert rebalanced_split(n, c, 0.6, 0.6 * 1.01, rate, latency) == c
    assert rebalanced_split(n, 0, 0.0, 0.6, rate, latency) == 0
    assert rebalanced_split(n, n, 0.6, 0.0, rate, latency) == n


@pytest.mark.parametrize("after", [2, 10, 0, 12])
def test_emulated_hybrid_rebalance_moves_environments_exactly(emulation_library, monkeypatch, after):
    """After rebalance_steps full steps the hybrid re-splits once (here to a forced split:
    more or fewer environments on the CPU, or all on one side), moving every
    environment's state between the parts; the outputs stay the CPU backend's, bit for
    bit, episode ends included."""
    import hybridsim.hybrid as hybrid
    monkeypatch.setattr(hybrid, "calibrate", lambda *a, **k: dict(cpu_rate=100.0, gpu_rate=100.0, gpu_latency=0.0))
    seen = []

    def forced(n, c, t_cpu, t_gpu, rate, latency):
        seen.append((n, c, t_cpu, t_gpu, rate, latency))
        return after
    monkeypatch.setattr(hybrid, "rebalanced_split", forced)
    cpu, hyb = _pair("breakout", 12, "hybrid", dict(cpu_threads=1, rebalance_steps=2), episodic_life=True,
                     repeat_action_probability=0.25)
    assert hyb._engine.split["cpu_envs"] == 6
    _compare(cpu, hyb, steps=2)
    assert hyb._engine.split["cpu_envs"] == after
    assert hyb.get_state() == cpu.get_state()  # frames left undrawn before the move included
    rng, ends = np.random.default_rng(1), 0
    for t in range(60):
        actions = rng.integers(0, 4, 12)
        rc, rh = cpu.step(actions), hyb.step(actions)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated"), rc[:4], rh[:4]):
            _assert_same(x, y, f"step {t} {name}")
        ends += int(np.sum(rc[2] | rc[3]))
    assert ends >= 2
    (n, c, t_cpu, t_gpu, rate, latency), = seen  # once, from two full steps' times
    assert (n, c, rate, latency) == (12, 6, 100.0, 0.0) and t_cpu > 0 and t_gpu > 0
    s = hyb._engine.split
    assert s["cpu_envs"] == after and s["gpu_envs"] == 12 - after
    assert s["rebalance"]["cpu_envs_before"] == 6 and s["rebalance"]["steps"] == 2
    assert hyb.get_state() == cpu.get_state()
    # right after a reset the noop frames are left undrawn (FrameReplay): a move must draw
    # them (materialize) before it copies the frames
    cpu.reset(seed=9)
    hyb.reset(seed=9)
    hyb._engine._move_split(6)
    assert hyb.get_state() == cpu.get_state()


def test_a_rebalance_that_cannot_make_its_parts_keeps_the_old_split(emulation_library, monkeypatch):
    """New parts that cannot be made (memory) leave the environments where they were, the
    error recorded in split["rebalance"]; the run goes on equal to the CPU backend."""
    import hybridsim.hybrid as hybrid
    monkeypatch.setattr(hybrid, "calibrate", lambda *a, **k: dict(cpu_rate=100.0, gpu_rate=100.0, gpu_latency=0.0))
    monkeypatch.setattr(hybrid, "rebalanced_split", lambda *a: 2)
    make = hybrid.HybridEngine._make_parts

    def no_memory_for_2(self, cpu_envs):
        if cpu_envs == 2:
            make(self, 0)  # made part-way, as an allocation failing late would leave it
            raise MemoryError("cannot allocate the GPU part")
        return make(self, cpu_envs)
    monkeypatch.setattr(hybrid.HybridEngine, "_make_parts", no_memory_for_2)
    cpu, hyb = _pair("breakout", 8, "hybrid", dict(cpu_threads=1, rebalance_steps=2), repeat_action_probability=0.25)
    _compare(cpu, hyb, steps=2)
    s = hyb._engine.split
    assert s["cpu_envs"] == 4 and "MemoryError" in s["rebalance"]["error"]
    assert hyb.get_state() == cpu.get_state()
    for t in range(20):
        a = np.random.default_rng(t).integers(0, 4, 8)
        _assert_same(cpu.step(a)[0], hyb.step(a)[0], f"step {t} after the failed move")


def test_hybrid_options_are_ints_in_range(emulation_library):
    """2.5 environments, "3" steps and True were taken as 2, 3 and 1; calibrate_steps 0
    divided by zero; each is refused by name before the calibration runs."""
    with pytest.raises(ValueError, match="rebalance_steps needs a measured split"):
        AtariVectorEnv("pong", 4, backend="hybrid", gpu_options=dict(emulate=True, cpu_envs=2, rebalance_steps=3))
    for option, message in ((dict(rebalance_steps=-1), "rebalance_steps must be an int >= 0, got -1"),
                            (dict(rebalance_steps="3"), "rebalance_steps must be an int >= 0, got '3'"),
                            (dict(rebalance_steps=True), "rebalance_steps must be an int >= 0, got True"),
                            (dict(calibrate_steps=0), "calibrate_steps must be an int >= 1, got 0"),
                            (dict(calibrate_steps=2.0), "calibrate_steps must be an int >= 1, got 2.0"),
                            (dict(cpu_envs=2.5), r"cpu_envs must be an int in 0\.\.4, got 2.5"),
                            (dict(cpu_envs="2"), r"cpu_envs must be an int in 0\.\.4, got '2'"),
                            (dict(cpu_envs=5), r"cpu_envs must be an int in 0\.\.4, got 5"),
                            (dict(cpu_threads=-2), "cpu_threads must be an int >= 0, got -2"),
                            (dict(copy_chunks=1.5), "copy_chunks must be an int >= 1, got 1.5")):
        with pytest.raises(ValueError, match=f"gpu_options {message}"):
            AtariVectorEnv("pong", 4, backend="hybrid", gpu_options=dict(emulate=True, **option))
    hyb = AtariVectorEnv("pong", 4, backend="hybrid", gpu_options=dict(emulate=True, cpu_envs=np.int64(2)))
    assert hyb._engine.split["cpu_envs"] == 2


def test_balance_split_edges():
    assert balance_split(100, 0.0, 5.0) == 0
    assert balance_split(100, 5.0, 0.0) == 100
    assert balance_split(100, 1.0, 1.0) == 50
    assert balance_split(100, 1.0, 1.0, max_cpu=10) == 10
    assert balance_split(100, 1.0, 1000.0, min_cpu=3) == 3
    assert balance_split(0, 1.0, 1.0) == 0
    with pytest.raises(ValueError):
        balance_split(10, 0.0, 0.0)
    with pytest.raises(ValueError):
        balance_split(10, float("nan"), 1.0)
    with pytest.raises(ValueError, match="gpu_latency"):
        balance_split(10, 1.0, 1.0, gpu_latency=-1.0)


def test_emulated_hybrid_partial_reset_and_snapshot(emulation_library):
    """Partial resets (write_current split over both parts) and snapshots (host_array /
    load_arrays across the CPU and GPU parts), against the CPU backend."""
    cpu, hyb = _pair("breakout", 4, "hybrid", dict(cpu_envs=2, cpu_threads=1), repeat_action_probability=0.25)
    _compare(cpu, hyb, steps=15)
    mask = np.array([True, False, False, True])
    oc, ic = cpu.reset(seed=3, options={"reset_mask": mask})
    oh, ih = hyb.reset(seed=3, options={"reset_mask": mask})
    _assert_same(oc, oh, "hybrid partial reset obs")
    _assert_same(ic["episode_frame_number"], ih["episode_frame_number"], "hybrid partial reset frames")
    state_h = hyb.get_state()
    rng = np.random.default_rng(2)
    acts = [rng.integers(0, cpu.single_action_space.n, 4) for _ in range(8)]
    for a in acts:
        _assert_same(cpu.step(a)[0], hyb.step(a)[0], "hybrid after partial reset")
    cpu.set_state(state_h)  # a hybrid snapshot is the CPU backend's format
    hyb.set_state(state_h)
    for a in acts:
        _assert_same(cpu.step(a)[0], hyb.step(a)[0], "hybrid after set_state")


@pytest.mark.parametrize("backend", ["gpu", "hybrid"])
def test_training_on_the_emulated_kernels_equals_training_on_the_cpu_backend(
        emulation_library, tmp_path, backend):
    """The training loop over backend gpu/hybrid (host-emulated kernels) learns exactly
    what it learns over backend cpu: same batches, so the same parameters."""
    torch = pytest.importorskip("torch")
    from hybridsim.train import TrainConfig, Trainer
    base = dict(game="pong", num_envs=4, num_minibatches=2, total_frames=640, num_threads=1,
                torch_threads=1, log_every=0.0, noop_max=5, max_episode_frames=100,
                log_trajectories=False, device="cpu")
    runs = {}
    for name in ("cpu", backend):
        trainer = Trainer(TrainConfig(**base, backend=name, gpu_emulate=name != "cpu",
                                      log_dir=str(tmp_path / name)))
        trainer.train()
        runs[name] = trainer
    a, b = runs["cpu"], runs[backend]
    assert a.updates == b.updates > 0 and a.all_episodes == b.all_episodes != []
    for name, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[name]), name


@pytest.mark.parametrize("options, message", [
    (dict(block=0), "block must be an int in 1..1024"),
    (dict(block=2048), "block must be an int in 1..1024"),
    (dict(block=True), "block must be an int in 1..1024"),
    (dict(pixel_block=64.0), "pixel_block must be an int in 1..1024"),
])
def test_block_sizes_outside_cudas_limits_are_refused(emulation_library, options, message):
    with pytest.raises(ValueError, match=message):
        AtariVectorEnv("pong", 2, backend="gpu", gpu_options=dict(options, emulate=True))


def test_a_block_over_a_kernels_register_limit_is_refused_before_launching():
    """The emulator kernels use about 255 registers per thread on sm_90, so a block may
    have 256 threads at most; a launch with more fails on a device ("too many resources
    requested") and cannot fail in emulation: CupyDevice asks the driver's limit first."""
    import contextlib
    from hybridsim import gpu

    launched = []

    class Kernel:
        attributes = {"max_threads_per_block": 256}

        def __call__(self, grid, block, args, shared_mem=0):  # cupy.RawKernel's call
            launched.append((grid, block))

    dev = gpu.CupyDevice.__new__(gpu.CupyDevice)  # no CuPy here: only what launch reads
    dev.device_id, dev.device, dev._limits = 0, contextlib.nullcontext(), {}
    dev._fns = {"hs_vec_materialize": Kernel()}
    args = (None, None, 4)
    with pytest.raises(ValueError, match=r"hs_vec_materialize: a block of 512 threads is more than this "
                                         r"kernel can have on device 0 \(256"):
        dev.launch("hs_vec_materialize", 1000, 512, args)
    assert launched == []
    dev.launch("hs_vec_materialize", 1000, 256, args)
    assert launched == [((4,), (256,))]


def test_the_emulated_device_copies_where_cupy_does(emulation_library):
    """cupy.asnumpy always returns a new host array, and cupy.ndarray.set refuses a dtype
    or shape it would have to convert: the emulation does the same, so code that relied
    on sharing memory or on numpy's casting fails here instead of on a device."""
    from hybridsim.gpu import HostEmulatedDevice
    dev = HostEmulatedDevice(emulation_library)
    on_device = dev.zeros(4, np.int32)
    host = dev.to_host(on_device)
    host[0] = 7
    assert on_device[0] == 0
    with pytest.raises(TypeError, match="dtype"):
        dev.copy_to_device(on_device, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="shape"):
        dev.copy_to_device(on_device, np.zeros(2, np.int32))
    with pytest.raises(RuntimeError, match="contiguous"):
        dev.copy_to_device(dev.zeros((4, 4), np.int32)[:, 0], np.zeros(4, np.int32))
    dev.copy_to_device(on_device, np.arange(4, dtype=np.int32))
    assert on_device.tolist() == [0, 1, 2, 3]


def test_split_shared_needs_its_shared_memory(emulation_library):
    """hs_vec_execute_shared without a part of shared memory per thread would read past
    its allocation on a device; both devices refuse the launch, and GpuEngine refuses a
    block whose parts pass the 48 KB a kernel gets without opting in."""
    from hybridsim import gpu
    dev = gpu.HostEmulatedDevice(emulation_library)
    args = (None,) * 19 + (0, 0)
    with pytest.raises(ValueError, match="hs_vec_execute_shared: launched with 0 bytes of shared memory, "
                                         "its 128 threads need 16896"):
        dev.launch("hs_vec_execute_shared", 128, 128, args)
    with pytest.raises(ValueError, match="block 512 is more than split_shared takes"):
        AtariVectorEnv("pong", 4, backend="gpu", gpu_options=dict(emulate=True, design="split_shared", block=512))


@pytest.mark.parametrize("backend", ["gpu", "hybrid"])
def test_snapshots_copy_one_device_array_at_a_time(emulation_library, backend):
    """get_state copies the device arrays to the host one at a time into the state's own
    buffer, and set_state reads the payload in place: at 256K environments a state is
    ~50 GB and the old 3x peak (host copies, np.savez's buffer, the header join) was more
    than an H200 node's memory. Peaks measured with tracemalloc (numpy reports to it)."""
    from memory_util import snapshot_peaks
    options = dict(cpu_envs=16, cpu_threads=1) if backend == "hybrid" else {}
    cpu, other = _pair("pong", 48, backend, options)
    cpu.reset(seed=1)
    other.reset(seed=1)
    largest = max(int(np.prod(shape)) * dtype.itemsize for shape, dtype in other._snapshot_layout().values())
    state, get_peak, set_peak = snapshot_peaks(other)
    assert state == cpu.get_state()
    assert get_peak < 1.35 * len(state) + largest, (get_peak, len(state), largest)
    assert set_peak < 0.15 * len(state) + largest, (set_peak, len(state), largest)


@pytest.mark.parametrize("backend,options,why", [
    ("gpu", {}, "the gpu backend has no CPU workers"),
    ("hybrid", dict(cpu_envs=2), "the hybrid backend's CPU part runs on OpenMP's threads")])
def test_the_gpu_backends_say_they_do_not_pin_workers(backend, options, why):
    with pytest.warns(RuntimeWarning, match=rf"thread_affinity_offset=0 is not applied: it pins backend='cpu' "
                                            rf"workers; {why}"):
        env = AtariVectorEnv("pong", 4, backend=backend, thread_affinity_offset=0, noop_max=0,
                             gpu_options=dict(emulate=True, **options))
    assert env.worker_cores is None
    env.close()
