// decode_rows.cu: owns the small-batch decode (kda::cuda::rows_decode, decode_rows.h): 1-4 tokens per sequence against
// a value-first pool (fp32 or bf16; bf16 at every batch off sm_90), one warp per (sequence, value head, kRows rows:
// 4, or 8 past one resident wave, rows::choose_rows), the state in registers.
//
// Why. At small batches a decode call is one dependent chain per CTA, not a stream: launch, the slot index, the state,
// the update, the stores. The bulk-copy kernel (hopper/decode_bulk.cu) runs that chain through its producer warp:
// index and input loads (one round trip), the bulk copy (a second), the producer's staging of the norms and gates into
// shared memory, a barrier, then the consumers' update: 4.8 us at H = 12 and 5.1 us at H = 32, B = 1, against FLA's
// fused_recurrent_kda at 3.9 / 5.1 us (bench/LEDGER.md, session 13). Here every warp issues its own loads: the slot's
// index together with its q / k / g channels, v rows, beta and gate parameters (one round trip), then its state rows
// straight into registers (the second); the norms, gates and beta are computed while the state is in flight, so after
// it lands only the update and the stores remain. No shared memory, no barrier.
//
// Layout. Lane l owns channels l W .. l W + W - 1 (W = K / 32) of each of the warp's kRows rows: a row is one coalesced
// 4 K-byte load and store per warp, and a row's two dot products are W-deep FMA chains plus one 5-step xor reduction,
// the kRows rows' reductions independent (interleaved by the compiler). Every warp recomputes its head's q / k norms
// (two interleaved reductions) and gates: the loads are L2 hits after the first warp of the head, and the arithmetic is
// off the critical path.
//
// Budget: registers hold kRows * W state floats, and per token 3 W raw channels + kRows v + beta + a write index, for
// up to kMaxT tokens at once (their loads all issued before the slot's is used). One token: __launch_bounds__(128, 4),
// at most 128 registers (ptxas, sm_90a, fp32 pool, 4 rows: 80 / 100 at K = 128 / 256; 8 rows: 96 at K = 128; no
// spills); up to four: (128, 2), so that K = 256's four tokens of raw inputs do not spill (bounded at 128 they spilled
// 572 bytes; now 200-208; 8 rows at K = 128: 236). The dispatcher takes this kernel only at small batches
// (rows::preferred).
//
// The math is the other decode kernels' (decode_math.cuh: the same per-token formulas and roundings); only the order
// of the terms of the sums (norms, row dot products) differs. In place: a warp reads its rows before it writes them,
// and only it touches them (sequences own disjoint slots, validated).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"
#include "cuda/decode_math.cuh"
#include "cuda/device_common.cuh"
#include "cuda/generic/decode_rows.h"
#include "cuda/generic/decode_rows_plan.h"

namespace kda::cuda {
namespace {

constexpr int kThreads = 32 * rows::kWarps;
constexpr int kMaxTokens = 4;

// kMaxT: the most tokens per sequence this instance takes (1, or kMaxTokens for speculative verify); T <= kMaxT.
// P: the pool's element, float or __nv_bfloat16 (the state widened to fp32 when loaded, rounded once when stored).
// kRows: the state rows a warp owns (rows::choose_rows: 4, or 8 past one resident wave).
template <int K, int kMaxT, typename P, int kRows>
__global__ void __launch_bounds__(kThreads, kMaxT == 1 ? 4 : 2) decode_rows_kernel(const DecodeParams p) {
  constexpr int W = K / 32;
  const ForwardParams& io = p.io;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched with programmatic stream serialization on sm_90 (launch below): nothing global is read before the
  // previous kernel in the stream has completed and its writes are visible; the next kernel may launch as early.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  struct {
    int64_t n;
    int hv, row0;
  } const tk = {blockIdx.z, static_cast<int>(blockIdx.y), rows::row0_of(static_cast<int>(blockIdx.x), warp, kRows)};
  if (tk.row0 >= io.V) return;  // uniform over the warp; no barrier follows
  const int h = tk.hv / io.group;
  const int T = static_cast<int>(io.T);  // 1 .. kMaxT (rows_decode_supported)
  const int nrows = min(kRows, io.V - tk.row0);

  // Every global load before any loaded value is used (a value tested or converted where it is loaded holds back the
  // loads behind it for a round trip): the slot's index first, it heads the chain; the rest is independent of it.
  const int32_t slot_index = p.read_index(tk.n);
  const bool has_a_log = io.has_A_log();
  const float a_log = has_a_log ? static_cast<const float*>(io.A_log.data)[tk.hv * io.A_log.stride[0]] : 0.0f;
  float bias[W];
#pragma unroll
  for (int m = 0; m < W; ++m)
    bias[m] = io.gate_mode != KDA_GATE_LOG_DECAY
                  ? static_cast<const float*>(io.dt_bias.data)[tk.hv * io.dt_bias.stride[0] +
                                                               (lane * W + m) * io.dt_bias.stride[1]]
                  : 0.0f;
  uint32_t rq[kMaxT][W], rk[kMaxT][W], rg[kMaxT][W], rv[kMaxT][kRows], rbeta[kMaxT];
  int32_t rw[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t >= T) break;
    load_bits_strided<W>(rq[t], io.q.data, io.q.dtype,
                         tk.n * io.q.stride[0] + t * io.q.stride[1] + h * io.q.stride[2] + lane * W * io.q.stride[3],
                         io.q.stride[3]);
    load_bits_strided<W>(rk[t], io.k.data, io.k.dtype,
                         tk.n * io.k.stride[0] + t * io.k.stride[1] + h * io.k.stride[2] + lane * W * io.k.stride[3],
                         io.k.stride[3]);
    load_bits_strided<W>(rg[t], io.g.data, io.g.dtype,
                         tk.n * io.g.stride[0] + t * io.g.stride[1] + tk.hv * io.g.stride[2] +
                             lane * W * io.g.stride[3],
                         io.g.stride[3]);
    // Every lane reads the warp's kRows values of v (one broadcast access each); rows past V read row 0 (dropped).
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      rv[t][r] = load_bits(io.v.data, io.v.dtype,
                           tk.n * io.v.stride[0] + t * io.v.stride[1] + tk.hv * io.v.stride[2] +
                               (r < nrows ? tk.row0 + r : 0) * io.v.stride[3]);
    rbeta[t] = load_bits(io.beta.data, io.beta.dtype,
                         tk.n * io.beta.stride[0] + t * io.beta.stride[1] + tk.hv * io.beta.stride[2]);
    rw[t] = p.write_index(tk.n, t);
  }

  // The state rows, as soon as the slot is known: straight into registers.
  const int64_t slot = p.in_pool(slot_index);
  P* const pool = static_cast<P*>(p.pool);
  const int64_t out_base = tk.n * io.out_stride[0] + tk.hv * io.out_stride[2];
  if (slot < 0) {  // padding (uniform over the warp): zero outputs, no slot touched
    if (lane < nrows)
      for (int t = 0; t < T; ++t)
        store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1] + (tk.row0 + lane) * io.out_stride[3], 0.0f);
    return;
  }
  float st[kRows][W];
  const P* const src = pool + slot * p.pool_stride[0] + tk.hv * p.pool_stride[1] + tk.row0 * int64_t{K} + lane * W;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < nrows) {
      ld_vec<W>(src + r * K, st[r]);
    } else {
#pragma unroll
      for (int m = 0; m < W; ++m) st[r][m] = 0.0f;
    }
  }

  const float ea = io.gate_mode == KDA_GATE_BOUNDED && has_a_log ? expf(a_log) : 1.0f;
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t >= T) break;
    // Token t's vectors (computed while the state is in flight, for the first token).
    float q[W], k[W], a[W];
    bits_to_float(q, rq[t], io.q.dtype);
    bits_to_float(k, rk[t], io.k.dtype);
    bits_to_float(a, rg[t], io.g.dtype);
    token_vectors<W>(io, q, k, a, has_a_log, a_log, ea, bias);
    const float beta = beta_activation_f(bits_to_float(rbeta[t], io.beta.dtype), io.beta_is_logits, io.allow_neg_eigval);

    // Per row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale (S q_hat): the reference's order.
    float dot[kRows];
    update_rows<kRows, W>(st, a, k, q, [&](int r) { return bits_to_float(rv[t][r], io.v.dtype); }, beta, dot);
    const int64_t w = p.in_pool(rw[t]);
    if (w >= 0) {  // this token's state to its write slot (1-D indices: the last token's only)
      P* const dst = pool + w * p.pool_stride[0] + tk.hv * p.pool_stride[1] + tk.row0 * int64_t{K} + lane * W;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < nrows) st_vec_streaming<W>(dst + r * K, st[r]);
    }
    float mine = 0.0f;  // lane r keeps row r's output
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float o = group_sum<32>(dot[r]);
      if (lane == r) mine = o;
    }
    if (lane < nrows)
      store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1] + (tk.row0 + lane) * io.out_stride[3],
                io.scale * mine);
  }
}

// Programmatic dependent launch (the launch and the CTAs' start beside the previous kernel's tail; at B = 1-32 a
// call is a few microseconds, much of it launch and ramp) only where the code that runs has the griddepcontrol.wait
// above: an sm_90 device running this binary's sm_90 code. Without the wait the attribute would let the kernel read
// its inputs before the previous kernel wrote them.
template <class Kernel>
bool runs_sm90_code(Kernel kernel, int device) {
  int major = 0;
  cudaFuncAttributes attr{};
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9 && attr.binaryVersion >= 90;
}

template <int K, typename P, int R>
void launch_rows(const DecodeParams& p, cudaStream_t stream) {
  const auto kernel = p.io.T == 1 ? decode_rows_kernel<K, 1, P, R> : decode_rows_kernel<K, kMaxTokens, P, R>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows::grid_x(p.io.V, R)), static_cast<unsigned>(p.io.HV),
                     static_cast<unsigned>(p.io.N));  // N, HV <= 65535 (rows_decode_supported)
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  if (runs_sm90_code(kernel, p.io.device_id)) {
    cfg.attrs = overlap;
    cfg.numAttrs = 1;
  }
  if (cudaLaunchKernelEx(&cfg, kernel, p) != cudaSuccess && cfg.numAttrs > 0) {
    (void)cudaGetLastError();  // a stream or driver that refuses the attribute: plain stream order
    cfg.numAttrs = 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, p);
  }
}

// The rows per warp from the batch against what the device holds of the 4-row instance at once (its occupancy: the
// registers of the instance that runs decide it).
template <int K, typename P>
void launch(const DecodeParams& p, int sms, cudaStream_t stream) {
  if constexpr (rows::rows_for(K, true) != 4) {
    const auto narrow = p.io.T == 1 ? decode_rows_kernel<K, 1, P, 4> : decode_rows_kernel<K, kMaxTokens, P, 4>;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, narrow, kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 1;
    }
    if (rows::choose_rows(p.io.N, p.io.HV, p.io.V, K, int64_t{per_sm} * sms * rows::kWarps) != 4) {
      launch_rows<K, P, rows::rows_for(K, true)>(p, stream);
      return;
    }
  }
  launch_rows<K, P, 4>(p, stream);
}

template <typename P>
void launch_pool(const DecodeParams& p, int sms, cudaStream_t stream) {
  switch (p.io.K) {
    case 64: launch<64, P>(p, sms, stream); break;
    case 128: launch<128, P>(p, sms, stream); break;
    default: launch<256, P>(p, sms, stream); break;
  }
}

}  // namespace

bool rows_decode_supported(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  if (io.T < 1 || io.T > kMaxTokens || (io.K != 64 && io.K != 128 && io.K != 256) || !io.state_v_first) return false;
  // Slot and head starts 16-byte aligned (a lane's loads are up to 16 bytes: 4 fp32, or 8 bf16 at K = 256).
  const int64_t per16 = p.pool_dtype == KDA_DTYPE_BFLOAT16 ? 8 : 4;  // elements in 16 bytes
  if (p.pool_stride[3] != 1 || p.pool_stride[2] != io.K || p.pool_stride[1] % per16 || p.pool_stride[0] % per16)
    return false;
  if (io.N > 65535 || io.HV > 65535) return false;  // the grid's y and z
  return reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
}

void rows_decode(const DecodeParams& p, int sms, cudaStream_t stream) {
  if (p.pool_dtype == KDA_DTYPE_BFLOAT16)
    launch_pool<__nv_bfloat16>(p, sms, stream);
  else
    launch_pool<float>(p, sms, stream);
}

}  // namespace kda::cuda
