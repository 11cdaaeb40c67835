"""hybridsim: Atari 2600 emulation for reinforcement learning, bit-exact with ALE.

The emulator core is portable C++ in `hybridsim.cuda` (the repository's cuda/ folder),
compiled by g++ into `hybridsim._core` and by NVRTC for the GPU.
"""
import os as _os

__version__ = "0.1.0"

# OMP_WAIT_POLICY is left to the user: libgomp's own policy (spin briefly, then sleep)
# trained 29% faster than PASSIVE on a quiet 2-core VM (benchmarks/train_throughput.py,
# BENCHMARKS.md); on a machine shared with other busy processes, OMP_WAIT_POLICY=PASSIVE
# can be worth more (it was 0.5-0.6x -> 0.8-0.9x of ale-py's speed on a loaded VM), and
# `hybridsim train` sets it when its CPUs are already busy at its start (cli.py).


class HybridsimWarning(RuntimeWarning):
    """A warning hybridsim gives itself (a RuntimeWarning: filter either); the command line
    prints these as one line, as it prints its errors."""


def _packaged_dir(name: str, marker: str) -> str:
    """An installed data folder (hybridsim/NAME), or the source tree's NAME/ beside the package."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (_os.path.join(here, name), _os.path.join(_os.path.dirname(here), name)):
        if _os.path.isfile(_os.path.join(candidate, marker)):
            return candidate
    raise FileNotFoundError(f"hybridsim {name}/ (with {marker}) not found next to {here}")


def core_include_dir() -> str:
    """Folder holding the portable core headers (for g++, nvcc and NVRTC)."""
    return _packaged_dir("cuda", "hs_prelude.h")


def data_dir() -> str:
    """Folder holding the shipped tables such as games.json."""
    return _packaged_dir("data", "games.json")


def __getattr__(name):
    # The ALE-compatible surface loads the compiled console only when first used.
    if name in ("ALEInterface", "ALEState", "LoggerMode"):
        from hybridsim import ale
        return getattr(ale, name)
    if name == "AtariVectorEnv":
        from hybridsim.vector import AtariVectorEnv
        return AtariVectorEnv
    if name == "ALEVectorInterface":
        from hybridsim.ale_vector import ALEVectorInterface
        return ALEVectorInterface
    if name == "Action":
        from hybridsim.actions import Action
        return Action
    if name == "AtariEnv":  # gymnasium's single environment (needs gymnasium and ale-py)
        from hybridsim.env import AtariEnv
        return AtariEnv
    raise AttributeError(f"module 'hybridsim' has no attribute {name!r}")


__all__ = ["__version__", "HybridsimWarning", "core_include_dir", "ALEInterface", "ALEState", "LoggerMode", "Action",
           "AtariEnv", "AtariVectorEnv", "ALEVectorInterface"]


def __dir__():
    # the lazily loaded names too, for completion in an interactive session
    return sorted(set(globals()) | set(__all__))


def _register_gymnasium_envs() -> None:
    """gymnasium.make("hybridsim/Pong-v5") after `import hybridsim` (when gymnasium is installed)."""
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        return
    from hybridsim.registration import register_envs
    register_envs()


_register_gymnasium_envs()
