"""backend="hybrid": one batch split between the CPU engine and the GPU engine.

Environments 0 .. cpu_envs-1 run on the CPU engine (pyx/_vector.pyx, OpenMP), the rest
on the GPU engine (hybridsim/gpu.py). A step launches the GPU part first (asynchronous
on its stream), runs the CPU part meanwhile (GIL released) into page-locked host
buffers, copies those rows into the same device batch (on a side stream, below), and
returns when both are done: the caller sees one device batch, row k = environment k,
exactly what backend="cpu" and backend="gpu" return for the same seeds.

The split is chosen so both parts take the same time, with the CPU's step time linear
in its environments, n_c / cpu_rate, and the GPU's a fixed latency plus a linear part,
gpu_latency + n_g / gpu_rate: one thread runs one environment's whole frame loop, so a
step takes at least that loop's time however few environments the GPU has (on an H200,
pong's step took 0.17 s at 1,024 environments and 0.29 s at 16,384; BENCHMARKS.md). The
three numbers are measured at construction by short runs of throwaway engines
(calibrate: the GPU at N and N/8 environments), unless gpu_options={"cpu_envs": k}
fixes the split. After its first few full steps the engine re-splits once from its own
part times (rebalanced_split), which include what the parts cost each other on the
host. HybridEngine.split reports the choices.

The CPU part runs in chunks; each chunk's rows go to the device on a side stream while
the next chunk steps and the GPU part's kernels run, so only the last chunk's copy adds
to the step.
"""
from __future__ import annotations

import time

import numpy as np


def balance_split(num_envs: int, cpu_rate: float, gpu_rate: float, *, gpu_latency: float = 0.0,
                  min_cpu: int = 0, max_cpu: int | None = None) -> int:
    """Environments for the CPU so that both parts finish together:
    n_c / cpu_rate == gpu_latency + (N - n_c) / gpu_rate, i.e.
    n_c = cpu_rate * (gpu_latency * gpu_rate + N) / (cpu_rate + gpu_rate), rounded and
    clamped to [min_cpu, max_cpu] (all N to the CPU when it steps them all within the
    GPU's latency). Rates are environment steps per second (a rate of 0 or less gives that
    side nothing), gpu_latency seconds (>= 0)."""
    n = int(num_envs)
    if n < 0:
        raise ValueError(f"num_envs must be >= 0, got {num_envs}")
    hi = n if max_cpu is None else min(n, int(max_cpu))
    lo = max(0, min(int(min_cpu), hi))
    c, g, lat = float(cpu_rate), float(gpu_rate), float(gpu_latency)
    if not (np.isfinite(c) and np.isfinite(g) and np.isfinite(lat)):
        raise ValueError(f"rates and latency must be finite, got cpu {cpu_rate} gpu {gpu_rate} "
                         f"latency {gpu_latency}")
    if lat < 0:
        raise ValueError(f"gpu_latency must be >= 0 seconds, got {gpu_latency}")
    if c <= 0 and g <= 0:
        raise ValueError("at least one rate must be > 0")
    if c <= 0:
        cpu_envs = 0.0
    elif g <= 0:
        cpu_envs = float(n)
    else:
        cpu_envs = c * (lat * g + n) / (c + g)
    return max(lo, min(hi, int(round(cpu_envs))))


def step_time_balance(cpu_envs: int, num_envs: int, cpu_rate: float, gpu_rate: float, gpu_latency: float = 0.0):
    """(cpu seconds, gpu seconds) of one step for a split, under balance_split's model."""
    t_cpu = cpu_envs / cpu_rate if cpu_envs else 0.0
    t_gpu = gpu_latency + (num_envs - cpu_envs) / gpu_rate if num_envs - cpu_envs else 0.0
    return t_cpu, t_gpu


def rebalanced_split(num_envs: int, cpu_envs: int, cpu_step_s: float, gpu_step_s: float,
                     gpu_rate: float, gpu_latency: float, min_change: float = 0.01) -> int:
    """The split from the hybrid's own steps (cpu_step_s: its CPU part's seconds for
    cpu_envs environments; gpu_step_s: its GPU part's kernel seconds for the rest): the CPU
    rate is measured, and the calibration's GPU line (latency + n / rate) is scaled to pass
    through the measured GPU step. The calibration's throwaway engines step alone; here the
    parts share the host (threads, memory bandwidth, the copies), which the measured times
    include. Returns cpu_envs unchanged when the change would be under min_change x N or
    a part had nothing to time."""
    n, c = int(num_envs), int(cpu_envs)
    g = n - c
    if c <= 0 or g <= 0 or not (cpu_step_s > 0 and gpu_step_s > 0 and gpu_rate > 0):
        return c
    scale = gpu_step_s / (gpu_latency + g / gpu_rate)
    new = balance_split(n, c / cpu_step_s, gpu_rate / scale, gpu_latency=gpu_latency * scale)
    return new if abs(new - c) >= max(1.0, min_change * n) else c


def gpu_step_model(n_small: int, t_small: float, n_big: int, t_big: float):
    """(gpu_rate, gpu_latency) of the line t = latency + n / rate through two measured
    steps. A slope at or below zero (the step time is all latency at these sizes, or noise)
    is taken as 1/1000 of the big step per its environments, so the rate stays finite."""
    slope = (t_big - t_small) / (n_big - n_small) if n_big > n_small else 0.0
    slope = max(slope, 1e-3 * t_big / max(n_big, 1))
    latency = max(0.0, t_big - slope * n_big)
    return 1.0 / slope, latency


def _step_seconds(engine, n, num_actions, steps, sync=lambda: None, make_out=None):
    """Seconds of one step of `engine` over its environments 0..n-1 (after a reset and a
    warm-up step)."""
    ids = np.arange(n, dtype=np.int32)
    engine.reseed(ids, np.arange(n, dtype=np.int64))
    out = make_out(n)
    rng = np.random.default_rng(0)
    ones = np.ones(n, np.float32)

    def run(force, acts):
        engine.run(ids, force, acts, ones, out["obs"], None, out["reward"], out["terminated"], out["truncated"],
                   out["lives"], out["frame"], out["episode_frame"], None)

    run(np.ones(n, np.uint8), np.zeros(n, np.int32))
    no = np.zeros(n, np.uint8)
    run(no, rng.integers(0, num_actions, n).astype(np.int32))  # warm-up
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        run(no, rng.integers(0, num_actions, n).astype(np.int32))
    sync()
    return max(time.perf_counter() - t0, 1e-9) / steps


def _outputs_factory(xp, obs_bytes):
    def make(n):
        return dict(obs=xp.zeros((n, obs_bytes), np.uint8), reward=xp.zeros(n, np.int32),
                    terminated=xp.zeros(n, np.uint8), truncated=xp.zeros(n, np.uint8),
                    lives=xp.zeros(n, np.int32), frame=xp.zeros(n, np.int32),
                    episode_frame=xp.zeros(n, np.int32))
    return make


def calibrate(engine_args, engine_kwargs, dev, gpu_kwargs, cpu_threads, steps=8, cpu_sample=None,
              gpu_sample=None):
    """dict(cpu_rate, gpu_rate, gpu_latency, and the GPU steps measured: gpu_step_s at
    gpu_step_envs, gpu_small_step_s at gpu_small_step_envs), in environment steps per second and
    seconds, from throwaway engines: the CPU on a sample, the GPU at gpu_sample (default
    N) and at an eighth of it, for balance_split's line."""
    from hybridsim import _vector
    from hybridsim.gpu import GpuEngine
    rom, tstate, tframes, tshown, n = engine_args
    kw = dict(engine_kwargs, num_threads=cpu_threads)
    num_actions = len(engine_kwargs["action_set"])
    c = int(cpu_sample or min(n, max(16 * cpu_threads, 32)))
    cpu = _vector.VectorEngine(rom, tstate, tframes, tshown, c, **kw)
    cpu_rate = c / _step_seconds(cpu, c, num_actions, steps, make_out=_outputs_factory(np, cpu.obs_bytes))
    del cpu
    g = int(gpu_sample or n)
    gpu = GpuEngine(rom, tstate, tframes, tshown, g, **engine_kwargs, device=dev, **gpu_kwargs)
    make = _outputs_factory(dev.xp, gpu.obs_bytes)
    t_big = _step_seconds(gpu, g, num_actions, steps, sync=gpu.synchronize, make_out=make)
    g_small = max(1, g // 8)
    t_small = _step_seconds(gpu, g_small, num_actions, steps, sync=gpu.synchronize, make_out=make)
    del gpu
    gpu_rate, gpu_latency = gpu_step_model(g_small, t_small, g, t_big)
    return dict(cpu_rate=cpu_rate, gpu_rate=gpu_rate, gpu_latency=gpu_latency, gpu_step_envs=g, gpu_step_s=t_big,
                gpu_small_step_envs=g_small, gpu_small_step_s=t_small)


def _int_option(name: str, value, lo: int, hi: int | None = None) -> int:
    """A hybrid gpu_options value: an int (not a bool, float or str) in lo..hi."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo \
            or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"gpu_options {name} must be an int {'in ' if hi is not None else ''}{span}, got {value!r}")
    return int(value)


# Full steps the hybrid times before its one re-split (a measured split; gpu_options
# rebalance_steps): the median of three shrugs off one step slowed by a page fault or a copy.
REBALANCE_STEPS = 3

# The CPU part's chunks (HybridEngine.run): more overlap the copies better, but each is an
# OpenMP loop that waits for its slowest thread.
MAX_COPY_CHUNKS = 4


class HybridEngine:
    """The engine interface of pyx/_vector.pyx's VectorEngine over a CPU part and a GPU part."""

    def __init__(self, engine_args, engine_kwargs, *, device, gpu_kwargs, cpu_envs=None, cpu_threads=None,
                 calibrate_steps=8, copy_chunks=None, rebalance_steps=None):
        from hybridsim.vector import resolve_num_threads
        rom, tstate, tframes, tshown, n = engine_args
        self.num_envs = int(n)
        self.dev = device
        # checked before the calibration runs: ints only (2.5 environments, "3" steps and
        # True were taken as 2, 3 and 1), each in its range
        measured = cpu_envs is None
        cpu_threads = 0 if cpu_threads is None else _int_option("cpu_threads", cpu_threads, 0)
        calibrate_steps = _int_option("calibrate_steps", calibrate_steps, 1)
        if not measured:
            cpu_envs = _int_option("cpu_envs", cpu_envs, 0, self.num_envs)
        if copy_chunks is not None:
            copy_chunks = _int_option("copy_chunks", copy_chunks, 1)
        # Re-split once from the hybrid's own first full steps (rebalanced_split); only a
        # measured split (a given cpu_envs is the caller's choice).
        rebalance_steps = (REBALANCE_STEPS if measured else 0) if rebalance_steps is None else \
            _int_option("rebalance_steps", rebalance_steps, 0)
        if rebalance_steps and not measured:
            raise ValueError("rebalance_steps needs a measured split (leave cpu_envs out)")
        threads = resolve_num_threads(cpu_threads, self.num_envs)
        self.num_threads = threads
        measurement = dict(cpu_rate=None, gpu_rate=None, gpu_latency=None)
        if measured:
            measurement = calibrate(engine_args, engine_kwargs, device, gpu_kwargs, threads,
                                    steps=calibrate_steps)
            cpu_envs = balance_split(self.num_envs, measurement["cpu_rate"], measurement["gpu_rate"],
                                     gpu_latency=measurement["gpu_latency"])
        self._rebalance_left = rebalance_steps
        self._split_times = []
        self._copy_chunks_option = copy_chunks
        self._build = (engine_args, engine_kwargs, gpu_kwargs)
        self.split = dict(cpu_envs=cpu_envs, gpu_envs=self.num_envs - cpu_envs, cpu_threads=threads,
                          measured=measured, **measurement)
        self._adopt_parts(cpu_envs, *self._make_parts(cpu_envs))
        part = self.cpu if self.cpu is not None else self.gpu
        self.obs_bytes = part.obs_bytes
        self.template_state = part.template_state

    def _make_parts(self, cpu_envs):
        """(CPU engine for environments 0..cpu_envs-1, GPU engine for the rest), None for a
        part with no environments."""
        from hybridsim import _vector
        from hybridsim.gpu import GpuEngine
        (rom, tstate, tframes, tshown, _), engine_kwargs, gpu_kwargs = self._build
        gpu_envs = self.num_envs - cpu_envs
        kw = dict(engine_kwargs, num_threads=self.num_threads)
        cpu = _vector.VectorEngine(rom, tstate, tframes, tshown, cpu_envs, **kw) if cpu_envs else None
        gpu = (GpuEngine(rom, tstate, tframes, tshown, gpu_envs, **engine_kwargs, device=self.dev, **gpu_kwargs)
               if gpu_envs else None)
        return cpu, gpu

    def _adopt_parts(self, cpu_envs, cpu, gpu):
        self.cpu, self.gpu = cpu, gpu
        self.cpu_envs = int(cpu_envs)
        self.gpu_envs = self.num_envs - self.cpu_envs
        chunks = self._copy_chunks_option
        if chunks is None:  # chunks of 64 environments per thread at least
            chunks = min(MAX_COPY_CHUNKS, max(1, self.cpu_envs // (64 * self.num_threads)))
        self.copy_chunks = int(chunks)
        self.split.update(cpu_envs=self.cpu_envs, gpu_envs=self.gpu_envs)
        self._pinned = {}  # sized for the old CPU part

    def _note_step_times(self, cpu_step_s, gpu_step_s):
        """A full step's part times; after rebalance_steps of them, re-split once if the
        measured times call for it (rebalanced_split), moving the environments whose side
        changes with their whole state (_move_split)."""
        self._split_times.append((cpu_step_s, gpu_step_s))
        self._rebalance_left -= 1
        if self._rebalance_left > 0:
            return
        t_cpu, t_gpu = (float(np.median(x)) for x in zip(*self._split_times))
        before = self.cpu_envs
        after = rebalanced_split(self.num_envs, before, t_cpu, t_gpu, self.split["gpu_rate"],
                                 self.split["gpu_latency"])
        record = dict(steps=len(self._split_times), cpu_step_s=t_cpu, gpu_step_s=t_gpu, cpu_envs_before=before,
                      cpu_envs_after=after)
        if after != before:
            t0 = time.perf_counter()
            try:
                self._move_split(after)
            except Exception as exc:  # noqa: BLE001  (memory for the new parts, most likely)
                record["error"] = repr(exc)  # the old parts were kept: the split stays `before`
            record["seconds"] = time.perf_counter() - t0
        self.split["rebalance"] = record

    def _move_split(self, cpu_envs):
        """Environments 0..cpu_envs-1 to the CPU part, the rest to the GPU part. The new
        parts are made beside the old ones (if that fails, nothing has changed); rows that
        stay on their side are copied there (host to host, device to device), only those
        that change sides cross the bus, then the old parts go."""
        from hybridsim.vector import SNAPSHOT_ARRAYS
        self.materialize()  # frames left undrawn, drawn where their replay state is
        shown = self.shown()
        old_cpu, old_gpu, old_c = self.cpu, self.gpu, self.cpu_envs
        new_cpu, new_gpu = self._make_parts(cpu_envs)  # fresh parts: nothing left undrawn
        dev, c = self.dev, cpu_envs
        with dev.scope():
            for attr in SNAPSHOT_ARRAYS.values():
                if new_cpu is not None:  # environments 0..c-1
                    rows = getattr(new_cpu, attr)
                    kept = min(old_c, c)
                    if kept:
                        rows[:kept] = getattr(old_cpu, attr)[:kept]
                    if c > old_c:  # the old GPU part's first c - old_c come down
                        rows[old_c:] = dev.to_host(getattr(old_gpu, attr)[:c - old_c]).reshape(rows[old_c:].shape)
                if new_gpu is not None:  # environments c..N-1
                    rows = getattr(new_gpu, attr)
                    if c < old_c:  # the old CPU part's last old_c - c go up (the GPU
                        # engine may shape a row differently: load_arrays reshapes too)
                        rows[:old_c - c] = dev.asarray(getattr(old_cpu, attr)[c:old_c]).reshape(rows[:old_c - c].shape)
                    if old_gpu is not None:
                        rows[max(0, old_c - c):] = getattr(old_gpu, attr)[max(0, c - old_c):]
            dev.synchronize()
        self._adopt_parts(c, new_cpu, new_gpu)
        self.set_shown(shown)
    # ---- routing ----------------------------------------------------------------------
    def _split_ids(self, env_ids):
        ids = np.ascontiguousarray(env_ids, dtype=np.int32)
        on_cpu = ids < self.cpu_envs
        return ids, np.flatnonzero(on_cpu), np.flatnonzero(~on_cpu)

    def reseed(self, env_ids, seeds):
        ids, rc, rg = self._split_ids(env_ids)
        seeds = np.asarray(seeds, dtype=np.int64)
        if len(rc):
            self.cpu.reseed(ids[rc], seeds[rc])
        if len(rg):
            self.gpu.reseed(ids[rg] - self.cpu_envs, seeds[rg])

    def set_loaded(self, env, state, frames, shown, seed):
        if env < self.cpu_envs:
            self.cpu.set_loaded(env, state, frames, shown, seed)
        else:
            self.gpu.set_loaded(env - self.cpu_envs, state, frames, shown, seed)

    def check_actions(self, actions, n, num_actions):
        if self.gpu is not None:
            return self.gpu.check_actions(actions, n, num_actions)
        from hybridsim.vector import check_action_indices
        host = actions if isinstance(actions, np.ndarray) else self.dev.to_host(actions)
        return check_action_indices(host, n, num_actions)

    def _host_buffers(self, m, with_final):
        """Pinned rows for the CPU part's results: one set for all its environments, of
        which a step uses the first m (a cache per m would pin new memory for every mask)."""
        b = self._pinned.get(with_final)
        if b is None:
            p, rows = self.dev.pinned_empty, self.cpu_envs
            b = dict(obs=p((rows, self.obs_bytes), np.uint8), reward=p(rows, np.int32),
                     terminated=p(rows, np.uint8), truncated=p(rows, np.uint8), lives=p(rows, np.int32),
                     frame_number=p(rows, np.int32), episode_frame_number=p(rows, np.int32))
            if with_final:
                b["final_obs"] = p((rows, self.obs_bytes), np.uint8)
                b["has_final"] = p(rows, np.uint8)
            self._pinned[with_final] = b
        return {k: v[:m] for k, v in b.items()}

    @staticmethod
    def _rows2d(a, n):
        return None if a is None else a.reshape(n, -1) if a.ndim > 1 else a

    def run(self, env_ids, force_reset, actions, strengths, obs, final_obs, reward, terminated, truncated,
            lives, frame_number, episode_frame_number, has_final):
        ids, rc, rg = self._split_ids(env_ids)
        n = len(ids)
        if n == 0:
            return
        xp = self.dev.xp
        outs = dict(obs=obs.reshape(obs.shape[0], -1), final_obs=None if final_obs is None else
                    final_obs.reshape(final_obs.shape[0], -1), reward=reward, terminated=terminated,
                    truncated=truncated, lives=lives, frame_number=frame_number,
                    episode_frame_number=episode_frame_number, has_final=has_final)
        m = len(rc)
        prefix = m == 0 or (rc[0] == 0 and rc[-1] == m - 1)  # CPU rows first, GPU rows after
        if m:
            # The CPU part's inputs come to the host before the GPU launch: copying a device
            # array out waits for the stream, which after the launch would wait for the
            # GPU part's kernels and leave no overlap.
            cpu_inputs = (self._host(force_reset, rc, np.uint8), self._host(actions, rc, np.int32),
                          self._host(strengths, rc, np.float32))
            if prefix:
                self.dev.begin_side_copies()  # before the launch, or the copies would wait for it
        # the parts' times of a full step (no forced resets) while a re-split is pending
        timed = (self._rebalance_left > 0 and prefix and m and len(rg) and n == self.num_envs
                 and not cpu_inputs[0].any())
        # GPU part first: its kernels run while the CPU part steps.
        if timed:
            gpu_start = self.dev.record_event()
        if len(rg):
            gpu_ids = ids[rg] - self.cpu_envs
            sel = slice(m, n) if prefix else xp.asarray(rg)
            g_out = {k: (None if v is None else v[sel]) for k, v in outs.items()}
            if not prefix:
                g_out = {k: (None if v is None else xp.ascontiguousarray(v)) for k, v in g_out.items()}
            self.gpu.run(gpu_ids, self._take(force_reset, rg, np.uint8), self._take(actions, rg, np.int32),
                         self._take(strengths, rg, np.float32), g_out["obs"], g_out["final_obs"],
                         g_out["reward"], g_out["terminated"], g_out["truncated"], g_out["lives"],
                         g_out["frame_number"], g_out["episode_frame_number"], g_out["has_final"])
            if not prefix:
                for k, v in g_out.items():
                    if v is not None:
                        outs[k][sel] = v
        if timed:
            gpu_end = self.dev.record_event()
        if m:
            h = self._host_buffers(m, final_obs is not None)  # (pinned the first time: not timed)
            cpu_start = time.perf_counter()
            cpu_ids = ids[rc]
            chunks = self.copy_chunks if prefix else 1
            bounds = [m * i // chunks for i in range(chunks + 1)]
            for a, b in zip(bounds[:-1], bounds[1:]):
                if a == b:
                    continue
                hc = {k: v[a:b] for k, v in h.items()}
                self.cpu.run(cpu_ids[a:b], *(x[a:b] for x in cpu_inputs), hc["obs"], hc.get("final_obs"),
                             hc["reward"], hc["terminated"], hc["truncated"], hc["lives"], hc["frame_number"],
                             hc["episode_frame_number"], hc.get("has_final"))
                if prefix:  # these rows go up while the next chunk steps
                    for k, v in hc.items():
                        if k != "final_obs" and outs.get(k) is not None:
                            self.dev.copy_to_device(outs[k][a:b], v, side=True)
            if prefix:
                self.dev.end_side_copies()
            cpu_end = time.perf_counter()
            for k, v in h.items():
                if outs.get(k) is None:
                    continue
                if k == "final_obs":
                    # the engine writes only the rows that ended; the others hold an older
                    # step's, and the output's rows are zeros, as on the other backends
                    ended = np.flatnonzero(h["has_final"])
                    if len(ended):
                        rows = ended if prefix else rc[ended]
                        outs[k][xp.asarray(rows)] = xp.asarray(v[ended])
                elif not prefix:
                    outs[k][xp.asarray(rc)] = xp.asarray(v)
        self.dev.synchronize()
        if timed:
            self._note_step_times(cpu_end - cpu_start, self.dev.elapsed_seconds(gpu_start, gpu_end))

    def _take(self, a, rows, dtype):
        if isinstance(a, np.ndarray):
            return np.ascontiguousarray(a[rows], dtype=dtype)
        xp = self.dev.xp
        return xp.ascontiguousarray(xp.asarray(a)[xp.asarray(rows)].astype(dtype))

    def _host(self, a, rows, dtype):
        if not isinstance(a, np.ndarray):
            a = self.dev.to_host(a)
        return np.ascontiguousarray(np.asarray(a)[rows], dtype=dtype)

    def write_current(self, env_ids, obs, reward, terminated, truncated, lives, frame_number,
                      episode_frame_number):
        ids, rc, rg = self._split_ids(env_ids)
        xp = self.dev.xp
        outs = dict(obs=obs.reshape(obs.shape[0], -1), reward=reward, terminated=terminated, truncated=truncated,
                    lives=lives, frame_number=frame_number, episode_frame_number=episode_frame_number)
        if len(rg):
            g = {k: xp.ascontiguousarray(v[xp.asarray(rg)]) for k, v in outs.items()}
            self.gpu.write_current(ids[rg] - self.cpu_envs, g["obs"], g["reward"], g["terminated"],
                                   g["truncated"], g["lives"], g["frame_number"], g["episode_frame_number"])
            for k, v in g.items():
                outs[k][xp.asarray(rg)] = v
        if len(rc):
            h = {k: np.zeros((len(rc),) + tuple(v.shape[1:]), dtype=v.dtype) for k, v in outs.items()}
            self.cpu.write_current(ids[rc], h["obs"], h["reward"], h["terminated"], h["truncated"], h["lives"],
                                   h["frame_number"], h["episode_frame_number"])
            for k, v in h.items():
                outs[k][xp.asarray(rc)] = xp.asarray(v)
        self.dev.synchronize()

    def synchronize(self):
        self.dev.synchronize()

    # ---- snapshots --------------------------------------------------------------------
    def materialize(self):
        for part in (self.cpu, self.gpu):
            if part is not None:
                part.materialize()

    def forget_undrawn(self):
        for part in (self.cpu, self.gpu):
            if part is not None:
                part.forget_undrawn()

    def shown(self):
        parts = [p.shown() for p in (self.cpu, self.gpu) if p is not None]
        return np.concatenate(parts).astype(np.int32)

    def set_shown(self, values):
        v = np.asarray(values, dtype=np.int32)
        if self.cpu is not None:
            self.cpu.set_shown(v[: self.cpu_envs])
        if self.gpu is not None:
            self.gpu.set_shown(v[self.cpu_envs:])

    def host_array(self, name):
        """One snapshot array (hybridsim.vector.SNAPSHOT_ARRAYS) of both parts, on the host."""
        from hybridsim.vector import SNAPSHOT_ARRAYS
        parts = []
        if self.cpu is not None:
            parts.append(np.asarray(getattr(self.cpu, SNAPSHOT_ARRAYS[name])))
        if self.gpu is not None:
            parts.append(self.gpu.host_array(name))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def snapshot_layout(self):
        """The parts' layout with the rows of all N environments (the parts' rows are alike)."""
        from hybridsim.vector import snapshot_layout
        rows = snapshot_layout(self.gpu if self.gpu is not None else self.cpu)
        return {name: ((self.num_envs,) + shape[1:], dtype) for name, (shape, dtype) in rows.items()}

    def load_arrays(self, arrays):
        """The snapshot arrays (host arrays, or set_state's stored ones read one at a time)
        split over the parts."""
        from hybridsim.vector import SNAPSHOT_ARRAYS
        c = self.cpu_envs
        for name, attr in SNAPSHOT_ARRAYS.items():
            rows = np.asarray(arrays[name])
            if self.cpu is not None:
                getattr(self.cpu, attr)[...] = rows[:c]
            if self.gpu is not None:
                self.gpu.load_array(name, rows[c:])
            del rows

    def env_row_host(self, k):
        if k < self.cpu_envs:
            return (np.asarray(self.cpu.env_mem[k]), np.asarray(self.cpu.frame_mem[k]),
                    int(self.cpu.shown()[k]))
        return self.gpu.env_row_host(k - self.cpu_envs)

    def __repr__(self):
        s = self.split
        rates = ""
        if s["measured"]:
            rates = (f", measured cpu {s['cpu_rate']:.0f} / gpu {s['gpu_rate']:.0f} env-steps/s, "
                     f"gpu latency {1000 * s['gpu_latency']:.1f} ms")
        return (f"HybridEngine(cpu_envs={self.cpu_envs}, gpu_envs={self.gpu_envs}, "
                f"cpu_threads={self.num_threads}{rates}, gpu={self.gpu!r})")
