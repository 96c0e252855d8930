"""The bench's multi_turn section on the tiny-random model: both cache modes play the same episodes (same turns,
same decoded tokens), the cache prefills less, and the long-context decode rows are there."""

import json

from r3l.bench import multi_turn
from r3l.config import load_config


def test_section_plays_the_same_episodes_with_the_cache_off_and_on(tmp_path, monkeypatch):
    from r3l.bench.run import run_bench

    monkeypatch.setattr(multi_turn, "TURNS", (3,))
    monkeypatch.setattr(multi_turn, "LATE_TURN", 3)
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
    for mode in ("off", "on"):  # turn 3 decodes over a longer context than turn 1: more bytes read
        assert row["growth"][mode]["decode_bytes"] > 1 and row["growth"][mode]["seconds"] > 0
    assert on["turn_20_prefill_seconds"]["median"] > 0 and on["turn_1_decode_seconds"]["median"] > 0
    decode = section["long_context_decode"]["64"]
    assert decode["in place"]["decode_efficiency"] > 0 and decode["concatenating"]["decode_efficiency"] > 0
    if multi_turn.KERNEL_MODE in decode:  # which build of the kernels ran, named in the table
        kernels = decode[multi_turn.KERNEL_MODE]["kernels"]
        assert kernels in ("AMX tiles", "AVX512-BF16 vectors") and f"decode kernel ({kernels})" in markdown
    assert "| coin | 3 | off / on |" in markdown and "in place / concatenating" in markdown
    assert "vLLM (prefix caching): not measured, no vLLM environment" in markdown


def test_a_turns_decode_bytes_are_the_weights_each_step_and_every_attended_key_and_value():
    from r3l.bench.flops import ModelShape

    # weights a step: 1 layer x (q,o 2*2*1*2 + k,v 2*2*1*2 + mlp 3*2*3) = 34, head 2*5 = 10: 44; 4 values a position
    shape = ModelShape(layers=1, hidden=2, heads=1, kv_heads=1, head_dim=2, intermediate=3, vocab=5)
    counters = {"decode_steps": 2, "decode_kv_positions": 10, "prefill_seconds": 0.5, "decode_seconds": 0.25}
    figures = multi_turn.turn_figures(counters, shape, bytes_per_value=2)
    assert figures == {"prefill_seconds": 0.5, "decode_seconds": 0.25, "decode_bytes": (2 * 44 + 10 * 4) * 2}


def test_late_turn_growth_is_turn_20_over_turn_1_of_the_medians():
    cell = lambda value: {"median": value, "min": value, "max": value}  # noqa: E731
    figures = {
        "turn_1_seconds": cell(2.0),
        "turn_20_seconds": cell(3.0),
        "turn_1_decode_seconds": cell(1.0),
        "turn_20_decode_seconds": cell(2.5),
        "turn_1_decode_bytes": cell(100.0),
        "turn_20_decode_bytes": cell(180.0),
        "turns_per_episode": cell(20.0),
    }
    assert multi_turn.late_turn_growth(figures) == {"seconds": 1.5, "decode_bytes": 1.8, "decode_seconds": 2.5}
    assert multi_turn.late_turn_growth({"turn_1_seconds": cell(2.0)}) is None
    assert multi_turn.growth_cells(None) == "- | -"
    assert (
        multi_turn.growth_cells({"seconds": 1.5, "decode_bytes": 1.8, "decode_seconds": 2.5}) == "1.50x (2.50x) | 1.80x"
    )


def test_vllms_environment_is_found_where_given_or_beside_the_checkout(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    assert multi_turn.vllm_python({"VLLM_VENV": str(tmp_path / "venv")}, tmp_path) is None
    python.parent.mkdir(parents=True)
    python.touch()
    assert multi_turn.vllm_python({"VLLM_VENV": str(tmp_path / "venv")}, tmp_path) == python
    cache = {"R3L_CACHE": str(tmp_path / "cache")}
    assert multi_turn.vllm_python(cache, tmp_path) is None
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "venv-vllm").symlink_to(tmp_path / "venv")  # where .ci/vllm_tests makes it
    assert multi_turn.vllm_python(cache, tmp_path) == tmp_path / "cache" / "venv-vllm" / "bin" / "python"
    (tmp_path / ".venv-vllm").symlink_to(tmp_path / "venv")  # one beside the checkout comes first
    assert multi_turn.vllm_python(cache, tmp_path) == tmp_path / ".venv-vllm" / "bin" / "python"


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
