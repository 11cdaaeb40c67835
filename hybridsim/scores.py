"""Human-normalized scores: where a return lies between a random agent's (0) and a human
tester's (1) on the same game, the measure Atari papers report over the Atari-57.

The reference scores (data/atari57_scores.csv) are the table of DeepMind's DQN Zoo
(dqn_zoo/atari_data.py): the random column is the Nature DQN paper's (Mnih et al. 2015,
Extended Data Table 2), the human column the one later papers use (e.g. Wang et al. 2016),
which differs from the Nature table's for some games. Both were measured with up to 30
no-op starts, episodes cut at 108,000 frames and no sticky actions (REFERENCE_SETTINGS),
the defaults of training and so of `hybridsim eval`. data/README.md says how the table
was checked.
"""
from __future__ import annotations

import csv
import functools
import math
import os
import types

import hybridsim

# the protocol of the reference scores, as `hybridsim eval` names its settings
REFERENCE_SETTINGS = types.MappingProxyType(
    {"repeat_action_probability": 0.0, "noop_max": 30, "max_episode_frames": 108_000})


@functools.lru_cache(maxsize=1)
def reference_scores() -> types.MappingProxyType:
    """{game: (random score, human score)} for the Atari-57 (read-only)."""
    path = os.path.join(hybridsim.data_dir(), "atari57_scores.csv")
    with open(path, newline="") as f:
        return types.MappingProxyType({row["game"]: (float(row["random"]), float(row["human"]))
                                       for row in csv.DictReader(f)})


def human_normalized(game: str, score: float) -> float | None:
    """(score - random) / (human - random) for an Atari-57 game; None for another game or
    a non-finite score."""
    reference = reference_scores().get(game)
    if reference is None or not math.isfinite(score):
        return None
    random_score, human_score = reference
    return (score - random_score) / (human_score - random_score)


def on_reference_protocol(settings: dict) -> bool:
    """Whether evaluation settings are those the reference scores were measured under."""
    return all(settings[name] == value for name, value in REFERENCE_SETTINGS.items())
