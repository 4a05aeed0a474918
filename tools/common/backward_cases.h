// backward_cases.h: what the backward verifier and the backward tests share: upstream gradients drawn from a seed,
// gradient buffers shaped like the inputs, a host (CPU / reference) backward call, the float64 oracle backward, and
// the list of gradients to judge with their compare_grad layouts. The device call is in device.h.
#pragma once

#include <string>
#include <vector>

#include "common/cases.h"
#include "common/compare.h"
#include "reference/backward.h"

namespace kda::testing {

// Gradient tensors of a case. missing: names of gradients an outside implementation did not return.
struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
  std::vector<std::string> missing;
};

// Upstream gradients: dout [B, T, HV, V] in q's dtype, N(0, 1); dfinal (when wanted) fp32 in the state layout,
// N(0, 0.1^2).
struct Upstream {
  HostTensor dout, dfinal;
};
Upstream make_upstream(const Case& c, bool with_dfinal, uint64_t seed);

// Gradient buffers of case c, NaN-poisoned: dq, dk, dv, dg, dbeta in fp32 or (input_dtype) their input's dtype;
// dA_log, ddt_bias, dh0 fp32, present where their input is.
Grads make_grads(const Case& c, bool input_dtype);

// kda_backward on host memory with backend be (CPU or REFERENCE); fills *g (already made by make_grads).
kda_status_t run_backward_host(Case& c, const Upstream& up, kda_backend_t be, Grads* g);

// The float64 reference backward on the case's rounded inputs and upstream gradients (key_scale: reference::backward's,
// every normalized key scaled by it).
reference::Gradients backward_oracle(Case& c, const Upstream& up, double key_scale = 1.0);

// One gradient to judge: its name, the tensor, the oracle (and magnitude sums where the reference gives them) and
// its compare_grad layout. Only gradients whose input is present are listed.
struct GradItem {
  std::string name;
  const HostTensor* got;
  const std::vector<double>* ref;
  const std::vector<double>* mag;
  GradLayout layout;
};
std::vector<GradItem> grad_items(const CaseSpec& s, const Grads& g, const reference::Gradients& ref);
// The q / k head whose keys element i of gradient `it` depends on (the key norm's fit is one delta per such head).
int64_t key_head_of(const GradItem& it, const CaseSpec& s, int64_t i);

}  // namespace kda::testing
