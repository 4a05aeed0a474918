// forward_cpu.h: the CPU backend's chunked forward (fp32 compute, fp32 state, Eigen matrix products,
// OpenMP threads over (sequence, value head) chains and, with fewer chains than threads, inside them).
#pragma once

#include "api/status.h"
#include "common/params.h"

namespace kda::cpu {

// The chunk length with chunk_size 0. The intra-chunk products and the triangular solve grow with it, the state
// steps shrink: cpu-8k-h8 on 2 cores (session 62, kda-bench --chunk-size, two rounds) 69.4 / 68.6 ms at 64, 60.9 /
// 61.2 at 32, 60.2 / 61.4 at 16, the same errors; 32 keeps the state steps half as many as 16's.
constexpr int kDefaultChunk = 32;
constexpr int kSubBlock = 16;
// State rows one product advances: fixed, so that the bits do not depend on the thread count (a chain's rows split
// over at most V / kRowBlock workers). 64 costs ~1% against whole-V products at K = V = 128, 32 ~3-4%.
constexpr int kRowBlock = 64;  // in-block decays factored through the block mid point (or pairwise); forward_cpu.cpp

Status forward(const ForwardParams& p);

}  // namespace kda::cpu
