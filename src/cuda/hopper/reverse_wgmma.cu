// reverse_wgmma.cu: the backward's reverse state pass on sm_90a wgmma: the same job, inputs and outputs as
// chunk_reverse.cu's mma.sync kernel (which stays the path everywhere else), for K = 128 and 64-column V tiles.
//
// Why. The mma.sync reverse pass takes 1.24 ms of train-h64-fixed's 13.0 ms backward (ncu, session 17: ~9.7 us a
// chunk against the forward state pass's 5.8); like it, its bf16x3 products ldmatrix both planes of both operands
// into every warp. Here each product reads its tiles once per warpgroup (the argument of state_wgmma.cu). Measured
// (session 18): train-h64-fixed's backward -104 us against the mma.sync pass (predicted -600 to -850).
//
// One CTA of 256 threads per (sequence, value head, 64-column V tile) walks the chunks from the last, per chunk:
//   0  dO' = scale dO -> planes (two layouts); dS (the gradient of the chunk-end state)'s planes -> workspace dsend
//   A  dU = A_qk^T dO' + Kd dS^T   warpgroup w: value columns 32 w .. 32 w + 31 (m64n32, 4 + 8 k-blocks)
//                                  -> -dU's planes (and from them workspace du)
//   B  dS = dS diag(decay) + dO'^T Qg + (-dU)^T W
//                                  warpgroup w: key columns 64 w .. 64 w + 63 (m64n64, 4 + 4 k-blocks, its half of dS
//                                  the accumulator across the chain) -> dS's planes for the next chunk's step A
// and ends with dh0. Every product bf16x3 (lo hi, hi lo, hi hi), fp32 accumulation, as chunk_reverse.cu.
//
// Shared memory, CuTe's GMMA layouts (state_wgmma.cuh ReverseWgmmaTypes; every access through the CuTe tensors): W
// and Qg stored [t][d], viewed (d, t) MN-major in two key halves; Kd [t][d] K-major; dS (v, d) K-major in two value
// halves; A_qk stored [r][t], viewed (t, r) MN-major; dO' (v, t) MN-major and again in two value halves (64-byte
// swizzle) for step A's 32-column B; -dU (v, t) MN-major; decay [128]; two mbarriers: 197,136 bytes, one CTA per
// SM. The workspace's dS_end and -dU (BackwardLayout: bf16 planes) are TMA stores of dS's and -dU's own planes, 64
// columns by 32 and 64 rows a box (tma_map.h SaveMaps), issued by thread 0 after the barrier that publishes them and
// read out before the barrier after which they are rewritten; the chain stores nothing to global memory itself
// (as fp32 from its accumulators, 8-byte pieces over 64 rows, dS had held 18% of this pass's stall samples, 73% of
// them on the store queue: ncu, session 20; -dU split into two 4-byte stores a pair cost +120 us, session 27).
// Barriers and the tiles' L2 prefetch as chunk_reverse.cu; its dO rows, though, each thread loads a chunk ahead into
// registers (DoutPairs), not to L2. The tiles are copied by TMA, one thread's boxes a group
// ({Kd, A_qk} for step A, {Qg, W, decay} for step B; each plane half a box in the image of its GMMA layout, as
// state_wgmma.cu) completing on the group's mbarrier; every thread's plane stores are published to the async proxy
// (fence.proxy.async) before the barrier that precedes the wgmma reading them.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/backward_params.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/hopper/tma_map.h"

#if defined(KDA_HAS_CUTE)
#include <cutlass/arch/barrier.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

#include "cuda/hopper/state_stage.cuh"
#include "cuda/hopper/state_wgmma.cuh"
#include "cuda/hopper/wgmma_bf16x3.cuh"
#endif

namespace kda::cuda::chunk {
namespace {

constexpr int kK = 128, kBV = 64, kC = kChunk, kThreads = 256;
using bf16 = __nv_bfloat16;

// Byte offsets of the plane pairs (hi, then lo); two-part planes hold part 0, then part 1.
struct WgmmaReverseLayout {
  static constexpr size_t kPlane64 = 2 * kC * kBV;         // bytes of one [64][64] bf16 plane
  static constexpr size_t kW = 0, kQ = kW + 4 * kPlane64;  // hi / lo x two key halves
  static constexpr size_t kKd = kQ + 4 * kPlane64, kS = kKd + 4 * kPlane64, kA = kS + 4 * kPlane64;
  static constexpr size_t kO = kA + 2 * kPlane64, kO32 = kO + 2 * kPlane64, kU = kO32 + 2 * kPlane64;
  static constexpr size_t kDec = kU + 2 * kPlane64, kBar = kDec + 4 * kK;
  static constexpr size_t kBytes = kBar + 2 * sizeof(uint64_t);  // mbarriers: step A's tiles, step B's
  static_assert(kPlane64 % 1024 == 0 && kBytes == 197136, "GMMA planes and TMA boxes: 1 KB aligned");
  static_assert(kBytes <= 227 * 1024, "one CTA an SM: the opt-in shared memory of sm_90");
};

__global__ void __launch_bounds__(kThreads, 1)
    reverse_wgmma_kernel(const BackwardParams bp, char* ws, int vtiles, int64_t chain0,
                         const __grid_constant__ sm90::TileMaps maps, const __grid_constant__ sm90::SaveMaps saves) {
#if defined(KDA_HAS_CUTE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace cute;
  using Ty = sm90::ReverseWgmmaTypes;
  using Ly = WgmmaReverseLayout;
  constexpr size_t P = Ly::kPlane64;
  const ForwardParams& p = bp.f;

  extern __shared__ __align__(1024) unsigned char smem[];
  sm90::require_1k_aligned(smem);
  // Plane views on a base sb (the loop passes sm90::opaque_base(smem)); a pair's lo plane follows its hi plane.
  auto mn64 = [](unsigned char* sb, size_t off) { return sm90::plane<Ty::LayMN64>(sb, off); };
  auto k128 = [](unsigned char* sb, size_t off) { return sm90::plane<Ty::LayK128>(sb, off); };
  auto k32 = [](unsigned char* sb, size_t off) { return sm90::plane<Ty::LayK32>(sb, off); };
  auto mn32 = [](unsigned char* sb, size_t off) { return sm90::plane<Ty::LayMN32>(sb, off); };
  // W / Qg key half h of plane l (0 hi, 1 lo): 4 P a tensor (P = one [64][64] plane), P a half; dS's value halves
  // ([32][128], P each) the same.
  auto half = [](size_t base, int l, int h) { return base + (2 * l + h) * P; };

  // A products grid over other value heads may start beside this one (backward_chunked.cu's overlap of a partial
  // wave): it reads nothing this grid writes. Without such a launch after it this does nothing.
  asm volatile("griddepcontrol.launch_dependents;");
  const int tid = threadIdx.x, wtid = tid % 128, wg = tid / 128;
  const ChainTile ct = chain_tile(blockIdx.x, vtiles, chain0, kBV, p.HV);
  const int hv = ct.hv, vt = ct.vt, v0 = ct.v0;
  const int V = p.V;

  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, kK, V, p.group);
  const WorkspaceLayout& wl = bl.fwd;
  const ChainChunks cc = chain_chunks(ws, wl, ct.rank, p.has_cu_seqlens());
  const int64_t n = cc.n;
  const ChunkRec* const list = cc.list;
  const float* const tiles = cc.tiles;
  const int64_t first = cc.first, last = cc.last, b = cc.b;
  const TileLayout tl{kK, V};

  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  // TMA (tma_map.h TileMaps): thread 0 issues a group's boxes, completing on the group's mbarrier.
  using Bar = cutlass::arch::ClusterTransactionBarrier;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + Ly::kBar);
  constexpr uint32_t kTxA = 4 * P + 2 * P, kTxB = 8 * P + 4 * kK;  // Kd, A_qk pairs; Qg, W pairs, decay (bytes)
  const TileRows tr = tile_rows(V);
  constexpr uint64_t kHint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
  auto box = [&](const CUtensorMap& m, uint64_t* bar, unsigned char* dst, int col, int row) {
    SM90_TMA_LOAD_2D::copy(&m, bar, kHint, dst, col, row);
  };
  // A plane pair stored [t][d] (hi then lo, [64][128] each) as four boxes of 64 x 64 to dst + 0, P (the second half
  // of d), 2 P (lo), 3 P: Kd's K-major planes (LayK128) and W / Qg's key halves (half() = base + (2 l + h) P).
  auto pair256 = [&](uint64_t* bar, unsigned char* dst, int row) {
    box(maps.rows256, bar, dst, 0, row);
    box(maps.rows256, bar, dst + P, 64, row);
    box(maps.rows256, bar, dst + 2 * P, 0, row + kC);
    box(maps.rows256, bar, dst + 3 * P, 64, row + kC);
  };
  auto load_a = [&](unsigned char* sb, int64_t ci) {  // Kd, A_qk (stored [r][t], viewed (t, r): one box a plane)
    if (ci >= first && tid == 0) {
      const int ti = static_cast<int>(ci * p.HV + hv);
      Bar::arrive_and_expect_tx(&bars[0], kTxA);
      pair256(&bars[0], sb + Ly::kKd, ti * tr.per_tile + tr.kd);
      const int arow = 2 * ti * tr.per_tile + tr.aqk;
      box(maps.rows128, &bars[0], sb + Ly::kA, 0, arow);
      box(maps.rows128, &bars[0], sb + Ly::kA + P, 0, arow + kC);
    }
  };
  auto load_b = [&](unsigned char* sb, int64_t ci) {  // Qg, W, decay
    if (ci >= first && tid == 0) {
      const int row = static_cast<int>(ci * p.HV + hv) * tr.per_tile;
      Bar::arrive_and_expect_tx(&bars[1], kTxB);
      pair256(&bars[1], sb + Ly::kQ, row + tr.qg);
      pair256(&bars[1], sb + Ly::kW, row + tr.w);
      SM90_BULK_COPY_G2S::copy(tile_of(ci) + tl.decay(), &bars[1], sb + Ly::kDec, 4 * kK);
    }
  };
  // Every thread: its plane stores published to the async proxy; the group's copies of chunk ci landed (the
  // mbarrier's (last - 1 - ci)-th completion: the chunks run from the last).
  auto land_and_publish = [&](int group, int64_t ci) {
    cutlass::arch::fence_view_async_shared();
    Bar::wait(&bars[group], static_cast<uint32_t>((last - 1 - ci) & 1));
  };
  if (tid == 0) {
    Bar::init(&bars[0], 1);
    Bar::init(&bars[1], 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  load_a(smem, last - 1);
  load_b(smem, last - 1);

  Ty::MmaUo mma_uo;
  Ty::MmaUk mma_uk;
  Ty::MmaS mma_s;
  auto thr_uo = mma_uo.get_thread_slice(wtid);
  auto thr_uk = mma_uk.get_thread_slice(wtid);
  auto thr_s = mma_s.get_thread_slice(wtid);
  Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<_64, _64>{}));   // (v, d - 64 wg)

  // This warpgroup's half of dS [v][d] (key columns 64 wg ..), the m64n64 accumulator for the whole chain.
  Tensor dS = partition_fragment_C(mma_s, Shape<_64, _64>{});
  // dS_final (or zeros) through the dO' buffers, free until the loop writes them behind the barrier below
  // (state_stage.cuh: why not in place).
  float* const stage_o = reinterpret_cast<float*>(smem + Ly::kO);
  static_assert(4 * Ly::kPlane64 >= sizeof(float) * sm90::kStageRows * sm90::kStageCols, "the stage fits dO's planes");
  if (bp.dfinal.data) {
    const float* const dfin = static_cast<const float*>(bp.dfinal.data);
    sm90::stage_in<kThreads>(stage_o, !p.state_v_first, tid, [&](int r, int c) {
      return dfin[p.state_offset(bp.dfinal.stride, n, hv, v0 + r, c)];
    });
    __syncthreads();
  }
  CUTE_UNROLL
  for (int i = 0; i < size(dS); ++i)
    dS(i) = bp.dfinal.data ? stage_o[get<0>(cS(i)) * sm90::kStageCols + 64 * wg + get<1>(cS(i))] : 0.0f;
  if (bp.dfinal.data) __syncthreads();
  // This thread's accumulator pairs in the planes (sm90::AccPlaneOffset; tests/gpu/test_wgmma_layout.cu checks both
  // uses). dS pair j, (v, 64 wg + column): value half v / 32 = wtid / 64, K-major [32][128] (rows v % 32, so the
  // offsets of thread wtid % 64), its warpgroup's 64-column box 4 KB in. -dU pair j, (t, 32 wg + column) at (v, t) of
  // an MN-major [64][64]: pair j + 8 wg of a 64-column accumulator.
  const sm90::AccPlaneOffset at(wtid), at_s(wtid % 64);
  auto shared_u32 = [](const unsigned char* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); };
  const uint32_t s_off = static_cast<uint32_t>(half(Ly::kS, 0, wtid / 64) + wg * (P / 2));
  auto store_state_planes = [&](unsigned char* sb) {
    const uint32_t sh = shared_u32(sb) + s_off, sl = sh + 2 * P;  // half(kS, 1, h) = half(kS, 0, h) + 2 P
    CUTE_UNROLL
    for (int j = 0; j < size(dS) / 2; ++j) {
      uint32_t h, l;
      split_bf16x2(dS(2 * j), dS(2 * j + 1), h, l);
      sm90::st_shared_u32(sh + at_s(j), h);
      sm90::st_shared_u32(sl + at_s(j), l);
    }
  };
  store_state_planes(smem);
  Tensor accU = partition_fragment_C(mma_uo, Shape<_64, _32>{});
  // dO' pairs (DoutPairs: column pair 2 (tid % 32) of rows tid / 32 + 8 i), their raw bits loaded a chunk ahead, and
  // where pair i lands: o64 + 1024 i in the (v, t) planes, o32 + 512 i in its value half's (sm90::DoutPlaneOffset).
  DoutPairs<kThreads, kBV> dout(tid);
  static_assert(DoutPairs<kThreads, kBV>::kRowStep == 8, "reverse: sm90::DoutPlaneOffset's pair layout");
  const sm90::DoutPlaneOffset dpo(tid);
  const uint32_t o64 = static_cast<uint32_t>(Ly::kO) + dpo.mn64,
                 o32 = static_cast<uint32_t>(Ly::kO32 + (dout.c / 32) * (P / 2)) + dpo.mn32;
  if (last > first) dout.load(bp.dout, list[last - 1], b, hv, v0);
  const TileShareL2<kThreads> share(tl, vt, vtiles);

#pragma unroll 1
  for (int64_t ci = last - 1; ci >= first; --ci) {
    unsigned char* const sb = sm90::opaque_base(smem);
    // The previous chunk's record read first: its dO rows' loads below need it, after this chunk's stores.
    const ChunkRec rec = list[ci], prev = ci > first ? list[ci - 1] : rec;
    if (ci > first) share.prefetch(tile_of(ci - 1), tid);

    // dO' = scale dO of the chunk's rows (zeros past its length) -> its planes (v, t) and, per value half, (v - 32 h,
    // t); then the previous chunk's rows are loaded, landing while this chunk's steps run.
    {
      const uint32_t base = shared_u32(sb);
      dout.store(bp.dout.dtype, p.scale, rec.len, [&](int i, int, int, float x0, float x1) {
        uint32_t h, l;
        split_bf16x2(x0, x1, h, l);
        const uint32_t a64 = base + o64 + 1024 * i, a32 = base + o32 + 512 * i;
        sm90::st_shared_u32(a64, h);
        sm90::st_shared_u32(a64 + P, l);
        sm90::st_shared_u32(a32, h);
        sm90::st_shared_u32(a32 + P, l);
      });
      if (ci > first) dout.load(bp.dout, prev, b, hv, v0);
    }

    // ---- A: dU = A_qk^T dO' + Kd dS^T, this warpgroup's 32 value columns.
    if (tid == 0) cute::tma_store_wait<0>();  // the previous chunk's -dU planes read out: step A rewrites them
    land_and_publish(0, ci);
    __syncthreads();  // Kd, A_qk of this chunk; dO' planes; the dS planes of the previous step
    if (tid == 0) {  // dS_end: rows (task, plane, v0 + 32 h ..) of the state-shaped map, two 64-column boxes each
      const int row = static_cast<int>((ci * p.HV + hv) * 2 * V + v0);
      CUTE_UNROLL
      for (int l = 0; l < 2; ++l)
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h)
          CUTE_UNROLL
          for (int q = 0; q < 2; ++q)
            SM90_TMA_STORE_2D::copy(&saves.state, sb + half(Ly::kS, l, h) + q * (P / 2), 64 * q, row + l * V + 32 * h);
      cute::tma_store_arrive();
    }
    {
      clear(accU);
      sm90::wgmma_bf16x3(mma_uo, thr_uo, mn64(sb, Ly::kA), mn64(sb, Ly::kA + P),
                         mn32(sb, Ly::kO32 + wg * (P / 2)), mn32(sb, Ly::kO32 + P + wg * (P / 2)), accU);
      sm90::wgmma_bf16x3(mma_uk, thr_uk, k128(sb, Ly::kKd), k128(sb, Ly::kKd + 2 * P), k32(sb, half(Ly::kS, 0, wg)),
                         k32(sb, half(Ly::kS, 1, wg)), accU);
      const uint32_t uh = shared_u32(sb + Ly::kU), ul = uh + P;
      CUTE_UNROLL
      for (int i = 0; i < size(accU); i += 2) {
        uint32_t h, l;
        split_bf16x2(-accU(i), -accU(i + 1), h, l);
        sm90::st_shared_u32(uh + at(i / 2 + 8 * wg), h);
        sm90::st_shared_u32(ul + at(i / 2 + 8 * wg), l);
      }
    }
    __syncthreads();  // -dU complete; Kd, A_qk free; every read of the dS planes done
    load_a(sb, ci - 1);

    // ---- B: dS = dS diag(decay) + dO'^T Qg + (-dU)^T W, this warpgroup's 64 key columns.
    if (tid == 0) cute::tma_store_wait<0>();  // dS_end's boxes read out: step B rewrites dS's planes
    land_and_publish(1, ci);
    __syncthreads();  // Qg, W, decay of this chunk; -dU's planes published
    if (tid == 0) {  // -dU: rows (task, plane, t) and columns v0 .. of the values-shaped map
      const int row = static_cast<int>((ci * p.HV + hv) * 2 * kC);
      SM90_TMA_STORE_2D::copy(&saves.values, sb + Ly::kU, v0, row);
      SM90_TMA_STORE_2D::copy(&saves.values, sb + Ly::kU + P, v0, row + kC);
      cute::tma_store_arrive();
    }
    {
      const uint32_t dec = shared_u32(sb + Ly::kDec);
      CUTE_UNROLL
      for (int i = 0; i < size(dS); ++i) dS(i) *= sm90::ld_shared_f32(dec + 4 * (64 * wg + get<1>(cS(i))));
      sm90::wgmma_bf16x3(mma_s, thr_s, mn64(sb, Ly::kO), mn64(sb, Ly::kO + P), mn64(sb, half(Ly::kQ, 0, wg)),
                         mn64(sb, half(Ly::kQ, 1, wg)), dS);
      sm90::wgmma_bf16x3(mma_s, thr_s, mn64(sb, Ly::kU), mn64(sb, Ly::kU + P), mn64(sb, half(Ly::kW, 0, wg)),
                         mn64(sb, half(Ly::kW, 1, wg)), dS);
      store_state_planes(sb);
    }
    __syncthreads();  // Qg, W, decay, dO' and -dU free; the new dS planes written
    load_b(sb, ci - 1);
  }
  if (tid == 0) cute::tma_store_wait<0>();  // the last -dU planes read before the CTA's exit

  // dh0 through the W buffer, free once the last chunk's products are done (the loop's last barrier).
  if (bp.dh0.data) {
    float* const stage_w = reinterpret_cast<float*>(smem + Ly::kW);
    CUTE_UNROLL
    for (int i = 0; i < size(dS); ++i) stage_w[get<0>(cS(i)) * sm90::kStageCols + 64 * wg + get<1>(cS(i))] = dS(i);
    __syncthreads();
    sm90::stage_out<kThreads>(stage_w, !p.state_v_first, tid, [&](int r, int c, float x) {
      store_out(bp.dh0.data, bp.dh0.dtype, p.state_offset(bp.dh0.stride, n, hv, v0 + r, c), x);
    });
  }
#else
  __trap();  // launched only where reverse_wgmma_runs says so
#endif
}

}  // namespace

bool reverse_wgmma_runs(const ForwardParams& p, int bv) {
  const int64_t tasks = workspace_layout(p.B * p.T, p.N, p.HV, kK, p.V).cap * p.HV;
  return state_wgmma_runs(p, bv) && sm90::save_maps_fit(tasks, p.V);  // and the saves' maps (launch below)
}

cudaError_t launch_reverse_wgmma(const BackwardParams& bp, char* ws, int64_t chain0, int64_t chains, cudaStream_t s) {
  const size_t bytes = WgmmaReverseLayout::kBytes;
  cudaError_t e = cudaFuncSetAttribute(reverse_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  // The maps span every forward tile of the workspace (reverse_wgmma_runs checked their rows).
  const WorkspaceLayout wl = workspace_layout(bp.f.B * bp.f.T, bp.f.N, bp.f.HV, kK, bp.f.V);
  sm90::TileMaps maps;
  if ((e = sm90::encode_tile_maps(ws + wl.tiles, wl.cap * bp.f.HV, bp.f.V, &maps)) != cudaSuccess) return e;
  // dS_end and -dU leave as TMA stores of their planes (reverse_wgmma_runs checked the maps' rows).
  const BackwardLayout bl = backward_layout(bp.f.B, bp.f.T, bp.f.N, bp.f.HV, kK, bp.f.V, bp.f.group);
  sm90::SaveMaps saves;
  if ((e = sm90::encode_save_maps(ws + bl.dsend, ws + bl.du, wl.cap * bp.f.HV, bp.f.V, 32, &saves)) != cudaSuccess)
    return e;
  const int vtiles = bp.f.V / kBV;
  reverse_wgmma_kernel<<<static_cast<unsigned>(chains * vtiles), kThreads, bytes, s>>>(bp, ws, vtiles, chain0, maps,
                                                                                         saves);
  return cudaSuccess;
}

}  // namespace kda::cuda::chunk
