"""The MPI and Slurm launch files (the repository's mpi_launch/), installed with the package
as hybridsim/mpi_launch so that a pip-installed hybridsim has them too.

- `hybridsim-mpirun ARGS`: runs the installed wrapper (mpi_launch/README.md), with this
  Python as the ranks' interpreter, and pip's MPICH installed for it (`hybridsim[mpi]`) as
  the launcher where there is one, unless the options or $PYTHON / $MPIEXEC say otherwise.
- `hybridsim launchers DEST`: copies the files to DEST/mpi_launch/, where a batch system's
  nodes see them; the Slurm templates then run with `HYBRIDSIM_DIR=DEST`.
"""
from __future__ import annotations

import filecmp
import os
import pathlib
import shutil
import sys

from hybridsim import storage

# Relative to mpi_launch/; the executable ones get mode 755 in a copy. A wheel keeps the
# modes of package data, but a copy must not depend on how the package was installed.
LAUNCH_FILES = {
    "README.md": False,
    "hybridsim-mpirun": True,
    "rank_env.sh": True,
    "slurm/preemptible.sh": False,
    "slurm/single_node.sbatch": True,
    "slurm/multi_node.sbatch": True,
    "slurm/array.sbatch": True,
}


def launch_dir() -> pathlib.Path:
    """The installed hybridsim/mpi_launch, or, running from a source tree, the checkout's."""
    package = pathlib.Path(__file__).resolve().parent
    for folder in (package / "mpi_launch", package.parent / "mpi_launch"):
        if all((folder / name).is_file() for name in LAUNCH_FILES):
            return folder
    raise FileNotFoundError(f"hybridsim at {package} has no complete mpi_launch/ folder (in it or beside "
                            f"it); reinstall hybridsim (`pip install hybridsim[mpi]`)")


def python_mpiexec() -> str | None:
    """The mpiexec of pip's MPICH (`pip install hybridsim[mpi]`) as installed for this
    Python (its venv's bin/, or ~/.local/bin for a --user install), which its mpi4py goes
    with; None without that package."""
    from importlib import metadata
    try:
        files = metadata.distribution("mpich").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "mpiexec" and file.parent.name in ("bin", "Scripts"):
            path = pathlib.Path(os.path.normpath(file.locate()))  # the RECORD's ../../../bin
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


def copy_launch_files(dest, overwrite: bool = False) -> tuple[pathlib.Path, list[str], list[str]]:
    """Copy the launch files into DEST/mpi_launch/. A file already there with other contents
    (a template someone edited, or a copy from another hybridsim version) is not overwritten
    unless `overwrite`: the copy is refused, naming it, before anything is written. Returns
    the folder, the files it wrote, and those of them it replaced; an identical one stays,
    its executable bits restored if it lost them."""
    source = launch_dir()
    target = pathlib.Path(dest).expanduser().absolute() / "mpi_launch"
    if target.resolve() == source.resolve():
        raise ValueError(f"{target} is where the launch files are installed; copy them somewhere else")
    # a file, read-only place or /proc: said before anything is written, not as an errno
    storage.check_output_directory(target, "the launch folder")
    in_the_way, differing, to_write, to_mark = [], [], [], []
    for name, executable in LAUNCH_FILES.items():
        path = target / name
        folders = [target / up for up in pathlib.Path(name).parents if up != pathlib.Path(".")]
        blocking = [str(folder) for folder in folders if folder.exists() and not folder.is_dir()]
        if blocking:
            entry = f"{blocking[0]} (a file where a folder of them goes)"
            if entry not in in_the_way:  # one file can block several of them
                in_the_way.append(entry)
        elif path.is_dir() or (path.exists() and not path.is_file()):
            in_the_way.append(f"{path} (not a file)")
        elif not path.exists():
            to_write.append(name)
        elif not filecmp.cmp(source / name, path, shallow=False):
            differing.append(path)
        elif executable and not os.access(path, os.X_OK):
            to_mark.append(path)
    if in_the_way:
        raise FileExistsError(f"in the way of the launch files: {', '.join(in_the_way)}")
    if differing and not overwrite:
        raise FileExistsError(f"{len(differing)} launch file(s) already exist with other contents (edited, or "
                              f"copied by another hybridsim version), left as they are: {', '.join(map(str, differing))}; "
                              f"move them away, choose another destination, or pass --overwrite to replace them")
    replaced = [str(path.relative_to(target)) for path in differing]
    for name in to_write + replaced:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)

        def write(out, name=name):  # the mode set before the rename: never a half-made script
            out.write((source / name).read_bytes())
            os.fchmod(out.fileno(), 0o755 if LAUNCH_FILES[name] else 0o644)
        storage.write_output(path, "a launch file", write)
    for path in to_mark:  # the contents are ours; only the mode changes
        os.chmod(path, path.stat().st_mode | 0o111)
    return target, to_write + replaced, replaced


def mpirun(argv=None) -> int:
    """The `hybridsim-mpirun` script: exec the installed bash wrapper. Its ranks run this
    Python (the one with hybridsim) unless $PYTHON or --python names another, launched by
    pip's MPICH installed for it if there is one, unless $MPIEXEC, --mpiexec or --mpi-flavor
    says otherwise: the MPI installed with that Python's mpi4py, rather than whichever
    mpiexec is first on PATH (a cluster's Open MPI module, say)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        script = launch_dir() / "hybridsim-mpirun"
    except FileNotFoundError as exc:
        print(f"hybridsim-mpirun: error: {exc}", file=sys.stderr)
        return 2
    bash = shutil.which("bash")
    if bash is None:
        print("hybridsim-mpirun: error: no bash on PATH; the wrapper is a bash script", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    beside = python_mpiexec()
    # not with --mpi-flavor: a launcher of that flavour is meant, which may not be MPICH's
    options = argv[:argv.index("--")] if "--" in argv else argv  # the wrapper's, not train's
    if beside and not any(a == "--mpi-flavor" or a.startswith("--mpi-flavor=") for a in options):
        env.setdefault("MPIEXEC", beside)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(bash, [bash, str(script), *argv], env)
    except OSError as exc:
        print(f"hybridsim-mpirun: error: cannot run {bash}: {exc}", file=sys.stderr)
    return 2
