// console_kernels.cu: CUDA entry points over ale_env.h, one thread per environment.
// Compiled by nvcc in the tests (and usable from NVRTC): the same headers as the CPU
// build. Frame buffers: 2 x kFrameBytes per environment; fb_shown[k] says which of the
// two holds environment k's last frame (ALE draws into the other one next).
#include "ale_env.h"

namespace {
__device__ hs::FrameBuffers frames_of(uint8_t* frames, int32_t* fb_shown, int k) {
  hs::FrameBuffers f;
  f.buf[0] = frames + (size_t)k * 2 * hs::kFrameBytes;
  f.buf[1] = f.buf[0] + hs::kFrameBytes;
  f.shown = fb_shown[k];
  return f;
}
}  // namespace

extern "C" __global__ void env_load_kernel(hs::AleEnv* envs,                // OUT [n]
                                           const hs::ConsoleProps* props,   // IN [1]
                                           const hs::EnvConfig* cfg,        // IN [1]
                                           const uint32_t* seeds,           // IN [n]
                                           const uint8_t* rom,              // IN
                                           uint8_t* frames,                 // OUT [n, 2, kFrameBytes]
                                           int32_t* fb_shown,               // OUT [n]
                                           int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  hs::FrameBuffers f = frames_of(frames, fb_shown, k);
  hs::env_load(envs[k], *props, *cfg, seeds[k], rom, f);
  fb_shown[k] = f.shown;
}

extern "C" __global__ void env_act_kernel(hs::AleEnv* envs,         // IN/OUT [n]
                                          const uint8_t* rom,       // IN
                                          uint8_t* frames,          // IN/OUT [n, 2, kFrameBytes]
                                          int32_t* fb_shown,        // IN/OUT [n]
                                          const int32_t* actions,   // IN [n] player A
                                          int32_t* rewards,         // OUT [n]
                                          uint8_t* game_over,       // OUT [n]
                                          int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  hs::FrameBuffers f = frames_of(frames, fb_shown, k);
  rewards[k] = hs::env_act(envs[k], rom, f, actions[k], hs::B_NOOP, 1.0f, 0.0f);
  game_over[k] = hs::env_terminal(envs[k]) ? 1 : 0;
  fb_shown[k] = f.shown;
}

extern "C" __global__ void env_reset_kernel(hs::AleEnv* envs, const uint8_t* rom, uint8_t* frames,
                                            int32_t* fb_shown, const uint8_t* which, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n || !which[k]) return;
  hs::FrameBuffers f = frames_of(frames, fb_shown, k);
  hs::env_reset(envs[k], rom, f);
  fb_shown[k] = f.shown;
}
