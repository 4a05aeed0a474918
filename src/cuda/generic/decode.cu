// decode.cu: owns the CUDA decode (kda::cuda::decode of cuda_backend.h): T tokens per sequence against a state pool
// (fp32; bf16 goes to the row-split kernel only) read and written in place through slot indices. Its dispatcher hands decode of 1-4 tokens at small batches
// to the row-split kernel (generic/decode_rows.cu), at larger ones on sm_90 to the bulk-copy kernel
// (hopper/decode_bulk.cu); the portable kernel below takes everything else, on any GPU.
//
// Decode is bound by streaming the state (V * K * 4 bytes per (sequence, value head) in, the same out), so the
// design is about bytes in flight per SM, CTAs per SM and the dependent latency chain, not arithmetic.
//
// The budget (H200: 132 SMs, ~4.26 TB/s). Little's law: 4.26 TB/s / 132 SMs = 32 B/ns per SM of traffic; half of
// it reads, and at ~0.8-1 us loaded DRAM latency an SM needs ~16 KB of state reads (~25-32 KB of traffic) in
// flight at every instant. A CTA only has reads in flight between its first copy and its wait, so what matters
// is (CTAs per SM) x (bytes per CTA) x (the fraction of a CTA's life spent waiting on them). The session-1 kernel
// (64-thread units, 16 columns = 64 bytes per thread, up to 256 threads, 73-79 registers) held 3 CTAs x 16 KB =
// 48 KB per SM at the start of a CTA and reached 62-65% of the floor at B >= 128; FLA's fused_recurrent_kda (32 x
// 128 fp32 tile in registers per 4 warps, 32 floats per thread) reaches ~74% at B128.
//
// Work split. A CTA of 32 * units threads (units = 1, 2 or 4; see choose_units) owns kRowsPerUnit * units rows of
// the V x K state of one (sequence n, value head hv). Every thread owns kCols = 32 columns of one row (K = 16: all
// 16): kLanes = K / 32 lanes per row, column float4 c4 * kLanes + lane (c4 = 0..7), so one copy instruction of a
// warp covers kLanes * 16 contiguous bytes of each of its 32 / kLanes rows. K = V = 128: 4 lanes per row, 32 rows
// (16 KB of state) per 128-thread CTA, FLA's tile. Row sums: four independent FMA chains (one per float4
// component, 8 deep) plus a log2(kLanes)-step xor-shuffle over the row group.
//
// Memory-level parallelism. Each thread issues its eight 16-byte state copies (cp.async.cg, global -> its own
// shared-memory slots, 128 bytes per thread) as soon as the slot index is known, before any preprocessing. The
// tile then stays in shared memory for the whole token loop, which streams it through registers one float4 at a
// time: registers do not grow with the tile (64 per thread, __launch_bounds__(128, 8); ptxas, nvcc 13.0, sm_80 and
// sm_90a, K = 16 .. 256: 76-152 bytes of spill stores, 20-64 bytes of spill loads per thread, to L1-resident
// local memory, against 256 bytes of state traffic per thread; unbounded it takes 109-172), so the register file
// allows 8 CTAs of 128 threads per SM = 1024 threads; shared memory (16 KB tile + 0.5 KB gates + the stage, + 1 KB
// reserved per CTA: ~19.2 KB at T = 1, ~31 KB at T = 8, with the carveout set to its maximum, 228 KB) allows 11
// (T = 1) or 7 (T = 8). That is 8 x 16 KB = 128 KB of state reads in flight
// per SM at a CTA wave's start, 2.7x the session-1 kernel's 48 KB and 4-5x what Little's law asks: enough that
// the duty-cycle loss (waiting CTAs, exit/launch gaps, the compute tail) still leaves > 32 KB in flight on
// average. Keeping the tile in registers instead (the first version of this design) costs 124-168 registers
// (ptxas keeps every shared-memory operand of a pass in flight), i.e. 3 CTAs per SM: no better than before.
// A persistent double-buffered cp.async pipeline was measured slower (B256 619 us, bench/LEDGER.md session 2).
//
// Grid: one CTA per (n, hv, row block); units grows from 1 while the grid keeps >= one CTA per SM. H = 32,
// K = V = 128: B1 -> 256 CTAs of 64 threads (all 132 SMs busy, 2 per SM), B >= 2 -> 128-thread CTAs: B8 1024 CTAs
// = 131072 threads, within one wave of 132 x 1024 resident threads (the 64-register budget is what makes that
// one wave: at 80 registers, 768 threads per SM, B8 would need 1.3 waves); B256 32768 CTAs = 31 waves. H = 12 B1:
// 192 CTAs of 32 threads.
//
// Per token, the dependent chain after the state has arrived: pass 1 (8 x {LDS S, LDS alpha, LDS k} -> S * alpha,
// 4 FMA chains of 8), 2 adds + log2(kLanes) shuffles -> u; pass 2 (8 x {LDS S, alpha, k, q} -> S * alpha again, the
// same rounding, + u k, 4 FMA chains with q), st.global.cs of each float4 of the new state as soon as it exists
// (streaming, evict-first: the pool is not re-read by this kernel), 2 adds + shuffles -> out. The state tile
// is written back to shared memory only where a later token or the strided store reads it. Shared-memory cost per
// warp and token: 16 per-thread LDS.128 of S (4 wavefronts each) + ~56 broadcast LDS.128 of alpha/k/q (1 each)
// ~ 120 cycles, ~500 per CTA, against the ~1800 cycles (1 us) the SM needs to stream a CTA's 32 KB at 32 B/ns:
// overlapped by the other 7 CTAs.
//
// Prediction (unmeasured; model t = t0 + floor / efficiency, floors of bench/LEDGER.md): t0 ~ 4.9 us (session 1:
// ~5.3; the gate parameters are now loaded before the slot test instead of after it, one barrier fewer at the
// first chunk, 8-deep instead of 16-deep FMA chains), efficiency ~0.8-0.85 where session 1 had 0.59-0.65.
// H32: B1 ~5.3-5.8 (FLA 5.14, main 6.37), B8 ~14 (14.20, 19.01), B32 ~44 (45.30, 57.33), B128 ~160 (172.00,
// 205.09), B256 ~315 (400.6), B512 ~630 (793.0); H12: B1 ~5.2 (5.45), B32 ~20 (25.39), B256 ~122 (153.57). The
// bandwidth regime (B >= 128) is where the design should win clearly; B8-B32 are near FLA; B1 is bound by the
// dependent chain (launch, slot load, state load, two passes, stores), which this design shortens by only
// ~0.3 us, so it may stay behind FLA there.
//
// Ownership makes the in-place update safe: each state element (hv, row, col) of a sequence's slots is read and
// written by exactly one thread (sequences own disjoint slots), which waits for its own copies (cp.async.wait_all)
// before its first store, so a write slot equal to the read slot is never written before it is read.
//
// Staging. The per-token preprocessing is independent of the state. The raw q, k, g, v, beta and write slots of
// the first chunk are loaded before the state copies are issued; after them a stage group of min(K, 32) lanes per
// token forms q_hat and k_hat (L2 norms by shuffles) in shared memory, and then every thread activates gates
// and beta element by element. Tokens are staged kTok at a time (3 * kTok * K floats <= 12 KiB of dynamic shared
// memory, sized by min(T, kTok)).
//
// Per token and row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale (S q_hat), then S goes to the
// token's write slot if it has one: the reference's order, with two row reductions per token.
//
// Every K in {16, 32, 64, 128, 256} uses this design (no fallback): K = 256 has 8 lanes per row and 16 rows per
// 128-thread CTA, K = 16 one lane per row holding all 16 columns (64 bytes in flight per thread).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"
#include "cuda/decode_math.cuh"
#include "cuda/device_common.cuh"
#include "cuda/generic/decode_fusions.h"
#include "cuda/generic/decode_head.h"
#include "cuda/generic/decode_rows.h"
#include "cuda/generic/decode_rows_plan.h"
#include "cuda/hopper/decode_bulk.h"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kUnit = 32;      // threads per row unit (one warp)
constexpr int kMaxUnits = 4;   // at most 128 threads per CTA
constexpr int kMinCtas = 8;    // __launch_bounds__ minimum CTAs per SM: 64 registers (see the top)

template <int K>
struct Tile {
  static constexpr int kCols = K < 32 ? K : 32;            // state columns per thread: 8 16-byte copies (K >= 32)
  static constexpr int kLanes = K / kCols;                 // lanes per row: 1, 1, 2, 4, 8 for K = 16 .. 256
  static constexpr int kRowsPerUnit = kUnit / kLanes;      // 32, 32, 16, 8, 4
  static constexpr int kTok = K >= 256 ? 4 : 8;            // staged tokens per chunk: 3 * kTok * K floats <= 12 KiB
  static constexpr int kStageLanes = K < 32 ? K : 32;      // lanes staging one token (aligned in a warp)
  static constexpr int kStageCols = K / kStageLanes;       // 1, 1, 2, 4, 8 raw q/k/g values per lane
  static constexpr int kVSlots = (kTok * kRowsPerUnit + kUnit - 1) / kUnit;  // v values per thread per chunk
  static_assert(kCols * kLanes == K && kLanes <= 32 && kUnit % kStageLanes == 0, "tile does not fit a warp");
};

// x, but only once dep is computed: shared-memory reads addressed through it cannot be hoisted above dep's
// producers (bounds how many of them the compiler keeps in flight, i.e. the registers they hold).
__device__ __forceinline__ int after(int x, float dep) {
  asm volatile("" : "+r"(x) : "f"(dep));
  return x;
}

// What one thread stages: the q/k/g columns of one token (its stage group's), its share of the chunk's v values,
// and (threads tid < nt) token tid's beta and write slot.
template <int K>
struct Raw {
  uint32_t q[Tile<K>::kStageCols], k[Tile<K>::kStageCols], g[Tile<K>::kStageCols];
  uint32_t v[Tile<K>::kVSlots];
  uint32_t beta;
  int32_t w;
};

// Grid: x = (value head, row block) as hv * row_blocks + rb, sequence n = z * gridDim.y + y: one task per CTA and
// 32-bit index math (a loop over tasks would let the compiler hoist 64-bit per-thread offsets out of it, and a
// 64-bit division is a call). rows_cta = kRowsPerUnit * blockDim.x / 32; ntc = min(T, kTok) sizes the dynamic
// shared memory; vec: the pool allows 16-byte state accesses. Registers: 64 (__launch_bounds__(128, 8)), see the
// top; without the bound ptxas takes 109-172.
template <int K>
__global__ void __launch_bounds__(kUnit * kMaxUnits, kMinCtas) decode_kernel(const DecodeParams p, int rows_cta,
                                                                     int row_blocks, int ntc, bool vec) {
  using Tl = Tile<K>;
  constexpr int L = Tl::kLanes, kTok = Tl::kTok, SL = Tl::kStageLanes, SC = Tl::kStageCols, kCols = Tl::kCols;
  constexpr int kVSlots = Tl::kVSlots;
  const ForwardParams& io = p.io;

  // Shared memory (floats):
  //   st_s   [kCols / 4][nthreads] float4: the state tiles; thread tid's float4 c4 at c4 * nthreads + tid, so each
  //          thread reads back only what it copied itself and a warp's float4 accesses are consecutive;
  //   gate_s [K + 4]: the head's dt_bias, then A_log;
  //   q_s, k_s, a_s [ntc][K]: q_hat, k_hat and alpha = exp(g_log) of the chunk's tokens;
  //   v_s    [ntc][rows_cta]: v of the CTA's rows;
  //   per token [ntc] each: beta, write slot.
  extern __shared__ __align__(16) float smem[];
  const int nthreads = blockDim.x;
  float4* st_s = reinterpret_cast<float4*>(smem);
  float* gate_s = smem + kCols * nthreads;
  float* q_s = gate_s + K + 4;
  float* k_s = q_s + ntc * K;
  float* a_s = k_s + ntc * K;
  float* beta_s = a_s + ntc * K;
  int32_t* w_s = reinterpret_cast<int32_t*>(beta_s + ntc);
  float* v_s = reinterpret_cast<float*>(w_s + ntc);

  const int n_stage_groups = nthreads / SL;
  const int hv = static_cast<int>(blockIdx.x) / row_blocks;
  const int h = hv / io.group;
  const int row0 = (static_cast<int>(blockIdx.x) - hv * row_blocks) * rows_cta;
  // The thread's roles. They are re-derived from an opaque copy of threadIdx.x at the top of every chunk: otherwise
  // the compiler hoists the per-thread 64-bit offsets built from them out of the chunk loop and keeps them live
  // across all of it (spills at T <= kTok too, where that loop runs once).
  int tid, lane, rg, sg, sl, row;
  bool row_ok;
  auto derive_roles = [&] {
    tid = opaque(static_cast<int>(threadIdx.x));
    lane = tid % L;     // position in the row group
    rg = tid / L;       // row of the CTA this thread owns
    sg = tid / SL;      // stage group: token sg + j * n_stage_groups of the chunk
    sl = tid % SL;      // stage lane: columns sl + m * SL
    row = row0 + rg;
    row_ok = row < io.V;
  };
  derive_roles();
  const int64_t n = static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  if (n >= io.N) return;  // uniform over the CTA
  float* const pool = static_cast<float*>(p.pool);

  // First in the dependency chain: the slot (one or two dependent loads), then the state copies that need it.
  const int64_t slot = p.read_slot(n);

  auto out_offset = [&](int64_t t) {
    return n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2] + row * io.out_stride[3];
  };

  // q/k/g of token j0 + sg of the chunk at t0 (zero bits past the chunk: finite, never stored).
  Raw<K> raw;
  auto load_tok = [&](int64_t t0, int nt, int j0) {
    const int j = j0 + sg;
#pragma unroll
    for (int m = 0; m < SC; ++m) {
      const int64_t t = t0 + j, col = sl + m * SL;
      raw.q[m] = j < nt ? load_bits(io.q.data, io.q.dtype, n * io.q.stride[0] + t * io.q.stride[1] +
                                                               h * io.q.stride[2] + col * io.q.stride[3]) : 0u;
      raw.k[m] = j < nt ? load_bits(io.k.data, io.k.dtype, n * io.k.stride[0] + t * io.k.stride[1] +
                                                               h * io.k.stride[2] + col * io.k.stride[3]) : 0u;
      raw.g[m] = j < nt ? load_bits(io.g.data, io.g.dtype, n * io.g.stride[0] + t * io.g.stride[1] +
                                                               hv * io.g.stride[2] + col * io.g.stride[3]) : 0u;
    }
  };
  // v item i = tid + s * nthreads is (token i / rows_cta, CTA row i % rows_cta); rows past V read as zero. Every
  // field is assigned on every path: a value kept from the previous chunk would stay live across the loop.
  auto load_side = [&](int64_t t0, int nt) {
#pragma unroll
    for (int s = 0; s < kVSlots; ++s) {
      const int i = tid + s * nthreads;
      const int tok = i / rows_cta, r = row0 + i % rows_cta;
      raw.v[s] = tok < nt && r < io.V
                     ? load_bits(io.v.data, io.v.dtype, n * io.v.stride[0] + (t0 + tok) * io.v.stride[1] +
                                                            hv * io.v.stride[2] + r * io.v.stride[3])
                     : 0u;
    }
    raw.beta = tid < nt ? load_bits(io.beta.data, io.beta.dtype, n * io.beta.stride[0] +
                                                                     (t0 + tid) * io.beta.stride[1] +
                                                                     hv * io.beta.stride[2])
                        : 0u;
    raw.w = tid < nt ? static_cast<int32_t>(p.write_slot(n, t0 + tid)) : -1;
  };

  const int nt0 = static_cast<int>(min(io.T, int64_t{kTok}));
  load_tok(0, nt0, 0);
  load_side(0, nt0);
  // The head's gate parameters (dt_bias, then A_log at index K), loaded before the slot is known: issued after
  // the slot test they would start one dependent global load later and sit on the critical path of small
  // batches (slot -> dt_bias -> staging -> activation), as long as the state's own slot -> state chain.
  constexpr int kGateSlots = (K + 1 + kUnit - 1) / kUnit;  // per thread at the smallest CTA (32 threads)
  float gate_raw[kGateSlots];
#pragma unroll
  for (int j = 0; j < kGateSlots; ++j) {
    const int i = tid + j * nthreads;
    float x = 0.0f;
    if (i < K && io.gate_mode != KDA_GATE_LOG_DECAY)
      x = static_cast<const float*>(io.dt_bias.data)[hv * io.dt_bias.stride[0] + i * io.dt_bias.stride[1]];
    if (i == K && io.has_A_log()) x = static_cast<const float*>(io.A_log.data)[hv * io.A_log.stride[0]];
    gate_raw[j] = x;
  }

  if (slot < 0) {  // padding (uniform over the CTA): zero outputs, no slot touched
    if (lane == 0 && row_ok) {
#pragma unroll 1
      for (int64_t t = 0; t < io.T; ++t) store_out(io.out, io.out_dtype, out_offset(t), 0.0f);
    }
    return;
  }

  // The state tile: all of this thread's copies issued back to back, before any preprocessing; they hold no
  // registers while in flight. This thread is the only reader and writer of these pool elements (see the top).
  if (row_ok) {
    if (vec) {
      const float4* src = reinterpret_cast<const float4*>(pool + slot * p.pool_stride[0] + hv * p.pool_stride[1] +
                                                          static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) cp_async16(&st_s[c4 * nthreads + tid], src + c4 * L + lane);
    } else {
      // Strided pools: a rolled loop, so that 16 64-bit addresses are never live at once next to the raw inputs.
      const float* src = pool + io.state_offset(p.pool_stride, slot, hv, row, 0);
      const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
      for (int c = 0; c < kCols; ++c) {
        const int col = ((c / 4) * L + lane) * 4 + c % 4;
        cp_async4(reinterpret_cast<float*>(&st_s[(c / 4) * nthreads + tid]) + c % 4, src + col * col_stride);
      }
    }
  }

  // The gate parameters into shared memory, ordered before their first use (activate) by the barrier after the
  // first chunk's staging.
#pragma unroll
  for (int j = 0; j < kGateSlots; ++j) {
    const int i = tid + j * nthreads;
    if (i <= K) gate_s[i] = gate_raw[j];
  }

  // Staging, first pass (per token, a stage group of SL lanes): q_hat, k_hat into q_s, k_s and the raw gate into
  // a_s. Every lane runs the shuffles (uniform trip counts); only tokens of the chunk are stored.
  auto stage_tok = [&](int nt, int j0) {
    const int j = j0 + sg;
    float q[SC], k[SC];
#pragma unroll
    for (int m = 0; m < SC; ++m) {
      q[m] = bits_to_float(raw.q[m], io.q.dtype);
      k[m] = bits_to_float(raw.k[m], io.k.dtype);
    }
    if (io.use_qk_l2norm) {
      const float inv_q = inv_norm<SL, SC>(q), inv_k = inv_norm<SL, SC>(k);
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        q[m] *= inv_q;
        k[m] *= inv_k;
      }
    }
    if (j < nt) {
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        const int col = sl + m * SL;
        q_s[j * K + col] = q[m];
        k_s[j * K + col] = k[m];
        a_s[j * K + col] = bits_to_float(raw.g[m], io.g.dtype);
      }
    }
  };
  auto stage_side = [&](int nt) {
#pragma unroll
    for (int s = 0; s < kVSlots; ++s) {
      const int i = tid + s * nthreads;
      if (i < nt * rows_cta) v_s[i] = bits_to_float(raw.v[s], io.v.dtype);
    }
    if (tid < nt) {
      beta_s[tid] = bits_to_float(raw.beta, io.beta.dtype);
      w_s[tid] = raw.w;
    }
  };
  // Second pass (per element, after a barrier): gate and beta activated in place, spread over all threads (at
  // T = 1 only one warp stages, and the gate is the transcendental-heavy part).
  auto activate = [&](int nt) {
    const bool has_a_log = io.has_A_log();
#pragma unroll 1
    for (int i = tid; i < nt * K; i += nthreads)
      // exp of a g_log <= 0 lies in [0, 1]: a gate of any depth gives 0, never NaN.
      a_s[i] = expf(gate_log_decay_f(io.gate_mode, a_s[i], has_a_log, gate_s[K], gate_s[i % K], io.lower_bound));
    if (tid < nt) beta_s[tid] = beta_activation_f(beta_s[tid], io.beta_is_logits, io.allow_neg_eigval);
  };

#pragma unroll 1
  for (int64_t t0 = 0; t0 < io.T; t0 += kTok) {
    const int nt = static_cast<int>(min(io.T - t0, int64_t{kTok}));
    derive_roles();
    if (t0 > 0) {  // later chunks (T > kTok): loads issued before the barrier, to overlap it
      load_tok(t0, nt, 0);
      load_side(t0, nt);
    }
    if (t0 > 0) __syncthreads();  // every thread is done reading the previous chunk's stage (none at t0 = 0)
    stage_side(nt);
    stage_tok(nt, 0);
#pragma unroll 1
    for (int j0 = n_stage_groups; j0 < nt; j0 += n_stage_groups) {
      load_tok(t0, nt, j0);
      stage_tok(nt, j0);
    }
    __syncthreads();
    activate(nt);
    __syncthreads();

    // The state tile stays in shared memory (this thread's own st_s entries, where its copies landed): the token
    // loop streams it through registers one float4 at a time, so the registers do not grow with kCols and the
    // CTAs per SM (hence the state bytes in flight) are bounded by shared memory, not by the register file. Rows
    // past V (row_ok false) compute on zeros and store nothing; their lanes still join the row-group shuffles.
    float4* const my = st_s + tid;  // float4 c4 of this thread at my[c4 * nthreads]
    if (t0 == 0) {
      cp_async_wait_all();
      if (!row_ok) {
#pragma unroll
        for (int c4 = 0; c4 < kCols / 4; ++c4) my[c4 * nthreads] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }

    // Per token and row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale S q_hat. Lanes of a row
    // group read distinct float4s of a shared row: no bank conflicts. Four independent FMA chains per dot product
    // (one per float4 component): the per-token dependent chain is kCols / 4 FMAs + 2 adds + log2(L) shuffles.
    // Operands are read kGroup float4 columns at a time: the next group's addresses wait for this group's FMAs
    // (after()); left alone, the compiler issues every read of a pass at once and holds ~100 registers for them.
    constexpr int kGroup = 2;
    const float4* const st4 = reinterpret_cast<const float4*>(smem);
    const int a_off = static_cast<int>(a_s - smem) / 4, k_off = static_cast<int>(k_s - smem) / 4,
              q_off = static_cast<int>(q_s - smem) / 4;
#pragma unroll 1
    for (int tau = 0; tau < nt; ++tau) {
      const int64_t w = w_s[tau];
      const bool store_vec = vec && w >= 0 && row_ok;
      float4* const dst = reinterpret_cast<float4*>(pool + (store_vec ? w : 0) * p.pool_stride[0] +
                                                    hv * p.pool_stride[1] +
                                                    static_cast<int64_t>(row_ok ? row : 0) * p.pool_stride[2]) + lane;
      // The updated tile goes back to st_s only where something reads it again: a later token or the strided
      // store below (uniform over the CTA).
      const bool keep = tau + 1 < nt || t0 + nt < io.T || !vec;
      int base = tau * (K / 4) + lane;
      float ak[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) {
        if (c4 % kGroup == 0) base = after(base, ak[0]);
        float4 x = my[after(c4 * nthreads, ak[0])];
        const float4 av = st4[a_off + base + c4 * L], kv = st4[k_off + base + c4 * L];
        x.x *= av.x; x.y *= av.y; x.z *= av.z; x.w *= av.w;
        ak[0] = fmaf(x.x, kv.x, ak[0]);
        ak[1] = fmaf(x.y, kv.y, ak[1]);
        ak[2] = fmaf(x.z, kv.z, ak[2]);
        ak[3] = fmaf(x.w, kv.w, ak[3]);
      }
      const float u = beta_s[tau] * (v_s[tau * rows_cta + rg] - group_sum<L>((ak[0] + ak[1]) + (ak[2] + ak[3])));
      base = tau * (K / 4) + lane;
      float aq[4] = {u, 0.0f, 0.0f, 0.0f};  // aq[0] = u only orders the first reads after u; reset below
#pragma unroll
      for (int c4 = 0; c4 < kCols / 4; ++c4) {
        if (c4 % kGroup == 0) base = after(base, aq[0]);
        if (c4 == 0) aq[0] = 0.0f;
        float4 x = my[after(c4 * nthreads, aq[1])];
        const float4 av = st4[a_off + base + c4 * L], kv = st4[k_off + base + c4 * L],
                     qv = st4[q_off + base + c4 * L];
        // S * alpha again (the same rounding as the first pass): a broadcast read of alpha instead of a
        // per-thread shared-memory write and read of the decayed tile.
        x.x *= av.x; x.y *= av.y; x.z *= av.z; x.w *= av.w;
        x.x = fmaf(u, kv.x, x.x); x.y = fmaf(u, kv.y, x.y); x.z = fmaf(u, kv.z, x.z); x.w = fmaf(u, kv.w, x.w);
        aq[0] = fmaf(x.x, qv.x, aq[0]);
        aq[1] = fmaf(x.y, qv.y, aq[1]);
        aq[2] = fmaf(x.z, qv.z, aq[2]);
        aq[3] = fmaf(x.w, qv.w, aq[3]);
        if (keep) my[c4 * nthreads] = x;
        // Streaming store straight from the register (st.global.cs: the pool is not re-read by this kernel).
        if (store_vec) __stcs(dst + c4 * L, x);
      }
      const float sq = group_sum<L>((aq[0] + aq[1]) + (aq[2] + aq[3]));
      if (lane == 0 && row_ok) store_out(io.out, io.out_dtype, out_offset(t0 + tau), io.scale * sq);

      if (!vec && w >= 0 && row_ok) {
        // Strided pools: element stores from this thread's st_s entries in a rolled loop, so the 64-bit addresses
        // are never live at once.
        float* const sdst = pool + io.state_offset(p.pool_stride, w, hv, row, 0);
        const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
        for (int c = 0; c < kCols; ++c) {
          const int col = ((c / 4) * L + lane) * 4 + c % 4;
          __stcs(sdst + col * col_stride, reinterpret_cast<const float*>(&my[(c / 4) * nthreads])[c % 4]);
        }
      }
    }
  }
}

// CTA size: grow from one unit (warp) while the grid keeps at least one CTA per SM and the CTA's rows stay
// within V (H = 32, K = V = 128: 64 threads at B = 1, 128 from B = 2).
template <int K>
int choose_units(const DecodeParams& p, int sms) {
  constexpr int kRows = Tile<K>::kRowsPerUnit;
  auto tasks = [&](int units) {
    const int64_t rows = int64_t{kRows} * units;
    return p.io.N * p.io.HV * ((p.io.V + rows - 1) / rows);
  };
  int units = 1;
  while (units < kMaxUnits && kRows * units * 2 <= std::max(p.io.V, kRows) && tasks(units * 2) >= int64_t{sms})
    units *= 2;
  return units;
}

template <int K>
void launch(const DecodeParams& p, int sms, cudaStream_t stream) {
  using Tl = Tile<K>;
  const int units = choose_units<K>(p, sms);
  const int rows_cta = Tl::kRowsPerUnit * units;
  const int row_blocks = (p.io.V + rows_cta - 1) / rows_cta;
  const int ntc = static_cast<int>(std::min<int64_t>(p.io.T, Tl::kTok));
  // State tiles (kCols * 4 = 128 bytes per thread), gate parameters and the stage: at most 16 + 1 + 13.4 KiB,
  // under the 48 KiB default.
  const size_t smem_floats = static_cast<size_t>(Tl::kCols) * kUnit * units + K + 4 +
                             static_cast<size_t>(ntc) * (3 * K + 2 + rows_cta);
  // 16-byte state accesses need value-first rows contiguous in K and every row start 16-byte aligned.
  const bool vec = p.io.state_v_first && p.pool_stride[3] == 1 && p.pool_stride[0] % 4 == 0 &&
                   p.pool_stride[1] % 4 == 0 && p.pool_stride[2] % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
  const int64_t ny = std::min<int64_t>(p.io.N, 65535);
  const dim3 grid(static_cast<unsigned>(p.io.HV * row_blocks), static_cast<unsigned>(ny),
                  static_cast<unsigned>((p.io.N + ny - 1) / ny));
  // The largest shared-memory carveout: 8 CTAs of ~19 KB need 154 KB of the SM's 228 (the register file, not
  // shared memory, is then the limit). A preference, set per launch (per device); an error here changes nothing.
  if (cudaFuncSetAttribute(decode_kernel<K>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    (void)cudaGetLastError();  // not left for the launch check to report
  decode_kernel<K><<<grid, kUnit * units, smem_floats * sizeof(float), stream>>>(p, rows_cta, row_blocks, ntc, vec);
}

}  // namespace

size_t decode_workspace_size(const DecodeParams& p) { return static_cast<size_t>(FusionLayout(p).bytes()); }

Status decode(const DecodeParams& p, void* workspace, size_t workspace_bytes, void* stream) {
  const ForwardParams& io = p.io;
  if (io.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (io.K != 16 && io.K != 32 && io.K != 64 && io.K != 128 && io.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", io.K);
  const size_t need = decode_workspace_size(p);
  if (workspace_bytes < need)
    return make_status(KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes: %zu given, %zu needed (fused conv/norm)",
                       workspace_bytes, need);
  if (need > 0 && (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0))
    return make_status(KDA_STATUS_INVALID_ARGUMENT, "workspace: %zu bytes, 16-byte aligned, are needed (fused conv/norm)",
                       need);
  if (io.N == 0 || io.T == 0) return Status::Ok();  // no token: nothing is read or written

  // The path: a call with the conv or the norm and ungrouped heads runs them in one kernel (decode_head.cu). Else the
  // row-split kernel at small batches (below), else the sm_90 bulk-copy kernel (hopper/decode_bulk.cu) where it
  // applies, unless the portable kernel is asked for (KDA_BACKEND_CUDA_RECURRENT); KDA_BACKEND_CUDA_HOPPER insists on
  // the bulk kernel. Both forced paths run the fusions as their own kernels around the decode kernel, so the tests
  // that force them check that form too. The workspace stays the three-kernel form's size whichever path runs.
  const DecodeParams inner = fusion_inner_params(p, workspace);
  bool hopper = false;
  if (io.backend != KDA_BACKEND_CUDA_RECURRENT) {
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && (prev == io.device_id || cudaSetDevice(io.device_id) == cudaSuccess)) {
      hopper = hopper_decode_supported(inner);
      if (prev != io.device_id) (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
  }
  // A bf16 pool: the row-split and bulk kernels (the portable kernel stages fp32 tiles).
  // A forced bulk kernel that cannot run says so first (a bf16 pool included: the message names the backend).
  if (io.backend == KDA_BACKEND_CUDA_HOPPER && !hopper)
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "backend: KDA_BACKEND_CUDA_HOPPER decodes 1-4 tokens per sequence with K in {64, 128, 256} "
                  "against a value-first fp32 or bf16 pool of contiguous 16-byte aligned rows, on an sm_90 device; "
                  "use KDA_BACKEND_AUTO for everything else"};
  const bool bf16_pool = p.pool_dtype == KDA_DTYPE_BFLOAT16;
  if (bf16_pool && io.backend == KDA_BACKEND_CUDA_RECURRENT)
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "state_pool: a bfloat16 pool is decoded by the row-split and sm_90 bulk kernels, which "
                  "KDA_BACKEND_CUDA_GENERIC, AUTO and KDA_BACKEND_CUDA_HOPPER take; KDA_BACKEND_CUDA_RECURRENT needs a "
                  "float32 pool"};
  const bool rows_ok = io.backend != KDA_BACKEND_CUDA_RECURRENT && io.backend != KDA_BACKEND_CUDA_HOPPER &&
                       rows_decode_supported(inner);
  // The fusions in one kernel (decode_head.cu) where the value heads are not grouped and its CTAs fit in one wave
  // (head_decode_preferred, below); else three kernels.
  const bool head_ok = io.backend != KDA_BACKEND_CUDA_RECURRENT && io.backend != KDA_BACKEND_CUDA_HOPPER &&
                       head_decode_supported(p);
  if (bf16_pool && !rows_ok && !hopper)
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "state_pool: a bfloat16 pool needs 1-4 tokens per sequence, K in {64, 128, 256} and a value-first "
                  "pool of contiguous rows with 16-byte aligned slots and heads (and N, HV <= 65535) on CUDA; use a "
                  "float32 pool otherwise"};

  return launch_on_device(io.device_id, "kda decode kernel launch", [&] {
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, io.device_id);
    if (e != cudaSuccess) return e;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (head_ok && head_decode_preferred(io.N, io.HV, sms)) {
      head_decode(p, s);
      return cudaSuccess;
    }
    if (p.conv) {
      launch_decode_conv(p, workspace, sms, s);
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    // Small batches (up to rows::kMaxRowsPerSm state rows per SM): the row-split kernel, unless a path is forced; a bf16
    // pool also at larger batches where the bulk kernel does not apply (not sm_90).
    const bool rows = rows_ok && (rows::preferred(io.N, io.HV, io.V, sms) || (bf16_pool && !hopper));
    if (rows) {
      rows_decode(inner, sms, s);
    } else if (hopper) {
      if ((e = hopper_decode(inner, sms, s)) != cudaSuccess) return e;
    } else {
      switch (io.K) {
        case 16: launch<16>(inner, sms, s); break;
        case 32: launch<32>(inner, sms, s); break;
        case 64: launch<64>(inner, sms, s); break;
        case 128: launch<128>(inner, sms, s); break;
        default: launch<256>(inner, sms, s); break;
      }
    }
    if (p.out_norm) {
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
      launch_decode_norm(p, workspace, sms, s);
    }
    return cudaSuccess;
  });
}

}  // namespace kda::cuda
