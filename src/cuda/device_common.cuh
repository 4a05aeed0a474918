// device_common.cuh: device helpers every CUDA kernel of kda shares: raw-bit loads of float32 / float16 /
// bfloat16 inputs (issued early, converted when staged), one-rounding output stores, cu_seqlens reads, lane-group
// reductions, and the cp.async copies with their L2 policies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/params.h"

namespace kda::cuda {

// The raw bits of one element (inputs are float32, float16 or bfloat16: validated).
__device__ __forceinline__ uint32_t load_bits(const void* base, kda_dtype_t dtype, int64_t offset) {
  if (dtype == KDA_DTYPE_FLOAT32) return static_cast<const uint32_t*>(base)[offset];
  return static_cast<const uint16_t*>(base)[offset];
}

__device__ __forceinline__ float bits_to_float(uint32_t bits, kda_dtype_t dtype) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16: return __uint_as_float(bits << 16);
    case KDA_DTYPE_FLOAT16: return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    default: return __uint_as_float(bits);
  }
}

// One element as float.
__device__ __forceinline__ float load_f(const void* base, kda_dtype_t dtype, int64_t off) {
  return bits_to_float(load_bits(base, dtype, off), dtype);
}
__device__ __forceinline__ float load_f(const TensorView& t, int64_t off) { return load_f(t.data, t.dtype, off); }

// dst[m] = the raw bits of element offset + m * step for m < n (the rest are left as they are), the dtype test
// outside the loop: a row's loads issued together, converted where they are used.
template <int N>
__device__ __forceinline__ void load_bits_strided(uint32_t (&dst)[N], const void* base, kda_dtype_t dtype,
                                                  int64_t offset, int64_t step, int n = N) {
  if (dtype == KDA_DTYPE_FLOAT32) {
    const uint32_t* src = static_cast<const uint32_t*>(base) + offset;
#pragma unroll
    for (int m = 0; m < N; ++m)
      if (m < n) dst[m] = src[m * step];
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
#pragma unroll
    for (int m = 0; m < N; ++m)
      if (m < n) dst[m] = src[m * step];
  }
}

template <int N>
__device__ __forceinline__ void bits_to_float(float (&dst)[N], const uint32_t (&src)[N], kda_dtype_t dtype) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16:
#pragma unroll
      for (int m = 0; m < N; ++m) dst[m] = __uint_as_float(src[m] << 16);
      break;
    case KDA_DTYPE_FLOAT16:
#pragma unroll
      for (int m = 0; m < N; ++m) dst[m] = __half2float(__ushort_as_half(static_cast<unsigned short>(src[m])));
      break;
    default:
#pragma unroll
      for (int m = 0; m < N; ++m) dst[m] = __uint_as_float(src[m]);
  }
}

// One rounding from fp32 to the output dtype (round to nearest even, as the host store_element does).
__device__ __forceinline__ void store_out(void* base, kda_dtype_t dtype, int64_t offset, float x) {
  switch (dtype) {
    case KDA_DTYPE_BFLOAT16: static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(x); break;
    case KDA_DTYPE_FLOAT16: static_cast<__half*>(base)[offset] = __float2half_rn(x); break;
    default: static_cast<float*>(base)[offset] = x;
  }
}

// An optimization barrier: the compiler can no longer treat x as loop-invariant (an empty asm: no instruction).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

__device__ __forceinline__ int64_t load_cu_seqlen(const TensorView& cu, int64_t i) {
  return cu.dtype == KDA_DTYPE_INT32 ? static_cast<const int32_t*>(cu.data)[i * cu.stride[0]]
                                     : static_cast<const int64_t*>(cu.data)[i * cu.stride[0]];
}

// Sum / max over an aligned group of kLanes lanes (xor partners stay inside the group). All 32 lanes call it.
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <int kLanes>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// Asynchronous global -> shared copies (sm_80+): a tile goes in flight without holding registers. .cg (16 bytes)
// bypasses L1; .ca (4 bytes) is the only form of the small copy.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// The same under an L2 cache policy (evict_first()'s), or the default where policy is 0.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, uint64_t policy) {
  if (policy == 0) return cp_async16(smem, gmem);
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "l"(policy));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
// An L2 policy under which the lines a copy brings are the first evicted: for an operand's last read.
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace kda::cuda
