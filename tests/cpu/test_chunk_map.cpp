// test_chunk_map.cpp: the two-phase CUDA forward's work plan (src/cuda/generic/chunk_map.h) on the CPU: the chunk
// list built from random packed layouts covers every token exactly once, in order, never crossing a sequence end;
// the capacity bound holds; malformed device cu_seqlens stay in bounds; the V-tile choice and the workspace layouts
// of the chunked forward and backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/generic/chunk_map.h"

namespace kda::cuda {
namespace {

// Builds the list for cu (B = 1) or for B rows of T tokens, and checks it against the sequences.
// Malformed offsets (cover = false) may leave the last sequences short of chunks: only the bounds are checked.
void check_layout(bool has_cu, const std::vector<int64_t>& cu, int64_t B, int64_t T, bool cover = true) {
  const int64_t N = has_cu ? static_cast<int64_t>(cu.size()) - 1 : B;
  const int64_t t_total = has_cu ? T : B * T;
  std::vector<SeqSpan> spans(N);
  for (int64_t n = 0; n < N; ++n) spans[n] = sequence_span(has_cu, has_cu ? cu[n] : 0, has_cu ? cu[n + 1] : 0, n, T);
  const int64_t cap = chunk_capacity(t_total, N);
  std::vector<ChunkRec> list(cap + 1, ChunkRec{-1, -1, -1});  // one guard entry past the capacity
  std::vector<int64_t> first(N + 1, -1);
  const int64_t count = build_chunk_map_host(spans.data(), N, cap, list.data(), first.data());
  ASSERT_LE(count, cap);
  EXPECT_EQ(list[cap].seq, -1) << "written past the capacity";
  EXPECT_EQ(first[0], 0);
  for (int64_t n = 0; n < N; ++n) {
    ASSERT_LE(first[n], first[n + 1]);
    // Every token of the sequence exactly once, in order, in chunks of 1..64 that stay inside the sequence.
    int64_t next = spans[n].start;
    for (int64_t i = first[n]; i < first[n + 1]; ++i) {
      const ChunkRec& c = list[i];
      EXPECT_EQ(c.seq, n);
      EXPECT_EQ(c.start, next);
      EXPECT_GE(c.len, 1);
      EXPECT_LE(c.len, kChunk);
      EXPECT_LE(c.start + c.len, spans[n].start + spans[n].len) << "chunk crosses the end of sequence " << n;
      // Only the last chunk of a sequence is short.
      if (i + 1 < first[n + 1]) {
        EXPECT_EQ(c.len, kChunk);
      }
      next = c.start + c.len;
    }
    if (cover) {
      EXPECT_EQ(next, spans[n].start + spans[n].len) << "sequence " << n << " not covered";
    }
  }
  EXPECT_EQ(count, first[N]);
}

TEST(ChunkMap, RandomPackedLayoutsCoverEveryTokenOnce) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 500; ++trial) {
    const int n_seq = 1 + static_cast<int>(rng() % 40);
    std::vector<int64_t> cu{0};
    for (int i = 0; i < n_seq; ++i) {
      // Mix of empty, length-1, around-64 and long sequences.
      const int kind = static_cast<int>(rng() % 5);
      const int64_t len = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? 62 + static_cast<int64_t>(rng() % 5)
                                                                      : static_cast<int64_t>(rng() % 700);
      cu.push_back(cu.back() + len);
    }
    check_layout(true, cu, 1, cu.back());
  }
}

TEST(ChunkMap, FixedLengthBatches) {
  for (int64_t T : {0, 1, 63, 64, 65, 150, 8192})
    for (int64_t B : {1, 2, 7}) check_layout(false, {}, B, T);
}

TEST(ChunkMap, CapacityIsTightForFullChunksPlusOnePartialPerSequence) {
  // 8192 tokens in one sequence: 128 chunks; capacity 129.
  EXPECT_EQ(chunk_capacity(8192, 1), 129);
  // Every sequence of length 65: two chunks each, within floor(65 N / 64) + N.
  std::vector<int64_t> cu{0};
  for (int i = 0; i < 64; ++i) cu.push_back(cu.back() + 65);
  check_layout(true, cu, 1, cu.back());
}

TEST(ChunkMap, MalformedDeviceOffsetsStayInBounds) {
  // Decreasing offsets: the clamped spans overlap and their lengths sum past T; the list is capped.
  check_layout(true, {0, 500, 100, 500, 0, 500}, 1, 500, false);
  check_layout(true, {-5, 1000, 3, 2000}, 1, 640, false);
  check_layout(true, {700, 10, 0}, 1, 640, false);
}

TEST(ChunkMap, VTileFillsTheGpu) {
  // h64-fixed on 132 SMs: 64 chains of V = 128 -> 64-column tiles (128 CTAs, one wave).
  EXPECT_EQ(choose_v_tile(64, 128, 132, false), 64);
  // h96-fixed: 192 CTAs of 64 columns (two waves, cost 256) against 384 of 32 (three waves, 288).
  EXPECT_EQ(choose_v_tile(96, 128, 132, false), 64);
  // A single chain: 32-column tiles give 4 CTAs in one wave, cheaper per chunk.
  EXPECT_EQ(choose_v_tile(1, 128, 132, false), 32);
  // 100 chains of V = 64 on 132 SMs: 64 columns (100 CTAs) against 200 CTAs of 32 in two waves.
  EXPECT_EQ(choose_v_tile(100, 64, 132, false), 64);
  EXPECT_EQ(choose_v_tile(10, 64, 132, false), 32);
}

// The sm_90a passes' TMA rows (tile_rows) against TileLayout's float offsets: every plane pair starts exactly on its
// map's row (no truncation), for value widths the kernels take and for tiles far into the workspace.
TEST(ChunkMap, TmaRowsAreTheTilesPlanes) {
  for (int64_t V : {64, 128, 192, 256, 512}) {
    SCOPED_TRACE(V);
    const TileLayout tl{128, V};
    const TileRows r = tile_rows(V);
    EXPECT_EQ(int64_t{r.per_tile} * 256, tl.floats() * 4);
    for (int64_t ti : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{123457}}) {
      const int64_t tile = ti * tl.floats() * 4;  // byte offset of tile ti from the first
      EXPECT_EQ((ti * r.per_tile + r.w) * 256, tile + tl.W() * 4);
      EXPECT_EQ((ti * r.per_tile + r.qg) * 256, tile + tl.Qg() * 4);
      EXPECT_EQ((ti * r.per_tile + r.kd) * 256, tile + tl.Kd() * 4);
      EXPECT_EQ((2 * ti * r.per_tile + r.aqk) * 128, tile + tl.Aqk() * 4);
    }
    // Each pair is 64 rows of hi then 64 of lo; the next plane starts after them.
    EXPECT_EQ(r.qg - r.w, 2 * kChunk);
    EXPECT_EQ(r.kd - r.qg, 2 * kChunk);
    EXPECT_LE(2 * r.kd + 4 * kChunk, r.aqk);
  }
}

// The prepare kernel's staged [W | U]: the row copies take every staged element to the tile offset store_split2 /
// the fp32 stores gave it (W plane p at p kChunk K elements), each tile byte written once, all offsets and lengths
// 16-byte multiples, rows inside their pitch; and the accumulator writes (m16n8 C fragments: rows 16 m + grp,
// columns 16 g + 8 nt + 2 tig) are free of bank conflicts at the kernel's pitches: 4-byte W pairs, a warp's 32
// lanes on 32 banks; 8-byte U pairs, each half warp on 32 distinct banks.
TEST(ChunkMap, StagedWuRowsLandWhereTheStoresDid) {
  for (int K : {64, 128})
    for (int V : {64, 128}) {
      SCOPED_TRACE(testing::Message() << "K=" << K << " V=" << V);
      const int wpitch = kChunk + 4, upitch = V + 8;  // chunk_prepare.cu's PA (A_qk and T buffers), PV (beta v)
      // Tag every staged element with its tile offset, copy the rows, compare.
      std::vector<int> wstage(2 * kChunk * wpitch * 2, -1), ustage(kChunk * upitch, -1);
      for (int p = 0; p < 2; ++p)
        for (int r = 0; r < kChunk; ++r)
          for (int c = 0; c < K; ++c) {
            const int o = wu_stage_w(p, r, c, wpitch);
            ASSERT_EQ(o % 2, 0);
            wstage[o / 2] = p * kChunk * K + r * K + c;
          }
      for (int r = 0; r < kChunk; ++r)
        for (int c = 0; c < V; ++c) ustage[wu_stage_u(r, c, upitch) / 4] = r * V + c;
      std::vector<int> wtile(2 * kChunk * K, -1), utile(kChunk * V, -1);
      for (int i = 0; i < 3 * kChunk; ++i) {
        const WuRowCopy rc = wu_row_copy(i, K, V, wpitch, upitch);
        EXPECT_EQ(rc.to_u, i >= 2 * kChunk);
        EXPECT_EQ(rc.src % 16, 0);
        EXPECT_EQ(rc.dst % 16, 0);
        EXPECT_EQ(rc.bytes % 16, 0);
        const int es = rc.to_u ? 4 : 2;
        std::vector<int>& src = rc.to_u ? ustage : wstage;
        std::vector<int>& dst = rc.to_u ? utile : wtile;
        ASSERT_LE((rc.src + rc.bytes) / es, static_cast<int>(src.size()));
        ASSERT_LE((rc.dst + rc.bytes) / es, static_cast<int>(dst.size()));
        EXPECT_LE(rc.bytes, (rc.to_u ? upitch : wpitch) * 4);
        for (int b = 0; b < rc.bytes / es; ++b) {
          EXPECT_EQ(dst[rc.dst / es + b], -1) << "tile element written twice";
          dst[rc.dst / es + b] = src[rc.src / es + b];
        }
      }
      for (int e = 0; e < static_cast<int>(wtile.size()); ++e) ASSERT_EQ(wtile[e], e);
      for (int e = 0; e < static_cast<int>(utile.size()); ++e) ASSERT_EQ(utile[e], e);
      // Bank conflicts of the fragment writes.
      for (int m = 0; m < kChunk / 16; ++m)
        for (int nt = 0; nt < 2; ++nt) {
          for (int g = 0; g < K / 16; ++g)
            for (int p = 0; p < 2; ++p) {
              std::set<int> banks;
              for (int lane = 0; lane < 32; ++lane)
                banks.insert(wu_stage_w(p, 16 * m + lane / 4, 16 * g + 8 * nt + 2 * (lane % 4), wpitch) / 4 % 32);
              EXPECT_EQ(banks.size(), 32u) << "W m=" << m << " g=" << g;
            }
          for (int g = 0; g < V / 16; ++g)
            for (int hw = 0; hw < 2; ++hw) {
              std::set<int> banks;
              for (int lane = 16 * hw; lane < 16 * hw + 16; ++lane) {
                const int w = wu_stage_u(16 * m + lane / 4, 16 * g + 8 * nt + 2 * (lane % 4), upitch) / 4;
                banks.insert(w % 32);
                banks.insert((w + 1) % 32);
              }
              EXPECT_EQ(banks.size(), 32u) << "U m=" << m << " g=" << g;
            }
        }
    }
}

// The overlap of a partial last wave: the heads that go first are exactly the last wave's, so the other heads' state
// pass is whole waves; no split for several sequences, for one wave, for a full last wave, or for a last wave that
// is not whole heads.
TEST(ChunkMap, OverlapTakesTheLastWavesHeadsFirst) {
  EXPECT_EQ(overlap_first_heads(1, 96, 2, 132), 30);   // h96-fixed: 192 CTAs, 60 in the last wave
  EXPECT_EQ(overlap_first_heads(1, 64, 2, 132), 0);    // h64-fixed: 128 CTAs, one wave
  EXPECT_EQ(overlap_first_heads(1, 66, 2, 132), 0);    // exactly one wave
  EXPECT_EQ(overlap_first_heads(1, 132, 2, 132), 0);   // two full waves
  EXPECT_EQ(overlap_first_heads(2, 96, 2, 132), 0);    // two sequences: chains are not heads
  EXPECT_EQ(overlap_first_heads(1, 96, 1, 132), 0);    // V = 64: 96 CTAs
  EXPECT_EQ(overlap_first_heads(1, 96, 2, 0), 0);
  EXPECT_EQ(overlap_first_heads(1, 40, 4, 131), 0);    // 160 CTAs, 29 in the last wave: not whole heads
  EXPECT_EQ(overlap_first_heads(1, 40, 4, 132), 7);    // 28 in the last wave
  for (int64_t HV = 1; HV <= 400; ++HV)
    for (int vt : {1, 2, 4}) {
      const int64_t f = overlap_first_heads(1, HV, vt, 132);
      ASSERT_GE(f, 0);
      ASSERT_LT(f * vt, 132);  // the first group fits one wave beside the others' phase 1
      if (f > 0) {
        ASSERT_LT(f, HV);
        EXPECT_EQ((HV - f) * vt % 132, 0) << HV;  // the rest is whole waves
      }
    }
}

TEST(ChunkMap, StatePassPlanSplitsTheLastWave) {
  // h96-fixed on 132 SMs: 66 chains in 64-column tiles fill one wave (132 CTAs); the other 30 in 32-column tiles
  // (120 CTAs) fill the second, which 64-column tiles would leave at 60 CTAs.
  StatePassPlan p = plan_state_pass(96, 128, 132, true, false);
  EXPECT_EQ(p.bv_first, 64);
  EXPECT_EQ(p.first_chains, 66);
  EXPECT_EQ(p.bv_rest, 32);
  // Packed sequences of different lengths keep one launch.
  p = plan_state_pass(96, 128, 132, false, false);
  EXPECT_EQ(p.first_chains, 96);
  EXPECT_EQ(p.bv_first, 64);
  // h64-fixed: one wave of 64-column tiles already.
  p = plan_state_pass(64, 128, 132, true, false);
  EXPECT_EQ(p.first_chains, 64);
  EXPECT_EQ(p.bv_first, 64);
  // 120 chains: 66 + 54, and 54 x 4 = 216 CTAs of 32 columns would not fit one wave: one launch.
  p = plan_state_pass(120, 128, 132, true, false);
  EXPECT_EQ(p.first_chains, 120);
  // V = 64 (one 64-column tile a chain): 200 chains = 132 + 68, the 68 in 136 CTAs of 32 > 132: one launch; 160
  // chains = 132 + 28 in 56 CTAs: split.
  EXPECT_EQ(plan_state_pass(200, 64, 132, true, false).first_chains, 200);
  p = plan_state_pass(160, 64, 132, true, false);
  EXPECT_EQ(p.first_chains, 132);
  EXPECT_EQ(p.bv_rest, 32);
  // 32-column tiles chosen outright (a single chain): one launch.
  p = plan_state_pass(1, 128, 132, true, false);
  EXPECT_EQ(p.bv_first, 32);
  EXPECT_EQ(p.first_chains, 1);
  // Every split covers every chain once: first + rest = chains, and each part within its waves.
  for (int64_t chains = 1; chains <= 600; ++chains)
    for (int V : {64, 128})
      for (int sms : {1, 2, 78, 108, 132}) {
        const StatePassPlan q = plan_state_pass(chains, V, sms, true, false);
        ASSERT_GE(q.first_chains, 0);
        ASSERT_LE(q.first_chains, chains);
        if (q.first_chains < chains) {
          ASSERT_EQ(q.first_chains * (V / q.bv_first) % sms, 0) << "the first launch fills whole waves";
          ASSERT_LE((chains - q.first_chains) * (V / q.bv_rest), sms) << "the rest fits one wave";
        }
      }
}

// The two launches of a plan name every (sequence, value head, V tile) once: the blocks of the first cover chains
// 0 .. first_chains - 1, the second's start at chain first_chains.
// The segment plan (docs/hopper.md "Few heads, long sequences"): the standard workloads (64-96 chains of 128 chunks
// on 132 SMs, or more chains) keep the unsplit pass; few chains of many chunks split, by the plan's own cost model
// at <= 0.8 of the unsplit; chains too short for two 4-chunk segments never do.
TEST(ChunkMap, SegmentPlanSplitsOnlyFewLongChains) {
  for (int64_t chains : {64, 96, 384, 512, 576})
    EXPECT_EQ(plan_segments(chains, 128, 128, 128, 132, false).segments, 1);
  const SegmentPlan tp8 = plan_segments(4, 512, 128, 128, 132, false);  // h4-32k
  EXPECT_GT(tp8.segments, 1);
  EXPECT_EQ(plan_segments(1, 64, 128, 128, 132, false).segments > 1, true);
  EXPECT_EQ(plan_segments(1, 7, 128, 128, 132, false).segments, 1);
  for (int64_t chains = 1; chains <= 600; chains += 7)
    for (int64_t chunks : {1, 8, 33, 128, 512, 2048})
      for (int kv : {64, 128})
        for (bool wgmma64 : {false, kv == 128}) {
          const SegmentPlan sp = plan_segments(chains, chunks, kv, kv, 132, wgmma64);
          ASSERT_TRUE(sp.segments >= 1 && sp.segments <= kMaxSegments && (sp.segments & (sp.segments - 1)) == 0);
          ASSERT_TRUE(sp.segments == 1 || chunks >= int64_t{sp.segments} * kMinSegmentChunks);
          ASSERT_EQ(kv % sp.bv, 0);
          // On wgmma a 32-column tile (the generic kernel) costs a 64-column one's step for half its rows: never
          // chosen for segments, whose wgmma instance takes 64-row tiles.
          if (wgmma64 && sp.segments > 1) {
            ASSERT_EQ(sp.bv, 64) << chains << " " << chunks;
          }
        }
}

// Where 64-column tiles run the wgmma kernel and narrower ones the generic kernel, a 32-column chunk step is priced
// as a 64-column one (chunk_map.h tile_step_cost): 32 chains (H = 32, kimi-32k) keep 64 columns in one wave; 16
// chains of 512 chunks (H = 16 at 32k tokens: 32 wgmma CTAs on 132 SMs) split in 4 (pass 1 224 CTAs in two waves,
// pass 2 96 in one: 3 x 128 chunk steps against 512 unsplit), where the one-family model kept them whole (its
// unsplit 64 CTAs of 32 columns at 96 a step); h4-32k's plan is the same under both; the standard workloads never
// split.
TEST(ChunkMap, WgmmaPricingOfTiles) {
  EXPECT_EQ(choose_v_tile(32, 128, 132, true), 64);
  EXPECT_EQ(choose_v_tile(32, 128, 132, false), 32);
  EXPECT_EQ(choose_v_tile(96, 128, 132, true), 64);
  EXPECT_EQ(plan_state_pass(32, 128, 132, false, true).bv_first, 64);
  const SegmentPlan h16 = plan_segments(16, 512, 128, 128, 132, true);
  EXPECT_EQ(h16.segments, 4);
  EXPECT_EQ(h16.bv, 64);
  EXPECT_EQ(plan_segments(16, 512, 128, 128, 132, false).segments, 1);
  EXPECT_EQ(plan_segments(32, 512, 128, 128, 132, true).segments, 1);
  for (bool wgmma64 : {false, true}) {
    const SegmentPlan h4 = plan_segments(4, 512, 128, 128, 132, wgmma64);
    EXPECT_EQ(h4.segments, 16);
    EXPECT_EQ(h4.bv, 64);
    for (int64_t chains : {64, 96, 384, 512, 576})
      EXPECT_EQ(plan_segments(chains, 128, 128, 128, 132, wgmma64).segments, 1);
  }
}

// Every (chain, segment, tile of rows) of a segmented pass is one CTA: pass 1 runs segment 0's value rows and every
// later segment's value and transition rows, pass 2 the later segments' value rows; and segment_chunks cuts a chain's
// chunks into s consecutive ranges that cover it once (empty ones where the chain is short).
TEST(ChunkMap, SegmentTilesCoverEveryTileOnce) {
  for (int K : {64, 128})
    for (int V : {64, 128})
      for (int bv : {32, 64})
        for (int s : {2, 4, 16})
          for (int pass : {1, 2}) {
            const int64_t chains = 5, chain0 = 3;
            const int32_t HV = 2;
            std::set<std::tuple<int64_t, int, int>> seen;
            const int64_t per = segment_pass_ctas(pass, s, bv, V, K);
            for (unsigned b = 0; b < chains * per; ++b) {
              const SegTile t = seg_tile(b, pass, s, bv, V, K, chain0, HV);
              ASSERT_EQ(t.rank, t.chain / HV);
              ASSERT_EQ(t.hv, t.chain % HV);
              ASSERT_TRUE(t.chain >= chain0 && t.chain < chain0 + chains);
              ASSERT_TRUE(pass == 1 ? t.seg >= 0 : t.seg >= 1);
              ASSERT_LT(t.seg, s);
              ASSERT_EQ(t.v0 % bv, 0);
              ASSERT_LT(t.v0, pass == 2 || t.seg == 0 ? V : V + K);
              ASSERT_TRUE(seen.insert({t.chain, t.seg, t.v0}).second) << "tile twice";
            }
            const int64_t expect = chains * (pass == 1 ? V / bv + (s - 1) * ((V + K) / bv) : (s - 1) * (V / bv));
            EXPECT_EQ(static_cast<int64_t>(seen.size()), expect);
          }
  for (int64_t len = 0; len <= 40; ++len)
    for (int s : {2, 4, 16}) {
      int64_t at = 7;
      for (int seg = 0; seg < s; ++seg) {
        int64_t b = 0, e = 0;
        segment_chunks(7, 7 + len, seg, s, &b, &e);
        ASSERT_EQ(b, at);
        ASSERT_LE(b, e);
        at = e;
      }
      ASSERT_EQ(at, 7 + len);
    }
}

// The segmented state pass end to end on the host, in float64 with tiny tiles (C = 3 tokens, K = V = 4 in 2-row
// tiles): every CTA of pass 1 and pass 2 as seg_tile / segment_role / segment_chunks say (its rows of the state or
// of the transition, from its start, through its chunks, to its end at the role's offsets), the combine as
// chunk_segments.cu runs it (X_{j+1} = X_j M_j + B_j at segment_start_at / segment_end_at), against each chain walked
// whole: the same outputs and final states to rounding. Chains of 0, 1, 2 and 9 chunks at s = 4 (empty segments).
TEST(ChunkMap, SegmentedPassesEqualTheWholeChain) {
  constexpr int C = 3, K = 4, V = 4, bv = 2, s = 4;
  const std::vector<int> lengths = {0, 1, 9, 2};  // chunks of each chain
  const int64_t chains = static_cast<int64_t>(lengths.size());
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0.0, 0.5);
  std::uniform_real_distribution<double> ud(0.3, 1.0);
  struct Tile {
    std::array<std::array<double, K>, C> W, Qg, Kd;
    std::array<std::array<double, V>, C> U;
    std::array<std::array<double, C>, C> A;  // A_qk, lower triangular
    std::array<double, K> dec;
  };
  std::vector<std::vector<Tile>> tiles(chains);
  std::vector<std::array<std::array<double, K>, V>> h0(chains);
  for (int64_t c = 0; c < chains; ++c) {
    for (auto& row : h0[c])
      for (double& x : row) x = nd(rng);
    tiles[c].resize(lengths[c]);
    for (Tile& t : tiles[c]) {
      for (int r = 0; r < C; ++r) {
        for (int d = 0; d < K; ++d) t.W[r][d] = nd(rng), t.Qg[r][d] = nd(rng), t.Kd[r][d] = nd(rng);
        for (int v = 0; v < V; ++v) t.U[r][v] = nd(rng);
        for (int q = 0; q < C; ++q) t.A[r][q] = q <= r ? nd(rng) : 0.0;
      }
      for (double& x : t.dec) x = ud(rng);
    }
  }
  // One chunk on rows [v0, v0 + n) of a state whose row v (of V + K) is S[v]; outputs into o[chunk][token][v].
  using Rows = std::vector<std::array<double, K>>;
  auto advance = [&](const Tile& t, Rows& S, int v0, bool transition, std::array<std::array<double, V>, C>* o) {
    const int n = static_cast<int>(S.size());
    std::vector<std::array<double, C>> vn(n);
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < C; ++r) {
        double ws = 0.0;
        for (int d = 0; d < K; ++d) ws += t.W[r][d] * S[i][d];
        vn[i][r] = (transition ? 0.0 : t.U[r][v0 + i]) - ws;
      }
    if (o != nullptr)
      for (int i = 0; i < n; ++i)
        for (int r = 0; r < C; ++r) {
          double acc = 0.0;
          for (int d = 0; d < K; ++d) acc += t.Qg[r][d] * S[i][d];
          for (int q = 0; q <= r; ++q) acc += t.A[r][q] * vn[i][q];
          (*o)[r][v0 + i] = acc;
        }
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < K; ++d) {
        double acc = S[i][d] * t.dec[d];
        for (int r = 0; r < C; ++r) acc += vn[i][r] * t.Kd[r][d];
        S[i][d] = acc;
      }
  };
  using Out = std::vector<std::array<std::array<double, V>, C>>;
  std::vector<Out> want(chains), got(chains);
  std::vector<Rows> want_final(chains), got_final(chains, Rows(V));
  for (int64_t c = 0; c < chains; ++c) {
    Rows S(h0[c].begin(), h0[c].end());
    want[c].resize(lengths[c]);
    got[c].assign(lengths[c], {});
    for (int i = 0; i < lengths[c]; ++i) advance(tiles[c][i], S, 0, false, &want[c][i]);
    want_final[c] = S;
  }
  std::vector<double> ends(chains * (s - 1) * (V + K) * K, NAN), starts(chains * (s - 1) * V * K, NAN);
  for (int pass : {1, 2}) {
    for (unsigned b = 0; b < chains * segment_pass_ctas(pass, s, bv, V, K); ++b) {
      const SegTile t = seg_tile(b, pass, s, bv, V, K, 0, 1);
      const SegmentRole role = segment_role(t, pass, s, V, K);
      int64_t first = 0, last = 0;
      segment_chunks(0, lengths[t.chain], t.seg, s, &first, &last);
      Rows S(bv);
      for (int i = 0; i < bv; ++i)
        for (int d = 0; d < K; ++d) {
          const int v = t.v0 + i;
          S[i][d] = role.start == SegmentRole::kInitial    ? h0[t.chain][v][d]
                    : role.start == SegmentRole::kHandOff  ? starts[role.start_at + v * K + d]
                    : role.start == SegmentRole::kIdentity ? (v - V == d ? 1.0 : 0.0)
                                                           : 0.0;
        }
      for (int64_t ci = first; ci < last; ++ci)
        advance(tiles[t.chain][ci], S, t.v0, role.transition, role.outputs ? &got[t.chain][ci] : nullptr);
      for (int i = 0; i < bv; ++i)
        for (int d = 0; d < K; ++d) {
          const int v = t.v0 + i;
          if (role.end == SegmentRole::kStarts) starts[role.end_at + v * K + d] = S[i][d];
          if (role.end == SegmentRole::kEnds) ends[role.end_at + v * K + d] = S[i][d];
          if (role.end == SegmentRole::kFinal) got_final[t.chain][v][d] = S[i][d];
        }
    }
    if (pass == 1)  // the combine
      for (int64_t c = 0; c < chains; ++c)
        for (int j = 1; j + 1 < s; ++j)
          for (int v = 0; v < V; ++v)
            for (int d = 0; d < K; ++d) {
              const double* e = &ends[segment_end_at(c, j, s, V, K)];
              double acc = e[v * K + d];
              for (int k = 0; k < K; ++k) acc += starts[segment_start_at(c, j, s, V, K) + v * K + k] * e[(V + k) * K + d];
              starts[segment_start_at(c, j + 1, s, V, K) + v * K + d] = acc;
            }
  }
  for (int64_t c = 0; c < chains; ++c) {
    for (int i = 0; i < lengths[c]; ++i)
      for (int r = 0; r < C; ++r)
        for (int v = 0; v < V; ++v) ASSERT_NEAR(got[c][i][r][v], want[c][i][r][v], 1e-9) << c << " " << i;
    for (int v = 0; v < V; ++v)
      for (int d = 0; d < K; ++d) ASSERT_NEAR(got_final[c][v][d], want_final[c][v][d], 1e-9) << c;
  }
}

// The segments' regions follow the forward's workspace, 256-byte aligned, sized [chain][s - 1][V + K][K] and
// [chain][s - 1][V][K] floats.
TEST(ChunkMap, SegmentLayoutFollowsTheWorkspace) {
  const WorkspaceLayout wl = workspace_layout(32768, 1, 4, 128, 128);
  const SegmentLayout l = segment_layout(wl.bytes, 4, 16, 128, 128);
  EXPECT_GE(l.ends, wl.bytes);
  EXPECT_EQ(l.ends % 256, 0);
  EXPECT_EQ(l.starts % 256, 0);
  EXPECT_GE(l.starts - l.ends, int64_t{4} * 15 * 256 * 128 * 4);
  EXPECT_EQ(l.bytes - l.starts, int64_t{4} * 15 * 128 * 128 * 4);
}

TEST(ChunkMap, ChainTilesCoverEveryTileOnce) {
  for (const auto& [N, HV, V, sms] : {std::tuple<int64_t, int, int, int>{1, 96, 128, 132}, {3, 64, 128, 132},
                                     {5, 12, 64, 132}, {2, 7, 128, 16}}) {
    const StatePassPlan plan = plan_state_pass(N * HV, V, sms, true, false);
    std::set<std::tuple<int64_t, int, int>> seen;  // (rank, hv, first column)
    auto launch = [&](int bv, int64_t chain0, int64_t count) {
      const int vtiles = V / bv;
      for (unsigned block = 0; block < count * vtiles; ++block) {
        const ChainTile c = chain_tile(block, vtiles, chain0, bv, HV);
        ASSERT_TRUE(c.rank >= 0 && c.rank < N && c.hv >= 0 && c.hv < HV && c.v0 >= 0 && c.v0 + bv <= V);
        ASSERT_EQ(c.v0, c.vt * bv);
        for (int v = c.v0; v < c.v0 + bv; v += 32) ASSERT_TRUE(seen.insert({c.rank, c.hv, v}).second);
      }
    };
    launch(plan.bv_first, 0, plan.first_chains);
    if (plan.first_chains < N * HV) launch(plan.bv_rest, plan.first_chains, N * HV - plan.first_chains);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), N * HV * (V / 32));
  }
}

// chain_chunks reads the sequence of a launch rank (packed: seq_order's entry; fixed length: the rank itself), its
// range from seq_first (entries first .. last - 1), and names the list and tiles at their workspace offsets; b is n
// for a fixed-length batch and 0 for a packed one.
TEST(ChunkMap, ChainChunksReadTheSequencesRange) {
  const WorkspaceLayout w = workspace_layout(3000, 3, 2, 128, 64);
  std::vector<int64_t> buf(static_cast<size_t>(w.bytes / 8 + 1), 0);
  char* const ws = reinterpret_cast<char*>(buf.data());
  const int64_t seq_first[4] = {0, 5, 5, 47};  // sequence 1 owns no chunk
  const int64_t order[3] = {2, 0, 1};           // longest first
  std::copy(seq_first, seq_first + 4, reinterpret_cast<int64_t*>(ws + w.seq_first));
  std::copy(order, order + 3, reinterpret_cast<int64_t*>(ws + w.seq_order));
  for (int64_t r = 0; r < 3; ++r) {
    const ChainChunks c = chain_chunks(ws, w, r, false);
    EXPECT_EQ(c.n, r);
    EXPECT_EQ(c.first, seq_first[r]);
    EXPECT_EQ(c.last, seq_first[r + 1]);
    EXPECT_EQ(c.b, r);
    EXPECT_EQ(reinterpret_cast<const char*>(c.list), ws + w.list);
    EXPECT_EQ(reinterpret_cast<const char*>(c.tiles), ws + w.tiles);
    const ChainChunks pc = chain_chunks(ws, w, r, true);
    EXPECT_EQ(pc.n, order[r]);
    EXPECT_EQ(pc.first, seq_first[order[r]]);
    EXPECT_EQ(pc.last, seq_first[order[r] + 1]);
    EXPECT_EQ(pc.b, 0);
  }
}

// The longest-first order's keys: 0 only for empty sequences, never smaller for a longer sequence, inside the
// builder's 256-entry histogram for any count, and counts that share a key within 25% of each other (so the order is
// longest first to within that); one key a count for the shortest ones.
TEST(ChunkMap, LptKeysOrderSequencesByLength) {
  EXPECT_EQ(lpt_key(0), 0);
  EXPECT_EQ(lpt_key(-3), 0);
  std::map<int, std::pair<int64_t, int64_t>> range;  // key -> smallest, largest count
  int prev = 0;
  for (int64_t c = 1; c <= 70000; ++c) {
    const int k = lpt_key(c);
    ASSERT_GE(k, prev) << c;
    ASSERT_GT(k, 0);
    prev = k;
    auto it = range.find(k);
    if (it == range.end())
      range[k] = {c, c};
    else
      it->second.second = c;
  }
  for (const auto& [k, r] : range) EXPECT_LT(static_cast<double>(r.second), 1.25 * static_cast<double>(r.first)) << k;
  EXPECT_NE(lpt_key(1), lpt_key(2));
  EXPECT_NE(lpt_key(2), lpt_key(3));
  EXPECT_NE(lpt_key(3), lpt_key(4));
  for (int64_t c : {int64_t{1} << 40, (int64_t{1} << 62) + 12345, INT64_MAX}) {
    EXPECT_LT(lpt_key(c), kLptKeys);
    EXPECT_GT(lpt_key(c), lpt_key(c / 2));
  }
}

TEST(ChunkMap, WorkspaceLayoutIsAlignedAndSized) {
  const WorkspaceLayout w = workspace_layout(8192, 1, 64, 128, 128);
  EXPECT_EQ(w.cap, 129);
  EXPECT_EQ(w.seq_first % 256, 0);
  EXPECT_EQ(w.seq_order % 256, 0);
  EXPECT_GE(w.seq_order, w.seq_first + 2 * 8);  // seq_first [N + 1], N = 1
  EXPECT_GE(w.list, w.seq_order + 1 * 8);
  EXPECT_EQ(w.list % 256, 0);
  EXPECT_EQ(w.tiles % 256, 0);
  const int64_t tile = TileLayout{128, 128}.floats();
  EXPECT_EQ(tile, 4 * 64 * 128 + 64 * 64 + 128);
  EXPECT_EQ(tile % 4, 0);  // 16-byte aligned tiles
  EXPECT_EQ(w.bytes, w.tiles + 129 * 64 * tile * 4);
  // About 2.3 KB per token and head.
  EXPECT_NEAR(static_cast<double>(tile * 4) / kChunk, 2312.0, 1.0);
}

// The backward's regions follow the forward's workspace in order, 256-byte aligned, each at least its size apart
// (dqk empty for groups of one value head), and the gradient pass's grid (and so its scratch) is capped.
TEST(ChunkMap, BackwardLayoutRegionsAreDisjointAndAligned) {
  for (const auto& [B, T, N, HV, K, V] : {std::array<int64_t, 6>{1, 8192, 1, 64, 128, 128},
                                          std::array<int64_t, 6>{1, 333, 7, 3, 64, 128},
                                          std::array<int64_t, 6>{2, 100, 2, 2, 128, 64}}) {
    for (int64_t group : {1, 2}) {
      const BackwardLayout l = backward_layout(B, T, N, HV, K, V, group);
      const int64_t cap = l.fwd.cap, per = cap * HV * 4, C = kChunk;
      const int64_t starts[] = {l.akk,  l.tinv,   l.norms, l.tame, l.starts,  l.vnew, l.du,
                                l.dsend, l.dqk,   l.gate,  l.prod, l.scratch, l.pipe,   l.bytes};
      const ProdLayout pl{static_cast<int>(K), static_cast<int>(V)};
      const int64_t sizes[] = {per * C * C, per * C * C, per * 2 * C, per, per * V * K, per * C * V, per * C * V,
                               per * V * K, group > 1 ? 2 * B * T * HV * K * 4 : 0, cap * HV * (K + 1) * 8,
                               per * pl.floats(), l.grad_ctas * kGradScratch * C * std::max(K, V) * 4,
                               8 + 4 * cap * HV};
      EXPECT_GE(l.akk, l.fwd.bytes);
      for (int i = 0; i < 13; ++i) {
        EXPECT_EQ(starts[i] % 256, 0) << i;
        EXPECT_GE(starts[i + 1] - starts[i], sizes[i]) << i;
        EXPECT_LT(starts[i + 1] - starts[i], sizes[i] + (sizes[i] > 0 ? 256 : 1)) << i;  // an empty region: no bytes
      }
      EXPECT_EQ(l.grad_ctas, std::min<int64_t>(cap * HV, kGradCtas));
    }
  }
}

// The gradient pipe's tickets: every products pair and every stage exactly once, nothing else before the counter runs
// out, and each stage after its own task's products pair (a cluster waiting on a flag waits on a job already taken).
TEST(ChunkMap, GradPipeTicketsRunEveryJobOnceAfterWhatItReads) {
  for (int64_t tasks : {1, 2, 3, 7, 64, 263, 264, 1000, 8320})
    for (int64_t clusters : {0, 1, 2, 3, 132, 133, 264, 5000}) {
      const GradPipePlan g = grad_pipe_plan(tasks, clusters);
      EXPECT_EQ(g.pairs, (tasks + 1) / 2);
      EXPECT_GE(g.lead, 1);
      EXPECT_LE(g.lead, g.pairs);
      std::vector<int64_t> products_at(g.pairs, -1), stage_at(tasks, -1);
      for (int64_t t = 0; t < g.tickets() + 5; ++t) {
        const GradPipePlan::Job j = g.job(t);
        if (t >= g.tickets()) {
          EXPECT_EQ(j.kind, GradPipePlan::kNone) << t;
          continue;
        }
        ASSERT_NE(j.kind, GradPipePlan::kNone) << tasks << " " << clusters << " " << t;
        if (j.kind == GradPipePlan::kProducts) {
          ASSERT_GE(j.index, 0);
          ASSERT_LT(j.index, g.pairs);
          EXPECT_EQ(products_at[j.index], -1) << "pair " << j.index << " twice";
          products_at[j.index] = t;
        } else {
          ASSERT_GE(j.index, 0);
          ASSERT_LT(j.index, tasks);
          EXPECT_EQ(stage_at[j.index], -1) << "stage " << j.index << " twice";
          stage_at[j.index] = t;
          ASSERT_GE(products_at[j.index / 2], 0) << "stage " << j.index << " before its products";
        }
      }
      for (int64_t i = 0; i < g.pairs; ++i) EXPECT_GE(products_at[i], 0) << i;
      for (int64_t i = 0; i < tasks; ++i) EXPECT_GE(stage_at[i], 0) << i;
    }
}

// The gradient pass's grid: never more CTAs than scratch slots (blockIdx indexes them) nor than the device holds at
// once (a persistent grid in one wave), at least one.
TEST(ChunkMap, GradGridIsOneWaveWithinTheScratchSlots) {
  EXPECT_EQ(grad_grid(256, 132, 1), 132);  // H200, one 230 KB CTA per SM
  EXPECT_EQ(grad_grid(256, 132, 2), 256);
  EXPECT_EQ(grad_grid(100, 132, 1), 100);  // fewer tasks than SMs: one CTA each
  EXPECT_EQ(grad_grid(256, 0, 0), 1);      // no occupancy figure: still a valid launch
  for (int64_t ctas : {1, 7, 131, 132, 133, 256})
    for (int sms : {1, 80, 132})
      for (int per_sm : {1, 2, 3}) {
        const int64_t g = grad_grid(ctas, sms, per_sm);
        EXPECT_GE(g, 1);
        EXPECT_LE(g, ctas);
        EXPECT_LE(g, int64_t{sms} * per_sm);
        EXPECT_TRUE(g == ctas || g == int64_t{sms} * per_sm);
      }
}

// A task's product tiles are disjoint, in order, and each starts 256-byte aligned.
TEST(ChunkMap, ProductTilesAreDisjointAndAligned) {
  for (int K : {64, 128})
    for (int V : {64, 128}) {
      const ProdLayout pl{K, V};
      const int64_t C = kChunk;
      const int64_t starts[] = {pl.dM(), pl.dA(), pl.QS(), pl.KD(), pl.BK(), pl.BV(), pl.CS(), pl.TBrow(),
                                pl.Tame(), pl.floats()};
      const int64_t sizes[] = {C * C, C * C, C * K, C * K, C * K, C * V, K, K / 32 * C, 1};
      for (int i = 0; i < 9; ++i) {
        if (i < 7) {
          EXPECT_EQ(starts[i] % 64, 0) << i;  // the tiles a CTA copies or reads by rows
        }
        EXPECT_EQ(starts[i + 1] - starts[i] - sizes[i], i == 8 ? 63 : 0) << i;  // Tame then the padding to 64
      }
    }
}

// Phase 1's S2 tasks cover every (channel, sub-block) once, a warp's 32 tasks one sub-block of consecutive channels.
TEST(ChunkMap, ScanTasksCoverChannelsAndSubBlocks) {
  for (int K : {64, 128}) {
    std::vector<int> seen(static_cast<size_t>(K) * kSubBlocks, 0);
    for (int task = 0; task < K * kSubBlocks; ++task) {
      const ScanTask t = scan_task(task, K);
      ASSERT_GE(t.d, 0);
      ASSERT_LT(t.d, K);
      ASSERT_GE(t.blk, 0);
      ASSERT_LT(t.blk, kSubBlocks);
      ++seen[static_cast<size_t>(t.blk) * K + t.d];
      if (task % 32 != 0) {
        const ScanTask first = scan_task(task - task % 32, K);
        EXPECT_EQ(t.blk, first.blk);
        EXPECT_EQ(t.d, first.d + task % 32);
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
  EXPECT_EQ(kSub * kSubBlocks, kChunk);
}

// Phase 1's raw q / k stage: the 512 threads' vectors (S0's thread map: half = tid / 256, token (tid % 256) / 4,
// quarter tid % 4) are distinct and fill [2][kC][K] bf16, inside Kr's buffer (kC rows of K + 4 floats); for each j a
// warp's 32 vectors fall 4 on each of the 8 groups of 4 banks (the least a 512-byte access takes).
TEST(ChunkMap, RawQkStageVectorsAreDistinctAndSpreadOverTheBanks) {
  for (int K : {64, 128}) {
    std::vector<int> seen(2 * kChunk * K / 8, 0);
    for (int w = 0; w < 16; ++w)
      for (int j = 0; j < K / 32; ++j) {
        int groups[8] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const int tid = 32 * w + lane, st = (tid & 255) >> 2, sq = tid & 3, half = tid >> 8;
          const int u = qk_raw_vector(half, st, sq, j, K);
          ASSERT_GE(u, (half * kChunk + st) * (K / 8));
          ASSERT_LT(u, (half * kChunk + st + 1) * (K / 8));  // inside its own row
          ++seen[u];
          ++groups[u % 8];
        }
        for (int g : groups) EXPECT_EQ(g, 4);
      }
    for (int n : seen) EXPECT_EQ(n, 1);
    EXPECT_LE(2 * kChunk * K * 2, kChunk * (K + 4) * 4);
  }
}

// S2b's pair tasks cover every (channel, token) of the chunk once; a warp's 32 tasks share one half of one sub-block
// and hold 64 consecutive channels, two a lane (so a lane's 4-byte stores and 8-byte loads are its own pair's).
TEST(ChunkMap, PairScanTasksCoverChannelsAndTokens) {
  for (int K : {64, 128}) {
    std::vector<int> seen(static_cast<size_t>(K) * kChunk, 0);
    for (int task = 0; task < K * kSubBlocks; ++task) {
      const PairScanTask t = pair_scan_task(task, K);
      ASSERT_EQ(t.d % 2, 0);
      ASSERT_GE(t.d, 0);
      ASSERT_LT(t.d + 1, K);
      ASSERT_GE(t.h, 0);
      ASSERT_LT(t.h, 2);
      ASSERT_GE(t.blk, 0);
      ASSERT_LT(t.blk, kSubBlocks);
      for (int i = 0; i < kHalf; ++i)
        for (int c = 0; c < 2; ++c) ++seen[static_cast<size_t>(kSub * t.blk + kHalf * t.h + i) * K + t.d + c];
      if (task % 32 != 0) {
        const PairScanTask first = pair_scan_task(task - task % 32, K);
        EXPECT_EQ(t.blk, first.blk);
        EXPECT_EQ(t.h, first.h);
        EXPECT_EQ(t.d, first.d + 2 * (task % 32));
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
  EXPECT_EQ(2 * kHalf, kSub);
}

// Phase 1's S1 pair tasks: every (sub-block, column) in exactly one task, 32 updates per task; the slots the kernel's
// row loop accumulates into (diag_slot_*) are 32 distinct ones, and diag_slot_entry reads back exactly the entry each
// holds; diag_zero_entry names every entry above the diagonal of the two columns once.
TEST(ChunkMap, DiagPairTasksCoverBlocksWithOneReduceScatterEach) {
  std::vector<int> seen(kSubBlocks * kSub, 0);
  for (int task = 0; task < kSubBlocks * kSub / 2; ++task) {
    const DiagPairTask t = diag_pair_task(task);
    ASSERT_TRUE(t.bk >= 0 && t.bk < kSubBlocks && t.c1 < t.c2 && t.c1 >= 0 && t.c2 < kSub);
    ++seen[t.bk * kSub + t.c1];
    ++seen[t.bk * kSub + t.c2];
    // The kernel's accumulation targets, in its loop order (rows r, column c1 then c2).
    std::map<int, std::tuple<bool, int, int>> slot;  // slot -> (qk, r, c)
    int updates = 0;
    auto add = [&](int sl, bool qk, int r, int c) {
      ASSERT_TRUE(sl >= 0 && sl < 32) << sl;
      ASSERT_TRUE(slot.emplace(sl, std::make_tuple(qk, r, c)).second) << "slot " << sl << " twice, p " << t.p;
    };
    for (int r = 0; r < kSub; ++r) {
      if (r >= t.c1) {
        ++updates;
        add(diag_slot_qk1(r), true, r, t.c1);
        if (r > t.c1) add(diag_slot_kk1(r), false, r, t.c1);
      }
      if (r >= t.c2) {
        ++updates;
        add(diag_slot_qk2(r, t.c2), true, r, t.c2);
        if (r > t.c2) add(diag_slot_kk2(r), false, r, t.c2);
      }
    }
    EXPECT_EQ(updates, kSub + 1);  // 17 rows of exponent updates, i.e. 32 (row, channel-vector) terms with the A_kk ones
    ASSERT_EQ(slot.size(), 32u);
    std::set<std::tuple<bool, int, int>> zeros;
    for (int lane = 0; lane < 32; ++lane) {
      const DiagEntry e = diag_slot_entry(t, lane);
      EXPECT_EQ(slot.at(lane), std::make_tuple(e.qk, e.r, e.c)) << "lane " << lane << ", p " << t.p;
      const DiagEntry z = diag_zero_entry(t, lane);
      EXPECT_TRUE(z.c == t.c1 || z.c == t.c2);
      EXPECT_TRUE(z.qk ? z.r < z.c : z.r <= z.c) << "lane " << lane << " zeroes a lower entry, p " << t.p;
      EXPECT_TRUE(z.r >= 0);
      zeros.insert({z.qk, z.r, z.c});
    }
    EXPECT_EQ(zeros.size(), 32u);  // A_qk: c1 + c2 = 15 entries with r < c; A_kk: (c1 + 1) + (c2 + 1) = 17 with r <= c
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

// S4's three stages (tri2_task) in double on the CPU, as the kernel runs them: round 0's diagonal blocks by
// substitution, stage 1 T_ij = -T_ii sum_k A_ik T_kj, stage 2 X_ij = sum_k A_ik T_kj, stage 3 T_ij = -sum_k T_ik
// X_kj; every block a task reads is written by an earlier stage, and T (I + A) = I for random strictly lower A.
TEST(ChunkMap, BlockedInverseStagesInvertTheUnitLowerMatrix) {
  constexpr int n = kSubBlocks * kSub;
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> A(n * n, 0.0), T(n * n, 0.0), X(4 * kSub * kSub, 0.0);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < r; ++c) A[r * n + c] = u(rng);
    std::vector<int> ready(kSubBlocks * kSubBlocks, -1);  // stage that wrote T block (I, J)
    for (int b = 0; b < kSubBlocks; ++b) {                // round 0
      for (int c = kSub * b; c < kSub * (b + 1); ++c)
        for (int r = c; r < kSub * (b + 1); ++r) {
          double s = 0.0;
          for (int j = c; j < r; ++j) s += A[r * n + j] * T[j * n + c];
          T[r * n + c] = r == c ? 1.0 : -s;
        }
      ready[b * kSubBlocks + b] = 0;
    }
    auto blk = [&](const std::vector<double>& M, int I, int K, int r, int c) {
      return M[(kSub * I + r) * n + kSub * K + c];
    };
    std::vector<int> x_ready(4, -1);
    for (int stage = 1; stage <= 3; ++stage) {
      std::vector<std::pair<int, std::vector<double>>> out;  // written after every task of the stage has read
      for (int w = 0; w < tri2_warps(stage); ++w) {
        const Tri2Task t = tri2_task(stage, w);
        std::vector<double> R(kSub * kSub, 0.0);
        for (int k = t.k_first; k <= t.k_last; ++k) {
          if (stage < 3) {
            ASSERT_GE(ready[k * kSubBlocks + t.j], 0) << "stage " << stage << " reads T_" << k << t.j;
            ASSERT_LT(ready[k * kSubBlocks + t.j], stage);
          } else {
            ASSERT_GE(ready[t.i * kSubBlocks + k], 0) << "stage 3 reads T_" << t.i << k;
            ASSERT_EQ(x_ready[(k - 2) * 2 + t.j], 2);
          }
          for (int r = 0; r < kSub; ++r)
            for (int c = 0; c < kSub; ++c)
              for (int m = 0; m < kSub; ++m) {
                const double* const x = X.data() + ((k - 2) * 2 + t.j) * kSub * kSub;
                R[r * kSub + c] += stage < 3 ? blk(A, t.i, k, r, m) * blk(T, k, t.j, m, c)
                                             : blk(T, t.i, k, r, m) * x[m * kSub + c];
              }
        }
        if (stage == 1) {  // -T_ii R
          std::vector<double> Q(kSub * kSub, 0.0);
          for (int r = 0; r < kSub; ++r)
            for (int c = 0; c < kSub; ++c)
              for (int m = 0; m < kSub; ++m) Q[r * kSub + c] -= blk(T, t.i, t.i, r, m) * R[m * kSub + c];
          R = Q;
        } else if (stage == 3) {
          for (double& v : R) v = -v;
        }
        out.push_back({stage == 2 ? w : t.i * kSubBlocks + t.j, R});
      }
      for (const auto& [slot, R] : out) {
        if (stage == 2) {
          std::copy(R.begin(), R.end(), X.begin() + slot * kSub * kSub);
          x_ready[slot] = 2;
          continue;
        }
        const int I = slot / kSubBlocks, J = slot % kSubBlocks;
        ASSERT_EQ(ready[slot], -1) << "block twice";
        ready[slot] = stage;
        for (int r = 0; r < kSub; ++r)
          for (int c = 0; c < kSub; ++c) T[(kSub * I + r) * n + kSub * J + c] = R[r * kSub + c];
      }
    }
    for (int I = 0; I < kSubBlocks; ++I)
      for (int J = 0; J < kSubBlocks; ++J) EXPECT_EQ(ready[I * kSubBlocks + J] >= 0, I >= J) << I << " " << J;
    double worst = 0.0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) {
        double s = T[r * n + c];
        for (int j = 0; j < n; ++j) s += T[r * n + j] * A[j * n + c];
        worst = std::max(worst, std::abs(s - (r == c ? 1.0 : 0.0)));
      }
    EXPECT_LT(worst, 1e-9) << trial;
  }
}

// S4's round 0 as chunk_prepare.cu runs it since session 60, thread by thread in fp32: a thread a column c, right-
// looking (t[r] -= A_rj t[j] for r > j once t[j] is final, A's entries read a 4-column group ahead), against the plain
// substitution T_rc = -(sum over ascending j of A_rj T_jc, fmaf chained): the same value for every entry (zeros may
// differ in sign: -(+0) against a sum built from +0), since fmaf(-a, b, -s) = -fmaf(a, b, s) in round-to-nearest; and
// no t[j] taken before its last term. Entries of A past a chunk's length are zeros, as S0 stages them, and magnitudes
// up to 2^20 (beta = 2, near-identical keys).
TEST(ChunkMap, RoundZeroRightLookingColumnsGiveThePlainSubstitution) {
  std::mt19937_64 rng(20261206);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-20, 20), len(1, kChunk);
  for (int trial = 0; trial < 200; ++trial) {
    const int L = len(rng);
    std::vector<float> A(kChunk * kChunk, 0.0f), Tref(kChunk * kChunk, 0.0f), Tnew(kChunk * kChunk, 0.0f);
    for (int r = 0; r < L; ++r)
      for (int c = 0; c < r; ++c) A[r * kChunk + c] = std::ldexp(u(rng), trial % 2 ? e(rng) : 0);
    for (int c = 0; c < kChunk; ++c) {
      const int cb = c & ~(kSub - 1), cl = c - cb;
      for (int r = cb; r < cb + kSub; ++r) {  // the plain substitution, column c of c's diagonal block
        float s = 0.0f;
        for (int j = c; j < r; ++j) s = std::fmaf(A[r * kChunk + j], Tref[j * kChunk + c], s);
        Tref[r * kChunk + c] = r < c ? 0.0f : (r == c ? 1.0f : -s);
      }
      std::array<float, kSub> t{};  // the thread's registers
      std::array<int, kSub> terms{};  // terms t[r] has taken
      for (int g = 0; g < kSub / 4; ++g) {
        std::array<std::array<float, 4>, kSub> a{};
        for (int r = 4 * g + 1; r < kSub; ++r)
          for (int jj = 0; jj < 4; ++jj) a[r][jj] = A[(cb + r) * kChunk + cb + 4 * g + jj];
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * g + jj;
          ASSERT_EQ(terms[j], j) << "t[" << j << "] taken with " << terms[j] << " terms";
          t[j] = j < cl ? 0.0f : (j == cl ? 1.0f : t[j]);
          for (int r = j + 1; r < kSub; ++r) {
            t[r] = std::fmaf(-a[r][jj], t[j], t[r]);
            ++terms[r];
          }
        }
      }
      for (int i = 0; i < kSub; ++i) Tnew[(cb + i) * kChunk + c] = t[i];
    }
    for (int r = 0; r < kChunk; ++r)
      for (int c = 0; c < kChunk; ++c)
        if ((r & ~(kSub - 1)) == (c & ~(kSub - 1))) {
          ASSERT_EQ(Tref[r * kChunk + c], Tnew[r * kChunk + c])
              << "trial " << trial << " L " << L << " T(" << r << ", " << c << ")";
        }
  }
}

// The state pass's tile copies (chunk_state.cu load_planes and U): every piece of every tile shape is copied by
// exactly one (thread, pass), and a pass moves a thread by whole rows (its column never changes).
TEST(ChunkMap, CopyPassesCoverEveryPieceOnce) {
  struct Shape {
    int rows, cols, piece;
  };
  constexpr int kThreads = 256;
  for (const Shape sh : {Shape{128, 128, 8}, Shape{128, 64, 8}, Shape{64, 64, 4}, Shape{64, 32, 4}}) {
    const int per_row = sh.cols / sh.piece, rpp = copy_rows_per_pass(sh.cols, sh.piece, kThreads);
    ASSERT_EQ(kThreads % per_row, 0);
    ASSERT_EQ(sh.rows % rpp, 0);
    std::vector<int> seen(static_cast<size_t>(sh.rows) * per_row, 0);
    for (int tid = 0; tid < kThreads; ++tid)
      for (int pass = 0; pass < sh.rows / rpp; ++pass) {
        const CopyPiece c = copy_piece(tid, pass, sh.cols, sh.piece, kThreads);
        const CopyPiece c0 = copy_piece(tid, 0, sh.cols, sh.piece, kThreads);
        ASSERT_GE(c.row, 0);
        ASSERT_LT(c.row, sh.rows);
        ASSERT_EQ(c.col % sh.piece, 0);
        ASSERT_LT(c.col, sh.cols);
        EXPECT_EQ(c.col, c0.col);
        EXPECT_EQ(c.row, c0.row + rpp * pass);
        ++seen[static_cast<size_t>(c.row) * per_row + c.col / sh.piece];
      }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

}  // namespace
}  // namespace kda::cuda
