// checkpoint_cases.h: prefix-cache checkpoint test pieces shared by the CPU and GPU suites: checkpoint buffers,
// offsets (random, with the edge counts kda.h defines), the layout cases, and the judgement of a backend's
// checkpoints against the float64 reference's.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "common/cases.h"
#include "common/compare.h"

namespace kda::testing {

// What checkpoint buffers are filled with before a call: entries that must not be written keep it.
constexpr double kCkptSentinel = 12345.0;

// [N, n_ckpt, HV, V, K] (or [.., K, V]) of dtype, every element `fill`.
HostTensor make_checkpoints(const Case& c, int64_t n_ckpt, kda_dtype_t dtype, double fill = kCkptSentinel);
// Token count held by entry j of sequence n (as kda.h defines it): offsets[n, j], else (j + 1) * interval.
int64_t checkpoint_count_of(const HostTensor& offsets, int64_t interval, int64_t n, int64_t n_ckpt, int64_t j);
// Every sequence's token count.
std::vector<int64_t> sequence_lengths(const Case& c);
// [N, n_ckpt] offsets of dtype, each one of: 0, the sequence's length, a count inside, past the end, negative.
HostTensor random_checkpoint_offsets(const Case& c, int64_t n_ckpt, std::mt19937_64& rng, kda_dtype_t dtype);

// The layout cases of the CPU checkpoint suite (and, on CUDA, of the GPU one).
struct CkptCase {
  std::string name;
  bool offsets;  // else every 64 tokens
  bool v_first;
  kda_dtype_t offset_dtype;
};
std::vector<CkptCase> checkpoint_cases();
// The case spec of a layout case (H = HV = 2, K = V = 64, a packed batch with empty and length-1 sequences).
CaseSpec checkpoint_case_spec(const CkptCase& k);
constexpr int64_t kCkptCaseEntries = 4;
constexpr int32_t kCkptCaseInterval = 64;

// Runs backend be on host tensors with checkpoints *ck (made here, filled with kCkptSentinel first): float64 for
// the reference, float32 otherwise; cpu_threads as kda_forward_args_t's (0: all). Returns kda_forward's status.
kda_status_t run_host_checkpoints(Case& c, const HostTensor& offsets, int32_t interval, int64_t n_ckpt,
                                  kda_backend_t be, HostTensor* ck, int cpu_threads = 0);

// Judges got (float32, as a backend wrote it over the contents `before`) against ref (the reference's float64
// checkpoints of the same call): entries whose count lies in [0, len] by the final-state rule (compare_state,
// block K * V), the others must still hold their `before` bits. untouched_error names the first entry that
// changed (empty: none); written counts the written entries.
struct CheckpointVerdict {
  ErrorStats stats;
  int64_t written = 0;
  std::string untouched_error;
};
CheckpointVerdict judge_checkpoints(const Case& c, const HostTensor& offsets, int64_t interval, int64_t n_ckpt,
                                    const HostTensor& ref, const HostTensor& got, const HostTensor& before,
                                    const Tolerance& tol);

}  // namespace kda::testing
