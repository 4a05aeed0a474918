// decode_bulk_plan.h: the sm_90 decode kernel's (decode_bulk.cu) work plan and pipeline bookkeeping as host-device
// functions, so the CPU tests (tests/cpu/test_decode_bulk_plan.cpp) run the same numbers the kernel runs: how tiles
// group into units, which units a persistent CTA takes, which (sequence, value head, rows) they are, and which stage
// and mbarrier phase parity the producer and the consumers wait on at their i-th tile.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace kda::cuda::bulk {

constexpr int kRows = 32;  // state rows per tile

KDA_HOST_DEVICE int row_blocks(int V) { return (V + kRows - 1) / kRows; }

// Work unit = `per_unit` consecutive row tiles of one (sequence n, value head hv): they share the sequence's slot and
// the head's q / k / g / beta, which the producer loads and stages once per unit instead of once per tile.
struct Unit {
  int64_t n;
  int hv;
  int row0;  // first row of the unit's first tile
};
// Tiles per unit: a divisor of the head's row tiles (so every unit is whole and a CTA's i-th tile is tile i % per
// of its unit i / per), at most the stages (the producer issues a unit's copies before it stages the unit, so a unit
// longer than the ring would wait for a stage that only its own staging frees: the CPU replay shows the deadlock),
// made smaller while the units would not fill the resident CTAs (at small batches a head's tiles spread over CTAs
// and update in parallel).
KDA_HOST_DEVICE int tiles_per_unit(int64_t N, int HV, int V, int stages, int64_t resident_ctas) {
  const int blocks = row_blocks(V);
  int per = blocks < stages ? blocks : stages;
  while (blocks % per) --per;
  while (per > 1 && N * HV * (blocks / per) < resident_ctas) {
    --per;
    while (blocks % per) --per;
  }
  return per;
}
KDA_HOST_DEVICE int64_t unit_count(int64_t N, int HV, int V, int per_unit) {
  return N * HV * (row_blocks(V) / per_unit);
}
// Unit index -> its tiles: the units of one head are consecutive, so CTAs running side by side share its loads in L2.
KDA_HOST_DEVICE Unit unit_of(int64_t unit, int HV, int V, int per_unit) {
  const int per_head = row_blocks(V) / per_unit;
  const int64_t nh = unit / per_head;
  return {nh / HV, static_cast<int>(nh % HV), static_cast<int>(unit % per_head) * per_unit * kRows};
}

// CTA `cta` of `ctas` takes units cta, cta + ctas, ...; its i-th tile is tile i % per_unit of its unit i / per_unit
// and uses stage i % stages. Each stage has a full barrier (the producer's bytes and stores -> the consumers) and an
// empty one (the consumers' release -> the producer); the k-th use of a stage (k = i / stages) completes phase k of
// both.
KDA_HOST_DEVICE int64_t cta_unit(int64_t cta, int64_t ctas, int64_t k) { return cta + k * ctas; }
// How many tiles CTA `cta` of `ctas` runs: per_unit for each of its units.
KDA_HOST_DEVICE int cta_tiles(int64_t cta, int64_t ctas, int64_t units, int per_unit) {
  return cta < units ? static_cast<int>((units - cta + ctas - 1) / ctas) * per_unit : 0;
}
KDA_HOST_DEVICE int stage_of(int64_t i, int stages) { return static_cast<int>(i % stages); }
// Consumers wait for phase i / stages of the full barrier to complete: its parity.
KDA_HOST_DEVICE uint32_t full_parity(int64_t i, int stages) { return static_cast<uint32_t>((i / stages) & 1); }
// The producer, before refilling a stage for its i-th tile (i >= stages), waits for the consumers' release of the
// previous use, phase i / stages - 1 of the empty barrier.
KDA_HOST_DEVICE bool producer_waits(int64_t i, int stages) { return i >= stages; }
KDA_HOST_DEVICE uint32_t empty_parity(int64_t i, int stages) { return static_cast<uint32_t>((i / stages - 1) & 1); }

// The consumers' row sums (decode_bulk.cu, halving_row_sum): a warp holds 8 rows, every lane a partial of each; at
// masks 16, 8, 4 a lane keeps half of its remaining rows (the upper half where its lane bit is set) and adds its
// partner's partials of that half, so after three steps it holds one row's sum over 8 lanes, and masks 2 and 1 finish
// it over the warp: 9 shuffles for all 8 rows where 8 butterflies take 40. Which row lane `lane` then holds, and one
// lane holding row r (the one with lane bits 0 and 1 clear).
constexpr int kHalvingRows = 8;
KDA_HOST_DEVICE constexpr int halving_row_of_lane(int lane) { return (lane >> 2) & 7; }  // lane bits 4, 3, 2
KDA_HOST_DEVICE constexpr int halving_lane_of_row(int r) { return r << 2; }

}  // namespace kda::cuda::bulk
