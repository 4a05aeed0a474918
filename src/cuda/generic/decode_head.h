// decode_head.h: the one-kernel fused decode's launcher (decode_head.cu), called by the decode dispatcher
// (generic/decode.cu) only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"

namespace kda::cuda {

// One CTA per (sequence, head): the short conv, the update and the gated RMSNorm in one kernel. supported(): the conv
// or the norm asked for, HV = H, K and V in {64, 128}, 1 <= T <= 4, a value-first fp32 or bf16 pool of contiguous
// rows with 16-byte aligned slot and head starts (any GPU the library runs on). p is the call's own parameters
// (q, k, v, out as given, not fusion_inner_params').
bool head_decode_supported(const DecodeParams& p);
// Whether the dispatcher takes this kernel over the three-kernel form: while its CTAs (one per sequence and head, one
// per SM) fit in one wave. Measured on the H200 (session 15, H32, conv + norm): B1 8.3 us against 11.5, B32 74.8
// against 58.9, B256 573 against 363: past one wave each SM runs one head's load, update and store phases in series,
// where the bulk kernel pipelines them.
inline bool head_decode_preferred(int64_t N, int HV, int sms) { return N * HV <= sms; }
// Launches on stream (the current device); the launch's error is cudaGetLastError's.
void head_decode(const DecodeParams& p, cudaStream_t stream);

}  // namespace kda::cuda
