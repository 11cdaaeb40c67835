"""`hybridsim bench`: speed measurements (see BENCHMARKS.md for recorded results)."""
from __future__ import annotations

import os
import pathlib
import platform
import sys
import time

import numpy as np

from hybridsim import cpu
from hybridsim.asm6502 import Assembler

NTSC_CPU_HZ = 1_193_182  # 6507 clock on an NTSC 2600: 3.579545 MHz colour clock / 3


def checksum_program() -> bytes:
    """A 6502 loop adding every byte of pages $10-$EF into a 16-bit sum at $02/$03."""
    asm = Assembler(0x0400)
    asm.op("LDA", "imm", 0)
    asm.op("STA", "zp", 0x00)
    asm.op("STA", "zp", 0x02)
    asm.op("STA", "zp", 0x03)
    asm.op("LDA", "imm", 0x10)
    asm.op("STA", "zp", 0x01)
    asm.op("LDY", "imm", 0)
    asm.label("loop")
    asm.op("CLC")
    asm.op("LDA", "indy", 0x00)
    asm.op("ADC", "zp", 0x02)
    asm.op("STA", "zp", 0x02)
    asm.op("BCC", "rel", "no_carry")
    asm.op("INC", "zp", 0x03)
    asm.label("no_carry")
    asm.op("INY")
    asm.op("BNE", "rel", "loop")
    asm.op("INC", "zp", 0x01)
    asm.op("LDA", "zp", 0x01)
    asm.op("CMP", "imm", 0xF0)
    asm.op("BNE", "rel", "loop")
    asm.label("done")
    asm.op("JMP", "abs", "done")
    return asm.assemble()


def run_checksum_workload(repeats: int = 20, seed: int = 0) -> dict:
    """Run the checksum program `repeats` times on random data; verify each sum."""
    rng = np.random.default_rng(seed)
    program = np.frombuffer(checksum_program(), dtype=np.uint8)
    instructions = cycles = 0
    seconds = 0.0
    for _ in range(repeats):
        memory = rng.integers(0, 256, size=65536, dtype=np.uint8)
        memory[0x0400:0x0400 + program.size] = program
        expected = int(memory[0x1000:0xF000].astype(np.int64).sum()) & 0xFFFF
        run = cpu.run_flat(memory, 0x0400, max_instructions=10_000_000, stop_on_trap=True)
        got = int(memory[2]) | (int(memory[3]) << 8)
        if got != expected:
            raise RuntimeError(f"checksum workload computed ${got:04X}, expected ${expected:04X}")
        instructions += run.instructions
        cycles += run.cycles
        seconds += run.seconds
    return {"workload": "checksum (built in)", "instructions": instructions, "cycles": cycles,
            "seconds": seconds}


def find_functional_test() -> pathlib.Path | None:
    """Klaus Dormann's test image: $HYBRIDSIM_6502_TEST, else in $HYBRIDSIM_SHARED/testdata
    (the tests' setting) or ../shared/testdata beside the repo."""
    image = pathlib.Path("testdata") / "6502" / "6502_functional_test.bin"
    env = os.environ.get("HYBRIDSIM_6502_TEST")
    candidates = [pathlib.Path(env)] if env else []
    if os.environ.get("HYBRIDSIM_SHARED"):
        candidates.append(pathlib.Path(os.environ["HYBRIDSIM_SHARED"]) / image)
    for base in (pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parent.parent):
        for up in (base, *base.parents[:2]):
            candidates.append(up / "shared" / image)
    return next((c for c in candidates if c.is_file()), None)


def run_functional_workload(path: pathlib.Path) -> dict:
    run = cpu.run_functional_test(path)
    if run.pc != cpu.FUNCTIONAL_TEST_SUCCESS:
        raise RuntimeError(f"functional test trapped at ${run.pc:04X}, not at the success "
                           f"trap ${cpu.FUNCTIONAL_TEST_SUCCESS:04X}")
    return {"workload": "Klaus Dormann functional test", "instructions": run.instructions,
            "cycles": run.cycles, "seconds": run.seconds}


def bench_cpu(print_fn=print) -> list[dict]:
    results = []
    path = find_functional_test()
    if path is not None:
        results.append(run_functional_workload(path))
    else:
        print_fn("(Klaus Dormann's functional test not found: set HYBRIDSIM_6502_TEST to the .bin, "
                 "or HYBRIDSIM_SHARED to the folder holding testdata/)")
    results.append(run_checksum_workload())
    print_fn(f"6507 core, one thread, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} logical CPUs")
    print_fn(f"{'workload':32s} {'instructions':>14s} {'seconds':>8s} {'M instr/s':>10s} "
             f"{'emulated MHz':>13s} {'x real 2600':>12s}")
    for r in results:
        mips = r["instructions"] / r["seconds"] / 1e6
        mhz = r["cycles"] / r["seconds"] / 1e6
        r.update(mips=mips, emulated_mhz=mhz, realtime_factor=mhz * 1e6 / NTSC_CPU_HZ)
        print_fn(f"{r['workload']:32s} {r['instructions']:14,d} {r['seconds']:8.3f} {mips:10.1f} "
                 f"{mhz:13.1f} {r['realtime_factor']:12.0f}")
    return results


SINGLE_GAMES = ("pong", "breakout", "space_invaders", "ms_pacman", "seaquest")


def _time_block(env, actions, start: int, count: int, sound: bool = False,
                screen_every: int = 0) -> float:
    """Seconds for `count` acts of the action stream from `start`; with `screen_every` N,
    the RGB screen read after every N-th act (gymnasium's AtariEnv at frameskip 4 reads it
    once per 4 acts), into a buffer allocated before the clock starts."""
    import time
    read_samples = env.getAudio if sound else None  # a sound_obs user reads each act's samples
    samples = np.empty(env.getAudioSize(), np.uint8) if sound else None
    read_screen = screen = None
    if screen_every:
        read_screen, (height, width) = env.getScreenRGB, env.getScreenDims()
        screen = np.empty((height, width, 3), np.uint8)
    t0 = time.perf_counter()
    act, game_over, reset = env.act, env.game_over, env.reset_game
    for k in range(start, start + count):
        act(actions[k % len(actions)])
        if read_samples is not None:
            read_samples(samples)
        if read_screen is not None and (k + 1) % screen_every == 0:
            read_screen(screen)
        if game_over():
            reset()
    return time.perf_counter() - t0


def bench_single(make_reference, make_candidate, games=SINGLE_GAMES, frames: int = 20_000,
                 blocks: int = 10, seed: int = 0, print_fn=print,
                 names=("ale-py", "hybridsim"), sound: bool = False, screen_every: int = 4) -> list[dict]:
    """Frames/s of `act` for two ALEInterface implementations, timed alternately in blocks:
    `act` alone, and with the screen read every `screen_every` acts (0: not timed).

    Alternating blocks in one process share the machine's state (caches, clock, load), so
    the ratio is fair even on a noisy machine. Each side plays the same random stream of
    minimal actions with ALE's default settings (frame_skip 1, sticky actions 0.25); with
    `sound`, sound_obs on and each act's samples read (getAudio). `act` alone favours
    hybridsim, which draws a frame only when its screen is read (ale-py draws every one);
    the screen-reading figure is what an agent's loop gets.
    """
    from hybridsim import games_table, roms
    for game in games:  # before any timing: ale-py would end the process on some
        games_table.require_ale_py_loadable(game, "bench times ale-py beside hybridsim")
    rows = []
    workloads = [0] + ([screen_every] if screen_every else [])
    print_fn(f"single environment act(){' with sound_obs and getAudio()' if sound else ''}, "
             f"{frames:,} frames per side, {blocks} alternating blocks"
             + (f"; then with getScreenRGB() after every {screen_every} acts" if screen_every else ""))
    header = f"{'game':16s} {names[0] + ' fps':>14s} {names[1] + ' fps':>16s} {'ratio':>7s}"
    if screen_every:
        header += f" | {'with screen: ' + names[0]:>22s} {names[1]:>10s} {'ratio':>7s}"
    print_fn(header)
    for game in games:
        envs = []
        for make in (make_reference, make_candidate):
            env = make()
            env.setInt("random_seed", seed)
            env.setBool("sound_obs", sound)
            env.loadROM(str(roms.rom_path(game)))
            envs.append(env)
        minimal = [int(getattr(a, "value", a)) for a in envs[0].getMinimalActionSet()]
        rng = np.random.default_rng(seed)
        actions = [minimal[i] for i in rng.integers(len(minimal), size=4096)]
        per_block = max(1, frames // blocks)
        row = {"game": game}
        line = f"{game:16s}"
        for every in workloads:
            seconds = [0.0, 0.0]
            for b in range(blocks):
                for side in ((0, 1) if b % 2 == 0 else (1, 0)):
                    seconds[side] += _time_block(envs[side], actions, b * per_block, per_block, sound, every)
            fps = [per_block * blocks / s for s in seconds]
            suffix = f"_screen_every_{every}" if every else ""
            row.update({f"reference_fps{suffix}": fps[0], f"candidate_fps{suffix}": fps[1],
                        f"ratio{suffix}": fps[1] / fps[0]})
            widths = (22, 10) if every else (14, 16)
            line += (" |" if every else "") + (f" {fps[0]:{widths[0]},.0f} {fps[1]:{widths[1]},.0f} "
                                               f"{fps[1] / fps[0]:7.2f}")
        rows.append(row)
        print_fn(line)
    return rows


# ---- vector environments: hybridsim vs ale-py vs EnvPool ---------------------------------

VECTOR_GAMES = ("pong", "breakout", "ms_pacman")

# EnvPool's side runs in its own interpreter (it pins numpy/gym versions of its own). The
# script builds the same configuration as the others, times `steps` steps after a warm-up
# and prints frames/s. Its ids are PascalCase with -v5; reward_clip on to match.
_ENVPOOL_SCRIPT = r"""
import json, sys, time
import numpy as np
import envpool
a = json.loads(sys.argv[1])
name = a["game"].title().replace("_", "") + "-v5"
batch = a["batch_size"] or a["num_envs"]
env = envpool.make(name, env_type="gymnasium", num_envs=a["num_envs"], batch_size=batch,
                   num_threads=a["threads"], thread_affinity_offset=a["thread_affinity_offset"],
                   seed=0, reward_clip=True, noop_max=30,
                   repeat_action_probability=0.0, max_episode_steps=27000)
n = env.action_space.n
acts = np.random.default_rng(0).integers(0, n, (a["steps"] + a["warmup"], a["num_envs"]))
if batch == a["num_envs"]:
    env.reset()
    advance = env.step
else:  # async: act on each batch as it comes back
    env.async_reset()
    def advance(x):
        env.send(x[:batch], env.recv()[-1]["env_id"])
for x in acts[:a["warmup"]]:
    advance(x)
t = time.perf_counter()
for x in acts[a["warmup"]:]:
    advance(x)
dt = time.perf_counter() - t
print(json.dumps({"fps": a["steps"] * batch * 4 / dt}))
"""


def find_envpool_python(explicit: str | None = None) -> str | None:
    """An interpreter with envpool importable: the one named, else this one (None: skip).
    Never a fixed path elsewhere: on a shared machine anyone could put a program there."""
    import shutil
    import subprocess
    candidates = [explicit] if explicit else [sys.executable]
    for py in candidates:
        if py and (os.path.isfile(py) or shutil.which(py)):
            ok = subprocess.run([py, "-c", "import envpool"], capture_output=True).returncode == 0
            if ok:
                return py
    return None


def _time_vector(make, actions, warmup: int, batch_size: int = 0) -> float:
    """Frames/s of env.step over actions[warmup:] (frame skip 4) after reset and warm-up;
    with batch_size < num_envs, of send (to the last result's environments) and recv."""
    import time
    env = make()
    env.reset(seed=0)
    batch = batch_size or actions.shape[1]
    if batch == actions.shape[1]:
        advance = env.step
    else:
        def advance(a):
            env.send(a[:batch])
            env.recv()
    for a in actions[:warmup]:
        advance(a)
    t0 = time.perf_counter()
    for a in actions[warmup:]:
        advance(a)
    dt = time.perf_counter() - t0
    if hasattr(env, "close"):
        env.close()
    return (len(actions) - warmup) * batch * 4 / dt


def _time_envpool(python: str, game: str, num_envs: int, threads: int, steps: int, warmup: int,
                  batch_size: int = 0, thread_affinity_offset: int = -1) -> float:
    import json
    import subprocess
    arg = json.dumps(dict(game=game, num_envs=num_envs, threads=threads, steps=steps, warmup=warmup,
                          batch_size=batch_size, thread_affinity_offset=thread_affinity_offset))
    out = subprocess.run([python, "-c", _ENVPOOL_SCRIPT, arg], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"EnvPool side failed: {out.stderr.strip()[-400:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["fps"])


def _median_ratio(ours, theirs) -> float:
    """The median of per-round ratios (the sides ran back to back in each round): steadier
    on a shared machine than a ratio of medians taken minutes apart."""
    return float(np.median(np.array(ours) / np.array(theirs)))


def bench_vector(games=VECTOR_GAMES, num_envs: int = 16, threads: int = 2, steps: int = 200,
                 rounds: int = 3, warmup: int = 20, envpool_python: str | None = None,
                 scaling_threads=None, batch_size: int = 0, thread_affinity_offset: int = -1,
                 print_fn=print) -> dict:
    """AtariVectorEnv frames/s (default preprocessing: 84x84 gray, stack 4, frame skip 4,
    maxpool, noop_max 30, sticky 0) of hybridsim, ale-py and EnvPool on the same game,
    num_envs and threads, the sides alternating in each of `rounds` rounds (medians
    reported; the ratios are medians of the per-round ratios), then hybridsim and ale-py
    over thread counts. batch_size < num_envs times the three in async mode (each
    returning the first batch_size environments to finish; a step is a send and a recv).
    thread_affinity_offset >= 0 pins every side's workers (each side's own rule)."""
    if not 0 <= batch_size <= num_envs:
        raise ValueError(f"batch_size must be in 0..num_envs={num_envs} (0: synchronous), got {batch_size}")
    from ale_py.vector_env import AtariVectorEnv as AleVectorEnv

    from hybridsim import games_table
    from hybridsim.vector import AtariVectorEnv
    for game in games:  # before any timing: ale-py would end the process on some
        games_table.require_ale_py_loadable(game, "bench times ale-py beside hybridsim")
    envpool_py = find_envpool_python(envpool_python)
    if envpool_py is None and envpool_python:  # asked for by name: not a silent skip
        raise ValueError(f"--envpool-python {envpool_python}: not an interpreter that can "
                         f"import envpool")
    if envpool_py is None:
        tried = envpool_python or f"this interpreter ({sys.executable})"
        print_fn(f"(EnvPool is not importable by {tried}: its column is skipped; "
                 "pass --envpool-python PATH)")
    mode = f"async, batches of {batch_size}" if 0 < batch_size < num_envs else "sync"
    if thread_affinity_offset >= 0:
        mode += f", workers pinned from core offset {thread_affinity_offset}"
    pin = dict(thread_affinity_offset=thread_affinity_offset)
    # The largest allocation first, so that too many environments is refused (MemoryError)
    # before the table's header is printed.
    AtariVectorEnv(games[0], num_envs, num_threads=threads, batch_size=batch_size, **pin).close()
    print_fn(f"vector envs ({mode}): {num_envs} envs, {threads} threads, {steps} steps x {rounds} rounds, "
             f"frames/s (median; hs/ale, hs/ep: median of per-round ratios), "
             f"{platform.processor() or platform.machine()}, "
             f"{len(os.sched_getaffinity(0))} CPUs available")
    print_fn(f"{'game':12s} {'hybridsim':>10s} {'ale-py':>10s} {'envpool':>10s} {'hs/ale':>7s} {'hs/ep':>7s}")
    rows = []
    for game in games:
        probe = AtariVectorEnv(game, 1)
        n_actions = probe.single_action_space.n
        actions = np.random.default_rng(0).integers(0, n_actions, (steps + warmup, num_envs))
        fps = {"hybridsim": [], "ale-py": [], "envpool": []}
        for r in range(rounds):
            sides = ["hybridsim", "ale-py"] + (["envpool"] if envpool_py else [])
            if r % 2:
                sides.reverse()
            for side in sides:
                if side == "hybridsim":
                    fps[side].append(_time_vector(lambda: AtariVectorEnv(
                        game, num_envs, num_threads=threads, batch_size=batch_size, **pin), actions, warmup,
                        batch_size))
                elif side == "ale-py":
                    fps[side].append(_time_vector(lambda: AleVectorEnv(
                        game, num_envs, num_threads=threads, batch_size=batch_size, **pin), actions, warmup,
                        batch_size))
                else:
                    fps[side].append(_time_envpool(envpool_py, game, num_envs, threads, steps, warmup,
                                                   batch_size, thread_affinity_offset))
        med = {k: float(np.median(v)) if v else float("nan") for k, v in fps.items()}
        ratio = {k: _median_ratio(fps["hybridsim"], v) if v else float("nan")
                 for k, v in fps.items() if k != "hybridsim"}
        row = dict(game=game, **med, hs_over_ale=ratio["ale-py"], hs_over_envpool=ratio["envpool"],
                   all=fps)
        rows.append(row)
        print_fn(f"{game:12s} {med['hybridsim']:10,.0f} {med['ale-py']:10,.0f} {med['envpool']:10,.0f} "
                 f"{ratio['ale-py']:7.2f} {ratio['envpool']:7.2f}")
    scaling = []
    if scaling_threads:
        game = games[0]
        print_fn(f"threads scaling ({game}, {num_envs} envs, frames/s)")
        print_fn(f"{'threads':>7s} {'hybridsim':>10s} {'ale-py':>10s} {'hs/ale':>7s}")
        n_actions = AtariVectorEnv(game, 1).single_action_space.n
        actions = np.random.default_rng(1).integers(0, n_actions, (steps + warmup, num_envs))
        for t in scaling_threads:
            hs = _time_vector(lambda: AtariVectorEnv(game, num_envs, num_threads=t, batch_size=batch_size, **pin),
                              actions, warmup, batch_size)
            ap = _time_vector(lambda: AleVectorEnv(game, num_envs, num_threads=t, batch_size=batch_size, **pin),
                              actions, warmup, batch_size)
            scaling.append(dict(threads=t, hybridsim=hs, ale_py=ap))
            print_fn(f"{t:7d} {hs:10,.0f} {ap:10,.0f} {hs / ap:7.2f}")
    return {"rows": rows, "scaling": scaling}


TRAIN_SIDES = {"hybridsim": "cpu", "ale-py": "ale-py"}  # side -> train's --backend


class _EnvClock:
    """Sums the seconds a trainer spends inside its vector env's step (a2c) or send and
    recv (impala): the rest of the training loop is the learner's. Only the outermost call
    counts (ale-py's step calls its own send)."""

    def __init__(self, env):
        self.seconds = 0.0
        self._inside = False
        for name in ("step", "send", "recv"):
            if hasattr(env, name):
                setattr(env, name, self._timed(getattr(env, name)))

    def _timed(self, call):
        def timed(*args, **kwargs):
            if self._inside:
                return call(*args, **kwargs)
            self._inside = True
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self._inside = False
        return timed


def _train_once(settings: dict) -> dict:
    """One run of the training loop in this process, into a scratch directory: the loop's
    frames/s (from the first step to the last update: not the setup nor the final
    checkpoint), the share of that time inside the vector env, and the network."""
    import contextlib
    import io
    import tempfile

    from hybridsim.train import TrainConfig, Trainer
    with tempfile.TemporaryDirectory(prefix="hybridsim-bench-train-") as log_dir:
        trainer = Trainer(TrainConfig(**settings, log_dir=log_dir))
        clock = _EnvClock(trainer.env)
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                trainer.train()
        except Exception as exc:
            raise RuntimeError(f"bench --train: training {settings['game']} on --backend "
                               f"{settings['backend']} failed ({type(exc).__name__}: {exc}); it said:\n"
                               f"{said.getvalue()[-2000:]}") from exc
    seconds = trainer.loop_seconds
    return {"fps": trainer.frames / seconds, "env_share": clock.seconds / seconds, "seconds": seconds,
            "frames": trainer.frames, "episodes": list(trainer.all_episodes),
            "network": {k: v.clone() for k, v in trainer.model.state_dict().items()}}


def _same_run(a: dict, b: dict) -> bool:
    """The same frames, episodes and bit for bit the same parameters."""
    import torch
    return (a["frames"] == b["frames"] and a["episodes"] == b["episodes"]
            and all(torch.equal(v, b["network"][k]) for k, v in a["network"].items()))


def bench_train(games=None, recipe: str = "quickstart", frames: int = 40_000, rounds: int = 3,
                seed: int = 1, print_fn=print) -> dict:
    """The training loop end to end: a shipped recipe (or config file) trained for `frames`
    frames on hybridsim's CPU engine and on ale-py's AtariVectorEnv, with the same learner,
    settings and seed, the two alternating in each of `rounds` rounds (medians reported;
    the ratio is the median of the per-round ratios). The engines are exact, so both sides
    must train the same network; a difference is an error, not a result."""
    import argparse
    import dataclasses

    from hybridsim import dist, games_table
    from hybridsim.config import build_config, resolve_config_path
    from hybridsim.train import TrainConfig, pick_device
    if dist.launched_ranks() > 1:  # the ranks would train together, each timing a part
        raise ValueError(f"bench --train times one process; the launcher started "
                         f"{dist.launched_ranks()} (run it without mpirun or srun)")
    cfg = build_config(TrainConfig, argparse.Namespace(config=recipe))
    device = pick_device(cfg.device)  # (a recipe's cuda on a machine without one: refused here)
    if cfg.schedule != "a2c":  # (train_config: ale-py hands impala the environments that finish first)
        raise ValueError(f"bench --train: {recipe} trains with the {cfg.schedule} schedule, which on "
                         f"ale-py's engine is repeatable only on one worker thread; it times a2c recipes")
    games = list(games or [cfg.game])
    for game in games:
        games_table.require_ale_py_loadable(game, "bench --train trains on ale-py beside hybridsim")
    per_iteration = cfg.num_envs * cfg.num_steps * cfg.frame_skip
    iterations = -(-frames // per_iteration)  # train ends after the iteration that reaches frames
    settings = dataclasses.asdict(cfg)
    del settings["log_dir"]  # each run trains into a scratch directory
    settings.update(total_frames=frames, seed=seed, log_trajectories=False, log_every=1e9,
                    checkpoint_every=iterations * per_iteration + 1, keep_checkpoints=False, resume=False)
    path = resolve_config_path(recipe)
    replaced = f", its backend {cfg.backend} replaced" if cfg.backend not in TRAIN_SIDES.values() else ""
    print_fn(f"training loop ({path.name}: {cfg.schedule}, {cfg.model}, {cfg.num_envs} envs, "
             f"{cfg.num_steps}-step rollouts, {cfg.num_minibatches} minibatch(es), learner on "
             f"{device}{replaced}; {iterations * per_iteration:,} frames ({iterations} "
             f"iteration{'s' if iterations != 1 else ''}) per run after one untimed iteration per side, seed {seed}, {rounds} "
             f"round{'s' if rounds != 1 else ''}; OpenMP waiting "
             f"{os.environ.get('OMP_WAIT_POLICY', 'as libgomp does by default (spinning first)')}), "
             f"frames/s (median; hs/ale: median of per-round ratios), env: the share of the loop "
             f"spent in the vector env, {platform.processor() or platform.machine()}, "
             f"{len(os.sched_getaffinity(0))} CPUs available")
    print_fn(f"{'game':14s} {'hybridsim':>10s} {'env':>5s} {'ale-py':>10s} {'env':>5s} {'hs/ale':>7s}")
    rows, short = [], False
    for game in games:
        for backend in TRAIN_SIDES.values():  # torch's and each engine's first-use costs, untimed
            _train_once({**settings, "game": game, "backend": backend, "total_frames": 1})
        runs = {side: [] for side in TRAIN_SIDES}
        for r in range(rounds):
            sides = list(TRAIN_SIDES) if r % 2 == 0 else list(reversed(TRAIN_SIDES))
            for side in sides:
                runs[side].append(_train_once({**settings, "game": game, "backend": TRAIN_SIDES[side]}))
            ours, theirs = runs["hybridsim"][-1], runs["ale-py"][-1]
            if not _same_run(ours, theirs):
                raise RuntimeError(f"bench --train: {game}, round {r + 1}: the same seed trained "
                                   f"differently on hybridsim's engine and on ale-py's ({ours['frames']:,} "
                                   f"and {theirs['frames']:,} frames, {len(ours['episodes'])} and "
                                   f"{len(theirs['episodes'])} episodes); the engines are meant to "
                                   f"be exact: `hybridsim verify --games {game}` compares them")
            for side in runs:  # the networks were compared; the table keeps the numbers
                del runs[side][-1]["network"], runs[side][-1]["episodes"]
                short = short or runs[side][-1]["seconds"] < 2.0
        fps = {side: [run["fps"] for run in runs[side]] for side in runs}
        share = {side: float(np.median([run["env_share"] for run in runs[side]])) for side in runs}
        med = {side: float(np.median(v)) for side, v in fps.items()}
        ratio = _median_ratio(fps["hybridsim"], fps["ale-py"])
        rows.append(dict(game=game, hybridsim=med["hybridsim"], ale_py=med["ale-py"], hs_over_ale=ratio,
                         env_share_hybridsim=share["hybridsim"], env_share_ale_py=share["ale-py"],
                         all=fps))
        print_fn(f"{game:14s} {med['hybridsim']:10,.0f} {share['hybridsim']:5.0%} {med['ale-py']:10,.0f} "
                 f"{share['ale-py']:5.0%} {ratio:7.2f}")
    print_fn("each round trained bit for bit the same network on both engines")
    if short:
        print_fn("note: some runs took under 2 s, where the clock's and the machine's noise weigh "
                 "heavily; give more --train-frames")
    return {"rows": rows, "recipe": str(path), "frames": frames, "seed": seed}
