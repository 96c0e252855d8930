// transformers' rotary position embedding for a decode step's query and key (one position a row) in one call,
// where eager PyTorch takes fourteen small ones (two rotate_halfs, four products, two sums): x * cos +
// rotate_half(x) * sin with each product and the sum rounded to bf16, as the module's bf16 arithmetic does, so the
// result is bit for bit the same.
#include <immintrin.h>

#include <cstdint>
#include <tuple>

#include "kernels.h"
#include "vector_math.h"

namespace {

// bf16(bf16(a * b) + bf16(c * d)), sixteen lanes
inline __m512 rotated(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 first = r3l::widened(r3l::rounded(_mm512_mul_ps(a, b)));
  const __m512 second = r3l::widened(r3l::rounded(_mm512_mul_ps(c, d)));
  return _mm512_add_ps(first, second);
}

// x [rows, heads, dim] (the last dimension contiguous, any other strides), angles [rows or 1, dim] -> a new
// contiguous [rows, heads, 1, dim]
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  auto out = at::empty({rows, heads, 1, dim}, x.options());
  const auto* xs = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* cs = reinterpret_cast<const uint16_t*>(cos.data_ptr<at::BFloat16>());
  const auto* ss = reinterpret_cast<const uint16_t*>(sin.data_ptr<at::BFloat16>());
  auto* os = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t row_stride = x.stride(0), head_stride = x.stride(1);
  const int64_t cos_stride = cos.size(0) == 1 ? 0 : cos.stride(0), sin_stride = sin.size(0) == 1 ? 0 : sin.stride(0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* c = cs + r * cos_stride;
    const uint16_t* s = ss + r * sin_stride;
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t* v = xs + r * row_stride + h * head_stride;
      uint16_t* o = os + (r * heads + h) * dim;
      for (int64_t i = 0; i < half; i += 16) {
        const __m512 low = r3l::load_bf16(v + i), high = r3l::load_bf16(v + half + i);
        // rotate_half(x) is (-high, low): the first half's second product is -high * sin (negation is exact)
        r3l::store_bf16(o + i, rotated(low, r3l::load_bf16(c + i), high,
                                       _mm512_sub_ps(_mm512_setzero_ps(), r3l::load_bf16(s + i))));
        r3l::store_bf16(o + half + i, rotated(high, r3l::load_bf16(c + half + i), low, r3l::load_bf16(s + half + i)));
      }
    }
  }
  return out;
}

void check_heads(const at::Tensor& x, int64_t rows, int64_t dim, const char* name) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "rotary: bf16 only");
  TORCH_CHECK(x.dim() == 3 && x.size(0) == rows && x.size(2) == dim && x.stride(2) == 1, "rotary: ", name, " layout");
}

void check_angles(const at::Tensor& angles, int64_t rows, int64_t dim) {
  TORCH_CHECK(angles.scalar_type() == at::kBFloat16, "rotary: bf16 only");
  TORCH_CHECK(angles.dim() == 2 && (angles.size(0) == 1 || angles.size(0) == rows) && angles.size(1) == dim &&
              angles.stride(1) == 1, "rotary: angles layout");
}

}  // namespace

// query [rows, heads, dim], key [rows, kv_heads, dim], cos and sin [rows or 1, dim]; dim a multiple of 32
std::tuple<at::Tensor, at::Tensor> rotary(at::Tensor query, at::Tensor key, at::Tensor cos, at::Tensor sin) {
  const int64_t rows = query.size(0), dim = query.size(-1);
  TORCH_CHECK(dim % 32 == 0, "rotary: the head dimension must be a multiple of 32");
  check_heads(query, rows, dim, "query");
  check_heads(key, rows, dim, "key");
  check_angles(cos, rows, dim);
  check_angles(sin, rows, dim);
  return {rotate(query, cos, sin), rotate(key, cos, sin)};
}
