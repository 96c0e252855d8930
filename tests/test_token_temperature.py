"""Every trained token is scored at the temperature it was sampled at (a reflection at reflection_temperature
inside an attempt at sampling.temperature), and the learner-vs-sampler log-prob gap is logged per kind of token
(base, reflection, retry ...), so a temperature or weight-sync mismatch shows in the kind it hits."""

import copy
import json

import pytest
import torch

from r3l.algorithms import entropy_from_logits, token_logprobs
from r3l.algorithms.rollout_correction import logprob_gap_warning, mismatch_metrics
from r3l.algorithms.tempered import tempered_entropy, tempered_token_logprobs
from r3l.build import build_parts
from r3l.config import AlgorithmConfig, TrainConfig, load_config
from r3l.experience import KINDS, Experience, Segment
from r3l.learner.batching import collate, collate_shared_prefix
from r3l.learner.learner import Learner


def test_tempered_rows_score_as_each_row_alone_at_its_temperature():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [3.0, -2.0, 1.0]])
    tokens = torch.tensor([0, 1, 2])
    temperatures = torch.tensor([1.0, 0.5, 2.0])
    got = tempered_token_logprobs(logits, tokens, temperatures, max_chunk_elements=4)  # one row a chunk
    for row, temperature in enumerate(temperatures.tolist()):
        alone = token_logprobs(logits[row][None, None], tokens[row][None, None], temperature)[0, 0]
        assert got[row].item() == pytest.approx(alone.item(), abs=1e-6)
        entropy = entropy_from_logits(logits[row][None, None], temperature)[0, 0]
        assert tempered_entropy(logits, temperatures)[row].item() == pytest.approx(entropy.item(), abs=1e-6)
    # by hand, row 1 at 0.5: logits 1, 3, 0 -> log p(token 1) = 3 - log(e + e^3 + 1)
    assert got[1].item() == pytest.approx(3 - torch.tensor([1.0, 3.0, 0.0]).exp().sum().log().item(), abs=1e-6)


def test_segments_round_trip_and_old_records_have_none():
    experience = Experience(
        "g", "reflection", [1, 2, 3, 4, 5], [0, 1, 1, 0, 1], [0.0, -1.0, -2.0, 0.0, -0.5], 1.0,
        segments=[Segment(1, 3, "reflection", 0.7), Segment(4, 5, "retry", 1.0)],
    )  # fmt: skip
    record = json.loads(json.dumps(experience.to_dict()))
    assert record["segments"][0] == {"start": 1, "end": 3, "kind": "reflection", "temperature": 0.7}
    assert Experience.from_dict(record) == experience
    record.pop("segments")  # a rollout file written before segments existed
    assert Experience.from_dict(record).segments == []
    with pytest.raises(ValueError, match="past"):
        Experience("g", "base", [1, 2], [0, 1], [0.0, 0.0], 0.0, segments=[Segment(0, 3, "base", 1.0)])
    with pytest.raises(ValueError, match="kind"):
        Segment(0, 1, "thought", 1.0)
    assert Segment(0, 1, "reflection", 0.0).scoring_temperature == 1.0  # greedy tokens are scored untempered


def test_collate_carries_each_target_kind_and_temperature():
    tagged = Experience(
        "g", "reflection", [1, 2, 3, 4, 5], [0, 1, 1, 0, 1], [0.0] * 5, 1.0,
        segments=[Segment(1, 3, "reflection", 0.7), Segment(4, 5, "retry", 1.0)],
    )  # fmt: skip
    plain = Experience("g", "base", [1, 2, 6], [0, 1, 1], [0.0] * 3, 0.0)
    batch = collate([tagged, plain], pad_id=0, temperature=1.0)
    code = {kind: KINDS.index(kind) for kind in KINDS}
    # target column t scores token t + 1
    assert batch["token_kinds"].tolist() == [
        [code["reflection"], code["reflection"], code["reflection"], code["retry"]],
        [code["base"], code["base"], code["base"], code["base"]],
    ]
    assert torch.allclose(batch["temperatures"], torch.tensor([[0.7, 0.7, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    assert "temperatures" not in collate([plain], pad_id=0, temperature=1.0)  # one temperature: the scalar path
    # a shared prefix cuts the segments with the tokens
    longer = Experience(
        "g", "reflection", [1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1], [0.0] * 6, 1.0,
        segments=[Segment(2, 4, "reflection", 0.7), Segment(5, 6, "retry", 1.0)],
    )  # fmt: skip
    shared = collate_shared_prefix([longer, copy.deepcopy(longer)], pad_id=0, temperature=1.0)
    assert shared["prefix_ids"].tolist() == [[1]]  # the suffix starts at token 1: its targets are tokens 2-5
    assert torch.allclose(shared["temperatures"][0], torch.tensor([0.7, 0.7, 1.0, 1.0]))
    assert shared["token_kinds"][0].tolist() == [code["reflection"]] * 3 + [code["retry"]]


def make_r3_parts(tmp_path):
    config = load_config(
        None,
        [
            "model=tiny-random",
            "generator=scripted",
            "generator.dtype=float32",
            "model.autocast_bf16=false",
            "algorithm=r3",
            "env=countdown",
            "sampling.group_size=2",
            "sampling.temperature=1.0",
            "algorithm.strategy_args.reflection_temperature=0.7",
            "algorithm.strategy_args.reflection_max_new_tokens=24",
            "algorithm.strategy_args.max_queries=4",
            "algorithm.strategy_args.train_second_attempt=true",
            f"run.dir={tmp_path}",
        ],
    )
    return config, build_parts(config)


def test_an_r3_reflection_sampled_at_07_scores_at_07_on_the_first_step(tmp_path):
    config, parts = make_r3_parts(tmp_path)
    strategy = parts.strategy
    tasks = strategy.training_tasks(list(parts.make_env().tasks("train")), None, limit=1)
    experiences, _ = strategy.explore(tasks[:1], step=0)
    for experience in experiences:  # R3's own code path records what each span was sampled as, and at what
        reflection, second = experience.segments
        assert (reflection.kind, reflection.temperature) == ("reflection", 0.7)
        assert [reflection.start, reflection.end] == experience.meta["reflection_span"]
        assert (second.kind, second.temperature) == ("retry", 1.0)
        experience.advantage = 1.0
    learner = Learner(
        copy.deepcopy(parts.model),
        parts.tokenizer,
        AlgorithmConfig(policy_loss="ppo_clip"),
        TrainConfig(lr=1e-3),
        temperature=config.sampling.temperature,
        autocast_bf16=False,
    )
    ratios = []

    def observed(logprobs, old, advantages, mask, **kwargs):  # the real loss, its ratio recorded
        ratios.append(((logprobs - old).exp().detach(), mask.clone()))
        return loss_fn(logprobs, old, advantages, mask, **kwargs)

    loss_fn, learner.loss_fn = learner.loss_fn, observed
    # the generator's log-probs are the old policy (as for a stale batch): the ratio is learner over sampler
    metrics = learner.update(experiences, behaviour_logprobs=True)
    assert ratios
    for ratio, mask in ratios:
        trained = ratio[mask > 0]
        assert torch.allclose(trained, torch.ones_like(trained), atol=1e-4), trained
    assert metrics["generator_logprob_gap/reflection"] < 1e-4 and metrics["generator_logprob_gap/retry"] < 1e-4
    assert metrics["generator_logprob_gap_max/reflection"] < 1e-3
    assert logprob_gap_warning(metrics) is None


def test_an_r3l_reflection_sft_sample_carries_its_temperature(tmp_path):
    config = load_config(
        None,
        [
            "model=tiny-random",
            "generator=scripted",
            "algorithm=r3l",
            "env=textworld_express",
            "sampling.group_size=4",
            "sampling.max_new_tokens=48",
            "algorithm.strategy_args.reflection_temperature=0.7",
            "algorithm.strategy_args.reflection_max_new_tokens=256",
            f"run.dir={tmp_path}",
        ],
    )
    parts = build_parts(config)
    tasks = list(parts.make_env().tasks("train"))[:2]
    experiences, _ = parts.strategy.explore(tasks, step=0)
    reflections = [e for e in experiences if e.meta.get("sft_of") in ("reflection", "success_reflection")]
    assert reflections, [e.meta.get("sft_of") for e in experiences]
    for experience in reflections:
        (segment,) = experience.segments
        assert (segment.kind, segment.temperature) == ("reflection", 0.7)
        trained = [i for i, m in enumerate(experience.loss_mask) if m]
        assert trained and segment.start <= trained[0] and trained[-1] < segment.end
    assert all(not e.segments for e in experiences if e.kind in ("base", "retry"))


def sampled_at(model, tokens: list[int], temperature: float) -> list[float]:
    """The log-probs a sampler at `temperature` records for `tokens` (0 for the first, which is not sampled)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1]
        return [0.0, *token_logprobs(logits[None], torch.tensor([tokens[1:]]), temperature)[0].tolist()]


def test_a_forged_reflection_mismatch_shows_in_the_reflection_gap_only(tiny):
    model, tokenizer = tiny
    policy = copy.deepcopy(model)
    tokens = [1, 9690, 198, 40, 41, 42, 7, 8, 9, 10, 11, 12, 13]
    honest = sampled_at(policy, tokens, 1.0)
    forged = sampled_at(policy, tokens, 0.5)  # recorded at 0.5, though the record says 1.0
    # prompt 0-5, reflection 6-9 (forged), second attempt 9-13
    logprobs = honest[:6] + forged[6:9] + honest[9:]
    r3 = Experience(
        "g", "reflection", tokens, [0] * 6 + [1] * 7, logprobs, 1.0, advantage=1.0,
        segments=[Segment(6, 9, "reflection", 1.0), Segment(9, 13, "retry", 1.0)],
    )  # fmt: skip
    base = Experience("g", "base", tokens, [0] * 6 + [1] * 7, honest, 0.0, advantage=-1.0)
    learner = Learner(policy, tokenizer, AlgorithmConfig(), TrainConfig(lr=1e-6), temperature=1.0, autocast_bf16=False)
    metrics = learner.update([r3, base])
    assert metrics["generator_logprob_gap/reflection"] > 0.05
    assert metrics["generator_logprob_gap/retry"] < 1e-4 and metrics["generator_logprob_gap/base"] < 1e-4
    assert metrics["generator_logprob_gap_max/reflection"] >= metrics["generator_logprob_gap/reflection"]
    warning = logprob_gap_warning(metrics)
    assert warning is not None and "reflection tokens" in warning


def test_per_kind_gap_metrics_from_sums():
    sums = {"mismatch:tokens": 4.0, "mismatch:gap": 0.4, "mismatch:reflection/tokens": 2.0}
    sums |= {"mismatch:reflection/gap": 0.4, "mismatch:base/tokens": 2.0, "mismatch:base/gap": 0.0}
    sums |= {"mismatch:sft/tokens": 0.0, "mismatch:sft/gap": 0.0}
    metrics = mismatch_metrics(sums)
    assert metrics["generator_logprob_gap"] == pytest.approx(0.1)
    assert metrics["generator_logprob_gap/reflection"] == pytest.approx(0.2)
    assert metrics["generator_logprob_gap/base"] == 0.0 and "generator_logprob_gap/sft" not in metrics
    assert sums == {}


def test_gap_warning_trips_on_a_high_or_outlying_kind_only():
    assert logprob_gap_warning({"generator_logprob_gap/base": 0.01, "generator_logprob_gap/retry": 0.012}) is None
    assert "reflection" in logprob_gap_warning({"generator_logprob_gap/reflection": 0.2})
    outlier = logprob_gap_warning({"generator_logprob_gap/base": 0.002, "generator_logprob_gap/reflection": 0.05})
    assert outlier is not None and "reflection tokens 0.05" in outlier and "base 0.002" in outlier
    assert logprob_gap_warning({"generator_logprob_gap/base": 0.002, "generator_logprob_gap/retry": 0.015}) is None
