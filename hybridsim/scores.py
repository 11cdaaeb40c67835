"""Human-normalized scores: where a return lies between a random agent's (0) and a human
tester's (1) on the same game, the measure Atari papers report over the Atari-57.

The reference scores (data/atari57_scores.csv) are those of DeepMind's DQN Zoo
(dqn_zoo/atari_data.py): Mnih et al. 2015 (Nature, Extended Data Table 2), with the games
added by Wang et al. 2016 (dueling networks). They were measured with up to 30 no-op
starts, episodes cut at 108,000 frames and no sticky actions, which is what `hybridsim
eval` plays by default. data/README.md says how the table was checked.
"""
from __future__ import annotations

import csv
import functools
import math
import os

import hybridsim


@functools.lru_cache(maxsize=1)
def reference_scores() -> dict[str, tuple[float, float]]:
    """{game: (random score, human score)} for the Atari-57."""
    path = os.path.join(hybridsim.data_dir(), "atari57_scores.csv")
    with open(path, newline="") as f:
        return {row["game"]: (float(row["random"]), float(row["human"])) for row in csv.DictReader(f)}


def human_normalized(game: str, score: float) -> float | None:
    """(score - random) / (human - random) for an Atari-57 game; None for another game or
    a non-finite score."""
    reference = reference_scores().get(game)
    if reference is None or not math.isfinite(score):
        return None
    random, human = reference
    return (score - random) / (human - random)
