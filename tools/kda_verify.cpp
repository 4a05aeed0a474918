// kda_verify.cpp: kda-verify, the acceptance suite. Runs a named suite (quick: CPU-sized, for CI; full: full-size,
// for the GPU) against a named implementation, prints one row per case (case, seed, pass/fail, relative RMSE and
// worst element-wise ratio of the output and the final state), writes a JSON report, and exits non-zero on any
// failure. Seeds are fresh each run and printed; --seed replays a run, --filter picks cases by name (any of several
// comma-separated substrings). The backward suites (backward-quick, backward-full) judge every gradient against the
// float64 reference backward (one row per case: the worst gradient's relative RMSE and worst element ratio; all
// gradients in the JSON); --baseline IMPL also runs IMPL's backward on the same inputs and requires each gradient's
// relative RMSE to be no worse. --fp32-grads (a study option) asks an outside implementation for fp32 gradients
// instead of its inputs' dtype and judges them as fp32 tensors, as the CUDA backward's are: the bf16 rounding of the
// default hides the arithmetic error of a model such as scripts/models/chunk_backward_rounding.py.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "common/verify.h"

using namespace kda::testing;

int main(int argc, char** argv) {
  std::string suite = "quick", impl_name = "cpu", json, filter, baseline_name;
  std::string class_name;
  bool fp32_grads = false, input_dtype_grads = false;
  uint64_t seed = fresh_seed();
  std::string command = "kda-verify";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kda-verify: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--suite") suite = next();
    else if (a == "--impl") impl_name = next();
    else if (a == "--json") json = next();
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 0);
    else if (a == "--filter") filter = next();
    else if (a == "--baseline") baseline_name = next();
    else if (a == "--class") class_name = next();
    else if (a == "--fp32-grads") fp32_grads = true;
    else if (a == "--input-dtype-grads") input_dtype_grads = true;
    else {
      std::printf("usage: kda-verify [--suite quick|full|decode-quick|decode-full|backward-quick|backward-full] [--impl NAME]\n"
                  "                  [--json PATH] [--seed N] [--filter SUBSTRING[,SUBSTRING...]] [--baseline NAME]\n"
                  "                  [--fp32-grads | --input-dtype-grads] [--class fp32|tensor-core]\n"
                  "  NAME: cpu | reference | cuda-generic | cuda-chunked | cuda-recurrent | \"cmd:COMMAND\" (an external implementation:\n"
                  "        COMMAND DIR reads DIR/case.json and the inputs, writes DIR/out.bin and DIR/final_state.bin, or for a\n"
                  "        backward request the gradient files; see docs/verifier_protocol.md)\n"
                  "  --baseline NAME (backward suites): NAME's gradients on the same inputs; ours must be no worse (rel RMSE)\n"
                  "  --fp32-grads (backward suites): a \"cmd:\" implementation returns fp32 gradients, judged as fp32 tensors\n"
                  "  --input-dtype-grads (backward suites): every case asks dq .. dbeta in their inputs' dtypes, as autograd\n"
                  "        returns them (bf16 at the workloads), judged with their storage rounding\n"
                  "  --class fp32|tensor-core: a \"cmd:\" implementation's compute class (forward, decode and backward; default\n"
                  "        tensor-core, the loosest): an fp32 implementation asks to be judged as one\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  Implementation impl = implementation_by_name(impl_name);
  if (fp32_grads && input_dtype_grads) {
    std::fprintf(stderr, "kda-verify: --fp32-grads and --input-dtype-grads ask opposite things\n");
    return 2;
  }
  if (fp32_grads) impl.backward_grads_in_input_dtype = false;
  if (!class_name.empty()) {
    if (impl_name.rfind("cmd:", 0) != 0 || (class_name != "fp32" && class_name != "tensor-core")) {
      std::fprintf(stderr, "kda-verify: --class: fp32 or tensor-core, for a \"cmd:\" implementation (ours have theirs)\n");
      return 2;
    }
    impl.cls = impl.decode_cls = impl.backward_cls =
        class_name == "fp32" ? ComputeClass::kFp32 : ComputeClass::kTensorCore;
  }
  if (input_dtype_grads) impl.backward_grads_in_input_dtype = true;
  if (!impl.run) {
    std::fprintf(stderr, "kda-verify: unknown implementation '%s'\n", impl_name.c_str());
    return 2;
  }
  const std::vector<VerifyCase> cases = verify_suite(suite, seed);
  const std::vector<DecodeSpec> decode_cases = verify_decode_suite(suite);
  const std::vector<BackwardCase> backward_cases = verify_backward_suite(suite, seed);
  if (cases.empty() && decode_cases.empty() && backward_cases.empty()) {
    std::fprintf(stderr,
                 "kda-verify: unknown suite '%s' (quick, full, decode-quick, decode-full, backward-quick, backward-full)\n",
                 suite.c_str());
    return 2;
  }
  Implementation baseline;
  if (!baseline_name.empty()) {
    baseline = implementation_by_name(baseline_name);
    if (!baseline.backward || backward_cases.empty()) {
      std::fprintf(stderr, "kda-verify: --baseline needs a backward suite and an implementation with a backward\n");
      return 2;
    }
  }
  if (!backward_cases.empty() && !impl.backward) {
    std::fprintf(stderr, "kda-verify: implementation '%s' has no backward\n", impl_name.c_str());
    return 2;
  }
  if (!baseline_name.empty()) std::printf("kda-verify  baseline %s\n", baseline_name.c_str());
  if (!class_name.empty()) std::printf("kda-verify  judged as the %s class (--class)\n", class_name.c_str());
  std::printf("kda-verify  suite %s  impl %s  run seed %llu (replay: --seed %llu)\n", suite.c_str(), impl_name.c_str(),
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::vector<VerifyResult> results;
  int failed = 0, passed = 0, skipped = 0;
  // Each case draws from its own seed: the run seed mixed with the case name.
  auto record = [&](VerifyResult r) {
    std::printf("%s\n", verify_row(r).c_str());
    std::fflush(stdout);
    if (r.skipped) ++skipped;
    else if (r.pass) ++passed;
    else ++failed;
    results.push_back(std::move(r));
    // The report is rewritten after every case, so a run cut off by a time limit keeps what it measured.
    if (!json.empty()) std::ofstream(json) << verify_json(results, suite, impl_name, seed, command);
  };
  // --filter a,b,c: the cases whose name contains any of the substrings (so one suite can be split across processes).
  auto selected = [&](const std::string& name) {
    if (filter.empty()) return true;
    for (size_t from = 0;;) {
      const size_t comma = filter.find(',', from);
      const std::string part = filter.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      if (!part.empty() && name.find(part) != std::string::npos) return true;
      if (comma == std::string::npos) return false;
      from = comma + 1;
    }
  };
  auto case_seed = [&](const std::string& name) { return seed ^ std::hash<std::string>{}(name); };
  for (const VerifyCase& vc : cases)
    if (selected(vc.spec.name)) record(verify_case(vc, impl, case_seed(vc.spec.name)));
  for (const DecodeSpec& ds : decode_cases)
    if (selected(ds.name)) record(verify_decode_case(ds, impl, case_seed(ds.name)));
  double oracle_seconds = 0;
  for (const BackwardCase& bc : backward_cases)
    if (selected(bc.spec.name)) {
      record(verify_backward_case(bc, impl, case_seed(bc.spec.name), baseline_name.empty() ? nullptr : &baseline));
      oracle_seconds += results.back().oracle_seconds;
    }
  if (!backward_cases.empty()) std::printf("kda-verify: float64 oracle backward %.1f s in all\n", oracle_seconds);
  std::printf("kda-verify: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed == 0 ? 0 : 1;
}
