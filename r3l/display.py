"""Readable, coloured printing of experiences: trained tokens highlighted, the rest dimmed; R3L's
reflection report, pivot and guidance shown with the episode they belong to."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.text import Text

from r3l.experience import Experience
from r3l.logging import console

KIND_STYLES = {"base": "bold cyan", "retry": "bold magenta", "sft": "bold yellow", "reflection": "bold cyan"}


def masked_text(experience: Experience, tokenizer) -> Text:
    """The experience's tokens, with runs of trained (mask 1) tokens in green and untrained ones dim."""
    text = Text()
    tokens, mask = experience.tokens, experience.loss_mask
    start = 0
    for index in range(1, len(tokens) + 1):
        if index == len(tokens) or mask[index] != mask[start]:
            chunk = tokenizer.decode(tokens[start:index], skip_special_tokens=False)
            text.append(chunk, style="bold green" if mask[start] else "dim")
            start = index
    return text


def header(experience: Experience) -> str:
    meta = experience.meta
    style = KIND_STYLES.get(experience.kind, "bold")
    parts = [f"[{style}]{experience.kind}[/]", f"group={experience.group}"]
    if experience.objective != "policy":
        parts.append(f"objective={experience.objective}")
    if "run" in meta:
        parts.append(f"run={meta['run']}")
    parts += [
        f"reward={experience.reward:.3f}",
        f"advantage={experience.advantage:+.3f}",
        f"trained_tokens={experience.num_trained_tokens}",
    ]
    if experience.pivot is not None:
        parts.append(f"[bold red]pivot={experience.pivot}[/]")
    for key in ("steps", "termination", "improved", "sft_of"):
        if key in meta:
            parts.append(f"{key}={meta[key]}")
    return " ".join(parts)


def show_notes(experience: Experience) -> None:
    """The reflection report (or why it was rejected) and the guidance, when the experience has them."""
    meta = experience.meta
    if "report" in meta:
        console.print(Text("reflection report: ", style="bold blue") + Text(json.dumps(meta["report"], indent=1)))
    elif "report_error" in meta:
        console.print(
            Text(f"reflection rejected ({meta['report_error']}): ", style="bold red")
            + Text(str(meta.get("reflection", ""))[:400])
        )
    if meta.get("guidance") and experience.kind == "retry":
        console.print(
            Text("guidance (used while generating; not in the stored tokens): ", style="bold yellow")
            + Text(meta["guidance"])
        )


def show_experiences(experiences: Sequence[Experience], tokenizer) -> None:
    for experience in experiences:
        console.rule()
        console.print(header(experience))
        console.print(masked_text(experience, tokenizer))
        show_notes(experience)
