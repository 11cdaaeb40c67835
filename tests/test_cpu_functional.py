"""Klaus Dormann's 6502 functional test must reach its success trap."""
import pytest

from hybridsim import cpu


@pytest.mark.parametrize("dispatch", cpu.DISPATCHES)
def test_functional_test_reaches_success_trap(testdata_6502, dispatch):
    run = cpu.run_functional_test(testdata_6502 / "6502_functional_test.bin", dispatch=dispatch)
    assert not run.jammed
    assert run.pc == cpu.FUNCTIONAL_TEST_SUCCESS, f"trapped at ${run.pc:04X}"
    assert run.instructions > 26_000_000  # the whole test, not an early trap
