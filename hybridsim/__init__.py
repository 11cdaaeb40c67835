"""hybridsim: Atari 2600 emulation for reinforcement learning, bit-exact with ALE.

The emulator core is portable C++ in `hybridsim.cuda` (the repository's cuda/ folder),
compiled by g++ into `hybridsim._core` and by NVRTC for the GPU.
"""
import os as _os

__version__ = "0.1.0"


def core_include_dir() -> str:
    """Folder holding the portable core headers: installed package data, or the source tree's cuda/."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (_os.path.join(here, "cuda"), _os.path.join(_os.path.dirname(here), "cuda")):
        if _os.path.isfile(_os.path.join(candidate, "hs_prelude.h")):
            return candidate
    raise FileNotFoundError(f"hybridsim core headers not found next to {here}")


def data_dir() -> str:
    """Folder holding the shipped tables (installed `hybridsim/data`, or the source tree's data/)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (_os.path.join(here, "data"), _os.path.join(_os.path.dirname(here), "data")):
        if _os.path.isfile(_os.path.join(candidate, "games.json")):
            return candidate
    raise FileNotFoundError(f"hybridsim data (games.json) not found next to {here}")


def __getattr__(name):
    # The ALE-compatible surface loads the compiled console only when first used.
    if name in ("ALEInterface", "ALEState"):
        from hybridsim import ale
        return getattr(ale, name)
    if name == "Action":
        from hybridsim.actions import Action
        return Action
    raise AttributeError(f"module 'hybridsim' has no attribute {name!r}")


__all__ = ["__version__", "core_include_dir", "ALEInterface", "ALEState", "Action"]
