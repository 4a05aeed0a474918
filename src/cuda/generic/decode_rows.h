// decode_rows.h: the small-batch decode kernel's launcher (decode_rows.cu), called by the decode dispatcher
// (generic/decode.cu) only.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace kda::cuda {

// One warp per (sequence, value head, rows::choose_rows rows), the state in registers. supported(): 1 <= T <= 4, K in
// {64, 128, 256}, a value-first fp32 or bf16 pool of contiguous rows, 16-byte aligned slot and head starts (any GPU
// the library runs on).
bool rows_decode_supported(const DecodeParams& p);
// Launches on stream (the current device, `sms` SMs); the launch's error is cudaGetLastError's.
void rows_decode(const DecodeParams& p, int sms, cudaStream_t stream);

}  // namespace kda::cuda
