"""Build the Cython extension over the portable core; metadata lives in setup.cfg."""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CORE_DIR = os.path.join(HERE, "cuda")

# Global Cython directives in one place. HYBRIDSIM_BOUNDSCHECK=1 turns checks on for debugging.
DEBUG_CHECKS = os.environ.get("HYBRIDSIM_BOUNDSCHECK", "0") == "1"
DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG_CHECKS,
    "wraparound": False,
    "initializedcheck": DEBUG_CHECKS,
    "cdivision": True,
}


CXX = shlex.split(os.environ.get("CXX") or "c++")  # the .cpp sources build with $CXX, not $CC
HAVE_CXX = shutil.which(CXX[0]) is not None
if not HAVE_CXX:  # the build fails with "No such file"; say what is missing first
    sys.stderr.write(f"\nerror: no C++ compiler: {CXX[0]!r} (the CXX variable, or c++) is not on PATH; "
                     f"install g++ or set CXX to one\n\n")


def compiler_supports_openmp():
    """Try to compile and link a tiny OpenMP program with the C++ compiler."""
    if not HAVE_CXX:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "omp_check.cpp")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(){return omp_get_max_threads() > 0 ? 0 : 1;}\n")
        result = subprocess.run([*CXX, "-fopenmp", src, "-o", os.path.join(tmp, "omp_check")],
                                capture_output=True)
        return result.returncode == 0


USE_OPENMP = os.environ.get("HYBRIDSIM_NO_OPENMP", "0") != "1" and compiler_supports_openmp()
if not USE_OPENMP and HAVE_CXX:
    banner = "*" * 78
    msg = (f"\n{banner}\nWARNING: building hybridsim WITHOUT OpenMP: batched environments will run "
           f"on one thread.\nInstall a compiler with OpenMP support (g++ has it) and reinstall.\n{banner}\n")
    warnings.warn(msg)
    sys.stderr.write(msg)

compile_args = ["-O3", "-std=c++17", "-fno-strict-aliasing", "-Wno-unused-function", "-fvisibility=hidden"]
link_args = []
if USE_OPENMP:
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")

# Every pyx/NAME.pyx becomes the extension hybridsim.NAME over the same core headers.
PYX_DIR = os.path.join(HERE, "pyx")
extensions = [
    Extension(
        f"hybridsim.{os.path.splitext(name)[0]}",
        sources=[os.path.join("pyx", name)],
        include_dirs=[CORE_DIR, numpy.get_include()],
        depends=[os.path.join(CORE_DIR, f) for f in sorted(os.listdir(CORE_DIR))]
        + [os.path.join("pyx", f) for f in sorted(os.listdir(PYX_DIR)) if f.endswith((".h", ".pxd"))],
        language="c++",
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
    for name in sorted(os.listdir(PYX_DIR))
    if name.endswith(".pyx")
]


if not extensions:  # an sdist made without MANIFEST.in's pyx/*.pyx: no compiled engine
    sys.exit(f"error: no Cython sources (pyx/*.pyx) under {HERE}: hybridsim's extensions cannot "
             f"be built from this tree or sdist")


class ParallelBuildExt(build_ext):
    """Compiles the extensions side by side (one per core) unless -j/--parallel says otherwise.
    pip runs build_ext without -j: on 2 cores `pip wheel .` took 397 s one after another,
    232 s side by side."""

    def finalize_options(self):
        if self.parallel is None:
            self.parallel = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        super().finalize_options()


setup(
    ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES),
    cmdclass={"build_ext": ParallelBuildExt},
)
