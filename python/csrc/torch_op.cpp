// torch_op.cpp: the `kda::` PyTorch ops over kda's C ABI (include/kda/kda.h), on PyTorch's stable ABI.
//
// Each op turns torch tensors into kda_tensor_t descriptors (data pointer + sizes + strides, no copies), runs on
// torch's current CUDA stream for CUDA tensors, takes its workspace from torch's allocator (queried first), and
// turns a failing kda status into an exception carrying kda_last_error() (which names the argument).
// The Python side (python/kda/ops.py) holds FLA's signatures, the fake (meta) implementations and autograd.
//
// Only torch's stable ABI is used (torch/csrc/stable: STABLE_TORCH_LIBRARY, torch::stable::Tensor, the C shims), as
// vLLM builds its third-party kernels: no C++ type of libtorch crosses into this library, so one build runs with every
// torch from KDA_TORCH_TARGET (python/CMakeLists.txt) on, whatever torch's headers compiled it. The stable ABI hands
// any C++ exception to Python as RuntimeError; the class the Python API raises (ValueError for an invalid argument,
// NotImplementedError for a legal input kda does not handle) travels as a leading "[kda:Class] " tag that
// python/kda/ops.py turns back into that class.
//
// Ops (schemas below): chunk_fwd (functional: allocates out / final_state), chunk_fwd_saved (chunk_fwd that also
// keeps, in a workspace it returns, what the chunked CUDA backward would recompute: FLA's disable_recompute),
// chunk_fwd_out (caller-owned out, final_state and workspace: the serving / CUDA-graph form),
// chunk_fwd_workspace_size, decode_out (state pool updated in place through state_indices), chunk_bwd (gradients:
// host backends, and the CUDA backward for CUDA tensors; given chunk_fwd_saved's workspace, without the recompute).
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#ifdef KDA_TORCH_CUDA
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (declared under USE_CUDA)
#endif

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kda/kda.h"

namespace {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;
using torch::headeronly::ScalarType;

// ---------------------------------------------------------------- errors
constexpr const char* kValueError = "ValueError";
constexpr const char* kNotImplemented = "NotImplementedError";
constexpr const char* kRuntimeError = "RuntimeError";

template <class... Parts>
[[noreturn]] void fail(const char* cls, const Parts&... parts) {
  std::ostringstream os;
  os << "[kda:" << cls << "] ";
  (os << ... << parts);
  throw std::runtime_error(os.str());
}

std::string device_name(const Tensor& t) {
  if (t.is_cpu()) return "cpu";
  if (t.is_cuda()) return "cuda:" + std::to_string(t.get_device_index());
  return "a device that is neither the CPU nor CUDA";
}

std::string sizes_of(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

kda_dtype_t to_kda_dtype(const Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case ScalarType::Float: return KDA_DTYPE_FLOAT32;
    case ScalarType::Half: return KDA_DTYPE_FLOAT16;
    case ScalarType::BFloat16: return KDA_DTYPE_BFLOAT16;
    case ScalarType::Double: return KDA_DTYPE_FLOAT64;
    case ScalarType::Int: return KDA_DTYPE_INT32;
    case ScalarType::Long: return KDA_DTYPE_INT64;
    default: fail(kValueError, "kda: ", name, ": unsupported dtype ", torch::headeronly::toString(t.scalar_type()));
  }
}

kda_tensor_t desc(const Tensor& t, const char* name) {
  kda_tensor_t d = kda_tensor_none();
  if (!t.defined()) return d;
  if (t.dim() > KDA_MAX_DIMS) fail(kValueError, "kda: ", name, ": at most ", KDA_MAX_DIMS, " dims, got ", t.dim());
  if (t.is_cpu()) {
    d.device_type = KDA_DEVICE_CPU;
    d.device_id = 0;
  } else if (t.is_cuda()) {
    d.device_type = KDA_DEVICE_CUDA;
    d.device_id = t.get_device_index();
  } else {
    fail(kValueError, "kda: ", name, ": tensors must be on the CPU or a CUDA device, got ", device_name(t));
  }
  d.dtype = to_kda_dtype(t, name);
  d.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    d.shape[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  // An empty tensor still needs a non-null pointer to count as present.
  static char empty_sentinel;
  d.data = t.numel() > 0 ? t.data_ptr() : static_cast<void*>(&empty_sentinel);
  return d;
}

kda_tensor_t desc(const OptTensor& t, const char* name) {
  return t.has_value() && t->defined() ? desc(*t, name) : kda_tensor_none();
}

// Raises the exception matching a kda status: ValueError for an invalid argument, NotImplementedError for a legal
// input the backend does not handle, RuntimeError otherwise (tagged, see the top); the text is kda_last_error().
// `renames` maps the C ABI's argument names to the Python API's (e.g. state_indices -> ssm_state_indices).
void check(kda_status_t s, const char* call,
           std::initializer_list<std::pair<const char*, const char*>> renames = {}) {
  if (s == KDA_STATUS_SUCCESS) return;
  std::string msg = std::string(call) + ": " + kda_last_error();
  for (const auto& [from, to] : renames) {
    const std::string key = std::string(": ") + from;
    const size_t at = msg.find(key);
    if (at != std::string::npos) msg.replace(at, key.size(), std::string(": ") + to);
  }
  switch (s) {
    case KDA_STATUS_INVALID_ARGUMENT: fail(kValueError, msg);
    case KDA_STATUS_NOT_SUPPORTED:
    case KDA_STATUS_BACKEND_UNAVAILABLE: fail(kNotImplemented, msg);
    default: fail(kRuntimeError, msg);
  }
}

// A new contiguous tensor on `like`'s device.
Tensor empty_on(const Tensor& like, std::vector<int64_t> sizes, ScalarType dtype) {
  return torch::stable::new_empty(like, sizes, dtype);
}

std::vector<int64_t> sizes_vec(const Tensor& t) {
  std::vector<int64_t> s(static_cast<size_t>(t.dim()));
  for (int64_t i = 0; i < t.dim(); ++i) s[static_cast<size_t>(i)] = t.size(i);
  return s;
}

// A new contiguous tensor of `t`'s sizes, dtype and device (the gradients: contiguous whatever the inputs' strides).
Tensor contiguous_like(const Tensor& t) { return empty_on(t, sizes_vec(t), t.scalar_type()); }

// The stream of the tensors' device (torch's current stream, under a guard for that device), or nullptr for CPU
// tensors.
struct StreamScope {
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  void* stream = nullptr;
  explicit StreamScope(const Tensor& q) {
    if (!q.is_cuda()) return;
#ifdef KDA_TORCH_CUDA
    guard.emplace(q.get_device_index());
    if (aoti_torch_get_current_cuda_stream(q.get_device_index(), &stream) != AOTI_TORCH_SUCCESS)
      fail(kRuntimeError, "kda: q: could not get torch's current CUDA stream for ", device_name(q));
#else
    fail(kNotImplemented, "kda: q: CUDA tensors, but this kda extension was built without CUDA "
                          "(rebuild with KDA_ENABLE_CUDA=ON where nvcc is installed)");
#endif
  }
};

struct Flags {
  double scale;
  int64_t gate_mode;
  double lower_bound;
  bool use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first;
  int64_t chunk_size, backend;
};

void fill_forward(kda_forward_args_t* a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                  const Tensor& beta, const OptTensor& A_log, const OptTensor& dt_bias, const OptTensor& initial_state,
                  const OptTensor& cu_seqlens, const Flags& f) {
  kda_forward_args_init(a);
  a->q = desc(q, "q");
  a->k = desc(k, "k");
  a->v = desc(v, "v");
  a->g = desc(g, "g");
  a->beta = desc(beta, "beta");
  a->A_log = desc(A_log, "A_log");
  a->dt_bias = desc(dt_bias, "dt_bias");
  a->initial_state = desc(initial_state, "initial_state");
  a->cu_seqlens = desc(cu_seqlens, "cu_seqlens");
  a->use_default_scale = 0;
  a->scale = static_cast<float>(f.scale);
  if (f.gate_mode < 0 || f.gate_mode > 2) fail(kValueError, "kda: gate_mode: unknown value ", f.gate_mode);
  a->gate_mode = static_cast<kda_gate_mode_t>(f.gate_mode);
  a->lower_bound = static_cast<float>(f.lower_bound);
  a->use_qk_l2norm = f.use_qk_l2norm;
  a->beta_is_logits = f.beta_is_logits;
  a->allow_neg_eigval = f.allow_neg_eigval;
  a->state_v_first = f.state_v_first;
  a->chunk_size = static_cast<int32_t>(f.chunk_size);
  a->backend = static_cast<kda_backend_t>(f.backend);
}

int64_t num_seqs(const Tensor& q, const OptTensor& cu_seqlens) {
  return cu_seqlens.has_value() && cu_seqlens->defined() ? cu_seqlens->size(0) - 1 : q.size(0);
}

// Runs the forward on the caller's workspace, or on one from torch's allocator, which it returns (none when the call
// needs none: each allocation is a dispatcher call through the stable ABI, ~1-2 us of a small call's time).
OptTensor run_forward(kda_forward_args_t* a, const Tensor& q, const OptTensor& workspace) {
  size_t ws = 0;
  check(kda_forward_workspace_size(a, &ws), "kda_forward_workspace_size");
  OptTensor buf;
  void* ws_ptr = nullptr;
  if (ws > 0) {
    if (workspace.has_value() && workspace->defined()) {
      if (device_name(*workspace) != device_name(q))
        fail(kValueError, "kda: workspace: must be on ", device_name(q), ", got ", device_name(*workspace));
      if (!workspace->is_contiguous()) fail(kValueError, "kda: workspace: must be contiguous");
      const size_t have = static_cast<size_t>(workspace->numel()) * workspace->element_size();
      if (have < ws)
        fail(kValueError, "kda: workspace: ", have, " bytes, the call needs ", ws,
             " (ask kda.chunk_kda_workspace_size)");
      ws_ptr = workspace->data_ptr();
    } else {
      buf = empty_on(q, {static_cast<int64_t>(ws)}, ScalarType::Byte);
      ws_ptr = buf->data_ptr();
    }
  }
  StreamScope scope(q);
  check(kda_forward(a, ws_ptr, ws, scope.stream), "kda_forward");
  return buf;
}

// ---------------------------------------------------------------- forward
// The functional forward; save: the chunked CUDA forward also keeps the backward's recompute in the workspace,
// which is returned third (none when the call needs no workspace).
std::tuple<Tensor, Tensor, OptTensor> forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                              const Tensor& beta, const OptTensor& A_log, const OptTensor& dt_bias,
                                              const OptTensor& initial_state, const OptTensor& cu_seqlens,
                                              const Flags& f, bool output_final_state, bool save) {
  if (q.dim() != 4 || v.dim() != 4)
    fail(kValueError, "kda: q: must be [B, T, H, K] and v [B, T, HV, V], got q ", sizes_of(q), ", v ", sizes_of(v));
  kda_forward_args_t a;
  fill_forward(&a, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f);
  a.save_for_backward = save ? 1 : 0;
  Tensor out = empty_on(v, sizes_vec(v), q.scalar_type());
  Tensor final_state;
  if (output_final_state) {
    const int64_t N = num_seqs(q, cu_seqlens), HV = v.size(2), K = q.size(3), V = v.size(3);
    final_state = f.state_v_first ? empty_on(q, {N, HV, V, K}, ScalarType::Float)
                                  : empty_on(q, {N, HV, K, V}, ScalarType::Float);
  } else {
    final_state = empty_on(q, {0}, ScalarType::Float);
  }
  a.out = desc(out, "out");
  if (output_final_state) a.final_state = desc(final_state, "final_state");
  return {out, final_state, run_forward(&a, q, std::nullopt)};
}

std::tuple<Tensor, Tensor> chunk_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                     const Tensor& beta, const OptTensor& A_log, const OptTensor& dt_bias,
                                     const OptTensor& initial_state, const OptTensor& cu_seqlens, double scale,
                                     int64_t gate_mode, double lower_bound, bool use_qk_l2norm, bool beta_is_logits,
                                     bool allow_neg_eigval, bool state_v_first, bool output_final_state,
                                     int64_t chunk_size, int64_t backend) {
  Flags f{scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
          chunk_size, backend};
  auto [out, final_state, ws] =
      forward(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f, output_final_state, false);
  return {out, final_state};
}

// The chunked CUDA forward keeping the backward's recompute (save_for_backward): (out, final_state, workspace); the
// workspace goes, untouched, to chunk_bwd as `saved` with the same backend (the C ABI resolves AUTO / GENERIC to the
// same chunked path for both: HOPPER on sm_90 at K = 128, CHUNKED elsewhere). NotImplementedError where the chunked
// path does not apply.
std::tuple<Tensor, Tensor, Tensor> chunk_fwd_saved(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& g, const Tensor& beta, const OptTensor& A_log,
                                                   const OptTensor& dt_bias, const OptTensor& initial_state,
                                                   const OptTensor& cu_seqlens, double scale, int64_t gate_mode,
                                                   double lower_bound, bool use_qk_l2norm, bool beta_is_logits,
                                                   bool allow_neg_eigval, bool state_v_first,
                                                   bool output_final_state, int64_t chunk_size, int64_t backend) {
  Flags f{scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
          chunk_size, backend};
  auto [out, final_state, ws] =
      forward(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f, output_final_state, true);
  return {out, final_state, ws ? *ws : empty_on(q, {0}, ScalarType::Byte)};
}

void chunk_fwd_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                   const OptTensor& A_log, const OptTensor& dt_bias, const OptTensor& initial_state,
                   const OptTensor& cu_seqlens, double scale, int64_t gate_mode, double lower_bound,
                   bool use_qk_l2norm, bool beta_is_logits, bool allow_neg_eigval, bool state_v_first,
                   int64_t chunk_size, int64_t backend, const Tensor& out, const OptTensor& final_state,
                   const OptTensor& workspace) {
  Flags f{scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
          chunk_size, backend};
  kda_forward_args_t a;
  fill_forward(&a, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f);
  a.out = desc(out, "out");
  a.final_state = desc(final_state, "final_state");
  run_forward(&a, q, workspace);
}

int64_t chunk_fwd_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                 const Tensor& beta, const OptTensor& A_log, const OptTensor& dt_bias,
                                 const OptTensor& initial_state, const OptTensor& cu_seqlens, double scale,
                                 int64_t gate_mode, double lower_bound, bool use_qk_l2norm, bool beta_is_logits,
                                 bool allow_neg_eigval, bool state_v_first, int64_t chunk_size, int64_t backend,
                                 const Tensor& out, const OptTensor& final_state) {
  Flags f{scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
          chunk_size, backend};
  kda_forward_args_t a;
  fill_forward(&a, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f);
  a.out = desc(out, "out");
  a.final_state = desc(final_state, "final_state");
  size_t ws = 0;
  check(kda_forward_workspace_size(&a, &ws), "kda_forward_workspace_size");
  return static_cast<int64_t>(ws);
}

// ---------------------------------------------------------------- decode (state pool, in place)
void decode_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                const OptTensor& A_log, const OptTensor& dt_bias, const Tensor& state_pool,
                const Tensor& state_indices, const OptTensor& num_accepted_tokens, double scale, int64_t gate_mode,
                double lower_bound, bool use_qk_l2norm, bool beta_is_logits, bool allow_neg_eigval,
                bool state_v_first, int64_t backend, const Tensor& out, const OptTensor& q_conv_weight,
                const OptTensor& k_conv_weight, const OptTensor& v_conv_weight, const OptTensor& q_conv_state,
                const OptTensor& k_conv_state, const OptTensor& v_conv_state, const OptTensor& out_norm_weight,
                const OptTensor& out_gate, double out_norm_eps, int64_t out_gate_activation) {
  kda_decode_args_t a;
  kda_decode_args_init(&a);
  a.q = desc(q, "q");
  a.k = desc(k, "k");
  a.v = desc(v, "v");
  a.g = desc(g, "g");
  a.beta = desc(beta, "beta");
  a.A_log = desc(A_log, "A_log");
  a.dt_bias = desc(dt_bias, "dt_bias");
  a.state_pool = desc(state_pool, "initial_state (the state pool)");
  a.state_indices = desc(state_indices, "ssm_state_indices");
  a.num_accepted_tokens = desc(num_accepted_tokens, "num_accepted_tokens");
  a.out = desc(out, "out");
  a.use_default_scale = 0;
  a.scale = static_cast<float>(scale);
  if (gate_mode < 0 || gate_mode > 2) fail(kValueError, "kda: gate_mode: unknown value ", gate_mode);
  a.gate_mode = static_cast<kda_gate_mode_t>(gate_mode);
  a.lower_bound = static_cast<float>(lower_bound);
  a.use_qk_l2norm = use_qk_l2norm;
  a.beta_is_logits = beta_is_logits;
  a.allow_neg_eigval = allow_neg_eigval;
  a.state_v_first = state_v_first;
  a.backend = static_cast<kda_backend_t>(backend);
  // The fusions (kda.h): conv of q / k / v with conv-state pools updated in place, the gated RMSNorm of the output.
  a.q_conv_weight = desc(q_conv_weight, "q_conv_weight");
  a.k_conv_weight = desc(k_conv_weight, "k_conv_weight");
  a.v_conv_weight = desc(v_conv_weight, "v_conv_weight");
  a.q_conv_state = desc(q_conv_state, "q_conv_state");
  a.k_conv_state = desc(k_conv_state, "k_conv_state");
  a.v_conv_state = desc(v_conv_state, "v_conv_state");
  a.out_norm_weight = desc(out_norm_weight, "out_norm_weight");
  a.out_gate = desc(out_gate, "out_gate");
  a.out_norm_eps = static_cast<float>(out_norm_eps);
  if (out_gate_activation != KDA_OUT_GATE_SIGMOID && out_gate_activation != KDA_OUT_GATE_SILU)
    fail(kValueError, "kda: out_gate_activation: unknown value ", out_gate_activation);
  a.out_gate_activation = static_cast<kda_out_gate_activation_t>(out_gate_activation);
  size_t ws = 0;
  const std::initializer_list<std::pair<const char*, const char*>> renames = {
      {"state_indices", "ssm_state_indices"}, {"state_pool", "initial_state (the state pool)"}};
  check(kda_decode_workspace_size(&a, &ws), "kda_decode_workspace_size", renames);
  OptTensor buf;
  if (ws > 0) buf = empty_on(q, {static_cast<int64_t>(ws)}, ScalarType::Byte);
  StreamScope scope(q);
  check(kda_decode(&a, buf ? buf->data_ptr() : nullptr, ws, scope.stream), "kda_decode", renames);
}

// ---------------------------------------------------------------- backward (host backends and CUDA)
std::vector<Tensor> chunk_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                              const OptTensor& A_log, const OptTensor& dt_bias, const OptTensor& initial_state,
                              const OptTensor& cu_seqlens, double scale, int64_t gate_mode, double lower_bound,
                              bool use_qk_l2norm, bool beta_is_logits, bool allow_neg_eigval, bool state_v_first,
                              int64_t chunk_size, int64_t backend, const Tensor& dout, const OptTensor& dfinal_state,
                              const OptTensor& saved) {
  const bool use_saved = saved.has_value() && saved->defined();
  // With saved: the saving forward's backend, which the C ABI resolves to the same chunked path (a forced CHUNKED
  // here ran the reverse state pass on mma.sync after a HOPPER forward: the same planes and bits, ~0.6 ms slower).
  Flags f{scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
          chunk_size, backend};
  kda_backward_args_t a;
  kda_backward_args_init(&a);
  fill_forward(&a.forward, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, f);
  a.forward_saved = use_saved ? 1 : 0;
  a.dout = desc(dout, "dout");
  a.dfinal_state = desc(dfinal_state, "dfinal_state");
  auto like = [&q](const OptTensor& t) {
    return t.has_value() && t->defined() ? contiguous_like(*t) : empty_on(q, {0}, ScalarType::Float);
  };
  Tensor dq = contiguous_like(q), dk = contiguous_like(k), dv = contiguous_like(v), dg = contiguous_like(g),
         dbeta = contiguous_like(beta);
  Tensor dA = like(A_log), ddt = like(dt_bias), dh0 = like(initial_state);
  a.dq = desc(dq, "dq");
  a.dk = desc(dk, "dk");
  a.dv = desc(dv, "dv");
  a.dg = desc(dg, "dg");
  a.dbeta = desc(dbeta, "dbeta");
  if (A_log.has_value() && A_log->defined()) a.dA_log = desc(dA, "dA_log");
  if (dt_bias.has_value() && dt_bias->defined()) a.ddt_bias = desc(ddt, "ddt_bias");
  if (initial_state.has_value() && initial_state->defined()) a.dh0 = desc(dh0, "dh0");
  size_t ws = 0;
  check(kda_backward_workspace_size(&a, &ws), "kda_backward_workspace_size");
  OptTensor buf;
  if (use_saved) {  // chunk_fwd_saved's workspace: what the forward kept is read, the rest is the backward's
    if (device_name(*saved) != device_name(q) || !saved->is_contiguous() || saved->scalar_type() != ScalarType::Byte)
      fail(kValueError, "kda: saved: must be chunk_fwd_saved's workspace (contiguous uint8 on ", device_name(q), ")");
    if (static_cast<size_t>(saved->numel()) < ws)
      fail(kValueError, "kda: saved: ", saved->numel(), " bytes, the backward needs ", ws,
           " (not chunk_fwd_saved's workspace for these inputs)");
    buf = *saved;
  } else if (ws > 0) {
    buf = empty_on(q, {static_cast<int64_t>(ws)}, ScalarType::Byte);
  }
  StreamScope scope(q);
  check(kda_backward(&a, ws > 0 ? buf->data_ptr() : nullptr, ws, scope.stream), "kda_backward");
  return {dq, dk, dv, dg, dbeta, dA, ddt, dh0};
}

int64_t library_version() { return kda_version(); }

#define KDA_FWD_ARGS                                                                                        \
  "Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? A_log, Tensor? dt_bias, Tensor? initial_state, " \
  "Tensor? cu_seqlens, float scale, int gate_mode, float lower_bound, bool use_qk_l2norm, bool beta_is_logits, " \
  "bool allow_neg_eigval, bool state_v_first"

}  // namespace

STABLE_TORCH_LIBRARY(kda, m) {
  m.def("chunk_fwd(" KDA_FWD_ARGS ", bool output_final_state, int chunk_size, int backend) -> (Tensor, Tensor)");
  m.def("chunk_fwd_saved(" KDA_FWD_ARGS ", bool output_final_state, int chunk_size, int backend) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("chunk_fwd_out(" KDA_FWD_ARGS ", int chunk_size, int backend, Tensor(a!) out, Tensor(b!)? final_state, "
        "Tensor(c!)? workspace) -> ()");
  m.def("chunk_fwd_workspace_size(" KDA_FWD_ARGS ", int chunk_size, int backend, Tensor out, Tensor? final_state) "
        "-> int");
  m.def("chunk_bwd(" KDA_FWD_ARGS ", int chunk_size, int backend, Tensor dout, Tensor? dfinal_state, "
        "Tensor? saved=None) -> Tensor[]");
  m.def("decode_out(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? A_log, Tensor? dt_bias, "
        "Tensor(a!) state_pool, Tensor state_indices, Tensor? num_accepted_tokens, float scale, int gate_mode, "
        "float lower_bound, bool use_qk_l2norm, bool beta_is_logits, bool allow_neg_eigval, bool state_v_first, "
        "int backend, Tensor(b!) out, Tensor? q_conv_weight, Tensor? k_conv_weight, Tensor? v_conv_weight, "
        "Tensor(c!)? q_conv_state, Tensor(d!)? k_conv_state, Tensor(e!)? v_conv_state, Tensor? out_norm_weight, "
        "Tensor? out_gate, float out_norm_eps, int out_gate_activation) -> ()");
  m.def("library_version() -> int");
}

STABLE_TORCH_LIBRARY_IMPL(kda, CPU, m) {
  m.impl("chunk_fwd", TORCH_BOX(&chunk_fwd));
  m.impl("chunk_fwd_saved", TORCH_BOX(&chunk_fwd_saved));  // the C ABI refuses it for CPU tensors, with its message
  m.impl("chunk_fwd_out", TORCH_BOX(&chunk_fwd_out));
  m.impl("chunk_fwd_workspace_size", TORCH_BOX(&chunk_fwd_workspace_size));
  m.impl("chunk_bwd", TORCH_BOX(&chunk_bwd));
  m.impl("decode_out", TORCH_BOX(&decode_out));
}

STABLE_TORCH_LIBRARY_IMPL(kda, CUDA, m) {
  m.impl("chunk_fwd", TORCH_BOX(&chunk_fwd));
  m.impl("chunk_fwd_saved", TORCH_BOX(&chunk_fwd_saved));
  m.impl("chunk_fwd_out", TORCH_BOX(&chunk_fwd_out));
  m.impl("chunk_fwd_workspace_size", TORCH_BOX(&chunk_fwd_workspace_size));
  m.impl("chunk_bwd", TORCH_BOX(&chunk_bwd));
  m.impl("decode_out", TORCH_BOX(&decode_out));
}

// library_version takes no tensor, so it dispatches to this key on every device.
STABLE_TORCH_LIBRARY_IMPL(kda, CompositeExplicitAutograd, m) { m.impl("library_version", TORCH_BOX(&library_version)); }
