// decode_fusions.h: the CUDA decode's fusions (decode_fusions.cu) as decode.cu's launcher uses them: the workspace
// they need, the decode kernel's view of a fused call, and the two kernels' launches (host code; launch errors are
// read by the caller).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"

namespace kda::cuda {

// Workspace parts, each 256-byte aligned: conv'd q | k | v per token [N, T, 2 H K + HV V] fp32 (conv on), then the
// output before the norm [N, T, HV, V] fp32 (norm on).
struct FusionLayout {
  int64_t conv_bytes = 0, norm_bytes = 0;
  explicit FusionLayout(const DecodeParams& p);
  int64_t bytes() const { return conv_bytes + norm_bytes; }
};

// p with q, k, v read from the conv'd inputs (conv on) and out written to the pre-norm buffer (norm on), fusions off.
DecodeParams fusion_inner_params(const DecodeParams& p, void* workspace);
void launch_decode_conv(const DecodeParams& p, void* workspace, int sms, cudaStream_t s);
void launch_decode_norm(const DecodeParams& p, const void* workspace, int sms, cudaStream_t s);

}  // namespace kda::cuda
