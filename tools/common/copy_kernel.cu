// copy_kernel.cu: a plain device-to-device copy kernel, kda-bench's per-size copy reference for decode (device.h
// DeviceCopy, kernel mode): what a copy of a decode's state bytes takes in the same graph harness, launch and ramp
// included, written the way a memory-bound kernel would be (16-byte loads and stores, four in flight a thread, a grid
// of every SM's resident threads). The driver's cudaMemcpyAsync reached only 58-65% of the 2 GiB copy rate below 512
// MiB on the H200 (session 26), so it is a weak reference at decode's sizes.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kda::testing {
namespace {

constexpr int kThreads = 256, kUnroll = 4;

__global__ void __launch_bounds__(kThreads) copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                          size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {  // four independent loads before the stores
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

// bytes a multiple of 16, both buffers 16-byte aligned (cudaMalloc's).
cudaError_t launch_copy_kernel(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
  if (e != cudaSuccess) return e;
  const size_t n = bytes / 16;
  const size_t want = (n + kThreads - 1) / kThreads, full = static_cast<size_t>(sms) * (per_sm / kThreads);
  const unsigned grid = static_cast<unsigned>(want < full ? (want > 0 ? want : 1) : full);
  copy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), n);
  return cudaGetLastError();
}

}  // namespace kda::testing
