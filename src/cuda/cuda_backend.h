// cuda_backend.h: the host-side interface of the CUDA backend, as the C ABI sees it. Implemented by
// src/cuda/generic/ when the library is built with CUDA, else by src/cuda/no_cuda.cpp.
#pragma once

#include <cstddef>

#include "api/status.h"
#include "common/backward_params.h"
#include "common/params.h"

namespace kda::cuda {

// Whether this build carries CUDA kernels.
bool compiled_with_cuda();

// The exact token-recurrent forward (KDA_BACKEND_CUDA_RECURRENT, and KDA_BACKEND_CUDA_GENERIC's fallback): fp32
// state in registers, one token at a time; every legal input; no workspace. Asynchronous on stream, no host sync.
Status generic_forward(const ForwardParams& p, void* stream);

// The two-phase chunked tensor-core forward (KDA_BACKEND_CUDA_CHUNKED, and KDA_BACKEND_CUDA_GENERIC where supported;
// src/cuda/generic/forward_chunked.cu): supported for K, V in {64, 128}, bf16/fp16 q/k/v, unit innermost strides and
// 16-byte aligned rows, and a device with enough opt-in shared memory per block. Needs the caller's workspace
// (chunked_forward_workspace_size); asynchronous on stream, no host sync, CUDA-graph capturable.
bool chunked_forward_supported(const ForwardParams& p);
// Where that path has its sm_90a state passes (KDA_BACKEND_CUDA_HOPPER, and GENERIC / AUTO where it applies): inputs
// the chunked path takes, K = 128, on an sm_90 device, in a build with CuTe (the forward's and the backward's own
// support are checked as CHUNKED's). With p.backend == KDA_BACKEND_CUDA_HOPPER the chunked forward and backward run
// them; with KDA_BACKEND_CUDA_CHUNKED every kernel stays on mma.sync.
bool hopper_chunked_supported(const ForwardParams& p);
Status chunked_forward_workspace_size(const ForwardParams& p, size_t* bytes);
Status chunked_forward(const ForwardParams& p, void* workspace, size_t workspace_bytes, void* stream);

// The exact backward (KDA_BACKEND_CUDA_GENERIC, src/cuda/generic/backward_generic.cu): the token-recurrent reverse
// in fp32 with 64-token recompute segments, deterministic; K and V in {64, 128}. support() says NOT_SUPPORTED
// (naming why) for anything else; the workspace size is exact; asynchronous on stream, no host sync.
Status generic_backward_support(const BackwardParams& p);
Status generic_backward_workspace_size(const BackwardParams& p, size_t* bytes);
Status generic_backward(const BackwardParams& p, void* workspace, size_t workspace_bytes, void* stream);

// The chunked backward (KDA_BACKEND_CUDA_CHUNKED, src/cuda/generic/backward_chunked.cu): recompute of the chunked
// forward's two phases keeping A', T, the chunk-start states and V_new; the reverse state pass (bf16x3 mma.sync);
// the per-chunk gradient pass (fp32); then the group sums. The inputs the chunked forward takes, fp32 dfinal_state;
// support() says NOT_SUPPORTED (naming why) otherwise. Deterministic, no host sync, CUDA-graph capturable; the
// workspace holds every saved tensor (about 0.2 MB per chunk and value head at K = V = 128).
Status chunked_backward_support(const BackwardParams& p);
Status chunked_backward_workspace_size(const BackwardParams& p, size_t* bytes);
Status chunked_backward(const BackwardParams& p, void* workspace, size_t workspace_bytes, void* stream);

// Decode against a state pool (one CTA per (sequence, value head, row block)); asynchronous on stream. The fused
// conv and gated RMSNorm (decode_fusions.cu) run as kernels before and after it in the same call and need
// decode_workspace_size(p) bytes of caller workspace, 16-byte aligned (0 without fusions).
// Dispatch: the sm_90 bulk-copy kernel (src/cuda/hopper/decode_bulk.h) where it applies, except under KDA_BACKEND_CUDA_RECURRENT (the
// portable kernel); KDA_BACKEND_CUDA_HOPPER is NOT_SUPPORTED where it does not apply.
size_t decode_workspace_size(const DecodeParams& p);
Status decode(const DecodeParams& p, void* workspace, size_t workspace_bytes, void* stream);


}  // namespace kda::cuda
