// external_impl.h: the verifier's adapter for implementations outside this library (FLA, a Triton or PyTorch
// kernel, anything with chunk_kda's calling convention): the case is written to a directory as raw tensors plus a
// JSON description (docs/verifier_protocol.md), the given command is run on that directory, and the outputs it
// writes there are read back and judged like ours.
#pragma once

#include <string>

#include "common/backward_cases.h"
#include "common/cases.h"
#include "common/decode_cases.h"

namespace kda::testing {

// Runs `command DIR` on case c (DIR holds case.json and the inputs); fills o from DIR/out.bin (dtype of q) and
// DIR/final_state.bin (float32, state layout). KDA_STATUS_INTERNAL_ERROR (with kda_last_error-style text in
// *error) if the command fails or its outputs are missing or the wrong size.
kda_status_t run_external(const std::string& command, Case& c, Outputs& o, std::string* error);

// A backward request (case.json "request": "backward"): DIR also holds dout.bin and, when up.dfinal is present,
// dfinal_state.bin; case.json's "outputs" lists every gradient of *g (its dtype and shape). The command writes
// DIR/NAME.bin for each gradient it computes; a gradient without a file is recorded in g->missing (not provided).
// A file of the wrong size fails the call.
kda_status_t run_external_backward(const std::string& command, Case& c, const Upstream& up, Grads* g,
                                   std::string* error);

// A decode request (case.json "request": "decode"): DIR also holds the state pool, its indices (and
// num_accepted_tokens), and with the fusions their weights, conv states and output gate; the command writes
// DIR/out.bin, DIR/state_pool.bin (the whole pool after the call) and, with the fused conv, DIR/conv_state_{q,k,v}.bin.
// out, pool (a copy of d.pool) and conv (copies of d.conv_state; null without the conv) are filled from them.
kda_status_t run_external_decode(const std::string& command, DecodeCase& d, HostTensor& out, HostTensor& pool,
                                 HostTensor* conv, std::string* error);

}  // namespace kda::testing
