# cuda/ale_env.h's structs that both _console and _vector use, declared once here.
# Only the fields Cython code reads are listed; the layouts come from the header.
from libc.stdint cimport uint8_t, int32_t, uint32_t

cdef extern from "ale_env.h" namespace "hs" nogil:
    cdef struct MT19937:
        pass
    void mt_seed(MT19937& g, uint32_t value)
    cdef struct FrameReplay:
        uint8_t pending[2]
        uint8_t lazy
    cdef struct FrameBuffers:
        uint8_t* buf[2]
        int32_t shown
        FrameReplay* replay
        uint8_t* ram_cache
    void console_materialize(const uint8_t* rom, FrameBuffers& fbs)
    void console_materialize_shown(const uint8_t* rom, FrameBuffers& fbs)
    int kFrameBytes
    cdef struct EnvConfig:
        int32_t game
        int32_t frame_skip
        float repeat_action_probability
        int32_t max_num_frames_per_episode
        int32_t reward_min
        int32_t reward_max
        int32_t mode
        int32_t mode_ram
        int32_t mode_value
        int32_t mode_value_alt
        int32_t mode_ram2
        int32_t mode_value2
        int32_t mode_hold
        int32_t num_mode_before
        int32_t mode_before[4][3]
        int32_t mode_custom
        int32_t difficulty
        int32_t num_starting_runs
        int32_t starting_runs[16][2]
        uint8_t use_paddles
        uint8_t truncate_on_loss_of_life
        int32_t max_lives
        int32_t paddle_min
        int32_t paddle_max
    cdef struct Riot:
        uint8_t ram[128]
    cdef struct Tia:
        int32_t lines_last_frame
    cdef struct Cart:
        int32_t type
    cdef struct Console:
        Riot riot
        Tia tia
        Cart cart
        uint8_t data_bus
        uint8_t pal
        int32_t height
    cdef struct AleEnv:
        Console console
        EnvConfig cfg
        int32_t frame_number
        int32_t episode_frame_number
    cdef struct StateFault:
        const char* field
        long long value
        long long lo
        long long hi
        const char* allowed
        double real
        int32_t is_real
    StateFault env_state_check(const AleEnv& saved, const AleEnv& live, bint with_rng, bint kept_too)
    void env_clone_canonical(AleEnv& s, bint with_rng)


cdef inline str state_fault_text(StateFault fault):
    """'FIELD = VALUE' and what it must be (hybridsim.state_faults.describe); shared by
    _console (restoreState) and _vector (AtariVectorEnv.set_state)."""
    from hybridsim.state_faults import describe
    allowed = None if fault.allowed == NULL else (<bytes>fault.allowed).decode()
    return describe((<bytes>fault.field).decode(), fault.value, fault.lo, fault.hi, allowed,
                    fault.real, fault.is_real != 0)
