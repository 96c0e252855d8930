// Vector maths shared by the decode kernels (AVX-512).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace r3l {

// exp(x) to ~1e-7 relative (2^(x log2 e): a degree-6 polynomial of the fraction, scaled by 2^n); 0 below -87
inline __m512 exp16(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_GT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

// sixteen bf16 values as fp32 (exact: a bf16 is an fp32's upper half)
inline __m512 widened(__m256i values) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(values), 16));
}

inline __m512 load_bf16(const uint16_t* values) {
  return widened(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values)));
}

// sixteen fp32 values rounded to bf16 (to nearest, ties to even)
inline __m256i rounded(__m512 values) { return (__m256i)_mm512_cvtneps_pbh(values); }

inline void store_bf16(uint16_t* target, __m512 values) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(target), rounded(values));
}

}  // namespace r3l
