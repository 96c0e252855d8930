"""Held-out/training overlap is counted by content, not by labels: a training problem planted in the held-out split
(reordered, re-spaced, re-cased, or a game seed that hides the same secret) is found in every environment the issue
names, and eval.exclude_train_overlap leaves such problems out of the evaluation."""

from dataclasses import replace

import pytest

from r3l.build import held_out_tasks
from r3l.config import load_config
from r3l.envs import make
from r3l.envs.overlap import overlap_counts


def planted_count(env, planted) -> tuple[int, int, int]:
    """Overlap of the env's first three test tasks plus one planted task, with the env's training split."""
    return overlap_counts([*env.tasks("test")[:3], planted], env.tasks("train"), env.near_duplicate_key)


def test_arithmetic_finds_a_training_problem_written_in_another_order():
    env = make("arithmetic", max_terms=2, max_digits=2, operators=["+"], train_size=50, test_size=20)
    task = env.tasks("train")[0]
    left, right = task.data["expression"].split(" + ")
    reordered = f"Calculate {right} + {left}."
    assert reordered != task.data["question"]
    planted = replace(task, id="planted", prompt=f"Compute: {reordered}", data={**task.data, "question": reordered})
    exact, near, total = planted_count(env, planted)
    assert total == 4 and exact == 0 and near >= 1


def test_countdown_finds_the_same_numbers_and_target_in_another_order():
    env = make("countdown", train_size=30, test_size=10)
    task = env.tasks("train")[0]
    numbers = list(reversed(task.answer["numbers"]))
    planted = replace(task, id="planted", prompt=f"{task.prompt} ", answer={**task.answer, "numbers": numbers})
    assert planted_count(env, planted)[1] >= 1


def test_gsm_finds_a_training_problem_re_spaced_and_re_cased():
    env = make("gsm", train_size=20, test_size=10)
    task = env.tasks("train")[0]
    question = "  ".join(task.data["question"].upper().split())
    planted = replace(task, id="planted", prompt=question, data={**task.data, "question": question})
    exact, near, _ = planted_count(env, planted)
    assert exact == 0 and near >= 1


def test_function_calling_finds_the_same_request_to_the_same_functions():
    env = make("function_calling", categories=["simple"], test_size=5)
    task = env.tasks("train")[0]
    question = " " + task.data["question"].upper() + " "
    answer = {**task.answer, "functions": list(reversed(task.answer["functions"]))}
    planted = replace(
        task, id="planted", prompt="another prompt", answer=answer, data={**task.data, "question": question}
    )
    exact, near, _ = planted_count(env, planted)
    assert exact == 0 and near >= 1


def test_guess_the_number_compares_the_secret_not_the_seed_label():
    """Seeds only (distinct_games=false, as examples/qwen_guess_number.yaml): most held-out games hide a number a
    training game hides, though no label is shared; distinct games (the default) share none."""
    seeds_only = make("textarena", id="GuessTheNumber-v0", train_size=20, test_size=10, distinct_games=False)
    exact, near, total = overlap_counts(
        seeds_only.tasks("test"), seeds_only.tasks("train"), seeds_only.near_duplicate_key
    )
    assert (exact, total) == (0, 10) and near >= 3
    distinct = make("textarena", id="GuessTheNumber-v0", train_size=20, test_size=10)
    assert overlap_counts(distinct.tasks("test"), distinct.tasks("train"), distinct.near_duplicate_key)[1] == 0


@pytest.mark.parametrize("exclude", [False, True])
def test_exclude_train_overlap_leaves_the_training_problems_out(exclude):
    config = load_config(None, [f"eval.exclude_train_overlap={str(exclude).lower()}", "eval.size=null"])
    env = make(config.env.name, **config.env.args)
    held_out = held_out_tasks(config, env, say=True)
    _, near, total = overlap_counts(held_out, env.tasks("train"), env.near_duplicate_key)
    if exclude:
        assert near == 0 and 0 < total < len(env.tasks("test"))
    else:
        assert near > 0 and total == len(env.tasks("test"))  # the default job's 100: 37 are training problems
