"""API details a review found: positional cloneState, closed-env get_state, pickling
refused with a pointer to the snapshot API, gpu_options validation."""
import pickle

import numpy as np
import pytest

from hybridsim.ale import ALEInterface, ALEState
from hybridsim.roms import rom_path
from hybridsim.vector import AtariVectorEnv


def _ale():
    a = ALEInterface()
    a.loadROM(str(rom_path("pong")))
    return a


def test_clone_state_takes_include_rng_positionally():
    a = _ale()
    assert a.cloneState(True).serialize() == a.cloneState(include_rng=True).serialize()
    assert a.cloneState(False).serialize() == a.cloneState().serialize()


def test_get_state_after_close_is_refused_like_set_state():
    e = AtariVectorEnv("pong", 1, num_threads=1)
    e.reset(seed=0)
    state = e.get_state()
    e.close()
    with pytest.raises(RuntimeError, match="closed"):
        e.get_state()
    with pytest.raises(RuntimeError, match="closed"):
        e.set_state(state)


def test_pickling_names_the_class_and_the_snapshot_api():
    a = _ale()
    with pytest.raises(TypeError, match=r"ALEInterface.*cloneState"):
        pickle.dumps(a)
    e = AtariVectorEnv("pong", 1, num_threads=1)
    try:
        with pytest.raises(TypeError, match=r"AtariVectorEnv.*get_state"):
            pickle.dumps(e)
    finally:
        e.close()
    # the snapshot APIs are the way: their bytes pickle
    s = pickle.loads(pickle.dumps(a.cloneState().serialize()))
    a.restoreState(ALEState(s, a._md5))


def test_gpu_options_are_checked_for_the_cpu_backend():
    with pytest.raises(ValueError, match="backend='cpu'"):
        AtariVectorEnv("pong", 1, num_threads=1, gpu_options={"design": "split"})
    with pytest.raises(ValueError, match="gpu_options must be a dict"):
        AtariVectorEnv("pong", 1, num_threads=1, gpu_options=5)
    with pytest.raises(ValueError, match="gpu_options must be a dict"):
        AtariVectorEnv("pong", 1, backend="gpu", gpu_options=5)
    e = AtariVectorEnv("pong", 1, num_threads=1, gpu_options={})  # empty: nothing to apply
    e.close()
