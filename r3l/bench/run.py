"""Run the requested bench sections in order and write their results."""

from __future__ import annotations

import shutil
from pathlib import Path

from r3l.bench import report
from r3l.bench.registry import BenchContext, plan
from r3l.bench.trl_side import TRL_GENERATORS
from r3l.config import Config
from r3l.errors import Interrupted, UserError


def default_out_dir(config: Config) -> Path:
    from r3l.trainer import new_run_dir

    name = f"bench-{config.env.name}-{Path(config.model.name).name.replace(':', '-')}"
    return new_run_dir(config.model_copy(update={"run": config.run.model_copy(update={"name": name})}))


def run_bench(
    config: Config,
    vs: str | None = None,
    out: Path | None = None,
    repeats: int = 5,
    warmup: int = 2,
    sections: str | None = None,
    command: str = "r3l bench",
    trl_generator: str = "auto",
) -> tuple[Path, str]:
    """Run the bench; return its output directory and the Markdown it printed to bench.md."""
    if repeats < 1 or warmup < 0:
        raise UserError("--repeats must be at least 1 and --warmup at least 0")
    if config.distributed.rollout_workers or config.distributed.learner_ranks > 1:
        raise UserError(
            "r3l bench measures one process: set distributed.rollout_workers=0 and distributed.learner_ranks=1"
        )
    if trl_generator not in TRL_GENERATORS:
        raise UserError(f"--trl-generator {trl_generator}: choose from {', '.join(TRL_GENERATORS)}")
    chosen = plan([name.strip() for name in sections.split(",") if name.strip()] if sections else None)
    made = out is None or not out.exists()
    out_dir = out if out is not None else default_out_dir(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    context = BenchContext(
        config=config, out_dir=out_dir, repeats=repeats, warmup=warmup, vs=vs, trl_generator=trl_generator
    )
    markdown = ""
    try:
        for section in chosen:
            context.results[section.name] = section.run(context)
            markdown = report.write(out_dir, command, chosen, context.results)  # a later section's failure keeps these
    except BaseException as error:  # a failure or a Ctrl-C before any section finished leaves no directory
        if not markdown and made:
            shutil.rmtree(out_dir, ignore_errors=True)
        if isinstance(error, (KeyboardInterrupt, Interrupted)):
            raise Interrupted(
                f"the finished sections are in {out_dir / report.MARKDOWN_FILE}"
                if markdown
                else "no section had finished; nothing was kept"
            ) from None
        raise
    return out_dir, markdown
