// tma_map.h: TMA descriptors (CUtensorMap) for the sm_90a kernels, encoded on the host by the driver's
// cuTensorMapEncodeTiled, reached through the runtime's driver entry point (no link against libcuda); and the maps of
// the chunked path's workspace tiles (chunk_map.h TileLayout, K = 128) that the state and reverse passes copy.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cuda_runtime.h>

#include <cstdint>

namespace kda::cuda::sm90 {

// A tiled map over a dense tensor of rank dims (dims[0] innermost, in elements; strides[i] the byte stride of
// dimension i + 1), copied in boxes of box[] elements with a swizzle of CuTe's GMMA layouts (128-byte: SW128 atoms,
// 64-byte: SW64). cudaErrorInvalidValue where the driver refuses the shape (alignment, box size) or has no such entry
// point.
cudaError_t encode_tma(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle);

// The workspace tiles (K = 128) as TMA sees them: every tile (chunk, value head) is a whole number of 256-byte rows
// (450 + V), so its W, Qg, Kd plane rows are rows of one bf16 [rows][128] map and its A_qk plane rows rows of one
// bf16 [rows][64] map; U is an fp32 [tiles][64][V] map. Boxes: 64 x 64 (bf16), 32 columns x 64 rows (U).
struct TileMaps {
  CUtensorMap rows256, rows128, u;
};
// tiles: the first tile (16-byte aligned); n_tiles tiles of V value columns. Rows past INT32_MAX cannot be addressed
// (tile_maps_fit).
cudaError_t encode_tile_maps(const void* tiles, int64_t n_tiles, int V, TileMaps* maps);
bool tile_maps_fit(int64_t n_tiles, int V);

// The backward's saves of a sequential pass as bf16 hi / lo planes (chunk_map.h BackwardLayout), for n_tasks (chunk,
// value head) tasks: one shaped as the state, task-major [2][V][128] (a [rows][128] map; the recompute's chunk-start
// states, the reverse pass's dS_end), one as a chunk's values, [2][kChunk][V] (a [rows][V] map; V_new, -dU). Boxes
// of 64 columns by state_rows (64 or 32) and 64 rows: the layouts of the passes' own planes in shared memory.
struct SaveMaps {
  CUtensorMap state, values;
};
cudaError_t encode_save_maps(const void* state, const void* values, int64_t n_tasks, int V, int state_rows,
                             SaveMaps* maps);
bool save_maps_fit(int64_t n_tasks, int V);

// The products kernel's slices of the saves (chunk_products.cu's wgmma P1, hopper/products_wgmma.cuh), K = V = 128,
// for n_tasks tasks: V_new and -dU as bf16 [2 n][kChunk][128] (plane, t, v), boxes of 32 values x 64 rows x both
// planes of a task (64-byte swizzle: LaySlice); S0 and dS_end as [2 n][128][128] (plane, v, d), boxes of 64 keys x 32
// values x both planes (128-byte swizzle: LayState). The plane coordinate (2 task) must fit an int32
// (products_maps_fit).
struct ProductsMaps {
  CUtensorMap vnew, du, starts, dsend;
};
cudaError_t encode_products_maps(const void* starts, const void* dsend, const void* vnew, const void* du,
                                 int64_t n_tasks, ProductsMaps* maps);
bool products_maps_fit(int64_t n_tasks);

}  // namespace kda::cuda::sm90
