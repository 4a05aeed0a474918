// suites.h: the case lists every implementation is tested on: small random and hostile cases (CPU and GPU test
// suites), and full-size cases (GPU suites and the verifier).
#pragma once

#include <string>
#include <vector>

#include "common/cases.h"

namespace kda::testing {

// The default small case (B = 2, T = 150, H = HV = 2, K = V = 64, bf16, bounded gate) under a name.
CaseSpec correctness_case_base(const std::string& name);

// Random and hostile cases: every dtype, head dims 16..256, grouped heads, the three gates (unbounded softplus
// decaying over 1000 bits per 64 tokens, gates exactly 0, saturated bounded gates), near-identical and repeated
// keys, beta near 0, 1 and 2, |h0| up to 1e4, both state layouts, optional states, lengths around the chunk
// size, packed batches with empty sequences, int32 and int64 cu_seqlens.
std::vector<CaseSpec> correctness_cases();

// Full size (8192 tokens, H = 64, K = V = 128): the three input families of the workloads spec (weak decay;
// half the channels near the -5 bound; every channel at 0.5-1.2 nats per token), the unbounded softplus gate at
// H = 32, and the mixed packed layout.
std::vector<CaseSpec> large_cases();

}  // namespace kda::testing
