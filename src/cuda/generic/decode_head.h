// decode_head.h: the one-kernel fused decode's launcher (decode_head.cu), called by the decode dispatcher
// (generic/decode.cu) only.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace kda::cuda {

// One CTA per (sequence, head): the short conv, the update and the gated RMSNorm in one kernel. supported(): the conv
// or the norm asked for, HV = H, K and V in {64, 128}, 1 <= T <= 4, a value-first fp32 or bf16 pool of contiguous
// rows with 16-byte aligned slot and head starts (any GPU the library runs on). p is the call's own parameters
// (q, k, v, out as given, not fusion_inner_params').
bool head_decode_supported(const DecodeParams& p);
// Launches on stream (the current device); the launch's error is cudaGetLastError's.
void head_decode(const DecodeParams& p, cudaStream_t stream);

}  // namespace kda::cuda
