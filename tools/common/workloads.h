// workloads.h: the named workloads of kda-bench and kda-verify (the project's workloads.md), and the byte and
// FLOP counts behind each one's floor.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cases.h"
#include "common/decode_cases.h"

namespace kda::testing {

struct Workload {
  std::string name;
  std::string description;
  CaseSpec spec;
  bool backward = false;  // a training step: the forward, then the backward (gradients of every input) timed too
  // > 0: a packed layout of spec.T tokens drawn for each run from the run's seed, lengths uniform in [0, this]
  // (random_layout); the run prints it. Issue #6 asks such layouts to run within 5% of the standard ones, so the
  // work plan cannot be fitted to the six fixed layouts.
  int64_t random_layout_max = 0;
};

// The spec a run of w uses with inputs from `seed`: w.spec, with its packed layout drawn from the seed where w has a
// random one.
CaseSpec workload_spec(const Workload& w, uint64_t seed);
// Sequence lengths uniform in [0, max_len] (the last one cut) summing to total; empty sequences included.
std::vector<int64_t> random_layout(std::mt19937_64& rng, int64_t total, int64_t max_len);
// A packed layout moved by one token: the first sequence one shorter, the last one longer.
std::vector<int64_t> shifted(std::vector<int64_t> v);

// Every named workload, in --list order. train-NAME: NAME's forward and backward (upstream gradients for the output
// and the final state), for each h64- / h96- workload (the six standard ones and the layout checks) and the CPU
// default.
const std::vector<Workload>& workloads();
const Workload* find_workload(const std::string& name);

// Bytes that must move at least once: q, k, v, g, beta read, out written, initial state read, final state written.
double workload_min_bytes(const Case& c);
// FLOPs of the dense chunked algorithm at chunk C (per token and value head: 6CK + 4CV + 6KV + C^2/3; about
// 182k for K = V = 128, C = 64, the count the project's workloads.md uses).
double workload_flops(const Case& c, int chunk = 64);

// Decode workloads: one token per sequence against an fp32 value-first pool (slots > B), H = 32 and 12,
// K = V = 128, batch 1 to 512, bounded gate, L2 norm and beta sigmoid in the kernel.
struct DecodeWorkload {
  std::string name;
  std::string description;
  DecodeSpec spec;
};
const std::vector<DecodeWorkload>& decode_workloads();
const DecodeWorkload* find_decode_workload(const std::string& name);
// State read and written for every sequence, plus the per-token inputs and outputs.
double decode_min_bytes(const DecodeCase& d);

}  // namespace kda::testing
