"""The static game table (tools/gen_games.py -> data/games.json, cuda/games_ids.h)
checked against the installed ale-py 0.12.1: the Atari-57 and the other ROMs it ships.
Games ALE has no settings for (ale-py refuses to load them) are checked for their md5
and their table-only facts; tests/test_no_settings_games.py plays them."""
import hashlib
import json
import pathlib
import subprocess
import sys

import pytest

from conftest import REPO

GAMES = json.loads((REPO / "data" / "games.json").read_text())["games"]
NAMES = [g["name"] for g in GAMES]
ALE_NAMES = [g["name"] for g in GAMES if g["ale_settings"]]
NO_SETTINGS = ["combat", "joust", "maze_craze", "warlords"]

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


def test_no_settings_games_are_marked():
    for name in NO_SETTINGS:
        g = GAMES[NAMES.index(name)]
        assert not g["ale_settings"]
        assert g["minimal_actions"] == list(range(18)) and g["legal_actions"] == list(range(18))
        assert g["modes"] == [0] and g["difficulties"] == [0] and g["set_mode"] is None
    assert all(g["ale_settings"] for g in GAMES if g["name"] not in NO_SETTINGS)


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
    for name in ALE_NAMES:
        path = pathlib.Path(roms.get_rom_path(name))
        ale = ALEInterface()
        ale.setInt("random_seed", 0)
        ale.loadROM(str(path))
        facts[name] = dict(
            md5=hashlib.md5(path.read_bytes()).hexdigest(),
            minimal=[a.value for a in ale.getMinimalActionSet()],
            modes=[int(m) for m in ale.getAvailableModes()],
            difficulties=[int(d) for d in ale.getAvailableDifficulties()],
            legal=[a.value for a in ale.getLegalActionSet()],
            height=ale.getScreenDims()[0],
        )
    return facts


@pytest.mark.parametrize("name", ALE_NAMES)
def test_game_entry_matches_ale(name, ale_facts):
    g = GAMES[NAMES.index(name)]
    f = ale_facts[name]
    assert g["md5"] == f["md5"]
    assert g["minimal_actions"] == f["minimal"]
    assert g["modes"] == f["modes"]
    assert g["default_mode"] == f["modes"][0]
    assert g["difficulties"] == f["difficulties"]
    assert g["default_difficulty"] == 0
    assert g["legal_actions"] == f["legal"]
    # ALE shows 250 rows of a PAL ROM whose Display.Height is the default 210.
    if g["properties"]["Display.Height"] == "210":
        assert f["height"] == (250 if g["tv"] == "PAL" else 210)
    else:  # carnival, journey_escape, pooyan: their own height
        assert f["height"] == int(g["properties"]["Display.Height"])


@pytest.mark.parametrize("name", NAMES)
def test_mapper_and_tv_match_the_emulator(name):
    """games.json's mapper and TV columns are what hybridsim detects on the ROM."""
    from ale_py import roms
    from hybridsim import _console
    from hybridsim.carts import detect_cart_type
    from hybridsim.console_props import emulator_kwargs
    g = GAMES[NAMES.index(name)]
    rom = pathlib.Path(roms.get_rom_path(name)).read_bytes()
    image, kwargs = emulator_kwargs(g, rom)
    assert kwargs["cart_type"] == detect_cart_type(rom)[0] == g["mapper"]
    emu = _console.Emulator(image, g["id"], **kwargs)
    assert emu.tv_standard == g["tv"]
    assert emu.screen_shape[0] == (250 if g["tv"] == "PAL" and g["properties"]["Display.Height"] == "210"
                                   else int(g["properties"]["Display.Height"]))

def test_md5_matches_package_manifest():
    import ale_py
    manifest = json.loads((pathlib.Path(ale_py.__file__).parent / "roms" / "md5.json").read_text())
    for g in GAMES:
        assert manifest[g["name"] + ".bin"] == g["md5"]
