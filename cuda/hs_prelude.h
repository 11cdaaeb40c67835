// hs_prelude.h: the one place for platform differences in the hybridsim core.
//
// Contract for every header in cuda/: it compiles unchanged under g++ (C++17, via
// Cython), nvcc and NVRTC. It uses no libc or libstdc++ beyond the types defined
// here, no heap, no virtual calls, no exceptions, no iostreams and no std::string.
// State is plain fixed-size structs, so it can be memcpy'd (clone/restore, GPU
// arrays, HDF5 snapshots).
#pragma once

#if defined(__CUDACC_RTC__)
// NVRTC ships no libc headers; <stdint.h> is a fatal error there (PLATFORM_NOTES.md).
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define HS_GPU 1
#define HS_HD __host__ __device__
#define HS_INLINE __forceinline__
#define HS_NOINLINE __noinline__
#define HS_LAMBDA_INLINE
#define HS_CONSTANT __constant__
#define HS_ASSUME(condition) ((void)0)
#else
#define HS_GPU 0
#define HS_HD
#define HS_INLINE inline __attribute__((always_inline))
#define HS_NOINLINE __attribute__((noinline))
// Small lambdas in hot loops (the TIA's); without this GCC may keep them as calls.
#define HS_LAMBDA_INLINE __attribute__((always_inline))
#define HS_CONSTANT
// A fact the optimizer may rely on (a false one is undefined behaviour).
#define HS_ASSUME(condition) \
  do {                       \
    if (!(condition)) __builtin_unreachable(); \
  } while (0)
#endif

#if defined(_OPENMP)
#define HS_OPENMP 1
#else
#define HS_OPENMP 0
#endif

// Index of the lowest set bit of a non-zero 64-bit value.
HS_HD HS_INLINE int32_t hs_lowest_bit(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __ffsll((long long)v) - 1;
#else
  return __builtin_ctzll(v);
#endif
}

// Fixed-size copy usable on host and device (memcpy is not available under NVRTC).
HS_HD HS_INLINE void hs_copy_bytes(void* dst, const void* src, uint32_t n) {
  uint8_t* d = (uint8_t*)dst;
  const uint8_t* s = (const uint8_t*)src;
  for (uint32_t k = 0; k < n; ++k) d[k] = s[k];
}

// AVX2 host fast paths (preprocess_simd.h, tia_simd.h): x86-64 g++ / clang builds only,
// chosen at run time so that an extension still runs on any x86-64 CPU; nvcc and NVRTC
// never see them. The portable loops they stand in for stay the reference.
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && defined(__x86_64__) && defined(__GNUC__)
#define HS_HOST_SIMD 1
// One switch per extension module; tests turn it off to compare the two paths.
inline bool& hs_simd_enabled_flag() {
  static bool enabled = true;
  return enabled;
}
inline void hs_set_simd_enabled(bool on) { hs_simd_enabled_flag() = on; }
inline bool hs_simd_available() {
  static const bool cpu_has_avx2 = __builtin_cpu_supports("avx2");  // also checks OS support
  return hs_simd_enabled_flag() && cpu_has_avx2;
}
#else
#define HS_HOST_SIMD 0
#if !defined(__CUDA_ARCH__)
inline void hs_set_simd_enabled(bool) {}
inline bool hs_simd_available() { return false; }
#endif
#endif
