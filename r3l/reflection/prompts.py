"""Reflection prompt templates: package defaults in r3l/prompts/, replaceable by files named in the config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from r3l.errors import UserError

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


def read_template(path: str | None, default_name: str) -> str:
    """A template from a text file, a file name shipped in r3l/prompts/, or the default."""
    file = Path(path) if path else PROMPT_DIR / default_name
    if path and not file.exists() and (PROMPT_DIR / path).is_file():
        file = PROMPT_DIR / path
    if not file.exists():
        raise UserError(f"prompt template {file} does not exist; point the setting at an existing text file")
    return file.read_text().strip()


@dataclass(frozen=True)
class ReflectionPrompts:
    """`reflect` may contain {feedback}; it is filled with " <verifier feedback>" or left empty. `retry` may
    contain {system} (the conversation's system message, which states the answer format; empty without one)
    and {task} (the task's first message again), so that the second try is asked as the first was."""

    reflect: str
    retry: str
    include_feedback: bool = False
    verdict_retry: str = ""  # the control's message: the verdict and the request to try again, no reflection

    @classmethod
    def load(
        cls,
        reflect_path: str | None = None,
        retry_path: str | None = None,
        include_feedback: bool = False,
        verdict_retry_path: str | None = None,
    ) -> ReflectionPrompts:
        return cls(
            read_template(reflect_path, "r3_reflect.txt"),
            read_template(retry_path, "r3_retry.txt"),
            include_feedback,
            read_template(verdict_retry_path, "r3_verdict_retry.txt"),
        )

    def retry_message(self, task_message: str, system_message: str | None = None) -> str:
        return _filled(self.retry, task_message, system_message)

    def reflect_message(self, feedback: str) -> str:
        return self.reflect.replace("{feedback}", self._feedback(feedback))

    def verdict_retry_message(self, feedback: str, task_message: str, system_message: str | None = None) -> str:
        """The verdict (with the feedback where the reflection would get it) and the request to answer again,
        asked as the retry after a reflection asks it."""
        return _filled(self.verdict_retry.replace("{feedback}", self._feedback(feedback)), task_message, system_message)

    def _feedback(self, feedback: str) -> str:
        return f" {feedback.strip()}" if self.include_feedback and feedback.strip() else ""


def _filled(template: str, task_message: str, system_message: str | None) -> str:
    text = template.replace("{system}", (system_message or "").strip()).replace("{task}", task_message.strip())
    return "\n".join(line.rstrip() for line in text.splitlines()).strip()
