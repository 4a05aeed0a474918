// backward_generic.cu: owns the exact CUDA backward (KDA_BACKEND_CUDA_GENERIC / AUTO on CUDA tensors): the
// token-recurrent reverse of the recurrence in fp32, a port of src/reference/backward.cpp, and its host launcher
// and workspace size behind cuda_backend.h.
//
// Three kernels, all deterministic (no atomics; every sum runs in a fixed order):
//  1. backward_kernel: one CTA per (sequence n, value head hv), grid-strided over a capped grid. Pass 1 runs the
//     forward and stores the state at the start of every 64-token segment (workspace "ckpt"). Pass 2 walks the
//     segments from the last: it recomputes the segment's states S_{t-1} from its checkpoint into the CTA's own
//     segment buffer (workspace "seg", 64 x V x K fp32), then reverses the segment token by token exactly as the
//     reference does, with G (the gradient of the state) in registers. Per token it writes dv, dg (through the
//     gate activation), dbeta (through the sigmoid), the gradients of q_hat / k_hat of this value head (fp32
//     workspace "dqk"), and accumulates the per-(n, hv) partial sums of ddt_bias and dA_log in double.
//  2. finalize_qk_kernel (backward_finish.cu): per (token, q/k head), sums dqk over the value heads of the group in
//     head order, then applies the L2 norm's backward (one norm per q/k head: the norm's Jacobian is linear, so
//     summing first is the same math as the reference's per-value-head application).
//  3. gate_params_kernel (backward_finish.cu): ddt_bias and dA_log summed over the sequences in order.
//
// Thread layout of kernel 1 (budget: G and the recompute state in registers, no local-memory spills). A CTA has
// 8 warps; warp w owns state rows w V/8 .. (w+1) V/8 - 1 and lane l owns columns l K/32 .. (l+1) K/32 - 1 of each
// of them (K = V = 128: 16 rows x 4 columns, so G and the recompute state are 64 registers each, under the 255 a
// 256-thread CTA may use; 512 threads with 8 rows each capped registers at 128 and spilled 48 bytes). Loads and
// stores of the workspace states are float4 / float2 per lane, a whole row per warp. Row sums (S' k, G k) are warp
// shuffles; column sums over the V rows (dq_hat, dk_hat, da) are per-lane sums over the warp's 8 rows followed by
// a fixed-order sum of the per-warp partials in shared memory. Three barriers per reverse token: speed is the
// chunked backward's job; this kernel is the exact path the fast ones are checked against.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/backward_params.h"
#include "common/math.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/backward_finish.h"
#include "cuda/launch.h"

namespace kda::cuda {
namespace {

constexpr int kSegment = 64;     // tokens between stored states (the reference's recompute segment)
constexpr int kWarps = 8;  // 256 threads; warp w owns V / 8 state rows (8 for V = 64, 16 for V = 128)
// The segment buffer is per resident CTA, so the grid is capped: 128 CTAs hold 128 x 64 x 64 KiB = 512 MiB for
// K = V = 128 (about one such CTA is resident per SM, so 128 covers an H100/H200 almost fully).
// The grid size never changes a result: tasks are independent and the cross-task sums run in later kernels.
constexpr int64_t kMaxCtas = 128;
constexpr size_t kAlign = 256;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The workspace regions (byte offsets from the workspace base).
struct Layout {
  int64_t ctas = 0, seg_tokens = 0, slots = 0;
  size_t seg = 0, ckpt = 0, dqk = 0, gate = 0, total = 0;
};

Layout layout_for(const ForwardParams& p) {
  Layout l;
  l.ctas = std::min<int64_t>(std::max<int64_t>(p.N * p.HV, 1), kMaxCtas);
  l.seg_tokens = std::max<int64_t>(std::min<int64_t>(p.T, kSegment), 1);
  // Checkpoint slots: a fixed batch needs ceil(T / 64) per sequence. A packed one places segment s of sequence n
  // at slot floor(start_n / 64) + n + s: disjoint across sequences (floor(a/64) + ceil(l/64) <= floor((a+l)/64)
  // + 1) and below T / 64 + N + 1 for any start_n + len_n <= T (also for clamped device offsets).
  l.slots = p.has_cu_seqlens() ? p.T / kSegment + p.N + 1 : p.B * ((p.T + kSegment - 1) / kSegment);
  const size_t vk = static_cast<size_t>(p.V) * p.K * sizeof(float);
  size_t off = 0;
  l.seg = off;
  off = align_up(off + static_cast<size_t>(l.ctas) * l.seg_tokens * vk);
  l.ckpt = off;
  off = align_up(off + static_cast<size_t>(l.slots) * p.HV * vk);
  l.dqk = off;
  off = align_up(off + 2 * static_cast<size_t>(p.B * p.T) * p.HV * p.K * sizeof(float));
  l.gate = off;
  if (p.gate_mode != KDA_GATE_LOG_DECAY) off = align_up(off + static_cast<size_t>(p.N) * p.HV * (p.K + 1) * sizeof(double));
  l.total = off;
  return l;
}

struct Workspace {
  float* seg;
  float* ckpt;
  float* dqk;     // [2][B * T][HV][K]: gradients of q_hat (0) and k_hat (1) of each value head
  double* gate;   // [N][HV][K + 1]: per-sequence ddt_bias (K) and dA_log (1) partial sums
  int64_t seg_tokens, slots;
};

template <int C>
__device__ __forceinline__ void load_vec(const float* src, float (&x)[C]) {
  if constexpr (C == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else if constexpr (C == 2) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    x[0] = v.x; x[1] = v.y;
  } else {
#pragma unroll
    for (int c = 0; c < C; ++c) x[c] = src[c];
  }
}

template <int C>
__device__ __forceinline__ void store_vec(float* dst, const float (&x)[C]) {
  if constexpr (C == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(x[0], x[1], x[2], x[3]);
  } else if constexpr (C == 2) {
    *reinterpret_cast<float2*>(dst) = make_float2(x[0], x[1]);
  } else {
#pragma unroll
    for (int c = 0; c < C; ++c) dst[c] = x[c];
  }
}

// One token's preprocessed inputs, shared by the CTA.
template <int K, int V>
struct Stage {
  float q[K], k[K], a[K], x[K], glog[K];  // q_hat, k_hat, alpha = exp(g_log), raw gate input (+ dt_bias), g_log
  float v[V], dout[V];
  float beta, braw;                         // activated and raw beta
};

// Stages token t (of batch row b) for value head hv: warp 0 q_hat (full only), warp 1 k_hat, warp 2 the gate,
// warp 3 v and beta, warp 4 dO (full only). The caller syncs after.
template <int K, int V>
__device__ __forceinline__ void stage_token(const BackwardParams& bp, Stage<K, V>& st, int64_t b, int64_t t, int h,
                                            int hv, bool full, bool has_a, float a_log) {
  const ForwardParams& p = bp.f;
  constexpr int C = K / 32, CV = V / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0 || warp == 1) {
    if (warp == 0 && !full) return;
    const TensorView& src = warp == 0 ? p.q : p.k;
    const int64_t base = b * src.stride[0] + t * src.stride[1] + h * src.stride[2];
    float x[C];
#pragma unroll
    for (int j = 0; j < C; ++j) x[j] = load_f(src.data, src.dtype, base + (j * 32 + lane) * src.stride[3]);
    if (p.use_qk_l2norm) {
      const float inv = warp_inv_norm<C>(x);
#pragma unroll
      for (int j = 0; j < C; ++j) x[j] *= inv;
    }
    float* dst = warp == 0 ? st.q : st.k;
#pragma unroll
    for (int j = 0; j < C; ++j) dst[j * 32 + lane] = x[j];
  } else if (warp == 2) {
    const bool gated = p.gate_mode != KDA_GATE_LOG_DECAY;
    const int64_t base = b * p.g.stride[0] + t * p.g.stride[1] + hv * p.g.stride[2];
#pragma unroll
    for (int j = 0; j < C; ++j) {
      const int d = j * 32 + lane;
      const float g = load_f(p.g.data, p.g.dtype, base + d * p.g.stride[3]);
      const float bias =
          gated ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] + d * p.dt_bias.stride[1]] : 0.0f;
      const float glog = gate_log_decay<float>(p.gate_mode, g, has_a, a_log, bias, p.lower_bound);
      st.x[d] = g + bias;
      st.glog[d] = glog;
      st.a[d] = expf(glog);  // exp of a g_log <= 0 lies in [0, 1]: any depth gives 0, never NaN
    }
  } else if (warp == 3) {
    const int64_t base = b * p.v.stride[0] + t * p.v.stride[1] + hv * p.v.stride[2];
#pragma unroll
    for (int j = 0; j < CV; ++j) st.v[j * 32 + lane] = load_f(p.v.data, p.v.dtype, base + (j * 32 + lane) * p.v.stride[3]);
    if (lane == 0) {
      const float br = load_f(p.beta.data, p.beta.dtype, b * p.beta.stride[0] + t * p.beta.stride[1] + hv * p.beta.stride[2]);
      st.braw = br;
      st.beta = beta_activation<float>(br, p.beta_is_logits, p.allow_neg_eigval);
    }
  } else if (warp == 4 && full) {
    const TensorView& d = bp.dout;
    const int64_t base = b * d.stride[0] + t * d.stride[1] + hv * d.stride[2];
#pragma unroll
    for (int j = 0; j < CV; ++j) st.dout[j * 32 + lane] = load_f(d.data, d.dtype, base + (j * 32 + lane) * d.stride[3]);
  }
}

template <int K, int V>
__global__ void __launch_bounds__(kWarps * 32) backward_kernel(const BackwardParams bp, const Workspace ws,
                                                                          int64_t tasks) {
  constexpr int W = kWarps, NT = 32 * W, C = K / 32, RW = V / kWarps;
  static_assert(NT > K, "the gate epilogue gives column d to thread d and dbeta to thread NT - 1");
  const ForwardParams& p = bp.f;
  __shared__ __align__(16) Stage<K, V> st;
  __shared__ __align__(16) float part[3][W][K];  // per-warp partial column sums: dq_hat, dk_hat, da (float4 stores)
  __shared__ float part_beta[W];
  __shared__ double red[K];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int col0 = lane * C;
  const size_t VK = static_cast<size_t>(V) * K;
  float* segbuf = ws.seg + static_cast<size_t>(blockIdx.x) * ws.seg_tokens * VK;
  const bool has_a = p.has_A_log();
  const bool gated = p.gate_mode != KDA_GATE_LOG_DECAY;

  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int hv = static_cast<int>(task % p.HV);
    const int64_t n = task / p.HV;
    const int h = hv / p.group;
    int64_t b = n, start = 0, len = p.T, slot0 = n * ((p.T + kSegment - 1) / kSegment);
    if (p.has_cu_seqlens()) {
      // Device-resident offsets are not validated: clamped to [0, T], never out of bounds.
      b = 0;
      start = min(max(load_cu_seqlen(p.cu_seqlens, n), int64_t{0}), p.T);
      len = min(max(load_cu_seqlen(p.cu_seqlens, n + 1), start), p.T) - start;
      slot0 = start / kSegment + n;
    }
    const int64_t nseg = (len + kSegment - 1) / kSegment;
    float* ckpt = ws.ckpt + (static_cast<size_t>(slot0) * p.HV + hv) * VK;
    const size_t ckpt_step = static_cast<size_t>(p.HV) * VK;
    const float a_log = has_a ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;

    // One forward token on the registers S (rows 8 warp + r, columns col0 ..): S = S diag(a) + beta (v - S'k) k^T.
    auto forward_step = [&](float (&S)[RW][C]) {
      float k[C], a[C];
      load_vec<C>(&st.k[col0], k);
      load_vec<C>(&st.a[col0], a);
      const float beta = st.beta;
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        float pk = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          S[r][c] *= a[c];
          pk = fmaf(S[r][c], k[c], pk);
        }
        pk = group_sum<32>(pk);
        const float u = beta * (st.v[warp * RW + r] - pk);
#pragma unroll
        for (int c = 0; c < C; ++c) S[r][c] = fmaf(u, k[c], S[r][c]);
      }
    };

    // Pass 1: the forward, storing the state at the start of every segment (the last segment's tokens are
    // recomputed by pass 2, so they are not run here).
    {
      float S[RW][C];
#pragma unroll
      for (int r = 0; r < RW; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          S[r][c] = p.has_initial_state()
                        ? static_cast<const float*>(p.initial_state.data)[p.state_offset(p.initial_state.stride, n, hv,
                                                                                        warp * RW + r, col0 + c)]
                        : 0.0f;
      for (int64_t sg = 0; sg < nseg; ++sg) {
#pragma unroll
        for (int r = 0; r < RW; ++r) store_vec<C>(ckpt + sg * ckpt_step + (warp * RW + r) * K + col0, S[r]);
        if (sg == nseg - 1) break;
        for (int64_t i = sg * kSegment; i < (sg + 1) * kSegment; ++i) {
          stage_token<K, V>(bp, st, b, start + i, h, hv, false, has_a, a_log);
          __syncthreads();
          forward_step(S);
          __syncthreads();
        }
      }
    }

    // G = dS_final.
    float G[RW][C];
#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c)
        G[r][c] = bp.dfinal.data ? static_cast<const float*>(bp.dfinal.data)[p.state_offset(bp.dfinal.stride, n, hv,
                                                                                            warp * RW + r, col0 + c)]
                                 : 0.0f;
    // Per-(n, hv) sums over tokens in double (thread d owns column d): the sums over a whole sequence must not
    // lose the small terms of a long sum; the order is the reverse token order, fixed.
    double acc_bias = 0.0, acc_a = 0.0;

    // Pass 2: the segments from the last.
    for (int64_t sg = nseg - 1; sg >= 0; --sg) {
      const int64_t i0 = sg * kSegment, i1 = min(len, i0 + kSegment);
      {
        float S[RW][C];
#pragma unroll
        for (int r = 0; r < RW; ++r) load_vec<C>(ckpt + sg * ckpt_step + (warp * RW + r) * K + col0, S[r]);
        for (int64_t i = i0; i < i1; ++i) {
          // S_{t-1} of token i, written and later read by this same thread (no barrier needed for it).
#pragma unroll
          for (int r = 0; r < RW; ++r) store_vec<C>(segbuf + (i - i0) * VK + (warp * RW + r) * K + col0, S[r]);
          if (i + 1 == i1) break;
          stage_token<K, V>(bp, st, b, start + i, h, hv, false, has_a, a_log);
          __syncthreads();
          forward_step(S);
          __syncthreads();
        }
      }
      for (int64_t i = i1 - 1; i >= i0; --i) {
        const int64_t t = start + i;
        stage_token<K, V>(bp, st, b, t, h, hv, true, has_a, a_log);
        __syncthreads();
        float q[C], k[C], a[C], dq[C] = {}, dk[C] = {}, da[C] = {};
        load_vec<C>(&st.q[col0], q);
        load_vec<C>(&st.k[col0], k);
        load_vec<C>(&st.a[col0], a);
        const float beta = st.beta, scale = p.scale;
        float dbeta = 0.0f;
        const float* sprev_base = segbuf + (i - i0) * VK;
        const int64_t dv_base = b * bp.dv.stride[0] + t * bp.dv.stride[1] + hv * bp.dv.stride[2];
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          const int row = warp * RW + r;
          float sprev[C], sp[C];
          load_vec<C>(sprev_base + row * K + col0, sprev);
          const float dO = st.dout[row], sdO = scale * dO;
          float pk = 0.0f, gk = 0.0f;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            sp[c] = sprev[c] * a[c];                 // S' = S_{t-1} diag(a)
            pk = fmaf(sp[c], k[c], pk);              // p = S' k
            G[r][c] = fmaf(sdO, q[c], G[r][c]);      // G += scale dO q^T
            gk = fmaf(G[r][c], k[c], gk);            // du = G k
          }
          pk = group_sum<32>(pk);
          gk = group_sum<32>(gk);
          const float res = st.v[row] - pk, u = beta * res, dp = -beta * gk;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            const float s_t = fmaf(u, k[c], sp[c]);  // S_t = S' + u k^T
            dq[c] = fmaf(s_t, dO, dq[c]);            // dq_hat += S_t^T dO (scaled at the reduction)
            dk[c] = fmaf(G[r][c], u, dk[c]);         // dk_hat += G^T u
            dk[c] = fmaf(sp[c], dp, dk[c]);          //        + S'^T dp
            const float dsp = fmaf(dp, k[c], G[r][c]);  // dS' = G + dp k^T
            da[c] = fmaf(sprev[c], dsp, da[c]);      // da = colsum(S_{t-1} . dS')
            G[r][c] = dsp * a[c];                    // G <- dS' diag(a)
          }
          dbeta = fmaf(gk, res, dbeta);              // dbeta = du . (v - p)
          if (lane == r % 32) store_out(bp.dv.data, bp.dv.dtype, dv_base + row * bp.dv.stride[3], beta * gk);
        }
        store_vec<C>(&part[0][warp][col0], dq);
        store_vec<C>(&part[1][warp][col0], dk);
        store_vec<C>(&part[2][warp][col0], da);
        if (lane == 0) part_beta[warp] = dbeta;
        __syncthreads();

        // Cross-warp sums in warp order, then the per-token epilogue.
        const int64_t bt = b * p.T + t;
        for (int idx = tid; idx < 2 * K; idx += NT) {
          const int which = idx / K, d = idx % K;
          float s = 0.0f;
#pragma unroll
          for (int w = 0; w < W; ++w) s += part[which][w][d];
          if (which == 0) s *= scale;
          ws.dqk[((static_cast<size_t>(which) * p.B * p.T + bt) * p.HV + hv) * K + d] = s;
        }
        if (tid < K) {
          const int d = tid;
          float s = 0.0f;
#pragma unroll
          for (int w = 0; w < W; ++w) s += part[2][w][d];
          float dx, dA;
          gate_grad(p, st.x[d], a_log, has_a, st.glog[d], s * st.a[d], &dx, &dA);  // dg_log = da . alpha
          store_out(bp.dg.data, bp.dg.dtype, b * bp.dg.stride[0] + t * bp.dg.stride[1] + hv * bp.dg.stride[2] +
                                                 d * bp.dg.stride[3], dx);
          acc_bias += dx;
          acc_a += dA;
        }
        if (tid == NT - 1) {
          float s = 0.0f;
#pragma unroll
          for (int w = 0; w < W; ++w) s += part_beta[w];
          if (p.beta_is_logits) {
            s *= (p.allow_neg_eigval ? 2.0f : 1.0f) * sigmoid_grad(st.braw);
          }
          store_out(bp.dbeta.data, bp.dbeta.dtype, b * bp.dbeta.stride[0] + t * bp.dbeta.stride[1] +
                                                       hv * bp.dbeta.stride[2], s);
        }
        __syncthreads();  // the next token's stage overwrites st and part
      }
    }

    if (bp.dh0.data) {
#pragma unroll
      for (int r = 0; r < RW; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          static_cast<float*>(bp.dh0.data)[p.state_offset(bp.dh0.stride, n, hv, warp * RW + r, col0 + c)] = G[r][c];
    }
    if (gated) {
      double* out = ws.gate + (static_cast<size_t>(n) * p.HV + hv) * (K + 1);
      if (tid < K) {
        out[tid] = acc_bias;
        red[tid] = acc_a;
      }
      __syncthreads();
      if (tid == 0) {
        double s = 0.0;
        for (int d = 0; d < K; ++d) s += red[d];
        out[K] = s;
      }
    }
    __syncthreads();  // the next task reuses st, part and red
  }
}

template <int K, int V>
void launch(const BackwardParams& bp, const Layout& l, const Workspace& ws, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  const int64_t tasks = p.N * p.HV;
  if (tasks > 0) backward_kernel<K, V><<<static_cast<unsigned>(l.ctas), kWarps * 32, 0, s>>>(bp, ws, tasks);
  launch_finalize_qk(bp, ws.dqk, s);
  launch_gate_params(bp, ws.gate, p.N, s);
}

}  // namespace

Status generic_backward_support(const BackwardParams& bp) {
  const ForwardParams& p = bp.f;
  if ((p.K != 64 && p.K != 128) || (p.V != 64 && p.V != 128))
    return make_status(KDA_STATUS_NOT_SUPPORTED,
                       "q/v: the CUDA backward takes K and V in {64, 128} (got K = %d, V = %d); use CPU tensors",
                       p.K, p.V);
  return check_backward_tensors(bp);
}

Status generic_backward_workspace_size(const BackwardParams& bp, size_t* bytes) {
  KDA_RETURN_IF_ERROR(generic_backward_support(bp));
  *bytes = layout_for(bp.f).total;
  return Status::Ok();
}

Status generic_backward(const BackwardParams& bp, void* workspace, size_t workspace_bytes, void* stream) {
  KDA_RETURN_IF_ERROR(generic_backward_support(bp));
  const ForwardParams& p = bp.f;
  const Layout l = layout_for(p);
  if (workspace_bytes < l.total)
    return make_status(KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes: %zu given, %zu needed", workspace_bytes, l.total);
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    return Status{KDA_STATUS_INVALID_ARGUMENT, "workspace: the CUDA backward needs 16-byte aligned workspace"};
  char* base = static_cast<char*>(workspace);
  const Workspace ws{reinterpret_cast<float*>(base + l.seg), reinterpret_cast<float*>(base + l.ckpt),
                     reinterpret_cast<float*>(base + l.dqk), reinterpret_cast<double*>(base + l.gate), l.seg_tokens,
                     l.slots};
  return launch_on_device(p.device_id, "kda generic backward kernel launch", [&] {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (p.K == 64 && p.V == 64) launch<64, 64>(bp, l, ws, s);
    else if (p.K == 64) launch<64, 128>(bp, l, ws, s);
    else if (p.V == 64) launch<128, 64>(bp, l, ws, s);
    else launch<128, 128>(bp, l, ws, s);
    return cudaSuccess;
  });
}

}  // namespace kda::cuda
