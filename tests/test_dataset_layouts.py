"""Data in the papers' layouts loads as it is: DAPO-Math-17k's message-list prompt and nested answer
(`reward_model.ground_truth`), in JSONL and in parquet."""

import json

import pyarrow
import pyarrow.parquet
import pytest

from r3l.envs import make
from r3l.errors import UserError

DAPO_ROWS = [
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": f"What is {a} + {b}? Answer in \\\\boxed{{}}."}],
        "ability": "MATH",
        "reward_model": {"ground_truth": str(a + b), "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": str(a)},
    }
    for a, b in ((1, 2), (3, 4), (5, 6), (7, 8))
]
DAPO = {"answer_column": "reward_model.ground_truth", "answer_format": "boxed", "test_fraction": 0.25}


@pytest.fixture(params=["jsonl", "parquet"])
def dapo_file(request, tmp_path):
    path = tmp_path / f"dapo.{request.param}"
    if request.param == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in DAPO_ROWS))
    else:
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(DAPO_ROWS), path)
    return path


def test_dapo_layout_reads_the_last_user_message_and_the_nested_answer(dapo_file):
    env = make("dataset", path=str(dapo_file), **DAPO)
    tasks = [*env.tasks("train"), *env.tasks("test")]
    assert len(tasks) == 4 and len(env.tasks("test")) == 1
    by_prompt = {task.prompt: task.answer for task in tasks}
    assert by_prompt["What is 3 + 4? Answer in \\\\boxed{}."] == "7"
    task = next(t for t in tasks if t.answer == "7")
    assert env.verify(task, "so \\boxed{7}").success and not env.verify(task, "\\boxed{8}").success
    assert task.data["columns"]["reward_model"]["style"] == "rule-lighteval/MATH_v2"


def test_a_missing_nested_answer_or_a_prompt_without_a_user_message_is_one_line(tmp_path):
    broken = [dict(DAPO_ROWS[0], reward_model={"style": "x"}), DAPO_ROWS[1]]
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in broken))
    with pytest.raises(UserError, match=r"line 1: no column 'reward_model.ground_truth'; add it to this row"):
        make("dataset", path=str(path), **DAPO)
    system_only = [dict(DAPO_ROWS[0], prompt=[{"role": "system", "content": "hi"}])]
    path.write_text(json.dumps(system_only[0]) + "\n")
    with pytest.raises(UserError, match=r"line 1: column 'prompt' is a message list without a user message"):
        make("dataset", path=str(path), **DAPO)
