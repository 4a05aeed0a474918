// device.h: what the tools and GPU tests need of a CUDA device: copies of a case on the device, a forward call
// there, and timing by CUDA-graph replay with events. In a build without CUDA, cuda_device_count() is 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/backward_cases.h"
#include "common/cases.h"
#include "common/decode_cases.h"

namespace kda::testing {

int cuda_device_count();
int cuda_device_cc_major();  // device 0's compute capability major (0 without one)
int cuda_device_sm_count();  // device 0's multiprocessors (0 without one)
std::string cuda_device_name();

struct TimingStats {
  double mean_us = 0, median_us = 0, min_us = 0, max_us = 0;
  int iters = 0;
};

// One call that can be enqueued on a stream (a forward or a decode over its own device buffers).
class DeviceCall {
 public:
  virtual ~DeviceCall() = default;
  virtual kda_status_t enqueue(void* stream) = 0;
};

// Times `iters` replays of one CUDA graph that holds one call of each of `calls` in turn (after `warmup`
// replays), each replay between two events, and reports per call (replay time / calls.size()). Several calls over
// different buffers rotate the input sets, so a problem smaller than the 60 MB L2 is not timed from cache.
// False if a call cannot be captured (kda_last_error says why).
bool time_calls(const std::vector<DeviceCall*>& calls, int warmup, int iters, TimingStats* st);

// A device-to-device copy of `bytes` (a multiple of 16) between two buffers of its own, timed by time_calls like the
// call itself (the same graph replay, launch and ramp included), so a decode's time can be set against a copy of as
// many bytes at the same size beside the 2 GiB copy rate (the floor): the driver's cudaMemcpyAsync, or with `kernel`
// a plain copy kernel (copy_kernel.cu: 16-byte loads and stores, every SM's resident threads).
class DeviceCopy : public DeviceCall {
 public:
  explicit DeviceCopy(size_t bytes, bool kernel = false);
  ~DeviceCopy() override;
  kda_status_t enqueue(void* stream) override;

 private:
  size_t bytes_ = 0;
  bool kernel_ = false;
  void *src_ = nullptr, *dst_ = nullptr;
};

// A case's inputs and outputs in device memory, with the args and workspace of one forward call.
class DeviceProblem : public DeviceCall {
 public:
  DeviceProblem(const Case& c, const Outputs& o, kda_backend_t backend);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  kda_status_t run();                // one forward on the problem's stream, then a stream sync (for tests)
  void download(Outputs& o) const;   // device outputs -> host
  void poison_outputs();             // fill outputs with NaN bytes (0xFF) before a call
  // Copies another case's inputs (same shapes) over this problem's device inputs, synchronously.
  void replace_inputs(const Case& c);
  // Captures one forward call into a CUDA graph (false if the call fails; kda_last_error says why), and replays
  // it on the problem's stream then waits for it.
  bool capture();
  void replay();
  kda_status_t enqueue(void* stream) override;
  // Prefix-cache checkpoints: uploads ckpt (its contents too: what unwritten entries must keep) and offsets (absent:
  // every `interval` tokens) and sets them on args; download_checkpoints reads the buffer back into ckpt.
  void set_checkpoints(const HostTensor& ckpt, const HostTensor& offsets, int32_t interval);
  void download_checkpoints(HostTensor& ckpt) const;
  // Overwrites the device checkpoint buffer / offsets (same shapes) synchronously, e.g. between graph replays.
  void replace_checkpoints(const HostTensor& ckpt, const HostTensor& offsets);

  kda_forward_args_t args{};

 private:
  void* upload(const HostTensor& t);
  void* alloc(size_t bytes);
  std::vector<void*> allocations_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* stream_ = nullptr;
  void* graph_ = nullptr;
  void* graph_exec_ = nullptr;
};

// With KDA_STAGE_CLOCKS (a measuring build, stage_clocks.h): one forward of `p` with phase 1's per-warp stamps on,
// written to `path` as stage_clocks.h kMagic (8 bytes), four int32 (CTAs, warps, tasks a CTA, stamps a task), then
// the uint64 stamps in stage_clocks::index order (scripts/stage_clocks.py reads them); where the sm_90a state pass
// ran, its stamps beside them in `path`.state (stage_clocks::state: kMagic, CTAs, warps, steps a CTA, stamps a step).
// False, with the reason on stderr, if the build has no stamps or the call fails.
bool capture_stage_clocks(DeviceProblem& p, const std::string& path);

// A decode problem on the device: inputs, the pool (a copy of the case's) and out.
class DeviceDecodeProblem : public DeviceCall {
 public:
  DeviceDecodeProblem(DecodeCase& d, kda_backend_t backend);
  ~DeviceDecodeProblem();
  DeviceDecodeProblem(const DeviceDecodeProblem&) = delete;
  DeviceDecodeProblem& operator=(const DeviceDecodeProblem&) = delete;
  kda_status_t run();                                   // one call, then a sync
  void download(HostTensor& out, HostTensor& pool) const;
  void download_conv(HostTensor* conv_state) const;  // the three fused-conv state pools (q, k, v), when given
  kda_status_t enqueue(void* stream) override;  // the pool evolves across replays, as in serving
  kda_decode_args_t args{};

 private:
  std::vector<void*> allocations_;
  void* stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// A backward problem on the device: the case's inputs and upstream gradients, NaN-poisoned (0xFF bytes) gradient
// tensors shaped like *shapes (made by make_grads) and the workspace kda_backward_workspace_size asks for (poisoned
// too, so nothing relies on a zeroed workspace). enqueue() is one kda_backward call, for timing by graph replay.
// forward_saved: every call runs the forward with save_for_backward into the workspace, then the backward with
// forward_saved (KDA_BACKEND_CUDA_CHUNKED: a whole training step without the backward's recompute).
class DeviceBackwardProblem : public DeviceCall {
 public:
  DeviceBackwardProblem(Case& c, const Upstream& up, kda_backend_t backend, const Grads& shapes,
                        bool forward_saved = false);
  ~DeviceBackwardProblem();
  DeviceBackwardProblem(const DeviceBackwardProblem&) = delete;
  DeviceBackwardProblem& operator=(const DeviceBackwardProblem&) = delete;
  kda_status_t run();                 // one call, then a sync
  void download(Grads* g) const;      // device gradients -> *g (same shapes)
  kda_status_t enqueue(void* stream) override;
  size_t workspace_bytes() const { return workspace_bytes_; }  // what kda_backward_workspace_size asked for
  kda_backward_args_t args{};
  kda_forward_args_t fwd{};  // the saving forward's args (forward_saved only)

 private:
  std::vector<void*> allocations_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  kda_status_t setup_ = KDA_STATUS_SUCCESS;  // the workspace query's status, returned by run() / enqueue()
  void* stream_ = nullptr;
};

// kda_backward with backend be on device copies of case c and its upstream gradients: the gradient tensors (made
// by make_grads, shapes and dtypes taken from *g) and the workspace are NaN-poisoned (0xFF bytes) on the device
// before the call, so an unwritten element or a read of unset workspace shows; results downloaded into *g. Without
// CUDA: KDA_STATUS_BACKEND_UNAVAILABLE.
kda_status_t run_backward_device(Case& c, const Upstream& up, kda_backend_t be, Grads* g,
                                 bool forward_saved = false);

// Device-to-device copy bandwidth in bytes/s (read + written), measured with a large cudaMemcpy.
double measure_copy_bandwidth();

// Dense bf16 matrix-product rate in FLOP/s (8192^3, fp32 accumulation, cuBLAS loaded at run time so the tools do
// not need it to start); 0 when no cuBLAS library can be loaded. *library names the one used.
double measure_bf16_matmul_rate(std::string* library);

}  // namespace kda::testing
