"""eval.draws: K sampled episodes per held-out task (4 by default where the evaluation samples), each its own seeded
stream; a task's outcome is the mean of its draws, the interval is over the tasks, and compare's tables say so."""

import pytest

from r3l.build import eval_params, rollout_context
from r3l.compare.summary import evaluation
from r3l.compare.table import measure_label
from r3l.config import load_config
from r3l.errors import UserError
from r3l.evaluate import held_out_evaluation, task_mean_interval


def test_draws_default_to_four_where_the_evaluation_samples_and_one_where_it_is_greedy():
    assert load_config(None, ["eval.temperature=1.0"]).eval.resolved_draws == 4
    assert load_config(None, []).eval.resolved_draws == 1  # greedy: every draw the same
    assert load_config(None, ["eval.temperature=1.0", "eval.draws=2"]).eval.resolved_draws == 2
    assert load_config(None, ["eval.temperature=1.0", "eval.attempts=2"]).eval.resolved_draws == 1
    with pytest.raises(UserError, match="eval.draws > 1 goes with one attempt"):
        load_config(None, ["eval.attempts=2", "eval.draws=3"])


def test_the_interval_of_task_means_by_hand():
    low, high = task_mean_interval([1.0, 0.0, 0.5, 0.5])  # mean 0.5, sd 0.408, se 0.204
    assert (round(low, 3), round(high, 3)) == (0.1, 0.9)
    assert task_mean_interval([1.0, 1.0, 1.0, 0.75]) == (pytest.approx(0.815), 1.0)  # mean 0.9375, se 0.0625, clipped


def test_each_task_is_drawn_k_times_on_streams_of_its_own(tiny):
    from r3l.build import env_factory, make_generator

    model, tokenizer = tiny
    config = load_config(None, ["model=tiny-random", "eval.temperature=1.0", "eval.draws=3", "eval.size=2"])
    make_env = env_factory(config)
    context = rollout_context(config, make_env, make_generator(config, model, tokenizer), tokenizer)
    tasks = list(make_env().tasks("test"))[:2]
    record, summary, _ = held_out_evaluation(tasks, context, eval_params(config), draws=3)
    samples = record["samples"]
    assert [s["task_id"] for s in samples] == [tasks[0].id] * 3 + [tasks[1].id] * 3
    assert [s["draw"] for s in samples] == [0, 1, 2, 0, 1, 2]
    assert len({s["completion"] for s in samples[:3]}) > 1  # three streams, not one draw three times
    assert summary["draws"] == 3 and summary["total"] == 6
    read = evaluation(record)
    assert read.draws == 3 and set(read.outcomes["first"]) == {tasks[0].id, tasks[1].id}
    for task in tasks:
        outcomes = [float(s["success"]) for s in samples if s["task_id"] == task.id]
        assert read.outcomes["first"][task.id] == pytest.approx(sum(outcomes) / 3)


def test_compare_names_the_draws_in_the_try_column():
    from r3l.compare.summary import RunResult

    record = {"step": 2, "samples": [{"task_id": "a", "success": s, "draw": i} for i, s in enumerate([1, 0, 0, 1])]}
    run = RunResult("grpo", 0, finished=True, steps=2, evaluations={2: evaluation(record)})
    assert run.after.outcomes["first"] == {"a": 0.5}
    assert measure_label("first", [run]) == "1st try (mean of 4 draws)"


def test_intervals_of_a_mean_over_draws_stay_inside_the_rates_bounds_and_rewards_are_not_cut():
    """Two seeds far apart, each problem drawn 4 times: the outcomes (0.25, 0.75, ...) are no 1/0 table, but they
    are successes, so the interval of the arm, of its change and of a difference stays in [0, 1] ([-1, 1]); read as
    rewards (--metric reward), they are not cut."""
    from r3l.compare.summary import RunResult
    from r3l.compare.table import arms, tables

    def record(step, wins_per_problem):
        samples = [
            {"task_id": f"p{p}", "success": draw < wins, "reward": float(draw < wins), "draw": draw}
            for p, wins in enumerate(wins_per_problem)
            for draw in range(4)
        ]
        return {"step": step, "samples": samples}

    def runs(label, afters, metric):
        before = [2, 1, 2, 1, 2, 1, 2, 1]
        return [
            RunResult(
                label,
                seed,
                finished=True,
                steps=8,
                evaluations={0: evaluation(record(0, before), metric), 8: evaluation(record(8, after), metric)},
            )
            for seed, after in enumerate(afters)
        ]

    afters = [[4, 4, 4, 3, 4, 4, 4, 3], [0, 1, 0, 0, 0, 1, 0, 0]]  # seed means 0.94 and 0.06
    others = [[0, 0, 0, 0, 1, 0, 0, 0], [4, 4, 4, 4, 4, 4, 3, 4]]
    rates = [*runs("grpo", afters, "success"), *runs("r3l", others, "success")]
    assert all(arm.rate() for arm in arms(rates))
    text = tables(rates)[0]
    grpo_row = next(line for line in text.splitlines() if line.startswith("| grpo | 1st try"))
    assert "0.500 [0.000, 1.000]" in grpo_row
    assert "+0.125 [-1.000, +1.000]" in grpo_row
    assert "| grpo − r3l (1st try) | +0.000 [-1.000, +1.000]" in text
    rewards = runs("grpo", afters, "reward")
    assert not any(arm.rate() for arm in arms(rewards))
    reward_row = next(line for line in tables(rewards)[0].splitlines() if line.startswith("| grpo | 1st try"))
    assert "0.500 [-" in reward_row
