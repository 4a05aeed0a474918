// test_wgmma_layout.cu: the Hopper building block the sm_90a path rests on (docs/hopper.md), checked on the GPU
// before any kernel depends on it: one warpgroup's wgmma through CuTe's SM90 GMMA atoms (bf16 in, fp32 accumulate)
// from shared-memory tiles in CuTe's 128-byte-swizzled GMMA layouts, with each operand K-major or MN-major (the
// state pass needs the transposed ones: S^T, V_new^T), and the bf16x3 split product (three wgmma on hi / lo
// planes) against the fp64 product. A layout that feeds the wrong elements fails the single-product check, whose
// bound is fp32 summation only. Skips itself without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "common/cases.h"  // run_seed
#include "cuda/generic/chunk_common.cuh"  // DoutPairs
#include "cuda/hopper/products_wgmma.cuh"
#include "cuda/hopper/state_wgmma.cuh"
#include "cuda/hopper/wgmma_bf16x3.cuh"
#include "gpu/gpu_test.h"

namespace kda::testing {
namespace {

using namespace cute;
using bf16 = cutlass::bfloat16_t;
template <GMMA::Major Major>
using SwizzleAtom = std::conditional_t<Major == GMMA::Major::K, GMMA::Layout_K_SW128_Atom<bf16>,
                                       GMMA::Layout_MN_SW128_Atom<bf16>>;

// One warpgroup's m64 x N x K product: A (M, K) and B (N, K) in the given shared-memory layouts, Mma the TiledMMA.
template <int N_, int K_, class SmemA_, class SmemB_, class Mma_>
struct Probe {
  static constexpr int kM = 64, kN = N_, kK = K_;
  using SmemA = SmemA_;
  using SmemB = SmemB_;
  using Mma = Mma_;
};
// The four operand majors at m64n64k64 with 128-byte swizzles.
template <GMMA::Major MA, GMMA::Major MB>
using Config = Probe<64, 64, decltype(tile_to_shape(SwizzleAtom<MA>{}, Shape<_64, _64>{})),
                     decltype(tile_to_shape(SwizzleAtom<MB>{}, Shape<_64, _64>{})),
                     decltype(make_tiled_mma(SM90_64x64x16_F32BF16BF16_SS<MA, MB>{}))>;

// C[m][n] = sum_k A[m][k] B[n][k] (A [M][K], B [N][K] row-major in global memory, hi then lo plane each). Split: the
// bf16x3 product al bh + ah bl + ah bh, else ah bh.
template <class Cf, bool Split>
__global__ void __launch_bounds__(128) wgmma_probe(const bf16* A, const bf16* B, float* C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kM = Cf::kM, kN = Cf::kN, kK = Cf::kK, kTileA = kM * kK, kTileB = kN * kK;
  // A hi, A lo, B hi, B lo (1024-byte aligned for the swizzle; each plane a multiple of 1 KB): up to 64 KB, dynamic.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* const smem = reinterpret_cast<bf16*>(smem_raw);
  Tensor sAh = make_tensor(make_smem_ptr(smem), typename Cf::SmemA{});
  Tensor sAl = make_tensor(make_smem_ptr(smem + kTileA), typename Cf::SmemA{});
  Tensor sBh = make_tensor(make_smem_ptr(smem + 2 * kTileA), typename Cf::SmemB{});
  Tensor sBl = make_tensor(make_smem_ptr(smem + 2 * kTileA + kTileB), typename Cf::SmemB{});
  for (int i = threadIdx.x; i < kTileA; i += blockDim.x) {
    sAh(i / kK, i % kK) = A[i];
    sAl(i / kK, i % kK) = A[kTileA + i];
  }
  for (int i = threadIdx.x; i < kTileB; i += blockDim.x) {
    sBh(i / kK, i % kK) = B[i];
    sBl(i / kK, i % kK) = B[kTileB + i];
  }
  __syncthreads();
  cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> the async proxy wgmma reads through

  typename Cf::Mma mma;
  auto thr = mma.get_thread_slice(threadIdx.x);
  Tensor acc = partition_fragment_C(mma, Shape<Int<kM>, Int<kN>>{});
  clear(acc);
  kda::cuda::sm90::wgmma_bf16x3<Split>(mma, thr, sAh, sAl, sBh, sBl, acc);

  Tensor gC = make_tensor(make_gmem_ptr(C), make_layout(Shape<Int<kM>, Int<kN>>{}, LayoutRight{}));
  Tensor tC = thr.partition_C(gC);
  for (int i = 0; i < size(acc); ++i) tC(i) = acc(i);
#endif
}

uint16_t bf16_bits_rne(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// x split into hi = bf16(x) and lo = bf16(x - hi), as hi plane then lo plane.
std::vector<uint16_t> split_planes(const std::vector<float>& x) {
  std::vector<uint16_t> p(2 * x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    p[i] = bf16_bits_rne(x[i]);
    p[x.size() + i] = bf16_bits_rne(x[i] - bf16_value(p[i]));
  }
  return p;
}

class WgmmaLayout : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (major != 9) GTEST_SKIP() << "wgmma needs sm_90";
  }
};

template <class Cf>
void check(const char* name) {
  constexpr int kM = Cf::kM, kN = Cf::kN, kK = Cf::kK;
  SCOPED_TRACE(name);
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> a(kM * kK), b(kN * kK);
  for (float& x : a) x = nd(rng);
  for (float& x : b) x = nd(rng);
  const std::vector<uint16_t> pa = split_planes(a), pb = split_planes(b);
  void *dA, *dB, *dC;
  ASSERT_EQ(cudaMalloc(&dA, pa.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dB, pb.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dC, kM * kN * 4), cudaSuccess);
  cudaMemcpy(dA, pa.data(), pa.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, pb.data(), pb.size() * 2, cudaMemcpyHostToDevice);
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "bf16x3" : "single bf16");
    std::vector<float> c(kM * kN);
    const int bytes = 2 * 2 * (kM + kN) * kK;
    const auto probe = split ? wgmma_probe<Cf, true> : wgmma_probe<Cf, false>;
    ASSERT_EQ(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), cudaSuccess);
    probe<<<1, 128, bytes>>>(static_cast<const bf16*>(dA), static_cast<const bf16*>(dB), static_cast<float*>(dC));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(c.data(), dC, c.size() * 4, cudaMemcpyDeviceToHost);
    double worst = 0, worst_single_vs_exact = 0;
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) {
        double exact = 0, hi = 0, mag = 0;
        for (int k = 0; k < kK; ++k) {
          exact += double{a[m * kK + k]} * b[n * kK + k];
          hi += double{bf16_value(pa[m * kK + k])} * bf16_value(pb[n * kK + k]);
          mag += std::fabs(double{a[m * kK + k]} * b[n * kK + k]);
        }
        // single: the exact product of the bf16 operands up to fp32 summation (kK terms, 2 ulp each to allow for a
        // truncating accumulator); bf16x3: the fp32 operands' product up to the dropped al bl and the lo parts'
        // rounding (~2^-16 of the magnitude) plus summation. A misplaced element is off by O(1) of the magnitude.
        const double want = split ? exact : hi;
        const double bound = (split ? std::ldexp(1.0, -14) : 2 * kK * std::ldexp(1.0, -24)) * mag;
        worst = std::max(worst, std::fabs(c[m * kN + n] - want) / bound);
        worst_single_vs_exact = std::max(worst_single_vs_exact, std::fabs(hi - exact) / (std::ldexp(1.0, -14) * mag));
      }
    EXPECT_LE(worst, 1.0) << "worst element error / bound";
    if (split) EXPECT_GT(worst_single_vs_exact, 1.0) << "one bf16 rounding should miss the bf16x3 bound";
    std::printf("  %-10s %-12s worst error %.3f of its bound\n", name, split ? "bf16x3" : "single bf16", worst);
  }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
}

TEST_F(WgmmaLayout, BothOperandsKMajor) { check<Config<GMMA::Major::K, GMMA::Major::K>>("A K, B K"); }
TEST_F(WgmmaLayout, AKMajorBMNMajor) { check<Config<GMMA::Major::K, GMMA::Major::MN>>("A K, B MN"); }
TEST_F(WgmmaLayout, AMNMajorBKMajor) { check<Config<GMMA::Major::MN, GMMA::Major::K>>("A MN, B K"); }
TEST_F(WgmmaLayout, BothOperandsMNMajor) { check<Config<GMMA::Major::MN, GMMA::Major::MN>>("A MN, B MN"); }

// The state passes' own shapes and layouts (src/cuda/hopper/state_wgmma.cuh), each probed alone: the forward's W S^T
// (m64n64, K = 128, both K-major) and V_new^T Kd (m64n128, both MN-major, B 128 wide).
using StateTypes = kda::cuda::sm90::StateWgmmaTypes;
TEST_F(WgmmaLayout, StatePassWTimesStateT) {
  check<Probe<64, 128, StateTypes::LayK128, StateTypes::LayK128, StateTypes::MmaXS>>("W S^T");
}
TEST_F(WgmmaLayout, StatePassVnewTTimesKd) {
  check<Probe<128, 64, StateTypes::LayMN64, StateTypes::LayMN128, StateTypes::MmaVK>>("V_new^T Kd");
}
// The reverse pass's: A_qk^T dO' and Kd dS^T (m64n32: B 32 wide, dO' with the 64-byte swizzle, dS K-major in 32-row
// planes).
using ReverseTypes = kda::cuda::sm90::ReverseWgmmaTypes;
TEST_F(WgmmaLayout, ReversePassAqkTTimesDo) {
  check<Probe<32, 64, ReverseTypes::LayMN64, ReverseTypes::LayMN32, ReverseTypes::MmaUo>>("A_qk^T dO'");
}
TEST_F(WgmmaLayout, ReversePassKdTimesDsT) {
  check<Probe<32, 128, ReverseTypes::LayK128, ReverseTypes::LayK32, ReverseTypes::MmaUk>>("Kd dS^T");
}
// The products kernel's P1 (src/cuda/hopper/products_wgmma.cuh): a V_new / -dU slice (K-major, 64-byte swizzle) times
// a state slice's key half (MN-major), and dO' times a V_new slice's 32 rows (both K-major, B 32 wide).
using ProdTypes = kda::cuda::sm90::ProductsWgmma;
TEST_F(WgmmaLayout, ProductsSliceTimesStateHalf) {
  check<Probe<64, 32, ProdTypes::LaySlice, ProdTypes::LayState, ProdTypes::MmaKS>>("V_new dS, -dU S0 slices");
}
TEST_F(WgmmaLayout, ProductsDoTimesSliceRows) {
  check<Probe<32, 32, ProdTypes::LaySlice, ProdTypes::LaySliceHalf, ProdTypes::MmaM>>("dO' V_new^T slices");
}

// products_p1 whole (src/cuda/hopper/products_wgmma.cuh), one task: dO' (fp32 [64][128], split here into LayO's
// planes as the products kernel stages it), V_new / -dU ([64][128]) and dS_end / S0 ([128][128]) as bf16 plane pairs
// in global memory, reached through maps (tma_map.h) of one task and S0 (CS's loads); out: dM [64][64] (unmasked),
// KD, QS, dW [64][128], then CS [128], one after another.
__global__ void __launch_bounds__(256) products_p1_probe(const float* dO, const __nv_bfloat16* S0,
                                                         const __grid_constant__ kda::cuda::sm90::ProductsMaps maps,
                                                         float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using W = kda::cuda::sm90::ProductsWgmma;
  extern __shared__ __align__(1024) unsigned char smem_p1[];
  __nv_bfloat16* const o = reinterpret_cast<__nv_bfloat16*>(smem_p1);
  for (int i = threadIdx.x; i < W::kOPlane; i += blockDim.x) {
    const int e = static_cast<int>(kda::cuda::sm90::plane_at<W::LayO>(o, i / W::kV, i % W::kV) - o);
    const __nv_bfloat16 h = __float2bfloat16_rn(dO[i]);
    o[e] = h;
    o[W::kOPlane + e] = __float2bfloat16_rn(dO[i] - __bfloat162float(h));
  }
  auto to = [&](int base, int cols) {
    return [=](int r, int c, float x, float y) {
      out[base + r * cols + c] = x;
      out[base + r * cols + c + 1] = y;
    };
  };
  constexpr int kT = 64 * 128;
  unsigned char* const ring = smem_p1 + W::kOBytes;
  float* const cs_part = reinterpret_cast<float*>(ring + W::kRingBytes);  // 16 x 128 floats
  uint64_t* const bars = reinterpret_cast<uint64_t*>(cs_part + 16 * 128);
  kda::cuda::sm90::products_p1_begin(ring, bars, maps, 0);
  __syncthreads();  // the kernel's barrier after staging dO'
  kda::cuda::sm90::products_p1(smem_p1, ring, bars, maps, 0, S0, cs_part, out + 64 * 64 + 3 * kT, to(0, 64),
                               to(64 * 64, 128), to(64 * 64 + kT, 128), to(64 * 64 + 2 * kT, 128));
#endif
}

// The four products and CS against fp64 sums of the fp32 operands (bound as check()'s bf16x3 one): a misplaced
// element, a slice in the wrong slot or a race between the ring's copies and the products is off by O(1).
TEST_F(WgmmaLayout, ProductsP1MatchesFp64) {
  using W = kda::cuda::sm90::ProductsWgmma;
  const uint64_t seed = run_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  constexpr int kT = 64 * 128, kS = 128 * 128;
  std::vector<float> o(kT), vn(kT), nu(kT), ds(kS), s0(kS);
  for (auto* m : {&o, &vn, &nu, &ds, &s0})
    for (float& x : *m) x = nd(rng);
  const std::vector<uint16_t> pvn = split_planes(vn), pnu = split_planes(nu), pds = split_planes(ds),
                              ps0 = split_planes(s0);
  float *d_o, *d_out;
  void *d_vn, *d_nu, *d_ds, *d_s0;
  const int n_out = 64 * 64 + 3 * kT + 128;
  ASSERT_EQ(cudaMalloc(&d_o, kT * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, n_out * 4), cudaSuccess);
  for (auto [d, h] : {std::pair{&d_vn, &pvn}, {&d_nu, &pnu}, {&d_ds, &pds}, {&d_s0, &ps0}}) {
    ASSERT_EQ(cudaMalloc(d, h->size() * 2), cudaSuccess);
    cudaMemcpy(*d, h->data(), h->size() * 2, cudaMemcpyHostToDevice);
  }
  cudaMemcpy(d_o, o.data(), kT * 4, cudaMemcpyHostToDevice);
  const int bytes = static_cast<int>(W::kOBytes + W::kRingBytes + 16 * 128 * 4 + 16);
  ASSERT_EQ(cudaFuncSetAttribute(products_p1_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), cudaSuccess);
  kda::cuda::sm90::ProductsMaps maps;
  ASSERT_EQ(kda::cuda::sm90::encode_products_maps(d_s0, d_ds, d_vn, d_nu, 1, &maps), cudaSuccess);
  products_p1_probe<<<1, 256, bytes>>>(d_o, static_cast<const __nv_bfloat16*>(d_s0), maps, d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(n_out);
  cudaMemcpy(out.data(), d_out, n_out * 4, cudaMemcpyDeviceToHost);
  // An output [64][cols] at base against sum_v a(r, v) b(c, v).
  auto worst = [&](int base, int cols, auto a, auto b) {
    double w = 0;
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < cols; ++c) {
        double exact = 0, mag = 0;
        for (int v = 0; v < 128; ++v) {
          exact += double{a(r, v)} * b(c, v);
          mag += std::fabs(double{a(r, v)} * b(c, v));
        }
        w = std::max(w, std::fabs(out[base + r * cols + c] - exact) / (std::ldexp(1.0, -14) * mag));
      }
    return w;
  };
  auto rows = [](const std::vector<float>& m) { return [&m](int r, int v) { return m[r * 128 + v]; }; };
  auto cols = [](const std::vector<float>& m) { return [&m](int c, int v) { return m[v * 128 + c]; }; };
  const double w_m = worst(0, 64, rows(o), rows(vn)), w_k = worst(64 * 64, 128, rows(vn), cols(ds));
  const double w_q = worst(64 * 64 + kT, 128, rows(o), cols(s0));
  const double w_w = worst(64 * 64 + 2 * kT, 128, rows(nu), cols(s0));
  double w_c = 0;  // CS [d] = sum_v S0[v][d] dS[v][d], hi + lo factors: the same bound
  for (int d = 0; d < 128; ++d) {
    double exact = 0, mag = 0;
    for (int v = 0; v < 128; ++v) {
      exact += double{s0[v * 128 + d]} * ds[v * 128 + d];
      mag += std::fabs(double{s0[v * 128 + d]} * ds[v * 128 + d]);
    }
    w_c = std::max(w_c, std::fabs(out[64 * 64 + 3 * kT + d] - exact) / (std::ldexp(1.0, -14) * mag));
  }
  std::printf("  products P1: worst error / bound dM %.3f KD %.3f QS %.3f dW %.3f CS %.3f\n", w_m, w_k, w_q, w_w,
              w_c);
  EXPECT_LE(w_m, 1.0) << "dM";
  EXPECT_LE(w_k, 1.0) << "KD";
  EXPECT_LE(w_q, 1.0) << "QS";
  EXPECT_LE(w_w, 1.0) << "dW";
  EXPECT_LE(w_c, 1.0) << "CS";
  for (void* d : {static_cast<void*>(d_o), static_cast<void*>(d_out), d_vn, d_nu, d_ds, d_s0}) cudaFree(d);
}

// Where a TMA box puts the byte at dense offset byte of its box (box order, dimension 0 innermost; the destination 1 KB
// aligned), from the PTX ISA's description of the swizzles: the offset's 16-byte unit XORed with its bits 7.. (3 bits
// for the 128-byte swizzle, 2 for the 64-byte).
long tma_swizzled(long byte, int swizzle_bits) { return byte ^ (((byte >> 7) & ((1 << swizzle_bits) - 1)) << 4); }

// products_p1's slice boxes (products_issue_slice, maps as tma_map.cu encodes them) against the views it reads: A
// (t, k) of each plane, rows 32 w .. of it (dM's B), and B's key halves (d - 64 h, k), every element written once;
// and CS's reads of the slot, each box as tma_swizzled places it. ProductsP1MatchesFp64 checks the same on the GPU.
// No GPU needed.
TEST(WgmmaStateLayout, ProductsSliceBoxesFillTheViews) {
  using W = kda::cuda::sm90::ProductsWgmma;
  using kda::cuda::sm90::plane_at;
  constexpr long kA = 1 << 20;  // the operands' element numbers: A's from kA, B's from 0
  alignas(1024) static __nv_bfloat16 slot[W::kSlot];
  for (int v0 = 0; v0 < W::kV; v0 += W::kSliceV) {
    std::vector<long> got(W::kSlot, -1);  // by element offset in the slot
    // A box of n0 x n1 x 2 elements at element dst of the slot, element (i0, i1, i2) from source number src(...).
    auto box = [&](long dst, int n0, int n1, int swizzle_bits, auto src) {
      for (int i2 = 0; i2 < 2; ++i2)
        for (int i1 = 0; i1 < n1; ++i1)
          for (int i0 = 0; i0 < n0; ++i0) {
            const long e = dst + tma_swizzled(2 * (i0 + long{n0} * (i1 + long{n1} * i2)), swizzle_bits) / 2;
            ASSERT_EQ(got[e], -1) << dst << " " << i0 << " " << i1 << " " << i2;
            got[e] = src(i0, i1, i2);
          }
    };
    // A: V_new / -dU [plane][t][v], box (32 values, 64 rows, 2 planes) at (v0, 0, plane 0).
    box(0, 32, 64, 2, [&](int i0, int i1, int i2) { return kA + long{i2} * W::kOPlane + i1 * W::kV + v0 + i0; });
    // B: dS_end / S0 [plane][v][d], boxes (64 keys, 32 values, 2 planes) at (64 h, v0, plane 0).
    for (int h = 0; h < 2; ++h)
      box(long{W::b_plane(h, 0)} * W::kSlicePlane, 64, 32, 3, [&](int i0, int i1, int i2) {
        return long{i2} * W::kK * W::kV + long{v0 + i1} * W::kK + 64 * h + i0;
      });
    auto at = [&](auto lay, int plane, int r, int c) {
      return got[plane_at<decltype(lay)>(slot + plane * W::kSlicePlane, r, c) - slot];
    };
    for (int pl = 0; pl < 2; ++pl)
      for (int k = 0; k < W::kSliceV; ++k) {
        for (int t = 0; t < W::kC; ++t) {
          const long a = kA + long{pl} * W::kOPlane + t * W::kV + v0 + k;
          ASSERT_EQ(at(W::LaySlice{}, pl, t, k), a) << pl << " " << t << " " << k;
          ASSERT_EQ(got[plane_at<W::LaySliceHalf>(slot + pl * W::kSlicePlane + W::kHalfOff * (t / 32), t % 32, k) -
                        slot],
                    a);
        }
        for (int d = 0; d < W::kK; ++d)
          ASSERT_EQ(at(W::LayState{}, W::b_plane(d / 64, pl), d % 64, k),
                    long{pl} * W::kK * W::kV + long{v0 + k} * W::kK + d)
              << pl << " " << d << " " << k;
      }
    // CS's dS_end pieces (ProductsCs: one offset a thread, the rows and the lo plane at fixed steps) hold the
    // elements its S0 loads read: source element l kK kV + (v0 + tid / 16 + 16 i) kK + 8 (tid % 16) + e.
    using Cs = kda::cuda::sm90::ProductsCs;
    for (int tid = 0; tid < 256; ++tid) {
      const long off = Cs::piece(slot, tid) - slot;
      for (int i = 0; i < 2; ++i)
        for (int l = 0; l < 2; ++l)
          for (int e = 0; e < 8; ++e)
            ASSERT_EQ(got[off + Cs::kRowStep * i + Cs::kLoStep * l + e],
                      long{l} * W::kK * W::kV + long{v0 + tid / 16 + Cs::kRows * i} * W::kK + 8 * (tid % 16) + e)
                << tid << " " << i << " " << l << " " << e;
    }
  }
}

// What the sm_90a state pass (src/cuda/hopper/state_wgmma.cu) assumes of its CuTe layouts, checked on the host
// through the same tensors on a 1024-byte aligned buffer (the swizzle acts on address bits 4-9): each view a
// bijection onto its plane; its 16-byte cp.async pieces (8 consecutive elements along the stored row) contiguous
// and aligned; the 32-bit pair stores of V_new ((v, t), (v + 1, t)) and of the state ((v, d), (v, d + 1)) adjacent;
// accumulator elements 2 i, 2 i + 1 of every thread the same row and adjacent columns, and the 128 threads' elements
// covering the tile once. No GPU needed.
template <class Layout, class At>
void check_view(const char* name, int rows, int cols, At at, bool pairs_along_rows) {
  SCOPED_TRACE(name);
  alignas(1024) static bf16 buf[128 * 128];
  Tensor t = make_tensor(make_smem_ptr(buf), Layout{});
  auto off = [&](int r, int c) { return static_cast<long>(at(t, r, c) - buf); };
  std::vector<int> seen(rows * cols, 0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const long o = off(r, c);
      ASSERT_TRUE(o >= 0 && o < rows * cols) << r << "," << c;
      ++seen[o];
      if (c % 8 == 0) {  // a cp.async piece: stored row r, columns c .. c + 7
        ASSERT_EQ(o % 8, 0) << r << "," << c;
        for (int j = 1; j < 8; ++j) ASSERT_EQ(off(r, c + j), o + j) << r << "," << c + j;
      }
      if (pairs_along_rows && c % 2 == 0) ASSERT_EQ(off(r, c + 1), o + 1);
    }
  for (int o = 0; o < rows * cols; ++o) ASSERT_EQ(seen[o], 1) << o;
}

template <class Mma, int M, int N>
void check_accumulator(const char* name) {
  SCOPED_TRACE(name);
  Mma mma;
  std::vector<int> seen(M * N, 0);
  for (int tid = 0; tid < 128; ++tid) {
    auto thr = mma.get_thread_slice(tid);
    Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    for (int i = 0; i < size(c); ++i) {
      const int r = get<0>(c(i)), col = get<1>(c(i));
      ++seen[r * N + col];
      if (i % 2 == 1) {
        ASSERT_EQ(r, get<0>(c(i - 1))) << tid << " " << i;
        ASSERT_EQ(col, get<1>(c(i - 1)) + 1) << tid << " " << i;
      }
    }
  }
  for (int e = 0; e < M * N; ++e) ASSERT_EQ(seen[e], 1) << e;
}

TEST(WgmmaStateLayout, WhatTheStatePassAssumes) {
  using Ty = kda::cuda::sm90::StateWgmmaTypes;
  auto rc = [](auto& t, int r, int c) { return raw_pointer_cast(&t(r, c)); };  // stored (r, c) = view (r, c)
  auto cr = [](auto& t, int r, int c) { return raw_pointer_cast(&t(c, r)); };  // stored (r, c) = view (c, r)
  check_view<Ty::LayK128>("W / Qg / S planes (K-major 64 x 128)", 64, 128, rc, true);
  check_view<Ty::LayK64>("A_qk planes (K-major 64 x 64)", 64, 64, rc, false);
  check_view<Ty::LayMN128>("Kd planes (stored [t][d], MN-major (d, t))", 64, 128, cr, false);
  check_view<Ty::LayMN64>("V_new planes (stored [t][v], MN-major (v, t))", 64, 64, cr, true);
  check_accumulator<Ty::MmaXS, 64, 64>("m64n64 accumulator (W S^T, Qg S^T, A_qk V_new)");
  check_accumulator<Ty::MmaVK, 64, 128>("m64n128 accumulator (the state)");
}

// Where a TMA box with the 128-byte swizzle puts element (r, c) of a [rows][cols] tile read as boxes of 128-byte
// rows (box b = the columns of bytes 128 b .. 128 b + 127, all rows; boxes one after another, rows a multiple of 8):
// the 16-byte chunk j of row r lands at chunk j ^ (r % 8) of its 128-byte row.
long tma_sw128_byte(int r, int c, int rows, int elem_bytes) {
  const int per_row = 128 / elem_bytes, b = c / per_row, cb = (c % per_row) * elem_bytes;
  return long{b} * rows * 128 + tma_swizzled(long{r} * 128 + cb, 3);
}

// The state and reverse passes' TMA copies (state_wgmma.cu, reverse_wgmma.cu: load_a / load_b, and the recompute's
// saves) put each stored plane row where its GMMA layout expects it, and take it from there: W / Qg / S (K-major 64 x
// 128) and Kd (stored [t][d], MN-major (d, t)) as two boxes of 64 columns, A_qk and V_new as one box; U's fp32
// [64][64] as two boxes of 32 columns, read through sm90::u_offset. No GPU needed.
TEST(WgmmaStateLayout, TmaBoxesFillThePlanes) {
  using Ty = kda::cuda::sm90::StateWgmmaTypes;
  auto check = [](auto lay, const char* name, int rows, int cols, bool transposed) {
    SCOPED_TRACE(name);
    alignas(1024) static bf16 buf[128 * 128];
    Tensor t = make_tensor(make_smem_ptr(buf), decltype(lay){});
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const bf16* at = transposed ? raw_pointer_cast(&t(c, r)) : raw_pointer_cast(&t(r, c));
        ASSERT_EQ(2 * (at - buf), tma_sw128_byte(r, c, rows, 2)) << r << "," << c;
      }
  };
  check(Ty::LayK128{}, "W / Qg (K-major 64 x 128)", 64, 128, false);
  check(Ty::LayK64{}, "A_qk (K-major 64 x 64)", 64, 64, false);
  check(Ty::LayMN128{}, "Kd (stored [t][d], MN-major (d, t))", 64, 128, true);
  // The backward's recompute stores its saves from the state's planes (LayK128, above) and V_new's with TMA.
  check(Ty::LayMN64{}, "V_new (stored [t][v], MN-major (v, t))", 64, 64, true);
  // U's fp32 boxes, read through sm90::u_offset.
  for (int t = 0; t < 64; ++t)
    for (int v = 0; v < 128; ++v)
      ASSERT_EQ(kda::cuda::sm90::u_offset(t, v), tma_sw128_byte(t, v, 64, 4)) << t << "," << v;
  // The reverse pass (reverse_wgmma.cu): Kd as above; A_qk stored [r][t], viewed (t, r) MN-major, one box; W / Qg
  // stored [t][d] as two key halves viewed (d - 64 h, t) MN-major, half 1 one plane (8 KB) after half 0.
  using Ry = kda::cuda::sm90::ReverseWgmmaTypes;
  check(Ry::LayMN64{}, "A_qk (stored [r][t], MN-major (t, r))", 64, 64, true);
  alignas(1024) static bf16 halves[2 * 64 * 64];
  Tensor h0 = make_tensor(make_smem_ptr(halves), Ry::LayMN64{});
  Tensor h1 = make_tensor(make_smem_ptr(halves + 64 * 64), Ry::LayMN64{});
  for (int t = 0; t < 64; ++t)
    for (int d = 0; d < 128; ++d) {
      const bf16* at = d < 64 ? raw_pointer_cast(&h0(d, t)) : raw_pointer_cast(&h1(d - 64, t));
      ASSERT_EQ(2 * (at - halves), tma_sw128_byte(t, d, 64, 2)) << t << "," << d;
    }
}

// sm90::acc_row / acc_col / AccPlaneOffset (the state pass's plane and output stores) against CuTe: pair j of thread
// wtid's accumulator is (acc_row, acc_col) and lands where the plane's layout holds it: the state S (v, d) in LayK128
// (m64n128), V_new (t, v) at (v, t) of LayMN64 (m64n64). The pair's second element is the next column, adjacent in
// both (WhatTheStatePassAssumes).
TEST(WgmmaStateLayout, AccumulatorPairsLandOnTheirPlaneElements) {
  using Ty = kda::cuda::sm90::StateWgmmaTypes;
  auto check = [](auto mma, auto lay, auto n, bool transposed, const char* name) {
    SCOPED_TRACE(name);
    alignas(1024) static bf16 buf[64 * 128];
    Tensor t = make_tensor(make_smem_ptr(buf), decltype(lay){});
    for (int wtid = 0; wtid < 128; ++wtid) {
      Tensor c = mma.get_thread_slice(wtid).partition_C(make_identity_tensor(Shape<_64, decltype(n)>{}));
      const kda::cuda::sm90::AccPlaneOffset at(wtid);
      for (int j = 0; j < size(c) / 2; ++j) {
        const int r = get<0>(c(2 * j)), col = get<1>(c(2 * j));
        ASSERT_EQ(r, kda::cuda::sm90::acc_row(wtid, j)) << wtid << " " << j;
        ASSERT_EQ(col, kda::cuda::sm90::acc_col(wtid, j)) << wtid << " " << j;
        const bf16* e = transposed ? raw_pointer_cast(&t(col, r)) : raw_pointer_cast(&t(r, col));
        ASSERT_EQ(2 * (e - buf), static_cast<long>(at(j))) << wtid << " " << j;
      }
    }
  };
  check(Ty::MmaVK{}, Ty::LayK128{}, Int<128>{}, false, "the state S (v, d), m64n128");
  check(Ty::MmaXS{}, Ty::LayMN64{}, Int<64>{}, true, "V_new (t, v) at (v, t), m64n64");
}

// sm90::AccPlaneRows (the state pass's plane stores by stmatrix.x4) against AccPlaneOffset, which the test above
// checks against CuTe: stmatrix puts register m of lane i at row i / 4, columns 2 (i % 4) + {0, 1} of matrix m, whose
// row r address lane 8 m + r gives. So thread wtid's pair j = 4 q + m lands at lane (8 m + lane / 4)'s row address of
// group q plus 4 (lane % 4) bytes, which must be AccPlaneOffset(wtid)(j), for the state's m64n128 (q < 8) and V_new's
// m64n64 (q < 4); and each row address is a 16-byte chunk, as stmatrix needs.
TEST(WgmmaStateLayout, StmatrixRowsHoldTheAccumulatorPairs) {
  using kda::cuda::sm90::AccPlaneOffset;
  using kda::cuda::sm90::AccPlaneRows;
  for (int groups : {8, 4}) {
    SCOPED_TRACE(groups);
    for (int wtid = 0; wtid < 128; ++wtid) {
      const int warp0 = wtid - wtid % 32, lane = wtid % 32;
      for (int q = 0; q < groups; ++q) {
        ASSERT_EQ(AccPlaneRows(wtid)(q) % 16, 0u) << wtid << " " << q;
        for (int m = 0; m < 4; ++m) {
          const uint32_t row = AccPlaneRows(warp0 + 8 * m + lane / 4)(q);
          ASSERT_EQ(row + 4 * (lane % 4), AccPlaneOffset(wtid)(4 * q + m)) << wtid << " " << q << " " << m;
        }
      }
    }
  }
}

// The reverse pass's plane stores (reverse_wgmma.cu): warpgroup wg's dS pair j, (v, 64 wg + column) of MmaS, in value
// half v / 32's K-major [32][128] planes (8 KB each, half 1 after half 0) at (v / 32) 8 KB + wg 4 KB +
// AccPlaneOffset(wtid % 64)(j); its -dU pair j, (t, 32 wg + column) of MmaUo, at (v, t) of LayMN64:
// AccPlaneOffset(wtid)(j + 8 wg).
TEST(WgmmaStateLayout, ReverseAccumulatorPairsLandOnTheirPlaneElements) {
  using Ry = kda::cuda::sm90::ReverseWgmmaTypes;
  using kda::cuda::sm90::AccPlaneOffset;
  alignas(1024) static bf16 buf[2 * 32 * 128];
  Tensor s0 = make_tensor(make_smem_ptr(buf), Ry::LayK32{});
  Tensor s1 = make_tensor(make_smem_ptr(buf + 32 * 128), Ry::LayK32{});
  Tensor u = make_tensor(make_smem_ptr(buf), Ry::LayMN64{});
  Ry::MmaS mma_s;
  Ry::MmaUo mma_u;
  for (int wg = 0; wg < 2; ++wg)
    for (int wtid = 0; wtid < 128; ++wtid) {
      Tensor cs = mma_s.get_thread_slice(wtid).partition_C(make_identity_tensor(Shape<_64, _64>{}));
      for (int j = 0; j < size(cs) / 2; ++j) {
        const int v = get<0>(cs(2 * j)), d = 64 * wg + get<1>(cs(2 * j));
        const bf16* e = v < 32 ? raw_pointer_cast(&s0(v, d)) : raw_pointer_cast(&s1(v - 32, d));
        ASSERT_EQ(2 * (e - buf), (wtid / 64) * 8192 + wg * 4096 + static_cast<long>(AccPlaneOffset(wtid % 64)(j)))
            << "dS " << wg << " " << wtid << " " << j;
      }
      Tensor cu = mma_u.get_thread_slice(wtid).partition_C(make_identity_tensor(Shape<_64, _32>{}));
      for (int j = 0; j < size(cu) / 2; ++j) {
        const int t = get<0>(cu(2 * j)), v = 32 * wg + get<1>(cu(2 * j));
        ASSERT_EQ(2 * (raw_pointer_cast(&u(v, t)) - buf), static_cast<long>(AccPlaneOffset(wtid)(j + 8 * wg)))
            << "-dU " << wg << " " << wtid << " " << j;
      }
    }
}

// The reverse pass's dO' stores (reverse_wgmma.cu): thread tid's pair i, (v, t) = (2 (tid % 32), tid / 32 + 8 i) as
// DoutPairs<256, 64> hands them out, at sm90::DoutPlaneOffset's bytes: in the (v, t) LayMN64 plane and in value half
// v / 32's LayMN32 plane (half 1 one 4 KB plane after half 0). Every element once, both columns of a pair adjacent.
TEST(WgmmaStateLayout, ReverseDoutPairsLandOnTheirPlaneElements) {
  using Ry = kda::cuda::sm90::ReverseWgmmaTypes;
  using Pairs = kda::cuda::chunk::DoutPairs<256, 64>;
  static_assert(Pairs::kE == 8 && Pairs::kRowStep == 8, "the pairs DoutPlaneOffset assumes");
  alignas(1024) static bf16 b64[64 * 64], b32[2 * 32 * 64];
  Tensor o = make_tensor(make_smem_ptr(b64), Ry::LayMN64{});
  Tensor h0 = make_tensor(make_smem_ptr(b32), Ry::LayMN32{});
  Tensor h1 = make_tensor(make_smem_ptr(b32 + 32 * 64), Ry::LayMN32{});
  std::vector<int> seen64(64 * 64, 0), seen32(64 * 64, 0);
  for (int tid = 0; tid < 256; ++tid) {
    const kda::cuda::sm90::DoutPlaneOffset at(tid);
    const int v = 2 * (tid % 32);
    for (int i = 0; i < Pairs::kE; ++i) {
      const int t = tid / 32 + 8 * i;
      for (int e = 0; e < 2; ++e) {
        const long x64 = 2 * (raw_pointer_cast(&o(v + e, t)) - b64);
        const long x32 = 2 * ((v < 32 ? raw_pointer_cast(&h0(v + e, t)) : raw_pointer_cast(&h1(v + e - 32, t))) - b32);
        ASSERT_EQ(x64, static_cast<long>(at.mn64) + 1024 * i + 2 * e) << tid << " " << i;
        ASSERT_EQ(x32, (v / 32) * 4096 + static_cast<long>(at.mn32) + 512 * i + 2 * e) << tid << " " << i;
        ++seen64[x64 / 2];
        ++seen32[x32 / 2];
      }
    }
  }
  for (int x = 0; x < 64 * 64; ++x) {
    ASSERT_EQ(seen64[x], 1) << x;
    ASSERT_EQ(seen32[x], 1) << x;
  }
}

// The same for the reverse pass (src/cuda/hopper/reverse_wgmma.cu), whose step A accumulates two products of different
// operand majors (MmaUo, MmaUk) into one m64n32 accumulator: their accumulator layouts must agree element for element.
TEST(WgmmaStateLayout, WhatTheReversePassAssumes) {
  using Ty = kda::cuda::sm90::ReverseWgmmaTypes;
  auto cr = [](auto& t, int r, int c) { return raw_pointer_cast(&t(c, r)); };
  auto rc = [](auto& t, int r, int c) { return raw_pointer_cast(&t(r, c)); };
  check_view<Ty::LayK32>("dS planes, a value half (K-major 32 x 128)", 32, 128, rc, true);
  check_view<Ty::LayMN32>("dO' planes, a value half (stored [t][v], MN-major (v, t), 64-byte swizzle)", 64, 32, cr,
                          true);
  check_accumulator<Ty::MmaUo, 64, 32>("m64n32 accumulator (dU)");
  check_accumulator<Ty::MmaS, 64, 64>("m64n64 accumulator (dS)");
  Ty::MmaUo uo;
  Ty::MmaUk uk;
  for (int tid = 0; tid < 128; ++tid) {
    Tensor a = uo.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<_64, _32>{}));
    Tensor b = uk.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<_64, _32>{}));
    ASSERT_EQ(size(a), size(b));
    for (int i = 0; i < size(a); ++i) {
      ASSERT_EQ(get<0>(a(i)), get<0>(b(i))) << tid << " " << i;
      ASSERT_EQ(get<1>(a(i)), get<1>(b(i))) << tid << " " << i;
    }
  }
}

}  // namespace
}  // namespace kda::testing
