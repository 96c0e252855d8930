// AVX512-BF16 vector kernels: one decode step's attention (each row's one query position over its cached keys
// and values, read in place with any row and head strides; bf16 in, fp32 sums, bf16 out) and the linear layers of
// a few rows. Built at first use by r3l/models/decode_kernel.py; see docs/DESIGN.md, "Decode attention".
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention_args.h"
#include "kernels.h"
#include "vector_math.h"

namespace {

// sixteen vectors in, one out: lane j holds the sum of one input's lanes (which one: `lane_order`)
inline __m512 sum16(const __m512* v) {
  __m512 a[8];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  __m512 b[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
    b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 c0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x88), _mm512_shuffle_f32x4(b[0], b[1], 0xDD));
  const __m512 c1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x88), _mm512_shuffle_f32x4(b[2], b[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
}

// the permutation that puts sum16's lanes in input order
__m512i lane_order() {
  alignas(64) float probe[16];
  __m512 inputs[16];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) probe[j] = j == 0 ? float(i) : 0.f;
    inputs[i] = _mm512_load_ps(probe);
  }
  _mm512_store_ps(probe, sum16(inputs));
  alignas(64) int order[16];
  for (int j = 0; j < 16; ++j) order[int(probe[j])] = j;
  return _mm512_load_si512(order);
}

constexpr int kMaxWords = 8;  // head dim up to 256

}  // namespace

// query [rows, query heads, head dim] contiguous; keys, values [rows, kv heads, length, head dim] with the head dim
// contiguous; allowed [rows, length] bool or empty (all allowed). Returns [rows, query heads, head dim].
at::Tensor decode_attention(at::Tensor query, at::Tensor keys, at::Tensor values, at::Tensor allowed,
                               double scale) {
  const r3l::AttentionArgs args = r3l::attention_args("decode_attention", query, keys, values, allowed);
  TORCH_CHECK(args.dim / 32 <= kMaxWords, "decode_attention: shape");
  const uint16_t *q = args.q, *k = args.k, *v = args.v;
  const int64_t words = args.dim / 32, padded = (args.length + 15) / 16 * 16;
  const float sc = float(scale), minus_inf = -std::numeric_limits<float>::infinity();
  const __m512i order = lane_order();
  at::parallel_for(0, args.rows * args.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(args.group * padded), inverse(args.group);
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t row = pair / args.kv_heads, head = pair % args.kv_heads;
      const uint16_t* key = k + row * args.k_row + head * args.k_head;
      const uint16_t* value = v + row * args.v_row + head * args.v_head;
      for (int64_t g = 0; g < args.group; ++g) {
        const uint16_t* qg = q + (row * args.query_heads + head * args.group + g) * args.dim;
        __m512bh qw[kMaxWords];
        for (int64_t w = 0; w < words; ++w) qw[w] = (__m512bh)_mm512_loadu_si512(qg + 32 * w);
        float* s = scores.data() + g * padded;
        for (int64_t start = 0; start < args.length; start += 16) {
          __m512 dots[16];
          for (int j = 0; j < 16; ++j) {
            dots[j] = _mm512_setzero_ps();
            if (start + j < args.length) {
              const uint16_t* kr = key + (start + j) * args.k_pos;
              for (int64_t w = 0; w < words; ++w)
                dots[j] = _mm512_dpbf16_ps(dots[j], (__m512bh)_mm512_loadu_si512(kr + 32 * w), qw[w]);
            }
          }
          _mm512_storeu_ps(s + start, _mm512_permutexvar_ps(order, _mm512_mul_ps(sum16(dots), _mm512_set1_ps(sc))));
        }
        for (int64_t l = args.length; l < padded; ++l) s[l] = minus_inf;
        if (args.mask != nullptr) {
          const bool* m = args.mask + row * args.length;
          int64_t l = 0;
          for (; l + 16 <= args.length; l += 16) {
            const __mmask16 off = _mm_cmpeq_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m + l)),
                                                      _mm_setzero_si128());
            _mm512_mask_storeu_ps(s + l, off, _mm512_set1_ps(minus_inf));
          }
          for (; l < args.length; ++l)
            if (!m[l]) s[l] = minus_inf;
        }
        __m512 highest = _mm512_set1_ps(minus_inf);
        for (int64_t l = 0; l < padded; l += 16) highest = _mm512_max_ps(highest, _mm512_loadu_ps(s + l));
        const float top = _mm512_reduce_max_ps(highest);
        const __m512 shift = _mm512_set1_ps(top == minus_inf ? 0.f : top);  // a row with nothing allowed: zeros
        __m512 total = _mm512_setzero_ps();
        for (int64_t l = 0; l < padded; l += 16) {
          const __m512 e = r3l::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + l), shift));
          _mm512_storeu_ps(s + l, e);
          total = _mm512_add_ps(total, e);
        }
        const float sum = _mm512_reduce_add_ps(total);
        inverse[g] = sum > 0.f ? 1.f / sum : 0.f;
      }
      __m512 acc[kMaxWords * 2 * 8];  // [group (up to 8 at once)][16-float word]
      for (int64_t g0 = 0; g0 < args.group; g0 += 8) {
        const int64_t gs = args.group - g0 < 8 ? args.group - g0 : 8;
        for (int64_t i = 0; i < gs * 2 * words; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t l = 0; l < args.length; ++l) {
          const uint16_t* vr = value + l * args.v_pos;
          __m512 vf[kMaxWords * 2];
          for (int64_t w = 0; w < 2 * words; ++w)
            vf[w] = r3l::load_bf16(vr + 16 * w);
          for (int64_t g = 0; g < gs; ++g) {
            const __m512 p = _mm512_set1_ps(scores[(g0 + g) * padded + l]);
            for (int64_t w = 0; w < 2 * words; ++w)
              acc[g * 2 * words + w] = _mm512_fmadd_ps(p, vf[w], acc[g * 2 * words + w]);
          }
        }
        for (int64_t g = 0; g < gs; ++g) {
          uint16_t* dst = args.o + (row * args.query_heads + head * args.group + g0 + g) * args.dim;
          const __m512 inv = _mm512_set1_ps(inverse[g0 + g]);
          for (int64_t w = 0; w < 2 * words; w += 2) {
            const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_mul_ps(acc[g * 2 * words + w + 1], inv),
                                                        _mm512_mul_ps(acc[g * 2 * words + w], inv));
            _mm512_storeu_si512(dst + 16 * w, (__m512i)packed);
          }
        }
      }
    }
  });
  return args.out;
}

// x [rows, in] contiguous, rows <= 8; weight [out, in] contiguous, in a multiple of 32. Returns x weight^T
// [rows, out]: each weight row read once from memory, bf16 dot products summed in fp32, bf16 out.
at::Tensor few_rows_linear(at::Tensor x, at::Tensor weight) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16, "few_rows_linear: bf16 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.is_contiguous() && weight.is_contiguous(),
              "few_rows_linear: layout");
  const int64_t rows = x.size(0), in = x.size(1), outs = weight.size(0);
  TORCH_CHECK(rows >= 1 && rows <= 8 && in % 32 == 0 && weight.size(1) == in, "few_rows_linear: shape");
  auto out = at::empty({rows, outs}, x.options());
  const auto* xs = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* ws = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  auto* os = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t words = in / 32, blocks = (outs + 15) / 16;
  const __m512i order = lane_order();
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    alignas(64) float sums[16];
    for (int64_t block = begin; block < end; ++block) {
      const int64_t first = block * 16, count = outs - first < 16 ? outs - first : 16;
      const uint16_t* wb[16];  // the block's weight rows; past the last output, the last again (its sums unused)
      for (int j = 0; j < 16; ++j) wb[j] = ws + (first + (j < count ? j : count - 1)) * in;
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* xr = xs + r * in;
        __m512 dots[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) dots[j] = _mm512_setzero_ps();
        for (int64_t w = 0; w < words; ++w) {
          const __m512bh xw = (__m512bh)_mm512_loadu_si512(xr + 32 * w);
#pragma GCC unroll 16
          for (int j = 0; j < 16; ++j)
            dots[j] = _mm512_dpbf16_ps(dots[j], (__m512bh)_mm512_loadu_si512(wb[j] + 32 * w), xw);
        }
        _mm512_store_ps(sums, _mm512_permutexvar_ps(order, sum16(dots)));
        const __m256bh packed = _mm512_cvtneps_pbh(_mm512_load_ps(sums));
        alignas(32) uint16_t halves[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(halves), (__m256i)packed);
        for (int64_t j = 0; j < count; ++j) os[r * outs + first + j] = halves[j];
      }
    }
  });
  return out;
}
