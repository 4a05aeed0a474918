// forward_cpu.h: the CPU backend's chunked forward (fp32 compute, fp32 state, Eigen matrix products,
// OpenMP threads over (sequence, value head) chains and, with fewer chains than threads, inside them).
#pragma once

#include "api/status.h"
#include "common/params.h"

namespace kda::cpu {

constexpr int kDefaultChunk = 64;
constexpr int kSubBlock = 16;
// State rows one product advances: fixed, so that the bits do not depend on the thread count (a chain's rows split
// over at most V / kRowBlock workers). 64 costs ~1% against whole-V products at K = V = 128, 32 ~3-4%.
constexpr int kRowBlock = 64;  // in-block decays factored through the block mid point (or pairwise); forward_cpu.cpp

Status forward(const ForwardParams& p);

}  // namespace kda::cpu
