"""`r3l eval --each KEY=V1,V2`: one model evaluated on each of a paper's test sets (the dataset environment's
`test_path`: every row of that file is the test split), one table, every result in eval.json."""

import json

from r3l.envs import make
from tests.conftest import run_cli


def write_rows(path, count: int, offset: int = 0) -> None:
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(offset, offset + count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_test_path_is_the_whole_test_split_and_the_training_file_trains_whole(tmp_path):
    write_rows(tmp_path / "train.jsonl", 5)
    write_rows(tmp_path / "gsm.jsonl", 3, offset=100)
    env = make("dataset", path=str(tmp_path / "train.jsonl"), test_path=str(tmp_path / "gsm.jsonl"))
    assert len(env.tasks("train")) == 5 and [t.answer for t in env.tasks("test")] == ["101", "102", "103"]


def test_one_model_on_each_test_file_in_one_table(tmp_path):
    write_rows(tmp_path / "train.jsonl", 4)
    write_rows(tmp_path / "a.jsonl", 2, offset=10)
    write_rows(tmp_path / "b.jsonl", 3, offset=20)
    common = ["model=tiny-random", "env=dataset", "env.args.path=train.jsonl", "eval.max_new_tokens=4"]
    done = run_cli("eval", *common, "--each", "env.args.test_path=a.jsonl,b.jsonl", "--out", "ev", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert written["each"] == "env.args.test_path"
    assert [(e["value"], e["total"]) for e in written["evaluations"]] == [("a.jsonl", 2), ("b.jsonl", 3)]
    table = [line for line in done.stderr.splitlines() if line.startswith("|")]
    assert table[0] == "| env.args.test_path | tasks | success [95%] |" and len(table) == 4
    assert table[2].startswith("| a.jsonl | 2 | ") and table[3].startswith("| b.jsonl | 3 | ")

    missing = run_cli("eval", *common, "--each", "env.args.test_path=a.jsonl,nope.jsonl", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "error: data file 'nope.jsonl' not found; check env.args.test_path"
    )
    for bad in ("model.name=smollm2-135m-instruct", "env.args.test_path", "=a.jsonl"):
        refused = run_cli("eval", *common, "--each", bad, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--each" in refused.stderr
