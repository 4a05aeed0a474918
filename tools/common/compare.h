// compare.h: the oracle run and the tolerance rules every implementation is judged by (derivation in
// docs/numerics.md): an element-wise bound on EVERY element plus a relative-RMSE bound per tensor.
#pragma once

#include <string>
#include <vector>

#include "common/cases.h"

namespace kda::testing {

// The fp64 reference on the case's (already rounded) inputs: out and final state in float64, plus the size of
// the sum behind every output element (reference::forward's out_mag).
struct Oracle {
  HostTensor out, final_state;  // float64
  std::vector<double> out_mag;
};
Oracle run_oracle(Case& c);

// How precisely an implementation computes before its final rounding.
enum class ComputeClass {
  kFp32,        // fp32 arithmetic throughout, fp32 state (CPU backend, CUDA recurrent kernel)
  kTensorCore,  // bf16/fp16 tensor-core operands, fp32 accumulation and fp32 state
};

// The class a forward backend is judged by: the token-recurrent CUDA kernel and the CPU backends are fp32 code; the
// CUDA chunked path has tensor-core products, and GENERIC (or AUTO on CUDA tensors) runs it wherever it applies, so
// GENERIC is held to the tensor-core class on every input (docs/numerics.md).
inline ComputeClass forward_class(kda_backend_t be, bool on_cuda) {
  if (be == KDA_BACKEND_AUTO) return on_cuda ? ComputeClass::kTensorCore : ComputeClass::kFp32;
  return be == KDA_BACKEND_CUDA_GENERIC || be == KDA_BACKEND_CUDA_CHUNKED || be == KDA_BACKEND_CUDA_HOPPER
             ? ComputeClass::kTensorCore
             : ComputeClass::kFp32;
}

struct Tolerance {
  double u_out;   // unit roundoff of the output dtype
  double c_elem;  // compute allowance, relative to the size of the sum (out) or of the state (final state)
  double c_rms;   // relative-RMSE allowance on top of the output rounding
  std::string describe() const;
};
// longest_sequence: the most tokens one state passes through in the case (0: short, no growth). The fp32 class's
// relative-RMSE allowance grows with its square root (per-token exp and rounding errors add as a random walk).
Tolerance tolerance_for(kda_dtype_t out_dtype, ComputeClass cls, int64_t longest_sequence = 0);
// The longest sequence of a case spec (T without cu_seqlens).
int64_t longest_sequence(const CaseSpec& s);

struct ErrorStats {
  bool pass = true;
  double rel_rmse = 0;     // ||x - ref|| / ||ref||
  double worst_ratio = 0;  // max over elements of |x - ref| / bound (pass needs <= 1)
  int64_t worst_index = -1;
  int64_t nonfinite = 0;   // NaN/Inf (also catches unwritten, NaN-poisoned elements)
  double rmse_bound = 0;
  std::string summary() const;
};

// Output: |x - ref| <= u_out |ref| + (u_out + c_elem) mag  on every element; rel RMSE <= r(u_out) + c_rms, where
// r(u) = u sqrt(min(1, 1/3 + sqrt(ln(1e9) / (2 n_eff)))) is what rounding alone can reach on a tensor of
// n_eff = (sum ref^2)^2 / sum ref^4 effective elements (u / sqrt(3) for large tensors; docs/numerics.md).
ErrorStats compare_out(const HostTensor& got, const Oracle& o, const Tolerance& tol);
// Final state (fp32): |x - ref| <= c_elem (|ref| + rms of ref over its (sequence, head) block); rel RMSE <= c_rms.
ErrorStats compare_state(const HostTensor& got, const Oracle& o, const Tolerance& tol, int64_t block);

// A gradient tensor viewed as [tokens, heads, inner] (dq: [B*T, H, K]; dh0: [N, HV, V*K] with token_block 1;
// ddt_bias: [1, HV, K]; dA_log: [1, 1, HV]). Its element blocks are (token_block consecutive tokens, head).
struct GradLayout {
  int64_t heads = 1, inner = 1, token_block = 64;
};
// Gradient (docs/numerics.md, "Gradients"): every element
//   |x - ref| <= u_g |ref| + c_elem (|ref| + rms of ref over its block + mag)
// with u_g the unit roundoff of the gradient tensor's dtype and mag (optional, else 0) the size of the sum behind
// the element (reference::GradientsT::mag_*); relative RMSE ||x - ref|| / ||max(|ref|, mag)|| <= c_rms + r(u_g).
ErrorStats compare_grad(const HostTensor& got, const std::vector<double>& ref, const std::vector<double>* mag,
                        const Tolerance& tol, const GradLayout& layout);

}  // namespace kda::testing
