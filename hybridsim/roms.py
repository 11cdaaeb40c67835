"""ROMs come from the installed ale-py package (or $ALE_ROMS_DIR); none ship with hybridsim."""
from __future__ import annotations

import difflib
import hashlib
import os
import pathlib
import re
import stat

# Sizes of the cartridge images hybridsim can map (2K, 4K, F8/E0/FE, DPC, F6, F4).
SUPPORTED_ROM_SIZES = (2048, 4096, 8192, 10495, 16384, 32768)


def roms_dir() -> pathlib.Path:
    env = os.environ.get("ALE_ROMS_DIR")
    if env:
        return pathlib.Path(env)
    try:
        import ale_py.roms
    except ImportError as exc:
        raise FileNotFoundError("ale-py is not installed, and it is where ROMs come from "
                                "(pip install ale-py==0.12.1, or set ALE_ROMS_DIR)") from exc
    return pathlib.Path(ale_py.roms.__file__).parent


def _ale_py_roms():
    roms_dir()  # the same message when ale-py is missing
    import ale_py.roms
    return ale_py.roms


def get_rom_path(name: str):
    """ale_py.roms.get_rom_path, for code that swapped `ale_py` for `hybridsim`: the path of
    the installed ROM for a snake_case name, None (with a warning) for an unknown one."""
    return _ale_py_roms().get_rom_path(name)


def get_all_rom_ids() -> list:
    """ale_py.roms.get_all_rom_ids: the snake_case names of the installed ROMs."""
    return _ale_py_roms().get_all_rom_ids()


def snake_case(name: str) -> str:
    """'SpaceInvaders' or 'space-invaders' -> 'space_invaders' (ALE's ROM file stems)."""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def rom_path(game: str) -> pathlib.Path:
    """Path of the installed ROM for a game name such as 'pong' or 'SpaceInvaders'."""
    stem = snake_case(game)
    path = roms_dir() / f"{stem}.bin"
    if not path.is_file():
        known = sorted(p.stem for p in roms_dir().glob("*.bin"))
        raise FileNotFoundError(f"no ROM for game {game!r}{did_you_mean(stem, known)}; looked for "
                                f"{path}; installed ROMs: {', '.join(known)}")
    return path


def did_you_mean(name: str, known) -> str:
    """" (did you mean 'pong'?)" for a misspelt name close to known ones, else ""."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def check_rom_path(path):
    """path itself if it can name a file: pathlib reads "" as "." and os.stat refuses a NUL."""
    text = os.fsdecode(path)
    if text == "":
        raise ValueError("no ROM file given: the path is empty")
    if "\0" in text:
        raise ValueError(f"ROM path contains a NUL character: {text!r}")
    return path


def read_rom(path: str | os.PathLike) -> bytes:
    """Read a ROM image, with a clear error for a missing file or an impossible size."""
    path = pathlib.Path(check_rom_path(path))
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # (a file as a directory on the way)
        raise FileNotFoundError(f"ROM file not found: {path}") from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"ROM path is a directory, not a file: {path}")
    if not stat.S_ISREG(mode):  # reading a FIFO would wait for a writer
        raise ValueError(f"ROM path is not a regular file (a device, FIFO or socket): {path}")
    data = path.read_bytes()
    if len(data) not in SUPPORTED_ROM_SIZES:
        raise ValueError(f"{path}: {len(data)} bytes is not a 2600 cartridge size hybridsim "
                         f"supports ({', '.join(map(str, SUPPORTED_ROM_SIZES))})")
    return data


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()
