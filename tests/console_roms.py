"""Synthetic 4K ROMs that report RIOT and TIA input behaviour through RAM.

Saved as pong.bin they run inside ale-py with Pong's game settings but default ROM
properties (ALE looks properties up by md5: joysticks on both ports); the emulator runs
them with the same settings, and every frame's RAM is compared. The programs avoid $8D/$8E (Pong's scores) and keep $96 (Pong's mode) zero.
"""
from hybridsim.asm6502 import Assembler
from romgen import cartridge_4k, emit_clear_ram_and_stack, emit_end_frame

VBLANK, INPT0, INPT1, INPT4 = 0x01, 0x08, 0x09, 0x0C
SWCHA, SWACNT, SWCHB, INTIM, TIMINT = 0x280, 0x281, 0x282, 0x284, 0x285
TIMERS = (0x294, 0x295, 0x296, 0x297)  # TIM1T, TIM8T, TIM64T, T1024T
FRAME, RESULTS = 0x80, 0xA0


def _delay(asm, label, count_from):
    """Y = count_from + 1 passes of a 5-cycle loop (count_from is a zero-page byte)."""
    asm.op("LDY", "zp", count_from)
    asm.op("INY")
    asm.label(label)
    asm.op("DEY")
    asm.op("BNE", "rel", label)


def _store(asm):
    asm.op("STA", "zpx", RESULTS)
    asm.op("INX")


def riot_probe_rom() -> bytes:
    """Per frame, for each timer interval: start it from a frame-dependent value, wait a
    frame-dependent time, and record INTIM, TIMINT, INTIM again, then (past underflow)
    INTIM and TIMINT twice more. Then DDRA/SWCHA/SWCHB and the paddle and fire inputs."""
    asm = Assembler(0xF000)
    asm.label("reset")
    emit_clear_ram_and_stack(asm)
    asm.label("frame")
    asm.op("INC", "zp", FRAME)
    asm.op("LDX", "imm", 0)
    # zero-page scratch: $81 timer start value, $82 first delay, $83 second delay
    asm.op("LDA", "zp", FRAME)
    asm.op("AND", "imm", 0x07)
    asm.op("STA", "zp", 0x81)
    asm.op("INC", "zp", 0x81)
    asm.op("LDA", "zp", FRAME)
    asm.op("LSR")
    asm.op("LSR")
    asm.op("LSR")
    asm.op("AND", "imm", 0x1F)
    asm.op("STA", "zp", 0x82)
    asm.op("LDA", "zp", FRAME)
    asm.op("AND", "imm", 0x3F)
    asm.op("STA", "zp", 0x83)
    for k, timer in enumerate(TIMERS):
        if timer == 0x297:  # 1024-cycle ticks: keep the frame short
            asm.op("LDA", "zp", 0x81)
            asm.op("AND", "imm", 0x01)
        else:
            asm.op("LDA", "zp", 0x81)
        asm.op("STA", "abs", timer)
        _delay(asm, f"wait_a{k}", 0x82)
        for reg in (INTIM, TIMINT, INTIM):
            asm.op("LDA", "abs", reg)
            _store(asm)
        _delay(asm, f"wait_b{k}", 0x83)
        for reg in (INTIM, TIMINT, INTIM, TIMINT):
            asm.op("LDA", "abs", reg)
            _store(asm)
    # Ports: DDRA reads back; SWCHA shows the controller pins whatever DDRA says.
    asm.op("LDA", "zp", FRAME)
    asm.op("STA", "abs", SWACNT)
    for reg in (SWACNT, SWCHA, SWCHB):
        asm.op("LDA", "abs", reg)
        _store(asm)
    asm.op("LDA", "zp", INPT4)
    _store(asm)
    # Paddle capacitors: ground them, release, then count 2-line polls until INPT0 is high.
    asm.op("LDA", "imm", 0x80)
    asm.op("STA", "zp", VBLANK)
    asm.op("LDA", "imm", 0x00)
    asm.op("STA", "zp", VBLANK)
    asm.op("LDY", "imm", 0)
    asm.label("poll")
    asm.op("STA", "zp", 0x02)  # WSYNC
    asm.op("STA", "zp", 0x02)
    asm.op("INY")
    asm.op("BEQ", "rel", "poll_done")
    asm.op("BIT", "zp", INPT0)
    asm.op("BPL", "rel", "poll")
    asm.label("poll_done")
    asm.op("TYA")
    _store(asm)
    asm.op("LDA", "zp", INPT1)
    _store(asm)
    emit_end_frame(asm)
    asm.op("JMP", "abs", "frame")
    return cartridge_4k(asm, "reset")


VSYNC, WSYNC, NUSIZ0, COLUP0, COLUP1, COLUPF, COLUBK, CTRLPF = 0x00, 0x02, 0x04, 0x06, 0x07, 0x08, 0x09, 0x0A
PF0, PF1, PF2, RESP0, RESM0, RESBL, ENAM0, ENAM1, ENABL, GRP0 = 0x0D, 0x0E, 0x0F, 0x10, 0x12, 0x14, 0x1D, 0x1E, 0x1F, 0x1B


def short_frames_rom() -> bytes:
    """Frames of 100-230 lines that end (VSYNC off) at a frame-dependent pixel inside the
    display, with frame-dependent playfield, score/priority bits, player, missiles and
    ball: exercises the picture a frame leaves when it stops early (ALE's double buffer
    and its 4-pixel stores) and the playfield-only score/priority colouring."""
    asm = Assembler(0xF000)
    asm.label("reset")
    emit_clear_ram_and_stack(asm)
    asm.label("frame")
    asm.op("INC", "zp", FRAME)
    asm.op("LDA", "zp", FRAME)
    asm.op("STA", "zp", PF1)
    asm.op("EOR", "imm", 0x5A)
    asm.op("STA", "zp", PF2)
    asm.op("ASL")
    asm.op("STA", "zp", PF0)
    asm.op("LDA", "zp", FRAME)  # reflect/score/priority from frame bits 4-6, ball size from 0-1
    asm.op("LSR")
    asm.op("LSR")
    asm.op("LSR")
    asm.op("LSR")
    asm.op("AND", "imm", 0x07)
    asm.op("STA", "zp", 0x81)
    asm.op("LDA", "zp", FRAME)
    asm.op("ASL")
    asm.op("ASL")
    asm.op("ASL")
    asm.op("ASL")
    asm.op("AND", "imm", 0x30)
    asm.op("ORA", "zp", 0x81)
    asm.op("STA", "zp", CTRLPF)
    asm.op("LDA", "zp", FRAME)
    asm.op("STA", "zp", NUSIZ0)
    asm.op("STA", "zp", COLUP0)
    asm.op("EOR", "imm", 0xF0)
    asm.op("STA", "zp", COLUP1)
    asm.op("EOR", "imm", 0x33)
    asm.op("STA", "zp", COLUPF)
    asm.op("LSR")
    asm.op("STA", "zp", COLUBK)
    asm.op("LDA", "zp", FRAME)
    asm.op("AND", "imm", 0x08)
    for _ in range(4):
        asm.op("ASL")
    asm.op("STA", "zp", GRP0)
    asm.op("LDA", "zp", FRAME)
    asm.op("STA", "zp", ENAM0)
    asm.op("LSR")
    asm.op("STA", "zp", ENABL)
    asm.op("LSR")
    asm.op("STA", "zp", ENAM1)
    # Position player, missile and ball at a frame-dependent cycle of a fresh line.
    asm.op("STA", "zp", WSYNC)
    asm.op("LDA", "zp", FRAME)
    asm.op("AND", "imm", 0x07)
    asm.op("TAY")
    asm.op("INY")
    asm.label("place")
    asm.op("DEY")
    asm.op("BNE", "rel", "place")
    asm.op("STA", "zp", RESP0)
    asm.op("STA", "zp", RESM0)
    asm.op("STA", "zp", RESBL)
    # 100-227 visible lines.
    asm.op("LDA", "zp", FRAME)
    asm.op("AND", "imm", 0x7F)
    asm.op("CLC")
    asm.op("ADC", "imm", 100)
    asm.op("TAX")
    asm.label("lines")
    asm.op("STA", "zp", WSYNC)
    asm.op("DEX")
    asm.op("BNE", "rel", "lines")
    # VSYNC for three lines, then off after a frame-dependent delay: the frame ends there.
    asm.op("LDA", "imm", 2)
    asm.op("STA", "zp", VSYNC)
    for _ in range(3):
        asm.op("STA", "zp", WSYNC)
    asm.op("LDA", "zp", FRAME)
    asm.op("LSR")
    asm.op("AND", "imm", 0x0F)
    asm.op("TAY")
    asm.op("INY")
    asm.label("late")
    asm.op("DEY")
    asm.op("BNE", "rel", "late")
    asm.op("LDA", "zp", FRAME)  # an odd number of extra cycles on odd frames
    asm.op("LSR")
    asm.op("BCC", "rel", "even")
    asm.label("even")
    asm.op("LDA", "imm", 0)
    asm.op("STA", "zp", VSYNC)
    asm.op("JMP", "abs", "frame")
    return cartridge_4k(asm, "reset")
