// device.cpp: CUDA memory, calls and graph-replay timing for the tools and GPU tests (stubs without CUDA).
#include "common/device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#if defined(KDA_WITH_CUDA)
#include <cublas_v2.h>  // types and declarations only: the library is dlopen'ed
#include <cuda_runtime.h>
#include <dlfcn.h>

#include "cuda/generic/stage_clocks.h"
#endif

namespace kda::testing {

#if defined(KDA_WITH_CUDA)

cudaError_t launch_copy_kernel(const void* src, void* dst, size_t bytes, cudaStream_t stream);  // copy_kernel.cu

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Before a call on one of our non-blocking streams: finish the uploads and poison fills, which run on the legacy
// default stream (a non-blocking stream does not wait for it; a pageable cudaMemcpy may even return before its DMA
// lands). Without it the backward's output poison once landed after the call had written its gradients:
// backward-full's fp16 probe came back all NaN on the H200 with four verifier processes sharing the GPU.
void settle() { check(cudaDeviceSynchronize(), "uploads and poison"); }

// Replays exec `iters` times after `warmup` replays, each replay between two events; median, mean, min, max.
TimingStats time_replays(cudaGraphExec_t exec, cudaStream_t s, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) check(cudaGraphLaunch(exec, s), "graph launch");
  std::vector<cudaEvent_t> ev(static_cast<size_t>(iters) + 1);
  for (auto& e : ev) check(cudaEventCreate(&e), "event");
  check(cudaEventRecord(ev[0], s), "event record");
  for (int i = 0; i < iters; ++i) {
    check(cudaGraphLaunch(exec, s), "graph launch");
    check(cudaEventRecord(ev[i + 1], s), "event record");
  }
  check(cudaStreamSynchronize(s), "timing");
  std::vector<double> us(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "elapsed");
    us[i] = ms * 1000.0;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  double sum = 0;
  for (double x : us) sum += x;
  std::sort(us.begin(), us.end());
  TimingStats st;
  st.iters = iters;
  st.mean_us = sum / iters;
  st.median_us = us[us.size() / 2];
  st.min_us = us.front();
  st.max_us = us.back();
  return st;
}
}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int cuda_device_cc_major() {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major;
}

int cuda_device_sm_count() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

std::string cuda_device_name() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown";
  return prop.name;
}

void* DeviceProblem::alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
  allocations_.push_back(p);
  return p;
}

void* DeviceProblem::upload(const HostTensor& t) {
  if (!t.present()) return nullptr;
  void* p = alloc(t.bytes.size());
  check(cudaMemcpy(p, t.data(), t.bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  return p;
}

DeviceProblem::DeviceProblem(const Case& c, const Outputs& o, kda_backend_t backend) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  Case& cc = const_cast<Case&>(c);
  Outputs& oo = const_cast<Outputs&>(o);
  args = host_args(cc, oo, backend);
  auto dev = [&](const HostTensor& t) {
    void* p = upload(t);
    return t.view(p, KDA_DEVICE_CUDA);
  };
  args.q = dev(c.q);
  args.k = dev(c.k);
  args.v = dev(c.v);
  args.g = dev(c.g);
  args.beta = dev(c.beta);
  args.A_log = dev(c.A_log);
  args.dt_bias = dev(c.dt_bias);
  args.initial_state = dev(c.h0);
  args.cu_seqlens = dev(c.cu_seqlens);
  args.out = dev(o.out);
  args.final_state = dev(o.final_state);
  if (kda_forward_workspace_size(&args, &workspace_bytes_) != KDA_STATUS_SUCCESS)
    throw std::runtime_error(std::string("workspace query: ") + kda_last_error());
  if (workspace_bytes_ > 0) workspace_ = alloc(workspace_bytes_);
}

DeviceProblem::~DeviceProblem() {
  if (graph_exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  for (void* p : allocations_) cudaFree(p);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

kda_status_t DeviceProblem::run() {
  settle();
  kda_status_t st = kda_forward(&args, workspace_, workspace_bytes_, stream_);
  if (st != KDA_STATUS_SUCCESS) return st;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "forward");
  return st;
}

void DeviceProblem::download(Outputs& o) const {
  check(cudaMemcpy(o.out.data(), args.out.data, o.out.bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy out");
  if (o.final_state.present())
    check(cudaMemcpy(o.final_state.data(), args.final_state.data, o.final_state.bytes.size(), cudaMemcpyDeviceToHost),
          "cudaMemcpy final_state");
}

void DeviceProblem::poison_outputs() {
  auto bytes = [](const kda_tensor_t& t, size_t el) {
    size_t n = el;
    for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
    return n;
  };
  const size_t out_el = args.out.dtype == KDA_DTYPE_FLOAT32 ? 4 : 2;
  check(cudaMemset(args.out.data, 0xFF, bytes(args.out, out_el)), "cudaMemset out");
  if (args.final_state.data) check(cudaMemset(args.final_state.data, 0xFF, bytes(args.final_state, 4)), "cudaMemset state");
  check(cudaDeviceSynchronize(), "poison");
}

void DeviceProblem::replace_inputs(const Case& c) {
  auto put = [](const kda_tensor_t& dst, const HostTensor& src) {
    if (src.present()) check(cudaMemcpy(dst.data, src.data(), src.bytes.size(), cudaMemcpyHostToDevice), "replace");
  };
  put(args.q, c.q);
  put(args.k, c.k);
  put(args.v, c.v);
  put(args.g, c.g);
  put(args.beta, c.beta);
  put(args.A_log, c.A_log);
  put(args.dt_bias, c.dt_bias);
  put(args.initial_state, c.h0);
  put(args.cu_seqlens, c.cu_seqlens);
}

void DeviceProblem::set_checkpoints(const HostTensor& ckpt, const HostTensor& offsets, int32_t interval) {
  args.state_checkpoints = ckpt.view(upload(ckpt), KDA_DEVICE_CUDA);
  args.checkpoint_offsets = offsets.present() ? offsets.view(upload(offsets), KDA_DEVICE_CUDA) : kda_tensor_none();
  args.checkpoint_interval = interval;
}

void DeviceProblem::download_checkpoints(HostTensor& ckpt) const {
  check(cudaMemcpy(ckpt.data(), args.state_checkpoints.data, ckpt.bytes.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy checkpoints");
}

void DeviceProblem::replace_checkpoints(const HostTensor& ckpt, const HostTensor& offsets) {
  check(cudaMemcpy(args.state_checkpoints.data, ckpt.data(), ckpt.bytes.size(), cudaMemcpyHostToDevice),
        "replace checkpoints");
  if (offsets.present())
    check(cudaMemcpy(args.checkpoint_offsets.data, offsets.data(), offsets.bytes.size(), cudaMemcpyHostToDevice),
          "replace offsets");
}

bool DeviceProblem::capture() {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  kda_status_t rc = kda_forward(&args, workspace_, workspace_bytes_, stream_);
  check(cudaStreamEndCapture(s, &graph), "end capture");
  if (rc != KDA_STATUS_SUCCESS) {
    cudaGraphDestroy(graph);
    return false;
  }
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
  graph_ = graph;
  graph_exec_ = exec;
  return true;
}

void DeviceProblem::replay() {
  settle();
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec_), s), "graph launch");
  check(cudaStreamSynchronize(s), "graph replay");
}

DeviceDecodeProblem::DeviceDecodeProblem(DecodeCase& d, kda_backend_t backend) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  HostTensor out = make_tensor(d.c.spec.in_dtype, {d.c.spec.B, d.c.spec.T, d.c.spec.HV, d.c.spec.V});
  HostTensor pool = d.pool;
  args = decode_host_args(d, out, pool, backend);
  auto dev = [&](const HostTensor& t) {
    if (!t.present()) return kda_tensor_none();
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(t.bytes.size(), 16)), "cudaMalloc");
    allocations_.push_back(p);
    check(cudaMemcpy(p, t.data(), t.bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    return t.view(p, KDA_DEVICE_CUDA);
  };
  args.q = dev(d.c.q);
  args.k = dev(d.c.k);
  args.v = dev(d.c.v);
  args.g = dev(d.c.g);
  args.beta = dev(d.c.beta);
  args.A_log = dev(d.c.A_log);
  args.dt_bias = dev(d.c.dt_bias);
  args.state_pool = dev(pool);
  args.state_indices = dev(d.indices);
  args.num_accepted_tokens = dev(d.num_accepted);
  if (d.spec.conv) {
    args.q_conv_weight = dev(d.conv_w[0]);
    args.k_conv_weight = dev(d.conv_w[1]);
    args.v_conv_weight = dev(d.conv_w[2]);
    args.q_conv_state = dev(d.conv_state[0]);
    args.k_conv_state = dev(d.conv_state[1]);
    args.v_conv_state = dev(d.conv_state[2]);
  }
  if (d.spec.norm) {
    args.out_norm_weight = dev(d.norm_w);
    args.out_gate = dev(d.out_gate);
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, std::numeric_limits<double>::quiet_NaN());  // poison
  args.out = dev(out);
  // The workspace the call asks for (the fusions' intermediates), NaN-poisoned so a read of an unset part shows.
  // A query that fails leaves none: the call itself then reports the same error.
  if (kda_decode_workspace_size(&args, &workspace_bytes_) != KDA_STATUS_SUCCESS) workspace_bytes_ = 0;
  if (workspace_bytes_ > 0) {
    check(cudaMalloc(&workspace_, workspace_bytes_), "cudaMalloc workspace");
    allocations_.push_back(workspace_);
    check(cudaMemset(workspace_, 0xFF, workspace_bytes_), "cudaMemset workspace");
  }
}

DeviceDecodeProblem::~DeviceDecodeProblem() {
  for (void* p : allocations_) cudaFree(p);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

kda_status_t DeviceDecodeProblem::run() {
  settle();
  const kda_status_t st = kda_decode(&args, workspace_, workspace_bytes_, stream_);
  if (st == KDA_STATUS_SUCCESS) check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "decode");
  return st;
}

void DeviceDecodeProblem::download(HostTensor& out, HostTensor& pool) const {
  check(cudaMemcpy(out.data(), args.out.data, out.bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy out");
  check(cudaMemcpy(pool.data(), args.state_pool.data, pool.bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy pool");
}

void DeviceDecodeProblem::download_conv(HostTensor* conv_state) const {
  const kda_tensor_t* src[3] = {&args.q_conv_state, &args.k_conv_state, &args.v_conv_state};
  for (int i = 0; i < 3; ++i)
    if (src[i]->data)
      check(cudaMemcpy(conv_state[i].data(), src[i]->data, conv_state[i].bytes.size(), cudaMemcpyDeviceToHost),
            "cudaMemcpy conv state");
}

kda_status_t DeviceDecodeProblem::enqueue(void* stream) {
  return kda_decode(&args, workspace_, workspace_bytes_, stream);
}

kda_status_t DeviceProblem::enqueue(void* stream) { return kda_forward(&args, workspace_, workspace_bytes_, stream); }

bool time_calls(const std::vector<DeviceCall*>& calls, int warmup, int iters, TimingStats* st) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  kda_status_t rc = KDA_STATUS_SUCCESS;
  for (DeviceCall* c : calls)
    if (rc == KDA_STATUS_SUCCESS) rc = c->enqueue(s);
  check(cudaStreamEndCapture(s, &graph), "end capture");
  if (rc != KDA_STATUS_SUCCESS) {
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    return false;
  }
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
  settle();
  *st = time_replays(exec, s, warmup, iters);
  const double n = static_cast<double>(calls.size());
  st->mean_us /= n;
  st->median_us /= n;
  st->min_us /= n;
  st->max_us /= n;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return true;
}

DeviceCopy::DeviceCopy(size_t bytes, bool kernel) : bytes_(bytes), kernel_(kernel) {
  check(cudaMalloc(&src_, bytes), "cudaMalloc");
  check(cudaMalloc(&dst_, bytes), "cudaMalloc");
  check(cudaMemset(src_, 1, bytes), "cudaMemset");
}
DeviceCopy::~DeviceCopy() {
  cudaFree(src_);
  cudaFree(dst_);
}
kda_status_t DeviceCopy::enqueue(void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = kernel_ ? launch_copy_kernel(src_, dst_, bytes_, s)
                                : cudaMemcpyAsync(dst_, src_, bytes_, cudaMemcpyDeviceToDevice, s);
  return e == cudaSuccess ? KDA_STATUS_SUCCESS : KDA_STATUS_CUDA_ERROR;
}

double measure_copy_bandwidth() {
  const size_t bytes = size_t{2} << 30;  // 2 GiB each way, far above the 60 MB L2
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  std::vector<float> ms(10);
  for (float& m : ms) {
    cudaEventRecord(e0);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&m, e0, e1);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3);
}

double measure_bf16_matmul_rate(std::string* library) {
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      *library = name;
      break;
    }
  if (lib == nullptr) return 0.0;
  auto create = reinterpret_cast<decltype(&cublasCreate_v2)>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<decltype(&cublasDestroy_v2)>(dlsym(lib, "cublasDestroy_v2"));
  // Spelled out: cublas_api.h also declares a C++ overload of cublasGemmEx (cudaDataType compute type).
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                    const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  auto gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx"));
  cublasHandle_t h = nullptr;
  if (!create || !destroy || !gemm || create(&h) != CUBLAS_STATUS_SUCCESS) return 0.0;
  const int n = 8192;  // 1.1 TFLOP per product: ~1.4 ms at the H200's rate, far from launch-bound
  const size_t bytes = size_t{n} * n * 2;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMalloc(&c, bytes), "cudaMalloc");
  check(cudaMemset(a, 0x3c, bytes), "cudaMemset");  // bf16 0x3c3c ~ 0.0115: finite products, no denormals
  check(cudaMemset(b, 0x3c, bytes), "cudaMemset");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
                CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  double rate = 0.0;
  if (run() == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < 3; ++i) run();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms(10);
    for (float& m : ms) {
      cudaEventRecord(e0);
      run();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&m, e0, e1);
    }
    std::sort(ms.begin(), ms.end());
    rate = 2.0 * n * n * double(n) / (ms[ms.size() / 2] * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  destroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return rate;
}

DeviceBackwardProblem::DeviceBackwardProblem(Case& c, const Upstream& up, kda_backend_t be, const Grads& shapes,
                                             bool forward_saved) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
    allocations_.push_back(p);
    return p;
  };
  auto upload = [&](const HostTensor& t) {
    if (!t.present()) return kda_tensor_none();
    void* p = alloc(t.bytes.size());
    check(cudaMemcpy(p, t.data(), t.bytes.size(), cudaMemcpyHostToDevice), "upload");
    return t.view(p, KDA_DEVICE_CUDA);
  };
  auto output = [&](const HostTensor& t) {
    if (!t.present()) return kda_tensor_none();
    void* p = alloc(t.bytes.size());
    check(cudaMemset(p, 0xFF, t.bytes.size()), "poison");
    return t.view(p, KDA_DEVICE_CUDA);
  };
  Outputs unused = make_outputs(c, c.spec.in_dtype, KDA_DTYPE_FLOAT32);
  kda_backward_args_init(&args);
  args.forward = host_args(c, unused, be);
  kda_forward_args_t& f = args.forward;
  f.q = upload(c.q); f.k = upload(c.k); f.v = upload(c.v); f.g = upload(c.g);
  f.beta = upload(c.beta); f.A_log = upload(c.A_log); f.dt_bias = upload(c.dt_bias);
  f.initial_state = upload(c.h0); f.cu_seqlens = upload(c.cu_seqlens);
  f.out = kda_tensor_none();
  f.final_state = kda_tensor_none();
  args.dout = upload(up.dout);
  args.dfinal_state = upload(up.dfinal);
  args.dq = output(shapes.dq); args.dk = output(shapes.dk); args.dv = output(shapes.dv); args.dg = output(shapes.dg);
  args.dbeta = output(shapes.dbeta); args.dA_log = output(shapes.dA_log); args.ddt_bias = output(shapes.ddt_bias);
  args.dh0 = output(shapes.dh0);
  if (forward_saved) {
    args.forward_saved = 1;
    fwd = args.forward;
    fwd.out = output(unused.out);
    fwd.final_state = output(unused.final_state);
    fwd.save_for_backward = 1;
  }
  setup_ = kda_backward_workspace_size(&args, &workspace_bytes_);
  if (setup_ == KDA_STATUS_SUCCESS && workspace_bytes_ > 0) {
    workspace_ = alloc(workspace_bytes_);
    check(cudaMemset(workspace_, 0xFF, workspace_bytes_), "poison workspace");
  }
}

DeviceBackwardProblem::~DeviceBackwardProblem() {
  for (void* p : allocations_) cudaFree(p);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

kda_status_t DeviceBackwardProblem::enqueue(void* stream) {
  if (setup_ != KDA_STATUS_SUCCESS) return setup_;
  if (args.forward_saved) {
    const kda_status_t st = kda_forward(&fwd, workspace_, workspace_bytes_, stream);
    if (st != KDA_STATUS_SUCCESS) return st;
  }
  return kda_backward(&args, workspace_, workspace_bytes_, stream);
}

kda_status_t DeviceBackwardProblem::run() {
  settle();
  const kda_status_t st = enqueue(stream_);
  if (st == KDA_STATUS_SUCCESS) check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "backward");
  return st;
}

void DeviceBackwardProblem::download(Grads* g) const {
  auto get = [&](HostTensor& t, const kda_tensor_t& d) {
    if (t.present()) check(cudaMemcpy(t.data(), d.data, t.bytes.size(), cudaMemcpyDeviceToHost), "download");
  };
  get(g->dq, args.dq); get(g->dk, args.dk); get(g->dv, args.dv); get(g->dg, args.dg);
  get(g->dbeta, args.dbeta); get(g->dA_log, args.dA_log); get(g->ddt_bias, args.ddt_bias);
  get(g->dh0, args.dh0);
}

kda_status_t run_backward_device(Case& c, const Upstream& up, kda_backend_t be, Grads* g, bool forward_saved) {
  DeviceBackwardProblem p(c, up, be, *g, forward_saved);
  const kda_status_t st = p.run();
  if (st == KDA_STATUS_SUCCESS) p.download(g);
  return st;
}

#if KDA_STAGE_CLOCKS
namespace {
// A stamp file: the 8-byte magic, four int32 (CTAs, warps, tasks or steps a CTA, stamps each), the uint64 stamps.
bool write_stamps(const std::string& path, const char (&magic)[8], const int32_t (&dims)[4],
                  const std::vector<uint64_t>& h) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "stage clocks: cannot write %s\n", path.c_str());
    return false;
  }
  const bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(dims, sizeof(dims), 1, f) == 1 &&
                  std::fwrite(h.data(), 8, h.size(), f) == h.size();
  return std::fclose(f) == 0 && ok;
}
}  // namespace
#endif

bool capture_stage_clocks(DeviceProblem& p, const std::string& path) {
#if KDA_STAGE_CLOCKS
  namespace sc = kda::stage_clocks;
  namespace scs = kda::stage_clocks::state;
  const int ctas = cuda_device_sm_count();  // phase 1's grid is at most a CTA an SM
  const int state_ctas = 2 * ctas;          // the state pass's first CTAs (a CTA a chain and V tile)
  const size_t bytes = sc::buffer_bytes(ctas), state_bytes = scs::buffer_bytes(state_ctas);
  void* buf = nullptr;
  void* state_buf = nullptr;
  check(cudaMalloc(&buf, bytes), "cudaMalloc (stage clocks)");
  check(cudaMalloc(&state_buf, state_bytes), "cudaMalloc (stage clocks)");
  check(cudaMemset(buf, 0, bytes), "cudaMemset (stage clocks)");
  check(cudaMemset(state_buf, 0, state_bytes), "cudaMemset (stage clocks)");
  check(static_cast<cudaError_t>(sc::set_buffer(buf, ctas)), "stage_clocks::set_buffer");
  check(static_cast<cudaError_t>(scs::set_buffer(state_buf, state_ctas)), "stage_clocks::state::set_buffer");
  const kda_status_t st = p.run();
  check(static_cast<cudaError_t>(sc::set_buffer(nullptr, 0)), "stage_clocks::set_buffer");
  check(static_cast<cudaError_t>(scs::set_buffer(nullptr, 0)), "stage_clocks::state::set_buffer");
  std::vector<uint64_t> h(bytes / 8), hs(state_bytes / 8);
  check(cudaMemcpy(h.data(), buf, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (stage clocks)");
  check(cudaMemcpy(hs.data(), state_buf, state_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (stage clocks)");
  check(cudaFree(buf), "cudaFree (stage clocks)");
  check(cudaFree(state_buf), "cudaFree (stage clocks)");
  if (st != KDA_STATUS_SUCCESS) {
    std::fprintf(stderr, "stage clocks: the forward failed: %s\n", kda_last_error());
    return false;
  }
  if (!write_stamps(path, sc::kMagic, {ctas, sc::kWarps, sc::kMaxTasks, sc::kStamps}, h)) return false;
  // The sm_90a state pass's stamps beside them, where that pass ran (the hopper path, K = 128).
  bool any = false;
  for (uint64_t v : hs) any = any || v != 0;
  if (!any) {
    std::fprintf(stderr, "stage clocks: no state-pass stamps (not the sm_90a state pass), %s.state not written\n",
                 path.c_str());
    return true;
  }
  return write_stamps(path + ".state", scs::kMagic, {state_ctas, scs::kWarps, scs::kMaxSteps, scs::kStamps}, hs);
#else
  (void)p;
  (void)path;
  std::fprintf(stderr, "stage clocks: this build has none (scripts/gpu_build.sh --stage-clocks)\n");
  return false;
#endif
}

#else  // no CUDA in this build

int cuda_device_count() { return 0; }
int cuda_device_cc_major() { return 0; }
int cuda_device_sm_count() { return 0; }
std::string cuda_device_name() { return "none"; }
DeviceProblem::DeviceProblem(const Case&, const Outputs&, kda_backend_t) {
  throw std::runtime_error("this kda build has no CUDA");
}
DeviceProblem::~DeviceProblem() = default;
kda_status_t DeviceProblem::run() { return KDA_STATUS_BACKEND_UNAVAILABLE; }
void DeviceProblem::download(Outputs&) const {}
void DeviceProblem::poison_outputs() {}
void DeviceProblem::replace_inputs(const Case&) {}
bool DeviceProblem::capture() { return false; }
void DeviceProblem::set_checkpoints(const HostTensor&, const HostTensor&, int32_t) {}
void DeviceProblem::download_checkpoints(HostTensor&) const {}
void DeviceProblem::replace_checkpoints(const HostTensor&, const HostTensor&) {}
bool capture_stage_clocks(DeviceProblem&, const std::string&) {
  std::fprintf(stderr, "stage clocks: this build has no CUDA\n");
  return false;
}
void DeviceProblem::replay() {}
DeviceDecodeProblem::DeviceDecodeProblem(DecodeCase&, kda_backend_t) {
  throw std::runtime_error("this kda build has no CUDA");
}
DeviceDecodeProblem::~DeviceDecodeProblem() = default;
kda_status_t DeviceDecodeProblem::run() { return KDA_STATUS_BACKEND_UNAVAILABLE; }
void DeviceDecodeProblem::download(HostTensor&, HostTensor&) const {}
void DeviceDecodeProblem::download_conv(HostTensor*) const {}
kda_status_t DeviceDecodeProblem::enqueue(void*) { return KDA_STATUS_BACKEND_UNAVAILABLE; }
kda_status_t DeviceProblem::enqueue(void*) { return KDA_STATUS_BACKEND_UNAVAILABLE; }
bool time_calls(const std::vector<DeviceCall*>&, int, int, TimingStats*) { return false; }
DeviceCopy::DeviceCopy(size_t, bool) { throw std::runtime_error("this kda build has no CUDA"); }
DeviceCopy::~DeviceCopy() = default;
kda_status_t DeviceCopy::enqueue(void*) { return KDA_STATUS_BACKEND_UNAVAILABLE; }

double measure_copy_bandwidth() { return 0.0; }
double measure_bf16_matmul_rate(std::string*) { return 0.0; }
DeviceBackwardProblem::DeviceBackwardProblem(Case&, const Upstream&, kda_backend_t, const Grads&, bool) {
  throw std::runtime_error("this kda build has no CUDA");
}
DeviceBackwardProblem::~DeviceBackwardProblem() = default;
kda_status_t DeviceBackwardProblem::run() { return KDA_STATUS_BACKEND_UNAVAILABLE; }
void DeviceBackwardProblem::download(Grads*) const {}
kda_status_t DeviceBackwardProblem::enqueue(void*) { return KDA_STATUS_BACKEND_UNAVAILABLE; }
kda_status_t run_backward_device(Case&, const Upstream&, kda_backend_t, Grads*, bool) {
  return KDA_STATUS_BACKEND_UNAVAILABLE;
}

#endif

}  // namespace kda::testing
