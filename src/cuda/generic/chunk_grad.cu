// chunk_grad.cu: the chunked backward's per-channel gradient pass for steep chunks (docs/backward.md, launch 7): per
// (chunk, value head) where some token decays by less than 2^-kTameBits in some channel (a softplus gate can; the
// tame chunks are chunk_grad_tc.cu's and chunk_grad_rows.cu's, whose flag it reads), every gradient of the chunk's
// tokens from the task's products (ProdLayout, chunk_products.cu: dM, dA, QS, KD, BK, BV, colsum(S0 . dS)) and the
// saved A' (BackwardLayout akk). Line by line the safe form of the CPU backend's chunked core
// (src/cpu/backward_cpu.cpp), in fp32:
//   P0  stage q_hat, k_hat (L2 norm), g_log in log2 units (gate activation), beta (activation), dM, dA       [smem]
//   P4  per channel (a thread each), the exponent terms: dq = QS . E, dk = beta dBK . E + KD . Esuf, and the log-decay
//       gradient summed over the runs each exponent spans (never a difference of cumulated sums); then the pair
//       products dq += (dM . D) K, dk += (dA' . D) K (row side), dk += (dM^T . D) Q + (dA'^T . D) K (column side),
//       dg += the pairs spanning each token, by 16-token blocks: pairwise inside a block (D = exp2 of a sum
//       accumulated from the diagonal), through the reference points a_r P_IJ e_c (every factor <= 1) across blocks
//       (scripts/models/chunk_backward.py pair_terms_blocked: 4 x 136 pairs and 6 block-pair products per channel
//       instead of 2080 pairs, and 4 x 136 + 3 x 64 exp2 instead of 2080)
//   P5  per row: dbeta = rowsum(dA . A') + rowsum(dBV . V) + rowsum(dBK . K . E) (through the sigmoid), dv = beta dBV;
//       all but the last row sum on the warps P4 leaves idle, concurrently with it
//   P6  per channel: dq_hat, dk_hat of this value head -> workspace dqk (finalize_qk_kernel sums the group and applies
//       the L2 norm's backward); dg through the gate activation; the chunk's partial sums of ddt_bias and dA_log
//   P7  a group of one value head (H = HV): per row, dq and dk through the L2 norm's backward straight into the
//       gradients instead of dqk (no finalize launch, no dqk bytes: 512 MiB at h64-fixed)
// (P1-P3, the matrix products, are chunk_products.cu's.) Deterministic: no atomics, every sum in a fixed order.
//
// The pair products run one thread per channel, the block pairs' 16 x 16 products in registers.
//
// Grid: min(cap * HV, kGradCtas, what the device holds at once) CTAs of 256 threads (grad_grid) striding over the
// (chunk, value head) tasks, so the persistent grid is one wave; list entries past
// the list's length write zero gate partials. Shared memory (K = V = 128): q, k, g and the dq, dk, dg accumulators
// [64][K] each, dM and dA [64][64], beta, row sums, inverse norms: 230,400 bytes of the 232,448 a block may opt in
// to, one CTA per SM. P4's accumulators sit in shared memory (per channel ~160 / ~380 / ~450 read-modify-writes of
// dq / dk / dg, dk's column-side pair terms included: until session 28 those ~220 lived in global scratch and P6 / P7
// read them back a batch of rows at a time); the pair terms and dbeta's third term (~450 accesses) live in the CTA's
// slice of workspace scratch (kGradScratch arrays of [64][max(K, V)] fp32), which at one CTA per SM mostly misses L1
// (ncu on gradpf: P4 58% long-scoreboard stalls with dq / dk / dg there).
#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
constexpr int kC = kChunk;

template <int K, int V>
struct GradLayout {  // float offsets into shared memory
  static constexpr int W = K > V ? K : V;
  static constexpr int kQ = 0, kK = kQ + kC * K, kG = kK + kC * K, kDQ = kG + kC * K, kDK = kDQ + kC * K;
  static constexpr int kDG = kDK + kC * K, kM = kDG + kC * K, kA = kM + kC * kC;
  static constexpr int kBeta = kA + kC * kC, kRow = kBeta + kC, kNorm = kRow + kC;
  static constexpr size_t kBytes = sizeof(float) * (kNorm + 2 * kC);
  // Element (r, d) of the [C][K] arrays and (r, c) of dM / dA: swizzled as chunk_grad_tc.cu's (mma_layout.h,
  // tests/cpu/test_mma_layout); a thread a channel reads them without bank conflicts either way.
  static __device__ __forceinline__ int at(int r, int d) { return r * K + (d ^ grad_col_swizzle(r)); }
  static __device__ __forceinline__ int pair_at(int r, int c) { return r * kC + (c ^ grad_pair_swizzle(r)); }
};

// Asks L2 for what the CTA's next task reads from global memory: its product tile and A' (contiguous, ~180 KB at
// K = V = 128; one 128-byte line per request, spread over the CTA) and its rows of q, k, g, v (thread tid: row
// tid % 64 of tensor tid / 64). Issued after P4, ~a third of a task ahead: the products kernel wrote the tiles long
// before, so without it P0 and P4 read them from DRAM at one CTA per SM (ncu on gradpf: P0 70% long-scoreboard).
// Only addresses inside the tensors are named; a prefetch changes no result.
template <int K, int V>
__device__ __forceinline__ void prefetch_task(const ForwardParams& p, const char* ws, const BackwardLayout& bl,
                                              const ChunkRec* list, int64_t count, int64_t task) {
  if (task >= bl.fwd.cap * p.HV) return;
  const int64_t ci = task / p.HV;
  if (ci >= count) return;
  const int hv = static_cast<int>(task % p.HV), tid = threadIdx.x;
  const ProdLayout pl{K, V};
  const char* const prod = ws + bl.prod + task * pl.floats() * int64_t{sizeof(float)};
  for (int64_t off = tid * int64_t{128}; off < pl.floats() * int64_t{sizeof(float)}; off += kThreads * 128)
    prefetch_l2(prod + off);
  const char* const ap = ws + bl.akk + task * int64_t{kC} * kC * int64_t{sizeof(float)};
  for (int off = tid * 128; off < kC * kC * static_cast<int>(sizeof(float)); off += kThreads * 128)
    prefetch_l2(ap + off);
  static_assert(kThreads == 4 * kC, "prefetch_task: a thread per (row, tensor)");
  prefetch_input_row<K, V>(p, list[ci], hv, tid % kC, tid / kC);  // q, k, g, v
}

// Spec: the dtypes and the gate mode the instance is built for (chunk_common.cuh IoSpec).
template <int K, int V, class Spec>
__global__ void __launch_bounds__(kThreads, 1) grad_kernel(const BackwardParams bp, char* ws) {
  using Ly = GradLayout<K, V>;
  constexpr int W = Ly::W, CK = K / 32;
  const ForwardParams& p = bp.f;
  extern __shared__ __align__(16) float smem[];
  float* const Qs = smem + Ly::kQ;      // q_hat [C][K] (not scaled)
  float* const Ks = smem + Ly::kK;      // k_hat [C][K]
  float* const Gs = smem + Ly::kG;      // g_log [C][K], log2 units
  float* const DQ = smem + Ly::kDQ;     // dq_hat [C][K]
  float* const DK = smem + Ly::kDK;     // dk_hat [C][K]
  float* const DG = smem + Ly::kDG;     // d g_log [C][K]
  float* const dMs = smem + Ly::kM;     // dM [C][C]
  float* const dAs = smem + Ly::kA;     // dA [C][C] (not scaled by beta)
  float* const beta_s = smem + Ly::kBeta;
  float* const row_s = smem + Ly::kRow;    // P5a's per-row part of dbeta
  float* const norm_s = smem + Ly::kNorm;  // 1 / |q|, then 1 / |k|, per row (P7)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const auto at = [](int r, int d) { return Ly::at(r, d); };
  const auto pair_at = [](int r, int c) { return Ly::pair_at(r, c); };
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const WorkspaceLayout& wl = bl.fwd;
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
  const ChunkRec* const list = reinterpret_cast<const ChunkRec*>(ws + wl.list);
  const ProdLayout pl{K, V};
  float* const scr = reinterpret_cast<float*>(ws + bl.scratch) + blockIdx.x * int64_t{kGradScratch} * kC * W;
  float* const Xs = scr;           // per-channel pair terms, then the reference points' a_r [C][K]
  float* const TB = scr + kC * W;  // dBK . K . E, dbeta's third term before its row sum [C][K]
  const bool has_a = p.has_A_log();
  const kda_gate_mode_t gate_mode = Spec::gate(p.gate_mode);
  const bool gated = gate_mode != KDA_GATE_LOG_DECAY;
  float* const dqk = reinterpret_cast<float*>(ws + bl.dqk);  // [2][B T][HV][K]

#pragma unroll 1
  for (int64_t task = blockIdx.x; task < wl.cap * p.HV; task += gridDim.x) {
    const int64_t ci = task / p.HV;
    const int hv = static_cast<int>(task % p.HV), h = hv / p.group;
    double* const part = reinterpret_cast<double*>(ws + bl.gate) + task * (K + 1);
    if (ci >= count) {  // past the list: its gate partials are zeros (the reduction reads every entry)
      for (int d = tid; d <= K; d += kThreads) part[d] = 0.0;
      continue;
    }
    // A tame chunk is chunk_grad_tc.cu's and chunk_grad_rows.cu's (the flag is CTA-uniform).
    if (reinterpret_cast<const int*>(ws + bl.prod)[task * pl.floats() + pl.Tame()] != 0) continue;
    const ChunkRec rec = list[ci];
    const int L = rec.len;
    const int64_t b = p.has_cu_seqlens() ? 0 : rec.seq, t0 = rec.start;
    const float a_log = has_a ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
    // The bounded gate as phase 1 computes it (chunk_common.cuh bounded_gate_log2: the same bits), its gradient on
    // ex2 / rcp too (session 12's by-line profile: the activation with its gradient ~10% of this pass's samples).
    const bool bounded = gate_mode == KDA_GATE_BOUNDED;
    const float ea = has_a ? expf(a_log) : 1.0f, lb2 = p.lower_bound * kLog2e;
    const float* const Ap = reinterpret_cast<const float*>(ws + bl.akk) + task * int64_t{kC} * kC;
    const float* const prod = reinterpret_cast<const float*>(ws + bl.prod) + task * pl.floats();
    const float* const QS = prod + pl.QS();   // dO' S0 [C][K]
    const float* const KDg = prod + pl.KD();  // V_new dS [C][K]
    const float* const BV = prod + pl.BV();   // T^T dU [C][V]
    const float* const BK = prod + pl.BK();   // T^T dW [C][K]

    // ---- P0: stage. Warp w: rows w + 8 i (RW of them), lanes: channels lane + 32 j. Rows past L are zeros. First the
    // raw bits of the warp's rows, kRB0 rows' loads (q, k, g, beta: kRB0 (3 CK + 1) = 52 registers at K = 128) issued
    // before any is used, each value parked in the shared slot its converted value takes (a thread reads back only
    // what it wrote: no barrier); then, a row at a time, the conversion, L2 norm and gate activation. Two round trips
    // instead of one per row (a row at a time, its loads were ncu's 17% of the long-scoreboard samples), and only the
    // loads are unrolled over rows. kRB0 = 8 (all rows) holds 104 registers here and spills with P4-P6 (K = 128): the
    // pass 1.6 ms slower (session 28). Slower too: the rows copied by cp.async into DQ / DK / DG (no registers, one
    // round trip: +0.20 ms) and P5b's loads of 4 rows before their sums (+0.32 ms): each grew the kernel's code by
    // 6-12%, and this pass's time follows its code size (instruction fetch) more than the loads left exposed
    // (bench/LEDGER.md, session 28).
    constexpr int RW = kC / (kThreads / 32), kRB0 = 4;
    float bias[CK];
#pragma unroll
    for (int j = 0; j < CK; ++j)
      bias[j] = gated ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] +
                                                                 (32 * j + lane) * p.dt_bias.stride[1]]
                      : 0.0f;
    {  // dM and dA (masked and zero past L by chunk_products.cu): 16-byte cp.async copies, issued first so that they
      // land while the rows below make their own round trips (waited for at P0's end)
      const float* const src = prod + pl.dM();  // dM then dA, contiguous
      static_assert(Ly::kA == Ly::kM + kC * kC, "dM and dA must be adjacent in shared memory");
      for (int i = tid; i < 2 * kC * kC / 4; i += kThreads)  // dA's rows follow dM's: row 4 i / kC of the pair
        cp_async16(dMs + pair_at(4 * i / kC, 4 * i % kC), src + 4 * i);
      cp_async_commit();
    }
    uint32_t* const Qraw = reinterpret_cast<uint32_t*>(Qs);
    uint32_t* const Kraw = reinterpret_cast<uint32_t*>(Ks);
    uint32_t* const Graw = reinterpret_cast<uint32_t*>(Gs);
    uint32_t* const Braw = reinterpret_cast<uint32_t*>(beta_s);
#pragma unroll 1
    for (int i0 = 0; i0 < RW; i0 += kRB0) {
      uint32_t qr[kRB0][CK], kr[kRB0][CK], gr[kRB0][CK], br[kRB0];
#pragma unroll
      for (int i = 0; i < kRB0; ++i) {
        const int r = warp + (kThreads / 32) * (i0 + i);
        if (r < L)
          load_row_bits<Spec>(p, RowOffsets<Spec>(p, b, t0 + r, h, hv, lane, 0), qr[i], kr[i], gr[i], br[i]);
      }
#pragma unroll
      for (int i = 0; i < kRB0; ++i) {
        const int r = warp + (kThreads / 32) * (i0 + i);
        if (r < L) {
#pragma unroll
          for (int j = 0; j < CK; ++j) {
            const int d = 32 * j + lane;
            Qraw[at(r, d)] = qr[i][j];
            Kraw[at(r, d)] = kr[i][j];
            Graw[at(r, d)] = gr[i][j];
          }
          if (lane == 0) Braw[r] = br[i];
        }
      }
    }
    for (int r = warp; r < kC; r += kThreads / 32) {
      float q[CK], k[CK], graw[CK], braw = 0.0f;
#pragma unroll
      for (int j = 0; j < CK; ++j) q[j] = k[j] = graw[j] = 0.0f;
      if (r < L) {
#pragma unroll
        for (int j = 0; j < CK; ++j) {
          const int d = 32 * j + lane;
          q[j] = bits_to_float(Qraw[at(r, d)], Spec::dt(p.q.dtype));
          k[j] = bits_to_float(Kraw[at(r, d)], Spec::dt(p.k.dtype));
          graw[j] = bits_to_float(Graw[at(r, d)], Spec::dt(p.g.dtype));
        }
        if (lane == 0) braw = bits_to_float(Braw[r], Spec::dt(p.beta.dtype));  // lane 0 parked it and alone uses it
        if (p.use_qk_l2norm) {
          const float iq = warp_inv_norm<CK>(q), ik = warp_inv_norm<CK>(k);
          if (lane == 0) {
            norm_s[r] = iq;
            norm_s[kC + r] = ik;
          }
#pragma unroll
          for (int j = 0; j < CK; ++j) {
            q[j] *= iq;
            k[j] *= ik;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < CK; ++j) {
        const int d = 32 * j + lane;
        Qs[at(r, d)] = q[j];
        Ks[at(r, d)] = k[j];
        const float gl = r >= L ? 0.0f
                         : bounded ? bounded_gate_log2(graw[j] + bias[j], ea, lb2)
                                   : gate_log_decay<float>(gate_mode, graw[j], has_a, a_log, bias[j], p.lower_bound) *
                                         kLog2e;
        Gs[at(r, d)] = gl;
      }
      if (lane == 0) beta_s[r] = r < L ? beta_activation<float>(braw, p.beta_is_logits, p.allow_neg_eigval) : 0.0f;
    }
    cp_async_wait<0>();  // this thread's dM / dA copies; the barrier makes everyone's visible
    __syncthreads();

    // ---- P4: per channel d (threads 0 .. K - 1), the exponent terms and the pair products.
    if (tid < K) {
      const int d = tid;
      // The product rows (QS, BK forwards, KD backwards) are read kAhead rows ahead through rings of registers: the
      // scratch stores of each row (TB, Xs: global, so for the compiler possibly the product tile) would
      // otherwise hold the next row's loads behind them, a round trip per row (ncu: ~13% of the stall samples).
      // 3 kAhead + 1 registers, in a stretch that needs few (the pair products below are the kernel's peak).
      constexpr int kAhead = 8;
      static_assert(kC % kAhead == 0, "P4: the rings step whole groups of rows");
      float qs_r[kAhead], bk_r[kAhead], kd_r[kAhead];
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {
        qs_r[i] = QS[i * K + d];
        bk_r[i] = BK[i * K + d];
        kd_r[i] = KDg[(kC - 1 - i) * K + d];
      }
      const float cs = prod[pl.CS() + d];
      // Runs 0 .. t (exp(Gamma_t) in Qg and in W's rows): dq = QS . E, dk = beta dBK . E; their coefficients
      // q dq + k dk (the log-decay gradient of every s <= t) go to DG, summed backwards below.
      float gam = 0.0f;
#pragma unroll 1
      for (int tg = 0; tg < kC; tg += kAhead) {
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
          const int t = tg + i;
          const float qs = qs_r[i], bk = bk_r[i];
          if (t + kAhead < kC) {
            qs_r[i] = QS[(t + kAhead) * K + d];
            bk_r[i] = BK[(t + kAhead) * K + d];
          }
          gam += Gs[at(t, d)];
          const float e = ex2(gam);
          const float dqe = qs * e;
          const float dke = beta_s[t] * bk * e;
          DQ[at(t, d)] = dqe;
          DK[at(t, d)] = dke;
          TB[t * K + d] = bk * Ks[at(t, d)] * e;
          DG[at(t, d)] = Qs[at(t, d)] * dqe + Ks[at(t, d)] * dke;
        }
      }
      // The whole chunk: S0's decay exp(Gamma_C), coefficient colsum(S0 . dS).
      const float whole = cs * ex2(gam);
      // Runs t+1 .. end (K . Esuf): dk += KD . Esuf; its coefficient k dk (of every s > t) is summed forwards.
      float suf = 0.0f, head = 0.0f;
#pragma unroll 1
      for (int tg = kC - 1; tg >= 0; tg -= kAhead) {
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
          const int t = tg - i;
          const float kd = kd_r[i];
          if (t - kAhead >= 0) kd_r[i] = KDg[(t - kAhead) * K + d];
          const float dkd = kd * ex2(suf);
          DK[at(t, d)] += dkd;
          Xs[t * K + d] = Ks[at(t, d)] * dkd;
          head += DG[at(t, d)];
          DG[at(t, d)] = head + whole;
          suf += Gs[at(t, d)];
        }
      }
      float tail = 0.0f;
      for (int t = 0; t < kC; ++t) {
        DG[at(t, d)] += tail;
        tail += Xs[t * K + d];
      }
      // Pairs (r, c <= r) of A_qk and A', by 16-token blocks (scripts/models/chunk_backward.py pair_terms_blocked).
      // Inside a block, pairwise: D = exp2(sum of g over c+1 .. r) accumulated from the diagonal down; the block's
      // pair coefficients reach the tokens they span through a prefix over c (all of it in registers: the loops
      // over the block's 16 rows and columns are unrolled).
#pragma unroll 1
      for (int blk = 0; blk < kSubBlocks; ++blk) {
        const int b0 = kSub * blk;
        float col[kSub], dgp[kSub];
        // The block's k and g of this channel, loaded once: read per pair, they were loaded again for every row (136
        // times a block instead of 16: the compiler cannot move them above each row's DQ / DK stores).
        float kb[kSub], gb[kSub];
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          col[i] = dgp[i] = 0.0f;
          kb[i] = Ks[at((b0 + i), d)];
          gb[i] = Gs[at((b0 + i), d)];
        }
#pragma unroll
        for (int rr = 0; rr < kSub; ++rr) {
          const int r = b0 + rr;
          // beta_r multiplies the row's dA' sum once and k_r once, not every pair's dA (dk's terms share k_c D).
          const float qr = Qs[at(r, d)], br = beta_s[r], bkr = br * kb[rr];
          float dq = 0.0f, dk = 0.0f, ex = 0.0f, x[kSub];
#pragma unroll
          for (int cc = rr; cc >= 0; --cc) {
            const int c = b0 + cc;
            const float D = ex2(ex);
            const float wm = dMs[pair_at(r, c)], wa = dAs[pair_at(r, c)], kc = kb[cc], kcd = kc * D;
            dq = fmaf(wm, kcd, dq);
            dk = fmaf(wa, kcd, dk);
            const float z = fmaf(wa, bkr, wm * qr) * D;
            col[cc] += z;
            x[cc] = z * kc;  // the pair's log-decay coefficient, for every s in c+1 .. r
            ex += gb[cc];
          }
          DQ[at(r, d)] += dq;
          DK[at(r, d)] += br * dk;
          float pre = 0.0f;
#pragma unroll
          for (int cc = 0; cc < rr; ++cc) {
            pre += x[cc];
            dgp[cc + 1] += pre;
          }
        }
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          DK[at((b0 + i), d)] += col[i];
          DG[at((b0 + i), d)] += dgp[i];
        }
      }
      // Block pairs I > J through the reference points: D[r, c] = a_r P_IJ e_c, a_r = exp2(sum of g from the start
      // of I to r) (table in Xs), e_c = exp2(sum from c + 1 to the end of J), P_IJ = the blocks strictly between,
      // every factor <= 1. Per pair: rq = dM_IJ (K e)_J, rk = dA'_IJ (K e)_J (row side, a row r at a time),
      // ck = dM_IJ^T (Q a)_I + dA'_IJ^T (K a)_I (column side, in registers); the log-decay coefficients reach the
      // spanned tokens as a suffix over r in I (row side), a prefix over c in J (column side) and, for the tokens
      // strictly between J and I, the pair's whole sum: sums of terms, never differences.
      float pblk[kSubBlocks];
#pragma unroll
      for (int blk = 0; blk < kSubBlocks; ++blk) {
        float acc = 0.0f;
        for (int i = 0; i < kSub; ++i) {
          const int t = kSub * blk + i;
          acc += Gs[at(t, d)];
          Xs[t * K + d] = ex2(acc);
        }
        pblk[blk] = ex2(acc);
      }
#pragma unroll 1
      for (int J = 0; J < kSubBlocks - 1; ++J) {
        const int c0 = kSub * J;
        float ke[kSub], ev[kSub];
        {
          float acc = 0.0f;
#pragma unroll
          for (int i = kSub - 1; i >= 0; --i) {
            ev[i] = ex2(acc);
            ke[i] = Ks[at((c0 + i), d)] * ev[i];
            acc += Gs[at((c0 + i), d)];
          }
        }
#pragma unroll 1
        for (int I = J + 1; I < kSubBlocks; ++I) {
          const int r0 = kSub * I;
          float pij = 1.0f;
          for (int bb = J + 1; bb < I; ++bb) pij *= pblk[bb];
          float ck[kSub];
#pragma unroll
          for (int i = 0; i < kSub; ++i) ck[i] = 0.0f;
          float suffix = 0.0f;
          // a_r one row ahead: the table is global scratch, mostly an L2 round trip away (ncu, session 24: 14% of
          // P4's stall samples waited on it where each row loaded its own).
          float ar_next = Xs[(r0 + kSub - 1) * K + d];
          for (int rr = kSub - 1; rr >= 0; --rr) {  // rows from the block's end: the suffix over r >= s
            const int r = r0 + rr;
            const float ar = ar_next;
            if (rr > 0) ar_next = Xs[(r - 1) * K + d];
            const float qr = Qs[at(r, d)], kr = Ks[at(r, d)], br = beta_s[r];
            const float qa = qr * ar, bka = br * kr * ar;  // beta_r once a row, not on every dA (as above)
            float rq = 0.0f, rk = 0.0f;
#pragma unroll
            for (int cc = 0; cc < kSub; ++cc) {
              const float wm = dMs[pair_at(r, c0 + cc)], wa = dAs[pair_at(r, c0 + cc)];
              rq = fmaf(wm, ke[cc], rq);
              rk = fmaf(wa, ke[cc], rk);
              ck[cc] = fmaf(wm, qa, fmaf(wa, bka, ck[cc]));
            }
            const float sc = ar * pij;
            rq *= sc;
            rk *= br * sc;
            DQ[at(r, d)] += rq;
            DK[at(r, d)] += rk;
            suffix += qr * rq + kr * rk;
            DG[at(r, d)] += suffix;
          }
          // The pair's whole sum (suffix now covers every r in I) for the tokens strictly between J and I.
          for (int t = c0 + kSub; t < r0; ++t) DG[at(t, d)] += suffix;
          float prefix = 0.0f;
#pragma unroll
          for (int cc = 0; cc < kSub; ++cc) {
            const int c = c0 + cc;
            DG[at(c, d)] += prefix;
            const float z = ck[cc] * ev[cc] * pij;
            DK[at(c, d)] += z;
            prefix += Ks[at(c, d)] * z;
          }
        }
      }
    } else {
      // ---- P5a, on the warps P4 leaves idle (threads K .. 255), concurrently with it: per row, the parts of dbeta
      // that do not wait for P4 (rowsum(dA . A') + rowsum(dBV . V), into row_s) and dv = beta dBV. The loads of kRB
      // rows (v as raw bits, dBV, A') first, then the rows' sums and stores (the compiler cannot know that dv aliases
      // nothing here): a round trip per kRB rows, not per row (ncu: v's loads were 7.5% of the stall samples, a row
      // at a time). kRB (2 CV + kC / 32) = 40 registers at V = 128; kRB = 8 spilled (K = 128). ncu on gradpf had the
      // barrier after P4 at 13.5% of the stall samples and P5's loads in the phase after it.
      constexpr int kFirst = K / 32, kWarps = kThreads / 32 - K / 32, CV = V / 32, CA = kC / 32, kRB = 4;
      for (int rb = warp - kFirst; rb < L; rb += kWarps * kRB) {
        uint32_t vraw[kRB][CV];
        float x[kRB][CV], ap[kRB][CA];
#pragma unroll
        for (int i = 0; i < kRB; ++i) {
          const int r = rb + kWarps * i;
          if (r < L) {
            const int64_t vb = b * p.v.stride[0] + (t0 + r) * p.v.stride[1] + hv * p.v.stride[2];
            load_bits_strided(vraw[i], p.v.data, Spec::dt(p.v.dtype), vb + lane * Spec::cs(p.v.stride[3]),
                              32 * Spec::cs(p.v.stride[3]));
#pragma unroll
            for (int j = 0; j < CV; ++j) x[i][j] = BV[r * V + 32 * j + lane];
#pragma unroll
            for (int m = 0; m < CA; ++m) {
              const int c = lane + 32 * m;
              ap[i][m] = c < r ? Ap[r * kC + c] : 0.0f;
            }
          }
        }
#pragma unroll
        for (int i = 0; i < kRB; ++i) {
          const int r = rb + kWarps * i;
          if (r < L) {
            const int64_t t = t0 + r;
            const int64_t dvb = b * bp.dv.stride[0] + t * bp.dv.stride[1] + hv * bp.dv.stride[2];
            float vv[CV];
            bits_to_float(vv, vraw[i], Spec::dt(p.v.dtype));
            float s = 0.0f;
#pragma unroll
            for (int m = 0; m < CA; ++m) {
              const int c = lane + 32 * m;
              if (c < r) s = fmaf(dAs[pair_at(r, c)], ap[i][m], s);
            }
#pragma unroll
            for (int j = 0; j < CV; ++j) s = fmaf(x[i][j], vv[j], s);
            s = group_sum<32>(s);
            if (lane == 0) row_s[r] = s;
            if (bp.dv.data) {
#pragma unroll
              for (int j = 0; j < CV; ++j)
                store_out(bp.dv.data, Spec::dt(bp.dv.dtype), dvb + (32 * j + lane) * Spec::cs(bp.dv.stride[3]),
                          beta_s[r] * x[i][j]);
            }
          }
        }
      }
    }
    __syncthreads();
    prefetch_task<K, V>(p, ws, bl, list, count, task + gridDim.x);

    // ---- P5b: per row (a warp each): dbeta = row_s + rowsum(dBK . K . E) (P4's TB), through the sigmoid.
    for (int r = warp; r < L; r += kThreads / 32) {
      const int64_t t = t0 + r;
      float tb[CK];
#pragma unroll
      for (int j = 0; j < CK; ++j) tb[j] = TB[r * K + 32 * j + lane];
      const float braw =
          p.beta_is_logits
              ? load_f(p.beta.data, Spec::dt(p.beta.dtype),
                       b * p.beta.stride[0] + t * p.beta.stride[1] + hv * p.beta.stride[2])
              : 0.0f;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < CK; ++j) s += tb[j];
      s = group_sum<32>(s) + row_s[r];
      if (lane == 0 && bp.dbeta.data) {
        if (p.beta_is_logits) s *= (p.allow_neg_eigval ? 2.0f : 1.0f) * sigmoid_grad(braw);
        store_out(bp.dbeta.data, Spec::dt(bp.dbeta.dtype),
                  b * bp.dbeta.stride[0] + t * bp.dbeta.stride[1] + hv * bp.dbeta.stride[2], s);
      }
    }

    // ---- P6: per channel, dq_hat / dk_hat of this value head, dg through the activation, the gate partials. Every
    // thread: channel tid % K, rows tid / K + R i (R = 256 / K row groups); the groups' partial sums meet in a fixed
    // order (deterministic). g's raw bits for all of the thread's rows are loaded first and parked in dM / dA's shared
    // memory ([C][K] of them: free after P4 and P5a; not Gs, which P6's partial sums overwrite while other threads
    // still read; each thread reads back only its own slots), converted where used: one round trip for them instead
    // of one per row behind its stores (ncu: g's loads were 7.1% of the stall samples), without registers held
    // across the stores (g's bits kept in registers spilled at K = 128). Everything else it reads is shared memory.
    constexpr int R = kThreads / K, kRows = kC / R;
    static_assert(K <= 2 * kC, "P6: g's bits [C][K] must fit in dM and dA");
    {
      uint32_t* const gbits = reinterpret_cast<uint32_t*>(dMs);
      const int d = tid % K, r0 = tid / K;
      const float bias = gated ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] +
                                                                          d * p.dt_bias.stride[1]]
                               : 0.0f;
      {
        uint32_t graw[kRows];
        const int nr = (L - r0 + R - 1) / R;  // rows r0 + R i < L (L - r0 + R - 1 >= 0: r0 < R)
        load_bits_strided(graw, p.g.data, Spec::dt(p.g.dtype),
                          b * p.g.stride[0] + (t0 + r0) * p.g.stride[1] + hv * p.g.stride[2] +
                              d * Spec::cs(p.g.stride[3]),
                          R * p.g.stride[1], nr);
#pragma unroll
        for (int i = 0; i < kRows; ++i)
          if (i < nr) gbits[(r0 + R * i) * K + d] = graw[i];
      }
      double acc_bias = 0.0, acc_a = 0.0;
      for (int r = r0; r < L; r += R) {
        const int64_t t = t0 + r, bt = b * p.T + t;
        const float dq = DQ[at(r, d)], dk = DK[at(r, d)], dgl = DG[at(r, d)];
        const float g = bits_to_float(gbits[r * K + d], Spec::dt(p.g.dtype));
        if (p.group > 1) {  // summed over the group by finalize_qk_kernel; a group of one: P7
          dqk[(bt * p.HV + hv) * K + d] = dq;
          dqk[((p.B * p.T + bt) * p.HV + hv) * K + d] = dk;
        }
        const float glog = gate_mode == KDA_GATE_SOFTPLUS  // gate_grad reads it for softplus only
                               ? gate_log_decay<float>(gate_mode, g, has_a, a_log, bias, p.lower_bound)
                               : 0.0f;
        float dx, dA;
        gate_grad(p, gate_mode, g + bias, ea, has_a, glog, dgl, &dx, &dA,
                  [](float z) { return sigmoid_grad_fast(z); });
        if (bp.dg.data)
          store_out(bp.dg.data, Spec::dt(bp.dg.dtype),
                    b * bp.dg.stride[0] + t * bp.dg.stride[1] + hv * bp.dg.stride[2] + d * Spec::cs(bp.dg.stride[3]),
                    dx);
        acc_bias += dx;
        acc_a += dA;
      }
      double* const red = reinterpret_cast<double*>(Gs);  // Gs is free after P4: [2][R][K] doubles
      red[r0 * K + d] = acc_bias;
      red[(R + r0) * K + d] = acc_a;
    }
    __syncthreads();
    if (tid < K) {
      const double* const red = reinterpret_cast<const double*>(Gs);
      double sb = 0.0;
      for (int i = 0; i < R; ++i) sb += red[i * K + tid];
      part[tid] = sb;
    }
    if (warp == kThreads / 32 - 1) {  // dA_log's partial: the last warp sums every channel's, in a fixed order
      const double* const red = reinterpret_cast<const double*>(Gs) + R * K;
      double sa = 0.0;
      for (int e = lane; e < R * K; e += 32) sa += red[e];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sa += __shfl_xor_sync(0xffffffffu, sa, o);
      if (lane == 0) part[K] = sa;
    }
    if (p.group == 1) {
      // ---- P7: per row (a warp each), a group of one value head: dq and dk through the L2 norm's backward straight
      // into the gradients, what finalize_qk_kernel does with the dqk round trip (the same operations in the same
      // order: the same bits), here from shared memory: q_hat, k_hat and 1 / |x| of P0, dq_hat / dk_hat of P4.
      for (int r = warp; r < L; r += kThreads / 32) {
        const int64_t t = t0 + r;
#pragma unroll 1
        for (int which = 0; which < 2; ++which) {
          const float* const xs = which == 0 ? Qs : Ks;
          float d[CK];
#pragma unroll
          for (int j = 0; j < CK; ++j) {
            const int c = at(r, 32 * j + lane);
            d[j] = which == 0 ? DQ[c] : DK[c];
          }
          if (p.use_qk_l2norm) {
            float xv[CK];
#pragma unroll
            for (int j = 0; j < CK; ++j) xv[j] = xs[at(r, 32 * j + lane)];
            l2_norm_backward(xv, norm_s[which * kC + r], d);
          }
          const GradView& gv = which == 0 ? bp.dq : bp.dk;
          const int64_t base = b * gv.stride[0] + t * gv.stride[1] + h * gv.stride[2];
#pragma unroll
          for (int j = 0; j < CK; ++j)
            store_out(gv.data, Spec::dt(gv.dtype), base + (32 * j + lane) * Spec::cs(gv.stride[3]), d[j]);
        }
      }
    }
    __syncthreads();  // the next task restages every shared buffer
  }
}

template <int K, int V, class Spec>
cudaError_t launch_spec(const BackwardParams& bp, char* ws, int sms, cudaStream_t s) {
  const size_t bytes = GradLayout<K, V>::kBytes;
  const auto kernel = grad_kernel<K, V, Spec>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes)) != cudaSuccess) return e;
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  kernel<<<static_cast<unsigned>(grad_grid(bl.grad_ctas, sms, per_sm)), kThreads, bytes, s>>>(bp, ws);
  return cudaSuccess;
}

template <int K, int V>
cudaError_t launch(const BackwardParams& bp, char* ws, int sms, cudaStream_t s) {
  return with_io_spec(grad_io_fast(bp), bp.f.gate_mode,
                      [&](auto spec) { return launch_spec<K, V, decltype(spec)>(bp, ws, sms, s); });
}

}  // namespace

bool grad_io_fast(const BackwardParams& bp) {
  const ForwardParams& p = bp.f;
  const auto out = [](const GradView& g) {
    return g.data == nullptr || (g.dtype == KDA_DTYPE_BFLOAT16 && g.stride[3] == 1);
  };
  // dq / dk: chunk_grad_tc.cu's finishing stores bf16 pairs, every term of a row's element offset even.
  const auto pairs = [&](const GradView& g) {
    return out(g) && (g.data == nullptr || ((g.stride[0] | g.stride[1] | g.stride[2]) & 1) == 0);
  };
  const bool beta = p.beta.dtype == KDA_DTYPE_BFLOAT16 &&
                    (bp.dbeta.data == nullptr || bp.dbeta.dtype == KDA_DTYPE_BFLOAT16);
  return io_fast(p.q) && io_fast(p.k) && io_fast(p.v) && io_fast(p.g) && beta && pairs(bp.dq) && pairs(bp.dk) &&
         out(bp.dv) && out(bp.dg);
}

size_t grad_smem_bytes(int K, int V) {
  return dispatch_kn<64, 128>(K, V, [](auto k, auto v) {
    return GradLayout<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_grad(const BackwardParams& bp, char* ws, int sms, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value>(bp, ws, sms, s);
  });
}

}  // namespace kda::cuda::chunk
