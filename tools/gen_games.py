#!/usr/bin/env python3
"""Single source of the static game table: writes data/games.json and cuda/games_ids.h.

Run from anywhere: `python tools/gen_games.py` (add --check to verify the outputs are
up to date without writing). The table below states, for each game (the Atari-57 and
more of the ROMs ale-py ships), what ale-py 0.12.1 does with it;
tests/test_games_table.py checks it against ale-py.

Per game:
  name          snake_case ROM name (ale_py.roms.get_rom_path(name))
  md5           md5 of the ROM ale-py ships
  ram           the RAM bytes ($80-$FF) the game's per-frame rule reads (cuda/games_step.h)
  actions       minimal action set (ALE action ids, NOOP=0 ... DOWNLEFTFIRE=17)
  modes         available game modes; the first one is the default
  difficulties  available difficulty switch settings; 0 is the default
  start         actions played, one frame each, at the end of reset_game
  select        how ALE brings the game into the wanted mode (see SELECT_DOC); games
                without it take no action (mode 0 only)
  props         per-ROM emulator properties that differ from the defaults (PROP_DEFAULTS)
  settings      ALE settings the game forces when its ROM is loaded (ALE's
                modifyEnvironmentSettings; only paddle_max so far)
  illegal       actions ALE's isLegal refuses (played as NOOP; left out of the legal set)
  ale           False for ROMs ale-py ships but ALE has no game settings for (it refuses
                to load them); hybridsim plays them with reward 0, never terminal, lives 0
                and all 18 actions

The cartridge mapper and TV standard of every ROM are not written here: they are
computed from the ale-py ROMs when the table is generated (ALE's mapper detection in
hybridsim.carts, and the console's 60-frame NTSC/PAL check), so the generator needs
ale-py and the built extension.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JSON_PATH = os.path.join(REPO, "data", "games.json")
HEADER_PATH = os.path.join(REPO, "cuda", "games_ids.h")

ACTION_NAMES = ["NOOP", "FIRE", "UP", "RIGHT", "LEFT", "DOWN", "UPRIGHT", "UPLEFT", "DOWNRIGHT",
                "DOWNLEFT", "UPFIRE", "RIGHTFIRE", "LEFTFIRE", "DOWNFIRE", "UPRIGHTFIRE",
                "UPLEFTFIRE", "DOWNRIGHTFIRE", "DOWNLEFTFIRE"]

# Emulator property defaults (names as in Stella's property files).
PROP_DEFAULTS = {
    "cart": "AUTO-DETECT",        # Cartridge.Type
    "format": "AUTO-DETECT",      # Display.Format
    "ystart": "34",               # Display.YStart
    "height": "210",              # Display.Height
    "hmove_blanks": "YES",        # Emulation.HmoveBlanks
    "left": "JOYSTICK",           # Controller.Left
    "right": "JOYSTICK",          # Controller.Right
    "swap_ports": "NO",           # Console.SwapPorts
    "swap_paddles": "NO",         # Controller.SwapPaddles
    "left_diff": "B",             # Console.LeftDifficulty
    "right_diff": "B",            # Console.RightDifficulty
}
PROP_LONG_NAMES = {
    "cart": "Cartridge.Type", "format": "Display.Format", "ystart": "Display.YStart",
    "height": "Display.Height", "hmove_blanks": "Emulation.HmoveBlanks",
    "left": "Controller.Left", "right": "Controller.Right", "swap_ports": "Console.SwapPorts",
    "swap_paddles": "Controller.SwapPaddles", "left_diff": "Console.LeftDifficulty",
    "right_diff": "Console.RightDifficulty",
}

SELECT_DOC = """\
Mode selection, run by reset_game between game_reset and the second soft reset.
Terms: a 'select press' of hold h = h frames with the SELECT switch down (the game
settings are NOT stepped on these), then one NOOP frame that IS stepped; every select
press also advances the frame counters by one. 'act' = a full ALE act() call (frame_skip
frames, sticky-action draws, counters advanced, skipped once terminal).
Generic recipe (fields ram, hold, and optionally before, also, offset):
  run each step of `before` ('act', action, n) = n act calls; ('select', h) = one
  select press of hold h; ('soft_reset',) = a 4-frame soft reset);
  then while RAM[ram] != mode + offset (and, with `also`, != mode + also): select press
  of hold `hold`. With `values` (a map mode -> byte) the wanted byte is values[mode]
  instead of mode + offset; with `ram2` the loop also waits for RAM[ram2] == value2;
  with `cart_ram` the byte is the cartridge's extra RAM at index `ram` (read port
  $F080 + ram) instead of RIOT RAM.
Custom recipes:
  ms_pacman: mode 0 presses (hold 10) until RAM[0x99] == 1 and RAM[0xA1] == 1; any other
    mode presses (hold 10) until RAM[0x99] == mode and RAM[0xA1] == 0.
  double_dunk: one select press (hold 1); then 'down' twice; then for each option bit
    (mode & 1 -> RAM[0x80] bit 0x08, mode & 2 -> 0x10, mode & 4 -> 0x04, mode & 8 -> 0x20),
    in that order, a 'down' followed, if the mode bit is set, by pairs act(RIGHT),
    act(NOOP) until the RAM[0x80] bit is set and then pairs act(LEFT), act(NOOP) until it
    is clear again. 'down' = pairs act(DOWN), act(NOOP) until RAM[0xB0] changes. After
    the soft reset that ends every recipe it adds act(UPFIRE), act(NOOP) (before the
    starting actions).
  adventure: while (RAM[0xDD] >> 1) & 3 != mode: one select press whose hold is
    2 + (next 32-bit draw of the environment RNG) % 256, then act(NOOP).
  frogger: presses (hold 2) until RAM[0xDD] == 1 + 2 * mode.
  human_cannonball: presses (hold 2) until RAM[0xB6] == mode + 1 and RAM[0xB7] == 1.
  video_cube: mode = 100 * cube + variant (variant 0-2; cube 0 means cube 1). Select
    presses (hold 2) until RAM[0xFB] & 0x1F == (0, 2, 8)[variant]; a 4-frame soft reset;
    then act(RIGHT) until the packed-decimal RAM[0x9F] equals the cube number.
Whatever the recipe, it ends with a 4-frame soft reset (RESET held, settings stepped),
then the starting actions follow. Games with a single mode 0 and no select entry do
nothing here except that soft reset. After the presses, call hs::game_set_mode."""

RESET_DOC = """\
reset_game, frame by frame: system reset (not RAM); 60 NOOP frames; 4 frames holding
RESET; game settings reset (hs::game_reset); mode selection (see select doc, then
hs::game_set_mode); 4 frames holding RESET; the starting actions (one frame each).
The settings are stepped (hs::game_step) after every emulated frame except the frames
during which SELECT is held; the episode frame counter is zeroed at the start, so act()
calls and select presses inside mode selection leave it non-zero (berzerk, double_dunk)."""

GAMES = []


def G(name, md5, ram, actions, modes, difficulties, start=(), select=None, props=None,
      settings=None, illegal=(), ale=True):
    GAMES.append(dict(name=name, md5=md5, ram=list(ram), actions=list(actions), modes=list(modes),
                      difficulties=list(difficulties), start=list(start), select=select,
                      props=dict(props or {}), settings=dict(settings or {}), illegal=list(illegal),
                      ale=ale))


# fmt: off
G('adventure', '4b27f5397c442d25f0c418ccdacf1926',
  ram=[0xB9, 0xE0],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2], difficulties=[0, 1, 2, 3],
  select=dict(custom='adventure'),
  props={'right': 'NONE'}),
G('air_raid', '35be55426c1fec32dfb503b4f0651572',
  ram=[0xA7, 0xA8, 0xA9, 0xAA],
  actions=[0, 1, 3, 4, 11, 12], modes=[1, 2, 3, 4, 5, 6, 7, 8], difficulties=[0],
  start=[1],
  select=dict(ram=0xAA, hold=10, before=[('select', 20)])),
G('alien', 'f1a0a23e6464d954e3a9579c4ccd01c8',
  ram=[0x83, 0x85, 0x87, 0x89, 0x8B, 0xC0],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3], difficulties=[0, 1, 2, 3],
  select=dict(ram=0x81, hold=1)),
G('amidar', 'acb7750b4d0c4bd34969802a7deb2990',
  ram=[0xD6, 0xD9, 0xDA, 0xDB],
  actions=[0, 1, 2, 3, 4, 5, 10, 11, 12, 13], modes=[0], difficulties=[0, 3],
  props={'right': 'NONE', 'left_diff': 'A', 'right_diff': 'A'}),
G('assault', 'de78b3a064d374390ac0710f95edde92',
  ram=[0x80, 0x81, 0x82, 0xE5],
  actions=[0, 1, 2, 3, 4, 11, 12], modes=[0], difficulties=[0]),
G('asterix', '89a68746eff7f266bbf08de2483abe55',
  ram=[0xC7, 0xD3, 0xDE, 0xDF, 0xE0],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0], difficulties=[0],
  start=[1]),
G('asteroids', 'ccbd36746ed4525821a8083b0d6d2c2c',
  ram=[0xBC, 0xBD, 0xBE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 128], difficulties=[0, 3],
  select=dict(ram=0x80, hold=2),
  props={'hmove_blanks': 'NO'}),
G('atlantis', '9ad36e699ef6f45d9eb6c4cf90475c9f',
  ram=[0xA1, 0xA2, 0xA3, 0xF1],
  actions=[0, 1, 11, 12], modes=[0, 1, 2, 3], difficulties=[0],
  select=dict(ram=0x8D, hold=2)),
G('atlantis2', '826481f6fc53ea47c9f272f7050eedf7',
  ram=[0xA1, 0xA2, 0xA3, 0xF1],
  actions=[0, 1, 11, 12], modes=[0], difficulties=[0]),
G('backgammon', '8556b42aa05f94bc29ff39c39b11bff4',
  ram=list(range(0x80, 0x9C)),
  actions=[1, 3, 4], modes=[0], difficulties=[3],
  select=dict(ram=0xDC, hold=1, offset=3),
  props={'left': 'PADDLES'}, settings={'paddle_max': 1000000}),
G('bank_heist', '00ce0bdd43aed84a983bef38fe7f5ee3',
  ram=[0xCE, 0xD5, 0xD8, 0xD9, 0xDA],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 4, 8, 12, 16, 20, 24, 28], difficulties=[0, 1, 2, 3],
  select=dict(ram=0x80, hold=1)),
G('basic_math', '819aeeb9a2e11deb54e6de334f843894',
  ram=[0x84, 0x86],
  actions=[0, 1, 2, 3, 4, 5], modes=[5, 6, 7, 8], difficulties=[0, 2, 3],
  select=dict(ram=0xC5, hold=2)),
G('battle_zone', '41f252a66c6301f1e8ab3612c19bc5d4',
  ram=[0x9D, 0x9E, 0xBA],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[1, 2, 3], difficulties=[0],
  select=dict(ram=0xA1, hold=2),
  props={'hmove_blanks': 'NO'}),
G('beam_rider', '79ab4123a83dc11d468fb2108ea09e2e',
  ram=[0x85, 0x89, 0x8A, 0x8B, 0x8C],
  actions=[0, 1, 2, 3, 4, 6, 7, 11, 12], modes=[0], difficulties=[0, 1],
  start=[3]),
G('berzerk', '136f75c4dd02c29283752b7e5799f978',
  ram=[0xDA, 0xDD, 0xDE, 0xDF],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18], difficulties=[0],
  select=dict(ram=0x80, hold=2, before=[('act', 0, 20)])),
G('blackjack', '0a981c03204ac2b278ba392674682560',
  ram=[0x86, 0x89],
  actions=[0, 1, 2, 5], modes=[0], difficulties=[0, 1, 2, 3],
  props={'left': 'PADDLES'}, settings={'paddle_max': 795000}),
G('bowling', 'c9b7afad3bfd922e006a6bfc1d4f3fe7',
  ram=[0xA1, 0xA4, 0xA6],
  actions=[0, 1, 2, 5, 10, 13], modes=[0, 2, 4], difficulties=[0, 1],
  select=dict(ram=0x82, hold=2)),
G('boxing', 'c3ef5c4653212088eda54dc91d787870',
  ram=[0x90, 0x91, 0x92, 0x93],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1, 2, 3]),
G('breakout', 'f34f08e5eb96e500e851a80be3277a56',
  ram=[0xB9, 0xCC, 0xCD],
  actions=[0, 1, 3, 4], modes=[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44], difficulties=[0, 1],
  select=dict(ram=0xB2, hold=1),
  props={'left': 'PADDLES'}),
G('carnival', '028024fb8e5e5f18ea586652f9799c96',
  ram=[0x83, 0xAD, 0xAE],
  actions=[0, 1, 3, 4, 11, 12], modes=[0], difficulties=[0],
  props={'ystart': '26', 'height': '214'}),
G('casino', 'b816296311019ab69a21cb9e9e235d12',
  ram=[0x8C, 0x95, 0x9E, 0xD3, 0xD4],
  actions=[0, 1, 2, 5], modes=[0, 2, 3], difficulties=[0, 1, 2, 3],
  start=[0] * 60 + [1, 1],
  select=dict(ram=0xD4, hold=2),
  props={'left': 'PADDLES'}),
G('centipede', '91c2098e88a6b13f977af8c003e0bca5',
  ram=[0xA6, 0xED, 0xF4, 0xF5, 0xF6],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[22, 86], difficulties=[0],
  select=dict(ram=0xA7, hold=2)),
G('chopper_command', 'c1cb228470a87beb5f36e90ac745da26',
  ram=[0xC2, 0xE4, 0xEC, 0xEE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2], difficulties=[0, 1],
  select=dict(ram=0xE0, hold=2)),
G('combat', '0ef64cdbecccb7049752a3de0b7ade14',
  ram=[],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  ale=False,
  props={'ystart': '39', 'height': '256'}),
G('crazy_climber', '55ef7b65066428367844342ed59f956c',
  ram=[0x82, 0x83, 0x84, 0x85, 0xAA],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1, 2, 3], difficulties=[0, 1],
  select=dict(ram=0x80, hold=2)),
G('crossbow', '8cd26dcf249456fe4aeb8db42d49df74',
  ram=[0x8B, 0x8C, 0x8D, 0xE7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2, 4, 6], difficulties=[0, 1],
  select=dict(ram=0x8D, hold=2, offset=1)),
G('darkchambers', '106855474c69d08c8ffa308d47337269',
  ram=[0xCA, 0xCC, 0xCF, 0xD5],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  start=[0] * 486,
  props={'hmove_blanks': 'NO'}),
G('defender', '0f643c34e40e3f1daafd9c524d3ffe64',
  ram=[0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xC2],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[1, 2, 3, 4, 5, 6, 7, 8, 9, 16], difficulties=[0, 1],
  select=dict(ram=0x9B, hold=2)),
G('demon_attack', 'f0e0addc07971561ab80d9abe1b8d333',
  ram=[0x81, 0x83, 0x85, 0xF1, 0xF2],
  actions=[0, 1, 3, 4, 11, 12], modes=[1, 3, 5, 7], difficulties=[0, 1],
  select=dict(ram=0xEA, hold=1)),
G('donkey_kong', '36b20c427975760cb9cf4a47e41369e4',
  ram=[0x87, 0x88, 0x8B, 0x8F, 0xA3],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('double_dunk', '368d88a6c071caba60b4f778615aae94',
  ram=[0xF6, 0xF7, 0xFE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], difficulties=[0],
  start=[10],
  select=dict(custom='double_dunk')),
G('earthworld', '5aea9974b975a6a844e6df10d2b861c4',
  ram=[0xA7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('elevator_action', '71f8bacfbdca019113f3f0801849057e',
  ram=[0x81, 0x83, 0x87, 0x88, 0x89],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  start=[1] * 16),
G('enduro', '94b92a882f6dbaa6993a46e2dcc58402',
  ram=[0xAB, 0xAC, 0xAD, 0xAF],
  actions=[0, 1, 3, 4, 5, 8, 9, 11, 12], modes=[0], difficulties=[0],
  start=[1]),
G('entombed', '6b683be69f92958abe0e2a9945157ad5',
  ram=[0xC7, 0xE3],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 2],
  start=[1, 0, 0, 0, 0, 0]),
G('et', '615a3bf251a38eb6638cdc7ffbde5480',
  ram=[0x80, 0xDF, 0xE0, 0xE1, 0xE5],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2], difficulties=[0, 1, 2, 3],
  select=dict(ram=0xEA, hold=25, offset=1)),
G('fishing_derby', 'b8865f05676e64f3bec72b9defdacfa7',
  ram=[0xBD, 0xBE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1, 2, 3]),
G('flag_capture', '30512e0e83903fc05541d2f6a6a62654',
  ram=[0xEA, 0xEB],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[8, 9, 10], difficulties=[0],
  select=dict(ram=0xD6, hold=2)),
G('freeway', '8e0ab801b1705a740b476b7f588c6d16',
  ram=[0x96, 0xE7],
  actions=[0, 2, 5], modes=[0, 1, 2, 3, 4, 5, 6, 7], difficulties=[0, 1],
  select=dict(ram=0x80, hold=1)),
G('frogger', '081e2c114c9c20b61acf25fc95c71bf4',
  ram=[0xCC, 0xCE, 0xD0],
  actions=[0, 2, 3, 4, 5], modes=[0, 1, 2], difficulties=[0, 1],
  select=dict(custom='frogger')),
G('frostbite', '4ca73eb959299471788f0b685c3ba0b5',
  ram=[0xC8, 0xC9, 0xCA, 0xCC, 0xF1],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2], difficulties=[0],
  select=dict(ram=0x80, hold=1)),
G('galaxian', '211774f4c5739042618be8ff67351177',
  ram=[0xAC, 0xAD, 0xAE, 0xB9, 0xBF],
  actions=[0, 1, 3, 4, 11, 12], modes=[1, 2, 3, 4, 5, 6, 7, 8, 9], difficulties=[0, 1],
  select=dict(ram=0xB3, hold=1)),
G('gopher', 'c16c79aad6272baffb8aae9a7fff0864',
  ram=[0xB0, 0xB1, 0xB2, 0xB4],
  actions=[0, 1, 2, 3, 4, 10, 11, 12], modes=[0, 2], difficulties=[0, 1],
  start=[1],
  select=dict(ram=0xD3, hold=5, before=[('soft_reset',)])),
G('gravitar', '8ac18076d01a6b63acf6e2cab4968940',
  ram=[0x81, 0x84, 0x87, 0x88, 0x89],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4], difficulties=[0],
  start=[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
  select=dict(ram=0x80, hold=10)),
G('hangman', 'f16c709df0a6c52f47ff52b9d95b7d8d',
  ram=[0xEB, 0xEC, 0xF1],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3], difficulties=[0, 1],
  select=dict(ram=0xEE, hold=2)),
G('haunted_house', 'f0a6e99f5875891246c3dbecbf2d2cea',
  ram=[0x82, 0x96, 0x99],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8], difficulties=[0, 1],
  select=dict(ram=0xCC, hold=2)),
G('hero', 'fca4a5be1251927027f2c24774a02160',
  ram=[0xB3, 0xB7, 0xB8, 0xB9],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4], difficulties=[0],
  select=dict(ram=0x80, hold=1)),
G('human_cannonball', '7972e5101fa548b952d852db24ad6060',
  ram=[0xB6, 0xB7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4, 5, 6, 7], difficulties=[0, 1],
  select=dict(custom='human_cannonball')),
G('ice_hockey', 'a4c08c4994eb9d24fb78be1793e82e26',
  ram=[0x86, 0x87, 0x8A, 0x8B],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2], difficulties=[0, 1, 2, 3],
  select=dict(ram=0x80, hold=2)),
G('jamesbond', 'e51030251e440cffaab1ac63438b44ae',
  ram=[0x86, 0x8C, 0xDC, 0xDD, 0xDE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1], difficulties=[0],
  select=dict(ram=0x8C, hold=20, also=0x48)),
G('journey_escape', '718ae62c70af4e5fd8e932fee216948a',
  ram=[0x90, 0x91, 0x92, 0x95, 0x96],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1],
  start=[1],
  props={'height': '230'}),
G('joust', '3276c777cbe97cdd2b4a63ffc16b7151',
  ram=[],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  ale=False),
G('kaboom', '5428cdfada281c569c74c7308c7f2c26',
  ram=[0xA1, 0xA3, 0xA4, 0xA5],
  actions=[0, 1, 3, 4], modes=[0], difficulties=[0],
  start=[1],
  props={'left': 'PADDLES'}),
G('kangaroo', '4326edb70ff20d0ee5ba58fa5cb09d60',
  ram=[0xA7, 0xA8, 0xAD],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1], difficulties=[0],
  select=dict(ram=0xBA, hold=2, also=0x80)),
G('keystone_kapers', '6c1f3f2e359dbf55df462ccbcdd2f6bf',
  ram=[0x88, 0x96, 0x9B, 0x9C],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], modes=[0], difficulties=[0],
  start=[40]),
G('king_kong', '0dd4c69b5f9a7ae96a7a08329496779a',
  ram=[0x82, 0x83, 0xEE],
  actions=[0, 1, 2, 3, 4, 5], modes=[0, 1, 2, 3], difficulties=[0],
  select=dict(ram=0xEC, hold=2, values={0: 0, 1: 2, 2: 4, 3: 6})),
G('klax', 'eed9eaf1a0b6a2b9bc4c8032cb43e3fb',
  ram=[0xA8] + list(range(0xB3, 0xCC)),
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2], difficulties=[0],
  start=[1, 0],
  select=dict(ram=0x6A, cart_ram=True, hold=2)),
G('koolaid', '534e23210dd1993c828d944c6ac4d9fb',
  ram=[0x80, 0x81, 0xD1],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0], difficulties=[0]),
G('krull', '4baada22435320d185c95b7dd2bcdb24',
  ram=[0x80, 0x9C, 0x9D, 0x9E, 0x9F, 0xA2],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('kung_fu_master', '5b92a93b23523ff16e2789b820e2a4c5',
  ram=[0x98, 0x99, 0x9A, 0x9D],
  actions=[0, 2, 3, 4, 5, 8, 9, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('laser_gates', '8e4cd60d93fcde8065c1a2b972a26377',
  ram=[0x80, 0x81, 0x82, 0x83],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  start=[40]),
G('lost_luggage', '2d76c5d1aad506442b9e9fb67765e051',
  ram=[0x94, 0x95, 0x96, 0xA5, 0xA9, 0xC8, 0xCA],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1], difficulties=[0, 1],
  start=[1],
  select=dict(ram=0x94, hold=2, values={0: 1, 1: 4}),
  illegal=[1, 10, 11, 12, 13, 14, 15, 16, 17]),
G('mario_bros', 'e908611d99890733be31733a979c62d8',
  ram=[0x87, 0x89, 0x8A],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2, 4, 6], difficulties=[0],
  start=[0] * 10 + [1] * 7,
  select=dict(ram=0x80, hold=5)),
G('maze_craze', 'ed2218b3075d15eaa34e3356025ccca3',
  ram=[],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  ale=False,
  props={'format': 'PAL'}),
G('miniature_golf', 'df62a658496ac98a3aa4a6ee5719c251',
  ram=[0x87, 0x88, 0xAF],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1]),
G('montezuma_revenge', '3347a6dd59049b15a38394aa2dafa585',
  ram=[0x93, 0x94, 0x95, 0xBA, 0xFE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('mr_do', 'aa7bb54d2c189a31bb1fa20099e42859',
  ram=[0x82, 0x83, 0xDA, 0xDB],
  actions=[0, 1, 2, 3, 4, 5, 10, 11, 12, 13], modes=[0, 1, 2, 3], difficulties=[0],
  start=[1],
  select=dict(ram=0x80, hold=5)),
G('ms_pacman', '87e79cd41ce136fd4f72cc6e2c161bee',
  ram=[0xA7, 0xF8, 0xF9, 0xFA, 0xFB],
  actions=[0, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1, 2, 3], difficulties=[0],
  select=dict(custom='ms_pacman'),
  props={'hmove_blanks': 'NO'}),
G('name_this_game', '36306070f0c90a72461551a7a4f3a209',
  ram=[0xC4, 0xC5, 0xC6, 0xC7],
  actions=[0, 1, 3, 4, 11, 12], modes=[8, 24, 40], difficulties=[0, 1],
  select=dict(ram=0xDE, hold=2)),
G('othello', '113cd09c9771ac278544b7e90efe7df2',
  ram=[0xC0, 0xCE, 0xD0],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1, 2], difficulties=[0, 2],
  select=dict(ram=0xDE, hold=2, offset=1)),
G('pacman', 'fc2233fc116faef0d3c31541717ca2db',
  ram=[0x98, 0xCC, 0xCE, 0xD0, 0xE4],
  actions=[0, 2, 3, 4, 5], modes=[0, 1, 2, 3, 4, 5, 6, 7], difficulties=[0, 1],
  select=dict(ram=0xCC, hold=2, offset=1, ram2=0xE6, value2=0)),
G('phoenix', '7e52a95074a66640fcfde124fffd491a',
  ram=[0xC7, 0xC8, 0xC9, 0xCB, 0xCC],
  actions=[0, 1, 3, 4, 5, 11, 12, 13], modes=[0], difficulties=[0]),
G('pitfall', '3e90cf23106f2e08b2781e41299de556',
  ram=[0x80, 0x9E, 0xD5, 0xD6, 0xD7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  start=[2]),
G('pitfall2', '6d842c96d5a01967be9680080dd5be54',
  ram=[0xC7, 0xC8, 0xC9],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  start=[2]),
G('pong', '60e0ea3cbe0913d39803477945e9e5ec',
  ram=[0x8D, 0x8E],
  actions=[0, 1, 3, 4, 11, 12], modes=[0, 1], difficulties=[0, 1, 2, 3],
  select=dict(ram=0x96, hold=2),
  props={'left': 'PADDLES', 'right': 'PADDLES', 'swap_paddles': 'YES'}),
G('pooyan', '4799a40b6e889370b7ee55c17ba65141',
  ram=[0x88, 0x89, 0x8A, 0x96, 0x98],
  actions=[0, 1, 2, 5, 10, 13], modes=[10, 30, 50, 70], difficulties=[0],
  select=dict(ram=0xBD, hold=2, before=[('select', 2)]),
  props={'ystart': '26', 'height': '220'}),
G('private_eye', 'ef3a4f64b6494ba770862768caf04b86',
  ram=[0xC2, 0xC8, 0xC9, 0xCA],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3, 4], difficulties=[0, 1, 2, 3],
  start=[2],
  select=dict(ram=0x80, hold=2)),
G('qbert', '484b0076816a104875e00467d431c2d2',
  ram=[0x88, 0xD9, 0xDA, 0xDB],
  actions=[0, 1, 2, 3, 4, 5], modes=[0], difficulties=[0, 1],
  props={'ystart': '40'}),
G('riverraid', '393948436d1f4cc3192410bb918f9724',
  ram=[0xC0, 0xCD, 0xCF, 0xD1, 0xD3, 0xD5, 0xD7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1]),
G('road_runner', 'ce5cc62608be2cd3ed8abd844efb8919',
  ram=[0xB9, 0xBD, 0xC4, 0xC9, 0xCA, 0xCB, 0xCC],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('robotank', '4f618c2429138e0280969193ed6c107e',
  ram=[0xA8, 0xB4, 0xB5, 0xB6],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('seaquest', '240bfbac5163af4df5ae713985386f92',
  ram=[0xA3, 0xB8, 0xB9, 0xBA, 0xBB],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1]),
G('sir_lancelot', 'dd0cbe5351551a538414fb9e37fc56e8',
  ram=[0x9E, 0x9F, 0xA0, 0xA7, 0xA9],
  actions=[0, 1, 3, 4, 11, 12], modes=[0], difficulties=[0],
  start=[40, 4]),
G('skiing', 'b76fbadc8ffb1f83e2ca08b6fb4d6c9f',
  ram=[0x91, 0xE8, 0xE9, 0xEA],
  actions=[0, 3, 4], modes=[0], difficulties=[0],
  start=[5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
  illegal=[1, 10, 11, 12, 13, 14, 15, 16, 17]),
G('solaris', 'e72eb8d4410152bdcb69e7fba327b420',
  ram=[0xD9, 0xDC, 0xDD, 0xDE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0]),
G('space_invaders', '72ffbef6504b75e69ee1045af9075f66',
  ram=[0x98, 0xC9, 0xE6, 0xE8],
  actions=[0, 1, 3, 4, 11, 12], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], difficulties=[0, 1],
  select=dict(ram=0xDC, hold=2)),
G('space_war', 'b702641d698c60bcdc922dbd8c9dd49c',
  ram=[0x80, 0xA7],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], difficulties=[0],
  select=dict(ram=0xA7, hold=2, values={m: (m // 10) * 16 + m % 10 for m in range(6, 18)})),
G('star_gunner', 'a3c1c70024d7aabb41381adbfb6d3b25',
  ram=[0x83, 0x84, 0x85, 0x86, 0x87],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 1, 2, 3], difficulties=[0],
  select=dict(ram=0xF4, hold=15)),
G('superman', 'a9531c763077464307086ec9a1fd057d',
  ram=[0x80, 0x81, 0x9F, 0xE2, 0xE3],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1, 2, 3]),
G('surround', '4d7517ae69f95cfbc053be01312b7dba',
  ram=[0xF6, 0xF7],
  actions=[0, 2, 3, 4, 5], modes=[0, 2], difficulties=[0, 1, 2, 3],
  select=dict(ram=0xF9, hold=2, offset=1),
  props={'swap_ports': 'YES'}),
G('tennis', '42cdd6a9e42a3639e190722b8ea3fc51',
  ram=[0xC5, 0xC6, 0xC7, 0xC8],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 2], difficulties=[0, 1, 2, 3],
  select=dict(ram=0x80, hold=2)),
G('tetris', 'b0e1ee07fbc73493eac5651a52f90f00',
  ram=[0xF1, 0xF2, 0xF3],
  actions=[0, 1, 3, 4, 5], modes=[0], difficulties=[0]),
G('tic_tac_toe_3d', '0db4f4150fecf77e4ce72ca4d04c052f',
  ram=list(range(0x9A, 0xDA)) + [0xE1, 0xFE, 0xFF],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8], difficulties=[0, 2],
  select=dict(ram=0x88, hold=2)),
G('time_pilot', 'fc2104dd2dadf9a6176c1c1c8f87ced9',
  ram=[0x80, 0x8B, 0x8D, 0x8F, 0xA0],
  actions=[0, 1, 2, 3, 4, 5, 10, 11, 12, 13], modes=[0], difficulties=[0, 1, 2]),
G('trondead', 'fb27afe896e7c928089307b32e5642ee',
  ram=[0xBD, 0xBE, 0xBF, 0xC8],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1]),
G('turmoil', '7a5463545dfb2dcfdafa6074b2f2c15e',
  ram=[0x89, 0x8A, 0xB9, 0xC5, 0xD3],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12], modes=[0, 1, 2, 3, 4, 5, 6, 7, 8], difficulties=[0],
  start=[1],
  select=dict(ram=0xEA, hold=2)),
G('tutankham', '085322bae40d904f53bdcc56df0593fc',
  ram=[0x81, 0x9A, 0x9C, 0x9E],
  actions=[0, 2, 3, 4, 5, 10, 11, 12], modes=[0, 4, 8, 12], difficulties=[0],
  select=dict(ram=0xAB, hold=2)),
G('up_n_down', 'a499d720e7ee35c62424de882a3351b6',
  ram=[0x80, 0x81, 0x82, 0x86, 0x94],
  actions=[0, 1, 2, 5, 10, 13], modes=[0], difficulties=[0, 1, 2, 3],
  start=[1],
  props={'ystart': '30'}),
G('venture', '3e899eba0ca8cd2972da1ae5479b4f0d',
  ram=[0xBF, 0xC6, 0xC7, 0xC8, 0xCD],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0, 1, 2, 3]),
G('video_checkers', '539d26b6e9df0da8e7465f0f5ad863b7',
  ram=list(range(0x80, 0x88)) + list(range(0x89, 0x91)) + list(range(0x92, 0x9A)) + list(range(0x9B, 0xA3)),
  actions=[1, 6, 7, 8, 9], modes=[1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19], difficulties=[0],
  select=dict(ram=0xF6, hold=1, values={m: m + 6 if m >= 11 else m for m in list(range(1, 10)) + list(range(11, 20))})),
G('video_chess', 'f0b7db930ca0e548c41a97160b9f6275',
  ram=[0xE1, 0xEE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], modes=[0, 1, 2, 3, 4], difficulties=[0],
  select=dict(ram=0xEA, hold=1)),
G('video_cube', '3f540a30fdee0b20aed7288e4a5ea528',
  ram=list(range(0xA0, 0xD6)) + [0xDB],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[cube * 100 + m for cube in range(51) for m in range(3)], difficulties=[0, 1],
  start=[0] * 61 + [1, 0, 0],
  select=dict(custom='video_cube')),
G('video_pinball', '107cc025334211e6d29da0b6be46aec7',
  ram=[0x99, 0xA8, 0xAF, 0xB0, 0xB2, 0xB4],
  actions=[0, 1, 2, 3, 4, 5, 10, 11, 12], modes=[0, 2], difficulties=[0, 1],
  select=dict(ram=0xC1, hold=2)),
G('warlords', 'cbe5a166550a8129a5e6d374901dffad',
  ram=[],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0], difficulties=[0],
  ale=False,
  props={'left': 'PADDLES', 'right': 'PADDLES'}),
G('wizard_of_wor', '7e8aa18bc9502eb57daaf5e7c1e94da7',
  ram=[0x86, 0x88, 0x8D, 0xD7, 0xF4],
  actions=[0, 1, 2, 3, 4, 5, 10, 11, 12, 13], modes=[0], difficulties=[0, 1],
  props={'swap_ports': 'YES'}),
G('word_zapper', 'ec3beb6d8b5689e867bafb5d5f507491',
  ram=[0xCF, 0xDC, 0xDE],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=list(range(24)), difficulties=[0, 1, 2, 3],
  start=[0] * 486 + [1, 0, 0],
  select=dict(ram=0xDB, hold=2)),
G('yars_revenge', 'c5930d0e8cdae3e037349bfa08e871be',
  ram=[0x9E, 0xE0, 0xE1, 0xE2],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 32, 64, 96], difficulties=[0, 1],
  start=[1],
  select=dict(ram=0xE3, hold=1, before=[('select', 2)])),
G('zaxxon', 'eea0da9b987d661264cce69a7c13c3bd',
  ram=[0xE8, 0xE9, 0xEA],
  actions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], modes=[0, 8, 16, 24], difficulties=[0],
  select=dict(ram=0x82, hold=10)),
# fmt: on


def enum_name(name):
    return "kGame" + "".join(part.capitalize() for part in name.split("_"))


def rom_facts(entry):
    """(mapper, tv) of a game's ROM as hybridsim detects them, ALE's way: the mapper by
    ALE's auto-detection, the TV standard by emulating the 60 frames ALE looks at."""
    try:  # the installed package; a source tree only when it has built extensions
        from hybridsim import _console
    except ImportError:
        if REPO not in sys.path:
            sys.path.insert(0, REPO)
        for name in [m for m in sys.modules if m == "hybridsim" or m.startswith("hybridsim.")]:
            del sys.modules[name]
        from hybridsim import _console
    from ale_py import roms
    from hybridsim.carts import ale_cart_type
    from hybridsim.console_props import emulator_kwargs
    with open(roms.get_rom_path(entry["name"]), "rb") as f:
        rom = f.read()
    image, kwargs = emulator_kwargs(entry, rom)
    # The TV standard is settled at power-on: no mode selection or starting actions are
    # needed, and any game id will do (this also works while games_ids.h is stale).
    kwargs.update(mode_select=None, starting_actions=())
    emu = _console.Emulator(image, min(_console.GAME_IDS.values()), **kwargs)
    return ale_cart_type(rom), emu.tv_standard


def build_json():
    games = []
    for gid, g in enumerate(GAMES, start=1):
        props = dict(PROP_DEFAULTS)
        props.update(g["props"])
        entry = {
            "id": gid,
            "name": g["name"],
            "md5": g["md5"],
            "settings_ram": g["ram"],
            "minimal_actions": g["actions"],
            "minimal_action_names": [ACTION_NAMES[a] for a in g["actions"]],
            "starting_actions": g["start"],
            "modes": g["modes"],
            "default_mode": g["modes"][0],
            "difficulties": g["difficulties"],
            "default_difficulty": 0,
            "set_mode": g["select"],
            "set_mode_needs_steps": g["select"] is not None,
            "properties": {PROP_LONG_NAMES[k]: v for k, v in props.items()},
            "legal_actions": [a for a in range(18) if a not in g["illegal"]],
            "ale_settings": g["ale"],
        }
        if g["settings"]:
            entry["settings"] = dict(g["settings"])
        entry["mapper"], entry["tv"] = rom_facts(entry)
        games.append(entry)
    return {
        "generated_by": "tools/gen_games.py",
        "source": "ale-py 0.12.1",
        "reset_game": RESET_DOC,
        "set_mode_doc": SELECT_DOC,
        "games": games,
    }


def build_header():
    out = ["// generated by tools/gen_games.py -- do not edit; change the table there.",
           "#pragma once", "", '#include "hs_prelude.h"', "", "namespace hs {", "",
           "enum GameId : int32_t {", "  kGameNone = 0,"]
    for gid, g in enumerate(GAMES, start=1):
        out.append(f"  {enum_name(g['name'])} = {gid},")
    out += ["};", "", f"constexpr int32_t kNumGames = {len(GAMES) + 1};  // ids 0..{len(GAMES)}",
            "", "// snake_case ROM name of a game id (\"\" for an unknown id).",
            "HS_HD inline const char* game_name(int32_t game) {", "  switch (game) {"]
    for gid, g in enumerate(GAMES, start=1):
        out.append(f'    case {gid}: return "{g["name"]}";')
    out += ['    default: return "";', "  }", "}", "", "}  // namespace hs", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the outputs are stale")
    args = ap.parse_args()
    names = [g["name"] for g in GAMES]
    assert names == sorted(names) and len(set(names)) == len(names), "table must be sorted"
    outputs = {JSON_PATH: json.dumps(build_json(), indent=1) + "\n", HEADER_PATH: build_header()}
    stale = []
    for path, text in outputs.items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(path)
            if not args.check:
                with open(path, "w") as f:
                    f.write(text)
    if args.check and stale:
        sys.exit("stale: " + ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
