// vector_kernels.cu: the GPU vector engine's kernels (hybridsim/gpu.py) over
// vector_env.h, the functions the CPU engine (pyx/vector_engine.h) runs per environment.
// Nothing here re-implements an environment: each kernel is an index computation and a
// call into vector_env.h / preprocess.h.
//
// Layout (device memory, environment-major like the CPU engine's numpy arrays):
//   envs[n] AleEnv, states[n] VecEnvState, bufs[n] VecEnvBuffers (pointers into frames
//   [n, 2, kFrameBytes], replays[n] FrameReplay, raws [n, 2, raw_size], stacks
//   [n, stack_num * obs_size], set by hs_vec_bind), one VecConfig and one ResizePlan
//   (built on the device by hs_vec_config), the ROM. A batch names its environments
//   with ids[count]; row j of every output belongs to environment ids[j].
//
// Designs of a step (gpu.py's `design`, measured by benchmarks/gpu_bench.py):
//   fused: hs_vec_execute_fused, one thread per environment does everything
//          (vec_execute<false>, exactly the CPU engine's call);
//   split: hs_vec_execute_deferred (one thread per environment: emulation, game
//          settings, scalar outputs; vec_execute<true>), then hs_vec_screen (one thread
//          per output byte: max-pool + resize into the ring slot, clear after a reset)
//          and hs_vec_obs (one thread per byte: ring -> observation in order, and the
//          in-place max-pool of raw0 the CPU path leaves behind). Memory accesses of the
//          pixel kernels are coalesced across the threads of an environment;
//   split_shared: split, with hs_vec_execute_shared in place of hs_vec_execute_deferred:
//          the emulated CPU reads and writes RIOT RAM in shared memory during a frame.
//
// Each kernel that inlines the emulator can be left out (HS_VEC_NO_FUSED, HS_VEC_NO_SPLIT,
// HS_VEC_NO_SPLIT_SHARED, HS_VEC_NO_MATERIALIZE): gpu.py compiles them as separate NVRTC modules, in parallel
// and only when used, since optimising the inlined emulator takes minutes per kernel.
//
// Only blockIdx.x, blockDim.x and threadIdx.x are used (1-D grids), no __syncthreads, no
// atomics, and shared memory only as each thread's own part (split_shared's RAM copies):
// gpu.py's host emulation compiles this file with g++ and a small shim, runs the grid as
// a loop, and compares with the CPU engine (tests/test_gpu_emulated.py).
#include "vector_env.h"

namespace hs_gpu {

__device__ __forceinline__ long long thread_index() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ hs::VecOutput row_outputs(long long j, uint8_t* obs, uint8_t* final_obs, int32_t* reward,
                                          uint8_t* terminated, uint8_t* truncated, int32_t* lives,
                                          int32_t* frame_number, int32_t* episode_frame_number,
                                          long long obs_stride) {
  hs::VecOutput o;
  o.obs = obs + j * obs_stride;
  o.final_obs = final_obs ? final_obs + j * obs_stride : nullptr;
  o.reward = reward + j;
  o.terminated = terminated + j;
  o.truncated = truncated + j;
  o.lives = lives + j;
  o.frame_number = frame_number + j;
  o.episode_frame_number = episode_frame_number + j;
  return o;
}

// The split_shared design's RIOT RAM copies: thread t's 128 bytes at t * kSharedRamStride
// of the block's dynamic shared memory (blockDim.x * kSharedRamStride bytes at launch).
// 132 = 33 words: the threads of a warp reading one RAM address hit 32 different banks
// (CUDA programming guide, shared memory: 32 banks of 4-byte words).
enum : int { kSharedRamStride = 132 };
static_assert(kSharedRamStride >= 128, "a thread's part must hold RIOT RAM");
extern __shared__ uint8_t hs_shared_ram[];

// kSharedRam: the emulator's CPU works on RIOT RAM in shared memory (FrameBuffers::
// ram_cache) instead of the environment's copy in device memory, where the threads of a
// warp touch 32 environments' cache lines on every access.
template <bool kDefer, bool kSharedRam = false>
__device__ __forceinline__ void execute_row(const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan, const uint8_t* rom,
                                 hs::AleEnv* envs, hs::VecEnvState* states, hs::VecEnvBuffers* bufs,
                                 const int32_t* ids, const uint8_t* force, const int32_t* actions,
                                 const float* strengths, uint8_t* obs, uint8_t* final_obs, int32_t* reward,
                                 uint8_t* terminated, uint8_t* truncated, int32_t* lives, int32_t* frame_number,
                                 int32_t* episode_frame_number, uint8_t* has_final, long long obs_stride,
                                 int count) {
  const long long j = thread_index();
  if (j >= count) return;
  const int32_t k = ids[j];
  const hs::VecOutput o = row_outputs(j, obs, final_obs, reward, terminated, truncated, lives, frame_number,
                                      episode_frame_number, obs_stride);
  hs::VecEnvBuffers& b = bufs[k];
  hs::VecEnvBuffers cached;  // kSharedRam: the buffers with the RAM cache set
  if (kSharedRam) {
    cached = b;
    cached.fbs.ram_cache = hs_shared_ram + threadIdx.x * kSharedRamStride;
  }
  const int32_t f = hs::vec_execute<kDefer>(*cfg, *plan, rom, envs[k], states[k], kSharedRam ? cached : b,
                                            force[j] != 0, actions[j], strengths[j], o);
  if (kSharedRam) b.fbs.shown = cached.fbs.shown;  // `shown` is the buffers' only state
  if (has_final) has_final[j] = (uint8_t)f;
}

}  // namespace hs_gpu

// sizes[0..6] = sizeof AleEnv, VecEnvState, VecEnvBuffers, FrameReplay, VecConfig,
// ResizePlan, and kFrameBytes, as this compiler lays them out (checked against the CPU
// build by gpu.py: snapshots and templates are the same bytes on both); sizes[7] =
// kSharedRamStride (the shared memory per thread gpu.py launches split_shared with).
extern "C" __global__ void hs_vec_sizes(long long* sizes) {
  if (hs_gpu::thread_index() != 0) return;
  sizes[0] = (long long)sizeof(hs::AleEnv);
  sizes[1] = (long long)sizeof(hs::VecEnvState);
  sizes[2] = (long long)sizeof(hs::VecEnvBuffers);
  sizes[3] = (long long)sizeof(hs::FrameReplay);
  sizes[4] = (long long)sizeof(hs::VecConfig);
  sizes[5] = (long long)sizeof(hs::pp::ResizePlan);
  sizes[6] = (long long)hs::kFrameBytes;
  sizes[7] = (long long)hs_gpu::kSharedRamStride;
}

// The VecConfig and ResizePlan of a vector, built on the device (one thread), as
// pyx/_vector.pyx builds them: p = {frame_skip, stack_num, img_height, img_width,
// grayscale, maxpool, noop_max, fire_reset, episodic_life, life_loss_info,
// reward_clipping, max_episode_steps, same_step, raw_height, pal, interpolation,
// num_actions, action_set[num_actions]...}. err[0] = resize_plan_init's code.
extern "C" __global__ void hs_vec_config(hs::VecConfig* c, hs::pp::ResizePlan* plan, const int32_t* p,
                                         int32_t* err) {
  if (hs_gpu::thread_index() != 0) return;
  uint8_t* raw = (uint8_t*)c;
  for (unsigned long long i = 0; i < sizeof(hs::VecConfig); ++i) raw[i] = 0;
  c->frame_skip = p[0];
  c->stack_num = p[1];
  c->grayscale = p[4];
  c->channels = p[4] ? 1 : 3;
  c->raw_height = p[13];
  c->raw_width = 160;
  c->raw_size = p[13] * 160 * c->channels;
  c->obs_size = p[2] * p[3] * c->channels;
  c->maxpool = p[5];
  c->noop_max = p[6];
  c->fire_reset = p[7];
  c->episodic_life = p[8];
  c->life_loss_info = p[9];
  c->reward_clipping = p[10];
  c->max_episode_steps = p[11];
  c->same_step = p[12];
  c->num_actions = p[16];
  for (int32_t i = 0; i < p[16] && i < hs::kMaxActionSet; ++i) c->action_set[i] = p[17 + i];
  hs::vec_config_palette(*c, p[14] != 0);
  err[0] = hs::pp::resize_plan_init(plan, p[13], 160, p[2], p[3], c->channels, p[15]);
}

// bufs[k] := environment k's buffers in the engine's flat arrays (VectorEngine.__init__).
extern "C" __global__ void hs_vec_bind(hs::VecEnvBuffers* bufs, uint8_t* frames, uint8_t* replays, uint8_t* raws,
                                       uint8_t* stacks, int raw_size, long long stack_bytes, int n) {
  const long long k = hs_gpu::thread_index();
  if (k >= n) return;
  hs::VecEnvBuffers& b = bufs[k];
  b.fbs.buf[0] = frames + (2 * k) * hs::kFrameBytes;
  b.fbs.buf[1] = frames + (2 * k + 1) * hs::kFrameBytes;
  b.fbs.shown = 0;
  b.fbs.replay = (hs::FrameReplay*)(replays + k * (long long)sizeof(hs::FrameReplay));
  b.raw0 = raws + (2 * k) * (long long)raw_size;
  b.raw1 = raws + (2 * k + 1) * (long long)raw_size;
  b.stack = stacks + k * stack_bytes;
}

// ALE's loadROM with seeds[j] for environment ids[j]: a copy of the loaded-and-reset
// template, reseeded (VectorEngine.reseed).
extern "C" __global__ void hs_vec_reseed(const hs::AleEnv* tmpl, const uint8_t* tmpl_frames, int tmpl_shown,
                                         const int32_t* ids, const uint32_t* seeds, hs::AleEnv* envs,
                                         hs::VecEnvState* states, hs::VecEnvBuffers* bufs, int count) {
  const long long j = hs_gpu::thread_index();
  if (j >= count) return;
  const int32_t k = ids[j];
  hs::vec_reseed_from(*tmpl, tmpl_frames, tmpl_shown, hs::kFrameBytes, seeds[j], envs[k], states[k], bufs[k]);
}

// After the host copied a loaded emulator into environment env (VectorEngine.set_loaded):
// its shown buffer, the noop RNG's seed, and "reset_game already ran".
extern "C" __global__ void hs_vec_set_loaded(hs::VecEnvState* states, hs::VecEnvBuffers* bufs, int env,
                                             int shown, unsigned int seed) {
  if (hs_gpu::thread_index() != 0) return;
  bufs[env].fbs.shown = shown;
  hs::mt_seed(states[env].noop_rng, seed);
  states[env].reset_done = 1;
}

#ifndef HS_VEC_NO_FUSED
// One step (or forced reset) of environments ids[0..count): the CPU engine's
// engine_run_one, one thread per row.
extern "C" __global__ void hs_vec_execute_fused(
    const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan, const uint8_t* rom, hs::AleEnv* envs,
    hs::VecEnvState* states, hs::VecEnvBuffers* bufs, const int32_t* ids, const uint8_t* force,
    const int32_t* actions, const float* strengths, uint8_t* obs, uint8_t* final_obs, int32_t* reward,
    uint8_t* terminated, uint8_t* truncated, int32_t* lives, int32_t* frame_number,
    int32_t* episode_frame_number, uint8_t* has_final, long long obs_stride, int count) {
  hs_gpu::execute_row<false>(cfg, plan, rom, envs, states, bufs, ids, force, actions, strengths, obs, final_obs,
                             reward, terminated, truncated, lives, frame_number, episode_frame_number, has_final,
                             obs_stride, count);
}
#endif  // HS_VEC_NO_FUSED

#ifndef HS_VEC_NO_SPLIT
// The split design's first kernel: the same, the last screen's pixel work and the
// observation left to hs_vec_screen and hs_vec_obs.
extern "C" __global__ void hs_vec_execute_deferred(
    const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan, const uint8_t* rom, hs::AleEnv* envs,
    hs::VecEnvState* states, hs::VecEnvBuffers* bufs, const int32_t* ids, const uint8_t* force,
    const int32_t* actions, const float* strengths, uint8_t* obs, uint8_t* final_obs, int32_t* reward,
    uint8_t* terminated, uint8_t* truncated, int32_t* lives, int32_t* frame_number,
    int32_t* episode_frame_number, uint8_t* has_final, long long obs_stride, int count) {
  hs_gpu::execute_row<true>(cfg, plan, rom, envs, states, bufs, ids, force, actions, strengths, obs, final_obs,
                            reward, terminated, truncated, lives, frame_number, episode_frame_number, has_final,
                            obs_stride, count);
}
#endif  // HS_VEC_NO_SPLIT

#ifndef HS_VEC_NO_SPLIT_SHARED
// The split design with RIOT RAM in shared memory (execute_row's kSharedRam); launched
// with blockDim.x * kSharedRamStride bytes of dynamic shared memory.
extern "C" __global__ void hs_vec_execute_shared(
    const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan, const uint8_t* rom, hs::AleEnv* envs,
    hs::VecEnvState* states, hs::VecEnvBuffers* bufs, const int32_t* ids, const uint8_t* force,
    const int32_t* actions, const float* strengths, uint8_t* obs, uint8_t* final_obs, int32_t* reward,
    uint8_t* terminated, uint8_t* truncated, int32_t* lives, int32_t* frame_number,
    int32_t* episode_frame_number, uint8_t* has_final, long long obs_stride, int count) {
  hs_gpu::execute_row<true, true>(cfg, plan, rom, envs, states, bufs, ids, force, actions, strengths, obs,
                                  final_obs, reward, terminated, truncated, lives, frame_number,
                                  episode_frame_number, has_final, obs_stride, count);
}
#endif  // HS_VEC_NO_SPLIT_SHARED

// Split design, second kernel: one thread per byte i of a resized frame of row j:
// ring slot vec_last_slot := resize(max(raw0, raw1)) (the in-place max-pool then resize
// of vec_screen_into, read through SrcMax2), and after a reset (elapsed_steps == 0)
// every other slot := 0 (vec_reset's stack_clear).
extern "C" __global__ void hs_vec_screen(const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan,
                                         const hs::VecEnvState* states, const hs::VecEnvBuffers* bufs,
                                         const int32_t* ids, int count) {
  const hs::VecConfig& c = *cfg;
  const long long t = hs_gpu::thread_index();
  const long long n = c.obs_size;
  if (t >= (long long)count * n) return;
  const long long j = t / n;
  const int32_t i = (int32_t)(t - j * n);
  const int32_t k = ids[j];
  const hs::VecEnvState& s = states[k];
  const hs::VecEnvBuffers& b = bufs[k];
  const int32_t slot = hs::vec_last_slot(c, s);
  uint8_t v;
  if (c.maxpool) {
    hs::pp::SrcMax2 src = {b.raw0, b.raw1};
    v = hs::pp::resize_element_at(*plan, src, i);
  } else {
    hs::pp::Src1 src = {b.raw0};
    v = hs::pp::resize_element_at(*plan, src, i);
  }
  b.stack[(long long)slot * n + i] = v;
  if (s.elapsed_steps == 0)
    for (int32_t q = 0; q < c.stack_num; ++q)
      if (q != slot) b.stack[(long long)q * n + i] = 0;
}

// Split design, third kernel: one thread per byte i of row j's observation (and of its
// raw frame): obs := the ring oldest frame first (vec_write_obs), raw0 := max(raw0, raw1)
// (the in-place max-pool vec_screen_into leaves, which later steps read).
extern "C" __global__ void hs_vec_obs(const hs::VecConfig* cfg, const hs::VecEnvState* states,
                                      const hs::VecEnvBuffers* bufs, const int32_t* ids, uint8_t* obs,
                                      long long obs_stride, int count) {
  const hs::VecConfig& c = *cfg;
  const long long n = c.obs_size;
  const long long obs_bytes = n * c.stack_num;
  const long long width = (c.maxpool && c.raw_size > obs_bytes) ? c.raw_size : obs_bytes;
  const long long t = hs_gpu::thread_index();
  if (t >= (long long)count * width) return;
  const long long j = t / width;
  const long long i = t - j * width;
  const int32_t k = ids[j];
  const hs::VecEnvBuffers& b = bufs[k];
  if (i < obs_bytes) {
    const int32_t frame = (int32_t)(i / n);
    int32_t slot = states[k].stack_head + frame;
    if (slot >= c.stack_num) slot -= c.stack_num;
    obs[j * obs_stride + i] = b.stack[(long long)slot * n + (i - (long long)frame * n)];
  }
  if (c.maxpool && i < c.raw_size) b.raw0[i] = hs::pp::maxpool_pixel(b.raw0[i], b.raw1[i]);
}

// Rows of environments as they stand (a partial reset's other environments).
extern "C" __global__ void hs_vec_write_current(
    const hs::VecConfig* cfg, const hs::AleEnv* envs, const hs::VecEnvState* states,
    const hs::VecEnvBuffers* bufs, const int32_t* ids, uint8_t* obs, int32_t* reward, uint8_t* terminated,
    uint8_t* truncated, int32_t* lives, int32_t* frame_number, int32_t* episode_frame_number,
    long long obs_stride, int count) {
  const long long j = hs_gpu::thread_index();
  if (j >= count) return;
  const int32_t k = ids[j];
  const hs::VecOutput o = hs_gpu::row_outputs(j, obs, nullptr, reward, terminated, truncated, lives,
                                              frame_number, episode_frame_number, obs_stride);
  hs::vec_write(*cfg, envs[k], states[k], bufs[k], o);
}

// Draw every frame left undrawn (before a snapshot), and read / set the shown buffers.
#ifndef HS_VEC_NO_MATERIALIZE
extern "C" __global__ void hs_vec_materialize(const uint8_t* rom, hs::VecEnvBuffers* bufs, int n) {
  const long long k = hs_gpu::thread_index();
  if (k < n) hs::console_materialize(rom, bufs[k].fbs);
}
#endif  // HS_VEC_NO_MATERIALIZE

extern "C" __global__ void hs_vec_get_shown(const hs::VecEnvBuffers* bufs, int32_t* shown, int n) {
  const long long k = hs_gpu::thread_index();
  if (k < n) shown[k] = bufs[k].fbs.shown;
}

extern "C" __global__ void hs_vec_set_shown(hs::VecEnvBuffers* bufs, const int32_t* shown, int n) {
  const long long k = hs_gpu::thread_index();
  if (k < n) bufs[k].fbs.shown = shown[k];
}
