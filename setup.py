"""Build the Cython extension over the portable core; metadata lives in setup.cfg."""
import os
import shutil
import sys
import tempfile
import warnings

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError, LinkError

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


COMPILE_ARGS = ["-O3", "-std=c++17", "-fno-strict-aliasing", "-Wno-unused-function", "-fvisibility=hidden"]
NO_OPENMP_WARNING = """
******************************************************************************
WARNING: building hybridsim WITHOUT OpenMP: batched environments will run on one thread.
Install a compiler with OpenMP support (g++ has it) and reinstall.
******************************************************************************
"""


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
        extra_compile_args=COMPILE_ARGS,
        # the sound observation's hooks (cuda/tia_sound.h) only where an Emulator makes sound:
        # elsewhere (the vector engine) they would cost a thread-local lookup per audio write
        define_macros=[("HS_TIA_SOUND_HOOKS", "1")] if name == "_console.pyx" else [],
    )
    for name in sorted(os.listdir(PYX_DIR))
    if name.endswith(".pyx")
]


if not extensions:  # an sdist made without MANIFEST.in's pyx/*.pyx: no compiled engine
    sys.exit(f"error: no Cython sources (pyx/*.pyx) under {HERE}: hybridsim's extensions cannot "
             f"be built from this tree or sdist")


class ParallelBuildExt(build_ext):
    """Compiles the extensions side by side (one per core) unless -j/--parallel says otherwise
    (pip runs build_ext without -j: on 2 cores `pip wheel .` took 397 s one after another,
    232 s side by side), with OpenMP where the compiler setuptools chose has it. Checked
    here, with that compiler, not when setup.py is read: sdist and egg_info need none."""

    def finalize_options(self):
        if self.parallel is None:
            self.parallel = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        super().finalize_options()

    def build_extensions(self):
        # setuptools >= 72 compiles C++ with compiler_so_cxx ($CXX or Python's own), older
        # ones with compiler_so ($CC)
        command = getattr(self.compiler, "compiler_so_cxx", None) or self.compiler.compiler_so
        program = command[0] if command and not command[0].startswith("-") else ""  # CXX="  "
        if not program or shutil.which(program) is None:
            # setuptools prints a CompileError as "error: ..." and exits 1; callers can catch it
            raise CompileError(f"no C++ compiler: {program!r} (from $CXX, or the compiler Python "
                               f"was built with) is not on PATH; install g++ or set CXX to one")
        if os.environ.get("HYBRIDSIM_NO_OPENMP", "0") != "1" and self._links_openmp():
            for extension in self.extensions:
                extension.extra_compile_args = [*extension.extra_compile_args, "-fopenmp"]
                extension.extra_link_args = [*extension.extra_link_args, "-fopenmp"]
        else:
            warnings.warn(NO_OPENMP_WARNING)
            sys.stderr.write(NO_OPENMP_WARNING)
        super().build_extensions()

    def _links_openmp(self) -> bool:
        """A tiny OpenMP program builds and links as the extensions will."""
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "omp_check.cpp")
            with open(source, "w") as f:
                f.write("#include <omp.h>\nint omp_check() { return omp_get_max_threads(); }\n")
            try:
                objects = self.compiler.compile([source], output_dir=tmp, extra_postargs=["-fopenmp"])
                self.compiler.link_shared_object(objects, os.path.join(tmp, "omp_check.so"),
                                                 extra_postargs=["-fopenmp"], target_lang="c++")
            except (CompileError, LinkError):
                return False
        return True


setup(
    ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES),
    cmdclass={"build_ext": ParallelBuildExt},
)
