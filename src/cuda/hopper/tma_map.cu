// tma_map.cu: encodes the sm_90a kernels' TMA descriptors (tma_map.h); host code only.
#include "cuda/hopper/tma_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

namespace kda::cuda::sm90 {

cudaError_t encode_tma_sw128(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base,
                             const uint64_t* dims, const uint64_t* strides, const uint32_t* box) {
  // Looked up once: the driver's entry point does not change while the process runs.
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr || rank < 1 || rank > 5) return cudaErrorInvalidValue;
  cuuint64_t d[5], st[4];
  cuuint32_t b[5], one[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    one[i] = 1;
    if (i + 1 < rank) st[i] = strides[i];
  }
  const CUresult r = encode(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, b, one,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace kda::cuda::sm90
