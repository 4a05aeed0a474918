// state_wgmma.cu: the forward's sequential state pass on sm_90a wgmma (issue #6, docs/hopper.md step 1): the same
// job, inputs and outputs as chunk_state.cu's mma.sync kernel (which stays the path everywhere else), for K = 128 and
// 64-column V tiles, fed by phase 1's workspace tiles; and the two passes of the segmented state pass
// (chunk_segments.cu) where it runs.
//
// Why. ncu of the mma.sync state pass (bench/LEDGER.md, session 17) puts it at the shared-memory limit: "Mem Busy"
// 62%, ~6 K of a chunk's ~10 K cycles moving ~800 KB through shared memory at 128 bytes a cycle, against ~2.5-3.6 K
// cycles of tensor issue. Its bf16x3 products ldmatrix both planes of both operands into every warp, and each
// S^T fragment is read by 8 warps. wgmma reads a B tile once for its warpgroup's 64 rows: this kernel's products
// read ~310 KB a chunk (W S^T and Qg S^T 96 KB each, V_new^T Kd 72 KB, A_qk V_new 48 KB), with the cp.async copies
// and plane stores ~490 KB, ~3.8 K cycles: predicted 2-2.5x faster than 734 us at h64-fixed if the two warpgroups
// overlap as planned (~1.5-2.6 K cycles of wgmma a chunk on each). Measured (session 18, ncu): 658-661 us, shared
// memory no longer the limit (Mem Busy 43%) but ~10 K cycles a chunk still; with the copies on TMA (session 19)
// 552 us, a quarter fewer instructions (bench/LEDGER.md).
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
// Shared memory, all in CuTe's 128-byte-swizzled GMMA layouts (each plane 1 KB aligned; the wgmma descriptors come
// from the CuTe tensors; the TMA boxes and the accumulators' plane stores, sm90::AccPlaneRows, are checked against
// them on the host, test_wgmma_layout.cu): W, Qg [t][d] and S [v][d] K-major (A and B of W S^T / Qg S^T), Kd [t][d]
// MN-major (B of V_new^T Kd, N = d), A_qk [t][t'] K-major, V_new [t][v] MN-major (A of V_new^T Kd with M = v, B of
// A_qk V_new with N = v: one layout), hi then lo plane each; U fp32 as two swizzled boxes (sm90::u_offset); decay
// [128]; two mbarriers: 180,752 bytes, one CTA per SM.
// Loads and barriers as chunk_state.cu: group A {W, U, Qg, decay} lands behind the previous chunk's phase B, group B
// {Kd, A_qk} behind this chunk's phase A (the decay in group A so that the chain scales S in phase A). Each group is
// one thread's TMA copies (a plane half, or U's half, a box in the image the GMMA layout expects; decay one bulk copy)
// completing on the group's mbarrier: the cp.async copies they replace cost ~26% of the kernel's instructions
// (address math for 20 16-byte pieces a thread a group; ncu, session 19). Every thread's plane stores are published
// to the tensor cores' async proxy (fence.proxy.async) before the CTA barrier that precedes the wgmma reading them,
// and each warpgroup waits for its own wgmma before the barrier that frees their operands (and so before the next TMA
// into them).
// The backward's recompute (no output; BackwardSaves: each chunk's start state and V_new as bf16 hi / lo planes)
// copies no Qg or A_qk. Its saves, and those of a forward that saves for the backward, are the planes the chain
// already writes for its own products: the state's [v][d] planes (two 64-column boxes each) and V_new's [t][v], in
// the 128-byte-swizzled layout a bf16 TMA box of 64 x 64 has, so the output warpgroup's first thread stores them with
// TMA straight from there (the state after phase A's barrier, V_new after phase B's), waiting for each store to have
// read them before the barrier after which the chain rewrites them. The chain's own global stores of 48 KB a chunk
// had made the recompute's pass 729 us against the forward's 444 (ncu, session 21), and the saving forward's 1.07 ms
// against 0.45 (session 39).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"
#include "cuda/generic/stage_clocks.h"
#include "cuda/hopper/tma_map.h"

#if defined(KDA_HAS_CUTE)
#include <cutlass/arch/barrier.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

#include "cuda/hopper/state_stage.cuh"
#include "cuda/hopper/state_wgmma.cuh"
#include "cuda/hopper/wgmma_bf16x3.cuh"
#endif

#if KDA_STAGE_CLOCKS
namespace kda::cuda::chunk {
__constant__ stage_clocks::Buffer g_state_clocks = {nullptr, 0};  // stage_clocks.h Buffer
}  // namespace kda::cuda::chunk

int kda::stage_clocks::state::set_buffer(void* buf, int ctas) {
  const Buffer b = make_buffer(buf, ctas);
  return static_cast<int>(cudaMemcpyToSymbol(kda::cuda::chunk::g_state_clocks, &b, sizeof(b)));
}
#endif

namespace kda::cuda::chunk {
namespace {

constexpr int kK = 128, kBV = 64, kC = kChunk, kThreads = 256;
using bf16 = __nv_bfloat16;

// Byte offsets (a plane pair: the hi plane, then the lo plane).
struct WgmmaStateLayout {
  static constexpr int kRowPlane = kC * kK, kSPlane = kBV * kK, kAPlane = kC * kC, kVPlane = kC * kBV;  // elements
  static constexpr size_t kW = 0, kQ = kW + 4 * kRowPlane, kKd = kQ + 4 * kRowPlane, kS = kKd + 4 * kRowPlane;
  static constexpr size_t kA = kS + 4 * kSPlane, kVn = kA + 4 * kAPlane, kU = kVn + 4 * kVPlane;
  static constexpr size_t kDec = kU + 4 * kC * kBV, kBar = kDec + 4 * kK;  // mbarriers: group A, group B
  static constexpr size_t kBytes = kBar + 2 * sizeof(uint64_t);
  static_assert(kKd % 1024 == 0 && kS % 1024 == 0 && kA % 1024 == 0 && kVn % 1024 == 0 && kU % 1024 == 0,
                "GMMA planes and TMA boxes with a 128-byte swizzle: 1 KB aligned");
};

// What an instance does with BackwardSaves: nothing (the forward); TMA stores from the chain's planes issued by the
// output warpgroup's first thread, with no output (kTma: the backward's recompute) or beside it (kTmaOut: a forward
// that saves for the backward); the chain's own stores (kDirect: where the maps cannot be had). A template argument,
// not a runtime flag: the forward's instance compiles to the loop it had without the saves' branches (a runtime flag
// cost the forward's pass ~60 us at train-h64-fixed, session 22). The chain's own stores of 48 KB a chunk are on the
// serial path: ncu put the saving forward's pass at 1.06-1.08 ms against 0.45 without saves and 0.48 for kTma
// (session 39).
// kSeg: a pass of the segmented state pass (SegmentArgs, chunk_segments.cu; only without saves): the CTA walks one
// segment of its chain from its role's start (initial state, zeros, the identity for the transition's rows v0 >= V,
// or the segment's hand-off) and ends in its role's rows of the segments' workspace; the transition's rows take U = 0
// (their U buffer zeroed once, no U copies) and no CTA of a segment j > 0 writes outputs in pass 1. As chunk_state.cu's
// kSeg instance, whose index math (chunk_map.h seg_tile, segment_role, segment_chunks) it shares; the unsplit
// instances compile without it.
enum class Saves { kNone, kTma, kTmaOut, kDirect };
template <Saves kSaves, bool kSeg = false>
__global__ void __launch_bounds__(kThreads, 1)
    state_wgmma_kernel(const ForwardParams p, const char* ws, int vtiles, int64_t chain0, const BackwardSaves keep,
                       const __grid_constant__ sm90::TileMaps maps, const __grid_constant__ sm90::SaveMaps saves,
                       const SegmentArgs sg) {
  static_assert(!kSeg || kSaves == Saves::kNone, "a segmented pass keeps nothing for a backward");
#if defined(KDA_HAS_CUTE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool stage_saves = kSaves == Saves::kTma || kSaves == Saves::kTmaOut;
  constexpr bool direct_saves = kSaves == Saves::kDirect;
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

  // A phase-1 grid over other value heads may start beside this one (forward_chunked.cu's overlap of a partial
  // wave): it reads nothing this grid writes. Without such a launch after it this does nothing.
  asm volatile("griddepcontrol.launch_dependents;");
  const int tid = threadIdx.x, wtid = tid % 128;
  const bool chain = tid < 128;  // warpgroup 0; warpgroup 1 computes the output
  const int V = p.V;
  const SegTile sgt = kSeg ? seg_tile(blockIdx.x, sg.pass, sg.segments, kBV, V, kK, chain0, p.HV) : SegTile{};
  const ChainTile ct =
      kSeg ? ChainTile{sgt.rank, sgt.hv, sgt.v0 / kBV, sgt.v0} : chain_tile(blockIdx.x, vtiles, chain0, kBV, p.HV);
  const int hv = ct.hv, v0 = ct.v0;
  const SegmentRole role = kSeg ? segment_role(sgt, sg.pass, sg.segments, V, kK)
                                : SegmentRole{SegmentRole::kInitial, 0, SegmentRole::kFinal, 0, true, false};
  const bool m_rows = kSeg && role.transition;  // the transition's rows: U = 0, no output
  // Whether the output warpgroup computes and stores o (and Qg, A_qk are copied): a compile-time true for the
  // forward's unsplit instances, false for the backward's recompute (kTma).
  const bool has_out = kSaves != Saves::kTma && (!kSeg || (p.out != nullptr && role.outputs));

  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, kK, V);
  const ChainChunks cc = chain_chunks(ws, wl, ct.rank, p.has_cu_seqlens());
  const int64_t n = cc.n;
  const ChunkRec* const list = cc.list;
  const float* const tiles = cc.tiles;
  int64_t first = cc.first, last = cc.last;
  if (kSeg) segment_chunks(cc.first, cc.last, sgt.seg, sg.segments, &first, &last);
  const int64_t b = cc.b;
  const TileLayout tl{kK, V};
  // The segment's end rows [v][K] in the segments' workspace (X_1, or [B_seg; M_seg]), or null.
  float* const seg_end = !kSeg ? nullptr
                         : role.end == SegmentRole::kStarts ? sg.starts + role.end_at
                         : role.end == SegmentRole::kEnds   ? sg.ends + role.end_at
                                                            : nullptr;

  auto tile_of = [&](int64_t ci) { return tiles + (ci * p.HV + hv) * tl.floats(); };
  // TMA: one thread (the output warpgroup's first: the chain is the critical path) issues a group's copies, each
  // completing its bytes on the group's mbarrier; every thread waits on it before reading. A tile's rows in the maps.
  using Bar = cutlass::arch::ClusterTransactionBarrier;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + Ly::kBar);
  const bool issuer = tid == kThreads / 2;
  // Bytes each group's copies land: W, Qg plane pairs and U; Kd, A_qk plane pairs and decay.
  // The decay rides with group A: the chain scales S by it in phase A (below), off phase B's path.
  constexpr uint32_t kTxA = 2 * 4 * Ly::kRowPlane + 4 * kC * kBV + 4 * kK, kTxB = 4 * Ly::kRowPlane + 4 * Ly::kAPlane;
  const TileRows tr = tile_rows(V);
  constexpr uint64_t kHint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
  auto box = [&](const CUtensorMap& m, uint64_t* bar, unsigned char* dst, int col, int row) {
    SM90_TMA_LOAD_2D::copy(&m, bar, kHint, dst, col, row);
  };
  auto pair256 = [&](uint64_t* bar, unsigned char* dst, int row) {  // a hi / lo plane pair [2][64][128]
    box(maps.rows256, bar, dst, 0, row);
    box(maps.rows256, bar, dst + 4 * kC * 32, 64, row);  // the second half of d: 8 KB on (LayK128, LayMN128)
    box(maps.rows256, bar, dst + 2 * Ly::kRowPlane, 0, row + kC);
    box(maps.rows256, bar, dst + 2 * Ly::kRowPlane + 4 * kC * 32, 64, row + kC);
  };
  // Without output (the backward's recompute, a segment's CTA that writes none): Qg and A_qk have no reader, not
  // copied, their buffers free. The transition's rows: no U copies (the buffer holds zeros).
  auto load_a = [&](unsigned char* sb, int64_t ci) {  // W, Qg, U, decay
    if (ci < last && issuer) {
      const int ti = static_cast<int>(ci * p.HV + hv), row = ti * tr.per_tile;
      Bar::arrive_and_expect_tx(&bars[0], kTxA - (has_out ? 0 : 4 * Ly::kRowPlane) - (m_rows ? 4 * kC * kBV : 0));
      pair256(&bars[0], sb + Ly::kW, row + tr.w);
      if (has_out) pair256(&bars[0], sb + Ly::kQ, row + tr.qg);
      if (!m_rows) {
        SM90_TMA_LOAD_3D::copy(&maps.u, &bars[0], kHint, sb + Ly::kU, v0, 0, ti);
        SM90_TMA_LOAD_3D::copy(&maps.u, &bars[0], kHint, sb + Ly::kU + 8192, v0 + 32, 0, ti);
      }
      SM90_BULK_COPY_G2S::copy(tile_of(ci) + tl.decay(), &bars[0], sb + Ly::kDec, 4 * kK);
    }
  };
  auto load_b = [&](unsigned char* sb, int64_t ci) {  // Kd (stored [t][d], viewed (d, t)), A_qk
    if (ci < last && issuer) {
      const int ti = static_cast<int>(ci * p.HV + hv);
      Bar::arrive_and_expect_tx(&bars[1], has_out ? kTxB : kTxB - 4 * Ly::kAPlane);
      pair256(&bars[1], sb + Ly::kKd, ti * tr.per_tile + tr.kd);
      if (has_out) {
        const int arow = 2 * ti * tr.per_tile + tr.aqk;
        box(maps.rows128, &bars[1], sb + Ly::kA, 0, arow);
        box(maps.rows128, &bars[1], sb + kAl, 0, arow + kC);
      }
    }
  };
  // Every thread: its plane stores published to the async proxy; the group's copies landed (the mbarrier's phase of
  // chunk ci, the group's (ci - first)-th completion).
  auto land_and_publish = [&](int group, int64_t ci) {
    cutlass::arch::fence_view_async_shared();
    Bar::wait(&bars[group], static_cast<uint32_t>((ci - first) & 1));
  };
  if (tid == 0) {
    Bar::init(&bars[0], 1);
    Bar::init(&bars[1], 1);
    cutlass::arch::fence_barrier_init();
  }
  if (m_rows) {  // U = 0 for the transition's rows: never copied, read by the chain's V_new = U - W S^T
    float* const u = reinterpret_cast<float*>(smem + Ly::kU);
    for (int e = tid; e < kC * kBV; e += kThreads) u[e] = 0.0f;
  }
  __syncthreads();
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
  // This thread's accumulator pairs in a plane (S's (v, d) planes, V_new's stored [t][v]), four a stmatrix:
  // sm90::AccPlaneRows.
  const sm90::AccPlaneRows rows(wtid);
  auto shared_u32 = [](const unsigned char* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); };
  auto store_state_planes = [&](unsigned char* sb) {
    const uint32_t sh = shared_u32(sb + Ly::kS), sl = shared_u32(sb + kSl);
    CUTE_UNROLL
    for (int q = 0; q < size(S) / 8; ++q) {
      uint32_t h[4], l[4];
      CUTE_UNROLL
      for (int m = 0; m < 4; ++m) split_bf16x2(S(8 * q + 2 * m), S(8 * q + 2 * m + 1), h[m], l[m]);
      sm90::stmatrix_x4(sh + rows(q), h);
      sm90::stmatrix_x4(sl + rows(q), l);
    }
  };
  // The initial state (or zeros) through the Kd buffer, free until the first chunk's group B is issued behind the
  // loop's first barrier (state_stage.cuh: why not in place).
  float* const stage_kd = reinterpret_cast<float*>(smem + Ly::kKd);
  static_assert(4 * Ly::kRowPlane >= sizeof(float) * sm90::kStageRows * sm90::kStageCols, "the stage fits Kd's planes");
  const bool from_initial = p.has_initial_state() && role.start == SegmentRole::kInitial;
  if (from_initial) {
    const float* const init = static_cast<const float*>(p.initial_state.data);
    sm90::stage_in<kThreads>(stage_kd, !p.state_v_first, tid, [&](int r, int c) {
      return init[p.state_offset(p.initial_state.stride, n, hv, v0 + r, c)];
    });
    __syncthreads();
  }
  if (chain) {
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i) {
      const int v = get<0>(cVK(i)), d = get<1>(cVK(i));
      if (kSeg && role.start == SegmentRole::kHandOff)
        S(i) = sg.starts[role.start_at + int64_t{v0 + v} * kK + d];
      else if (kSeg && role.start != SegmentRole::kInitial)  // B from zero, M from the identity
        S(i) = role.start == SegmentRole::kIdentity && v0 + v - V == d ? 1.0f : 0.0f;
      else
        S(i) = from_initial ? stage_kd[v * sm90::kStageCols + d] : 0.0f;
    }
    store_state_planes(smem);
  }
  Tensor acc = partition_fragment_C(mma_xs, Shape<_64, _64>{});  // W S^T (chain), Qg S^T + A_qk V_new (output)
  // Chunk step ci's stamp s (stage_clocks.h's state pass) by each warp's lane 0, in a KDA_STAGE_CLOCKS build only.
  auto stamp = [&](int64_t ci, int s) {
#if KDA_STAGE_CLOCKS
    namespace scs = stage_clocks::state;
    const stage_clocks::Buffer cb = g_state_clocks;
    if (!kSeg && cb.buf && (tid & 31) == 0 && static_cast<int>(blockIdx.x) < cb.ctas && ci - first < scs::kMaxSteps)
      cb.buf[scs::index(blockIdx.x, tid >> 5, static_cast<int>(ci - first), s)] = clock64();
#else
    (void)ci;
    (void)s;
#endif
  };

#pragma unroll 1
  for (int64_t ci = first; ci < last; ++ci) {
    stamp(ci, 0);
    const ChunkRec rec = list[ci];
    unsigned char* const sb = sm90::opaque_base(smem);
    // The previous chunk's V_new planes (stored after its phase B barrier) read out before the chain rewrites them.
    if (stage_saves && issuer) cute::tma_store_wait<0>();
    if (direct_saves && chain && keep.starts) {  // the backward's copy of the chunk-start state, planes [2][V][K]
      bf16* const st = keep.starts + (ci * p.HV + hv) * 2 * int64_t{V} * kK + v0 * kK;
      CUTE_UNROLL
      for (int i = 0; i < size(S); i += 2)
        store_split2(st, int64_t{V} * kK, get<0>(cVK(i)) * kK + get<1>(cVK(i)), S(i), S(i + 1));
    }

    // ---- Phase A: group A of this chunk and the previous chunk's state planes, published.
    land_and_publish(0, ci);
    stamp(ci, 1);
    __syncthreads();
    load_b(sb, ci);
    if (stage_saves && issuer) {  // the chunk-start state's planes: rows (task, plane, v0 ..) of the [rows][128] map
      const int row = static_cast<int>((ci * p.HV + hv) * 2 * V + v0);
      CUTE_UNROLL
      for (int q = 0; q < kK / 64; ++q) {
        SM90_TMA_STORE_2D::copy(&saves.state, sb + Ly::kS + 8192 * q, 64 * q, row);
        SM90_TMA_STORE_2D::copy(&saves.state, sb + kSl + 8192 * q, 64 * q, row + V);
      }
      cute::tma_store_arrive();
    }
    clear(acc);
    if (chain) {  // V_new = U - W S^T -> V_new's planes (and the backward's copy of them, [2][C][V])
      // U's pairs are read while W S^T runs: after it, their loads (2 wavefronts each, and queued behind the output
      // warpgroup's operand reads) stood between the product and V_new's splits (ncu, session 66: ~7% of the
      // pass's stall samples on the subtractions). 32 registers, held across the product.
      const uint32_t us = shared_u32(sb + Ly::kU), dec = shared_u32(sb + Ly::kDec);
      float2 u[size(acc) / 2];
      auto load_u = [&] {
        CUTE_UNROLL
        for (int i = 0; i < size(acc); i += 2)
          u[i / 2] = sm90::ld_shared_f32x2(us + sm90::u_offset(get<0>(cXS(i)), get<1>(cXS(i))));
      };
      sm90::wgmma_bf16x3(mma_xs, thr_xs, k128(sb, Ly::kW), k128(sb, kWl), k128(sb, Ly::kS), k128(sb, kSl), acc, load_u);
      stamp(ci, 2);
      // S diag(decay) for phase B, here among V_new's independent splits and stores, not before phase B's product.
      // (Inside load_u, beside the product, ptxas serialized the recompute instance's wgmma: C7518.)
      CUTE_UNROLL
      for (int i = 0; i < size(S); ++i) S(i) *= sm90::ld_shared_f32(dec + 4 * get<1>(cVK(i)));
      const uint32_t vh = shared_u32(sb + Ly::kVn), vl = shared_u32(sb + kVl);
      bf16* const vn = direct_saves && keep.vnew ? keep.vnew + (ci * p.HV + hv) * 2 * int64_t{kC} * V + v0 : nullptr;
      int Vo = V;  // opaque a chunk: hoisted out of the chain, the 16 offsets t V + v were spilled
      asm volatile("" : "+r"(Vo));
      CUTE_UNROLL
      for (int q = 0; q < size(acc) / 8; ++q) {  // (v, t) and (v + 1, t) adjacent in the MN-major layout (v even)
        uint32_t h[4], l[4];
        CUTE_UNROLL
        for (int m = 0; m < 4; ++m) {
          const int i = 8 * q + 2 * m, t = get<0>(cXS(i)), v = get<1>(cXS(i));
          split_bf16x2(u[i / 2].x - acc(i), u[i / 2].y - acc(i + 1), h[m], l[m]);
          if (vn) store_planes2(vn, int64_t{kC} * Vo, t * Vo + v, h[m], l[m]);
        }
        sm90::stmatrix_x4(vh + rows(q), h);
        sm90::stmatrix_x4(vl + rows(q), l);
      }
    } else if (has_out && p.out != nullptr) {  // o = Qg S^T, held into phase B
      sm90::wgmma_bf16x3(mma_xs, thr_xs, k128(sb, Ly::kQ), k128(sb, kQl), k128(sb, Ly::kS), k128(sb, kSl), acc);
      stamp(ci, 2);
    }

    // ---- Phase B: group B landed; V_new's planes written and published; W, Qg, U and the state planes read.
    if (stage_saves && issuer) cute::tma_store_wait<0>();  // the state planes read: phase B rewrites them
    stamp(ci, 3);
    land_and_publish(1, ci);
    stamp(ci, 4);
    __syncthreads();
    load_a(sb, ci + 1);
    if (stage_saves && issuer) {  // V_new's planes: rows (task, plane, t) and columns v0 .. of the [rows][V] map
      const int row = static_cast<int>((ci * p.HV + hv) * 2 * kC);
      SM90_TMA_STORE_2D::copy(&saves.values, sb + Ly::kVn, v0, row);
      SM90_TMA_STORE_2D::copy(&saves.values, sb + kVl, v0, row + kC);
      cute::tma_store_arrive();
    }
    if (chain) {  // S = S diag(decay) + V_new^T Kd (S scaled in phase A), then its planes for the next phase A
      sm90::wgmma_bf16x3(mma_vk, thr_vk, mn64(sb, Ly::kVn), mn64(sb, kVl), mn128(sb, Ly::kKd), mn128(sb, kKl), S);
      stamp(ci, 5);
      store_state_planes(sb);
    } else if (has_out && p.out != nullptr) {  // o += A_qk V_new; the chunk's L rows to out (no output: the backward's
      // recompute keeps only the chain's state and V_new, and the tensor cores are the chain's)
      sm90::wgmma_bf16x3(mma_av, thr_av, k64(sb, Ly::kA), k64(sb, kAl), mn64(sb, Ly::kVn), mn64(sb, kVl), acc);
      stamp(ci, 5);
      // This thread's two rows of the chunk (pair j at row r + 8 (j % 2), columns v0 + acc_col(wtid, j), v
      // contiguous): the row offsets and the dtype branch once a chunk (per element they were 11% of the pass's
      // instructions, ncu session 19).
      const int r = sm90::acc_row(wtid, 0);
      const int64_t o0 = b * p.out_stride[0] + hv * p.out_stride[2] + v0 + sm90::acc_col(wtid, 0) +
                         (rec.start + r) * p.out_stride[1];
      const int64_t o8 = o0 + 8 * p.out_stride[1];
      const bool in0 = r < rec.len, in8 = r + 8 < rec.len;
      auto put = [&](auto* out, auto pack) {
        using Pair = decltype(pack(0.0f, 0.0f));
        CUTE_UNROLL
        for (int j = 0; j < size(acc) / 2; ++j)
          if (j % 2 ? in8 : in0)
            *reinterpret_cast<Pair*>(out + (j % 2 ? o8 : o0) + 8 * (j / 2)) =
                pack(p.scale * acc(2 * j), p.scale * acc(2 * j + 1));
      };
      if (p.out_dtype == KDA_DTYPE_BFLOAT16)
        put(static_cast<bf16*>(p.out), [](float x0, float x1) { return __floats2bfloat162_rn(x0, x1); });
      else if (p.out_dtype == KDA_DTYPE_FLOAT16)
        put(static_cast<__half*>(p.out), [](float x0, float x1) { return __floats2half2_rn(x0, x1); });
      else
        put(static_cast<float*>(p.out), [](float x0, float x1) { return make_float2(x0, x1); });
    }
    stamp(ci, 6);
  }

  // As chunk_state.cu: every read of initial_state happened before the first barrier and no other CTA touches
  // these entries, so final_state may alias initial_state. Each thread stores its own fragment from a row base and
  // two strides: a few instructions an element (state_stage.cuh: why not state_offset's per element). Staged
  // through shared memory as the initial state is, the stage kept values live across the loop (ptxas: spills in it).
  if (stage_saves && issuer) cute::tma_store_wait<0>();  // the last V_new planes read before the CTA's exit
  if (kSeg && chain && seg_end != nullptr) {
    CUTE_UNROLL
    for (int i = 0; i < size(S); ++i) seg_end[int64_t{v0 + get<0>(cVK(i))} * kK + get<1>(cVK(i))] = S(i);
  } else if (chain && p.has_final_state() && role.end == SegmentRole::kFinal) {
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
  if (p.backend != KDA_BACKEND_CUDA_HOPPER || bv != kBV || !state_wgmma_available(p)) return false;
  // TMA coordinates are int32: the rows of every tile must be addressable (~256 GB of workspace).
  return sm90::tile_maps_fit(workspace_layout(p.B * p.T, p.N, p.HV, kK, p.V).cap * p.HV, p.V);
}

cudaError_t launch_state_wgmma(const ForwardParams& p, const char* ws, int64_t chain0, int64_t chains, cudaStream_t s,
                               const BackwardSaves& keep) {
  const size_t bytes = WgmmaStateLayout::kBytes;
  // The maps span every tile of the workspace (state_wgmma_runs checked that their rows fit TMA's int32 coordinates).
  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, kK, p.V);
  sm90::TileMaps maps;
  cudaError_t e;
  if ((e = sm90::encode_tile_maps(ws + wl.tiles, wl.cap * p.HV, p.V, &maps)) != cudaSuccess) return e;
  // Both saves (the backward's recompute, or a forward that saves for it): they leave from the chain's planes by TMA
  // stores issued by the output warpgroup's first thread, not the chain's own global stores. Where the maps cannot be
  // had, the chain stores them itself.
  sm90::SaveMaps saves{};
  bool stage_saves = false;
  if (keep.starts != nullptr && keep.vnew != nullptr && sm90::save_maps_fit(wl.cap * p.HV, p.V))
    stage_saves = sm90::encode_save_maps(keep.starts, keep.vnew, wl.cap * p.HV, p.V, 64, &saves) == cudaSuccess;
  auto* const kernel = stage_saves ? (p.out == nullptr ? state_wgmma_kernel<Saves::kTma>
                                                       : state_wgmma_kernel<Saves::kTmaOut>)
                       : keep.starts || keep.vnew ? state_wgmma_kernel<Saves::kDirect>
                                                  : state_wgmma_kernel<Saves::kNone>;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes))) !=
      cudaSuccess)
    return e;
  const int vtiles = p.V / kBV;
  kernel<<<static_cast<unsigned>(chains * vtiles), kThreads, bytes, s>>>(p, ws, vtiles, chain0, keep, maps, saves,
                                                                        SegmentArgs{});
  return cudaSuccess;
}

cudaError_t launch_state_wgmma_segment_pass(const ForwardParams& p, const char* ws, const SegmentArgs& sg,
                                            cudaStream_t s) {
  const size_t bytes = WgmmaStateLayout::kBytes;
  const WorkspaceLayout wl = workspace_layout(p.B * p.T, p.N, p.HV, kK, p.V);
  sm90::TileMaps maps;
  cudaError_t e;
  if ((e = sm90::encode_tile_maps(ws + wl.tiles, wl.cap * p.HV, p.V, &maps)) != cudaSuccess) return e;
  auto* const kernel = state_wgmma_kernel<Saves::kNone, true>;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes))) !=
      cudaSuccess)
    return e;
  const int64_t ctas = p.N * p.HV * segment_pass_ctas(sg.pass, sg.segments, kBV, p.V, kK);
  kernel<<<static_cast<unsigned>(ctas), kThreads, bytes, s>>>(p, ws, p.V / kBV, 0, BackwardSaves{}, maps,
                                                              sm90::SaveMaps{}, sg);
  return cudaSuccess;
}

}  // namespace kda::cuda::chunk
