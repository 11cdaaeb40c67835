"""Behaviours of ALE's CPU that differ from silicon or that the single-step data skips."""
import numpy as np
import pytest

from hybridsim import cpu
from hybridsim.asm6502 import JAM_OPCODES, Assembler


def memory_with(program: bytes, origin: int = 0x0200) -> np.ndarray:
    memory = np.zeros(65536, dtype=np.uint8)
    memory[origin:origin + len(program)] = np.frombuffer(program, dtype=np.uint8)
    return memory


@pytest.mark.parametrize("opcode", JAM_OPCODES, ids=lambda op: f"{op:02x}")
def test_jam_opcode_halts_visibly(opcode):
    memory = memory_with(bytes([0xEA, opcode, 0xEA]))
    run = cpu.run_flat(memory, 0x0200, max_instructions=100)
    assert run.jammed
    assert run.instructions == 2  # NOP, then the JAM opcode; nothing after it
    assert run.pc == 0x0202  # the JAM opcode was fetched
    again = cpu.run_flat(memory, run.pc, max_instructions=100)
    assert not again.jammed  # a fresh CPU state runs on: the halt lives in the state


def test_indirect_x_pointer_at_ff_reads_high_byte_from_0100():
    asm = Assembler(0x0200)
    asm.op("LDA", "indx", 0xFF)  # X = 0: pointer at $FF, high byte from $0100 in ALE
    memory = memory_with(asm.assemble())
    memory[0x00FF] = 0x34
    memory[0x0000] = 0x12  # silicon would read this
    memory[0x0100] = 0x56  # ALE reads this
    memory[0x5634] = 0xAB
    memory[0x1234] = 0xCD
    run = cpu.run_flat(memory, 0x0200, max_instructions=1)
    assert run.a == 0xAB


def test_indirect_y_pointer_at_ff_reads_high_byte_from_0100():
    asm = Assembler(0x0200)
    asm.op("LDA", "indy", 0xFF)
    memory = memory_with(asm.assemble())
    memory[0x00FF] = 0x30
    memory[0x0000] = 0x12
    memory[0x0100] = 0x56
    memory[0x5631] = 0xAB
    memory[0x1231] = 0xCD
    run = cpu.run_flat(memory, 0x0200, y=1, max_instructions=1)
    assert run.a == 0xAB


def test_b_flag_always_set_after_plp():
    asm = Assembler(0x0200)
    asm.op("LDA", "imm", 0x00)
    asm.op("PHA")
    asm.op("PLP")
    memory = memory_with(asm.assemble())
    run = cpu.run_flat(memory, 0x0200, max_instructions=3)
    assert run.p == 0x30  # bit 5 and B read as set, everything else clear


def test_jmp_indirect_page_wrap_bug():
    asm = Assembler(0x0200)
    asm.op("JMP", "ind", 0x03FF)
    memory = memory_with(asm.assemble())
    memory[0x03FF] = 0x78
    memory[0x0300] = 0x56  # high byte comes from the start of the same page
    memory[0x0400] = 0x99
    run = cpu.run_flat(memory, 0x0200, max_instructions=1)
    assert run.pc == 0x5678


def test_page_cross_and_branch_cycles():
    asm = Assembler(0x02F0)
    asm.op("LDA", "absx", 0x10FF)  # 4 + 1 (page crossed with X = 1)
    asm.op("STA", "absx", 0x10FF)  # 5, writes never pay extra
    asm.op("BNE", "rel", 0x0310)   # taken onto the next page: 2 + 2
    memory = memory_with(asm.assemble(), origin=0x02F0)
    memory[0x1100] = 7
    run = cpu.run_flat(memory, 0x02F0, x=1, max_instructions=3)
    assert run.pc == 0x0310
    assert run.cycles == 5 + 5 + 4
