// cpu_kernels.cu: CUDA entry points for the CPU harness (one thread per memory image).
// Compiled by nvcc in the tests and by NVRTC at run time; both use the same core headers.
#include "cpu_harness.h"

extern "C" __global__ void flat_run_kernel(uint8_t* memories,      // IN/OUT [n, 65536]
                                           uint16_t* regs,         // IN/OUT [n, 6]
                                           uint64_t* cycles,       // OUT [n]
                                           int* jammed,            // OUT [n]
                                           uint64_t* instructions, // OUT [n]
                                           uint64_t max_instructions, int stop_on_trap, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  instructions[k] = hs::flat_run(memories + (size_t)k * 65536, regs + k * 6, max_instructions,
                                 stop_on_trap, cycles + k, jammed + k);
}
