// cuda_backend.h: the host-side interface of the CUDA backend, as the C ABI sees it. Implemented by
// src/cuda/generic/ when the library is built with CUDA, else by src/cuda/no_cuda.cpp.
#pragma once

#include <cstddef>

#include "api/status.h"
#include "common/params.h"

namespace kda::cuda {

// Whether this build carries CUDA kernels.
bool compiled_with_cuda();

// The portable sm80+ forward: workspace query and the call (asynchronous on stream, no host sync).
Status generic_forward_workspace_size(const ForwardParams& p, size_t* bytes);
Status generic_forward(const ForwardParams& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace kda::cuda
