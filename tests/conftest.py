import os
import pathlib

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


def pytest_configure(config):
    config.addinivalue_line("markers", "emulated: builds or uses the host-emulated kernels (minutes to build "
                                       "on a fresh machine; scripts/device_check.sh leaves these out)")


def pytest_collection_modifyitems(config, items):
    for item in items:  # every test on the host-emulated kernels takes this fixture
        if "emulation_library" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.emulated)
