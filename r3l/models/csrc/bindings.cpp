// The decode kernels as one Python extension (r3l/models/decode_kernel.py builds it).
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <atomic>

#include "kernels.h"

namespace {

// How many threads at::parallel_for ran `tasks` tasks on: 1 where the build ignored its OpenMP pragma.
int64_t threads_seen(int64_t tasks) {
  std::atomic<uint64_t> seen{0};
  at::parallel_for(0, tasks, 1, [&](int64_t, int64_t) { seen |= uint64_t(1) << (at::get_thread_num() % 64); });
  return __builtin_popcountll(seen.load());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention);
  m.def("few_rows_linear", &few_rows_linear);
  m.def("rms_norm", &rms_norm);
  m.def("rotary", &rotary);
  m.def("tiles_ready", &tiles_ready);
  m.def("threads_seen", &threads_seen);
  m.def("decode_attention_tiles", &decode_attention_tiles);
  m.def("few_rows_linear_tiles", &few_rows_linear_tiles);
}
