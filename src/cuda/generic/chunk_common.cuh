// chunk_common.cuh: device helpers of the two-phase chunked forward (chunk_prepare.cu, chunk_state.cu): tf32
// mma.sync (m16n8k8) and its 3xTF32 split (operands rounded as mma_layout.h's tf32_operand); bf16 mma.sync
// (m16n8k16), ldmatrix and the bf16x3 split into hi / lo planes (fragment rules: mma_layout.h); exp2, cp.async,
// 16-byte bf16/fp16 unpacking, quad L2 norms.
//
// Fragment layout of mma.m16n8k8 (tf32, fp32 accumulate), lane = 4 grp + tig:
//   A (16 x 8, row major): a0 (grp, tig), a1 (grp + 8, tig), a2 (grp, tig + 4), a3 (grp + 8, tig + 4)
//   B (8 x 8, k x n):      b0 (k = tig, n = grp), b1 (k = tig + 4, n = grp)
//   C (16 x 8):            c0 (grp, 2 tig), c1 (grp, 2 tig + 1), c2 (grp + 8, 2 tig), c3 (grp + 8, 2 tig + 1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/math.h"
#include "common/params.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/mma_layout.h"

namespace kda::cuda::chunk {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

// 3xTF32: x = hi + lo with hi = tf32(x) rounded to nearest and lo = x - hi passed as it is (the tensor cores read its
// top 19 bits: truncation, as CUTLASS's 3xTF32 passes its small part); a b ~ ah bh + ah bl + al bh keeps ~21 bits of
// the operands (the dropped al bl, and lo's truncation, are ~2^-21 relative), against 11 for one tf32 product. hi is
// mma_layout.h's operand form (rounded by one add): 3 instructions a split (7 with two cvt.rna). Rounding lo too
// (4 instructions, session 13) gave the same verifier figures to three digits in the CPU model of the forward and the
// backward (scripts/models two_phase.py / chunk_backward_rounding.py, mode 3xtf32t, session 14).
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_operand(x);
  lo = __float_as_uint(x - tf32_value(hi));
}

// The m16n8k8 tf32 A fragment of rows r0, r0 + 8 and columns c0, c0 + 4 (r0 = 16 m + grp, c0 = 8 ks + tig) of a
// row-major fp32 matrix with row pitch `pitch`, split for 3xTF32 (mma3's operand order).
__device__ __forceinline__ void split_a(const float* A, int pitch, int r0, int c0, uint32_t (&ah)[4],
                                        uint32_t (&al)[4]) {
  split(A[r0 * pitch + c0], ah[0], al[0]);
  split(A[(r0 + 8) * pitch + c0], ah[1], al[1]);
  split(A[r0 * pitch + c0 + 4], ah[2], al[2]);
  split(A[(r0 + 8) * pitch + c0 + 4], ah[3], al[3]);
}

// The same fragment rounded once to tf32 (single-pass products, where the result's user tolerates 2^-11 relative).
__device__ __forceinline__ void tf32_a(const float* A, int pitch, int r0, int c0, uint32_t (&a)[4]) {
  a[0] = tf32_operand(A[r0 * pitch + c0]);
  a[1] = tf32_operand(A[(r0 + 8) * pitch + c0]);
  a[2] = tf32_operand(A[r0 * pitch + c0 + 4]);
  a[3] = tf32_operand(A[(r0 + 8) * pitch + c0 + 4]);
}

__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float rcp(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// The bounded gate's log-decay in log2 units, lower_bound sigmoid(exp(A_log) x) log2(e) for x = g + bias (math.h
// bounded_gate's value; ea = exp(A_log), or 1 without A_log; lb2 = lower_bound log2(e)), on ex2 / rcp: ~12
// instructions against ~37 for expf and the IEEE division (session 12's profile: phase 1's bounded-gate line was 9.1%
// of its instructions, 7.3% of its stall samples). ex2.approx and rcp.approx are within ~2 ulp, and log2(e) is applied
// to the argument after exp(A_log) so a finite exp(A_log) x that the extra factor overflows saturates the sigmoid as
// it would anyway (exp2(-inf) = 0, 1 / inf = 0). x = 0 gives sigmoid(0) whatever ea (no 0 * inf), as in math.h.
__device__ __forceinline__ float bounded_gate_log2(float x, float ea, float lb2) {
  const float z = x == 0.0f ? 0.0f : x * ea;
  return lb2 * rcp(1.0f + ex2(-z * kLog2e));
}

// sigmoid'(z) = sigmoid(z) sigmoid(-z) = u / (1 + u)^2 with u = exp2(-|z| log2(e)) in [0, 1] (sigmoid' is even, so u
// never overflows and nothing cancels), on ex2 / rcp as bounded_gate_log2: the chunked backward's bounded-gate
// gradient (math.h sigmoid_grad is two expf and two IEEE divisions).
__device__ __forceinline__ float sigmoid_grad_fast(float z) {
  const float u = ex2(-fabsf(z) * kLog2e);
  const float r = rcp(1.0f + u);
  return u * r * r;
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a b in 3xTF32 (small terms first).
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                     const uint32_t (&bh)[2], const uint32_t (&bl)[2]) {
  mma(c, al, bh);
  mma(c, ah, bl);
  mma(c, ah, bh);
}

// bf16x3: x = hi + lo with hi = bf16(x), lo = bf16(x - hi) (round to nearest even); a b ~ al bh + ah bl + ah bh keeps
// ~16 bits of each operand (the dropped al bl and lo's own rounding are ~2^-16 relative), at three bf16 products,
// 1.5x one tf32 product where 3xTF32 is 3x. Operands are stored pre-split as two bf16 planes of the same shape (the
// bytes of one fp32 matrix), so the mma loops only ldmatrix and multiply. The CPU model of the chunked path
// (scripts/models/two_phase.py, mode bf16x3) measured it on the verifier's stress probes (docs/numerics.md).
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
  memcpy(&hi, &h, 4);
  memcpy(&lo, &l, 4);
}

// Two adjacent elements (e, e + 1) of a matrix stored as hi / lo bf16 planes (the lo plane `plane` elements after
// the hi plane), split from fp32.
__device__ __forceinline__ void store_planes2(__nv_bfloat16* hi_plane, int64_t plane, int64_t e, uint32_t h,
                                              uint32_t l) {  // the pair already split (split_bf16x2's h, l)
  *reinterpret_cast<uint32_t*>(hi_plane + e) = h;
  *reinterpret_cast<uint32_t*>(hi_plane + plane + e) = l;
}
__device__ __forceinline__ void store_split2(__nv_bfloat16* hi_plane, int64_t plane, int64_t e, float x0, float x1) {
  uint32_t h, l;
  split_bf16x2(x0, x1, h, l);
  store_planes2(hi_plane, plane, e, h, l);
}

// Four adjacent elements (e .. e + 3, e a multiple of 4: half a 16-byte chunk of each plane, which swizzled() keeps
// whole), split from fp32: the same values as two store_split2 calls, in two 8-byte stores instead of four.
__device__ __forceinline__ void store_split4(__nv_bfloat16* hi_plane, int64_t plane, int64_t e, const float (&x)[4]) {
  uint2 h, l;
  split_bf16x2(x[0], x[1], h.x, l.x);
  split_bf16x2(x[2], x[3], h.y, l.y);
  *reinterpret_cast<uint2*>(hi_plane + e) = h;
  *reinterpret_cast<uint2*>(hi_plane + plane + e) = l;
}

__device__ __forceinline__ void store_split1(__nv_bfloat16* hi_plane, int64_t plane, int64_t e, float x) {
  const __nv_bfloat16 h = __float2bfloat16_rn(x);
  hi_plane[e] = h;
  hi_plane[plane + e] = __float2bfloat16_rn(x - __bfloat162float(h));
}

// ldmatrix.m8n8.x4.b16 (T = true: .trans); p is this lane's row address (mma_layout.h's rules).
template <bool T>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// c += a b, mma.m16n8k16 bf16 with fp32 accumulation (b: two registers of one n-tile).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a b in bf16x3 for the n-tile `nt` (0 or 1) of a B pair loaded by one ldmatrix.x4 per plane (small terms first).
__device__ __forceinline__ void mma_bf16x3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                           const uint32_t (&bh)[4], const uint32_t (&bl)[4], int nt) {
  mma_bf16(c, al, bh[2 * nt], bh[2 * nt + 1]);
  mma_bf16(c, ah, bl[2 * nt], bl[2 * nt + 1]);
  mma_bf16(c, ah, bh[2 * nt], bh[2 * nt + 1]);
}

__device__ __forceinline__ uint4 ldg16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Asks L2 for n elements of a [B][T][heads][n] tensor from (b, t, head, col0), one 128-byte line per request; nothing
// for a strided row (not one range). Only addresses inside the tensor are named; a prefetch changes no result.
__device__ __forceinline__ void prefetch_row_l2(const TensorView& x, int64_t b, int64_t t, int64_t head, int64_t col0,
                                                int n) {
  if (x.stride[3] != 1) return;
  const int64_t esize = x.dtype == KDA_DTYPE_FLOAT32 ? 4 : 2;
  const char* const row =
      static_cast<const char*>(x.data) + (b * x.stride[0] + t * x.stride[1] + head * x.stride[2] + col0) * esize;
  for (int64_t off = 0; off < n * esize; off += 128) prefetch_l2(row + off);
}

// The reverse passes' (chunk_reverse.cu, hopper/reverse_wgmma.cu) L2 requests a chunk before the reads: share vt of
// vtiles (the chain's V tiles) of the previous chunk's tile but U, [W, Qg, Kd] and [A_qk, decay], split at 16-byte
// boundaries, which the CTA and its siblings read a chunk later: phase 1 wrote them long before, so most are out of
// L2 (ncu, session 17: the forward's state pass, reading the same tiles, hits L2 62% of the time). On sm_90 one bulk
// prefetch a range by thread 0, elsewhere one 128-byte line a thread of the kThreads. The share's byte ranges are the
// same every chunk: formed once (with their 64-bit divisions formed a chunk at a time, the prefetch was ~10% of
// reverse_wgmma's instructions: ncu, session 44). A hint: it changes no result.
template <int kThreads>
struct TileShareL2 {
  int64_t lo[2], hi[2];  // bytes from the tile's start
  __device__ __forceinline__ TileShareL2(const TileLayout& tl, int vt, int vtiles) {
    const int64_t start[2] = {0, tl.Aqk() * 4}, end[2] = {tl.U() * 4, tl.floats() * 4};
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int64_t units = (end[g] - start[g]) / 16, per = (units + vtiles - 1) / vtiles;
      lo[g] = start[g] + 16 * min(units, vt * per);
      hi[g] = start[g] + 16 * min(units, (vt + 1) * per);
    }
  }
  __device__ __forceinline__ void prefetch(const float* tile, int tid) const {
    const char* const b = reinterpret_cast<const char*>(tile);
#pragma unroll
    for (int g = 0; g < 2; ++g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (tid == 0 && hi[g] > lo[g])
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b + lo[g]),
                     "r"(static_cast<uint32_t>(hi[g] - lo[g]))
                     : "memory");
#else
      for (int64_t off = lo[g] + int64_t{tid} * 128; off < hi[g]; off += int64_t{kThreads} * 128) prefetch_l2(b + off);
#endif
    }
  }
};

// dO' = scale dO on a chunk's rows (zeros past its length) for the reverse passes: the CTA's BV columns from v0 as
// pairs, thread tid's kE pairs at column c = 2 (tid % (BV / 2)) of rows r0 + kRowStep i (r0 = tid / (BV / 2)). load()
// issues the raw bits of all of them (one round trip a chunk, not one a pair: ncu, session 9, 33% of the reverse
// pass's stall samples when converted where issued), the row offset stepped, not formed a row at a time from the
// strides; store() converts and hands pair i to st(i, r, c, x0, x1). The two apart, a chain can load its next chunk's
// rows a whole step ahead (reverse_wgmma.cu).
template <int kThreads, int BV>
struct DoutPairs {
  static constexpr int kPerRow = BV / 2, kRowStep = kThreads / kPerRow, kE = kChunk / kRowStep;
  static_assert(kThreads % kPerRow == 0 && kChunk % kRowStep == 0, "reverse: dO' pairs must tile the CTA");
  uint32_t raw[2 * kE];  // pair i's two elements at 2 i, 2 i + 1
  int r0, c;
  __device__ __forceinline__ explicit DoutPairs(int tid) : r0(tid / kPerRow), c(2 * (tid % kPerRow)) {}
  __device__ __forceinline__ void load(const TensorView& dO, const ChunkRec& rec, int64_t b, int hv, int v0) {
    int64_t off = b * dO.stride[0] + (rec.start + r0) * dO.stride[1] + hv * dO.stride[2] + (v0 + c) * dO.stride[3];
    const int64_t step = kRowStep * dO.stride[1];
#pragma unroll
    for (int i = 0; i < kE; ++i, off += step)
      if (r0 + kRowStep * i < rec.len) {
        uint32_t pair[2];
        load_bits_strided(pair, dO.data, dO.dtype, off, dO.stride[3]);
        raw[2 * i] = pair[0];
        raw[2 * i + 1] = pair[1];
      }
  }
  template <class Store>
  __device__ __forceinline__ void store(kda_dtype_t dtype, float scale, int len, Store st) const {
    float x[2 * kE];
    bits_to_float(x, raw, dtype);  // under one dtype switch, not one an element
#pragma unroll
    for (int i = 0; i < kE; ++i) {
      const int r = r0 + kRowStep * i;
      const bool in = r < len;
      st(i, r, c, in ? scale * x[2 * i] : 0.0f, in ? scale * x[2 * i + 1] : 0.0f);
    }
  }
};

// Asks L2 for one row of a chunk's inputs: token rec.start + r of q (which 0), k (1), g (2) or v (3), for value head
// hv (q / k: its head hv / group). Nothing for rows past the chunk.
template <int K, int V>
__device__ __forceinline__ void prefetch_input_row(const ForwardParams& p, const ChunkRec& rec, int hv, int r,
                                                   int which) {
  if (r >= rec.len) return;
  const TensorView& x = which == 0 ? p.q : which == 1 ? p.k : which == 2 ? p.g : p.v;
  prefetch_row_l2(x, p.has_cu_seqlens() ? 0 : rec.seq, rec.start + r, which == 0 || which == 1 ? hv / p.group : hv, 0,
                  which == 3 ? V : K);
}

// What one instance of a kernel is built for: the dtype and channel stride of every input it reads and gradient it
// writes (bf16 with contiguous channels, or each its own at run time) and the gate mode (one of the three, or the
// run-time one). Why: the run-time branches carry every dtype's conversions and every gate's activation (and
// gradient) into the one instance that runs, and the gradient pass is bound by instruction fetch as much as by
// latency (session 29: its all-bf16 instances with a known gate, 18% less code, ran 8% faster; session 28: builds
// that grew its code by 6-12% lost 0.2-1.6 ms). Phase 1, 16 warps in lockstep stages, gained ~1% from 11% less code.
// A known channel stride of 1 turns a row's per-channel addresses into immediate offsets of one base (the gradient
// rows' loop 8% fewer instructions; session 37).
template <bool kBf16, int kGate>
struct IoSpec {
  static constexpr bool kBf16Io = kBf16;
  static __device__ __forceinline__ kda_dtype_t dt(kda_dtype_t d) { return kBf16 ? KDA_DTYPE_BFLOAT16 : d; }
  static __device__ __forceinline__ int64_t cs(int64_t stride) { return kBf16 ? 1 : stride; }  // channel stride
  static __device__ __forceinline__ kda_gate_mode_t gate(kda_gate_mode_t m) {
    return kGate < 0 ? m : static_cast<kda_gate_mode_t>(kGate);
  }
};

// Whether a tensor may go through the fast IoSpec instance: bf16 with contiguous channels (the last dimension's stride
// 1, as a framework's contiguous tensor has). A launch takes that instance only when every tensor it reads or writes
// with channels does; beta / dbeta (no channel dimension) need only be bf16.
__host__ __forceinline__ bool io_fast(const TensorView& t) {
  return t.dtype == KDA_DTYPE_BFLOAT16 && t.stride[3] == 1;
}

// f(IoSpec<...>{}) for the instance a launch takes: the fast one of the gate mode when fast says every tensor the
// kernel reads or writes allows it (io_fast), the run-time-generic one otherwise.
template <class F>
auto with_io_spec(bool fast, kda_gate_mode_t mode, F&& f) {
  if (!fast) return f(IoSpec<false, -1>{});
  switch (mode) {
    case KDA_GATE_SOFTPLUS: return f(IoSpec<true, KDA_GATE_SOFTPLUS>{});
    case KDA_GATE_BOUNDED: return f(IoSpec<true, KDA_GATE_BOUNDED>{});
    default: return f(IoSpec<true, KDA_GATE_LOG_DECAY>{});
  }
}

// The element offsets of token t's row of q and k (head h) and of g (value head hv) at channel c, and of its beta, and
// their steps over dt tokens: a loop over a warp's rows forms the 64-bit stride products once and adds a step a row
// (the products per row were ~40 instructions of grad_tc's staging a row: session 43's SASS).
template <class Spec>
struct RowOffsets {
  int64_t q, k, g, beta, sq, sk, sg, sbeta;
  __device__ __forceinline__ RowOffsets(const ForwardParams& p, int64_t b, int64_t t, int h, int hv, int c, int dt)
      : q(b * p.q.stride[0] + t * p.q.stride[1] + h * p.q.stride[2] + c * Spec::cs(p.q.stride[3])),
        k(b * p.k.stride[0] + t * p.k.stride[1] + h * p.k.stride[2] + c * Spec::cs(p.k.stride[3])),
        g(b * p.g.stride[0] + t * p.g.stride[1] + hv * p.g.stride[2] + c * Spec::cs(p.g.stride[3])),
        beta(b * p.beta.stride[0] + t * p.beta.stride[1] + hv * p.beta.stride[2]),
        sq(dt * p.q.stride[1]),
        sk(dt * p.k.stride[1]),
        sg(dt * p.g.stride[1]),
        sbeta(dt * p.beta.stride[1]) {}
  __device__ __forceinline__ void next() {
    q += sq;
    k += sk;
    g += sg;
    beta += sbeta;
  }
};

// The raw bits of a row (RowOffsets': q, k, g at channels c + 32 j, and beta; load_gate_bits: g and beta only): the
// gradient passes' row loads (chunk_grad.cu P0, chunk_grad_tc.cu, chunk_grad_rows.cu), issued together and converted
// where they are used.
template <class Spec, int CK>
__device__ __forceinline__ void load_gate_bits(const ForwardParams& p, const RowOffsets<Spec>& o, uint32_t (&g)[CK],
                                               uint32_t& beta) {
  load_bits_strided(g, p.g.data, Spec::dt(p.g.dtype), o.g, 32 * Spec::cs(p.g.stride[3]));
  beta = load_bits(p.beta.data, Spec::dt(p.beta.dtype), o.beta);
}
template <class Spec, int CK>
__device__ __forceinline__ void load_row_bits(const ForwardParams& p, const RowOffsets<Spec>& o, uint32_t (&q)[CK],
                                              uint32_t (&k)[CK], uint32_t (&g)[CK], uint32_t& beta) {
  load_bits_strided(q, p.q.data, Spec::dt(p.q.dtype), o.q, 32 * Spec::cs(p.q.stride[3]));
  load_bits_strided(k, p.k.data, Spec::dt(p.k.dtype), o.k, 32 * Spec::cs(p.k.stride[3]));
  load_gate_bits<Spec>(p, o, g, beta);
}

// 8 values of a 16-byte vector of bf16 or fp16.
__device__ __forceinline__ void cvt8(const uint4& u, kda_dtype_t dt, float* out) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  if (dt == KDA_DTYPE_BFLOAT16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

// One stage of a warp reduce-scatter of 2 HALF values per lane: afterwards val[0 .. HALF) of each lane holds the sums,
// over the lane pair (l, l ^ HALF), of the half that lane's HALF bit selects. HALF is a template parameter so every
// index is a compile-time constant: with a run-time HALF the compiler kept val[] in registers through predicated
// MOV chains that made the reduction ~60% of phase 1's instructions (ncu, 2026-11-29).
template <int HALF>
__device__ __forceinline__ void reduce_scatter_stage(float* val, int lane) {
  const bool up = (lane & HALF) != 0;
#pragma unroll
  for (int i = 0; i < HALF; ++i) {
    const float send = up ? val[i] : val[i + HALF], keep = up ? val[i + HALF] : val[i];
    val[i] = keep + __shfl_xor_sync(kFull, send, HALF);
  }
}

// Warp reduce-scatter of 32 values per lane: returns, on lane l, the sum over the warp of val[l].
__device__ __forceinline__ float reduce_scatter32(float (&val)[32], int lane) {
  reduce_scatter_stage<16>(val, lane);
  reduce_scatter_stage<8>(val, lane);
  reduce_scatter_stage<4>(val, lane);
  reduce_scatter_stage<2>(val, lane);
  reduce_scatter_stage<1>(val, lane);
  return val[0];
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFull, x, 1);
  return x + __shfl_xor_sync(kFull, x, 2);
}

// 1 / sqrt(sum x^2 + eps) of a row spread over an aligned quad (N values per lane), robust to sums of squares that
// overflow fp32 (the recurrent kernel's formulas). Called by all 32 lanes.
template <int N>
__device__ __forceinline__ float quad_inv_norm(const float (&x)[N]) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) ss = fmaf(x[i], x[i], ss);
  ss = quad_sum(ss);
  const bool finite = isfinite(ss);
  if (__all_sync(kFull, finite)) return l2_inv_norm(ss, 0.0f, false);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) m = fmaxf(m, fabsf(x[i]));
  m = fmaxf(m, __shfl_xor_sync(kFull, m, 1));
  m = fmaxf(m, __shfl_xor_sync(kFull, m, 2));
  m = fmaxf(m, 1e-30f);
  const float rm = 1.0f / m;
  float s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s2 = fmaf(x[i] * rm, x[i] * rm, s2);
  s2 = quad_sum(s2);
  return finite ? l2_inv_norm(ss, 0.0f, false) : l2_inv_norm(s2, m, true);
}

// cp.async of a [ROWS][COLS] hi / lo bf16 plane pair stored densely in global memory (the workspace tiles) into a
// plane pair of pitch PITCH in shared memory, by the CTA's THREADS threads: both planes as one [2 ROWS][COLS] array of
// 8-element pieces, copied in passes (chunk_map.h copy_piece) so this thread's row and column are fixed and every pass
// adds a compile-time offset (ncu at 67bc1ca: integer address arithmetic, IMAD / SHF / LEA, was about half of the
// state pass's instructions with the row and column recomputed per piece; 171 -> 133 registers at K = 128, BV = 64).
template <int THREADS, int ROWS, int COLS, int PITCH>
__device__ __forceinline__ void load_planes(__nv_bfloat16* dst, const __nv_bfloat16* src, int tid) {
  constexpr int kRowsPerPass = copy_rows_per_pass(COLS, 8, THREADS);
  static_assert(THREADS % (COLS / 8) == 0 && ROWS % kRowsPerPass == 0, "load_planes: passes must tile the planes");
  const CopyPiece p0 = copy_piece(tid, 0, COLS, 8, THREADS);
  dst += p0.row * PITCH + p0.col;
  src += p0.row * COLS + p0.col;
#pragma unroll
  for (int i = 0; i < 2 * ROWS / kRowsPerPass; ++i) cp_async16(dst + kRowsPerPass * i * PITCH, src + kRowsPerPass * i * COLS);
}

// acc = X S^T for a warp's 16 rows of X (hi / lo planes [row][d] of pitch pitch, rows from x_row) against NT n-tiles
// of 8 state rows (planes [v][d], same pitch, from s_row), over the KD / 16 k-steps of d: both operands non-transposed
// ldmatrix (mma_layout.h ldsm_a_rowmajor ra, ldsm_b_nmajor rb). The state passes' products with the state
// (W S^T and Qg S^T forward, Kd dS^T in reverse).
template <int NT, int KD>
__device__ __forceinline__ void mma_times_state_t(float (&acc)[NT][4], const __nv_bfloat16* Xh, const __nv_bfloat16* Xl,
                                                  const __nv_bfloat16* Sh, const __nv_bfloat16* Sl, int pitch,
                                                  int x_row, int s_row, int ra_row, int ra_col, int rb_row,
                                                  int rb_col) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll 2
  for (int ks = 0; ks < KD / 16; ++ks) {
    uint32_t ah[4], al[4];
    const int ao = (x_row + ra_row) * pitch + 16 * ks + ra_col;
    ldsm_x4<false>(ah, Xh + ao);
    ldsm_x4<false>(al, Xl + ao);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bh[4], bl[4];
      const int bo = (s_row + 16 * np + rb_row) * pitch + 16 * ks + rb_col;
      ldsm_x4<false>(bh, Sh + bo);
      ldsm_x4<false>(bl, Sl + bo);
      mma_bf16x3(acc[2 * np], ah, al, bh, bl, 0);
      mma_bf16x3(acc[2 * np + 1], ah, al, bh, bl, 1);
    }
  }
}

// acc[2 np + i] += A B over k-steps ks0 .. ks1 - 1 (16 each) in bf16x3, both operands stored k-major as hi / lo
// planes (A [k][m] of pitch pa, this warp's 16 rows of m from a_col; B [k][n] of pitch pb, its NT n-tiles of 8 from
// b_col): ldmatrix.trans for both (mma_layout.h ldsm_a_kmajor / ldsm_b_kmajor rows rat, rbt). The products of the
// state passes whose operands are transposed token-major tiles (V_new^T Kd, A_qk^T dO, dO^T Qg, dU^T W).
template <int NT>
__device__ __forceinline__ void mma_kmajor_kmajor(float (&acc)[NT][4], const __nv_bfloat16* Ah,
                                                  const __nv_bfloat16* Al, int pa, int a_col,
                                                  const __nv_bfloat16* Bh, const __nv_bfloat16* Bl, int pb, int b_col,
                                                  int ks0, int ks1, int rat_row, int rat_col, int rbt_row,
                                                  int rbt_col) {
  for (int ks = ks0; ks < ks1; ++ks) {
    uint32_t ah[4], al[4];
    const int ao = (16 * ks + rat_row) * pa + a_col + rat_col;
    ldsm_x4<true>(ah, Ah + ao);
    ldsm_x4<true>(al, Al + ao);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bh[4], bl[4];
      const int bo = (16 * ks + rbt_row) * pb + b_col + 16 * np + rbt_col;
      ldsm_x4<true>(bh, Bh + bo);
      ldsm_x4<true>(bl, Bl + bo);
      mma_bf16x3(acc[2 * np], ah, al, bh, bl, 0);
      mma_bf16x3(acc[2 * np + 1], ah, al, bh, bl, 1);
    }
  }
}

// Calls f(nt, e, v, d) for each element of a state pass's register tile: n-tile nt's C-fragment element e is row
// v = sv + 8 (e / 2), column d = dn0 + 8 nt + 2 tig + e % 2 (sv, dn0: the warp's tile origin plus grp; tig: lane % 4).
template <int NT, class F>
__device__ __forceinline__ void for_each_tile_element(int sv, int dn0, int tig, F f) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(nt, e, sv + 8 * (e >> 1), dn0 + 8 * nt + 2 * tig + (e & 1));
}

}  // namespace kda::cuda::chunk
