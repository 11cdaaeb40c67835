"""The time of a training run's loop, shared by the benchmarks that time `Trainer.train()`."""
import time


def train_loop_seconds(trainer) -> tuple[dict, float]:
    """trainer.train()'s summary and the seconds of its loop: the one-off end of the run
    (final checkpoint, learning-curve plot, closing the logs) is left out, since an
    environment-only timing has nothing like it."""
    finish, spent = trainer._finish, [0.0]

    def timed_finish(*args, **kwargs):
        start = time.perf_counter()
        try:
            return finish(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    trainer._finish = timed_finish
    start = time.perf_counter()
    summary = trainer.train()
    return summary, time.perf_counter() - start - spent[0]
