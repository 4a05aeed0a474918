// backward_finish.h: the two finishing launches both CUDA backwards share (backward_finish.cu owns their kernels).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/backward_params.h"

namespace kda::cuda {

// dq / dk of every (token, q/k head): dqk [2][B * T][HV][K] per value head, summed over each group of value heads
// in head order, then through the L2 norm's backward (when the forward normalized) into bp.dq / bp.dk.
void launch_finalize_qk(const BackwardParams& bp, const float* dqk, cudaStream_t s);

// ddt_bias [HV, K] and dA_log [HV] from `rows` partial sums per head ([rows][HV][K + 1]: per sequence, or per chunk),
// added in row order in double. Nothing to do for the log-decay gate.
void launch_gate_params(const BackwardParams& bp, const double* part, int64_t rows, cudaStream_t s);

}  // namespace kda::cuda
