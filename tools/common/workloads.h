// workloads.h: the named workloads of kda-bench and kda-verify (the project's workloads.md), and the byte and
// FLOP counts behind each one's floor.
#pragma once

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
};

// Every named workload, in --list order. train-NAME: NAME's forward and backward (upstream gradients for the output
// and the final state), for each of the six standard workloads and the CPU default.
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
