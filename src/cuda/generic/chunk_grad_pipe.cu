// chunk_grad_pipe.cu: the gradient pipe (chunk_map.h GradPipePlan): the products (products_task.cuh) and the
// tensor-core stage (grad_tc_task.cuh) of the chunked backward in one launch of 2-CTA clusters, in place of
// backward_chunked.cu's launches 4 and 5 where grad_pipe_runs says so (K = V = 128 on the Hopper path, a group of one
// value head, no partial wave of the reverse pass beside the products). Same tasks, same code, same bits as the two
// launches; what changes is when they run: the stages follow their products a wave behind in one launch, so there
// is no drain between the launches and each SM holds products (bound by DRAM) and stages (bound by issue) side by
// side. Measured (session 70, H100, train-h64-fixed): the two kernels 1.61 + 1.19 ms, this launch 2.69-2.72 ms (ncu),
// the backward 5699-5709 -> 5607 us (gpu_ab, one run). The DRAM bytes are the two kernels' (the tiles between them
// go through DRAM: kept in L2, with L2's default policy or stored evict-last and dropped after the stage, they had
// left it before their stage ran, and those builds were slower: bench/LEDGER.md, session 70).
//
// A CTA: 256 threads, the larger of the two tasks' shared memory (the products' 100,352 bytes), 128 registers (two
// CTAs an SM, as either kernel). Why clusters of two for the products too: the stage's two halves are a cluster
// (their partial dots through distributed shared memory), and a ticket is a cluster's, so a products ticket is two
// tasks, one a CTA.
#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/grad_tc_task.cuh"
#include "cuda/generic/products_task.cuh"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
static_assert(products::kThreads == kThreads && grad_tc::kThreads == kThreads, "grad pipe: both tasks' CTA size");
using ProdLy = products::ProdSmem<128, 128>;
constexpr size_t kSmemBytes = std::max(ProdLy::kBytes, grad_tc::TcLayout::kBytes);

// A task's products-done flag: set with release semantics by the products' CTA after every thread's stores and a
// fence; read with acquire semantics by the stage's thread 0, whose CTA barrier then orders the other threads' reads.
__device__ __forceinline__ void flag_set(int* f) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(f), "r"(1) : "memory");
}
__device__ __forceinline__ int flag_get(const int* f) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
  return v;
}

// A cluster a ticket, taken when the cluster starts (not a persistent loop over tickets: inlined into one, the bodies'
// loop-invariant work was held live across both and ptxas 13.0 spilled ~1.1 KB a thread, against 44 / 0 bytes for the
// two kernels; each body alone in the loop 824 / 232). A ticket is taken only by a running cluster, so a stage that
// waits on its products' flag waits on a job that a running cluster holds, whatever the residency.
template <class Spec>
__global__ void __launch_bounds__(kThreads, 2)
    grad_pipe_kernel(const BackwardParams bp, char* ws, const BackwardLayout bl, const GradPipePlan plan,
                     const __grid_constant__ sm90::ProductsMaps maps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && KDA_PRODUCTS_WGMMA
  extern __shared__ __align__(1024) float smem[];  // 1 KB: the wgmma P1's swizzled planes
  __shared__ int64_t ticket;                       // rank 0's, read by both CTAs
  const auto cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  if (rank == 0 && threadIdx.x == 0)
    ticket = static_cast<int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(ws + bl.pipe), 1ull));
  cluster.sync();
  const GradPipePlan::Job job = plan.job(*cluster.map_shared_rank(&ticket, 0));
  int* const flags = reinterpret_cast<int*>(ws + bl.pipe + 8);
  if (job.kind == GradPipePlan::kProducts) {
    const int64_t task = 2 * job.index + rank;
    if (task < plan.tasks) {
      products::products_task<128, 128, true>(bp, ws, 0, bp.f.HV, maps, static_cast<unsigned>(task), smem);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) flag_set(flags + task);
    }
  } else if (job.kind == GradPipePlan::kStage &&
             job.index / bp.f.HV < *reinterpret_cast<const int64_t*>(ws)) {  // past the list: returns at once
    if (threadIdx.x == 0)
      while (flag_get(flags + job.index) == 0) __nanosleep(100);
    __syncthreads();
    grad_tc::grad_tc_task<128, 128, Spec, true>(bp, ws, bl, static_cast<unsigned>(2 * job.index + rank), smem);
  }
  cluster.sync();  // rank 0's shared memory (the ticket) stays until rank 1 has read it
#else
  __trap();  // launched only where grad_pipe_runs: the sm_90a build with CuTe
#endif
}

template <class Spec>
cudaError_t launch_spec(const BackwardParams& bp, char* ws, int sms, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  const auto kernel = grad_pipe_kernel<Spec>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes));
  if (e != cudaSuccess) return e;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, 128, 128, p.group);
  const int64_t tasks = bl.fwd.cap * p.HV;
  sm90::ProductsMaps maps{};
  if ((e = sm90::encode_products_maps(ws + bl.starts, ws + bl.dsend, ws + bl.vnew, ws + bl.du, tasks, &maps)) !=
      cudaSuccess)
    return e;
  cudaLaunchAttribute pair[1];
  pair[0].id = cudaLaunchAttributeClusterDimension;
  pair[0].val.clusterDim.x = 2;
  pair[0].val.clusterDim.y = 1;
  pair[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(2 * std::max(sms, 1)));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = s;
  cfg.attrs = pair;
  cfg.numAttrs = 1;
  int clusters = 0;
  if ((e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg)) != cudaSuccess) return e;
  const GradPipePlan plan = grad_pipe_plan(tasks, clusters);
  if (2 * plan.tickets() > INT_MAX) return cudaErrorInvalidConfiguration;  // chunked_backward_support refuses first
  cfg.gridDim = dim3(static_cast<unsigned>(2 * plan.tickets()));
  if ((e = cudaMemsetAsync(ws + bl.pipe, 0, static_cast<size_t>(grad_pipe_bytes(tasks)), s)) != cudaSuccess) return e;
  return cudaLaunchKernelEx(&cfg, kernel, bp, ws, bl, plan, maps);
}

}  // namespace

bool grad_pipe_runs(const BackwardParams& bp) {
  const ForwardParams& p = bp.f;
  return p.K == 128 && p.V == 128 && p.backend == KDA_BACKEND_CUDA_HOPPER && state_wgmma_available(p) &&
         grad_tc_finishes_qk(bp) &&
         sm90::products_maps_fit(backward_layout(p.B, p.T, p.N, p.HV, 128, 128, p.group).fwd.cap * p.HV);
}

cudaError_t launch_grad_pipe(const BackwardParams& bp, char* ws, int sms, cudaStream_t s) {
  return with_io_spec(grad_io_fast(bp), bp.f.gate_mode, [&](auto spec) {
    return launch_spec<decltype(spec)>(bp, ws, sms, s);
  });
}

}  // namespace kda::cuda::chunk
