// abi_layout.cpp: compile-time checks of the C ABI's struct layout, which ctypes/FFI bindings mirror field by
// field; a change here is an ABI break and must bump KDA_VERSION_MAJOR.
#include <cstddef>

#include "kda/kda.h"

static_assert(sizeof(kda_tensor_t) == 8 + 4 + 4 + 8 * KDA_MAX_DIMS * 2 + 4 + 4, "kda_tensor_t layout changed");
static_assert(offsetof(kda_tensor_t, shape) == 16, "kda_tensor_t layout changed");
static_assert(offsetof(kda_forward_args_t, scale) == 11 * sizeof(kda_tensor_t), "kda_forward_args_t layout changed");
static_assert(offsetof(kda_forward_args_t, backend) == 11 * sizeof(kda_tensor_t) + 10 * 4,
              "kda_forward_args_t layout changed");
static_assert(offsetof(kda_decode_args_t, scale) == 11 * sizeof(kda_tensor_t), "kda_decode_args_t layout changed");
static_assert(offsetof(kda_decode_args_t, backend) == 11 * sizeof(kda_tensor_t) + 9 * 4,
              "kda_decode_args_t layout changed");
// Decode fusions, appended after backend (additive: the earlier fields keep their offsets).
static_assert(offsetof(kda_decode_args_t, q_conv_weight) == 11 * sizeof(kda_tensor_t) + 10 * 4,
              "kda_decode_args_t layout changed");
static_assert(offsetof(kda_decode_args_t, out_norm_eps) == 19 * sizeof(kda_tensor_t) + 10 * 4,
              "kda_decode_args_t layout changed");
static_assert(offsetof(kda_decode_args_t, out_gate_activation) == 19 * sizeof(kda_tensor_t) + 11 * 4,
              "kda_decode_args_t layout changed");
static_assert(offsetof(kda_backward_args_t, dout) == sizeof(kda_forward_args_t), "kda_backward_args_t layout changed");
static_assert(offsetof(kda_forward_args_t, state_checkpoints) % 8 == 0, "kda_forward_args_t layout changed");
// Training fields, appended (additive).
static_assert(offsetof(kda_forward_args_t, save_for_backward) ==
                  offsetof(kda_forward_args_t, checkpoint_interval) + 4,
              "kda_forward_args_t layout changed");
static_assert(offsetof(kda_backward_args_t, forward_saved) == offsetof(kda_backward_args_t, dh0) + sizeof(kda_tensor_t),
              "kda_backward_args_t layout changed");
