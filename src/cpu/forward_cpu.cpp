// forward_cpu.cpp: the CPU backend. Chunked WY form of the recurrence in fp32 with an fp32 state, the matrix
// products through Eigen (A_kk's and the triangular solve in double, rounded once: gram_block says why); OpenMP over
// (sequence, value head) chains, and inside each chain where there are fewer chains than workers (its chunks'
// phase 1 in parallel, then its state rows in parallel blocks).
//
// Exponent arrangement (why no gate can overflow it). With Gamma the cumulative log-decay inside a chunk
// (non-increasing, every g_log <= 0), the intra-chunk coefficients need exp(Gamma_r - Gamma_c) for c <= r.
// Factoring that as exp(Gamma_r) * exp(-Gamma_c) overflows once a chunk decays past ~88 nats, which the
// unbounded softplus gate does routinely. Instead, for the rows of 16-token block I (first row r0):
//   - pairs inside the block: factored through its mid point, F = exp(Gloc - S / 2) (factored_block), where the
//     factors stay normal; else exp(Gamma_r - Gamma_c) directly (one exp per pair and channel), the exponent
//     summed over the tokens c + 1 .. r;
//   - pairs with c < r0 split at the reference point r0 - 1, which lies between c and r:
//       exp(Gamma_r - Gamma_{r0-1}) * exp(Gamma_{r0-1} - Gamma_c), both factors <= 1,
//     so nothing overflows, and a factor underflows only when the exact product is below 1e-38.
// Every exponent is a sum of g over the tokens between the two points, accumulated locally (block-relative
// prefix sums, suffix sums) rather than as a difference of two large chunk-level prefix sums, so its absolute
// error stays at the rounding of the terms it spans. The inter-chunk terms use exp(Gamma_r) and
// exp(Gamma_last - Gamma_r), both <= 1.
//
// Subnormal results are flushed to zero in the workers (FlushSubnormals): the underflowing factors above and their
// products are below 1e-38, far under any bound, but on Intel cores each subnormal result takes a microcode assist:
// cpu-8k-h8 ran 2.4x slower on a Xeon with AVX-512 without the flush (session 50: 317-322 against 132 ms, the same
// errors).
#include "cpu/forward_cpu.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "common/checkpoints.h"
#include "common/host_token.h"
#include "common/threads.h"

namespace kda::cpu {
namespace {

// Flush-to-zero of fp32 / fp64 results (MXCSR.FTZ) for the life of a worker's parallel region, the caller's mode
// restored after (OpenMP reuses its threads, and the caller's own code must not change mode). Inputs are read as
// they are (no DAZ). A no-op off x86.
class FlushSubnormals {
 public:
#if defined(__SSE__) || defined(__x86_64__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One chunk's tiles that do not depend on the state (phase 1 of the chunked form): what the state chain takes.
struct ChunkTiles {
  int64_t c0 = 0;  // first token of the chunk in its sequence
  int L = 0;       // tokens in the chunk
  Mat UW;          // C x (V + K): [U | W], the solved right-hand sides
  Mat Aqk;         // C x C intra-chunk output coefficients (c <= r)
  Mat Qg, Kdec;    // C x K: exp(Gam) . Q and exp(Gam_last - Gam) . K
  RowVec decay;    // K: exp(Gam_last), the chunk's decay of the state

  ChunkTiles(int C, int K, int V) : UW(C, V + K), Aqk(C, C), Qg(C, K), Kdec(C, K), decay(K) {}
};

// One worker's scratch, sized once for the largest chunk.
struct Workspace {
  Mat Q, Kk, Vv, G;      // chunk inputs: q_hat, k_hat (C x K), v (C x V), g_log (C x K)
  Eigen::VectorXf beta;  // C
  Mat Gam;               // C x K: cumulative log-decay from the chunk start (inclusive)
  Mat Gloc;              // C x K: cumulative log-decay from the start of the token's 16-block (inclusive)
  Mat Akk;               // C x C intra-chunk coefficients (strictly lower, scaled by beta before the solve)
  Mat EG;                // C x K: exp(Gam)
  Mat Kr, Qr, Kc;        // block rows scaled to the reference point, and the earlier rows scaled from it
  Mat E;                 // kSubBlock x K: exp(Gamma_r - Gamma_c) . k_c for the rows r of one column c
  Mat F, Qf, Kf, Kb;     // kSubBlock x K: a block's factored operands (see factored_block)
  RowVec suffix, mid;    // K
  Mat Vnew, O;           // C x V: the chain's corrections and outputs for the rows it advances
  Mat Ds;                // V x K: the chunk's state increment for those rows
  Mat X;                 // C x K: the gate's argument
  RowVec bias;           // K: dt_bias of the head
  MatD Ld, Rd, Pd;       // gram_block's operands (C x K) and product (C x C) in double; Pd is the solve's A_kk too
  MatD Sd;               // C x (V + K): the solve's right-hand sides in double

  Workspace(int C, int K, int V)
      : Q(C, K), Kk(C, K), Vv(C, V), G(C, K), beta(C), Gam(C, K), Gloc(C, K), Akk(C, C), EG(C, K),
        Kr(kSubBlock, K), Qr(kSubBlock, K), Kc(C, K), E(kSubBlock, K), F(kSubBlock, K), Qf(kSubBlock, K),
        Kf(kSubBlock, K), Kb(kSubBlock, K), suffix(K), mid(K), Vnew(C, V), O(C, V), Ds(V, K), X(C, K), bias(K),
        Ld(C, K), Rd(C, K), Pd(C, C), Sd(C, V + K) {}
};

// The chunk's raw gates (w.G's first L rows, as loaded) to log-decays: gate_log_decay<float> (common/math.h) on
// whole arrays, through Eigen's vectorized exp / log / log1p instead of a libm call or two per element, which took
// ~1/3 of the forward on one thread (the values differ by those functions' last-bit rounding). Both selects' other
// branch may be inf or NaN in a lane it does not pick; the picked one is the scalar form's.
void activate_gates(const ForwardParams& p, int hv, int L, Workspace& w) {
  if (p.gate_mode == KDA_GATE_LOG_DECAY) return;
  load_row(p.dt_bias.data, p.dt_bias.dtype, hv * p.dt_bias.stride[0], p.dt_bias.stride[1], p.K, w.bias.data());
  const bool has_a = p.has_A_log();
  const float a_log = has_a ? static_cast<float>(load_element(p.A_log.data, p.A_log.dtype, hv * p.A_log.stride[0]))
                            : 0.0f;
  auto g = w.G.topRows(L).array();
  auto x = w.X.topRows(L).array();
  x = (w.G.topRows(L).rowwise() + w.bias).array();
  if (p.gate_mode == KDA_GATE_SOFTPLUS) {
    // -exp(A_log + log_softplus(x)): log(x) above the threshold, x below its negative, log(log1p(exp(x))) between.
    const float th = static_cast<float>(kSoftplusThreshold);
    g = (x > th).select(x.max(1.0f).log(), (x < -th).select(x, x.max(-th).min(th).exp().log1p().log()));
    g = -(g + a_log).exp();
  } else {
    // lower_bound * sigmoid(exp(A_log) x); x == 0 gives sigmoid(0) whatever A_log (no inf * 0).
    const float ea = has_a ? std::exp(a_log) : 1.0f;
    g = (x == 0.0f).select(0.0f, x * ea);
    g = static_cast<float>(p.lower_bound) * (1.0f / (1.0f + (-g).exp()));
  }
}

// True where x * scale keeps the value exactly representable as a normal float (or x is 0): nothing the products
// below take has overflowed, or flushed a nonzero input below the normal range. scaled and raw: n contiguous
// values (row blocks of row-major matrices); a vectorized loop, where Eigen's .all() tested element by element
// (~6% of the forward).
bool all_normal(const float* scaled, const float* raw, int n) {
  const float big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::min();
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(scaled[i]);
    bad |= static_cast<int>(!(a <= big)) | (static_cast<int>(!(a >= tiny)) & static_cast<int>(raw[i] != 0.0f));
  }
  return bad == 0;
}

// Akk's block at (r0, c0) = left right^T, accumulated in double and rounded once. With near-identical keys each
// k_r . k_c sums K terms of one sign, and an fp32 accumulation errs alike in every pair of the chunk; T = (I + A_kk)^-1
// carries that as an error along the repeated key, which beta near 2 (a reflection at every token) keeps from
// decaying: near-identical keys at beta near 2 ended 2.2x past the fp32 class's state bound with the key norm's
// rounding fitted out (docs/numerics.md, "The key norm's rounding"), 0.6x with this.
template <typename A, typename B>
void gram_block(Workspace& w, const A& left, const B& right, int r0, int c0) {
  const auto m = left.rows(), n = right.rows();
  w.Ld.topRows(m) = left.template cast<double>();
  w.Rd.topRows(n) = right.template cast<double>();
  w.Pd.topLeftCorner(m, n).noalias() = w.Ld.topRows(m) * w.Rd.topRows(n).transpose();
  w.Akk.block(r0, c0, m, n) = w.Pd.topLeftCorner(m, n).template cast<float>();
}

// The block r0 .. r0 + nb - 1's pairs through a reference point in mid-block: with Gloc the block's inclusive
// prefix sums of g and S its total, exp(Gamma_r - Gamma_c) = F_r / F_c for F = exp(Gloc - S / 2), and F and 1 / F
// stay within exp(|S| / 2) of 1, so Aqk = (Q . F) (K / F)^T and Akk = (K . F) (K / F)^T are two small matrix
// products instead of one exp per (row, column, channel). False (nothing written) where an operand would leave the
// normal range (|S| past ~170 nats, or tiny q / k with a large |S|): the caller keeps the pairwise form there. The
// same factoring as the CUDA phase 1's S1 (chunk_prepare.cu); the CPU model (scripts/models/two_phase.py --precision
// diag=3xtf32) measured its errors on the verifier's stress probes.
bool factored_block(Workspace& w, Mat& aqk, int r0, int nb) {
  auto f = w.F.topRows(nb);
  w.mid = 0.5f * w.Gloc.row(r0 + nb - 1);
  f = w.Gloc.middleRows(r0, nb);  // (exp of a rowwise difference in one expression was a scalar loop and a malloc)
  f.rowwise() -= w.mid;
  f = f.array().exp().matrix();
  auto qf = w.Qf.topRows(nb), kf = w.Kf.topRows(nb), kb = w.Kb.topRows(nb);
  qf = (w.Q.middleRows(r0, nb).array() * f.array()).matrix();
  kf = (w.Kk.middleRows(r0, nb).array() * f.array()).matrix();
  kb = (w.Kk.middleRows(r0, nb).array() / f.array()).matrix();
  const int n = nb * static_cast<int>(w.Q.cols());
  if (!all_normal(qf.data(), w.Q.row(r0).data(), n) || !all_normal(kf.data(), w.Kk.row(r0).data(), n) ||
      !all_normal(kb.data(), w.Kk.row(r0).data(), n))
    return false;
  aqk.block(r0, r0, nb, nb).noalias() = qf * kb.transpose();
  gram_block(w, kf, kb, r0, r0);
  aqk.block(r0, r0, nb, nb).triangularView<Eigen::StrictlyUpper>().setZero();
  w.Akk.block(r0, r0, nb, nb).triangularView<Eigen::Upper>().setZero();
  return true;
}

// The intra-chunk coefficient matrices Akk (c < r, before the beta scaling) and aqk (c <= r) for L tokens.
void intra_chunk_coefficients(Workspace& w, Mat& aqk, int L) {
  w.Akk.topLeftCorner(L, L).setZero();
  aqk.topLeftCorner(L, L).setZero();
  for (int r0 = 0; r0 < L; r0 += kSubBlock) {
    const int r1 = std::min(r0 + kSubBlock, L), nb = r1 - r0;
    // Pairs inside the block: factored through its mid point where that stays in range; else exp(Gamma_r -
    // Gamma_c) with the exponent summed from token c + 1 to r (never a difference of two block sums, which would
    // carry the rounding of any huge decay before c), one column c at a time, so each step is a (rows x K) array
    // expression rather than a K-long one per pair.
    for (int c = factored_block(w, aqk, r0, nb) ? r1 : r0; c < r1; ++c) {
      const int n = r1 - c;  // rows r = c .. r1 - 1
      auto e = w.E.topRows(n);
      e.row(0).setZero();
      for (int i = 1; i < n; ++i) e.row(i) = e.row(i - 1) + w.G.row(c + i);
      e = e.array().exp().matrix();  // apart from the rowwise product, or the exp is not vectorized
      e.array().rowwise() *= w.Kk.row(c).array();
      aqk.col(c).segment(c, n) = (w.Q.middleRows(c, n).array() * e.array()).rowwise().sum().matrix();
      if (n > 1)
        w.Akk.col(c).segment(c + 1, n - 1) = (w.Kk.middleRows(c + 1, n - 1).array().template cast<double>() *
                                              e.bottomRows(n - 1).array().template cast<double>())
                                                 .rowwise().sum().template cast<float>().matrix();  // as gram_block
    }
    if (r0 == 0) continue;
    // Rows r in the block against all columns c < r0, through the reference point r0 - 1.
    w.F.topRows(nb) = w.Gloc.middleRows(r0, nb).array().exp().matrix();  // one exp per element for both
    w.Kr.topRows(nb) = (w.Kk.middleRows(r0, nb).array() * w.F.topRows(nb).array()).matrix();
    w.Qr.topRows(nb) = (w.Q.middleRows(r0, nb).array() * w.F.topRows(nb).array()).matrix();
    w.suffix.setZero();  // sum of g over (c, r0 - 1]
    for (int c = r0 - 1; c >= 0; --c) {
      w.Kc.row(c) = (w.Kk.row(c).array() * w.suffix.array().exp()).matrix();
      w.suffix += w.G.row(c);
    }
    gram_block(w, w.Kr.topRows(nb), w.Kc.topRows(r0), r0, 0);
    aqk.block(r0, 0, nb, r0).noalias() = w.Qr.topRows(nb) * w.Kc.topRows(r0).transpose();
  }
}

// Phase 1 of chunk [c0, c0 + L) of sequence sp for value head hv: every tile of the chunk that the state does not
// enter, into t. Independent across chunks, so a chain's chunks can be prepared in parallel.
void prepare_chunk(const ForwardParams& p, const SequenceSpan& sp, int hv, int64_t c0, int L, Workspace& w,
                   ChunkTiles& t) {
  const int K = p.K, V = p.V;
  t.c0 = c0;
  t.L = L;
  for (int i = 0; i < L; ++i) {
    const int64_t tok = sp.start + c0 + i;
    load_token<float>(p, sp.batch, tok, hv, w.Q.row(i).data(), w.Kk.row(i).data(), w.Vv.row(i).data(), nullptr,
                      &w.beta(i));
    load_row(p.g.data, p.g.dtype, sp.batch * p.g.stride[0] + tok * p.g.stride[1] + hv * p.g.stride[2],
             p.g.stride[3], K, w.G.row(i).data());
  }
  activate_gates(p, hv, L, w);
  for (int i = 0; i < L; ++i) {
    if (i == 0)
      w.Gam.row(i) = w.G.row(i);
    else
      w.Gam.row(i) = w.Gam.row(i - 1) + w.G.row(i);
    if (i % kSubBlock == 0)
      w.Gloc.row(i) = w.G.row(i);
    else
      w.Gloc.row(i) = w.Gloc.row(i - 1) + w.G.row(i);
  }
  intra_chunk_coefficients(w, t.Aqk, L);
  w.EG.topRows(L) = w.Gam.topRows(L).array().exp().matrix();  // exp(Gam): W's rows and Qg both take it

  // [U | W] = (I + diag(beta) tril(Akk, -1))^-1 [diag(beta) V | diag(beta) exp(Gam) . K]
  auto akk = w.Akk.topLeftCorner(L, L);
  akk = w.beta.head(L).asDiagonal() * akk;
  auto rhs = t.UW.topRows(L);
  rhs.leftCols(V) = w.beta.head(L).asDiagonal() * w.Vv.topRows(L);
  rhs.rightCols(K) = w.beta.head(L).asDiagonal() * (w.Kk.topRows(L).array() * w.EG.topRows(L).array()).matrix();
  {  // In double, rounded once (as gram_block): with near-identical keys at beta near 2, T's rows alternate in sign
     // and each row of the substitution cancels its terms, so an fp32 solve's error (up to 1.4x the fp32 class's
     // 2^-17 at the quick suite's length, 0.3% of seeds) passed the chunk's rows on along the repeated key.
    auto a = w.Pd.topLeftCorner(L, L);
    auto x = w.Sd.topRows(L);
    a = akk.cast<double>();
    x = rhs.cast<double>();
    a.triangularView<Eigen::UnitLower>().solveInPlace(x);
    rhs = x.cast<float>();
  }

  t.Qg.topRows(L) = (w.Q.topRows(L).array() * w.EG.topRows(L).array()).matrix();
  // exp(Gam_last - Gam) . K, the suffix sums taken backwards.
  w.suffix.setZero();
  for (int i = L - 1; i >= 0; --i) {
    t.Kdec.row(i) = (w.Kk.row(i).array() * w.suffix.array().exp()).matrix();
    w.suffix += w.G.row(i);
  }
  t.decay = w.Gam.row(L - 1).array().exp().matrix();
}

// Phase 2 of one chunk for the state rows [v0, v0 + nv) (value-first, so each row is a chain of its own: a value
// channel's outputs and state rows need no other row): the outputs' columns v0.. and those rows advanced.
void advance_chunk(const ForwardParams& p, const SequenceSpan& sp, int hv, const ChunkTiles& t, Mat& S, int v0,
                   int nv, Workspace& w) {
  const int K = p.K, V = p.V, L = t.L;
  auto s = S.middleRows(v0, nv);
  // V_new = U - W S^T: the corrections the chunk writes, against the state at the chunk start.
  auto vnew = w.Vnew.topLeftCorner(L, nv);
  vnew = t.UW.block(0, v0, L, nv);
  vnew.noalias() -= t.UW.block(0, V, L, K) * s.transpose();

  // O = scale * ((exp(Gam) . Q) S^T + tril(Aqk) V_new)
  auto o = w.O.topLeftCorner(L, nv);
  o.noalias() = t.Qg.topRows(L) * s.transpose();
  o.noalias() += t.Aqk.topLeftCorner(L, L).triangularView<Eigen::Lower>() * vnew;
  o *= p.scale;
  for (int i = 0; i < L; ++i) {
    const int64_t tok = sp.start + t.c0 + i;
    store_row<float>(p.out, p.out_dtype,
                     sp.batch * p.out_stride[0] + tok * p.out_stride[1] + hv * p.out_stride[2] + v0 * p.out_stride[3],
                     p.out_stride[3], nv, w.O.row(i).data());
  }

  // S <- S diag(exp(Gam_last)) + V_new^T (exp(Gam_last - Gam) . K), the increment summed over the chunk's tokens in
  // blocks of kSubBlock, each block's sum formed from zero and the block sums added after (blocked summation). A
  // plain L-term sum's rounding grows with the partial sums it carries: with near-identical keys at beta near 2 every
  // token reflects the state, V_new's rows alternate in sign at the state's scale, and the 64-term sums put the final
  // state's error at 1.8-2.2e-5 at T = 2048 (3.3e-5 unvectorized) against the fp32 class's 2.16e-5 (the verifier test
  // CpuBackendPassesNearIdenticalKeysAtBeta2 failed 1 seed in 60 on AVX-512, every seed unvectorized). Blocked:
  // 1.0-1.6e-5 either way at +2% of cpu-8k-h8's time (fp64 accumulation: the same errors, +12%); 0 of 300 random seeds
  // failing, though a rare one still nears the bound, in AVX2 builds too (docs/numerics.md).
  auto ds = w.Ds.topRows(nv);
  const int b0 = std::min(kSubBlock, L);
  ds.noalias() = vnew.topRows(b0).transpose() * t.Kdec.topRows(b0);
  for (int r0 = kSubBlock; r0 < L; r0 += kSubBlock) {
    const int nb = std::min(kSubBlock, L - r0);
    ds.noalias() += vnew.middleRows(r0, nb).transpose() * t.Kdec.middleRows(r0, nb);
  }
  s = s * t.decay.asDiagonal();
  s += ds;
}

// The chunks of sequence n (length len) as (first token, tokens): C tokens each, and a chunk also ends at every
// prefix-cache checkpoint's token count, so the state is on hand there.
std::vector<std::pair<int64_t, int>> chunk_schedule(const ForwardParams& p, int64_t n, int64_t len, int C) {
  std::vector<std::pair<int64_t, int>> chunks;
  for (int64_t c0 = 0; c0 < len;) {
    int64_t l = std::min<int64_t>(C, len - c0);
    const int64_t next = next_checkpoint_count(p, n, len, c0);  // > c0: counts <= c0 are written by then
    if (next != kNoCheckpoint) l = std::min(l, next - c0);
    chunks.emplace_back(c0, static_cast<int>(l));
    c0 += l;
  }
  return chunks;
}

void load_state(const ForwardParams& p, int64_t n, int hv, Mat& S, int v0, int nv) {
  for (int vi = v0; vi < v0 + nv; ++vi)
    for (int ki = 0; ki < p.K; ++ki)
      S(vi, ki) = p.has_initial_state() ? static_cast<const float*>(p.initial_state.data)[p.state_offset(
                                              p.initial_state.stride, n, hv, vi, ki)]
                                        : 0.0f;
}

void store_state(const ForwardParams& p, int64_t n, int hv, const Mat& S, int v0, int nv) {
  if (!p.has_final_state()) return;
  for (int vi = v0; vi < v0 + nv; ++vi)
    for (int ki = 0; ki < p.K; ++ki)
      static_cast<float*>(p.final_state)[p.state_offset(p.final_state_stride, n, hv, vi, ki)] = S(vi, ki);
}

// As many chains as workers or more: one worker runs a (sequence, value head) chain from start to end.
void forward_by_chains(const ForwardParams& p, const std::vector<SequenceSpan>& seqs, int C, int workers) {
  const int64_t tasks = p.N * p.HV;
#pragma omp parallel num_threads(workers)
  {
    const FlushSubnormals ftz;
    Workspace w(C, p.K, p.V);
    ChunkTiles t(C, p.K, p.V);
    Mat S(p.V, p.K);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / p.HV;
      const int hv = static_cast<int>(task % p.HV);
      const SequenceSpan& sp = seqs[n];
      load_state(p, n, hv, S, 0, p.V);
      HostCheckpoints ckpts(p, n, hv, sp.length);
      auto state = [&](int vi, int ki) { return S(vi, ki); };
      ckpts.write(0, state);
      for (const auto& [c0, L] : chunk_schedule(p, n, sp.length, C)) {
        prepare_chunk(p, sp, hv, c0, L, w, t);
        for (int v0 = 0; v0 < p.V; v0 += kRowBlock)
          advance_chunk(p, sp, hv, t, S, v0, std::min(kRowBlock, p.V - v0), w);
        ckpts.write(c0 + L, state);
      }
      store_state(p, n, hv, S, 0, p.V);
    }
  }
}

// Fewer chains than workers (few heads, few long sequences): the work inside each chain is spread too. Rounds of
// `window` chunks a chain: the round's phase 1 in parallel over (chain, chunk), then each chain's state advanced
// through those chunks in parallel over its blocks of kRowBlock value rows (S is value-first: a row is a chain of
// its own). The same products as forward_by_chains, so the same bits; the tiles of one round (~150 KB a chunk at
// K = V = 128) are the memory it adds.
void forward_within_chains(const ForwardParams& p, const std::vector<SequenceSpan>& seqs, int C, int workers) {
  const int64_t tasks = p.N * p.HV;
  const int K = p.K, V = p.V;
  const int blocks = (V + kRowBlock - 1) / kRowBlock;
  const int window = static_cast<int>(2 * ((workers + tasks - 1) / tasks));  // 2x: phase 1 balances over workers

  std::vector<std::vector<std::pair<int64_t, int>>> sched(static_cast<size_t>(tasks));
  size_t chunks = 0;  // of the longest chain
  for (int64_t task = 0; task < tasks; ++task) {
    sched[task] = chunk_schedule(p, task / p.HV, seqs[task / p.HV].length, C);
    chunks = std::max(chunks, sched[task].size());
  }
  std::vector<Mat> S(static_cast<size_t>(tasks), Mat(V, K));
  std::vector<ChunkTiles> tiles(static_cast<size_t>(tasks * window), ChunkTiles(C, K, V));
  const int64_t units = tasks * blocks;  // (chain, row block)
  std::vector<HostCheckpoints> ckpts;    // one a unit: each writes its own rows
  ckpts.reserve(static_cast<size_t>(units));
  for (int64_t u = 0; u < units; ++u)
    ckpts.emplace_back(p, u / blocks / p.HV, static_cast<int>(u / blocks % p.HV), seqs[u / blocks / p.HV].length);

#pragma omp parallel num_threads(workers)
  {
    const FlushSubnormals ftz;
    Workspace w(C, K, V);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t task = u / blocks, n = task / p.HV;
      const int v0 = static_cast<int>(u % blocks) * kRowBlock, nv = std::min(kRowBlock, V - v0);
      load_state(p, n, static_cast<int>(task % p.HV), S[task], v0, nv);
      ckpts[u].write(0, [&](int vi, int ki) { return S[task](vi, ki); }, v0, v0 + nv);
    }
    for (size_t r0 = 0; r0 < chunks; r0 += window) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < tasks * window; ++u) {
        const int64_t task = u / window, n = task / p.HV;
        const size_t i = r0 + u % window;
        if (i < sched[task].size())
          prepare_chunk(p, seqs[n], static_cast<int>(task % p.HV), sched[task][i].first, sched[task][i].second, w,
                        tiles[u]);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u) {
        const int64_t task = u / blocks, n = task / p.HV;
        const int hv = static_cast<int>(task % p.HV);
        const int v0 = static_cast<int>(u % blocks) * kRowBlock, nv = std::min(kRowBlock, V - v0);
        for (int j = 0; j < window && r0 + j < sched[task].size(); ++j) {
          const ChunkTiles& t = tiles[task * window + j];
          advance_chunk(p, seqs[n], hv, t, S[task], v0, nv, w);
          ckpts[u].write(t.c0 + t.L, [&](int vi, int ki) { return S[task](vi, ki); }, v0, v0 + nv);
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int v0 = static_cast<int>(u % blocks) * kRowBlock;
      store_state(p, u / blocks / p.HV, static_cast<int>(u / blocks % p.HV), S[u / blocks], v0,
                  std::min(kRowBlock, V - v0));
    }
  }
}

}  // namespace

Status forward(const ForwardParams& p) {
  const std::vector<SequenceSpan> seqs = host_sequences(p);
  const int C = p.chunk_size > 0 ? p.chunk_size : kDefaultChunk;
  const int workers = worker_threads(p.cpu_threads);
  if (p.N * p.HV >= workers)
    forward_by_chains(p, seqs, C, workers);
  else
    forward_within_chains(p, seqs, C, workers);
  return Status::Ok();
}

}  // namespace kda::cpu
