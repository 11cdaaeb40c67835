// games_step.h: the per-frame rule of every game (included by games.h; not standalone).
//
// Each case reads the frame's RAM, updates GameState and yields the frame's reward.
// Addresses are written as CPU addresses ($80-$FF); only the low 7 bits index ram128.
#pragma once

namespace hs {

// xram: the cartridge's 128 bytes of extra (Superchip) RAM, or nullptr; only Klax reads
// it, and reads zeros without it.
HS_HD HS_INLINE void game_step(int32_t game, GameState& g, const uint8_t* ram128, int32_t* reward,
                               const uint8_t* xram = nullptr) {
  using namespace games_detail;
  const uint8_t* m = ram128;
  int32_t r = 0;
  bool over = false;

  switch (game) {
    case kGameAdventure: {
      // The reward, once set by bringing the chalice home, is never cleared again.
      bool chalice_home = rd(m, 0xB9) == 0x12;
      r = chalice_home ? 1 : g.reward;
      over = chalice_home || rd(m, 0xE0) == 2;  // home, or swallowed by a dragon
      break;
    }
    case kGameAirRaid: {
      r = advance(g, packed_score(m, 0xAA, 0xA9, 0xA8));
      over = rd(m, 0xA7) == 0xFF;
      break;
    }
    case kGameAlien: {
      int32_t s = alien_digit(rd(m, 0x8B)) + 10 * alien_digit(rd(m, 0x89)) +
                  100 * alien_digit(rd(m, 0x87)) + 1000 * alien_digit(rd(m, 0x85)) +
                  10000 * alien_digit(rd(m, 0x83));
      r = advance(g, 10 * s);
      g.lives = rd(m, 0xC0) & 0x0F;
      over = g.lives == 0;
      break;
    }
    case kGameAmidar: {
      r = advance(g, packed_score(m, 0xD9, 0xDA, 0xDB));
      int32_t b = rd(m, 0xD6);
      over = b == 0x80;
      g.lives = b & 0x0F;
      break;
    }
    case kGameAssault: {
      r = advance(g, packed_score(m, 0x82, 0x81, 0x80));
      g.lives = rd(m, 0xE5);
      over = g.lives == 0;
      break;
    }
    case kGameAsterix: {
      r = advance(g, packed_score(m, 0xE0, 0xDF, 0xDE));
      g.lives = rd(m, 0xD3) & 0x0F;
      over = rd(m, 0xC7) == 0x01 && g.lives == 1;
      break;
    }
    case kGameAsteroids: {
      r = advance(g, 10 * packed_score(m, 0xBE, 0xBD, -1));
      if (r < 0) r += 100000;  // the displayed score rolls over at 100,000
      g.lives = rd(m, 0xBC) >> 4;
      over = g.lives == 0;
      break;
    }
    case kGameAtlantis: {
      int32_t s = 100 * packed_score(m, 0xA2, 0xA3, 0xA1);
      g.lives = rd(m, 0xF1);
      over = g.lives == 0xFF;
      if (over) {
        r = 0;  // the score is neither paid nor remembered on the game-over frame
      } else {
        r = advance(g, s);
      }
      break;
    }
    case kGameAtlantis2: {
      g.lives = rd(m, 0xF1);
      over = g.lives == 0xFF;
      // as in Atlantis, nothing is paid or remembered on the game-over frame
      r = over ? 0 : advance(g, packed_score(m, 0xA1, 0xA2, 0xA3));
      break;
    }
    case kGameBackgammon: {
      // Points hold signed counts: positive for the computer's pieces, negative for the
      // player's; $80 and $8E count what each side has borne off. ALE adds them up in
      // 8-bit signed arithmetic, which the casts reproduce for out-of-range bytes.
      int32_t player_out = (int8_t)(-(int32_t)(int8_t)rd(m, 0x80));
      int32_t cpu_out = (int8_t)rd(m, 0x8E);
      int32_t player_in = 0, cpu_in = 0;
      for (int32_t a = 0x81; a <= 0x9B; ++a) {
        if (a == 0x8E) continue;
        int32_t p = (int8_t)rd(m, a);
        if (p > 0) cpu_in = (int8_t)(cpu_in + p);
        else if (p < 0) player_in = (int8_t)(player_in - p);
      }
      // Only a consistent board (15 pieces a side) can end the game; the outcome sticks.
      r = g.reward;
      over = g.terminal != 0;
      if (cpu_in + cpu_out == 15 && player_in + player_out == 15) {
        if (player_out == 15) {
          over = true;
          r = 1;
        } else if (cpu_out == 15) {
          over = true;
          r = -1;
        }
      }
      break;
    }
    case kGameBankHeist: {
      r = advance(g, packed_score(m, 0xDA, 0xD9, 0xD8));
      g.lives = rd(m, 0xD5);
      over = rd(m, 0xCE) == 0x01 && g.lives == 0;
      break;
    }
    case kGameBasicMath: {
      r = advance(g, packed2(rd(m, 0x84)));
      over = packed2(rd(m, 0x86)) != 0;
      break;
    }
    case kGameBattleZone: {
      int32_t lo = rd(m, 0x9D), hi = rd(m, 0x9E);
      int32_t d0 = lo >> 4, d1 = hi & 0x0F, d2 = hi >> 4;
      if (d0 == 10) d0 = 0;
      if (d1 == 10) d1 = 0;
      if (d2 == 10) d2 = 0;
      r = advance(g, 1000 * (d0 + 10 * d1 + 100 * d2));
      g.lives = rd(m, 0xBA) & 0x0F;
      over = g.lives == 0;
      break;
    }
    case kGameBeamRider: {
      r = advance(g, packed_score(m, 0x89, 0x8A, 0x8B));
      int32_t shown = rd(m, 0x85) + 1;
      // A drop by one only counts once the game confirms it through $8C.
      if (shown != g.lives - 1 || rd(m, 0x8C) == 0x01) g.lives = shown;
      over = rd(m, 0x85) == 0xFF;
      break;
    }
    case kGameBerzerk: {
      r = advance(g, packed_score(m, 0xDF, 0xDE, 0xDD));
      int32_t b = rd(m, 0xDA);
      over = b == 0xFF;
      g.lives = b + 1;
      break;
    }
    case kGameBlackjack: {
      bool bust = rd(m, 0x86) == 0x0B && rd(m, 0x89) == 0xBB;  // out of chips
      r = advance(g, bust ? 0 : packed_score(m, 0x89, 0x86, -1));
      over = bust || g.score >= 1000;
      break;
    }
    case kGameBowling: {
      r = advance(g, packed_score(m, 0xA1, 0xA6, -1));
      over = rd(m, 0xA4) > 0x10;
      break;
    }
    case kGameBoxing: {
      int32_t me = packed2(rd(m, 0x92)), them = packed2(rd(m, 0x93));
      if (rd(m, 0x92) == 0xC0) me = 100;  // knock-out
      if (rd(m, 0x93) == 0xC0) them = 100;
      r = advance(g, me - them);
      if (me == 100 || them == 100) {
        over = true;
      } else {
        int32_t clock = rd(m, 0x91);
        over = (rd(m, 0x90) >> 4) == 0 && (clock & 0x0F) + 10 * (clock >> 4) == 0;
      }
      break;
    }
    case kGameBreakout: {
      int32_t lo = rd(m, 0xCD), hi = rd(m, 0xCC);
      r = advance(g, (lo & 0x0F) + 10 * (lo >> 4) + 100 * (hi & 0x0F));
      int32_t b = rd(m, 0xB9);
      if (b == 5) g.aux[0] = 1;  // has seen a full set of lives
      over = g.aux[0] != 0 && b == 0;
      g.lives = b;
      break;
    }
    case kGameCarnival: {
      r = advance(g, 10 * packed_score(m, 0xAE, 0xAD, -1));
      over = rd(m, 0x83) == 0;  // out of bullets
      break;
    }
    case kGameCasino: {
      int32_t s = packed_score(m, 0x95, 0x8C, -1);
      r = g.reward;  // kept while input is locked (outside mode 3)
      if (rd(m, 0xD4) == 3) {
        r = s - g.score;
        over = s > 0 && rd(m, 0x9E) == 0xAA;
      } else {
        bool locked = (rd(m, 0xD3) & 0x80) != 0;
        if (!locked) r = s - g.score;
        over = s == 0 || (packed2(rd(m, 0x9E)) > 0 && locked);
      }
      g.score = s;
      break;
    }
    case kGameCentipede: {
      r = advance(g, packed_score(m, 0xF6, 0xF5, 0xF4));
      if (r < 0) r = 0;
      g.lives = ((rd(m, 0xED) >> 4) & 0x07) + 1;
      over = (rd(m, 0xA6) & 0x40) != 0;
      break;
    }
    case kGameChopperCommand: {
      r = advance(g, 100 * packed_score(m, 0xEE, 0xEC, -1));
      g.lives = rd(m, 0xE4) & 0x0F;
      g.aux[1] = g.lives == 0;                 // raw game-over condition
      if (rd(m, 0xC2) & 0x01) g.aux[0] = 1;    // latched: play has begun
      over = g.aux[0] != 0 && g.aux[1] != 0;
      break;
    }
    case kGameCrazyClimber: {
      int32_t s = rd(m, 0x82) + 10 * rd(m, 0x83) + 100 * rd(m, 0x84) + 1000 * rd(m, 0x85);
      r = advance(g, 100 * s);
      if (r < 0) r = 0;
      g.lives = rd(m, 0xAA);
      over = g.lives == 0;
      break;
    }
    case kGameCrossbow: {
      r = advance(g, packed_score(m, 0x8D, 0x8C, 0x8B));
      over = rd(m, 0xE7) == 0x82;
      break;
    }
    case kGameDarkchambers: {
      // aux[0]: health, aux[1]: level. Game over sticks once seen: a level or score that
      // goes down, or health at zero.
      over = g.terminal != 0;
      int32_t level = rd(m, 0xD5);
      if (level < g.aux[1]) {
        over = true;
      } else {
        g.aux[1] = level;
        int32_t s = 10 * packed_score(m, 0xCC, 0xCF, -1);
        if (s < g.score) over = true;
        else r = advance(g, s);
        g.aux[0] = rd(m, 0xCA) & 0x1F;
        if (g.aux[0] == 0) over = true;
      }
      break;
    }
    case kGameDefender: {
      r = advance(g, nibble_digits(m, 0x9C, 6));
      g.lives = rd(m, 0xC2);
      over = g.lives == 0;
      break;
    }
    case kGameDemonAttack: {
      int32_t s = packed_score(m, 0x85, 0x83, 0x81);
      if (rd(m, 0x81) == 0xAB && rd(m, 0x83) == 0xCD && rd(m, 0x85) == 0xEA) s = 0;
      r = advance(g, s);
      int32_t shown = rd(m, 0xF2);
      over = shown == 0 && rd(m, 0xF1) == 0xBD && g.aux[0] == 0;
      g.lives = shown + 1;
      g.aux[0] = 0;
      break;
    }
    case kGameDonkeyKong: {
      r = advance(g, 100 * packed_score(m, 0x88, 0x87, -1));
      g.lives = rd(m, 0xA3);
      over = g.lives == 0 && rd(m, 0x8F) == 0x03 && rd(m, 0x8B) == 0x1F;
      break;
    }
    case kGameDoubleDunk: {
      int32_t me = packed2(rd(m, 0xF6)), them = packed2(rd(m, 0xF7));
      r = advance(g, me - them);
      over = (me >= 24 || them >= 24) && rd(m, 0xFE) == 0xE7;
      break;
    }
    case kGameEarthworld: {
      r = advance(g, packed2(rd(m, 0xA7)));
      over = g.score == 10;
      break;
    }
    case kGameElevatorAction: {
      r = advance(g, packed_score(m, 0x89, 0x88, 0x87));
      g.lives = rd(m, 0x83);
      over = g.lives == 0 && rd(m, 0x81) != 0;  // $81 is 0 on the title screen
      break;
    }
    case kGameEnduro: {
      int32_t day = rd(m, 0xAD), s = 0;
      if (day != 0) {
        int32_t left = packed_score(m, 0xAB, 0xAC, -1);  // cars still to pass
        int32_t quota = day == 1 ? 200 : 300;
        if (day >= 2) s = 200 + 300 * (day - 2);
        s += quota - left;
      }
      r = advance(g, s);
      over = rd(m, 0xAF) == 0xFF;
      break;
    }
    case kGameEntombed: {
      r = advance(g, rd(m, 0xE3));  // a plain binary count
      over = (rd(m, 0xC7) & 0x03) == 0;
      break;
    }
    case kGameEt: {
      r = advance(g, packed_score(m, 0xE1, 0xE0, 0xDF));
      g.lives = (int8_t)(uint8_t)(rd(m, 0xE5) + 1);  // ALE keeps it in a signed char
      over = g.lives == 0 && rd(m, 0x80) == 0x08;
      break;
    }
    case kGameFishingDerby: {
      r = advance(g, packed2(rd(m, 0xBD)) - packed2(rd(m, 0xBE)));
      over = rd(m, 0xBD) == 0x99 || rd(m, 0xBE) == 0x99;
      break;
    }
    case kGameFlagCapture: {
      r = advance(g, packed2(rd(m, 0xEA)));
      over = packed2(rd(m, 0xEB)) == 0;  // the clock has run out
      break;
    }
    case kGameFreeway: {
      r = advance(g, packed2(rd(m, 0xE7)));
      if (r < 0) r = 0;
      if (r > 1) r = 1;
      over = rd(m, 0x96) == 1;
      break;
    }
    case kGameFrogger: {
      r = advance(g, packed_score(m, 0xCE, 0xCC, -1));
      g.lives = rd(m, 0xD0);
      over = g.lives == 0xFF;
      break;
    }
    case kGameFrostbite: {
      r = advance(g, packed_score(m, 0xCA, 0xC9, 0xC8));
      int32_t left = rd(m, 0xCC) & 0x0F;
      over = left == 0 && (rd(m, 0xF1) & 0x80) != 0;
      g.lives = left + 1;
      break;
    }
    case kGameGalaxian: {
      int32_t s = packed_score(m, 0xAE, 0xAD, 0xAC);
      r = s - g.score;
      if (r < 0) r = 1000000 - g.score + s;  // the six-digit score rolled over
      g.score = s;
      over = (rd(m, 0xBF) & 0x80) != 0;
      g.lives = over ? 0 : rd(m, 0xB9) + 1;
      break;
    }
    case kGameGopher: {
      r = advance(g, packed_score(m, 0xB2, 0xB1, 0xB0));
      int32_t carrots = rd(m, 0xB4) & 0x07;
      over = carrots == 0;
      g.lives = (carrots & 1) + ((carrots >> 1) & 1) + ((carrots >> 2) & 1);
      break;
    }
    case kGameGravitar: {
      r = advance(g, packed_score(m, 0x89, 0x88, 0x87));
      int32_t screen = rd(m, 0x81);
      over = screen == 0x01;
      g.lives = screen == 0 ? 6 : rd(m, 0x84) + 1;
      break;
    }
    case kGameHangman: {
      // score: the guesser's points, aux[0]: the setter's, aux[1] / aux[2]: this and the
      // previous frame's game timer. Any change of either score ends the episode.
      int32_t mine = packed2(rd(m, 0xEB)), theirs = packed2(rd(m, 0xEC));
      r = (mine - g.score) - (theirs - g.aux[0]);
      g.score = mine;
      g.aux[0] = theirs;
      g.aux[2] = g.aux[1];
      g.aux[1] = rd(m, 0xF1);
      over = r != 0 || (g.aux[1] == 0 && g.aux[2] == 255);
      break;
    }
    case kGameHauntedHouse: {
      // aux[0]: matches used; every new match costs a point.
      int32_t matches = packed2(rd(m, 0x82));
      if (matches != g.aux[0]) {
        r = -1;
        g.aux[0] = matches;
      }
      g.lives = rd(m, 0x96);
      bool escaped = rd(m, 0x99) == 0x44;  // left the house with the urn
      if (escaped) r += 100;
      over = g.lives == 0 || escaped;
      break;
    }
    case kGameHero: {
      r = advance(g, packed_score(m, 0xB9, 0xB8, 0xB7));
      g.lives = rd(m, 0xB3);
      over = g.lives == 0;
      break;
    }
    case kGameHumanCannonball: {
      r = advance(g, packed2(rd(m, 0xB6)));
      g.aux[0] = packed2(rd(m, 0xB7));  // misses
      over = g.score == 7 || g.aux[0] == 7;
      break;
    }
    case kGameIceHockey: {
      r = advance(g, packed2(rd(m, 0x8A)) - packed2(rd(m, 0x8B)));
      if (r > 1) r = 1;  // only gains are capped
      over = rd(m, 0x87) == 0 && rd(m, 0x86) == 0;
      break;
    }
    case kGameJamesbond: {
      r = advance(g, packed_score(m, 0xDC, 0xDD, 0xDE));
      int32_t left = rd(m, 0x86) & 0x0F;
      over = left == 0 && rd(m, 0x8C) == 0x68;
      g.lives = left + 1;
      break;
    }
    case kGameJourneyEscape: {
      int32_t s = packed_score(m, 0x92, 0x91, 0x90);
      r = s - g.score;
      if (r == 50000) r = 0;  // the starting cash is not a reward
      g.score = s;
      over = rd(m, 0x95) == 0 && rd(m, 0x96) == 0;  // time is up
      break;
    }
    case kGameKaboom: {
      r = advance(g, packed_score(m, 0xA5, 0xA4, 0xA3));
      over = rd(m, 0xA1) == 0 || g.score == 999999;
      break;
    }
    case kGameKangaroo: {
      r = advance(g, 100 * packed_score(m, 0xA8, 0xA7, -1));
      int32_t b = rd(m, 0xAD);
      over = b == 0xFF;
      g.lives = (b & 0x07) + 1;
      break;
    }
    case kGameKeystoneKapers: {
      r = advance(g, packed_score(m, 0x9C, 0x9B, -1));
      g.lives = rd(m, 0x96);
      over = g.lives == 0 && rd(m, 0x88) == 0;
      break;
    }
    case kGameKingKong: {
      r = advance(g, packed_score(m, 0x83, 0x82, -1));
      g.lives = rd(m, 0xEE);
      over = g.lives == 0;
      break;
    }
    case kGameKlax: {
      // Score, misses and level live in the cartridge's extra RAM (read port $F080).
      int32_t s = packed2(xrd(xram, 0xF0B4)) + 100 * packed2(xrd(xram, 0xF0B5)) +
                  10000 * packed2(xrd(xram, 0xF0B6));
      r = advance(g, s);
      int32_t misses = xrd(xram, 0xF0EE), allowed = xrd(xram, 0xF0E9);
      // 25 well cells at $B3-$CB; the grey filler of the end-of-level bonus is not a tile.
      int32_t tiles = 0;
      for (int32_t a = 0xB3; a < 0xB3 + 25; ++a) {
        int32_t t = rd(m, a);
        if (t != 0 && t != 2 && t != 6 && t != 10 && t != 14) ++tiles;
      }
      over = (allowed > 0 && misses == allowed) || (rd(m, 0xA8) == 4 && tiles == 25) ||
             xrd(xram, 0xF09D) == 0x99;
      break;
    }
    case kGameKoolaid: {
      r = advance(g, 100 * packed_score(m, 0x81, 0x80, -1));
      over = rd(m, 0xD1) == 0x80;
      break;
    }
    case kGameKrull: {
      r = advance(g, packed_score(m, 0x9E, 0x9D, 0x9C));
      int32_t left = rd(m, 0x9F);
      over = left == 0 && rd(m, 0xA2) == 0x03 && rd(m, 0x80) == 0x80;
      g.lives = (left & 0x07) + 1;
      break;
    }
    case kGameKungFuMaster: {
      r = advance(g, packed_score(m, 0x9A, 0x99, 0x98));
      int32_t b = rd(m, 0x9D);
      over = b == 0xFF;
      g.lives = (b & 0x07) + 1;
      break;
    }
    case kGameLaserGates: {
      r = advance(g, packed_score(m, 0x82, 0x81, 0x80));
      over = rd(m, 0x83) == 0;
      break;
    }
    case kGameLostLuggage: {
      r = advance(g, packed_score(m, 0x96, 0x95, 0x94));
      g.lives = rd(m, 0xCA);
      over = g.lives == 0 && rd(m, 0xC8) == 0x0A && rd(m, 0xA5) == 0 && rd(m, 0xA9) == 0;
      break;
    }
    case kGameMarioBros: {
      r = advance(g, 100 * packed_score(m, 0x8A, 0x89, -1));
      g.lives = rd(m, 0x87);
      over = g.lives == 0;
      break;
    }
    case kGameMiniatureGolf: {
      // aux: level shown, its par, hits carried past a wrap of the 2-digit counter,
      // last counter value; score: the counter when the level began. The reward (par
      // minus strokes) comes when the level number changes; sums wrap like ALE's ints
      // (they hold ALE's boolean patterns after a restoreState, see game_after_restore).
      int32_t strokes = packed2(rd(m, 0x87)), par = packed2(rd(m, 0x88));
      int32_t level = packed2(rd(m, 0xAF));
      over = g.terminal != 0;
      if (level != g.aux[0]) {
        int32_t used = wrap_sub(wrap_add(g.aux[3], g.aux[2]), g.score);
        if (used > 0) r = wrap_sub(g.aux[1], used);
        if (level == 0) over = true;
        g.aux[0] = level;
        g.aux[2] = 0;
        g.score = g.aux[3];
      }
      if (par != 0) {
        g.aux[1] = par;  // between holes the right display shows the par
      } else {
        if (strokes < g.aux[3]) g.aux[2] = wrap_add(g.aux[2], g.aux[3]);
        g.aux[3] = strokes;
      }
      break;
    }
    case kGameMontezumaRevenge: {
      r = advance(g, packed_score(m, 0x95, 0x94, 0x93));
      int32_t left = rd(m, 0xBA);
      over = left == 0 && rd(m, 0xFE) == 0x60;
      g.lives = (left & 0x07) + 1;
      break;
    }
    case kGameMrDo: {
      r = advance(g, 10 * packed_score(m, 0x82, 0x83, -1));
      g.lives = rd(m, 0xDB);
      over = rd(m, 0xDA) == 0x40;
      break;
    }
    case kGameMsPacman: {
      r = advance(g, packed_score(m, 0xF8, 0xF9, 0xFA));
      int32_t left = rd(m, 0xFB) & 0x0F;
      over = left == 0 && rd(m, 0xA7) == 0x53;
      g.lives = (left & 0x07) + 1;
      break;
    }
    case kGameNameThisGame: {
      r = advance(g, packed_score(m, 0xC6, 0xC5, 0xC4));
      g.lives = rd(m, 0xC7) & 0x07;
      over = g.lives == 0;
      break;
    }
    case kGameOthello: {
      r = advance(g, packed2(rd(m, 0xCE)) - packed2(rd(m, 0xD0)));
      // $C0 is 0 while nobody is to move; long enough means the game has ended.
      g.aux[0] = rd(m, 0xC0) == 0 ? g.aux[0] + 1 : 0;
      over = g.aux[0] > 50;
      break;
    }
    case kGamePacman: {
      r = advance(g, packed_score(m, 0xCC, 0xCE, 0xD0));
      g.lives = rd(m, 0x98) + 1;
      over = g.lives == 1 && rd(m, 0xE4) == 0x3F;
      break;
    }
    case kGamePhoenix: {
      int32_t s = 10 * packed_score(m, 0xC8, 0xC9, -1) + (rd(m, 0xC7) >> 4);
      r = advance(g, 10 * s);
      over = rd(m, 0xCC) == 0x80;
      g.lives = rd(m, 0xCB) & 0x07;
      break;
    }
    case kGamePitfall: {
      r = advance(g, packed_score(m, 0xD7, 0xD6, 0xD5));
      int32_t marks = rd(m, 0x80) >> 4;
      over = marks == 0 && rd(m, 0x9E) != 0;
      g.lives = marks == 0x0A ? 3 : (marks == 0x08 ? 2 : 1);
      break;
    }
    case kGamePitfall2: {
      r = advance(g, packed_score(m, 0xC9, 0xC8, 0xC7));
      g.lives = 1;
      over = g.score == 199000;  // the top score stands in for the end of the adventure
      break;
    }
    case kGamePong: {
      int32_t cpu = rd(m, 0x8D), player = rd(m, 0x8E);
      r = advance(g, player - cpu);
      over = cpu == 21 || player == 21;
      break;
    }
    case kGamePooyan: {
      r = advance(g, packed_score(m, 0x8A, 0x89, 0x88));
      int32_t b = rd(m, 0x96);
      over = b == 0 && rd(m, 0x98) == 0x05;
      g.lives = (b & 0x07) + 1;
      break;
    }
    case kGamePrivateEye: {
      r = advance(g, packed_score(m, 0xCA, 0xC9, 0xC8));
      int32_t t = rd(m, 0xC2);
      over = t != 0x00 && t != 0x01;
      break;
    }
    case kGameQbert: {
      int32_t b = rd(m, 0x88);
      int32_t prev = g.aux[0];
      over = b == 0xFE || (b == 0x02 && prev == -1);
      int32_t now = (int32_t)(int8_t)(uint8_t)b;
      if (now == prev - 1) g.lives -= 1;
      g.aux[0] = now;
      // On a game-over frame the score is left alone and nothing is paid.
      r = over ? 0 : advance(g, packed_score(m, 0xDB, 0xDA, 0xD9));
      break;
    }
    case kGameRiverraid: {
      int32_t s = 0, weight = 1;
      for (int32_t a = 0xD7; a >= 0xCD; a -= 2) {
        s += weight * riverraid_digit(rd(m, a));
        weight *= 10;
      }
      r = advance(g, s);
      int32_t b = rd(m, 0xC0);
      over = b == 0x58 && g.aux[0] == 0x59;
      g.aux[0] = b;
      break;
    }
    case kGameRoadRunner: {
      r = advance(g, 100 * nibble_digits(m, 0xC9, 4));
      int32_t left = rd(m, 0xC4) & 0x07;
      over = left == 0 && (rd(m, 0xB9) != 0 || rd(m, 0xBD) != 0);
      g.lives = left + 1;
      break;
    }
    case kGameRobotank: {
      r = advance(g, 12 * rd(m, 0xB6) + rd(m, 0xB5));
      int32_t left = rd(m, 0xA8);
      over = left == 0 && rd(m, 0xB4) == 0xFF;
      g.lives = (left & 0x0F) + 1;
      break;
    }
    case kGameSeaquest: {
      r = advance(g, packed_score(m, 0xBA, 0xB9, 0xB8));
      over = rd(m, 0xA3) != 0;
      g.lives = rd(m, 0xBB) + 1;
      break;
    }
    case kGameSirLancelot: {
      r = advance(g, packed_score(m, 0xA0, 0x9F, 0x9E));
      g.lives = rd(m, 0xA9);
      over = g.lives == 0 && rd(m, 0xA7) == 0xA0;
      break;
    }
    case kGameSkiing: {
      int32_t elapsed = 6000 * rd(m, 0xE8) + packed_score(m, 0xEA, 0xE9, -1);
      r = -advance(g, elapsed);  // time spent is the cost
      over = rd(m, 0x91) == 0xFF;
      break;
    }
    case kGameSolaris: {
      r = advance(g, 10 * packed_score(m, 0xDC, 0xDD, 0xDE));
      int32_t b = rd(m, 0xD9);
      over = b == 0;
      g.lives = b & 0x0F;
      break;
    }
    case kGameSpaceInvaders: {
      r = advance(g, packed_score(m, 0xE8, 0xE6, -1));
      if (r < 0) r += 10000;  // four-digit score rolls over
      g.lives = rd(m, 0xC9);
      over = (rd(m, 0x98) & 0x80) != 0 || g.lives == 0;
      break;
    }
    case kGameSpaceWar: {
      int32_t s = packed2(rd(m, 0xA7));
      r = advance(g, s);
      over = s == 10 || rd(m, 0x80) == 0;  // ten hits, or the clock at $80 ran out
      break;
    }
    case kGameStarGunner: {
      r = advance(g, 100 * nibble_digits(m, 0x83, 4));
      int32_t b = rd(m, 0x87);
      over = b == 0;
      if (b == 0x05) g.aux[0] = 1;  // latched: a full set of lives was shown
      g.lives = g.aux[0] ? (b & 0x0F) : 5;
      break;
    }
    case kGameSuperman: {
      int32_t t = 60 * packed2(rd(m, 0xE3)) + packed2(rd(m, 0xE2));  // minutes, seconds
      g.score = t;
      int32_t room = rd(m, 0x80) | (rd(m, 0x81) << 8);
      over = (rd(m, 0x9F) & 0x40) != 0 && room == 0xF2AC;  // Clark Kent at the Daily Planet
      r = over ? (99 * 60 + 59) - t : 0;  // paid once, for the time left
      break;
    }
    case kGameSurround: {
      int32_t them = packed2(rd(m, 0xF6)), me = packed2(rd(m, 0xF7));
      r = advance(g, me - them);
      over = them == 10 || me == 10;
      break;
    }
    case kGameTennis: {
      // aux[0]: previous point difference, aux[1]: previous game difference.
      int32_t my_games = rd(m, 0xC5), their_games = rd(m, 0xC6);
      int32_t my_pts = rd(m, 0xC7), their_pts = rd(m, 0xC8);
      int32_t dg = my_games - their_games, dp = my_pts - their_pts;
      if (dp != g.aux[0]) {
        r = dp - g.aux[0];
      } else if (dg != g.aux[1]) {
        r = dg - g.aux[1];
      } else {
        r = 0;
      }
      g.aux[0] = dp;
      g.aux[1] = dg;
      over = (my_pts >= 6 && dp >= 2) || (their_pts >= 6 && dp <= -2) || my_pts == 7 ||
             their_pts == 7;
      break;
    }
    case kGameTetris: {
      int32_t s = packed_score(m, 0xF1, 0xF2, -1);
      r = s > g.score ? s - g.score : 0;
      g.score = s;
      g.aux[0] = 1;  // started
      over = (rd(m, 0xF3) & 0x80) != 0;
      if (over) {
        g.score = 0;
        g.aux[0] = 0;
      }
      break;
    }
    case kGameTicTacToe3d: {
      over = g.terminal != 0;  // stays over until the next reset
      if (rd(m, 0xFF) == 0xF3 && rd(m, 0xFE) == 0x10) {  // the game-over return address
        r = rd(m, 0xE1) == 0x08 ? 1 : -1;
        over = true;
      }
      bool full = true;  // a full board is a draw
      for (int32_t a = 0x9A; a <= 0xD9 && full; ++a) full = rd(m, a) != 0;
      if (full) over = true;
      break;
    }
    case kGameTimePilot: {
      r = advance(g, 100 * packed_score(m, 0x8D, 0x8F, -1));
      over = rd(m, 0xA0) != 0;
      if ((rd(m, 0x80) & 0x0F) == 2) g.lives = (rd(m, 0x8B) & 0x07) + 1;
      break;
    }
    case kGameTrondead: {
      r = advance(g, packed_score(m, 0xBF, 0xBE, 0xBD));
      int32_t hits = rd(m, 0xC8);
      over = hits == 5;
      g.lives = 5 - hits;
      break;
    }
    case kGameTurmoil: {
      r = advance(g, 10 * (packed_score(m, 0x89, 0x8A, -1) + rd(m, 0xD3)));
      g.lives = rd(m, 0xB9);
      over = g.lives == 0 && rd(m, 0xC5) == 0x01;
      break;
    }
    case kGameTutankham: {
      r = advance(g, packed_score(m, 0x9C, 0x9A, -1));
      int32_t b = rd(m, 0x9E);
      over = b == 0 && rd(m, 0x81) != 0x84;
      g.lives = b & 0x03;
      break;
    }
    case kGameUpNDown: {
      r = advance(g, packed_score(m, 0x82, 0x81, 0x80));
      int32_t left = rd(m, 0x86) & 0x0F;
      over = rd(m, 0x94) > 0x40 && left == 0;
      g.lives = left + 1;
      break;
    }
    case kGameVenture: {
      r = advance(g, 100 * packed_score(m, 0xC8, 0xC7, -1));
      int32_t left = rd(m, 0xC6);
      over = left == 0 && rd(m, 0xCD) == 0xFF && (rd(m, 0xBF) & 0x80) != 0;
      g.lives = (left & 0x07) + 1;
      break;
    }
    case kGameVideoCheckers: {
      // Board squares in four runs of eight; 0x10/0x20 a black piece, 0x90/0xA0 white.
      int32_t black = 0, white = 0;
      for (int32_t row = 0; row < 4; ++row) {
        for (int32_t a = 0x80 + 9 * row; a < 0x88 + 9 * row; ++a) {
          int32_t v = rd(m, a);
          if (v == 0x10 || v == 0x20) ++black;
          if (v == 0x90 || v == 0xA0) ++white;
        }
      }
      r = g.reward;  // ALE keeps the last reward until something new happens
      over = g.terminal != 0;
      int32_t sign = g.aux[0] ? -1 : 1;  // reverse checkers (set by the mode)
      if (black == 0) {
        r = -sign;
        over = true;
      } else if (white == 0) {
        r = sign;
        over = true;
      }
      break;
    }
    case kGameVideoChess: {
      over = g.terminal != 0;
      if (rd(m, 0xE1) == 0x82) {  // only when white is to move: $EE 0 mate of black, 1 of white
        int32_t mate = rd(m, 0xEE);
        if (mate == 0) {
          r = 1;
          over = true;
        } else if (mate == 1) {
          r = -1;
          over = true;
        }
      }
      break;
    }
    case kGameVideoCube: {
      // Six faces of nine colour bytes from $A0; reward: change in solved faces, or -1
      // when the timer at $DB wraps from $FF to 0 (aux[0], aux[1]: its last two values).
      int32_t solved = 0;
      for (int32_t face = 0; face < 6; ++face) {
        int32_t first = 0xA0 + 9 * face;
        bool same = true;
        for (int32_t k = 1; k < 9 && same; ++k) same = rd(m, first + k) == rd(m, first);
        solved += same;
      }
      g.aux[1] = g.aux[0];
      g.aux[0] = rd(m, 0xDB);
      bool timeout = g.aux[0] == 0 && g.aux[1] == 0xFF;
      r = timeout ? -1 : solved - g.score;
      g.score = solved;
      over = timeout || solved == 6;
      break;
    }
    case kGameVideoPinball: {
      r = advance(g, packed_score(m, 0xB0, 0xB2, 0xB4));
      over = (rd(m, 0xAF) & 0x01) != 0;
      g.lives = 4 + (rd(m, 0xA8) & 0x01) - (rd(m, 0x99) & 0x07);
      break;
    }
    case kGameWizardOfWor: {
      int32_t s = packed_score(m, 0x86, 0x88, -1);
      if (s >= 8000) s -= 8000;
      r = advance(g, 100 * s);
      int32_t left = rd(m, 0x8D) & 0x0F;
      over = left == 0 && rd(m, 0xF4) == 0xF8;
      if ((rd(m, 0xD7) & 0x01) == 0) g.lives = left;  // only between rounds
      break;
    }
    case kGameWordZapper: {
      r = g.reward;  // nothing is updated while the clock at $CF shows 0
      over = g.terminal != 0;
      if (packed2(rd(m, 0xCF)) > 0) {
        int32_t s = 2 - (int32_t)(int8_t)(uint8_t)rd(m, 0xDC);  // rounds done; $DC counts down
        r = advance(g, s);
        over = s == 3 || packed2(rd(m, 0xDE)) == 0;
      }
      break;
    }
    case kGameYarsRevenge: {
      r = advance(g, packed_score(m, 0xE2, 0xE1, 0xE0));
      g.lives = rd(m, 0x9E) >> 4;
      over = g.lives == 0;
      break;
    }
    case kGameZaxxon: {
      r = advance(g, 100 * packed_score(m, 0xE9, 0xE8, -1));
      g.lives = rd(m, 0xEA) & 0x07;
      over = g.lives == 0;
      break;
    }
    default:
      break;
  }
  g.reward = r;
  g.terminal = over ? 1 : 0;
  if (reward) *reward = r;
}

}  // namespace hs
