// workloads.h: the named workloads of kda-bench and kda-verify (the project's workloads.md), and the byte and
// FLOP counts behind each one's floor.
#pragma once

#include <string>
#include <vector>

#include "common/cases.h"

namespace kda::testing {

struct Workload {
  std::string name;
  std::string description;
  CaseSpec spec;
};

// Every named workload, in --list order.
const std::vector<Workload>& workloads();
const Workload* find_workload(const std::string& name);

// Bytes that must move at least once: q, k, v, g, beta read, out written, initial state read, final state written.
double workload_min_bytes(const Case& c);
// FLOPs of the dense chunked algorithm at chunk C (per token and value head: 6CK + 4CV + 6KV + C^2/3; about
// 182k for K = V = 128, C = 64, the count the project's workloads.md uses).
double workload_flops(const Case& c, int chunk = 64);

}  // namespace kda::testing
