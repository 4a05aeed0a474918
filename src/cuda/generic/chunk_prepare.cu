// chunk_prepare.cu: phase 1 of the two-phase chunked forward: everything of a chunk that does not depend on the
// state, fully parallel over (chunk, value head) tasks. One CTA of 512 threads an SM, each taking tasks from a
// counter until the list (whose length is known only on the device) is done (prepare_kernel says why).
//
// Per chunk (C = 64 rows; rows past the chunk's length L are zero inputs, which makes every product row zero):
//   S0  stage q_hat, k_hat (L2 norm), g in log2 units (gate activation), beta, beta v           [fp32, smem]
//   S1  the diagonal 16 x 16 blocks of A_kk (beta-scaled, strictly lower) and A_qk (lower), pairwise in fp32, two
//       columns a warp task (where S2a does not let S3 factor them)
//   S2  per (channel pair, half of a 16-token sub-block): Qg = q exp(Gamma), Kd = k exp(Gamma_L - Gamma), decay = exp(Gamma_L)
//       -> workspace; in place Qr = q exp2(Gloc), Kr = k exp2(Gloc), Ksuf = k exp2(suffix to the block end);
//       block factors
//   S3  the off-diagonal blocks of A_kk / A_qk through the reference point, 3xTF32 tensor-core products
//   S4  T = (I + A_kk)^-1 blocked (diagonal blocks by fp32 substitution, then 3xTF32 block products); A_qk ->
//       workspace
//   S5  [W | U] = T [diag(beta) exp(Gamma) K | diag(beta) V], 3xTF32 (backward) or bf16x3 products -> workspace
//
// Exponent arrangement (that of the CPU backend and of docs/algorithm.md; nothing forms exp(-Gamma)): every factor
// is exp2 of a sum of g over the tokens it spans, accumulated locally, so all are <= 1 and none is a difference of
// two large sums. Diagonal pairs (r, c) use exp2(sum of g over c + 1 .. r) accumulated along the rows of column c;
// off-diagonal blocks (I > J) split at the end of block I - 1: exp2(Gloc_r) * [P_{J+1} .. P_{I-1}] * exp2(sum over
// (c, end of J]), with P_b = exp2(block b's sum); exp(Gamma_t) = exp2(sum over 0 .. t); exp(Gamma_L - Gamma_t) =
// exp2(sum over (t, L - 1]). Inside a half sub-block (S2b) the local factors are running products of exp2(g_t),
// each <= 1, started from exp2 of the other half's sum where the span covers it: the same arrangement term by term. A product of factors <= 1 underflows only where the exact value
// is below ~1e-38.
//
// Precision: this phase has spare compute (it is off the serial chain), so the products that an ill-conditioned
// T amplifies keep both operands to ~16 bits or more: A_kk / A_qk off-diagonal blocks in 3xTF32 (three tf32 mma,
// ~21-bit operands), [W | U] = T [.] in 3xTF32 for a backward and bf16x3 (~16-bit operands) otherwise (S5), the
// diagonal blocks and T's diagonal blocks in fp32 FMA, T's other blocks in 3xTF32. With one tf32 rounding (2^-11)
// in A_kk, near-identical keys with beta near 1 or beta = 2 (negative eigenvalues) make T's entries large and the
// rounding grows past the tensor-core bound (the old single-kernel path measured state errors 3.2e-3 and 3.9e-3
// against 1.95e-3; the CPU model gives 2.66e-3 for tf32 and 2.1e-2 for single bf16 here, 6.4e-5 for bf16x3:
// docs/numerics.md). W, Qg, Kd and A_qk go to the workspace as bf16 hi / lo planes, the operands of the state
// pass's bf16x3 products (chunk_state.cu).
//
// Budget (K = V = 128): shared memory 3 x [64][132] (q / k / g, rewritten in place) + [64][136] (beta v) +
// 3 x [64][68] (A_kk, A_qk, T) + factor, sum and scratch tables = ~198 KiB: one CTA per SM, so the CTA itself carries
// the latency hiding: 16 warps (~110 registers), every stage spread over all of them where it can be (S3 over 12),
// dependent chains short (S2 16 tokens, S4 16 rows + 3 block rounds, S5 5 k-steps of 16 per warp, S1 K / 32
// independent exponent chains per lane). The phase's ~1.2 MFMA of fp32-equivalent work per chunk runs as 3xTF32
// mma (S3; S5 for a backward), bf16x3 mma (S5 of a plain forward: its planes reuse the A_kk, Qr, Kr and Ksuf
// buffers) and fp32 FMA (S1, S4's diagonal blocks). (Two CTAs per SM would need <= ~113 KB: q / k / g alone are
// 101 KB in fp32.)
#include <algorithm>
#include <climits>
#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>  // the bulk copies of S5c (sm_90)

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/mma_layout.h"
#include "cuda/generic/stage_clocks.h"

#if KDA_STAGE_CLOCKS
namespace kda::cuda::chunk {
// Read by each stamp (lane 0 of each warp, up to 14 times a task): stage_clocks.h Buffer.
__constant__ stage_clocks::Buffer g_stage_clocks = {nullptr, 0};
}  // namespace kda::cuda::chunk

int kda::stage_clocks::set_buffer(void* buf, int ctas) {
  const Buffer b = make_buffer(buf, ctas);
  return static_cast<int>(cudaMemcpyToSymbol(kda::cuda::chunk::g_stage_clocks, &b, sizeof(b)));
}
#endif

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 512;  // 16 warps: two per (token, quarter) of S0, four per SM sub-partition
static_assert(kThreads == 32 * stage_clocks::kWarps, "stage_clocks.h's warps");
constexpr int kC = kChunk;
// The largest |S_b| (log2 units) of a diagonal block that S3 factors (S2a): its operands span 2^(+-kFactorBits).
constexpr float kFactorBits = 96.0f;
using bf16 = __nv_bfloat16;

// N consecutive floats of shared memory (16-byte aligned for N a multiple of 4, 8-byte for N = 2) in N / 4 loads
// (one for N = 2).
template <int N>
__device__ __forceinline__ void lds_vec(const float* p, float (&x)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      x[i] = v.x; x[i + 1] = v.y; x[i + 2] = v.z; x[i + 3] = v.w;
    }
  } else if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    x[0] = v.x; x[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = p[i];
  }
}

// f(r, c, sw) for rows r = 0 .. kC - 1 of a [kC][kCols] matrix, four columns c .. c + 3 a thread, by all kThreads
// threads (mma_layout.h plane_split, checked on the CPU): a thread keeps its column and steps kStep rows, a multiple
// of 8, so the index math, the swizzled column sw included, is done once, and the loop is straight-line (the
// two-columns-a-thread loops it replaces, with trip counts the compiler could not see, spent ~13 instructions an
// element on S5a's splits; ~6 this way, SASS, session 14). Consecutive threads take consecutive 16-byte quads.
// kT threads take part (tid in [0, kT)): the whole CTA, or the warps S5a's splits run on during S4 (below).
template <int kCols, int kT = kThreads, typename F>
__device__ __forceinline__ void for_row_quads(int tid, F&& f) {
  constexpr int kStep = kT / (kCols / 4);
  static_assert(kCols % 64 == 0 && kT % (kCols / 4) == 0 && kStep % 8 == 0 && kC % kStep == 0, "row quads");
  const PlaneSplit ps = plane_split(tid, kCols, kT);  // ps.step == kStep
#pragma unroll
  for (int i = 0; i < kC / kStep; ++i) f(ps.r0 + i * kStep, ps.c, ps.sw);
}

// bar.sync on barrier `id` (1 .. 15; 0 is __syncthreads') by `threads` threads, whole warps: a barrier among the
// warps of one stage while the others work on, or wait at the next CTA barrier.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// An fp32 [kC][kCols] shared-memory matrix (row pitch `pitch` floats, rows 16-byte aligned) into swizzled bf16 hi / lo
// planes (mma_layout.h swizzled(), the lo plane kC kCols elements after the hi one): per quad one 16-byte load (no
// bank conflict) and one 8-byte store a plane (half of a 16-byte chunk, which the swizzle keeps whole). f(r, c, x)
// may scale the four values before the split.
template <int kCols, int kT = kThreads, typename F>
__device__ __forceinline__ void split_to_planes(const float* src, int pitch, bf16* hi_plane, int tid, F&& f) {
  for_row_quads<kCols, kT>(tid, [&](int r, int c, int sw) {
    float x[4];
    lds_vec<4>(src + r * pitch + c, x);
    f(r, c, x);
    store_split4(hi_plane, kC * kCols, r * kCols + sw, x);
  });
}

// One k-step of S3's block products (8 channels from c0 = 8 ks + tig): rows r0, r0 + 8 of Kr / Qr (Ks / Qs) against
// the Ksuf rows n0, n0 + 8 (Gs), whose channels c0 and c0 + 4 are scaled by f0 and f1. A_kk in 3xTF32; A_qk in
// 3xTF32 for a backward (kQ1 false) and, in a plain forward (kQ1), with the query's fragment rounded once to tf32
// and the keys' split: qh bl + qh bh, two mma instead of three and no split of Qr (S3's comment says why).
template <int PK, bool kQ1>
__device__ __forceinline__ void s3_kstep(float (&akk)[2][4], float (&aqk)[2][4], const float* Ks, const float* Qs,
                                         const float* Gs, int r0, int c0, int n0, float f0, float f1) {
  uint32_t kh[4], kl[4], qh[4], ql[4];
  split_a(Ks, PK, r0, c0, kh, kl);
  if constexpr (kQ1)
    tf32_a(Qs, PK, r0, c0, qh);
  else
    split_a(Qs, PK, r0, c0, qh, ql);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int nn = n0 + 8 * nt;
    uint32_t bh[2], bl[2];
    split(Gs[nn * PK + c0] * f0, bh[0], bl[0]);
    split(Gs[nn * PK + c0 + 4] * f1, bh[1], bl[1]);
    mma3(akk[nt], kh, kl, bh, bl);
    if constexpr (kQ1) {
      mma(aqk[nt], qh, bl);
      mma(aqk[nt], qh, bh);
    } else {
      mma3(aqk[nt], qh, ql, bh, bl);
    }
  }
}

template <int K, int V>
struct PrepLayout {
  static constexpr int PK = K + 4;   // q / k / g buffers: read as A operands and transposed B operands
  static constexpr int PV = V + 8;   // beta v: a plain (k-major) B operand
  static constexpr int PA = kC + 4;  // A_kk, A_qk, T
  static constexpr int kQ = 0, kK = kQ + kC * PK, kG = kK + kC * PK, kV = kG + kC * PK;
  static constexpr int kAkk = kV + kC * PV, kAqk = kAkk + kC * PA, kT = kAqk + kC * PA;
  static constexpr int kPre = kT + kC * PA;   // [4][K]: P_0 .. P_{b-1} = exp(Gamma at the end of block b - 1)
  static constexpr int kFac = kPre + 4 * K;   // [3][K]: P_1 (blocks 2, 0), P_2 (3, 1), P_1 P_2 (3, 0)
  static constexpr int kBias = kFac + 3 * K;  // [K]: dt_bias
  static constexpr int kBeta = kBias + K;     // [64]
  static constexpr int kBsum = kBeta + kC;    // [4][K]: S2's sub-block sums of g (log2 units)
  static constexpr int kHsum = kBsum + 4 * K;  // [2][4][K]: the sums over each sub-block's halves (S2a, for S2b)
  static constexpr int kX = kHsum + 8 * K;     // [4][16 x 16]: S4's X blocks, one slot a warp of a stage
  static constexpr int kFloats = kX + 4 * kSub * kSub;
  static constexpr size_t kBytes = sizeof(float) * kFloats;
};

// S5's epilogue, shared by both precisions: a warp's accumulators of [W | U] (16-column groups nq, nq + 8, ...; the
// m16n8 C fragment rows r0 = 16 m + grp and r1 = r0 + 8, columns 2 tig, +1 of each n-tile) into the stage that S5c
// copies to the workspace (chunk_map.h wu_stage_w / wu_stage_u): W as bf16 hi / lo planes (the state pass's
// operand) at a pitch of wpitch floats, U in fp32 at upitch (the pitches' bank-conflict freedom is CPU-tested).
template <int K, int V, int kMaxGroups>
__device__ __forceinline__ void stage_wu(const float (&acc)[kMaxGroups][2][4], int nq, int r0, int tig,
                                         unsigned char* w_stage, unsigned char* u_stage, int wpitch, int upitch) {
  constexpr int kGroups = (K + V) / 16;
  const int r1 = r0 + 8;
#pragma unroll
  for (int gi = 0; gi < kMaxGroups; ++gi) {
    const int g = nq + 8 * gi;
    if (g >= kGroups) break;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int col = 16 * g + 8 * nt + 2 * tig;
      const float* a = acc[gi][nt];
      if (col < K) {
        uint32_t h0, l0, h1, l1;
        split_bf16x2(a[0], a[1], h0, l0);
        split_bf16x2(a[2], a[3], h1, l1);
        *reinterpret_cast<uint32_t*>(w_stage + wu_stage_w(0, r0, col, wpitch)) = h0;
        *reinterpret_cast<uint32_t*>(w_stage + wu_stage_w(1, r0, col, wpitch)) = l0;
        *reinterpret_cast<uint32_t*>(w_stage + wu_stage_w(0, r1, col, wpitch)) = h1;
        *reinterpret_cast<uint32_t*>(w_stage + wu_stage_w(1, r1, col, wpitch)) = l1;
      } else {
        *reinterpret_cast<float2*>(u_stage + wu_stage_u(r0, col - K, upitch)) = make_float2(a[0], a[1]);
        *reinterpret_cast<float2*>(u_stage + wu_stage_u(r1, col - K, upitch)) = make_float2(a[2], a[3]);
      }
    }
  }
}

// S0's global loads of one task, every one issued before any is used: a thread's q or k vectors (half 0 / 1), and
// g (half 0: fp32 two vectors per 8 channels, bf16 / fp16 the first kVec) or beta and v (half 1: the first V / 32).
// Rows past the chunk's length load zeros. 32 (half 1) to 48 (half 0, fp32 g) registers, live from the issue
// (during the previous task's S5c) to S0's stage.
template <int K, int V>
struct S0Loads {
  static constexpr int kVec = K / 32;  // 16-byte vectors of q or k (8 channels each) per thread
  static_assert(V / 32 <= 2 * kVec, "v's vectors fit g's");
  uint4 qk[kVec];
  uint4 x[2 * kVec];
  // beta's raw bits (load_bits), converted where S0 uses them: converted in load_rows, the conversion waited there for
  // the load, and half 1's v loads issued after it a round trip late (ncu, session 60: 3.7% of phase 1's stall
  // samples on that one shift).
  uint32_t beta_bits;
  float bias;  // threads 0 .. K - 1: dt_bias of the task's head at channel tid (0 with log-decay gates)
};

// One task of phase 1: chunk-list entry ci of value head hv (q / k head h), tokens t0 .. t0 + L - 1 of batch row b.
struct PrepTask {
  int64_t ci, b, t0;
  int L, hv, h;
};

// kWide: [W | U] in 3xTF32 for a backward (S5); true exactly when keep names the backward's buffers. Spec: the
// inputs' dtypes and the gate mode the instance is built for (chunk_common.cuh IoSpec).
// Tasks: (chunk-list entry, value head) for value heads hv0 .. hv0 + heads - 1 (all of them but where
// forward_chunked.cu overlaps one group's state pass with the others' phase 1), task = (hv - hv0) chunks + ci,
// handed out in order from the workspace header's counter `slot` (chunk_map.h prep_counter_offset; build_chunk_map
// zeroes it). A CTA an SM (its shared memory) takes them one at a time, so the next task's input rows are in flight
// while this one's [W | U] rows leave (S5c): as a CTA a task, each CTA's exit waited on those copies and the next
// one's S0 on its loads, one SM idle through both (ncu, session 42: the copies' wait 6.7% of the stall samples, S0's
// loads and the barrier behind them ~10%). The counter, not a fixed stride, keeps the SMs even where some start late
// (beside a state pass). Which CTA runs a task changes no value.
template <int K, int V, bool kWide, class Spec>
__global__ void __launch_bounds__(kThreads, 1) prepare_kernel(const ForwardParams p, char* ws,
                                                              const BackwardSaves keep, int hv0, int heads, int slot) {
  using Ly = PrepLayout<K, V>;
  constexpr int PK = Ly::PK, PV = Ly::PV, PA = Ly::PA;
  extern __shared__ __align__(16) float smem[];
  float* const Qs = smem + Ly::kQ;
  float* const Ks = smem + Ly::kK;
  float* const Gs = smem + Ly::kG;
  float* const Vb = smem + Ly::kV;
  float* const Akk = smem + Ly::kAkk;
  float* const Aqk = smem + Ly::kAqk;
  float* const Tm = smem + Ly::kT;
  float* const pre_s = smem + Ly::kPre;
  float* const fac_s = smem + Ly::kFac;
  float* const bias_s = smem + Ly::kBias;
  float* const beta_s = smem + Ly::kBeta;
  float* const bsum_s = smem + Ly::kBsum;
  float* const hsum_s = smem + Ly::kHsum;
  float* const Xs = smem + Ly::kX;

  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, K, V);
  const ChunkRec* const list = reinterpret_cast<const ChunkRec*>(ws + wl.list);
  // The list's length (build_chunk_map's), read where it is used: held in registers through the task loop, it and the
  // task count took the registers that kept some instances (K = 128, V = 64) from spilling.
  auto chunk_count = [&] { return *reinterpret_cast<const int64_t*>(ws); };
  unsigned long long* const counter = reinterpret_cast<unsigned long long*>(ws + prep_counter_offset(slot));
  const TileLayout tl{K, V};

  const kda_dtype_t in_dt = Spec::dt(p.q.dtype), g_dt = Spec::dt(p.g.dtype);
  const bool g32 = g_dt == KDA_DTYPE_FLOAT32;
  constexpr int kVec = S0Loads<K, V>::kVec;

  const bool has_a_log = p.has_A_log();
  const kda_gate_mode_t gate_mode = Spec::gate(p.gate_mode);
  // S1 / S3's choice per diagonal block (1: pairwise in S1; 0: factored on tensor cores in S3), set by S2a.
  __shared__ int pairwise_s[kSubBlocks];
  __shared__ int steep_s;  // S2a: some token decays by more than 2^-kTameBits in some channel (keep.tame)
  __shared__ int64_t next_s;  // the counter's answer, for the whole CTA
  // The next task, taken during this one by kTaker (S4, below) and read by every thread at S5c.
  __shared__ PrepTask next_tk_s;
  __shared__ int next_more_s;
  // A thread of warps 4-7, which have no other work in S4 (round 0 and stages 1-3 run on warps 0-3, the splits on
  // 8-15): the counter's round trip, the list's length, the 64-bit divisions and the list entries of the next task and
  // the one a round ahead (~1.4 K cycles of dependent latency) fall into S4's chain. On warp 8, beside its share of
  // the splits, they had held S4's barrier ~1.4 K cycles past every other warp (stage clocks, session 59). With round
  // 0's right-looking form (below), measured on an H100 (session 60): h64-fixed -2.8 / -3.3%, h96-fixed -2.4 / -2.7%.
  constexpr int kTaker = 128;
  // The task a round of the CTAs after the next one, whose rows the next task's S0 asks L2 for (below): its list entry
  // and value head (-1: none), set with the next task (kTaker at S4; thread 0 for the first task).
  __shared__ ChunkRec ahead_rec_s;
  __shared__ int ahead_hv_s;
  auto set_ahead = [&](int64_t task, int64_t list_len) {
    const int64_t ahead = task + gridDim.x;
    const bool ok = ahead < list_len * heads;
    if (ok) ahead_rec_s = list[ahead % list_len];
    ahead_hv_s = ok ? hv0 + static_cast<int>(ahead / list_len) : -1;
  };

  auto task_of = [&](int64_t task) {
    PrepTask tk;
    const int64_t chunks = chunk_count();
    tk.ci = task % chunks;
    tk.hv = hv0 + static_cast<int>(task / chunks);
    tk.h = tk.hv / p.group;
    const ChunkRec rec = list[tk.ci];
    tk.b = p.has_cu_seqlens() ? 0 : rec.seq;
    tk.t0 = rec.start;
    tk.L = rec.len;
    return tk;
  };
  // Where the forward's S5 leaves Kr's buffer (Ks) unread (bf16x3 S5 with X_V's planes in Ksuf's buffer), the next
  // task's q and k rows go there as they lie (bf16, [2][kC][K]: 32 KB of Ks's 33 KB at K = 128) by cp.async from S5a
  // on, ~4 K cycles before load_rows' loads at S5c. Measured on an H100 (session 61): h64-fixed -0.3 / -0.8%,
  // h96-fixed -0.6 / -1.0%; but S0 still waits for its rows (stage clocks: 4920 -> 5761 cycles, the rows staged at
  // its end in both), now for g, v and beta, and as long with phase 1 on half the SMs, so not on DRAM's bandwidth
  // (bench/LEDGER.md, session 61). Each thread copies the 16-byte vectors its S0 stages, so its own cp.async wait
  // makes them visible to it; rows past the chunk's length are zeros, as load_rows leaves them.
  constexpr bool kQkAhead = !kWide && V <= PK;
  static_assert(!kQkAhead || 2 * kC * K * 2 <= kC * PK * 4, "q and k rows as bf16 fit Kr's buffer");
  auto qk_row = [&](const PrepTask& tk, int st, int sq, int half) {
    const int64_t t = tk.t0 + st;
    return half ? static_cast<const uint16_t*>(p.k.data) + tk.b * p.k.stride[0] + t * p.k.stride[1] +
                      tk.h * p.k.stride[2] + 8 * sq
                : static_cast<const uint16_t*>(p.q.data) + tk.b * p.q.stride[0] + t * p.q.stride[1] +
                      tk.h * p.q.stride[2] + 8 * sq;
  };
  // The thread's vector j of its (half, token st, quarter sq) row in the raw stage (chunk_map.h qk_raw_vector).
  auto qk_raw = [&](int st, int sq, int half, int j) {
    return reinterpret_cast<uint4*>(Ks) + qk_raw_vector(half, st, sq, j, K);
  };
  auto copy_qk_ahead = [&](const PrepTask& tk) {
    const int st = (threadIdx.x & 255) >> 2, sq = threadIdx.x & 3, half = threadIdx.x >> 8;  // as S0's stage
    if (st < tk.L) {
      const uint16_t* const qk = qk_row(tk, st, sq, half);
#pragma unroll
      for (int j = 0; j < kVec; ++j) cp_async16(qk_raw(st, sq, half, j), qk + 32 * j);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) *qk_raw(st, sq, half, j) = make_uint4(0, 0, 0, 0);
    }
    cp_async_commit();
  };
  // Every field set (zeros where a half has none, and for rows past the chunk's length), so that no value of an
  // earlier task stays live through a task. A live row's pointers are formed once, then its loads leave back to back
  // at immediate offsets under one branch: as `live ? ldg : 0` a load, each load was a branch of its own that read q's
  // or k's view again through an indexed constant load (the view chosen at run time) and formed its 64-bit address
  // anew (s2half's profile, session 56: this line 6.1% of phase 1's warp instructions, 7.5% of its stall samples).
  auto load_rows = [&](const PrepTask& tk) {
    S0Loads<K, V> ld{};
    const int st = (threadIdx.x & 255) >> 2, sq = threadIdx.x & 3, half = threadIdx.x >> 8;  // as S0's stage
    if (threadIdx.x < K && gate_mode != KDA_GATE_LOG_DECAY)
      ld.bias = static_cast<const float*>(p.dt_bias.data)[tk.hv * p.dt_bias.stride[0] +
                                                          threadIdx.x * p.dt_bias.stride[1]];
    if (st >= tk.L) return ld;
    const int64_t t = tk.t0 + st;
    auto row = [&](const TensorView& x, int head) { return tk.b * x.stride[0] + t * x.stride[1] + head * x.stride[2]; };
    if constexpr (!kQkAhead) {
      const uint16_t* const qk = qk_row(tk, st, sq, half);
#pragma unroll
      for (int j = 0; j < kVec; ++j) ld.qk[j] = ldg16(qk + 32 * j);
    }
    if (half == 0) {
      if (g32) {
        const float* const gp = static_cast<const float*>(p.g.data) + row(p.g, tk.hv) + 8 * sq;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          ld.x[2 * j] = ldg16(gp + 32 * j);
          ld.x[2 * j + 1] = ldg16(gp + 32 * j + 4);
        }
      } else {
        const uint16_t* const gp = static_cast<const uint16_t*>(p.g.data) + row(p.g, tk.hv) + 8 * sq;
#pragma unroll
        for (int j = 0; j < kVec; ++j) ld.x[j] = ldg16(gp + 32 * j);
      }
    } else {
      ld.beta_bits = load_bits(p.beta.data, Spec::dt(p.beta.dtype), row(p.beta, tk.hv));
      const uint16_t* const vp = static_cast<const uint16_t*>(p.v.data) + row(p.v, tk.hv) + 8 * sq;
#pragma unroll
      for (int j = 0; j < V / 32; ++j) ld.x[j] = ldg16(vp + 32 * j);
    }
    return ld;
  };

  if (threadIdx.x == 0) {
    next_s = static_cast<int64_t>(atomicAdd(counter, 1ull));
    set_ahead(next_s, chunk_count());
  }
  __syncthreads();
  int64_t cur = next_s;  // this CTA's task
  // The current task and its rows; each replaced whole at a task's end (a kept field would live through the task).
  bool more = cur < chunk_count() * heads;
  PrepTask tk = more ? task_of(cur) : PrepTask{};
  S0Loads<K, V> ld = more ? load_rows(tk) : S0Loads<K, V>{};
  if constexpr (kQkAhead)
    if (more) copy_qk_ahead(tk);
  // The task loop's CTA barriers (stage_clocks.h): with KDA_STAGE_CLOCKS each warp's lane 0 stamps its arrival;
  // otherwise a barrier and nothing else.
  int local_task = 0;
  auto stamp = [&](int s) {
#if KDA_STAGE_CLOCKS
    const stage_clocks::Buffer b = g_stage_clocks;
    if (b.buf && (threadIdx.x & 31) == 0 && static_cast<int>(blockIdx.x) < b.ctas &&
        local_task < stage_clocks::kMaxTasks)
      b.buf[stage_clocks::index(blockIdx.x, threadIdx.x >> 5, local_task, s)] = clock64();
#else
    (void)s;
#endif
  };
  auto cta_barrier = [&](int k) {
    stamp(1 + k);
    __syncthreads();
  };
  auto mark = [&](int i) { stamp(1 + stage_clocks::kBarriers + i); };  // stage_clocks.h kMarks
  while (more) {
    stamp(0);
    // The thread's indices, read anew each task: taken as loop invariants, the index math of every stage below was
    // hoisted out of the loop and held through it (K = 128: ~105 -> 128 registers and spills in some instances).
    int tid;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
    // The next task's number and the list's length, asked for now and used at S4 (kTaker): their round trips overlap
    // S0-S3 where, asked at S5c, the CTA's barrier waited for them (ncu, session 55: ~4% of phase 1's stall samples,
    // with the list entry's load behind them in load_rows another ~2%; measured 1.08 -> 1.06 ms at h64-fixed).
    unsigned long long taken = 0;
    int64_t list_len = 0;
    if (tid == kTaker) {
      taken = atomicAdd(counter, 1ull);
      list_len = chunk_count();
    }
    const int lane = tid & 31, warp = tid >> 5, grp = lane >> 2, tig = lane & 3;
    const int64_t ci = tk.ci;
    const int hv = tk.hv;
    const int L = tk.L;
    float* const tile = reinterpret_cast<float*>(ws + wl.tiles) + (ci * p.HV + hv) * tl.floats();
    // The backward's copies of A' (unscaled, fp32) and T (bf16 hi / lo planes) for this (chunk, value head), [C][C]
    // each (null in the forward).
    float* const akk_save = keep.akk ? keep.akk + (ci * p.HV + hv) * kC * kC : nullptr;
    float* const tinv_save = keep.tinv ? keep.tinv + (ci * p.HV + hv) * kC * kC : nullptr;
    // The rows' 1 / |q|, 1 / |k| [2][C] (S0), for the gradient passes, which stage a row's channels in parts.
    float* const norms_save = keep.norms && p.use_qk_l2norm ? keep.norms + (ci * p.HV + hv) * 2 * kC : nullptr;
    const float a_log = has_a_log ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
    // Read first after S0's barrier; the previous task's last readers were before S4's.
    if (tid < kSubBlocks) pairwise_s[tid] = p.use_qk_l2norm ? 0 : 1;
    if (tid == 0) steep_s = 0;
    static_assert(K <= kThreads, "a channel's bias a thread");
    if (tid < K) bias_s[tid] = ld.bias;  // loaded with the rows (load_rows): here its load had held S0's barrier

    // ---- S0: stage (the loads are load_rows', issued ahead). Half 0 stages q and g, half 1 k, beta and then, past
    // S0's barrier, beta v (Vb is the previous task's U stage until then). Rows >= L are zeros.
    {
      // Thread = (half, token st, quarter sq): channels 8 sq + 32 j (16-byte vectors), as load_rows.
      const int st = (tid & 255) >> 2, sq = tid & 3, half = tid >> 8;
      const bool live = st < L;
      if constexpr (kQkAhead) {
        // The rows copy_qk_ahead put in Ks's buffer, every thread's read before half 1's fp32 rows overwrite it.
        cp_async_wait_all();
#pragma unroll
        for (int j = 0; j < kVec; ++j) ld.qk[j] = *qk_raw(st, sq, half, j);
        __syncthreads();
      }
      float beta = 0.0f;  // half 1's: beta v is staged after the barrier below
      // q or k: L2 norm over the quad's K channels, then fp32 rows in Qs / Ks.
      auto stage_qk = [&](float* dst) {
        float x[K / 4];
#pragma unroll
        for (int j = 0; j < kVec; ++j) cvt8(ld.qk[j], in_dt, x + 8 * j);
        if (p.use_qk_l2norm) {
          const float inv = quad_inv_norm(x);
#pragma unroll
          for (int i = 0; i < K / 4; ++i) x[i] *= inv;
          if (norms_save && sq == 0) norms_save[half * kC + st] = inv;
        }
        dst += st * PK + 8 * sq;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          *reinterpret_cast<float4*>(dst + 32 * j) = make_float4(x[8 * j], x[8 * j + 1], x[8 * j + 2], x[8 * j + 3]);
          *reinterpret_cast<float4*>(dst + 32 * j + 4) =
              make_float4(x[8 * j + 4], x[8 * j + 5], x[8 * j + 6], x[8 * j + 7]);
        }
      };
      if (half == 0) {
        // The raw gate to Gs (fp32); S0b activates it in place.
        float* const grow = Gs + st * PK + 8 * sq;
        stage_qk(Qs);
        if (g32) {
#pragma unroll
          for (int j = 0; j < 2 * kVec; ++j) *reinterpret_cast<uint4*>(grow + 32 * (j >> 1) + 4 * (j & 1)) = ld.x[j];
        } else {
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            float g[8];
            cvt8(ld.x[j], g_dt, g);
            *reinterpret_cast<float4*>(grow + 32 * j) = make_float4(g[0], g[1], g[2], g[3]);
            *reinterpret_cast<float4*>(grow + 32 * j + 4) = make_float4(g[4], g[5], g[6], g[7]);
          }
        }
      } else {
        stage_qk(Ks);
        const float beta_raw = bits_to_float(ld.beta_bits, Spec::dt(p.beta.dtype));
        beta = live ? beta_activation<float>(beta_raw, p.beta_is_logits, p.allow_neg_eigval) : 0.0f;
        if (sq == 0) beta_s[st] = beta;
      }
      mark(1);  // the rows staged: this warp's loads (but v, staged past the barrier) arrived
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      // The previous task's [W | U] bulk copies (S5c) read out of their stage, A_qk / T and Vb, before anything
      // writes there (beta v below, A_qk and T from S1 on): each issuing thread waits here, after S0's other stores,
      // where a barrier at the task's end had held the CTA for them (ncu, session 55: ~5% of phase 1's time; measured
      // on an H100, session 56: h64-fixed 1539 -> 1503 us, h96-fixed 2329 -> 2286, medians of two gpu_ab rounds).
      if (tid < 3 * kC) {
        cute::tma_store_wait<0>();
        mark(2);  // the copies read out
      }
#endif
      cta_barrier(0);
      if (half == 1) {
#pragma unroll
        for (int j = 0; j < V / 32; ++j) {
          float v[8];
          cvt8(ld.x[j], in_dt, v);
          float* const dst = Vb + st * PV + 8 * sq + 32 * j;
          *reinterpret_cast<float4*>(dst) = make_float4(beta * v[0], beta * v[1], beta * v[2], beta * v[3]);
          *reinterpret_cast<float4*>(dst + 4) = make_float4(beta * v[4], beta * v[5], beta * v[6], beta * v[7]);
        }
      }
    }
    // About a round of the CTAs ahead: the q / k / g / v rows of task cur + gridDim.x (the counter hands tasks out in
    // order, one a CTA at a time) into L2, so that its load_rows finds them there. Threads 0-255 ask, a thread per
    // (row, tensor): q, k, g, v (one 128-byte line per request); measured -16 / -29 us at h64- / h96-fixed as a wave
    // ahead of a CTA a task (bench/LEDGER.md, session 16). Its list entry and head come from shared memory (set_ahead):
    // each of the 256 threads had loaded the list's length, divided in 64 bits and loaded the entry here, between S0's
    // barrier and S0b's (ncu, session 55: ~2% of phase 1's stall samples; measured, session 56: h64-fixed 1503 ->
    // 1492 us, h96-fixed 2286 -> 2269 on an H100).
    {
      static_assert(kThreads == 8 * kC, "S0's prefetch: a thread per (row, tensor slot)");
      const int ahv = ahead_hv_s;
      if (ahv >= 0 && tid < 4 * kC) prefetch_input_row<K, V>(p, ahead_rec_s, ahv, tid % kC, tid / kC);
    }
    // S0b: the gates activated in place, in log2 units, by all 16 warps (session 11's profile: S0's segment was
    // 16.5% of phase 1's stall samples, most of it the activation on the 8 warps of half 0 while half 1 waited at the
    // barrier), with exp(A_log) once per task; rows past L stay 0 (padded tokens change no sum). A channel a thread
    // (kThreads / K rows a pass): the bias stays in a register and no element index is divided. A constant trip count
    // and the activation computed for every row, rows past L then selected to 0 (their staged g is 0, so f is finite
    // there and is dropped, not added): with the loop's bound and a branch per row, the static SASS reading counted
    // ~8 of the 18 instructions an element as loop and branch overhead. Rows fully unrolled (16 a thread at K = 128):
    // every row's load is issued before the first activation, so the MUFU work of 16 independent elements overlaps
    // where 4 at a time had waited on their loads (-0.5..-1.4% at h64-fixed with the same bits; bench/LEDGER.md,
    // session 59; S0b's MUFU floor is ~1024 cycles a task, two a gate element).
    {
      const int d = tid % K;
      const float bias = bias_s[d];
      auto activate = [&](auto f) {
        constexpr int kStep = kThreads / K;
        static_assert(kC % kStep == 0, "S0b's rows");
        const int r0 = tid / K;
#pragma unroll
        for (int i = 0; i < kC / kStep; ++i) {
          const int r = r0 + i * kStep;
          float* const gp = Gs + r * PK + d;
          const float a = f(*gp);
          *gp = r < L ? a : 0.0f;
        }
      };
      switch (gate_mode) {
        case KDA_GATE_BOUNDED: {
          const float ea = has_a_log ? expf(a_log) : 1.0f, lb2 = p.lower_bound * kLog2e;
          activate([&](float g) { return bounded_gate_log2(g + bias, ea, lb2); });
          break;
        }
        case KDA_GATE_SOFTPLUS:
          activate([&](float g) {
            return gate_log_decay<float>(KDA_GATE_SOFTPLUS, g, has_a_log, a_log, bias, 0.0f) * kLog2e;
          });
          break;
        default:  // KDA_GATE_LOG_DECAY: g is the log-decay
          activate([&](float g) { return g * kLog2e; });
      }
    }
    cta_barrier(1);

    // ---- S2a: the sub-block sums S_b of g (log2 units), and which diagonal blocks S3 may factor: those whose every
    // channel has S_b >= -kFactorBits and no g > 0 (so each local sum lies in [S_b, 0]), with q and k normalized.
    // There each operand of S3's form, Kr = k exp2(Gl_r) and Ksuf exp2(-S_b) = k exp2(-Gl_c), stays within
    // 2^(+-kFactorBits) of |k| <= 1: nothing overflows, and a component flushed to zero (below 2^-126) drops a term
    // below 2^(kFactorBits - 126) = 2^-30 of entries of size ~1. Beyond that (half the channels near a bound of -5
    // nats decay ~115 bits a block) the block stays pairwise (S1).
    for (int task = tid; task < kSubBlocks * K; task += kThreads) {
      const ScanTask st = scan_task(task, K);
      float acc = 0.0f, gmax = -INFINITY, half[2] = {0.0f, 0.0f};
      bool steep = false;  // the gradient passes' tame test (chunk_kernels.h) on the gates they stage, NaN steep
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
        const float g = Gs[(kSub * st.blk + i) * PK + st.d];
        acc += g;
        half[i / kHalf] += g;
        gmax = fmaxf(gmax, g);
        steep |= !(g >= -kTameBits);
      }
      bsum_s[st.blk * K + st.d] = acc;
      hsum_s[st.blk * K + st.d] = half[0];
      hsum_s[(kSubBlocks + st.blk) * K + st.d] = half[1];
      if (!(acc >= -kFactorBits) || gmax > 0.0f) pairwise_s[st.blk] = 1;  // NaN sums too
      if (steep) steep_s = 1;
    }
    cta_barrier(2);
    if (keep.tame && tid == 0) keep.tame[ci * p.HV + hv] = steep_s ? 0 : 1;

    // ---- S1: diagonal blocks, pairwise in fp32. Warp task = (block bk, column pair c1 = p, c2 = 15 - p) (chunk_map.h
    // diag_pair_task: both columns' entries fill one warp reduce-scatter's 32 slots). Lane = channels K / 32 lane + i
    // (one vector load per row and operand, for both columns; K / 32 independent exponent chains per lane and
    // column); the exponent of (r, c) is the sum of g over c + 1 .. r, accumulated along the rows. The reduce-scatter
    // sums a slot over the lanes in a tree that does not depend on the slot, and each lane's terms are added in the
    // order they were with one column a task: every entry has the same bits. Lane l ends with slot l's sum. Only the
    // blocks S2a left pairwise (S3 factors the others).
#pragma unroll 1
    for (int task = warp; task < kSubBlocks * kSub / 2; task += kThreads / 32) {
      const DiagPairTask dt = diag_pair_task(task);
      if (!pairwise_s[dt.bk]) continue;  // warp-uniform
      const int base = 16 * dt.bk, c1 = dt.c1, c2 = dt.c2;
      float val[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) val[i] = 0.0f;
      constexpr int CPL = K / 32;
      const int d0 = CPL * lane;
      // Rows past the chunk's length L are zeros (S0, g included): a column token at or past L, or a row past it,
      // adds exact zeros (0 * finite), so skipping them changes no bit and takes a partial chunk's S1 work down in
      // proportion. Warp-uniform, like c1 and c2 (c1 < c2: c2 live implies c1 live).
      const int live = L - base;  // this block's rows inside the chunk (<= 0: none)
      const bool live2 = c2 < live;
      if (c1 < live) {
        float k1[CPL], e1[CPL], k2[CPL], e2[CPL];
        lds_vec(Ks + (base + c1) * PK + d0, k1);
        lds_vec(Ks + (base + c2) * PK + d0, k2);
#pragma unroll
        for (int i = 0; i < CPL; ++i) e1[i] = e2[i] = 0.0f;
#pragma unroll
        for (int r = 0; r < 16; ++r) {
          if (r >= c1 && r < live) {  // rows above both diagonals cost a branch only
            const int off = (base + r) * PK + d0;
            float gv[CPL], qv[CPL], kv[CPL];
            lds_vec(Gs + off, gv);
            lds_vec(Qs + off, qv);
            lds_vec(Ks + off, kv);
#pragma unroll
            for (int i = 0; i < CPL; ++i) {
              if (r > c1) e1[i] += gv[i];
              const float w = ex2(e1[i]) * k1[i];
              val[diag_slot_qk1(r)] = fmaf(qv[i], w, val[diag_slot_qk1(r)]);
              if (r > c1) val[diag_slot_kk1(r)] = fmaf(kv[i], w, val[diag_slot_kk1(r)]);
            }
            if (live2 && r >= c2) {
#pragma unroll
              for (int i = 0; i < CPL; ++i) {
                if (r > c2) e2[i] += gv[i];
                const float w = ex2(e2[i]) * k2[i];
                // diag_slot_qk2(r, c2): 15 - r below the diagonal, 31 - r on it (static either way: r is unrolled)
                if (r > c2) {
                  val[15 - r] = fmaf(qv[i], w, val[15 - r]);
                  val[diag_slot_kk2(r)] = fmaf(kv[i], w, val[diag_slot_kk2(r)]);
                } else {
                  val[31 - r] = fmaf(qv[i], w, val[31 - r]);
                }
              }
            }
          }
        }
      }
      const float sum = reduce_scatter32(val, lane);
      float* const Aqk_b = Aqk + base * PA + base;  // the diagonal block's (0, 0)
      float* const Akk_b = Akk + base * PA + base;
      float* const save_b = akk_save ? akk_save + base * kC + base : nullptr;
      const DiagEntry e = diag_slot_entry(dt, lane), z = diag_zero_entry(dt, lane);
      if (e.qk) {
        Aqk_b[e.r * PA + e.c] = sum;
      } else {  // A_kk = beta A'; the backward keeps A' (unscaled)
        Akk_b[e.r * PA + e.c] = beta_s[base + e.r] * sum;
        if (save_b) save_b[e.r * kC + e.c] = sum;
      }
      if (z.qk) {  // the entries above the diagonal are zeros (A_kk's diagonal too), one a lane
        Aqk_b[z.r * PA + z.c] = 0.0f;
      } else {
        Akk_b[z.r * PA + z.c] = 0.0f;
        if (save_b) save_b[z.r * kC + z.c] = 0.0f;
      }
    }
    cta_barrier(3);

    // ---- S2b: per (channel pair d, d + 1; half of sub-block blk) task (chunk_map.h pair_scan_task; 4 K tasks over
    // the CTA, 8-token chains): the inter-chunk factors to the workspace, the reference-point forms in place, the block
    // factor tables; the exponents as (sums over whole sub-blocks and half sub-blocks, S2a's) + (a local 8-token
    // scan), every one a sum of g over the tokens it spans. Two channels a task make each token's Qg and Kd one 4-byte
    // store a plane and its shared accesses 8-byte ones: with one channel and 16 tokens a task its 64 2-byte stores
    // and 80 shared accesses a thread queued on the MIO pipe (ncu, session 55: S2b 12% of phase 1's stall samples,
    // 26-37% of them MIO throttle). Measured (H100, session 56): S2's stall samples -37% (MIO no longer their first
    // reason), h64-fixed 1492 -> 1475 us, h96-fixed level (2269 / 2274). The figures change in the last digits: the
    // running products restart at the half (the full verifier's rows agree to ~1e-3 relative but for the
    // ill-conditioned near-identical keys at beta = 2: out 0.536 -> 0.389, state 0.319 -> 0.341 of their bounds).
#pragma unroll 1
    for (int task = tid; task < kSubBlocks * K; task += kThreads) {
      const PairScanTask st = pair_scan_task(task, K);
      const int d = st.d, blk = st.blk, tb = kSub * blk + kHalf * st.h;  // tb: the half's first token
      __nv_bfloat16* const Kd_g = reinterpret_cast<__nv_bfloat16*>(tile + tl.Kd());
      __nv_bfloat16* const Qg_g = reinterpret_cast<__nv_bfloat16*>(tile + tl.Qg());
      const bool tables = blk == 0 && st.h == 0;  // this task also writes the block factor tables
      if (!tables && tb >= L) {
        // A half past the chunk's length (short sequences, a sequence's last chunk): its q, k and g rows are zeros
        // (S0), so Qr, Kr and Ksuf in place already are, and Qg and Kd are exact zeros: only those are written, the
        // bits the computation gives (0 * a finite factor).
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
          store_split2(Kd_g, kC * K, (tb + i) * K + d, 0.0f, 0.0f);
          store_split2(Qg_g, kC * K, (tb + i) * K + d, 0.0f, 0.0f);
        }
        continue;
      }
      float S[2][kSubBlocks];
#pragma unroll
      for (int b2 = 0; b2 < kSubBlocks; ++b2) {
        const float2 s2 = *reinterpret_cast<const float2*>(bsum_s + b2 * K + d);
        S[0][b2] = s2.x;
        S[1][b2] = s2.y;
      }
      // The sums over the sub-blocks before / after blk, and over the other half of blk: before this half (h = 1:
      // blk's tokens 0 .. kHalf - 1) or after it (h = 0: blk's tokens kHalf .. kSub - 1).
      float before[2] = {0.0f, 0.0f}, after[2] = {0.0f, 0.0f};
#pragma unroll
      for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int b2 = 0; b2 < kSubBlocks; ++b2)
          if (b2 < blk) before[c] += S[c][b2];
#pragma unroll
        for (int b2 = kSubBlocks - 1; b2 >= 0; --b2)
          if (b2 > blk) after[c] += S[c][b2];
      }
      const float2 other = *reinterpret_cast<const float2*>(hsum_s + ((1 - st.h) * kSubBlocks + blk) * K + d);
      const float o[2] = {other.x, other.y};
      // The half's factors as running products of its tokens' e_t = exp2(g_t) <= 1 (one ex2 a token and channel; the
      // sums' form took four a token, and MUFU work was most of this stage's MIO throttle, ncu session 20), started
      // from exp2 of the other half's sum where that half lies inside the span, times exp2 of the whole sub-blocks
      // before / after blk. Each product only shrinks, so nothing overflows; one rounds to zero only where the exact
      // factor is below fp32's normal range.
      float e[2][kHalf];
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const float2 g2 = *reinterpret_cast<const float2*>(Gs + (tb + i) * PK + d);
        e[0][i] = ex2(g2.x);
        e[1][i] = ex2(g2.y);
      }
      // Backward: Kd = k exp2(sum over (t, C - 1]), Ksuf = k exp2(sum over (t, end of the sub-block]) in place of g.
      float fa[2], suf[2];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        fa[c] = ex2(after[c]);
        suf[c] = st.h == 0 ? ex2(o[c]) : 1.0f;
      }
#pragma unroll
      for (int i = kHalf - 1; i >= 0; --i) {
        const int t = tb + i;
        const float2 k = *reinterpret_cast<const float2*>(Ks + t * PK + d);
        store_split2(Kd_g, kC * K, t * K + d, k.x * (fa[0] * suf[0]), k.y * (fa[1] * suf[1]));
        *reinterpret_cast<float2*>(Gs + t * PK + d) = make_float2(k.x * suf[0], k.y * suf[1]);  // Ksuf
        suf[0] *= e[0][i];
        suf[1] *= e[1][i];
      }
      // Forward: Qg = q exp2(sum over 0 .. t); Qr, Kr = q, k exp2(sum over the sub-block start .. t) in place.
      float fb[2], el[2];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        fb[c] = ex2(before[c]);
        el[c] = st.h == 1 ? ex2(o[c]) : 1.0f;
      }
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const int t = tb + i;
        el[0] *= e[0][i];
        el[1] *= e[1][i];
        const float2 q = *reinterpret_cast<const float2*>(Qs + t * PK + d);
        const float2 k = *reinterpret_cast<const float2*>(Ks + t * PK + d);
        store_split2(Qg_g, kC * K, t * K + d, q.x * (fb[0] * el[0]), q.y * (fb[1] * el[1]));
        *reinterpret_cast<float2*>(Qs + t * PK + d) = make_float2(q.x * el[0], q.y * el[1]);
        *reinterpret_cast<float2*>(Ks + t * PK + d) = make_float2(k.x * el[0], k.y * el[1]);
      }
      if (tables) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float P[kSubBlocks];
#pragma unroll
          for (int b2 = 0; b2 < kSubBlocks; ++b2) P[b2] = ex2(S[c][b2]);
          tile[tl.decay() + d + c] = ex2(((S[c][0] + S[c][1]) + S[c][2]) + S[c][3]);
          pre_s[d + c] = 1.0f;
          pre_s[K + d + c] = P[0];
          pre_s[2 * K + d + c] = P[0] * P[1];
          pre_s[3 * K + d + c] = P[0] * P[1] * P[2];
          fac_s[d + c] = P[1];
          fac_s[K + d + c] = P[2];
          fac_s[2 * K + d + c] = P[1] * P[2];
        }
      }
    }
    cta_barrier(4);

    // ---- S3: off-diagonal blocks (I, J), I > J: rows Kr / Qr of block I against Ksuf of block J times
    // P_{J+1} .. P_{I-1}; A_kk in 3xTF32 (it feeds T's inverse, where beta = 2 and near-identical keys amplify its
    // error). A_qk: a plain forward had one TF32 pass there (8 mma a k-step instead of 12, -37 us at h64-fixed in
    // session 13), but on near-identical keys at beta near 2 it took an output element to 1.075 of its bound in the
    // CPU model (two_phase.py, session 48: 0.40 with 3xTF32). The keys' rounding is the one that matters there (their
    // near-equal rows cancel), not the query's: with the query rounded once and the keys split (tf32b, 10 mma a k-step)
    // the model gives 3xTF32's figures (0.40; the query split and the keys rounded once: 1.083; session 49), so a
    // plain forward takes that. A backward's recompute keeps 3xTF32 (dV_new takes A_qk^T dO: one pass failed
    // backward-quick's near-identical keys at beta = 2, dv 1.16 of its bound).
    // Block p = warp % 6 on warps p and p + 6, each over half of the K channels (the dependent mma chain halves;
    // splitting a block's two n-tiles instead re-splits the A fragments in both warps: ~60% more instructions): the
    // second half stores its raw partial sums in the block's place, the first adds its own to them after a barrier and
    // finishes the block (beta, the backward's copy).
    // Warps 12-15 meanwhile factor diagonal block warp - 12 where S2a allows it (below).
    float akk[2][4] = {}, aqk[2][4] = {};
    const int s3 = warp % 6, half = warp / 6;
    const int I = s3 < 1 ? 1 : s3 < 3 ? 2 : 3;
    const int J = s3 < 1 ? 0 : s3 < 3 ? s3 - 1 : s3 - 3;
    const int a0 = 16 * I + grp, a1 = a0 + 8;
    if (warp < 12) {
      const float* F = I - J == 1 ? nullptr : fac_s + K * (I == 2 ? 0 : (J == 1 ? 1 : 2));
      constexpr int kSteps = K / 16;  // k-steps of 8 channels per half
      // A block whose rows are all past the chunk's length is exactly zero (its Kr / Qr rows are): no products, the
      // zero accumulators stored as the computation would store them.
      const int ks_end = kSub * I < L ? (half + 1) * kSteps : half * kSteps;
#pragma unroll 2
      for (int ks = half * kSteps; ks < ks_end; ++ks) {
        const int c0 = 8 * ks + tig;
        s3_kstep<PK, !kWide>(akk, aqk, Ks, Qs, Gs, a0, c0, 16 * J + grp, F ? F[c0] : 1.0f, F ? F[c0 + 4] : 1.0f);
      }
      if (half == 1) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = 16 * J + 8 * nt + 2 * tig;
          *reinterpret_cast<float2*>(Akk + a0 * PA + col) = make_float2(akk[nt][0], akk[nt][1]);
          *reinterpret_cast<float2*>(Akk + a1 * PA + col) = make_float2(akk[nt][2], akk[nt][3]);
          *reinterpret_cast<float2*>(Aqk + a0 * PA + col) = make_float2(aqk[nt][0], aqk[nt][1]);
          *reinterpret_cast<float2*>(Aqk + a1 * PA + col) = make_float2(aqk[nt][2], aqk[nt][3]);
        }
      }
      // The off-diagonal blocks are finished among warps 0-11 (a named barrier), while the diagonal warps 12-15, with
      // twice their k-steps, may still run: behind a CTA barrier warps 0-5 had finished only after those.
      named_barrier(4, 384);  // ids: 1-3 are S4's
      if (warp < 6) {
        const float be0 = beta_s[a0], be1 = beta_s[a1];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = 16 * J + 8 * nt + 2 * tig;
          const float2 k0 = *reinterpret_cast<const float2*>(Akk + a0 * PA + col);
          const float2 k1 = *reinterpret_cast<const float2*>(Akk + a1 * PA + col);
          const float2 q0 = *reinterpret_cast<const float2*>(Aqk + a0 * PA + col);
          const float2 q1 = *reinterpret_cast<const float2*>(Aqk + a1 * PA + col);
          const float kk[4] = {akk[nt][0] + k0.x, akk[nt][1] + k0.y, akk[nt][2] + k1.x, akk[nt][3] + k1.y};
          *reinterpret_cast<float2*>(Akk + a0 * PA + col) = make_float2(be0 * kk[0], be0 * kk[1]);
          *reinterpret_cast<float2*>(Akk + a1 * PA + col) = make_float2(be1 * kk[2], be1 * kk[3]);
          *reinterpret_cast<float2*>(Aqk + a0 * PA + col) = make_float2(aqk[nt][0] + q0.x, aqk[nt][1] + q0.y);
          *reinterpret_cast<float2*>(Aqk + a1 * PA + col) = make_float2(aqk[nt][2] + q1.x, aqk[nt][3] + q1.y);
          if (akk_save) {
            *reinterpret_cast<float2*>(akk_save + a0 * kC + col) = make_float2(kk[0], kk[1]);
            *reinterpret_cast<float2*>(akk_save + a1 * kC + col) = make_float2(kk[2], kk[3]);
          }
        }
      }
    } else if (!pairwise_s[warp - 12]) {
      // A factored diagonal block B (S2a): A'[r][c] = sum_d Kr[r][d] Ksuf[c][d] exp2(-S_b[d]) = k_r k_c exp2(Gl_r -
      // Gl_c), S3's form with the block's own total taken back out per channel; over all K channels (16 k-steps at
      // K = 128, two of the off-diagonal warps' chains, which S1's ~4 K dependent pair steps a warp outweigh).
      // Entries on and above the diagonal are computed and masked. Rows past L are zero in Kr / Qr, so a block
      // entirely past L is stored as zeros without its products.
      const int B = warp - 12, r0 = 16 * B + grp;
      if (kSub * B < L) {
#pragma unroll 2
        for (int ks = 0; ks < K / 8; ++ks) {
          const int c0 = 8 * ks + tig;
          if constexpr (kWide) {
            // A backward's recompute: each k-step's products into fresh accumulators, added to the block's in fp32.
            // The mma's own fp32 accumulation is not IEEE round-to-nearest (truncating on V100-A100: Fasi et al.,
            // PeerJ CS 7:e330; H100 modelled in arXiv:2512.07004), and over the block's 48 chained mma (16 k-steps of
            // three) backward-full's near-identical keys at beta = 2 failed on the H200 (dv 1.7x its bound, bisected
            // to 5f9980a); with the chain cut per k-step it passes (worst gradient 0.18-0.19x, under the pairwise
            // form's 0.19x) at the chained form's speed (bench/LEDGER.md, session 23). The nearest key pairs sit in
            // these blocks, and T^T carries their rounding into dv. A forward's outputs passed with the chain whole.
            float tk[2][4] = {}, tq[2][4] = {};
            s3_kstep<PK, !kWide>(tk, tq, Ks, Qs, Gs, r0, c0, 16 * B + grp, ex2(-bsum_s[B * K + c0]),
                                 ex2(-bsum_s[B * K + c0 + 4]));
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                akk[nt][e] += tk[nt][e];
                aqk[nt][e] += tq[nt][e];
              }
          } else {
            s3_kstep<PK, !kWide>(akk, aqk, Ks, Qs, Gs, r0, c0, 16 * B + grp, ex2(-bsum_s[B * K + c0]),
                                 ex2(-bsum_s[B * K + c0 + 4]));
          }
        }
      }
      float* const save_b = akk_save ? akk_save + 16 * B * kC + 16 * B : nullptr;
      for_each_tile_element<2>(grp, 0, tig, [&](int nt, int e, int r, int c) {
        const int o = (16 * B + r) * PA + 16 * B + c;
        Aqk[o] = r >= c ? aqk[nt][e] : 0.0f;
        Akk[o] = r > c ? beta_s[16 * B + r] * akk[nt][e] : 0.0f;
        if (save_b) save_b[r * kC + c] = r > c ? akk[nt][e] : 0.0f;  // A' unscaled, as S1 keeps it
      });
    }
    cta_barrier(5);

    // ---- S4: T = (I + A_kk)^-1, unit lower triangular, blocked (as FLA's solve_tril). Round 0, fp32: the four
    // diagonal 16 x 16 blocks by forward substitution, in parallel, T_rc = -sum_{c <= j < r} A_rj T_jc over the rows
    // of c's block (16 dependent steps instead of 64: the terms dropped against a 64-row substitution are exact
    // zeros).
    // Stages 1-3 (chunk_map.h tri2_task): the 2 x 2 block inverse twice, T_10 and T_32 (stage 1: -T_ii (A_ij T_jj)),
    // X = A_BA T_A (stage 2, four blocks) and T_BA = -T_B X (stage 3, four blocks), each block a warp on 3xTF32
    // mma.m16n8k8 (as S3), X through shared-memory slots (accumulator layout -> B operand); T_ii's upper triangle is
    // round 0's zeros, its diagonal an exact 1. Their chain is 4 + 4 + 4 k-steps of 8 at most; the distance rounds it
    // replaces (T_IJ for I - J = 1, 2, 3 in turn) were 4 + 6 + 8 on 3, 2 and 1 warps while the CTA's other warps
    // waited (ncu, session 20: S4 ~14% of phase 1's stall samples, the barrier after it 6.5%). The old one-entry-a-
    // thread form ran 16 s-long FMA chains with two shared loads per FMA; the CPU model of the distance rounds matches
    // fp32 substitution's errors on every stress probe with 3xTF32 block products and fails beta = 2 with single tf32
    // (scripts/models/two_phase.py --precision tinv=blocked-3xtf32,
    // bench/results/2026-11-30-cpu-model-tinv-blocked.log); the stages sum the same 3xTF32 products in another
    // association.
    // Warps 0-1 run round 0, then warps 0-3 stages 1-3, ordered among themselves by named barriers; warps 4-7 take the
    // next task (kTaker). Warps 8-15 meanwhile store A_qk (masked lower) to the workspace and, in a forward, do S5a's
    // plane splits of X_K and X_V, which T does not enter: behind a CTA barrier per round they had waited with 8-15 of
    // 16 warps idle, then split after T was done (~8.5 K of phase 1's ~74 K warp instructions, on all 16 warps; static
    // SASS, session 13). One CTA barrier at the end.
    constexpr int kStageWarps = 4, kSplitThreads = kThreads - 256;  // stages 1-3 on warps 0-3; splits on 8-15
    bf16* const XKp = reinterpret_cast<bf16*>(Qs);  // S5a's planes (the bf16x3 branch below): buffers S3 left free
    // X_V's planes [2][kC][V] bf16 fit Ksuf's buffer when V <= PK (K = V = 128); else they span the Kr and Ksuf buffers
    // (contiguous: 256 V bytes <= 512 (K + 4) for K, V in {64, 128}), so they wait for X_K's split to read Kr.
    constexpr bool kXvInG = V <= PK;
    bf16* const XVp = reinterpret_cast<bf16*>(kXvInG ? Gs : Ks);
    if (warp < kStageWarps) {
      // Round 0 on warps 0-1, a thread a column c of its 16 x 16 diagonal block (cb its first column): right-looking
      // substitution, t[r] = T_rc for the block's rows r, negated sums built as each t[j] completes (t[r] -= A_rj t[j]
      // for r > j; -(x + y) and (-x) + (-y) round alike). The chain is 16 dependent FMAs; the FMAs of a step are
      // independent, so the warp issues ~120 FMA and 60 vector loads with little waiting. The quad form it replaces
      // (4 lanes a column, each step an FMA chain and a 2-shuffle quad_sum, 16 steps in turn on warps 0-7) held S4's
      // round 0 on the shuffles' latency. Terms j < c are exact zeros (t[j] = 0), so T_rc is the sum over c <= j < r in
      // ascending j: the same terms as before, in another association (the last bits move). Registers: t[16] and a
      // 4-column group's A values (up to 60, transient). A's rows of the two blocks a warp covers sit 16 banks apart.
      if (tid < 64) {
        const int c = tid, cb = c & ~(kSub - 1), cl = c - cb;
        float t[kSub] = {};
#pragma unroll
        for (int g = 0; g < kSub / 4; ++g) {
          float a[kSub][4];
#pragma unroll
          for (int r = 4 * g + 1; r < kSub; ++r) lds_vec<4>(Akk + (cb + r) * PA + cb + 4 * g, a[r]);
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * g + jj;
            t[j] = j < cl ? 0.0f : (j == cl ? 1.0f : t[j]);
#pragma unroll
            for (int r = j + 1; r < kSub; ++r) t[r] = fmaf(-a[r][jj], t[j], t[r]);
          }
        }
#pragma unroll
        for (int i = 0; i < kSub; ++i) Tm[(cb + i) * PA + c] = t[i];
      }
      mark(0);
      named_barrier(1, 32 * kStageWarps);  // round 0's diagonal blocks of T, for stages 1-3
      // Stages 1-3 (chunk_map.h tri2_task), warps 0-3, ordered by named barriers among them. A product sum_k M_ik
      // N_kj of 16 x 16 blocks on 3xTF32 mma.m16n8k8: M's rows from shared memory (A_kk or T, pitch PA) at columns
      // 16 k_first .. 16 (k_last + 1) - 1, N's rows through `brow` (T's column block j, or stage 2's X slots).
      // A 16-column block's operands (two k-steps of 8, 16 floats a lane) loaded before its first multiply, then split
      // and multiplied in the old order, a k-step at a time (the same bits). As a loop of k-steps each step's shared
      // loads waited behind the previous step's three dependent mma (~100 cycles a step on the stages' chain of up to
      // 12, while 12 of the 16 warps wait at S4's end: that barrier held 6.6% of phase 1's stall samples, session 56).
      auto block_sum = [&](const float* M, int i, int k_first, int k_last, auto brow, float (&acc)[2][4]) {
        const int r0 = kSub * i + grp;
#pragma unroll 1
        for (int kb = k_first; kb <= k_last; ++kb) {
          float a[2][4], b[2][2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c0 = 8 * (2 * kb + h) + tig, c1 = c0 + 4;
            a[h][0] = M[r0 * PA + c0];  // split_a's fragment order
            a[h][1] = M[(r0 + 8) * PA + c0];
            a[h][2] = M[r0 * PA + c0 + 4];
            a[h][3] = M[(r0 + 8) * PA + c0 + 4];
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              b[h][nt][0] = brow(c0)[8 * nt + grp];
              b[h][nt][1] = brow(c1)[8 * nt + grp];
            }
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t ah[4], al[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) split(a[h][e], ah[e], al[e]);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              uint32_t bh[2], bl[2];
              split(b[h][nt][0], bh[0], bl[0]);
              split(b[h][nt][1], bh[1], bl[1]);
              mma3(acc[nt], ah, al, bh, bl);
            }
          }
        }
      };
      // An accumulator pair as the [16][16] block at dst (pitch `pitch`), negated or not.
      auto put = [&](float* dst, int pitch, const float (&acc)[2][4], float sign) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = 8 * nt + 2 * tig;
          *reinterpret_cast<float2*>(dst + grp * pitch + col) = make_float2(sign * acc[nt][0], sign * acc[nt][1]);
          *reinterpret_cast<float2*>(dst + (grp + 8) * pitch + col) = make_float2(sign * acc[nt][2], sign * acc[nt][3]);
        }
      };
      // Rows past the chunk's length: A_ik = 0 there, so X = 0 and T_ij = -0, the bits the products would give.
      if (warp < tri2_warps(1)) {  // stage 1: T_ij = -T_ii (A_ij T_jj)
        const Tri2Task t = tri2_task(1, warp);
        float x[2][4] = {}, y[2][4] = {};
        float* const Xw = Xs + kSub * kSub * warp;
        if (kSub * t.i < L) {
          block_sum(Akk, t.i, t.k_first, t.k_last, [&](int c) { return Tm + c * PA + kSub * t.j; }, x);
          put(Xw, kSub, x, 1.0f);
          __syncwarp();
          block_sum(Tm, t.i, t.i, t.i, [&](int c) { return Xw + (c - kSub * t.i) * kSub; }, y);
        }
        put(Tm + kSub * t.i * PA + kSub * t.j, PA, y, -1.0f);
      }
      named_barrier(2, 32 * kStageWarps);
      const Tri2Task t2 = tri2_task(2, warp);  // stage 2: X_ij = sum_k A_ik T_kj into slot `warp`
      float x[2][4] = {};
      if (kSub * t2.i < L)
        block_sum(Akk, t2.i, t2.k_first, t2.k_last, [&](int c) { return Tm + c * PA + kSub * t2.j; }, x);
      put(Xs + kSub * kSub * warp, kSub, x, 1.0f);
      named_barrier(2, 32 * kStageWarps);
      const Tri2Task t3 = tri2_task(3, warp);  // stage 3: T_ij = -sum_k T_ik X_kj, X_kj in slot 2 (k - 2) + j
      float y[2][4] = {};
      if (kSub * t3.i < L)
        block_sum(Tm, t3.i, t3.k_first, t3.k_last, [&](int c) {
          const int k = c / kSub;
          return Xs + kSub * kSub * (2 * (k - 2) + t3.j) + (c - kSub * k) * kSub;
        }, y);
      put(Tm + kSub * t3.i * PA + kSub * t3.j, PA, y, -1.0f);
    } else if (tid < 256) {
      if (tid == kTaker) {  // the next task (its fields read at S5c, after two more CTA barriers)
        const int64_t next = static_cast<int64_t>(taken);
        const bool m = next < list_len * heads;
        next_s = next;
        next_more_s = m;
        if (m) next_tk_s = task_of(next);
        set_ahead(next, list_len);
      }
    } else {
      __nv_bfloat16* const Aqk_g = reinterpret_cast<__nv_bfloat16*>(tile + tl.Aqk());
      // Four entries a thread and step (8-byte stores a plane; one element each was 32 2-byte stores a thread).
      for (int e = 4 * (tid - 256); e < kC * kC; e += 4 * (kThreads - 256)) {
        const int r = e / kC, c0 = e % kC;
        float x[4];
        lds_vec<4>(Aqk + r * PA + c0, x);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = c0 + i <= r ? x[i] : 0.0f;
        store_split4(Aqk_g, kC * kC, e, x);
      }
      if (!kWide) {
        const int st = tid - (kThreads - kSplitThreads);
        split_to_planes<K, kSplitThreads>(Ks, PK, XKp, st, [&](int r, int c, float (&x)[4]) {
          float pre[4];
          lds_vec<4>(pre_s + (r >> 4) * K + c, pre);
          const float bt = beta_s[r];
#pragma unroll
          for (int i = 0; i < 4; ++i) x[i] = x[i] * pre[i] * bt;  // (Kr P) beta, as S5a has always formed it
        });
        if constexpr (!kXvInG) named_barrier(3, kSplitThreads);  // Kr read: its buffer takes X_V
        split_to_planes<V, kSplitThreads>(Vb, PV, XVp, st, [](int, int, float (&)[4]) {});
      }
    }
    cta_barrier(6);
    if constexpr (kQkAhead) {
      if (next_more_s) copy_qk_ahead(next_tk_s);  // Kr's buffer is read no more in this task (S4 split X_K from it)
    }

    // ---- S5: [W | U] = T [diag(beta) exp(Gamma) K | diag(beta) V], at the precision its user needs (kWide). The
    // backward's recompute (and a forward that saves for the backward: BackwardSaves) takes 3xTF32: the gradients
    // carry W and U's rounding through T^T twice more, and with bf16x3 here near-identical keys at beta = 2 failed
    // backward-full (bench/LEDGER.md, session 8). A plain forward keeps bf16x3: its outputs and states pass every
    // probe at <= 0.03 of their bounds with it, and 3xTF32 costs the forward ~130 us (4.4%) at h64-fixed.
    constexpr int kGroups = (K + V) / 16, kMaxGroups = (kGroups + 7) / 8;
    const int pair = warp & 1, nq = warp >> 1;
    __nv_bfloat16* const W_g = reinterpret_cast<__nv_bfloat16*>(tile + tl.W());
    float* const U_g = tile + tl.U();
    // [W | U] leaves through a stage (S5c): W's planes over the A_qk and T buffers, U over beta v's: 2 kC rows of 4 PA
    // bytes, kC rows of 4 PV. A_qk went to the workspace in S4; in the bf16x3 branch T and beta v were split into
    // planes elsewhere before S5b, in the 3xTF32 one the stage waits for the products to have read them.
    static_assert(Ly::kT == Ly::kAqk + kC * PA && 2 * K <= 4 * PA && V <= PV, "[W | U]'s stage fits its buffers");
    // The copies run on into the next task's S0, which writes q / k / g and the tables before its barrier (S0's wait).
    static_assert(Ly::kV >= Ly::kG + kC * PK && Ly::kPre >= Ly::kT + kC * PA, "the stage is clear of S0's stores");
    unsigned char* const w_stage = reinterpret_cast<unsigned char*>(Aqk);
    unsigned char* const u_stage = reinterpret_cast<unsigned char*>(Vb);
    if constexpr (kWide) {
      // 3xTF32, operands split as they are loaded (as S3). In the CPU model (scripts/models/
      // chunk_backward_rounding.py --precision wu=...) bf16x3 here was the largest of the chunked backward's errors on
      // that probe: dq 7.8e-4 relative RMSE, worst element 0.59 of its bound, against 3.5e-4 and 0.30 with 3xTF32.
      // S5a: X_K = exp(Gamma) K diag(beta) in place over Kr (exp(Gamma_t) K_t = P_0..P_{b-1} Kr_t); X_V = beta v is
      // Vb. S5b: warp = (row-block pair, column group slot nq): row blocks {0, 3} or {1, 2} one after the other (T is
      // lower triangular: 2 m + 2 k-steps of 8 for row block m), 16-column groups nq, nq + 8, ... of [W | U] (a group
      // lies in W or in U: K % 16 == 0); mma.m16n8k8 tf32, then staged. Bank use: T (pitch
      // 68) and X_V (pitch V + 8) fragments are conflict-free, X_K (pitch K + 4) 2-way.
      for_row_quads<K>(tid, [&](int r, int c, int) {
        float x[4], pre[4];
        lds_vec<4>(Ks + r * PK + c, x);
        lds_vec<4>(pre_s + (r >> 4) * K + c, pre);
        const float bt = beta_s[r];
        *reinterpret_cast<float4*>(Ks + r * PK + c) =
            make_float4(x[0] * (pre[0] * bt), x[1] * (pre[1] * bt), x[2] * (pre[2] * bt), x[3] * (pre[3] * bt));
      });
      if (tinv_save) {  // T as bf16 hi / lo planes [C][C], zeros above the diagonal: the products' P2 operand as is
        __nv_bfloat16* const tp = reinterpret_cast<__nv_bfloat16*>(tinv_save);
        for_row_quads<kC>(tid, [&](int r, int c, int) {
          float x[4];
          lds_vec<4>(Tm + r * PA + c, x);
#pragma unroll
          for (int j = 0; j < 4; ++j) x[j] = c + j <= r ? x[j] : 0.0f;
          store_split4(tp, kC * kC, r * kC + c, x);
        });
      }
      __syncthreads();
      // Both row blocks' accumulators are held (109 registers, was 116) until every warp's products have read
      // T, X_K and X_V, whose buffers the stage then takes.
      float acc2[2][kMaxGroups][2][4] = {};
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int m = mi == 0 ? pair : 3 - pair;
        const int r0 = 16 * m + grp;
        float (&acc)[kMaxGroups][2][4] = acc2[mi];
        // Row blocks past the chunk's length: T's rows there are unit rows (A_kk's rows are zero) against zero rows of
        // X, so [W | U] is +0 there; no products, the zero accumulators stored.
#pragma unroll 1
        for (int ks = 0; ks < (16 * m < L ? 2 * m + 2 : 0); ++ks) {
          const int c0 = 8 * ks + tig, c1 = c0 + 4;
          uint32_t ah[4], al[4];
          split_a(Tm, PA, r0, c0, ah, al);
#pragma unroll
          for (int gi = 0; gi < kMaxGroups; ++gi) {
            const int g = nq + 8 * gi;
            if (g >= kGroups) break;
            const bool in_w = 16 * g < K;
            const float* const X = in_w ? Ks : Vb;
            const int px = in_w ? PK : PV, cb = in_w ? 16 * g : 16 * g - K;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              const int n = cb + 8 * nt + grp;
              uint32_t bh[2], bl[2];
              split(X[c0 * px + n], bh[0], bl[0]);
              split(X[c1 * px + n], bh[1], bl[1]);
              mma3(acc[gi][nt], ah, al, bh, bl);
            }
          }
        }
      }
      __syncthreads();
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        stage_wu<K, V>(acc2[mi], nq, 16 * (mi == 0 ? pair : 3 - pair) + grp, tig, w_stage, u_stage, PA, PV);
    } else {
      // bf16x3 (chunk_common.cuh). S5a: both operands split once into hi / lo bf16 planes, swizzled (mma_layout.h)
      // so they fit, unpadded, in buffers S3 / S4 left free: T [64][64] where A_kk was, X_K = exp(Gamma) K diag(beta)
      // [64][K] where Qr was (exp(Gamma_t) K_t = P_0..P_{b-1} Kr_t, Kr in place in Ks), then X_V = beta v [64][V] over
      // Kr and Ksuf (contiguous; 256 V bytes <= 512 (K + 4) for K, V in {64, 128}). S5b: warp = (row-block pair,
      // column group slot nq): row blocks {0, 3} or {1, 2} one after the other (T is lower triangular: m + 1 k-steps
      // of 16 for row block m), 16-column groups nq, nq + 8, ... of [W | U]; ldmatrix + mma.m16n8k16, staged as it
      // goes. Nothing is saved for a backward here (kWide is false exactly when keep is empty).
      static_assert(kC <= PA && K <= PK && V <= 2 * PK, "S5's planes must fit the buffers they reuse");
      static_assert(Ly::kG == Ly::kK + kC * PK, "X_V spans the Kr and Ksuf buffers");
      bf16* const Tp = reinterpret_cast<bf16*>(Akk);
      split_to_planes<kC>(Tm, PA, Tp, tid, [](int, int, float (&)[4]) {});  // X_K, X_V: split during S4 (above)
      cta_barrier(7);
      const LdsmRow ra = ldsm_a_rowmajor(lane), rbt = ldsm_b_kmajor(lane);
      // Staged as it goes: the stage's buffers are not the products' operands here (below).
#pragma unroll 1
      for (int mi = 0; mi < 2; ++mi) {
        const int m = mi == 0 ? pair : 3 - pair;
        const int r0 = 16 * m + grp;
        float acc[kMaxGroups][2][4] = {};
#pragma unroll 1
        for (int ks = 0; ks < (16 * m < L ? m + 1 : 0); ++ks) {  // past the chunk's length: +0 (as the 3xTF32 branch)
          uint32_t ah[4], al[4];
          const int ao = swizzled(16 * m + ra.row, 16 * ks + ra.col, kC);
          ldsm_x4<false>(ah, Tp + ao);
          ldsm_x4<false>(al, Tp + kC * kC + ao);
#pragma unroll
          for (int gi = 0; gi < kMaxGroups; ++gi) {
            const int g = nq + 8 * gi;
            if (g >= kGroups) break;
            const bool in_w = 16 * g < K;
            const bf16* const plane = in_w ? XKp : XVp;
            const int cols = in_w ? K : V, c0 = in_w ? 16 * g : 16 * g - K;
            const int bo = swizzled(16 * ks + rbt.row, c0 + rbt.col, cols);
            uint32_t bh[4], bl[4];
            ldsm_x4<true>(bh, plane + bo);
            ldsm_x4<true>(bl, plane + kC * cols + bo);
            mma_bf16x3(acc[gi][0], ah, al, bh, bl, 0);
            mma_bf16x3(acc[gi][1], ah, al, bh, bl, 1);
          }
        }
        stage_wu<K, V>(acc, nq, r0, tig, w_stage, u_stage, PA, PV);
      }
    }
    // S5c: the staged rows to the tile. On sm_90 one bulk copy a row (3 kC of them), asynchronous: the issuing lane
    // waits only until its rows are read out of shared memory, so the next task no longer waits for ~64 KB of
    // scattered 4- and 8-byte stores to drain (ncu, session 20: S5's stores and the exit's drain were ~14% of
    // this kernel's stall samples, with one CTA per SM and nothing to overlap them). Elsewhere 16-byte vectors.
    // The next task (taken at S4) has its rows' loads issued before the copies (load_rows).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cute::tma_store_fence();  // the stage's generic-proxy writes, visible to the bulk copies
#endif
    cta_barrier(8);
    const int64_t next = next_s;
    more = next_more_s != 0;
    tk = more ? next_tk_s : PrepTask{};
    ld = more ? load_rows(tk) : S0Loads<K, V>{};
    mark(3);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tid < 3 * kC) {
      const WuRowCopy rc = wu_row_copy(tid, K, V, PA, PV);
      cute::SM90_BULK_COPY_S2G::copy((rc.to_u ? u_stage : w_stage) + rc.src,
                                     (rc.to_u ? reinterpret_cast<unsigned char*>(U_g)
                                              : reinterpret_cast<unsigned char*>(W_g)) + rc.dst,
                                     rc.bytes);
      cute::tma_store_arrive();  // waited at the next task's S0 barrier (or after the loop)
    }
#else
    for (int i = warp; i < 3 * kC; i += kThreads / 32) {
      const WuRowCopy rc = wu_row_copy(i, K, V, PA, PV);
      const unsigned char* const src = (rc.to_u ? u_stage : w_stage) + rc.src;
      unsigned char* const dst = (rc.to_u ? reinterpret_cast<unsigned char*>(U_g)
                                          : reinterpret_cast<unsigned char*>(W_g)) + rc.dst;
      for (int j = 16 * lane; j < rc.bytes; j += 16 * 32)
        *reinterpret_cast<uint4*>(dst + j) = *reinterpret_cast<const uint4*>(src + j);
    }
#endif
    // No barrier: the next task's S0 writes only buffers the copies do not read (q, k, g, beta) before its barrier,
    // which follows the copies' wait; next_s and next_tk_s, read above, are written again at its S4.
    cur = next;
    ++local_task;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (static_cast<int>(threadIdx.x) < 3 * kC) cute::tma_store_wait<0>();  // the last copies read out before exit
  // Launched beside a state pass (programmatic dependent launch, forward_chunked.cu), this grid reads nothing that
  // pass writes, so no CTA waits for it but the last one, at its end (after its tasks: no SM idles for it), which
  // makes this grid's completion imply the state pass's: the launches after it in the stream then see both
  // finished. Without such a launch it returns at once.
  if (blockIdx.x == gridDim.x - 1) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <int K, int V, bool kWide, class Spec>
cudaError_t launch_as(const ForwardParams& p, char* ws, int64_t cap, cudaStream_t s, const BackwardSaves& keep,
                      const HeadRange& heads) {
  const size_t bytes = PrepLayout<K, V>::kBytes;
  const auto kernel = prepare_kernel<K, V, kWide, Spec>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  int sms = 0;  // one CTA an SM (its shared memory), each looping over tasks
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device_id)) != cudaSuccess) return e;
  const int nheads = heads.count_of(p.HV);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(sms, cap * nheads))));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = s;
  // The counter slot: the first launch of a forward's two (or its only one) and the one beside a state pass.
  return launch_maybe_beside(cfg, heads.beside_previous, kernel, p, ws, keep, heads.first, nheads,
                             heads.beside_previous ? 1 : 0);
}

// The instance for bf16 inputs (q, k, v, g with contiguous channels, beta) with the launch's gate mode, else the
// generic one (IoSpec).
template <int K, int V>
cudaError_t launch(const ForwardParams& p, char* ws, int64_t cap, cudaStream_t s, const BackwardSaves& keep,
                   const HeadRange& heads) {
  const bool fast = io_fast(p.q) && io_fast(p.k) && io_fast(p.v) && io_fast(p.g) && p.beta.dtype == KDA_DTYPE_BFLOAT16;
  return with_io_spec(fast, p.gate_mode, [&](auto spec) {
    using Spec = decltype(spec);
    return keep.tinv ? launch_as<K, V, true, Spec>(p, ws, cap, s, keep, heads)
                     : launch_as<K, V, false, Spec>(p, ws, cap, s, keep, heads);
  });
}

}  // namespace

size_t prepare_smem_bytes(int K, int V) {
  return dispatch_kn<64, 128>(K, V, [](auto k, auto v) {
    return PrepLayout<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_prepare(const ForwardParams& p, char* ws, int64_t cap, cudaStream_t s, const BackwardSaves& keep,
                           const HeadRange& heads) {
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value>(p, ws, cap, s, keep, heads);
  });
}

}  // namespace kda::cuda::chunk
