"""The `r3l` command line: train, eval, rollout, envs, report, config."""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import json
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from r3l.errors import Interrupted, RunStopped, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Reinforcement learning for language models that learn from their own failures.",
)

ARGS_HELP = "An optional CONFIG (YAML path or preset name) followed by key.sub=value overrides."


def interruptible(what_is_kept: str):
    """Ctrl-C in the command: one line that says `what_is_kept` (elsewhere the line just says "interrupted";
    train and bench say what they kept by raising Interrupted themselves)."""

    def decorator(command):
        @functools.wraps(command)
        def run(*args, **kwargs):
            try:
                return command(*args, **kwargs)
            except KeyboardInterrupt:
                raise Interrupted(what_is_kept) from None

        return run

    return decorator


def split_args(args: list[str] | None) -> tuple[str | None, list[str]]:
    args = list(args or [])
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


def load(args: list[str] | None, extra: Sequence[str] = (), first: Sequence[str] = ()):
    """CONFIG with `first` (option shorthands), then the key=value overrides, then `extra` applied."""
    from r3l.config import env_preset_note, load_config

    path, overrides = split_args(args)
    config = checked(load_config(path, [*first, *overrides, *extra]))
    note = env_preset_note(path, [*first, *overrides, *extra])
    if note:
        PENDING_NOTES.append(note)
    return config


PENDING_NOTES: list[str] = []  # said once the command's run is built: a refusal before it stays one line


def say_pending_notes() -> None:
    for note in PENDING_NOTES:
        typer.echo(note, err=True)
    PENDING_NOTES.clear()


def each_values(each: str | None) -> tuple[str | None, list[str | None]]:
    """`--each KEY=V1,V2,...` as (KEY, [V1, V2, ...]); (None, [None]) without it. The model loads once, so keys
    of the model and the generator are refused."""
    if each is None:
        return None, [None]
    key, _, listed = each.partition("=")
    values = [value.strip() for value in listed.split(",") if value.strip()]
    if not key or not values:
        raise UserError(f"--each {each!r}: give KEY=V1,V2,... (e.g. --each env.args.test_path=a.jsonl,b.jsonl)")
    if key.split(".")[0] in ("model", "generator"):
        raise UserError(f"--each {key}: one model is evaluated per command; run `r3l eval` once per model instead")
    return key, list(values)


def each_table(key: str, values: Sequence[str | None], summaries: Sequence[dict]) -> str:
    """One line per value of `--each`: its tasks and success rate with its 95% interval (and R3's second try)."""

    def rate(result: dict) -> str:
        low, high = result["ci95"]
        return f"{result['success']:.3f} [{low:.3f}, {high:.3f}]"

    second = any("second_try" in summary for summary in summaries)
    lines = [f"| {key} | tasks | success [95%] |" + (" second try [95%] |" if second else ""), "|---|---|---|"]
    lines[1] += "---|" if second else ""
    for value, summary in zip(values, summaries):
        cells = [str(value), str(summary["total"]), rate(summary.get("first_try", summary))]
        cells += [rate(summary["second_try"])] if second else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checked(config):
    """`config`, once its model names something: a bad name is refused before torch and the trainer load."""
    from r3l.models import check_model_name

    check_model_name(config.model.name)
    return config


@app.command()
def train(
    args: list[str] | None = typer.Argument(None, help=ARGS_HELP),
    resume: Path | None = typer.Option(
        None, "--resume", help="Continue the run in this directory from its last checkpoint."
    ),
    dump_experiences: bool = typer.Option(
        False, "--dump-experiences", help="Write every step's experiences as JSONL into RUN/experiences/."
    ),
    allow_code_change: bool = typer.Option(
        False,
        "--allow-code-change",
        help="With --resume: continue a run under other code than it ran with (recorded in RUN/provenance.jsonl).",
    ),
):
    """Train a policy (default: GRPO on the embedded SmolLM2-135M, arithmetic task)."""
    from r3l.config import load_config

    extra = ["logging.dump_experiences=true"] if dump_experiences else []
    if resume is not None:
        saved = resume / "config.yaml"
        if not saved.exists():
            raise UserError(f"{resume} is not a run directory (no config.yaml); pass the directory `r3l train` printed")
        path, overrides = split_args(args)
        if path is not None:
            raise UserError("--resume takes the config saved in the run directory; pass only key=value overrides")
        config = checked(load_config(str(saved), [*overrides, *extra]))
    else:
        if allow_code_change:
            raise UserError("--allow-code-change goes with --resume RUN_DIR; a new run has no earlier code")
        config = load(args, extra)
    from r3l.trainer import Trainer

    trainer = Trainer(config, run_dir=resume, resume=resume is not None, allow_code_change=allow_code_change)
    say_pending_notes()
    typer.echo(f"run directory: {trainer.run_dir}", err=True)
    summary = trainer.run()
    typer.echo(json.dumps(summary, indent=1))
    if summary.get("interrupted"):  # a first Ctrl-C: the step finished and was checkpointed
        raise Interrupted(f"stopped after step {summary['step']} of {config.train.steps}; {trainer.resume_hint()}")


@app.command("eval")
@interruptible("nothing was written")
def evaluate_command(
    args: list[str] | None = typer.Argument(None, help=ARGS_HELP),
    model: str | None = typer.Option(None, "--model", help="Alias, local path, run directory or hub id."),
    out: Path | None = typer.Option(None, "--out", help="Directory for eval.json (default: a new run directory)."),
    attempts: int | None = typer.Option(
        None, "--attempts", min=1, max=2, help="2: first try, then a reflection and a second try on failures (R3)."
    ),
    each: str | None = typer.Option(
        None,
        "--each",
        help="KEY=V1,V2,...: evaluate the one model once per value, e.g. env.args.test_path=gsm8k.jsonl,math500.jsonl "
        "(a paper's test sets); one table, every result in eval.json.",
    ),
):
    """Held-out success rate of a model on a task's test split, with a 95% confidence interval."""
    extra = [f"model.name={model}"] if model else []
    extra += [f"eval.attempts={attempts}"] if attempts else []
    key, values = each_values(each)
    configs = [load(args, extra + ([f"{key}={value}"] if key else [])) for value in values]  # refused before imports
    config = configs[0]
    from r3l.build import (
        env_factory,
        evaluate_held_out,
        held_out_tasks,
        load_model,
        make_generator,
        planned_threads,
        rollout_context,
    )
    from r3l.evaluate import format_hint
    from r3l.trainer import new_run_dir

    make_envs = [env_factory(each_config) for each_config in configs]  # every value checked before the model loads
    policy, tokenizer = load_model(config)
    generator = make_generator(config, policy, tokenizer)
    records, summaries = [], []
    threads: dict[str, float] = {}
    for each_config, make_env in zip(configs, make_envs):
        tasks = held_out_tasks(each_config, make_env())
        context = rollout_context(each_config, make_env, generator, tokenizer)
        with planned_threads(each_config, policy, "generate", threads):
            record, summary, _ = evaluate_held_out(each_config, tasks, context)
        hint = format_hint(summary, each_config.structured.replies)
        if hint:
            typer.echo(hint, err=True)
        records.append(record)
        summaries.append(summary)
    if key:
        record = {"each": key, "evaluations": [{"value": v, **r} for v, r in zip(values, records)]}
        summary = {"each": key, "evaluations": [{"value": v, **r} for v, r in zip(values, summaries)]}
        typer.echo(each_table(key, values, summaries), err=True)
    made = out is None or not out.exists()
    out_dir = out or new_run_dir(
        config.model_copy(
            update={
                "run": config.run.model_copy(update={"name": f"eval-{config.env.name}-{Path(config.model.name).name}"})
            }
        )
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "eval.json").write_text(
            json.dumps({"model": config.model.name, "env": config.env.name, **record}, indent=1)
        )
    except BaseException:  # a full disk, a Ctrl-C: no directory without its eval.json
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    typer.echo(json.dumps({"eval_json": str(out_dir / "eval.json"), **summary, **threads}, indent=1))


@app.command()
@interruptible("nothing was written")
def rollout(
    args: list[str] | None = typer.Argument(None, help=ARGS_HELP),
    dump: Path | None = typer.Option(None, "--dump", help="Write one JSON object per experience to this file."),
    tasks: int = typer.Option(2, "--tasks", min=1, help="How many training tasks to roll out."),
    show: bool = typer.Option(True, "--show/--no-show", help="Print the experiences with their trained spans."),
    env: str | None = typer.Option(None, "--env", help="Environment (same as env=NAME)."),
    strategy: str | None = typer.Option(
        None,
        "--strategy",
        "--algorithm",
        help="Algorithm preset, e.g. r3l, grpo, reflect_grpo (same as algorithm=NAME).",
    ),
):
    """Generate experiences for a few tasks without training (see exactly what would be trained)."""
    config = load(args, first=[*([f"env={env}"] if env else []), *([f"algorithm={strategy}"] if strategy else [])])
    from r3l.algorithms import assign_advantages
    from r3l.build import build_parts, planned_threads
    from r3l.display import show_experiences
    from r3l.experience import write_jsonl
    from r3l.seeding import seed_everything
    from r3l.task_sampler import TaskSampler
    from r3l.trainer import check_algorithm_names

    check_algorithm_names(config)
    seed_everything(config.run.seed)
    parts = build_parts(config)
    pool = parts.strategy.training_tasks(parts.make_env().tasks("train"), run_dir=None, limit=tasks)
    batch = TaskSampler(pool, seed=config.run.seed).next_batch(tasks)
    say_pending_notes()
    typer.echo(
        f"exploring {len(batch)} task(s) of {config.env.name} with {config.algorithm.name} "
        f"({config.sampling.group_size} episodes each)",
        err=True,
    )
    threads: dict[str, float] = {}
    with planned_threads(config, parts.model, "generate", threads):
        experiences, metrics = parts.strategy.explore(batch, step=0)
    metrics.update(threads)
    assign_advantages(experiences, config.algorithm.advantage, config.algorithm.advantage_args)
    if show:
        show_experiences(experiences, parts.tokenizer)
    if dump is not None:
        write_jsonl(experiences, dump)
    typer.echo(
        json.dumps({"experiences": len(experiences), **({"dump": str(dump)} if dump else {}), **metrics}, indent=1)
    )


@app.command()
def bench(
    args: list[str] | None = typer.Argument(None, help=ARGS_HELP),
    vs: str | None = typer.Option(None, "--vs", help="Also run this trainer side by side at equal work: trl."),
    out: Path | None = typer.Option(
        None, "--out", help="Directory for bench.json and bench.md (default: a new run directory)."
    ),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Measured steps per side (after the warm-up)."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Unmeasured steps per side first."),
    sections: str | None = typer.Option(None, "--sections", help="Comma-separated sections (default: all)."),
    trl_generator: str = typer.Option(
        "auto",
        "--trl-generator",
        help="TRL's generation: hf, vllm (its colocate mode, CUDA only) or auto (vllm where it can run).",
    ),
):
    """Speed of a GRPO step side by side with TRL and against the machine's limits -> bench.json, bench.md."""
    config = load(args)
    from r3l.bench.run import run_bench

    command = " ".join(["r3l", *sys.argv[1:]])
    out_dir, markdown = run_bench(
        config,
        vs=vs,
        out=out,
        repeats=repeats,
        warmup=warmup,
        sections=sections,
        command=command,
        trl_generator=trl_generator,
    )
    typer.echo(markdown + f"\nwritten: {out_dir / 'bench.json'}, {out_dir / 'bench.md'}")


@app.command()
def envs(name: str | None = typer.Argument(None, help="Show this environment's settings (env.args).")):
    """List the environments with a one-line description each, or one environment's settings."""
    from r3l.envs import available, env_class
    from r3l.envs.arguments import describe

    if name is not None:
        typer.echo(describe(name, env_class(name)))
        return
    for name, description in available():
        typer.echo(f"{name:<20} {description}")
    typer.echo("\nsettings of one: r3l envs NAME")


@app.command()
def plan(
    args: list[str] | None = typer.Argument(None, help=ARGS_HELP),
    gpu_memory: float | None = typer.Option(
        None,
        "--gpu-memory",
        help="GiB of each GPU (default 80: an A100/H100 80GB); with --device cpu, of the machine (default: what this "
        "process may hold).",
    ),
    device: str | None = typer.Option(
        None, "--device", help="cuda or cpu (default: cpu where model.device=cpu, else cuda)."
    ),
    prompt_tokens: int = typer.Option(
        512, "--prompt-tokens", min=1, help="The longest single-turn prompt, in tokens (multi-turn: the context)."
    ),
):
    """The memory each device needs for this config (from the model's shape alone, no weights loaded) against
    --gpu-memory, and what a step generates; exit 2 with one line where it does not fit."""
    from r3l.config import load_config
    from r3l.plan import plan_table

    path, overrides = split_args(args)
    config = load_config(path, overrides)
    chosen = device or ("cpu" if config.model.device == "cpu" else "cuda")
    if chosen not in ("cuda", "cpu"):
        raise UserError(f"--device {chosen}: use cuda or cpu")
    native, memory = True, gpu_memory if gpu_memory is not None else 80.0
    if chosen == "cpu":
        import torch

        from r3l.memory import memory_limit_mib
        from r3l.models.precision import native_bf16

        native = native_bf16(torch.device("cpu"))
        limit = memory_limit_mib()
        memory = gpu_memory if gpu_memory is not None else (round(limit[0] / 1024, 1) if limit else 80.0)
    table, fits, change = plan_table(config, memory, chosen, native, prompt_tokens)
    typer.echo(table)
    if not fits:
        where = "of memory" if chosen == "cpu" else "per GPU"
        raise UserError(f"this layout does not fit in {memory:g} GiB {where}: {change}")


@app.command()
def generators(name: str | None = typer.Argument(None, help="Show this generator's settings (generator.NAME).")):
    """List the generators, or one generator's settings with their defaults and help."""
    from r3l.build import GENERATOR_PACKAGES
    from r3l.registry import import_submodules
    from r3l.rollout.generator import GENERATORS
    from r3l.rollout.generator_settings import describe

    import_submodules(*GENERATOR_PACKAGES)
    chosen = [(name, GENERATORS.get(name))] if name is not None else list(GENERATORS)  # get: one line if unknown
    for listed, cls in chosen:
        typer.echo(describe(listed, cls))


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory written by `r3l train` or `r3l bench`.")):
    """Render PNG plots of a run's metrics into RUN_DIR/plots/."""
    from r3l.logging.hack_watch import hack_watch_line
    from r3l.logging.plots import render_report

    if not run_dir.is_dir():
        raise UserError(
            f"{run_dir} is not a directory; pass a run directory written by `r3l train` or `r3l bench --out DIR`"
        )
    for path in render_report(run_dir):
        typer.echo(str(path))
    watch = hack_watch_line(run_dir)
    if watch:
        typer.echo(watch)


@app.command()
@interruptible("run the same command again to continue the comparison")
def compare(
    args: list[str] | None = typer.Argument(
        None,
        help="Configs to compare (YAML files or algorithm presets such "
        "as grpo, r3l), then key=value overrides for every run.",
    ),
    seeds: str = typer.Option("3", "--seeds", help="A count (3: seeds 0-2) or a list (0,4,7)."),
    base: str | None = typer.Option(
        None, "--base", help="The config algorithm presets are applied to (default: the default job's)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder of the comparison (default: runs/compare-ENV-TIME); "
        "give an earlier one, without configs, to continue it.",
    ),
    parallel: int = typer.Option(1, "--parallel", min=1, help="Runs at once (each its own process)."),
    table_only: bool = typer.Option(False, "--table-only", help="Only rebuild the table and plot from the runs."),
    match_budget: str | None = typer.Option(
        None,
        "--match-budget",
        help="tokens or seconds: run each arm cheaper than the reference arm again, on until it has spent what "
        "the reference spent (arms LABEL@tokens), so baselines are read at equal steps and at equal cost.",
    ),
    budget_of: str | None = typer.Option(
        None, "--budget-of", help="With --match-budget: the reference arm (default: the costliest)."
    ),
    budget_for: str | None = typer.Option(
        None,
        "--budget-for",
        help="With --match-budget: only these arms run on to the budget, comma-separated (default: every arm "
        "cheaper than the reference).",
    ),
    metric: str = typer.Option(
        "success", "--metric", help="success, or reward (average reward, the R3L paper's metric, where graded)."
    ),
    plot_x: str = typer.Option(
        "steps", "--plot-x", help="x axis of the during-training panel: steps, tokens or seconds (equal cost)."
    ),
    allow_code_change: bool = typer.Option(
        False, "--allow-code-change", help="Resume unfinished runs even under other code than they ran with."
    ),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="Read runs of several machines or code versions together (refused otherwise); every arm is marked.",
    ),
):
    """Configs x seeds on one environment, resumable, then tables (held-out success with 95% intervals over
    seeds and problems, changes and differences, cost, overlap, differing settings) and one plot ->
    OUT/compare.md, compare.csv, compare.png."""
    from r3l.compare.run import Reading, run_compare

    names = [arg for arg in args or [] if "=" not in arg]
    overrides = [arg for arg in args or [] if "=" in arg]
    folder, markdown, failed = run_compare(
        names,
        overrides,
        seeds,
        base,
        out,
        parallel,
        table_only,
        match_budget=match_budget,
        budget_of=budget_of,
        budget_for=[name.strip() for name in (budget_for or "").split(",") if name.strip()],
        reading=Reading(metric, plot_x, allow_mixed),
        allow_code_change=allow_code_change,
    )
    typer.echo(markdown + f"\nwritten: {folder / 'compare.md'}, {folder / 'compare.csv'}, {folder / 'compare.png'}")
    if failed:
        raise RunStopped(
            f"{failed} run(s) failed (their logs are beside their folders in {folder}); run the same "
            "command again to retry them"
        )


@app.command()
def config(args: list[str] | None = typer.Argument(None, help=ARGS_HELP)):
    """Print the fully resolved configuration (every key with its value; env.args with the environment's
    defaults filled in, a required one as null; the generator's own settings as given: `r3l generators NAME` lists
    them all with their defaults, and reading them would import torch)."""
    from r3l.config import dump_config
    from r3l.envs import env_class
    from r3l.envs.arguments import default_arguments

    resolved = load(args)
    env = resolved.env.model_copy(
        update={"args": {**default_arguments(env_class(resolved.env.name)), **resolved.env.args}}
    )
    typer.echo(dump_config(resolved.model_copy(update={"env": env})), nl=False)


def main() -> None:
    from r3l.memory import limit_onednn_cache
    from r3l.threads import apply_openmp_wait_defaults

    # Ctrl-C and `kill -INT` stop every phase the same way, also when r3l inherits SIGINT ignored (a background
    # job of a non-interactive shell, where Python leaves it ignored): a KeyboardInterrupt, turned into one line
    # and exit 130 below, with a resumable run or nothing left behind.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.suppress(ValueError, OSError, AttributeError, RuntimeError):  # no stderr, or one without a file
        faulthandler.enable()  # a crash in native code (an abort, a segfault) says where each thread was as it died
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    limit_onednn_cache()
    apply_openmp_wait_defaults()
    # click's exceptions (typer's own copy of click in typer 0.20 and later), found without naming the module
    usage_error: Any = next(kind for kind in typer.BadParameter.__mro__ if kind.__name__ == "ClickException")
    try:
        status = app(standalone_mode=False)  # so that r3l, not click, words a bad option: one `error: ` line
    except usage_error as error:  # an unknown option or command, a bad option value, a missing argument
        if type(error).__name__ == "NoArgsIsHelpError":  # `r3l` alone: the help, printed already
            sys.exit(error.exit_code)
        message = error.format_message().rstrip(".")
        message = message[:1].lower() + message[1:] if message[1:2].islower() else message  # as r3l's own lines
        context = getattr(error, "ctx", None)
        see = f" (see {context.command_path} --help)" if context is not None else ""
        typer.echo(f"error: {message}{see}", err=True)
        sys.exit(error.exit_code)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except UserError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except RunStopped as error:
        typer.echo(f"stopped: {error}", err=True)
        sys.exit(1)
    except OSError as error:  # a full disk, an unwritable or vanished run directory: nothing the run can fix
        where = f" ({error.filename})" if error.filename else ""
        typer.echo(
            f"error: {error.strerror or error}{where}; the last complete checkpoint is kept: free space or "
            "fix the directory, then continue with r3l train --resume RUN_DIR",
            err=True,
        )
        sys.exit(1)
    except Interrupted as interrupt:
        typer.echo(f"interrupted: {interrupt}" if str(interrupt) else "interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:  # before typer runs
        status = 130
    if status == 130:  # typer's answer to a KeyboardInterrupt that no command turned into Interrupted
        typer.echo("interrupted", err=True)
    if isinstance(status, int) and status:
        sys.exit(status)


def entry() -> None:
    """`r3l` and `python -m r3l.cli`: `main()`, then the process ends without the interpreter's teardown of the
    modules it loaded (r3l/process_end.py). An exception main() does not word keeps Python's traceback."""
    from r3l.process_end import end_process, exit_status

    try:
        main()
    except SystemExit as done:
        end_process(exit_status(done.code))
    end_process(0)


if __name__ == "__main__":
    entry()
