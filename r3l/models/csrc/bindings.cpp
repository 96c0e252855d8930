// The decode kernels as one Python extension (r3l/models/decode_kernel.py builds it).
#include <torch/extension.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention);
  m.def("few_rows_linear", &few_rows_linear);
  m.def("rms_norm", &rms_norm);
  m.def("tiles_ready", &tiles_ready);
  m.def("decode_attention_tiles", &decode_attention_tiles);
  m.def("few_rows_linear_tiles", &few_rows_linear_tiles);
}
