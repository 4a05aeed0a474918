// decode.cu: owns the CUDA decode (kda::cuda::decode of cuda_backend.h): T tokens per sequence against an fp32
// state pool read and written in place through slot indices.
//
// Decode is bound by streaming the state (V * K * 4 bytes per (sequence, value head) in, the same out), so the
// design is about bytes in flight and CTA count, not arithmetic.
//
// Work split. A tile is kRowsPerUnit * units rows of the V x K state of one (sequence n, value head hv), handled by
// a CTA of 64 * units threads (units = 1, 2 or 4). Every thread owns 16 columns of one row: kLanes = K / 16 lanes
// per row, column float4 c4 * kLanes + lane (c4 = 0..3), so one copy instruction of a row group covers kLanes * 16
// contiguous bytes of the row. Row sums are 16-long FMA chains plus an xor-shuffle over the row group.
//
// Persistent, pipelined CTAs (the speed design of issue #7). The grid is min(items, SMs x resident CTAs per SM);
// a CTA walks items blockIdx.x, + gridDim.x, ...; an item is seg_tiles consecutive tiles of one (n, q/k head h).
// Before a CTA processes tile j it issues the 16-byte cp.async copies of tile j + 1's state into the other half of
// a double buffer (each thread copies and later reads only its own 64 bytes, so no barrier guards the buffers).
// Why: the one-tile-per-CTA kernel (c944931, 62-65% of the copy floor for B >= 32) had loads in flight only
// between a CTA's start and its state wait; its slot-index load, staging (q/k/g loads, L2 norms, gates) and
// compute/store phases ran with nothing of its own in flight, and the next CTA could start only when it retired.
// Here, while tile j is staged, computed and stored, tile j + 1's 16 KB (256 threads x 64 B) are in flight, and
// tile j's own copies were issued one step earlier.
//
// Bytes in flight per SM, large B (H = 32, K = V = 128, units = 4, 256 threads): ptxas gives 128 registers (no
// spills) -> 2 CTAs/SM by registers (smem 2 x 16 KB + 13 KB stage per CTA would fit 4), each with 16-32 KB of loads
// in flight almost continuously: 32-64 KB/SM, against the ~11 KB/SM of reads Little's law asks for at 2.1 TB/s of
// reads and ~700 ns loaded latency (plus the same of writes). Stores are 16-byte st.global.cs (evict-first) so the
// written state does not push the next tiles' loads out of L2.
// Small B: units = 1 (8 rows per tile at K = 128) keeps >= 8 tiles per SM where the batch allows: B = 1, H = 32 is
// 32 x 16 = 512 tiles of 4 KB, so every SM gets about 4 CTAs with their loads issued at once (one step each; the
// pipeline cannot help a CTA with one tile, the latency chain slot -> state -> compute -> store is the floor there).
// Preprocessing: every tile restages its token's q/k/g (K values, < 1 KB) - redundant across the 4 row blocks of a
// head but off the critical path now (it overlaps the next tile's copies) and < 3% of the state bytes.
//
// Predicted, H = 32, graph replay, % of the 4.24 TB/s copy floor in state bytes (previous measured in brackets):
// B = 1: 5.5-6 us (6.36; launch + two dependent DRAM round trips bound it, not bandwidth); B = 8: 65-75% (42%);
// B = 32: 75-85% (56%); B = 128, 256, 512: 82-90% (62-65%). H = 12 tracks H = 32 at B >= 32. The remaining gap at
// large B is the tail of the last wave and the read-write turnaround of DRAM, which a copy kernel also pays.
//
// Fusions (kda.h). The causal short conv of q/k/v is computed while staging (4 taps from the conv state / earlier
// tokens, SiLU in fp32); the gated RMSNorm needs all V outputs of a (token, value head), which row blocks split
// over tiles. Both fusions therefore make an item own what they share: with the conv an item is every tile of
// (n, h) (all value heads of the group and all row blocks: the q/k conv state is then read and written by one
// CTA, so an in-place slot has no cross-CTA race); with the norm alone an item is the row blocks of one (n, hv).
// The item's o rows stay in shared memory (T * V floats, <= 16 KiB) until its last row block, then one warp per
// token normalizes and stores them. Cost: fewer, longer items, so small batches fill fewer SMs (B = 1, H = 32 with
// the conv: 32 items of 4 tiles). What they save against separate kernels, per token and (n, head), bf16
// activations: the conv kernel's read of q/k/v and write of the conv'd q/k/v (2 x 2 x (2 K + V) bytes per value
// head when HV = H) plus its conv-state traffic being folded in, and the norm kernel's read of o and write of y
// (2 x 2 x V bytes) - about 2.3 KB per (n, head) at K = V = 128 against 128 KB of state - and two launches
// (~2-3 us each in a graph at small B). The state bytes are the same.
//
// Ownership makes the in-place update safe: each state element (hv, row, col) of a sequence's slots is read and
// written by exactly one thread (sequences own disjoint slots), which waits for its own copies before its first
// store, so a write slot equal to the read slot is never written before it is read. The v conv state of a row is
// owned by its tile; the q/k conv state of (n, h) by the one CTA of its item (written after all its tiles staged).
//
// Staging. The per-token preprocessing is independent of the state. The raw q, k, g, v, beta and write slots of
// the first chunk are loaded, then a stage group of min(K, 32) lanes per token forms q_hat and k_hat (L2 norms by
// shuffles) in shared memory, and then every thread activates gates and beta element by element. Tokens are
// staged kTok at a time (3 * kTok * K floats <= 12 KiB of dynamic shared memory, sized by min(T, kTok)).
//
// Per token and row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale (S q_hat), then S goes to the
// token's write slot if it has one: the reference's order, with two row reductions per token.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kUnit = 64;      // threads per row unit
constexpr int kMaxUnits = 4;   // at most 256 threads per CTA
constexpr int kCols = 16;      // state columns per thread: four 16-byte copies in flight, 16 registers in use

template <int K>
struct Tile {
  static constexpr int kLanes = K / kCols;                 // lanes per row: 1, 2, 4, 8, 16 for K = 16 .. 256
  static constexpr int kRowsPerUnit = kUnit / kLanes;      // 64, 32, 16, 8, 4
  static constexpr int kTok = K >= 256 ? 4 : 8;            // staged tokens per chunk: 3 * kTok * K floats <= 12 KiB
  static constexpr int kStageLanes = K < 32 ? K : 32;      // lanes staging one token (aligned in a warp)
  static constexpr int kStageCols = K / kStageLanes;       // 1, 1, 2, 4, 8 raw q/k/g values per lane
  static constexpr int kVSlots = (kTok * kRowsPerUnit + kUnit - 1) / kUnit;  // v values per thread per chunk
  static_assert(kCols * kLanes == K && kLanes <= 32 && kUnit % kStageLanes == 0, "tile does not fit a warp");
};

// Asynchronous global -> shared copies (sm80+): the state tile goes in flight without holding registers while
// the preprocessing runs. .cg: 16-byte copies bypass L1 (the state is read once).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem_src));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// An optimization barrier: the compiler can no longer treat x as loop-invariant.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// The preprocessing of math.h without its divisions and square roots: those compile to slow-path calls, and
// every call site makes the compiler save (spill) what is live around it. The formulas are math.h's; only the
// roundings differ, by at most 2 ulp (__fdividef, valid for the denominators here: 1 + exp(-x) >= 1, where a
// denominator beyond 2^126 gives 0 for a sigmoid below 2^-126) or not at all (__frsqrt_rn rounds correctly).
__device__ __forceinline__ float sigmoid_f(float x) { return __fdividef(1.0f, 1.0f + expf(-x)); }

__device__ __forceinline__ float gate_log_decay_f(kda_gate_mode_t mode, float g, bool has_a_log, float a_log,
                                                  float bias, float lower_bound) {
  if (mode != KDA_GATE_BOUNDED) return gate_log_decay<float>(mode, g, has_a_log, a_log, bias, lower_bound);
  float x = g + bias;
  if (has_a_log && x != 0.0f) x *= expf(a_log);  // as math.h: x == 0 gives sigmoid(0) whatever A_log
  return lower_bound * sigmoid_f(x);
}

__device__ __forceinline__ float beta_activation_f(float b, bool is_logits, bool allow_neg_eigval) {
  const float r = is_logits ? sigmoid_f(b) : b;
  return allow_neg_eigval ? 2.0f * r : r;
}

// 1 / sqrt(sum x^2 + eps) of a token's q or k row spread over kLanes lanes (kN values each), math.h's
// l2_inv_norm. Where the sum of squares overflows (|x| beyond ~1e19) it is redone on x / m, m the power of two at
// or below max|x| (capped at 2^126 so that 1 / m is a normal float): the scaling is exact and a multiplication,
// and the result is (1 / m) / sqrt(sum (x / m)^2 + eps / m^2). All 32 lanes of the warp call it together.
template <int kLanes, int kN>
__device__ __forceinline__ float inv_norm(const float (&x)[kN]) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) ss = fmaf(x[i], x[i], ss);
  ss = group_sum<kLanes>(ss);
  const bool finite = isfinite(ss);
  if (__all_sync(0xffffffffu, finite)) return __frsqrt_rn(ss + static_cast<float>(kL2NormEps));
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) mx = fmaxf(mx, fabsf(x[i]));
  // Rows with a finite ss (any max, even 0) take the plain formula; the others get m = 2^E in [1, 2^126].
  const uint32_t e = min(__float_as_uint(fmaxf(group_max<kLanes>(mx), 1.0f)) & 0x7f800000u, 0x7e800000u);
  const float inv_m = __uint_as_float(0x7f000000u - e);  // 2^-E exactly
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) s2 = fmaf(x[i] * inv_m, x[i] * inv_m, s2);
  s2 = group_sum<kLanes>(s2);
  return finite ? __frsqrt_rn(ss + static_cast<float>(kL2NormEps))
                : inv_m * __frsqrt_rn(s2 + static_cast<float>(kL2NormEps) * inv_m * inv_m);
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

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// Fused conv: x' = silu(sum_j w[c, j] seq[t + j]) for channel c of token t, seq = (state[0..2], x_0, x_1, ..).
// x: the tensor (q, k or v), off0: its element offset of (n, token 0, head, col), tstride: its token stride.
// Not inlined: the fused path's 4 taps x 64-bit addresses would otherwise raise the register count of every
// (unfused) instance; the call costs only the fused path.
// Views by value: a reference into the kernel's parameter space would make the caller copy DecodeParams to the stack.
__device__ __noinline__ float conv_silu(const TensorView x, const TensorView w, const TensorView cs, int64_t off0,
                                        int64_t tstride, int64_t t, int64_t slot, int64_t c) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t s = t + j - 3;
    const float xv = s >= 0 ? bits_to_float(load_bits(x.data, x.dtype, off0 + s * tstride), x.dtype)
                            : bits_to_float(load_bits(cs.data, cs.dtype, slot * cs.stride[0] + c * cs.stride[1] +
                                                                           (3 + s) * cs.stride[2]), cs.dtype);
    const float wv = bits_to_float(load_bits(w.data, w.dtype, c * w.stride[0] + j * w.stride[1]), w.dtype);
    acc = fmaf(wv, xv, acc);
  }
  return acc * sigmoid_f(acc);
}

// Conv state of channel c after each token with a write slot: (seq[t + 1], seq[t + 2], seq[t + 3]). Called by the
// channel's only owner after every read of the old state (its three values are read before any write).
__device__ __forceinline__ void conv_state_update(const DecodeParams& p, int i, const TensorView& x, int64_t off0,
                                                  int64_t tstride, int64_t n, int64_t slot, int64_t c) {
  const TensorView& cs = p.conv_state[i];
  float old[3];
#pragma unroll
  for (int j = 0; j < 3; ++j)
    old[j] = bits_to_float(load_bits(cs.data, cs.dtype, slot * cs.stride[0] + c * cs.stride[1] + j * cs.stride[2]),
                           cs.dtype);
#pragma unroll 1
  for (int64_t t = 0; t < p.io.T; ++t) {
    const int64_t w = p.write_slot(n, t);
    if (w < 0) continue;
#pragma unroll 1
    for (int j = 0; j < 3; ++j) {
      const int64_t s = t + 1 + j - 3;  // index into x, or into old when negative
      const float val = s >= 0 ? bits_to_float(load_bits(x.data, x.dtype, off0 + s * tstride), x.dtype) : old[3 + s];
      store_out(const_cast<void*>(cs.data), cs.dtype, w * cs.stride[0] + c * cs.stride[1] + j * cs.stride[2], val);
    }
  }
}

// The fused gated RMSNorm of (n, hv) once its T x V outputs are in o_s: one warp per token. It runs after the
// token loop, where the state registers are dead, so inlining it does not raise the peak.
__device__ __forceinline__ void out_norm_rows(const DecodeParams& p, int64_t n, int hv, const float* o_s, int tid,
                                           int nthreads) {
  const ForwardParams& io = p.io;
  const int warp = tid / 32, wl = tid % 32;
#pragma unroll 1
  for (int64_t t = warp; t < io.T; t += nthreads / 32) {
    float ss = 0.0f;
    for (int v = wl; v < io.V; v += 32) ss = fmaf(o_s[t * io.V + v], o_s[t * io.V + v], ss);
    ss = group_sum<32>(ss);
    const float r = __frsqrt_rn(ss / static_cast<float>(io.V) + p.norm_eps);
    for (int v = wl; v < io.V; v += 32) {
      const float wv = bits_to_float(load_bits(p.norm_weight.data, p.norm_weight.dtype,
                                               v * p.norm_weight.stride[0]), p.norm_weight.dtype);
      const float g = bits_to_float(load_bits(p.out_gate.data, p.out_gate.dtype,
                                              n * p.out_gate.stride[0] + t * p.out_gate.stride[1] +
                                                  hv * p.out_gate.stride[2] + v * p.out_gate.stride[3]),
                                    p.out_gate.dtype);
      const float act = p.norm_act == KDA_OUT_GATE_SIGMOID ? sigmoid_f(g) : g * sigmoid_f(g);
      store_out(io.out, io.out_dtype,
                n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2] + v * io.out_stride[3],
                o_s[t * io.V + v] * r * wv * act);
    }
  }
}

// Grid: persistent, min(items, SMs x resident CTAs). Item it = (n, h, seg) as (n * H + h) * segs + seg covers tiles
// seg * seg_tiles .. + seg_tiles - 1 of (n, h); tile = gi * row_blocks + rb is value head h * group + gi, rows
// rb * rows_cta ... rows_cta = kRowsPerUnit * blockDim.x / 64; ntc = min(T, kTok) sizes the stage; vec: the pool
// allows 16-byte state accesses. seg_tiles = 1 without fusions; group * row_blocks with the conv; row_blocks with
// the norm alone. Registers (sm_90a): see the ledger / ptxas line in the report; no spills targeted.
template <int K>
__global__ void __launch_bounds__(kUnit * kMaxUnits) decode_kernel(const DecodeParams p, int rows_cta,
                                                                     int row_blocks, int ntc, bool vec, int seg_tiles,
                                                                     int64_t items) {
  using Tl = Tile<K>;
  constexpr int L = Tl::kLanes, kTok = Tl::kTok, SL = Tl::kStageLanes, SC = Tl::kStageCols;
  constexpr int kVSlots = Tl::kVSlots;
  const ForwardParams& io = p.io;

  // Shared memory (floats):
  //   st_s   [2][4][nthreads] float4: the double-buffered state tiles; thread tid's float4 c4 of buffer b at
  //          (b * 4 + c4) * nthreads + tid, so each thread reads back only what it copied itself;
  //   gate_s [K + 4]: the head's dt_bias, then A_log;
  //   q_s, k_s, a_s [ntc][K]: q_hat, k_hat and alpha = exp(g_log) of the chunk's tokens;
  //   per token [ntc] each: beta, write slot; v_s [ntc][rows_cta]: v of the CTA's rows;
  //   o_s    [T][V] (fused norm only): the item's unnormalized outputs.
  extern __shared__ __align__(16) float smem[];
  const int nthreads = blockDim.x;
  float4* const st_base = reinterpret_cast<float4*>(smem);
  float* gate_s = smem + 2 * kCols * nthreads;
  float* q_s = gate_s + K + 4;
  float* k_s = q_s + ntc * K;
  float* a_s = k_s + ntc * K;
  float* beta_s = a_s + ntc * K;
  int32_t* w_s = reinterpret_cast<int32_t*>(beta_s + ntc);
  float* v_s = reinterpret_cast<float*>(w_s + ntc);
  float* o_s = v_s + ntc * rows_cta;

  const int n_stage_groups = nthreads / SL;
  const int segs = io.group * row_blocks / seg_tiles;
  float* const pool = static_cast<float*>(p.pool);

  // Where step (item, tt) lives.
  struct Where {
    int64_t n;
    int h, hv, row0;
  };
  auto where = [&](int64_t item, int tt) {
    Where w;
    const int64_t nh = item / segs;
    const int tile = static_cast<int>(item - nh * segs) * seg_tiles + tt;
    w.n = nh / io.H;
    w.h = static_cast<int>(nh - w.n * io.H);
    const int gi = tile / row_blocks;
    w.hv = w.h * io.group + gi;
    w.row0 = (tile - gi * row_blocks) * rows_cta;
    return w;
  };
  // The state copies of step (item, tt) into buffer b, one commit group per step (empty for padding).
  auto issue = [&](int64_t item, int tt, int b) {
    const Where w = where(item, tt);
    const int tid = opaque(static_cast<int>(threadIdx.x));
    const int lane = tid % L, row = w.row0 + tid / L;
    const int64_t slot = p.read_slot(w.n);
    float4* st_s = st_base + b * 4 * nthreads;
    if (slot >= 0 && row < io.V) {
      if (vec) {
        const float4* src = reinterpret_cast<const float4*>(pool + slot * p.pool_stride[0] + w.hv * p.pool_stride[1] +
                                                            static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
        for (int c4 = 0; c4 < kCols / 4; ++c4) cp_async16(&st_s[c4 * nthreads + tid], src + c4 * L + lane);
      } else {
        // Strided pools: a rolled loop, so that 16 64-bit addresses are never live at once.
        const float* src = pool + io.state_offset(p.pool_stride, slot, w.hv, row, 0);
        const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
        for (int c = 0; c < kCols; ++c) {
          const int col = ((c / 4) * L + lane) * 4 + c % 4;
          cp_async4(reinterpret_cast<float*>(&st_s[(c / 4) * nthreads + tid]) + c % 4, src + col * col_stride);
        }
      }
    }
    cp_async_commit();
  };

  int64_t item = blockIdx.x;
  if (item >= items) return;  // uniform over the CTA
  int tt = 0, buf = 0;
  issue(item, tt, 0);

#pragma unroll 1
  while (true) {
    int64_t next_item = item;
    int next_tt = tt + 1;
    if (next_tt == seg_tiles) {
      next_tt = 0;
      next_item += gridDim.x;
    }
    const bool has_next = next_item < items;
    // The next step's state goes in flight before this step's staging, compute and stores (empty group if none,
    // so that "all but the newest group" is always this step's).
    if (has_next) {
      issue(next_item, next_tt, buf ^ 1);
    } else {
      cp_async_commit();
    }

    const Where wh = where(item, tt);
    const int64_t n = wh.n;
    const int h = wh.h, hv = wh.hv, row0 = wh.row0;
    const bool last_rb = wh.row0 + rows_cta >= io.V;         // the last row block of hv (norm output point)
    const bool last_tile = tt == seg_tiles - 1;               // the item's last tile (q/k conv-state write point)
    float4* const st_s = st_base + buf * 4 * nthreads;

    // The thread's roles, re-derived from an opaque copy of threadIdx.x at the top of every chunk: otherwise the
    // compiler hoists per-thread 64-bit offsets out of the loops and keeps them live across them.
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
    const int64_t slot = p.read_slot(n);

    auto out_offset = [&](int64_t t) {
      return n * io.out_stride[0] + t * io.out_stride[1] + hv * io.out_stride[2] + row * io.out_stride[3];
    };

    // q/k/g of token j0 + sg of the chunk at t0 (zero bits past the chunk: finite, never stored). With the conv,
    // q and k hold the bits of their fp32 conv outputs.
    Raw<K> raw;
    auto load_tok = [&](int64_t t0, int nt, int j0) {
      const int j = j0 + sg;
#pragma unroll
      for (int m = 0; m < SC; ++m) {
        const int64_t t = t0 + j, col = sl + m * SL;
        const int64_t qo = n * io.q.stride[0] + h * io.q.stride[2] + col * io.q.stride[3];
        const int64_t ko = n * io.k.stride[0] + h * io.k.stride[2] + col * io.k.stride[3];
        if (p.conv) {
          raw.q[m] = j < nt ? __float_as_uint(conv_silu(io.q, p.conv_w[0], p.conv_state[0], qo, io.q.stride[1], t, slot, h * K + col)) : 0u;
          raw.k[m] = j < nt ? __float_as_uint(conv_silu(io.k, p.conv_w[1], p.conv_state[1], ko, io.k.stride[1], t, slot, h * K + col)) : 0u;
        } else {
          raw.q[m] = j < nt ? load_bits(io.q.data, io.q.dtype, qo + t * io.q.stride[1]) : 0u;
          raw.k[m] = j < nt ? load_bits(io.k.data, io.k.dtype, ko + t * io.k.stride[1]) : 0u;
        }
        raw.g[m] = j < nt ? load_bits(io.g.data, io.g.dtype, n * io.g.stride[0] + t * io.g.stride[1] +
                                                                 hv * io.g.stride[2] + col * io.g.stride[3]) : 0u;
      }
    };
    const kda_dtype_t qk_dtype = p.conv ? KDA_DTYPE_FLOAT32 : io.q.dtype;
    const kda_dtype_t v_dtype = p.conv ? KDA_DTYPE_FLOAT32 : io.v.dtype;
    // v item i = tid + s * nthreads is (token i / rows_cta, CTA row i % rows_cta); rows past V read as zero.
    auto load_side = [&](int64_t t0, int nt) {
#pragma unroll
      for (int s = 0; s < kVSlots; ++s) {
        const int i = tid + s * nthreads;
        const int tok = i / rows_cta, r = row0 + i % rows_cta;
        const int64_t vo = n * io.v.stride[0] + hv * io.v.stride[2] + r * io.v.stride[3];
        if (p.conv)
          raw.v[s] = tok < nt && r < io.V ? __float_as_uint(conv_silu(io.v, p.conv_w[2], p.conv_state[2], vo, io.v.stride[1], t0 + tok, slot,
                                                                      int64_t{hv} * io.V + r))
                                          : 0u;
        else
          raw.v[s] = tok < nt && r < io.V ? load_bits(io.v.data, io.v.dtype, vo + (t0 + tok) * io.v.stride[1]) : 0u;
      }
      raw.beta = tid < nt ? load_bits(io.beta.data, io.beta.dtype, n * io.beta.stride[0] +
                                                                       (t0 + tid) * io.beta.stride[1] +
                                                                       hv * io.beta.stride[2])
                          : 0u;
      raw.w = tid < nt ? static_cast<int32_t>(p.write_slot(n, t0 + tid)) : -1;
    };

    if (slot < 0) {  // padding (uniform over the CTA): zero outputs, no slot touched
      if (lane == 0 && row_ok) {
#pragma unroll 1
        for (int64_t t = 0; t < io.T; ++t) store_out(io.out, io.out_dtype, out_offset(t), 0.0f);
      }
    } else {
      const int nt0 = static_cast<int>(min(io.T, int64_t{kTok}));
      load_tok(0, nt0, 0);
      load_side(0, nt0);

      __syncthreads();  // the previous step is done with gate_s
      // The head's gate parameters, ordered before their first use by the barrier that opens each chunk's staging.
      for (int i = tid; i <= K; i += nthreads) {
        float x = 0.0f;
        if (i < K && io.gate_mode != KDA_GATE_LOG_DECAY)
          x = static_cast<const float*>(io.dt_bias.data)[hv * io.dt_bias.stride[0] + i * io.dt_bias.stride[1]];
        if (i == K && io.has_A_log()) x = static_cast<const float*>(io.A_log.data)[hv * io.A_log.stride[0]];
        gate_s[i] = x;
      }

      auto stage_tok = [&](int nt, int j0) {
        const int j = j0 + sg;
        float q[SC], k[SC];
#pragma unroll
        for (int m = 0; m < SC; ++m) {
          q[m] = bits_to_float(raw.q[m], qk_dtype);
          k[m] = bits_to_float(raw.k[m], qk_dtype);
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
          if (i < nt * rows_cta) v_s[i] = bits_to_float(raw.v[s], v_dtype);
        }
        if (tid < nt) {
          beta_s[tid] = bits_to_float(raw.beta, io.beta.dtype);
          w_s[tid] = raw.w;
        }
      };
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
        __syncthreads();  // every thread is done reading the previous chunk's (or step's) stage
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

        // The state tile in registers for this chunk's tokens only: the first chunk waits for this step's copies
        // (all but the newest commit group, which is the next step's); later chunks take it back from st_s.
        if (t0 == 0) cp_async_wait_prev();
        float S[kCols];
#pragma unroll
        for (int c4 = 0; c4 < kCols / 4; ++c4) {
          const float4 x = row_ok ? st_s[c4 * nthreads + tid] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          S[4 * c4 + 0] = x.x; S[4 * c4 + 1] = x.y; S[4 * c4 + 2] = x.z; S[4 * c4 + 3] = x.w;
        }

#pragma unroll 1
        for (int tau = 0; tau < nt; ++tau) {
          const float4* a4 = reinterpret_cast<const float4*>(a_s + tau * K);
          const float4* k4 = reinterpret_cast<const float4*>(k_s + tau * K);
          const float4* q4 = reinterpret_cast<const float4*>(q_s + tau * K);
          float ak = 0.0f;
#pragma unroll
          for (int c4 = 0; c4 < kCols / 4; ++c4) {
            const float4 a4v = a4[c4 * L + lane], k4v = k4[c4 * L + lane];
            const float a[4] = {a4v.x, a4v.y, a4v.z, a4v.w}, k[4] = {k4v.x, k4v.y, k4v.z, k4v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              S[4 * c4 + e] *= a[e];
              ak = fmaf(S[4 * c4 + e], k[e], ak);
            }
          }
          const float u = beta_s[tau] * (v_s[tau * rows_cta + rg] - group_sum<L>(ak));
          const float4* k4b = reinterpret_cast<const float4*>(k_s) + opaque(tau * (K / 4));
          float aq = 0.0f;
#pragma unroll
          for (int c4 = 0; c4 < kCols / 4; ++c4) {
            const float4 k4v = k4b[c4 * L + lane], q4v = q4[c4 * L + lane];
            const float k[4] = {k4v.x, k4v.y, k4v.z, k4v.w}, q[4] = {q4v.x, q4v.y, q4v.z, q4v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              S[4 * c4 + e] = fmaf(u, k[e], S[4 * c4 + e]);
              aq = fmaf(S[4 * c4 + e], q[e], aq);
            }
          }
          const float sq = group_sum<L>(aq);
          if (lane == 0 && row_ok) {
            if (p.out_norm)
              o_s[(t0 + tau) * io.V + row] = io.scale * sq;
            else
              store_out(io.out, io.out_dtype, out_offset(t0 + tau), io.scale * sq);
          }

          const int64_t w = w_s[tau];
          if (w >= 0 && row_ok) {
            if (vec) {
              float4* dst = reinterpret_cast<float4*>(pool + w * p.pool_stride[0] + hv * p.pool_stride[1] +
                                                      static_cast<int64_t>(row) * p.pool_stride[2]);
#pragma unroll
              for (int c4 = 0; c4 < kCols / 4; ++c4)
                __stcs(dst + c4 * L + lane, make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]));
            } else {
#pragma unroll
              for (int c4 = 0; c4 < kCols / 4; ++c4)
                st_s[c4 * nthreads + tid] = make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]);
              float* dst = pool + io.state_offset(p.pool_stride, w, hv, row, 0);
              const int64_t col_stride = io.state_v_first ? p.pool_stride[3] : p.pool_stride[2];
#pragma unroll 1
              for (int c = 0; c < kCols; ++c) {
                const int col = ((c / 4) * L + lane) * 4 + c % 4;
                __stcs(dst + col * col_stride,
                       reinterpret_cast<const float*>(&st_s[(c / 4) * nthreads + tid])[c % 4]);
              }
            }
          }
        }
        if (t0 + kTok < io.T) {
#pragma unroll
          for (int c4 = 0; c4 < kCols / 4; ++c4)
            st_s[c4 * nthreads + tid] = make_float4(S[4 * c4], S[4 * c4 + 1], S[4 * c4 + 2], S[4 * c4 + 3]);
        }
      }

      if (p.conv) {
        // Every read of the old conv state (staging of every chunk of this tile, and of the item's earlier tiles)
        // is behind the staging barriers; this tile's v channels and, at the item's last tile, the (n, h) q/k
        // channels have no other reader or writer.
        derive_roles();
        if (lane == 0 && row_ok)
          conv_state_update(p, 2, io.v, n * io.v.stride[0] + hv * io.v.stride[2] + row * io.v.stride[3],
                            io.v.stride[1], n, slot, int64_t{hv} * io.V + row);
        if (last_tile)
          for (int c = tid; c < 2 * K; c += nthreads) {
            const int i = c / K, col = c % K;
            const TensorView& x = i == 0 ? io.q : io.k;
            conv_state_update(p, i, x, n * x.stride[0] + h * x.stride[2] + col * x.stride[3], x.stride[1], n, slot,
                              int64_t{h} * K + col);
          }
      }
      if (p.out_norm && last_rb) {
        // All V outputs of (n, hv) are in o_s: one warp per token, y = o rsqrt(mean o^2 + eps) w act(gate).
        __syncthreads();
        out_norm_rows(p, n, hv, o_s, tid, nthreads);
      }
    }

    if (!has_next) break;
    item = next_item;
    tt = next_tt;
    buf ^= 1;
  }
  cp_async_wait_all();  // no copy outlives the CTA (the last group is empty or already waited)
}

// CTA size: grow from one unit while the grid keeps at least 8 tiles per SM and the CTA's rows stay within V. With
// a fusion (items of several tiles) the largest tile that fits V: fewer steps per item.
template <int K>
int choose_units(const DecodeParams& p, int sms, bool fused) {
  constexpr int kRows = Tile<K>::kRowsPerUnit;
  auto tasks = [&](int units) {
    const int64_t rows = int64_t{kRows} * units;
    return p.io.N * p.io.HV * ((p.io.V + rows - 1) / rows);
  };
  int units = 1;
  while (units < kMaxUnits && kRows * units * 2 <= std::max(p.io.V, kRows) &&
         (fused || tasks(units * 2) >= 8 * int64_t{sms}))
    units *= 2;
  return units;
}

template <int K>
cudaError_t launch(const DecodeParams& p, int sms, cudaStream_t stream) {
  using Tl = Tile<K>;
  const bool fused = p.conv || p.out_norm;
  const int units = choose_units<K>(p, sms, fused);
  const int rows_cta = Tl::kRowsPerUnit * units;
  const int row_blocks = (p.io.V + rows_cta - 1) / rows_cta;
  const int ntc = static_cast<int>(std::min<int64_t>(p.io.T, Tl::kTok));
  const int seg_tiles = p.conv ? p.io.group * row_blocks : p.out_norm ? row_blocks : 1;
  const int64_t items = p.io.N * p.io.HV * row_blocks / seg_tiles;
  // Double-buffered state tiles (2 x 64 bytes per thread), gate parameters, the stage and (norm) the item's o rows:
  // at most 32 + 0.5 + 13.4 + 16 KiB, under the 48 KiB default without an opt-in.
  const size_t smem_floats = static_cast<size_t>(2 * kCols) * kUnit * units + K + 4 +
                             static_cast<size_t>(ntc) * (3 * K + 2 + rows_cta) +
                             (p.out_norm ? static_cast<size_t>(p.io.T) * p.io.V : 0);
  const size_t smem = smem_floats * sizeof(float);
  // 16-byte state accesses need value-first rows contiguous in K and every row start 16-byte aligned.
  const bool vec = p.io.state_v_first && p.pool_stride[3] == 1 && p.pool_stride[0] % 4 == 0 &&
                   p.pool_stride[1] % 4 == 0 && p.pool_stride[2] % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(p.pool) % 16 == 0;
  // Resident CTAs per SM for this size (a host-side query, no stream work: fine under graph capture).
  int per_sm = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel<K>, kUnit * units, smem);
  if (e != cudaSuccess) return e;
  const int64_t grid = std::min<int64_t>(items, int64_t{sms} * std::max(per_sm, 1));
  decode_kernel<K><<<static_cast<unsigned>(grid), kUnit * units, smem, stream>>>(p, rows_cta, row_blocks, ntc, vec,
                                                                                 seg_tiles, items);
  return cudaSuccess;
}

}  // namespace

Status decode(const DecodeParams& p, void* stream) {
  const ForwardParams& io = p.io;
  if (io.out_dtype == KDA_DTYPE_FLOAT64)
    return Status{KDA_STATUS_NOT_SUPPORTED, "out: float64 is only supported by KDA_BACKEND_REFERENCE"};
  if (io.K != 16 && io.K != 32 && io.K != 64 && io.K != 128 && io.K != 256)
    return make_status(KDA_STATUS_NOT_SUPPORTED, "q: head dim K = %d is not supported by the CUDA backend", io.K);
  if (p.out_norm && io.T * io.V > 4096)
    return make_status(KDA_STATUS_NOT_SUPPORTED,
                       "out_gate: the CUDA fused gated RMSNorm keeps T x V outputs on chip, T * V <= 4096 (got %lld)",
                       static_cast<long long>(io.T * io.V));
  if (io.N == 0 || io.T == 0) return Status::Ok();  // no token: nothing is read or written

  return launch_on_device(io.device_id, "kda decode kernel launch", [&] {
    int sms = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, io.device_id);
    if (e != cudaSuccess) return e;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (io.K) {
      case 16: return launch<16>(p, sms, s);
      case 32: return launch<32>(p, sms, s);
      case 64: return launch<64>(p, sms, s);
      case 128: return launch<128>(p, sms, s);
      default: return launch<256>(p, sms, s);
    }
  });
}

}  // namespace kda::cuda
