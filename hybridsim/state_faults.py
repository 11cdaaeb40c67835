"""Wording of env_state_check's verdicts (cuda/ale_env.h StateFault), shared by
hybridsim._console (restoreState) and hybridsim._vector (AtariVectorEnv.set_state)."""


def describe(field: str, value: int, lo: int, hi: int, allowed: str | None, real: float, is_real: bool) -> str:
    """'FIELD = VALUE' and what it must be."""
    if is_real and allowed is not None:
        return f"{field} = {real!r} must be {allowed}"
    if is_real:
        return f"{field} = {real!r} out of range [{lo}, {hi})"
    if allowed is not None:
        return f"{field} = {value} is not one of {allowed}"
    if lo == hi:
        return f"{field} = {value} must be {lo}"
    return f"{field} = {value} out of range {lo}..{hi}"
