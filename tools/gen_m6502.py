#!/usr/bin/env python3
"""Generate cuda/m6502_ops.inc, the opcode handlers of the 6507 core, and
m6502_dispatch.inc, the jump table of its threaded dispatch.

Run `python tools/gen_m6502.py` after editing the tables below; a test checks that the
committed files equal this script's output (`--check`).

The model is ALE's "M6502Low" CPU (ale-py 0.12.1), see ../shared/ALE_FACTS.md:
- the whole base cycle count is charged right after the opcode fetch, first thing in
  each handler;
- a read through abs,X / abs,Y / (zp),Y that crosses a page adds one cycle *before* the
  operand is read; a taken branch adds 1 cycle, 2 if it lands on another page;
- read-modify-write instructions write once (no dummy write of the old value);
- (zp,X) and (zp),Y fetch the pointer's high byte from zp+1 without wrapping to page 0,
  so a pointer at $FF reads its high byte from $0100;
- decimal ADC/SBC go through ALE's BCD tables (see bcd_to_bin / bin_to_bcd in m6502.h).
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# Addressing modes.  Suffix r = read the operand, w = address only, m = read, modify, write.
# Each snippet leaves the effective address in `addr` and, for r/m, the value in `operand`.
MODE_CODE = {
    "imp": "",
    "imm": "operand = fetch();",
    "zp": "addr = fetch();",
    "zpx": "addr = (uint8_t)(fetch() + x);",
    "zpy": "addr = (uint8_t)(fetch() + y);",
    "abs": "addr = fetch_word();",
    "absx": "addr = fetch_word();",
    "absy": "addr = fetch_word();",
    "indx": "{ uint16_t ptr = (uint8_t)(fetch() + x);"
            " addr = (uint16_t)(rd_low(ptr) | (rd_low((uint16_t)(ptr + 1)) << 8)); }",
    "indy": "{ uint16_t ptr = fetch();"
            " addr = (uint16_t)(rd_low(ptr) | (rd_low((uint16_t)(ptr + 1)) << 8)); }",
    "ind": "{ uint16_t ptr = fetch_word();"
           " uint16_t hi = ((ptr ^ (ptr + 1)) & 0xFF00) ? (uint16_t)(ptr & 0xFF00) : (uint16_t)(ptr + 1);"
           " addr = (uint16_t)(rd(ptr) | (rd(hi) << 8)); }",
}
INDEX_REG = {"absx": "x", "absy": "y", "indy": "y"}

# Operations: (kind, C++ body).  kind r/w/m selects how the addressing mode treats memory.
OPS = {
    "ADC": ("r", "adc(operand);"),
    "AND": ("r", "a &= operand; set_nz(a);"),
    "ANC": ("r", "a &= operand; set_nz(a); c = a >> 7;"),
    "ANE": ("r", "a = (uint8_t)((a | 0xEE) & x & operand); set_nz(a);"),
    "ARR": ("r", "arr(operand);"),
    "ASL": ("m", "c = operand >> 7; operand = (uint8_t)(operand << 1); wr(addr, operand); set_nz(operand);"),
    "ASLA": ("i", "c = a >> 7; a = (uint8_t)(a << 1); set_nz(a);"),
    "ASR": ("r", "a &= operand; c = a & 1; a >>= 1; set_nz(a);"),
    "BCC": ("b", "!c"), "BCS": ("b", "c"), "BEQ": ("b", "!(nz & 0xFF)"), "BNE": ("b", "nz & 0xFF"),
    "BMI": ("b", "nz & 0x180"), "BPL": ("b", "!(nz & 0x180)"), "BVC": ("b", "!v"), "BVS": ("b", "v"),
    "BIT": ("r", "nz = (uint32_t)(a & operand) | ((uint32_t)(operand & 0x80) << 1); v = (operand >> 6) & 1;"),
    "BRK": ("i", "fetch(); push((uint8_t)(pc >> 8));"
                 " push_after_write((uint8_t)pc); push_after_write(status_byte()); di |= P_I;"
                 " pc = (uint16_t)(rd(0xFFFE) | (rd(0xFFFF) << 8));"),
    "CLC": ("i", "c = 0;"), "CLD": ("i", "di &= (uint8_t)~P_D;"), "CLI": ("i", "di &= (uint8_t)~P_I;"), "CLV": ("i", "v = 0;"),
    "SEC": ("i", "c = 1;"), "SED": ("i", "di |= P_D;"), "SEI": ("i", "di |= P_I;"),
    "CMP": ("r", "compare(a, operand);"),
    "CPX": ("r", "compare(x, operand);"),
    "CPY": ("r", "compare(y, operand);"),
    "DCP": ("m", "operand = (uint8_t)(operand - 1); wr(addr, operand); compare(a, operand);"),
    "DEC": ("m", "operand = (uint8_t)(operand - 1); wr(addr, operand); set_nz(operand);"),
    "DEX": ("i", "x = (uint8_t)(x - 1); set_nz(x);"),
    "DEY": ("i", "y = (uint8_t)(y - 1); set_nz(y);"),
    "EOR": ("r", "a ^= operand; set_nz(a);"),
    "INC": ("m", "operand = (uint8_t)(operand + 1); wr(addr, operand); set_nz(operand);"),
    "INX": ("i", "x = (uint8_t)(x + 1); set_nz(x);"),
    "INY": ("i", "y = (uint8_t)(y + 1); set_nz(y);"),
    "ISB": ("m", "operand = (uint8_t)(operand + 1); wr(addr, operand); sbc(operand);"),
    "JMP": ("w", "pc = addr;"),
    "JSR": ("i", "{ uint8_t lo = fetch(); rd_low((uint16_t)(0x100 + sp));"
                 " push((uint8_t)(pc >> 8)); push_after_write((uint8_t)pc); uint8_t hi = fetch(); pc = (uint16_t)(lo | (hi << 8)); }"),
    "LAS": ("r", "a = x = sp = (uint8_t)(sp & operand); set_nz(a);"),
    "LAX": ("r", "a = x = operand; set_nz(a);"),
    "LDA": ("r", "a = operand; set_nz(a);"),
    "LDX": ("r", "x = operand; set_nz(x);"),
    "LDY": ("r", "y = operand; set_nz(y);"),
    "LSR": ("m", "c = operand & 1; operand >>= 1; wr(addr, operand); set_nz(operand);"),
    "LSRA": ("i", "c = a & 1; a >>= 1; set_nz(a);"),
    "LXA": ("r", "a = x = (uint8_t)((a | 0xEE) & operand); set_nz(a);"),
    "NOP": ("r", ""),
    "NOPI": ("i", ""),
    "ORA": ("r", "a |= operand; set_nz(a);"),
    "PHA": ("i", "push(a);"),
    "PHP": ("i", "push(status_byte());"),
    "PLA": ("i", "rd_low((uint16_t)(0x100 + sp)); sp = (uint8_t)(sp + 1); a = rd_low((uint16_t)(0x100 + sp)); set_nz(a);"),
    "PLP": ("i", "rd_low((uint16_t)(0x100 + sp)); sp = (uint8_t)(sp + 1); set_status_byte(rd_low((uint16_t)(0x100 + sp)));"),
    "RLA": ("m", "{ uint8_t r = (uint8_t)((operand << 1) | c); wr(addr, r); c = operand >> 7; a &= r; set_nz(a); }"),
    "ROL": ("m", "{ uint8_t r = (uint8_t)((operand << 1) | c); c = operand >> 7; wr(addr, r); set_nz(r); }"),
    "ROLA": ("i", "{ uint8_t r = (uint8_t)((a << 1) | c); c = a >> 7; a = r; set_nz(a); }"),
    "ROR": ("m", "{ uint8_t r = (uint8_t)((operand >> 1) | (c << 7)); c = operand & 1; wr(addr, r); set_nz(r); }"),
    "RORA": ("i", "{ uint8_t r = (uint8_t)((a >> 1) | (c << 7)); c = a & 1; a = r; set_nz(a); }"),
    "RRA": ("m", "{ uint8_t r = (uint8_t)((operand >> 1) | (c << 7)); c = operand & 1; wr(addr, r); adc(r); }"),
    "RTI": ("i", "rd_low((uint16_t)(0x100 + sp)); sp = (uint8_t)(sp + 1); set_status_byte(pull());"
                 " pc = pull(); pc |= (uint16_t)(rd_low((uint16_t)(0x100 + sp)) << 8);"),
    "RTS": ("i", "rd_low((uint16_t)(0x100 + sp)); sp = (uint8_t)(sp + 1); pc = pull();"
                 " pc |= (uint16_t)(rd_low((uint16_t)(0x100 + sp)) << 8); rd(pc); pc = (uint16_t)(pc + 1);"),
    "SAX": ("w", "wr(addr, (uint8_t)(a & x));"),
    "SBC": ("r", "sbc(operand);"),
    "SBX": ("r", "{ uint16_t r = (uint16_t)((a & x) - operand); x = (uint8_t)r; set_nz(x); c = !(r & 0x100); }"),
    "SHA": ("w", "wr(addr, (uint8_t)(a & x & ((addr >> 8) + 1)));"),
    "SHS": ("w", "sp = (uint8_t)(a & x); wr(addr, (uint8_t)(a & x & ((addr >> 8) + 1)));"),
    "SHX": ("w", "wr(addr, (uint8_t)(x & ((addr >> 8) + 1)));"),
    "SHY": ("w", "wr(addr, (uint8_t)(y & ((addr >> 8) + 1)));"),
    "SLO": ("m", "c = operand >> 7; operand = (uint8_t)(operand << 1); wr(addr, operand); a |= operand; set_nz(a);"),
    "SRE": ("m", "c = operand & 1; operand >>= 1; wr(addr, operand); a ^= operand; set_nz(a);"),
    "STA": ("w", "wr(addr, a);"),
    "STX": ("w", "wr(addr, x);"),
    "STY": ("w", "wr(addr, y);"),
    "TAX": ("i", "x = a; set_nz(x);"),
    "TAY": ("i", "y = a; set_nz(y);"),
    "TSX": ("i", "x = sp; set_nz(x);"),
    "TXA": ("i", "a = x; set_nz(a);"),
    "TXS": ("i", "sp = x;"),
    "TYA": ("i", "a = y; set_nz(a);"),
}

from hybridsim.asm6502 import JAM_OPCODES, OPCODES  # noqa: E402  (the one opcode table)


# Addressing modes whose effective address is below $200 (A12 and A9 low): the bus decodes
# it on A7 alone (RIOT RAM or TIA), without looking for the cartridge window.
LOW_MODES = ("zp", "zpx", "zpy")


# Base cycles per opcode, from ALE's M6502 cycle table (ale-py 0.12.1); the handlers
# charge them as literals. Differs from NMOS silicon for some undocumented opcodes (e.g.
# $A7 LAX zp: 4, silicon 3).
CYCLES = [
    7, 6, 2, 8, 3, 3, 5, 5, 3, 2, 2, 2, 4, 4, 6, 6,  # 0x
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # 1x
    6, 6, 2, 8, 3, 3, 5, 5, 4, 2, 2, 2, 4, 4, 6, 6,  # 2x
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # 3x
    6, 6, 2, 8, 3, 3, 5, 5, 3, 2, 2, 2, 3, 4, 6, 6,  # 4x
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # 5x
    6, 6, 2, 8, 3, 3, 5, 5, 4, 2, 2, 2, 5, 4, 6, 6,  # 6x
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # 7x
    2, 6, 2, 6, 3, 3, 3, 3, 2, 2, 2, 2, 4, 4, 4, 4,  # 8x
    2, 6, 2, 6, 4, 4, 4, 4, 2, 5, 2, 5, 5, 5, 5, 5,  # 9x
    2, 6, 2, 6, 3, 3, 3, 4, 2, 2, 2, 2, 4, 4, 4, 4,  # Ax
    2, 5, 2, 5, 4, 4, 4, 4, 2, 4, 2, 4, 4, 4, 4, 4,  # Bx
    2, 6, 2, 8, 3, 3, 5, 5, 2, 2, 2, 2, 4, 4, 6, 6,  # Cx
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # Dx
    2, 6, 2, 8, 3, 3, 5, 5, 2, 2, 2, 2, 4, 4, 6, 6,  # Ex
    2, 5, 2, 8, 4, 4, 6, 6, 2, 4, 2, 7, 4, 4, 7, 7,  # Fx
]
assert len(CYCLES) == 256


def case_body(mnemonic, mode, cycles):
    kind, body = OPS[mnemonic]
    # The whole base cycle count is charged right after the opcode fetch (ALE_FACTS.md).
    lines = [f"bus.add_cycles({cycles});"]
    if MODE_CODE[mode]:
        lines.append(MODE_CODE[mode])
    if kind == "b":  # relative branch; the displacement was read as an immediate operand
        lines.append(f"if ({body}) branch(operand);")
        return lines
    index = INDEX_REG.get(mode)
    if kind in ("r", "m", "w") and index:
        if kind == "r":  # only reads pay the page-crossing cycle (ALE's M6502Low)
            lines.append(f"if ((addr ^ (addr + {index})) & 0xFF00) bus.add_cycles(1);")
        lines.append(f"addr = (uint16_t)(addr + {index});")
    if kind in ("r", "m") and mode not in ("imm", "imp"):
        # Absolute loads may be a timer poll (LDA INTIM / BNE): the bus may skip ahead.
        poll = mnemonic in ("LDA", "LDX", "LDY") and mode == "abs"
        read = "rd_low" if mode in LOW_MODES else "rd"
        lines.append("operand = rd_poll(addr);" if poll else f"operand = {read}(addr);")
    if body:
        lines.append(body.replace("wr(addr,", "wr_low(addr,") if mode in LOW_MODES else body)
    return lines


def generate():
    by_opcode = {}
    for mnemonic, modes in OPCODES.items():
        for mode, codes in modes.items():
            for code in codes if isinstance(codes, list) else [codes]:
                assert code not in by_opcode, hex(code)
                by_opcode[code] = (mnemonic, mode)
    assert len(by_opcode) + len(JAM_OPCODES) == 256
    out = ["// Generated by tools/gen_m6502.py: edit that script, then run it. Do not edit here.",
           "// Included in m6502_run() (m6502.h), which defines HS_OP (a case label or a jump",
           "// target) and HS_NEXT (on to the next instruction)."]
    for code in range(256):
        if code in JAM_OPCODES:  # ALE stops the CPU with a fatal error
            out.append(f"HS_OP(0x{code:02X}, op_{code:02X}) {{  // JAM")
            out.append(f"  bus.add_cycles({CYCLES[code]});")
            out.append(f"  s.jammed = 1; s.ir = 0x{code:02X};")
            out.append("  goto done;\n}")
            continue
        mnemonic, mode = by_opcode[code]
        out.append(f"HS_OP(0x{code:02X}, op_{code:02X}) {{  // {mnemonic} {mode}")
        out.extend("  " + line for line in case_body(mnemonic, mode, CYCLES[code]))
        out.append("  HS_NEXT();\n}")
    return "\n".join(out) + "\n"


def generate_dispatch():
    """The jump table of m6502_run's threaded dispatch: each opcode's handler label."""
    labels = [f"&&op_{code:02X}" for code in range(256)]
    rows = "\n".join("    " + ", ".join(labels[k:k + 8]) + "," for k in range(0, 256, 8))
    return ("// Generated by tools/gen_m6502.py: edit that script, then run it. Do not edit here.\n"
            "// Included in m6502_run() (m6502.h) as the initializer of its dispatch table.\n" + rows + "\n")


if __name__ == "__main__":
    cuda = pathlib.Path(__file__).resolve().parent.parent / "cuda"
    outputs = {cuda / "m6502_ops.inc": generate(),
               cuda / "m6502_dispatch.inc": generate_dispatch()}
    if "--check" in sys.argv:
        sys.exit(0 if all(path.exists() and path.read_text() == text for path, text in outputs.items()) else 1)
    for path, text in outputs.items():
        path.write_text(text)
