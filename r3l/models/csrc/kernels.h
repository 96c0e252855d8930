// The decode kernels' entry points (bindings.cpp hands them to Python).
#pragma once
#include <torch/extension.h>

// AVX512-BF16 vectors (decode_attention.cpp)
torch::Tensor decode_attention(torch::Tensor query, torch::Tensor keys, torch::Tensor values, torch::Tensor allowed,
                               double scale);
torch::Tensor few_rows_linear(torch::Tensor x, torch::Tensor weight);

// AVX-512 (rms_norm.cpp)
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);

// AMX tiles (tiles.cpp): usable once tiles_ready() says the kernel lets this process use them
bool tiles_ready();
torch::Tensor decode_attention_tiles(torch::Tensor query, torch::Tensor keys, torch::Tensor values,
                                     torch::Tensor allowed, double scale);
torch::Tensor few_rows_linear_tiles(torch::Tensor x, torch::Tensor weight);
