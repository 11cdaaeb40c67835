"""The static game table (tools/gen_games.py -> data/games.json, cuda/games_ids.h)
checked against the installed ale-py 0.12.1 for every game in it."""
import hashlib
import json
import pathlib
import subprocess
import sys

import pytest

from conftest import REPO

GAMES = json.loads((REPO / "data" / "games.json").read_text())["games"]
NAMES = [g["name"] for g in GAMES]

ATARI_57 = ("alien amidar assault asterix asteroids atlantis bank_heist battle_zone beam_rider "
            "berzerk bowling boxing breakout centipede chopper_command crazy_climber defender "
            "demon_attack double_dunk enduro fishing_derby freeway frostbite gopher gravitar hero "
            "ice_hockey jamesbond kangaroo krull kung_fu_master montezuma_revenge ms_pacman "
            "name_this_game phoenix pitfall pong private_eye qbert riverraid road_runner robotank "
            "seaquest skiing solaris space_invaders star_gunner surround tennis time_pilot "
            "tutankham up_n_down venture video_pinball wizard_of_wor yars_revenge zaxxon").split()


def test_table_covers_atari57_in_id_order():
    assert set(ATARI_57) <= set(NAMES)
    assert NAMES == sorted(NAMES)
    assert [g["id"] for g in GAMES] == list(range(1, len(GAMES) + 1))


def test_generated_files_up_to_date():
    subprocess.run([sys.executable, str(REPO / "tools" / "gen_games.py"), "--check"], check=True)


def test_extension_ids_match_table():
    from hybridsim._games import NUM_GAMES, game_id, game_names
    assert NUM_GAMES == len(GAMES) + 1
    assert game_names() == [""] + NAMES
    for g in GAMES:
        assert game_id(g["name"]) == g["id"]


@pytest.fixture(scope="module")
def ale_facts():
    from ale_py import ALEInterface, LoggerMode, roms
    ALEInterface.setLoggerMode(LoggerMode.Error)
    facts = {}
    for name in NAMES:
        path = pathlib.Path(roms.get_rom_path(name))
        ale = ALEInterface()
        ale.setInt("random_seed", 0)
        ale.loadROM(str(path))
        facts[name] = dict(
            md5=hashlib.md5(path.read_bytes()).hexdigest(),
            minimal=[a.value for a in ale.getMinimalActionSet()],
            modes=[int(m) for m in ale.getAvailableModes()],
            difficulties=[int(d) for d in ale.getAvailableDifficulties()],
        )
    return facts


@pytest.mark.parametrize("name", NAMES)
def test_game_entry_matches_ale(name, ale_facts):
    g = GAMES[NAMES.index(name)]
    f = ale_facts[name]
    assert g["md5"] == f["md5"]
    assert g["minimal_actions"] == f["minimal"]
    assert g["modes"] == f["modes"]
    assert g["default_mode"] == f["modes"][0]
    assert g["difficulties"] == f["difficulties"]
    assert g["default_difficulty"] == 0


def test_md5_matches_package_manifest():
    import ale_py
    manifest = json.loads((pathlib.Path(ale_py.__file__).parent / "roms" / "md5.json").read_text())
    for g in GAMES:
        assert manifest[g["name"] + ".bin"] == g["md5"]
