// state_wgmma.cuh: the shared-memory layouts and wgmma atoms of the sm_90a state passes (state_wgmma.cu, the
// forward's; reverse_wgmma.cu, the backward's), in one place for the kernels and for the host test that checks what
// they assume of them (tests/gpu/test_wgmma_layout.cu, WgmmaStateLayout: 16-byte copy pieces contiguous, pair stores
// adjacent, accumulator pairs adjacent columns), and the two kernels' shared-memory plumbing (plane views on an
// opaque base, the base's alignment).
// Needs CuTe (the nvidia-cutlass headers).
#pragma once

#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace kda::cuda::sm90 {

struct StateWgmmaTypes {
  using TB = cutlass::bfloat16_t;
  // W, Qg [t][d] and the state S [v][d]: K-major, the A and B of W S^T / Qg S^T.
  using LayK128 = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<TB>{},
                                               cute::Shape<cute::_64, cute::_128>{}));
  // A_qk [t][t']: K-major, the A of A_qk V_new.
  using LayK64 = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<TB>{},
                                              cute::Shape<cute::_64, cute::_64>{}));
  // V_new stored [t][v], viewed (v, t): MN-major, the A of V_new^T Kd (M = v) and the B of A_qk V_new (N = v).
  using LayMN64 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<TB>{},
                                               cute::Shape<cute::_64, cute::_64>{}));
  // Kd stored [t][d], viewed (d, t): MN-major, the B of V_new^T Kd (N = d). Atoms ordered t first, so each 64-column
  // half of d holds its 64 rows of t contiguously: the image of one TMA box (64 x 64, 128-byte swizzle) a half.
  using LayMN128 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<TB>{},
                                                cute::Shape<cute::_128, cute::_64>{},
                                                cute::Step<cute::_2, cute::_1>{}));
  using MmaXS = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>{}));  // W S^T, Qg S^T
  using MmaVK = decltype(cute::make_tiled_mma(
      cute::SM90_64x128x16_F32BF16BF16_SS<cute::GMMA::Major::MN, cute::GMMA::Major::MN>{}));  // V_new^T Kd
  using MmaAV = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{}));  // A_qk V_new
};

// The reverse pass (reverse_wgmma.cu): warpgroup w owns the value columns 32 w .. 32 w + 31 of dU (step A) and the
// key columns 64 w .. 64 w + 63 of dS (step B).
struct ReverseWgmmaTypes {
  using TB = cutlass::bfloat16_t;
  using LayK128 = StateWgmmaTypes::LayK128;  // Kd [t][d]: K-major, the A of Kd dS^T
  using LayMN64 = StateWgmmaTypes::LayMN64;  // (m | n, t): A_qk^T (t, r), dO' (v, t), -dU (v, t), W / Qg halves (d, t)
  // dS planes, one per value half (v - 32 w, d): K-major, the B of Kd dS^T (N = 32 values).
  using LayK32 = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<TB>{},
                                              cute::Shape<cute::_32, cute::_128>{}));
  // dO' once more, one plane per value half (v - 32 w, r): MN-major with 64-byte swizzle, the B of A_qk^T dO'.
  using LayMN32 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW64_Atom<TB>{},
                                               cute::Shape<cute::_32, cute::_64>{}));
  using MmaUo = decltype(cute::make_tiled_mma(
      cute::SM90_64x32x16_F32BF16BF16_SS<cute::GMMA::Major::MN, cute::GMMA::Major::MN>{}));  // A_qk^T dO'
  using MmaUk = decltype(cute::make_tiled_mma(
      cute::SM90_64x32x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>{}));  // Kd dS^T
  using MmaS = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::MN, cute::GMMA::Major::MN>{}));  // dO'^T Qg, dU^T W
};

// U's fp32 tile [64][64] (t, v) in shared memory as two TMA boxes of 32 columns (128-byte rows, 128-byte swizzle):
// the byte offset of (t, v). Swizzled so the output fragment's float2 reads (8 rows, 4 column pairs a warp) spread
// over the banks; a dense [64][64] would put all 8 rows on the same banks.
__host__ __device__ constexpr int u_offset(int t, int v) {
  return (v / 32) * 8192 + t * 128 + ((((v % 32) / 4) ^ (t % 8)) * 16) + (v % 4) * 4;
}

// Where thread wtid of a warpgroup puts its m64nN fp32 accumulator pairs in a [64][N] bf16 plane with the 128-byte
// swizzle, N a multiple of 64 (8 KB a 64-column box): the state's (v, d) planes (LayK128) and V_new's stored [t][v]
// (LayMN64 viewed (v, t)). Pair j (elements 2 j, 2 j + 1 of CuTe's accumulator) is row acc_row(wtid, j), columns
// acc_col(wtid, j) + {0, 1}; its byte offset is the thread's base plus a term fixed by j
// but for one XOR with the thread's row % 8 (the swizzle), so a plane's stores cost a few instructions a 16-byte
// column, not the ~12 a pair of the layout's general index math (ncu, session 19: 28% of the state pass's
// instructions). tests/gpu/test_wgmma_layout.cu checks it against CuTe's accumulator and plane layouts.
__host__ __device__ constexpr int acc_row(int wtid, int j) { return 16 * (wtid / 32) + (wtid % 32) / 4 + 8 * (j % 2); }
__host__ __device__ constexpr int acc_col(int wtid, int j) { return 8 * (j / 2) + 2 * (wtid % 4); }
struct AccPlaneOffset {
  uint32_t base, x;  // (row % 8 is (wtid % 32) / 4) row 128 + 4 (wtid % 4); (row % 8) 16
  __host__ __device__ explicit AccPlaneOffset(int wtid)
      : base(static_cast<uint32_t>((16 * (wtid / 32) + (wtid % 32) / 4) * 128 + 4 * (wtid % 4))),
        x(static_cast<uint32_t>((wtid % 32) / 4 * 16)) {}
  __host__ __device__ uint32_t operator()(int j) const {
    const int c = j / 2;  // the 8-column group
    return base + static_cast<uint32_t>((c / 8) * 8192 + (j % 2) * 1024) + ((static_cast<uint32_t>(c % 8) * 16) ^ x);
  }
};

// The same planes stored four pairs at a time by stmatrix (m8n8.x4, sm_90): group q's matrix m holds pair
// j = 4 q + m of every thread of a warp (its rows 8 (m % 2) .. + 7 of the warp's 16, its 8 columns the column group
// c = 2 q + m / 2), and an mma accumulator's pairs are in the m8n8 fragment order stmatrix takes (thread i: row i / 4,
// columns 2 (i % 4) + {0, 1}). Lane l gives the address of row l % 8 of matrix l / 8: that row's 16 bytes, one chunk
// of the 128-byte swizzle. A quarter of AccPlaneOffset's store instructions for the same bytes (the chain's plane
// stores were ~1.5 K cycles of a ~6.4 K-cycle step, session 68's clocks). tests/gpu/test_wgmma_layout.cu checks each
// lane's row against AccPlaneOffset.
struct AccPlaneRows {
  uint32_t base, x;  // the row's offset in its 64-column box; (m / 2) 16 ^ (row % 8) 16
  __host__ __device__ explicit AccPlaneRows(int wtid)
      : base(static_cast<uint32_t>((16 * (wtid / 32) + wtid % 8 + 8 * ((wtid % 32) / 8 % 2)) * 128)),
        x(static_cast<uint32_t>(((wtid % 32) / 16 * 16) ^ (wtid % 8 * 16))) {}
  // Group q's row address for this lane: column group c = 2 q + m / 2 is in box c / 8 = q / 4, and its chunk index
  // c % 8 = (2 q) % 8 + m / 2 (disjoint bits, so the XOR with row % 8 splits as x holds it).
  __host__ __device__ uint32_t operator()(int q) const {
    return base + static_cast<uint32_t>((q / 4) * 8192) + ((static_cast<uint32_t>((2 * q) % 8) * 16) ^ x);
  }
};

// stmatrix.m8n8.x4 at a shared-space byte address: r[m] is this thread's pair of matrix m (AccPlaneRows).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
#else
  (void)addr;
  (void)r;
  __trap();
#endif
}

// The reverse pass's dO' pair stores (reverse_wgmma.cu; DoutPairs<256, 64>, chunk_common.cuh): thread tid's pair i,
// (v, t) = (c, r0 + 8 i) with c = 2 (tid % 32), r0 = tid / 32, lands at byte mn64 + 1024 i of the (v, t) LayMN64
// plane and mn32 + 512 i of value half c / 32's LayMN32 plane: 8 rows are one swizzle atom of either (8 rows of 128
// bytes; 8 rows of 64 bytes), whose row bits (t % 8; (t / 2) % 4) rows 8 apart share, so the offsets are fixed but for
// that step (the layouts' general index math for each pair and plane was ~40% of the pass's instructions: ncu, session
// 42). tests/gpu/test_wgmma_layout.cu checks both against CuTe.
struct DoutPlaneOffset {
  uint32_t mn64, mn32;
  __host__ __device__ explicit DoutPlaneOffset(int tid) {
    const int v = 2 * (tid % 32), t = tid / 32, vv = v % 32;
    mn64 = static_cast<uint32_t>(t * 128 + (((v / 8) ^ t) * 16) + (v % 8) * 2);
    mn32 = static_cast<uint32_t>(t * 64 + (((vv / 8) ^ ((t / 2) % 4)) * 16) + (vv % 8) * 2);
  }
};

// A 32-bit store to shared memory at a shared-space byte address (the planes' base is opaque, so a plain pointer
// store would be a generic ST).
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// Loads from shared memory at a shared-space byte address: through the opaque base a plain pointer load is a generic
// LD, on the long scoreboard (ncu, session 42: V_new's read of U, 9.5% of the state pass's stall samples, 95% of them
// long scoreboard). Volatile, with the memory clobber: never moved above the barrier that publishes what they read.
__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// A bf16 plane at byte offset off of the shared-memory base sb, viewed through the GMMA layout Lay.
template <class Lay>
__device__ __forceinline__ auto plane(unsigned char* sb, size_t off) {
  return cute::make_tensor(cute::make_smem_ptr(reinterpret_cast<cutlass::bfloat16_t*>(sb + off)), Lay{});
}

// The shared-memory base as a value the compiler cannot see through. The kernels view their planes on it once a chunk:
// the planes' addresses and the wgmma descriptors are the same every chunk, and hoisted out of the chain they held
// ~100 registers (ptxas: 255 and 416 bytes of spills).
__device__ __forceinline__ unsigned char* opaque_base(unsigned char* sb) {
  asm volatile("" : "+l"(sb));
  return sb;
}

// The GMMA layouts' 128-byte swizzle needs a 1 KB aligned shared-memory base: a trap, not wrong numbers, if not.
__device__ __forceinline__ void require_1k_aligned(const unsigned char* smem) {
  if (threadIdx.x == 0 && (__cvta_generic_to_shared(smem) & 1023u) != 0) __trap();
}

}  // namespace kda::cuda::sm90
