"""Reader for Tom Harte's SingleStepTests in the binary layout described in
../shared/testdata/6502/README.md (big-endian fields)."""
import dataclasses
import pathlib


@dataclasses.dataclass
class CpuSnapshot:
    pc: int
    s: int
    a: int
    x: int
    y: int
    p: int
    ram: list  # [(addr, value)]


@dataclasses.dataclass
class SingleStepCase:
    name: str
    initial: CpuSnapshot
    final: CpuSnapshot
    cycles: int


def _read_snapshot(buf: bytes, pos: int):
    pc = (buf[pos] << 8) | buf[pos + 1]
    s, a, x, y, p, n = buf[pos + 2:pos + 8]
    pos += 8
    ram = []
    for _ in range(n):
        ram.append(((buf[pos] << 8) | buf[pos + 1], buf[pos + 2]))
        pos += 3
    return CpuSnapshot(pc, s, a, x, y, p, ram), pos


def read_cases(path: pathlib.Path) -> list:
    buf = path.read_bytes()
    pos = 0
    cases = []
    while pos < len(buf):
        name = buf[pos:pos + 10].split(b"\0", 1)[0].decode("ascii", "replace")
        pos += 10
        initial, pos = _read_snapshot(buf, pos)
        final, pos = _read_snapshot(buf, pos)
        n_cycles = buf[pos]
        pos += 1 + 4 * n_cycles
        cases.append(SingleStepCase(name, initial, final, n_cycles))
    if pos != len(buf):
        raise ValueError(f"{path}: trailing bytes")
    return cases
