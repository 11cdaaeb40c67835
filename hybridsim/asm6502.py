"""The 6502 opcode table and a small two-pass assembler.

The table is the single source for the core's opcode switch (tools/gen_m6502.py) and for
the test programs and synthetic ROMs the tests and benchmarks build.
"""
from __future__ import annotations

# Opcode map: mnemonic -> {mode: opcode}.  The 12 JAM opcodes are absent on purpose.
OPCODES = {
    "ADC": {"imm": 0x69, "zp": 0x65, "zpx": 0x75, "abs": 0x6D, "absx": 0x7D, "absy": 0x79, "indx": 0x61, "indy": 0x71},
    "AND": {"imm": 0x29, "zp": 0x25, "zpx": 0x35, "abs": 0x2D, "absx": 0x3D, "absy": 0x39, "indx": 0x21, "indy": 0x31},
    "ANC": {"imm": [0x0B, 0x2B]},
    "ANE": {"imm": 0x8B},
    "ARR": {"imm": 0x6B},
    "ASL": {"zp": 0x06, "zpx": 0x16, "abs": 0x0E, "absx": 0x1E},
    "ASLA": {"imp": 0x0A},
    "ASR": {"imm": 0x4B},
    "BCC": {"imm": 0x90}, "BCS": {"imm": 0xB0}, "BEQ": {"imm": 0xF0}, "BNE": {"imm": 0xD0},
    "BMI": {"imm": 0x30}, "BPL": {"imm": 0x10}, "BVC": {"imm": 0x50}, "BVS": {"imm": 0x70},
    "BIT": {"zp": 0x24, "abs": 0x2C},
    "BRK": {"imp": 0x00},
    "CLC": {"imp": 0x18}, "CLD": {"imp": 0xD8}, "CLI": {"imp": 0x58}, "CLV": {"imp": 0xB8},
    "SEC": {"imp": 0x38}, "SED": {"imp": 0xF8}, "SEI": {"imp": 0x78},
    "CMP": {"imm": 0xC9, "zp": 0xC5, "zpx": 0xD5, "abs": 0xCD, "absx": 0xDD, "absy": 0xD9, "indx": 0xC1, "indy": 0xD1},
    "CPX": {"imm": 0xE0, "zp": 0xE4, "abs": 0xEC},
    "CPY": {"imm": 0xC0, "zp": 0xC4, "abs": 0xCC},
    "DCP": {"zp": 0xC7, "zpx": 0xD7, "abs": 0xCF, "absx": 0xDF, "absy": 0xDB, "indx": 0xC3, "indy": 0xD3},
    "DEC": {"zp": 0xC6, "zpx": 0xD6, "abs": 0xCE, "absx": 0xDE},
    "DEX": {"imp": 0xCA}, "DEY": {"imp": 0x88},
    "EOR": {"imm": 0x49, "zp": 0x45, "zpx": 0x55, "abs": 0x4D, "absx": 0x5D, "absy": 0x59, "indx": 0x41, "indy": 0x51},
    "INC": {"zp": 0xE6, "zpx": 0xF6, "abs": 0xEE, "absx": 0xFE},
    "INX": {"imp": 0xE8}, "INY": {"imp": 0xC8},
    "ISB": {"zp": 0xE7, "zpx": 0xF7, "abs": 0xEF, "absx": 0xFF, "absy": 0xFB, "indx": 0xE3, "indy": 0xF3},
    "JMP": {"abs": 0x4C, "ind": 0x6C},
    "JSR": {"imp": 0x20},
    "LAS": {"absy": 0xBB},
    "LAX": {"zp": 0xA7, "zpy": 0xB7, "abs": 0xAF, "absy": 0xBF, "indx": 0xA3, "indy": 0xB3},
    "LDA": {"imm": 0xA9, "zp": 0xA5, "zpx": 0xB5, "abs": 0xAD, "absx": 0xBD, "absy": 0xB9, "indx": 0xA1, "indy": 0xB1},
    "LDX": {"imm": 0xA2, "zp": 0xA6, "zpy": 0xB6, "abs": 0xAE, "absy": 0xBE},
    "LDY": {"imm": 0xA0, "zp": 0xA4, "zpx": 0xB4, "abs": 0xAC, "absx": 0xBC},
    "LSR": {"zp": 0x46, "zpx": 0x56, "abs": 0x4E, "absx": 0x5E},
    "LSRA": {"imp": 0x4A},
    "LXA": {"imm": 0xAB},
    "NOP": {"imm": [0x80, 0x82, 0x89, 0xC2, 0xE2], "zp": [0x04, 0x44, 0x64],
            "zpx": [0x14, 0x34, 0x54, 0x74, 0xD4, 0xF4], "abs": 0x0C,
            "absx": [0x1C, 0x3C, 0x5C, 0x7C, 0xDC, 0xFC]},
    "NOPI": {"imp": [0x1A, 0x3A, 0x5A, 0x7A, 0xDA, 0xEA, 0xFA]},
    "ORA": {"imm": 0x09, "zp": 0x05, "zpx": 0x15, "abs": 0x0D, "absx": 0x1D, "absy": 0x19, "indx": 0x01, "indy": 0x11},
    "PHA": {"imp": 0x48}, "PHP": {"imp": 0x08}, "PLA": {"imp": 0x68}, "PLP": {"imp": 0x28},
    "RLA": {"zp": 0x27, "zpx": 0x37, "abs": 0x2F, "absx": 0x3F, "absy": 0x3B, "indx": 0x23, "indy": 0x33},
    "ROL": {"zp": 0x26, "zpx": 0x36, "abs": 0x2E, "absx": 0x3E},
    "ROLA": {"imp": 0x2A},
    "ROR": {"zp": 0x66, "zpx": 0x76, "abs": 0x6E, "absx": 0x7E},
    "RORA": {"imp": 0x6A},
    "RRA": {"zp": 0x67, "zpx": 0x77, "abs": 0x6F, "absx": 0x7F, "absy": 0x7B, "indx": 0x63, "indy": 0x73},
    "RTI": {"imp": 0x40}, "RTS": {"imp": 0x60},
    "SAX": {"zp": 0x87, "zpy": 0x97, "abs": 0x8F, "indx": 0x83},
    "SBC": {"imm": [0xE9, 0xEB], "zp": 0xE5, "zpx": 0xF5, "abs": 0xED, "absx": 0xFD, "absy": 0xF9, "indx": 0xE1, "indy": 0xF1},
    "SBX": {"imm": 0xCB},
    "SHA": {"absy": 0x9F, "indy": 0x93},
    "SHS": {"absy": 0x9B},
    "SHX": {"absy": 0x9E},
    "SHY": {"absx": 0x9C},
    "SLO": {"zp": 0x07, "zpx": 0x17, "abs": 0x0F, "absx": 0x1F, "absy": 0x1B, "indx": 0x03, "indy": 0x13},
    "SRE": {"zp": 0x47, "zpx": 0x57, "abs": 0x4F, "absx": 0x5F, "absy": 0x5B, "indx": 0x43, "indy": 0x53},
    "STA": {"zp": 0x85, "zpx": 0x95, "abs": 0x8D, "absx": 0x9D, "absy": 0x99, "indx": 0x81, "indy": 0x91},
    "STX": {"zp": 0x86, "zpy": 0x96, "abs": 0x8E},
    "STY": {"zp": 0x84, "zpx": 0x94, "abs": 0x8C},
    "TAX": {"imp": 0xAA}, "TAY": {"imp": 0xA8}, "TSX": {"imp": 0xBA},
    "TXA": {"imp": 0x8A}, "TXS": {"imp": 0x9A}, "TYA": {"imp": 0x98},
}

JAM_OPCODES = [0x02, 0x12, 0x22, 0x32, 0x42, 0x52, 0x62, 0x72, 0x92, 0xB2, 0xD2, 0xF2]


# Operand size in bytes for each addressing mode.
MODE_SIZE = {"imp": 0, "imm": 1, "zp": 1, "zpx": 1, "zpy": 1, "abs": 2, "absx": 2, "absy": 2,
             "ind": 2, "indx": 1, "indy": 1, "rel": 1}
BRANCHES = {"BCC", "BCS", "BEQ", "BNE", "BMI", "BPL", "BVC", "BVS"}
# Mnemonics the table spells differently for the core's benefit.
_ALIASES = {("ASL", "imp"): "ASLA", ("LSR", "imp"): "LSRA", ("ROL", "imp"): "ROLA",
            ("ROR", "imp"): "RORA", ("NOP", "imp"): "NOPI"}


def opcode_for(mnemonic: str, mode: str) -> int:
    """Return the (first) opcode for a mnemonic and addressing mode; 'rel' means a branch."""
    mnemonic = mnemonic.upper()
    if mode == "rel":
        if mnemonic not in BRANCHES:
            raise ValueError(f"{mnemonic} is not a branch")
        mode = "imm"
    mnemonic = _ALIASES.get((mnemonic, mode), mnemonic)
    try:
        codes = OPCODES[mnemonic][mode]
    except KeyError:
        raise ValueError(f"no opcode for {mnemonic} in mode {mode}") from None
    return codes[0] if isinstance(codes, list) else codes


class Assembler:
    """Two-pass assembler: emit instructions and labels, then `assemble()` resolves labels.

    >>> asm = Assembler(0x1000)
    >>> asm.label("top"); asm.op("DEX"); asm.op("BNE", "rel", "top")
    >>> asm.assemble()
    b'\\xca\\xd0\\xfd'
    """

    def __init__(self, origin: int):
        self.origin = origin
        self._items: list = []  # (kind, payload)
        self._labels: dict[str, int] = {}
        self._pc = origin

    @property
    def pc(self) -> int:
        return self._pc

    def label(self, name: str) -> None:
        if name in self._labels:
            raise ValueError(f"label {name!r} defined twice")
        self._labels[name] = self._pc

    def op(self, mnemonic: str, mode: str = "imp", operand=None) -> None:
        code = opcode_for(mnemonic, mode)
        self._items.append(("op", (self._pc, code, mode, operand)))
        self._pc += 1 + MODE_SIZE[mode]

    def byte(self, *values: int) -> None:
        self._items.append(("bytes", bytes(v & 0xFF for v in values)))
        self._pc += len(values)

    def word(self, value) -> None:
        self._items.append(("word", value))
        self._pc += 2

    def _resolve(self, value) -> int:
        if isinstance(value, str):
            if value not in self._labels:
                raise ValueError(f"undefined label {value!r}")
            return self._labels[value]
        return int(value)

    def assemble(self) -> bytes:
        out = bytearray()
        for kind, payload in self._items:
            if kind == "bytes":
                out += payload
            elif kind == "word":
                v = self._resolve(payload)
                out += bytes((v & 0xFF, (v >> 8) & 0xFF))
            else:
                pc, code, mode, operand = payload
                out.append(code)
                size = MODE_SIZE[mode]
                if size == 0:
                    continue
                value = self._resolve(operand)
                if mode == "rel":
                    value -= pc + 2
                    if not -128 <= value <= 127:
                        raise ValueError(f"branch at ${pc:04X} out of range")
                    out.append(value & 0xFF)
                elif size == 1:
                    if not 0 <= value <= 0xFF:
                        raise ValueError(f"operand ${value:X} does not fit one byte at ${pc:04X}")
                    out.append(value)
                else:
                    out += bytes((value & 0xFF, (value >> 8) & 0xFF))
        return bytes(out)
