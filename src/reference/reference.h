// reference.h: the float64 token-by-token recurrence of the operator; the oracle every other path is judged by.
#pragma once

#include "api/status.h"
#include "common/params.h"

namespace kda::reference {

// Computes the forward of p on the host in float64 and writes p.out and p.final_state (rounded once to their
// dtypes; fp64 destinations get the exact float64 values). Threads over (sequence, value head).
// out_mag, if not null, receives for every output element (contiguous [B, T, HV, V]) the size of the sum that
// formed it, |scale| * sum_k |S_t[v, k] * q_hat_t[k]|: the scale of the rounding error any implementation can
// make in that element, used by the tolerance rules of tools/common/compare.h.
Status forward(const ForwardParams& p, double* out_mag = nullptr);

}  // namespace kda::reference
