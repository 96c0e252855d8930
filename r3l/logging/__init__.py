"""Metrics sinks (JSONL, TensorBoard, W&B), the training progress bar, and report plots."""

from r3l.logging.plots import render_report
from r3l.logging.progress import TrainProgress, console
from r3l.logging.sinks import (
    JsonlSink,
    MetricsLogger,
    TensorBoardSink,
    WandbSink,
    read_metrics,
)

__all__ = [
    "JsonlSink",
    "MetricsLogger",
    "TensorBoardSink",
    "TrainProgress",
    "WandbSink",
    "console",
    "read_metrics",
    "render_report",
]
