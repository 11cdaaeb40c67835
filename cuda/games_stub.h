// games_stub.h: a stand-in for cuda/games.h (written separately) with the same
// interface, covering only the games the console tests use. Swap the include in
// ale_env.h for games.h when it lands. Facts: ALE's games/supported/{Pong,Breakout,
// SpaceInvaders}.cpp (ALE_FACTS.md). ram128[i] is RIOT RAM at $80 + i.
#pragma once
#include "hs_prelude.h"

namespace hs {

enum : int32_t { GAME_PONG = 0, GAME_BREAKOUT = 1, GAME_SPACE_INVADERS = 2, GAME_NUM_STUB = 3,
                 GAME_NONE = 1000 };  // GAME_NONE: no settings (reward 0, never over) for console tests

struct GameState {
  int32_t score;
  int32_t lives;
  uint8_t terminal;
  uint8_t started;  // Breakout: lives reached 5 once
  uint8_t pad_[2];
};

HS_HD inline void game_reset(int32_t game, GameState& g) {
  g.score = 0;
  g.terminal = 0;
  g.started = 0;
  g.pad_[0] = g.pad_[1] = 0;
  g.lives = game == GAME_BREAKOUT ? 5 : (game == GAME_SPACE_INVADERS ? 3 : 0);
}

HS_HD HS_INLINE int32_t bcd_pair(uint8_t v) { return (v >> 4) * 10 + (v & 0x0F); }

HS_HD inline void game_step(int32_t game, GameState& g, const uint8_t* ram128, int32_t* reward) {
  int32_t score = g.score;
  switch (game) {
    case GAME_PONG: {  // player score minus CPU score; first to 21
      int32_t cpu = ram128[0x0D], player = ram128[0x0E];
      score = player - cpu;
      g.terminal = cpu == 21 || player == 21;
      break;
    }
    case GAME_BREAKOUT: {
      int32_t lo = ram128[0x4D], hi = ram128[0x4C];
      score = (lo & 0x0F) + 10 * ((lo >> 4) & 0x0F) + 100 * (hi & 0x0F);
      int32_t lives = ram128[0x39];
      if (!g.started && lives == 5) g.started = 1;
      g.terminal = g.started && lives == 0;
      g.lives = lives;
      break;
    }
    case GAME_SPACE_INVADERS: {
      score = bcd_pair(ram128[0x68]) + 100 * bcd_pair(ram128[0x66]);
      int32_t r = score - g.score;
      if (r < 0) r = (10000 - g.score) + score;  // the 4-digit counter wrapped
      *reward = r;
      g.score = score;
      g.lives = ram128[0x49];
      g.terminal = (ram128[0x18] & 0x80) || g.lives == 0;
      return;
    }
    default: break;
  }
  *reward = score - g.score;
  g.score = score;
}

// Effects of ALE's setMode on the settings' memory (games.h: after the SELECT presses,
// before the soft reset that ends mode selection). None for the stub's games.
HS_HD inline void game_set_mode(int32_t game, GameState& g, int32_t mode, const uint8_t* ram128) {
  (void)game; (void)g; (void)mode; (void)ram128;
}

HS_HD inline int32_t game_lives(int32_t game, const GameState& g) {
  if (game == GAME_PONG) return 0;
  return g.terminal ? 0 : g.lives;
}

HS_HD inline bool game_terminal(int32_t game, const GameState& g) {
  (void)game;
  return g.terminal != 0;
}

}  // namespace hs
