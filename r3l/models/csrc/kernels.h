// The decode kernels' entry points (bindings.cpp hands them to Python). Light ATen headers only: torch/extension.h,
// pybind11 with it, is compiled once, in bindings.cpp.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <tuple>

// AVX512-BF16 vectors (decode_attention.cpp)
at::Tensor decode_attention(at::Tensor query, at::Tensor keys, at::Tensor values, at::Tensor allowed,
                               double scale);
at::Tensor few_rows_linear(at::Tensor x, at::Tensor weight);

// AVX-512 (rms_norm.cpp, rotary.cpp)
at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps);
std::tuple<at::Tensor, at::Tensor> rotary(at::Tensor query, at::Tensor key, at::Tensor cos, at::Tensor sin);

// AMX tiles (tiles.cpp): usable once tiles_ready() says the kernel lets this process use them
bool tiles_ready();
at::Tensor decode_attention_tiles(at::Tensor query, at::Tensor keys, at::Tensor values,
                                     at::Tensor allowed, double scale);
at::Tensor few_rows_linear_tiles(at::Tensor x, at::Tensor weight);
