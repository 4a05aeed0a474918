// state_wgmma.cu: the forward's sequential state pass on sm_90a wgmma (issue #6, docs/hopper.md step 1): the same
// job, inputs and outputs as chunk_state.cu's mma.sync kernel (which stays the path everywhere else), for K = 128 and
// 64-column V tiles, fed by phase 1's workspace tiles.
//
// Why. ncu of the mma.sync state pass (bench/LEDGER.md, session 17) puts it at the shared-memory limit: "Mem Busy"
// 62%, ~6 K of a chunk's ~10 K cycles moving ~800 KB through shared memory at 128 bytes a cycle, against ~2.5-3.6 K
// cycles of tensor issue. Its bf16x3 products ldmatrix both planes of both operands into every warp, and each
// S^T fragment is read by 8 warps. wgmma reads a B tile once for its warpgroup's 64 rows: this kernel's products
// read ~310 KB a chunk (W S^T and Qg S^T 96 KB each, V_new^T Kd 72 KB, A_qk V_new 48 KB), with the cp.async copies
// and plane stores ~490 KB, ~3.8 K cycles: predicted 2-2.5x faster than 734 us at h64-fixed if the two warpgroups
// overlap as planned (~1.5-2.6 K cycles of wgmma a chunk on each). Measured (session 18, ncu): 658-661 us, shared
// memory no longer the limit (Mem Busy 43%) but ~10 K cycles a chunk still, its copies each given one phase to land
// behind a CTA barrier (bench/LEDGER.md).
//
// One CTA of 256 threads per (sequence, value head, 64-column V tile) walks the sequence's chunks as the mma.sync
// kernel does, with two warpgroups:
//   chain  (warps 0-3)  V_new = U - W S^T (wgmma m64n64, 8 k-blocks), split into V_new's planes (phase A);
//                       S = S diag(decay) + V_new^T Kd (m64n128, 4 k-blocks, S the accumulator: 64 fp32 registers
//                       a thread across the whole chain), split into S's planes (phase B)
//   output (warps 4-7)  o = scale (Qg S^T + A_qk V_new): Qg S^T in phase A, + A_qk V_new (A_qk's upper zeros
//                       included) and the store in phase B
// Every product is bf16x3 (lo hi, hi lo, hi hi a k-block: the order of chunk_common.cuh's mma_bf16x3), fp32
// accumulation, so the precision argument of chunk_state.cu holds unchanged; the sums' order differs, so the figures
// are the verifier's to judge, not bit-equal to the mma.sync kernel's.
//
// Shared memory, all in CuTe's 128-byte-swizzled GMMA layouts (each plane 1 KB aligned; every access goes through
// the CuTe tensors, so the copies, the plane stores and the wgmma descriptors agree by construction): W, Qg [t][d]
// and S [v][d] K-major (A and B of W S^T / Qg S^T), Kd [t][d] MN-major (B of V_new^T Kd, N = d), A_qk [t][t']
// K-major, V_new [t][v] MN-major (A of V_new^T Kd with M = v, B of A_qk V_new with N = v: one layout), hi then lo
// plane each; U fp32 [64][68]; decay [128]: 181,760 bytes, one CTA per SM.
// Loads and barriers as chunk_state.cu: group A {W, U, Qg} lands behind the previous chunk's phase B, group B
// {Kd, A_qk, decay} behind this chunk's phase A; every thread's cp.async data and plane stores are published to the
// tensor cores' async proxy (fence.proxy.async) before the CTA barrier that precedes the wgmma reading them, and each
// warpgroup waits for its own wgmma before the barrier that frees their operands.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

#if defined(KDA_HAS_CUTE)
#include <cutlass/arch/barrier.h>

#include "cuda/hopper/state_stage.cuh"
#include "cuda/hopper/state_wgmma.cuh"
#include "cuda/hopper/wgmma_bf16x3.cuh"
#endif

namespace kda::cuda::chunk {
namespace {

constexpr int kK = 128, kBV = 64, kC = kChunk, kThreads = 256;
using bf16 = __nv_bfloat16;

// Byte offsets (a plane pair: the hi plane, then the lo plane).
struct WgmmaStateLayout {
  static constexpr int kRowPlane = kC * kK, kSPlane = kBV * kK, kAPlane = kC * kC, kVPlane = kC * kBV;  // elements
  static constexpr int PU = kBV + 4;  // U's fp32 row pitch
  static constexpr size_t kW = 0, kQ = kW + 4 * kRowPlane, kKd = kQ + 4 * kRowPlane, kS = kKd + 4 * kRowPlane;
  static constexpr size_t kA = kS + 4 * kSPlane, kVn = kA + 4 * kAPlane, kU = kVn + 4 * kVPlane;
  static constexpr size_t kDec = kU + 4 * kC * PU;
  static constexpr size_t kBytes = kDec + 4 * kK;
  static_assert(kKd % 1024 == 0 && kS % 1024 == 0 && kA % 1024 == 0 && kVn % 1024 == 0, "GMMA planes: 1 KB aligned");
};

__global__ void __launch_bounds__(kThreads, 1) state_wgmma_kernel(const ForwardParams p, const char* ws, int vtiles,
                                                                  int64_t chain0, const BackwardSaves keep) {
#if defined(KDA_HAS_CUTE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace cute;
  using Ty = sm90::StateWgmmaTypes;
  using LayK128 = Ty::LayK128;
  using LayK64 = Ty::LayK64;
  using LayMN64 = Ty::LayMN64;
  using LayMN128 = Ty::LayMN128;
  using Ly = WgmmaStateLayout;

  extern __shared__ __align__(1024) unsigned char smem[];
  sm90::require_1k_aligned(smem);
  // The planes as CuTe tensors on a shared-memory base sb; the loop passes sm90::opaque_base(smem).
  auto k128 = [](unsigned char* sb, size_t off) { return sm90::plane<LayK128>(sb, off); };  // W, Qg (t, d); S (v, d)
  auto k64 = [](unsigned char* sb, size_t off) { return sm90::plane<LayK64>(sb, off); };    // A_qk (t, t')
  auto mn64 = [](unsigned char* sb, size_t off) { return sm90::plane<LayMN64>(sb, off); };  // V_new (v, t)
  auto mn128 = [](unsigned char* sb, size_t off) { return sm90::plane<LayMN128>(sb, off); };  // Kd (d, t)
  constexpr size_t kWl = Ly::kW + 2 * Ly::kRowPlane, kQl = Ly::kQ + 2 * Ly::kRowPlane;
  constexpr size_t kKl = Ly::kKd + 2 * Ly::kRowPlane;
  constexpr size_t kSl = Ly::kS + 2 * Ly::kSPlane, kAl = Ly::kA + 2 * Ly::kAPlane, kVl = Ly::kVn + 2 * Ly::kVPlane;

  const int tid = threadIdx.x, wtid = tid % 128;
  const bool chain = tid < 128;  // warpgroup 0; warpgroup 1 computes the output
  const ChainTile ct = chain_tile(blockIdx.x, vtiles, chain0, kBV, p.HV);
  const int64_t n = ct.n;
  const int hv = ct.hv, v0 = ct.v0;
  const int V = p.V;

  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, kK, V);
  const int64_t* const seq_first = reinterpret_cast<const int64_t*>(ws + wl.seq_first);
  const ChunkRec* const list = reinterpret_cast<const ChunkRec*>(ws + wl.list);
  const TileLayout tl{kK, V};
  const float* const tiles = reinterpret_cast<const float*>(ws + wl.tiles);
  const int64_t first = seq_first[n], last = seq_first[n + 1];
  const int64_t b = p.has_cu_seqlens() ? 0 : n;

  // cp.async of a dense hi / lo plane pair [kRows][kCols] (global, row-major) into the views hi / lo, 16-byte pieces
  // (8 consecutive cols, contiguous in both swizzled layouts), a compile-time number a thread (straight-line address
  // math: with run-time trip counts the copies spilled); at(view, r, c) names element (r, c) as stored.
  auto copy_planes = [&](auto rows, auto cols, auto hi, auto lo, const float* src_f, auto at) {
    constexpr int kRows = decltype(rows)::value, kCols = decltype(cols)::value, kPer = kRows * kCols / 8 / kThreads;
    static_assert(kPer * kThreads * 8 == kRows * kCols, "copy_planes: the pieces must tile the CTA");
    const bf16* const src = reinterpret_cast<const bf16*>(src_f);
    CUTE_UNROLL
    for (int i = 0; i < kPer; ++i) {
      const int e = tid + i * kThreads, r = e / (kCols / 8), c = 8 * (e % (kCols / 8));
      cp_async16(at(hi, r, c), src + r * kCols + c);
      cp_async16(at(lo, r, c), src + kRows * kCols + r * kCols + c);
    }
  };
  auto rc = [](auto& t, int r, int c) { return raw_pointer_cast(&t(r, c)); };  // the view is (row, col)
  auto cr = [](auto& t, int r, int c) { return raw_pointer_cast(&t(c, r)); };  // the view is (col, row)
  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  auto load_a = [&](unsigned char* sb, int64_t ci) {  // W, Qg, U
    if (ci < last) {
      const float* t = tile_of(ci);
      copy_planes(Int<kC>{}, Int<kK>{}, k128(sb, Ly::kW), k128(sb, kWl), t + tl.W(), rc);
      copy_planes(Int<kC>{}, Int<kK>{}, k128(sb, Ly::kQ), k128(sb, kQl), t + tl.Qg(), rc);
      float* const Us = reinterpret_cast<float*>(sb + Ly::kU);
      static_assert(kC * kBV / 4 % kThreads == 0, "U: the pieces must tile the CTA");
      CUTE_UNROLL
      for (int i = 0; i < kC * kBV / 4 / kThreads; ++i) {
        const int e = tid + i * kThreads, r = e / (kBV / 4), c = 4 * (e % (kBV / 4));
        cp_async16(Us + r * Ly::PU + c, t + tl.U() + r * V + v0 + c);
      }
    }
    cp_async_commit();
  };
  auto load_b = [&](unsigned char* sb, int64_t ci) {  // Kd (stored [t][d], viewed (d, t)), A_qk, decay
    if (ci < last) {
      const float* t = tile_of(ci);
      copy_planes(Int<kC>{}, Int<kK>{}, mn128(sb, Ly::kKd), mn128(sb, kKl), t + tl.Kd(), cr);
      copy_planes(Int<kC>{}, Int<kC>{}, k64(sb, Ly::kA), k64(sb, kAl), t + tl.Aqk(), rc);
      float* const dec = reinterpret_cast<float*>(sb + Ly::kDec);
      if (tid < kK / 4) cp_async16(dec + 4 * tid, t + tl.decay() + 4 * tid);
    }
    cp_async_commit();
  };
  // Every thread: its cp.async data landed, then it and its own plane stores are published to the async proxy.
  auto land_and_publish = [] {
    cp_async_wait<0>();
    cutlass::arch::fence_view_async_shared();
  };
  load_a(smem, first);

  Ty::MmaXS mma_xs;
  Ty::MmaVK mma_vk;
  Ty::MmaAV mma_av;
  auto thr_xs = mma_xs.get_thread_slice(wtid);
  auto thr_vk = mma_vk.get_thread_slice(wtid);
  auto thr_av = mma_av.get_thread_slice(wtid);
  // Each accumulator element's (row, column), from the accumulator layouts; elements 2 i, 2 i + 1 are adjacent
  // columns of one row.
  Tensor cXS = thr_xs.partition_C(make_identity_tensor(Shape<_64, _64>{}));   // (t, v)
  Tensor cVK = thr_vk.partition_C(make_identity_tensor(Shape<_64, _128>{}));  // (v, d)

  // The state [v][d] of this V tile: warpgroup 0's m64n128 accumulator for the whole chain.
  Tensor S = partition_fragment_C(mma_vk, Shape<_64, _128>{});
  auto store_state_planes = [&](unsigned char* sb) {
    auto sh = k128(sb, Ly::kS), sl = k128(sb, kSl);
    CUTE_UNROLL
    for (int i = 0; i < size(S); i += 2) {
      const int v = get<0>(cVK(i)), d = get<1>(cVK(i));
      uint32_t h, l;
      split_bf16x2(S(i), S(i + 1), h, l);
      *reinterpret_cast<uint32_t*>(rc(sh, v, d)) = h;
      *reinterpret_cast<uint32_t*>(rc(sl, v, d)) = l;
    }
  };
  // The initial state (or zeros) through the Kd buffer, free until the first chunk's group B is issued behind the
  // loop's first barrier (state_stage.cuh: why not in place).
  float* const stage_kd = reinterpret_cast<float*>(smem + Ly::kKd);
  static_assert(4 * Ly::kRowPlane >= sizeof(float) * sm90::kStageRows * sm90::kStageCols, "the stage fits Kd's planes");
  if (p.has_initial_state()) {
    const float* const init = static_cast<const float*>(p.initial_state.data);
    sm90::stage_in<kThreads>(stage_kd, !p.state_v_first, tid, [&](int r, int c) {
      return init[p.state_offset(p.initial_state.stride, n, hv, v0 + r, c)];
    });
    __syncthreads();
  }
  if (chain) {
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i)
      S(i) = p.has_initial_state() ? stage_kd[get<0>(cVK(i)) * sm90::kStageCols + get<1>(cVK(i))] : 0.0f;
    store_state_planes(smem);
  }
  Tensor acc = partition_fragment_C(mma_xs, Shape<_64, _64>{});  // W S^T (chain), Qg S^T + A_qk V_new (output)

#pragma unroll 1
  for (int64_t ci = first; ci < last; ++ci) {
    const ChunkRec rec = list[ci];
    if (chain && keep.starts) {  // the backward's copy of the chunk-start state, value-first [V][K]
      float* const st = keep.starts + ((ci * p.HV + hv) * V + v0) * kK;
      CUTE_UNROLL
      for (int i = 0; i < size(S); i += 2)
        *reinterpret_cast<float2*>(st + get<0>(cVK(i)) * kK + get<1>(cVK(i))) = make_float2(S(i), S(i + 1));
    }

    unsigned char* const sb = sm90::opaque_base(smem);

    // ---- Phase A: group A of this chunk and the previous chunk's state planes, published.
    land_and_publish();
    __syncthreads();
    load_b(sb, ci);
    clear(acc);
    if (chain) {  // V_new = U - W S^T -> V_new's planes (and the backward's fp32 copy [C][V])
      sm90::wgmma_bf16x3(mma_xs, thr_xs, k128(sb, Ly::kW), k128(sb, kWl), k128(sb, Ly::kS), k128(sb, kSl), acc);
      const float* const Us = reinterpret_cast<const float*>(sb + Ly::kU);
      auto vh = mn64(sb, Ly::kVn), vl = mn64(sb, kVl);
      float* const vn = keep.vnew ? keep.vnew + (ci * p.HV + hv) * int64_t{kC} * V + v0 : nullptr;
      int Vo = V;  // opaque a chunk: hoisted out of the chain, the 16 offsets t V + v were spilled
      asm volatile("" : "+r"(Vo));
      CUTE_UNROLL
      for (int i = 0; i < size(acc); i += 2) {
        const int t = get<0>(cXS(i)), v = get<1>(cXS(i));
        const float2 u = *reinterpret_cast<const float2*>(Us + t * Ly::PU + v);
        const float x0 = u.x - acc(i), x1 = u.y - acc(i + 1);
        uint32_t h, l;
        split_bf16x2(x0, x1, h, l);
        // (v, t) and (v + 1, t) are adjacent in the MN-major layout (v even).
        *reinterpret_cast<uint32_t*>(rc(vh, v, t)) = h;
        *reinterpret_cast<uint32_t*>(rc(vl, v, t)) = l;
        if (vn) *reinterpret_cast<float2*>(vn + t * Vo + v) = make_float2(x0, x1);
      }
    } else {  // o = Qg S^T, held into phase B
      sm90::wgmma_bf16x3(mma_xs, thr_xs, k128(sb, Ly::kQ), k128(sb, kQl), k128(sb, Ly::kS), k128(sb, kSl), acc);
    }

    // ---- Phase B: group B landed; V_new's planes written and published; W, Qg, U and the state planes read.
    land_and_publish();
    __syncthreads();
    load_a(sb, ci + 1);
    if (chain) {  // S = S diag(decay) + V_new^T Kd, then its planes for the next chunk's phase A
      const float* const dec = reinterpret_cast<const float*>(sb + Ly::kDec);
      CUTE_UNROLL
      for (int i = 0; i < size(S); ++i) S(i) *= dec[get<1>(cVK(i))];
      sm90::wgmma_bf16x3(mma_vk, thr_vk, mn64(sb, Ly::kVn), mn64(sb, kVl), mn128(sb, Ly::kKd), mn128(sb, kKl), S);
      store_state_planes(sb);
    } else {  // o += A_qk V_new; the chunk's L rows to out
      sm90::wgmma_bf16x3(mma_av, thr_av, k64(sb, Ly::kA), k64(sb, kAl), mn64(sb, Ly::kVn), mn64(sb, kVl), acc);
      if (p.out != nullptr) {
        const int64_t ob = b * p.out_stride[0] + hv * p.out_stride[2] + v0;
        CUTE_UNROLL
        for (int i = 0; i < size(acc); i += 2) {
          const int t = get<0>(cXS(i)), v = get<1>(cXS(i));
          if (t >= rec.len) continue;
          const int64_t o = ob + (rec.start + t) * p.out_stride[1] + v;
          const float x0 = p.scale * acc(i), x1 = p.scale * acc(i + 1);
          if (p.out_dtype == KDA_DTYPE_BFLOAT16)
            *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + o) = __floats2bfloat162_rn(x0, x1);
          else if (p.out_dtype == KDA_DTYPE_FLOAT16)
            *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + o) = __floats2half2_rn(x0, x1);
          else
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + o) = make_float2(x0, x1);
        }
      }
    }
  }

  // As chunk_state.cu: every read of initial_state happened before the first barrier and no other CTA touches
  // these entries, so final_state may alias initial_state. Each thread stores its own fragment from a row base and
  // two strides: a few instructions an element (state_stage.cuh: why not state_offset's per element). Staged
  // through shared memory as the initial state is, the stage kept values live across the loop (ptxas: spills in it).
  cp_async_wait<0>();
  if (chain && p.has_final_state()) {
    const int64_t* const st = p.final_state_stride;
    const int64_t sr = p.state_v_first ? st[2] : st[3], sc = p.state_v_first ? st[3] : st[2];
    float* const base = static_cast<float*>(p.final_state) + n * st[0] + hv * st[1] + v0 * sr;
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i) base[get<0>(cVK(i)) * sr + get<1>(cVK(i)) * sc] = S(i);
  }
#else
  __trap();  // launched only where state_wgmma_runs says so
#endif
}

}  // namespace

bool state_wgmma_available(const ForwardParams& p) {
#if defined(KDA_HAS_CUTE)
  if (p.K != kK || p.V % kBV != 0) return false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device_id) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9;
#else
  (void)p;
  return false;
#endif
}

bool state_wgmma_runs(const ForwardParams& p, int bv) {
  return p.backend == KDA_BACKEND_CUDA_HOPPER && bv == kBV && state_wgmma_available(p);
}

cudaError_t launch_state_wgmma(const ForwardParams& p, const char* ws, int64_t chain0, int64_t chains, cudaStream_t s,
                               const BackwardSaves& keep) {
  const size_t bytes = WgmmaStateLayout::kBytes;
  cudaError_t e = cudaFuncSetAttribute(state_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const int vtiles = p.V / kBV;
  state_wgmma_kernel<<<static_cast<unsigned>(chains * vtiles), kThreads, bytes, s>>>(p, ws, vtiles, chain0, keep);
  return cudaSuccess;
}

}  // namespace kda::cuda::chunk
