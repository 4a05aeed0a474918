// verify.h: the acceptance suite behind kda-verify: named suites of case families (workloads, stress probes,
// layout probes, distribution holdouts, behaviour probes), implementations under judgement, and the verdict of
// one case. Every case draws fresh inputs from the run's seed; all are judged by compare.h's rules.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/backward_cases.h"
#include "common/cases.h"
#include "common/compare.h"
#include "common/decode_cases.h"

namespace kda::testing {

// An implementation under judgement. run() computes case c into outs (host buffers, NaN-poisoned by the caller).
// replay(), where the implementation can capture its call in a CUDA graph, captures a call on `first`, replays
// it after copying `second`'s inputs over the device inputs, and downloads the result into outs.
struct Implementation {
  std::string name;
  ComputeClass cls = ComputeClass::kFp32;         // the forward's class
  ComputeClass decode_cls = ComputeClass::kFp32;  // decode's class
  std::function<kda_status_t(Case& c, Outputs& outs)> run;
  std::function<kda_status_t(Case& first, Case& second, Outputs& outs)> replay;
  // Decode against the case's pool: out and pool (a copy of d.pool) are filled in place, and with the fused conv
  // (d.c.spec.conv) conv[0..2], copies of d.conv_state (null otherwise).
  std::function<kda_status_t(DecodeCase& d, HostTensor& out, HostTensor& pool, HostTensor* conv)> decode;
  // Backward: fills g (made by make_grads; NaN-poisoned) from the case and its upstream gradients. Gradients an
  // outside implementation does not return are listed in g.missing ("not provided").
  ComputeClass backward_cls = ComputeClass::kFp32;
  bool backward_grads_in_input_dtype = false;  // ask for dq..dbeta in their inputs' dtypes (else fp32)
  std::function<kda_status_t(Case& c, const Upstream& up, Grads& g)> backward;
};

// "cpu", "reference", "cuda-generic", "cuda-chunked", "cuda-recurrent" (the CUDA ones need a device), or "cmd:COMMAND" for an
// external implementation run through the file protocol of external_impl.h. Empty run if unknown.
Implementation implementation_by_name(const std::string& name);

enum class Probe {
  kNumerics,    // one call, every element judged against the oracle
  kRepeat,      // two identical calls must give identical bits (and the first is judged)
  kAfterOther,  // a call on another case first; then this case must match a fresh call bit for bit
  kGraphReplay, // capture on one input set, replay on another: judged against the second set's oracle
};

struct VerifyCase {
  std::string family;  // workload, stress, layout, holdout, behaviour
  CaseSpec spec;
  Probe probe = Probe::kNumerics;
};

// The cases of suite "quick" (CPU-sized, CI) or "full" (full-size, the GPU run); decode suites are separate
// (verify_decode_suite). Random layouts and input
// families are drawn from seed, so each run differs; the seed replays a run.
std::vector<VerifyCase> verify_suite(const std::string& suite, uint64_t seed);

// Decode suites: "decode-quick" (small, CI) and "decode-full" (serving sizes: H = 32 and 12, batch up to 512,
// speculative verify with num_accepted_tokens, padding, both pool layouts, hostile gates and states).
std::vector<DecodeSpec> verify_decode_suite(const std::string& suite);

// A backward case: the forward case, whether a final-state gradient flows back, and whether our own
// implementations are asked for gradients in the inputs' dtypes (bf16/fp16) instead of fp32.
struct BackwardCase {
  std::string family;
  CaseSpec spec;
  bool dfinal = true;
  bool grads_in_input_dtype = false;
};

// "backward-quick" (CPU-sized, CI: seconds) and "backward-full" (full-size, the GPU machine: the float64 oracle
// backward takes minutes for the whole suite on 16 cores). Empty for other names.
std::vector<BackwardCase> verify_backward_suite(const std::string& suite, uint64_t seed);

// One gradient's verdict: judged by compare_grad, or not provided by the implementation (an outside one may not
// compute every gradient: that is reported, never passed silently).
struct GradVerdict {
  std::string name;
  bool provided = true;
  ErrorStats e;
  double baseline_rel_rmse = std::numeric_limits<double>::quiet_NaN();  // with --baseline
  // e's relative RMSE before the key norm's fit (the same as e's without one): what --baseline compares, the
  // baseline's figure being unfitted too.
  double plain_rel_rmse = std::numeric_limits<double>::quiet_NaN();
};

struct VerifyResult {
  std::string name, family;
  uint64_t seed = 0;
  bool pass = false;
  bool skipped = false;  // probe not applicable to this implementation (graph replay on the CPU)
  ErrorStats out, state;
  std::vector<GradVerdict> grads;  // backward cases: every gradient of the case
  std::string error;     // status message, or what a behaviour probe found
  double seconds = 0;
  double oracle_seconds = 0;  // backward cases: the float64 oracle backward's share of seconds
  // Judged with the key norm's rounding fitted out (compare.h fit_key_norm; forward and backward cases): the largest
  // |delta| of the case's q / k heads in units of 2^-24; -1 where the plain bounds held (no fit).
  double key_norm_delta = -1;
};

// Judges implementation impl on case vc with inputs drawn from seed.
VerifyResult verify_case(const VerifyCase& vc, const Implementation& impl, uint64_t seed);

// Judges impl's decode on case s (outputs, written slots, untouched slots bit for bit).
VerifyResult verify_decode_case(const DecodeSpec& s, const Implementation& impl, uint64_t seed);

// Judges impl's backward on case bc with inputs and upstream gradients drawn from seed: every gradient by
// compare_grad under tolerance_for(impl.backward_cls, longest sequence). With a baseline (e.g. FLA through the
// file protocol), each gradient's relative RMSE must also be no worse than the baseline's on the same inputs.
VerifyResult verify_backward_case(const BackwardCase& bc, const Implementation& impl, uint64_t seed,
                                  const Implementation* baseline = nullptr);

// One printed row per result, and the JSON report.
std::string verify_row(const VerifyResult& r);
std::string verify_json(const std::vector<VerifyResult>& results, const std::string& suite, const std::string& impl,
                        uint64_t seed, const std::string& command);

}  // namespace kda::testing
