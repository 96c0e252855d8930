"""R3L's reflection texts: the trajectory log the reflection reads, its prompt, and the retry guidance.

Templates default to r3l/prompts/r3l_reflect.txt and r3l_guidance.txt; placeholders are filled by plain
replacement, so braces in rules, logs or model text are left alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from r3l.reflection.prompts import read_template
from r3l.reflection.report import Report

REFLECT_TEMPLATE = "r3l_reflect.txt"  # placeholders {rules}, {log}, {num_steps}
# placeholders {report} (the whole report as indented JSON, as R3L's code gives it), or its fields {summary},
# {outcome}, {root_cause}, {suggestion}, {retry_from_step}; r3l_guidance_brief.txt holds only the root cause and
# the suggestion
GUIDANCE_TEMPLATE = "r3l_guidance.txt"


def load_reflect_template(path: str | None = None) -> str:
    return read_template(path, REFLECT_TEMPLATE)


def load_guidance_template(path: str | None = None) -> str:
    return read_template(path, GUIDANCE_TEMPLATE)


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def environment_verdict(success: bool, reward: float) -> str:
    return f"{'success' if success else 'failure'} (reward {reward:g})"


def format_trajectory_log(
    steps: Sequence[tuple[str, str | None, str]], final_feedback: str, rules: str = "", verdict: str | None = None
) -> str:
    """Readable log of an episode: one block per (observation, thought, action) step, then the feedback and,
    when given, the environment's verdict.

    A step without a thought has no Thought line. `rules`, when given, heads the log; leave it empty
    when the rules go into the reflection prompt's own {rules} slot (`reflection_prompt` does that).
    """
    blocks = [f"Rules: {rules.strip()}"] if rules.strip() else []
    for index, (observation, thought, action) in enumerate(steps):
        lines = [f"Step {index}", f"Observation: {str(observation).strip()}"]
        if thought is not None and str(thought).strip():
            lines.append(f"Thought: {str(thought).strip()}")
        lines.append(f"Action: {str(action).strip()}")
        blocks.append("\n".join(lines))
    blocks.append(f"Final feedback: {final_feedback.strip()}")
    if verdict:
        blocks.append(f"Verdict of the environment: {verdict}")
    return "\n\n".join(blocks)


def reflection_prompt(
    steps: Sequence[tuple[str, str | None, str]],
    final_feedback: str,
    rules: str,
    template: str | None = None,
    verdict: str | None = None,
) -> str:
    """The user message asking for a JSON report on this trajectory (template text, or the default)."""
    template = load_reflect_template() if template is None else template
    return _fill(
        template,
        rules=rules.strip(),
        log=format_trajectory_log(steps, final_feedback, verdict=verdict),
        num_steps=str(len(steps)),
    )


def build_guidance(report: Report, template: str | None = None) -> str:
    """The note inserted before the retry at the pivot (template text, or the default)."""
    if not report.improvement_suggestion:
        raise ValueError("guidance needs a report with an improvement_suggestion (a retry report)")
    template = load_guidance_template() if template is None else template
    return _fill(
        template,
        report=json.dumps(asdict(report), indent=2, ensure_ascii=False),
        summary=report.trajectory_summary.strip(),
        outcome=report.trajectory_outcome,
        root_cause=report.root_cause_analysis.strip(),
        suggestion=report.improvement_suggestion.strip(),
        retry_from_step=str(report.retry_from_step),
    )
