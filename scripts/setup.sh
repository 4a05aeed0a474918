#!/usr/bin/env bash
# setup.sh: installs what building kda needs on a fresh Debian/Ubuntu machine (skips what is already there).
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/eigen3/Eigen/Dense ] || [ -n "${Eigen3_DIR:-}" ] || need+=(libeigen3-dev)
[ -f /usr/include/gtest/gtest.h ] || [ -n "${GTest_DIR:-}" ] || need+=(libgtest-dev)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# numpy: the external-implementation test of the verifier runs a numpy implementation.
python3 -c "import numpy" 2>/dev/null || python3 -m pip install -q numpy
