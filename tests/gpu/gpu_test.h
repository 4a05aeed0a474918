// gpu_test.h: the fixture every GPU suite derives from: each test skips (in SetUp, so its body never runs) where no
// CUDA device is present, which is how CI runs the GPU suites on a CPU-only machine.
#pragma once

#include <gtest/gtest.h>

#include "common/device.h"

namespace kda::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

}  // namespace kda::testing
