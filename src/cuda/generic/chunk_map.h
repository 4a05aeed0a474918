// chunk_map.h: the work plan of the two-phase chunked CUDA forward, as __host__ __device__ index math (no CUDA
// types, so the CPU tests build and check it): the chunk list (which tokens each chunk covers), the workspace
// layout both phases share, and the run-time choice of the state pass's V tile.
//
// Chunk list. Every sequence is cut into chunks of at most kChunk tokens, in order; a chunk never crosses a
// sequence end, and the last chunk of a sequence may be shorter (empty sequences have none). The list is sequence
// major: sequence n owns entries seq_first[n] .. seq_first[n + 1] - 1. It is built on the device from cu_seqlens at
// run time (chunk_prepare.cu, build_chunk_map), so nothing syncs with the host; its length is bounded by
// chunk_capacity(T_total, N) = floor(T_total / kChunk) + N (each sequence adds at most one partial chunk), which
// sizes the workspace. Device-resident cu_seqlens are clamped to [0, T] as every CUDA kernel does; a malformed
// (decreasing) array can make the clamped lengths sum past T, so every index is also capped at the capacity:
// such a call gives unspecified values (kda.h) but never writes out of bounds.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/params.h"

namespace kda::cuda {

constexpr int kChunk = 64;  // tokens per chunk (the workspace tiles are kChunk rows)

// One chunk: tokens start .. start + len - 1 of batch row `batch` (0 with cu_seqlens, else the sequence index),
// sequence seq; 1 <= len <= kChunk.
struct ChunkRec {
  int64_t start;
  int32_t seq;
  int32_t len;
};

KDA_HOST_DEVICE int64_t chunk_capacity(int64_t t_total, int64_t n_seq) { return t_total / kChunk + n_seq; }
KDA_HOST_DEVICE int64_t chunks_of(int64_t len) { return len <= 0 ? 0 : (len + kChunk - 1) / kChunk; }

// Sequence n's tokens: with cu_seqlens, cu[n] .. cu[n+1] - 1 of batch row 0, clamped to [0, T] (device arrays are
// not validated); without, all T tokens of batch row n.
struct SeqSpan {
  int64_t batch, start, len;
};
KDA_HOST_DEVICE SeqSpan sequence_span(bool has_cu, int64_t cu_n, int64_t cu_n1, int64_t n, int64_t T) {
  if (!has_cu) return SeqSpan{n, 0, T};
  const int64_t s = cu_n < 0 ? 0 : (cu_n > T ? T : cu_n);
  const int64_t e = cu_n1 < s ? s : (cu_n1 > T ? T : cu_n1);
  return SeqSpan{0, s, e - s};
}

// Writes the chunks of one sequence (span sp, index n) at list entries first, first + 1, ..., never at or past cap.
KDA_HOST_DEVICE void write_sequence_chunks(ChunkRec* list, int64_t first, int64_t cap, int32_t n, const SeqSpan& sp) {
  const int64_t count = chunks_of(sp.len);
  for (int64_t j = 0; j < count && first + j < cap; ++j) {
    const int64_t off = j * kChunk;
    const int64_t rest = sp.len - off;
    list[first + j] = ChunkRec{sp.start + off, n, static_cast<int32_t>(rest < kChunk ? rest : kChunk)};
  }
}

// Host model of the device builder (same functions, sequential prefix sum instead of the block scan): fills
// seq_first[0..N] (each capped at cap) and list; returns the number of entries written. Used by the CPU tests.
inline int64_t build_chunk_map_host(const SeqSpan* spans, int64_t n_seq, int64_t cap, ChunkRec* list,
                                    int64_t* seq_first) {
  int64_t at = 0;
  for (int64_t n = 0; n < n_seq; ++n) {
    seq_first[n] = at < cap ? at : cap;
    write_sequence_chunks(list, at, cap, static_cast<int32_t>(n), spans[n]);
    at += chunks_of(spans[n].len);
  }
  seq_first[n_seq] = at < cap ? at : cap;
  return seq_first[n_seq];
}

// The state and reverse passes' launch order over a packed batch's sequences: longest first (LPT), so that the
// block scheduler backfills the short chains behind the long ones instead of starting the longest last (a chain is
// sequential; h96-mixed's batch ends with its 48-chunk sequence, and launched in order it finishes ~22 chunk-steps,
// ~80 us, after longest first would: scripts/models/lpt_order.py). The device orders by lpt_key, a counting sort
// over 256 keys (forward_chunked.cu build_chunk_map): 0 for an empty sequence, else 1 + 4 floor(log2 count) + the two
// bits after the leading one, so keys never decrease as the count grows and counts sharing a key differ by less than
// 25%. Within a key the order is whatever the atomics give; no value depends on it (each chain computes alone).
constexpr int kLptKeys = 256;
KDA_HOST_DEVICE int lpt_key(int64_t count) {
  if (count <= 0) return 0;
  int msb = 0;
  while ((count >> (msb + 1)) != 0) ++msb;
  const int64_t frac = msb >= 2 ? count >> (msb - 2) : count << (2 - msb);  // the leading one and two bits after it
  return 1 + 4 * msb + static_cast<int>(frac & 3);
}

// Workspace, in this order, each part 256-byte aligned:
//   header       int64: number of chunks in the list; then uint64 [2]: phase 1's task counters (prep_counter_offset)
//   seq_first    int64 [N + 1]
//   seq_order    int64 [N]: the sequences longest first (lpt_key; written for packed batches only)
//   list         ChunkRec [cap]
//   tiles        float [cap][HV][tile_floats]: phase 1's per-(chunk, value head) products for phase 2:
//                W [C][K], Qg [C][K], Kd [C][K], U [C][V], Aqk [C][C] (lower incl. diagonal, upper zeros), decay [K];
//                U and decay fp32, the others as bf16x3 operands (chunk_common.cuh): a hi bf16 plane [C][K] then
//                the lo plane, in the bytes of the fp32 matrix
//                (rows past the chunk's length are zeros, so phase 2 needs no masking but for the output store)
// Byte offset in the header of phase 1's task counter `slot` (chunk_prepare.cu): slot 0 for a forward's first (or
// only) phase-1 launch, 1 for the one beside a state pass; build_chunk_map zeroes both.
KDA_HOST_DEVICE constexpr int64_t prep_counter_offset(int slot) { return 8 + 8 * int64_t{slot}; }
static_assert(prep_counter_offset(1) + 8 <= 256, "the counters fit the header, before seq_first (workspace_layout)");

struct TileLayout {
  int64_t K, V;
  KDA_HOST_DEVICE int64_t W() const { return 0; }
  KDA_HOST_DEVICE int64_t Qg() const { return int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t Kd() const { return 2 * int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t U() const { return 3 * int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t Aqk() const { return U() + int64_t{kChunk} * V; }
  KDA_HOST_DEVICE int64_t decay() const { return Aqk() + int64_t{kChunk} * kChunk; }
  KDA_HOST_DEVICE int64_t floats() const { return decay() + K; }  // a multiple of 4 for K, V multiples of 4
};

// A tile's planes as rows of the sm_90a passes' TMA maps (hopper/tma_map.h TileMaps, K = 128): a tile is 450 + V
// rows of 256 bytes, W, Qg and Kd start on whole 256-byte rows and A_qk on a whole 128-byte row (twice as many a tile),
// so tile ti's W plane pair is rows ti per_tile + w of the 256-byte map, its A_qk pair rows 2 ti per_tile + aqk of the
// 128-byte map (tests/cpu/test_chunk_map.cpp checks them against TileLayout's offsets).
struct TileRows {
  int per_tile, w, qg, kd, aqk;
};
KDA_HOST_DEVICE TileRows tile_rows(int64_t V) {
  const TileLayout tl{128, V};
  return {static_cast<int>(tl.floats() * 4 / 256), static_cast<int>(tl.W() * 4 / 256),
          static_cast<int>(tl.Qg() * 4 / 256), static_cast<int>(tl.Kd() * 4 / 256),
          static_cast<int>(tl.Aqk() * 4 / 128)};
}

// The prepare kernel's [W | U] (chunk_prepare.cu S5, bf16x3 forward) staged in shared memory, then copied to the
// tile a row at a time: W's hi and lo planes as 2 kChunk rows of K bf16 at a pitch of `wpitch` floats, U as kChunk
// rows of V fp32 at a pitch of `upitch` floats. Copy i < 2 kChunk is W's row i (hi plane rows first), the others U's;
// offsets in bytes, from the stage buffer and from the tile's W or U. Every offset and length is a multiple of 16
// (bulk copies, 16-byte vectors) for K, V multiples of 8 and pitches multiples of 4 (tests/cpu/test_chunk_map.cpp).
struct WuRowCopy {
  bool to_u;
  int src, dst, bytes;
};
KDA_HOST_DEVICE WuRowCopy wu_row_copy(int i, int K, int V, int wpitch, int upitch) {
  if (i < 2 * kChunk) return {false, i * wpitch * 4, i * K * 2, K * 2};
  const int r = i - 2 * kChunk;
  return {true, r * upitch * 4, r * V * 4, V * 4};
}
// Stage byte offsets of W's (plane, row r, column c) bf16 and of U's (r, c) fp32.
KDA_HOST_DEVICE int wu_stage_w(int plane, int r, int c, int wpitch) {
  return (plane * kChunk + r) * wpitch * 4 + 2 * c;
}
KDA_HOST_DEVICE int wu_stage_u(int r, int c, int upitch) { return (r * upitch + c) * 4; }

KDA_HOST_DEVICE int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

struct WorkspaceLayout {
  int64_t seq_first, seq_order, list, tiles, bytes, cap;
};
KDA_HOST_DEVICE WorkspaceLayout workspace_layout(int64_t t_total, int64_t n_seq, int64_t hv, int64_t K, int64_t V) {
  WorkspaceLayout w;
  w.cap = chunk_capacity(t_total, n_seq);
  w.seq_first = 256;
  w.seq_order = w.seq_first + align256((n_seq + 1) * int64_t{sizeof(int64_t)});
  w.list = w.seq_order + align256(n_seq * int64_t{sizeof(int64_t)});
  w.tiles = w.list + align256(w.cap * int64_t{sizeof(ChunkRec)});
  w.bytes = w.tiles + w.cap * hv * TileLayout{K, V}.floats() * int64_t{sizeof(float)};
  return w;
}

// Phase 1's sub-blocks (chunk_prepare.cu): a chunk's kChunk tokens are kSubBlocks blocks of kSub tokens (the
// diagonal blocks of A_kk / A_qk / T).
constexpr int kSubBlocks = 4;
constexpr int kSub = kChunk / kSubBlocks;

// S1's diagonal-block tasks: one per (sub-block bk, column pair p), task = 8 bk + p, over columns c1 = p and
// c2 = 15 - p. A task accumulates its columns' 17 A_qk entries on or below the diagonal and 15 A_kk entries below it
// into the 32 slots of one warp reduce-scatter, and walks 32 (row, column) updates whatever p: 32 tasks, two per warp
// of a 512-thread CTA, all equal (one task per column had columns of 16 - c rows to balance, and one reduce-scatter
// per column, ~25% of S1's instructions). The slot of each term is a function of the row r, a compile-time constant
// in the kernel's unrolled row loop, so the 32 accumulators stay in registers.
struct DiagPairTask {
  int bk, p, c1, c2;
};
KDA_HOST_DEVICE DiagPairTask diag_pair_task(int task) {
  const int p = task % (kSub / 2);
  return DiagPairTask{task / (kSub / 2), p, p, kSub - 1 - p};
}
KDA_HOST_DEVICE constexpr int diag_slot_qk1(int r) { return r; }       // A_qk (r, c1), r >= c1
KDA_HOST_DEVICE constexpr int diag_slot_kk1(int r) { return 16 + r; }  // A_kk (r, c1), r > c1
// A_qk (r, c2), r >= c2: rows below the diagonal in 15 - r (free: c1's A_qk rows are >= c1 = 15 - c2), the diagonal
// term in 31 - c2 = 16 + p, the slot its A_kk term (zero: A_kk is strictly lower) would take.
KDA_HOST_DEVICE constexpr int diag_slot_qk2(int r, int c2) { return r > c2 ? 15 - r : 31 - r; }
KDA_HOST_DEVICE constexpr int diag_slot_kk2(int r) { return 31 - r; }  // A_kk (r, c2), r > c2

// What lane `lane` holds after the reduce-scatter (the inverse of the slots above), and which entry above the
// diagonal it zeroes (A_qk: 15 of them, r < c; A_kk: 17, r <= c; one a lane).
struct DiagEntry {
  bool qk;  // A_qk, else A_kk
  int r, c;
};
KDA_HOST_DEVICE DiagEntry diag_slot_entry(const DiagPairTask& t, int lane) {
  if (lane < 16) return lane >= t.p ? DiagEntry{true, lane, t.c1} : DiagEntry{true, 15 - lane, t.c2};
  const int s = lane - 16;
  if (s > t.p) return DiagEntry{false, s, t.c1};
  if (s < t.p) return DiagEntry{false, 15 - s, t.c2};
  return DiagEntry{true, t.c2, t.c2};
}
KDA_HOST_DEVICE DiagEntry diag_zero_entry(const DiagPairTask& t, int lane) {
  if (lane < 15) return lane < t.p ? DiagEntry{true, lane, t.c1} : DiagEntry{true, lane - t.p, t.c2};
  const int m = lane - 15;
  return m <= t.p ? DiagEntry{false, m, t.c1} : DiagEntry{false, m - t.p - 1, t.c2};
}

// S2's per-channel scans run one task per (channel d, sub-block blk): task = blk * K + d, so the 32 tasks of a warp
// are 32 consecutive channels of one sub-block (coalesced global stores, conflict-free shared loads).
struct ScanTask {
  int d, blk;
};
KDA_HOST_DEVICE ScanTask scan_task(int task, int K) { return ScanTask{task % K, task / K}; }

// S2b's factor scans run one task per (channel pair d, d + 1; half h of sub-block blk: its tokens kSub blk + kHalf h
// .. + kHalf - 1): task = (2 blk + h) K / 2 + d / 2, so a warp's 32 tasks are 64 consecutive channels of one half
// (8-byte shared accesses, one 4-byte store a plane and token where one channel a task made two 2-byte ones). The
// same 4 K tasks as scan_task's.
constexpr int kHalf = kSub / 2;
struct PairScanTask {
  int d, h, blk;  // d even: the pair's first channel
};
KDA_HOST_DEVICE PairScanTask pair_scan_task(int task, int K) {
  const int pairs = K / 2, half = task / pairs;
  return PairScanTask{2 * (task % pairs), half % 2, half / 2};
}

// Phase 1's raw q / k stage (chunk_prepare.cu copy_qk_ahead): the next task's rows as bf16 [2][kC][K] in Kr's buffer,
// 16-byte vector j of thread (half, token st, quarter sq), the channels 8 sq + 32 j .. + 7 as S0 stages them. A row's
// vectors are XOR-swizzled by st & 7: a warp (8 tokens x 4 quarters) then puts 4 lanes on each bank group, 4
// wavefronts a vector, where the plain layout put 8 tokens on the same 4 banks (tests/cpu/test_chunk_map.cpp).
KDA_HOST_DEVICE int qk_raw_vector(int half, int st, int sq, int j, int K) {
  return (half * kChunk + st) * (K / 8) + ((sq + 4 * j) ^ (st & 7));
}

// S4's off-diagonal blocks of T (kSubBlocks = 4) as the 2 x 2 block inverse applied twice, [[P, 0], [C, Q]]^-1 =
// [[P^-1, 0], [-Q^-1 C P^-1, Q^-1]], in three stages after the diagonal blocks (round 0):
//   stage 1 (2 warps): T_10 = -T_11 (A_10 T_00), T_32 = -T_33 (A_32 T_22)      the two 32 x 32 halves' inverses
//   stage 2 (4 warps): X_ij = sum_{k = j .. 1} A_ik T_kj, i in {2, 3}, j in {0, 1}   X = A_BA T_A
//   stage 3 (4 warps): T_ij = -sum_{k = 2 .. i} T_ik X_kj                          T_BA = -T_B X
// A task is an output block (i, j) and the range of k it sums. Its dependent chain after round 0 is 4 + 4 + 4
// k-steps of 8 at most, against 4 + 6 + 8 for the distance rounds it replaced (T_IJ for I - J = 1, 2, 3 in turn,
// on 3, 2 and 1 warps); tests/cpu/test_chunk_map.cpp inverts random matrices with it in double.
struct Tri2Task {
  int i, j, k_first, k_last;
};
KDA_HOST_DEVICE int tri2_warps(int stage) { return stage == 1 ? 2 : 4; }
KDA_HOST_DEVICE Tri2Task tri2_task(int stage, int w) {
  if (stage == 1) return w == 0 ? Tri2Task{1, 0, 0, 0} : Tri2Task{3, 2, 2, 2};
  const int i = 2 + w / 2, j = w % 2;
  return stage == 2 ? Tri2Task{i, j, j, 1} : Tri2Task{i, j, 2, i};
}

// The state pass copies a [rows][cols] tile (a plane pair: 2 x 64 rows, or U's 64 rows) with `threads` threads in
// 16-byte pieces of `piece` elements: thread tid owns column piece * (tid % per_row) and rows tid / per_row +
// rows_per_pass * i for passes i = 0 .. rows / rows_per_pass - 1, so its row and column are fixed and each pass adds
// a compile-time offset (chunk_state.cu). Valid when threads is a multiple of per_row = cols / piece and
// rows_per_pass = threads / per_row divides rows.
struct CopyPiece {
  int row, col;
};
KDA_HOST_DEVICE constexpr int copy_rows_per_pass(int cols, int piece, int threads) { return threads / (cols / piece); }
KDA_HOST_DEVICE CopyPiece copy_piece(int tid, int pass, int cols, int piece, int threads) {
  const int per_row = cols / piece;
  return CopyPiece{tid / per_row + copy_rows_per_pass(cols, piece, threads) * pass, piece * (tid % per_row)};
}

// The state pass runs one CTA per (sequence, value head, V tile of bv columns), one CTA per SM (its shared memory,
// chunk_state.cu). Wider tiles do more work per chunk; narrower ones give more CTAs. Cost model: a CTA's chain
// time grows like (bv + 64) per chunk (the 64 stands for the W / Qg / Kd / Aqk tiles every CTA loads and the fixed
// latency of a chunk, whatever its width), and CTAs beyond one per SM run in further waves.
// wgmma64: 64-column tiles run hopper/state_wgmma.cu (state_wgmma_runs) and narrower ones the generic mma.sync
// kernel, whose 32-column chunk step takes at least as long as the wgmma kernel's 64-column one (session 19: ~564
// against ~552 us a wave at h96-fixed; session 52, kimi-8k on an H100: 64 wgmma CTAs of 64 columns took 0.12 ms less
// than 128 generic ones of 32), so both are priced at 128 there.
KDA_HOST_DEVICE int64_t tile_step_cost(int bv, bool wgmma64) { return wgmma64 ? 128 : bv + 64; }
// Returns the bv in {64, 32} (dividing V) of least waves * tile_step_cost; ties go to the wider tile.
KDA_HOST_DEVICE int choose_v_tile(int64_t chains, int V, int sms, bool wgmma64) {
  int best = 0;
  int64_t best_cost = 0;
  for (int bv = 64; bv >= 32; bv /= 2) {
    if (V % bv != 0) continue;
    const int64_t ctas = chains * (V / bv);
    const int64_t waves = sms > 0 ? (ctas + sms - 1) / sms : 1;
    const int64_t cost = waves * tile_step_cost(bv, wgmma64);
    if (best == 0 || cost < best_cost) {
      best = bv;
      best_cost = cost;
    }
  }
  return best;
}

// The state pass's launches: chains [0, first_chains) in V tiles of bv_first columns, then the rest in tiles of
// bv_rest (a second launch; chain = n HV + hv). With every chain the same length (no cu_seqlens) and 64-column tiles
// over more than one wave, the last wave's chains go in 32-column tiles where those fit one wave: in the cost model
// above, (waves - 1) 128 + 96 instead of waves 128 (h96-fixed on 132 SMs: 66 chains in 132 CTAs of 64 columns, then
// 30 chains in 120 CTAs of 32, 224 against 256, where 60 CTAs of the second wave left 72 SMs idle). Chains of
// different lengths keep one launch: the first would end with its longest chain while the block scheduler can no
// longer backfill its idle SMs. The split changes no value (each tile's sums run in the same order at any width).
struct StatePassPlan {
  int bv_first;
  int64_t first_chains;
  int bv_rest;
};
KDA_HOST_DEVICE StatePassPlan plan_state_pass(int64_t chains, int V, int sms, bool equal_chains, bool wgmma64) {
  const int bv = choose_v_tile(chains, V, sms, wgmma64);
  const StatePassPlan one{bv, chains, bv};
  if (!equal_chains || bv != 64 || V % 64 != 0 || sms < V / 64) return one;
  const int64_t per_wave = sms / (V / 64);  // chains whose 64-column tiles one wave holds
  const int64_t waves = (chains + per_wave - 1) / per_wave;
  const int64_t first = (waves - 1) * per_wave, rest = chains - first;
  if (waves < 2 || rest * (V / 32) > sms) return one;
  return StatePassPlan{64, first, 32};
}

// The forward's overlap of a partial last wave (forward_chunked.cu): with one sequence (chains = value heads)
// on the 64-column wgmma state pass, HV vtiles CTAs of one an SM fill whole waves but for the last, whose
// (HV vtiles) mod sms CTAs would run with the other SMs idle. Those heads go first instead: phase 1 of them, their
// state pass, and beside it (programmatic dependent launch) phase 1 of the other heads on the idle SMs, then the
// other heads' state pass in whole waves. Returns how many heads go first: 0 (no split) where one wave holds every
// CTA or the last wave is full. h96-fixed on 132 SMs: 192 CTAs, 60 in the last wave: 30 heads (model, session 20:
// ~2.76 -> ~2.51 ms if phase 1 filled the idle SMs perfectly).
KDA_HOST_DEVICE int64_t overlap_first_heads(int64_t n_seq, int64_t HV, int vtiles, int sms) {
  if (n_seq != 1 || vtiles <= 0 || sms <= 0) return 0;
  const int64_t ctas = HV * vtiles, last = ctas % sms;
  // Only where the last wave is whole heads (always for an even SM count and vtiles <= 2), so that the other heads'
  // CTAs are exactly whole waves.
  return ctas <= sms || last % vtiles != 0 ? 0 : last / vtiles;
}

// One CTA of a state or reverse pass launch (chunk_state.cu, chunk_reverse.cu, hopper/state_wgmma.cu,
// hopper/reverse_wgmma.cu): block `block` of a launch over the chains chain0, chain0 + 1, ... (chain = rank HV + hv)
// in V tiles of bv columns, vtiles a chain: its sequence's rank in the launch order (chain_chunks turns it into the
// sequence), value head hv, and V tile vt from column v0.
struct ChainTile {
  int64_t rank;
  int hv, vt, v0;
};
KDA_HOST_DEVICE ChainTile chain_tile(unsigned block, int vtiles, int64_t chain0, int bv, int32_t HV) {
  const int vt = static_cast<int>(block % vtiles);
  const int64_t nh = chain0 + block / vtiles;
  return ChainTile{nh / HV, static_cast<int>(nh % HV), vt, vt * bv};
}

// What a state or reverse pass CTA reads of the forward's workspace (layout wl at ws) for the sequence of launch
// rank `rank` (packed: seq_order's, longest first; fixed length: every sequence is as long, rank = n): the sequence
// n, the chunk list and its entries first .. last - 1 (seq_first), the tiles' base, and n's batch index in the
// inputs (0 when the batch is packed through cu_seqlens).
struct ChainChunks {
  const ChunkRec* list;
  const float* tiles;
  int64_t first, last, b, n;
};
KDA_HOST_DEVICE ChainChunks chain_chunks(const char* ws, const WorkspaceLayout& wl, int64_t rank, bool packed) {
  const int64_t n = packed ? reinterpret_cast<const int64_t*>(ws + wl.seq_order)[rank] : rank;
  const int64_t* const seq_first = reinterpret_cast<const int64_t*>(ws + wl.seq_first);
  return ChainChunks{reinterpret_cast<const ChunkRec*>(ws + wl.list), reinterpret_cast<const float*>(ws + wl.tiles),
                     seq_first[n], seq_first[n + 1], packed ? 0 : n, n};
}

// Chains cut into segments (docs/hopper.md "Few heads, long sequences"; chunk_segments.cu): with few chains on many
// SMs, each chain's chunks split into s near-equal ranges (by the chain's own chunk count, known on the device, so a
// packed batch needs no lengths on the host). Pass 1: segment 0 from the initial state, with its outputs, ending in
// X_1; every later segment j from a zero state, with its K x K transition M_j carried as K more state rows that start
// as the identity and take U = 0, ending in [B_j; M_j]. The combine: X_{j+1} = X_j M_j + B_j in fp32. Pass 2: the
// segments j >= 1 from X_j with their outputs, the last one ending in the final state. The CPU model of its rounding:
// scripts/models/two_phase.py --segments.
constexpr int kMaxSegments = 16;
constexpr int kMinSegmentChunks = 4;

// choose_v_tile's cost model over both passes (a CTA-chunk of bv columns or rows costs tile_step_cost, one CTA an
// SM), plus the s - 2 combine steps and the two extra launches at ~one 64-column chunk step (128) each (h4-32k on an
// H100, session 52: pass 1 ~3.1 us a chunk step, pass 2 ~4.0, the combine 45 us over 14 steps). max_chunks bounds the
// longest chain. Returns s in {1, 2, 4, 8, 16} and the tile width; s > 1 only where predicted at <= 0.8 of the
// unsplit pass (choose_v_tile's width).
struct SegmentPlan {
  int segments, bv;
};
KDA_HOST_DEVICE SegmentPlan plan_segments(int64_t chains, int64_t max_chunks, int V, int K, int sms, bool wgmma64) {
  auto waves = [&](int64_t ctas) { return sms > 0 ? (ctas + sms - 1) / sms : ctas; };
  const int bv1 = choose_v_tile(chains, V, sms, wgmma64);
  const int64_t unsplit = waves(chains * (V / bv1)) * max_chunks * tile_step_cost(bv1, wgmma64);
  SegmentPlan best{1, bv1};
  int64_t best_cost = unsplit;
  for (int s = 2; s <= kMaxSegments && max_chunks >= int64_t{s} * kMinSegmentChunks; s *= 2) {
    for (int bv = 64; bv >= 32; bv /= 2) {
      if (V % bv != 0 || K % bv != 0) continue;
      const int64_t pass1 = waves(chains * (V / bv + int64_t{s - 1} * ((V + K) / bv)));
      const int64_t pass2 = waves(chains * int64_t{s - 1} * (V / bv));
      const int64_t cost =
          (pass1 + pass2) * ((max_chunks + s - 1) / s) * tile_step_cost(bv, wgmma64) + int64_t{s} * 128;
      if (5 * cost <= 4 * unsplit && cost < best_cost) {
        best = SegmentPlan{s, bv};
        best_cost = cost;
      }
    }
  }
  return best;
}

// A segmented pass's CTAs over the chains chain0 ..: per chain, pass 1 runs segment 0's V / bv tiles, then s - 1
// segments of (V + K) / bv tiles (rows v0 >= V: the transition's), pass 2 s - 1 segments of V / bv tiles.
KDA_HOST_DEVICE int64_t segment_pass_ctas(int pass, int s, int bv, int V, int K) {
  return pass == 1 ? V / bv + int64_t{s - 1} * ((V + K) / bv) : int64_t{s - 1} * (V / bv);
}
struct SegTile {
  int64_t chain, rank;  // chain: its index in the launch (chain0 + ..), rank as chain_tile's
  int hv, seg, v0;      // v0: the tile's first state row, >= V for the transition's rows
};
KDA_HOST_DEVICE SegTile seg_tile(unsigned block, int pass, int s, int bv, int V, int K, int64_t chain0, int32_t HV) {
  const int64_t per = segment_pass_ctas(pass, s, bv, V, K);
  const int64_t nh = chain0 + block / per;
  int64_t r = block % per;
  int seg = 0;
  if (pass == 1 && r < V / bv) {
    seg = 0;
  } else {
    if (pass == 1) r -= V / bv;
    const int tiles = pass == 1 ? (V + K) / bv : V / bv;
    seg = 1 + static_cast<int>(r / tiles);
    r %= tiles;
  }
  return SegTile{nh, nh / HV, static_cast<int>(nh % HV), seg, static_cast<int>(r) * bv};
}
// Segment seg's chunks [*begin, *end) of a chain whose chunks are [first, last) (empty where the chain is short).
KDA_HOST_DEVICE void segment_chunks(int64_t first, int64_t last, int seg, int s, int64_t* begin, int64_t* end) {
  *begin = first + (last - first) * seg / s;
  *end = first + (last - first) * (seg + 1) / s;
}
// The segments' fp32 regions after the forward's workspace (base = workspace_layout(..).bytes): ends [chain][s - 1]
// [V + K][K] (segment j's B_j rows, then its M_j rows, at j - 1) and starts [chain][s - 1][V][K] (X_j at j - 1).
struct SegmentLayout {
  int64_t ends, starts, bytes;
};
KDA_HOST_DEVICE SegmentLayout segment_layout(int64_t base, int64_t chains, int s, int K, int V) {
  SegmentLayout l;
  l.ends = align256(base);
  l.starts = l.ends + align256(chains * (s - 1) * (V + K) * int64_t{K} * int64_t{sizeof(float)});
  l.bytes = l.starts + chains * (s - 1) * int64_t{V} * K * int64_t{sizeof(float)};
  return l;
}
// Element offsets of X_j (j >= 1) in starts and of segment j's [B_j; M_j] (j >= 1) in ends.
KDA_HOST_DEVICE int64_t segment_start_at(int64_t chain, int j, int s, int V, int K) {
  return (chain * (s - 1) + j - 1) * int64_t{V} * K;
}
KDA_HOST_DEVICE int64_t segment_end_at(int64_t chain, int j, int s, int V, int K) {
  return (chain * (s - 1) + j - 1) * int64_t{V + K} * K;
}
// What one CTA of a segmented pass (tile t) starts from, writes and ends in.
struct SegmentRole {
  enum Start { kInitial, kZero, kIdentity, kHandOff } start;  // kInitial: initial_state (or zeros)
  int64_t start_at;    // kHandOff: X_seg's offset in starts
  enum End { kNone, kFinal, kStarts, kEnds } end;
  int64_t end_at;      // kStarts: X_1's offset; kEnds: [B_seg; M_seg]'s offset
  bool outputs;        // writes its tokens' outputs
  bool transition;     // rows v0 >= V: M's, with U = 0
};
KDA_HOST_DEVICE SegmentRole segment_role(const SegTile& t, int pass, int s, int V, int K) {
  SegmentRole r{SegmentRole::kInitial, 0, SegmentRole::kNone, 0, true, t.v0 >= V};
  if (pass == 2) {
    r.start = SegmentRole::kHandOff;
    r.start_at = segment_start_at(t.chain, t.seg, s, V, K);
    r.end = t.seg == s - 1 ? SegmentRole::kFinal : SegmentRole::kNone;
  } else if (t.seg == 0) {
    r.end = SegmentRole::kStarts;
    r.end_at = segment_start_at(t.chain, 1, s, V, K);
  } else {
    r.start = r.transition ? SegmentRole::kIdentity : SegmentRole::kZero;
    r.end = SegmentRole::kEnds;
    r.end_at = segment_end_at(t.chain, t.seg, s, V, K);
    r.outputs = false;
  }
  return r;
}

// The chunked backward's workspace (backward_chunked.cu): the forward's workspace_layout (chunk list and phase-1
// tiles, recomputed by the backward's first launches) followed by, each region 256-byte aligned, fp32 unless named
// (planes: bf16 [2][...], the hi plane then the lo plane of the fp32 values, split as the bf16x3 products split
// their operands: the products kernel, their one reader, takes them to ldmatrix as they are):
//   akk     [cap][HV][C][C]   A' = strictly_lower(K K^T . D), not scaled by beta (phase 1)
//   tinv    planes [cap][HV][2][C][C]   T = (I + diag(beta) A')^-1, zeros above the diagonal (phase 1)
//   norms   [cap][HV][2][C]   1 / |q| and 1 / |k| of each row, as phase 1 normalized it (with use_qk_l2norm)
//   tame    int [cap][HV]     1 where every token of the chunk decays by at most 2^-kTameBits in every channel
//                             (chunk_kernels.h; phase 1, which holds every channel of a row)
//   starts  planes [cap][HV][2][V][K]   the state at each chunk's start, value-first (the forward's state pass)
//   vnew    planes [cap][HV][2][C][V]   V_new = U - W S0^T (the forward's state pass)
//   du      planes [cap][HV][2][C][V]   -dV_new (the reverse state pass, chunk_reverse.cu)
//   dsend   planes [cap][HV][2][V][K]   the gradient of the state at each chunk's end (the reverse state pass)
//   dqk     [2][B T][HV][K]   gradients of q_hat and k_hat per value head (the gradient pass, chunk_grad.cu), for
//                             finalize_qk_kernel to sum over each group; empty for groups of one value head
//   gate    double [cap][HV][K + 1]   per-chunk partial sums of ddt_bias (K) and dA_log (1)
//   prod    [cap][HV][ProdLayout]     the gradient pass's products per (chunk, value head) (chunk_products.cu)
//   scratch [grad_ctas][kGradScratch][C][max(K, V)]   the per-channel gradient pass's per-CTA intermediates
//   pipe    int64 ticket counter, then int [cap][HV] products-done flags: the gradient pipe's (chunk_grad_pipe.cu),
//           zeroed before each of its launches
// Rows of a chunk past its length are zeros in every per-chunk tile, as in the forward's.
constexpr int kGradCtas = 256;    // the per-channel gradient pass's grid cap (its per-CTA scratch is sized by it)
constexpr int kGradScratch = 2;  // [C][max(K, V)] arrays per gradient-pass CTA: the pair terms, dbeta's third term

// One (chunk, value head)'s products (float offsets; chunk_products.cu writes them, chunk_grad.cu reads them):
//   dM [C][C] = lower(dO' V_new^T), dA [C][C] = -strictly_lower(dBV U0^T + dBK W^T), QS [C][K] = dO' S0,
//   KD [C][K] = V_new dS_end, BK [C][K] = T^T dW, BV [C][V] = T^T dU, CS [K] = colsum(S0 . dS_end); then what
//   chunk_grad_tc.cu adds: TBrow [K / 32][C], rowsum(BK . K . E) per 32 channels (read by chunk_grad_rows.cu), and
//   Tame, the chunk's flag (int: 1 where that pass replaced QS, BK, KD by dq_hat, dk_hat, d g_log; chunk_grad.cu skips
//   those); padded to 64 floats so every tile starts 256-byte aligned.
struct ProdLayout {
  int K, V;
  KDA_HOST_DEVICE int64_t dM() const { return 0; }
  KDA_HOST_DEVICE int64_t dA() const { return int64_t{kChunk} * kChunk; }
  KDA_HOST_DEVICE int64_t QS() const { return 2 * int64_t{kChunk} * kChunk; }
  KDA_HOST_DEVICE int64_t KD() const { return QS() + int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t BK() const { return KD() + int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t BV() const { return BK() + int64_t{kChunk} * K; }
  KDA_HOST_DEVICE int64_t CS() const { return BV() + int64_t{kChunk} * V; }
  KDA_HOST_DEVICE int64_t TBrow() const { return CS() + K; }
  KDA_HOST_DEVICE int64_t Tame() const { return TBrow() + int64_t{K / 32} * kChunk; }
  KDA_HOST_DEVICE int64_t floats() const { return (Tame() + 1 + 63) / 64 * 64; }
};

struct BackwardLayout {
  WorkspaceLayout fwd;
  int64_t akk, tinv, norms, tame, starts, vnew, du, dsend, dqk, gate, prod, scratch, pipe, bytes;
  int64_t grad_ctas;
};
KDA_HOST_DEVICE int64_t grad_ctas_for(int64_t cap, int64_t hv) {
  const int64_t tasks = cap * hv;
  return tasks < kGradCtas ? (tasks > 0 ? tasks : 1) : kGradCtas;
}
// The gradient pass's launch grid: the layout's CTAs (its scratch slots), capped at what the device holds at once
// (sms x resident CTAs per SM), so the persistent grid is one wave. With 256 CTAs at one per SM on 132 SMs the last
// 124 waited for the first 132 to finish all their 32 tasks each: 64 task times per SM where 63 suffice.
KDA_HOST_DEVICE int64_t grad_grid(int64_t grad_ctas, int sms, int per_sm) {
  const int64_t resident = int64_t{sms > 0 ? sms : 1} * (per_sm > 0 ? per_sm : 1);
  return grad_ctas < resident ? grad_ctas : resident;
}
// The gradient pipe's region (BackwardLayout pipe): the ticket counter and a flag a task.
KDA_HOST_DEVICE int64_t grad_pipe_bytes(int64_t tasks) { return 8 + 4 * tasks; }
// group: value heads per q/k head; with one, the gradient pass writes dq / dk itself and dqk takes no bytes.
KDA_HOST_DEVICE BackwardLayout backward_layout(int64_t B, int64_t T, int64_t n_seq, int64_t hv, int64_t K, int64_t V,
                                               int64_t group) {
  BackwardLayout l;
  l.fwd = workspace_layout(B * T, n_seq, hv, K, V);
  const int64_t per = l.fwd.cap * hv * int64_t{sizeof(float)};
  const int64_t C = kChunk;
  l.akk = align256(l.fwd.bytes);
  l.tinv = l.akk + align256(per * C * C);
  l.norms = l.tinv + align256(per * C * C);
  l.tame = l.norms + align256(per * 2 * C);
  l.starts = l.tame + align256(per);
  l.vnew = l.starts + align256(per * V * K);
  l.du = l.vnew + align256(per * C * V);
  l.dsend = l.du + align256(per * C * V);
  l.dqk = l.dsend + align256(per * V * K);
  l.gate = l.dqk + (group > 1 ? align256(2 * B * T * hv * K * int64_t{sizeof(float)}) : 0);
  l.prod = l.gate + align256(l.fwd.cap * hv * (K + 1) * int64_t{sizeof(double)});
  l.scratch = l.prod + align256(per * ProdLayout{static_cast<int>(K), static_cast<int>(V)}.floats());
  l.grad_ctas = grad_ctas_for(l.fwd.cap, hv);
  const int64_t width = K > V ? K : V;
  l.pipe = l.scratch + align256(l.grad_ctas * kGradScratch * C * width * int64_t{sizeof(float)});
  l.bytes = l.pipe + align256(grad_pipe_bytes(l.fwd.cap * hv));
  return l;
}

// The gradient pipe (chunk_grad_pipe.cu): one launch of 2-CTA clusters, a ticket each, taken from a counter as the
// cluster starts; a ticket is one job: a pair of tasks' products (one task a CTA), or one task's tensor-core stage
// (its two 64-channel halves), which waits for its task's products-done flag. The order: `lead` products pairs first,
// then units of three tickets (products pair lead + u, stages 2u and 2u + 1), then the stages left. Every job runs
// once, and a stage's products are ticketed before it, so a cluster that waits on a flag waits on a job a running
// cluster holds (no deadlock, whatever the residency).
struct GradPipePlan {
  enum Kind { kProducts = 0, kStage = 1, kNone = 2 };
  struct Job {
    Kind kind;
    int64_t index;  // the products pair (tasks 2 index, 2 index + 1) or the stage's task
  };
  int64_t tasks = 0, pairs = 0, lead = 0;
  KDA_HOST_DEVICE int64_t tickets() const { return pairs + tasks; }
  KDA_HOST_DEVICE Job job(int64_t t) const {
    if (t < lead) return {kProducts, t};
    const int64_t units = pairs - lead, u = (t - lead) / 3, r = (t - lead) % 3;
    int64_t stage;
    if (u < units) {
      if (r == 0) return {kProducts, lead + u};
      stage = 2 * u + r - 1;
    } else {
      stage = 2 * units + (t - lead - 3 * units);
    }
    return stage < tasks ? Job{kStage, stage} : Job{kNone, 0};
  }
};
// clusters: how many clusters the device holds at once; lead = as many pairs, at least one. Between a task's products
// and its stage then run ~3 lead tickets: at train-h64-fixed on an H100 (132 clusters; a task's products ~53 us, its
// stage ~19 us, from the two kernels' times) ~90 us, so a stage seldom waits on its flag; half the lead gives ~45 us,
// under the products' own time.
KDA_HOST_DEVICE GradPipePlan grad_pipe_plan(int64_t tasks, int64_t clusters) {
  GradPipePlan g;
  g.tasks = tasks > 0 ? tasks : 0;
  g.pairs = (g.tasks + 1) / 2;
  const int64_t lead = clusters > 1 ? clusters : 1;
  g.lead = lead < g.pairs ? lead : g.pairs;
  return g;
}

}  // namespace kda::cuda
