// transformers' Llama-family RMSNorm for a decode step's few rows in one call, where eager PyTorch takes eight
// (to fp32, square, mean, add, rsqrt, multiply, to bf16, multiply by the weight): x / sqrt(mean(x^2) + eps) in
// fp32, rounded to bf16, times the weight, rounded again, as the module does.
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels.h"
#include "vector_math.h"

// x [rows, hidden] bf16 contiguous, weight [hidden] bf16 contiguous, hidden a multiple of 16
at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16, "rms_norm: bf16 only");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && weight.is_contiguous() && weight.numel() == x.size(1) &&
              x.size(1) % 16 == 0, "rms_norm: shape");
  const int64_t rows = x.size(0), hidden = x.size(1);
  auto out = at::empty_like(x);
  const auto* xs = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* ws = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  auto* os = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* row = xs + r * hidden;
      __m512 squares = _mm512_setzero_ps();
      for (int64_t i = 0; i < hidden; i += 16) {
        const __m512 v = r3l::load_bf16(row + i);
        squares = _mm512_fmadd_ps(v, v, squares);
      }
      const float mean = _mm512_reduce_add_ps(squares) / float(hidden);
      const __m512 inverse = _mm512_set1_ps(1.f / std::sqrt(mean + float(eps)));
      for (int64_t i = 0; i < hidden; i += 16) {
        const __m512 normed = r3l::widened(r3l::rounded(_mm512_mul_ps(r3l::load_bf16(row + i), inverse)));
        r3l::store_bf16(os + r * hidden + i, _mm512_mul_ps(r3l::load_bf16(ws + i), normed));
      }
    }
  });
  return out;
}
