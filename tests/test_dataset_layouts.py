"""The 'dataset' environment on data in the papers' layouts: DAPO-Math-17k keeps each prompt as a chat message list
and the answer at `reward_model.ground_truth`; read from JSONL and parquet files the tests write."""

import json
import sys

import pytest

import r3l.envs
from r3l.errors import UserError
from tests.conftest import run_cli

INSTRUCTION = "Solve the following math problem step by step. Remember to put your answer on its own line."


def dapo_rows(count=10, system=None):
    rows = []
    for i in range(count):
        prompt = [{"role": "user", "content": f"{INSTRUCTION}\n\nWhat is {i} + {i}?"}]
        if system is not None:
            prompt.insert(0, {"role": "system", "content": system})
        rows.append(
            {
                "data_source": "math_dapo",
                "prompt": prompt,
                "ability": "MATH",
                "reward_model": {"ground_truth": str(2 * i), "style": "rule-lighteval/MATH_v2"},
                "extra_info": {"index": f"id-{i}"},
            }
        )
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def write_parquet(path, rows):
    pytest.importorskip("pyarrow")
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return str(path)


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_dapo_layout(tmp_path, writer):
    path = writer(tmp_path / f"dapo.{'jsonl' if writer is write_jsonl else 'parquet'}", dapo_rows())
    env = r3l.envs.make("dataset", path=path, answer_column="reward_model.ground_truth", test_fraction=0.2)
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (8, 2)
    for task in (*train, *test):
        number = int(task.prompt.rsplit("What is ", 1)[1].split(" ")[0])
        assert task.prompt.startswith(INSTRUCTION) and task.answer == str(2 * number)
        assert task.data["columns"]["reward_model"]["style"] == "rule-lighteval/MATH_v2"
    assert env.system_prompt is None
    assert env.verify(train[0], f"The answer is \\boxed{{{train[0].answer}}}").success


def test_a_shared_system_message_becomes_the_system_prompt(tmp_path):
    path = write_jsonl(tmp_path / "system.jsonl", dapo_rows(system="You are a careful mathematician."))
    env = r3l.envs.make("dataset", path=path, answer_column="reward_model.ground_truth")
    assert env.system_prompt == "You are a careful mathematician."
    assert env.tasks("train")[0].prompt.startswith(INSTRUCTION)


def test_a_column_named_with_dots_is_found_before_a_nested_path(tmp_path):
    rows = [{"prompt": "What is 1 + 1?", "reward_model.ground_truth": "2", "reward_model": {"ground_truth": "9"}}]
    env = r3l.envs.make(
        "dataset",
        path=write_jsonl(tmp_path / "d.jsonl", rows),
        answer_column="reward_model.ground_truth",
        test_fraction=0,
    )
    assert env.tasks("train")[0].answer == "2"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["prompt"].append({"role": "assistant", "content": "4"}),
            "the prompt's last message is from 'assistant'; it must be the user's",
        ),
        (
            lambda r: r["prompt"].insert(0, {"role": "assistant", "content": "hi"}),
            "the prompt holds earlier turns (assistant); a single-turn task takes at most a system message",
        ),
        (lambda r: r["prompt"].__setitem__(0, {"role": "user"}), "a message here lacks a string role or content"),
        (lambda r: r.__setitem__("prompt", 7), "must be a string or a list of {role, content} messages, got int"),
        (lambda r: r["reward_model"].pop("ground_truth"), "no column 'reward_model.ground_truth'; add it to this row"),
    ],
)
def test_bad_rows_are_refused_in_one_line(tmp_path, change, message):
    rows = dapo_rows(3)
    change(rows[1])
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(UserError) as error:
        r3l.envs.make("dataset", path=path, answer_column="reward_model.ground_truth")
    assert message in str(error.value) and "line 2" in str(error.value) and "\n" not in str(error.value)


def test_different_system_messages_are_refused(tmp_path):
    rows = dapo_rows(2, system="A") + dapo_rows(1, system="B")
    with pytest.raises(UserError, match="different system messages"):
        r3l.envs.make(
            "dataset", path=write_jsonl(tmp_path / "s.jsonl", rows), answer_column="reward_model.ground_truth"
        )


def test_parquet_without_pyarrow_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "none.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as when pyarrow is not installed
    with pytest.raises(
        UserError, match=r"reading \.parquet needs pyarrow, which is not installed; pip install pyarrow"
    ):
        r3l.envs.make("dataset", path=str(path))


def test_rollout_on_the_dapo_layout(tmp_path):
    path = write_jsonl(tmp_path / "dapo.jsonl", dapo_rows())
    result = run_cli(
        "rollout",
        "model=tiny-random",
        "env=dataset",
        f"env.args.path={path}",
        "env.args.answer_column=reward_model.ground_truth",
        "sampling.group_size=2",
        "sampling.max_new_tokens=4",
        "--tasks",
        "1",
        "--no-show",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["meta"]["task_id"].startswith("dataset-train-") for r in records)
