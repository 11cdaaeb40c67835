"""Cartridge type detection as ALE (ale-py 0.12.1, Stella 2.x Cart.cxx) decides it.

`detect_cart_type(rom)` returns the type name hybridsim's console understands and the
ROM bytes that type uses (ALE keeps only the first half of a ROM whose halves are
equal). Types ALE can detect but the console does not implement raise ValueError.
"""
import hashlib

# Two 8K ROMs ALE starts from bank 0 instead of bank 1 (by md5).
F8_SWAPPED_MD5 = {"bc24440b59092559a1ec26055fd1270e", "75ee371ccfc4f43e7d9b8f24e1266b55"}


def _count_signature(image, signature, min_hits):
    """ALE's searchForBytes: non-overlapping matches (it skips past each hit, plus one)."""
    hits, i, n = 0, 0, len(signature)
    while i < len(image) - n:
        if image[i:i + n] == signature:
            hits += 1
            i += n
            if hits >= min_hits:
                return True
        i += 1
    return hits >= min_hits


def _any_signature(image, signatures, min_hits=1):
    return any(_count_signature(image, bytes(s), min_hits) for s in signatures)


def _probably_sc(image):
    """Superchip RAM images start every 4K bank with 256 equal bytes."""
    return all(len(set(image[b:b + 256])) == 1 for b in range(0, len(image), 4096))


def _probably_e0(image):
    return _any_signature(image, [(0x8D, 0xE0, 0x1F), (0x8D, 0xE0, 0x5F), (0x8D, 0xE9, 0xFF),
                                  (0xAD, 0xE9, 0xFF), (0xAD, 0xED, 0xFF), (0xAD, 0xF3, 0xBF)])


def _probably_fe(image):
    return _any_signature(image, [(0x20, 0x00, 0xD0, 0xC6, 0xC5), (0x20, 0xC3, 0xF8, 0xA5, 0x82),
                                  (0xD0, 0xFB, 0x20, 0x73, 0xFE), (0x20, 0x00, 0xF0, 0x84, 0xD6)])


def _probably_cv(image):
    return _any_signature(image, [(0x9D, 0xFF, 0xF3), (0x99, 0x00, 0xF4)])


def _probably_3f(image):
    return _count_signature(image, bytes((0x85, 0x3F)), 2)


def _probably_3e(image):
    return _count_signature(image, bytes((0x85, 0x3E, 0xA9, 0x00)), 1)


def _probably_ua(image):
    return _count_signature(image, bytes((0x8D, 0x40, 0x02)), 1)


def _probably_e7(image):
    first = image[0x3800]
    if any(b != first for b in image[0x3800:0x3A00]):
        return False
    return any(b != first for b in image[0x3800 - 32:0x3800]) or any(b != first for b in image[0x3A00:0x3A20])


def ale_cart_type(rom: bytes) -> str:
    """The type name ALE's auto-detection picks (ALE's own names, e.g. 'F8SC', 'DPC')."""
    size = len(rom)
    if hashlib.md5(rom).hexdigest() in F8_SWAPPED_MD5:
        return "F8 swapped"
    if size and size % 8448 == 0:
        return "AR"
    if size == 2048 or (size == 4096 and rom[:2048] == rom[2048:]):
        return "CV" if _probably_cv(rom) else "2K"
    if size == 4096:
        return "CV" if _probably_cv(rom) else "4K"
    if size == 8192:
        if _probably_sc(rom):
            return "F8SC"
        if rom[:4096] == rom[4096:]:
            return "4K"
        for name, test in (("E0", _probably_e0), ("3E", _probably_3e), ("3F", _probably_3f),
                           ("UA", _probably_ua), ("FE", _probably_fe)):
            if test(rom):
                return name
        return "F8"
    if size in (10495, 10496, 10240):
        return "DPC"
    if size == 12288:
        return "FASC"
    if size == 16384:
        if _probably_sc(rom):
            return "F6SC"
        for name, test in (("E7", _probably_e7), ("3E", _probably_3e), ("3F", _probably_3f)):
            if test(rom):
                return name
        return "F6"
    return f"unrecognised ({size} bytes)"


SUPPORTED = {"2K": 2048, "4K": 4096, "F8": 8192, "F8 swapped": 8192, "F6": 16384, "E0": 8192,
             "FE": 8192, "F8SC": 8192, "F6SC": 16384, "DPC": 10240}  # DPC: program + display


def detect_cart_type(rom: bytes, cart_type: str = "AUTO-DETECT"):
    """(type, image) for hybridsim's Emulator; cart_type is the ROM's Cartridge.Type."""
    kind = ale_cart_type(rom) if cart_type in ("", "AUTO-DETECT", None) else cart_type
    if kind not in SUPPORTED:
        raise ValueError(f"cartridge type {kind!r} is not supported by hybridsim's console "
                         f"(supported: {sorted(SUPPORTED)})")
    size = SUPPORTED[kind]
    if len(rom) < size:
        raise ValueError(f"a {kind} cartridge needs {size} bytes, the ROM has {len(rom)}")
    return kind, bytes(rom[:size])
