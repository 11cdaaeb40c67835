"""Finding the MPI launcher for the tests that start ranks."""
import pathlib
import shutil
import sys

import pytest


def mpiexec_or_skip() -> str:
    """The mpiexec beside this Python (pip's mpich puts it there), else PATH's; skip without one."""
    exe = (shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent))
           or shutil.which("mpiexec"))
    if exe is None:
        pytest.skip("no mpiexec (pip install mpi4py mpich)")
    return exe
