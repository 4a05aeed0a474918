// decode_bulk_plan.h: the sm_90 decode kernel's (decode_bulk.cu) work plan and pipeline bookkeeping as host-device
// functions, so the CPU tests (tests/cpu/test_decode_bulk_plan.cpp) run the same numbers the kernel runs: which tiles
// a persistent CTA takes, which (sequence, value head, rows) a tile is, and which stage and mbarrier phase parity the
// producer and the consumers wait on at their i-th tile.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace kda::cuda::bulk {

constexpr int kRows = 32;  // state rows per tile

// Tile index -> (sequence n, value head hv, first row): row blocks fastest, so the tiles of one head (which stage the
// same q / k / g) run close together and their loads hit L2.
struct TileCoord {
  int64_t n;
  int hv, row0;
};
KDA_HOST_DEVICE int row_blocks(int V) { return (V + kRows - 1) / kRows; }
KDA_HOST_DEVICE int64_t tile_count(int64_t N, int HV, int V) { return N * HV * row_blocks(V); }
KDA_HOST_DEVICE TileCoord tile_coord(int64_t tile, int HV, int blocks) {
  const int rb = static_cast<int>(tile % blocks);
  const int64_t nh = tile / blocks;
  return {nh / HV, static_cast<int>(nh % HV), rb * kRows};
}

// CTA `cta` of `ctas` takes tiles cta, cta + ctas, ...; its i-th tile uses stage i % stages. Each stage has a full
// barrier (the producer's bytes and stores -> the consumers) and an empty one (the consumers' release -> the
// producer); the k-th use of a stage (k = i / stages) completes phase k of both.
KDA_HOST_DEVICE int64_t cta_tile(int64_t cta, int64_t ctas, int64_t i) { return cta + i * ctas; }
KDA_HOST_DEVICE int stage_of(int64_t i, int stages) { return static_cast<int>(i % stages); }
// Consumers wait for phase i / stages of the full barrier to complete: its parity.
KDA_HOST_DEVICE uint32_t full_parity(int64_t i, int stages) { return static_cast<uint32_t>((i / stages) & 1); }
// The producer, before refilling a stage for its i-th tile (i >= stages), waits for the consumers' release of the
// previous use, phase i / stages - 1 of the empty barrier.
KDA_HOST_DEVICE bool producer_waits(int64_t i, int stages) { return i >= stages; }
KDA_HOST_DEVICE uint32_t empty_parity(int64_t i, int stages) { return static_cast<uint32_t>((i / stages - 1) & 1); }

}  // namespace kda::cuda::bulk
