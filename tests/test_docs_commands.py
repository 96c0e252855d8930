"""Every command the docs show is run by a test or listed with the reason it is not (tests/docs_commands.toml).

The commands are those of the fenced shell blocks of README.md and docs/*.md and those quoted in the header
comments of examples/**/*.yaml (`#   r3l ...`). A registry entry, keyed by the command exactly as
`documented_commands` yields it, says one of:
  run = "ARGS"   this test runs the command as written (bash, a fresh folder), `r3l` being `python -m r3l.cli ... ARGS`
                 with ARGS the overrides that make it quick (`{train}` and the like expand from the [quick] table).
                 root = true: in a copy of the repository root (its files linked, results/ copied);
                 needs = "run": a finished run of the tiny model at runs/NAME; setup = "SHELL" runs first;
                 check = "replies": some reply of the run was well formed; check = "metrics": a run wrote metrics.
  test = "tests/test_x.py::test_name"   a test of the suite runs it (the function must exist);
  skip = "why"   it is not run: GPU, data not fetchable here, an install, minutes of machine time, a placeholder.
A command in the docs without an entry, or an entry no longer in the docs, fails here."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.xdist_group("docs_commands")  # with pytest-xdist: one worker runs the docs' commands in turn

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = Path(__file__).with_name("docs_commands.toml")
SHELL_FENCES = {"bash", "sh", "shell", "console", "zsh"}  # every line a command (console: the `$ ` lines)
BARE_FENCE_WORDS = ("r3l", "python", "pip", "bash", "for", "cat", "cd", "git", "source", "env", "OMP_NUM_THREADS=")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
EXAMPLE_COMMAND = re.compile(r"^#   (\S.*)$")  # a header line quoting a command: `#` and three spaces
EXAMPLE_CONTINUED = re.compile(r"^#\s+(\S.*)$")
TIMEOUT_S = 300


@dataclass(frozen=True)
class Documented:
    command: str
    where: str  # file:line of its first line


def strip_comment(line: str) -> str:
    """`line` without a trailing shell comment (a `#` at a word's start, outside quotes), right-stripped."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(lines: list[str], every_line: bool = True) -> list[tuple[int, str]]:
    """(index of first line, command) for the commands in a shell block's lines: comments and blank lines dropped,
    backslash-continued lines joined with one space, a heredoc's body and end word kept in its command (newlines).
    Without `every_line` (a fence with no language) only lines starting with a known command word count."""
    found, i = [], 0
    while i < len(lines):
        start, line = i, strip_comment(lines[i])
        i += 1
        if not line.strip() or (not every_line and not line.lstrip().startswith(BARE_FENCE_WORDS)):
            continue
        command = line.strip()
        while command.endswith("\\") and i < len(lines):
            command = command[:-1].rstrip() + " " + strip_comment(lines[i]).strip()
            i += 1
        heredoc = HEREDOC.search(command)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc[2]:
                body.append(lines[i])
                i += 1
            command = "\n".join([command, *body, heredoc[2]])
            i += 1
        found.append((start, command))
    return found


def markdown_commands(path: Path) -> list[Documented]:
    lines, found, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        i += 1
        if not opening:
            continue
        fence, language = opening[1], opening[2].lower()
        start = i
        while i < len(lines) and not lines[i].lstrip().startswith(fence):
            i += 1
        block, i = lines[start:i], i + 1
        if language == "console":
            block = [line[2:] for line in block if line.startswith("$ ")]
        if language in SHELL_FENCES or language == "":
            for index, command in shell_commands(block, every_line=language != ""):
                found.append(Documented(command, f"{path.relative_to(ROOT)}:{start + index + 1}"))
    return found


def example_commands(path: Path) -> list[Documented]:
    """The commands an example's header comment quotes (`#   r3l ...`, continued by `#     ...` after a backslash)."""
    lines, found = path.read_text().splitlines(), []
    header = lines[: next((n for n, line in enumerate(lines) if not line.startswith("#")), len(lines))]
    i = 0
    while i < len(header):
        quoted = EXAMPLE_COMMAND.match(header[i])
        i += 1
        if not quoted:
            continue
        start, command = i, strip_comment(quoted[1])
        while command.endswith("\\") and i < len(header) and EXAMPLE_CONTINUED.match(header[i]):
            command = command[:-1].rstrip() + " " + strip_comment(EXAMPLE_CONTINUED.match(header[i])[1])
            i += 1
        found.append(Documented(command, f"{path.relative_to(ROOT)}:{start}"))
    return found


def documented_commands() -> list[Documented]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    examples = sorted((ROOT / "examples").rglob("*.yaml"))
    return [c for p in docs for c in markdown_commands(p)] + [c for p in examples for c in example_commands(p)]


def registry() -> tuple[dict[str, str], dict[str, dict]]:
    table = tomllib.loads(REGISTRY.read_text())
    return table.get("quick", {}), table["commands"]


def toml_key(command: str) -> str:
    return json.dumps(command)  # a TOML basic string is a JSON string for what commands hold


# ---------------------------------------------------------------------------------------------- the parser


def test_the_parser_joins_continued_lines_drops_comments_and_keeps_heredocs():
    block = [
        "# a comment line",
        "r3l envs            # environments",
        "",
        "r3l compare grpo r3l --base a.yaml \\",
        "  --seeds 3 --out 'runs/#x'   # the # in quotes stays",
        "cat > f.py <<'PY'",
        "x = 1  # the body is kept as written",
        "PY",
        "OMP_NUM_THREADS=1 r3l bench",
        "                            # a comment continuing the last line's",
    ]
    assert shell_commands(block) == [
        (1, "r3l envs"),
        (3, "r3l compare grpo r3l --base a.yaml --seeds 3 --out 'runs/#x'"),
        (5, "cat > f.py <<'PY'\nx = 1  # the body is kept as written\nPY"),
        (8, "OMP_NUM_THREADS=1 r3l bench"),
    ]
    assert shell_commands(["Some output", "r3l train", "| a | table |"], every_line=False) == [(1, "r3l train")]


def test_the_parser_reads_fences_by_language_and_example_headers(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n```bash\nr3l envs\n```\n```yaml\nr3l: not a command\n```\n```mermaid\nA --> B\n```\n"
        "```console\n$ r3l config\nrun:\n```\n```\nr3l plan x.yaml\nan output line\n```\n"
    )
    assert markdown_commands(doc) == [
        Documented("r3l envs", "doc.md:3"),
        Documented("r3l config", "doc.md:12"),
        Documented("r3l plan x.yaml", "doc.md:16"),
    ]
    example = tmp_path / "ex.yaml"
    example.write_text(
        "# What it is:\n#   r3l compare a b \\\n#     --seeds 3   # three\n# prose `r3l plan`\nmodel: x\n#   r3l no\n"
    )
    assert example_commands(example) == [Documented("r3l compare a b --seeds 3", "ex.yaml:2")]


# ---------------------------------------------------------------------------------------------- the registry

ENTRY_KEYS = {"run", "test", "skip", "root", "needs", "setup", "check"}


def unregistered(documented: list[Documented], entries: dict[str, dict]) -> list[str]:
    """One message per documented command without an entry: where it is and the line to add."""
    return [
        f"{c.where}: {c.command!r} is not in tests/docs_commands.toml; add under [commands] one of\n"
        f'  {toml_key(c.command)} = {{ run = "OVERRIDES THAT MAKE IT QUICK" }}\n'
        f'  {toml_key(c.command)} = {{ test = "tests/test_x.py::test_that_runs_it" }}\n'
        f'  {toml_key(c.command)} = {{ skip = "why not (GPU, data, install, minutes)" }}'
        for c in documented
        if c.command not in entries
    ]


def stale(documented: list[Documented], entries: dict[str, dict]) -> list[str]:
    shown = {c.command for c in documented}
    return [command for command in entries if command not in shown]


def entry_problems(command: str, entry: dict, root: Path) -> list[str]:
    """What is wrong with one registry entry: not exactly one of run/test/skip, an unknown key, an empty reason,
    a named test whose file or function does not exist."""
    problems = []
    if len({"run", "test", "skip"} & entry.keys()) != 1:
        problems.append(f"{command!r}: give exactly one of run, test, skip")
    if entry.keys() - ENTRY_KEYS:
        problems.append(f"{command!r}: unknown keys {sorted(entry.keys() - ENTRY_KEYS)}")
    if "skip" in entry and not entry["skip"].strip():
        problems.append(f"{command!r}: say why it is skipped")
    if entry.get("needs", "run") != "run" or entry.get("check", "metrics") not in ("metrics", "replies"):
        problems.append(f'{command!r}: needs is "run" and check is "metrics" or "replies"')
    if "test" in entry:
        path, _, name = entry["test"].partition("::")
        file = root / path
        functions = set()
        if file.is_file():
            tree = ast.parse(file.read_text())
            functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if name.split("[")[0] not in functions:
            problems.append(f"{command!r}: {path} has no test function {name!r}")
    return problems


def test_the_checks_name_a_new_command_a_stale_entry_and_a_test_that_does_not_exist(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_real():\n    pass\n")
    documented = [Documented("r3l envs", "README.md:3"), Documented("r3l new --thing", "docs/USAGE.md:9")]
    entries = {"r3l envs": {"run": ""}, "r3l gone": {"skip": "minutes"}}
    (message,) = unregistered(documented, entries)
    assert message.startswith("docs/USAGE.md:9: 'r3l new --thing' is not in tests/docs_commands.toml")
    assert '"r3l new --thing" = { skip = ' in message
    assert stale(documented, entries) == ["r3l gone"]
    assert entry_problems("a", {"test": "tests/test_a.py::test_real[x]"}, tmp_path) == []
    assert entry_problems("a", {"test": "tests/test_a.py::test_imagined"}, tmp_path) == [
        "'a': tests/test_a.py has no test function 'test_imagined'"
    ]
    assert entry_problems("a", {"test": "tests/test_b.py::test_real"}, tmp_path) == [
        "'a': tests/test_b.py has no test function 'test_real'"
    ]
    assert entry_problems("a", {"run": "", "skip": "GPU"}, tmp_path) == ["'a': give exactly one of run, test, skip"]
    assert entry_problems("a", {"skip": " ", "when": 1}, tmp_path) == [
        "'a': unknown keys ['when']",
        "'a': say why it is skipped",
    ]
    assert entry_problems("a", {"run": "", "check": "reply"}, tmp_path) == [
        '\'a\': needs is "run" and check is "metrics" or "replies"'
    ]


def test_every_documented_command_is_run_by_a_test_or_skipped_with_a_reason():
    problems = unregistered(documented_commands(), registry()[1])
    assert not problems, "\n".join(problems)


def test_every_registry_entry_is_still_in_the_docs():
    gone = stale(documented_commands(), registry()[1])
    assert not gone, f"tests/docs_commands.toml lists commands the docs no longer show; remove them: {gone!r}"


def test_every_registry_entry_says_one_thing_and_names_a_test_that_exists():
    problems = [p for command, entry in registry()[1].items() for p in entry_problems(command, entry, ROOT)]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------- running them


def expand(arguments: str, quick: dict[str, str]) -> list[str]:
    for name, value in quick.items():
        arguments = arguments.replace("{" + name + "}", value)
    return shlex.split(arguments)


def runnable() -> list:
    _, entries = registry()
    return [pytest.param(c, id=c.split("\n")[0][:70]) for c, entry in entries.items() if "run" in entry]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A finished run of the tiny model (`needs = "run"` copies it to runs/NAME), made once for the module."""
    quick, _ = registry()
    folder = tmp_path_factory.mktemp("tiny_run")
    made = subprocess.run(
        [sys.executable, "-m", "r3l.cli", "train", *expand("{train}", quick), "run.name=NAME"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return folder / "runs" / "NAME"


def repository_copy(folder: Path) -> None:
    """`folder` as the repository root for a command: the checkout's files linked (the package is the installed
    one), results/ copied (`compare --table-only` rewrites its tables)."""
    for item in ROOT.iterdir():
        if item.name.startswith(".") or item.name in {"runs", "results", "r3l"} or item.name.endswith(".egg-info"):
            continue
        (folder / item.name).symlink_to(item)
    shutil.copytree(ROOT / "results", folder / "results")


def well_formed_replies(folder: Path) -> list[str]:
    """Problems with the runs under `folder`: none that wrote metrics, or no step with a well-formed reply."""
    metrics = sorted(folder.rglob("metrics.jsonl"))
    if not metrics:
        return ["no run wrote metrics.jsonl"]
    problems = []
    for path in metrics:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        errors = [r["termination/format_error"] for r in records if r.get("termination/format_error") is not None]
        if not errors or min(errors) >= 1:
            problems.append(f"{path}: every reply was a format error (or none was counted): {errors}")
    return problems


@pytest.mark.parametrize("command", runnable())
def test_a_documented_command_runs(command, tmp_path, request):
    quick, entries = registry()
    entry = entries[command]
    folder = tmp_path / "cwd"
    folder.mkdir()
    if entry.get("root"):
        repository_copy(folder)
    if entry.get("needs") == "run":
        shutil.copytree(request.getfixturevalue("tiny_run"), folder / "runs" / "NAME")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    extra = shlex.join(expand(entry["run"], quick))
    (bin_dir / "r3l").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m r3l.cli "$@" {extra}\n')
    (bin_dir / "r3l").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for script in (entry.get("setup"), command):
        if script:
            result = subprocess.run(
                ["bash", "-ec", script], cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
            assert result.returncode == 0, f"{script!r} exited {result.returncode}:\n{result.stderr[-3000:]}"
    if entry.get("check") == "replies":
        assert not well_formed_replies(folder), well_formed_replies(folder)
    if entry.get("check") == "metrics":
        assert sorted(folder.rglob("metrics.jsonl")), f"{command!r} wrote no metrics.jsonl"
