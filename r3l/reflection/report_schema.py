"""The JSON schema of R3L's reflection report for one trajectory: the constraint a structured reflection is
decoded under (every key, the outcome one of its three words, the retry step an integer inside the episode).

Where the reflection was shown the environment's verdict (R3L's show_verdict), the outcome is one that agrees with
it: "failure" for a failed episode, "success" or "success_but_inefficient" for a successful one. Left to choose, the
embedded 135M model judged failed episodes "success" (agreement 0.0 in the README tour's rollout) and so asked for no
retry; a larger model free to disagree with what it was shown adds no information the environment did not give."""

from __future__ import annotations

import json
from collections.abc import Sequence

from r3l.reflection.report import OUTCOMES, REPORT_KEYS
from r3l.rollout.constraints import Constraint

SKELETON_TOKENS = 64  # the keys, quotes, separators, outcome and step of a report, generously


def fitting_field_chars(wanted: int, max_new_tokens: int) -> int:
    """The longest text field (characters) that keeps a whole report within `max_new_tokens` even when every
    character is a token of its own (four text fields)."""
    return max(1, min(wanted, (max_new_tokens - SKELETON_TOKENS) // 4))


def verdict_outcomes(success: bool | None) -> tuple[str, ...]:
    """The outcomes a report may give for an episode whose verdict it was shown (None: not shown, any outcome)."""
    if success is None:
        return OUTCOMES
    return tuple(outcome for outcome in OUTCOMES if (outcome != "failure") == success)


def report_schema(num_steps: int, max_chars: int, outcomes: Sequence[str] = OUTCOMES) -> dict:
    """Every report this schema admits parses (`parse_report`) for a trajectory of `num_steps` steps."""
    # starts with a visible character (a blank field does not parse), no escapes, at most max_chars characters
    text = {"type": "string", "pattern": f'^[^\\s"\\\\\\x00-\\x1f][^"\\\\\\x00-\\x1f]{{0,{max_chars - 1}}}$'}
    properties = {
        "trajectory_summary": text,
        "root_cause_analysis": text,
        "trajectory_outcome": {"type": "string", "enum": list(outcomes)},
        "improvement_suggestion": text,
        "retry_from_step": {"type": "integer", "minimum": 0, "maximum": max(num_steps, 1) - 1},
    }
    return {
        "type": "object",
        "properties": {key: properties[key] for key in REPORT_KEYS},
        "required": list(REPORT_KEYS),
        "additionalProperties": False,
    }


def report_constraint(num_steps: int, max_chars: int, outcomes: Sequence[str] = OUTCOMES) -> Constraint:
    return Constraint("json_schema", json.dumps(report_schema(num_steps, max_chars, outcomes)), name="report")
