# cython: language_level=3
"""The CPU vector engine: n environments of cuda/vector_env.h in flat arrays.

VectorEngine(template_state, template_frames, template_shown, num_envs, *, num_threads,
             frame_skip, stack_num, img_height, img_width, grayscale, maxpool, noop_max,
             fire_reset, episodic_life, life_loss_info, reward_clipping,
             max_episode_steps, same_step, action_set, raw_height, pal, interpolation=3)
  interpolation: 3 = cv2.INTER_AREA (ale-py's), 1 = cv2.INTER_LINEAR (bit-exact with cv2 too)

  template_*: an emulator right after ALE's loadROM and one reset_game
  (hybridsim._console.Emulator.raw_state()), copied into every environment on a seeded
  reset (see reseed), which then skips its reset_game.

  run(env_ids, force_reset, actions, strengths, <outputs>)   # IN env_ids/actions/... OUT rest
      One call for a whole batch: prange over its rows with the GIL released; row j steps
      environment env_ids[j] (or resets it when force_reset[j]) and writes row j of the
      caller's arrays. No Python objects or allocations inside.
  write_current(env_ids, <outputs>): rows of environments as they stand (partial reset).
  reseed(env_ids, seeds): ALE's loadROM with these seeds (copy of the template).
  set_loaded(env, state, frames, shown, seed): the same from a given loaded-and-reset
      emulator (games whose load draws from the environment RNG).
  pool_start(threads) / pool_submit(env_ids, force, actions, strengths) / pool_wait(n):
      asynchronous mode; results staged per environment (stage_* arrays).
  state_arrays(): the numpy arrays holding every environment (get_state / set_state).
"""
from libc.stdint cimport uint8_t, int32_t, uint32_t, int64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset
from cython.parallel cimport prange

import numpy as np
cimport numpy as cnp

from ale_env cimport (AleEnv, FrameBuffers, FrameReplay, MT19937, StateFault, console_materialize,
                     env_state_check, kFrameBytes, mt_seed, state_fault_text)
from preprocess cimport ResizePlan, resize_plan_init, resize_plan_error

cdef extern from "vector_engine.h" namespace "hs" nogil:
    cdef struct VecConfig:
        int32_t frame_skip
        int32_t stack_num
        int32_t grayscale
        int32_t channels
        int32_t raw_height
        int32_t raw_width
        int32_t raw_size
        int32_t obs_size
        int32_t maxpool
        int32_t noop_max
        int32_t fire_reset
        int32_t episodic_life
        int32_t life_loss_info
        int32_t reward_clipping
        int32_t max_episode_steps
        int32_t same_step
        int32_t num_actions
        int32_t action_set[18]
    cdef struct VecEnvState:
        int32_t elapsed_steps
    cdef struct VecEnvBuffers:
        FrameBuffers fbs
        uint8_t* raw0
        uint8_t* raw1
        uint8_t* stack
    cdef struct VecBatch:
        uint8_t* obs
        uint8_t* final_obs
        int32_t* reward
        uint8_t* terminated
        uint8_t* truncated
        int32_t* lives
        int32_t* frame_number
        int32_t* episode_frame_number
        uint8_t* has_final
        long long obs_stride
    cdef struct VecEngine:
        VecConfig cfg
        const ResizePlan* plan
        const uint8_t* rom
        AleEnv* envs
        VecEnvState* states
        VecEnvBuffers* bufs
    cdef struct VecJob:
        int32_t env
        int32_t action
        float strength
        int32_t force_reset
        long long row
        void* sync
    cdef cppclass VecPool:
        VecPool(const VecEngine& g, const VecBatch& stage, int num_threads, const int* cores,
                int* pin_errors) except +
        void run(const VecBatch& out, VecJob* jobs, int n)
        void submit(const VecJob* jobs, int n)
        void wait(int32_t* ids, int n)
        int in_flight()
        int ready()
    void engine_run_one(const VecEngine& g, int32_t env, bint force_reset, int32_t action,
                        float strength, const VecBatch& out, long long row)
    void engine_write_current(const VecEngine& g, int32_t env, const VecBatch& out, long long row)
    void vec_reseed_from(const AleEnv& loaded, const uint8_t* loaded_frames, int32_t loaded_shown,
                         int32_t frame_bytes, uint32_t seed, AleEnv& e, VecEnvState& s, VecEnvBuffers& b)
    void vec_config_palette(VecConfig& c, bint pal)
    StateFault vec_state_check(const VecConfig& c, const VecEnvState& s)

cdef extern from *:
    """
    static inline size_t hs_sizeof_aleenv() { return sizeof(hs::AleEnv); }
    static inline size_t hs_sizeof_vecstate() { return sizeof(hs::VecEnvState); }
    static inline size_t hs_sizeof_plan() { return sizeof(hs::pp::ResizePlan); }
    static inline size_t hs_sizeof_replay() { return sizeof(hs::FrameReplay); }
    static inline hs::MT19937* hs_noop_rng(hs::VecEnvState* s) { return &s->noop_rng; }
    static inline void hs_mark_reset_done(hs::VecEnvState* s) { s->reset_done = 1; }
    """
    size_t hs_sizeof_aleenv()
    size_t hs_sizeof_vecstate()
    size_t hs_sizeof_plan()
    size_t hs_sizeof_replay()
    MT19937* hs_noop_rng(VecEnvState* s)
    void hs_mark_reset_done(VecEnvState* s)

ALE_ENV_BYTES = hs_sizeof_aleenv()
VEC_STATE_BYTES = hs_sizeof_vecstate()
FRAME_BYTES = kFrameBytes
RESIZE_PLAN_BYTES = hs_sizeof_plan()
FRAME_REPLAY_BYTES = hs_sizeof_replay()
INTER_AREA = 3


cdef inline uint8_t* _ptr(cnp.ndarray a):
    return <uint8_t*>cnp.PyArray_DATA(a)


def check_state_rows(env_rows, state_rows, live_env_row, int stack_num):
    """Vector env set_state: every AleEnv row (env_state_check against a live row, whole
    rows, RNG included) and VecEnvState row (vec_state_check). None when all fit, else
    (row, part, text) of the first that does not: part "env" or "state", text the field,
    its value and what it must be (hybridsim.state_faults.describe)."""
    cdef cnp.ndarray envs = np.ascontiguousarray(env_rows, dtype=np.uint8)
    cdef cnp.ndarray states = np.ascontiguousarray(state_rows, dtype=np.uint8)
    cdef cnp.ndarray live = np.ascontiguousarray(live_env_row, dtype=np.uint8)
    if envs.ndim != 2 or envs.shape[1] != ALE_ENV_BYTES or live.size != ALE_ENV_BYTES \
            or states.ndim != 2 or states.shape[1] != VEC_STATE_BYTES or states.shape[0] != envs.shape[0]:
        raise ValueError("check_state_rows: rows of AleEnv and VecEnvState bytes expected")
    cdef VecConfig cfg
    memset(&cfg, 0, sizeof(VecConfig))
    cfg.stack_num = stack_num
    # Copies: the arrays' rows need not be aligned for the structs.
    cdef AleEnv* row = <AleEnv*>malloc(sizeof(AleEnv))
    cdef AleEnv* ref = <AleEnv*>malloc(sizeof(AleEnv))
    cdef VecEnvState vs
    cdef StateFault fault
    cdef Py_ssize_t k
    if row == NULL or ref == NULL:
        free(row)
        free(ref)
        raise MemoryError("cannot allocate a state")
    memcpy(ref, _ptr(live), sizeof(AleEnv))
    try:
        for k in range(envs.shape[0]):
            memcpy(row, _ptr(envs) + k * sizeof(AleEnv), sizeof(AleEnv))
            fault = env_state_check(row[0], ref[0], True, True)
            if fault.field != NULL:
                return (k, "env", state_fault_text(fault))
            memcpy(&vs, _ptr(states) + k * sizeof(VecEnvState), sizeof(VecEnvState))
            fault = vec_state_check(cfg, vs)
            if fault.field != NULL:
                return (k, "state", state_fault_text(fault))
        return None
    finally:
        free(row)
        free(ref)


cdef class VectorEngine:
    cdef VecEngine g
    cdef ResizePlan* plan
    cdef VecEnvBuffers* bufs
    cdef bytes rom
    cdef VecPool* pool
    cdef bint pool_steps_sync
    cdef readonly int num_envs
    cdef readonly int num_threads
    cdef readonly int obs_bytes
    cdef readonly object env_mem, state_mem, frame_mem, raw_mem, stack_mem
    # Frames left undrawn and how to draw them (console.h, FrameReplay); not part of a
    # snapshot: materialize() draws them first.
    cdef object replay_mem
    cdef readonly object template_state, template_frames
    cdef readonly int template_shown
    cdef readonly object stage_obs, stage_final, stage_reward, stage_terminated, stage_truncated
    cdef readonly object stage_lives, stage_frame, stage_episode_frame, stage_has_final

    def __cinit__(self):
        self.plan = NULL
        self.bufs = NULL
        self.pool = NULL

    def __dealloc__(self):
        if self.pool != NULL:
            del self.pool
            self.pool = NULL
        free(self.plan)
        free(self.bufs)

    def __init__(self, rom, template_state, template_frames, int template_shown, int num_envs, *,
                 int num_threads, int frame_skip, int stack_num, int img_height, int img_width,
                 bint grayscale, bint maxpool, int noop_max, bint fire_reset, bint episodic_life,
                 bint life_loss_info, bint reward_clipping, int max_episode_steps, bint same_step,
                 action_set, int raw_height, bint pal, int interpolation=INTER_AREA):
        if len(template_state) != ALE_ENV_BYTES:
            raise ValueError(f"template_state must hold {ALE_ENV_BYTES} bytes (sizeof AleEnv), "
                             f"got {len(template_state)}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not (1 <= len(action_set) <= 18):
            raise ValueError(f"action_set must hold 1..18 ALE action ids, got {len(action_set)}")
        self.rom = bytes(rom)
        self.num_envs = num_envs
        self.num_threads = num_threads
        cdef VecConfig* c = &self.g.cfg
        memset(c, 0, sizeof(VecConfig))
        c.frame_skip = frame_skip
        c.stack_num = stack_num
        c.grayscale = grayscale
        c.channels = 1 if grayscale else 3
        c.raw_height = raw_height
        c.raw_width = 160
        c.raw_size = raw_height * 160 * c.channels
        c.obs_size = img_height * img_width * c.channels
        c.maxpool = maxpool
        c.noop_max = noop_max
        c.fire_reset = fire_reset
        c.episodic_life = episodic_life
        c.life_loss_info = life_loss_info
        c.reward_clipping = reward_clipping
        c.max_episode_steps = max_episode_steps
        c.same_step = same_step
        c.num_actions = len(action_set)
        for i, a in enumerate(action_set):
            c.action_set[i] = int(a)
        vec_config_palette(c[0], pal)
        self.obs_bytes = stack_num * c.obs_size
        self.plan = <ResizePlan*>malloc(sizeof(ResizePlan))
        if self.plan == NULL:
            raise MemoryError("cannot allocate the resize plan")
        code = resize_plan_init(self.plan, raw_height, 160, img_height, img_width, c.channels, interpolation)
        if code != 0:
            raise ValueError(f"img_height/img_width: {resize_plan_error(code).decode()} "
                             f"(got {img_height}x{img_width})")
        self.template_state = np.frombuffer(bytes(template_state), dtype=np.uint8).copy()
        self.template_frames = np.ascontiguousarray(template_frames, dtype=np.uint8).reshape(2, kFrameBytes).copy()
        self.template_shown = template_shown
        # Storage: one numpy array per kind, environment-major (a snapshot is these bytes).
        self.env_mem = np.zeros((num_envs, ALE_ENV_BYTES), dtype=np.uint8)
        self.state_mem = np.zeros((num_envs, VEC_STATE_BYTES), dtype=np.uint8)
        self.frame_mem = np.zeros((num_envs, 2, kFrameBytes), dtype=np.uint8)
        self.raw_mem = np.zeros((num_envs, 2, c.raw_size), dtype=np.uint8)
        self.stack_mem = np.zeros((num_envs, self.obs_bytes), dtype=np.uint8)
        self.replay_mem = np.zeros((num_envs, hs_sizeof_replay()), dtype=np.uint8)
        # zeroed: fields not set below (FrameBuffers.ram_cache) stay null
        self.bufs = <VecEnvBuffers*>calloc(num_envs, sizeof(VecEnvBuffers))
        if self.bufs == NULL:
            raise MemoryError("cannot allocate the buffer table")
        cdef uint8_t* frames = _ptr(self.frame_mem)
        cdef uint8_t* raws = _ptr(self.raw_mem)
        cdef uint8_t* stacks = _ptr(self.stack_mem)
        cdef uint8_t* replays = _ptr(self.replay_mem)
        cdef int64_t k
        for k in range(num_envs):
            self.bufs[k].fbs.replay = <FrameReplay*>(replays + k * hs_sizeof_replay())
            self.bufs[k].fbs.buf[0] = frames + (2 * k) * kFrameBytes
            self.bufs[k].fbs.buf[1] = frames + (2 * k + 1) * kFrameBytes
            self.bufs[k].fbs.shown = 0
            self.bufs[k].raw0 = raws + (2 * k) * c.raw_size
            self.bufs[k].raw1 = raws + (2 * k + 1) * c.raw_size
            self.bufs[k].stack = stacks + k * self.obs_bytes
        self.g.plan = self.plan
        self.g.rom = self.rom
        self.g.envs = <AleEnv*>_ptr(self.env_mem)
        self.g.states = <VecEnvState*>_ptr(self.state_mem)
        self.g.bufs = self.bufs

    # ---- seeding ------------------------------------------------------------------
    def reseed(self, env_ids, seeds):
        """ALE's loadROM for each env_ids[j] with seeds[j] (also the noop RNG's seed)."""
        cdef int32_t[::1] ids = np.ascontiguousarray(env_ids, dtype=np.int32)
        cdef uint32_t[::1] sd = np.ascontiguousarray(np.asarray(seeds, dtype=np.int64) & 0xFFFFFFFF,
                                                     dtype=np.uint32)
        cdef const uint8_t* tstate = _ptr(self.template_state)
        cdef const uint8_t* tframes = _ptr(self.template_frames)
        cdef int32_t shown = self.template_shown
        cdef int j, n = ids.shape[0]
        with nogil:
            for j in range(n):
                vec_reseed_from((<const AleEnv*>tstate)[0], tframes, shown, kFrameBytes, sd[j],
                                self.g.envs[ids[j]], self.g.states[ids[j]], self.bufs[ids[j]])

    def set_loaded(self, int env, state, frames, int shown, seed):
        """Environment env := a loaded emulator's state (AleEnv bytes, frames, shown); the
        noop RNG is seeded with seed."""
        if len(state) != ALE_ENV_BYTES:
            raise ValueError(f"state must hold {ALE_ENV_BYTES} bytes")
        cdef bytes st = bytes(state)
        cdef const char* raw = st
        memcpy(&self.g.envs[env], raw, ALE_ENV_BYTES)
        self.frame_mem[env] = np.asarray(frames, dtype=np.uint8).reshape(2, kFrameBytes)
        self.bufs[env].fbs.shown = shown
        self.replay_mem[env] = 0  # the frames just set are drawn
        mt_seed(hs_noop_rng(&self.g.states[env])[0], <uint32_t>(int(seed) & 0xFFFFFFFF))
        hs_mark_reset_done(&self.g.states[env])

    # ---- stepping -----------------------------------------------------------------
    cdef VecBatch _batch(self, cnp.ndarray obs, final_obs, cnp.ndarray reward, cnp.ndarray terminated,
                         cnp.ndarray truncated, cnp.ndarray lives, cnp.ndarray frame_number,
                         cnp.ndarray episode_frame_number, has_final, Py_ssize_t rows) except *:
        cdef VecBatch b
        for name, a, dt in (("obs", obs, np.uint8), ("reward", reward, np.int32),
                            ("terminated", terminated, np.uint8), ("truncated", truncated, np.uint8),
                            ("lives", lives, np.int32), ("frame_number", frame_number, np.int32),
                            ("episode_frame_number", episode_frame_number, np.int32)):
            if a.dtype != dt and not (dt is np.uint8 and a.dtype == np.bool_):
                raise ValueError(f"{name} must be a {np.dtype(dt).name} array, got {a.dtype}")
            if not a.flags.c_contiguous or a.shape[0] < rows:
                raise ValueError(f"{name} must be C-contiguous with at least {rows} rows")
        if obs.size < rows * self.obs_bytes:
            raise ValueError(f"obs must hold {self.obs_bytes} bytes per row")
        b.obs = _ptr(obs)
        b.obs_stride = self.obs_bytes
        b.final_obs = NULL
        if final_obs is not None:
            if not final_obs.flags.c_contiguous or final_obs.dtype != np.uint8 or final_obs.size < rows * self.obs_bytes:
                raise ValueError(f"final_obs must be C-contiguous uint8 with {self.obs_bytes} bytes per row")
            b.final_obs = _ptr(final_obs)
        b.has_final = NULL
        if has_final is not None:
            b.has_final = _ptr(has_final)
        b.reward = <int32_t*>_ptr(reward)
        b.terminated = _ptr(terminated)
        b.truncated = _ptr(truncated)
        b.lives = <int32_t*>_ptr(lives)
        b.frame_number = <int32_t*>_ptr(frame_number)
        b.episode_frame_number = <int32_t*>_ptr(episode_frame_number)
        return b

    def run(self, env_ids, force_reset, actions, strengths, obs, final_obs, reward, terminated,
            truncated, lives, frame_number, episode_frame_number, has_final):
        """Step (or reset where force_reset) environments env_ids, row j into the outputs.
        Actions are indices into the action set, already checked by the caller."""
        cdef const int32_t[::1] ids = env_ids                 # IN
        cdef const uint8_t[::1] force = force_reset           # IN
        cdef const int32_t[::1] acts = actions                # IN
        cdef const float[::1] st = strengths                  # IN
        cdef Py_ssize_t n = ids.shape[0]
        if force.shape[0] != n or acts.shape[0] != n or st.shape[0] != n:
            raise ValueError(f"env_ids, force_reset, actions and strengths must all hold {n} values")
        cdef VecBatch b = self._batch(obs, final_obs, reward, terminated, truncated, lives,  # OUT
                                      frame_number, episode_frame_number, has_final, n)
        cdef int j, threads = self.num_threads
        cdef VecJob* jobs
        if self.pool != NULL and self.pool_steps_sync:
            # the pinned workers, writing row j of the outputs directly
            jobs = <VecJob*>malloc(max(n, 1) * sizeof(VecJob))
            if jobs == NULL:
                raise MemoryError()
            with nogil:
                for j in range(n):
                    jobs[j] = VecJob(ids[j], acts[j], st[j], force[j], j, NULL)
                self.pool.run(b, jobs, <int>n)
            free(jobs)
            return
        with nogil:
            if threads == 1 or n == 1:
                for j in range(n):
                    engine_run_one(self.g, ids[j], force[j] != 0, acts[j], st[j], b, j)
            else:
                for j in prange(n, schedule="dynamic", chunksize=1, num_threads=threads):
                    engine_run_one(self.g, ids[j], force[j] != 0, acts[j], st[j], b, j)

    def write_current(self, env_ids, obs, reward, terminated, truncated, lives, frame_number,
                      episode_frame_number):
        cdef const int32_t[::1] ids = env_ids
        cdef Py_ssize_t n = ids.shape[0]
        cdef VecBatch b = self._batch(obs, None, reward, terminated, truncated, lives, frame_number,
                                      episode_frame_number, None, n)
        cdef int j
        for j in range(n):
            engine_write_current(self.g, ids[j], b, j)

    # ---- asynchronous mode --------------------------------------------------------
    def pool_start(self, int threads, cores=None, bint steps_sync=False):
        """Start the worker threads; cores: one CPU core per worker to pin it to (None:
        not pinned). steps_sync: the pool steps run()'s synchronous batches instead of
        OpenMP's threads, and has no staging rows (pool_submit refuses). Returns each
        worker's pthread_setaffinity_np error number (0: pinned), empty when not pinned."""
        if self.pool != NULL:
            raise RuntimeError("the worker pool is already running")
        cdef cnp.ndarray core_ids = None
        cdef cnp.ndarray errors = np.zeros(0, dtype=np.intc)
        if cores is not None:
            core_ids = np.ascontiguousarray(cores, dtype=np.intc)
            if core_ids.shape[0] != threads:
                raise ValueError(f"cores must name one core per worker ({threads}), got {core_ids.shape[0]}")
            errors = np.zeros(threads, dtype=np.intc)
        cdef VecBatch stage
        memset(&stage, 0, sizeof(VecBatch))
        self.pool_steps_sync = steps_sync
        if not steps_sync:
            self._make_stage()
            stage = self._batch(self.stage_obs, self.stage_final, self.stage_reward, self.stage_terminated,
                                self.stage_truncated, self.stage_lives, self.stage_frame,
                                self.stage_episode_frame, self.stage_has_final, self.num_envs)
        self.pool = new VecPool(self.g, stage, threads,
                                <const int*>NULL if core_ids is None else <const int*>cnp.PyArray_DATA(core_ids),
                                <int*>NULL if core_ids is None else <int*>cnp.PyArray_DATA(errors))
        return errors

    cdef _make_stage(self):
        """Async results, one row per environment."""
        n = self.num_envs
        self.stage_obs = np.zeros((n, self.obs_bytes), dtype=np.uint8)
        self.stage_final = np.zeros((n, self.obs_bytes), dtype=np.uint8) if self.g.cfg.same_step else None
        self.stage_reward = np.zeros(n, dtype=np.int32)
        self.stage_terminated = np.zeros(n, dtype=np.uint8)
        self.stage_truncated = np.zeros(n, dtype=np.uint8)
        self.stage_lives = np.zeros(n, dtype=np.int32)
        self.stage_frame = np.zeros(n, dtype=np.int32)
        self.stage_episode_frame = np.zeros(n, dtype=np.int32)
        self.stage_has_final = np.zeros(n, dtype=np.uint8)

    def pool_stop(self):
        """Stop and join the worker threads (close()); steps after it run on OpenMP's threads,
        and async ones are refused."""
        cdef VecPool* pool = self.pool
        self.pool = NULL  # before the join: a call from another thread finds no pool
        if pool != NULL:
            with nogil:
                del pool

    def pool_submit(self, env_ids, force_reset, actions, strengths):
        if self.pool == NULL or self.pool_steps_sync:
            raise RuntimeError("no asynchronous worker pool: the AtariVectorEnv (or a copy.copy of it, "
                               "which shares its engine) was closed, or is synchronous")
        cdef const int32_t[::1] ids = env_ids
        cdef const uint8_t[::1] force = force_reset
        cdef const int32_t[::1] acts = actions
        cdef const float[::1] st = strengths
        cdef Py_ssize_t j, n = ids.shape[0]
        cdef VecJob* jobs = <VecJob*>malloc(max(n, 1) * sizeof(VecJob))
        if jobs == NULL:
            raise MemoryError()
        for j in range(n):
            jobs[j].env = ids[j]
            jobs[j].force_reset = force[j]
            jobs[j].action = acts[j]
            jobs[j].strength = st[j]
            jobs[j].sync = NULL
        self.pool.submit(jobs, <int>n)
        free(jobs)

    def pool_wait(self, int n):
        """Environment ids of the next n completed jobs (completion order)."""
        out = np.empty(n, dtype=np.int32)
        cdef int32_t[::1] o = out
        with nogil:
            self.pool.wait(&o[0], n)
        return out

    def pool_in_flight(self):
        return 0 if self.pool == NULL else self.pool.in_flight()

    def pool_ready(self):
        """Jobs completed and not yet handed out by pool_wait."""
        return 0 if self.pool == NULL else self.pool.ready()

    # ---- snapshots ----------------------------------------------------------------
    def shown(self):
        return np.array([self.bufs[k].fbs.shown for k in range(self.num_envs)], dtype=np.int32)

    def materialize(self):
        """Draws every frame left undrawn, so frame_mem holds what an eager run draws."""
        cdef const uint8_t* rom_ptr = self.rom
        cdef int k
        with nogil:
            for k in range(self.num_envs):
                console_materialize(rom_ptr, self.bufs[k].fbs)

    def forget_undrawn(self):
        """After frame_mem was overwritten from a snapshot: nothing is pending."""
        self.replay_mem[...] = 0

    def set_shown(self, values):
        v = np.asarray(values, dtype=np.int32)
        if v.shape != (self.num_envs,):
            raise ValueError(f"shown must hold {self.num_envs} values")
        for k in range(self.num_envs):
            self.bufs[k].fbs.shown = int(v[k])
