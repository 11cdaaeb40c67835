import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def shared_dir() -> pathlib.Path:
    """../shared beside the checkout (or $HYBRIDSIM_SHARED): reference data, not shipped."""
    return pathlib.Path(os.environ.get("HYBRIDSIM_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def testdata_6502() -> pathlib.Path:
    path = shared_dir() / "testdata" / "6502"
    if not path.is_dir():
        pytest.skip(f"6502 reference data not found at {path} (set HYBRIDSIM_SHARED)")
    return path


@pytest.fixture
def small_fs(tmp_path):
    """mount(size) -> a fresh tmpfs of that size; unmounted afterwards."""
    mounted = []

    def mount(size: str) -> pathlib.Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        if shutil.which("mount") is None:
            pytest.skip("no mount command")
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                              str(where)], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "emulated: builds or uses the host-emulated kernels (minutes to build "
                                       "on a fresh machine; scripts/device_check.sh leaves these out)")


def pytest_collection_modifyitems(config, items):
    for item in items:  # every test on the host-emulated kernels takes this fixture
        if "emulation_library" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.emulated)
