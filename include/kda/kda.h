/* kda.h: the C ABI of kda (Kimi Delta Attention). No framework headers, no CUDA headers.
 *
 * Conventions (CUB / cuDNN style):
 *  - every call returns a kda_status_t; kda_last_error() gives a message naming the argument at fault;
 *  - two-phase workspace: ask kda_forward_workspace_size(), allocate on the tensors' device, pass it in;
 *    the library never allocates device memory itself;
 *  - the stream is explicit (a cudaStream_t passed as void*; ignored for CPU tensors);
 *  - one entry point per operation; it dispatches on where the tensors live (args.backend = KDA_BACKEND_AUTO).
 *
 * The operator (math, legal inputs, numerical contract) is summarized in docs/algorithm.md; shapes below use
 * B batch, T tokens, H q/k heads, HV value heads (a multiple of H), K key dim, V value dim, N sequences.
 */
#ifndef KDA_KDA_H_
#define KDA_KDA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KDA_API __declspec(dllexport)
#else
#define KDA_API __attribute__((visibility("default")))
#endif

#define KDA_VERSION_MAJOR 0
#define KDA_VERSION_MINOR 1
#define KDA_VERSION_PATCH 0

typedef enum kda_status {
  KDA_STATUS_SUCCESS = 0,
  KDA_STATUS_INVALID_ARGUMENT = 1,    /* an argument breaks the operator's contract (message names it) */
  KDA_STATUS_NOT_SUPPORTED = 2,       /* legal operator input that the chosen backend does not handle */
  KDA_STATUS_WORKSPACE_TOO_SMALL = 3, /* workspace_bytes < the size kda_*_workspace_size returned */
  KDA_STATUS_BACKEND_UNAVAILABLE = 4, /* e.g. CUDA tensors but the library was built without CUDA */
  KDA_STATUS_CUDA_ERROR = 5,          /* a CUDA runtime call or kernel launch failed (message has the text) */
  KDA_STATUS_INTERNAL_ERROR = 6
} kda_status_t;

typedef enum kda_dtype {
  KDA_DTYPE_FLOAT32 = 0,
  KDA_DTYPE_FLOAT16 = 1,
  KDA_DTYPE_BFLOAT16 = 2,
  KDA_DTYPE_FLOAT64 = 3, /* reference backend outputs only */
  KDA_DTYPE_INT32 = 4,
  KDA_DTYPE_INT64 = 5
} kda_dtype_t;

typedef enum kda_device_type { KDA_DEVICE_CPU = 0, KDA_DEVICE_CUDA = 1 } kda_device_type_t;

#define KDA_MAX_DIMS 6

/* A strided view of caller-owned memory. data == NULL and ndim == 0 means "absent" (optional tensors).
 * strides are in elements, not bytes. */
typedef struct kda_tensor {
  void* data;
  kda_dtype_t dtype;
  int32_t ndim;
  int64_t shape[KDA_MAX_DIMS];
  int64_t strides[KDA_MAX_DIMS];
  kda_device_type_t device_type;
  int32_t device_id;
} kda_tensor_t;

typedef enum kda_gate_mode {
  /* g is already the log-decay (natural log, <= 0), used as is. */
  KDA_GATE_LOG_DECAY = 0,
  /* Kimi-Linear: g_log = -exp(A_log[h]) * softplus(g + dt_bias[h, k]). Unbounded. Needs A_log and dt_bias. */
  KDA_GATE_SOFTPLUS = 1,
  /* g_log = lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias[h, k])); without A_log the exp(A_log) factor
   * is 1. Needs dt_bias and lower_bound < 0. */
  KDA_GATE_BOUNDED = 2
} kda_gate_mode_t;

/* Activation of the output gate of the fused gated RMSNorm (kda_decode_args_t.out_gate). Kimi-Linear's o_norm
 * (FLA FusedRMSNormGated, activation="sigmoid") uses sigmoid; FLA's default for the same module is swish. */
typedef enum kda_out_gate_activation {
  KDA_OUT_GATE_SIGMOID = 0, /* y = rmsnorm(o) * weight * sigmoid(gate) */
  KDA_OUT_GATE_SILU = 1     /* y = rmsnorm(o) * weight * gate * sigmoid(gate) (swish) */
} kda_out_gate_activation_t;

typedef enum kda_backend {
  KDA_BACKEND_AUTO = 0,         /* by where the tensors live: CPU -> KDA_BACKEND_CPU, CUDA -> KDA_BACKEND_CUDA_GENERIC */
  KDA_BACKEND_REFERENCE = 1,    /* float64 token-by-token recurrence (CPU tensors); the oracle */
  KDA_BACKEND_CPU = 2,          /* chunked fp32, multithreaded over (sequence, head) and within them */
  KDA_BACKEND_CUDA_GENERIC = 3, /* portable sm80+ CUDA path for every legal input. Forward: the two-phase chunked
                                   path wherever it applies and no checkpoints are asked for (with its sm_90a state
                                   passes where they apply, KDA_BACKEND_CUDA_HOPPER, else on mma.sync,
                                   KDA_BACKEND_CUDA_CHUNKED), the token-recurrent kernel (KDA_BACKEND_CUDA_RECURRENT)
                                   otherwise; so ask kda_forward_workspace_size first. Judged as tensor-core code
                                   (docs/numerics.md).
                                   Decode: at small batches (1-4 tokens per sequence, K in {64, 128, 256}, a
                                   value-first fp32 pool) the row-split kernel, else the sm_90 bulk-copy kernel where
                                   it applies (KDA_BACKEND_CUDA_HOPPER), the portable fp32 decode kernel otherwise
                                   (KDA_BACKEND_CUDA_RECURRENT forces that one). Backward: the chunked backward
                                   wherever it applies (HOPPER or CHUNKED as the forward), the token-recurrent one
                                   (KDA_BACKEND_CUDA_RECURRENT) otherwise */
  KDA_BACKEND_CUDA_HOPPER = 4,  /* sm_90 paths. Decode: the bulk-copy kernel (1-4 tokens per sequence, K in {64, 128,
                                   256}, a value-first fp32 pool of contiguous 16-byte aligned rows; NOT_SUPPORTED
                                   otherwise); KDA_BACKEND_CUDA_GENERIC / AUTO take it where it applies, past small
                                   batches. Prefill and backward: the two-phase chunked path with its state passes on
                                   wgmma, where the chunked path applies with K = 128 on an sm_90 device in a build
                                   with CuTe (NOT_SUPPORTED otherwise); the workspace, saved tensors and support are
                                   KDA_BACKEND_CUDA_CHUNKED's; GENERIC / AUTO take it where it applies */
  KDA_BACKEND_CUDA_CHUNKED = 5, /* the two-phase chunked tensor-core path only, every kernel on mma.sync (bf16x3, fp32
                                   state; K, V in {64, 128}, bf16/fp16 q/k/v, unit innermost strides, 16-byte aligned
                                   rows, ~190 KiB of shared memory per block; needs the workspace
                                   kda_forward_workspace_size returns, 256-byte aligned as cudaMalloc gives it);
                                   NOT_SUPPORTED otherwise, and for prefix-cache checkpoints. Backward: the chunked
                                   backward (kda_backward_args_t) */
  KDA_BACKEND_CUDA_RECURRENT = 6 /* the exact token-recurrent CUDA kernel (fp32 throughout, every legal input, no
                                    workspace, writes prefix-cache checkpoints); decode: the portable fp32 decode kernel;
                                    backward: the exact token-recurrent backward */
} kda_backend_t;

/* Arguments of the chunked prefill forward. Initialize with kda_forward_args_init().
 *   q, k        [B, T, H, K]   bf16 | fp16 | fp32
 *   v           [B, T, HV, V]  same dtype as q
 *   g           [B, T, HV, K]  dtype of q, or fp32
 *   beta        [B, T, HV]     dtype of q, or fp32
 *   A_log       [HV] fp32                     optional (softplus gate: required)
 *   dt_bias     [HV, K] or [HV*K] fp32        softplus and bounded gates: required
 *   initial_state  [N, HV, V, K] (state_v_first) or [N, HV, K, V]  fp32, optional (absent: zeros)
 *   cu_seqlens  [N+1] int32 | int64, optional; requires B == 1. Host-resident offsets are checked in full (start
 *               at 0, non-decreasing, end at T); device-resident ones cannot be read without a sync, so the CUDA
 *               kernels clamp them to [0, T] (never out of bounds) and a malformed array gives unspecified values
 *   out         [B, T, HV, V]  dtype of q (the reference backend also takes fp64)
 *   final_state same shape as initial_state, fp32 (reference: also fp64), optional (absent: not written)
 *   state_checkpoints  [N, n_ckpt, HV, V, K] (or [.., K, V]) fp32, optional: states for prefix caching. Entry j of
 *               sequence n is the state after checkpoint_offsets[n, j] tokens of that sequence (0: the initial state),
 *               or, without offsets, after (j + 1) * checkpoint_interval tokens. Offsets need not be increasing and may
 *               repeat (every entry of a count is written). Entries whose token count is negative or past the
 *               sequence's length are not written: they keep what the caller left there, bit for bit (so a caller
 *               may pad a short sequence's row of offsets with -1 and rely on those entries staying as they were).
 *               Backends: REFERENCE (fp32 or fp64), CPU, CUDA_GENERIC / CUDA_RECURRENT (and AUTO on CUDA tensors;
 *               fp32; the offsets are read on the device, so the call has no host sync and can be captured in a
 *               CUDA graph); CUDA_CHUNKED returns KDA_STATUS_NOT_SUPPORTED.
 *   checkpoint_offsets [N, n_ckpt] int32 | int64, optional (needs state_checkpoints)
 */
typedef struct kda_forward_args {
  kda_tensor_t q, k, v, g, beta;
  kda_tensor_t A_log, dt_bias;
  kda_tensor_t initial_state;
  kda_tensor_t cu_seqlens;
  kda_tensor_t out;
  kda_tensor_t final_state;

  float scale;             /* used when use_default_scale == 0; must be finite */
  int32_t use_default_scale; /* 1: scale = K^-0.5 */
  kda_gate_mode_t gate_mode;
  float lower_bound;       /* bounded gate only; must be finite and < 0 */
  int32_t use_qk_l2norm;   /* q/k <- x / sqrt(sum x^2 + 1e-6) per token and head */
  int32_t beta_is_logits;  /* 1: beta <- sigmoid(beta) */
  int32_t allow_neg_eigval;/* 1: beta <- 2 * sigmoid(beta), range (0, 2); requires beta_is_logits */
  int32_t state_v_first;   /* 1: states are [.., V, K] (serving convention); 0: [.., K, V] */
  int32_t chunk_size;      /* 0: the backend's choice; else 16, 32 or 64 (chunked backends) */
  int32_t cpu_threads;     /* CPU backends: worker threads, 0 = all hardware threads */
  kda_backend_t backend;

  kda_tensor_t state_checkpoints;
  kda_tensor_t checkpoint_offsets;
  int32_t checkpoint_interval; /* tokens between checkpoints when checkpoint_offsets is absent (> 0) */

  /* Training (appended in 0.1): 1 = also keep, in the workspace, what the backward would otherwise recompute
   * (the chunked CUDA forward: KDA_BACKEND_CUDA_CHUNKED / HOPPER, or CUDA_GENERIC / AUTO where they run it; the
   * chunk list, phase 1's tiles, A', T, the chunk-start states and V_new).
   * The workspace must then be kda_backward_workspace_size() bytes (kda_forward_workspace_size reports that size),
   * and the same buffer, untouched, goes to kda_backward with forward_saved = 1 on the same inputs. The forward then
   * computes phase 1's [W | U] in 3xTF32, as the backward's recompute does, instead of bf16x3: its output and final
   * state may differ from a plain forward's in the last bits (both within the contract). */
  int32_t save_for_backward;
} kda_forward_args_t;

/* Arguments of decode: T tokens per sequence (1 for decode, 1 + num_spec for a speculative verify) against a
 * pool of states updated in place. Initialize with kda_decode_args_init().
 *   q, k        [N, T, H, K]   bf16 | fp16 | fp32
 *   v           [N, T, HV, V]  dtype of q
 *   g           [N, T, HV, K]  dtype of q, or fp32
 *   beta        [N, T, HV]     dtype of q, or fp32
 *   A_log, dt_bias             as in the forward
 *   state_pool  [slots, HV, V, K] (state_v_first) or [slots, HV, K, V], fp32 or bf16, read and written in place;
 *               the update runs in fp32 (fp64 for the reference) from the stored values, and a bf16 pool gets
 *               each written state rounded once to bf16 (half the bytes a token moves: decode is bound by them).
 *               CUDA takes a bf16 pool with 1-4 tokens per sequence, K in {64, 128, 256}, value-first rows of
 *               K contiguous bf16 and 16-byte aligned slots / heads (not on KDA_BACKEND_CUDA_RECURRENT):
 *               NOT_SUPPORTED else
 *   state_indices int32, one of:
 *       [N]     sequence n starts from pool[idx[n]] and its state after its last token goes back there;
 *       [N, T]  sequence n starts from pool[idx[n, a - 1]], a = num_accepted_tokens[n] (1 without it), and the
 *               state after its token t goes to pool[idx[n, t]] (so rejected tokens can be rolled back).
 *     A negative (or >= slots) start slot marks padding: the sequence's outputs are written as zeros and no
 *     slot is touched. A negative write slot skips that write. Slots of different sequences must not overlap.
 *   num_accepted_tokens int32 [N], optional, with [N, T] indices only; values in 1..T (others: padding)
 *   out         [N, T, HV, V]  dtype of q
 * Slots not named by any index are bitwise untouched.
 *
 * Optional fusions (fields appended in 0.1; absent tensors = off):
 *  Causal short convolution of q, k and v (width 4, depthwise, no bias, SiLU; vLLM causal_conv1d_update /
 *  Kimi-Linear ShortConvolution), applied before everything else (the q/k L2 norm follows it). Give all six
 *  tensors or none:
 *   q_conv_weight, k_conv_weight [H*K, 4], v_conv_weight [HV*V, 4]   fp32 or dtype of q; channel c of head h is
 *               h*K + c (value head hv, row r: hv*V + r); column 3 multiplies the current token, column 0 the
 *               oldest input
 *   q_conv_state, k_conv_state [slots, H*K, 3], v_conv_state [slots, HV*V, 3]   fp32 or dtype of q, any strides
 *               (vLLM's (dim, width - 1) per slot, oldest input first), read and written in place through the
 *               same slots as state_pool: sequence n reads the inputs before its first token from its start slot,
 *               and after its token t the last three inputs (x_{t-2}, x_{t-1}, x_t) go to the slot the state after
 *               token t goes to. Token t's conv input sequence is (state[0], state[1], state[2], x_0, .., x_t);
 *               x' = silu(sum_j w[c, j] * seq[t + j]), computed in fp32 (reference: fp64). Padding sequences read
 *               and write no conv state.
 *  Gated RMSNorm on the output (Kimi-Linear o_norm, FLA FusedRMSNormGated): per token and value head over V,
 *   out = o * rsqrt(mean_V(o^2) + out_norm_eps) * out_norm_weight[v] * act(out_gate[n, t, hv, v]), in fp32 before
 *   the one rounding to out's dtype. Give both tensors or neither:
 *   out_norm_weight [V] fp32 or dtype of q
 *   out_gate    [N, T, HV, V] dtype of q or fp32
 *   out_norm_eps finite, >= 0 (default 1e-5); out_gate_activation (default KDA_OUT_GATE_SIGMOID)
 *  Backends: all. On CUDA the conv runs as a kernel before the decode kernel and the norm as one after it, in the
 *  same call and stream, with fp32 intermediates in the caller's workspace (kda_decode_workspace_size: 4 N T
 *  (2 H K + HV V) bytes for the conv, 4 N T HV V for the norm, each rounded up to 256; 16-byte aligned). */
typedef struct kda_decode_args {
  kda_tensor_t q, k, v, g, beta;
  kda_tensor_t A_log, dt_bias;
  kda_tensor_t state_pool;
  kda_tensor_t state_indices;
  kda_tensor_t num_accepted_tokens;
  kda_tensor_t out;

  float scale;
  int32_t use_default_scale;
  kda_gate_mode_t gate_mode;
  float lower_bound;
  int32_t use_qk_l2norm;
  int32_t beta_is_logits;
  int32_t allow_neg_eigval;
  int32_t state_v_first;
  int32_t cpu_threads;
  kda_backend_t backend;   /* AUTO, REFERENCE, CPU, CUDA_GENERIC, CUDA_HOPPER or CUDA_RECURRENT */

  /* Fusions (see above). */
  kda_tensor_t q_conv_weight, k_conv_weight, v_conv_weight;
  kda_tensor_t q_conv_state, k_conv_state, v_conv_state;
  kda_tensor_t out_norm_weight, out_gate;
  float out_norm_eps;
  kda_out_gate_activation_t out_gate_activation;
} kda_decode_args_t;

/* Arguments of the backward: gradients of every differentiable input given the gradients of the output and
 * (optionally) of the final state. Initialize with kda_backward_args_init().
 *   forward     the forward's inputs and flags, exactly as for the call being differentiated (its out,
 *               final_state and checkpoints are not used)
 *   dout        [B, T, HV, V]  dtype of q, or fp32 (reference: also fp64)
 *   dfinal_state  the final state's shape and layout, fp32 (reference: also fp64), optional (absent: zero)
 *   dq, dk      [B, T, H, K]   (summed over the value heads of a group)
 *   dv          [B, T, HV, V]
 *   dg          [B, T, HV, K]  of the raw gate input (through the softplus / bounded activation)
 *   dbeta       [B, T, HV]     of the raw beta (through the sigmoid when it is logits)
 *   dA_log      [HV], ddt_bias as dt_bias, dh0 as initial_state: required when those inputs are given
 *   Every gradient tensor is fp32 or the dtype of its input (the reference also takes fp64). Backends: REFERENCE
 *   (the float64 reverse recurrence) and CPU (the chunked form in float64 with matrix products, ~8x faster; equal
 *   to the reference to float64 rounding), both threaded over heads, results rounded once to the gradient
 *   tensors' dtypes; CUDA_RECURRENT (and CUDA_GENERIC / AUTO where the chunked backward does not apply): the exact
 *   token-recurrent reverse in fp32 for K and V
 *   in {64, 128} (other sizes: KDA_STATUS_NOT_SUPPORTED), deterministic (identical calls give identical bits), with a
 *   caller-owned workspace of kda_backward_workspace_size bytes (16-byte aligned), asynchronous on the stream with
 *   no host sync; dfinal_state fp32. CUDA_CHUNKED: the chunked backward (the forward's chunk products recomputed
 *   and kept, a reverse state pass over chunks in bf16x3 tensor-core products, per-chunk gradients in fp32) for the
 *   inputs its forward takes (else NOT_SUPPORTED), deterministic, workspace 256-byte aligned; what CUDA_GENERIC and AUTO
 *   run wherever it applies (judged as tensor-core code). */
typedef struct kda_backward_args {
  kda_forward_args_t forward;
  kda_tensor_t dout, dfinal_state;
  kda_tensor_t dq, dk, dv, dg, dbeta;
  kda_tensor_t dA_log, ddt_bias, dh0;
  /* 1: the workspace holds what kda_forward kept with save_for_backward = 1 on these same inputs
   * (the same backend, which resolves to the forward's chunked path): the backward skips its recompute. Appended in
   * 0.1. */
  int32_t forward_saved;
} kda_backward_args_t;

/* Library version as MAJOR*10000 + MINOR*100 + PATCH. */
KDA_API int kda_version(void);

/* A static string for a status code. */
KDA_API const char* kda_status_string(kda_status_t status);

/* The detailed message of the last failing call on this thread ("" if none). Valid until the next kda call
 * on this thread. */
KDA_API const char* kda_last_error(void);

/* An absent tensor (all zero). */
KDA_API kda_tensor_t kda_tensor_none(void);

/* A contiguous (row-major) tensor descriptor over caller memory. */
KDA_API kda_tensor_t kda_tensor_contiguous(void* data, kda_dtype_t dtype, int32_t ndim, const int64_t* shape,
                                           kda_device_type_t device_type, int32_t device_id);

/* Defaults: every tensor absent, default scale, KDA_GATE_LOG_DECAY, lower_bound -5, flags off,
 * state_v_first = 1, chunk_size 0, cpu_threads 0, KDA_BACKEND_AUTO. */
KDA_API void kda_forward_args_init(kda_forward_args_t* args);

/* Validates args and returns the workspace bytes the call needs on the tensors' device. No tensor data is read
 * except host-resident cu_seqlens, whose offsets are checked here (device-resident ones cannot be). */
KDA_API kda_status_t kda_forward_workspace_size(const kda_forward_args_t* args, size_t* workspace_bytes);

/* Runs the forward. workspace: caller-owned memory on the tensors' device of at least the queried size
 * (may be NULL when the size is 0). stream: cudaStream_t for CUDA tensors (NULL = default stream), ignored for
 * CPU. CUDA calls are asynchronous and enqueue no host synchronization. */
KDA_API kda_status_t kda_forward(const kda_forward_args_t* args, void* workspace, size_t workspace_bytes,
                                 void* stream);

/* Decode defaults: as kda_forward_args_init; fusions off, out_norm_eps 1e-5, KDA_OUT_GATE_SIGMOID. */
KDA_API void kda_decode_args_init(kda_decode_args_t* args);

/* Validates args (as kda_forward_workspace_size: only host-resident cu_seqlens are read) and returns the workspace
 * bytes decode needs: 0 except for the fusions on CUDA (see above). */
KDA_API kda_status_t kda_decode_workspace_size(const kda_decode_args_t* args, size_t* workspace_bytes);

/* Runs decode, updating state_pool in place. Asynchronous on stream for CUDA tensors, no host sync. */
KDA_API kda_status_t kda_decode(const kda_decode_args_t* args, void* workspace, size_t workspace_bytes,
                                void* stream);

/* Backward defaults: the forward part as kda_forward_args_init, every gradient tensor absent. */
KDA_API void kda_backward_args_init(kda_backward_args_t* args);

/* Validates args and returns the workspace bytes the backward needs (0 for the host backends; for CUDA about
 * (min(N HV, 128) 64 + (T / 64 + N) HV) V K fp32 states plus 2 B T HV K fp32, see docs/algorithm.md). */
KDA_API kda_status_t kda_backward_workspace_size(const kda_backward_args_t* args, size_t* workspace_bytes);

/* Runs the backward, writing every gradient tensor given. */
KDA_API kda_status_t kda_backward(const kda_backward_args_t* args, void* workspace, size_t workspace_bytes,
                                  void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_KDA_H_ */
