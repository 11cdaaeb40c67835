"""GPU backend checks and benchmarks for one short device session (scripts/device_check.sh).

    python benchmarks/gpu_bench.py PHASE --out FILE.json [--budget S] [--dry-run] [options]

Phases (each writes one JSON object to --out, and stops itself within --budget seconds):
  info        device, versions, struct sizes, kernel attributes (registers, local memory)
  compile     NVRTC compile time of the kernels (fresh CuPy cache), and the cubin's load time
  exact       GPU == CPU bit for bit (obs, rewards, terminations, truncations, lives,
              frame numbers) for several games and both designs over many steps, in lockstep
  streams     whether environments on their own CUDA streams overlap (step time of 1..8 side by side)
  throughput  frames/s (frame_skip 4, default preprocessing) for games x num_envs,
              1K .. 256K environments, growing while memory and time allow
  designs     fused vs split design and block sizes on one game at one size
  hybrid      CPU-only (all cores) vs GPU-only vs hybrid (measured split) at a few sizes
  merge       merge phase files: --out REPORT.json PHASEFILE...

--dry-run runs every phase on the host-emulated device (hybridsim.gpu.HostEmulatedDevice)
with tiny sizes: no GPU needed; it exercises the whole report path here.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from typing import Callable, NamedTuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

GAMES = ("pong", "breakout", "ms_pacman")
# Settings that end episodes within a few hundred steps under random play.
EXACT_SETTINGS = {
    "pong": dict(max_num_frames_per_episode=2000),
    "breakout": dict(episodic_life=True),
    "ms_pacman": dict(life_loss_info=True, max_num_frames_per_episode=3000),
    "space_invaders": dict(episodic_life=True),
    "seaquest": dict(life_loss_info=True, max_num_frames_per_episode=3000),
}
# One game per cartridge mapper the games above leave out (tests/test_gpu_emulated.py's
# MAPPER_GAMES): compared in the default design only, with a frame limit for resets.
MAPPER_GAMES = ("road_runner", "klax", "elevator_action", "montezuma_revenge", "robotank", "pitfall2")
MAPPER_SETTINGS = dict(max_num_frames_per_episode=2000)
FRAME_SKIP = 4


class Budget:
    def __init__(self, seconds: float):
        self.t0 = time.perf_counter()
        self.seconds = float(seconds)

    def used(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.seconds - self.used()


_PARTIAL_OUT = None  # main() sets it: the phase's --out


def _save_partial(rep):
    """Write the results so far: a phase that the shell's timeout kills (an NVRTC compile
    that was not cached in time) still reports every run it finished."""
    if _PARTIAL_OUT:
        from hybridsim.storage import atomic_write
        text = json.dumps(dict(status="partial: the phase was stopped before its end", **rep),
                          indent=1, default=str)
        atomic_write(_PARTIAL_OUT, lambda fh: fh.write(text.encode()))


def _opts(args, **kw):
    o = dict(kw)
    if args.dry_run:
        o["emulate"] = True
    if args.cubin and "cubin" not in o:
        o["cubin"] = args.cubin
    return o


def _xp(args):
    if args.dry_run:
        return np
    import cupy
    return cupy


def _sync(args):
    if not args.dry_run:
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def _free_pool(args):
    if not args.dry_run:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def _to_numpy(x):
    if hasattr(x, "get") and not isinstance(x, (dict, np.ndarray)):
        return x.get()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


# ---- info / compile ---------------------------------------------------------------------
def phase_info(args, budget):
    import hybridsim
    from hybridsim import _vector, gpu
    rep = dict(python=sys.version.split()[0], platform=platform.platform(), numpy=np.__version__,
               cpu_count=os.cpu_count(), source_hash=gpu.kernel_source_hash(),
               cpu_sizes=dict(ale_env=_vector.ALE_ENV_BYTES, vec_state=_vector.VEC_STATE_BYTES,
                              frame=_vector.FRAME_BYTES, plan=_vector.RESIZE_PLAN_BYTES),
               include_dir=hybridsim.core_include_dir())
    try:
        import torch
        rep["torch"] = torch.__version__
    except Exception as exc:  # noqa: BLE001
        rep["torch"] = repr(exc)
    if args.dry_run:
        rep["device"] = "host-emulated (dry run)"
        return rep
    import cupy
    rep["cupy"] = cupy.__version__
    rep["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    rep["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]  # bytes in CuPy's runtime API
    rep["device"] = dict(name=name.decode() if isinstance(name, bytes) else str(name), sm=f"{props['major']}{props['minor']}",
                         multiprocessors=props["multiProcessorCount"], memory=props["totalGlobalMem"])
    free, total = cupy.cuda.runtime.memGetInfo()
    rep["memory_free"], rep["memory_total"] = free, total
    t0 = time.perf_counter()
    dev = gpu.CupyDevice(0, cubin=args.cubin)
    rep["module_seconds"] = time.perf_counter() - t0  # NVRTC compile (or cache / cubin load)
    rep["module"] = "cubin " + args.cubin if args.cubin else "nvrtc"
    attrs = {}
    for name in gpu.KERNELS:
        try:
            a = dev._fn(name).attributes
            attrs[name] = {k: a[k] for k in ("num_regs", "local_size_bytes", "max_threads_per_block",
                                            "shared_size_bytes") if k in a}
        except Exception as exc:  # noqa: BLE001
            attrs[name] = repr(exc)
    rep["kernel_attributes"] = attrs
    sizes = dev.zeros(8, np.int64)  # hs_vec_sizes writes 8
    dev.launch("hs_vec_sizes", 1, 1, (sizes,))
    rep["device_sizes"] = [int(x) for x in dev.to_host(sizes)]
    try:  # the device-built resize plan against the host's (the engine uploads the host's)
        from hybridsim import AtariVectorEnv
        env = AtariVectorEnv("pong", 2, backend="gpu", gpu_options=dict(output="cupy", cubin=args.cubin))
        rep["plan_device_equal"] = env._engine.plan_device_equal
        env.reset(seed=0)
        rep["first_reset_ok"] = True
    except Exception as exc:  # noqa: BLE001
        rep["engine_error"] = repr(exc)
        rep["engine_trace"] = traceback.format_exc()[-2000:]
    try:
        limit = cupy.cuda.runtime.deviceGetLimit(0x00)  # cudaLimitStackSize
        rep["stack_limit"] = limit
    except Exception:  # noqa: BLE001
        pass
    return rep


def phase_compile(args, budget):
    """NVRTC compile of the kernels into a fresh cache (what a first backend='gpu' costs)."""
    from hybridsim import gpu
    rep = {}
    if args.dry_run:
        if args.part not in (None, "base"):
            return dict(note=f"dry run: the host emulation has no module part {args.part!r}")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            gpu.build_emulation_library(cache_dir=tmp, opt="-O0")
        rep["emulation_build_s"] = time.perf_counter() - t0
        return rep
    # NVRTC's build of one module part (--part; all parts one after another without it)
    # into CuPy's default cache, which later processes reuse; device_check.sh runs one
    # process per part in parallel. --nvrtc-marker: a file written per part when done.
    parts = [args.part] if args.part else list(gpu.ALL_PARTS)
    rep["parts"] = {}
    for part in parts:
        t0 = time.perf_counter()
        dev = gpu.CupyDevice(0, cubin=False)
        mod = dev.module_for(part)
        r = dict(nvrtc_compile_s=time.perf_counter() - t0)
        for name, p in gpu.KERNEL_PART.items():
            if p == part:
                a = mod.get_function(name).attributes
                r[name] = {k: a.get(k) for k in ("num_regs", "local_size_bytes")}
        rep["parts"][part] = r
        if args.nvrtc_marker:
            with open(f"{args.nvrtc_marker}.{part}", "w") as fh:
                fh.write("ok\n")
    if args.cubin:
        import cupy
        t0 = time.perf_counter()
        m = cupy.RawModule(path=args.cubin)
        m.get_function("hs_vec_sizes")
        rep["cubin_load_s"] = time.perf_counter() - t0
    return rep


# ---- exactness ---------------------------------------------------------------------------
_COMPARED = ("obs", "reward", "terminated", "truncated")
_COMPARED_INFO = ("lives", "frame_number", "episode_frame_number")


def _first_difference(rc, ro):
    """Name and places of the first output of step results rc (CPU) and ro that differ."""
    pairs = list(zip(_COMPARED, rc[:4], ro[:4]))
    pairs += [(f"info.{k}", rc[4][k], ro[4][k]) for k in _COMPARED_INFO]
    for name, x, y in pairs:
        x, y = _to_numpy(x), _to_numpy(y)
        if x.shape != y.shape or not np.array_equal(x, y):
            return f"{name} at {np.argwhere(x != y)[:3].tolist() if x.shape == y.shape else 'shape'}"
    return None


class LockstepRun(NamedTuple):
    """One comparison: cpu and other step the same actions. start() -> (cpu obs, other obs)
    begins it (default: both reset with the seed); actions(t) -> step t's actions (default:
    seeded uniform random); check_end(cpu's state) -> results to add, when every step was
    compared and the whole states equal."""
    cpu: object
    other: object
    stream: object
    start: Callable | None = None
    actions: Callable | None = None
    check_end: Callable | None = None


def _lockstep_compare(runs, steps, deadline, report, seed=11):
    """Compare every run's (cpu, other) pair of vector environments step by step, all runs
    in one loop from one host thread, so nothing on the host (locks, the GIL) stands
    between the device steps of different runs. Each run's device step is queued on its
    own CUDA stream (asynchronous); the CPU references step while the device works; a run
    is compared as soon as its step is done and its next step is queued at once, so the
    device computes it during the other runs' comparisons. A step's device time is one
    environment's frame loop (a thread per environment): runs whose kernels overlap on
    the device share it. Runs may share a CPU reference (the same game and actions on
    several device designs): it steps once per step for all of them. A run stops at its
    first difference or error; report(results) is called after the first step, every few
    seconds and at the end.
    runs: {key: LockstepRun}; returns {key: dict(equal, steps, ends, ...)}."""
    results, live, rngs, queued = {}, {}, {}, {}
    uncompared = set()  # runs whose queued device step has not been compared yet

    def fail(key, exc):  # an error is never "equal" (a sticky CUDA error fails every run)
        results[key].update(equal=False, error=repr(exc), trace=traceback.format_exc()[-2000:])
        live.pop(key, None)

    def queue_step(key, step):
        run = live[key]
        cpu, other, stream = run[:3]
        a = run.actions(step) if run.actions else rngs[key].integers(0, cpu.single_action_space.n, cpu.num_envs)
        try:
            with stream:
                queued[key] = (a, other.step(a))
            uncompared.add(key)
        except Exception as exc:  # noqa: BLE001
            fail(key, exc)

    for key, run in runs.items():
        results[key] = dict(equal=True, steps=0, ends=0)
        try:
            with run.stream:
                if run.start:
                    obs_c, obs_o = run.start()
                else:
                    obs_c, _ = run.cpu.reset(seed=seed)
                    obs_o, _ = run.other.reset(seed=seed)
                if not np.array_equal(_to_numpy(obs_c), _to_numpy(obs_o)):
                    results[key].update(equal=False, first_mismatch="start obs")
                    continue
            live[key] = run
            rngs[key] = np.random.default_rng(seed)
            queue_step(key, 0)
        except Exception as exc:  # noqa: BLE001
            fail(key, exc)
    t_start = last_report = time.perf_counter()
    t = 0
    while live and t < steps and time.perf_counter() <= deadline:
        on_cpu, by_cpu = {}, {}  # by_cpu: id(cpu) -> (its actions, its step's results)
        for key in list(live):  # while the device steps
            cpu, actions = live[key].cpu, queued[key][0]
            try:
                if id(cpu) not in by_cpu:
                    by_cpu[id(cpu)] = (actions, cpu.step(actions))
                elif not np.array_equal(by_cpu[id(cpu)][0], actions):
                    raise RuntimeError("runs sharing a CPU reference must step the same actions")
                on_cpu[key] = by_cpu[id(cpu)][1]
            except Exception as exc:  # noqa: BLE001
                fail(key, exc)
        for key in list(live):
            stream = live[key].stream
            r = results[key]
            try:
                with stream:  # waits for this run's step; copies on its stream
                    bad = _first_difference(on_cpu[key], queued[key][1])
                uncompared.discard(key)
            except Exception as exc:  # noqa: BLE001
                fail(key, exc)
                continue
            if bad is not None:
                r.update(equal=False, first_mismatch=f"step {t} {bad}")
                del live[key]
                continue
            r["steps"] = t + 1
            r["ends"] += int(np.sum(_to_numpy(on_cpu[key][2]) | _to_numpy(on_cpu[key][3])))
            if t + 1 < steps:
                queue_step(key, t + 1)
        t += 1
        now = time.perf_counter()
        if t == 1 or now - last_report > 5:
            report(results)
            last_report = now
    seconds = time.perf_counter() - t_start
    # Last, every equal run's whole state (RAM, CPU, TIA, RNGs, frames), which the outputs
    # may not show yet; a device step queued but not compared is taken on the CPU too.
    cpu_states = {}  # id(cpu) -> its state (a shared reference steps and saves once)
    for key in list(live):
        cpu, other, stream = live[key][:3]
        try:
            if id(cpu) not in cpu_states:
                if key in uncompared:
                    cpu.step(queued[key][0])
                cpu_states[id(cpu)] = cpu.get_state()
            cpu_state = cpu_states[id(cpu)]
            with stream:
                same = cpu_state == other.get_state()
        except Exception as exc:  # noqa: BLE001
            fail(key, exc)
            continue
        results[key]["state_equal"] = same
        if not same:
            results[key].update(equal=False, first_mismatch=f"whole state at the end (after step "
                                                            f"{results[key]['steps']})")
        elif live[key].check_end and results[key]["steps"] == steps:
            results[key].update(live[key].check_end(cpu_state))
    for r in results.values():
        r["seconds"] = seconds
    report(results)
    return results


class SegmentedTrajectory:
    """A CPU trajectory of num_envs environments over segments x length steps (seeded
    reset, seeded random actions), cut into segments that then run side by side: the
    environments' states at every segment's start are composed into one state of
    num_envs x segments environments (segment-major), so a comparison that runs `length`
    steps from it covers the whole trajectory, and the device's parallelism buys steps
    instead of waiting on one environment's frame loop per step. end_digest: the composed
    state the segments must reach (each segment's end is the next one's start)."""

    def __init__(self, make_env, num_envs, segments, length, seed):
        source = make_env(num_envs)
        source.reset(seed=seed)
        rng = np.random.default_rng(seed)
        self.actions = rng.integers(0, source.single_action_space.n, (segments, length, num_envs))
        states = [source.get_state()]
        for k in range(segments):
            for j in range(length):
                source.step(self.actions[k, j])
            states.append(source.get_state())
        source.close()
        composer = make_env(num_envs * segments)
        self.start_state = composer.compose_state([(st, np.arange(num_envs)) for st in states[:-1]])
        self.end_digest = _state_digest(composer.compose_state([(st, np.arange(num_envs)) for st in states[1:]]))
        composer.close()
        self._started = {}

    def run(self, cpu, other, stream):
        return LockstepRun(cpu, other, stream, start=lambda: (self._start(cpu), other.set_state(self.start_state)[0]),
                           actions=lambda t: self.actions[:, t].reshape(-1), check_end=self.check_end)

    def _start(self, cpu):
        """The CPU reference's first observations; one shared by several runs loads once."""
        if self._started.get(id(cpu)) is None:
            self._started[id(cpu)] = cpu.set_state(self.start_state)[0]
        return self._started[id(cpu)]

    def check_end(self, cpu_state):
        if _state_digest(cpu_state) == self.end_digest:
            return dict(chain_equal=True)
        return dict(chain_equal=False, equal=False,
                    first_mismatch="the CPU's segments did not end where its trajectory went (compose_state)")


def _state_digest(state: bytes) -> str:
    import hashlib
    return hashlib.blake2b(state, digest_size=16).hexdigest()


def phase_exact(args, budget):
    """Every (game, design) run at once, in lockstep (_lockstep_compare): each pair of
    environments on its own CUDA stream, so if the device overlaps their kernels the runs
    together cost about what one does, and each compares more steps. With
    --exact-segments S, each game's --exact-steps long CPU trajectory is compared in S
    segments side by side (SegmentedTrajectory), and the CPU's segments must end where
    its trajectory went."""
    from hybridsim import AtariVectorEnv
    games = args.games or list(EXACT_SETTINGS)
    segments = min(args.exact_segments, 3) if args.dry_run else args.exact_segments
    n = args.exact_envs or (2 if args.dry_run and segments else 4 if args.dry_run or segments else 128)
    total_steps = args.exact_steps or (30 if args.dry_run else 3000)
    steps = -(-total_steps // segments) if segments else total_steps  # each run's lockstep steps
    fs = args.exact_frame_skip
    rep = dict(num_envs=n, max_steps=steps, frame_skip=fs, lockstep=True, results={})
    if segments:
        rep.update(segments=segments, trajectory_steps=segments * steps, envs_per_run=n * segments)
    # every design for the main games; the mapper games in the default one
    runs = [(f"{g}/{d}", g, dict(design=d)) for g in games
            for d in (("split", "fused", "split_shared") if g in EXACT_SETTINGS else ("split",))]
    if args.nvrtc_marker and not args.dry_run:
        # the NVRTC-built kernels too (CuPy adds -ftz=true there), when already compiled
        if all(os.path.exists(f"{args.nvrtc_marker}.{p}") for p in ("base", "split")):
            runs.append(("breakout/split/nvrtc", "breakout", dict(design="split", cubin=False)))
        else:
            rep["nvrtc_variant"] = "skipped: NVRTC build not ready"
    pairs, trajectories, cpus = {}, {}, {}  # a game's designs share its trajectory and CPU reference
    for key, game, options in runs:  # built one after another (module loads, allocations)
        if budget.left() < 10:
            rep["results"][key] = "skipped: out of time"
            continue
        try:
            kw = dict(EXACT_SETTINGS.get(game, MAPPER_SETTINGS), repeat_action_probability=0.25, noop_max=30,
                      frameskip=fs)

            def cpu_env(num_envs, game=game, kw=kw):  # all cores: the CPU steps while the device does
                return AtariVectorEnv(game, num_envs, backend="cpu", num_threads=0, **kw)
            if segments and game not in trajectories:
                t0 = time.perf_counter()
                trajectories[game] = SegmentedTrajectory(cpu_env, n, segments, steps, seed=11)
                rep.setdefault("trajectory_seconds", {})[game] = round(time.perf_counter() - t0, 2)
            stream = _new_stream(args)
            if game not in cpus:
                cpus[game] = cpu_env(n * segments if segments else n)
            cpu = cpus[game]
            with stream:
                o = dict(_opts(args, output="numpy" if args.dry_run else "cupy"), **options)
                other = AtariVectorEnv(game, cpu.num_envs, backend="gpu", gpu_options=o, **kw)
            pairs[key] = trajectories[game].run(cpu, other, stream) if segments else LockstepRun(cpu, other, stream)
        except Exception as exc:  # noqa: BLE001
            rep["results"][key] = dict(error=repr(exc), trace=traceback.format_exc()[-2000:])

    def report(results):
        rep["results"].update(results)
        _save_partial(rep)

    _lockstep_compare(pairs, steps, time.perf_counter() + budget.left() - 5, report)
    rep["results"] = {key: rep["results"][key] for key, _, _ in runs if key in rep["results"]}
    # a comparison its time cut short compared fewer steps: equal needs one step at
    # least, and all_steps says whether every run reached max_steps
    done = [v for v in rep["results"].values() if isinstance(v, dict)]
    all_ran = bool(done) and len(done) == len(runs)  # none skipped for time
    rep["all_equal"] = all_ran and all(v.get("equal") and v.get("steps", 0) > 0 and "error" not in v
                                       for v in done)
    rep["all_steps"] = all_ran and all(v.get("steps") == steps for v in done)
    rep["min_steps"] = min((v.get("steps", 0) for v in done), default=0)
    return rep


def _side_by_side(target, arg_tuples):
    """target(*args) for every args at once, one thread each; returns when all have."""
    import threading
    threads = [threading.Thread(target=target, args=a, daemon=True) for a in arg_tuples]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _new_stream(args):
    """A CUDA stream of its own (CuPy's current one inside `with`), or no-op when emulated."""
    if args.dry_run:
        import contextlib
        return contextlib.nullcontext()
    import cupy
    return cupy.cuda.Stream(non_blocking=True)


def phase_streams(args, budget):
    """Do environments stepped side by side on their own streams overlap on the device?
    Step time of k GPU-only vector environments (k = 1, 2, 4, 8; one game, frame skip 1),
    each on its own stream, stepped together from k threads (step_ms) and from one thread
    that queues all k steps before waiting for them (one_thread_step_ms, what the exact
    phase does): flat in k if the kernels run at once, k times one if they take turns.
    Slow from threads only: the host serialises them. (Run 2 of 2026-12-04's exact phase,
    one thread per run, took 14 times one run's step.)"""
    import threading
    from hybridsim import AtariVectorEnv
    game = (args.games or ["pong"])[0]
    n = args.exact_envs or (4 if args.dry_run else 128)
    steps = 3 if args.dry_run else 6  # twice per k (threads, one thread): 15 envs x 12 steps if they take turns
    rep = dict(game=game, num_envs=n, frame_skip=1, steps=steps, results=[])
    for k in (1, 2, 4, 8):
        if budget.left() < 5:
            rep["results"].append(dict(runs=k, skipped="out of time"))
            continue
        envs = []
        for _ in range(k):
            stream = _new_stream(args)
            with stream:
                env = AtariVectorEnv(game, n, backend="gpu", frameskip=1,
                                     gpu_options=_opts(args, output="numpy" if args.dry_run else "cupy"))
                env.reset(seed=0)
            envs.append((env, stream))
        start = threading.Barrier(k)
        seconds = [0.0] * k

        def run(i, env, stream):
            acts = np.random.default_rng(i).integers(0, env.single_action_space.n, (steps, n))
            with stream:
                env.step(acts[0])
                _sync(args)
                start.wait()
                t0 = time.perf_counter()
                for a in acts:
                    env.step(a)
                    _sync(args)
                seconds[i] = time.perf_counter() - t0

        _side_by_side(run, [(i, *e) for i, e in enumerate(envs)])
        row = dict(runs=k, step_ms=1000 * max(seconds) / steps)
        acts = np.random.default_rng(k).integers(0, envs[0][0].single_action_space.n, (steps, n))
        t0 = time.perf_counter()
        for a in acts:
            for env, stream in envs:
                with stream:
                    env.step(a)
            for env, stream in envs:
                with stream:
                    _sync(args)
        row["one_thread_step_ms"] = 1000 * (time.perf_counter() - t0) / steps
        rep["results"].append(row)
        del envs
        _free_pool(args)
        _save_partial(rep)
    one = rep["results"][0].get("step_ms") if rep["results"] else None
    if one:
        rep["slowdown"] = {str(r["runs"]): r["step_ms"] / one for r in rep["results"] if "step_ms" in r}
        one = rep["results"][0]["one_thread_step_ms"]
        rep["slowdown_one_thread"] = {str(r["runs"]): r["one_thread_step_ms"] / one
                                      for r in rep["results"] if "one_thread_step_ms" in r}
    return rep


# ---- throughput ---------------------------------------------------------------------------
def bytes_per_env(obs_bytes=4 * 84 * 84):
    """Device bytes one environment takes (state, frames, raw frames, ring, replay, outputs)."""
    from hybridsim import _vector
    return (_vector.ALE_ENV_BYTES + _vector.VEC_STATE_BYTES + 2 * _vector.FRAME_BYTES + 2 * 210 * 160
            + obs_bytes * 3 + _vector.FRAME_REPLAY_BYTES + 256)


def _time_steps(env, args, budget, min_time, max_steps, warmup=1):
    xp = _xp(args)
    n = env.num_envs
    na = env.single_action_space.n
    rng = np.random.default_rng(0)
    acts = [xp.asarray(rng.integers(0, na, n)) for _ in range(4)]
    t0 = time.perf_counter()
    env.reset(seed=0)
    _sync(args)
    reset_s = time.perf_counter() - t0
    for k in range(warmup):
        env.step(acts[k % 4])
    _sync(args)
    steps = 0
    step_s = []  # each timed step's seconds: does a step slow down as the episodes diverge?
    t0 = last = time.perf_counter()
    while True:
        env.step(acts[steps % 4])
        steps += 1
        _sync(args)
        now = time.perf_counter()
        step_s.append(now - last)
        last = now
        el = now - t0
        if steps >= max_steps or el >= min_time or el + el / steps > budget.left():
            break
    el = time.perf_counter() - t0
    return dict(num_envs=n, steps=steps, seconds=el, step_ms=1000 * el / steps,
                frames_per_s=n * steps * FRAME_SKIP / el, env_steps_per_s=n * steps / el, reset_s=reset_s,
                step_s=step_s)


def phase_throughput(args, budget):
    from hybridsim import AtariVectorEnv
    games = args.games or list(GAMES)
    sizes = args.sizes or ([2, 4] if args.dry_run else [1024, 4096, 16384, 65536, 262144])
    design = args.design
    rep = dict(design=design, frame_skip=FRAME_SKIP, results={})
    per_game = budget.left() / len(games)
    for game in games:
        gb = Budget(min(per_game, budget.left()))
        rows = rep["results"][game] = []
        last, prev_n = None, 1
        for n in sizes:
            if not args.dry_run:
                import cupy
                free = cupy.cuda.runtime.memGetInfo()[0]
                need = n * bytes_per_env() * 1.3
                if need > free:
                    rows.append(dict(num_envs=n, stopped=f"memory: need ~{need / 2**30:.1f} GiB, free "
                                                         f"{free / 2**30:.1f} GiB"))
                    break
            # expected: the last size's reset, warm-up step and one timed step, scaled (a
            # large batch is throughput-bound: time grows with n). 2026-12-04 guessed 14 steps
            # and skipped 262,144 for pong and breakout; ms_pacman ran it: 1.8 s a step, 3.6 s
            # to reset (0.7-0.9 s at 65,536).
            if last:
                need = (last["reset_s"] + 2 * last["seconds"] / last["steps"]) * n / prev_n
                if need > gb.left():
                    rows.append(dict(num_envs=n, stopped=f"time: ~{need:.0f} s needed, {gb.left():.0f} s left"))
                    break
            try:
                env = AtariVectorEnv(game, n, backend="gpu",
                                     gpu_options=_opts(args, design=design,
                                                       output="numpy" if args.dry_run else "cupy"))
                r = _time_steps(env, args, gb, args.min_time, args.max_steps)
                rows.append(r)
                _save_partial(rep)
                last, prev_n = r, n
                del env
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(num_envs=n, error=repr(exc)))
                _free_pool(args)
                break
            _free_pool(args)
    return rep


def phase_designs(args, budget):
    from hybridsim import AtariVectorEnv
    game = (args.games or ["breakout"])[0]
    n = args.design_envs or (4 if args.dry_run else 16384)
    env = AtariVectorEnv(game, n, backend="gpu", gpu_options=_opts(args, output="numpy" if args.dry_run else "cupy"))
    rep = dict(game=game, num_envs=n, results=[])
    variants = [("split", 128, 256), ("fused", 128, 256), ("split_shared", 128, 256), ("split", 64, 256),
                ("split", 256, 256), ("split_shared", 64, 256), ("split", 32, 256), ("fused", 64, 256),
                ("split", 128, 128), ("split", 128, 512)]
    share = budget.left() / (len(variants) + len(args.register_cubins or []))
    for design, block, pblock in variants:
        if budget.left() < 3:
            break
        e = env._engine
        e.design, e.block, e.pixel_block = design, block, pblock
        try:
            r = _time_steps(env, args, Budget(min(share, budget.left())), args.min_time / 2, args.max_steps)
            r.update(design=design, block=block, pixel_block=pblock)
        except Exception as exc:  # noqa: BLE001
            r = dict(design=design, block=block, pixel_block=pblock, error=repr(exc))
        rep["results"].append(r)
        _save_partial(rep)
    del env, e
    _free_pool(args)
    # The emulator kernels use 248-254 registers a thread, so an SM holds 256 threads;
    # fewer registers (nvcc -maxrregcount, prebuilt: scripts/prebuild_device.sh) let more
    # threads share the SM's latency, at the price of spills. Same game, size and steps.
    for spec in args.register_cubins or []:
        label, _, path = spec.partition("=")
        if budget.left() < 3:
            break
        if not label or not path:  # an empty cubin would mean NVRTC (minutes), under this label
            rep["results"].append(dict(cubin=spec, error="--register-cubins wants LABEL=PATH"))
            continue
        e2 = None
        try:
            e2 = AtariVectorEnv(game, n, backend="gpu",
                                gpu_options=_opts(args, cubin=path, output="numpy" if args.dry_run else "cupy"))
            r = _time_steps(e2, args, Budget(min(share, budget.left())), args.min_time / 2, args.max_steps)
            r.update(design="split", block=128, pixel_block=256, cubin=label)
        except Exception as exc:  # noqa: BLE001
            r = dict(design="split", cubin=label, error=repr(exc))
        del e2
        rep["results"].append(r)
        _free_pool(args)
        _save_partial(rep)
    return rep


# What each backend is expected to take of a size's time in the hybrid phase (the CPU-only
# run builds and resets its environments on the host: at 131,072, 10 s and 12 s on 16
# cores, 2026-12-04; the hybrid calibrates): one starts only with half its share left.
_HYBRID_SHARE = dict(cpu=0.45, gpu=0.2, hybrid=0.35)


def phase_hybrid(args, budget):
    """CPU-only (all cores), GPU-only and hybrid at each size, each timed over the same
    steps after its reset (warm-up steps, then --hybrid-steps): the three are compared at
    the same point of their episodes. (2026-12-04 timed one step each, and the hybrid's
    calibration, averaged over three, found the GPU 1.34-1.38 times slower than the
    GPU-only run's one step said.) The warm-up covers the hybrid's re-split from its own
    first steps (HybridEngine rebalance_steps), so the timed steps run on the final split."""
    from hybridsim import AtariVectorEnv
    from hybridsim.hybrid import REBALANCE_STEPS
    game = (args.games or ["pong"])[0]
    sizes = args.sizes or ([6] if args.dry_run else [131072])
    threads = args.cpu_threads or (1 if args.dry_run else (os.cpu_count() or 1))
    steps = args.hybrid_steps
    rep = dict(game=game, cpu_threads=threads, timed_steps=steps, results=[], hybrid_vs_sum={})
    for i, n in enumerate(sizes):
        # a size's share of the time left grows with its environments (its steps take longer)
        size_share = budget.left() * n / sum(sizes[i:])
        fps = {}
        for backend in ("cpu", "gpu", "hybrid"):
            if budget.left() < 5:
                rep["results"].append(dict(num_envs=n, backend=backend, skipped="out of time"))
                continue
            if budget.left() < size_share * _HYBRID_SHARE[backend] * 0.5:
                rep["results"].append(dict(num_envs=n, backend=backend, skipped="out of time"))
                continue
            try:
                kw = {}
                if backend == "cpu":
                    kw = dict(num_threads=threads)
                else:
                    o = _opts(args, output="numpy" if args.dry_run else "cupy")
                    if backend == "hybrid":
                        o.update(cpu_threads=threads, calibrate_steps=steps, rebalance_steps=REBALANCE_STEPS)
                    kw = dict(gpu_options=o)
                t0 = time.perf_counter()
                env = AtariVectorEnv(game, n, backend=backend, **kw)
                build_s = time.perf_counter() - t0
                bargs = argparse.Namespace(**vars(args))
                bargs.dry_run = args.dry_run or backend == "cpu"
                # every backend times the same steps: only the phase's end cuts them short
                r = _time_steps(env, bargs, budget, float("inf"), steps, warmup=REBALANCE_STEPS + 1)
                r.update(backend=backend, build_s=build_s)
                if r["steps"] == steps:
                    fps[backend] = r["frames_per_s"]
                if backend == "hybrid":
                    r["split"] = env._engine.split
                    r["repr"] = repr(env)
                del env
            except Exception as exc:  # noqa: BLE001
                r = dict(num_envs=n, backend=backend, error=repr(exc), trace=traceback.format_exc()[-1500:])
            rep["results"].append(r)
            _free_pool(args)
            _save_partial(rep)
        if len(fps) == 3:  # the bar: hybrid >= 0.9 x (CPU-only + GPU-only), same steps
            rep["hybrid_vs_sum"][str(n)] = fps["hybrid"] / (fps["cpu"] + fps["gpu"])
    return rep


PHASES = dict(info=phase_info, compile=phase_compile, exact=phase_exact, streams=phase_streams,
              throughput=phase_throughput, designs=phase_designs, hybrid=phase_hybrid)


def merge(out, files):
    """One report: report["phases"][NAME] = NAME.json's result, with the shell's record of
    the run (status_NAME.json: rc, seconds, limit, timed_out) under "run"."""
    report = dict(created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), phases={})
    for f in sorted(files):
        base = os.path.splitext(os.path.basename(f))[0]
        is_status = base.startswith("status_")
        name = base[len("status_"):] if is_status else base
        entry = report["phases"].setdefault(name, {})
        try:
            with open(f) as fh:
                data = json.load(fh)
        except Exception as exc:  # noqa: BLE001
            data = dict(status="no result", error=repr(exc))
        if is_status:
            entry["run"] = data
        else:
            entry.update(data)
    for name, entry in report["phases"].items():
        if "status" not in entry:
            run = entry.get("run", {})
            entry["status"] = "ok" if run.get("rc") == 0 else f"rc={run.get('rc')}" if "rc" in run \
                else run.get("status", "no result")
    report["summary"] = {name: e.get("status") for name, e in report["phases"].items()}
    exact = report["phases"].get("exact", {})
    if "all_equal" in exact:
        report["summary"]["gpu_equals_cpu"] = exact["all_equal"]
        report["summary"]["gpu_equals_cpu_every_step_asked"] = exact.get("all_steps", False)
        report["summary"]["gpu_equals_cpu_min_steps"] = exact.get("min_steps")
        if exact.get("segments"):  # each game's trajectory, compared in segments side by side
            report["summary"]["gpu_equals_cpu_trajectory_steps"] = exact["segments"] * exact.get("min_steps", 0)
    if report["phases"].get("hybrid", {}).get("hybrid_vs_sum"):
        report["summary"]["hybrid_vs_cpu_plus_gpu"] = report["phases"]["hybrid"]["hybrid_vs_sum"]
    with open(out, "w") as fh:
        json.dump(report, fh, indent=1, default=str)
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=sorted(PHASES) + ["merge"])
    p.add_argument("files", nargs="*", help="merge: phase JSON files")
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=60.0, help="seconds this phase may take")
    p.add_argument("--dry-run", action="store_true", help="host-emulated device, tiny sizes (no GPU)")
    p.add_argument("--cubin", default=os.environ.get("HYBRIDSIM_GPU_CUBIN"))
    p.add_argument("--games", nargs="*")
    p.add_argument("--sizes", nargs="*", type=int)
    p.add_argument("--design", default="split")
    p.add_argument("--exact-envs", type=int)
    p.add_argument("--exact-steps", type=int, help="exact: steps of each comparison (with "
                                                   "--exact-segments: of each game's trajectory)")
    p.add_argument("--exact-segments", type=int, default=0,
                   help="exact: compare each trajectory in this many segments side by side (0: one piece)")
    p.add_argument("--exact-frame-skip", type=int, default=4)
    p.add_argument("--design-envs", type=int)
    p.add_argument("--register-cubins", nargs="*", metavar="LABEL=PATH",
                   help="designs: also time the split design from these cubins (register caps)")
    p.add_argument("--cpu-threads", type=int)
    p.add_argument("--nvrtc-marker", help="compile: touch MARKER.PART when NVRTC's build is cached; "
                                          "exact: check the NVRTC build then")
    p.add_argument("--part", help="compile: the module part (base, fused, split, materialize)")
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--hybrid-steps", type=int, default=4, help="hybrid: timed steps of each backend")
    args = p.parse_intermixed_args(argv)
    if args.phase == "merge":
        merge(args.out, args.files)
        return 0
    budget = Budget(args.budget)
    t0 = time.perf_counter()
    global _PARTIAL_OUT
    _PARTIAL_OUT = args.out
    try:
        rep = dict(status="ok", **PHASES[args.phase](args, budget))
    except Exception as exc:  # noqa: BLE001
        rep = dict(status="error", error=repr(exc), trace=traceback.format_exc()[-3000:])
    rep["phase_seconds"] = time.perf_counter() - t0
    rep["dry_run"] = bool(args.dry_run)
    with open(args.out, "w") as fh:
        json.dump(rep, fh, indent=1, default=str)
    print(json.dumps({k: v for k, v in rep.items() if k != "trace"}, default=str)[:3000])
    return 0 if rep["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
