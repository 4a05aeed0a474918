// tma_map.cu: encodes the sm_90a kernels' TMA descriptors (tma_map.h); host code only.
#include "cuda/hopper/tma_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <climits>

#include "cuda/generic/chunk_map.h"

namespace kda::cuda::sm90 {

cudaError_t encode_tma(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
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
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

bool tile_maps_fit(int64_t n_tiles, int V) {
  return n_tiles * TileLayout{128, V}.floats() * 4 / 128 <= INT32_MAX;  // the 128-byte rows, the most numerous
}

cudaError_t encode_tile_maps(const void* tiles, int64_t n_tiles, int V, TileMaps* maps) {
  const TileLayout tl{128, V};
  const uint64_t n = static_cast<uint64_t>(n_tiles), tile_bytes = static_cast<uint64_t>(tl.floats() * 4);
  const uint64_t d256[2] = {128, n * tile_bytes / 256}, s256[1] = {256};
  const uint64_t d128[2] = {64, n * tile_bytes / 128}, s128[1] = {128};
  const uint64_t du[3] = {static_cast<uint64_t>(V), kChunk, n}, su[2] = {static_cast<uint64_t>(V) * 4, tile_bytes};
  const uint32_t b64[2] = {64, kChunk}, bu[3] = {32, kChunk, 1};
  const char* const base = static_cast<const char*>(tiles);
  constexpr CUtensorMapDataType bf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B;
  cudaError_t e = encode_tma(&maps->rows256, bf16, 2, base, d256, s256, b64, sw);
  if (e == cudaSuccess) e = encode_tma(&maps->rows128, bf16, 2, base, d128, s128, b64, sw);
  if (e == cudaSuccess)
    e = encode_tma(&maps->u, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, base + tl.U() * 4, du, su, bu, sw);
  return e;
}

bool save_maps_fit(int64_t n_tasks, int V) {
  return 2 * n_tasks * V <= INT32_MAX && 2 * n_tasks * kChunk <= INT32_MAX;  // rows of the two maps
}

cudaError_t encode_save_maps(const void* state, const void* values, int64_t n_tasks, int V, int state_rows,
                             SaveMaps* maps) {
  const uint64_t n = static_cast<uint64_t>(n_tasks), v = static_cast<uint64_t>(V);
  const uint64_t ds[2] = {128, 2 * n * v}, ss[1] = {128 * 2};
  const uint64_t dv[2] = {v, 2 * n * kChunk}, sv[1] = {v * 2};
  const uint32_t bs[2] = {64, static_cast<uint32_t>(state_rows)}, bv[2] = {64, kChunk};
  constexpr CUtensorMapDataType bf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B;
  cudaError_t e = encode_tma(&maps->state, bf16, 2, state, ds, ss, bs, sw);
  if (e == cudaSuccess) e = encode_tma(&maps->values, bf16, 2, values, dv, sv, bv, sw);
  return e;
}

bool products_maps_fit(int64_t n_tasks) { return 2 * n_tasks <= INT32_MAX; }

cudaError_t encode_products_maps(const void* starts, const void* dsend, const void* vnew, const void* du,
                                 int64_t n_tasks, ProductsMaps* maps) {
  const uint64_t planes = 2 * static_cast<uint64_t>(n_tasks);
  const uint64_t dv[3] = {128, kChunk, planes}, sv[2] = {128 * 2, 128 * 2 * kChunk};
  const uint64_t ds[3] = {128, 128, planes}, ss[2] = {128 * 2, 128 * 128 * 2};
  const uint32_t bv[3] = {32, kChunk, 2}, bs[3] = {64, 32, 2};
  constexpr CUtensorMapDataType bf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  cudaError_t e = encode_tma(&maps->vnew, bf16, 3, vnew, dv, sv, bv, CU_TENSOR_MAP_SWIZZLE_64B);
  if (e == cudaSuccess) e = encode_tma(&maps->du, bf16, 3, du, dv, sv, bv, CU_TENSOR_MAP_SWIZZLE_64B);
  if (e == cudaSuccess) e = encode_tma(&maps->starts, bf16, 3, starts, ds, ss, bs, CU_TENSOR_MAP_SWIZZLE_128B);
  if (e == cudaSuccess) e = encode_tma(&maps->dsend, bf16, 3, dsend, ds, ss, bs, CU_TENSOR_MAP_SWIZZLE_128B);
  return e;
}

}  // namespace kda::cuda::sm90
