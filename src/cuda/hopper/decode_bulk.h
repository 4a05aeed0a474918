// decode_bulk.h: the sm_90 decode kernel's launcher (decode_bulk.cu), called by the decode dispatcher
// (generic/decode.cu) only.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace kda::cuda {

// Persistent CTAs streaming state tiles through a bulk-copy pipeline. supported(): 1 <= T <= 4, K in {64, 128, 256}, a
// value-first fp32 or bf16 pool of contiguous 16-byte aligned rows, an sm_90 current device running sm_90 code.
bool hopper_decode_supported(const DecodeParams& p);
// Launches on stream (the current device); returns the setup's error (the launch's is cudaGetLastError's).
cudaError_t hopper_decode(const DecodeParams& p, int sms, cudaStream_t stream);

}  // namespace kda::cuda
