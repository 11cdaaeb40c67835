"""The Atari-57 reference scores behind human-normalized results (hybridsim/scores.py).
The table's values were checked, when it was written, against two independent public
copies (data/README.md); here, that it names the Atari-57 as hybridsim knows them."""
import math

import pytest

from hybridsim import games_table, scores

# Mnih et al. 2015's 49 games and the 8 added since (Atari-57), in hybridsim's names
ATARI_57 = """alien amidar assault asterix asteroids atlantis bank_heist battle_zone beam_rider berzerk
bowling boxing breakout centipede chopper_command crazy_climber defender demon_attack double_dunk
enduro fishing_derby freeway frostbite gopher gravitar hero ice_hockey jamesbond kangaroo krull
kung_fu_master montezuma_revenge ms_pacman name_this_game phoenix pitfall pong private_eye qbert
riverraid road_runner robotank seaquest skiing solaris space_invaders star_gunner surround tennis
time_pilot tutankham up_n_down venture video_pinball wizard_of_wor yars_revenge zaxxon""".split()


def test_the_table_is_the_atari_57_of_hybridsims_games():
    table = scores.reference_scores()
    assert len(ATARI_57) == 57 and sorted(table) == sorted(ATARI_57)
    known = {g["name"] for g in games_table.games()}
    assert set(table) <= known, sorted(set(table) - known)
    for game, (random, human) in table.items():
        assert math.isfinite(random) and math.isfinite(human) and human > random, game


@pytest.mark.parametrize("game", ["pong", "skiing", "video_pinball"])
def test_random_is_zero_and_human_is_one(game):
    random, human = scores.reference_scores()[game]
    assert scores.human_normalized(game, random) == 0.0
    assert scores.human_normalized(game, human) == pytest.approx(1.0, rel=1e-12)
    assert scores.human_normalized(game, (random + human) / 2) == pytest.approx(0.5, rel=1e-12)


def test_the_reference_protocol_is_evals_default():
    defaults = {"repeat_action_probability": 0.0, "noop_max": 30, "max_episode_frames": 108_000}
    assert scores.on_reference_protocol(defaults)
    for name, other in (("repeat_action_probability", 0.25), ("noop_max", 0), ("max_episode_frames", 0)):
        assert not scores.on_reference_protocol({**defaults, name: other}), name


def test_other_games_and_non_finite_returns_have_none():
    assert scores.human_normalized("air_raid", 1000.0) is None  # shipped by ale-py, not in the 57
    assert scores.human_normalized("pong", math.nan) is None
