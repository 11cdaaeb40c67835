"""Bad constructor arguments that ale-py's AtariVectorEnv refuses (its pybind11 constructor
takes C ints and floats) and hybridsim's once let through: each is refused by name, while
the numpy and Python numbers ale-py users pass still work."""
import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium")
from hybridsim.vector import AtariVectorEnv  # noqa: E402


def _ale_refuses(**kwargs) -> None:
    """ale-py's AtariVectorEnv raises TypeError for these keyword arguments."""
    ale_vector = pytest.importorskip("ale_py.vector_env")
    with pytest.raises(TypeError):
        ale_vector.AtariVectorEnv("pong", 1, num_threads=1, **kwargs).close()


def _accepted(**kwargs) -> None:
    AtariVectorEnv("pong", 1, num_threads=1, noop_max=0, **kwargs).close()


@pytest.mark.parametrize("value", [1.5, None, "0", 2**70, True])
def test_thread_affinity_offset_must_be_a_c_int(value):
    with pytest.raises((TypeError, ValueError), match=r"thread_affinity_offset must be"):
        AtariVectorEnv("pong", 1, thread_affinity_offset=value)
    if value is not True:  # ale-py takes True as 1
        _ale_refuses(thread_affinity_offset=value)


def test_thread_affinity_offset_takes_ints():
    with pytest.raises(TypeError, match=r"thread_affinity_offset must be an int \(-1: no affinity\), got 1\.5"):
        AtariVectorEnv("pong", 1, thread_affinity_offset=1.5)
    for value in (-1, np.int32(-1)):
        _accepted(thread_affinity_offset=value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pinned (test_vector.py checks where), no warning
        for value in (0, 3, np.int64(2)):
            _accepted(thread_affinity_offset=value)


@pytest.mark.parametrize("value", ["0.25", None, [0.25], np.array(0.25), True])
def test_repeat_action_probability_must_be_a_number(value):
    with pytest.raises(TypeError, match=r"repeat_action_probability must be a number \(int or float\), got "):
        AtariVectorEnv("pong", 1, repeat_action_probability=value)
    if isinstance(value, (str, list, type(None))):
        _ale_refuses(repeat_action_probability=value)


def test_repeat_action_probability_takes_python_and_numpy_numbers():
    with pytest.raises(TypeError, match=r"repeat_action_probability must be a number \(int or float\), got '0.25'"):
        AtariVectorEnv("pong", 1, repeat_action_probability="0.25")
    for value in (0, 1, 0.25, np.float32(0.25), np.float64(0.0), np.int64(0)):
        _accepted(repeat_action_probability=value)


@pytest.mark.parametrize("value", ["0.5", np.array(0.5), True])
def test_continuous_action_threshold_must_be_a_number(value):
    # ale-py takes '0.5' at construction and then fails in send() ("bad operand type for
    # unary -: 'str'"); hybridsim's single environment refuses it up front, as now this does
    with pytest.raises(ValueError, match=r"continuous_action_threshold must be a number \(int or float\), got "):
        AtariVectorEnv("pong", 1, continuous=True, continuous_action_threshold=value)


def test_continuous_action_threshold_string_fails_in_ale_py_send():
    ale_vector = pytest.importorskip("ale_py.vector_env")
    theirs = ale_vector.AtariVectorEnv("pong", 1, num_threads=1, continuous=True, continuous_action_threshold="0.5")
    try:
        theirs.reset(seed=0)
        with pytest.raises(TypeError):
            theirs.step(np.ones((1, 3), np.float32))
    finally:
        theirs.close()
    with pytest.raises(ValueError, match="continuous_action_threshold must be a number"):
        AtariVectorEnv("pong", 1, continuous=True, continuous_action_threshold="0.5")
    for value in (0, 1, 0.5, np.float32(0.5), np.int64(1)):
        _accepted(continuous=True, continuous_action_threshold=value)


def test_num_threads_beyond_a_c_int_is_refused():
    with pytest.raises(ValueError, match=r"num_threads must be < 2\*\*31 \(0: one per core\), got 1180591620717411303424"):
        AtariVectorEnv("pong", 1, num_threads=2**70)
    ale_vector = pytest.importorskip("ale_py.vector_env")
    with pytest.raises(TypeError):
        ale_vector.AtariVectorEnv("pong", 1, num_threads=2**70)
