// games.h: per-game reward / lives / terminal bookkeeping for the Atari-57 set,
// reproducing what ale-py 0.12.1 reports frame by frame.
//
// Usage (mirrors where ALE touches its game settings, see data/games.json "reset"):
//   * game_reset(id, g) at the point ALE resets its game settings: after the 60 NOOP
//     frames and the first 4-frame soft reset of reset_game;
//   * game_set_mode(id, g, mode, ram) once the mode-select presses are done (before the
//     second soft reset), on every reset_game, default mode included; only Alien, Demon
//     Attack and Gravitar keep anything from it;
//   * game_step(id, g, ram, &reward) after EVERY emulated frame from then on, including
//     the soft-reset frames, the NOOP frame that follows each SELECT press, the starting
//     actions and, of course, the frames of act(). (ALE also steps during the first 64
//     frames of reset_game, but game_reset wipes all of that, so they may be skipped.)
//   * an act() frame is not emulated at all once game_terminal() is true (reward 0).
//
// ram128[i] is RIOT RAM at $80 + i. Nothing here needs more than those 128 bytes.
//
// GameState keeps the settings' own memory: `score` is the last decoded score (the
// baseline the next reward is measured from), `lives` the raw lives counter the settings
// keep (game_lives() applies the reporting rule, e.g. 0 once terminal), `terminal` the
// value game_terminal() reports, and aux[] a few per-game extras (flags, previous values).
#pragma once

#include "hs_prelude.h"
#include "games_ids.h"

namespace hs {

struct GameState {
  int32_t score;
  int32_t reward;    // reward of the most recent game_step
  int32_t lives;
  int32_t terminal;  // 0 or 1
  int32_t aux[4];
};

// 8 x int32 with no padding: a batch of states is a plain int32 array of shape (n, 8).
static_assert(sizeof(GameState) == 32, "GameState layout is part of the interface");

namespace games_detail {

HS_HD HS_INLINE int32_t rd(const uint8_t* ram, int32_t addr) { return ram[addr & 0x7F]; }

// Two packed decimal digits, taken at face value even when a nibble is above 9.
HS_HD HS_INLINE int32_t packed2(int32_t v) { return (v >> 4) * 10 + (v & 0x0F); }

// Score spread over up to three packed bytes, lowest two digits first; pass -1 for
// a byte the game does not have.
HS_HD HS_INLINE int32_t packed_score(const uint8_t* ram, int32_t lo, int32_t mid, int32_t hi) {
  int32_t total = packed2(rd(ram, lo));
  if (mid >= 0) total += 100 * packed2(rd(ram, mid));
  if (hi >= 0) total += 10000 * packed2(rd(ram, hi));
  return total;
}

// Low nibbles of consecutive bytes as decimal digits (lowest first); a nibble of 0xA is
// the game's blank digit and counts as zero.
HS_HD HS_INLINE int32_t nibble_digits(const uint8_t* ram, int32_t first, int32_t count) {
  int32_t total = 0, weight = 1;
  for (int32_t k = 0; k < count; ++k) {
    int32_t d = rd(ram, first + k) & 0x0F;
    if (d == 0x0A) d = 0;
    total += d * weight;
    weight *= 10;
  }
  return total;
}

// Replace the running score and return the difference from the previous one.
HS_HD HS_INLINE int32_t advance(GameState& g, int32_t now) {
  int32_t diff = now - g.score;
  g.score = now;
  return diff;
}

// A byte of the cartridge's extra RAM by its read-port address ($F080-$F0FF); 0 if absent.
HS_HD HS_INLINE int32_t xrd(const uint8_t* xram, int32_t addr) { return xram ? xram[addr & 0x7F] : 0; }

// Two's-complement int32 sums, as ALE's ints behave when they overflow.
HS_HD HS_INLINE int32_t wrap_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
HS_HD HS_INLINE int32_t wrap_sub(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }

HS_HD HS_INLINE int32_t alien_digit(int32_t v) { return v == 0x80 ? 0 : (v >> 3); }

// River Raid draws digits from pointers that step by 8; anything else reads as 0.
HS_HD HS_INLINE int32_t riverraid_digit(int32_t v) { return (v % 8 == 0 && v <= 72) ? v / 8 : 0; }

HS_HD HS_INLINE int32_t riverraid_lives(int32_t b) {
  if (b == 0x58) return 4;
  if (b == 0x59) return 1;
  return b / 8 + 1;
}

}  // namespace games_detail

// Lives a game starts with in its settings' memory right after game_reset.
HS_HD HS_INLINE int32_t game_initial_lives(int32_t game) {
  switch (game) {
    case kGameHauntedHouse:
      return 9;
    case kGameAtlantis: case kGameGravitar: case kGameJamesbond: case kGameMontezumaRevenge:
      return 6;
    case kGameBankHeist: case kGameBattleZone: case kGameBreakout: case kGameCrazyClimber:
    case kGamePhoenix: case kGameStarGunner: case kGameTimePilot: case kGameUpNDown:
    case kGameZaxxon:
      return 5;
    case kGameAssault: case kGameAsteroids: case kGameDemonAttack: case kGameFrostbite:
    case kGameHero: case kGameKungFuMaster: case kGameQbert: case kGameRobotank:
    case kGameSeaquest: case kGameVenture: case kGameYarsRevenge:
    case kGameElevatorAction: case kGameFrogger:
      return 4;
    case kGameAlien: case kGameAmidar: case kGameAsterix: case kGameBeamRider:
    case kGameBerzerk: case kGameCentipede: case kGameChopperCommand: case kGameDefender:
    case kGameGopher: case kGameKangaroo: case kGameKrull: case kGameMsPacman:
    case kGameNameThisGame: case kGamePitfall: case kGameRoadRunner: case kGameSolaris:
    case kGameSpaceInvaders: case kGameTutankham: case kGameVideoPinball:
    case kGameWizardOfWor:
    case kGameGalaxian:
      return 3;
    case kGameDonkeyKong:
      return 2;
    case kGameKeystoneKapers: return 3;
    case kGameKingKong: return 3;
    case kGameLostLuggage: return 3;
    case kGameMrDo: return 4;
    case kGamePacman: return 4;
    case kGamePitfall2: return 1;
    case kGamePooyan: return 3;
    case kGameSirLancelot: return 3;
    case kGameTrondead: return 5;
    case kGameTurmoil: return 4;
    case kGameVideoChess: return 1;
    default:
      // games without a lives counter, River Raid (lives live in aux[0]), and Atlantis II
      // and E.T., whose counters start at 0 (ALE never initialises Atlantis II's)
      return 0;
  }
}

HS_HD HS_INLINE void game_reset(int32_t game, GameState& g) {
  int32_t timer0 = 0, timer1 = 0;  // Video Cube's timer history survives ALE's reset
  if (game == kGameVideoCube) {
    timer0 = g.aux[0];
    timer1 = g.aux[1];
  }
  g.reward = 0;
  g.terminal = 0;
  g.lives = game_initial_lives(game);
  g.aux[0] = g.aux[1] = g.aux[2] = g.aux[3] = 0;
  // Two games measure their first reward from a non-zero baseline.
  g.score = game == kGamePitfall ? 2000 : (game == kGamePrivateEye ? 1000 : 0);
  if (game == kGameQbert) g.aux[0] = 2;          // previous lives byte
  if (game == kGameRiverraid) g.aux[0] = 0x58;   // previous lives byte
  if (game == kGameHangman) g.aux[1] = g.aux[2] = -1;  // last two timer readings
  if (game == kGamePitfall2) g.score = 4000;
  if (game == kGameVideoCube) {
    g.aux[0] = timer0;
    g.aux[1] = timer1;
    g.aux[2] = 1;  // cube number (ALE keeps it but never uses it)
  }
}

// Effects of ALE's mode selection on the settings' memory (call after the SELECT presses,
// before the soft reset that follows them).
HS_HD HS_INLINE void game_set_mode(int32_t game, GameState& g, int32_t mode, const uint8_t* ram128) {
  switch (game) {
    case kGameAlien:
      g.lives = games_detail::rd(ram128, 0xC0) & 0x0F;
      break;
    case kGameDemonAttack:
      g.aux[0] = 1;  // the next step may not report game over
      break;
    case kGameGravitar:
      g.lives = mode == 1 ? 15 : (mode == 3 ? 100 : (mode == 4 ? 25 : 6));
      break;
    case kGameVideoCheckers:
      g.aux[0] = mode >= 11;  // reverse checkers: losing all pieces wins
      break;
    case kGameVideoCube:
      if (mode >= 100) g.aux[2] = mode / 100;
      break;
    default:
      break;
  }
}

}  // namespace hs

#include "games_step.h"

namespace hs {

// restoreState: settings fields ALE does not serialise keep their current values.
HS_HD HS_INLINE void game_keep_unsaved(int32_t game, GameState& restored, const GameState& current) {
  if (game == kGameAtlantis2) restored.lives = current.lives;
  if (game == kGameHangman) {  // the two timer readings
    restored.aux[1] = current.aux[1];
    restored.aux[2] = current.aux[2];
  }
}

// Lives as ALE reports them (ALEInterface::lives()).
HS_HD HS_INLINE int32_t game_lives(int32_t game, const GameState& g) {
  switch (game) {
    // reported even after game over
    case kGameAlien: case kGameChopperCommand:
      return g.lives;
    // always one, game over or not
    case kGameAdventure:
      return 1;
    // no lives counter at all
    case kGameBowling: case kGameBoxing: case kGameDoubleDunk: case kGameEnduro:
    case kGameFishingDerby: case kGameFreeway: case kGameIceHockey: case kGamePong:
    case kGamePrivateEye: case kGameSkiing: case kGameTennis:
    case kGameCarnival: case kGameJourneyEscape:
      return 0;
    case kGameKoolaid: case kGameLaserGates:
      return 0;
    // ALE's fallback rule: one life until game over
    case kGameSurround:
    case kGameAirRaid: case kGameBackgammon: case kGameBasicMath: case kGameBlackjack:
    case kGameCasino: case kGameCrossbow: case kGameDarkchambers: case kGameEarthworld:
    case kGameEntombed: case kGameFlagCapture: case kGameHangman: case kGameHumanCannonball:
      return g.terminal ? 0 : 1;
    case kGameKaboom: case kGameKlax: case kGameMiniatureGolf: case kGameOthello:
    case kGameSpaceWar: case kGameSuperman: case kGameTicTacToe3d: case kGameVideoCheckers:
    case kGameVideoCube: case kGameWordZapper:
      return g.terminal ? 0 : 1;
    case kGameRiverraid:
      return g.terminal ? 0 : games_detail::riverraid_lives(g.aux[0]);
    case kGameNone:
      return 0;
    default:
      return g.terminal ? 0 : g.lives;
  }
}

HS_HD HS_INLINE bool game_terminal(int32_t game, const GameState& g) {
  (void)game;
  return g.terminal != 0;
}

// ALE's isLegal: an illegal action is played as NOOP (every game allows all 18 but Lost
// Luggage and Skiing, which refuse the fire button). a is a player action 0-17.
HS_HD HS_INLINE bool game_action_legal(int32_t game, int32_t a) {
  if (game == kGameLostLuggage || game == kGameSkiing) return !(a == 1 || (a >= 10 && a <= 17));
  return true;
}

// A clone's bytes of the settings: what restore overwrites from the live environment
// (game_keep_unsaved, game_after_restore) is zeroed, and Miniature Golf's five counters,
// which ALE saves as bools, become 0 or 1. Restoring the result gives what restoring
// `g` gives; equal saves give equal bytes, as in ALE.
HS_HD HS_INLINE void game_clone_canonical(int32_t game, GameState& g) {
  switch (game) {
    case kGameAtlantis2: g.lives = 0; break;
    case kGameHangman: g.aux[1] = g.aux[2] = 0; break;
    case kGameMiniatureGolf:
      g.score = g.score != 0;
      for (int32_t k = 0; k < 4; ++k) g.aux[k] = g.aux[k] != 0;
      break;
    case kGameVideoCheckers: g.aux[0] = 0; break;
    case kGameVideoCube: g.aux[0] = g.aux[1] = 0; break;
    default: break;
  }
}

// The settings after ALE's restoreState: ALE reloads only what its saveState wrote, and
// reads Miniature Golf's five counters back as ints although it wrote them as bools, so
// each becomes one of the serializer's two bool patterns. `now` is the state before the
// restore, `g` the restored one.
HS_HD HS_INLINE void game_after_restore(int32_t game, GameState& g, const GameState& now) {
  const int32_t kTrue = (int32_t)0xFAB1FAB2u, kFalse = (int32_t)0xBAD1BAD2u;
  switch (game) {
    case kGameMiniatureGolf:
      g.score = g.score ? kTrue : kFalse;
      for (int32_t k = 0; k < 4; ++k) g.aux[k] = g.aux[k] ? kTrue : kFalse;
      break;
    case kGameVideoCheckers:
      g.aux[0] = now.aux[0];  // the reverse flag is not saved
      break;
    case kGameVideoCube:
      g.aux[0] = now.aux[0];  // nor is the timer history
      g.aux[1] = now.aux[1];
      break;
    default:
      break;
  }
}

}  // namespace hs
