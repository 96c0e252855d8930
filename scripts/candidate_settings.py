"""Where is failure worth learning from, for one model? (issues 21 and 36) The candidate table with its controls.

    python scripts/candidate_settings.py MODEL OUT_DIR [LABEL ...] [--tasks N] [--modes greedy,sampled]
        [--xlam PATH] [--table-only] [key=value ...]   (no LABEL: every candidate; key=value: overrides for every
                                                        setting)

For each setting, on its first N held-out tasks, once greedy and once sampled (the config's temperature, a fixed
seed), before any training (every failed first try's replies, reflections, reports and second tries go to
OUT_DIR/<setting>/replies_<mode>.jsonl, to read what a column's numbers come from):

- 1st try: one episode per task (R3L's base episode);
- R3: each failed first try gets one reflection and a second try (R3's evaluation; single-turn settings only);
- verdict: each failed first try gets the same verdict and a second try, without a reflection (control);
- R3L: each failed first try is reflected on (R3L's report), and retried from the reported pivot with the report's
  guidance (R3L's own exploration code, `r3l.explore.r3l`);
- R3L, no guidance: the same reports, retried from the same pivots without the guidance text
  (`retry_guidance=false`; control: is it the words or the restart?);
- seconds per first-try episode; the share of replies missing the answer format, per column; how many held-out
  games are distinct.

A second-try column is the success rate over all N tasks (a first-try success counts), with the failures it
recovered. Each setting is written to OUT_DIR/<setting>/result.json as each mode is measured; a mode the file holds
is read back, not measured again (resumable; `--modes sampled` later adds the sampled half of a greedy row, with the
settings the row was measured with). `--table-only` measures nothing and rebuilds the table from every setting in
OUT_DIR. The table is OUT_DIR/candidates.md, everything in OUT_DIR/candidates.json. A setting that cannot be built
here (Wordle needs NLTK data) is a row with its reason.

The verdict-alone control is r3l's own (`r3l.reflection.retry.retry_after_verdict`, as `r3l eval --attempts 2`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

FREE = ["sampling.max_new_tokens=96", "eval.max_new_tokens=96"]  # games: <think> a little, then <action>
# the train split is never played here: draw few of its games. A move the game rejects costs a turn, as the games'
# prompt says, instead of ending the episode (the default, R3L's reference on ALFWorld bases): a TextArena game
# answers a rejected move with why ("you already guessed 10"), the feedback a retry can use
GAME = [*FREE, "env.args.train_size=5", "agent.terminate_on=[format_error,repeated_action]"]
SETTINGS: dict[str, list[str]] = {
    "FrozenLake 4x4, not slippery": [
        "env=gym:FrozenLake-v1",
        "env.args.make_args={is_slippery: false}",
        "env.args.max_steps=12",
        "env.args.test_size={n}",
        *GAME,
    ],
    "FrozenLake 8x8, not slippery": [
        "env=gym:FrozenLake8x8-v1",
        "env.args.make_args={is_slippery: false}",
        "env.args.max_steps=30",
        "env.args.test_size={n}",
        "agent.max_context_tokens=8192",
        *GAME,
    ],
    "Sokoban 6x6": ["env=textarena:Sokoban-v0", "env.args.max_steps=20", "env.args.test_size={n}", *GAME],
    "Wordle": ["env=textarena:Wordle-v0", "env.args.max_steps=6", "env.args.test_size={n}", *GAME],
    "GuessTheNumber 1-50": [
        "env=textarena:GuessTheNumber-v0-hardcore",
        "env.args.max_steps=10",
        "env.args.test_size={n}",
        *GAME,
    ],
    "GuessTheNumber 1-20": [
        "env=textarena:GuessTheNumber-v0",
        "env.args.max_steps=10",
        "env.args.test_size={n}",
        *GAME,
    ],
    "Mastermind 4 of 6": ["env=textarena:Mastermind-v0", "env.args.max_steps=20", "env.args.test_size={n}", *GAME],
    "Minesweeper 5x5": ["env=textarena:Minesweeper-v0-small", "env.args.max_steps=20", "env.args.test_size={n}", *GAME],
    "TextWorldExpress coin, 20 turns": [
        "env=textworld_express",
        "env.args.games=[coin]",
        "env.args.max_steps=20",
        "env.args.test_size={n}",
        *GAME,
    ],
    "TextWorldExpress cooking, 30 turns": [
        "env=textworld_express",
        "env.args.games=[cookingworld]",
        "env.args.max_steps=30",
        "env.args.test_size={n}",
        "agent.max_context_tokens=8192",
        *GAME,
    ],
    "BFCL simple, native tools": [
        "env=function_calling",
        "env.args.categories=[simple]",
        "env.args.test_size={n}",
        "sampling.max_new_tokens=128",
        "eval.max_new_tokens=128",
    ],
    "BFCL multiple, native tools": [
        "env=function_calling",
        "env.args.categories=[multiple]",
        "env.args.test_size={n}",
        "sampling.max_new_tokens=128",
        "eval.max_new_tokens=128",
    ],
    "xLAM, native tools": [
        "env=function_calling",
        "env.args.source=xlam",
        "env.args.path={xlam}",
        "sampling.max_new_tokens=128",
        "eval.max_new_tokens=128",
    ],
    # 512: at 256, 20 of 40 of Qwen2.5-Coder-0.5B's greedy replies were cut off before their \\boxed{} answer
    "gsm, \\boxed{}": [
        "env=gsm",
        "env.args.answer_format=boxed",
        "env.args.test_size={n}",
        "sampling.max_new_tokens=512",
        "eval.max_new_tokens=512",
    ],
}
# what every setting shares: R3L's exploration with one base episode and one retry slot per task, reports on
# failures only, bounded reflections
SHARED = [
    "algorithm=r3l",
    "sampling.group_size=2",
    "algorithm.strategy_args.base_fraction=0.5",
    "algorithm.strategy_args.reflect_on_success=false",
    "algorithm.strategy_args.reflection_max_new_tokens=384",
    "eval.reflection_max_new_tokens=128",
]
COLUMNS = ("first", "r3", "verdict", "r3l", "r3l_no_guidance")
HEADERS = (
    "1st try",
    "R3: 2nd after reflection",
    "2nd after verdict (control)",
    "R3L retry from pivot, guided",
    "R3L retry, no guidance (control)",
)


# --- what a reply must contain ---------------------------------------------------------------------------------------
def format_missing(env, text: str) -> bool | None:
    """Whether a single-turn reply lacks the answer format its environment reads (None: not known for this env)."""
    from r3l.grading.answer import extract_tagged

    missing = env.answer_format_missing(text)
    if missing is not None:
        return missing
    if getattr(env, "name", "") == "countdown":
        return extract_tagged(text) is None
    return None


@dataclass
class Column:
    successes: int = 0
    recovered: int = 0
    tried: int = 0  # second tries made (failures given one)
    replies: int = 0
    missing: int = 0  # replies without the answer format
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, n: int, failures: int) -> dict[str, Any]:
        return {
            "success": self.successes / max(1, n),
            "successes": self.successes,
            "recovered": self.recovered,
            "failures": failures,
            "tried": self.tried,
            "replies": self.replies,
            "format_missing": self.missing / self.replies if self.replies else None,
            "seconds": round(self.seconds, 1),
            **self.extra,
        }


def game_of(task) -> str:
    """What makes a held-out task its own game: a game env's `game` (gym_games.py), TextWorldExpress's (game, seed),
    else the task itself (single-turn tasks are distinct by construction)."""
    if "fold" in task.data:
        return f"{task.data['game']}-{task.data['seed']}"
    return str(task.data.get("game", task.id))


def replies_of(steps) -> list[str]:
    """The model's replies in these steps (a retry's own: after the prefix it replays)."""
    return [step.completion.text for step in steps]


def count_replies(column: Column, env, steps, single_turn: bool) -> None:
    for step in steps:
        column.replies += 1
        missing = format_missing(env, step.completion.text) if single_turn else step.action is None
        column.missing += bool(missing)


# --- one setting ---------------------------------------------------------------------------------------------------
class Bench:
    """The model and generator, loaded once; each setting builds its environment and R3L strategy around them."""

    def __init__(self, model: str, first_config):
        from r3l.build import load_model, make_generator

        self.model = model
        self.policy, self.tokenizer = load_model(first_config)
        self.generator = make_generator(first_config, self.policy, self.tokenizer)

    def measure(self, config, n: int, mode: str, seed: int = 1234) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The setting's row for one mode, and one record per failed first try of what each column's second try
        said."""
        from r3l.agent.episodes import trainable
        from r3l.build import agent_limits, env_factory, sampling_params
        from r3l.envs import SingleTurnEnv, env_class
        from r3l.explore import ExploreContext, make_strategy
        from r3l.reflection.prompts import ReflectionPrompts
        from r3l.reflection.retry import as_attempt, reflect_and_retry
        from r3l.rollout.chat import PromptFormat

        make_env = env_factory(config)
        probe = make_env()
        tasks = list(probe.tasks("test"))[:n]
        single_turn = issubclass(env_class(config.env.name), SingleTurnEnv)
        params = sampling_params(config, seed)
        if mode == "greedy":
            params = replace(params, temperature=0.0)
        limits = agent_limits(config)
        context = ExploreContext(
            make_env,
            self.generator,
            self.tokenizer,
            PromptFormat.from_config(config.env),
            limits,
            sampling=params,
            group_size=2,
            report_field_chars=config.structured.report_field_chars if config.structured.reports else None,
        )
        strategy = make_strategy("r3l", context, **config.algorithm.strategy_args)
        columns = {name: Column() for name in COLUMNS}
        try:
            started = time.perf_counter()
            groups = strategy._play_bases(tasks, 0, 1, seed)  # one first try per task, R3L's base episode
            columns["first"].seconds = time.perf_counter() - started
            runs = [group[0] for group in groups]
            failed = [run for run in runs if not run.episode.success]
            replies = {id(run): {"task": run.task.id, "first": replies_of(run.episode.steps)} for run in failed}
            for run in runs:
                columns["first"].successes += run.episode.success
                count_replies(columns["first"], probe, run.episode.steps, single_turn)
            columns["first"].extra["env_errors"] = sum(not trainable(run.episode) for run in runs)
            if single_turn:
                e = config.eval
                prompts = ReflectionPrompts.load(e.reflect_prompt, e.retry_prompt, e.include_feedback)
                self._r3_columns(
                    columns,
                    failed,
                    make_env,
                    prompts,
                    params,
                    e.reflection_max_new_tokens or 128,
                    limits,
                    probe,
                    reflect_and_retry,
                    as_attempt,
                    [replies[id(run)] for run in failed],
                )
            started = time.perf_counter()
            strategy._reflect([run for run in failed if trainable(run.episode)], seed + 1)
            columns["r3l"].extra["reports_valid"] = sum(
                run.reflection is not None and run.reflection.report is not None for run in failed
            )
            columns["r3l"].extra["reports_asking_retry"] = sum(run.wants_retry for run in failed)
            for run in failed:
                replies[id(run)]["r3l_report"] = run.reflection.completion.text if run.reflection else None
            reflect_seconds = time.perf_counter() - started
            for name, guided in (("r3l", True), ("r3l_no_guidance", False)):
                for run in runs:
                    run.retries = []
                strategy.settings = strategy.settings.model_copy(update={"retry_guidance": guided})
                started = time.perf_counter()
                lost, _ = strategy._retry(groups, 1, seed + 2)
                column = columns[name]
                column.seconds = time.perf_counter() - started + reflect_seconds
                column.extra["retries_lost"] = dict(lost)
                pivots = []
                for run in runs:
                    retry = run.retries[0] if run.retries else None
                    if retry is not None:
                        own_steps = retry.episode.steps[retry.episode.prefix_steps :]
                        column.tried += 1
                        pivots.append(retry.start.pivot)
                        count_replies(column, probe, own_steps, single_turn)
                        if id(run) in replies:
                            replies[id(run)][name] = {
                                "pivot": retry.start.pivot,
                                "guidance": retry.start.guidance,
                                "replies": replies_of(own_steps),
                                "success": bool(retry.episode.success),
                            }
                    recovered = retry is not None and retry.episode.success and not run.episode.success
                    column.successes += run.episode.success or recovered
                    column.recovered += recovered
                column.extra["pivot_mean"] = sum(pivots) / len(pivots) if pivots else None
        finally:
            strategy.close()
            close = getattr(probe, "close", None)
            if close is not None:
                close()
        failures = len(failed)
        result = {name: columns[name].record(len(tasks), failures) for name in COLUMNS}
        if not single_turn:
            result["r3"] = result["verdict"] = None
        return {
            "tasks": len(tasks),
            "distinct_games": len({game_of(task) for task in tasks}),
            "seconds_per_episode": columns["first"].seconds / max(1, len(tasks)),
            "single_turn": single_turn,
            "temperature": params.temperature,
            **result,
        }, list(replies.values())

    def _r3_columns(
        self,
        columns,
        failed,
        make_env,
        prompts,
        params,
        reflection_tokens,
        limits,
        probe,
        reflect_and_retry,
        as_attempt,
        records,
    ):
        from r3l.reflection.retry import retry_after_verdict

        attempts = [as_attempt(run.episode) for run in failed]
        started = time.perf_counter()
        retries = reflect_and_retry(
            attempts,
            make_env,
            self.generator,
            prompts,
            replace(params, max_new_tokens=reflection_tokens),
            params,
            n_reflections=1,
            limits=limits,
        )
        columns["r3"].seconds = time.perf_counter() - started
        started = time.perf_counter()
        control = [
            (c.second, c.verdict)
            for c in retry_after_verdict(attempts, make_env, self.generator, prompts, params, limits)
        ]
        columns["verdict"].seconds = time.perf_counter() - started
        for group, record in zip(retries, records):
            record["r3_reflection"] = group[0].reflection.text
        for name, outcomes in (
            ("r3", [(group[0].second, group[0].verdict) for group in retries]),
            ("verdict", control),
        ):
            column = columns[name]
            column.successes = columns["first"].successes
            for (second, verdict), record in zip(outcomes, records):
                record[name] = {"replies": [second.text], "success": bool(verdict.success)}
                column.tried += 1
                column.replies += 1
                column.missing += bool(format_missing(probe, second.text))
                column.successes += verdict.success
                column.recovered += verdict.success
        columns["r3"].extra["refusals"] = sum(
            bool(
                re.search(
                    r"can(?:no|')t assist|unable to (?:assist|help)|I apologi[sz]e, but", group[0].reflection.text, re.I
                )
            )
            for group in retries
        )


# --- the table -----------------------------------------------------------------------------------------------------
def cell(column: dict[str, Any] | None, first: bool = False) -> str:
    """'0.45' for a first try; '0.50 (+2/22)' for a second try: its success over all tasks and the failures it
    recovered; '—' where the column does not apply (R3 on a multi-turn game)."""
    if column is None:
        return "—"
    if first:
        return f"{column['success']:.2f}"
    return f"{column['success']:.2f} (+{column['recovered']}/{column['failures']})"


def missing_cell(result: dict[str, Any]) -> str:
    shares = []
    for name in COLUMNS:
        column = result.get(name)
        share = None if column is None else column.get("format_missing")
        shares.append("—" if share is None else f"{share:.2f}")
    return " / ".join(shares)


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "setting",
        "mode",
        "tasks (distinct)",
        *HEADERS,
        "s/episode",
        "format missing (" + ", ".join(["1st", "R3", "verdict", "guided", "unguided"]) + ")",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['label']} | — | — | not built here: {row['error']} |" + " |" * (len(head) - 4))
            continue
        for mode, result in row["modes"].items():
            lines.append(
                "| "
                + " | ".join(
                    [
                        row["label"],
                        f"{mode} (T={result['temperature']:g})",
                        f"{result['tasks']} ({result['distinct_games']})",
                        *(cell(result[name], first=name == "first") for name in COLUMNS),
                        f"{result['seconds_per_episode']:.1f}",
                        missing_cell(result),
                    ]
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("rest", nargs="*", help="setting labels (default: all), then key=value overrides")
    parser.add_argument("--tasks", type=int, default=40, help="held-out tasks per setting")
    parser.add_argument("--modes", default="greedy,sampled", help="greedy, sampled or both")
    parser.add_argument("--xlam", default=None, help="an xLAM/APIGen .jsonl file (the xLAM setting needs one)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--table-only", action="store_true", help="measure nothing: rebuild the table from OUT_DIR")
    args = parser.parse_intermixed_args(argv)
    labels = [a for a in args.rest if "=" not in a] or list(SETTINGS)
    unknown = [label for label in labels if label not in SETTINGS]
    if unknown:
        sys.exit(f"unknown setting(s) {unknown}; choose from {list(SETTINGS)}")
    extra = [a for a in args.rest if "=" in a]
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"greedy", "sampled"}:
        sys.exit("--modes takes greedy, sampled or both")

    from r3l.config import load_config
    from r3l.errors import UserError

    def overrides_of(label: str) -> list[str]:
        filled = [o.replace("{n}", str(args.tasks)).replace("{xlam}", str(args.xlam)) for o in SETTINGS[label]]
        return [*SHARED, *filled, f"model={args.model}", *extra]

    args.out.mkdir(parents=True, exist_ok=True)
    bench: Bench | None = None
    for label in [] if args.table_only else labels:
        file = args.out / slug(label) / "result.json"
        row: dict[str, Any] = (
            json.loads(file.read_text())
            if file.exists()
            else {
                "label": label,
                "model": args.model,
                "tasks": args.tasks,
                "overrides": overrides_of(label),
                "modes": {},
            }
        )
        missing = [] if "error" in row else [mode for mode in modes if mode not in row["modes"]]
        if not missing:
            print(f"{label}: read back from {file}", flush=True)
            continue
        if label.startswith("xLAM") and not args.xlam:
            print(f"{label}: skipped (give --xlam PATH)", flush=True)
            continue
        if row["model"] != args.model or row["overrides"] != overrides_of(label):
            sys.exit(
                f"{file} was measured with other settings ({row['model']}, {row['overrides']}); give the same "
                "model, --tasks and overrides to add a mode to it, or another OUT_DIR"
            )
        file.parent.mkdir(parents=True, exist_ok=True)
        try:
            config = load_config(None, row["overrides"])
            if bench is None:
                bench = Bench(args.model, config)
            for mode in missing:
                row["modes"][mode], replies = bench.measure(config, args.tasks, mode, args.seed)
                file.write_text(json.dumps(row, indent=1))
                dump = file.parent / f"replies_{mode}.jsonl"
                dump.write_text("".join(json.dumps(record) + "\n" for record in replies))
        except UserError as error:
            row["error"] = str(error)
            file.write_text(json.dumps(row, indent=1))
        print(table([row]).splitlines()[-1] if "error" in row else "\n".join(table([row]).splitlines()[2:]), flush=True)
    # the table holds every setting finished in `out`, not only this command's: a later command adds rows
    every = [
        json.loads(file.read_text())
        for file in (args.out / slug(label) / "result.json" for label in SETTINGS)
        if file.exists()
    ]
    (args.out / "candidates.json").write_text(json.dumps(every, indent=1))
    (args.out / "candidates.md").write_text(table(every))
    print("\n" + table(every))


if __name__ == "__main__":
    main()
