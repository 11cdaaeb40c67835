# cython: language_level=3
"""Python view of the per-game settings in cuda/games.h (reward, lives, game over)."""
from libc.stdint cimport int32_t, uint8_t

import numpy as np

cdef extern from "games.h" namespace "hs" nogil:
    cdef struct GameState:
        int32_t score
        int32_t reward
        int32_t lives
        int32_t terminal
        int32_t aux[4]
    int32_t kNumGames
    const char* game_name(int32_t game)
    void game_reset(int32_t game, GameState& g)
    void game_set_mode(int32_t game, GameState& g, int32_t mode, const uint8_t* ram128)
    void game_step(int32_t game, GameState& g, const uint8_t* ram128, int32_t* reward)
    void game_step(int32_t game, GameState& g, const uint8_t* ram128, int32_t* reward,
                   const uint8_t* xram)
    int32_t game_lives(int32_t game, const GameState& g)
    bint game_terminal(int32_t game, const GameState& g)

cdef extern from *:
    """
    static_assert(sizeof(hs::GameState) == 8 * sizeof(int32_t), "GameState is 8 int32");
    """

NUM_GAMES = kNumGames  # ids 1 .. NUM_GAMES - 1; 0 is "no game"


def game_names():
    """Names of all games, index = id (index 0 is the empty name of kGameNone)."""
    return [game_name(i).decode() for i in range(kNumGames)]


_IDS = {name: i for i, name in enumerate(game_names()) if name}


def game_id(name):
    """Id of a game given its snake_case ROM name (KeyError if unknown)."""
    return _IDS[name]


cdef const uint8_t* _ram_ptr(const uint8_t[::1] ram) except NULL:
    if ram.shape[0] != 128:
        raise ValueError(f"ram must hold 128 bytes, got {ram.shape[0]}")
    return &ram[0]


cdef class GameTracker:
    """Follows one game's score/lives/terminal from the RAM of successive frames."""
    cdef GameState st
    cdef readonly int game

    def __init__(self, game):
        if isinstance(game, str):
            game = game_id(game)
        if not 0 < game < kNumGames:
            raise ValueError(f"unknown game id {game}")
        self.game = game
        game_reset(self.game, self.st)

    def reset(self):
        """The settings reset ALE does inside reset_game (see data/games.json)."""
        game_reset(self.game, self.st)

    def set_mode(self, int mode, const uint8_t[::1] ram):
        game_set_mode(self.game, self.st, mode, _ram_ptr(ram))

    def step(self, const uint8_t[::1] ram):
        """Feed one emulated frame's RAM ($80-$FF); returns that frame's reward. 256 bytes
        are RIOT RAM followed by the cartridge's extra RAM (which Klax's rule reads)."""
        cdef int32_t r = 0
        if ram.shape[0] == 256:
            game_step(self.game, self.st, &ram[0], &r, &ram[128])
        else:
            game_step(self.game, self.st, _ram_ptr(ram), &r)
        return r

    def lives(self):
        return game_lives(self.game, self.st)

    def terminal(self):
        return bool(game_terminal(self.game, self.st))

    @property
    def name(self):
        return game_name(self.game).decode()

    def get_state(self):
        """(score, reward, lives, terminal, aux0, aux1, aux2, aux3) as plain ints."""
        s = self.st
        return (s.score, s.reward, s.lives, s.terminal, s.aux[0], s.aux[1], s.aux[2], s.aux[3])

    def set_state(self, state):
        vals = [int(v) for v in state]
        if len(vals) != 8:
            raise ValueError("state needs 8 values")
        self.st.score, self.st.reward, self.st.lives, self.st.terminal = vals[:4]
        for k in range(4):
            self.st.aux[k] = vals[4 + k]


def step_batch(const int32_t[::1] games, int32_t[:, ::1] states, const uint8_t[:, ::1] rams,
               int32_t[::1] rewards):
    """Step n trackers at once: states is an (n, 8) int32 array laid out like GameState
    (score, reward, lives, terminal, aux0..3), rams (n, 128) uint8, rewards (n,) int32
    receives each frame's reward. Lives / terminal can be read back with lives_batch."""
    cdef Py_ssize_t n = games.shape[0], i
    if states.shape[0] != n or states.shape[1] != 8 or rams.shape[0] != n or \
            rams.shape[1] != 128 or rewards.shape[0] != n:
        raise ValueError("shapes must be games (n,), states (n, 8), rams (n, 128), rewards (n,)")
    for i in range(n):
        if not 0 < games[i] < kNumGames:
            raise ValueError(f"unknown game id {games[i]} at {i}")
    with nogil:
        for i in range(n):
            game_step(games[i], (<GameState*>&states[i, 0])[0], &rams[i, 0], &rewards[i])


def reset_batch(const int32_t[::1] games, int32_t[:, ::1] states):
    """game_reset for every row of an (n, 8) int32 state array."""
    cdef Py_ssize_t n = games.shape[0], i
    if states.shape[0] != n or states.shape[1] != 8:
        raise ValueError("shapes must be games (n,), states (n, 8)")
    for i in range(n):
        if not 0 < games[i] < kNumGames:
            raise ValueError(f"unknown game id {games[i]} at {i}")
        game_reset(games[i], (<GameState*>&states[i, 0])[0])


def lives_batch(const int32_t[::1] games, int32_t[:, ::1] states):
    """(lives, terminal) arrays as ALE reports them, for an (n, 8) state array."""
    cdef Py_ssize_t n = games.shape[0], i
    lives = np.zeros(n, np.int32)
    term = np.zeros(n, np.bool_)
    cdef int32_t[::1] lv = lives
    cdef uint8_t[::1] tv = term.view(np.uint8)
    for i in range(n):
        lv[i] = game_lives(games[i], (<GameState*>&states[i, 0])[0])
        tv[i] = game_terminal(games[i], (<GameState*>&states[i, 0])[0])
    return lives, term
