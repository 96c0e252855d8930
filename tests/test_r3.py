"""R3 end to end with the scripted generator (real tokenizer and model, scripted text): failure set,
reflection-only masks, binary second-attempt rewards, groups, two-attempt evaluation."""

import json
from pathlib import Path

import pytest

from r3l.config import load_config
from r3l.envs import make
from r3l.errors import UserError
from r3l.failure_set import build_failure_set
from r3l.reflection.prompts import ReflectionPrompts
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator, countdown_solution
from tests.conftest import run_cli


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def check_r3_record(record, train_second_attempt=False):
    _first, reflection, second = record["turn_spans"]
    mask = record["loss_mask"]
    assert record["kind"] == "reflection"
    assert record["meta"]["reflection_span"] == list(reflection)
    assert all(m == 1 for m in mask[reflection[0] : reflection[1]])
    assert all(m == int(train_second_attempt) for m in mask[second[0] : second[1]])
    outside = mask[: reflection[0]] + mask[reflection[1] : second[0]] + mask[second[1] :]
    assert not any(outside)  # prompt, first attempt and instructions are never trained
    assert record["reward"] == (1.0 if record["meta"]["second_attempt_success"] else 0.0)
    assert all(lp < 0 for lp in record["logprobs"][reflection[0] : reflection[1]])


def test_rollout_line_shows_the_r3_structure(tmp_path):
    result = run_cli(
        "rollout",
        "model=tiny-random",
        "generator=scripted",
        "algorithm=r3",
        "env=countdown",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    dumped = records(tmp_path / "out.jsonl")
    groups = {}
    for record in dumped:
        check_r3_record(record)
        groups.setdefault(record["group"], []).append(record)
    assert len(groups) == 2 and all(len(g) == 8 for g in groups.values())  # G reflections per failed attempt
    for members in groups.values():
        assert len({json.dumps(m["meta"]["first_attempt"]) for m in members}) == 1  # one failure per group
        assert abs(sum(m["advantage"] for m in members)) < 1e-5
    assert {r["meta"]["second_attempt_success"] for r in dumped} == {True, False}
    from r3l.models import load_policy

    conversation = load_policy("tiny-random")[1].decode(dumped[0]["tokens"])
    first_turn, retry_turn = conversation.split("Now try again, using your reflection.")
    task = first_turn.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    assert "create an equation" in task and task in retry_turn  # the second try is asked as the first was


def test_r3_training_dumps_reflection_only_masks_and_the_table(tmp_path):
    result = run_cli(
        "train",
        "model=tiny-random",
        "generator=scripted",
        "algorithm=r3",
        "env=countdown",
        "sampling.group_size=4",
        "train.steps=2",
        "train.tasks_per_step=2",
        "eval.size=4",
        "eval.attempts=2",
        "algorithm.strategy_args.max_queries=8",
        "algorithm.strategy_args.train_second_attempt=true",
        "logging.tensorboard=false",
        f"run.dir={tmp_path}",
        "run.name=r3",
        "--dump-experiences",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run = tmp_path / "r3"
    for step in (1, 2):
        for record in records(run / "experiences" / f"step_{step:06d}.jsonl"):
            check_r3_record(record, train_second_attempt=True)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step_one = next(m for m in metrics if m["step"] == 1 and "loss" in m)
    for key in ("second_try_success", "reflection_length", "zero_variance_groups", "failure_set/kept"):
        assert key in step_one
    table = (run / "r3_table.md").read_text()
    assert "untrained 1st try" in table and "trained 2nd try" in table
    assert "untrained 2nd try after the verdict alone (control)" in table
    assert (run / "r3_table.csv").read_text().count("\n") == 2
    # R3's failure set is a cost of the run: logged before the first step (first attempts generated, seconds)
    setup = next(m for m in metrics if "setup_generated_tokens" in m)
    assert setup["step"] == 0 and setup["setup_generated_tokens"] > 0 and setup["setup_seconds"] > 0
    # the control: the same failures asked again after the verdict alone, no reflection between
    after = json.loads((run / "eval_after.json").read_text())
    failures = [s for s in after["samples"] if not s["first_success"]]
    assert failures and all("verdict_only_attempt" in s and "reflection" in s for s in failures)
    assert all("verdict_only_attempt" not in s for s in after["samples"] if s["first_success"])
    control = after["second_try_verdict_only"]
    assert control["successes"] == sum(s["first_success"] or s["verdict_only_success"] for s in after["samples"])
    assert {"format_missing"} <= set(control) and "format_missing" in after["first_try"]


def test_failure_set_counts_and_resumes(tiny, tmp_path):
    model, tokenizer = tiny
    make_env = lambda: make("arithmetic", max_terms=2, max_digits=1, train_size=12, test_size=4)  # noqa: E731
    env = make_env()
    generator = ScriptedGenerator(model, tokenizer, first_success_rate=0.7)
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)
    path = tmp_path / "failures.jsonl"
    lines: list[str] = []
    build = lambda max_queries: build_failure_set(  # noqa: E731
        env.tasks("train"),
        make_env,
        generator,
        tokenizer,
        params,
        PromptFormat(),
        max_samples=4,
        round_size=2,
        queries_per_batch=3,
        max_queries=max_queries,
        path=path,
        report=lines.append,
    )
    partial = build(6)
    assert partial.tried == 6 == partial.solved + len(partial.tasks)
    assert lines[0].startswith("failure set: 3 of 6 queries tried, ") and lines[1].startswith("failure set: 6 of 6")
    full = build(12)  # resumes: the first six come from the file
    assert full.tried == 12 == full.solved + len(full.tasks)
    assert len(path.read_text().splitlines()) == 12
    assert full.solved > 0 and full.tasks
    for task in full.tasks:
        attempt = task.data["first_attempt"]
        assert not env.verify(task, attempt["text"]).success and len(attempt["tokens"]) == len(attempt["logprobs"])


def test_reflection_prompts(tmp_path):
    prompts = ReflectionPrompts.load(include_feedback=True)
    assert "uses 7 twice" in prompts.reflect_message("uses 7 twice")
    assert "uses 7 twice" not in ReflectionPrompts.load().reflect_message("uses 7 twice")
    custom = tmp_path / "reflect.txt"
    custom.write_text("Think about it.{feedback}")
    assert ReflectionPrompts.load(str(custom), include_feedback=True).reflect_message("x") == "Think about it. x"
    with pytest.raises(UserError, match="does not exist"):
        ReflectionPrompts.load(str(tmp_path / "missing.txt"))
    # the control's message: the verdict (with the feedback where the reflection would get it), then the request
    # to answer again asked as the retry after a reflection asks it, with no reflection between
    control = prompts.verdict_retry_message("uses 7 twice", "Make 24 from 3 7 7 8.", "Answer in <answer> tags.")
    assert control == (
        "Your answer was not correct. uses 7 twice\nTry again. Answer in <answer> tags.\n\nMake 24 from 3 7 7 8."
    )
    assert "uses 7" not in ReflectionPrompts.load().verdict_retry_message("uses 7 twice", "task")


def test_the_retry_message_restates_the_format_and_the_task():
    prompts = ReflectionPrompts.load()
    assert prompts.retry_message("Calculate 2 + 3.", "Answer inside <answer></answer> tags.") == (
        "Now try again, using your reflection. Answer inside <answer></answer> tags.\n\nCalculate 2 + 3."
    )
    assert prompts.retry_message("Calculate 2 + 3.") == "Now try again, using your reflection.\n\nCalculate 2 + 3."
    assert "Do not give the answer yet" in prompts.reflect_message("")


def test_unknown_strategy_setting_is_a_one_line_error():
    from r3l.explore import ExploreContext, make_strategy

    config = load_config(None, ["algorithm=r3", "algorithm.strategy_args.max_sample=3"])
    with pytest.raises(UserError, match="max_sample"):
        make_strategy(
            "r3",
            ExploreContext(make_env=None, generator=None, tokenizer=None, sampling=SamplingParams(), group_size=2),
            **config.algorithm.strategy_args,
        )


def test_countdown_solver_finds_a_valid_equation():
    expression = countdown_solution([3, 5, 7], 22)
    env = make("countdown", train_size=1, test_size=1)
    assert expression is not None
    task = env.tasks("test")[0]
    assert env.verify(
        task, f"<answer>{countdown_solution(task.answer['numbers'], task.answer['target'])}</answer>"
    ).success


def test_reflections_are_asked_alike_in_training_and_evaluation_unless_set_apart():
    from r3l.build import two_attempts

    assert two_attempts(load_config(None, ["algorithm=r3"])) is None  # one attempt: no reflection at all
    trained = load_config(
        None,
        [
            "algorithm=r3",
            "eval.attempts=2",
            "algorithm.strategy_args.reflection_temperature=0.7",
            "algorithm.strategy_args.reflection_max_new_tokens=96",
        ],
    )
    settings = two_attempts(trained)
    assert (settings.reflection_max_new_tokens, settings.reflection_temperature) == (96, 0.7)
    apart = load_config(
        None,
        [
            "algorithm=r3",
            "eval.attempts=2",
            "algorithm.strategy_args.reflection_temperature=0.7",
            "eval.reflection_max_new_tokens=40",
            "eval.reflection_temperature=0",
        ],
    )
    settings = two_attempts(apart)
    assert (settings.reflection_max_new_tokens, settings.reflection_temperature) == (40, 0.0)
    params = settings.reflect_params(SamplingParams(temperature=0.4, max_new_tokens=8))
    assert (params.temperature, params.max_new_tokens) == (0.0, 40)
    default = two_attempts(load_config(None, ["algorithm=grpo", "eval.attempts=2"]))
    assert (default.reflection_max_new_tokens, default.reflection_temperature) == (128, None)
    assert default.reflect_params(SamplingParams(temperature=0.4)).temperature == 0.4  # the evaluation's own
