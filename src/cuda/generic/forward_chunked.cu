// forward_chunked.cu: the launcher of the two-phase chunked tensor-core forward (chunked_forward*() of
// cuda_backend.h; the CUDA prefill path of KDA_BACKEND_CUDA_GENERIC where it is supported), and the tiny kernel that
// builds its work plan. Three launches on the caller's stream, nothing synchronizes with the host (CUDA-graph
// capturable), all scratch in the caller's workspace (chunk_map.h, workspace_layout):
//   0  build_chunk_map: the chunk list from cu_seqlens, on the device (one CTA; a block scan over the sequences)
//   1  chunk_prepare.cu: per (chunk, value head), everything that does not depend on the state -> workspace tiles
//   2  chunk_state.cu: per (sequence, value head, V tile), the sequential state pass over the chunks
// The docs/algorithm.md "two-phase chunked forward" section gives the math of the split.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kMapThreads = 256;

// Sequences in tiles of kMapThreads: each thread takes one, a block scan of the chunk counts gives its first list
// entry, and the running total carries to the next tile. Writes seq_first[0..N], the list, its length and phase 1's
// task counters (zero); for a packed batch also seq_order, the sequences longest first (chunk_map.h lpt_key): a
// histogram of the keys, a scan over them from the largest, and each sequence placed at its key's next slot.
__global__ void __launch_bounds__(kMapThreads) build_chunk_map(const ForwardParams p, char* ws) {
  using Scan = cub::BlockScan<int64_t, kMapThreads>;
  static_assert(kMapThreads == kLptKeys, "one LPT key a thread");
  __shared__ typename Scan::TempStorage scan;
  __shared__ int64_t carry;
  __shared__ unsigned long long slot[kLptKeys];  // the histogram, then each key's next slot in seq_order
  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, p.K, p.V);
  int64_t* const seq_first = reinterpret_cast<int64_t*>(ws + wl.seq_first);
  ChunkRec* const list = reinterpret_cast<ChunkRec*>(ws + wl.list);
  const bool packed = p.has_cu_seqlens();
  auto span_of = [&](int64_t n) {
    return packed ? sequence_span(true, load_cu_seqlen(p.cu_seqlens, n), load_cu_seqlen(p.cu_seqlens, n + 1), n, p.T)
                  : sequence_span(false, 0, 0, n, p.T);
  };
  if (threadIdx.x == 0) carry = 0;
  slot[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t n0 = 0; n0 < p.N; n0 += kMapThreads) {
    const int64_t n = n0 + threadIdx.x;
    SeqSpan sp{0, 0, 0};
    if (n < p.N) sp = span_of(n);
    const int64_t count = chunks_of(sp.len);
    int64_t before = 0, total = 0;
    Scan(scan).ExclusiveSum(count, before, total);
    const int64_t at = carry + before;
    if (n < p.N) {
      seq_first[n] = at < wl.cap ? at : wl.cap;
      write_sequence_chunks(list, at, wl.cap, static_cast<int32_t>(n), sp);
      if (packed) atomicAdd(&slot[lpt_key(count)], 1ull);
    }
    __syncthreads();  // every thread has read carry
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t end = carry < wl.cap ? carry : wl.cap;
    seq_first[p.N] = end;
    *reinterpret_cast<int64_t*>(ws) = end;
    for (int slot = 0; slot < 2; ++slot) *reinterpret_cast<unsigned long long*>(ws + prep_counter_offset(slot)) = 0;
  }
  if (!packed) return;  // equal lengths: the passes take rank = n (chain_chunks)
  // Thread i owns key kLptKeys - 1 - i: an ascending scan over threads is a scan from the largest key down.
  const int key = kLptKeys - 1 - static_cast<int>(threadIdx.x);
  int64_t first = 0;
  Scan(scan).ExclusiveSum(static_cast<int64_t>(slot[key]), first);
  __syncthreads();  // every count read before any slot is overwritten
  slot[key] = static_cast<unsigned long long>(first);
  __syncthreads();
  int64_t* const order = reinterpret_cast<int64_t*>(ws + wl.seq_order);
  for (int64_t n = threadIdx.x; n < p.N; n += kMapThreads)
    order[atomicAdd(&slot[lpt_key(chunks_of(span_of(n).len))], 1ull)] = n;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

cudaError_t chunk::launch_chunk_map(const ForwardParams& p, char* ws, cudaStream_t s) {
  build_chunk_map<<<1, kMapThreads, 0, s>>>(p, ws);
  return cudaGetLastError();
}

bool chunked_inputs_supported(const ForwardParams& p) {
  if ((p.K != 64 && p.K != 128) || (p.V != 64 && p.V != 128)) return false;
  const kda_dtype_t dt = p.q.dtype;
  if (dt != KDA_DTYPE_BFLOAT16 && dt != KDA_DTYPE_FLOAT16) return false;
  if (p.k.dtype != dt || p.v.dtype != dt) return false;
  if (p.g.dtype != dt && p.g.dtype != KDA_DTYPE_FLOAT32) return false;
  if (p.beta.dtype != dt && p.beta.dtype != KDA_DTYPE_FLOAT32) return false;
  if (p.has_initial_state() && p.initial_state.dtype != KDA_DTYPE_FLOAT32) return false;
  // 16-byte vector loads of q, k, v, g rows (8 elements of 2 bytes, or 4 of fp32 g).
  if (p.q.stride[3] != 1 || p.k.stride[3] != 1 || p.v.stride[3] != 1 || p.g.stride[3] != 1) return false;
  const int g_vec = p.g.dtype == KDA_DTYPE_FLOAT32 ? 4 : 8;
  for (int i = 0; i < 3; ++i)
    if (p.q.stride[i] % 8 || p.k.stride[i] % 8 || p.v.stride[i] % 8 || p.g.stride[i] % g_vec) return false;
  if (p.T > 0 && (!aligned16(p.q.data) || !aligned16(p.k.data) || !aligned16(p.v.data) || !aligned16(p.g.data)))
    return false;
  // Grid limits: phase 1 is (capacity, HV), phase 2 N * HV * (V / 32) at most.
  return p.HV <= 65535 && chunk_capacity(p.B * p.T, p.N) <= INT_MAX && p.N * p.HV * (p.V / 32) <= INT_MAX;
}

bool chunked_forward_supported(const ForwardParams& p) {
  if (!chunked_inputs_supported(p)) return false;
  if (p.out_dtype != KDA_DTYPE_BFLOAT16 && p.out_dtype != KDA_DTYPE_FLOAT16 && p.out_dtype != KDA_DTYPE_FLOAT32)
    return false;
  if (p.has_final_state() && p.final_state_dtype != KDA_DTYPE_FLOAT32) return false;
  // Pair stores of out.
  if (p.out_stride[3] != 1 || p.out_stride[0] % 2 || p.out_stride[1] % 2 || p.out_stride[2] % 2) return false;
  if (p.T > 0 && !aligned16(p.out)) return false;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p.device_id) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const size_t need = std::max(chunk::prepare_smem_bytes(p.K, p.V), chunk::state_smem_bytes(p.K, 64));
  return static_cast<size_t>(optin) >= need;
}

// The inputs' side only, as the backward's support: a backward's ForwardParams carry no output to check.
bool hopper_chunked_supported(const ForwardParams& p) {
  return chunked_inputs_supported(p) && chunk::state_wgmma_available(p);
}

cudaError_t chunk::launch_forward_phases(const ForwardParams& p, char* ws, const ForwardKeeps& keep, int sms,
                                         cudaStream_t s) {
  const int64_t cap = workspace_layout(p.B * p.T, p.N, p.HV, p.K, p.V).cap;
  cudaError_t e;
  // Few chains on many SMs: the chains cut into segments (chunk_segments.cu). Never where the state pass keeps its
  // intermediates for a backward (keep), whose workspace is the backward's layout.
  const bool keeps = keep.state.starts != nullptr || keep.state.vnew != nullptr || keep.phase1.akk != nullptr;
  const SegmentPlan seg = keeps ? SegmentPlan{1, 64} : segment_plan(p, sms);
  if (seg.segments > 1) {
    if ((e = launch_prepare(p, ws, cap, s, keep.phase1)) != cudaSuccess) return e;
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    return launch_segmented_state(p, ws, seg, s);
  }
  // A partial last wave of the wgmma state pass: its heads first, the other heads' phase 1 beside their state pass
  // (chunk_map.h overlap_first_heads).
  const int64_t first = state_wgmma_runs(p, 64) ? overlap_first_heads(p.N, p.HV, static_cast<int>(p.V / 64), sms) : 0;
  if (first > 0) {
    const int f = static_cast<int>(first);
    if ((e = launch_prepare(p, ws, cap, s, keep.phase1, {0, f, false})) != cudaSuccess) return e;
    if ((e = launch_state_chains(p, ws, 64, 0, first, s, keep.state)) != cudaSuccess) return e;
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = launch_prepare(p, ws, cap, s, keep.phase1, {f, -1, true})) != cudaSuccess) return e;
    return launch_state_chains(p, ws, 64, first, p.HV - first, s, keep.state);
  }
  if ((e = launch_prepare(p, ws, cap, s, keep.phase1)) != cudaSuccess) return e;
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  // The last wave's split into 32-column tiles pays where both launches run the same kernel family; with the
  // 64-column tiles on wgmma (state_wgmma_runs) the 32-column ones would run mma.sync, ~as slow a chunk as a whole
  // 64-column wgmma tile (session 19: ~552 and ~564 us a wave at h96-fixed), so every chain keeps 64 columns.
  const bool wgmma64 = state_wgmma_runs(p, 64), split = !p.has_cu_seqlens() && !wgmma64;
  return launch_state(p, ws, plan_state_pass(p.N * p.HV, p.V, sms, split, wgmma64), s, keep.state);
}

Status chunked_forward_workspace_size(const ForwardParams& p, size_t* bytes) {
  // save_for_backward: the backward's whole layout (its first part is this forward's own); else the forward's, with
  // the segments' regions where the plan cuts the chains (which takes the device's SM count).
  if (p.N == 0) {
    *bytes = 0;
  } else if (p.save_for_backward) {
    *bytes = static_cast<size_t>(backward_layout(p.B, p.T, p.N, p.HV, p.K, p.V, p.group).bytes);
  } else {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device_id) != cudaSuccess) {
      cudaGetLastError();
      return Status{KDA_STATUS_CUDA_ERROR, "workspace size: cannot read the device's SM count"};
    }
    *bytes = chunk::segment_workspace_bytes(p, sms);
  }
  return Status::Ok();
}

Status chunked_forward(const ForwardParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  if (p.N == 0 || (p.T == 0 && !p.has_final_state())) return Status::Ok();
  // 16-byte cp.async and 8-byte index reads; cudaMalloc gives 256 bytes.
  if ((reinterpret_cast<uintptr_t>(workspace) & 255) != 0)
    return Status{KDA_STATUS_INVALID_ARGUMENT, "workspace: the chunked CUDA forward needs a 256-byte aligned workspace"};
  return launch_on_device(p.device_id, "kda chunked forward kernel launch", [&] {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    char* const ws = static_cast<char*>(workspace);
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device_id);
    if (e != cudaSuccess) return e;
    if ((e = chunk::launch_chunk_map(p, ws, s)) != cudaSuccess) return e;
    // save_for_backward: phase 1 keeps A' and T, the state pass the chunk-start states and V_new, where the
    // backward's recompute would put them (chunk_map.h BackwardLayout).
    const chunk::ForwardKeeps keep =
        p.save_for_backward ? chunk::backward_keeps(ws, backward_layout(p.B, p.T, p.N, p.HV, p.K, p.V, p.group))
                            : chunk::ForwardKeeps{};
    return chunk::launch_forward_phases(p, ws, keep, sms, s);
  });
}

}  // namespace kda::cuda
