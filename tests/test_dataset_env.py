"""The 'dataset' environment: file formats, splits, one-line errors and pluggable reward functions."""

import json

import pytest

import r3l.envs
from r3l.envs.dataset import DatasetEnv
from r3l.errors import UserError

CALLS = []


def length_reward(prompts, completions, **columns):
    """A TRL-signature reward: 1.0 when the completion is as long as the row's `target_length`."""
    CALLS.append((prompts, completions, columns))
    return [1.0 if len(c) == n else len(c) / 100 for c, n in zip(completions, columns["target_length"])]


def no_list_reward(prompts, completions, **columns):
    return 1.0


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def qa_file(tmp_path):
    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i), "target_length": 4} for i in range(20)]
    return write_jsonl(tmp_path / "data.jsonl", rows)


def test_jsonl_with_default_math_verifier(qa_file):
    env = r3l.envs.make("dataset", path=str(qa_file))
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (18, 2)
    item = train[0]
    number = int(item.prompt.split()[2])
    assert item.answer == str(2 * number)
    assert item.data["columns"] == {"answer": str(2 * number), "target_length": 4}
    assert env.verify(item, f"<answer>{2 * number}</answer>").success
    wrong = env.verify(item, "<answer>-1</answer>")
    assert (wrong.reward, wrong.feedback) == (0.0, "answered -1, which is not correct")


def test_splits_are_seeded_and_disjoint(qa_file):
    def prompts(env, split):
        return [t.prompt for t in env.tasks(split)]

    first, again = DatasetEnv(path=str(qa_file), seed=3), DatasetEnv(path=str(qa_file), seed=3)
    assert prompts(first, "test") == prompts(again, "test")
    assert not set(prompts(first, "test")) & set(prompts(first, "train"))
    other = DatasetEnv(path=str(qa_file), seed=4, test_fraction=0.5)
    assert len(prompts(other, "test")) == 10
    assert len(DatasetEnv(path=str(qa_file), test_fraction=0).tasks("test")) == 0


def test_remaking_reuses_rows_until_the_file_changes(qa_file):
    first = DatasetEnv(path=str(qa_file), test_fraction=0)
    assert DatasetEnv(path=str(qa_file), test_fraction=0).tasks("train") is first.tasks("train")
    write_jsonl(qa_file, [{"prompt": "only one more row", "answer": "1"}])
    assert [t.prompt for t in DatasetEnv(path=str(qa_file), test_fraction=0).tasks("train")] == ["only one more row"]


def test_custom_columns_and_exact_verifier(tmp_path):
    path = write_jsonl(tmp_path / "capitals.jsonl", [{"question": "Capital of France?", "city": "Paris"}] * 3)
    env = DatasetEnv(path=str(path), prompt_column="question", answer_column="city", verifier="exact", test_fraction=0)
    assert env.verify(env.tasks("train")[0], "<answer>Paris</answer>").success


def test_json_and_parquet_files(tmp_path):
    rows = [{"prompt": "1+1?", "answer": 2}, {"prompt": "2+2?", "answer": 4}]
    json_path = tmp_path / "data.json"
    json_path.write_text(json.dumps(rows))
    import pyarrow
    import pyarrow.parquet

    parquet_path = tmp_path / "data.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), parquet_path)
    for path in (json_path, parquet_path):
        env = DatasetEnv(path=str(path), verifier="numeric", test_fraction=0)
        tasks = sorted(env.tasks("train"), key=lambda t: t.prompt)
        assert [t.answer for t in tasks] == [2, 4]
        assert env.verify(tasks[0], "it is 2").success


def test_saved_hf_dataset_keeps_its_own_test_split(tmp_path):
    import datasets

    folder = tmp_path / "saved"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"prompt": "a?", "answer": "1"}, {"prompt": "b?", "answer": "2"}]),
            "test": datasets.Dataset.from_list([{"prompt": "c?", "answer": "3"}]),
        }
    ).save_to_disk(folder)
    env = DatasetEnv(path=str(folder))
    assert sorted(t.prompt for t in env.tasks("train")) == ["a?", "b?"]
    assert [t.prompt for t in env.tasks("test")] == ["c?"]


def test_folder_of_data_files_loads_with_datasets(tmp_path):
    folder = tmp_path / "my_data"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"prompt": f"q{i}", "answer": str(i)} for i in range(10)])
    env = DatasetEnv(path=str(folder), test_fraction=0.2)
    assert (len(env.tasks("train")), len(env.tasks("test"))) == (8, 2)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match=r"data file '.*missing.jsonl' not found; check env.args.path"):
        DatasetEnv(path=str(tmp_path / "missing.jsonl"))


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": "2"}\n{"prompt": "c", answer}\n')
    with pytest.raises(UserError) as error:
        DatasetEnv(path=str(path))
    message = str(error.value)
    assert message.startswith(f"{path} line 4, character 17: invalid JSON: ") and "\n" not in message


def test_missing_column_names_line_and_setting(tmp_path):
    path = write_jsonl(
        tmp_path / "data.jsonl",
        [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}, {"prompt": "c", "solution": "3"}],
    )
    fix = r"add it to this row \(other rows have it\)"
    with pytest.raises(UserError, match=rf"^{path} line 3: no column 'answer'; {fix}$"):
        DatasetEnv(path=str(path))
    elsewhere = write_jsonl(tmp_path / "other.jsonl", [{"prompt": "a", "solution": "1"}])
    with pytest.raises(UserError, match=r"line 1: no column 'answer'; set env.args.answer_column$"):
        DatasetEnv(path=str(elsewhere))
    with pytest.raises(UserError, match="line 1: no column 'question'; set env.args.prompt_column"):
        DatasetEnv(path=str(path), prompt_column="question")


def test_non_object_line_and_non_string_prompt(tmp_path):
    with pytest.raises(UserError, match="line 1: expected a JSON object, got list"):
        DatasetEnv(path=str(write_jsonl(tmp_path / "a.jsonl", [[1, 2]])))
    with pytest.raises(UserError, match="line 1: column 'prompt' must be a string"):
        DatasetEnv(path=str(write_jsonl(tmp_path / "b.jsonl", [{"prompt": 5, "answer": "1"}])))


def test_unknown_verifier(qa_file):
    with pytest.raises(UserError, match="unknown verifier 'fuzzy'; choose one of: exact, math, numeric"):
        DatasetEnv(path=str(qa_file), verifier="fuzzy")


@pytest.mark.parametrize("spec", ["tests.test_dataset_env:length_reward", "tests.test_dataset_env.length_reward"])
def test_trl_reward_fn_by_dotted_path(qa_file, spec):
    CALLS.clear()
    env = DatasetEnv(path=str(qa_file), reward_fn=spec, success_threshold=1.0)
    item = env.tasks("train")[0]
    good, bad = env.verify(item, "four"), env.verify(item, "seven")
    assert (good.reward, good.success) == (1.0, True)
    assert (bad.reward, bad.success) == (0.05, False)
    assert bad.feedback == "reward 0.05 is below the success threshold 1"
    prompts, completions, columns = CALLS[0]
    assert prompts == [item.prompt] and completions == ["four"]
    assert columns == {"answer": [item.answer], "target_length": [4]}


def test_reward_fn_from_a_python_file_and_without_answer_column(tmp_path):
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(
        "def polite(prompts, completions, **kw):\n    return [float('please' in c) for c in completions]\n"
    )
    data = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "ask nicely"}] * 4)
    env = DatasetEnv(path=str(data), reward_fn=f"{rewards}:polite", success_threshold=0.5)
    assert env.verify(env.tasks("train")[0], "please?").success


def test_reward_fn_errors(qa_file):
    with pytest.raises(UserError, match="cannot import env.args.reward_fn 'no_such_module:f'"):
        DatasetEnv(path=str(qa_file), reward_fn="no_such_module:f")
    with pytest.raises(UserError, match="has no function 'missing'"):
        DatasetEnv(path=str(qa_file), reward_fn="tests.test_dataset_env:missing")
    with pytest.raises(UserError, match="must look like"):
        DatasetEnv(path=str(qa_file), reward_fn="justaname")
    with pytest.raises(UserError, match="not both"):
        DatasetEnv(path=str(qa_file), reward_fn="tests.test_dataset_env:length_reward", verifier="math")
    env = DatasetEnv(path=str(qa_file), reward_fn="tests.test_dataset_env:no_list_reward")
    with pytest.raises(UserError, match="must return a list with one float per completion"):
        env.verify(env.tasks("train")[0], "x")


def test_bad_test_fraction_and_split(qa_file):
    with pytest.raises(UserError, match="test_fraction"):
        DatasetEnv(path=str(qa_file), test_fraction=1.5)
    with pytest.raises(UserError, match="unknown split"):
        DatasetEnv(path=str(qa_file)).tasks("validation")


def test_settings_are_listed_checked_and_the_split_is_said(tmp_path, capsys):
    from r3l.envs import make
    from tests.conftest import run_cli

    with pytest.raises(UserError, match=r"environment 'dataset' needs env.args.path \(a .jsonl"):
        make("dataset")
    with pytest.raises(UserError, match="environment 'dataset' has no setting env.args.pth; its settings: "):
        make("dataset", pth="x")
    listed = run_cli("envs", "dataset")
    assert listed.returncode == 0 and "path" in listed.stdout and "test_fraction" in listed.stdout
    shown = run_cli("config", "env=dataset")
    assert "    test_fraction: 0.1" in shown.stdout and "    path: null" in shown.stdout
    path = write_jsonl(tmp_path / "four.jsonl", [{"prompt": str(i), "answer": str(i)} for i in range(4)])
    env = DatasetEnv(path=str(path))
    assert len(env.tasks("train")) == 3 and len(env.tasks("test")) == 1
    assert "3 training rows, 1 held out for evaluation" in capsys.readouterr().err
