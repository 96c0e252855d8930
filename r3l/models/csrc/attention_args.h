// A decode step's attention arguments, checked and laid out once for both builds of the kernel (vectors,
// decode_attention.cpp; tiles, tiles.cpp): the bf16 buffers it reads and writes and their strides.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>

namespace r3l {

struct AttentionArgs {
  int64_t rows, query_heads, dim, kv_heads, length, group;
  const uint16_t *q, *k, *v;
  uint16_t* o;
  const bool* mask;  // null: every position allowed
  int64_t k_row, k_head, k_pos, v_row, v_head, v_pos;
  at::Tensor out;  // [rows, query heads, head dim], what `o` writes
};

// query [rows, query heads, head dim] contiguous; keys, values [rows, kv heads, length, head dim] with the head dim
// contiguous (any other strides); allowed [rows, length] bool or empty (all allowed). `name` heads each message.
inline AttentionArgs attention_args(const char* name, const at::Tensor& query, const at::Tensor& keys,
                                    const at::Tensor& values, const at::Tensor& allowed) {
  TORCH_CHECK(query.scalar_type() == at::kBFloat16 && keys.scalar_type() == at::kBFloat16 &&
              values.scalar_type() == at::kBFloat16, name, ": bf16 only");
  TORCH_CHECK(query.is_contiguous() && keys.stride(3) == 1 && values.stride(3) == 1, name, ": layout");
  AttentionArgs a;
  a.rows = query.size(0), a.query_heads = query.size(1), a.dim = query.size(2);
  a.kv_heads = keys.size(1), a.length = keys.size(2), a.group = a.query_heads / a.kv_heads;
  TORCH_CHECK(a.dim % 32 == 0 && a.query_heads % a.kv_heads == 0 && a.length > 0, name, ": shape");
  TORCH_CHECK(allowed.numel() == 0 || (allowed.scalar_type() == at::kBool && allowed.is_contiguous() &&
                                       allowed.size(0) == a.rows && allowed.size(1) == a.length),
              name, ": mask");
  a.out = at::empty({a.rows, a.query_heads, a.dim}, query.options());
  a.q = reinterpret_cast<const uint16_t*>(query.data_ptr<at::BFloat16>());
  a.k = reinterpret_cast<const uint16_t*>(keys.data_ptr<at::BFloat16>());
  a.v = reinterpret_cast<const uint16_t*>(values.data_ptr<at::BFloat16>());
  a.o = reinterpret_cast<uint16_t*>(a.out.data_ptr<at::BFloat16>());
  a.mask = allowed.numel() ? allowed.data_ptr<bool>() : nullptr;
  a.k_row = keys.stride(0), a.k_head = keys.stride(1), a.k_pos = keys.stride(2);
  a.v_row = values.stride(0), a.v_head = values.stride(1), a.v_pos = values.stride(2);
  return a;
}

}  // namespace r3l
