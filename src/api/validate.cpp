// validate.cpp: every check of the forward arguments, each failure a message that names the argument and
// says what was expected.
#include "api/validate.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/host_access.h"

namespace kda {
namespace {

bool present(const kda_tensor_t& t) { return t.data != nullptr || t.ndim != 0; }

std::string shape_str(const kda_tensor_t& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim && i < KDA_MAX_DIMS; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string shape_str(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  int i = 0;
  for (int64_t d : dims) s += (i++ ? ", " : "") + std::to_string(d);
  return s + "]";
}

Status invalid(const std::string& msg) { return Status{KDA_STATUS_INVALID_ARGUMENT, msg}; }

// The raw integer of a C enum field. A C caller can store any int there, and loading an out-of-range value through
// the C++ enum type is undefined; every enum field is range-checked through this before it is read as its type.
template <typename E>
int32_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "C enums of the ABI are 32-bit");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The structural checks every present tensor gets: a pointer, a sane rank, non-negative sizes and strides.
Status check_basic(const char* name, const kda_tensor_t& t) {
  if (t.ndim < 1 || t.ndim > KDA_MAX_DIMS)
    return invalid(std::string(name) + ": rank " + std::to_string(t.ndim) + " is out of range");
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return invalid(std::string(name) + ": negative size in shape " + shape_str(t));
    if (t.strides[i] < 0)
      return invalid(std::string(name) + ": negative stride " + std::to_string(t.strides[i]) + " in dim " +
                     std::to_string(i) + " (strides must be >= 0)");
  }
  int64_t numel = 1;
  for (int i = 0; i < t.ndim; ++i) numel *= t.shape[i];
  if (t.data == nullptr && numel > 0) return invalid(std::string(name) + ": data is NULL");
  const int32_t device = raw_enum(t.device_type), dtype = raw_enum(t.dtype);
  if (device != KDA_DEVICE_CPU && device != KDA_DEVICE_CUDA)
    return invalid(std::string(name) + ": unknown device_type " + std::to_string(device));
  if (dtype < KDA_DTYPE_FLOAT32 || dtype > KDA_DTYPE_INT64)
    return invalid(std::string(name) + ": unknown dtype " + std::to_string(dtype));
  return Status::Ok();
}

Status check_shape(const char* name, const kda_tensor_t& t, std::initializer_list<int64_t> dims) {
  KDA_RETURN_IF_ERROR(check_basic(name, t));
  if (t.ndim != static_cast<int>(dims.size()))
    return invalid(std::string(name) + ": expected rank " + std::to_string(dims.size()) + " with shape " +
                   shape_str(dims) + ", got rank " + std::to_string(t.ndim) + " shape " + shape_str(t));
  int i = 0;
  for (int64_t d : dims) {
    if (t.shape[i] != d)
      return invalid(std::string(name) + ": expected shape " + shape_str(dims) + ", got " + shape_str(t));
    ++i;
  }
  return Status::Ok();
}

Status check_dtype(const char* name, const kda_tensor_t& t, std::initializer_list<kda_dtype_t> allowed) {
  for (kda_dtype_t d : allowed)
    if (t.dtype == d) return Status::Ok();
  std::string s = std::string(name) + ": dtype " + dtype_name(t.dtype) + " is not allowed (expected ";
  int i = 0;
  for (kda_dtype_t d : allowed) s += std::string(i++ ? " or " : "") + dtype_name(d);
  return invalid(s + ")");
}

Status check_same_device(const char* name, const kda_tensor_t& t, const kda_tensor_t& q) {
  if (t.device_type != q.device_type || (t.device_type == KDA_DEVICE_CUDA && t.device_id != q.device_id))
    return invalid(std::string(name) + ": on device " + (t.device_type == KDA_DEVICE_CPU ? "cpu" : "cuda:") +
                   (t.device_type == KDA_DEVICE_CUDA ? std::to_string(t.device_id) : "") +
                   " but q is on " + (q.device_type == KDA_DEVICE_CPU ? "cpu" : "cuda:") +
                   (q.device_type == KDA_DEVICE_CUDA ? std::to_string(q.device_id) : "") +
                   " (all tensors must be on one device)");
  return Status::Ok();
}

TensorView view4(const kda_tensor_t& t) {
  TensorView v;
  v.data = t.data;
  v.dtype = t.dtype;
  for (int i = 0; i < t.ndim && i < 4; ++i) v.stride[i] = t.strides[i];
  return v;
}

bool supported_head_dim(int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128 || d == 256; }

}  // namespace

Status validate_forward(const kda_forward_args_t* args, ForwardParams* p) {
  if (args == nullptr) return invalid("args: NULL pointer");
  if (p == nullptr) return invalid("params: NULL pointer");
  const kda_forward_args_t& a = *args;
  *p = ForwardParams{};
  const int32_t gate_raw = raw_enum(a.gate_mode), backend_raw = raw_enum(a.backend);
  if (gate_raw < KDA_GATE_LOG_DECAY || gate_raw > KDA_GATE_BOUNDED)
    return invalid("gate_mode: unknown value " + std::to_string(gate_raw));
  if (backend_raw < KDA_BACKEND_AUTO || backend_raw > KDA_BACKEND_CUDA_RECURRENT)
    return invalid("backend: unknown value " + std::to_string(backend_raw));

  // q fixes B, T, H, K, the input dtype and the device.
  if (!present(a.q)) return invalid("q: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_basic("q", a.q));
  if (a.q.ndim != 4) return invalid("q: expected rank 4 [B, T, H, K], got rank " + std::to_string(a.q.ndim) +
                                    " shape " + shape_str(a.q));
  // The reference also takes float64 everything (finite-difference checks of gradients need it).
  const bool reference = a.backend == KDA_BACKEND_REFERENCE;
  const kda_dtype_t param_f64 = reference ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32;
  KDA_RETURN_IF_ERROR(check_dtype("q", a.q, {KDA_DTYPE_BFLOAT16, KDA_DTYPE_FLOAT16, KDA_DTYPE_FLOAT32, param_f64}));
  const int64_t B = a.q.shape[0], T = a.q.shape[1], H = a.q.shape[2], K = a.q.shape[3];
  const kda_dtype_t in_dtype = a.q.dtype;
  if (H < 1) return invalid("q: number of heads H must be >= 1, got shape " + shape_str(a.q));
  if (!supported_head_dim(K))
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "q: head dim K = " + std::to_string(K) + " is not supported (supported: 16, 32, 64, 128, 256)"};

  if (!present(a.k)) return invalid("k: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_shape("k", a.k, {B, T, H, K}));
  KDA_RETURN_IF_ERROR(check_dtype("k", a.k, {in_dtype}));
  KDA_RETURN_IF_ERROR(check_same_device("k", a.k, a.q));

  if (!present(a.v)) return invalid("v: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_basic("v", a.v));
  if (a.v.ndim != 4 || a.v.shape[0] != B || a.v.shape[1] != T)
    return invalid("v: expected shape [B, T, HV, V] = [" + std::to_string(B) + ", " + std::to_string(T) +
                   ", HV, V], got " + shape_str(a.v));
  const int64_t HV = a.v.shape[2], V = a.v.shape[3];
  if (HV < 1 || HV % H != 0)
    return invalid("v: value heads HV = " + std::to_string(HV) + " must be a positive multiple of the q/k heads H = " +
                   std::to_string(H));
  if (!supported_head_dim(V))
    return Status{KDA_STATUS_NOT_SUPPORTED,
                  "v: head dim V = " + std::to_string(V) + " is not supported (supported: 16, 32, 64, 128, 256)"};
  KDA_RETURN_IF_ERROR(check_dtype("v", a.v, {in_dtype}));
  KDA_RETURN_IF_ERROR(check_same_device("v", a.v, a.q));

  if (!present(a.g)) return invalid("g: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_shape("g", a.g, {B, T, HV, K}));
  KDA_RETURN_IF_ERROR(check_dtype("g", a.g, {in_dtype, KDA_DTYPE_FLOAT32}));
  KDA_RETURN_IF_ERROR(check_same_device("g", a.g, a.q));

  if (!present(a.beta)) return invalid("beta: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_shape("beta", a.beta, {B, T, HV}));
  KDA_RETURN_IF_ERROR(check_dtype("beta", a.beta, {in_dtype, KDA_DTYPE_FLOAT32}));
  KDA_RETURN_IF_ERROR(check_same_device("beta", a.beta, a.q));

  // Sequences.
  int64_t N = B;
  if (present(a.cu_seqlens)) {
    KDA_RETURN_IF_ERROR(check_basic("cu_seqlens", a.cu_seqlens));
    if (a.cu_seqlens.ndim != 1 || a.cu_seqlens.shape[0] < 2)
      return invalid("cu_seqlens: expected rank 1 with N+1 >= 2 entries, got shape " + shape_str(a.cu_seqlens));
    KDA_RETURN_IF_ERROR(check_dtype("cu_seqlens", a.cu_seqlens, {KDA_DTYPE_INT32, KDA_DTYPE_INT64}));
    KDA_RETURN_IF_ERROR(check_same_device("cu_seqlens", a.cu_seqlens, a.q));
    if (B != 1)
      return invalid("cu_seqlens: a packed batch requires B == 1, got B = " + std::to_string(B));
    N = a.cu_seqlens.shape[0] - 1;
    if (a.cu_seqlens.device_type == KDA_DEVICE_CPU) {
      // Host-resident offsets are checked in full; device-resident ones cannot be read without a sync.
      TensorView cu = view4(a.cu_seqlens);
      if (load_index(cu, 0) != 0)
        return invalid("cu_seqlens: must start at 0, got cu_seqlens[0] = " + std::to_string(load_index(cu, 0)));
      for (int64_t n = 0; n < N; ++n) {
        int64_t lo = load_index(cu, n), hi = load_index(cu, n + 1);
        if (hi < lo)
          return invalid("cu_seqlens: must be non-decreasing, got cu_seqlens[" + std::to_string(n) + "] = " +
                         std::to_string(lo) + " > cu_seqlens[" + std::to_string(n + 1) + "] = " + std::to_string(hi));
      }
      if (load_index(cu, N) != T)
        return invalid("cu_seqlens: must end at T = " + std::to_string(T) + ", got cu_seqlens[" + std::to_string(N) +
                       "] = " + std::to_string(load_index(cu, N)));
    }
  }

  // Gate parameters.
  const kda_gate_mode_t gate = a.gate_mode;  // range-checked above
  if (present(a.A_log)) {
    if (gate == KDA_GATE_LOG_DECAY)
      return invalid("A_log: given, but gate_mode is KDA_GATE_LOG_DECAY (g is already the log-decay)");
    KDA_RETURN_IF_ERROR(check_shape("A_log", a.A_log, {HV}));
    KDA_RETURN_IF_ERROR(check_dtype("A_log", a.A_log, {KDA_DTYPE_FLOAT32, param_f64}));
    KDA_RETURN_IF_ERROR(check_same_device("A_log", a.A_log, a.q));
  } else if (gate == KDA_GATE_SOFTPLUS) {
    return invalid("A_log: required by the softplus gate (g_log = -exp(A_log) * softplus(g + dt_bias))");
  }
  if (present(a.dt_bias)) {
    if (gate == KDA_GATE_LOG_DECAY)
      return invalid("dt_bias: given, but gate_mode is KDA_GATE_LOG_DECAY (g is already the log-decay)");
    KDA_RETURN_IF_ERROR(check_basic("dt_bias", a.dt_bias));
    if (a.dt_bias.ndim == 1) {
      KDA_RETURN_IF_ERROR(check_shape("dt_bias", a.dt_bias, {HV * K}));
    } else {
      KDA_RETURN_IF_ERROR(check_shape("dt_bias", a.dt_bias, {HV, K}));
    }
    KDA_RETURN_IF_ERROR(check_dtype("dt_bias", a.dt_bias, {KDA_DTYPE_FLOAT32, param_f64}));
    KDA_RETURN_IF_ERROR(check_same_device("dt_bias", a.dt_bias, a.q));
  } else if (gate != KDA_GATE_LOG_DECAY) {
    return invalid(std::string("dt_bias: required by the ") + (gate == KDA_GATE_SOFTPLUS ? "softplus" : "bounded") +
                   " gate");
  }
  if (gate == KDA_GATE_BOUNDED && !(std::isfinite(a.lower_bound) && a.lower_bound < 0.0f))
    return invalid("lower_bound: the bounded gate needs a finite lower_bound < 0, got " +
                   std::to_string(a.lower_bound));

  // Scale.
  float scale = 1.0f / std::sqrt(static_cast<float>(K));
  if (!a.use_default_scale) {
    if (!std::isfinite(a.scale)) return invalid("scale: must be finite, got " + std::to_string(a.scale));
    scale = a.scale;
  }

  // States.
  const bool vfirst = a.state_v_first != 0;
  const int64_t r2 = vfirst ? V : K, r3 = vfirst ? K : V;
  const char* layout = vfirst ? "[N, HV, V, K] (state_v_first = 1)" : "[N, HV, K, V] (state_v_first = 0)";
  if (present(a.initial_state)) {
    Status s = check_shape("initial_state", a.initial_state, {N, HV, r2, r3});
    if (!s.ok()) return invalid(s.message + "; layout " + layout);
    KDA_RETURN_IF_ERROR(check_dtype("initial_state", a.initial_state, {KDA_DTYPE_FLOAT32, param_f64}));
    KDA_RETURN_IF_ERROR(check_same_device("initial_state", a.initial_state, a.q));
  }
  if (present(a.final_state)) {
    Status s = check_shape("final_state", a.final_state, {N, HV, r2, r3});
    if (!s.ok()) return invalid(s.message + "; layout " + layout);
    if (reference) {
      KDA_RETURN_IF_ERROR(check_dtype("final_state", a.final_state, {KDA_DTYPE_FLOAT32, KDA_DTYPE_FLOAT64}));
    } else {
      KDA_RETURN_IF_ERROR(check_dtype("final_state", a.final_state, {KDA_DTYPE_FLOAT32}));
    }
    KDA_RETURN_IF_ERROR(check_same_device("final_state", a.final_state, a.q));
  }

  // Prefix-cache checkpoints.
  int64_t n_ckpt = 0;
  if (present(a.state_checkpoints)) {
    KDA_RETURN_IF_ERROR(check_basic("state_checkpoints", a.state_checkpoints));
    n_ckpt = a.state_checkpoints.ndim == 5 ? a.state_checkpoints.shape[1] : 0;
    Status s = check_shape("state_checkpoints", a.state_checkpoints, {N, n_ckpt, HV, r2, r3});
    if (!s.ok()) return invalid(s.message + " ([N, n_ckpt, HV, ., .], state layout " + layout + ")");
    if (reference) {
      KDA_RETURN_IF_ERROR(check_dtype("state_checkpoints", a.state_checkpoints, {KDA_DTYPE_FLOAT32, KDA_DTYPE_FLOAT64}));
    } else {
      KDA_RETURN_IF_ERROR(check_dtype("state_checkpoints", a.state_checkpoints, {KDA_DTYPE_FLOAT32}));
    }
    KDA_RETURN_IF_ERROR(check_same_device("state_checkpoints", a.state_checkpoints, a.q));
    if (present(a.checkpoint_offsets)) {
      KDA_RETURN_IF_ERROR(check_shape("checkpoint_offsets", a.checkpoint_offsets, {N, n_ckpt}));
      KDA_RETURN_IF_ERROR(check_dtype("checkpoint_offsets", a.checkpoint_offsets, {KDA_DTYPE_INT32, KDA_DTYPE_INT64}));
      KDA_RETURN_IF_ERROR(check_same_device("checkpoint_offsets", a.checkpoint_offsets, a.q));
    } else if (a.checkpoint_interval <= 0) {
      return invalid("checkpoint_interval: must be > 0 when state_checkpoints is given without checkpoint_offsets, "
                     "got " + std::to_string(a.checkpoint_interval));
    }
  } else if (present(a.checkpoint_offsets)) {
    return invalid("checkpoint_offsets: given without state_checkpoints");
  }

  // Output.
  if (!present(a.out)) return invalid("out: required tensor is absent (the caller owns the output buffer)");
  KDA_RETURN_IF_ERROR(check_shape("out", a.out, {B, T, HV, V}));
  if (reference) {
    KDA_RETURN_IF_ERROR(check_dtype("out", a.out, {in_dtype, KDA_DTYPE_FLOAT64}));
  } else {
    KDA_RETURN_IF_ERROR(check_dtype("out", a.out, {in_dtype}));
  }
  KDA_RETURN_IF_ERROR(check_same_device("out", a.out, a.q));

  if (a.allow_neg_eigval && !a.beta_is_logits)
    return invalid("allow_neg_eigval: requires beta_is_logits = 1 (beta = 2 * sigmoid(beta)); probabilities in "
                   "(0, 2) can be passed as they are with allow_neg_eigval = 0");

  // Execution options.
  if (a.chunk_size != 0 && a.chunk_size != 16 && a.chunk_size != 32 && a.chunk_size != 64)
    return invalid("chunk_size: must be 0 (backend's choice), 16, 32 or 64, got " + std::to_string(a.chunk_size));
  if (a.cpu_threads < 0) return invalid("cpu_threads: must be >= 0, got " + std::to_string(a.cpu_threads));

  ForwardParams& o = *p;
  o.B = B; o.T = T; o.N = N;
  o.H = static_cast<int32_t>(H); o.HV = static_cast<int32_t>(HV);
  o.K = static_cast<int32_t>(K); o.V = static_cast<int32_t>(V);
  o.group = static_cast<int32_t>(HV / H);
  o.q = view4(a.q); o.k = view4(a.k); o.v = view4(a.v); o.g = view4(a.g); o.beta = view4(a.beta);
  if (present(a.A_log)) o.A_log = view4(a.A_log);
  if (present(a.dt_bias)) {
    o.dt_bias = view4(a.dt_bias);
    if (a.dt_bias.ndim == 1) { o.dt_bias.stride[0] = K * a.dt_bias.strides[0]; o.dt_bias.stride[1] = a.dt_bias.strides[0]; }
  }
  if (present(a.cu_seqlens)) o.cu_seqlens = view4(a.cu_seqlens);
  if (present(a.initial_state)) o.initial_state = view4(a.initial_state);
  o.out = a.out.data;
  o.out_dtype = a.out.dtype;
  for (int i = 0; i < 4; ++i) o.out_stride[i] = a.out.strides[i];
  if (present(a.final_state)) {
    o.final_state = a.final_state.data;
    o.final_state_dtype = a.final_state.dtype;
    for (int i = 0; i < 4; ++i) o.final_state_stride[i] = a.final_state.strides[i];
  }
  if (present(a.state_checkpoints)) {
    o.ckpt = a.state_checkpoints.data;
    o.ckpt_dtype = a.state_checkpoints.dtype;
    for (int i = 0; i < 5; ++i) o.ckpt_stride[i] = a.state_checkpoints.strides[i];
    o.n_ckpt = n_ckpt;
    if (present(a.checkpoint_offsets)) {
      o.ckpt_offsets = view4(a.checkpoint_offsets);
    } else {
      o.ckpt_interval = a.checkpoint_interval;
    }
  }
  o.scale = scale;
  o.gate_mode = gate;
  o.lower_bound = a.lower_bound;
  o.use_qk_l2norm = a.use_qk_l2norm != 0;
  o.beta_is_logits = a.beta_is_logits != 0;
  o.allow_neg_eigval = a.allow_neg_eigval != 0;
  o.state_v_first = vfirst;
  o.chunk_size = a.chunk_size;
  o.cpu_threads = a.cpu_threads;
  o.device_id = a.q.device_id;
  o.backend = a.backend;
  if (a.save_for_backward != 0 && a.save_for_backward != 1)
    return invalid("save_for_backward: must be 0 or 1, got " + std::to_string(a.save_for_backward));
  o.save_for_backward = a.save_for_backward == 1;
  return Status::Ok();
}

Status validate_decode(const kda_decode_args_t* args, DecodeParams* p) {
  if (args == nullptr) return invalid("args: NULL pointer");
  if (p == nullptr) return invalid("params: NULL pointer");
  const kda_decode_args_t& a = *args;
  *p = DecodeParams{};
  if (raw_enum(a.gate_mode) < KDA_GATE_LOG_DECAY || raw_enum(a.gate_mode) > KDA_GATE_BOUNDED)
    return invalid("gate_mode: unknown value " + std::to_string(raw_enum(a.gate_mode)));
  if (raw_enum(a.backend) < KDA_BACKEND_AUTO || raw_enum(a.backend) > KDA_BACKEND_CUDA_RECURRENT)
    return invalid("backend: unknown value " + std::to_string(raw_enum(a.backend)));
  // The per-token inputs, gates, flags and output follow the forward's rules (N sequences = the batch).
  kda_forward_args_t f;
  kda_forward_args_init(&f);
  f.q = a.q; f.k = a.k; f.v = a.v; f.g = a.g; f.beta = a.beta;
  f.A_log = a.A_log; f.dt_bias = a.dt_bias; f.out = a.out;
  f.scale = a.scale; f.use_default_scale = a.use_default_scale; f.gate_mode = a.gate_mode;
  f.lower_bound = a.lower_bound; f.use_qk_l2norm = a.use_qk_l2norm; f.beta_is_logits = a.beta_is_logits;
  f.allow_neg_eigval = a.allow_neg_eigval; f.state_v_first = a.state_v_first; f.cpu_threads = a.cpu_threads;
  f.backend = a.backend == KDA_BACKEND_REFERENCE ? KDA_BACKEND_CPU : a.backend;  // fp64 out is forward-only
  KDA_RETURN_IF_ERROR(validate_forward(&f, &p->io));
  p->io.backend = a.backend;
  const ForwardParams& io = p->io;
  const int64_t N = io.B, T = io.T, HV = io.HV;
  const int64_t r2 = io.state_v_first ? io.V : io.K, r3 = io.state_v_first ? io.K : io.V;

  if (!present(a.state_pool)) return invalid("state_pool: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_basic("state_pool", a.state_pool));
  if (a.state_pool.ndim != 4 || a.state_pool.shape[1] != HV || a.state_pool.shape[2] != r2 ||
      a.state_pool.shape[3] != r3)
    return invalid("state_pool: expected shape [slots, " + std::to_string(HV) + ", " + std::to_string(r2) + ", " +
                   std::to_string(r3) + "] (" + (io.state_v_first ? "[slots, HV, V, K], state_v_first = 1" :
                   "[slots, HV, K, V], state_v_first = 0") + "), got " + shape_str(a.state_pool));
  KDA_RETURN_IF_ERROR(check_dtype("state_pool", a.state_pool, {KDA_DTYPE_FLOAT32, KDA_DTYPE_BFLOAT16}));
  KDA_RETURN_IF_ERROR(check_same_device("state_pool", a.state_pool, a.q));

  if (!present(a.state_indices)) return invalid("state_indices: required tensor is absent");
  KDA_RETURN_IF_ERROR(check_basic("state_indices", a.state_indices));
  KDA_RETURN_IF_ERROR(check_dtype("state_indices", a.state_indices, {KDA_DTYPE_INT32}));
  KDA_RETURN_IF_ERROR(check_same_device("state_indices", a.state_indices, a.q));
  const bool per_token = a.state_indices.ndim == 2;
  if (!((a.state_indices.ndim == 1 && a.state_indices.shape[0] == N) ||
        (per_token && a.state_indices.shape[0] == N && a.state_indices.shape[1] == T)))
    return invalid("state_indices: expected shape [N] = [" + std::to_string(N) + "] or [N, T] = [" + std::to_string(N) +
                   ", " + std::to_string(T) + "], got " + shape_str(a.state_indices));
  if (present(a.num_accepted_tokens)) {
    if (!per_token)
      return invalid("num_accepted_tokens: needs 2-D state_indices [N, T] (one slot per token), got 1-D");
    KDA_RETURN_IF_ERROR(check_shape("num_accepted_tokens", a.num_accepted_tokens, {N}));
    KDA_RETURN_IF_ERROR(check_dtype("num_accepted_tokens", a.num_accepted_tokens, {KDA_DTYPE_INT32}));
    KDA_RETURN_IF_ERROR(check_same_device("num_accepted_tokens", a.num_accepted_tokens, a.q));
  }

  // Fusions. Conv: all six tensors or none; norm: both tensors or neither.
  const kda_dtype_t in_dtype = a.q.dtype;
  const kda_tensor_t* cw[3] = {&a.q_conv_weight, &a.k_conv_weight, &a.v_conv_weight};
  const kda_tensor_t* cs[3] = {&a.q_conv_state, &a.k_conv_state, &a.v_conv_state};
  const char* cw_name[3] = {"q_conv_weight", "k_conv_weight", "v_conv_weight"};
  const char* cs_name[3] = {"q_conv_state", "k_conv_state", "v_conv_state"};
  int conv_given = 0;
  for (int i = 0; i < 3; ++i) conv_given += present(*cw[i]) + present(*cs[i]);
  if (conv_given != 0 && conv_given != 6) {
    for (int i = 0; i < 3; ++i) {
      if (!present(*cw[i]))
        return invalid(std::string(cw_name[i]) + ": absent, but other conv tensors are given (the fused conv needs "
                       "all of q/k/v_conv_weight and q/k/v_conv_state)");
      if (!present(*cs[i]))
        return invalid(std::string(cs_name[i]) + ": absent, but other conv tensors are given (the fused conv needs "
                       "all of q/k/v_conv_weight and q/k/v_conv_state)");
    }
  }
  if (conv_given == 6) {
    const int64_t slots = a.state_pool.shape[0];
    for (int i = 0; i < 3; ++i) {
      const int64_t dim = i < 2 ? int64_t{io.H} * io.K : HV * io.V;
      KDA_RETURN_IF_ERROR(check_shape(cw_name[i], *cw[i], {dim, DecodeParams::kConvWidth}));
      KDA_RETURN_IF_ERROR(check_dtype(cw_name[i], *cw[i], {KDA_DTYPE_FLOAT32, in_dtype}));
      KDA_RETURN_IF_ERROR(check_same_device(cw_name[i], *cw[i], a.q));
      KDA_RETURN_IF_ERROR(check_shape(cs_name[i], *cs[i], {slots, dim, DecodeParams::kConvWidth - 1}));
      KDA_RETURN_IF_ERROR(check_dtype(cs_name[i], *cs[i], {KDA_DTYPE_FLOAT32, in_dtype}));
      KDA_RETURN_IF_ERROR(check_same_device(cs_name[i], *cs[i], a.q));
      p->conv_w[i] = view4(*cw[i]);
      p->conv_state[i] = view4(*cs[i]);
    }
    p->conv = true;
  }
  if (present(a.out_norm_weight) != present(a.out_gate))
    return present(a.out_gate)
               ? invalid("out_norm_weight: absent, but out_gate is given (the fused gated RMSNorm needs both)")
               : invalid("out_gate: absent, but out_norm_weight is given (the fused gated RMSNorm needs both)");
  if (present(a.out_gate)) {
    KDA_RETURN_IF_ERROR(check_shape("out_norm_weight", a.out_norm_weight, {int64_t{io.V}}));
    KDA_RETURN_IF_ERROR(check_dtype("out_norm_weight", a.out_norm_weight, {KDA_DTYPE_FLOAT32, in_dtype}));
    KDA_RETURN_IF_ERROR(check_same_device("out_norm_weight", a.out_norm_weight, a.q));
    KDA_RETURN_IF_ERROR(check_shape("out_gate", a.out_gate, {N, T, HV, int64_t{io.V}}));
    KDA_RETURN_IF_ERROR(check_dtype("out_gate", a.out_gate, {in_dtype, KDA_DTYPE_FLOAT32}));
    KDA_RETURN_IF_ERROR(check_same_device("out_gate", a.out_gate, a.q));
    if (!std::isfinite(a.out_norm_eps) || a.out_norm_eps < 0.0f)
      return invalid("out_norm_eps: must be finite and >= 0, got " + std::to_string(a.out_norm_eps));
    const int32_t act = raw_enum(a.out_gate_activation);
    if (act != KDA_OUT_GATE_SIGMOID && act != KDA_OUT_GATE_SILU)
      return invalid("out_gate_activation: unknown value " + std::to_string(act));
    p->out_norm = true;
    p->norm_weight = view4(a.out_norm_weight);
    p->out_gate = view4(a.out_gate);
    p->norm_eps = a.out_norm_eps;
    p->norm_act = a.out_gate_activation;
  }

  p->pool = a.state_pool.data;
  p->pool_dtype = a.state_pool.dtype;
  for (int i = 0; i < 4; ++i) p->pool_stride[i] = a.state_pool.strides[i];
  p->slots = a.state_pool.shape[0];
  p->indices = static_cast<const int32_t*>(a.state_indices.data);
  p->index_stride[0] = a.state_indices.strides[0];
  p->index_stride[1] = per_token ? a.state_indices.strides[1] : 0;
  p->indices_per_token = per_token;
  if (present(a.num_accepted_tokens)) {
    p->num_accepted = static_cast<const int32_t*>(a.num_accepted_tokens.data);
    p->num_accepted_stride = a.num_accepted_tokens.strides[0];
  }
  return Status::Ok();
}

Status validate_backward(const kda_backward_args_t* args, ForwardParams* p) {
  if (args == nullptr) return invalid("args: NULL pointer");
  const kda_backward_args_t& a = *args;
  // The forward's own output tensors play no part: validate the inputs with out standing in as v's twin.
  kda_forward_args_t f = a.forward;
  f.out = f.v;
  f.final_state = kda_tensor_none();
  f.state_checkpoints = kda_tensor_none();
  f.checkpoint_offsets = kda_tensor_none();
  f.save_for_backward = 0;  // the forward's own switch; the backward reads forward_saved
  KDA_RETURN_IF_ERROR(validate_forward(&f, p));
  if (a.forward_saved != 0 && a.forward_saved != 1)
    return invalid("forward_saved: must be 0 or 1, got " + std::to_string(a.forward_saved));
  const bool reference = a.forward.backend == KDA_BACKEND_REFERENCE;
  const kda_dtype_t in = a.forward.q.dtype, f64 = reference ? KDA_DTYPE_FLOAT64 : KDA_DTYPE_FLOAT32;
  auto grad = [&](const char* name, const kda_tensor_t& t, const kda_tensor_t& like, kda_dtype_t own,
                  bool required) -> Status {
    if (!present(t)) {
      if (required) return invalid(std::string(name) + ": required (the matching input is given)");
      return Status::Ok();
    }
    if (!present(like)) return invalid(std::string(name) + ": given, but its input is absent");
    KDA_RETURN_IF_ERROR(check_basic(name, t));
    if (t.ndim != like.ndim) return invalid(std::string(name) + ": expected the shape of its input " + shape_str(like) + ", got " + shape_str(t));
    for (int i = 0; i < t.ndim; ++i)
      if (t.shape[i] != like.shape[i])
        return invalid(std::string(name) + ": expected the shape of its input " + shape_str(like) + ", got " + shape_str(t));
    KDA_RETURN_IF_ERROR(check_dtype(name, t, {own, KDA_DTYPE_FLOAT32, f64}));
    return check_same_device(name, t, a.forward.q);
  };
  KDA_RETURN_IF_ERROR(grad("dout", a.dout, f.v, in, true));
  if (present(a.dfinal_state)) {
    const int64_t r2 = p->state_v_first ? p->V : p->K, r3 = p->state_v_first ? p->K : p->V;
    KDA_RETURN_IF_ERROR(check_shape("dfinal_state", a.dfinal_state, {p->N, p->HV, r2, r3}));
    KDA_RETURN_IF_ERROR(check_dtype("dfinal_state", a.dfinal_state, {KDA_DTYPE_FLOAT32, f64}));
    KDA_RETURN_IF_ERROR(check_same_device("dfinal_state", a.dfinal_state, a.forward.q));
  }
  const kda_forward_args_t& fw = a.forward;
  KDA_RETURN_IF_ERROR(grad("dq", a.dq, fw.q, in, true));
  KDA_RETURN_IF_ERROR(grad("dk", a.dk, fw.k, in, true));
  KDA_RETURN_IF_ERROR(grad("dv", a.dv, fw.v, in, true));
  KDA_RETURN_IF_ERROR(grad("dg", a.dg, fw.g, fw.g.dtype, true));
  KDA_RETURN_IF_ERROR(grad("dbeta", a.dbeta, fw.beta, fw.beta.dtype, true));
  KDA_RETURN_IF_ERROR(grad("dA_log", a.dA_log, fw.A_log, KDA_DTYPE_FLOAT32, present(fw.A_log)));
  KDA_RETURN_IF_ERROR(grad("ddt_bias", a.ddt_bias, fw.dt_bias, KDA_DTYPE_FLOAT32, present(fw.dt_bias)));
  KDA_RETURN_IF_ERROR(grad("dh0", a.dh0, fw.initial_state, KDA_DTYPE_FLOAT32, present(fw.initial_state)));
  return Status::Ok();
}

}  // namespace kda
