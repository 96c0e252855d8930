"""The HF generator's static-cache decode paths (generator.decode=static|compiled) against the dynamic loop."""

import pytest
import torch

from r3l.config import load_config
from r3l.errors import UserError
from r3l.models.decode_kernel import cpu_has_avx512_bf16
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator
from r3l.rollout.static_decode import padded_cache_length, padded_rows
from tests.test_generator import learner_recomputation


def prompts(tokenizer, questions):
    return [encode_prompt(tokenizer, PromptFormat().messages(q)) for q in questions]


QUESTIONS = ["short", "a much longer question about many different things", "what is 2+2?"]


def test_padded_shapes_are_powers_of_two():
    assert [padded_rows(r) for r in (1, 2, 3, 5, 8, 9, 64)] == [1, 2, 4, 8, 8, 16, 64]
    assert [padded_cache_length(t) for t in (1, 128, 129, 300, 1024, 1025)] == [128, 128, 256, 512, 1024, 2048]


def outputs(generator, batch, params, n):
    return [[(c.tokens, c.finish_reason) for c in row] for row in generator.generate(batch, params, n=n)]


@pytest.mark.parametrize("mode", ["static", "compiled"])
def test_greedy_static_decoding_equals_the_dynamic_loop(tiny, mode):
    """Same tokens, stop reasons and log-probabilities, with unequal prompts, n > 1, a stop string and a batch
    that is not a power of two (spare rows must not leak into real ones)."""
    model, tokenizer = tiny
    batch = prompts(tokenizer, QUESTIONS)
    dynamic = HFGenerator(model, tokenizer, dtype=torch.float32)
    free = dynamic.generate(batch[:1], SamplingParams(temperature=0.0, max_new_tokens=10))[0][0]
    params = SamplingParams(temperature=0.0, max_new_tokens=10, stop=(tokenizer.decode(free.tokens[3:5]),))
    static = HFGenerator(model, tokenizer, dtype=torch.float32, decode=mode)
    expected = dynamic.generate(batch, params, n=2)
    got = static.generate(batch, params, n=2)
    assert [[(c.tokens, c.finish_reason) for c in row] for row in got] == [
        [(c.tokens, c.finish_reason) for c in row] for row in expected
    ]
    assert any(c.finish_reason == "stop" for row in got for c in row)
    for mine, theirs in zip([c for row in got for c in row], [c for row in expected for c in row]):
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)
    assert (
        static.stats["decode_steps"] > 0
        and static.stats["decode_rows"] == sum(len(c.tokens) for row in got for c in row) - 6
    )  # the first token of each row comes from the prefill


def test_static_sampling_is_seeded_and_the_learner_recomputes_its_logprobs(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32, decode="static")
    batch = prompts(tokenizer, QUESTIONS[:2])
    params = SamplingParams(temperature=0.7, max_new_tokens=10, seed=5)
    assert outputs(generator, batch, params, 3) == outputs(generator, batch, params, 3)
    completion = generator.generate(batch[:1], params)[0][0]
    recomputed, generated, _ = learner_recomputation(model, tokenizer, batch[0], completion, 0.7)
    assert torch.allclose(recomputed, generated, atol=1e-4)


def test_static_decoding_follows_weight_syncs(tiny):
    model, tokenizer = tiny
    batch = prompts(tokenizer, QUESTIONS[:2])
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    static, dynamic = (HFGenerator(model, tokenizer, dtype=torch.float32, decode=m) for m in ("static", "dynamic"))
    changed = {name: tensor + 0.05 * torch.randn_like(tensor) for name, tensor in model.state_dict().items()}
    for generator in (static, dynamic):
        generator.sync_weights(changed)
    assert outputs(static, batch, params, 1) == outputs(dynamic, batch, params, 1)


def test_the_embedded_model_decodes_the_same_with_a_static_cache():
    from r3l.models import load_policy

    model, tokenizer = load_policy("smollm2-135m-instruct")
    batch = prompts(tokenizer, QUESTIONS)
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    expected = outputs(HFGenerator(model, tokenizer, dtype=torch.float32), batch, params, 1)
    assert outputs(HFGenerator(model, tokenizer, dtype=torch.float32, decode="static"), batch, params, 1) == expected


def test_a_setting_of_another_generator_is_refused(tiny):
    from r3l.build import make_generator

    model, tokenizer = tiny
    for overrides, name in (
        (["generator=vllm", "generator.decode=static"], "decode"),
        (["generator.engine_args={enforce_eager: true}"], "engine_args"),
        (["generator.sleep=true"], "sleep"),
    ):
        config = load_config(None, overrides)
        with pytest.raises(UserError, match=f"has no setting generator.{name}"):
            make_generator(config, model, tokenizer)


def test_vllm_pure_helpers():
    from r3l.rollout.vllm import engine_decode_counters, sleep_wanted

    # prompts of 3, 5 and 2 tokens, completions of 3, 0 and 1: the prefill makes each first token; then row 1
    # decodes two tokens attending to 4 and 5 positions
    assert engine_decode_counters([3, 5, 2], [3, 0, 1]) == {
        "decode_steps": 2,
        "decode_rows": 2,
        "decode_kv_positions": 9,
        "prefill_positions": 10,
    }
    assert engine_decode_counters([], []) == {
        "decode_steps": 0,
        "decode_rows": 0,
        "decode_kv_positions": 0,
        "prefill_positions": 0,
    }
    assert [sleep_wanted(s, a) for s, a in (("auto", True), ("auto", False), (False, True), (True, True))] == [
        True,
        False,
        False,
        True,
    ]
    with pytest.raises(UserError, match="generator.sleep=true"):
        sleep_wanted(True, False)


def test_a_lora_rank_vllm_does_not_take_is_served_at_the_next_one_it_does():
    from r3l.rollout.vllm import FALLBACK_LORA_RANKS, served_lora_rank, vllm_lora_ranks

    assert [served_lora_rank(r, FALLBACK_LORA_RANKS) for r in (1, 4, 8, 12, 16, 300)] == [1, 8, 8, 16, 16, 320]
    with pytest.raises(UserError, match="model.lora.r=600 is above the largest LoRA rank vLLM serves .512."):
        served_lora_rank(600, FALLBACK_LORA_RANKS)
    assert 8 in vllm_lora_ranks() and 16 in vllm_lora_ranks()  # the installed vLLM's, or the fallback without it


def test_static_caches_are_kept_for_the_recent_shapes_only(tiny):
    """Issue 35: a cache per padded shape kept forever could hold GBs each on a GPU; the least recently used goes,
    and a shape asked for again decodes as before."""
    from r3l.rollout.static_decode import CACHES_KEPT

    model, tokenizer = tiny
    static, dynamic = (HFGenerator(model, tokenizer, dtype=torch.float32, decode=m) for m in ("static", "dynamic"))
    batch = prompts(tokenizer, QUESTIONS)
    shapes = [(batch[:1], 1), (batch, 1), (batch, 3), (batch[:1], 1)]  # rows 1, 4, 16, then 1 again
    params = SamplingParams(temperature=0.0, max_new_tokens=5)
    for prompts_, n in shapes:
        assert outputs(static, prompts_, params, n) == outputs(dynamic, prompts_, params, n)
        assert len(static.static._caches) <= CACHES_KEPT
    assert list(static.static._caches) == [(16, 128), (1, 128)]


@pytest.mark.skipif(not cpu_has_avx512_bf16(), reason="kernel mode needs a CPU with AVX512-BF16")
def test_a_kernel_mode_copy_compiles_whole_with_its_rotary_embedding_routed(tiny):
    """Kernel mode routes the architecture's rotary embedding (a function every Llama model of the process calls)
    and marks its copy's forward: torch.compile (fullgraph) traces both through transformers' own paths, for the
    kernel-mode copy and for another model compiled in the same process, and decodes as the same copy uncompiled
    does without the kernels' roundings: greedy tokens of the tiny model equal the SDPA loop's."""
    model, tokenizer = tiny
    batch = prompts(tokenizer, QUESTIONS)
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    kernel_copy = HFGenerator(model, tokenizer, dtype=torch.bfloat16, decode="compiled", decode_attention="kernel")
    assert kernel_copy.decode_kernel
    plain_copy = HFGenerator(model, tokenizer, dtype=torch.bfloat16, decode="compiled")
    sdpa = HFGenerator(model, tokenizer, dtype=torch.bfloat16)
    expected = outputs(sdpa, batch, params, 1)
    assert outputs(kernel_copy, batch, params, 1) == expected == outputs(plain_copy, batch, params, 1)
