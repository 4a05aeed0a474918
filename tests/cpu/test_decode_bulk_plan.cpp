// test_decode_bulk_plan.cpp: the decode kernels' work plans on the CPU: the sm_90 kernel's (src/cuda/hopper/
// decode_bulk_plan.h), then the row-split kernel's (decode_rows_plan.h, at the end). The units of a persistent grid cover every (sequence, value head, row block) once,
// in the same order for the producer and the consumers; and the producer / consumer handshake (a unit's copies, then
// its staging), replayed with mbarriers modelled as PTX defines them (arrival count, transaction bytes, phase parity)
// under random interleavings, never lets a consumer read a stage before its tile's bytes and staging are in, never
// lets the producer refill a stage a consumer still reads, and never deadlocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/generic/decode_rows_plan.h"
#include "cuda/hopper/decode_bulk_plan.h"

namespace kda::cuda::bulk {
namespace {

TEST(DecodeBulkPlan, UnitsCoverEveryRowBlockOnce) {
  // (N, HV, V, stages, resident CTAs, CTAs launched)
  for (const auto& [N, HV, V, stages, resident, ctas] :
       {std::tuple<int64_t, int, int, int, int64_t, int64_t>{1, 32, 128, 4, 396, 396}, {5, 12, 128, 4, 7, 7},
        {3, 4, 96, 4, 5, 5}, {2, 3, 16, 8, 1, 1}, {512, 32, 128, 4, 396, 396}, {8, 12, 256, 2, 264, 200},
        {64, 32, 64, 8, 396, 396}, {7, 5, 256, 8, 3, 3}}) {
    const int blocks = row_blocks(V);
    const int per = tiles_per_unit(N, HV, V, stages, resident);
    ASSERT_TRUE(per >= 1 && per <= stages && blocks % per == 0) << per;
    const int64_t units = unit_count(N, HV, V, per);
    EXPECT_TRUE(per == 1 || units >= resident) << "units could have been split further: " << units;
    std::set<std::tuple<int64_t, int, int>> seen;
    for (int64_t cta = 0; cta < std::min(ctas, units); ++cta) {
      // The producer's order (units, then their tiles) and the consumers' (a flat tile count) name the same tiles.
      std::vector<std::tuple<int64_t, int, int>> by_unit, by_count;
      for (int64_t k = 0, unit = cta_unit(cta, ctas, 0); unit < units; unit = cta_unit(cta, ctas, ++k)) {
        const Unit u = unit_of(unit, HV, V, per);
        for (int j = 0; j < per; ++j) by_unit.emplace_back(u.n, u.hv, u.row0 + j * kRows);
      }
      // The consumers run cta_tiles tiles, tile i being tile i % per of the CTA's unit i / per.
      const int tiles = cta_tiles(cta, ctas, units, per);
      for (int i = 0; i < tiles; ++i) {
        const int64_t unit = cta_unit(cta, ctas, i / per);
        ASSERT_LT(unit, units);
        const Unit u = unit_of(unit, HV, V, per);
        by_count.emplace_back(u.n, u.hv, u.row0 + (i % per) * kRows);
      }
      ASSERT_GE(cta_unit(cta, ctas, tiles / per), units);  // and not one unit more
      ASSERT_EQ(by_unit, by_count);
      for (const auto& [n, hv, row0] : by_unit) {
        ASSERT_TRUE(n >= 0 && n < N && hv >= 0 && hv < HV && row0 >= 0 && row0 < V);
        ASSERT_EQ(row0 % kRows, 0);
        ASSERT_TRUE(seen.insert({n, hv, row0}).second) << "tile (" << n << ", " << hv << ", " << row0 << ") twice";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), N * HV * blocks);
  }
  // Large batches keep a head's tiles together (one staging per head); one sequence spreads them over CTAs.
  EXPECT_EQ(tiles_per_unit(256, 32, 128, 4, 396), 4);
  EXPECT_EQ(tiles_per_unit(1, 32, 128, 4, 396), 1);
  EXPECT_EQ(tiles_per_unit(32, 12, 128, 4, 396), 2);
  EXPECT_EQ(tiles_per_unit(512, 32, 256, 2, 264), 2);
}

// An mbarrier as PTX specifies it: a phase completes when its pending arrivals reach zero with its transaction count
// at zero, then re-arms with the expected count; try_wait.parity(p) succeeds once the phase of parity p completed,
// i.e. while the current (incomplete) phase's parity differs from p.
struct MBarrier {
  int expected = 0, pending = 0;
  int64_t tx = 0, completed = 0;
  void init(int count) { expected = pending = count; }
  void check() {
    if (pending == 0 && tx == 0) {
      ++completed;
      pending = expected;
    }
  }
  void arrive() {
    --pending;  // an arrival beyond the expected count would make pending negative: never complete (a deadlock)
    check();
  }
  void arrive_expect_tx(int64_t bytes) {
    tx += bytes;
    arrive();
  }
  void complete_tx(int64_t bytes) {
    tx -= bytes;
    check();
  }
  bool try_wait(uint32_t parity) const { return static_cast<uint32_t>(completed & 1) != parity; }
};

// The parity rules the replay runs (the plan's, or a mutation that the replay must catch).
struct Rules {
  uint32_t (*full)(int64_t, int) = full_parity;
  uint32_t (*empty)(int64_t, int) = empty_parity;
};

// One CTA of the kernel: the producer warp (lane 0's arrive.expect_tx and bulk copy, then the staging stores and the
// 32 lanes' arrivals) and 4 consumer warps, each a sequence of blocking steps; the copies land at random times.
// Returns "" or the first violation.
std::string replay(int stages, int per_unit, int64_t units_of_cta, double padding, uint64_t seed, Rules rules = {}) {
  const int64_t tiles_of_cta = units_of_cta * per_unit;
  constexpr int kConsumers = 4, kLanes = 32;
  std::mt19937_64 rng(seed);
  std::vector<MBarrier> full(stages), empty(stages);
  for (int s = 0; s < stages; ++s) {
    full[s].init(kLanes + 1);
    empty[s].init(kConsumers);
  }
  std::vector<bool> pad(tiles_of_cta);
  for (auto&& p : pad) p = std::uniform_real_distribution<>(0, 1)(rng) < padding;
  std::vector<int64_t> staged(stages, -1), landed(stages, -1);  // which tile's staging / bytes a stage holds
  std::vector<std::vector<bool>> read(kConsumers, std::vector<bool>(tiles_of_cta, false));
  struct Copy {
    int stage;
    int64_t tile;
  };
  std::vector<Copy> copies;
  int64_t prod_i = 0;  // the producer's unit starts at tile prod_i
  int prod_j = 0;      // ... and it is at tile prod_i + prod_j of it
  int prod_step = 0;   // per tile of the unit: 0 wait for the stage, 1 arm + copy; then per tile: 2 stage + arrive
  std::vector<int64_t> cons_i(kConsumers, 0);
  const int64_t bytes = 16384;
  const std::string at = " (stages " + std::to_string(stages) + ", seed " + std::to_string(seed) + ")";
  for (;;) {
    std::vector<int> runnable;  // 0: producer, 1..4: consumers, 5: a copy lands
    if (prod_i < tiles_of_cta) {
      const int64_t t = prod_i + prod_j;
      if (prod_step != 0 || !producer_waits(t, stages) || empty[stage_of(t, stages)].try_wait(rules.empty(t, stages)))
        runnable.push_back(0);
    }
    for (int c = 0; c < kConsumers; ++c)
      if (cons_i[c] < tiles_of_cta && full[stage_of(cons_i[c], stages)].try_wait(rules.full(cons_i[c], stages)))
        runnable.push_back(1 + c);
    if (!copies.empty()) runnable.push_back(5);
    if (runnable.empty()) {
      bool done = prod_i == tiles_of_cta;
      for (int c = 0; c < kConsumers; ++c) done = done && cons_i[c] == tiles_of_cta;
      return done ? "" : "deadlock: producer at tile " + std::to_string(prod_i) + ", consumer 0 at " +
                             std::to_string(cons_i[0]) + at;
    }
    const int who = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng)];
    if (who == 0) {
      const int64_t t = prod_i + prod_j;
      const int s = stage_of(t, stages);
      if (prod_step == 0) {
        // Refilling stage s: every consumer must be done with the tile that used it before.
        if (t >= stages)
          for (int c = 0; c < kConsumers; ++c)
            if (!read[c][t - stages])
              return "stage " + std::to_string(s) + " refilled before consumer " + std::to_string(c) + " read tile " +
                     std::to_string(t - stages) + at;
        prod_step = 1;
      } else if (prod_step == 1) {
        if (!pad[t]) {
          full[s].arrive_expect_tx(bytes);
          copies.push_back({s, t});
        } else {
          full[s].arrive();  // padding: no copy
        }
        prod_step = ++prod_j < per_unit ? 0 : 2;  // the unit's copies first, then its staging
        if (prod_step == 2) prod_j = 0;
      } else {
        staged[s] = t;
        for (int l = 0; l < kLanes; ++l) full[s].arrive();
        if (++prod_j == per_unit) {
          prod_i += per_unit;
          prod_j = 0;
          prod_step = 0;
        }
      }
    } else if (who == 5) {
      const size_t k = std::uniform_int_distribution<size_t>(0, copies.size() - 1)(rng);
      const Copy cp = copies[k];
      copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(k));
      landed[cp.stage] = cp.tile;
      full[cp.stage].complete_tx(bytes);
    } else {
      const int c = who - 1;
      const int64_t i = cons_i[c];
      const int s = stage_of(i, stages);
      if (staged[s] != i || (!pad[i] && landed[s] != i))
        return "consumer " + std::to_string(c) + " read stage " + std::to_string(s) + " for tile " +
               std::to_string(i) + " holding staging of " + std::to_string(staged[s]) + ", bytes of " +
               std::to_string(landed[s]) + at;
      read[c][i] = true;
      empty[s].arrive();
      ++cons_i[c];
    }
  }
}

// The consumers' halving row sums (decode_bulk.cu halving_row_sum) run here on 32 simulated lanes, step for step as
// the kernel runs them (a shuffle reads the partner's value from before the step): every lane must end with the sum of
// the row halving_row_of_lane names, over all 32 lanes, and halving_lane_of_row must name a lane holding that row.
TEST(DecodeBulkPlan, HalvingRowSumsGiveEachLaneItsRow) {
  constexpr int R = kHalvingRows;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> small(-1000, 1000);
  for (int round = 0; round < 20; ++round) {
    // Integer-valued partials: every order of the additions gives the same float, so the test checks the lane map.
    double part[32][R], x[32][R];
    for (auto& lane : part)
      for (double& v : lane) v = small(rng);
    for (int l = 0; l < 32; ++l)
      for (int r = 0; r < R; ++r) x[l][r] = part[l][r];
    for (int h = R / 2, mask = 16; h >= 1; h /= 2, mask /= 2) {
      double before[32][R];
      std::copy(&x[0][0], &x[0][0] + 32 * R, &before[0][0]);
      for (int l = 0; l < 32; ++l) {
        const bool upper = (l & mask) != 0;
        const bool partner_upper = ((l ^ mask) & mask) != 0;
        for (int i = 0; i < h; ++i) {
          const double sent = partner_upper ? before[l ^ mask][i] : before[l ^ mask][i + h];
          x[l][i] = (upper ? before[l][i + h] : before[l][i]) + sent;
        }
      }
    }
    for (int mask : {2, 1}) {
      double before[32];
      for (int l = 0; l < 32; ++l) before[l] = x[l][0];
      for (int l = 0; l < 32; ++l) x[l][0] = before[l] + before[l ^ mask];
    }
    for (int l = 0; l < 32; ++l) {
      const int r = halving_row_of_lane(l);
      ASSERT_TRUE(r >= 0 && r < R);
      double want = 0;
      for (int m = 0; m < 32; ++m) want += part[m][r];
      ASSERT_EQ(x[l][0], want) << "lane " << l << " row " << r;
    }
    for (int r = 0; r < R; ++r) {
      ASSERT_EQ(halving_row_of_lane(halving_lane_of_row(r)), r);
      ASSERT_EQ(halving_lane_of_row(r) & 3, 0);  // the lane that stores row r's output
    }
  }
}

TEST(DecodeBulkPlan, PipelineProtocolUnderRandomInterleavings) {
  std::mt19937_64 seeds(20261130);
  for (int stages : {2, 4, 8})
    for (int per_unit = 1; per_unit <= stages; per_unit *= 2)
      for (int64_t units : {int64_t{1}, int64_t{3}, int64_t{stages}, int64_t{stages + 1}, int64_t{41}})
        for (double padding : {0.0, 0.3, 1.0})
          for (int rep = 0; rep < 10; ++rep) ASSERT_EQ(replay(stages, per_unit, units, padding, seeds()), "");
}

// Why a unit may not have more tiles than stages: its copies come before its staging, so its (stages + 1)-th copy
// waits for a stage that only the unit's own first tile, not yet staged, would free.
TEST(DecodeBulkPlan, UnitLongerThanTheRingDeadlocks) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::string r = replay(2, 4, 3, 0.0, seed);
    EXPECT_EQ(r.rfind("deadlock", 0), 0u) << r;
  }
}

// The replay catches the classic pipeline bugs: a full-barrier parity one phase off lets consumers read a stage
// before it is filled (or deadlocks them), an empty-barrier parity one phase off lets the producer refill a stage a
// consumer still reads.
uint32_t full_off_by_one(int64_t i, int stages) { return full_parity(i, stages) ^ 1u; }
uint32_t empty_off_by_one(int64_t i, int stages) { return empty_parity(i, stages) ^ 1u; }

TEST(DecodeBulkPlan, ReplayCatchesWrongParities) {
  for (const Rules bad : {Rules{full_off_by_one, empty_parity}, Rules{full_parity, empty_off_by_one}}) {
    int caught = 0;
    for (uint64_t seed = 1; seed <= 50; ++seed) caught += replay(4, 2, 21, 0.0, seed, bad) != "";
    EXPECT_EQ(caught, 50);
  }
}

TEST(DecodeBulkPlan, ParityRules) {
  for (int stages : {2, 4}) {
    EXPECT_EQ(full_parity(0, stages), 0u);
    EXPECT_EQ(full_parity(stages, stages), 1u);
    EXPECT_EQ(full_parity(2 * stages, stages), 0u);
    EXPECT_FALSE(producer_waits(stages - 1, stages));
    EXPECT_TRUE(producer_waits(stages, stages));
    EXPECT_EQ(empty_parity(stages, stages), 0u);
    EXPECT_EQ(empty_parity(2 * stages, stages), 1u);
  }
  MBarrier b;
  b.init(1);
  EXPECT_FALSE(b.try_wait(0));  // phase 0 not complete yet
  EXPECT_TRUE(b.try_wait(1));   // the "preceding" phase of parity 1 counts as complete
  b.arrive();
  EXPECT_TRUE(b.try_wait(0));
  EXPECT_FALSE(b.try_wait(1));
}

}  // namespace
}  // namespace kda::cuda::bulk

// The small-batch row-split kernel's split (src/cuda/generic/decode_rows_plan.h): every (sequence, value head, row)
// belongs to exactly one warp's task, a task's rows stay inside V, and the dispatcher's preference falls as the batch
// grows (a batch that prefers the bulk kernel never turns back at a larger one).
namespace kda::cuda::rows {
namespace {

TEST(DecodeRowsPlan, WarpsCoverEveryRowOnce) {
  // The kernel's grid is (grid_x(V, R), HV, N) of kWarps warps; a warp owns rows row0 .. row0 + R - 1 (those < V).
  const auto check = [](int64_t N, int HV, int V, int R) {
    std::vector<int> seen(static_cast<size_t>(N * HV * V), 0);
    int64_t busy = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int hv = 0; hv < HV; ++hv)
        for (int bx = 0; bx < grid_x(V, R); ++bx)
          for (int w = 0; w < kWarps; ++w) {
            const int row0 = row0_of(bx, w, R);
            if (row0 >= V) continue;  // idle warp
            ++busy;
            ASSERT_EQ(row0 % R, 0);
            for (int r = row0; r < std::min(row0 + R, V); ++r) ++seen[static_cast<size_t>((n * HV + hv) * V + r)];
          }
    EXPECT_EQ(busy, warp_count(N, HV, V, R));
    for (size_t i = 0; i < seen.size(); ++i)
      ASSERT_EQ(seen[i], 1) << "row " << i << " N " << N << " HV " << HV << " V " << V << " R " << R;
  };
  for (const auto& [N, HV, V, K] : {std::tuple<int64_t, int, int, int>{1, 32, 128, 128}, {3, 12, 128, 64},
                                    {2, 5, 16, 128}, {4, 3, 66, 128}, {1, 1, 1, 64}, {7, 2, 256, 256}, {2, 4, 3, 256},
                                    {1, 2, 20, 128}})
    for (const bool wide : {false, true}) check(N, HV, V, rows_for(K, wide));
}

TEST(DecodeRowsPlan, EightRowsOnlyPastOneWaveAndAtMostK128) {
  // H200, one token at K = 128: the 4-row instance holds 6 CTAs (24 warps) an SM.
  const int64_t resident = 6 * 132 * kWarps;
  EXPECT_EQ(choose_rows(1, 32, 128, 128, resident), 4);   // 1024 warps: one wave
  EXPECT_EQ(choose_rows(1, 12, 128, 128, resident), 4);
  EXPECT_EQ(choose_rows(8, 12, 128, 128, resident), 4);   // 3072
  EXPECT_EQ(choose_rows(8, 32, 128, 128, resident), 8);   // 8192: 2.6 waves
  EXPECT_EQ(choose_rows(32, 12, 128, 128, resident), 8);  // 12288
  EXPECT_EQ(choose_rows(32, 12, 128, 256, resident), 4);  // K = 256 keeps 4
  EXPECT_EQ(choose_rows(32, 12, 128, 64, resident), 8);
  for (const int K : {64, 128, 256}) {  // the choice never turns back to 4 as the batch grows
    bool wide = false;
    for (int64_t N = 1; N <= 4096; N *= 2) {
      const bool now = choose_rows(N, 32, 128, K, resident) == kMaxRows;
      EXPECT_FALSE(wide && !now) << "N " << N << " K " << K;
      wide = now;
    }
  }
}

TEST(DecodeRowsPlan, PreferenceFallsWithTheBatch) {
  for (const int sms : {1, 108, 132}) {
    for (const int HV : {1, 12, 32, 64}) {
      bool was = true;
      for (int64_t N = 1; N <= 4096; N *= 2) {
        const bool now = preferred(N, HV, 128, sms);
        EXPECT_FALSE(now && !was) << "N " << N << " HV " << HV << " sms " << sms;
        was = now;
      }
    }
  }
  EXPECT_TRUE(preferred(1, 32, 128, 132));     // serving B = 1: the chain, not the stream
  EXPECT_FALSE(preferred(256, 32, 128, 132));  // B = 256: the bulk kernel's stream
  EXPECT_FALSE(preferred(70000, 1, 1, 1 << 20));  // past the grid's z limit, however many SMs
}

}  // namespace
}  // namespace kda::cuda::rows
