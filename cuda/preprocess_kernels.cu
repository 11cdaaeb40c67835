// preprocess_kernels.cu: CUDA entry points for observation preprocessing (preprocess.h).
// One thread per output byte across a batch of images; the plan is one ResizePlan in
// device memory shared by the batch. Compiled by nvcc in the tests and by NVRTC at run
// time from the same header.
#include "preprocess.h"

// dst[n, dst_h, dst_w, C] = resize(src[n, src_h, src_w, C]).
extern "C" __global__ void resize_kernel(const hs::pp::ResizePlan* plan,
                                         const uint8_t* src,  // IN [n, src_h, src_w, C]
                                         uint8_t* dst,        // OUT [n, dst_h, dst_w, C]
                                         int n) {
  const int out_size = hs::pp::resize_dst_size(*plan);
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= (long long)n * out_size) return;
  const int img = (int)(t / out_size), i = (int)(t - (long long)img * out_size);
  hs::pp::Src1 s = {src + (size_t)img * hs::pp::resize_src_size(*plan)};
  dst[t] = hs::pp::resize_element_at(*plan, s, i);
}

// ALE's observation step for a batch: stack[k] shifts one frame towards the oldest and
// its newest frame becomes resize(max(a[k], b[k])). Each thread owns one byte position
// of the frame, so the shift needs no synchronisation.
extern "C" __global__ void maxpool_resize_push_kernel(const hs::pp::ResizePlan* plan,
                                                      const uint8_t* a,  // IN [n, src frame]
                                                      const uint8_t* b,  // IN [n, src frame]
                                                      uint8_t* stack,    // IN/OUT [n, stack_num, dst frame]
                                                      int stack_num, int n) {
  const int out_size = hs::pp::resize_dst_size(*plan);
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= (long long)n * out_size) return;
  const int img = (int)(t / out_size), i = (int)(t - (long long)img * out_size);
  const size_t in_off = (size_t)img * hs::pp::resize_src_size(*plan);
  hs::pp::SrcMax2 s = {a + in_off, b + in_off};
  uint8_t* st = stack + (size_t)img * stack_num * out_size;
  hs::pp::stack_shift_element(st, stack_num, out_size, i);
  hs::pp::stack_newest(st, stack_num, out_size)[i] = hs::pp::resize_element_at(*plan, s, i);
}
