"""Names that are used but never defined, in every Python file of the repository.

Code that runs only on a GPU machine (benchmarks/gpu_bench.py's device branches, the CuPy
paths of hybridsim/gpu.py) is not executed by this suite, so a NameError there would first
show on a scarce device session; pyflakes finds them without running the code. Only
undefined names are errors here (unused imports and the like are not)."""
import pathlib

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api", reason="pyflakes not installed (pip install '.[test]')")
from pyflakes import messages, reporter  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("hybridsim", "benchmarks", "scripts", "tools", "tests")
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(reporter.Reporter):
    def __init__(self):
        self.problems = []

    def unexpectedError(self, filename, msg):
        self.problems.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.problems.append(f"{filename}:{lineno}: syntax error: {msg}")

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.problems.append(str(message))


def python_files():
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def test_no_undefined_names():
    files = python_files()
    assert len(files) > 50
    found = _Collect()
    for path in files:
        pyflakes_api.checkPath(str(path), found)
    assert not found.problems, "\n".join(found.problems)


def test_the_check_sees_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(flag):\n    if flag:\n        import cupy\n    return cupy.zeros(1)\n\n"
                   "def g():\n    return numpy.ones(2)\n")
    found = _Collect()
    pyflakes_api.checkPath(str(bad), found)
    assert len(found.problems) == 1 and "undefined name 'numpy'" in found.problems[0], found.problems
