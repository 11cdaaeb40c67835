"""Size and cost of the environments' state in a training checkpoint.

    python benchmarks/checkpoint_state.py [--games pong,ms_pacman,space_invaders]
                                          [--num-envs 16] [--steps 200]

Plays each game with random actions (seed 0) for --steps vector steps, takes
AtariVectorEnv.get_state() and compresses it as Trainer does (zlib level 1), and prints the
raw and compressed bytes per environment, the ratio and the compression speed. Every rank
sends this to rank 0 at each checkpoint, and rank 0 writes all of it.
"""
import argparse
import time
import zlib

import numpy as np

from hybridsim.vector import AtariVectorEnv


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="pong,ms_pacman,space_invaders")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'game':16s} {'raw B/env':>10s} {'zlib-1 B/env':>13s} {'ratio':>6s} {'MB/s':>6s}")
    for game in args.games.split(","):
        env = AtariVectorEnv(game, num_envs=args.num_envs, num_threads=1)
        env.reset(seed=0)
        for _ in range(args.steps):
            env.step(rng.integers(0, env.single_action_space.n, args.num_envs))
        raw = env.get_state()
        env.close()
        start = time.perf_counter()
        packed = zlib.compress(raw, 1)
        seconds = time.perf_counter() - start
        print(f"{game:16s} {len(raw) // args.num_envs:10d} {len(packed) // args.num_envs:13d} "
              f"{len(raw) / len(packed):6.1f} {len(raw) / seconds / 1e6:6.0f}")


if __name__ == "__main__":
    main()
