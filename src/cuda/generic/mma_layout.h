// mma_layout.h: which shared-memory row each lane hands to ldmatrix (m8n8, b16, .x4) to build the operand
// fragments of mma.sync.m16n8k16 (bf16 in, fp32 accumulate), for the four ways an operand can be stored, and how an
// fp32 value becomes a rounded .tf32 operand of mma.sync.m16n8k8. Host-callable, so tests/cpu/test_mma_layout.cpp
// checks every rule by emulating a warp's ldmatrix and mma on the CPU, and the rounding against a float64 reference.
//
// mma.m16n8k16 fragments (lane = 4 grp + tig; each register holds two bf16, the lower-indexed one in the low half):
//   A (16 x 16, m x k): r0 = A[grp][2tig, +1], r1 = A[grp + 8][2tig, +1], r2 = A[grp][2tig + 8, +9],
//                       r3 = A[grp + 8][2tig + 8, +9]
//   B (16 x 8,  k x n): r0 = B[2tig, +1][grp], r1 = B[2tig + 8, +9][grp]
//   C (16 x 8, fp32):   c0, c1 = C[grp][2tig, +1], c2, c3 = C[grp + 8][2tig, +1]
// ldmatrix.x4: lanes 8j .. 8j + 7 give the 8 row addresses (16 contiguous bytes each) of matrix j, which lands in
// register j; without .trans lane t receives row t / 4, elements 2 (t % 4), +1 of its matrix; with .trans it
// receives elements [2 (t % 4)][t / 4] and [2 (t % 4) + 1][t / 4] (the matrix transposed).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/params.h"  // KDA_HOST_DEVICE

namespace kda::cuda::chunk {

// x rounded to nearest (ties away from zero) at tf32's 10 fraction bits, as an mma.sync .tf32 operand register. The
// tensor cores read a .tf32 register's top 19 bits and ignore its low 13 (CUTLASS's 3xTF32 passes its small part
// unmasked on that basis), so adding half a tf32 ulp to the bits is the whole rounding: one add where
// cvt.rna.tf32.f32 compiles to a finiteness test, the add and a mask (3 instructions on sm_80 / sm_90a; with the
// split's second rounding ~13% of phase 1's instructions, S3's above all). For finite x only: an infinity stays one,
// but a NaN whose payload is all ones (the GPU's 0x7fffffff) carries into the sign and reads as -0. The chunked
// kernels round their A-matrix operands this way; a non-finite q, k or g also reaches the outputs through Qg, W and
// the state's products, so it is not hidden.
KDA_HOST_DEVICE uint32_t tf32_operand(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  return b + 0x1000u;
}
// The value the tensor cores read from an operand register (its low 13 bits cleared): cvt.rna.tf32.f32's result.
KDA_HOST_DEVICE float tf32_value(uint32_t r) {
  r &= 0xffffe000u;
  float f;
  memcpy(&f, &r, 4);
  return f;
}

// The row (of the stored matrix) and the element column where lane's 8-element ldmatrix row starts, relative to the
// tile's origin in that stored matrix.
struct LdsmRow {
  int row, col;
};

// A stored m-major ([m][k], k contiguous): one A fragment (16 x 16) with ldmatrix.x4.
KDA_HOST_DEVICE LdsmRow ldsm_a_rowmajor(int lane) {
  const int j = lane >> 3, i = lane & 7;
  return {i + 8 * (j & 1), 8 * (j >> 1)};
}
// A stored k-major ([k][m], m contiguous, i.e. the operand is the transpose of what is stored): ldmatrix.x4.trans.
KDA_HOST_DEVICE LdsmRow ldsm_a_kmajor(int lane) {
  const int j = lane >> 3, i = lane & 7;
  return {i + 8 * (j >> 1), 8 * (j & 1)};
}
// B stored n-major ([n][k], k contiguous): B fragments of two adjacent n-tiles (n0 .. n0 + 15) with ldmatrix.x4;
// registers 0, 1 are the first n-tile's r0, r1 and registers 2, 3 the second's.
KDA_HOST_DEVICE LdsmRow ldsm_b_nmajor(int lane) {
  const int j = lane >> 3, i = lane & 7;
  return {i + 8 * (j >> 1), 8 * (j & 1)};
}
// B stored k-major ([k][n], n contiguous): the same two n-tiles with ldmatrix.x4.trans.
KDA_HOST_DEVICE LdsmRow ldsm_b_kmajor(int lane) {
  const int j = lane >> 3, i = lane & 7;
  return {i + 8 * (j & 1), 8 * (j >> 1)};
}

// Element offset of (row, col) in an unpadded [rows][cols] bf16 plane whose 16-byte chunks are XOR-swizzled by row
// (chunk c of row r stored at chunk c ^ (r & 7); cols a multiple of 64). The 8 rows one ldmatrix matrix reads
// (consecutive rows, one logical chunk) then sit in 8 different 16-byte bank groups, without padding: a plane pair
// takes exactly the bytes of the fp32 tile it replaces.
KDA_HOST_DEVICE int swizzled(int row, int col, int cols) {
  return row * cols + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}

// A CTA of `threads` threads splitting an fp32 [rows][cols] matrix into swizzled planes four columns a thread
// (chunk_prepare.cu split_to_planes): thread tid takes columns c .. c + 3 of rows r0, r0 + step, ... (step =
// threads / (cols / 4), a multiple of 8), whose four elements sit at row r's offset r cols + sw in the plane: rows a
// multiple of 8 apart share r & 7, hence their swizzled column.
struct PlaneSplit {
  int c, r0, step, sw;
};
KDA_HOST_DEVICE PlaneSplit plane_split(int tid, int cols, int threads) {
  const int per = cols / 4, c = 4 * (tid % per), r0 = tid / per;
  return {c, r0, threads / per, swizzled(r0, c, cols) - r0 * cols};
}

// Staging of a GEMM operand stored [rows][k] (k contiguous) as bf16 hi / lo planes, one k-slice of 2 kpairs columns
// at a time (chunk_products.cu block_gemm): element pair e (0 <= e < rows kpairs) is (row, 2 kp) and (row, 2 kp + 1).
// A source contiguous in k gives consecutive pairs of one row to consecutive e, any other source consecutive rows of
// one pair, so consecutive threads read consecutive source addresses either way.
struct SlicePair {
  int row, kp;
};
KDA_HOST_DEVICE SlicePair slice_pair(int e, int rows, int kpairs, bool k_contiguous) {
  return k_contiguous ? SlicePair{e / kpairs, e % kpairs} : SlicePair{e % rows, e / rows};
}

// The ring that feeds that staging from global memory (chunk_products.cu GlobalF32): 16-byte copy c of a k-slice of
// `kslice` elements of an [n][kin] fp32 operand lands in a slot laid out [i][kslice] for a source contiguous in k, else
// [kslice][n]; the copy's 4 elements are (i, k .. k + 3) or (i .. i + 3, k) of the slice, slot floats dst .. dst + 3;
// ring_at is where element (i, kk) of the slice sits. The planes of W (GlobalPlanes) are the k-contiguous case per
// plane with 8 bf16 a copy.
struct RingCopy {
  int i, k, dst;
};
KDA_HOST_DEVICE RingCopy ring_copy(int c, int n, int kslice, bool k_contiguous) {
  if (k_contiguous) {
    const int i = c / (kslice / 4), q = c % (kslice / 4);
    return {i, 4 * q, i * kslice + 4 * q};
  }
  const int kr = c / (n / 4), q = c % (n / 4);
  return {4 * q, kr, kr * n + 4 * q};
}
KDA_HOST_DEVICE int ring_at(int i, int kk, int n, int kslice, bool k_contiguous) {
  return k_contiguous ? i * kslice + kk : kk * n + i;
}

// The ring slot of an operand that arrives as bf16 hi / lo planes (chunk_products.cu GlobalPlanes), read by ldmatrix
// straight from the slot: a 16-step k-slice of an [n][kin] operand, each plane unpadded (the slot keeps the bytes of
// the fp32 slice). A source contiguous in k gives [n][16] per plane (32-byte rows), chunk h (of 2) of row i stored at
// h ^ ((i >> 2) & 1), so the 8 consecutive rows of an ldmatrix matrix fall in 8 different 16-byte bank groups; any
// other source gives [16][n] (k rows of n), chunks swizzled by k row as swizzled() does (ldmatrix.trans reads 8
// consecutive k rows at one chunk). plane_slot_at is element (i, kk)'s offset in either plane (n >= 64).
KDA_HOST_DEVICE int plane_slot_at(int i, int kk, int n, bool k_contiguous) {
  return k_contiguous ? i * 16 + ((((kk >> 3) ^ ((i >> 2) & 1)) << 3) | (kk & 7)) : swizzled(kk, i, n);
}
// 16-byte copy c of such a slice (4 n copies: 2 n a plane): plane pl, and the first of its 8 elements, (i, kk) with
// the other seven at kk + 1 .. kk + 7 (k-contiguous source) or at i + 1 .. i + 7 (otherwise).
struct PlaneCopy {
  int pl, i, kk;
};
KDA_HOST_DEVICE PlaneCopy plane_copy(int c, int n, bool k_contiguous) {
  const int pl = c / (2 * n), q = c % (2 * n);
  if (k_contiguous) return {pl, q >> 1, 8 * (q & 1)};
  return {pl, 8 * (q % (n / 8)), q / (n / 8)};
}

// The gradient passes' shared arrays, read by a thread a channel (chunk_grad.cu: a row's consecutive columns across a
// warp) and as m16n8k8 tf32 fragments (chunk_grad_tc.cu's pair products). [C][K] fp32 arrays (q, k, g, dq, dk,
// dg): column d of row r stored at d ^ grad_col_swizzle(r). A B fragment (rows r0 + tig (+4), columns n0 + grp)
// then has tig in bits 3-4 and grp in bits 0-2 of the bank; an accumulator's element (rows r0 + grp (+8), columns
// n0 + 2 tig + e) has tig in bits 1-2, grp & 3 in bits 3-4 and grp >> 2 in bit 0: 32 banks either way (r0, n0
// multiples of 8). Unswizzled (pitch K, a multiple of 32) both were 4- and 8-way conflicts. The XOR is below 32, so a
// row's aligned 32 columns stay where they were as a set: a warp reading one row's consecutive columns is still
// conflict-free.
KDA_HOST_DEVICE int grad_col_swizzle(int r) { return ((r & 3) << 3) | ((r >> 2) & 1); }
// [C][C] fp32 dM and dA: column c of row r at c ^ grad_pair_swizzle(r). An A fragment (rows r0 + grp (+8), columns
// c0 + tig (+4)) has tig in bits 0-1, grp >> 2 in bit 2, grp & 3 in bits 3-4; the transposed operand (A[m][k] =
// dM[k][m]: rows r0 + tig (+4), columns c0 + grp (+8)) has grp in bits 0-2, tig in bits 3-4. Bits 0-1 of the XOR are
// zero, so 16-byte groups of 4 columns stay whole (the cp.async copies that stage them).
KDA_HOST_DEVICE int grad_pair_swizzle(int r) { return ((r & 3) << 3) | (((r >> 2) & 1) << 2); }
// chunk_grad_tc.cu's partial row dots (finishing dq / dk): the slot of row r's dot of q (which = 0) or k (1) over the
// 32 channels of a block's warp w2 (warp & 1), in a [2][2][C] float array that the cluster's other half reads too.
KDA_HOST_DEVICE int grad_tc_dot_slot(int w2, int which, int r) { return (2 * w2 + which) * 64 + r; }

}  // namespace kda::cuda::chunk
