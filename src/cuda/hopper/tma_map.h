// tma_map.h: TMA descriptors (CUtensorMap) for the sm_90a kernels, encoded on the host by the driver's
// cuTensorMapEncodeTiled, reached through the runtime's driver entry point (no link against libcuda).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cuda_runtime.h>

#include <cstdint>

namespace kda::cuda::sm90 {

// A tiled map over a dense tensor of rank dims (dims[0] innermost, in elements; strides[i] the byte stride of
// dimension i + 1), copied in boxes of box[] elements with the 128-byte swizzle of CuTe's GMMA SW128 layouts.
// cudaErrorInvalidValue where the driver refuses the shape (alignment, box size) or has no such entry point.
cudaError_t encode_tma_sw128(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base,
                             const uint64_t* dims, const uint64_t* strides, const uint32_t* box);

}  // namespace kda::cuda::sm90
