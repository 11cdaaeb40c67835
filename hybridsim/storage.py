"""Writing a run's files so that a full disk stops training cleanly instead of losing data.

- `StorageError`: a write into the run directory failed; it names the file, what was being
  written and the errno (ENOSPC, EDQUOT, ...). h5py reports a failed write as a
  RuntimeError whose text holds "errno = 28", so `write_errno` reads that too.
- `atomic_write`: temporary file, fsync, rename; a failed write never replaces the old file.
- `check_output_directory`: make an output directory before minutes of work, or say why not
  (`why_no_new_file`: its probe, which replay's output checks use too).
- `missing_room`: whether a directory has room for the next write, free space and quota
  both (statvfs does not show a quota): HDF5's writers ask it before writing.
- `DiskReserve`: a preallocated file in the run directory, deleted when the disk fills so
  the final checkpoint and the last trajectory rows have room (a ballast file).
- `AppendFile`: an append-only text file (metrics.csv) that cuts a half-written line off
  again when a write fails, so the file stays well formed for --resume to append to.
"""
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import re
import tempfile
import threading

# errnos that mean "this file system will not take more data", not a bug in the writer
FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

_HDF5_ERRNO = re.compile(r"errno = (\d+)")


def write_errno(exc: BaseException) -> int | None:
    """The errno behind a failed write: OSError.errno, or the one in an HDF5 error text."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(exc, "errno", None)
        if isinstance(code, int) and code > 0:
            return code
        match = _HDF5_ERRNO.search(str(exc))
        if match:
            return int(match.group(1))
        exc = exc.__cause__ or exc.__context__
    return None


def describe_errno(code: int | None) -> str:
    if code is None:
        return "write failed"
    name = errno.errorcode.get(code, str(code))
    return f"{os.strerror(code)} ({name})"


class StorageError(RuntimeError):
    """A run file could not be written. `path`, `what` and `errno` say which, what, why."""

    def __init__(self, path, what: str, code: int | None, detail: str = ""):
        self.path = pathlib.Path(path)
        self.what = what
        self.errno = code
        self.detail = detail
        super().__init__(f"{self.path}: writing {what} failed: {describe_errno(code)}"
                         + (f"; {detail}" if detail else ""))

    @property
    def disk_full(self) -> bool:
        return self.errno in FULL_ERRNOS

    @classmethod
    def from_exception(cls, path, what: str, exc: BaseException, detail: str = ""):
        code = write_errno(exc)
        if code is None:  # no errno to name: keep the original error's words
            detail = f"{type(exc).__name__}: {exc}" + (f"; {detail}" if detail else "")
        return cls(path, what, code, detail)


def free_bytes(path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path` (a
    quota may allow fewer: `missing_room` sees that too)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _load_fallocate():
    """fallocate(2) from the C library, or None (not Linux): it allocates or fails, where
    posix_fallocate falls back to writing the blocks on file systems without it."""
    import ctypes
    try:
        call = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int

    def fallocate(fd: int, nbytes: int) -> int:
        """0, or the errno it failed with."""
        return 0 if call(fd, 0, 0, nbytes) == 0 else ctypes.get_errno()
    return fallocate


_fallocate = _load_fallocate()


def _unnamed_file(directory) -> int:
    """A file descriptor for a new file in `directory` that has no name, so it is gone when
    closed: O_TMPFILE, or a file removed at once where the file system lacks O_TMPFILE (NFS
    keeps such a file as .nfsXXXX until it is closed)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(directory, flag | os.O_WRONLY, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
    fd, name = tempfile.mkstemp(prefix=".hybridsim-room-", dir=directory)
    os.unlink(name)
    return fd


_ROOM_ERRNOS = {errno.ENOSPC, errno.EDQUOT}  # (EFBIG would be this one file's size limit)
_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
_without_fallocate: set[int] = set()  # st_dev of file systems that refused it: not asked again


def allocation_refused(directory, nbytes: int) -> int | None:
    """The errno (ENOSPC, EDQUOT) with which the file system holding `directory` refuses
    this process `nbytes` more bytes there, else None. The bytes are allocated in an
    unnamed file, freed again at once: this sees a user, group or project quota, which
    statvfs (free_bytes) does not show. None where it cannot tell: no fallocate (not
    Linux, or a file system without it, remembered so that it is not asked again)."""
    if _fallocate is None or nbytes <= 0:
        return None
    try:
        device = os.stat(directory).st_dev
        if device in _without_fallocate:
            return None
        fd = _unnamed_file(directory)
    except OSError as exc:
        return exc.errno if exc.errno in _ROOM_ERRNOS else None  # (an inode quota, say)
    try:
        code = _fallocate(fd, nbytes)
    finally:
        os.close(fd)
    if code in _NO_FALLOCATE:
        _without_fallocate.add(device)
    return code if code in _ROOM_ERRNOS else None


def missing_room(directory, nbytes: int, writers: int = 1) -> tuple[int, str] | None:
    """(errno, why) when `directory` has no room for `nbytes` more bytes from this process,
    and `writers` - 1 others writing as much beside it; `why` a phrase such as "0.4 MB is
    free on its file system". None when there is room (or it cannot be told). Room for all
    writers is asked, of the free space and of the file system (a quota): one asking for
    its own bytes only passed beside another that did the same, and their writes together
    then met the quota inside HDF5 (export --jobs 2 under a btrfs quota). Writers asking
    at the same moment count against each other, so a tight disk may refuse one early:
    that stops cleanly. HDF5 must not meet a full disk: after a write it failed in,
    freeing the file's objects crashes the process (h5py issue 914, reproduced with HDF5
    2.0 under a btrfs quota), so its writers ask first."""
    try:
        free = free_bytes(directory)
    except OSError:
        free = None
    if free is not None and free < nbytes * writers:
        return errno.ENOSPC, f"{free / 1e6:.1f} MB is free on its file system"
    code = allocation_refused(directory, nbytes * writers)
    if code is None:
        return None
    shown = f"; {free / 1e6:.1f} MB is free on the file system" if free is not None else ""
    if code == errno.EDQUOT:
        return code, f"a disk quota leaves less (allocating them failed{shown})"
    return code, f"allocating them failed: {describe_errno(code)}{shown}"


def check_output_directory(path, option: str) -> None:
    """Make directory `path` (named by command-line `option`), or raise saying why it cannot
    be made or written into: it, or the nearest of its parents that exists, is a file or
    read-only, or the file system refuses it."""
    out = pathlib.Path(path)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{option} {path}: is a file, not a directory")
    base = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    if not base.is_dir():
        raise NotADirectoryError(f"{option} {path}: {base} is a file, not a directory")
    if not os.access(base, os.W_OK):
        try:
            read_only = bool(os.statvfs(base).f_flag & os.ST_RDONLY)
        except (OSError, AttributeError):
            read_only = False
        raise PermissionError(f"{option} {path}: cannot write into {base}"
                              + (" (a read-only file system)" if read_only else " (no write permission)"))
    try:
        out.mkdir(parents=True, exist_ok=True)  # /proc and the like pass the checks above
    except OSError as exc:
        raise OSError(f"{option} {path}: cannot make the directory ({exc.strerror or exc})") from None
    why = why_no_new_file(out)  # and an existing one of them refuses new files
    if why:
        raise OSError(f"{option} {path}: cannot make a file in it ({why})")


@contextlib.contextmanager
def new_directories_undone_on_error(*paths):
    """The directories of `paths` that do not exist yet (check_output_directory makes them
    up front) are removed again, while empty, when the block raises: a refused command
    leaves no new empty folders."""
    made = []
    for path in filter(None, paths):
        part = pathlib.Path(path).absolute()
        while not part.exists() and part != part.parent:
            made.append(part)  # the deepest first
            part = part.parent
    try:
        yield
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # not empty (something was written there), or gone
                pass
        raise


def why_no_new_file(directory) -> str | None:
    """Why no file can be made in `directory` (None: one can), found by making one: /proc
    and the like pass os.access(W_OK) and refuse them."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def same_filesystem(a, b) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def _fsync_dir(directory: pathlib.Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def remove_stale_temporaries(directory, names) -> list[str]:
    """Remove the temporary files atomic_write left in `directory` for the files `names`
    (names, or a test of a name) when its process was killed mid-write (NAME.PID.THREAD.tmp;
    a checkpoint's is as large as the checkpoint), unless that process still runs here;
    their names. For a directory held alone (the run lock)."""
    import re
    wanted = names if callable(names) else names.__contains__
    removed = []
    for path in pathlib.Path(directory).glob("*.tmp"):
        match = re.fullmatch(r"(.+)\.(\d+)\.\d+\.tmp", path.name)
        if not match or not wanted(match.group(1)) or not path.is_file():
            continue
        try:
            os.kill(int(match.group(2)), 0)
            continue  # its writer is alive (on this host): not stale
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue  # another user's live process, or no pid at all: leave it
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass  # left for the next start
    return removed


def atomic_write(path, write) -> pathlib.Path:
    """Write `path` through `write(fileobj)` into a temporary file beside it, fsync, rename.

    On any error the temporary file is removed and the error re-raised: the previous
    `path`, if any, is untouched.
    """
    path = pathlib.Path(path)
    # a name per process and thread: two writers of one path must not write into, or
    # rename, each other's half-written file; one writer's next write reuses its name, so
    # a killed write leaves one stale file, not one per write
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)
    return path


def write_output(path, what: str, write) -> pathlib.Path:
    """atomic_write for a command's output file: a failed write (a full disk) is raised as
    a StorageError naming `path` and `what`, and leaves no partial file."""
    try:
        return atomic_write(path, write)
    except OSError as exc:
        raise StorageError.from_exception(path, what, exc) from exc


def allocate(fd: int, nbytes: int) -> None:
    """Give the file `fd` (empty) nbytes of real blocks: posix_fallocate, or zeros written
    where the file system does not support it. OSError (ENOSPC, ...) if they are not there."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        block = b"\0" * (1 << 20)
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[:min(left, len(block))])


class DiskReserve:
    """A file of `nbytes` preallocated bytes, released (deleted) when space runs out.

    Blocks are allocated with posix_fallocate, or written as zeros where a file system
    does not support it, so the space is really held (a sparse file would hold nothing).
    """

    def __init__(self, path, nbytes: int):
        self.path = pathlib.Path(path)
        self.nbytes = int(nbytes)
        self.held = False

    def create(self) -> None:
        """Hold the space; raises StorageError if it is not there."""
        try:
            self.path.unlink(missing_ok=True)  # one left by a killed run
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                allocate(fd, self.nbytes)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            raise StorageError.from_exception(self.path, f"a {self.nbytes / 1e6:.1f} MB disk reserve",
                                              exc) from exc
        self.held = True

    def release(self) -> int:
        """Delete the reserve; returns the bytes given back (0 if none was held)."""
        was = self.held
        self.held = False
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            return 0
        return self.nbytes if was else 0


class AppendFile:
    """Append-only text file written with whole-line writes.

    Each `write` is complete or undone: if the file system refuses part of it, the file is
    truncated back to its last complete line (truncating needs no space) and a
    StorageError is raised.
    """

    def __init__(self, path, mode: str = "a"):
        self.path = pathlib.Path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if mode == "w" else 0)
        self.fd = os.open(self.path, flags, 0o644)
        self.good_size = os.fstat(self.fd).st_size
        if mode != "w" and self.good_size:
            self._drop_partial_last_line()

    def _drop_partial_last_line(self):
        """A line cut off by an earlier crash would glue itself to the next row."""
        with open(self.path, "rb") as fh:
            fh.seek(max(0, self.good_size - 65536))
            tail = fh.read()
        if not tail.endswith(b"\n"):
            cut = tail.rfind(b"\n")
            self.good_size -= len(tail) - (cut + 1)
            os.ftruncate(self.fd, self.good_size)

    def write(self, text: str, what: str = "a row") -> None:
        data = text.encode()
        try:
            view = memoryview(data)
            while view:
                n = self._write(self.fd, view)
                view = view[n:]
        except OSError as exc:
            try:
                os.ftruncate(self.fd, self.good_size)
            except OSError:
                pass
            raise StorageError.from_exception(self.path, what, exc) from exc
        self.good_size += len(data)

    _write = staticmethod(os.write)  # tests replace it to simulate a full disk

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
