"""The end-of-episode feedback sentence of the multi-turn games: completed, failed at a step, or out of steps."""

from __future__ import annotations


def episode_feedback(
    *,
    success: bool,
    failure: bool,
    moves: int,
    max_steps: int,
    score: str,
    invalid: int = 0,
    command: str = "",
    cause: str = "",
    invalid_word: str = "not valid",
) -> str:
    """One sentence on how an episode ended.

    `score` is the game's score as text ("score 0.50", "score 40/100"); `failure` means the game itself
    declared the task lost at the last `command`, and `cause` says why where the game tells; `invalid` of the
    `moves` actions were rejected, which the game calls `invalid_word` ("not valid", "not understood").
    """
    if success:
        return f"Task completed in {moves} steps ({score})."
    rejected = [f"{invalid} of the {moves} actions were {invalid_word}"] if invalid else []
    if failure:
        details = "; ".join([score, *([cause] if cause else []), *rejected])
        return f"The task failed at step {moves}: '{command}' made it impossible to finish ({details})."
    tail = f"; {rejected[0]}" if rejected else ""
    return f"The episode ran out of steps ({max_steps}) at {score} before the task was completed{tail}."
