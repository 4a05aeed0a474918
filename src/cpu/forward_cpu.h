// forward_cpu.h: the CPU backend's chunked forward (fp32 compute, fp32 state, Eigen matrix products,
// OpenMP threads over (sequence, value head)).
#pragma once

#include "api/status.h"
#include "common/params.h"

namespace kda::cpu {

constexpr int kDefaultChunk = 64;
constexpr int kSubBlock = 16;  // in-block decays factored through the block mid point (or pairwise); forward_cpu.cpp

Status forward(const ForwardParams& p);

}  // namespace kda::cpu
