"""Section `multi_turn`: what keeping each episode's keys and values across its turns (`generator.kv_cache`) saves
on long episodes, and decode speed at long contexts.

Episodes of 5, 10, 20 and 40 turns on TextWorldExpress and GuessTheNumber, with no early stop (every episode
plays its turns unless the game ends), played with the cache off and on in one run, the modes alternating over
`repeats`: wall time per episode, positions prefilled and tokens decoded per episode, and the time of a turn
(one generation call for all episodes in flight) at turn 1 and at turn 20, each split into prefill and decode, beside
the bytes its decoding must read (weights once a step, every attended key and value): the ratio of those bytes at
turn 20 to turn 1 is the growth no decode loop can avoid without reading less. Then decode efficiency (weight + KV
bytes read / decode time / measured copy bandwidth, as the `limits` section computes it) at 2k and 4k tokens of
context, with the decode cache that grows in place against transformers' DynamicCache (a copy of the whole cache
per step, the decode loop before). Then the same episodes on vLLM with prefix caching, where vLLM's environment
exists (r3l/bench/multi_turn_vllm.py runs there). The episodes' generators take the config's generator settings
(`generator.decode_attention=kernel` plays them with r3l's decode kernel).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from r3l.bench.flops import ModelShape, decode_bytes, utilization
from r3l.bench.machine import copy_bandwidth
from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.bench.stats import median_ratio, spread, spread_cell
from r3l.bench.train_steps import per_workload, with_overrides
from r3l.config import Config
from r3l.rollout.generator import Completion, Constraints, Generator, SamplingParams

TURNS = (5, 10, 20, 40)
EPISODES = 8  # episodes in flight, one generation call per turn for all of them (issue 52's reference batch)
MAX_NEW_TOKENS = 24
WORKLOADS = {
    "textworld_express coin": ["env=textworld_express", "env.args.games=[coin]"],
    "GuessTheNumber": ["env=textarena:GuessTheNumber-v0", "env.args.distinct_games=false", "env.args.train_size=8"],
}
MODES = ("off", "on")
LONG_CONTEXTS = (2048, 4096)
LONG_ROWS = 4
LONG_STEPS = 32
KERNEL_MODE = "in place, r3l's decode kernel"
LATE_TURN = 20  # the turn compared with turn 1
TURN_COUNTERS = ("prefill_positions", "prefill_seconds", "decode_steps", "decode_kv_positions", "decode_seconds")


class TimedTurns(Generator):
    """Passes calls through, timing each and keeping the generator's counters it moved: the runner makes one call
    per turn."""

    def __init__(self, inner: Generator):
        self.inner = inner
        self.seconds: list[float] = []
        self.counters: list[dict[str, float]] = []

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        before = self.inner.stats
        started = time.perf_counter()
        out = self.inner.generate(prompts, params, n, constraints)
        self.seconds.append(time.perf_counter() - started)
        after = self.inner.stats
        self.counters.append({key: after[key] - before[key] for key in TURN_COUNTERS if key in after})
        return out

    @property
    def stats(self) -> dict[str, float]:
        return self.inner.stats


def turn_figures(counters: dict[str, float], shape: ModelShape, bytes_per_value: int) -> dict[str, float]:
    """One turn's prefill and decode seconds and the bytes its decoding read (`decode_bytes`)."""
    read = decode_bytes(shape, counters.get("decode_steps", 0), counters.get("decode_kv_positions", 0), bytes_per_value)
    return {
        "prefill_seconds": counters.get("prefill_seconds", 0.0),
        "decode_seconds": counters.get("decode_seconds", 0.0),
        "decode_bytes": read,
    }


def play(
    config: Config, generator: Generator, tokenizer, tasks: list, turns: int, shape: ModelShape, bytes_per_value: int
) -> dict[str, Any]:
    """One batch of EPISODES episodes of up to `turns` turns; its figures per episode, and turn 1's and
    LATE_TURN's (None where the episodes stopped before it)."""
    from r3l.agent.episodes import EpisodeRunner, EpisodeStart
    from r3l.build import agent_limits, env_factory, sampling_params
    from r3l.rollout.chat import PromptFormat

    timed = TimedTurns(generator)
    runner = EpisodeRunner(
        env_factory(config), timed, tokenizer, PromptFormat.from_config(config.env), agent_limits(config)
    )
    before = generator.stats
    started = time.perf_counter()
    try:
        episodes = runner.run([EpisodeStart(task) for task in tasks], sampling_params(config, seed=config.run.seed))
    finally:
        runner.close()
    wall = time.perf_counter() - started
    after = generator.stats
    count = len(episodes)
    late = len(timed.seconds) >= LATE_TURN
    figures: dict[str, Any] = {
        "wall_seconds_per_episode": wall / count,
        "turns_per_episode": sum(e.num_steps for e in episodes) / count,
        "prefilled_per_episode": (after["prefill_positions"] - before["prefill_positions"]) / count,
        "decoded_per_episode": (after["generated_tokens"] - before["generated_tokens"]) / count,
        "turn_1_seconds": timed.seconds[0],
        "turn_20_seconds": timed.seconds[LATE_TURN - 1] if late else None,
    }
    first = turn_figures(timed.counters[0], shape, bytes_per_value)
    last = turn_figures(timed.counters[LATE_TURN - 1], shape, bytes_per_value) if late else {}
    for key, value in first.items():
        figures[f"turn_1_{key}"] = value
        figures[f"turn_20_{key}"] = last.get(key)
    return figures


def late_turn_growth(figures: dict[str, Any]) -> dict[str, float] | None:
    """Turn 20's time over turn 1's, and the same ratio of the bytes their decoding read, from a mode's medians;
    None where no episode reached turn 20."""
    medians = {key: value["median"] for key, value in figures.items() if isinstance(value, dict) and "median" in value}
    if not all(key in medians for key in ("turn_20_seconds", "turn_20_decode_bytes")):
        return None
    return {
        "seconds": medians["turn_20_seconds"] / max(medians["turn_1_seconds"], 1e-12),
        "decode_bytes": medians["turn_20_decode_bytes"] / max(medians["turn_1_decode_bytes"], 1e-12),
        "decode_seconds": medians["turn_20_decode_seconds"] / max(medians["turn_1_decode_seconds"], 1e-12),
    }


def episode_config(config: Config, overrides: Sequence[str], turns: int) -> Config:
    return with_overrides(
        config,
        [
            *overrides,
            f"env.args.max_steps={turns}",
            f"agent.max_turns={turns}",
            "agent.terminate_on=[]",
            "agent.max_context_tokens=16384",
            f"sampling.max_new_tokens={MAX_NEW_TOKENS}",
            "sampling.temperature=0",  # greedy: both modes play the same episodes (sampled turns differ in bf16)
        ],
    )


def episode_tasks(config: Config) -> list:
    """The first EPISODES training tasks of the config's environment (the episodes every mode plays)."""
    from r3l.build import env_factory

    probe = env_factory(config)()
    tasks = list(probe.tasks("train"))[:EPISODES]
    getattr(probe, "close", lambda: None)()
    return tasks


def measure_episodes(config: Config, repeats: int, turns_list: Sequence[int]) -> dict[str, Any]:
    from r3l.build import generator_dtype, generator_settings, load_model
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = load_model(config)
    dtype = getattr(torch, generator_dtype(config))
    shape = ModelShape.from_config(model.config)
    settings = generator_settings(config) if config.generator.name == "hf" else {}  # e.g. decode_attention=kernel
    generators = {
        mode: HFGenerator(model, tokenizer, dtype=dtype, **{**settings, "kv_cache": mode == "on"}) for mode in MODES
    }
    tasks = episode_tasks(config)
    played = lambda mode, turns: play(  # noqa: E731
        episode_config(config, [], turns), generators[mode], tokenizer, tasks, turns, shape, dtype.itemsize
    )
    for mode in MODES:  # warm-up: first calls, simulators started
        played(mode, 2)
    figures: dict[str, Any] = {}
    for turns in turns_list:
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for _ in range(repeats):
            for mode in MODES:
                runs[mode].append(played(mode, turns))
        row: dict[str, Any] = {}
        for mode, records in runs.items():
            row[mode] = {
                key: spread([r[key] for r in records]) for key in records[0] if all(r[key] is not None for r in records)
            }
        row["speedup"] = median_ratio(row["off"]["wall_seconds_per_episode"], row["on"]["wall_seconds_per_episode"])
        row["growth"] = {mode: late_turn_growth(row[mode]) for mode in MODES}
        figures[str(turns)] = row
    return figures


def long_context_decode(config: Config) -> dict[str, Any]:
    """Decode efficiency at long contexts, the decode cache growing in place ('in place') against transformers'
    DynamicCache ('concatenating')."""
    from r3l.build import generator_dtype, load_model, resolve_device
    from r3l.models.decode_kernel import backend
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = load_model(config)
    dtype = getattr(torch, generator_dtype(config))
    shape = ModelShape.from_config(model.config)
    bandwidth = copy_bandwidth(resolve_device(config.model.device))["bytes_per_s"]
    generators = {}
    for mode in ("concatenating", "in place"):
        generator = HFGenerator(model, tokenizer, dtype=dtype, kv_cache=False)
        generator.roomy = mode == "in place"
        generators[mode] = generator
    with_kernel = HFGenerator(model, tokenizer, dtype=dtype, kv_cache=False, decode_attention="kernel")
    if with_kernel.decode_kernel:  # r3l's decode-attention kernel, where this CPU can build it
        generators[KERNEL_MODE] = with_kernel
    params = SamplingParams(temperature=0.0, max_new_tokens=LONG_STEPS)
    stop = generators["in place"].stop_token_ids
    out: dict[str, Any] = {}
    for context in LONG_CONTEXTS:
        drawn = torch.randint(100, shape.vocab - 100, (LONG_ROWS, context), generator=torch.Generator().manual_seed(0))
        prompts = [[t for t in row.tolist() if t not in stop] for row in drawn]
        row: dict[str, Any] = {}
        for mode, generator in generators.items():
            before = generator.stats
            generator.generate(prompts, params)
            after = generator.stats
            counts = {key: after[key] - before[key] for key in ("decode_steps", "decode_kv_positions")}
            seconds = after["decode_seconds"] - before["decode_seconds"]
            read = decode_bytes(shape, counts["decode_steps"], counts["decode_kv_positions"], dtype.itemsize)
            row[mode] = {
                "decode_efficiency": utilization(read, seconds, bandwidth),
                "step_seconds": seconds / max(counts["decode_steps"], 1),
            }
            if mode == KERNEL_MODE:
                row[mode]["kernels"] = backend()
        before = max(row["concatenating"]["decode_efficiency"], 1e-12)
        row["gain"] = row["in place"]["decode_efficiency"] / before
        if KERNEL_MODE in row:
            row["kernel_gain"] = row[KERNEL_MODE]["decode_efficiency"] / before
        out[str(context)] = row
    return out


def vllm_python(environ: Mapping[str, str], root: Path) -> Path | None:
    """The Python of the environment where vLLM is installed: VLLM_VENV, else `.venv-vllm` under `root`, else
    `venv-vllm` in r3l's cache (where .ci/vllm_tests makes it); None where there is none."""
    from r3l.models.gguf import cache_root

    if environ.get("VLLM_VENV"):
        venvs = [Path(environ["VLLM_VENV"])]
    else:
        venvs = [root / ".venv-vllm", cache_root(environ) / "venv-vllm"]
    return next((python for python in (venv / "bin" / "python" for venv in venvs) if python.exists()), None)


def vllm_episodes(config: Config, turns_list: Sequence[int]) -> dict[str, Any] | str:
    """The same episodes played by vLLM with prefix caching (r3l/bench/multi_turn_vllm.py, in vLLM's environment),
    or a line saying why they were not."""
    import json
    import os
    import subprocess
    import tempfile

    from r3l.config import dump_config

    python = vllm_python(os.environ, Path.cwd())
    if python is None:
        return "vLLM (prefix caching): not measured, no vLLM environment (set VLLM_VENV, or run .ci/vllm_tests)"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(dump_config(config))
        command = [str(python), "-m", "r3l.bench.multi_turn_vllm", str(path), "--turns", ",".join(map(str, turns_list))]
        source = str(Path(__file__).resolve().parents[2])  # this r3l, whatever that environment has installed
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": source})
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"vLLM (prefix caching): its run failed ({tail[:200]})"
    return json.loads(done.stdout.strip().splitlines()[-1])


@section("multi_turn", order=45, title="Multi-turn episodes: keys and values kept across turns")
def multi_turn(ctx: BenchContext) -> SectionResult:
    repeats = max(1, ctx.repeats)
    workloads = per_workload(ctx.config, WORKLOADS, lambda config: measure_episodes(config, repeats, TURNS))
    data = {
        "model": ctx.config.model.name,
        "episodes": EPISODES,
        "max_new_tokens": MAX_NEW_TOKENS,
        "repeats": repeats,
        "workloads": workloads,
        "long_context_decode": long_context_decode(ctx.config),
        "vllm": vllm_episodes(ctx.config, TURNS),
    }
    return SectionResult(data, table(data))


def table(data: dict) -> str:
    cell = lambda figures: spread_cell(figures, ".2f")  # noqa: E731
    lines = [
        f"Model {data['model']}; {data['episodes']} episodes in flight, up to {data['max_new_tokens']} tokens a reply, "
        f"no early stops; {data['repeats']} batches per mode, the modes alternating; medians [min, max].",
        "",
        "| workload | turns | cache | s / episode | turns played | prefilled / episode | decoded / episode | "
        "turn 1 s | turn 20 s | turn 20 / 1: time (decode) | decode bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, sizes in data["workloads"].items():
        if "skipped" in sizes:
            lines.append(f"| {label} | skipped: {sizes['skipped']} | | | | | | | | | |")
            continue
        for turns, row in sizes.items():
            for mode in MODES:
                figures = row[mode]
                turn_20 = cell(figures["turn_20_seconds"]) if "turn_20_seconds" in figures else "-"
                lines.append(
                    f"| {label} | {turns} | {mode} | {cell(figures['wall_seconds_per_episode'])} | "
                    f"{figures['turns_per_episode']['median']:.1f} | "
                    f"{figures['prefilled_per_episode']['median']:.0f} | "
                    f"{figures['decoded_per_episode']['median']:.0f} | {cell(figures['turn_1_seconds'])} | {turn_20} | "
                    f"{growth_cells(row.get('growth', {}).get(mode))} |"
                )
            lines.append(f"| {label} | {turns} | off / on | **{row['speedup']:.2f}x** | | | | | | | |")
    lines += [
        "",
        "| context | decode cache | decode efficiency | s / step |",
        "|---|---|---|---|",
    ]
    for context, row in data["long_context_decode"].items():
        for mode in ("concatenating", "in place", KERNEL_MODE):
            if mode in row:
                label = f"{mode} ({row[mode]['kernels']})" if row[mode].get("kernels") else mode
                lines.append(
                    f"| {context} | {label} | {row[mode]['decode_efficiency']:.1%} | {row[mode]['step_seconds']:.3f} |"
                )
        lines.append(f"| {context} | in place / concatenating | **{row['gain']:.2f}x** | |")
        if "kernel_gain" in row:
            lines.append(f"| {context} | in place with the kernel / concatenating | **{row['kernel_gain']:.2f}x** | |")
    lines += ["", *vllm_lines(data["vllm"])]
    return "\n".join(lines) + "\n"


def growth_cells(growth: dict[str, float] | None) -> str:
    """Turn 20 over turn 1: its time (its decoding's time), and the bytes its decoding read."""
    if not growth:
        return "- | -"
    return f"{growth['seconds']:.2f}x ({growth['decode_seconds']:.2f}x) | {growth['decode_bytes']:.2f}x"


def vllm_lines(vllm: dict[str, Any] | str) -> list[str]:
    if isinstance(vllm, str):
        return [vllm]
    lines = [
        "vLLM, prefix caching on, the same episodes (one batch each):",
        "",
        "| workload | turns | s / episode | turns played | decoded / episode | turn 1 s | turn 20 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, sizes in vllm.items():
        if "skipped" in sizes:
            lines.append(f"| {label} | skipped: {sizes['skipped']} | | | | | |")
            continue
        for turns, figures in sizes.items():
            turn_20 = "-" if figures["turn_20_seconds"] is None else f"{figures['turn_20_seconds']:.2f}"
            lines.append(
                f"| {label} | {turns} | {figures['wall_seconds_per_episode']:.2f} | "
                f"{figures['turns_per_episode']:.1f} | {figures['decoded_per_episode']:.0f} | "
                f"{figures['turn_1_seconds']:.2f} | {turn_20} |"
            )
    return lines
