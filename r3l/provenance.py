"""Where a run came from: the code and machine of each session of it, the tasks each step trained on, and paths
written relative to where the run was started (never the machine's absolute paths)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from r3l.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".yaml", ".txt")  # code, presets and prompt templates: what changes a run's behaviour
PROVENANCE_FILE = "provenance.jsonl"
TASKS_FILE = "tasks.jsonl"
SHORT_HASH = 12


def short_hash(text: str) -> str:
    """A short, stable fingerprint of a text (a prompt, a file)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:SHORT_HASH]


def source_hash(root: Path = PACKAGE_DIR) -> str:
    """Fingerprint of the package's source (code, presets, prompts): changes with any edit, committed or not."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:SHORT_HASH]


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@cache
def code_version() -> dict[str, Any]:
    """The code running now: a hash of the package's source, and where the package is a git checkout, its
    commit and whether the checkout had uncommitted changes to it."""
    from r3l import __version__

    commit = _git(PACKAGE_DIR, "rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git(PACKAGE_DIR, "status", "--porcelain", "--", ".")
        dirty = bool(status) if status is not None else None
    return {"version": __version__, "source_hash": source_hash(), "commit": commit, "dirty": dirty}


def cpu_name(cpuinfo: str) -> str:
    """The processor named by /proc/cpuinfo's text: its model name, with family and model numbers where the name
    alone does not tell one generation from another ("AMD EPYC" is every EPYC)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
        if not line.strip():
            break  # the first processor's block
    name = fields.get("model name") or fields.get("Model") or fields.get("Hardware") or ""
    numbers = [f"{key} {fields[key]}" for key in ("cpu family", "model") if fields.get(key)]
    return f"{name} ({', '.join(numbers)})" if name and numbers else name


def package_version(name: str) -> str | None:
    """An installed distribution's version; None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def gpu_names() -> list[str]:
    """The GPUs' names, without initialising CUDA in a process that has not yet (one that forks GPU workers later
    must not have): from torch where CUDA is up, else from nvidia-smi, else "CUDA device" per device."""
    import torch

    if not torch.cuda.is_available():
        return []
    if torch.cuda.is_initialized():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
        names = [line.strip() for line in listed.stdout.splitlines() if line.strip()] if listed.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        names = []
    return names or ["CUDA device"] * torch.cuda.device_count()


@cache
def machine() -> dict[str, Any]:
    """The machine running now, as far as it changes timings and sampled numbers: processor, cores, GPUs, and
    the versions of the libraries that compute (the same code and seed sample otherwise on another processor)."""
    import torch

    try:
        cpu = cpu_name(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu = ""
    gpus = gpu_names()
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpus": gpus,
        "torch": torch.__version__,
        "transformers": package_version("transformers"),
    }


def machine_label(record: dict[str, Any]) -> str:
    """One line for a machine record: "AMD EPYC (cpu family 26, model 2), 2 cores; torch 2.13.0+cpu, ..."."""
    gpus = record.get("gpus") or []
    where = f"{record.get('cpu') or 'unknown processor'}, {record.get('cores')} cores"
    if gpus:
        where += ", " + ", ".join(f"{gpus.count(name)}x {name}" for name in dict.fromkeys(gpus))
    libraries = ", ".join(f"{name} {record[name]}" for name in ("torch", "transformers") if record.get(name))
    return f"{where}; {libraries}" if libraries else where


def sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The sessions recorded in a run's provenance.jsonl, oldest first (none for a run made before it)."""
    path = run_dir / PROVENANCE_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def code_change(run_dir: Path, current: dict[str, Any]) -> str | None:
    """Why resuming `run_dir` with the code `current` would mix two versions of the code; None when it would not
    (same source, or a run that recorded no version)."""
    recorded = [s for s in sessions(run_dir) if s.get("source_hash")]
    if not recorded or recorded[-1]["source_hash"] == current["source_hash"]:
        return None
    last = recorded[-1]
    where = (
        f" (commit {str(last['commit'])[:10]}{', dirty' if last.get('dirty') else ''})" if last.get("commit") else ""
    )
    return f"its last session ran source {last['source_hash']}{where}, this code is {current['source_hash']}"


def check_resume(run_dir: Path, allow_code_change: bool) -> None:
    """Refuse to resume a run under other code than it ran with, unless the user allows it (it is recorded)."""
    change = code_change(run_dir, code_version())
    if change and not allow_code_change:
        raise UserError(
            f"{display_path(run_dir)} ran other code: {change}; resuming would mix two versions in one run. Start a "
            "new run, or pass --allow-code-change (recorded in its provenance.jsonl)"
        )


def record_session(run_dir: Path, kind: str, *, step: int, allowed_code_change: bool = False) -> dict[str, Any]:
    """Append this session (start or resume) to the run's provenance.jsonl; returns the record."""
    record = {
        "session": kind,
        "step": step,
        "time": time.time(),
        **code_version(),
        "allowed_code_change": allowed_code_change,
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "python": sys.version.split()[0],
        "machine": machine(),
    }
    with open(run_dir / PROVENANCE_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def task_record(step: int, tasks: Iterable[Any]) -> dict[str, Any]:
    """What step `step` trained on: each task's id and a short hash of its prompt."""
    return {"step": step, "tasks": [[task.id, short_hash(task.prompt)] for task in tasks]}


def record_tasks(run_dir: Path, step: int, tasks: Sequence[Any]) -> None:
    """Append the tasks drawn for `step` to tasks.jsonl (a step drawn again after a resume appears again)."""
    with open(run_dir / TASKS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(task_record(step, tasks)) + "\n")


def trained_tasks(run_dir: Path) -> dict[int, list[tuple[str, str]]]:
    """step -> [(task id, prompt hash)] from tasks.jsonl; the latest record of a step wins (a resume redraws)."""
    path = run_dir / TASKS_FILE
    steps: dict[int, list[tuple[str, str]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.strip():
            record = json.loads(line)
            steps[record["step"]] = [(task_id, prompt) for task_id, prompt in record["tasks"]]
    return steps


def display_path(path: Path | str) -> str:
    """`path` relative to the working directory where it lies under it, else as given, never made absolute."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        return text
    try:
        return os.path.relpath(text, os.getcwd()) if Path(text).is_relative_to(Path.cwd()) else text
    except ValueError:  # another drive (Windows)
        return text
