"""Metric sinks (JSONL, TensorBoard, W&B) and the MetricsLogger that fans out to them."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from r3l.errors import UserError

METRICS_FILE = "metrics.jsonl"
WANDB_MISSING = "W&B logging needs the wandb package: pip install 'r3l[wandb]'"


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/inf: write non-finite numbers as null; numbers as plain ints/floats; the rest as it is."""
    number = _number(value)
    if number is None:
        return value
    return number if math.isfinite(number) else None


def _number(value: Any) -> float | int | None:
    """A plain int/float (NaN and inf kept) from a Python, numpy or 0-d tensor number; None for anything else."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _prefixed(metrics: dict[str, Any], prefix: str | None) -> dict[str, Any]:
    if not prefix:
        return dict(metrics)
    prefix = prefix.rstrip("/")
    return {f"{prefix}/{k}": v for k, v in metrics.items()}


class JsonlSink:
    """Appends one JSON line per log call to run_dir/metrics.jsonl, flushed at once."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run; close() closes it

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Non-finite values are written as null and their keys listed under "nonfinite" (never dropped)."""
        row: dict[str, Any] = {"step": int(step), "time": time.time()}
        values = {k: _finite_or_none(v) for k, v in metrics.items()}
        row.update(values)
        nonfinite = sorted(k for k, v in values.items() if v is None and metrics[k] is not None)
        if nonfinite:
            row["nonfinite"] = nonfinite
        self._file.write(json.dumps(row, allow_nan=False, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class TensorBoardSink:
    """Writes numeric metrics as TensorBoard scalars under run_dir/tensorboard."""

    def __init__(self, run_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise UserError(
                "TensorBoard logging needs torch and tensorboard: pip install tensorboard, "
                "or turn TensorBoard logging off"
            ) from e

        self._writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Numbers only (text values have no scalar form); NaN and inf are written as they are."""
        for key, value in metrics.items():
            value = _number(value)
            if value is None:
                continue
            self._writer.add_scalar(key, value, global_step=int(step))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Logs to Weights & Biases; settings are passed to wandb.init (project, name, mode, ...)."""

    def __init__(self, run_dir: Path, settings: dict[str, Any]):
        try:
            import wandb
        except ImportError as e:
            raise UserError(WANDB_MISSING) from e
        self._wandb = wandb
        kwargs = {"dir": str(run_dir), **settings}
        self._run = wandb.init(**kwargs)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._run.log({k: _number(v) if _number(v) is not None else v for k, v in metrics.items()}, step=int(step))

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    """Fans one metrics dict per step out to JSONL (always), TensorBoard and W&B (optional)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: dict | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.sinks: list[Any] = []
        try:
            if wandb is not None:  # first, so a missing package fails before files are opened
                self.sinks.append(WandbSink(self.run_dir, wandb))
            self.sinks.insert(0, JsonlSink(self.run_dir))
            if tensorboard:
                self.sinks.append(TensorBoardSink(self.run_dir))
        except BaseException:
            self.close()
            raise

    def log(self, step: int, metrics: dict[str, float | int], prefix: str | None = None) -> None:
        metrics = _prefixed(metrics, prefix)
        for sink in self.sinks:
            sink.log(step, metrics)

    def close(self) -> None:
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(run_dir: Path) -> list[dict]:
    """All rows of run_dir/metrics.jsonl; a truncated or corrupt line (e.g. from a killed run) is skipped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise UserError(f"no {METRICS_FILE} in {run_dir}; pass a run directory written by `r3l train`")
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows
