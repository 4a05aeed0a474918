// grad_tc_task.cuh: one task of the chunked backward's tensor-core gradient pass (docs/backward.md, "The gradient pass
// in fragment layout": kernel A, launch 5), run before chunk_grad.cu. For a tame chunk (every token's decay >=
// 2^-kTameBits in every channel: always, for the bounded gate) and one 64-channel half of a value head, dq_hat, dk_hat
// and d g_log of every token, with every term in mma accumulators or elementwise beside them:
//   dq = QS . E + (dM . D) K                                           (row side)
//   dk = beta BK . E + KD . Esuf + (dA' . D) K + (dM^T . D) Q + (dA'^T . D) K   (row side, then the column side)
//   dGam = q dq - k (dk_col + KD . Esuf) + k (dk_row + beta BK . E),   dGam_C += CS . E_C + colsum(k . KD . Esuf)
//   dg = the reverse sum of dGam over the chunk (the difference form: exact enough where no token decays steeply)
// with E = 2^Gam, Esuf = 2^(Gam_C - Gam), Gam the cumulated log2 decays. The results overwrite the task's QS, BK and
// KD tiles in place (each element read, then written, by the one lane that owns it), with dbeta's third term,
// rowsum(BK . K . E), as row sums per 32 channels (ProdLayout TBrow), and copies the chunk's tame flag (Tame) from
// phase 1's saves (chunk_prepare.cu: with the rows' inverse L2 norms, what needs every channel of a row);
// chunk_grad_rows.cu then finishes the task (dbeta, dv, the L2 norms' and the gate's backward). Where
// grad_tc_finishes_qk says so (a group of one value head, any gradient dtype or layout; at K = 128 a 2-CTA cluster
// on sm_90, the halves exchanging their rows' partial dots through distributed shared memory), this pass writes dq
// and dk through the L2 norm's backward itself instead of dq_hat / dk_hat over QS / BK: their fp32 tiles' write and
// read and q / k's second read (~128 KB a task at K = V = 128) leave the backward. A steep chunk's tiles this pass
// leaves as they are, for chunk_grad.cu's spanning sums. Its index math, lane by lane, is scripts/models/
// grad_fragments.py's fragment_pass (equal to the direct sums in float64; python/tests/test_grad_fragments.py).
//
// A CTA per (chunk, value head, 64-channel half), 8 warps: warp w owns the 16 rows of block w / 2 and the half's 32
// channels 32 (w % 2) .. +31 (4 n8 tiles, 48 accumulator registers). Shared memory: q_hat, k_hat and the cumulated
// log2 decays of the half, dM and dA (84 KB): two CTAs an SM at <= 128 registers a thread, twice the warps of
// chunk_grad.cu's one 230 KB CTA.
//
// grad_tc_kernel (chunk_grad_tc.cu) runs a (task, half) a CTA; the gradient pipe (chunk_grad_pipe.cu) runs a task's
// halves as one ticket of a 2-CTA cluster.
#pragma once

#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk::grad_tc {

constexpr int kThreads = 256;
constexpr int kC = kChunk;
constexpr int kHalf = 64;  // channels a CTA
constexpr int kNT = 4;     // n8 tiles a warp: 2 warps a block x 32 channels

struct TcLayout {  // float offsets into shared memory
  static constexpr int kQ = 0, kK = kQ + kC * kHalf, kG = kK + kC * kHalf, kM = kG + kC * kHalf, kA = kM + kC * kC;
  static constexpr int kBeta = kA + kC * kC, kTot = kBeta + kC;  // tot [kSubBlocks][2][kHalf]: the blocks' totals
  static constexpr int kCs = kTot + kSubBlocks * 2 * kHalf;        // the half's CS [kHalf], for dg's chunk-end term
  // The rows' partial dots q_hat . dq_hat, k_hat . dk_hat over each warp's 32 channels [2 warps][q, k][kC] (finishing
  // dq / dk here); kRecv: the other half's, sent by it (HalfPair); kBar: the mbarrier they complete on.
  static constexpr int kPart = kCs + kHalf, kRecv = kPart + 4 * kC, kBar = kRecv + 4 * kC;
  static constexpr size_t kBytes = sizeof(float) * kBar + sizeof(uint64_t);
  static_assert(kPart % 4 == 0 && kRecv % 4 == 0 && kBar % 2 == 0, "grad_tc: the bulk copy's 16-byte alignment");
  // The swizzles of chunk_grad.cu's arrays (mma_layout.h; a pitch of 64 keeps their conflict-free reads).
  static __device__ __forceinline__ int at(int r, int d) { return r * kHalf + (d ^ grad_col_swizzle(r)); }
  static __device__ __forceinline__ int pair_at(int r, int c) { return r * kC + (c ^ grad_pair_swizzle(r)); }
};

// The K = 128 halves of a task as a cluster of two CTAs (sm_90; launched only where grad_tc_finishes_qk says so, so
// the other compilation passes trap). Each half sends its rows' partial dots to the other by one bulk copy into the
// other's shared memory (TcLayout kRecv), completing on the receiver's mbarrier (kBar), where two cluster barriers
// and reads of the partner's shared memory were (session 69's profile: their release arrive, a MEMBAR, 3.1% of
// grad_tc's stall samples, their wait 2.4%). What is left of the cluster barrier is one relaxed arrive / wait pair
// that publishes the mbarriers' initialization before either copy. The same bits; measured (session 71, H100): the
// backward -0.5% at train-h64-fixed, -0.4% at train-h96-fixed. One use a CTA (parity 0): a CTA runs one task.
struct HalfPair {
  static constexpr uint32_t kBytes = 4 * kC * sizeof(float);  // [2 warps][q, k][kC]
  static __device__ __forceinline__ uint32_t at(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
  }
  // Every thread, early: thread 0 sets up the mbarrier (one arrival, its own, with the bytes the partner sends), then
  // the relaxed cluster arrive that publishes it.
  static __device__ __forceinline__ void begin(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(at(bar)) : "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(at(bar)), "r"(kBytes) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
    __trap();
#endif
  }
  // Every writer of part, after its stores: they become visible to the async proxy (the bulk copy that reads them).
  static __device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
    __trap();
#endif
  }
  // Every thread, once part is written (each writer's stores fenced for the async proxy, then a CTA barrier): the
  // cluster wait (the partner's mbarrier is set up), then thread 0 copies part into the partner's recv.
  static __device__ __forceinline__ void send(const float* part, const float* recv, const uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x == 0) {
      uint32_t rank, dst, dst_bar;
      asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
      asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(at(recv)), "r"(rank ^ 1));
      asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst_bar) : "r"(at(bar)), "r"(rank ^ 1));
      asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
                       "r"(dst), "r"(at(part)), "r"(kBytes), "r"(dst_bar)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
#else
    __trap();
#endif
  }
  // Every thread: until the partner's partials have landed in recv.
  static __device__ __forceinline__ void receive(const uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra WAIT;\n}" ::"r"(
            at(bar))
        : "memory");
#else
    __trap();
#endif
  }
  // Thread 0, before the CTA's end: its copy has read part (the partner's own receive keeps the partner alive until
  // it lands).
  static __device__ __forceinline__ void end() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#else
    __trap();
#endif
  }
};

// One (task, half) (grad_tc_kernel's CTA x, or a stage ticket of the gradient pipe): x = task H + half; smem the CTA's
// dynamic shared memory (TcLayout's bytes). bl: the workspace's layout, formed on the host (each thread forming it was
// 2% of this kernel's instructions). kQk: dq and dk finished here (grad_tc_finishes_qk: H = HV), else dq_hat / dk_hat
// over QS / BK.
template <int K, int V, class Spec, bool kQk>
__device__ __forceinline__ void grad_tc_task(const BackwardParams& bp, char* ws, const BackwardLayout& bl, unsigned x,
                                             float* smem) {
  using Ly = TcLayout;
  constexpr int CH = kHalf / 32, H = K / kHalf;
  static_assert(H == 1 || H == 2, "grad_tc_kernel: one CTA or a pair a task");
  static_assert(K % kHalf == 0 && kThreads == 256 && kSubBlocks == 4, "grad_tc_kernel: 8 warps = 4 blocks x 2");
  const ForwardParams& p = bp.f;
  float* const Qs = smem + Ly::kQ;  // q_hat of the half [C][64]
  float* const Ks = smem + Ly::kK;  // k_hat
  float* const Gc = smem + Ly::kG;  // g_log in log2 units, then cumulated over the rows
  float* const dMs = smem + Ly::kM;
  float* const dAs = smem + Ly::kA;  // not scaled by beta
  float* const beta_s = smem + Ly::kBeta;
  float* const tot = smem + Ly::kTot;
  float* const cs_s = smem + Ly::kCs;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = lane >> 2, tig = lane & 3;
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
  const int64_t task = x / H;
  const int half = static_cast<int>(x % H);
  const int64_t ci = task / p.HV;
  if (ci >= count) return;
  const ChunkRec rec = reinterpret_cast<const ChunkRec*>(ws + bl.fwd.list)[ci];
  const int hv = static_cast<int>(task % p.HV), h = hv / p.group, L = rec.len;
  const int64_t b = p.has_cu_seqlens() ? 0 : rec.seq, t0 = rec.start;
  const ProdLayout pl{K, V};
  float* const prod = reinterpret_cast<float*>(ws + bl.prod) + task * pl.floats();
  // The chunk's tame flag, from phase 1 (chunk_prepare.cu BackwardSaves), which holds every channel of a row; copied
  // to the product tile for chunk_grad.cu and chunk_grad_rows.cu. A steep chunk's tiles this pass leaves whole, for
  // chunk_grad.cu's spanning sums.
  const int tame = reinterpret_cast<const int*>(ws + bl.tame)[task];
  if (half == 0 && tid == 0) reinterpret_cast<int*>(prod)[pl.Tame()] = tame;
  if (!tame) return;
  constexpr bool kPair = kQk && H == 2;  // the partner CTA holds the other half's partial dots
  [[maybe_unused]] uint64_t* const bar = reinterpret_cast<uint64_t*>(smem + Ly::kBar);
  if constexpr (kPair) HalfPair::begin(bar);

  // ---- Stage: warp w rows w + 8 i, lanes the half's channels kHalf half + lane + 32 j. The rows' inverse L2 norms
  // come from phase 1 too (BackwardSaves norms, the forward's own values): each half loads and activates only its
  // own channels. (Staging whole rows, for the norms and the tame test, was ~42% of this kernel's stall samples and
  // the norms' butterflies 12% alone: session 40's profile, docs/backward.md.) Rows past L are zeros.
  const bool has_a = p.has_A_log();
  const kda_gate_mode_t gate_mode = Spec::gate(p.gate_mode);
  const bool gated = gate_mode != KDA_GATE_LOG_DECAY, bounded = gate_mode == KDA_GATE_BOUNDED;
  const float a_log = has_a ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
  const float ea = has_a ? expf(a_log) : 1.0f, lb2 = p.lower_bound * kLog2e;
  const float* const inv_norms =
      p.use_qk_l2norm ? reinterpret_cast<const float*>(ws + bl.norms) + task * int64_t{2 * kC} : nullptr;
  const int c0 = kHalf * half + lane;  // the lane's first channel in the value head
  float bias[CH];
#pragma unroll
  for (int j = 0; j < CH; ++j)
    bias[j] = gated ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] +
                                                               (c0 + 32 * j) * p.dt_bias.stride[1]]
                    : 0.0f;
  // RW rows a warp, all their loads issued at once and first, ahead of dM / dA's copies and the L2 prefetches, which
  // they queued behind (128 registers, no spill). Session 42, train-h64-fixed backward: -60 us; all 8 at once without
  // the reordering +26 us (so was it, +0.2 ms, with 4 channels of whole rows a lane: session 34).
  constexpr int RW = kC / (kThreads / 32);
  uint32_t qr[RW][CH], kr[RW][CH], gr[RW][CH], br[RW];
  float iq[RW], ik[RW];
  RowOffsets<Spec> ro(p, b, t0 + warp, h, hv, c0, kThreads / 32);  // row r's, stepped a row at a time
#pragma unroll
  for (int i = 0; i < RW; ++i, ro.next()) {
    const int r = warp + (kThreads / 32) * i;
    iq[i] = ik[i] = 1.0f;
    if (r < L) {
      load_row_bits<Spec>(p, ro, qr[i], kr[i], gr[i], br[i]);
      if (inv_norms) {
        iq[i] = inv_norms[r];
        ik[i] = inv_norms[kC + r];
      }
    }
  }
  {  // dM and dA (masked, zero past L): 16-byte cp.async copies behind the rows' loads, landing while those convert
    const float* const src = prod + pl.dM();
    static_assert(Ly::kA == Ly::kM + kC * kC, "dM and dA must be adjacent in shared memory");
    // A thread's 16-byte group: row tid / 16 + 16 i, columns 4 (tid % 16) ..; the swizzle has period 8 in the row
    // (test_mma_layout.cpp), so one destination offset serves every i (its per-copy index math was 3% of this
    // kernel's instructions, session 43's profile).
    constexpr int kStep = kThreads / (kC / 4);  // rows a pass of the CTA copies
    static_assert(kStep % 8 == 0 && (2 * kC) % kStep == 0, "grad_tc_kernel: dM / dA copy passes");
    float* const dst = dMs + Ly::pair_at(tid / (kC / 4), 4 * (tid % (kC / 4)));
#pragma unroll
    for (int i = 0; i < 2 * kC / kStep; ++i) cp_async16(dst + i * kStep * kC, src + 4 * tid + i * kStep * kC);
    // The half's CS too: read once, at the very end (dg's tail), where its load from global memory stalled 3% of
    // the samples (session 40's profile).
    if (tid < kHalf / 4) cp_async16(cs_s + 4 * tid, prod + pl.CS() + kHalf * half + 4 * tid);
    cp_async_commit();
  }
  // The half's QS, KD, BK rows (2 lines of 128 bytes a row and tile) to L2 for the epilogue: the products kernel wrote
  // them long before, mostly out of L2 by now.
  for (int i = tid; i < 6 * kC; i += kThreads) {
    const int r = i % kC, a = i / kC;
    prefetch_l2(prod + pl.QS() + (a >> 1) * int64_t{kC} * K + r * K + kHalf * half + 32 * (a & 1));
  }

#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int r = warp + (kThreads / 32) * i;
#pragma unroll
    for (int j = 0; j < CH; ++j) {
      float q = 0.0f, k = 0.0f, gl = 0.0f;
      if (r < L) {
        q = bits_to_float(qr[i][j], Spec::dt(p.q.dtype)) * iq[i];
        k = bits_to_float(kr[i][j], Spec::dt(p.k.dtype)) * ik[i];
        const float graw = bits_to_float(gr[i][j], Spec::dt(p.g.dtype));
        gl = bounded ? bounded_gate_log2(graw + bias[j], ea, lb2)
                     : gate_log_decay<float>(gate_mode, graw, has_a, a_log, bias[j], p.lower_bound) * kLog2e;
      }
      const int o = Ly::at(r, 32 * j + lane);
      Qs[o] = q;
      Ks[o] = k;
      Gc[o] = gl;
    }
  }
  {  // beta: lane i < RW activates row warp + 8 i's, once a warp, not once a row by the warp's 32 lanes (~34
     // instructions a row, the sigmoid's IEEE division: 5% of this kernel's, session 43's profile)
    uint32_t bb = br[0];
#pragma unroll
    for (int i = 1; i < RW; ++i) bb = lane == i ? br[i] : bb;
    const int r = warp + (kThreads / 32) * lane;
    if (lane < RW)
      beta_s[r] = r < L ? beta_activation<float>(bits_to_float(bb, Spec::dt(p.beta.dtype)), p.beta_is_logits,
                                                 p.allow_neg_eigval)
                        : 0.0f;
  }
  cp_async_wait<0>();
  __syncthreads();
  if (tid < kHalf) {  // Gam: the log2 decays cumulated over the rows, a thread a channel (16 loads, then the adds)
    float acc = 0.0f;
#pragma unroll 1
    for (int r0 = 0; r0 < kC; r0 += kSub) {
      float x[kSub];
#pragma unroll
      for (int i = 0; i < kSub; ++i) x[i] = Gc[Ly::at(r0 + i, tid)];
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
        acc += x[i];
        Gc[Ly::at(r0 + i, tid)] = acc;
      }
    }
  }
  __syncthreads();

  // ---- The pair products (chunk_grad.cu's session-33 form, one block a warp): the row side
  //   rq[r] = dM[r, :] Kb,  rk[r] = dA[r, :] Kb,  Kb[c] = k_c 2^(Gam_m - Gam_c)   (columns of blocks 0 .. I)
  // and the column side
  //   ck[c] = dM[:, c]^T Qa + dA[:, c]^T (beta K)a,  Qa[r] = q_r 2^(Gam_r - Gam_m)   (rows of blocks I .. 3)
  // with m the block's reference token (its 8th): every factor <= 1 outside the block, within 2^64 inside it (tame).
  // dM is lower, dA strictly lower (chunk_products.cu): no mask. Each k-step's three products into a fresh accumulator
  // added in fp32 (the tensor cores' accumulation is not round-to-nearest; bench/LEDGER.md, session 23).
  const int I = warp >> 1, rb = kSub * I, m = rb + kSub / 2 - 1, n0 = 32 * (warp & 1);
  float gmb[kNT], gmc[kNT][2];  // Gam_m of the channels this lane's B operands and accumulators hold
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    gmb[n] = Gc[Ly::at(m, n0 + 8 * n + grp)];
    gmc[n][0] = Gc[Ly::at(m, n0 + 8 * n + 2 * tig)];
    gmc[n][1] = Gc[Ly::at(m, n0 + 8 * n + 2 * tig + 1)];
  }
  float rq[kNT][4], rk[kNT][4], ck[kNT][4];
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) rq[n][i] = rk[n][i] = ck[n][i] = 0.0f;
  // The fragments' offsets, formed once: both swizzles have period 8 in the row (test_mma_layout.cpp) and a k-step
  // moves 8 rows, so an element's offset is its k-step 0's + 8 rows a k-step, not the XOR index math per element and
  // k-step (sm_90a k-step bodies 197 -> 184 and 237 -> 226 instructions, -2.4% of the kernel's executed: session 44).
  // A row's 8 more rows share its swizzle (an immediate offset), as do Qs / Ks / Gc and dM / dA (adjacent arrays).
  int ob[kNT][2];  // B: row tig + 4 j, channel n0 + 8 n + grp of Qs / Ks / Gc
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j) ob[n][j] = Ly::at(tig + 4 * j, n0 + 8 * n + grp);
  {  // the row side: A = dM / dA rows rb + grp (+8), column c0 + x (x = tig, tig + 4) of a k-step's 8 columns at
     // c0 (a multiple of 8): (c0 + x) ^ s = (c0 ^ (s & ~7)) + (x ^ (s & 7)), the swizzle's high bits permuting the
     // row's k-steps
    const int s = grad_pair_swizzle(rb + grp), sh = s & ~7, a0 = (rb + grp) * kC + (tig ^ (s & 7)),
              a1 = (rb + grp) * kC + ((tig + 4) ^ (s & 7));
#pragma unroll 1
    for (int ks = 0; ks < 2 * (I + 1); ++ks) {  // k-steps of 8 columns
      const int c0 = 8 * ks, ca = c0 ^ sh, oa[2] = {a0 + ca, a1 + ca};
      uint32_t mh[4], ml[4], ah[4], al[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // a_i: row rb + grp + 8 (i & 1), column c0 + tig + 4 (i >> 1)
        const int o = oa[i >> 1] + 8 * kC * (i & 1);
        split(dMs[o], mh[i], ml[i]);
        split(dAs[o], ah[i], al[i]);
      }
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        uint32_t bh[2], blo[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // b_j: row (token) c0 + tig + 4 j, column (channel) n0 + 8 n + grp
          const int o = ob[n][j] + c0 * kHalf;
          split(Ks[o] * ex2(gmb[n] - Gc[o]), bh[j], blo[j]);
        }
        float pm[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma3(pm, mh, ml, bh, blo);
        mma3(pa, ah, al, bh, blo);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          rq[n][i] += pm[i];
          rk[n][i] += pa[i];
        }
      }
    }
  }
  {  // the column side: A = dM / dA transposed (A[c][r] = dM[r][c]): A row (dM column) rb + grp + 8 (i & 1), A column
     // (dM row) r0 + tig + 4 (i >> 1)
    int oa[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) oa[i] = Ly::pair_at(tig + 4 * (i >> 1), rb + grp + 8 * (i & 1));
#pragma unroll 1
    for (int ks = 2 * I; ks < kC / 8; ++ks) {
      const int r0 = 8 * ks;
      uint32_t mh[4], ml[4], ah[4], al[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int o = oa[i] + r0 * kC;
        split(dMs[o], mh[i], ml[i]);
        split(dAs[o], ah[i], al[i]);
      }
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        uint32_t qh[2], ql[2], kh[2], kl[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // b_j: row r0 + tig + 4 j, channel n0 + 8 n + grp
          const int o = ob[n][j] + r0 * kHalf;
          const float e = ex2(Gc[o] - gmb[n]);
          split(Qs[o] * e, qh[j], ql[j]);
          split(beta_s[r0 + tig + 4 * j] * Ks[o] * e, kh[j], kl[j]);
        }
        float pc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma3(pc, mh, ml, qh, ql);
        mma3(pc, ah, al, kh, kl);
#pragma unroll
        for (int i = 0; i < 4; ++i) ck[n][i] += pc[i];
      }
    }
  }

  // ---- Epilogue: accumulator element i = 2 hh + e is (row rb + grp + 8 hh, channel n0 + 8 n + 2 tig + e); the
  // exponent terms join elementwise, dq / dk go over QS / BK in place (kQk: they stay in registers for the L2 norm's
  // backward below), dGam is summed backwards inside the block by shuffles (the upper 8 rows first), the blocks'
  // totals meet in shared memory.
  float* const gQS = prod + pl.QS();
  float* const gKD = prod + pl.KD();
  float* const gBK = prod + pl.BK();
  const int dglob = kHalf * half + n0;  // the warp's first channel in the value head
  float keep[kNT][2][2];                // dGam's in-block suffix sums [n][e][hh]
  float tbr[2] = {0.0f, 0.0f};          // dbeta's third term over this lane's channels, rows rb + grp + 8 hh
  float2 dqv[kQk ? kNT : 1][2], dkv[kQk ? kNT : 1][2];  // kQk: dq_hat, dk_hat [n][hh]
  float pq[2] = {0.0f, 0.0f}, pk[2] = {0.0f, 0.0f};     // kQk: q_hat . dq_hat, k_hat . dk_hat over them [hh]
  // The exponent terms' operands, n8 tile n + 1's loaded before tile n's stores (which the compiler may not move them
  // above: the same arrays), so one tile's L2 latency hides behind the last one's arithmetic. All four tiles' at
  // once spill at 128 registers; two buffers cost 12.
  float2 qs[2][2], bk[2][2], kd[2][2];  // [n % 2][hh]
  const auto load_tile = [&](int n) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t off = int64_t{rb + grp + 8 * hh} * K + dglob + 8 * n + 2 * tig;
      qs[n % 2][hh] = *reinterpret_cast<const float2*>(gQS + off);
      bk[n % 2][hh] = *reinterpret_cast<const float2*>(gBK + off);
      kd[n % 2][hh] = *reinterpret_cast<const float2*>(gKD + off);
    }
  };
  load_tile(0);
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    if (n + 1 < kNT) load_tile(n + 1);
    float2 dq_out[2], dk_out[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int dl = n0 + 8 * n + 2 * tig + e;
      const float gend = Gc[Ly::at(kC - 1, dl)];
      float dgam[2], kdk = 0.0f;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = 2 * hh + e, r = rb + grp + 8 * hh, o = Ly::at(r, dl);
        const float gr = Gc[o], a = ex2(gr - gmc[n][e]), bb = ex2(gmc[n][e] - gr);
        const float E = ex2(gr), Esuf = ex2(gend - gr), br = beta_s[r], kv = Ks[o], qv = Qs[o];
        const float2 qt = qs[n % 2][hh], bt = bk[n % 2][hh], kt = kd[n % 2][hh];
        const float qsv = e ? qt.y : qt.x, bkv = e ? bt.y : bt.x, kdv = e ? kt.y : kt.x;
        const float dq = qsv * E + a * rq[n][i];
        const float kg = br * bkv * E, kdd = kdv * Esuf, dkr = br * (a * rk[n][i]), dkc = bb * ck[n][i];
        const float dk = (kg + kdd) + (dkr + dkc);
        (e ? dq_out[hh].y : dq_out[hh].x) = dq;
        (e ? dk_out[hh].y : dk_out[hh].x) = dk;
        if constexpr (kQk) {
          pq[hh] = fmaf(qv, dq, pq[hh]);
          pk[hh] = fmaf(kv, dk, pk[hh]);
        }
        dgam[hh] = qv * dq + kv * ((dkr + kg) - (dkc + kdd));
        kdk += kv * kdd;
        tbr[hh] += bkv * kv * E;
      }
#pragma unroll
      for (int hh = 1; hh >= 0; --hh)
#pragma unroll
        for (int off = 4; off < 32; off *= 2) {
          const float y = __shfl_down_sync(kFull, dgam[hh], off);
          if (lane + off < 32) dgam[hh] += y;
        }
      dgam[0] += __shfl_sync(kFull, dgam[1], tig);  // the upper rows' total (grp 0's suffix)
#pragma unroll
      for (int off = 4; off < 32; off *= 2) kdk += __shfl_xor_sync(kFull, kdk, off);
      keep[n][e][0] = dgam[0];
      keep[n][e][1] = dgam[1];
      if (grp == 0) {
        tot[(2 * I) * kHalf + dl] = dgam[0];  // the block's total
        tot[(2 * I + 1) * kHalf + dl] = kdk;
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if constexpr (kQk) {
        dqv[n][hh] = dq_out[hh];
        dkv[n][hh] = dk_out[hh];
      } else {
        const int64_t off = int64_t{rb + grp + 8 * hh} * K + dglob + 8 * n + 2 * tig;
        *reinterpret_cast<float2*>(gQS + off) = dq_out[hh];
        *reinterpret_cast<float2*>(gBK + off) = dk_out[hh];
      }
    }
  }
  float* const part = smem + Ly::kPart;  // grad_tc_dot_slot's [warp & 1][q, k][row]
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {  // the warp's 32 channels of each row, in a fixed order
    tbr[hh] += __shfl_xor_sync(kFull, tbr[hh], 1);
    tbr[hh] += __shfl_xor_sync(kFull, tbr[hh], 2);
    if constexpr (kQk) {
      pq[hh] += __shfl_xor_sync(kFull, pq[hh], 1);
      pq[hh] += __shfl_xor_sync(kFull, pq[hh], 2);
      pk[hh] += __shfl_xor_sync(kFull, pk[hh], 1);
      pk[hh] += __shfl_xor_sync(kFull, pk[hh], 2);
      if (tig == 0) {
        part[grad_tc_dot_slot(warp & 1, 0, rb + grp + 8 * hh)] = pq[hh];
        part[grad_tc_dot_slot(warp & 1, 1, rb + grp + 8 * hh)] = pk[hh];
      }
    }
  }
  // The rows' inverse norms, loaded before the cluster wait (HalfPair::send), which invalidates L1 (CCTL.IVALL).
  float nq[2] = {1.0f, 1.0f}, nk[2] = {1.0f, 1.0f};
  if (kQk && inv_norms) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      nq[hh] = inv_norms[rb + grp + 8 * hh];
      nk[hh] = inv_norms[kC + rb + grp + 8 * hh];
    }
  }
  [[maybe_unused]] float* const recv = smem + Ly::kRecv;
  if constexpr (kPair) {
    HalfPair::fence();  // part's stores, before the bulk copy reads them
    __syncthreads();
    HalfPair::send(part, recv, bar);
    HalfPair::receive(bar);
  } else {
    __syncthreads();
  }
  if constexpr (kQk) {
    // The rows' dots over the value head's channels, in the same order in both halves (the first half's two warps,
    // then the second's), and dq / dk through the L2 norm's backward, d <- (d - x_hat dot) / |x|, as
    // chunk_grad_rows.cu's; rows past L are not the task's.
    const float* const p0 = kPair && half == 1 ? recv : part;
    const float* const p1 = kPair ? (half == 0 ? recv : part) : nullptr;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = rb + grp + 8 * hh;
      float dot[2];
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        dot[w] = p0[grad_tc_dot_slot(0, w, r)] + p0[grad_tc_dot_slot(1, w, r)];
        if (kPair) dot[w] += p1[grad_tc_dot_slot(0, w, r)] + p1[grad_tc_dot_slot(1, w, r)];
      }
      pq[hh] = dot[0];
      pk[hh] = dot[1];
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
    if (tig == 0) prod[pl.TBrow() + (2 * half + (warp & 1)) * kC + rb + grp + 8 * hh] = tbr[hh];
  if constexpr (kQk) {
    // The bf16 instance stores a lane's channel pairs as one bf16x2 (grad_io_fast: channels contiguous, the rows'
    // strides even); the other (fp32 / fp16 gradients, strided channels, odd strides) element by element through
    // store_out. Both round the same floats: a layout does not change the bits (test: CudaBackwardBehaviour.
    // ChannelStridedGradientsMatchContiguous). Two loops, not one with the store chosen inside: that one had the bf16
    // K = 128 instances spill 16 bytes at their 128 registers (ptxas sm_90a), these none.
    if constexpr (Spec::kBf16Io) {
      using bf162 = __nv_bfloat162;
      bf162* const gq = static_cast<bf162*>(bp.dq.data);
      bf162* const gk = static_cast<bf162*>(bp.dk.data);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = rb + grp + 8 * hh;
        if (r >= L) continue;
        const float dotq = inv_norms ? pq[hh] : 0.0f, dotk = inv_norms ? pk[hh] : 0.0f;
        const int64_t t = t0 + r;
        // Element offsets / 2 (grad_io_fast: the strides even): the lane's channel pairs.
        const int64_t oq = (b * bp.dq.stride[0] + t * bp.dq.stride[1] + h * bp.dq.stride[2] + dglob + 2 * tig) / 2;
        const int64_t ok = (b * bp.dk.stride[0] + t * bp.dk.stride[1] + h * bp.dk.stride[2] + dglob + 2 * tig) / 2;
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          const int o = Ly::at(r, n0 + 8 * n + 2 * tig), o1 = o ^ 1;  // channel + 1: the swizzle XOR, bit 0 flipped
          const float2 dq = dqv[n][hh], dk = dkv[n][hh];
          gq[oq + 4 * n] = __floats2bfloat162_rn((dq.x - Qs[o] * dotq) * nq[hh], (dq.y - Qs[o1] * dotq) * nq[hh]);
          gk[ok + 4 * n] = __floats2bfloat162_rn((dk.x - Ks[o] * dotk) * nk[hh], (dk.y - Ks[o1] * dotk) * nk[hh]);
        }
      }
    } else {
      const int64_t cq = bp.dq.stride[3], ck = bp.dk.stride[3];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = rb + grp + 8 * hh;
        if (r >= L) continue;
        const float dotq = inv_norms ? pq[hh] : 0.0f, dotk = inv_norms ? pk[hh] : 0.0f;
        const int64_t t = t0 + r;
        const int64_t oq = b * bp.dq.stride[0] + t * bp.dq.stride[1] + h * bp.dq.stride[2] + (dglob + 2 * tig) * cq;
        const int64_t ok = b * bp.dk.stride[0] + t * bp.dk.stride[1] + h * bp.dk.stride[2] + (dglob + 2 * tig) * ck;
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          const int o = Ly::at(r, n0 + 8 * n + 2 * tig), o1 = o ^ 1;
          const float2 dq = dqv[n][hh], dk = dkv[n][hh];
          store_out(bp.dq.data, bp.dq.dtype, oq + 8 * n * cq, (dq.x - Qs[o] * dotq) * nq[hh]);
          store_out(bp.dq.data, bp.dq.dtype, oq + (8 * n + 1) * cq, (dq.y - Qs[o1] * dotq) * nq[hh]);
          store_out(bp.dk.data, bp.dk.dtype, ok + 8 * n * ck, (dk.x - Ks[o] * dotk) * nk[hh]);
          store_out(bp.dk.data, bp.dk.dtype, ok + (8 * n + 1) * ck, (dk.y - Ks[o1] * dotk) * nk[hh]);
        }
      }
    }
  }
  // dg = the in-block suffix + the later blocks' totals (the last first) + the chunk-end terms, which every token's
  // reverse sum reaches: CS . E_C and colsum(k . KD . Esuf). The last two depend on (block, channel) only: a thread
  // each forms them once (the lanes had formed them per element pair: ~4% of this kernel's instructions, session 43's
  // profile), into dM's place (no warp reads it after the barrier above; q_hat and k_hat stay for dq / dk).
  float* const carry_s = dMs;  // [kSubBlocks][kHalf]: the later blocks' totals
  float* const end_s = dMs + kSubBlocks * kHalf;
  {
    static_assert(kThreads == kSubBlocks * kHalf, "grad_tc_kernel: a thread a (block, channel)");
    const int J0 = tid / kHalf, dl = tid % kHalf;
    float carry = 0.0f;
    for (int J = kSubBlocks - 1; J > J0; --J) carry += tot[(2 * J) * kHalf + dl];
    float kdsum = 0.0f;
#pragma unroll
    for (int J = 0; J < kSubBlocks; ++J) kdsum += tot[(2 * J + 1) * kHalf + dl];
    carry_s[tid] = carry;
    end_s[tid] = cs_s[dl] * ex2(Gc[Ly::at(kC - 1, dl)]) + kdsum;
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    float2 dg_out[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int dl = n0 + 8 * n + 2 * tig + e;
      const float carry = carry_s[I * kHalf + dl], end = end_s[I * kHalf + dl];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) (e ? dg_out[hh].y : dg_out[hh].x) = keep[n][e][hh] + carry + end;
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      *reinterpret_cast<float2*>(gKD + int64_t{rb + grp + 8 * hh} * K + dglob + 8 * n + 2 * tig) = dg_out[hh];
  }
  if constexpr (kPair) HalfPair::end();
}

}  // namespace kda::cuda::chunk::grad_tc
