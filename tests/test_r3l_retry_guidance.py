"""R3L's `retry_guidance` switch (the control "is it the words or the restart?"): with it off a retry restarts from
the same reported pivot with no guidance text before the observation there; with it on (the default) the guidance
stands there. FrozenLake with the scripted generator (real tokenizer, scripted reports with a pivot), the retries
stored as generated (distill_guidance off) so the tokens show what the model saw."""

import json

import pytest

from r3l.models import load_policy
from tests.conftest import run_cli

pytest.importorskip("gymnasium")

ARGS = [
    "model=tiny-random",
    "generator=scripted",
    "algorithm=r3l",
    "sampling.group_size=4",
    "env=gym:FrozenLake-v1",
    "env.args.max_steps=8",
    "run.seed=3",
    "algorithm.strategy_args.distill_guidance=false",
    "--tasks",
    "3",
    "--no-show",
    "--dump",
    "out.jsonl",
]


def retries_and_bases(tmp_path, guidance: bool, *more: str):
    result = run_cli(
        "rollout",
        *ARGS,
        f"algorithm.strategy_args.retry_guidance={str(guidance).lower()}",
        *more,
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    dump = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    bases = {r["meta"]["run"]: r for r in dump if r["kind"] == "base"}
    return [(r, bases[r["meta"]["run"]]) for r in dump if r["kind"] == "retry"]


def test_without_guidance_a_retry_restarts_from_the_same_pivot_with_nothing_added(tmp_path):
    tokenizer = load_policy("tiny-random")[1]
    guided = retries_and_bases(tmp_path, guidance=True)
    plain = retries_and_bases(tmp_path, guidance=False)
    assert guided and len(plain) == len(guided)  # the same bases and reports: the scripted backend is seeded
    for (with_words, base), (without, same_base) in zip(guided, plain):
        assert base["tokens"] == same_base["tokens"] and with_words["pivot"] == without["pivot"]
        assert base["meta"]["report"]["retry_from_step"] == without["pivot"]
        guidance = with_words["meta"]["guidance"]
        assert guidance and guidance.strip() in tokenizer.decode(with_words["tokens"])
        assert without["meta"]["guidance"] is None
        text = tokenizer.decode(without["tokens"])
        assert guidance.strip() not in text
        shared = without["turn_spans"][without["pivot"]][0]  # all before the first turn written after the pivot
        assert without["tokens"][:shared] == base["tokens"][:shared]


def test_guidance_as_a_system_message_reaches_the_retry_from_the_command_line(tmp_path):
    tokenizer = load_policy("tiny-random")[1]
    retries = retries_and_bases(tmp_path, True, "algorithm.strategy_args.guidance_role=system")
    later = [retry for retry, _ in retries if retry["pivot"] > 0]
    assert later  # run.seed=3 reports pivots after step 0 (step 0 is tests/test_guidance_role.py's)
    for retry in later:
        text = tokenizer.decode(retry["tokens"])
        guidance = retry["meta"]["guidance"].strip()
        assert retry["meta"]["guidance_role"] == "system" and text.count(guidance) == 1
        assert f"<|im_start|>system\n{guidance}<|im_end|>\n<|im_start|>user\n" in text
