"""How much memory N CPU environments take, and how long their first reset is.

    PYTHONPATH=. python scripts/vector_memory.py --num-envs 10000 [--game pong] [--steps 2]

Prints the per-environment bytes of each buffer, the process's resident memory before and
after building the AtariVectorEnv, the time of construction, of reset(seed=0) and of a
few steps. docs/VECTOR.md records a run.
"""
import argparse
import resource
import time

import numpy as np


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=10_000)
    p.add_argument("--game", default="pong")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--noop-max", type=int, default=30)
    a = p.parse_args()
    from hybridsim import _vector
    from hybridsim.vector import AtariVectorEnv

    before = rss_mib()
    t = time.perf_counter()
    env = AtariVectorEnv(a.game, a.num_envs, num_threads=a.threads, noop_max=a.noop_max)
    built = time.perf_counter() - t
    e = env._engine
    per_env = {"AleEnv (console, RNGs, game state)": _vector.ALE_ENV_BYTES,
               "VecEnvState (noop RNG, episode counters)": _vector.VEC_STATE_BYTES,
               "2 console frames (palette indices)": e.frame_mem[0].nbytes,
               "start states of undrawn frames (FrameReplay)": _vector.FRAME_REPLAY_BYTES,
               "2 raw frames (grayscale/RGB, max-pool)": e.raw_mem[0].nbytes,
               "frame stack": e.stack_mem[0].nbytes}
    total = sum(per_env.values())
    for k, v in per_env.items():
        print(f"{k:44s} {v:8,d} bytes")
    print(f"{'per environment':44s} {total:8,d} bytes; x {a.num_envs:,} = {total * a.num_envs / 2**30:.2f} GiB")
    print(f"built {a.num_envs:,} envs in {built:.1f} s; RSS {before:.0f} -> {rss_mib():.0f} MiB")
    t = time.perf_counter()
    obs, info = env.reset(seed=0)
    print(f"reset(seed=0): {time.perf_counter() - t:.1f} s ({env.num_threads} threads); "
          f"obs {obs.shape} {obs.nbytes / 2**20:.0f} MiB; RSS {rss_mib():.0f} MiB")
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(a.steps):
        env.step(rng.integers(0, env.single_action_space.n, a.num_envs))
    dt = time.perf_counter() - t
    print(f"{a.steps} steps: {dt:.1f} s ({a.steps * a.num_envs * 4 / dt:,.0f} frames/s); "
          f"RSS {rss_mib():.0f} MiB, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
