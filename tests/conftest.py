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


@pytest.fixture
def small_quota(tmp_path):
    """mount(limit) -> a fresh directory under a disk quota of `limit` (a btrfs subvolume
    with a qgroup limit, on a 512 MB loop-mounted image): writes beyond it fail with
    EDQUOT while statvfs shows hundreds of MB free, as under a cluster's user quota."""
    mounted = []

    def mount(limit: str) -> pathlib.Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a file system with a quota needs root")
        tools = {name: shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
                 for name in ("mkfs.btrfs", "btrfs", "mount", "umount")}
        if not all(tools.values()):
            pytest.skip(f"no {', '.join(n for n, p in tools.items() if not p)} (btrfs-progs; "
                        f"scripts/ci_install_system.sh installs it)")
        image, where = tmp_path / f"quota{len(mounted)}.img", tmp_path / f"quota{len(mounted)}"
        with open(image, "wb") as fh:
            fh.truncate(512 << 20)
        where.mkdir()
        steps = [[tools["mkfs.btrfs"], "-q", str(image)], [tools["mount"], "-o", "loop", str(image), str(where)],
                 [tools["btrfs"], "quota", "enable", str(where)],
                 [tools["btrfs"], "subvolume", "create", str(where / "limited")],
                 [tools["btrfs"], "qgroup", "limit", limit, str(where / "limited")]]
        for step in steps:
            out = subprocess.run(step, capture_output=True, text=True)
            if out.returncode != 0:
                pytest.skip(f"cannot make a btrfs quota here ({' '.join(step[:2])}): {out.stderr.strip()}")
            if step[0] == tools["mount"]:
                mounted.append(where)
        os.chmod(where / "limited", 0o777)
        return where / "limited"

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
