// jax_ffi.cpp: owns kda's XLA FFI handlers, the C++ half of the JAX binding (python/kda/jax.py): the chunked
// forward, the backward and the state-pool decode over kda's C ABI (include/kda/kda.h), for XLA's CPU platform and,
// when kda is built with CUDA (KDA_WITH_CUDA), its CUDA platform, plus the workspace query the Python side sizes the
// calls with.
//
// The calls (operands -> results). Every buffer is row-major (ffi_call's default layout), so each becomes a
// contiguous kda_tensor_t; a buffer whose bit in the `present` attribute is clear is a [0] placeholder for an
// absent optional tensor:
//   kda_forward:   q k v g beta A_log dt_bias initial_state cu_seqlens -> out final_state workspace
//   kda_backward:  q k v g beta A_log dt_bias initial_state cu_seqlens dout dfinal_state
//                  -> dq dk dv dg dbeta dA_log ddt_bias dh0 workspace
//   kda_decode:    q k v g beta A_log dt_bias state_pool state_indices num_accepted_tokens
//                  q_conv_weight k_conv_weight v_conv_weight q_conv_state k_conv_state v_conv_state
//                  out_norm_weight out_gate -> out state_pool q_conv_state k_conv_state v_conv_state workspace
//
// Decode updates the pool (and the fusions' conv-state pools) in place: each such result is aliased to its operand
// (ffi_call's input_output_aliases), so XLA hands the handler the operand's buffer as the result and kda writes
// through it. A caller that donates them gets them updated without a copy; otherwise XLA copies the operand first,
// as aliasing a live buffer requires.
//
// The workspace: kda never allocates and XLA allocates every buffer of a call, so the workspace is the call's
// last result, a uint8 buffer of the bytes kda's workspace query asks for. Its size must be fixed when the call
// is traced, and the ABI gives no formula for it (the CUDA backward's is "about"), so the Python side asks kda
// itself: kda_jax_workspace_size() below builds the same kda arguments the handler builds, from the shapes and
// dtypes of the call's buffers (the query reads no data), and calls kda_{forward,backward,decode}_workspace_size.
// That is the simplest way that is exactly right, and it also validates every argument when the call is traced, so
// the Python caller gets kda's message naming the argument before anything runs.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kda/kda.h"
#include "xla/ffi/api/ffi.h"

#ifdef KDA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

// The calls' attributes (ffi_call keyword arguments), decoded by name; kda/jax.py's _Attrs mirrors the struct for
// the workspace query. Flags are int32 (0/1) so the ctypes mirror is plain.
struct KdaJaxAttrs {
  float scale;
  int32_t gate_mode;  // kda_gate_mode_t
  float lower_bound;
  int32_t use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first, chunk_size;
  int32_t backend;  // kda_backend_t
  int32_t present;  // bit i: buffer i of the call (operands, then results but the workspace) is given
  float out_norm_eps;           // decode's gated RMSNorm (unused by the other calls)
  int32_t out_gate_activation;  // kda_out_gate_activation_t
};

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(KdaJaxAttrs, xla::ffi::StructMember<float>("scale"),
                                      xla::ffi::StructMember<int32_t>("gate_mode"),
                                      xla::ffi::StructMember<float>("lower_bound"),
                                      xla::ffi::StructMember<int32_t>("use_qk_l2norm"),
                                      xla::ffi::StructMember<int32_t>("beta_is_logits"),
                                      xla::ffi::StructMember<int32_t>("allow_neg_eigval"),
                                      xla::ffi::StructMember<int32_t>("state_v_first"),
                                      xla::ffi::StructMember<int32_t>("chunk_size"),
                                      xla::ffi::StructMember<int32_t>("backend"),
                                      xla::ffi::StructMember<int32_t>("present"),
                                      xla::ffi::StructMember<float>("out_norm_eps"),
                                      xla::ffi::StructMember<int32_t>("out_gate_activation"));

namespace {

namespace ffi = xla::ffi;

// The calls; kda/jax.py passes the same numbers to the workspace query.
enum class Call : int32_t { kForward = 0, kBackward = 1, kDecode = 2 };
constexpr const char* kCallNames[] = {"kda_forward", "kda_backward", "kda_decode"};

// Buffer counts of the calls, the workspace not included.
constexpr int kBuffers[] = {
    11,  // forward: 9 operands, out, final_state
    19,  // backward: 11 operands, 8 gradients
    23,  // decode: 18 operands, out, state_pool, the three conv-state pools
};
// Decode's in-place pools, operand -> result: state_pool, then the q / k / v conv states (absent without the conv).
constexpr int kDecodeInPlace[4][2] = {{7, 19}, {13, 20}, {14, 21}, {15, 22}};
constexpr size_t kWorkspaceAlign = 256;  // what kda asks of a workspace's start (cudaMalloc's alignment)
using Tensors = std::array<kda_tensor_t, kBuffers[static_cast<int>(Call::kDecode)]>;  // the most buffers

struct Device {
  kda_device_type_t type;
  int32_t id;
};

// Buffer i of a call as a kda descriptor (absent when its `present` bit is clear).
kda_tensor_t tensor(const KdaJaxAttrs& a, int i, void* data, kda_dtype_t dtype, int32_t ndim, const int64_t* dims,
                    Device dev) {
  if (!(a.present & (1 << i))) return kda_tensor_none();
  // XLA may give a zero-sized buffer a null pointer, which kda reads as "absent".
  static char empty_sentinel;
  return kda_tensor_contiguous(data ? data : &empty_sentinel, dtype, ndim, dims, dev.type, dev.id);
}

// The inputs and flags the forward and decode share (buffers 0-6 of either call), mapped as
// python/csrc/torch_op.cpp maps the same flags.
template <typename Args>
void set_common(Args* x, const Tensors& t, const KdaJaxAttrs& a) {
  x->q = t[0];
  x->k = t[1];
  x->v = t[2];
  x->g = t[3];
  x->beta = t[4];
  x->A_log = t[5];
  x->dt_bias = t[6];
  x->use_default_scale = 0;
  x->scale = a.scale;
  x->gate_mode = static_cast<kda_gate_mode_t>(a.gate_mode);
  x->lower_bound = a.lower_bound;
  x->use_qk_l2norm = a.use_qk_l2norm;
  x->beta_is_logits = a.beta_is_logits;
  x->allow_neg_eigval = a.allow_neg_eigval;
  x->state_v_first = a.state_v_first;
  x->backend = static_cast<kda_backend_t>(a.backend);
}

kda_forward_args_t forward_args(const Tensors& t, const KdaJaxAttrs& a) {
  kda_forward_args_t f;
  kda_forward_args_init(&f);
  set_common(&f, t, a);
  f.initial_state = t[7];
  f.cu_seqlens = t[8];
  f.chunk_size = a.chunk_size;
  return f;
}

kda_backward_args_t backward_args(const Tensors& t, const KdaJaxAttrs& a) {
  kda_backward_args_t b;
  kda_backward_args_init(&b);
  b.forward = forward_args(t, a);
  b.dout = t[9];
  b.dfinal_state = t[10];
  b.dq = t[11];
  b.dk = t[12];
  b.dv = t[13];
  b.dg = t[14];
  b.dbeta = t[15];
  b.dA_log = t[16];
  b.ddt_bias = t[17];
  b.dh0 = t[18];
  return b;
}

// Decode reads and writes the pool through its result buffer (the operand's, when aliased).
kda_decode_args_t decode_args(const Tensors& t, const KdaJaxAttrs& a) {
  kda_decode_args_t d;
  kda_decode_args_init(&d);
  set_common(&d, t, a);
  d.state_pool = t[kDecodeInPlace[0][1]];
  d.state_indices = t[8];
  d.num_accepted_tokens = t[9];
  d.q_conv_weight = t[10];
  d.k_conv_weight = t[11];
  d.v_conv_weight = t[12];
  d.q_conv_state = t[kDecodeInPlace[1][1]];
  d.k_conv_state = t[kDecodeInPlace[2][1]];
  d.v_conv_state = t[kDecodeInPlace[3][1]];
  d.out_norm_weight = t[16];
  d.out_gate = t[17];
  d.out_norm_eps = a.out_norm_eps;
  d.out_gate_activation = static_cast<kda_out_gate_activation_t>(a.out_gate_activation);
  d.out = t[18];
  return d;
}

// The forward call's arguments: the forward's inputs (as the backward's) and its results.
kda_forward_args_t forward_call_args(const Tensors& t, const KdaJaxAttrs& a) {
  kda_forward_args_t f = forward_args(t, a);
  f.out = t[9];
  f.final_state = t[10];
  return f;
}

kda_status_t workspace_size(Call call, const Tensors& t, const KdaJaxAttrs& a, size_t* bytes) {
  switch (call) {
    case Call::kBackward: {
      const kda_backward_args_t b = backward_args(t, a);
      return kda_backward_workspace_size(&b, bytes);
    }
    case Call::kDecode: {
      const kda_decode_args_t d = decode_args(t, a);
      return kda_decode_workspace_size(&d, bytes);
    }
    default: {
      const kda_forward_args_t f = forward_call_args(t, a);
      return kda_forward_workspace_size(&f, bytes);
    }
  }
}

kda_status_t run(Call call, const Tensors& t, const KdaJaxAttrs& a, void* workspace, size_t bytes, void* stream) {
  switch (call) {
    case Call::kBackward: {
      const kda_backward_args_t b = backward_args(t, a);
      return kda_backward(&b, workspace, bytes, stream);
    }
    case Call::kDecode: {
      const kda_decode_args_t d = decode_args(t, a);
      return kda_decode(&d, workspace, bytes, stream);
    }
    default: {
      const kda_forward_args_t f = forward_call_args(t, a);
      return kda_forward(&f, workspace, bytes, stream);
    }
  }
}

// A failing kda status as an XLA error carrying kda_last_error() (which names the argument).
ffi::Error error(kda_status_t s, const char* call) {
  const std::string msg = std::string(call) + ": " + kda_last_error();
  switch (s) {
    case KDA_STATUS_INVALID_ARGUMENT: return ffi::Error(ffi::ErrorCode::kInvalidArgument, msg);
    case KDA_STATUS_NOT_SUPPORTED:
    case KDA_STATUS_BACKEND_UNAVAILABLE: return ffi::Error(ffi::ErrorCode::kUnimplemented, msg);
    default: return ffi::Error(ffi::ErrorCode::kInternal, msg);
  }
}

bool kda_dtype(ffi::DataType t, kda_dtype_t* out) {
  switch (t) {
    case ffi::DataType::F32: *out = KDA_DTYPE_FLOAT32; return true;
    case ffi::DataType::F16: *out = KDA_DTYPE_FLOAT16; return true;
    case ffi::DataType::BF16: *out = KDA_DTYPE_BFLOAT16; return true;
    case ffi::DataType::F64: *out = KDA_DTYPE_FLOAT64; return true;
    case ffi::DataType::S32: *out = KDA_DTYPE_INT32; return true;
    case ffi::DataType::S64: *out = KDA_DTYPE_INT64; return true;
    default: return false;
  }
}

// Buffer i of a call: its operands, then its results.
ffi::ErrorOr<ffi::AnyBuffer> buffer(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets, size_t i) {
  if (i < args.size()) return args.get<ffi::AnyBuffer>(i);
  ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> r = rets.get<ffi::AnyBuffer>(i - args.size());
  if (!r) return ffi::Unexpected<ffi::Error>(r.error());
  return **r;
}

// Decode's in-place results (the pool, the conv states) hold what kda updates. Each is its operand's own buffer when
// XLA honours the alias; should one ever be a buffer of its own, the operand is copied into it first (on the call's
// stream), so the result is the updated pool either way.
ffi::Error prepare_pool(Device dev, void* stream, ffi::AnyBuffer operand, ffi::AnyBuffer result) {
  if (operand.untyped_data() == result.untyped_data()) return ffi::Error::Success();
  if (operand.size_bytes() != result.size_bytes())
    return ffi::Error::InvalidArgument("kda_decode: an in-place pool: the result and the operand differ in size");
#ifdef KDA_WITH_CUDA
  if (dev.type == KDA_DEVICE_CUDA) {
    const cudaError_t e = cudaMemcpyAsync(result.untyped_data(), operand.untyped_data(), operand.size_bytes(),
                                          cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? ffi::Error::Success()
                            : ffi::Error(ffi::ErrorCode::kInternal,
                                         std::string("kda_decode: in-place pool copy: ") + cudaGetErrorString(e));
  }
#endif
  if (operand.size_bytes()) std::memcpy(result.untyped_data(), operand.untyped_data(), operand.size_bytes());
  return ffi::Error::Success();
}

// One call: the operands and results (the workspace last) as kda descriptors, then kda on `stream`.
ffi::Error execute(Call c, Device dev, void* stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   const KdaJaxAttrs& a) {
  const char* call = kCallNames[static_cast<int>(c)];
  const size_t n = kBuffers[static_cast<int>(c)];
  if (args.size() + rets.size() != n + 1)
    return ffi::Error::InvalidArgument(std::string(call) + ": expected " + std::to_string(n + 1) + " buffers, got " +
                                       std::to_string(args.size() + rets.size()));
  Tensors t{};
  for (size_t i = 0; i < n; ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> b = buffer(args, rets, i);
    if (!b) return b.error();
    kda_dtype_t dtype;
    if (!kda_dtype(b->element_type(), &dtype))
      return ffi::Error::InvalidArgument(std::string(call) + ": buffer " + std::to_string(i) + ": unsupported dtype");
    t[i] = tensor(a, static_cast<int>(i), b->untyped_data(), dtype, static_cast<int32_t>(b->dimensions().size()),
                  b->dimensions().begin(), dev);
  }
  if (c == Call::kDecode) {
    for (const auto& io : kDecodeInPlace) {
      if (!(a.present & (1 << io[0]))) continue;  // a conv-state pool without the conv
      ffi::ErrorOr<ffi::AnyBuffer> operand = buffer(args, rets, io[0]);
      ffi::ErrorOr<ffi::AnyBuffer> result = buffer(args, rets, io[1]);
      if (!operand) return operand.error();
      if (!result) return result.error();
      if (ffi::Error e = prepare_pool(dev, stream, *operand, *result); e.failure()) return e;
    }
  }
  ffi::ErrorOr<ffi::AnyBuffer> ws = buffer(args, rets, n);
  if (!ws) return ws.error();
  // XLA may align a result to less than the 256 bytes kda asks of a workspace (cudaMalloc's): the query added
  // kWorkspaceAlign - 1 bytes, and the workspace starts at the first aligned byte.
  void* base = ws->untyped_data();
  size_t bytes = ws->size_bytes();
  if (bytes) {
    const size_t skip = (kWorkspaceAlign - reinterpret_cast<uintptr_t>(base) % kWorkspaceAlign) % kWorkspaceAlign;
    if (skip > bytes) return ffi::Error::InvalidArgument(std::string(call) + ": workspace smaller than its alignment");
    base = static_cast<char*>(base) + skip;
    bytes -= skip;
  }
  const kda_status_t s = run(c, t, a, bytes ? base : nullptr, bytes, stream);
  return s == KDA_STATUS_SUCCESS ? ffi::Error::Success() : error(s, call);
}

// CPU: host pointers, KDA_BACKEND_AUTO picks the CPU backend; no stream.
template <Call kCall>
ffi::Error on_cpu(ffi::RemainingArgs args, ffi::RemainingRets rets, KdaJaxAttrs a) {
  return execute(kCall, {KDA_DEVICE_CPU, 0}, nullptr, args, rets, a);
}
auto cpu_binding() { return ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs<KdaJaxAttrs>(); }

#ifdef KDA_WITH_CUDA
// CUDA: device pointers on XLA's stream for this call and its device.
template <Call kCall>
ffi::Error on_cuda(cudaStream_t stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   KdaJaxAttrs a) {
  return execute(kCall, {KDA_DEVICE_CUDA, device}, stream, args, rets, a);
}
auto cuda_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::DeviceOrdinal>()
      .RemainingArgs()
      .RemainingRets()
      .Attrs<KdaJaxAttrs>();
}
#endif

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaForwardCpu, on_cpu<Call::kForward>, cpu_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaBackwardCpu, on_cpu<Call::kBackward>, cpu_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaDecodeCpu, on_cpu<Call::kDecode>, cpu_binding());
#ifdef KDA_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaForwardCuda, on_cuda<Call::kForward>, cuda_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaBackwardCuda, on_cuda<Call::kBackward>, cuda_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(KdaDecodeCuda, on_cuda<Call::kDecode>, cuda_binding());
#endif

// The workspace bytes of a call, asked by kda/jax.py (ctypes) when the call is traced. `call` is a Call (0 forward,
// 1 backward, 2 decode); buffer i of the call (the workspace excluded; kBuffers[call] of them) has kda dtype
// dtypes[i], ndims[i] dims and shape dims[i * KDA_MAX_DIMS ...]; `cuda` says which platform the call is for
// (device 0). Returns a kda_status_t; on failure kda_last_error() says why, naming the argument.
extern "C" KDA_API int32_t kda_jax_workspace_size(int32_t call, int32_t cuda, const int32_t* dtypes,
                                                  const int32_t* ndims, const int64_t* dims, const KdaJaxAttrs* attrs,
                                                  uint64_t* bytes) {
  const Call c = static_cast<Call>(call);
  const Device dev{cuda ? KDA_DEVICE_CUDA : KDA_DEVICE_CPU, 0};
  // The query reads no tensor data but cu_seqlens'; a non-null pointer marks a tensor present. It is aligned as the
  // buffers XLA hands the handler are at least, since kda picks its CUDA path by the alignment of the tensors: an
  // unaligned placeholder once sized the chunked forward's workspace for the token-recurrent kernel (0 bytes).
  alignas(256) static char no_data[16];
  Tensors t{};
  for (int i = 0; i < kBuffers[call]; ++i)
    t[i] = tensor(*attrs, i, no_data, static_cast<kda_dtype_t>(dtypes[i]), ndims[i], dims + i * KDA_MAX_DIMS, dev);
  // kda's validation reads host-resident cu_seqlens (buffer 8 of the forward and the backward; decode has none) in
  // full, but the offsets are data, unknown when the call is traced: the query sees valid offsets of the same shape
  // and dtype, [0, T, .., T]; the handler's kda call checks the real ones when the call runs.
  kda_tensor_t& cu = t[8];
  std::vector<int64_t> offsets64;
  std::vector<int32_t> offsets32;
  if (c != Call::kDecode && cu.data && cu.device_type == KDA_DEVICE_CPU && cu.ndim == 1 && cu.shape[0] >= 1 &&
      t[0].ndim >= 2) {
    const int64_t T = t[0].shape[1];
    if (cu.dtype == KDA_DTYPE_INT64) {
      offsets64.assign(cu.shape[0], T);
      offsets64[0] = 0;
      cu.data = offsets64.data();
    } else if (cu.dtype == KDA_DTYPE_INT32) {
      offsets32.assign(cu.shape[0], static_cast<int32_t>(T));
      offsets32[0] = 0;
      cu.data = offsets32.data();
    }
  }
  size_t ws = 0;
  const kda_status_t s = workspace_size(c, t, *attrs, &ws);
  *bytes = ws ? ws + kWorkspaceAlign - 1 : 0;  // room to align the start (execute)
  return s;
}
