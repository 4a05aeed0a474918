// chunk_kernels.h: the launch entry points of the chunked kernels, for their launchers (forward_chunked.cu,
// backward_chunked.cu). Host code; each returns the cudaError_t of its own setup (the launch error is read by the
// caller).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/params.h"

#include "common/backward_params.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda {

// The input side of chunked_forward_supported (forward_chunked.cu): K, V, dtypes, strides, alignment, grid limits
// (not the output, the final state or the device's shared memory). The chunked backward recomputes the forward
// from the same inputs.
bool chunked_inputs_supported(const ForwardParams& p);

}  // namespace kda::cuda

namespace kda::cuda::chunk {

// f(std::integral_constant<int, K>{}, std::integral_constant<int, N>{}) for K in {64, 128} and N in {N0, N1} (the
// value dimension or a V tile width): the one place the chunked launchers turn run-time sizes into the template
// arguments their kernels are built for. The caller has already refused every other size.
template <int N0, int N1, class F>
decltype(auto) dispatch_kn(int K, int N, F&& f) {
  using K64 = std::integral_constant<int, 64>;
  using K128 = std::integral_constant<int, 128>;
  using A = std::integral_constant<int, N0>;
  using B = std::integral_constant<int, N1>;
  if (K == 64) return N == N0 ? f(K64{}, A{}) : f(K64{}, B{});
  return N == N0 ? f(K128{}, A{}) : f(K128{}, B{});
}

// What the backward's recompute keeps of the forward's two phases (chunk_map.h BackwardLayout; all null in the
// forward): phase 1 writes A' (not scaled by beta), T, the rows' inverse L2 norms and the tame flag, phase 2 the
// chunk-start states and V_new (as bf16 planes).
struct BackwardSaves {
  float* akk = nullptr;
  float* tinv = nullptr;
  float* norms = nullptr;
  int* tame = nullptr;
  __nv_bfloat16* starts = nullptr;
  __nv_bfloat16* vnew = nullptr;
};

// Where a backward's recompute, or a forward that saves for the backward, keeps phase 1's A' and T (phase1) and the
// state pass's chunk-start states and V_new (state): workspace regions of BackwardLayout.
struct ForwardKeeps {
  BackwardSaves phase1, state;
};
inline ForwardKeeps backward_keeps(char* workspace, const BackwardLayout& bl) {
  ForwardKeeps k;
  k.phase1.akk = reinterpret_cast<float*>(workspace + bl.akk);
  k.phase1.tinv = reinterpret_cast<float*>(workspace + bl.tinv);
  k.phase1.norms = reinterpret_cast<float*>(workspace + bl.norms);
  k.phase1.tame = reinterpret_cast<int*>(workspace + bl.tame);
  k.state.starts = reinterpret_cast<__nv_bfloat16*>(workspace + bl.starts);
  k.state.vnew = reinterpret_cast<__nv_bfloat16*>(workspace + bl.vnew);
  return k;
}

// The chunk list from cu_seqlens, on the device (forward_chunked.cu): one CTA; header, seq_first and list of the
// workspace (chunk_map.h).
cudaError_t launch_chunk_map(const ForwardParams& p, char* workspace, cudaStream_t s);

// The chunked forward's launches after the chunk map (forward_chunked.cu): phase 1 and the state pass, a partial
// last wave of the wgmma state pass overlapped with the other heads' phase 1 (chunk_map.h overlap_first_heads). The
// forward runs them, and so does the backward's recompute (p.out null; keep: backward_keeps).
cudaError_t launch_forward_phases(const ForwardParams& p, char* workspace, const ForwardKeeps& keep, int sms,
                                  cudaStream_t s);

// The value heads a per-(chunk, value head) launch takes: first .. first + count - 1 (count < 0: to the last).
// beside_previous: launched to run beside the kernel before it in the stream (programmatic dependent launch; that
// kernel triggers it: state_wgmma.cu, reverse_wgmma.cu), over heads whose results that kernel does not write; the
// grid's last CTA waits for that kernel, so the launches after this one in the stream see both finished.
struct HeadRange {
  int first = 0;
  int count = -1;
  bool beside_previous = false;
  int count_of(int HV) const { return count < 0 ? HV - first : count; }
};
// cudaLaunchKernelEx on cfg, with the programmatic-serialization attribute where beside_previous; a stream or driver
// that refuses it gets the same launch in plain stream order (correct, without the overlap; inside a stream capture
// the refusal has already ended the capture, and this fails too).
template <class... Params, class... Args>
cudaError_t launch_maybe_beside(cudaLaunchConfig_t cfg, bool beside_previous, void (*kernel)(Params...),
                                Args&&... args) {
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  if (beside_previous) {
    cfg.attrs = overlap;
    cfg.numAttrs = 1;
  }
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess && cfg.numAttrs > 0) {
    cudaGetLastError();
    cfg.numAttrs = 0;
    e = cudaLaunchKernelEx(&cfg, kernel, args...);
  }
  return e;
}

// Phase 1 (chunk_prepare.cu): one CTA per (chunk-list entry, value head) of a capacity-sized grid, for the heads of
// `heads` (beside a state pass over other heads, forward_chunked.cu).
size_t prepare_smem_bytes(int K, int V);
cudaError_t launch_prepare(const ForwardParams& p, char* workspace, int64_t cap, cudaStream_t s,
                           const BackwardSaves& saves = {}, const HeadRange& heads = {});

// Phase 2 (chunk_state.cu): one CTA per (sequence, value head, V tile), the tile widths and launches as planned
// (chunk_map.h plan_state_pass). With p.out null the output is not written.
size_t state_smem_bytes(int K, int bv);
cudaError_t launch_state(const ForwardParams& p, const char* workspace, const StatePassPlan& plan, cudaStream_t s,
                         const BackwardSaves& saves = {});
// One launch of a plan: chains chain0 .. chain0 + count - 1 (chain = n HV + hv) in bv-column tiles, on wgmma where
// it runs.
cudaError_t launch_state_chains(const ForwardParams& p, const char* workspace, int bv, int64_t chain0, int64_t count,
                                cudaStream_t s, const BackwardSaves& saves = {});

// The state pass with its chains cut into segments (chunk_map.h plan_segments; chunk_segments.cu): one pass of the
// state kernel over every chain (pass 1 or 2, SegmentArgs; on wgmma where it runs), the combine between them, and the
// three as one call.
struct SegmentArgs {
  int segments = 1;          // s; 1: the unsplit pass
  int pass = 0;              // 1 or 2
  float* ends = nullptr;     // chunk_map.h SegmentLayout
  float* starts = nullptr;
};
cudaError_t launch_state_segment_pass(const ForwardParams& p, const char* workspace, int bv, const SegmentArgs& sg,
                                      cudaStream_t s);
// The plan for p's chains on `sms` SMs (1 segment where the split does not pay, or the forward saves for a backward).
SegmentPlan segment_plan(const ForwardParams& p, int sms);
size_t segment_workspace_bytes(const ForwardParams& p, int sms);  // the forward's workspace with the segments'
cudaError_t launch_segmented_state(const ForwardParams& p, char* workspace, const SegmentPlan& plan, cudaStream_t s);

// The state pass on sm_90a wgmma (hopper/state_wgmma.cu): available for K = 128 (V a multiple of 64) on an sm_90
// device of a build with CuTe; it runs (launch_state takes it) for the 64-column launches of a plan under
// KDA_BACKEND_CUDA_HOPPER.
bool state_wgmma_available(const ForwardParams& p);
bool state_wgmma_runs(const ForwardParams& p, int bv);
cudaError_t launch_state_wgmma(const ForwardParams& p, const char* workspace, int64_t chain0, int64_t chains,
                               cudaStream_t s, const BackwardSaves& saves);
// One pass of the segmented state pass (SegmentArgs) on it: where state_wgmma_runs(p, 64) for the plan's tiles.
cudaError_t launch_state_wgmma_segment_pass(const ForwardParams& p, const char* workspace, const SegmentArgs& sg,
                                            cudaStream_t s);

// The reverse pass on sm_90a wgmma (hopper/reverse_wgmma.cu): where state_wgmma_runs; launch_reverse takes it.
bool reverse_wgmma_runs(const ForwardParams& p, int bv);
cudaError_t launch_reverse_wgmma(const BackwardParams& bp, char* workspace, int64_t chain0, int64_t chains,
                                 cudaStream_t s);

// The backward's reverse state pass (chunk_reverse.cu): one CTA per (sequence, value head, V tile), tiles and launches
// as the state pass's (plan_state_pass), chunks from the last; writes dV_new and the chunk-end state gradients
// (BackwardLayout du, dsend) and dh0.
size_t reverse_smem_bytes(int K, int bv);
cudaError_t launch_reverse(const BackwardParams& bp, char* workspace, const StatePassPlan& plan, cudaStream_t s);

// The backward's products (chunk_products.cu): one CTA per (chunk, value head), the gradient pass's matrix products
// into BackwardLayout prod (ProdLayout).
size_t products_smem_bytes(int K, int V);
cudaError_t launch_products(const BackwardParams& bp, char* workspace, cudaStream_t s, const HeadRange& heads = {});

// A chunk is tame where every token's decay is at least 2^-kTameBits in every channel: its pair decays factor through
// one reference point a 16-token block with every factor inside 2^(+-8 x 8), and dg as a difference of the pair terms
// loses nothing that matters (docs/backward.md, "Where the spanning sums are needed": the CPU study's threshold; no
// bounded gate, at most 5 nats = 7.2 bits a token, is steep).
constexpr float kTameBits = 8.0f;

// The backward's tensor-core gradient pass (chunk_grad_tc.cu), before the per-channel one: per (chunk, value head,
// 64-channel half) of a tame chunk, dq_hat, dk_hat and d g_log over the product tile's QS, BK, KD (ProdLayout), with
// dbeta's third term's row sums and the chunk's tame flag.
size_t grad_tc_smem_bytes();
cudaError_t launch_grad_tc(const BackwardParams& bp, char* workspace, cudaStream_t s);
// Whether launch_grad_tc writes a tame chunk's dq and dk itself (through the L2 norm's backward, into the gradients),
// not dq_hat / dk_hat for launch_grad_rows: a group of one value head, and K = 64, or K = 128 on sm_90 under
// KDA_BACKEND_CUDA_HOPPER (its halves a 2-CTA cluster). Never by the gradients' dtype or layout: the bits of one
// input's gradients do not depend on where they are written.
bool grad_tc_finishes_qk(const BackwardParams& bp);

// The gradient pipe (chunk_grad_pipe.cu; chunk_map.h GradPipePlan): launches 4 and 5 (the products and the
// tensor-core stage) as one launch of 2-CTA clusters, a ticket each; the tiles between them go through DRAM. It runs
// for K = V = 128 on the Hopper path where grad_tc_finishes_qk (a group of one value head) and the products' wgmma
// maps fit, and only where nothing runs beside the products (backward_chunked.cu: no partial wave of the reverse
// pass).
bool grad_pipe_runs(const BackwardParams& bp);
cudaError_t launch_grad_pipe(const BackwardParams& bp, char* workspace, int sms, cudaStream_t s);

// The tame chunks' per-row finishing (chunk_grad_rows.cu), after chunk_grad_tc.cu: per (chunk, value head), dq and dk
// through the L2 norms (or dq_hat, dk_hat per value head into BackwardLayout dqk), dv, dg, dbeta, the gate parameters'
// partial sums.
cudaError_t launch_grad_rows(const BackwardParams& bp, char* workspace, cudaStream_t s);

// The backward's per-channel gradient pass (chunk_grad.cu) for the steep chunks (chunk_grad_tc.cu's flag): per (chunk,
// value head), from the products, every gradient of the chunk's tokens, as chunk_grad_rows.cu writes them.
size_t grad_smem_bytes(int K, int V);
cudaError_t launch_grad(const BackwardParams& bp, char* workspace, int sms, cudaStream_t s);
// Every input (q, k, v, g, beta) and every gradient the passes write (dq, dk, dv, dg, dbeta; an absent one counts) in
// bf16, those with channels contiguous (io_fast), dq's and dk's rows at even element offsets (bf16 pairs): the three
// gradient launches take the instance built for that.
bool grad_io_fast(const BackwardParams& bp);

}  // namespace kda::cuda::chunk
