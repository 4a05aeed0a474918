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
//
// tangent, if not null, receives the first-order change of the outputs and the final state when every normalized
// key k_hat of the call is scaled by (1 + eps): d out / d eps (contiguous [B, T, HV, V], as out_mag) and d S_T / d eps
// (at the final state's element offsets, which must be present). An implementation normalizes the keys in finite
// precision, and keys that repeat round alike, so that error has one sign along a sequence; with beta near 2 each
// token reflects the state along its key and the error grows with the length (docs/numerics.md, "The key norm's
// rounding"). The verifier fits it (tools/common/compare.h fit_key_norm).
struct KeyScaleTangent {
  double* out;
  double* final_state;
};
Status forward(const ForwardParams& p, double* out_mag = nullptr, const KeyScaleTangent* tangent = nullptr);

}  // namespace kda::reference
