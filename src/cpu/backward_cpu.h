// backward_cpu.h: the CPU backend's backward core: one (sequence, value head)'s reverse in the chunked (WY) form,
// in float64 with Eigen matrix products (docs/backward.md; the formulas of scripts/models/chunk_backward.py's safe
// form). The loading of the inputs and the chain rules through the norms, the gate activation and the beta sigmoid
// are the reference backward's (src/reference/backward.cpp), which calls this core for KDA_BACKEND_CPU.
#pragma once

#include <cstdint>

namespace kda::cpu {

// Inputs of one sequence (row-major, L tokens): qh, kh [L, K] (after the L2 norm, q not yet scaled), v [L, V],
// glog [L, K] (the log-decay after the gate activation), beta [L] (after the sigmoid), dout [L, V]; S [V, K] the
// initial state (value-first; zeros if none); G [V, K] the final state's gradient on entry (zeros if none), dS of
// the initial state on return. Outputs (overwritten): dqh, dkh [L, K] (of qh, kh), dv [L, V], dglog [L, K],
// dbeta [L] (of the activated beta). C: the chunk length (any C >= 1; the backend passes chunk_size, or its default).
void chunked_sequence_backward(int64_t L, int K, int V, double scale, const double* qh, const double* kh,
                               const double* v, const double* glog, const double* beta, const double* dout,
                               const double* S, double* G, double* dqh, double* dkh, double* dv, double* dglog,
                               double* dbeta, int C);

}  // namespace kda::cpu
