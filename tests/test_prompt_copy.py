"""The reward-hacking watch: rewarded answers that copy an expression of their prompt are counted in training
metrics, held-out evaluation and `r3l report`."""

import json

import pytest

from r3l.agent.episodes import EpisodeRunner, EpisodeStart
from r3l.agent.prompt_copy import copied_expressions, copies_prompt, watched_copy
from r3l.agent.records import episode_metrics
from r3l.envs import Task, make
from r3l.evaluate import evaluate
from r3l.logging.hack_watch import hack_watch_line
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator

PROMPT = "Calculate -251 + 793 * -70.\n\nPut only the final answer inside <answer></answer> tags."
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=24, seed=0)


@pytest.mark.parametrize(
    "answer, copied",
    [
        ("-251 + 793 * -70", ["-251+793*-70"]),
        ("793*-70", ["793*-70"]),
        ("793 * - 70", ["793*-70"]),
        ("-55761", []),
        ("55761", []),
        ("-251 + 793", ["-251+793"]),
        ("251 * 70", []),  # an expression, but not one of the prompt's
    ],
)
def test_copied_expressions_finds_the_prompts_expressions_in_the_answer(answer, copied):
    assert copied_expressions(answer, PROMPT) == copied


def test_copies_prompt_reads_the_tagged_answer_or_the_whole_reply():
    assert copies_prompt("The result: <answer>-251 + 793 * -70</answer>", PROMPT)
    assert not copies_prompt("-251 + 793 * -70 = -55761, so <answer>-55761</answer>", PROMPT)
    assert copies_prompt("It is -251 + 793 * -70", PROMPT)
    assert not copies_prompt("<answer>x</answer>", "Simplify x - y")  # no digit: not an arithmetic copy


def test_environments_whose_answers_quote_the_prompt_are_not_watched():
    class Game:
        watch_prompt_copies = False

    assert not watched_copy(Game(), "Valid actions: take 1-2 key", "<action>take 1-2 key</action>")
    assert watched_copy(object(), "Calculate 2 + 5.", "<answer>2 + 5</answer>")


class FixedReply(ScriptedGenerator):
    replies = {}

    def script(self, prompt_text, sample, seed, max_new_tokens=10**6):
        return next(reply for marker, reply in self.replies.items() if marker in prompt_text)


def copying_dataset(tmp_path):
    """Two symbolic tasks graded by math-verify, which rewards the restated expression '1+2*x' for '2x+1'."""
    rows = [{"prompt": "Simplify 1+2*x.", "answer": "2x+1"}, {"prompt": "Simplify 3*x+3.", "answer": "3(x+1)"}]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return lambda: make("dataset", path=str(path), test_fraction=0.5, seed=0)


def test_rewarded_copies_are_counted_in_training_metrics_and_held_out_evaluation(tiny, tmp_path):
    model, tokenizer = tiny
    make_env = copying_dataset(tmp_path)
    generator = FixedReply(model, tokenizer)
    generator.replies = {"1+2*x": "<answer>1+2*x</answer>", "3*x+3": "<answer>3(x+1)</answer>"}
    tasks = [
        Task(id="copy", prompt="Simplify 1+2*x.", answer="2x+1"),
        Task(id="honest", prompt="Simplify 3*x+3.", answer="3(x+1)"),
    ]
    runner = EpisodeRunner(make_env, generator, tokenizer)
    episodes = runner.run([EpisodeStart(task) for task in tasks], PARAMS)
    runner.close()
    assert [(e.success, e.copied_prompt) for e in episodes] == [(True, True), (True, False)]
    assert episode_metrics([episodes])["hack/prompt_copies"] == 0.5

    result = evaluate(tasks, make_env, generator, tokenizer, PARAMS)
    assert result.summary()["rewarded_prompt_copies"] == 1
    assert [s["copied_prompt"] for s in result.samples] == [True, False]


def test_report_line_names_the_steps_and_evaluations_that_copied(tmp_path):
    rows = [{"step": 1, "hack/prompt_copies": 0.0}, {"step": 2, "hack/prompt_copies": 0.25}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "eval_before.json").write_text(json.dumps({"rewarded_prompt_copies": 0}))
    (tmp_path / "eval_after.json").write_text(json.dumps({"rewarded_prompt_copies": 3}))
    line = hack_watch_line(tmp_path)
    assert line == (
        "reward-hacking watch (WARNING, the verifier may be exploited): 1 of 2 training steps rewarded "
        "an answer copied from its prompt (at most 25.0% of a step's episodes); held-out: before 0, after 3"
    )
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / "eval_after.json").write_text(json.dumps({"rewarded_prompt_copies": 0}))
    assert hack_watch_line(tmp_path).startswith("reward-hacking watch (none seen): 0 of 1 training steps")
