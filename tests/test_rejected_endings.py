"""The reward-hacking watch's second signal: episodes a game ends, unsolved, on a move it rejected and still pays
for. TextArena's GuessTheNumber forgives one invalid move and ends the game on the second, paying how close the
last accepted guess was; a policy that repeats a guess harvests that (seen in results/guess_clean: a GRPO seed whose
training reward rose 0.57 -> 0.84 while its held-out wins fell 17 -> 3 of 80, its games ending '[5] [5] [5]')."""

import json

import pytest

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart
from r3l.agent.records import episode_metrics
from r3l.envs import make
from r3l.evaluate import evaluate
from r3l.logging.hack_watch import hack_watch_line, rejected_endings_warning
from r3l.rollout.generator import SamplingParams
from tests.test_episodes import FixedReply

pytest.importorskip("textarena")
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=16, seed=0)


def make_game():
    return make("textarena", id="GuessTheNumber-v0", test_size=2)


def repeating_ten(tiny) -> FixedReply:
    model, tokenizer = tiny
    generator = FixedReply(model, tokenizer)
    generator.reply = "<action>[10]</action>"
    return generator


def first_games(count: int = 4):
    env = make_game()
    try:
        return env.tasks("train")[:count]
    finally:
        env.close()


def played(tiny, terminate_on: list[str]):
    """The first 4 training games, each played by repeating '[10]'."""
    generator, tokenizer, tasks = repeating_ten(tiny), tiny[1], first_games()
    runner = EpisodeRunner(make_game, generator, tokenizer, limits=AgentLimits(terminate_on=terminate_on))
    try:
        return runner.run([EpisodeStart(task) for task in tasks], PARAMS)
    finally:
        runner.close()


def test_games_ended_on_a_repeated_guess_are_counted_and_stopping_at_the_rejection_pays_nothing(tiny):
    episodes = played(tiny, ["format_error", "repeated_action"])
    paid = [e for e in episodes if not e.success]
    assert paid and all(e.termination == "done" and e.num_steps == 3 and e.reward > 0 for e in paid)
    assert all(not e.steps[-1].admissible for e in paid)
    share = episode_metrics([episodes])["hack/rewarded_rejected_endings"]
    assert share == len(paid) / len(episodes)
    assert rejected_endings_warning({"hack/rewarded_rejected_endings": share}).startswith(f"{share:.0%} of this")

    stopped = played(tiny, ["format_error", "inadmissible", "repeated_action"])
    assert all(e.termination == "inadmissible" and e.reward == 0 for e in stopped if not e.success)
    assert episode_metrics([stopped])["hack/rewarded_rejected_endings"] == 0.0


def test_held_out_evaluation_counts_the_paid_rejected_endings_and_the_report_line_names_them(tiny, tmp_path):
    tasks, limits = first_games(), AgentLimits(terminate_on=["format_error", "repeated_action"])
    result = evaluate(tasks, make_game, repeating_ten(tiny), tiny[1], PARAMS, limits=limits)
    paid = [s["rewarded_rejected_ending"] for s in result.samples]
    assert paid == [not s["success"] and s["reward"] > 0 for s in result.samples] and any(paid)
    summary = result.summary()
    assert summary["rewarded_rejected_endings"] == sum(paid)
    stopping = AgentLimits(terminate_on=["format_error", "inadmissible", "repeated_action"])
    assert (
        evaluate(tasks, make_game, repeating_ten(tiny), tiny[1], PARAMS, limits=stopping).summary()[
            "rewarded_rejected_endings"
        ]
        == 0
    )

    (tmp_path / "eval_after.json").write_text(json.dumps(summary))
    (tmp_path / "eval_before.json").write_text(json.dumps({**summary, "rewarded_rejected_endings": 0}))
    line = hack_watch_line(tmp_path)
    assert line.startswith("reward-hacking watch (WARNING, the verifier may be exploited)")
    assert line.endswith(
        f"held-out episodes paid for ending unsolved on a rejected move: before 0 of 4, after {sum(paid)} of 4"
    )
    (tmp_path / "eval_before.json").write_text(json.dumps(summary))  # as it started: not learned
    assert hack_watch_line(tmp_path).startswith("reward-hacking watch (none seen)")


def test_the_report_line_flags_a_rising_share_of_paid_rejected_endings(tmp_path):
    def line(*shares):
        rows = [
            {"step": i + 1, "hack/prompt_copies": 0.0, "hack/rewarded_rejected_endings": s}
            for i, s in enumerate(shares)
        ]
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        return hack_watch_line(tmp_path)

    assert line(0.0, 0.5) == (
        "reward-hacking watch (WARNING, the verifier may be exploited): 0 of 2 training steps rewarded an answer "
        "copied from its prompt; episodes paid for ending unsolved on a rejected move: 0% of the first step's, 50% "
        "of the last step's"
    )
    assert line(0.5, 0.5).startswith("reward-hacking watch (none seen)")  # as it started: not learned
    assert line(0.0, 0.1).startswith("reward-hacking watch (none seen)")
    assert rejected_endings_warning({"hack/rewarded_rejected_endings": 0.1}) is None
