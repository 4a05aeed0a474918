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
  // With key_tangent: d out / d eps and d final_state / d eps, every normalized key scaled by (1 + eps)
  // (reference::KeyScaleTangent), element for element of out and final_state; empty otherwise.
  std::vector<double> out_tangent, state_tangent;
};
Oracle run_oracle(Case& c, bool key_tangent = false);

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
// shift (optional): per element, subtracted from x before it is judged (fit_key_norm's correction).
ErrorStats compare_out(const HostTensor& got, const Oracle& o, const Tolerance& tol,
                       const std::vector<double>* shift = nullptr);
// Final state (fp32): |x - ref| <= c_elem (|ref| + rms of ref over its (sequence, head) block); rel RMSE <= c_rms.
ErrorStats compare_state(const HostTensor& got, const Oracle& o, const Tolerance& tol, int64_t block,
                         const std::vector<double>* shift = nullptr);

// One delta per group by weighted least squares along given tangents: delta = sum w e t / sum w t^2 over the
// group's elements (error e, tangent t, weight w = 1 / bound^2: an element counts by its share of its bound),
// clamped to [-limit, limit]. Non-finite errors are left out (they fail on their own).
class DeltaFit {
 public:
  explicit DeltaFit(int64_t groups) : num_(static_cast<size_t>(groups), 0.0), den_(num_.size(), 0.0) {}
  void add(int64_t group, double err, double tangent, double bound);
  // The deltas, and in max_u the largest |delta| in units of 2^-24.
  std::vector<double> solve(double limit, double* max_u) const;

 private:
  std::vector<double> num_, den_;
};

// The key norm's rounding (docs/numerics.md, "The key norm's rounding"). With the in-kernel L2 norm every
// implementation forms k_hat = k / sqrt(sum k^2 + eps) in finite precision, whose scale errs by up to
// key_norm_delta_limit(K) (relative), with one sign wherever keys repeat (equal keys round alike). With beta near 2
// each token reflects the state along its key, and that error grows with the sequence's length: a plain fp32 token
// recurrence ends 5x past the fp32 class's bound on near-identical keys at beta near 2, while the rest of its
// arithmetic is within it. fit_key_norm takes it out: per q / k head (its keys, in every sequence) the one delta in
// [-limit, limit] that best explains the errors of the head's outputs and final states along the oracle's tangents
// (least squares, each element weighted by 1 / its bound^2), as shifts for compare_out / compare_state. One number
// per head along one direction: an error of any other shape (a dropped channel, a truncated history, a norm taken
// another way) is left whole.
struct KeyNormFit {
  std::vector<double> out_shift, state_shift;  // delta * tangent, element for element (state_shift empty without a state)
  double max_delta = 0;                        // the largest |delta| of the case's heads, relative (units of 2^-24: / u)
};
// (K / 2 + 5) 2^-24: the rounding of a sum of K squares in any order, (K - 1) u, halved by the square root, plus
// eps's add, the square root, the division or an rsqrt (<= 2 ulp), and the product k / norm (docs/numerics.md).
double key_norm_delta_limit(int K);
// o must come from run_oracle(c, true); state null when the case has no final state.
KeyNormFit fit_key_norm(const Case& c, const HostTensor& out, const HostTensor* state, const Oracle& o,
                        const Tolerance& tol);

// The forward's verdict on a case: compare_out, and compare_state where the case has a final state; where those fail
// with the in-kernel key norm and nothing non-finite, the same again with the key norm's rounding fitted out
// (fit_key_norm, on run_oracle(c, true): the tangents double the oracle's work, so only then). Every forward check
// judges through it: kda-verify's cases and the CPU and GPU tests.
struct ForwardVerdict {
  ErrorStats out, state;
  bool pass = false;
  double key_norm_delta = -1;  // the fit's largest |delta| in units of 2^-24; -1 where the plain bounds held
};
ForwardVerdict judge_forward(Case& c, const Oracle& o, const HostTensor& out, const HostTensor* state,
                             const Tolerance& tol);

// A gradient tensor viewed as [tokens, heads, inner] (dq: [B*T, H, K]; dh0: [N, HV, V*K] with token_block 1;
// ddt_bias: [1, HV, K]; dA_log: [1, 1, HV]). Its element blocks are (token_block consecutive tokens, head).
struct GradLayout {
  int64_t heads = 1, inner = 1, token_block = 64;
};
// Gradient (docs/numerics.md, "Gradients"): every element
//   |x - ref| <= u_g |ref| + c_elem (|ref| + rms of ref over its block + mag)
// with u_g the unit roundoff of the gradient tensor's dtype and mag (optional, else 0) the size of the sum behind
// the element (reference::GradientsT::mag_*); relative RMSE ||x - ref|| / ||max(|ref|, mag)|| <= c_rms + r(u_g).
// shift as for compare_out.
ErrorStats compare_grad(const HostTensor& got, const std::vector<double>& ref, const std::vector<double>* mag,
                        const Tolerance& tol, const GradLayout& layout, const std::vector<double>* shift = nullptr);
// compare_grad's element bounds (for fitting: the key norm's rounding, verify.cpp's backward cases).
std::vector<double> grad_bounds(const HostTensor& got, const std::vector<double>& ref, const std::vector<double>* mag,
                                const Tolerance& tol, const GradLayout& layout);

}  // namespace kda::testing
