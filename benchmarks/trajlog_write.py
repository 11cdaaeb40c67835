"""Cost of the per-chunk fletcher32 checksums on trajectory writing.

    python benchmarks/trajlog_write.py [--steps 8192] [--batch 16] [--rounds 3]

Writes the same random step rows with TrajectoryWriter twice per round, with and without
fletcher32 (lzf compression either way), alternating, and prints steps/s (best of the
rounds) and the ratio. Files go to a temporary directory.
"""
import argparse
import tempfile
import time

import numpy as np

from hybridsim import trajlog


def step_rows(batch: int, actions: int, count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [dict(action=rng.integers(0, actions, batch).astype(np.int16),
                 reward_raw=rng.normal(size=batch).astype(np.float32),
                 reward_clipped=np.sign(rng.normal(size=batch)).astype(np.float32),
                 terminated=rng.random(batch) < 0.01, truncated=np.zeros(batch, bool),
                 lives=rng.integers(0, 5, batch).astype(np.int16),
                 value=rng.normal(size=batch).astype(np.float32),
                 env_id=np.arange(batch, dtype=np.int32),
                 episode_id=np.full(batch, s // 100, dtype=np.int64),
                 global_frame=np.full(batch, 4 * batch * s, dtype=np.int64),
                 behavior_logits=rng.normal(size=(batch, actions)).astype(np.float32))
            for s in range(count)]


def time_writer(path, rows, steps: int, batch: int, actions: int) -> float:
    start = time.perf_counter()
    with trajlog.TrajectoryWriter(path, batch_size=batch, num_actions=actions) as writer:
        for s in range(steps):
            writer.append_step(**rows[s % len(rows)])
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--actions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = step_rows(args.batch, args.actions, 512)
    with_checksums = trajlog.dataset_kwargs

    def without_checksums(compression):
        return {k: v for k, v in with_checksums(compression).items() if k != "fletcher32"}

    best = {"plain": 0.0, "fletcher32": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("plain", "fletcher32") if r % 2 == 0 else ("fletcher32", "plain")
            for side in order:
                trajlog.dataset_kwargs = without_checksums if side == "plain" else with_checksums
                try:
                    rate = time_writer(f"{tmp}/{side}{r}.h5", rows, args.steps, args.batch, args.actions)
                finally:
                    trajlog.dataset_kwargs = with_checksums
                best[side] = max(best[side], rate)
    for side, rate in best.items():
        print(f"{side:10s} {rate:10,.0f} steps/s ({rate * args.batch:,.0f} env-steps/s), batch {args.batch}")
    print(f"fletcher32 / plain: {best['fletcher32'] / best['plain']:.2f}")


if __name__ == "__main__":
    main()
