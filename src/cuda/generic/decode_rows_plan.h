// decode_rows_plan.h: the small-batch decode kernel's (decode_rows.cu) work split as host-device functions, so the
// CPU tests (tests/cpu/test_decode_bulk_plan.cpp) check the same numbers the kernel runs: which (sequence, value
// head, rows) each warp owns, and when the dispatcher (generic/decode.cu) prefers this kernel.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace kda::cuda::rows {

constexpr int kWarps = 4;  // warps per CTA, each on its own rows (no barrier between them)

// State rows per warp, R: 4, or 8 where K <= 128 and the batch is past one resident wave (choose_rows). R x K fp32
// in registers, R K / 32 floats a lane. Measured on the H200 (session 32, K = V = 128, one token, bench/LEDGER.md): with
// 8 rows a warp carries 4 KB through its slot -> state chain instead of 2 KB and a batch needs half the warps, so fewer
// waves of that two-round-trip chain: H = 32 B = 8 12.33 -> 11.97 us, H = 12 B = 32 17.25 -> 16.75; but within one wave
// the longer chain a warp costs (H = 12 B = 1 3.00 -> 3.34 us; H = 32 B = 1, H = 12 B = 8 level). Never 8 at K = 256
// (64 floats a lane).
constexpr int kMaxRows = 8;
KDA_HOST_DEVICE constexpr int rows_for(int K, bool wide) { return wide && K <= 128 ? kMaxRows : 4; }

// Grid: z = sequence n, y = value head hv, x = groups of kWarps row blocks of R rows. The task is read off the
// CTA's coordinates with no division: a 64-bit division (the first version's flat task index) put ~200 dependent
// instructions ahead of the slot's load, the head of the chain.
KDA_HOST_DEVICE int row_blocks(int V, int R) { return (V + R - 1) / R; }
KDA_HOST_DEVICE int grid_x(int V, int R) { return (row_blocks(V, R) + kWarps - 1) / kWarps; }
KDA_HOST_DEVICE int row0_of(int block_x, int warp, int R) { return (block_x * kWarps + warp) * R; }  // >= V: idle
KDA_HOST_DEVICE int64_t warp_count(int64_t N, int HV, int V, int R) { return N * HV * row_blocks(V, R); }

// Whether the dispatcher takes this kernel over the persistent bulk-copy one (hopper/decode_bulk.cu). Measured on the
// H200 (session 14, K = V = 128, 4 rows a warp, bench/LEDGER.md): this kernel is faster through H = 32 B = 8 (8192
// warps: 13.4 us against 14.3-14.6) and H = 12 B = 32 (12288: 18.9 against 19.3), level at H = 32 B = 32 (32768: 44.5
// against 43.8), and slower above (B = 256: 339 against 295 us), where the bulk kernel's pipeline keeps every SM
// streaming. Hence up to 512 state rows (128 warps of 4 rows) per SM. N within the grid's z limit.
constexpr int64_t kMaxRowsPerSm = 512;
KDA_HOST_DEVICE bool preferred(int64_t N, int HV, int V, int sms) {
  return N <= 65535 && N * HV * int64_t{V} <= kMaxRowsPerSm * sms;
}

// The launch's rows per warp: 8 (at K <= 128) where the 4-row grid's warps exceed what the device holds at once,
// resident_warps (the 4-row instance's occupancy times the SMs times kWarps), else 4. Measured against 4 rows
// everywhere (session 33, bench/LEDGER.md): H = 32 B = 8 -2.5%, H = 12 B = 32 -3.4%, B = 1 level.
KDA_HOST_DEVICE int choose_rows(int64_t N, int HV, int V, int K, int64_t resident_warps) {
  return rows_for(K, warp_count(N, HV, V, 4) > resident_warps);
}

}  // namespace kda::cuda::rows
