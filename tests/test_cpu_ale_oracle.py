"""Decimal-mode ADC and SBC against ale-py itself, for every A, operand and carry.

A synthetic 4K program (tests/romgen.py) runs inside ale-py 0.12.1 and leaves the
results in RAM; the core must produce the same A and P, including ALE's N, V and Z
and its results for non-BCD operands.
"""
import numpy as np
import pytest

import romgen
from hybridsim import cpu

ale_py = pytest.importorskip("ale_py")

ADC_IMM, SBC_IMM = 0x69, 0xE9
P_I, P_D = 0x04, 0x08


def ale_decimal_results(tmp_path):
    rom = tmp_path / "pong.bin"  # ALE accepts an unknown md5 when the stem names a game
    rom.write_bytes(romgen.decimal_sweep_rom())
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("frame_skip", 1)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(rom))
    results = {}
    base = romgen.CUR_A - 0x80
    for _ in range(8192 + 200):
        ram = ale.getRAM()
        key = (int(ram[base]), int(ram[base + 1]), int(ram[base + 2]))
        a_out = ram[romgen.RESULT_A - 0x80:romgen.RESULT_A - 0x80 + romgen.CASES_PER_FRAME]
        p_out = ram[romgen.RESULT_P - 0x80:romgen.RESULT_P - 0x80 + romgen.CASES_PER_FRAME]
        results[key] = (a_out.copy(), p_out.copy())
        if len(results) == 8192:
            break
        ale.act(0)
    return results


def test_decimal_adc_sbc_match_ale(tmp_path):
    results = ale_decimal_results(tmp_path)
    assert len(results) == 8192, "the sweep did not cover every case"
    memory = np.zeros(65536, dtype=np.uint8)
    mismatches = []
    for (a_in, block, mode), (a_out, p_out) in results.items():
        opcode = SBC_IMM if mode & 2 else ADC_IMM
        for k in range(romgen.CASES_PER_FRAME):
            operand = block * romgen.CASES_PER_FRAME + k
            memory[0x0200] = opcode
            memory[0x0201] = operand
            run = cpu.run_flat(memory, 0x0200, a=a_in, p=0x20 | P_I | P_D | (mode & 1),
                               max_instructions=1)
            if (run.a, run.p) != (int(a_out[k]), int(p_out[k])):
                mismatches.append((hex(opcode), hex(a_in), hex(operand), mode & 1,
                                   (run.a, run.p), (int(a_out[k]), int(p_out[k]))))
    assert not mismatches, f"{len(mismatches)} of 262144 differ, e.g. {mismatches[:5]}"
