// launch.h: what every CUDA launcher shares: CUDA errors as kda statuses, and a launch run on the tensors' device
// (switched to and back around the launch; nothing synchronizes).
#pragma once

#include <cuda_runtime.h>

#include "api/status.h"

namespace kda::cuda {

inline Status cuda_error(const char* what, cudaError_t e) {
  return make_status(KDA_STATUS_CUDA_ERROR, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Runs launch() on device `device` and restores the caller's device. launch returns the cudaError_t of its own
// setup calls (cudaSuccess if none); the launch's error is read with cudaGetLastError and reported as `what`.
template <typename F>
Status launch_on_device(int device, const char* what, F&& launch) {
  int prev = 0;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  if (prev != device && (e = cudaSetDevice(device)) != cudaSuccess) return cuda_error("cudaSetDevice", e);
  e = launch();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (prev != device) {
    const cudaError_t restore = cudaSetDevice(prev);
    if (e == cudaSuccess && restore != cudaSuccess)
      return cuda_error("cudaSetDevice (restoring the caller's device)", restore);
  }
  if (e != cudaSuccess) return cuda_error(what, e);
  return Status::Ok();
}

}  // namespace kda::cuda
