// test_mma_layout.cpp: the ldmatrix row rules of src/cuda/generic/mma_layout.h, checked on the CPU by emulating
// one warp: ldmatrix.x4 (with and without .trans, as the PTX ISA defines it) from a stored matrix, then
// mma.m16n8k16 from the fragments (as the ISA defines them), against the product of the operands the rule claims
// to load. A wrong rule (swapped matrices, a missed transpose) gives a wrong product here rather than on the GPU.
// Also tf32_operand's rounding by one add against cvt.rna.tf32.f32's definition, in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/generic/mma_layout.h"

namespace kda::cuda::chunk {
namespace {

// A stored matrix of small integers (exact in bf16 and in fp32 sums), as bf16 bit patterns.
struct Stored {
  int rows, cols;
  bool swz;  // bits laid out by swizzled() (the values stay logical: at(r, c))
  std::vector<uint16_t> bits;
  std::vector<float> val;
  std::function<int(int, int)> place;  // if set: where (r, c)'s bits lie, instead of the two layouts above
  float at(int r, int c) const { return val[static_cast<size_t>(r) * cols + c]; }
};

uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for the small integers used here
}

Stored random_matrix(int rows, int cols, std::mt19937& rng, bool swz = false) {
  Stored s{rows, cols, swz, std::vector<uint16_t>(static_cast<size_t>(rows) * cols), {}, nullptr};
  std::uniform_int_distribution<int> d(-8, 8);
  for (int i = 0; i < rows * cols; ++i) {
    const float x = static_cast<float>(d(rng));
    s.val.push_back(x);
    const int r = i / cols, c = i % cols;
    s.bits[static_cast<size_t>(swz ? swizzled(r, c, cols) : i)] = bf16_bits(x);
  }
  return s;
}

// ldmatrix.x4 [.trans]: lane l gives the address of row rule(l) (relative to origin); returns regs[lane][4].
using Rule = LdsmRow (*)(int);
std::vector<std::array<uint32_t, 4>> ldsm_x4(const Stored& s, int row0, int col0, Rule rule, bool trans) {
  std::vector<std::array<uint32_t, 4>> out(32);
  for (int j = 0; j < 4; ++j) {
    // The 8 rows of matrix j, as given by lanes 8j .. 8j + 7.
    uint16_t m[8][8];
    for (int i = 0; i < 8; ++i) {
      const LdsmRow r = rule(8 * j + i);
      for (int e = 0; e < 8; ++e) {
        const int row = row0 + r.row, col = col0 + r.col + e;
        m[i][e] = s.bits[static_cast<size_t>(s.place ? s.place(row, col)
                                                      : s.swz ? swizzled(row, col, s.cols) : row * s.cols + col)];
      }
    }
    for (int t = 0; t < 32; ++t) {
      uint16_t lo, hi;
      if (!trans) {
        lo = m[t / 4][2 * (t % 4)];
        hi = m[t / 4][2 * (t % 4) + 1];
      } else {
        lo = m[2 * (t % 4)][t / 4];
        hi = m[2 * (t % 4) + 1][t / 4];
      }
      out[t][j] = uint32_t{lo} | (uint32_t{hi} << 16);
    }
  }
  return out;
}

float lo_f(uint32_t r) {
  const uint32_t u = r << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float hi_f(uint32_t r) {
  const uint32_t u = r & 0xffff0000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// mma.m16n8k16 of one warp: the A (16 x 16) and B (16 x 8) the fragments encode, multiplied; returns C [16][8].
std::vector<float> mma_emulate(const std::vector<std::array<uint32_t, 4>>& a, const std::vector<std::array<uint32_t, 2>>& b) {
  float A[16][16], B[16][8];
  for (int t = 0; t < 32; ++t) {
    const int grp = t / 4, tig = t % 4;
    const int ar[4] = {grp, grp + 8, grp, grp + 8}, ac[4] = {2 * tig, 2 * tig, 2 * tig + 8, 2 * tig + 8};
    for (int r = 0; r < 4; ++r) {
      A[ar[r]][ac[r]] = lo_f(a[t][r]);
      A[ar[r]][ac[r] + 1] = hi_f(a[t][r]);
    }
    for (int r = 0; r < 2; ++r) {
      B[2 * tig + 8 * r][grp] = lo_f(b[t][r]);
      B[2 * tig + 8 * r + 1][grp] = hi_f(b[t][r]);
    }
  }
  std::vector<float> C(16 * 8, 0.0f);
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) C[i * 8 + n] += A[i][k] * B[k][n];
  return C;
}

// Every rule, at an odd tile origin inside a larger stored matrix: the emulated product of the loaded A tile and
// each of the two loaded B n-tiles equals the product of the operands as the rule's comment defines them.
// Plain planes (any pitch) and swizzled ones (swizzled(), 64 columns).
TEST(MmaLayout, LdmatrixRulesGiveTheStatedOperands) {
  for (bool swz : {false, true}) {
  SCOPED_TRACE(swz ? "swizzled planes" : "plain planes");
  std::mt19937 rng(12345);
  const int R = 48, Cc = swz ? 64 : 56, r0 = 16, c0 = 24;  // stored matrices and tile origins (multiples of 8)
  const Stored sa_m = random_matrix(R, Cc, rng, swz);  // A stored [m][k]
  const Stored sa_k = random_matrix(R, Cc, rng, swz);  // A stored [k][m]
  const Stored sb_n = random_matrix(R, Cc, rng, swz);  // B stored [n][k]
  const Stored sb_k = random_matrix(R, Cc, rng, swz);  // B stored [k][n]
  for (bool a_kmajor : {false, true}) {
    for (bool b_kmajor : {false, true}) {
      SCOPED_TRACE(std::string("A ") + (a_kmajor ? "[k][m]" : "[m][k]") + ", B " + (b_kmajor ? "[k][n]" : "[n][k]"));
      const auto a = a_kmajor ? ldsm_x4(sa_k, r0, c0, ldsm_a_kmajor, true) : ldsm_x4(sa_m, r0, c0, ldsm_a_rowmajor, false);
      const auto b4 = b_kmajor ? ldsm_x4(sb_k, r0, c0, ldsm_b_kmajor, true) : ldsm_x4(sb_n, r0, c0, ldsm_b_nmajor, false);
      for (int nt = 0; nt < 2; ++nt) {
        std::vector<std::array<uint32_t, 2>> b(32);
        for (int t = 0; t < 32; ++t) b[t] = {b4[t][2 * nt], b4[t][2 * nt + 1]};
        const std::vector<float> C = mma_emulate(a, b);
        for (int i = 0; i < 16; ++i)
          for (int n = 0; n < 8; ++n) {
            float want = 0.0f;
            for (int k = 0; k < 16; ++k) {
              const float av = a_kmajor ? sa_k.at(r0 + k, c0 + i) : sa_m.at(r0 + i, c0 + k);
              const int nn = 8 * nt + n;
              const float bv = b_kmajor ? sb_k.at(r0 + k, c0 + nn) : sb_n.at(r0 + nn, c0 + k);
              want += av * bv;
            }
            ASSERT_EQ(C[i * 8 + n], want) << "n-tile " << nt << " C[" << i << "][" << n << "]";
          }
      }
    }
  }
  }
}

// The swizzle is a permutation of each row's chunks, and the 8 rows of any ldmatrix matrix (rows 8i .. 8i + 7, one
// logical chunk) land in 8 different 16-byte bank groups (chunk index mod 8 of a 128-byte bank cycle).
TEST(MmaLayout, SwizzledPlanesArePermutationsWithoutBankConflicts) {
  for (int cols : {64, 128, 256}) {
    for (int row = 0; row < 64; ++row) {
      std::vector<int> seen(static_cast<size_t>(cols), 0);
      for (int col = 0; col < cols; ++col) {
        const int off = swizzled(row, col, cols);
        ASSERT_GE(off, row * cols);
        ASSERT_LT(off, (row + 1) * cols);
        ++seen[static_cast<size_t>(off - row * cols)];
      }
      for (int c : seen) ASSERT_EQ(c, 1) << "cols " << cols << " row " << row;
    }
    for (int r0 = 0; r0 < 64; r0 += 8)
      for (int chunk = 0; chunk < cols / 8; ++chunk) {
        int groups = 0;
        for (int i = 0; i < 8; ++i) groups |= 1 << ((swizzled(r0 + i, 8 * chunk, cols) * 2 / 16) % 8);
        EXPECT_EQ(groups, 0xff) << "cols " << cols << " rows " << r0 << ".. chunk " << chunk;
      }
  }
}

// chunk_prepare.cu's split_to_planes: with 512 threads over a [64][cols] matrix, every element goes to its swizzled
// place exactly once (the thread's offset r cols + sw is swizzled(r, c + j, cols) - j for each of its rows), and a
// half-warp's 8-byte stores of one row fill 128 distinct bytes (no bank conflict).
TEST(MmaLayout, PlaneSplitWritesEveryElementOnceInPlace) {
  constexpr int kRows = 64, kThreads = 512;
  for (int cols : {64, 128}) {
    std::vector<int> seen(static_cast<size_t>(kRows * cols), 0);
    for (int tid = 0; tid < kThreads; ++tid) {
      const PlaneSplit ps = plane_split(tid, cols, kThreads);
      ASSERT_EQ(ps.step % 8, 0);
      ASSERT_EQ(kRows % ps.step, 0);
      ASSERT_LT(ps.r0, ps.step);
      for (int r = ps.r0; r < kRows; r += ps.step)
        for (int j = 0; j < 4; ++j) {
          ASSERT_EQ(r * cols + ps.sw + j, swizzled(r, ps.c + j, cols)) << "cols " << cols << " tid " << tid << " row " << r;
          ++seen[static_cast<size_t>(r * cols + ps.c + j)];
        }
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "cols " << cols << " element " << i;
    for (int half = 0; half < kThreads / 16; ++half) {  // 16 threads' 8-byte stores: one wavefront if distinct banks
      std::vector<int> bank_words(32, 0);
      for (int t = 16 * half; t < 16 * half + 16; ++t) {
        const PlaneSplit ps = plane_split(t, cols, kThreads);
        const int byte = (ps.r0 * cols + ps.sw) * 2;  // bf16 elements
        ++bank_words[static_cast<size_t>((byte / 4) % 32)];
        ++bank_words[static_cast<size_t>((byte / 4 + 1) % 32)];
      }
      for (int b : bank_words) ASSERT_EQ(b, 1) << "cols " << cols << " half-warp " << half;
    }
  }
}

// chunk_products.cu's block_gemm, one 16-step k-slice, emulated: 256 threads stage A [64][16] and B [N][16] pairs
// into planes of pitch 24 by slice_pair (every element written exactly once, for both kinds of source), then each of
// the 8 warps loads its fragments with ldsm_a_rowmajor / ldsm_b_nmajor at its tile (rows 16 (w % 4), columns
// (N / 2) (w / 4), n-tile pairs 16 apart) and the emulated mma products equal A B there.
TEST(MmaLayout, ProductsStagingAndWarpTilesGiveTheProduct) {
  constexpr int kThreads = 256, kRows = 64, kKS = 16, kPitch = kKS + 8;
  std::mt19937 rng(777);
  std::uniform_int_distribution<int> d(-8, 8);
  for (int N : {64, 128}) {
    for (bool a_kc : {false, true}) {
      for (bool b_kc : {false, true}) {
        SCOPED_TRACE("N " + std::to_string(N) + (a_kc ? ", A k-contiguous" : ", A row-contiguous") +
                     (b_kc ? ", B k-contiguous" : ", B col-contiguous"));
        std::vector<float> A(kRows * kKS), B(static_cast<size_t>(kKS) * N);  // A [m][k], B [k][n]
        for (float& x : A) x = static_cast<float>(d(rng));
        for (float& x : B) x = static_cast<float>(d(rng));
        Stored sa{kRows, kPitch, false, std::vector<uint16_t>(kRows * kPitch, 0xffff), {}, nullptr};
        Stored sb{N, kPitch, false, std::vector<uint16_t>(static_cast<size_t>(N) * kPitch, 0xffff), {}, nullptr};
        std::vector<int> wa(kRows * kKS, 0), wb(static_cast<size_t>(N) * kKS, 0);
        for (int tid = 0; tid < kThreads; ++tid) {
          for (int i = 0; i < kRows * kKS / 2 / kThreads; ++i) {
            const SlicePair sp = slice_pair(tid + i * kThreads, kRows, kKS / 2, a_kc);
            ASSERT_TRUE(sp.row >= 0 && sp.row < kRows && sp.kp >= 0 && sp.kp < kKS / 2);
            for (int h = 0; h < 2; ++h) {
              const int k = 2 * sp.kp + h;
              sa.bits[static_cast<size_t>(sp.row * kPitch + k)] = bf16_bits(A[sp.row * kKS + k]);
              ++wa[sp.row * kKS + k];
            }
          }
          for (int i = 0; i < N * kKS / 2 / kThreads; ++i) {
            const SlicePair sp = slice_pair(tid + i * kThreads, N, kKS / 2, b_kc);
            ASSERT_TRUE(sp.row >= 0 && sp.row < N && sp.kp >= 0 && sp.kp < kKS / 2);
            for (int h = 0; h < 2; ++h) {
              const int k = 2 * sp.kp + h;
              sb.bits[static_cast<size_t>(sp.row * kPitch + k)] = bf16_bits(B[k * N + sp.row]);
              ++wb[k * N + sp.row];
            }
          }
        }
        for (int c : wa) ASSERT_EQ(c, 1);
        for (int c : wb) ASSERT_EQ(c, 1);
        for (int warp = 0; warp < kThreads / 32; ++warp) {
          const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
          const auto a = ldsm_x4(sa, m0, 0, ldsm_a_rowmajor, false);
          for (int np = 0; np < N / 32; ++np) {
            const auto b4 = ldsm_x4(sb, n0 + 16 * np, 0, ldsm_b_nmajor, false);
            for (int h = 0; h < 2; ++h) {
              std::vector<std::array<uint32_t, 2>> b(32);
              for (int t = 0; t < 32; ++t) b[t] = {b4[t][2 * h], b4[t][2 * h + 1]};
              const std::vector<float> C = mma_emulate(a, b);
              for (int r = 0; r < 16; ++r)
                for (int n = 0; n < 8; ++n) {
                  const int col = n0 + 16 * np + 8 * h + n;
                  float want = 0.0f;
                  for (int k = 0; k < kKS; ++k) want += A[(m0 + r) * kKS + k] * B[k * N + col];
                  ASSERT_EQ(C[r * 8 + n], want) << "warp " << warp << " row " << m0 + r << " col " << col;
                }
            }
          }
        }
      }
    }
  }
}

// chunk_products.cu's ring of bf16 planes (GlobalPlanes): the 16-byte copies of a k-slice (plane_copy) put every
// element of both planes where plane_slot_at says, once; the 8 rows of each ldmatrix matrix the warps read from a slot
// fall in 8 different 16-byte bank groups; and block_gemm's fragments (a slot contiguous in k read as stored, the
// other transposed: ldsm_a_kmajor / ldsm_b_kmajor with .trans) multiply to A B at every warp's tile, for A (n = 64)
// and B (n = 64, 128) from both source layouts.
TEST(MmaLayout, ProductsPlaneRingFeedsTheWarpsTheProduct) {
  constexpr int kThreads = 256, kRows = 64, kKS = 16;
  for (int n : {64, 128})
    for (bool kc : {true, false}) {
      SCOPED_TRACE("n " + std::to_string(n) + (kc ? ", k-contiguous" : ", i-contiguous"));
      ASSERT_EQ(4 * n % kThreads, 0);
      std::vector<int> seen(static_cast<size_t>(2 * n * kKS), 0);
      for (int c = 0; c < 4 * n; ++c) {
        const PlaneCopy pc = plane_copy(c, n, kc);
        ASSERT_TRUE(pc.pl >= 0 && pc.pl < 2 && pc.i >= 0 && pc.i < n && pc.kk >= 0 && pc.kk < kKS) << "copy " << c;
        const int dst = plane_slot_at(pc.i, pc.kk, n, kc);
        ASSERT_EQ(dst % 8, 0) << "copy " << c;  // 16-byte aligned in the slot
        for (int e = 0; e < 8; ++e) {
          const int i = kc ? pc.i : pc.i + e, kk = kc ? pc.kk + e : pc.kk;
          ASSERT_TRUE(i < n && kk < kKS) << "copy " << c;
          EXPECT_EQ(plane_slot_at(i, kk, n, kc), dst + e) << "copy " << c;
          ++seen[static_cast<size_t>((pc.pl * n + i) * kKS + kk)];
        }
      }
      for (size_t x = 0; x < seen.size(); ++x) ASSERT_EQ(seen[x], 1) << "element " << x;
      for (int i0 = 0; i0 < n; i0 += 8)
        for (int kk0 = 0; kk0 < kKS; kk0 += 8) {  // the rows of one matrix: i0 .. + 7 (kc) or kk0 .. + 7 (else)
          int groups = 0;
          for (int j = 0; j < 8; ++j)
            groups |= 1 << ((kc ? plane_slot_at(i0 + j, kk0, n, kc) : plane_slot_at(i0, kk0 + j, n, kc)) * 2 / 16 % 8);
          EXPECT_EQ(groups, 0xff) << "matrix at i " << i0 << ", kk " << kk0;
        }
    }
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int> d(-8, 8);
  for (int N : {64, 128})
    for (bool a_kc : {false, true})
      for (bool b_kc : {false, true}) {
        SCOPED_TRACE("N " + std::to_string(N) + (a_kc ? ", A k-contiguous" : ", A m-contiguous") +
                     (b_kc ? ", B k-contiguous" : ", B n-contiguous"));
        // A (i, kk) [64][16], B (kk, i) [16][N]; a slot stored [i][kk] (k-contiguous) or [kk][i] (else).
        std::vector<float> A(kRows * kKS), B(static_cast<size_t>(kKS) * N);
        for (float& x : A) x = static_cast<float>(d(rng));
        for (float& x : B) x = static_cast<float>(d(rng));
        auto slot = [&](int n, bool kc, auto value) {
          Stored s{kc ? n : kKS, kc ? kKS : n, false, std::vector<uint16_t>(static_cast<size_t>(n) * kKS, 0xffff), {},
                   [n, kc](int r, int c) { return kc ? plane_slot_at(r, c, n, true) : plane_slot_at(c, r, n, false); }};
          for (int i = 0; i < n; ++i)
            for (int kk = 0; kk < kKS; ++kk)
              s.bits[static_cast<size_t>(plane_slot_at(i, kk, n, kc))] = bf16_bits(value(i, kk));
          return s;
        };
        const Stored sa = slot(kRows, a_kc, [&](int i, int kk) { return A[i * kKS + kk]; });
        const Stored sb = slot(N, b_kc, [&](int i, int kk) { return B[kk * N + i]; });
        for (int warp = 0; warp < kThreads / 32; ++warp) {
          const int m0 = 16 * (warp & 3), n0 = (N / 2) * (warp >> 2);
          const auto a = a_kc ? ldsm_x4(sa, m0, 0, ldsm_a_rowmajor, false) : ldsm_x4(sa, 0, m0, ldsm_a_kmajor, true);
          for (int np = 0; np < N / 32; ++np) {
            const int nb = n0 + 16 * np;
            const auto b4 = b_kc ? ldsm_x4(sb, nb, 0, ldsm_b_nmajor, false) : ldsm_x4(sb, 0, nb, ldsm_b_kmajor, true);
            for (int h = 0; h < 2; ++h) {
              std::vector<std::array<uint32_t, 2>> b(32);
              for (int t = 0; t < 32; ++t) b[t] = {b4[t][2 * h], b4[t][2 * h + 1]};
              const std::vector<float> C = mma_emulate(a, b);
              for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 8; ++c) {
                  const int col = nb + 8 * h + c;
                  float want = 0.0f;
                  for (int k = 0; k < kKS; ++k) want += A[(m0 + r) * kKS + k] * B[k * N + col];
                  ASSERT_EQ(C[r * 8 + c], want) << "warp " << warp << " row " << m0 + r << " col " << col;
                }
            }
          }
        }
      }
}

// x rounded to nearest at tf32's precision (11 significant bits, 10 fraction bits below 2^-126), ties away from zero,
// in float64: the cvt.rna.tf32.f32 result that tf32_operand's register must hold for the tensor cores.
float tf32_rna_reference(float x) {
  if (!std::isfinite(x)) return x;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax == 0.0) return x;
  int e = 0;
  std::frexp(ax, &e);  // ax = m 2^e, m in [0.5, 1)
  const double q = std::ldexp(1.0, std::max(e - 11, -136));
  const double r = std::floor(ax / q + 0.5) * q;
  const double tf32_max = std::ldexp(2.0 - std::ldexp(1.0, -10), 127);
  const double rr = r > tf32_max ? HUGE_VAL : r;
  return static_cast<float>(std::copysign(rr, static_cast<double>(x)));
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// chunk_products.cu's operand ring: the 16-byte copies of a k-slice cover every element of it once, each at the slot
// offset ring_at reads it from, for both source layouts and both operand widths (a copy whose 4 elements were not
// where ring_at looks, or two copies of one element, would feed the staging wrong values).
TEST(MmaLayout, ProductsRingCopiesPutEveryElementWhereItIsRead) {
  constexpr int kSlice = 16;
  for (int n : {64, 128})
    for (bool kc : {true, false}) {
      std::vector<int> seen(static_cast<size_t>(n) * kSlice, 0);
      for (int c = 0; c < n * kSlice / 4; ++c) {
        const RingCopy rc = ring_copy(c, n, kSlice, kc);
        for (int e = 0; e < 4; ++e) {
          const int i = kc ? rc.i : rc.i + e, k = kc ? rc.k + e : rc.k;
          ASSERT_TRUE(i >= 0 && i < n && k >= 0 && k < kSlice) << "n " << n << " kc " << kc << " copy " << c;
          EXPECT_EQ(ring_at(i, k, n, kSlice, kc), rc.dst + e) << "n " << n << " kc " << kc << " copy " << c;
          ++seen[static_cast<size_t>(i) * kSlice + k];
        }
      }
      for (size_t x = 0; x < seen.size(); ++x) ASSERT_EQ(seen[x], 1) << "n " << n << " kc " << kc << " element " << x;
    }
}

// tf32_operand's register, as the tensor cores read it, is cvt.rna's value for every non-NaN float: random bit patterns
// (every exponent, subnormals, infinities), values around each exponent step where the rounding carries into
// the exponent, exact ties, and the largest finite floats (which round to infinity). split()'s two registers then
// carry x - hi exactly rounded, so hi + lo is x to 2^-21 relative (or half tf32's subnormal quantum).
TEST(MmaLayout, Tf32OperandRoundsAsCvtRna) {
  std::mt19937 rng(7);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, std::ldexp(1.0f, -149), std::ldexp(1.0f, -126),
                           std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (int e = -149; e < 128; ++e) {
    const float p = std::ldexp(1.0f, e);
    xs.push_back(std::nextafter(p, 0.0f));                                       // rounds up into the next exponent
    xs.push_back(p * (1.0f + std::ldexp(1.0f, -11)));                            // an exact tie (e > -136)
    xs.push_back(-p * (1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)));  // just past a tie
  }
  for (int i = 0; i < 200000; ++i) {
    const uint32_t b = rng();
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  for (float x : xs) {
    const float got = tf32_value(tf32_operand(x)), want = tf32_rna_reference(x);
    if (std::isnan(x)) continue;  // finite x only (tf32_operand's comment); infinities stay infinite
    ASSERT_EQ(bits_of(got), bits_of(want)) << "x = " << x << " bits " << std::hex << bits_of(x);
    if (std::isfinite(x) && std::isfinite(want)) {
      // split(): lo from x minus hi's value, rounded the same way.
      const float hi = tf32_value(tf32_operand(x)), lo = tf32_value(tf32_operand(x - hi));
      ASSERT_EQ(bits_of(lo), bits_of(tf32_rna_reference(x - hi))) << "x = " << x;
      const double err = std::fabs(static_cast<double>(hi) + lo - x);
      // 2^-21 relative, or half of tf32's subnormal quantum (2^-136)
      ASSERT_LE(err, std::ldexp(std::fabs(static_cast<double>(x)), -21) + std::ldexp(1.0, -137)) << "x = " << x;
    }
  }
}

// chunk_grad.cu's swizzled [C][K] and [C][C] arrays: each row's columns permuted within their aligned 32, and every
// access pattern of the gradient pass on 32 distinct banks: a row's 32 consecutive columns (a thread a channel), an
// m16n8k8 B fragment and an accumulator tile of the [C][K] arrays, an A fragment of dM / dA as stored and transposed.
TEST(MmaLayout, GradientPassSwizzlesAreConflictFreePermutations) {
  const auto banks = [](const std::array<int, 32>& off) {
    uint32_t mask = 0;
    for (int o : off) mask |= 1u << (o % 32);
    return mask == 0xffffffffu;
  };
  for (int K : {32, 64, 128}) {
    for (int r = 0; r < 64; ++r) {
      std::vector<int> seen(static_cast<size_t>(K), 0);
      for (int d = 0; d < K; ++d) {
        const int s = d ^ grad_col_swizzle(r);
        ASSERT_LT(s, K);
        ASSERT_EQ(s / 32, d / 32) << "the swizzle must keep a column in its aligned 32";
        ++seen[static_cast<size_t>(s)];
      }
      for (int c : seen) ASSERT_EQ(c, 1) << "K " << K << " row " << r;
      for (int d0 = 0; d0 < K; d0 += 32) {
        std::array<int, 32> off{};
        for (int l = 0; l < 32; ++l) off[l] = r * K + ((d0 + l) ^ grad_col_swizzle(r));
        EXPECT_TRUE(banks(off)) << "row access K " << K << " row " << r;
      }
    }
    for (int r0 = 0; r0 < 64; r0 += 4)
      for (int n0 = 0; n0 < K; n0 += 8)
        for (int e = 0; e < 2; ++e) {
          std::array<int, 32> b{}, c{};
          for (int l = 0; l < 32; ++l) {
            const int grp = l >> 2, tig = l & 3;
            const int rb = r0 + tig, cb = n0 + grp;  // B fragment b_e: rows r0 + tig (r0 = 8 ks + 4 e)
            b[l] = rb * K + (cb ^ grad_col_swizzle(rb));
            const int rc = (r0 & ~7) + grp, cc = n0 + 2 * tig + e;  // accumulator element c_e (rows 8h + grp)
            c[l] = rc * K + (cc ^ grad_col_swizzle(rc));
          }
          EXPECT_TRUE(banks(b)) << "B fragment K " << K << " rows " << r0 << " cols " << n0;
          EXPECT_TRUE(banks(c)) << "accumulator K " << K << " rows " << r0 << " cols " << n0;
        }
  }
  for (int r = 0; r < 64; ++r) {
    std::vector<int> seen(64, 0);
    for (int c = 0; c < 64; ++c) {
      const int s = c ^ grad_pair_swizzle(r);
      ASSERT_EQ(s / 4, (c / 4) ^ (grad_pair_swizzle(r) / 4)) << "4-column groups must stay whole";
      ++seen[static_cast<size_t>(s)];
    }
    for (int n : seen) ASSERT_EQ(n, 1) << "row " << r;
    // Period 8 in the row: chunk_grad_tc.cu's cp.async copies step 16 rows with one destination offset.
    ASSERT_EQ(grad_pair_swizzle(r + 8), grad_pair_swizzle(r)) << "row " << r;
  }
  for (int r0 = 0; r0 < 64; r0 += 8)
    for (int c0 = 0; c0 < 64; c0 += 8)
      for (int h = 0; h < 2; ++h)
        for (int v = 0; v < 2; ++v) {
          std::array<int, 32> a{}, at{};
          for (int l = 0; l < 32; ++l) {
            const int grp = l >> 2, tig = l & 3;
            const int ra = r0 + grp + 8 * h, ca = c0 + tig + 4 * v;  // A as stored: a[h + 2 v]
            a[l] = ra * 64 + (ca ^ grad_pair_swizzle(ra));
            // transposed, A[m][k] = dM[k][m] (m: a block's 16 columns from c0, a multiple of 16): a[h + 2 v]
            const int rt = r0 + tig + 4 * v, ct = (c0 + grp + 8 * h) % 64;
            at[l] = rt * 64 + (ct ^ grad_pair_swizzle(rt));
          }
          EXPECT_TRUE(banks(a)) << "A fragment rows " << r0 << " cols " << c0;
          if (c0 % 16 == 0) EXPECT_TRUE(banks(at)) << "transposed A fragment rows " << r0 << " cols " << c0;
        }
}

// chunk_grad_tc.cu's offsets formed once (its k-step loops' fragments, its dM / dA copies), stepped as the kernel
// steps them, against the direct swizzled offsets (TcLayout: [64][64] arrays, at / pair_at) of every element it reads
// or writes: warp w (block w / 2, channels 32 (w % 2) ..), every lane, k-step, fragment register and copy pass.
TEST(MmaLayout, GradTcSteppedOffsetsEqualTheDirectOnes) {
  constexpr int kC = 64;
  auto at = [](int r, int d) { return r * 64 + (d ^ grad_col_swizzle(r)); };
  auto pair_at = [](int r, int c) { return r * kC + (c ^ grad_pair_swizzle(r)); };
  for (int warp = 0; warp < 8; ++warp)
    for (int lane = 0; lane < 32; ++lane) {
      const int grp = lane >> 2, tig = lane & 3, rb = 16 * (warp >> 1), n0 = 32 * (warp & 1);
      const int s = grad_pair_swizzle(rb + grp), sh = s & ~7, a0 = (rb + grp) * kC + (tig ^ (s & 7)),
                a1 = (rb + grp) * kC + ((tig + 4) ^ (s & 7));
      for (int ks = 0; ks < kC / 8; ++ks) {
        const int c0 = 8 * ks, ca = c0 ^ sh, oa[2] = {a0 + ca, a1 + ca};
        for (int i = 0; i < 4; ++i) {
          // the row side's A: dM / dA row rb + grp + 8 (i & 1), column c0 + tig + 4 (i >> 1)
          ASSERT_EQ(oa[i >> 1] + 8 * kC * (i & 1), pair_at(rb + grp + 8 * (i & 1), c0 + tig + 4 * (i >> 1)))
              << warp << " " << lane << " " << ks << " " << i;
          // the column side's A (transposed): dM / dA row c0 + tig + 4 (i >> 1), column rb + grp + 8 (i & 1)
          const int col = pair_at(tig + 4 * (i >> 1), rb + grp + 8 * (i & 1));
          ASSERT_EQ(col + c0 * kC, pair_at(c0 + tig + 4 * (i >> 1), rb + grp + 8 * (i & 1)))
              << warp << " " << lane << " " << ks << " " << i;
        }
        for (int n = 0; n < 4; ++n)
          for (int j = 0; j < 2; ++j)  // B (both sides): row c0 + tig + 4 j, channel n0 + 8 n + grp of Qs / Ks / Gc
            ASSERT_EQ(at(tig + 4 * j, n0 + 8 * n + grp) + c0 * 64, at(c0 + tig + 4 * j, n0 + 8 * n + grp))
                << warp << " " << lane << " " << ks << " " << n << " " << j;
      }
    }
  // The copies: thread tid's 16-byte group of row tid / 16 + 16 i, columns 4 (tid % 16) .., over dM's and dA's rows.
  std::vector<int> seen(2 * kC * kC, 0);
  for (int tid = 0; tid < 256; ++tid)
    for (int i = 0; i < 2 * kC / 16; ++i) {
      const int dst = pair_at(tid / 16, 4 * (tid % 16)) + i * 16 * kC, r = tid / 16 + 16 * i;
      ASSERT_EQ(dst, pair_at(r, 4 * (tid % 16))) << tid << " " << i;
      for (int e = 0; e < 4; ++e) ++seen[static_cast<size_t>(dst + e)];
    }
  for (int n : seen) ASSERT_EQ(n, 1);
}

// chunk_grad_tc.cu's dq / dk finishing (grad_tc_finishes_qk): at K = 128 the two halves' warps and lanes store every
// (row, channel) of a row block as one bf16 pair, the pair's second channel read at the first's shared-memory offset
// XOR 1; the partial dot slots (grad_tc_dot_slot) are each written by one lane of a CTA (tig = 0 of its rows) and fill
// the [2][2][C] array.
TEST(MmaLayout, GradTcFinishingCoversEveryRowAndChannelOnce) {
  constexpr int kC = 64, K = 128;
  auto at = [](int r, int d) { return r * 64 + (d ^ grad_col_swizzle(r)); };
  std::vector<int> stored(kC * K, 0), part(4 * kC, 0);
  for (int half = 0; half < K / 64; ++half)
    for (int warp = 0; warp < 8; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const int grp = lane >> 2, tig = lane & 3, rb = 16 * (warp >> 1), n0 = 32 * (warp & 1);
        const int dglob = 64 * half + n0;
        for (int hh = 0; hh < 2; ++hh) {
          const int r = rb + grp + 8 * hh;
          if (half == 0 && tig == 0)
            for (int which = 0; which < 2; ++which) ++part[static_cast<size_t>(grad_tc_dot_slot(warp & 1, which, r))];
          const int pair0 = (r * K + dglob + 2 * tig) / 2;  // a row's element offset, halved (strides even)
          for (int n = 0; n < 4; ++n) {
            const int dl = n0 + 8 * n + 2 * tig, pair = pair0 + 4 * n;
            ASSERT_EQ(at(r, dl) ^ 1, at(r, dl + 1)) << r << " " << dl;
            ASSERT_EQ(2 * pair, r * K + 64 * half + dl) << half << " " << warp << " " << lane << " " << n;
            ++stored[static_cast<size_t>(2 * pair)];
            ++stored[static_cast<size_t>(2 * pair + 1)];
          }
        }
      }
  for (int n : stored) ASSERT_EQ(n, 1);
  for (int n : part) ASSERT_EQ(n, 1);
}

}  // namespace
}  // namespace kda::cuda::chunk
