"""Structured decoding: the bitmask maths on hand numbers, reports and actions always valid with the switches on
(tiny-random and the embedded model), the learner scoring constrained tokens as they were sampled, and nothing
changed with the switches off."""

import json
import math

import pytest
import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.envs.reply_grammar import NUMBER, ReplyFormat, action_constraint, answer_constraint, literal
from r3l.experience import Experience
from r3l.learner.batching import allowed_after, collate, collate_shared_prefix
from r3l.learner.learner import Learner
from r3l.reflection.report import parse_report
from r3l.reflection.report_schema import report_constraint
from r3l.rollout.constraints import (
    MASKED_LOGIT,
    Constrainer,
    MaskRecorder,
    TokenMasks,
    allowed_tokens,
    constrain_logits,
    stack_masks,
)
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator
from tests.conftest import run_cli

xgrammar = pytest.importorskip("xgrammar")


# --- pure maths on hand numbers -----------------------------------------------------------------------------
def test_allowed_tokens_unpacks_xgrammars_bit_layout():
    # word 0 allows tokens 0 and 2 (0b101); word 1 allows token 32 + 31 = 63 (the sign bit)
    bitmask = torch.tensor([[0b101, -(2**31)]], dtype=torch.int32)
    allowed = allowed_tokens(bitmask, 64)[0]
    assert allowed.nonzero().flatten().tolist() == [0, 2, 63]
    assert allowed_tokens(bitmask, 40)[0].nonzero().flatten().tolist() == [0, 2]


def test_allowed_tokens_agrees_with_xgrammars_own_kernel():
    generator = torch.Generator().manual_seed(0)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (5, 4), dtype=torch.int32, generator=generator)
    logits = torch.randn(5, 100, generator=generator)
    theirs = logits.clone()
    xgrammar.apply_token_bitmask_inplace(theirs, bitmask)
    assert torch.equal(torch.isfinite(theirs), allowed_tokens(bitmask, 100))


def test_constrained_logprob_is_the_logit_less_the_allowed_logsumexp():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]], requires_grad=True)
    table = torch.tensor([[0b0101]], dtype=torch.int32)  # tokens 0 and 2
    index = torch.tensor([0, -1])  # the second row is free
    masked = constrain_logits(logits, index, table)
    logprobs = torch.log_softmax(masked, dim=-1)
    assert logprobs[0, 2].item() == pytest.approx(3.0 - math.log(math.e**1 + math.e**3))
    assert logprobs[1, 2].item() == pytest.approx(3.0 - math.log(sum(math.e**k for k in (1, 2, 3, 4))))
    assert masked[0, 1].item() == pytest.approx(MASKED_LOGIT) and masked[0, 3].item() == pytest.approx(MASKED_LOGIT)
    logprobs[0, 2].backward()
    assert logits.grad[0, 1].item() == 0.0 and logits.grad[0, 3].item() == 0.0  # forbidden tokens get nothing
    p0 = math.e**1 / (math.e**1 + math.e**3)
    assert logits.grad[0, 0].item() == pytest.approx(-p0) and logits.grad[0, 2].item() == pytest.approx(p0)


def test_a_forced_token_has_logprob_zero_and_no_gradient():
    logits = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    logprobs = torch.log_softmax(constrain_logits(logits, torch.tensor([0]), torch.tensor([[0b010]])), dim=-1)
    assert logprobs[0, 1].item() == 0.0
    logprobs[0, 1].backward()
    assert logits.grad.abs().sum().item() == 0.0


def test_recorder_stores_each_distinct_row_once():
    recorder = MaskRecorder()
    a, b = torch.tensor([1, 0], dtype=torch.int32), torch.tensor([3, 0], dtype=torch.int32)
    for position, row in enumerate([a, b, a, a]):
        recorder.add(position, row)
    masks = recorder.masks()
    assert masks.positions == [0, 1, 2, 3] and masks.rows == [0, 1, 0, 0]
    assert masks.table.tolist() == [[1, 0], [3, 0]]
    assert masks.after(2).positions == [0, 1] and masks.after(2).rows == [0, 0]


def test_stack_masks_places_rows_at_their_batch_columns():
    first = TokenMasks([0, 1], [0, 1], torch.tensor([[1], [2]], dtype=torch.int32))
    second = TokenMasks([0], [0], torch.tensor([[4]], dtype=torch.int32))
    index, table = stack_masks([(0, 2, first), (1, -1, second)], (2, 5))  # second's position 0 falls off column -1
    assert index.tolist() == [[-1, -1, 0, 1, -1], [-1, -1, -1, -1, -1]]
    assert table.flatten().tolist() == [1, 2, 4]


def test_allowed_after_keeps_the_suffix_of_a_cut():
    masks = TokenMasks([0, 1, 2], [0, 0, 0], torch.ones((1, 1), dtype=torch.int32))
    assert [(start, m.positions) for start, m in allowed_after([(5, masks)], 6)] == [(0, [0, 1])]
    assert [(start, m.positions) for start, m in allowed_after([(5, masks)], 2)] == [(3, [0, 1, 2])]
    assert allowed_after([(5, masks)], 9) == []


def test_grammar_literals_escape_quotes_and_backslashes():
    assert literal('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert action_constraint([], ReplyFormat()) is None


# --- the grammars, followed by xgrammar ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def constrainer(tiny):
    model, tokenizer = tiny
    return Constrainer(tokenizer, model.config.vocab_size)


def follows(constrainer, constraint, text, tokenizer) -> bool:
    return constrainer.replay(constraint, tokenizer(text, add_special_tokens=False)["input_ids"])[1]


def test_grammars_admit_what_they_should_and_nothing_else(constrainer, tiny):
    tokenizer = tiny[1]
    action = action_constraint(["open door", 'take "key"'], ReplyFormat(think_chars=12))
    assert follows(constrainer, action, "<think>go in</think>\n<action>open door</action>", tokenizer)
    assert follows(constrainer, action, '<think></think><action>take "key"</action>', tokenizer)
    assert not follows(constrainer, action, "<think>go in</think><action>open window</action>", tokenizer)
    assert not follows(constrainer, action, "<think>" + "x" * 13 + "</think>", tokenizer)
    assert follows(constrainer, action, "<think>go in</think>\n\n<action>open door</action>", tokenizer)
    # no room for a model to spend its budget on blank lines between the two tags
    assert not follows(constrainer, action, "<think>go in</think>\n \n<action>open door</action>", tokenizer)
    answer = answer_constraint("answer", NUMBER, ReplyFormat(think_chars=None))
    assert follows(constrainer, answer, "so it is <answer>-12.5</answer>", tokenizer)
    assert not follows(constrainer, answer, "<answer>twelve</answer>", tokenizer)
    report = report_constraint(num_steps=3, max_chars=10)
    good = {
        "trajectory_summary": "a",
        "root_cause_analysis": "b",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "c",
        "retry_from_step": 2,
    }
    assert follows(constrainer, report, json.dumps(good, separators=(",", ":")), tokenizer)
    for bad in (
        {**good, "retry_from_step": 3},
        {**good, "trajectory_outcome": "meh"},
        {**good, "trajectory_summary": " "},
        {**good, "root_cause_analysis": "x" * 11},
    ):
        assert not follows(constrainer, report, json.dumps(bad, separators=(",", ":")), tokenizer)


# --- generation: always valid with the switch on, unchanged with it off ----------------------------------------
def test_tiny_random_reports_always_parse_and_score_as_sampled(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    prompt = tokenizer("Reflect on the episode.", add_special_tokens=False)["input_ids"]
    constraint = report_constraint(num_steps=4, max_chars=24)
    rows = generator.generate(
        [prompt], SamplingParams(temperature=1.0, max_new_tokens=200, seed=1), n=12, constraints=[constraint]
    )[0]
    for completion in rows:
        report = parse_report(completion.text, 4)
        assert len(report.trajectory_summary) <= 24 and completion.finish_reason == "stop"
        assert len(completion.allowed) == len(completion.tokens)
    assert generator.stats["constraint_breaks"] == 0
    experiences = [
        Experience(
            group="g",
            kind="base",
            tokens=prompt + c.tokens,
            loss_mask=[0] * len(prompt) + [1] * len(c.tokens),
            logprobs=[0.0] * len(prompt) + c.logprobs,
            reward=1.0,
            allowed=[(len(prompt), c.allowed)],
        )
        for c in rows
    ]
    learner = Learner(model, tokenizer, AlgorithmConfig(), TrainConfig(), temperature=1.0, autocast_bf16=False)
    for collated in (
        collate(experiences, tokenizer.pad_token_id),
        collate_shared_prefix(experiences, tokenizer.pad_token_id),
    ):
        with torch.no_grad():
            recomputed, _ = learner._logprobs(model, collated)
        mask = collated["loss_mask"] > 0
        assert (recomputed[mask] - collated["gen_logprobs"][mask]).abs().max().item() < 1e-4
    free = [Experience(**{**e.__dict__, "allowed": []}) for e in experiences]
    with torch.no_grad():
        unconstrained, _ = learner._logprobs(model, collate(free, tokenizer.pad_token_id))
        constrained, _ = learner._logprobs(model, collate(experiences, tokenizer.pad_token_id))
    mask = collate(free, tokenizer.pad_token_id)["loss_mask"] > 0
    assert (unconstrained[mask] < constrained[mask] - 1e-3).any()  # masking changes what is trained


def test_no_constraint_samples_exactly_as_before(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("a b", "c")]
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=4)
    plain = generator.generate(prompts, params, n=2)
    nones = generator.generate(prompts, params, n=2, constraints=[None, None])
    assert [[c.tokens for c in row] for row in plain] == [[c.tokens for c in row] for row in nones]
    assert all(c.allowed is None for row in nones for c in row)
    record = Experience(
        group="g",
        kind="base",
        tokens=prompts[0] + plain[0][0].tokens,
        loss_mask=[0] * 2 + [1] * 12,
        logprobs=[0.0] * 14,
        reward=0.0,
    )
    assert "allowed_index" not in collate([record], tokenizer.pad_token_id)


def test_mixed_batch_constrains_only_its_constrained_prompts(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("a b", "c")]
    params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=4)
    answer = answer_constraint("answer", NUMBER, ReplyFormat(think_chars=8))
    mixed = generator.generate(prompts, params, constraints=[None, answer])
    alone = generator.generate(prompts[:1], params)
    assert mixed[0][0].tokens == alone[0][0].tokens  # the free row draws what it draws alone
    assert mixed[1][0].text.endswith("</answer>") and "<answer>" in mixed[1][0].text


@pytest.fixture(scope="module")
def embedded():
    from r3l.models import load_policy

    return load_policy("smollm2-135m-instruct")


def test_embedded_model_reports_always_parse(embedded):
    from r3l.reflection.guidance import load_reflect_template, reflection_prompt
    from r3l.rollout.conversation import TokenConversation

    model, tokenizer = embedded
    generator = HFGenerator(model, tokenizer)
    log = [("You are in the kitchen.", "look for the coin", "go east"), ("You are in the hall.", None, "take coin")]
    text = reflection_prompt(log, "The episode ran out of turns.", "Find the coin.", load_reflect_template(None))
    prompt = TokenConversation.start(tokenizer, [{"role": "user", "content": text}]).tokens
    rows = generator.generate(
        [prompt],
        SamplingParams(temperature=1.0, max_new_tokens=200, seed=0),
        n=8,
        constraints=[report_constraint(num_steps=2, max_chars=60)],
    )[0]
    assert [
        parse_report(c.text, 2).trajectory_outcome in ("success", "success_but_inefficient", "failure") for c in rows
    ] == [True] * 8


# --- through the runner and the CLI ------------------------------------------------------------------------
def test_embedded_model_plays_only_admissible_actions_on_textworld_express(embedded):
    from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart
    from r3l.envs import make

    model, tokenizer = embedded
    make_env = lambda: make("textworld_express", games=["coin"], max_steps=4, train_size=4, test_size=2)  # noqa: E731
    tasks = list(make_env().tasks("train"))[:2]
    limits = AgentLimits(max_turns=4, structured=ReplyFormat(think_chars=40), env_workers=2)
    runner = EpisodeRunner(make_env, HFGenerator(model, tokenizer), tokenizer, limits=limits)
    try:
        episodes = runner.run(
            [EpisodeStart(task) for task in tasks for _ in range(2)],
            SamplingParams(temperature=1.0, max_new_tokens=72, seed=0, stop=("</action>",)),
        )
    finally:
        runner.close()
    steps = [step for episode in episodes for step in episode.steps]
    assert steps and all(step.action is not None and step.admissible for step in steps)
    assert {episode.termination for episode in episodes} <= {"done", "max_turns", "repeated_action"}
    assert all(episode.conversation.allowed for episode in episodes)


def test_r3l_train_step_with_both_switches_has_only_valid_reports_and_actions(tmp_path):
    result = run_cli(
        "train",
        "model=tiny-random",
        "algorithm=r3l",
        "env=textworld_express",
        "env.args.games=[coin]",
        "env.args.max_steps=3",
        "agent.max_turns=3",
        "sampling.group_size=4",
        "sampling.max_new_tokens=48",
        "structured.replies=true",
        "structured.reports=true",
        "structured.think_chars=16",
        "structured.report_field_chars=16",
        "algorithm.strategy_args.reflection_max_new_tokens=160",
        "train.steps=1",
        "train.tasks_per_step=2",
        "eval.size=0",
        "generator.dtype=float32",
        "logging.tensorboard=false",
        "logging.progress=false",
        f"run.dir={tmp_path}",
        "run.name=structured",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = [json.loads(line) for line in (tmp_path / "structured" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "valid_report_rate" in m)
    assert step["report_count"] > 0 and step["valid_report_rate"] == 1.0
    assert step["termination/format_error"] == 0.0 and step["termination/inadmissible"] == 0.0


def test_budgets_keep_structured_replies_and_reports_whole():
    from r3l.build import think_chars
    from r3l.config import load_config
    from r3l.reflection.report_schema import fitting_field_chars

    assert fitting_field_chars(300, 4096) == 300
    assert fitting_field_chars(300, 256) == (256 - 64) // 4 == 48
    assert fitting_field_chars(300, 10) == 1
    assert think_chars(load_config(None, ["sampling.max_new_tokens=96"])) == 48
    assert think_chars(load_config(None, ["sampling.max_new_tokens=96", "eval.max_new_tokens=40"])) == 20
    assert think_chars(load_config(None, ["structured.think_chars=null"])) is None
    assert think_chars(load_config(None, ["structured.think_chars=7"])) == 7
