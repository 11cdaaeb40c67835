"""Decimal-mode ADC and SBC against ale-py itself, for every A, operand and carry; and
the cycle counts where ALE's table is not silicon's, timed inside ale-py.

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


# (name, opcode, x, instruction bytes): the opcodes whose cycle counts
# test_cpu_singlestep.py takes as ALE's rather than silicon's, and controls beside them
CYCLE_CASES = [("NOP", 0xEA, 0, bytes([0xEA])), ("NOP #", 0x80, 0, bytes([0x80, 0x00])),
               ("NOP zp", 0x04, 0, bytes([0x04, 0x80])), ("NOP zp,X", 0x14, 0, bytes([0x14, 0x80])),
               ("NOP abs", 0x0C, 0, bytes([0x0C, 0x00, 0xF8])), ("LAX zp", 0xA7, 0, bytes([0xA7, 0x80])),
               ("LDA abs,X", 0xBD, 0, bytes([0xBD, 0x00, 0xF8])),
               ("LDA abs,X crossing", 0xBD, 0xFF, bytes([0xBD, 0x01, 0xF8]))]
CYCLE_CASES += [(f"NOP abs,X {op:02X}{' crossing' if x else ''}", op, x, bytes([op, 0x01 if x else 0x00, 0xF8]))
                for op in (0x1C, 0x3C, 0x5C, 0x7C, 0xDC, 0xFC) for x in (0, 0xFF)]


def test_instruction_cycles_match_ale(tmp_path):
    """ALE's cycle counts, timed inside ale-py by the RIOT's 1-cycle timer (8 repeats per
    case), equal the core's and the table test_cpu_singlestep.py checks against."""
    from hybridsim._console import GAME_IDS, Emulator
    from test_cpu_singlestep import ABSX_NOPS, ALE_CYCLES
    rom = romgen.cycle_probe_rom([(0, 0, b"")] + [(x, 0, code) for _, _, x, code in CYCLE_CASES])
    path = tmp_path / "pong.bin"
    path.write_bytes(rom)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 5)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(path))
    emu = Emulator(rom, GAME_IDS["pong"], cart_type="4K", random_seed=5, repeat_action_probability=0.0,
                   mode_select=dict(ram=0x96, value=0, hold=2))
    for _ in range(3):
        ale.act(0)
        emu.act(0)
        np.testing.assert_array_equal(ale.getRAM(), emu.get_ram())
    timer = ale.getRAM()[romgen.CYCLE_RESULTS - 0x80:][:len(CYCLE_CASES) + 1].astype(int)
    assert timer[0] > 0  # the program ran
    memory = np.zeros(65536, dtype=np.uint8)
    for k, (name, opcode, x, code) in enumerate(CYCLE_CASES, start=1):
        elapsed = timer[0] - timer[k]
        assert elapsed % romgen.CYCLE_REPEATS == 0, (name, elapsed)
        ale_cycles = elapsed // romgen.CYCLE_REPEATS
        memory[0x0200:0x0200 + len(code)] = np.frombuffer(code, np.uint8)
        run = cpu.run_flat(memory, 0x0200, x=x, max_instructions=1)
        assert run.cycles == ale_cycles, (name, run.cycles, ale_cycles)
        if opcode in ALE_CYCLES:
            assert ALE_CYCLES[opcode] == ale_cycles, name
        if opcode in ABSX_NOPS:
            assert ale_cycles == 4 + (x == 0xFF), name
