// kda_bench.cpp: kda-bench, the benchmark driver. For each (workload, implementation): draw inputs from the
// workload's recipe with a fresh seed, verify the result against the fp64 oracle (a wrong answer gets no time),
// then time it (CUDA: graph replay between events; CPU: wall clock), and print it against the floor measured in
// the same run. train-* workloads also verify the backward's gradients against the fp64 reference backward and time
// it. Writes every figure to --json for bench/results/.
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/backward_cases.h"
#include "common/cases.h"
#include "common/compare.h"
#include "common/device.h"
#include "common/workloads.h"

using namespace kda::testing;

namespace {

struct Options {
  std::vector<std::string> workloads;
  std::vector<std::string> impls;
  std::string json;
  std::string commit = "unknown";
  int iters = 0;  // 0: 200 on CUDA, 5 on the CPU
  int warmup = 20;
  int rotate = 0;  // input sets timed in turn; 0: enough that together they exceed 3x the 60 MB L2 (at most 32)
  int threads = 0;
  bool verify = true;
  bool list = false;
  uint64_t seed = 0;  // --seed: every workload's inputs from this seed (the replay of a printed run); 0: fresh
  std::string stage_clocks;  // --stage-clocks: phase 1's (and the state pass's) stamps of one more forward a GPU impl
  int chunk_size = 0;  // --chunk-size: the prefill and train workloads' chunk_size argument (0: each backend's choice)
};

// The seed of a workload's inputs: --seed's, else a fresh one (printed with the workload, for replay).
uint64_t workload_seed(const Options& opt) { return opt.seed ? opt.seed : fresh_seed(); }

void usage() {
  std::printf(
      "usage: kda-bench [--list] [--workload NAME]... [--impl cpu|cuda-generic|cuda-chunked|cuda-recurrent|cuda-hopper]... [--iters N] [--warmup N]\n"
      "                 [--rotate N] [--threads N] [--json PATH] [--commit SHA] [--no-verify] [--seed N]\n"
      "                 [--stage-clocks PATH] [--chunk-size N]\n"
      "With no --workload: h64-fixed on a GPU if one is present, else cpu-8k-h8 on the CPU backend.\n"
      "--seed N: the inputs of every workload from seed N (a run prints each workload's seed; 0 or none: fresh).\n"
      "--stage-clocks PATH: after a GPU impl's timing, one more forward with phase 1's per-warp barrier stamps,\n"
      "  written to PATH.IMPL.WORKLOAD, and the sm_90a state pass's to PATH.IMPL.WORKLOAD.state where it ran (a\n"
      "  build with -DKDA_STAGE_CLOCKS=ON; scripts/stage_clocks.py reads both).\n"
      "--chunk-size N: the prefill and train workloads' chunk_size, 16, 32 or 64 (0 or none: each backend's choice;\n"
      "  the chunked backends' chunk length where they honour it: the CPU backend does, the CUDA ones take 64).\n");
}

// Wall-clock times of `iters` host calls (CPU backends): median, mean, min, max in microseconds.
template <typename F>
TimingStats time_host(int iters, F&& call) {
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  double sum = 0;
  for (double x : us) sum += x;
  std::sort(us.begin(), us.end());
  return TimingStats{sum / iters, us[us.size() / 2], us.front(), us.back(), iters};
}

// How many input sets to rotate through for a problem of `bytes` (see Options::rotate).
int rotation(const Options& opt, double bytes) {
  if (opt.rotate > 0) return opt.rotate;
  const double l2x3 = 3.0 * 60e6;
  return static_cast<int>(std::min(32.0, std::max(1.0, std::ceil(l2x3 / bytes))));
}

kda_backend_t backend_of(const std::string& impl) {
  if (impl == "cpu") return KDA_BACKEND_CPU;
  if (impl == "cuda-generic") return KDA_BACKEND_CUDA_GENERIC;
  if (impl == "cuda-chunked") return KDA_BACKEND_CUDA_CHUNKED;
  if (impl == "cuda-recurrent") return KDA_BACKEND_CUDA_RECURRENT;
  if (impl == "cuda-hopper") return KDA_BACKEND_CUDA_HOPPER;
  if (impl == "reference") return KDA_BACKEND_REFERENCE;
  return KDA_BACKEND_AUTO;
}

// fp32 matrix-product rate of this machine through Eigen (the CPU backend's library), one 512^3 product per
// thread at a time, all threads busy: the yardstick the CPU backend's throughput is reported against. Only the
// products are timed, after one untimed product: until session 46 the clock also ran over the operands' fill
// (Random(), std::rand under a lock, ~as long as the products on two threads), which halved the rate.
double eigen_sgemm_gflops(int threads) {
  const int n = 512, reps = 6;
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    std::chrono::steady_clock::time_point t0, t1;
#pragma omp parallel num_threads(threads)
    {
      Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
      c.noalias() = a * b;
#pragma omp barrier
#pragma omp single
      t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) c.noalias() = a * b;
      volatile float sink = c(0, 0);
      (void)sink;
#pragma omp barrier
#pragma omp single
      t1 = std::chrono::steady_clock::now();
    }
    const double s = std::chrono::duration<double>(t1 - t0).count();
    best = std::max(best, 2.0 * n * n * n * reps * threads / s / 1e9);
  }
  return best;
}

struct Record {
  std::string workload, impl, device;
  uint64_t seed = 0;
  bool verified = false;
  ErrorStats out_err, state_err;
  double key_norm_delta = -1;  // >= 0: judged with the key norm's rounding fitted out (|delta| in units of 2^-24)
  TimingStats t;
  // train-* workloads: the backward's time and its gradients' verdict (worst rel RMSE / bound over the gradients).
  bool has_bwd = false, grads_verified = false;
  double grad_worst_rmse_ratio = 0;
  TimingStats bwd;
  TimingStats step_saved;  // chunked CUDA: forward with save_for_backward + backward with forward_saved, one call
  bool has_step_saved = false;
  double bwd_workspace_mib = 0;  // the backward's workspace (its saved tensors and scratch), CUDA only
  double bytes = 0, flops = 0, floor_us = 0;
  double copy_same_us = 0;  // decode: cudaMemcpyAsync of the same bytes in the same harness (DeviceCopy)
  double copy_kernel_same_us = 0;  // decode: a plain copy kernel of the same bytes, the same harness (DeviceCopy)
  double tokens_per_s = 0;
  int rotate = 1;
};

// The backward of a train-* workload for one implementation (cuda-chunked, and cuda-generic wherever it applies: the
// chunked CUDA backward, judged as tensor-core code; cuda-recurrent: the token-recurrent CUDA backward, fp32 code; the
// host backends' own), on upstream gradients for the output and the final state: gradients verified against the fp64
// reference backward (*oracle, when verifying) by the backward verifier's rule, then timed. False if it failed.
bool bench_backward(Case& c, const Upstream& up, const kda::reference::Gradients* oracle, kda_backend_t be, bool on_gpu,
                    const Options& opt, Record* r) {
  // The chunked CUDA backwards (and GENERIC / AUTO, which run them wherever they apply) also time the step whose
  // forward keeps what the backward would recompute (save_for_backward: the torch op's disable_recompute).
  const bool chunked = on_gpu && (be == KDA_BACKEND_CUDA_CHUNKED || be == KDA_BACKEND_CUDA_HOPPER ||
                                  be == KDA_BACKEND_CUDA_GENERIC || be == KDA_BACKEND_AUTO);
  const bool tensor_core = on_gpu && be != KDA_BACKEND_CUDA_RECURRENT;
  // dq .. dbeta in their inputs' dtypes, as autograd hands them back (the torch and JAX ops, FLA's chunk_kda); the
  // verdict's bound counts their storage rounding (compare_grad).
  Grads g = make_grads(c, true);
  std::unique_ptr<DeviceBackwardProblem> dp;
  kda_status_t st;
  if (on_gpu) {
    dp = std::make_unique<DeviceBackwardProblem>(c, up, be, g);
    st = dp->run();
    if (st == KDA_STATUS_SUCCESS) dp->download(&g);
  } else {
    st = run_backward_host(c, up, be, &g);
  }
  if (st != KDA_STATUS_SUCCESS) {
    std::printf("  %-14s backward ERROR %s\n", r->impl.c_str(), kda_last_error());
    return false;
  }
  r->has_bwd = true;
  if (on_gpu) r->bwd_workspace_mib = static_cast<double>(dp->workspace_bytes()) / (1 << 20);
  if (oracle) {
    const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, tensor_core ? ComputeClass::kTensorCore : ComputeClass::kFp32,
                                        longest_sequence(c.spec));
    std::string worst;
    r->grads_verified = true;
    for (const GradItem& it : grad_items(c.spec, g, *oracle)) {
      const ErrorStats e = compare_grad(*it.got, *it.ref, it.mag, tol, it.layout);
      const double ratio = e.rel_rmse / e.rmse_bound;
      if (ratio > r->grad_worst_rmse_ratio || !e.pass) {
        r->grad_worst_rmse_ratio = std::max(r->grad_worst_rmse_ratio, ratio);
        worst = it.name + " " + e.summary();
      }
      r->grads_verified = r->grads_verified && e.pass;
    }
    if (!r->grads_verified) {
      std::printf("  %-14s backward WRONG: %s  (no time given)\n", r->impl.c_str(), worst.c_str());
      return false;
    }
    std::printf("  %-14s backward verified: every gradient passes, worst rel RMSE %.2f of its bound (%s)\n", "",
                r->grad_worst_rmse_ratio, worst.substr(0, worst.find(' ')).c_str());
  }
  if (on_gpu) {
    std::vector<DeviceCall*> calls = {dp.get()};
    time_calls(calls, opt.warmup, opt.iters > 0 ? opt.iters : 50, &r->bwd);
  } else {
    r->bwd = time_host(opt.iters > 0 ? opt.iters : 3, [&] { run_backward_host(c, up, be, &g); });
  }
  std::printf("  %-14s backward median %10.1f us (min %.1f, max %.1f, n=%d)  training step (forward + backward) %.1f us\n",
              r->impl.c_str(), r->bwd.median_us, r->bwd.min_us, r->bwd.max_us, r->bwd.iters,
              r->t.median_us + r->bwd.median_us);
  if (on_gpu) std::printf("  %-14s backward workspace %.1f MiB (everything it keeps or recomputes into)\n", "",
                          r->bwd_workspace_mib);
  if (chunked) {
    // The training step without the recompute: the forward keeps its tensors in the workspace, the backward reads
    // them. Verified like the backward above, then timed as one call (forward + backward).
    DeviceBackwardProblem saved(c, up, be, g, true);
    Grads gs = make_grads(c, true);
    st = saved.run();
    if (st == KDA_STATUS_NOT_SUPPORTED && (be == KDA_BACKEND_CUDA_GENERIC || be == KDA_BACKEND_AUTO)) {
      // These inputs went to the token-recurrent backward, which keeps nothing from a forward.
      std::printf("  %-14s no forward-saved step (%s)\n", r->impl.c_str(), kda_last_error());
      return true;
    }
    if (st == KDA_STATUS_SUCCESS) saved.download(&gs);
    bool ok = st == KDA_STATUS_SUCCESS;
    if (ok && oracle) {
      const Tolerance tol = tolerance_for(KDA_DTYPE_FLOAT32, ComputeClass::kTensorCore, longest_sequence(c.spec));
      for (const GradItem& it : grad_items(c.spec, gs, *oracle))
        ok = ok && compare_grad(*it.got, *it.ref, it.mag, tol, it.layout).pass;
    }
    if (!ok) {
      std::printf("  %-14s forward-saved step WRONG or ERROR (%s)  (no time given)\n", r->impl.c_str(),
                  st == KDA_STATUS_SUCCESS ? "gradients" : kda_last_error());
      return false;
    }
    std::vector<DeviceCall*> calls = {&saved};
    time_calls(calls, opt.warmup, opt.iters > 0 ? opt.iters : 50, &r->step_saved);
    r->has_step_saved = true;
    std::printf("  %-14s training step, forward saving for the backward + backward without recompute: median %.1f us "
                "(min %.1f, max %.1f)\n", r->impl.c_str(), r->step_saved.median_us, r->step_saved.min_us,
                r->step_saved.max_us);
  }
  return true;
}

// Decode: verify once against the oracle (a wrong answer gets no time), then time graph replays (CUDA) or
// wall-clock calls (CPU). The pool is updated in place on every call, as in serving. Returns failures.
int bench_decode(const DecodeWorkload& w, const Options& opt, int threads, double copy_bw, std::vector<Record>* records) {
  const uint64_t seed = workload_seed(opt);
  std::printf("\n%s: %s  (seed %llu)\n", w.name.c_str(), w.description.c_str(), static_cast<unsigned long long>(seed));
  DecodeCase d = make_decode_case(w.spec, seed);
  // The fused workloads (short conv, gated RMSNorm) are judged by the hand-written fp64 fused decode, conv states too;
  // the plain ones by the oracle built from forwards.
  const bool fused = w.spec.conv || w.spec.norm;
  const FusedDecodeOracle oracle = fused ? decode_fused_oracle(d) : FusedDecodeOracle{decode_oracle(d), {}, {}};
  int failures = 0;
  for (const std::string& impl : opt.impls) {
    const kda_backend_t be = backend_of(impl);
    // Every backend but the two CPU ones runs on the device (as the prefill loop below has it): cuda-hopper was missing
    // here, so its decode ran on host copies and was timed by the wall clock (session 14: 110 us at B = 1).
    const bool on_gpu = be != KDA_BACKEND_CPU && be != KDA_BACKEND_REFERENCE;
    Record r;
    r.workload = w.name;
    r.impl = impl;
    r.seed = seed;
    r.device = on_gpu ? cuda_device_name() : "cpu";
    r.bytes = decode_min_bytes(d);
    HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
    HostTensor pool = d.pool;
    const Tolerance tol = tolerance_for(d.c.spec.in_dtype, ComputeClass::kFp32);
    std::unique_ptr<DeviceDecodeProblem> dp;
    HostTensor conv[3] = {d.conv_state[0], d.conv_state[1], d.conv_state[2]};
    kda_decode_args_t a = decode_host_args(d, out, pool, be);
    a.cpu_threads = threads;
    if (w.spec.conv) {  // the host call updates copies, so d keeps the given conv states for the judge
      a.q_conv_state = conv[0].view();
      a.k_conv_state = conv[1].view();
      a.v_conv_state = conv[2].view();
    }
    kda_status_t st;
    if (on_gpu) {
      dp = std::make_unique<DeviceDecodeProblem>(d, be);
      st = dp->run();
      if (st == KDA_STATUS_SUCCESS) {
        dp->download(out, pool);
        if (w.spec.conv) dp->download_conv(conv);
      }
    } else {
      st = kda_decode(&a, nullptr, 0, nullptr);
    }
    if (st != KDA_STATUS_SUCCESS) {
      std::printf("  %-14s ERROR %s\n", impl.c_str(), kda_last_error());
      ++failures;
      continue;
    }
    const DecodeVerdict v = fused ? judge_fused_decode(d, oracle, out, pool, w.spec.conv ? conv : nullptr, tol)
                                  : judge_decode(d, oracle.base, out, pool, tol);
    r.out_err = v.out;
    r.state_err = v.pool;
    r.verified = v.pass;
    if (!v.pass) {
      std::printf("  %-14s WRONG: %s (no time given)\n", impl.c_str(), v.summary().c_str());
      ++failures;
      records->push_back(r);
      continue;
    }
    if (on_gpu) {
      std::vector<std::unique_ptr<DeviceDecodeProblem>> sets;
      std::vector<DeviceCall*> calls = {dp.get()};
      for (int i = 1; i < rotation(opt, r.bytes); ++i) {
        sets.push_back(std::make_unique<DeviceDecodeProblem>(d, be));
        calls.push_back(sets.back().get());
      }
      r.rotate = static_cast<int>(calls.size());
      time_calls(calls, opt.warmup, opt.iters > 0 ? opt.iters : 200, &r.t);
      r.floor_us = r.bytes / copy_bw * 1e6;
      // The same bytes as device-to-device copies (half read, half written), as many buffers as input sets, in the
      // same harness: the driver's cudaMemcpyAsync (graph memcpy nodes) and a plain copy kernel (copy_kernel.cu), what
      // a copy reaches at this size, launch and ramp included. References, not floors: the driver's copy reached
      // 58-65% of the 2 GiB rate below 512 MiB on the H200 (session 26).
      for (bool kernel : {false, true}) {
        std::vector<std::unique_ptr<DeviceCopy>> copies;
        std::vector<DeviceCall*> copy_calls;
        for (size_t i = 0; i < calls.size(); ++i) {
          copies.push_back(std::make_unique<DeviceCopy>(static_cast<size_t>(r.bytes / 2) / 16 * 16, kernel));
          copy_calls.push_back(copies.back().get());
        }
        TimingStats ct;
        if (time_calls(copy_calls, opt.warmup, opt.iters > 0 ? opt.iters : 200, &ct))
          (kernel ? r.copy_kernel_same_us : r.copy_same_us) = ct.median_us;
      }
    } else {
      r.t = time_host(opt.iters > 0 ? opt.iters : 20, [&] { kda_decode(&a, nullptr, 0, nullptr); });
    }
    r.tokens_per_s = static_cast<double>(d.c.spec.B * d.c.spec.T) / (r.t.median_us * 1e-6);
    std::printf("  %-14s median %10.2f us (min %.2f, max %.2f, n=%d, %d input sets)  %.2f TB/s", impl.c_str(),
                r.t.median_us, r.t.min_us, r.t.max_us, r.t.iters, r.rotate, r.bytes / (r.t.median_us * 1e-6) / 1e12);
    if (on_gpu) std::printf("  floor %.2f us (%.0f%% of floor)", r.floor_us, 100.0 * r.floor_us / r.t.median_us);
    if (r.copy_same_us > 0)
      std::printf("\n  %-14s cudaMemcpyAsync of the same bytes: %.2f us (%.0f%% of floor; this call %.2fx its time)",
                  "", r.copy_same_us, 100.0 * r.floor_us / r.copy_same_us, r.t.median_us / r.copy_same_us);
    if (r.copy_kernel_same_us > 0)
      std::printf("\n  %-14s a copy kernel of the same bytes: %.2f us (%.0f%% of floor; this call %.2fx its time)", "",
                  r.copy_kernel_same_us, 100.0 * r.floor_us / r.copy_kernel_same_us,
                  r.t.median_us / r.copy_kernel_same_us);
    std::printf("\n  %-14s verified: out rel_rmse %.3e  pool rel_rmse %.3e\n", "", r.out_err.rel_rmse,
                r.state_err.rel_rmse);
    records->push_back(r);
  }
  return failures;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::string command = "kda-bench";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kda-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--list") opt.list = true;
    else if (a == "--workload") opt.workloads.push_back(next());
    else if (a == "--impl") opt.impls.push_back(next());
    else if (a == "--iters") opt.iters = std::stoi(next());
    else if (a == "--warmup") opt.warmup = std::stoi(next());
    else if (a == "--threads") opt.threads = std::stoi(next());
    else if (a == "--rotate") opt.rotate = std::stoi(next());
    else if (a == "--json") opt.json = next();
    else if (a == "--commit") opt.commit = next();
    else if (a == "--no-verify") opt.verify = false;
    else if (a == "--seed") opt.seed = std::stoull(next(), nullptr, 0);
    else if (a == "--stage-clocks") opt.stage_clocks = next();
    else if (a == "--chunk-size") opt.chunk_size = std::stoi(next());
    else if (a == "--help" || a == "-h") { usage(); return 0; }
    else { std::fprintf(stderr, "kda-bench: unknown argument %s\n", a.c_str()); usage(); return 2; }
  }
  if (opt.list) {
    for (const Workload& w : workloads()) std::printf("%-16s %s\n", w.name.c_str(), w.description.c_str());
    for (const DecodeWorkload& w : decode_workloads()) std::printf("%-16s %s\n", w.name.c_str(), w.description.c_str());
    return 0;
  }
  if (opt.chunk_size != 0 && opt.chunk_size != 16 && opt.chunk_size != 32 && opt.chunk_size != 64) {
    std::fprintf(stderr, "kda-bench: --chunk-size: must be 16, 32 or 64 (0: each backend's choice), got %d\n",
                 opt.chunk_size);
    return 2;
  }
  const bool gpu = cuda_device_count() > 0;
  if (opt.workloads.empty()) opt.workloads.push_back(gpu ? "h64-fixed" : "cpu-8k-h8");
  if (opt.impls.empty()) opt.impls.push_back(gpu ? "cuda-generic" : "cpu");
  for (const std::string& impl : opt.impls)
    if (backend_of(impl) == KDA_BACKEND_AUTO) {  // checked here, for decode and prefill alike
      std::fprintf(stderr, "kda-bench: --impl: unknown implementation '%s'\n", impl.c_str());
      return 2;
    }
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();

  std::printf("kda-bench  commit %s  device %s  threads %d\n", opt.commit.c_str(),
              gpu ? cuda_device_name().c_str() : "cpu", threads);
  double copy_bw = 0, sgemm = 0, mm_rate = 0;
  bool any_cpu = false, any_gpu = false;
  for (const std::string& impl : opt.impls) (backend_of(impl) == KDA_BACKEND_CPU ? any_cpu : any_gpu) = true;
  if (any_gpu) {
    copy_bw = measure_copy_bandwidth();
    std::printf("device-to-device copy: %.2f TB/s (read + write)\n", copy_bw / 1e12);
    std::string lib;
    mm_rate = measure_bf16_matmul_rate(&lib);
    if (mm_rate > 0)
      std::printf("bf16 matrix product (8192^3, fp32 accumulation, %s): %.0f TFLOP/s\n", lib.c_str(), mm_rate / 1e12);
    else
      std::printf("bf16 matrix product: no cuBLAS library found, compute floor not measured\n");
  }
  if (any_cpu) {
    sgemm = eigen_sgemm_gflops(threads);
    std::printf("Eigen fp32 matrix product (512^3 per thread, %d threads): %.1f GFLOP/s\n", threads, sgemm);
  }

  std::vector<Record> records;
  int failures = 0;
  for (const std::string& wname : opt.workloads) {
    if (const DecodeWorkload* dw = find_decode_workload(wname)) {
      failures += bench_decode(*dw, opt, threads, copy_bw, &records);
      continue;
    }
    const Workload* w = find_workload(wname);
    if (!w) {
      std::fprintf(stderr, "kda-bench: unknown workload %s (see --list)\n", wname.c_str());
      return 2;
    }
    const uint64_t seed = workload_seed(opt);
    CaseSpec spec = workload_spec(*w, seed);
    spec.chunk_size = opt.chunk_size;  // an illegal one is the library's to reject, naming the argument
    Case c = make_case(spec, seed);
    std::printf("\n%s: %s  (seed %llu)", w->name.c_str(), w->description.c_str(), static_cast<unsigned long long>(seed));
    if (opt.chunk_size) std::printf("  chunk_size %d", opt.chunk_size);
    std::printf("\n");
    if (w->random_layout_max > 0) {
      std::printf("  layout (%zu sequences):", c.spec.seqlens.size());
      for (const int64_t l : c.spec.seqlens) std::printf(" %lld", static_cast<long long>(l));
      std::printf("\n");
    }
    Oracle oracle;
    if (opt.verify) oracle = run_oracle(c);
    // A training step's upstream gradients (output and final state) and, when verifying, the fp64 reference backward.
    Upstream up;
    kda::reference::Gradients grad_oracle;
    if (w->backward) {
      up = make_upstream(c, true, seed + 1);
      if (opt.verify) grad_oracle = backward_oracle(c, up);
    }
    for (const std::string& impl : opt.impls) {
      const kda_backend_t be = backend_of(impl);
      Record r;
      r.workload = w->name;
      r.impl = impl;
      r.seed = seed;
      r.bytes = workload_min_bytes(c);
      r.flops = workload_flops(c);
      Outputs outs = make_outputs(c, c.spec.in_dtype, KDA_DTYPE_FLOAT32);
      const bool on_gpu = be != KDA_BACKEND_CPU && be != KDA_BACKEND_REFERENCE;
      r.device = on_gpu ? cuda_device_name() : "cpu";
      const ComputeClass cls = forward_class(be, on_gpu);
      // The result judged as kda-verify judges it (compare.h judge_forward); a wrong one is recorded and gets no time.
      auto judged_wrong = [&] {
        const ForwardVerdict v = judge_forward(c, oracle, outs.out, &outs.final_state,
                                               tolerance_for(c.spec.in_dtype, cls, longest_sequence(c.spec)));
        r.out_err = v.out;
        r.state_err = v.state;
        r.verified = v.pass;
        r.key_norm_delta = v.key_norm_delta;
        if (v.key_norm_delta >= 0)
          std::printf("  %-14s judged with the key norm's rounding fitted out: |delta| <= %.2f u\n", impl.c_str(),
                      v.key_norm_delta);
        if (v.pass) return false;
        std::printf("  %-14s WRONG: out %s | state %s  (no time given)\n", impl.c_str(), r.out_err.summary().c_str(),
                    r.state_err.summary().c_str());
        ++failures;
        records.push_back(r);
        return true;
      };
      if (on_gpu) {
        DeviceProblem dp(c, outs, be);
        dp.poison_outputs();
        if (dp.run() != KDA_STATUS_SUCCESS) {
          std::printf("  %-14s ERROR %s\n", impl.c_str(), kda_last_error());
          ++failures;
          continue;
        }
        dp.download(outs);
        if (opt.verify && judged_wrong()) continue;
        std::vector<std::unique_ptr<DeviceProblem>> sets;
        std::vector<DeviceCall*> calls = {&dp};
        for (int i = 1; i < rotation(opt, r.bytes); ++i) {
          sets.push_back(std::make_unique<DeviceProblem>(c, outs, be));
          calls.push_back(sets.back().get());
        }
        r.rotate = static_cast<int>(calls.size());
        time_calls(calls, opt.warmup, opt.iters > 0 ? opt.iters : 200, &r.t);
        if (!opt.stage_clocks.empty()) {
          const std::string path = opt.stage_clocks + "." + impl + "." + w->name;
          if (capture_stage_clocks(dp, path)) std::printf("  %-14s stage clocks: %s\n", impl.c_str(), path.c_str());
          else ++failures;
        }
        // The floor: the bytes that must move at the copy rate, or the arithmetic at the bf16 matrix rate if slower.
        r.floor_us = std::max(r.bytes / copy_bw, mm_rate > 0 ? r.flops / mm_rate : 0.0) * 1e6;
      } else {
        kda_forward_args_t a = host_args(c, outs, be);
        a.cpu_threads = threads;
        if (kda_forward(&a, nullptr, 0, nullptr) != KDA_STATUS_SUCCESS) {
          std::printf("  %-14s ERROR %s\n", impl.c_str(), kda_last_error());
          ++failures;
          continue;
        }
        if (opt.verify && judged_wrong()) continue;
        r.t = time_host(opt.iters > 0 ? opt.iters : 5, [&] { kda_forward(&a, nullptr, 0, nullptr); });
      }
      r.tokens_per_s = static_cast<double>(c.spec.B * c.spec.T) / (r.t.median_us * 1e-6);
      const double gflops = r.flops / (r.t.median_us * 1e-6) / 1e9;
      std::printf("  %-14s median %10.1f us (min %.1f, max %.1f, n=%d, %d input sets)  %.3g tokens/s  %.1f GFLOP/s",
                  impl.c_str(), r.t.median_us, r.t.min_us, r.t.max_us, r.t.iters, r.rotate, r.tokens_per_s, gflops);
      if (on_gpu)
        std::printf("  %.2f TB/s, %.1f TFLOP/s, floor %.1f us (%.0f%% of floor)", r.bytes / (r.t.median_us * 1e-6) / 1e12,
                    gflops / 1e3, r.floor_us, 100.0 * r.floor_us / r.t.median_us);
      else
        std::printf("  = %.0f%% of the Eigen fp32 matmul rate", 100.0 * gflops / sgemm);
      std::printf("\n");
      if (opt.verify)
        std::printf("  %-14s verified: out rel_rmse %.3e (worst %.2f of bound)  state rel_rmse %.3e (worst %.2f)\n", "",
                    r.out_err.rel_rmse, r.out_err.worst_ratio, r.state_err.rel_rmse, r.state_err.worst_ratio);
      if (w->backward && !bench_backward(c, up, opt.verify ? &grad_oracle : nullptr, be, on_gpu, opt, &r)) ++failures;
      records.push_back(r);
    }
  }

  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    f << "{\n  \"tool\": \"kda-bench\",\n  \"date\": \"" << date << "\",\n  \"commit\": \"" << json_escape(opt.commit)
      << "\",\n  \"command\": \"" << json_escape(command) << "\",\n  \"copy_bandwidth_Bps\": " << copy_bw
      << ",\n  \"bf16_matmul_flops\": " << mm_rate << ",\n  \"eigen_sgemm_gflops\": " << sgemm << ",\n  \"cpu_threads\": " << threads << ",\n  \"chunk_size\": " << opt.chunk_size << ",\n  \"results\": [\n";
    for (size_t i = 0; i < records.size(); ++i) {
      const Record& r = records[i];
      f << "    {\"workload\": \"" << r.workload << "\", \"impl\": \"" << r.impl << "\", \"gpu\": \""
        << json_escape(r.device) << "\", \"commit\": \"" << json_escape(opt.commit) << "\", \"seed\": " << r.seed
        << ", \"verified\": " << (r.verified ? "true" : "false") << ", \"mean_us\": " << r.t.mean_us
        << ", \"median_us\": " << r.t.median_us << ", \"min_us\": " << r.t.min_us << ", \"max_us\": " << r.t.max_us
        << ", \"iters\": " << r.t.iters << ", \"input_sets\": " << r.rotate << ", \"tokens_per_s\": " << r.tokens_per_s << ", \"min_bytes\": " << r.bytes
        << ", \"flops\": " << r.flops << ", \"floor_us\": " << r.floor_us;
      if (r.copy_same_us > 0) f << ", \"memcpy_same_bytes_us\": " << r.copy_same_us;
      if (r.copy_kernel_same_us > 0) f << ", \"copy_kernel_same_bytes_us\": " << r.copy_kernel_same_us;
      if (opt.verify)
        f << ", \"out_rel_rmse\": " << r.out_err.rel_rmse << ", \"state_rel_rmse\": " << r.state_err.rel_rmse
          << ", \"out_worst_ratio\": " << r.out_err.worst_ratio << ", \"state_worst_ratio\": " << r.state_err.worst_ratio;
      if (opt.verify && r.key_norm_delta >= 0) f << ", \"key_norm_delta_u\": " << r.key_norm_delta;
      if (r.has_bwd) {
        f << ", \"bwd_median_us\": " << r.bwd.median_us << ", \"bwd_mean_us\": " << r.bwd.mean_us
          << ", \"bwd_min_us\": " << r.bwd.min_us << ", \"bwd_max_us\": " << r.bwd.max_us
          << ", \"train_median_us\": " << r.t.median_us + r.bwd.median_us
          << ", \"bwd_workspace_mib\": " << r.bwd_workspace_mib;
        if (r.has_step_saved) f << ", \"train_saved_median_us\": " << r.step_saved.median_us;
        if (opt.verify)
          f << ", \"grads_verified\": " << (r.grads_verified ? "true" : "false")
            << ", \"grad_worst_rmse_ratio\": " << r.grad_worst_rmse_ratio;
      }
      f << "}" << (i + 1 < records.size() ? "," : "") << "\n";
    }
    f << "  ]\n}\n";
    std::printf("\nwrote %s\n", opt.json.c_str());
  }
  return failures == 0 ? 0 : 1;
}
