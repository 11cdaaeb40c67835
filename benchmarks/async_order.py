"""What returning async batches in submission order costs against completion order.

    python benchmarks/async_order.py [--game pong] [--num-envs 32] [--batch 16] [--threads 2]
                                     [--steps 400] [--rounds 3] [--train-frames 40000]

async_order="completion" (EnvPool's and ale-py's rule) hands back the first batch_size
environments to finish; "submission" (the impala default in `hybridsim train`) waits for
the batch_size sent longest ago, so a fast environment can wait behind a slow one. Two
measurements, the orders alternated round by round so drift on a shared machine hits both:
- env only: `AtariVectorEnv` in async mode, recv then send random actions, frames/s;
- training: `hybridsim train --schedule impala` (construction and the one-off end of the
  run excluded; before 2026-12-07 the end was in), frames/s.
Prints one JSON object: per-round frames/s and the submission / completion ratio of the
medians.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np
from _training_time import train_loop_seconds  # benchmarks/, this script's folder

FRAME_SKIP = 4  # the vector env's and the trainer's default


def env_frames_per_second(args, order: str) -> float:
    from hybridsim.vector import AtariVectorEnv

    env = AtariVectorEnv(args.game, args.num_envs, batch_size=args.batch, num_threads=args.threads,
                         async_order=order, frameskip=FRAME_SKIP)
    rng = np.random.default_rng(0)
    n_actions = env.single_action_space.n
    env.reset(seed=1)
    for _ in range(20):  # warm-up: every environment stepped, the pool busy
        env.send(rng.integers(0, n_actions, args.batch))
        env.recv()
    start = time.perf_counter()
    for _ in range(args.steps):
        env.send(rng.integers(0, n_actions, args.batch))
        env.recv()
    seconds = time.perf_counter() - start
    env.close()
    return args.steps * args.batch * FRAME_SKIP / seconds


def train_frames_per_second(args, order: str) -> float:
    from hybridsim.train import TrainConfig, Trainer

    with tempfile.TemporaryDirectory(prefix="hs_order_") as log_dir:
        cfg = TrainConfig(game=args.game, num_envs=args.num_envs, schedule="impala", env_batch_size=args.batch,
                          impala_order=order, frame_skip=FRAME_SKIP, num_threads=args.threads,
                          total_frames=args.train_frames, log_dir=log_dir, log_every=1e9,
                          checkpoint_every=10**12, log_trajectories=False)
        trainer = Trainer(cfg)
        with contextlib.redirect_stdout(sys.stderr):  # the progress lines; stdout is the report's
            summary, seconds = train_loop_seconds(trainer)
    return summary["frames"] / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="pong")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=400, help="timed recv/send pairs per env-only round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-frames", type=int, default=40_000, help="frames per training round (0: skip)")
    args = p.parse_args()
    orders = ("completion", "submission")
    env_fps = {o: [] for o in orders}
    train_fps = {o: [] for o in orders}
    for r in range(args.rounds):
        for order in orders if r % 2 == 0 else orders[::-1]:
            env_fps[order].append(round(env_frames_per_second(args, order)))
            if args.train_frames:
                train_fps[order].append(round(train_frames_per_second(args, order)))
    report = dict(vars(args), machine=platform.node(), cpus=os.cpu_count(),
                  env_fps=env_fps, env_ratio=round(statistics.median(env_fps["submission"])
                                                   / statistics.median(env_fps["completion"]), 3))
    if args.train_frames:
        report.update(train_fps=train_fps, train_ratio=round(
            statistics.median(train_fps["submission"]) / statistics.median(train_fps["completion"]), 3))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
