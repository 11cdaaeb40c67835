"""Synthetic 2600 test ROMs built with hybridsim's assembler (never real game ROMs).

ALE loads a ROM whose md5 it does not know when the file's stem names a supported game,
so a 4K program saved as `<game>.bin` runs inside ale-py and can report results through
RAM: a direct oracle for what ALE's emulator computes.
"""
from hybridsim.asm6502 import Assembler

VSYNC, WSYNC = 0x00, 0x02


def cartridge_4k(asm: Assembler, reset_label: str) -> bytes:
    """Pad a program at $F000 to 4 KiB and set the reset and IRQ vectors."""
    body = asm.assemble()
    if asm.origin != 0xF000 or len(body) > 4096 - 6:
        raise ValueError("program must start at $F000 and fit in 4 KiB")
    rom = bytearray(body) + bytes(4096 - 6 - len(body))
    start = asm._labels[reset_label]
    rom += bytes((start & 0xFF, start >> 8)) * 3  # NMI, RESET, IRQ
    return bytes(rom)


def emit_clear_ram_and_stack(asm: Assembler) -> None:
    asm.op("SEI")
    asm.op("CLD")
    asm.op("LDX", "imm", 0xFF)
    asm.op("TXS")
    asm.op("LDA", "imm", 0)
    asm.label("clear_ram")
    asm.op("STA", "zpx", 0x00)  # X = $FF..$80 hits RAM; lower values hit TIA registers
    asm.op("DEX")
    asm.op("BMI", "rel", "clear_ram")


def emit_end_frame(asm: Assembler) -> None:
    """VSYNC on for three scanlines, then off: ALE ends the frame here."""
    asm.op("LDA", "imm", 2)
    asm.op("STA", "zp", VSYNC)
    for _ in range(3):
        asm.op("STA", "zp", WSYNC)
    asm.op("LDA", "imm", 0)
    asm.op("STA", "zp", VSYNC)


# Decimal-mode sweep: RAM layout (zero page addresses).
CUR_A, CUR_BLOCK, CUR_MODE = 0x80, 0x81, 0x82
NEXT_A, NEXT_BLOCK, NEXT_MODE = 0x83, 0x84, 0x85
BASE, OPERAND = 0x86, 0x87
RESULT_A, RESULT_P = 0x90, 0xB0
CASES_PER_FRAME = 32


def decimal_sweep_rom() -> bytes:
    """Each frame runs 32 decimal ADC or SBC cases and leaves A and P in RAM.

    The cases are A = cur_a, operand = cur_block * 32 + k (k = 0..31), carry in =
    cur_mode bit 0, SBC if cur_mode bit 1. The frame's inputs stay in RAM beside its
    results, so every frame read back is self-describing. 2048 frames cover all
    256 x 256 x 2 x 2 cases.
    """
    asm = Assembler(0xF000)
    asm.label("reset")
    emit_clear_ram_and_stack(asm)
    asm.label("frame")
    for src, dst in ((NEXT_A, CUR_A), (NEXT_BLOCK, CUR_BLOCK), (NEXT_MODE, CUR_MODE)):
        asm.op("LDA", "zp", src)
        asm.op("STA", "zp", dst)
    asm.op("LDA", "zp", CUR_BLOCK)
    for _ in range(5):
        asm.op("ASL")
    asm.op("STA", "zp", BASE)
    asm.op("LDY", "imm", 0)
    asm.label("case")
    asm.op("TYA")
    asm.op("ORA", "zp", BASE)
    asm.op("STA", "zp", OPERAND)
    asm.op("LDA", "zp", CUR_MODE)
    asm.op("AND", "imm", 2)
    asm.op("BNE", "rel", "subtract")
    asm.op("LDA", "zp", CUR_MODE)
    asm.op("LSR")  # carry in = mode bit 0
    asm.op("SED")
    asm.op("LDA", "zp", CUR_A)
    asm.op("ADC", "zp", OPERAND)
    asm.op("JMP", "abs", "store")
    asm.label("subtract")
    asm.op("LDA", "zp", CUR_MODE)
    asm.op("LSR")
    asm.op("SED")
    asm.op("LDA", "zp", CUR_A)
    asm.op("SBC", "zp", OPERAND)
    asm.label("store")
    asm.op("PHP")
    asm.op("CLD")
    asm.op("STA", "absy", RESULT_A)
    asm.op("PLA")
    asm.op("STA", "absy", RESULT_P)
    asm.op("INY")
    asm.op("CPY", "imm", CASES_PER_FRAME)
    asm.op("BNE", "rel", "case")
    # advance: block 0..7, then a 0..255, then mode 0..3
    asm.op("INC", "zp", NEXT_BLOCK)
    asm.op("LDA", "zp", NEXT_BLOCK)
    asm.op("CMP", "imm", 256 // CASES_PER_FRAME)
    asm.op("BNE", "rel", "advanced")
    asm.op("LDA", "imm", 0)
    asm.op("STA", "zp", NEXT_BLOCK)
    asm.op("INC", "zp", NEXT_A)
    asm.op("BNE", "rel", "advanced")
    asm.op("INC", "zp", NEXT_MODE)
    asm.op("LDA", "zp", NEXT_MODE)
    asm.op("AND", "imm", 3)
    asm.op("STA", "zp", NEXT_MODE)
    asm.label("advanced")
    emit_end_frame(asm)
    asm.op("JMP", "abs", "frame")
    return cartridge_4k(asm, "reset")


# Cycle probe: RAM layout (zero page addresses).
CYCLE_RESULTS = 0xA0
CYCLE_REPEATS = 8
TIM1T, INTIM = 0x294, 0x284


def cycle_probe_rom(cases) -> bytes:
    """Each frame times every case with the RIOT's 1-cycle timer: LDX/LDY from the case,
    A = $FF into TIM1T, the case's instruction bytes CYCLE_REPEATS times, then INTIM into
    RAM at CYCLE_RESULTS + case index. cases: [(x, y, instruction bytes)]; the instruction
    must not branch or write outside RAM. Case 0 should be the empty instruction (b"")."""
    asm = Assembler(0xF000)
    asm.label("reset")
    emit_clear_ram_and_stack(asm)
    asm.label("frame")
    for k, (x, y, instruction) in enumerate(cases):
        asm.op("LDX", "imm", x)
        asm.op("LDY", "imm", y)
        asm.op("LDA", "imm", 0xFF)
        asm.op("STA", "abs", TIM1T)
        for _ in range(CYCLE_REPEATS):
            asm.byte(*instruction)
        asm.op("LDA", "abs", INTIM)
        asm.op("STA", "zp", CYCLE_RESULTS + k)
    emit_end_frame(asm)
    asm.op("JMP", "abs", "frame")
    return cartridge_4k(asm, "reset")
