// no_cuda.cpp: the CUDA backend interface of a build without CUDA: every call reports the backend missing.
#include "cuda/cuda_backend.h"

namespace kda::cuda {

namespace {
Status unavailable() {
  return Status{KDA_STATUS_BACKEND_UNAVAILABLE,
                "tensors are on a CUDA device, but this kda library was built without CUDA (configure with "
                "-DKDA_ENABLE_CUDA=ON)"};
}
}  // namespace

bool compiled_with_cuda() { return false; }
Status generic_forward(const ForwardParams&, void*) { return unavailable(); }
bool chunked_forward_supported(const ForwardParams&) { return false; }
bool hopper_chunked_supported(const ForwardParams&) { return false; }
Status chunked_forward_workspace_size(const ForwardParams&, size_t*) { return unavailable(); }
Status chunked_forward(const ForwardParams&, void*, size_t, void*) { return unavailable(); }
size_t decode_workspace_size(const DecodeParams&) { return 0; }
Status decode(const DecodeParams&, void*, size_t, void*) { return unavailable(); }
Status generic_backward_support(const BackwardParams&) { return unavailable(); }
Status generic_backward_workspace_size(const BackwardParams&, size_t*) { return unavailable(); }
Status generic_backward(const BackwardParams&, void*, size_t, void*) { return unavailable(); }
Status chunked_backward_support(const BackwardParams&) { return unavailable(); }
Status chunked_backward_workspace_size(const BackwardParams&, size_t*) { return unavailable(); }
Status chunked_backward(const BackwardParams&, void*, size_t, void*) { return unavailable(); }

}  // namespace kda::cuda
