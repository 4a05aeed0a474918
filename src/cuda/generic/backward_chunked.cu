// backward_chunked.cu: the launcher of the chunked CUDA backward (chunked_backward*() of cuda_backend.h,
// KDA_BACKEND_CUDA_CHUNKED; docs/backward.md). Ten launches on the caller's stream (seven when the forward kept
// launches 0-2's results: save_for_backward / forward_saved), nothing synchronizes with the
// host (CUDA-graph capturable), every buffer in the caller's workspace (chunk_map.h BackwardLayout):
//   0  launch_chunk_map: the chunk list from cu_seqlens
//   1  chunk_prepare.cu (the forward's phase 1), keeping A' and T
//   2  chunk_state.cu (the forward's state pass, no output), keeping the chunk-start states and V_new
//   3  chunk_reverse.cu: the reverse state pass, dV_new and the chunk-end state gradients, dh0
//   4  chunk_products.cu: the gradient pass's matrix products, per (chunk, value head)
//   5  chunk_grad_tc.cu: a tame chunk's dq, dk, dg (before the norms and the gate) on tensor cores, per 64 channels
//      (4 and 5 as one launch where chunk_grad_pipe.cu runs: grad_pipe_runs)
//   6  chunk_grad_rows.cu: a tame chunk's every per-token gradient from them, a row at a time
//   7  chunk_grad.cu: the same for a steep chunk (a softplus gate's), a thread per channel, from the products alone
//   8  finalize_qk_kernel (backward_finish.cu): dq / dk summed over each value-head group, through the L2 norm's
//      backward (groups of more than one value head; for one, launches 6 and 7 do it)
//   9  gate_params_kernel (backward_finish.cu): ddt_bias / dA_log from the per-chunk partials, in chunk order
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/backward_finish.h"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/launch.h"

namespace kda::cuda {

Status chunked_backward_support(const BackwardParams& bp) {
  const ForwardParams& p = bp.f;
  if (!chunked_inputs_supported(p))
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "backend: the KDA_BACKEND_CUDA_CHUNKED backward takes K and V in {64, 128}, bf16 or fp16 q/k/v with "
                  "unit innermost strides and 16-byte aligned rows; use KDA_BACKEND_AUTO for everything else"};
  KDA_RETURN_IF_ERROR(check_backward_tensors(bp));
  if (static_cast<int64_t>(p.N) * p.HV * (p.V / 32) > INT_MAX)
    return Status{KDA_STATUS_NOT_SUPPORTED, "q: too many sequences x heads for the chunked backward's grid"};
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p.device_id) != cudaSuccess) {
    cudaGetLastError();
    return Status{KDA_STATUS_CUDA_ERROR, "device: cannot read its shared-memory limit"};
  }
  const size_t need = std::max({chunk::prepare_smem_bytes(p.K, p.V), chunk::state_smem_bytes(p.K, 64),
                                chunk::reverse_smem_bytes(p.K, 64), chunk::products_smem_bytes(p.K, p.V),
                                chunk::grad_tc_smem_bytes(), chunk::grad_smem_bytes(p.K, p.V)});
  if (static_cast<size_t>(optin) < need)
    return make_status(KDA_STATUS_NOT_SUPPORTED,
                       "device: the chunked backward needs %zu bytes of shared memory per block, the device offers %d",
                       need, optin);
  return Status::Ok();
}

Status chunked_backward_workspace_size(const BackwardParams& bp, size_t* bytes) {
  KDA_RETURN_IF_ERROR(chunked_backward_support(bp));
  const ForwardParams& p = bp.f;
  *bytes = static_cast<size_t>(backward_layout(p.B, p.T, p.N, p.HV, p.K, p.V, p.group).bytes);
  return Status::Ok();
}

Status chunked_backward(const BackwardParams& bp, void* workspace, size_t workspace_bytes, void* stream) {
  KDA_RETURN_IF_ERROR(chunked_backward_support(bp));
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, p.K, p.V, p.group);
  if (workspace_bytes < static_cast<size_t>(bl.bytes))
    return make_status(KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes: %zu given, %lld needed", workspace_bytes,
                       static_cast<long long>(bl.bytes));
  if ((reinterpret_cast<uintptr_t>(workspace) & 255) != 0)
    return Status{KDA_STATUS_INVALID_ARGUMENT, "workspace: the chunked CUDA backward needs a 256-byte aligned workspace"};
  return launch_on_device(p.device_id, "kda chunked backward kernel launch", [&] {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    char* const ws = static_cast<char*>(workspace);
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device_id);
    if (e != cudaSuccess) return e;
    // The forward's inputs, without its outputs: the recompute writes only the workspace.
    ForwardParams f = p;
    f.out = nullptr;
    f.final_state = nullptr;
    f.ckpt = nullptr;
    // The reverse pass's plan, priced as the forward's state pass is (chunk_map.h tile_step_cost): where its 64-column
    // tiles run reverse_wgmma.cu, a 32-column generic tile's chunk step costs as much, so few heads (H = 32 or 16 at
    // one sequence) keep 64-column wgmma tiles instead of twice as many generic CTAs, and equal chains no longer move
    // their last wave to 32-column tiles (as forward_chunked.cu's state pass); the six standard workloads take the
    // same plan under either pricing (session 55, H100: train-h16-32k's backward 8.88 -> 7.97 ms, train-kimi-8k's
    // 4.17 -> 4.08, train-h64-fixed's unchanged).
    const bool wgmma64 = chunk::reverse_wgmma_runs(p, 64);
    const StatePassPlan plan = plan_state_pass(p.N * p.HV, p.V, sms, !p.has_cu_seqlens() && !wgmma64, wgmma64);
    if (p.N > 0) {
      // forward_saved: the forward (save_for_backward) left launches 0-2's results in this workspace.
      if (!bp.forward_saved) {
        // The forward's own launches (the partial wave's overlap included), keeping what the backward reads.
        if ((e = chunk::launch_chunk_map(f, ws, s)) != cudaSuccess) return e;
        if ((e = chunk::launch_forward_phases(f, ws, chunk::backward_keeps(ws, bl), sms, s)) != cudaSuccess) return e;
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
      }
      // A partial last wave of the wgmma reverse pass (one sequence: chain = head): the other heads' chains first,
      // in whole waves; then the partial wave's, with the other heads' products beside it on the SMs it leaves idle
      // (programmatic dependent launch: they read nothing it writes); then its own heads' products. The heads
      // chunk_map.h overlap_first_heads names are the wave's (the forward runs them first, this runs them last).
      const int64_t wave = wgmma64 ? overlap_first_heads(p.N, p.HV, static_cast<int>(p.V / 64), sms) : 0;
      if (wave > 0) {
        const int w = static_cast<int>(wave);
        if ((e = chunk::launch_reverse_wgmma(bp, ws, wave, p.HV - wave, s)) != cudaSuccess) return e;
        if ((e = chunk::launch_reverse_wgmma(bp, ws, 0, wave, s)) != cudaSuccess) return e;
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        if ((e = chunk::launch_products(bp, ws, s, {w, -1, true})) != cudaSuccess) return e;
        if ((e = chunk::launch_products(bp, ws, s, {0, w, false})) != cudaSuccess) return e;
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        if ((e = chunk::launch_grad_tc(bp, ws, s)) != cudaSuccess) return e;
      } else {
        if ((e = chunk::launch_reverse(bp, ws, plan, s)) != cudaSuccess) return e;
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        // The products and the tensor-core stage as one launch where it runs (chunk_grad_pipe.cu), else two.
        if (chunk::grad_pipe_runs(bp)) {
          if ((e = chunk::launch_grad_pipe(bp, ws, sms, s)) != cudaSuccess) return e;
        } else {
          if ((e = chunk::launch_products(bp, ws, s)) != cudaSuccess) return e;
          if ((e = cudaGetLastError()) != cudaSuccess) return e;
          if ((e = chunk::launch_grad_tc(bp, ws, s)) != cudaSuccess) return e;
        }
      }
      if ((e = chunk::launch_grad_rows(bp, ws, s)) != cudaSuccess) return e;
      if ((e = chunk::launch_grad(bp, ws, sms, s)) != cudaSuccess) return e;
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    // A group of one: the gradient pass wrote dq / dk itself.
    if (p.group > 1) launch_finalize_qk(bp, reinterpret_cast<const float*>(ws + bl.dqk), s);
    launch_gate_params(bp, reinterpret_cast<const double*>(ws + bl.gate), p.N > 0 ? bl.fwd.cap : 0, s);
    return cudaGetLastError();
  });
}

}  // namespace kda::cuda
