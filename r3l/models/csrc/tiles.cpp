// AMX-tile kernels for a decode step on CPUs with AMX-BF16 (Sapphire Rapids and later): the attention of one query
// position a row and the linear layers of up to 16 rows. A tile product does a 16 x 16 x 32 bf16 block with fp32
// sums in one instruction and needs no lane-by-lane reduction, so these read the cache and the weights about as
// fast as memory hands them over, where the vector kernels (decode_attention.cpp) spend more time in arithmetic
// than in reading. See docs/DESIGN.md, "Decode attention".
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_args.h"
#include "kernels.h"
#include "vector_math.h"

namespace {

constexpr int64_t kTileRows = 16;   // rows of a tile, and of its fp32 sums' columns
constexpr int64_t kTileWords = 32;  // bf16 values in a tile row (64 bytes)
constexpr int64_t kTileValues = kTileRows * kTileWords;

struct alignas(64) TileShapes {  // the LDTILECFG layout, palette 1
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// rows of tiles 0..7 (each 64 bytes a row; 0 rows: unused), for the calling thread
void configure(const int (&rows)[8]) {
  TileShapes shapes;
  for (int t = 0; t < 8; ++t) {
    shapes.rows[t] = uint8_t(rows[t]);
    shapes.bytes_per_row[t] = rows[t] ? 64 : 0;
  }
  _tile_loadconfig(&shapes);
}

// A matrix [n <= 16][k] as AMX's B operand, k in blocks of 32: block b, pair i, column c holds (m[c][32b + 2i],
// m[c][32b + 2i + 1]); columns past n are zeros.
std::vector<uint16_t> as_pairs(const uint16_t* matrix, int64_t n, int64_t k, int64_t row_stride) {
  std::vector<uint16_t> pairs(k / kTileWords * kTileValues, 0);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t d = 0; d < k; ++d)
      pairs[(d / kTileWords) * kTileValues + ((d % kTileWords) / 2) * kTileWords + c * 2 + d % 2] =
          matrix[c * row_stride + d];
  return pairs;
}

// rows a and b of 16 bf16 values interleaved (a0 b0 a1 b1 ...): one row of AMX's B operand over two positions
inline __m512i interleaved(__m256i a, __m256i b) {
  const __m512i order = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), order, _mm512_castsi256_si512(b));
}

inline __m256i row16(const uint16_t* values, bool present) {
  return present ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values)) : _mm256_setzero_si256();
}

}  // namespace

// Linux leaves AMX's tile data off until a process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA); the
// request fails where the CPU or the kernel has no AMX.
bool tiles_ready() {
  static const bool ready = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ready;
}

// As decode_attention, on tiles, for a group of up to 16 query heads a key head: q.K^T for the whole group at
// once (16 positions a product), then p.V with p rounded to bf16 (as torch's flash kernel does in bf16).
at::Tensor decode_attention_tiles(at::Tensor query, at::Tensor keys, at::Tensor values,
                                     at::Tensor allowed, double scale) {
  TORCH_CHECK(tiles_ready(), "decode_attention_tiles: this process may not use AMX tiles");
  const r3l::AttentionArgs args = r3l::attention_args("decode_attention_tiles", query, keys, values, allowed);
  TORCH_CHECK(args.group <= kTileRows, "decode_attention_tiles: shape");
  const uint16_t *q = args.q, *k = args.k, *v = args.v;
  const int64_t words = args.dim / kTileWords, slices = args.dim / 16, padded = (args.length + 31) / 32 * 32;
  const float sc = float(scale), minus_inf = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, args.rows * args.kv_heads, 1, [&](int64_t begin, int64_t end) {
    // 0: q.K^T sums [16 positions][16 query heads]; 1: keys; 2: p [group][32 positions]; 3: the B operand;
    // 4-7: p.V sums [group][16 of the head dim]
    const int g = int(args.group);
    configure({16, 16, g, 16, g, g, g, g});
    std::vector<uint16_t> tail(kTileRows * args.dim), probs(args.group * padded), packed(4 * kTileValues);
    std::vector<float> sums(padded * kTileRows), scores(padded), mixed(args.group * args.dim), inverse(args.group);
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(kTileRows));
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t row = pair / args.kv_heads, head = pair % args.kv_heads;
      const uint16_t* key = k + row * args.k_row + head * args.k_head;
      const uint16_t* value = v + row * args.v_row + head * args.v_head;
      const uint16_t* queries = q + (row * args.query_heads + head * args.group) * args.dim;
      const std::vector<uint16_t> query_pairs = as_pairs(queries, args.group, args.dim, args.dim);
      for (int64_t start = 0; start < args.length; start += kTileRows) {
        const uint16_t* source = key + start * args.k_pos;
        int64_t stride = args.k_pos * 2;
        if (args.length - start < kTileRows) {  // the last positions, copied: a tile load reads 16 rows
          std::fill(tail.begin(), tail.end(), 0);
          for (int64_t j = 0; j < args.length - start; ++j)
            std::memcpy(&tail[j * args.dim], source + j * args.k_pos, args.dim * 2);
          source = tail.data();
          stride = args.dim * 2;
        }
        _tile_zero(0);
        for (int64_t w = 0; w < words; ++w) {
          _tile_loadd(1, source + kTileWords * w, stride);
          _tile_loadd(3, query_pairs.data() + w * kTileValues, 64);
          _tile_dpbf16ps(0, 1, 3);
        }
        _tile_stored(0, sums.data() + start * kTileRows, 64);
      }
      const bool* allowed_here = args.mask != nullptr ? args.mask + row * args.length : nullptr;
      for (int64_t h = 0; h < args.group; ++h) {
        __m512 highest = _mm512_set1_ps(minus_inf);
        for (int64_t l = 0; l < padded; l += 16) {
          __mmask16 live = l + 16 <= args.length ? __mmask16(0xFFFF)
                                                 : __mmask16((1u << std::max<int64_t>(args.length - l, 0)) - 1);
          if (allowed_here != nullptr && live)
            live = _mm_mask_cmpneq_epi8_mask(live, _mm_maskz_loadu_epi8(live, allowed_here + l), _mm_setzero_si128());
          __m512 x = _mm512_set1_ps(minus_inf);
          if (live)
            x = _mm512_mask_mul_ps(x, live, _mm512_i32gather_ps(column, sums.data() + l * kTileRows + h, 4),
                                   _mm512_set1_ps(sc));
          _mm512_storeu_ps(scores.data() + l, x);
          highest = _mm512_max_ps(highest, x);
        }
        const float top = _mm512_reduce_max_ps(highest);
        const __m512 shift = _mm512_set1_ps(top == minus_inf ? 0.f : top);  // a row with nothing allowed: zeros
        __m512 total = _mm512_setzero_ps();
        for (int64_t l = 0; l < padded; l += 16) {
          const __m512 e = r3l::exp16(_mm512_sub_ps(_mm512_loadu_ps(scores.data() + l), shift));
          total = _mm512_add_ps(total, e);
          r3l::store_bf16(probs.data() + h * padded + l, e);
        }
        const float sum = _mm512_reduce_add_ps(total);
        inverse[h] = sum > 0.f ? 1.f / sum : 0.f;
      }
      for (int64_t first = 0; first < slices; first += 4) {  // four 16-wide slices of the head dim at a time
        const int64_t count = std::min<int64_t>(slices - first, 4);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (int64_t l0 = 0; l0 < args.length; l0 += 32) {
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t a = l0 + 2 * i, b = a + 1;
            for (int64_t c = 0; c < count; ++c) {
              const int64_t d0 = (first + c) * 16;
              const __m512i both = interleaved(row16(value + a * args.v_pos + d0, a < args.length),
                                               row16(value + b * args.v_pos + d0, b < args.length));
              _mm512_storeu_si512(packed.data() + c * kTileValues + i * kTileWords, both);
            }
          }
          _tile_loadd(2, probs.data() + l0, padded * 2);
          _tile_loadd(3, packed.data(), 64);
          _tile_dpbf16ps(4, 2, 3);
          if (count > 1) {
            _tile_loadd(3, packed.data() + kTileValues, 64);
            _tile_dpbf16ps(5, 2, 3);
          }
          if (count > 2) {
            _tile_loadd(3, packed.data() + 2 * kTileValues, 64);
            _tile_dpbf16ps(6, 2, 3);
          }
          if (count > 3) {
            _tile_loadd(3, packed.data() + 3 * kTileValues, 64);
            _tile_dpbf16ps(7, 2, 3);
          }
        }
        float* target = mixed.data() + first * 16;
        const int64_t stride = args.dim * 4;
        _tile_stored(4, target, stride);
        if (count > 1) _tile_stored(5, target + 16, stride);
        if (count > 2) _tile_stored(6, target + 32, stride);
        if (count > 3) _tile_stored(7, target + 48, stride);
      }
      for (int64_t h = 0; h < args.group; ++h) {
        uint16_t* target = args.o + (row * args.query_heads + head * args.group + h) * args.dim;
        const __m512 inv = _mm512_set1_ps(inverse[h]);
        for (int64_t d = 0; d < args.dim; d += 16)
          r3l::store_bf16(target + d, _mm512_mul_ps(_mm512_loadu_ps(mixed.data() + h * args.dim + d), inv));
      }
    }
    _tile_release();
  });
  return args.out;
}

// x [rows <= 16, in] contiguous, weight [out, in] contiguous, in a multiple of 32: x weight^T [rows, out], the
// weight read in place 32 output rows at a time, sums in fp32, one bf16 rounding.
at::Tensor few_rows_linear_tiles(at::Tensor x, at::Tensor weight) {
  TORCH_CHECK(tiles_ready(), "few_rows_linear_tiles: this process may not use AMX tiles");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16,
              "few_rows_linear_tiles: bf16 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.is_contiguous() && weight.is_contiguous(),
              "few_rows_linear_tiles: layout");
  const int64_t rows = x.size(0), in = x.size(1), outs = weight.size(0);
  TORCH_CHECK(rows >= 1 && rows <= kTileRows && in % kTileWords == 0 && weight.size(1) == in,
              "few_rows_linear_tiles: shape");
  auto out = at::empty({rows, outs}, x.options());
  const auto* ws = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  auto* os = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const std::vector<uint16_t> x_pairs =
      as_pairs(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()), rows, in, in);
  const int64_t words = in / kTileWords, blocks = (outs + 31) / 32;
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    configure({16, 16, 16, 16, 16, 0, 0, 0});  // 0, 1: sums [16 outputs][16 rows]; 2, 3: weight rows; 4: x
    alignas(64) float sums[32 * kTileRows];
    alignas(64) float gathered[32];
    std::vector<uint16_t> tail;
    for (int64_t block = begin; block < end; ++block) {
      const int64_t first = block * 32, count = std::min<int64_t>(outs - first, 32);
      const uint16_t* source = ws + first * in;
      if (count < 32) {  // the last outputs, copied: a tile load reads 16 rows
        tail.assign(32 * in, 0);
        std::memcpy(tail.data(), source, count * in * 2);
        source = tail.data();
      }
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t w = 0; w < words; ++w) {
        _tile_loadd(4, x_pairs.data() + w * kTileValues, 64);
        _tile_loadd(2, source + kTileWords * w, in * 2);
        _tile_loadd(3, source + 16 * in + kTileWords * w, in * 2);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 3, 4);
      }
      _tile_stored(0, sums, 64);
      _tile_stored(1, sums + 16 * kTileRows, 64);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < 32; ++j) gathered[j] = sums[j * kTileRows + r];
        alignas(64) uint16_t halves[32];
        r3l::store_bf16(halves, _mm512_load_ps(gathered));
        r3l::store_bf16(halves + 16, _mm512_load_ps(gathered + 16));
        std::memcpy(os + r * outs + first, halves, count * 2);
      }
    }
    _tile_release();
  });
  return out;
}
