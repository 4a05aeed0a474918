// chunk_kernels.h: the launch entry points of the two-phase chunked forward's kernels, for its launcher
// (forward_chunked.cu). Host code; each returns the cudaError_t of its own setup (the launch error is read by the
// caller).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/params.h"

namespace kda::cuda::chunk {

// Phase 1 (chunk_prepare.cu): one CTA per (chunk-list entry, value head) of a capacity-sized grid.
size_t prepare_smem_bytes(int K, int V);
cudaError_t launch_prepare(const ForwardParams& p, char* workspace, int64_t cap, cudaStream_t s);

// Phase 2 (chunk_state.cu): one CTA per (sequence, value head, V tile of bv columns).
size_t state_smem_bytes(int K, int bv);
cudaError_t launch_state(const ForwardParams& p, const char* workspace, int bv, cudaStream_t s);

}  // namespace kda::cuda::chunk
