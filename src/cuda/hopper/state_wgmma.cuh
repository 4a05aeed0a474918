// state_wgmma.cuh: the shared-memory layouts and wgmma atoms of the sm_90a state pass (state_wgmma.cu), in one place
// for the kernel and for the host test that checks what the kernel assumes of them (tests/gpu/test_wgmma_layout.cu,
// WgmmaStateLayout: 16-byte copy pieces contiguous, pair stores adjacent, accumulator pairs adjacent columns).
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
  // Kd stored [t][d], viewed (d, t): MN-major, the B of V_new^T Kd (N = d).
  using LayMN128 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<TB>{},
                                                cute::Shape<cute::_128, cute::_64>{}));
  using MmaXS = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>{}));  // W S^T, Qg S^T
  using MmaVK = decltype(cute::make_tiled_mma(
      cute::SM90_64x128x16_F32BF16BF16_SS<cute::GMMA::Major::MN, cute::GMMA::Major::MN>{}));  // V_new^T Kd
  using MmaAV = decltype(cute::make_tiled_mma(
      cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{}));  // A_qk V_new
};

}  // namespace kda::cuda::sm90
