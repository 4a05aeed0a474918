// decode_bulk.cu: owns the sm_90 decode (kda::cuda::hopper_decode, decode_bulk.h): 1-4 tokens per sequence against
// a value-first state pool of fp32 or bf16, the state tiles streamed by the bulk-copy engine through a shared-memory
// pipeline.
//
// Why. The portable kernel (generic/decode.cu, one CTA per tile) reaches 71-75% of the copy rate at B >= 128 on the
// H200 and 47-60% at B = 8-32 (bench/LEDGER.md, session 10), against #7's 90%: each CTA's reads are in flight only
// between its slot load and its wait, so every tile pays a dependent slot -> state latency with nothing else of the
// CTA in flight. Here a persistent CTA keeps kStages tiles in flight all the time: a producer warp reads tile i's
// slot and issues its one cp.async.bulk (global -> shared, completing on an mbarrier) while the consumer warps work
// on tile i - kStages + 1 .. i - 1.
//
// Roles (160 threads). The work is split into units: 1 to kStages consecutive row tiles of one (sequence, value head)
// (bulk::tiles_per_unit: all of a head's tiles, up to the ring's length, at batches that fill the resident CTAs; fewer
// at small batches so a head's tiles update in parallel on several CTAs). Warp 4, the producer: per unit, issues every
// global load it needs as raw bits, none waited on before the last is out (the sequence's slots, the head's gate
// parameters, its lanes' channels of q / k / g, row `lane` of v for each tile, beta), then per tile waits for the
// tile's stage to be free (empty barrier) and lane 0 arms the stage's full barrier with the tile's bytes and issues the
// bulk copy; then all 32 lanes stage, once per unit, what the updates need besides the state (q_hat and k_hat by
// warp-shuffle L2 norms, alpha = exp(gate), beta) into each of the unit's stages, with that tile's rows of v and the
// slots (lane 0 also the tile's sequence, head and first row); each lane arrives on each stage's full barrier after its
// own stores. Warps 0-3, the consumers: per tile, wait for the full barrier, copy their 8 rows of the tile and their
// lanes' columns of q_hat / k_hat / alpha into registers, release the stage (empty barrier, one arrival per warp), then
// update and store straight from registers; fp32 pools at K = 128 write the rows back into the stage instead, store
// them by one bulk copy a warp and release the stage once that copy has read it (BulkTile::kBulkStore). Their row sums
// (S k_hat, S q_hat) halve the rows at each shuffle step (halving_row_sum: 9 shuffles for a warp's 8 rows, not 8
// butterflies' 40; ncu session 21 at H32 B256 put 17% of the kernel's stall samples on the output's butterflies and 18%
// on the update, the full-barrier wait only 10%: the consumers, not the copies, paced it).
//
// Measured (bench/LEDGER.md, session 11): the first version staged per tile, not per unit, and ran at 60-66% of the
// copy rate at B >= 128, slower than the portable kernel (H32 B512 844 against 683 us): the producer warp's serial
// path per 16 KB tile (a global round trip plus a few hundred dependent instructions of norms, gate activation and
// stores, ~4.8 us a tile) paced the CTA. A unit of 4 tiles (K = V = 128) pays that path once per 64 KB.
//
// Tile = 32 rows x K of one (sequence, value head): contiguous in a value-first pool (rows of K elements), one bulk
// copy of 32 K * sizeof(pool element) bytes (16 KB at K = 128 in fp32, 8 KB in bf16). Consumer warp w owns rows
// 8 w .. 8 w + 7; lane l owns columns l W .. l W + W - 1 (W = K / 32) of each, so a warp's shared-memory row read is
// one contiguous 4 W * 32-byte line (no bank conflicts) and its global row store is coalesced. Row sums: the halving
// sums above (halving_row_sum).
//
// Budget (fp32, K = 128, 3 stages): shared memory 3 x (16 KB tile + 1.7 KB staged vectors) + barriers ~ 54 KB: 4 CTAs
// per SM (218 of 227 KB), i.e. up to 12 tiles = 192 KB of state reads in flight per SM, 6x what Little's law asks at
// the H200's rate (~32 KB of traffic per SM), and 16 consumer warps; at T = 4, 3 x (16 + 6.7) KB: 3 CTAs per SM; a
// unit is 2 tiles (a divisor of a head's 4, at most the ring's 3). Elsewhere 4 (K = 128, bf16), 8 (K = 64) or 2
// (K = 256) stages at 3 CTAs per SM. Registers: consumers hold 8 W state floats + 3 W vector floats per lane; bounded
// at 102 (4 CTAs) or 136 (3 CTAs) (ptxas, sm_90a: 95 at fp32 K = 128, 117-128 elsewhere, no spills; the consumers
// count their tiles with a 32-bit index, a 64-bit one spilled at K = 256; the producer's unit loads, all in flight at
// once, take K = 64 from 93 to 128, inside the bound).
// One producer unit costs about a global round trip plus the staging's ~1.5 us of dependent instructions, ~3-4 us
// for 64 KB at K = V = 128: ~18 KB per us per CTA, 54 B/ns per SM with 3 CTAs, 3.5x the ~15 B/ns of reads 90% of the
// copy rate needs.
//
// Supported (hopper_decode_supported): 1 to kMaxTokens = 4 tokens per sequence (decode, and speculative verify of up
// to 3 draft tokens with 2-D indices and num_accepted_tokens: the state stays in the consumers' registers across the
// tokens, each token's state going to its write slot; the producer stages every token's vectors, 6.7 KB per token at
// K = 128), K in {64, 128, 256}, a value-first fp32 or bf16 pool with rows of K contiguous elements and 16-byte
// aligned slot / head / row starts, an sm_90 device and a binary with sm_90 code.
//
// A bf16 pool (templated on the pool element P): the same tiles at half the bytes, the same stage count (so half the
// shared memory; the register bound still allows 3 CTAs per SM, 96 KB of state reads in flight per SM at K = 128,
// 3x Little's law). The consumers widen their lanes' W bf16 of a row exactly (ld_vec) and round each written state
// once to nearest even (st_vec_streaming), as the row-split kernel does; the producer's per-unit staging is that of an
// fp32 pool, now paid per 32 KB instead of 64 KB. Why here and not only the row-split kernel: past one wave the
// row-split kernel is bound by its per-warp fixed work (each warp re-derives its head's norms and gates for 4 rows),
// which a bf16 pool does not halve (session 15: 318 us at H32 B256 bf16, slower than this kernel's 294 in fp32). Everything else takes the portable kernel. The math
// is the portable kernel's (decode_math.cuh: the same per-token formulas and roundings); only the order of the terms of
// the sums (norms, row dot products) differs.
//
// In place: a tile's read (the bulk copy) completes before its consumers start (full barrier), and only they write
// those pool rows; sequences own disjoint slots (validated), so no other tile reads them.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/params.h"
#include "cuda/decode_math.cuh"
#include "cuda/device_common.cuh"
#include "cuda/hopper/decode_bulk.h"
#include "cuda/hopper/decode_bulk_plan.h"

namespace kda::cuda {
namespace {

using bulk::kRows;
constexpr int kConsumerWarps = 4;               // 8 rows each
constexpr int kThreads = 32 * (kConsumerWarps + 1);

constexpr int kMaxTokens = 4;  // tokens per sequence the kernel takes (decode, speculative verify of up to 3 drafts)
// A stage's int64 words beside its tile: the read slot, each token's write slot, then the tile's sequence, value head
// and first row, staged by the producer so the consumers divide nothing (bulk::unit_of's 64-bit divisions, run per
// tile by every consumer warp, were ~10% of the kernel's stall samples at H32 B256, ncu session 21).
enum SlotWord : int { kTileN = 1 + kMaxTokens, kTileHv, kTileRow0, kSlots };

template <int K, typename P>
struct BulkTile {
  static constexpr int W = K / 32;                              // columns per lane
  static constexpr int kTileElems = kRows * K;                  // pool elements of a tile
  // fp32 tiles at K = 128 (the serving case): 3 stages a CTA and 4 CTAs an SM (~54 KB each at T = 1, at most 102
  // registers: 16 consumer warps an SM, where 4 stages at 3 CTAs gave 12; ncu, session 21: the consumers, not the
  // copies, pace the kernel). Elsewhere ~64 KB of tiles a CTA and 3 CTAs an SM (at most 136 registers; unbounded,
  // ptxas took 163 at K = 128 once the kernel took T > 1).
  static constexpr bool kFour = K == 128 && sizeof(P) == 4;
  static constexpr int kStages = kFour ? 3 : K >= 256 ? 2 : K >= 128 ? 4 : 8;
  static constexpr int kMinCtas = kFour ? 4 : 3;
  // fp32 at K = 128 writes the updated rows back through the stage and out by bulk stores (one a warp a tile); the
  // others store from registers (st.global.cs) and release the stage as soon as the rows are in registers. Measured
  // (bench/LEDGER.md, session 26, dtma against main): fp32 H32 B32 -1.5%, B128 -1.4%, B256 -2% (ncu: 290 -> 284 us,
  // DRAM 75.8 -> 77.4%); bf16 B32 +4.6% (its 8 KB tiles at 3 CTAs an SM: holding a stage until its stores have
  // read it costs more reads in flight than the stores save). K = 64 and 256 were not timed, so they keep the
  // register stores.
  static constexpr bool kBulkStore = kFour;
  static constexpr int kTokFloats = 3 * K + kRows + 4;          // per token: q_hat, k_hat, alpha, v, beta (+ pad)
  static constexpr size_t kTileBytes = sizeof(P) * kTileElems;
  // Shared memory: [kStages][kTileElems] tiles, [kStages][T][kTokFloats] vectors, [kStages][kSlots] int64 words (the
  // read slot, each token's write slot, the tile's n / hv / row0), then the full and empty barriers [kStages] each.
  static constexpr size_t smem_bytes(int T) {
    return kStages * kTileBytes + sizeof(float) * kStages * static_cast<size_t>(T) * kTokFloats +
           sizeof(int64_t) * kSlots * kStages + sizeof(uint64_t) * 2 * kStages;
  }
  static_assert(K % 32 == 0 && W <= 8 && kTileBytes % 16 == 0 && (kTokFloats * 4) % 16 == 0, "bulk tile");
};

// The device side exists in the sm_90 pass only (and the host pass, which needs the kernel's declaration).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
constexpr int kRowsPerWarp = kRows / kConsumerWarps;
constexpr int kFullArrivals = 32 + 1;  // every producer lane, plus lane 0's arrive.expect_tx

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier and bulk-copy primitives (PTX ISA 8.0, sm_90).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}\n" ::"r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}\n" ::"r"(
                   smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT;\n\t}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// The reverse direction (shared -> global, PTX ISA 8.0, sm_90): a bulk store in this thread's bulk async-group, the
// group's commit, and the wait until every committed store has read its shared memory (the source may be reused).
// The writing threads make their shared-memory stores visible to the async proxy (fence_proxy_async) first.
__device__ __forceinline__ void bulk_copy_s2g(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A run of one float32 / float16 / bfloat16 input's elements, read as raw bits (device_common.cuh's load_bits with
// the addressing hoisted): the run's first byte and its byte step, so element m of it is one 64-bit add away and its
// 16- and 32-bit loads are one predicated pair on one address. load_bits scales each element's offset per width,
// two 64-bit addresses an element: with the producer's ~20 loads in flight together, ptxas kept both live.
struct RawRun {
  const char* p;
  int64_t step;
  bool f32;
};
__device__ __forceinline__ RawRun raw_run(const TensorView& t, int64_t off, int64_t stride) {
  const bool f32 = t.dtype == KDA_DTYPE_FLOAT32;
  const int sh = f32 ? 2 : 1;
  return {static_cast<const char*>(t.data) + (off << sh), stride << sh, f32};
}
__device__ __forceinline__ uint32_t load_raw(const char* a, bool f32) {
  return f32 ? *reinterpret_cast<const uint32_t*>(a) : *reinterpret_cast<const uint16_t*>(a);
}
__device__ __forceinline__ uint32_t load_raw(const RawRun& r, int m) { return load_raw(r.p + m * r.step, r.f32); }

// A warp's 8 row partials (part[r], every lane) -> the sum of row bulk::halving_row_of_lane(lane) over the warp, equal
// on the 4 lanes holding it (decode_bulk_plan.h: 9 shuffles for all 8 rows, not 40; 14 selects).
__device__ __forceinline__ float halving_row_sum(const float (&part)[kRowsPerWarp], int lane) {
  static_assert(kRowsPerWarp == bulk::kHalvingRows, "the halving sums' lane map is for 8 rows a warp");
  float x[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) x[r] = part[r];
#pragma unroll
  for (int h = kRowsPerWarp / 2, mask = 16; h >= 1; h /= 2, mask /= 2) {
    const bool upper = (lane & mask) != 0;  // keeps rows h .. 2 h - 1 of the remaining ones
#pragma unroll
    for (int i = 0; i < h; ++i) {
      const float send = upper ? x[i] : x[i + h];
      x[i] = (upper ? x[i + h] : x[i]) + __shfl_xor_sync(0xffffffffu, send, mask);
    }
  }
  x[0] += __shfl_xor_sync(0xffffffffu, x[0], 2);
  return x[0] + __shfl_xor_sync(0xffffffffu, x[0], 1);
}
// update_rows' row sums of S k_hat, which every lane needs for every row: the halving sums, then each row's sum from
// a lane holding it (8 more shuffles: 17 in all where the butterflies take 40).
struct HalvingRowSums {
  int lane;
  __device__ __forceinline__ void operator()(float (&x)[kRowsPerWarp]) const {
    const float mine = halving_row_sum(x, lane);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) x[r] = __shfl_sync(0xffffffffu, mine, bulk::halving_lane_of_row(r));
  }
};

#endif

template <int K, typename P>
__global__ void __launch_bounds__(kThreads, BulkTile<K, P>::kMinCtas)
    decode_bulk_kernel(const DecodeParams p, int per_unit, int64_t units) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tl = BulkTile<K, P>;
  constexpr int W = Tl::W, S = Tl::kStages;
  constexpr int kMaxUnit = S;  // tiles per unit: per_unit <= S (bulk::tiles_per_unit)
  const ForwardParams& io = p.io;
  constexpr int kTok = Tl::kTokFloats;
  const int T = static_cast<int>(io.T);                      // 1 .. kMaxTokens (hopper_decode_supported)
  extern __shared__ __align__(128) unsigned char smem[];
  P* const tiles_s = reinterpret_cast<P*>(smem);                              // [S][kTileElems]
  float* const vec_s = reinterpret_cast<float*>(smem + S * Tl::kTileBytes);  // [S][T][kTok]
  int64_t* const slot_s = reinterpret_cast<int64_t*>(vec_s + S * T * kTok);  // [S][kSlots]
  uint64_t* const full = reinterpret_cast<uint64_t*>(slot_s + kSlots * S);
  uint64_t* const empty = full + S;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], kFullArrivals);
      mbar_init(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Launched with programmatic stream serialization (launch below): the CTA's start and the barrier set-up above may
  // run while the kernel before it in the stream finishes; every global access is below this wait, which returns once
  // that kernel has completed and its writes are visible. The next kernel may launch as early (it waits the same
  // way if it was launched so, and takes an SM only as this grid's CTAs leave one).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");

  P* const pool = static_cast<P*>(p.pool);
  if (warp == kConsumerWarps) {
    // ---------------------------------------------------------------- producer
    const bool has_a_log = io.has_A_log();
    int i = 0;  // this CTA's tiles so far
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x, i += per_unit) {
      const bulk::Unit u = bulk::unit_of(unit, io.HV, io.V, per_unit);
      const int h = u.hv / io.group;
      // Every global load of the unit is issued before any loaded value is used: raw bits into registers, tested and
      // converted after the copies. A value converted or tested where it is loaded holds back every load behind it
      // for a full round trip; issued that way (session 12's SASS) the ~20 loads ran as a dependent chain before
      // the state copy went out, most of the ~6 us of B = 1 (a CTA has one unit there). The read slot's index
      // first: it heads the longest chain (index -> bulk copy -> consumers); the rest is independent of it.
      const int32_t slot_index = p.read_index(u.n);
      // The head's gate parameters (fp32).
      const float a_log = has_a_log ? static_cast<const float*>(io.A_log.data)[u.hv * io.A_log.stride[0]] : 0.0f;
      float bias[W];
#pragma unroll
      for (int m = 0; m < W; ++m)
        bias[m] = io.gate_mode != KDA_GATE_LOG_DECAY
                      ? static_cast<const float*>(io.dt_bias.data)[u.hv * io.dt_bias.stride[0] +
                                                                   (lane * W + m) * io.dt_bias.stride[1]]
                      : 0.0f;
      auto v_row_ok = [&](int j) { return j < per_unit && u.row0 + j * kRows + lane < io.V; };
      float ea = 1.0f;  // exp(A_log), the bounded gate's factor: once per unit, not once per channel
#pragma unroll 1
      for (int t = 0; t < T; ++t) {
        // Token t's raw inputs: this lane's W channels of q / k / g, row `lane` of each of the unit's tiles of v,
        // beta, the write slot's index. Token 0's go out with the slot's index and the gate parameters, before
        // anything waits: the unit's one global round trip overlaps the producer's waits for its stages. (One
        // call site: a second one for tokens 1.. kept their hoisted addresses live across the token loop, 128
        // registers at every K and spills at K = 256.)
        const RawRun qr = raw_run(io.q, u.n * io.q.stride[0] + t * io.q.stride[1] + h * io.q.stride[2] +
                                            lane * W * io.q.stride[3], io.q.stride[3]);
        const RawRun kr = raw_run(io.k, u.n * io.k.stride[0] + t * io.k.stride[1] + h * io.k.stride[2] +
                                            lane * W * io.k.stride[3], io.k.stride[3]);
        const RawRun gr = raw_run(io.g, u.n * io.g.stride[0] + t * io.g.stride[1] + u.hv * io.g.stride[2] +
                                            lane * W * io.g.stride[3], io.g.stride[3]);
        const RawRun vr = raw_run(io.v, u.n * io.v.stride[0] + t * io.v.stride[1] + u.hv * io.v.stride[2] +
                                            (u.row0 + lane) * io.v.stride[3], kRows * io.v.stride[3]);
        uint32_t rq[W], rk[W], rg[W], rv[kMaxUnit];
#pragma unroll
        for (int m = 0; m < W; ++m) {
          rq[m] = load_raw(qr, m);
          rk[m] = load_raw(kr, m);
          rg[m] = load_raw(gr, m);
        }
        // Rows past the unit's tiles read q's first element instead (v's dtype, validated), dropped when converted: a
        // branch around them splits the loads into blocks, and ptxas then computes every address before the first
        // load.
#pragma unroll
        for (int j = 0; j < kMaxUnit; ++j) rv[j] = load_raw(v_row_ok(j) ? vr.p + j * vr.step : qr.p, vr.f32);
        const uint32_t rbeta = load_raw(
            raw_run(io.beta, u.n * io.beta.stride[0] + t * io.beta.stride[1] + u.hv * io.beta.stride[2], 0), 0);
        const int32_t rw = p.write_index(u.n, t);
        if (t == 0) {
          // The unit's copies, each as soon as its stage is free (at most `stages` tiles a unit: the stage a copy
          // waits for was used by an earlier unit, whose staging is done). The slot's test is lane 0's alone, after
          // every load above: opaque keeps the compiler from hoisting it out of the token loop, ahead of them.
#pragma unroll 1
          for (int j = 0; j < per_unit; ++j) {
            const int s = bulk::stage_of(i + j, S);
            if (bulk::producer_waits(i + j, S)) mbar_wait(&empty[s], bulk::empty_parity(i + j, S));
            if (lane == 0) {
              const int64_t slot = p.in_pool(opaque(slot_index));
              int64_t* const words = slot_s + kSlots * s;  // published by this lane's full-barrier arrival below
              words[0] = slot;
              const int row0 = u.row0 + j * kRows;
              words[kTileN] = u.n;
              words[kTileHv] = u.hv;
              words[kTileRow0] = row0;
              if (slot >= 0) {
                const uint32_t bytes = static_cast<uint32_t>(min(kRows, io.V - row0)) * K * sizeof(P);
                mbar_arrive_expect_tx(&full[s], bytes);
                bulk_copy_g2s(tiles_s + s * Tl::kTileElems,
                              pool + slot * p.pool_stride[0] + u.hv * p.pool_stride[1] + row0 * int64_t{K}, bytes,
                              &full[s]);
              } else {
                mbar_arrive(&full[s]);  // padding: no copy, the consumers see slot < 0
              }
            }
          }
          if (io.gate_mode == KDA_GATE_BOUNDED && has_a_log) ea = expf(a_log);
        }
        float q[W], k[W], a[W], v[kMaxUnit];
        bits_to_float(q, rq, io.q.dtype);
        bits_to_float(k, rk, io.k.dtype);
        bits_to_float(a, rg, io.g.dtype);
        bits_to_float(v, rv, io.v.dtype);
#pragma unroll
        for (int j = 0; j < kMaxUnit; ++j) v[j] = v_row_ok(j) ? v[j] : 0.0f;
        const float beta_raw = bits_to_float(rbeta, io.beta.dtype);
        const int64_t w = p.in_pool(rw);
        // Staging (q_hat, k_hat, alpha, v, beta, write slot), once per unit, into each of its stages; every lane
        // takes part in the norms' shuffles, q's and k's interleaved.
        token_vectors<W>(io, q, k, a, has_a_log, a_log, ea, bias);
        const float beta = beta_activation_f(beta_raw, io.beta_is_logits, io.allow_neg_eigval);
#pragma unroll
        for (int j = 0; j < kMaxUnit; ++j) {
          if (j >= per_unit) break;
          float* const vt = vec_s + (bulk::stage_of(i + j, S) * T + t) * kTok;
#pragma unroll
          for (int m = 0; m < W; ++m) {
            const int c = lane * W + m;
            vt[c] = q[m];
            vt[K + c] = k[m];
            vt[2 * K + c] = a[m];
          }
          vt[3 * K + lane] = v[j];
          if (lane == 0) {
            vt[3 * K + kRows] = beta;
            slot_s[kSlots * bulk::stage_of(i + j, S) + 1 + t] = w;
          }
        }
      }
      // Release: this lane's stores above (lane 0's: the slots and the tiles' words too).
#pragma unroll 1
      for (int j = 0; j < per_unit; ++j) mbar_arrive(&full[bulk::stage_of(i + j, S)]);
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  // This CTA's tiles (bulk::cta_tiles: one division here, none a tile). int: a CTA's tiles are far fewer than 2^31
  // (the pool is addressed by 64-bit slots).
  const int tiles = bulk::cta_tiles(blockIdx.x, gridDim.x, units, per_unit);
  for (int i = 0; i < tiles; ++i) {
    const int s = bulk::stage_of(i, S);
    mbar_wait(&full[s], bulk::full_parity(i, S));
    const int64_t* const words = slot_s + kSlots * s;
    const int64_t slot = words[0];
    const int64_t n = words[kTileN];
    const int hv = static_cast<int>(words[kTileHv]);
    const int row0 = static_cast<int>(words[kTileRow0]);
    const int r0 = warp * kRowsPerWarp;  // this warp's first row in the tile
    const int rows = min(kRows, io.V - row0);
    const float* const vs = vec_s + s * T * kTok;
    const int64_t out_base = n * io.out_stride[0] + hv * io.out_stride[2];
    if (slot < 0) {  // padding: zero outputs, no slot touched (uniform over the CTA)
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
      if (lane < kRowsPerWarp && r0 + lane < rows)
        for (int t = 0; t < T; ++t)
          store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1] + (row0 + r0 + lane) * io.out_stride[3],
                    0.0f);
      continue;
    }
    P* const tile = tiles_s + s * Tl::kTileElems;
    const int mine_rows = max(0, min(kRowsPerWarp, rows - r0));  // this warp's rows that lie in the head
    float st[kRowsPerWarp][W];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) ld_vec<W>(tile + (r0 + r) * K + lane * W, st[r]);
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
      const float* const vt = vs + t * kTok;
      float al[W], kh[W], qh[W], v[kRowsPerWarp];
      ld_vec<W>(vt + lane * W, qh);
      ld_vec<W>(vt + K + lane * W, kh);
      ld_vec<W>(vt + 2 * K + lane * W, al);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) v[r] = vt[3 * K + r0 + r];
      const float beta = vt[3 * K + kRows];
      const int64_t w = words[1 + t];
      if (!Tl::kBulkStore && t == T - 1) {  // the stage's last reads are in registers: the producer may refill it
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
      }
      // Per row: S *= alpha, u = beta (v - S k_hat), S += u k_hat^T, o = scale (S q_hat): the reference's order.
      float dot[kRowsPerWarp];
      update_rows<kRowsPerWarp, W>(st, al, kh, qh, [&](int r) { return v[r]; }, beta, dot, HalvingRowSums{lane});
      if (!Tl::kBulkStore && w >= 0) {  // this token's state to its write slot (1-D indices: the last token's only)
        P* const dst = pool + w * p.pool_stride[0] + hv * p.pool_stride[1] + row0 * int64_t{K} + lane * W;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          if (r0 + r < rows) st_vec_streaming<W>(dst + (r0 + r) * int64_t{K}, st[r]);
      }
      if constexpr (Tl::kBulkStore) {
        // The same through the stage: the warp's rows back into their place in it, then one bulk store of them
        // (contiguous: rows of K elements) by lane 0. An earlier token's store must have read them first.
        if (w >= 0 && mine_rows > 0) {
          if (t > 0) {
            if (lane == 0) bulk_wait_read_all();
            __syncwarp();
          }
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) st_vec<W>(tile + (r0 + r) * K + lane * W, st[r]);
          fence_proxy_async();
          __syncwarp();
          if (lane == 0) {
            bulk_copy_s2g(pool + w * p.pool_stride[0] + hv * p.pool_stride[1] + (row0 + r0) * int64_t{K},
                          tile + r0 * K, static_cast<uint32_t>(mine_rows * K * sizeof(P)));
            bulk_commit();
          }
        }
      }
      // Row bulk::halving_row_of_lane(lane)'s output, stored by the one of its 4 lanes with lane bits 0 and 1 clear.
      const float mine = halving_row_sum(dot, lane);
      const int orow = r0 + bulk::halving_row_of_lane(lane);
      if ((lane & 3) == 0 && orow < rows)
        store_out(io.out, io.out_dtype, out_base + t * io.out_stride[1] + (row0 + orow) * io.out_stride[3],
                  io.scale * mine);
    }
    if constexpr (Tl::kBulkStore) {  // the stage's reads (this warp's vectors, its rows by its bulk stores) are done
      __syncwarp();
      if (lane == 0) {
        bulk_wait_read_all();
        mbar_arrive(&empty[s]);
      }
    }
  }
#else
  __trap();  // launched only where hopper_decode_supported found sm_90 code
#endif
}

// Whether the kernel's code that runs on the current device is sm_90 code (not the trap of an older target).
template <int K>
bool binary_has_sm90() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, decode_bulk_kernel<K, float>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion >= 90;
}

template <int K, typename P>
cudaError_t launch(const DecodeParams& p, int sms, cudaStream_t stream) {
  using Tl = BulkTile<K, P>;
  const auto kernel = decode_bulk_kernel<K, P>;
  const size_t smem = Tl::smem_bytes(static_cast<int>(p.io.T));
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  // Shared memory over L1: three CTAs of ~71 KB (K = 128) need 213 of the SM's 228 KB. A preference; an error here
  // changes nothing.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    (void)cudaGetLastError();
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (e != cudaSuccess) return e;
  const int64_t resident = int64_t{sms} * std::max(per_sm, 1);
  const int per_unit = bulk::tiles_per_unit(p.io.N, p.io.HV, p.io.V, Tl::kStages, resident);
  const int64_t units = bulk::unit_count(p.io.N, p.io.HV, p.io.V, per_unit);
  const int64_t ctas = std::min<int64_t>(units, resident);
  // Programmatic dependent launch: a call's launch and ramp overlap the previous kernel's tail (at H32 B32 the
  // kernel took ~36 us of a ~41 us call in graph replay, session 26). A stream or driver that refuses the attribute
  // gets the same launch in plain stream order.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = overlap;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, kernel, p, per_unit, units);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cfg.numAttrs = 0;
    e = cudaLaunchKernelEx(&cfg, kernel, p, per_unit, units);
  }
  return e;
}

template <typename P>
cudaError_t launch_pool(const DecodeParams& p, int sms, cudaStream_t stream) {
  switch (p.io.K) {
    case 64: return launch<64, P>(p, sms, stream);
    case 128: return launch<128, P>(p, sms, stream);
    default: return launch<256, P>(p, sms, stream);
  }
}

}  // namespace

bool hopper_decode_supported(const DecodeParams& p) {
  const ForwardParams& io = p.io;
  if (io.T < 1 || io.T > kMaxTokens || (io.K != 64 && io.K != 128 && io.K != 256) || !io.state_v_first) return false;
  if (p.pool_dtype != KDA_DTYPE_FLOAT32 && p.pool_dtype != KDA_DTYPE_BFLOAT16) return false;
  const int64_t per16 = p.pool_dtype == KDA_DTYPE_BFLOAT16 ? 8 : 4;  // elements in 16 bytes: slot / head starts
  if (p.pool_stride[3] != 1 || p.pool_stride[2] != io.K || p.pool_stride[1] % per16 || p.pool_stride[0] % per16)
    return false;
  if (reinterpret_cast<uintptr_t>(p.pool) % 16 != 0) return false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, io.device_id) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (major != 9) return false;
  switch (io.K) {
    case 64: return binary_has_sm90<64>();
    case 128: return binary_has_sm90<128>();
    default: return binary_has_sm90<256>();
  }
}

cudaError_t hopper_decode(const DecodeParams& p, int sms, cudaStream_t stream) {
  return p.pool_dtype == KDA_DTYPE_BFLOAT16 ? launch_pool<__nv_bfloat16>(p, sms, stream)
                                            : launch_pool<float>(p, sms, stream);
}

}  // namespace kda::cuda
