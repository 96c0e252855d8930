"""The bench's multi_turn section on the tiny-random model: both cache modes play the same episodes (same turns,
same decoded tokens), the cache prefills less, and the long-context decode rows are there."""

import json

from r3l.bench import multi_turn
from r3l.config import load_config


def test_section_plays_the_same_episodes_with_the_cache_off_and_on(tmp_path, monkeypatch):
    from r3l.bench.run import run_bench

    monkeypatch.setattr(multi_turn, "TURNS", (3,))
    monkeypatch.setattr(multi_turn, "EPISODES", 2)
    monkeypatch.setattr(multi_turn, "MAX_NEW_TOKENS", 8)
    monkeypatch.setattr(multi_turn, "LONG_CONTEXTS", (64,))
    monkeypatch.setattr(multi_turn, "LONG_STEPS", 4)
    monkeypatch.setattr(multi_turn, "WORKLOADS", {"coin": multi_turn.WORKLOADS["textworld_express coin"]})
    monkeypatch.setenv("VLLM_VENV", str(tmp_path / "no-venv"))  # vLLM's side: tests/test_vllm.py
    config = load_config(None, ["model=tiny-random", "generator.dtype=float32", f"run.dir={tmp_path / 'runs'}"])
    out_dir, markdown = run_bench(config, out=tmp_path / "bench", repeats=1, warmup=0, sections="multi_turn")
    section = json.loads((out_dir / "bench.json").read_text())["sections"]["multi_turn"]
    row = section["workloads"]["coin"]["3"]
    off, on = row["off"], row["on"]
    assert off["turns_per_episode"]["median"] == on["turns_per_episode"]["median"] == 3
    assert off["decoded_per_episode"]["median"] == on["decoded_per_episode"]["median"]
    assert on["prefilled_per_episode"]["median"] < off["prefilled_per_episode"]["median"]
    assert row["speedup"] > 0
    decode = section["long_context_decode"]["64"]
    assert decode["in place"]["decode_efficiency"] > 0 and decode["concatenating"]["decode_efficiency"] > 0
    assert "| coin | 3 | off / on |" in markdown and "in place / concatenating" in markdown
    assert "vLLM (prefix caching): not measured, no vLLM environment" in markdown


def test_vllms_environment_is_found_where_given_or_beside_the_checkout(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    assert multi_turn.vllm_python({"VLLM_VENV": str(tmp_path / "venv")}, tmp_path) is None
    python.parent.mkdir(parents=True)
    python.touch()
    assert multi_turn.vllm_python({"VLLM_VENV": str(tmp_path / "venv")}, tmp_path) == python
    assert multi_turn.vllm_python({}, tmp_path) is None
    (tmp_path / ".venv-vllm").symlink_to(tmp_path / "venv")
    assert multi_turn.vllm_python({}, tmp_path) == tmp_path / ".venv-vllm" / "bin" / "python"


def test_vllms_episodes_are_tabled_or_said_why_not():
    figures = {
        "wall_seconds_per_episode": 2.5,
        "turns_per_episode": 20.0,
        "prefilled_per_episode": 900.0,
        "decoded_per_episode": 480.0,
        "turn_1_seconds": 1.25,
        "turn_20_seconds": 1.5,
    }
    lines = multi_turn.vllm_lines({"coin": {"20": figures}, "game": {"skipped": "textarena is not installed"}})
    assert "| coin | 20 | 2.50 | 20.0 | 480 | 1.25 | 1.50 |" in lines
    assert "| game | skipped: textarena is not installed | | | | | |" in lines
    assert multi_turn.vllm_lines("not measured") == ["not measured"]
