"""A vector env's worker pool made to report finished steps in a shuffled order."""
import numpy as np


class ShuffledPool:
    """Wraps an engine's pool_wait so completions come back in a seeded random order: what
    many worker threads may do, on demand (pool_wait(n) still returns n finished steps)."""

    def __init__(self, env, seed):
        self.env, self.engine, self.rng, self.held = env, env._engine, np.random.default_rng(seed), []
        self.real_wait = self.engine.pool_wait
        env._engine = self

    def __getattr__(self, name):  # everything else is the engine's
        return getattr(self.engine, name)

    def pool_ready(self):
        return len(self.held) + self.engine.pool_ready()

    def pool_in_flight(self):
        return len(self.held) + self.engine.pool_in_flight()

    def pool_wait(self, n):
        if len(self.held) < n:
            running = int(self.env._in_flight.sum()) - len(self.env._ready) - len(self.held)
            self.held += self.real_wait(running).tolist()
            self.rng.shuffle(self.held)
        out, self.held = self.held[:n], self.held[n:]
        return np.array(out, np.int32)
