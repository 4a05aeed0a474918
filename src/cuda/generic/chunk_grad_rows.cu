// chunk_grad_rows.cu: the chunked backward's per-row finishing of a tame chunk (docs/backward.md, launch 6), after
// chunk_grad_tc.cu has put dq_hat, dk_hat and d g_log where the task's QS, BK and KD tiles were (ProdLayout) and
// dbeta's third term's row sums in TBrow. Per (chunk, value head), a warp a row, everything a row at a time:
//   dq, dk   through the L2 norm's backward (1 / |x| and x_hat . dx_hat over the row), straight into the gradients
//            for a group of one value head, else dq_hat / dk_hat into the workspace's dqk for finalize_qk_kernel;
//            neither where chunk_grad_tc.cu wrote dq and dk itself (kQkDone: grad_tc_finishes_qk), nor q / k's loads
//   dg       through the gate activation's backward; the chunk's partial sums of ddt_bias (per channel) and dA_log
//   dbeta    rowsum(dA . A') + rowsum(dBV . V) + rowsum(BK . K . E), through the sigmoid;  dv = beta dBV
// the operations and their order those of chunk_grad.cu's P5-P7, which does the same for steep chunks. Nothing is
// staged in shared memory but the gate partials' per-warp sums (deterministic: added in warp order, no atomics), so
// several CTAs share an SM and hide each other's loads, where chunk_grad.cu's one 230 KB CTA an SM could not.
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/backward_common.cuh"
#include "cuda/generic/chunk_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kC = kChunk;

template <int K>
struct RowsLayout {  // bytes of shared memory: per-warp partial sums of ddt_bias [kWarps][K] and dA_log [kWarps][32]
  static constexpr size_t kBytes = sizeof(double) * kWarps * (K + 32);
};

// kQkDone: chunk_grad_tc.cu wrote dq and dk (an instance of its own: the other path's live values had made the bf16
// K = V = 128 instance spill 12 bytes at its 80 registers, ptxas sm_90a).
template <int K, int V, class Spec, bool kQkDone>
__global__ void __launch_bounds__(kThreads, 3) grad_rows_kernel(const BackwardParams bp, char* ws) {
  constexpr int CK = K / 32, CV = V / 32, CA = kC / 32;
  const ForwardParams& p = bp.f;
  extern __shared__ __align__(16) double red[];  // [kWarps][K] ddt_bias, then [kWarps][32] dA_log

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const int64_t count = *reinterpret_cast<const int64_t*>(ws);
  const int64_t task = blockIdx.x, ci = task / p.HV;
  if (ci >= count) return;  // chunk_grad.cu writes past-the-list tasks' zero partials
  const ProdLayout pl{K, V};
  const float* const prod = reinterpret_cast<const float*>(ws + bl.prod) + task * pl.floats();
  if (reinterpret_cast<const int*>(prod)[pl.Tame()] == 0) return;  // steep: chunk_grad.cu's
  const ChunkRec rec = reinterpret_cast<const ChunkRec*>(ws + bl.fwd.list)[ci];
  const int hv = static_cast<int>(task % p.HV), h = hv / p.group, L = rec.len;
  const int64_t b = p.has_cu_seqlens() ? 0 : rec.seq, t0 = rec.start;
  const float* const DQ = prod + pl.QS();  // chunk_grad_tc.cu's dq_hat [C][K]
  const float* const DK = prod + pl.BK();  // dk_hat
  const float* const DG = prod + pl.KD();  // d g_log
  const float* const BV = prod + pl.BV();  // T^T dU [C][V]
  const float* const dA = prod + pl.dA();  // [C][C], strictly lower
  const float* const Ap = reinterpret_cast<const float*>(ws + bl.akk) + task * int64_t{kC} * kC;  // A'
  // 1 / |q|, 1 / |k| of the rows, from phase 1 (chunk_prepare.cu BackwardSaves), as chunk_grad_tc.cu scaled them.
  const float* const inv_norms = reinterpret_cast<const float*>(ws + bl.norms) + task * int64_t{2 * kC};
  const bool has_a = p.has_A_log();
  const kda_gate_mode_t gate_mode = Spec::gate(p.gate_mode);
  const bool gated = gate_mode != KDA_GATE_LOG_DECAY;
  const float a_log = has_a ? static_cast<const float*>(p.A_log.data)[hv * p.A_log.stride[0]] : 0.0f;
  const float ea = has_a ? expf(a_log) : 1.0f;  // gate_grad's exp(A_log), once
  float bias[CK];
#pragma unroll
  for (int j = 0; j < CK; ++j)
    bias[j] = gated ? static_cast<const float*>(p.dt_bias.data)[hv * p.dt_bias.stride[0] +
                                                               (32 * j + lane) * p.dt_bias.stride[1]]
                    : 0.0f;
  float* const dqk = reinterpret_cast<float*>(ws + bl.dqk);  // [2][B T][HV][K]

  double acc_bias[CK], acc_a = 0.0;
#pragma unroll
  for (int j = 0; j < CK; ++j) acc_bias[j] = 0.0;
#pragma unroll 1
  for (int r = warp; r < L; r += kWarps) {
    const int64_t t = t0 + r, bt = b * p.T + t;
    // Every load of the row first (one round trip a row), then its arithmetic.
    uint32_t qr[CK], kr[CK], gr[CK], vr[CV], braw_bits;
    float dq[CK], dk[CK], dg[CK], bv[CV], ap[CA], da[CA];
    const RowOffsets<Spec> ro(p, b, t, h, hv, lane, 0);
    if (kQkDone)
      load_gate_bits<Spec>(p, ro, gr, braw_bits);
    else
      load_row_bits<Spec>(p, ro, qr, kr, gr, braw_bits);
    load_bits_strided(vr, p.v.data, Spec::dt(p.v.dtype),
                      b * p.v.stride[0] + t * p.v.stride[1] + hv * p.v.stride[2] + lane * Spec::cs(p.v.stride[3]),
                      32 * Spec::cs(p.v.stride[3]));
#pragma unroll
    for (int j = 0; j < CK; ++j) {
      if (!kQkDone) {
        dq[j] = DQ[r * K + 32 * j + lane];
        dk[j] = DK[r * K + 32 * j + lane];
      }
      dg[j] = DG[r * K + 32 * j + lane];
    }
#pragma unroll
    for (int j = 0; j < CV; ++j) bv[j] = BV[r * V + 32 * j + lane];
#pragma unroll
    for (int m = 0; m < CA; ++m) {
      const int c = lane + 32 * m;
      ap[m] = c < r ? Ap[r * kC + c] : 0.0f;
      da[m] = c < r ? dA[r * kC + c] : 0.0f;
    }
    const float tb = lane < CK ? prod[pl.TBrow() + lane * kC + r] : 0.0f;
    const bool norm = p.use_qk_l2norm && !kQkDone;
    const float inv_qk[2] = {norm ? inv_norms[r] : 1.0f, norm ? inv_norms[kC + r] : 1.0f};

    // dbeta and dv (chunk_grad.cu P5a / P5b's sums in their order).
    const float braw = bits_to_float(braw_bits, Spec::dt(p.beta.dtype));
    const float beta = beta_activation<float>(braw, p.beta_is_logits, p.allow_neg_eigval);
    {
      float vv[CV];
      bits_to_float(vv, vr, Spec::dt(p.v.dtype));
      float s = 0.0f;
#pragma unroll
      for (int m = 0; m < CA; ++m)
        if (lane + 32 * m < r) s = fmaf(da[m], ap[m], s);
#pragma unroll
      for (int j = 0; j < CV; ++j) s = fmaf(bv[j], vv[j], s);
      s = group_sum<32>(s);
      s = group_sum<32>(tb) + s;
      if (lane == 0 && bp.dbeta.data) {
        if (p.beta_is_logits) s *= (p.allow_neg_eigval ? 2.0f : 1.0f) * sigmoid_grad(braw);
        store_out(bp.dbeta.data, Spec::dt(bp.dbeta.dtype),
                  b * bp.dbeta.stride[0] + t * bp.dbeta.stride[1] + hv * bp.dbeta.stride[2], s);
      }
      if (bp.dv.data) {
        const int64_t dvb = b * bp.dv.stride[0] + t * bp.dv.stride[1] + hv * bp.dv.stride[2];
#pragma unroll
        for (int j = 0; j < CV; ++j)
          store_out(bp.dv.data, Spec::dt(bp.dv.dtype), dvb + (32 * j + lane) * Spec::cs(bp.dv.stride[3]),
                    beta * bv[j]);
      }
    }
    // dg through the gate activation, and the gate parameters' partial sums (chunk_grad.cu P6).
#pragma unroll
    for (int j = 0; j < CK; ++j) {
      const float g = bits_to_float(gr[j], Spec::dt(p.g.dtype));
      const float glog = gate_mode == KDA_GATE_SOFTPLUS  // gate_grad reads it for softplus only
                             ? gate_log_decay<float>(gate_mode, g, has_a, a_log, bias[j], p.lower_bound)
                             : 0.0f;
      float dx, dAl;
      gate_grad(p, gate_mode, g + bias[j], ea, has_a, glog, dg[j], &dx, &dAl,
                [](float z) { return sigmoid_grad_fast(z); });
      if (bp.dg.data)
        store_out(bp.dg.data, Spec::dt(bp.dg.dtype),
                  b * bp.dg.stride[0] + t * bp.dg.stride[1] + hv * bp.dg.stride[2] +
                      (32 * j + lane) * Spec::cs(bp.dg.stride[3]),
                  dx);
      acc_bias[j] += dx;
      acc_a += dAl;
    }
    // dq, dk (chunk_grad.cu P7 / P6's dqk).
    if (kQkDone) continue;
    if (p.group > 1) {
#pragma unroll
      for (int j = 0; j < CK; ++j) {
        const int d = 32 * j + lane;
        dqk[(bt * p.HV + hv) * K + d] = dq[j];
        dqk[((p.B * p.T + bt) * p.HV + hv) * K + d] = dk[j];
      }
      continue;
    }
#pragma unroll 1
    for (int which = 0; which < 2; ++which) {
      float x[CK], d[CK];
#pragma unroll
      for (int j = 0; j < CK; ++j) {
        x[j] = bits_to_float(which == 0 ? qr[j] : kr[j], Spec::dt(which == 0 ? p.q.dtype : p.k.dtype));
        d[j] = which == 0 ? dq[j] : dk[j];
      }
      if (p.use_qk_l2norm) {
        const float inv = inv_qk[which];
#pragma unroll
        for (int j = 0; j < CK; ++j) x[j] *= inv;  // x_hat, as chunk_grad_tc.cu staged it
        l2_norm_backward(x, inv, d);
      }
      const GradView& gv = which == 0 ? bp.dq : bp.dk;
      const int64_t base = b * gv.stride[0] + t * gv.stride[1] + h * gv.stride[2];
#pragma unroll
      for (int j = 0; j < CK; ++j)
        store_out(gv.data, Spec::dt(gv.dtype), base + (32 * j + lane) * Spec::cs(gv.stride[3]), d[j]);
    }
  }
  // The chunk's gate partials: per channel, the warps' sums in warp order; dA_log's, every lane's in a fixed order.
#pragma unroll
  for (int j = 0; j < CK; ++j) red[warp * K + 32 * j + lane] = acc_bias[j];
  red[kWarps * K + warp * 32 + lane] = acc_a;
  __syncthreads();
  double* const part = reinterpret_cast<double*>(ws + bl.gate) + task * (K + 1);
  for (int d = tid; d < K; d += kThreads) {
    double sb = 0.0;
    for (int w = 0; w < kWarps; ++w) sb += red[w * K + d];
    part[d] = sb;
  }
  if (warp == kWarps - 1) {
    double sa = 0.0;
    for (int w = 0; w < kWarps; ++w) sa += red[kWarps * K + w * 32 + lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sa += __shfl_xor_sync(0xffffffffu, sa, o);
    if (lane == 0) part[K] = sa;
  }
}

template <int K, int V, class Spec, bool kQkDone>
cudaError_t launch_spec(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const size_t bytes = RowsLayout<K>::kBytes;
  const ForwardParams& p = bp.f;
  const int64_t tasks = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group).fwd.cap * p.HV;
  grad_rows_kernel<K, V, Spec, kQkDone><<<static_cast<unsigned>(tasks), kThreads, bytes, s>>>(bp, ws);
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_grad_rows(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    return with_io_spec(grad_io_fast(bp), p.gate_mode, [&](auto spec) {
      using Spec = decltype(spec);
      return grad_tc_finishes_qk(bp) ? launch_spec<K, V, Spec, true>(bp, ws, s)
                                     : launch_spec<K, V, Spec, false>(bp, ws, s);
    });
  });
}

}  // namespace kda::cuda::chunk
