// decode_rows_plan.h: the small-batch decode kernel's (decode_rows.cu) work split as host-device functions, so the
// CPU tests (tests/cpu/test_decode_bulk_plan.cpp) check the same numbers the kernel runs: which (sequence, value
// head, rows) each warp owns, and when the dispatcher (generic/decode.cu) prefers this kernel.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace kda::cuda::rows {

constexpr int kRows = 4;   // state rows per warp: 4 x K fp32 in registers (16 floats a lane at K = 128)
constexpr int kWarps = 4;  // warps per CTA, each on its own rows (no barrier between them)

// Grid: z = sequence n, y = value head hv, x = groups of kWarps row blocks of kRows rows. The task is read off the
// CTA's coordinates with no division: a 64-bit division (the first version's flat task index) put ~200 dependent
// instructions ahead of the slot's load, the head of the chain.
KDA_HOST_DEVICE int row_blocks(int V) { return (V + kRows - 1) / kRows; }
KDA_HOST_DEVICE int grid_x(int V) { return (row_blocks(V) + kWarps - 1) / kWarps; }
KDA_HOST_DEVICE int row0_of(int block_x, int warp) { return (block_x * kWarps + warp) * kRows; }  // >= V: idle warp
KDA_HOST_DEVICE int64_t warp_count(int64_t N, int HV, int V) { return N * HV * row_blocks(V); }

// Whether the dispatcher takes this kernel over the persistent bulk-copy one (hopper/decode_bulk.cu). Measured on the
// H200 (session 14, K = V = 128, bench/LEDGER.md): this kernel is faster through H = 32 B = 8 (8192 warps: 13.4 us
// against 14.3-14.6) and H = 12 B = 32 (12288: 18.9 against 19.3), level at H = 32 B = 32 (32768: 44.5 against 43.8),
// and slower above (B = 256: 339 against 295 us), where the bulk kernel's pipeline keeps every SM streaming. Hence up
// to 128 warps per SM. N within the grid's z limit.
constexpr int64_t kMaxWarpsPerSm = 128;
KDA_HOST_DEVICE bool preferred(int64_t N, int HV, int V, int sms) {
  return N <= 65535 && warp_count(N, HV, V) <= kMaxWarpsPerSm * sms;
}

}  // namespace kda::cuda::rows
