"""r3l's decode kernels (`generator.decode_attention=kernel`, r3l/models/csrc/: AVX512-BF16 vectors, and AMX tiles
where the CPU has them): each attends as fp32 arithmetic on the same bf16 inputs does, to within the bf16
rounding of its output, over the in-place cache's strided views and transformers' padding masks, and multiplies
a few rows by a weight as fp32 arithmetic rounded to bf16; the generator that uses them scores its tokens as
closely to an fp32 forward as SDPA does; where they cannot be built the generator keeps SDPA and says why."""

import copy
import functools
import shutil

import pytest
import torch

from r3l.models import decode_kernel, grouped_attention
from r3l.models.decode_kernel import allowed_positions, cpu_has_avx512_bf16, kernel
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator

needs_kernel = pytest.mark.skipif(
    not cpu_has_avx512_bf16() or shutil.which("c++") is None,
    reason="the decode kernel needs a CPU with AVX512-BF16 and a C++ compiler",
)
ATTENTIONS = ["decode_attention", "decode_attention_tiles"]
LINEARS = ["few_rows_linear", "few_rows_linear_tiles"]


def kernel_function(name: str):
    """The built extension's `name`; a tile kernel's test is skipped where this CPU or OS has no AMX tiles."""
    built, why = kernel()
    assert built is not None, why
    if name.endswith("_tiles") and not built.tiles_ready():
        pytest.skip("no AMX tiles on this CPU (or the OS does not let this process use them)")
    return getattr(built, name)


def fp32_attention(query, keys, values, allowed, scale):
    """[rows, query heads, dim] from fp32 arithmetic on the same inputs (query heads grouped as repeat_kv does)."""
    group = query.shape[1] // keys.shape[1]
    keys, values = (t.float().repeat_interleave(group, 1) for t in (keys, values))
    scores = torch.einsum("rhd,rhld->rhl", query.float(), keys) * scale
    scores = scores.masked_fill(~allowed[:, None, :], float("-inf"))
    return torch.einsum("rhl,rhld->rhd", scores.softmax(-1), values)


@needs_kernel
@pytest.mark.parametrize("name", ATTENTIONS)
@pytest.mark.parametrize(
    "group, dim, length",
    [(3, 64, 1), (3, 64, 17), (7, 64, 300), (1, 128, 40), (2, 32, 1000), (16, 96, 33), (4, 256, 70)],
)
def test_the_kernel_attends_as_fp32_arithmetic_does(name, group, dim, length):
    attend = kernel_function(name)
    generator = torch.Generator().manual_seed(length)
    rows, kv_heads, room = 3, 2, 9
    shape = (rows, kv_heads, length + room, dim)
    key_buffer, value_buffer = (torch.randn(shape, generator=generator).mul(2).bfloat16() for _ in range(2))
    keys, values = key_buffer[:, :, :length], value_buffer[:, :, :length]  # views, as the in-place cache hands them
    query = torch.randn(rows, kv_heads * group, dim, generator=generator).mul(2).bfloat16()
    allowed = torch.ones(rows, length, dtype=torch.bool)
    allowed[1, : length // 2] = False  # a left-padded row
    allowed[2] = torch.rand(length, generator=generator) < 0.7
    allowed[2, -1] = True
    scale = dim**-0.5
    got = attend(query, keys, values, allowed, scale).float()
    expected = fp32_attention(query, keys, values, allowed, scale)
    torch.testing.assert_close(got, expected, atol=1e-2, rtol=8e-3)  # bf16 output: 8 bits of mantissa
    unrounded_error = (got - expected).abs().max()
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        query[:, :, None], keys, values, attn_mask=allowed[:, None, None], scale=scale, enable_gqa=True
    )[:, :, 0].float()
    assert unrounded_error <= (sdpa - expected).abs().max() + 4e-3


def test_the_mask_is_read_from_transformers_boolean_decode_mask():
    mask = torch.tensor([[[[True, False, True]]], [[[True, True, True]]]])
    assert allowed_positions(mask, 2, 3).tolist() == [[True, False, True], [True, True, True]]
    assert allowed_positions(mask[:1], 2, 3).tolist() == [[True, False, True]] * 2  # broadcast over rows
    assert allowed_positions(None, 2, 3).numel() == 0  # no mask: everything allowed
    assert allowed_positions(mask.float(), 2, 3) is None  # an additive mask: SDPA takes the step


def fp32_errors(reference, prompts, groups) -> list[float]:
    """Per row, the largest gap between a reply's recorded log-probabilities and `reference`'s (fp32) over it."""
    errors = []
    for prompt, group in zip(prompts, groups):
        tokens = group[0].tokens
        with torch.inference_mode():
            logits = reference(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        scored = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
        errors.append(max(abs(a - b) for a, b in zip(scored.tolist(), group[0].logprobs)))
    return errors


@needs_kernel
def test_the_generator_with_the_kernel_scores_its_tokens_as_closely_as_with_sdpa(monkeypatch):
    from r3l.models import load_policy

    model, tokenizer = load_policy("smollm2-135m-instruct")  # head dim 64, 9 query heads over 3
    calls = []
    built, _ = kernel()

    linear_rows, norm_rows, rotary_rows = [], [], []

    class Counted:
        def tiles_ready(self):
            return built.tiles_ready()

        def decode_attention(self, *args):
            calls.append(args[1].shape[2])
            return built.decode_attention(*args)

        def decode_attention_tiles(self, *args):
            calls.append(args[1].shape[2])
            return built.decode_attention_tiles(*args)

        def few_rows_linear(self, x, weight):
            linear_rows.append(x.shape[0])
            return built.few_rows_linear(x, weight)

        def few_rows_linear_tiles(self, x, weight):
            linear_rows.append(x.shape[0])
            return built.few_rows_linear_tiles(x, weight)

        def rms_norm(self, x, weight, eps):
            norm_rows.append(x.shape[0])
            return built.rms_norm(x, weight, eps)

        def rotary(self, q, k, cos, sin):
            rotary_rows.append(q.shape[0])
            return built.rotary(q, k, cos, sin)

    generators = {mode: HFGenerator(model, tokenizer, decode_attention=mode) for mode in ("sdpa", "kernel")}
    assert generators["kernel"].decode_kernel and not generators["sdpa"].decode_kernel
    monkeypatch.setattr(decode_kernel, "kernel", lambda: (Counted(), ""))
    generator = torch.Generator().manual_seed(0)
    stop = generators["sdpa"].stop_token_ids
    prompts = [
        [t for t in torch.randint(100, 40_000, (n,), generator=generator).tolist() if t not in stop]
        for n in (300, 240, 170)
    ]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    groups = {mode: generator_.generate(prompts, params) for mode, generator_ in generators.items()}
    assert calls and max(calls) >= 300  # decode steps went through the kernel, over the whole context
    assert linear_rows and max(linear_rows) == 3  # and their linear layers, three rows at a time
    assert norm_rows and max(norm_rows) == 3  # and their norms
    assert rotary_rows and max(rotary_rows) == 3  # and their rotary embeddings
    for sdpa_group, kernel_group in zip(groups["sdpa"], groups["kernel"]):  # the prefill's first token: one
        assert kernel_group[0].tokens[0] == sdpa_group[0].tokens[0]  # path but the head's few-rows product
        assert abs(kernel_group[0].logprobs[0] - sdpa_group[0].logprobs[0]) < 1e-4
    reference = copy.deepcopy(model).float().eval()
    errors = {mode: fp32_errors(reference, prompts, groups[mode]) for mode in groups}
    assert max(errors["kernel"]) <= 1.25 * max(errors["sdpa"]) + 0.05, errors


@needs_kernel
@pytest.mark.parametrize("name", LINEARS)
@pytest.mark.parametrize("rows, inputs, outputs", [(1, 64, 16), (3, 576, 1536), (4, 96, 37), (8, 160, 70)])
def test_few_rows_linear_is_fp32_arithmetic_rounded_to_bf16(name, rows, inputs, outputs):
    product = kernel_function(name)
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, inputs, generator=generator).bfloat16()
    weight = torch.randn(outputs, inputs, generator=generator).bfloat16()
    exact = x.float() @ weight.float().t()
    got = product(x, weight)
    assert got.shape == (rows, outputs) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), exact, rtol=2**-8, atol=1e-3 * exact.abs().max().item())


@pytest.mark.parametrize("tiles", [False, True])
def test_a_linear_layer_takes_the_kernel_only_for_a_few_bf16_rows_without_gradients(monkeypatch, tiles):
    taken = []

    class Recorded:
        def tiles_ready(self):
            return tiles

        def few_rows_linear(self, x, weight):
            taken.append(("vectors", *x.shape))
            return torch.nn.functional.linear(x, weight)

        def few_rows_linear_tiles(self, x, weight):
            taken.append(("tiles", *x.shape))
            return torch.nn.functional.linear(x, weight)

    monkeypatch.setattr(decode_kernel, "kernel", lambda: (Recorded(), ""))
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 8).bfloat16()
    most = decode_kernel.TILE_ROWS if tiles else decode_kernel.FEW_ROWS
    with torch.inference_mode():
        small = decode_kernel.few_rows_forward(layer, torch.ones(2, 1, 64, dtype=torch.bfloat16))
        decode_kernel.few_rows_forward(layer, torch.ones(most, 64, dtype=torch.bfloat16))
        decode_kernel.few_rows_forward(layer, torch.ones(most + 1, 64, dtype=torch.bfloat16))
        decode_kernel.few_rows_forward(layer.float(), torch.ones(2, 64))
    decode_kernel.few_rows_forward(layer.bfloat16(), torch.ones(2, 64, dtype=torch.bfloat16))  # gradients on
    path = "tiles" if tiles else "vectors"
    assert taken == [(path, 2, 64), (path, most, 64)]
    expected = torch.nn.functional.linear(torch.ones(2, 1, 64, dtype=torch.bfloat16), layer.weight, layer.bias)
    assert small.shape == (2, 1, 8)  # the shape restored, the bias added (after the product's bf16 rounding)
    torch.testing.assert_close(small, expected.detach())


def test_without_the_kernel_the_generator_keeps_sdpa_and_says_why(tiny, monkeypatch, capsys):
    model, tokenizer = tiny
    monkeypatch.setattr(decode_kernel, "kernel", lambda: (None, "no compiler here"))
    generator = HFGenerator(model, tokenizer, decode_attention="kernel")
    assert not generator.decode_kernel and generator.model.config._attn_implementation == grouped_attention.NAME
    assert "decode_attention=kernel asked for, SDPA kept: no compiler here" in capsys.readouterr().err


@needs_kernel
@pytest.mark.parametrize("rows, hidden", [(1, 576), (4, 896), (16, 64)])
def test_rms_norm_is_the_llama_module_to_within_a_rounding(rows, hidden):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    rms_norm = kernel_function("rms_norm")
    generator = torch.Generator().manual_seed(hidden)
    norm = LlamaRMSNorm(hidden, eps=1e-5).bfloat16()
    norm.weight.data = torch.randn(hidden, generator=generator).bfloat16()
    x = torch.randn(rows, hidden, generator=generator).mul(3).bfloat16()
    with torch.inference_mode():
        expected = norm(x)
        got = rms_norm(x, norm.weight, norm.variance_epsilon)
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    # the mean of squares is summed in another order: at most one bf16 rounding apart, and rarely that
    torch.testing.assert_close(got.float(), expected.float(), rtol=2**-7, atol=1e-6)
    assert (got == expected).float().mean() > 0.98


def test_a_llama_norm_takes_the_kernel_only_for_a_decode_steps_rows(monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    taken = []

    class Recorded:
        def rms_norm(self, x, weight, eps):
            taken.append(tuple(x.shape))
            return LlamaRMSNorm.forward(norm, x)

    monkeypatch.setattr(decode_kernel, "kernel", lambda: (Recorded(), ""))
    norm = LlamaRMSNorm(64).bfloat16()
    with torch.inference_mode():
        out = decode_kernel.norm_forward(norm, torch.ones(2, 1, 64, dtype=torch.bfloat16))
        decode_kernel.norm_forward(norm, torch.ones(decode_kernel.TILE_ROWS + 1, 64, dtype=torch.bfloat16))
        decode_kernel.norm_forward(norm.float(), torch.ones(2, 64))
    decode_kernel.norm_forward(norm.bfloat16(), torch.ones(2, 64, dtype=torch.bfloat16))  # gradients on
    assert taken == [(2, 64)] and out.shape == (2, 1, 64)


@needs_kernel
def test_the_kernels_run_on_the_threads_torch_is_given():
    """at::parallel_for's OpenMP pragma sits in a header: a build without -fopenmp runs every kernel on one thread,
    silently."""
    built, why = kernel()
    assert built is not None, why
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert built.threads_seen(8) == 2
    finally:
        torch.set_num_threads(before)


def attention_inputs(rows, heads, kv_heads, dim, angle_rows, seed):
    """q, k as LlamaAttention hands them to apply_rotary_pos_emb (a projection's output viewed [rows, 1, heads,
    dim] and transposed), and bf16 cos/sin [angle_rows, 1, dim] as its rotary module makes them."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, 1, heads * dim, generator=generator).mul(4).bfloat16().view(rows, 1, heads, dim)
    k = torch.randn(rows, 1, kv_heads * dim, generator=generator).mul(4).bfloat16().view(rows, 1, kv_heads, dim)
    angles = torch.rand(angle_rows, 1, dim // 2, generator=generator) * 3000
    angles = torch.cat([angles, angles], dim=-1)
    return q.transpose(1, 2), k.transpose(1, 2), angles.cos().bfloat16(), angles.sin().bfloat16()


@needs_kernel
@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "rows, heads, kv_heads, dim, angle_rows",
    [(1, 9, 3, 64, 1), (4, 9, 3, 64, 4), (3, 14, 2, 64, 1), (2, 12, 2, 128, 2)],
)
def test_the_rotary_kernel_is_transformers_rotary_embedding_bit_for_bit(
    architecture, rows, heads, kv_heads, dim, angle_rows
):
    import importlib

    modeling = importlib.import_module(f"transformers.models.{architecture}.modeling_{architecture}")
    rotary = kernel_function("rotary")
    q, k, cos, sin = attention_inputs(rows, heads, kv_heads, dim, angle_rows, seed=rows * dim + heads)
    with torch.inference_mode():
        expected = modeling.apply_rotary_pos_emb(q, k, cos, sin)
        got = rotary(q[:, :, 0], k[:, :, 0], cos[:, 0], sin[:, 0])
    for mine, theirs in zip(got, expected):
        assert mine.shape == theirs.shape and mine.dtype == torch.bfloat16 and torch.equal(mine, theirs)


def test_the_rotary_embedding_takes_the_kernel_only_for_a_decode_step(monkeypatch):
    from transformers.models.llama import modeling_llama

    taken = []

    class Recorded:
        def rotary(self, q, k, cos, sin):
            taken.append(tuple(q.shape))
            return q[:, :, None], k[:, :, None]

    original = modeling_llama.apply_rotary_pos_emb.forward
    monkeypatch.setattr(decode_kernel, "kernel", lambda: (Recorded(), ""))
    q, k, cos, sin = attention_inputs(2, 9, 3, 64, 2, seed=0)
    with torch.inference_mode():
        decode_kernel.rotary_forward(original, q, k, cos, sin)  # not inside a kernel-mode copy's forward
        with decode_kernel.inside_kernel_model():
            decode_kernel.rotary_forward(original, q, k, cos, sin)
            decode_kernel.rotary_forward(original, q.float(), k.float(), cos.float(), sin.float())  # fp32
            decode_kernel.rotary_forward(original, q, k, cos, sin, unsqueeze_dim=2)  # another layout
            long = torch.cat([q, q], 2), torch.cat([k, k], 2), torch.cat([cos, cos], 1), torch.cat([sin, sin], 1)
            decode_kernel.rotary_forward(original, *long)  # two positions: a prefill
    with decode_kernel.inside_kernel_model():
        decode_kernel.rotary_forward(original, q, k, cos, sin)  # gradients on
    assert taken == [(2, 9, 64)]


@needs_kernel
def test_installing_the_kernels_routes_the_architectures_rotary_embedding_once(tiny):
    from transformers.models.llama import modeling_llama

    model, _ = tiny
    first, second, plain = (copy.deepcopy(model).bfloat16() for _ in range(3))
    assert decode_kernel.install(first) == "" == decode_kernel.install(second)
    routed = modeling_llama.apply_rotary_pos_emb.forward
    assert isinstance(routed, functools.partial) and routed.func is decode_kernel.rotary_forward
    assert not isinstance(routed.args[0], functools.partial)  # wrapped once, around transformers' own
    seen = []  # inside which forwards the rotary embedding runs as a kernel-mode copy's

    def watched(*args, **kwargs):
        seen.append(getattr(decode_kernel._INSIDE, "model", False))
        return routed(*args, **kwargs)

    modeling_llama.apply_rotary_pos_emb.forward = watched
    try:
        with torch.inference_mode():
            for copy_ in (copy.deepcopy(first), plain):  # a deep copy keeps the mark, on itself
                copy_(input_ids=torch.tensor([[1, 2, 3]]))
    finally:
        modeling_llama.apply_rotary_pos_emb.forward = routed
    layers = model.config.num_hidden_layers
    assert seen == [True] * layers + [False] * layers
