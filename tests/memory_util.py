"""Host memory a snapshot round trip takes, measured with tracemalloc (numpy reports its
allocations to it)."""
import tracemalloc


def snapshot_peaks(env):
    """(state, get_state's peak, set_state's peak) in bytes above what was held before each."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        state = env.get_state()
        get_peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        env.set_state(state)
        set_peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return state, get_peak, set_peak
