"""`\\boxed{}` as an answer format (env.args.answer_format) for gsm, arithmetic, the math dialogue and the dataset
verifiers: where each format reads the answer (hand-worked), what the prompt asks for, the reply grammar, and a
reward never earned by copying the prompt. tests/test_official_scorers.py grades the same formats beside
reasoning-gym's scorer."""

import json

import pytest

import r3l.envs
from r3l.envs.arithmetic import GsmEnv
from r3l.envs.reply_grammar import ReplyFormat
from r3l.errors import UserError
from r3l.grading.answer import extract_answer
from r3l.grading.verifiers import VERIFIERS

MIXED = "First <answer>7</answer>, then on reflection \\boxed{8}."


@pytest.mark.parametrize(
    "answer_format, text, expected",
    [
        ("tags", MIXED, "7"),
        ("boxed", MIXED, "8"),
        ("either", MIXED, "7"),
        ("either", "so \\boxed{8}", "8"),
        ("boxed", "\\boxed{\\frac{1}{2}} or \\boxed{3}", "3"),
        ("boxed", "\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("boxed", "<answer>7</answer>", None),
        ("tags", "\\boxed{7}", None),
        ("boxed", "\\boxed{7", None),
        ("either", "nothing here 7", None),
        ("boxed", "\\boxed{}", ""),
    ],
)
def test_each_format_reads_its_own_place(answer_format, text, expected):
    assert extract_answer(text, answer_format) == expected


def test_the_verifiers_read_where_the_format_says():
    math, exact, numeric = (VERIFIERS.get(name) for name in ("math", "exact", "numeric"))
    assert math(MIXED, "8", answer_format="boxed").success and not math(MIXED, "8", answer_format="tags").success
    assert math("it is 8", "8").success and not math("it is 8", "8", answer_format="either").success  # any: last number
    assert math("\\boxed{}", "8", answer_format="boxed").feedback == "the answer in \\boxed{} is empty"
    assert math("8", "8", answer_format="boxed").feedback == "no answer found in \\boxed{}"
    assert not math("\\boxed{6 + 2}", "8", answer_format="boxed").success  # a number must be written out
    assert (
        exact("\\boxed{Paris}", "Paris", answer_format="boxed").success and not exact("\\boxed{Paris}", "Paris").success
    )
    assert numeric("\\boxed{8.0000001}", "8", answer_format="either").success
    assert numeric("\\boxed{8} so 9", "8").success  # any: the box before the last number


def test_gsm_asks_for_the_format_it_reads_and_fails_bad_settings_early():
    tags, boxed = (GsmEnv(seed=1, train_size=0, test_size=3, answer_format=f) for f in ("tags", "boxed"))
    task, boxed_task = tags.tasks("test")[0], boxed.tasks("test")[0]
    assert task.prompt.endswith("inside <answer></answer> tags.") and boxed_task.prompt.endswith("in \\boxed{}.")
    assert task.prompt.split("\n\n")[0] == boxed_task.prompt.split("\n\n")[0]  # the same question
    right = f"Adding up, \\boxed{{{task.answer}}}"
    assert boxed.verify(boxed_task, right).success and not tags.verify(task, right).success
    assert (
        GsmEnv(seed=1, train_size=0, test_size=1, answer_format="boxed", instruction="").tasks("test")[0].prompt
        == boxed_task.prompt.split("\n\n")[0]
    )
    with pytest.raises(UserError, match="env.args.answer_format must be one of tags, boxed, either, got 'any'"):
        GsmEnv(answer_format="any")


def test_a_copied_prompt_is_never_rewarded_in_any_format():
    for answer_format in ("tags", "boxed", "either"):
        env = GsmEnv(seed=2, train_size=0, test_size=30, answer_format=answer_format)
        for task in env.tasks("test"):
            assert not env.verify(task, task.prompt).success
            assert not env.verify(task, f"{task.prompt}\n\\boxed{{}}<answer></answer>").success


def test_the_math_dialogue_and_the_dataset_pass_the_format_on(tmp_path):
    dialogue = r3l.envs.make("math", source="gsm", source_args={"answer_format": "boxed", "test_size": 2})
    task = dialogue.tasks("test")[0]
    dialogue.reset(task)
    assert task.prompt.endswith("in \\boxed{}.") and dialogue.step(f"\\boxed{{{task.answer}}}").info["success"]
    path = tmp_path / "data.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(10))
    )
    boxed = r3l.envs.make("dataset", path=str(path), answer_format="boxed")
    loose = r3l.envs.make("dataset", path=str(path))
    row = boxed.tasks("train")[0]
    assert boxed.verify(row, f"\\boxed{{{row.answer}}}").success and not boxed.verify(row, row.answer).success
    assert loose.verify(row, row.answer).success  # the default 'any' still takes a last number
    with pytest.raises(UserError, match="env.args.answer_format must be one of tags, boxed, either, any"):
        r3l.envs.make("dataset", path=str(path), answer_format="latex")


def test_structured_replies_end_in_a_boxed_number(tiny):
    pytest.importorskip("xgrammar")
    from r3l.rollout.constraints import Constrainer

    model, tokenizer = tiny
    constrainer = Constrainer(tokenizer, model.config.vocab_size)
    constraint = GsmEnv(seed=1, train_size=0, test_size=1, answer_format="boxed").reply_constraint(
        ReplyFormat(think_chars=40)
    )

    def follows(text):
        return constrainer.replay(constraint, tokenizer(text, add_special_tokens=False)["input_ids"])[1]

    assert follows("3 + 4 = 7, so \\boxed{7}") and follows("\\boxed{-2.5}")
    assert not follows("\\boxed{3 + 4}") and not follows("so \\boxed{seven}") and not follows("x" * 41 + "\\boxed{7}")
