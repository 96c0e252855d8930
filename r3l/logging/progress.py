"""Training progress: a rich live bar on a terminal, one compact line per step elsewhere (CI logs)."""

from __future__ import annotations

import math
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# The one console the package prints with: stderr, so stdout stays clean for data (e.g. --dump).
console = Console(stderr=True)
_shared_console = console  # TrainProgress's `console` argument shadows the module name

# (label, exact keys tried first, substring tried next); the first metric found is shown.
_SHOWN: list[tuple[str, tuple[str, ...], str]] = [
    ("reward", ("reward", "reward_mean", "train/reward", "rollout/reward"), "reward"),
    ("success", ("success", "success_rate", "train/success", "rollout/success"), "success"),
    ("retry success", ("retry_success",), "retry_success"),
    ("eval success", ("eval/success",), "eval/success"),
    ("tok/s", ("tokens_per_s", "rollout/tokens_per_s", "train/tokens_per_s"), "tokens_per_s"),
    ("non-finite updates", ("nonfinite_updates",), "nonfinite_updates"),
]
_SHOWN_WHEN_NONZERO = {"non-finite updates"}


def _pick(metrics: dict[str, Any], exact: tuple[str, ...], contains: str, skip_eval: bool) -> Any:
    for key in exact:
        if key in metrics:
            return metrics[key]
    for key, value in metrics.items():
        if contains in key and not (skip_eval and key.startswith("eval")):
            return value
    return None


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _fmt_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def summarize(metrics: dict[str, Any]) -> str:
    """The headline metrics as 'reward 0.41 | success 0.25 | tok/s 1,534' (absent ones left out)."""
    parts = []
    for label, exact, contains in _SHOWN:
        value = _pick(metrics, exact, contains, skip_eval=label != "eval success")
        if value is not None and not (label in _SHOWN_WHEN_NONZERO and value == 0):
            parts.append(f"{label} {_fmt(value)}")
    return " | ".join(parts)


class TrainProgress:
    """Progress of a training run from start_step to total_steps; use as
    `with TrainProgress(n) as p: p.update(step, m)`.

    On a terminal (and enabled) it draws a live rich bar; otherwise each update prints one line
    `step 12/100 | reward 0.41 | success 0.25 | tok/s 1,534 | eta 3:12`.
    """

    def __init__(self, total_steps: int, start_step: int = 0, enabled: bool = True, console: Console | None = None):
        self.total_steps = int(total_steps)
        self.start_step = int(start_step)
        self.console = console if console is not None else _shared_console
        self.live = bool(enabled) and self.console.is_terminal and not self.console.is_dumb_terminal
        self._t0 = time.monotonic()
        self._progress: Progress | None = None
        self._task: Any = None

    def eta_seconds(self, step: int) -> float | None:
        """Remaining time from the mean time per step since start_step; None before the first step."""
        done = step - self.start_step
        if done <= 0:
            return None
        per_step = (time.monotonic() - self._t0) / done
        return per_step * max(0, self.total_steps - step)

    def line(self, step: int, metrics: dict[str, Any]) -> str:
        parts = [f"step {step}/{self.total_steps}"]
        summary = summarize(metrics)
        if summary:
            parts.append(summary)
        eta = self.eta_seconds(step)
        parts.append(f"eta {_fmt_duration(eta)}" if eta is not None else "eta -")
        return " | ".join(parts)

    def _start(self) -> None:
        if not self.live or self._progress is not None:
            return
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[summary]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=self.total_steps, completed=self.start_step, summary="")

    def update(self, step: int, metrics: dict[str, Any]) -> None:
        """Record that `step` finished with these metrics."""
        if not self.live:
            self.console.print(self.line(step, metrics), markup=False, highlight=False, soft_wrap=True)
            return
        self._start()
        assert self._progress is not None
        self._progress.update(self._task, completed=step, summary=summarize(metrics))

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> TrainProgress:
        self._t0 = time.monotonic()
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
