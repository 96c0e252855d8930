"""What a game source (Gymnasium, TextArena, OpenEnv) answers to a start or a move, and how its failures read: one
line that names the game."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from r3l.errors import UserError

MISSING = "the {what} env needs {package}: pip install 'r3l[games]' (or pip install {package})"


@dataclass(frozen=True)
class Frame:
    """What a game answered to a start or a move."""

    observation: str
    reward: float = 0.0
    over: bool = False  # the game ended by itself (Gymnasium's terminated; TextArena's done)
    truncated: bool = False  # the game's own time limit ended the episode
    accepted: bool = True  # False: the game rejected the move (a TextArena invalid move)
    won: bool | None = None  # the game's own success flag, where it gives one
    reason: str = ""  # the game's closing sentence, where it gives one


def said(error: BaseException) -> str:
    """An exception as one short line (NLTK's banners of asterisks dropped)."""
    text = " ".join(re.sub(r"\*{3,}", " ", str(error)).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def unknown_game(what: str, game_id: str, known: Sequence[str]) -> UserError:
    """The one-line error for a game id the source does not have, naming the closest ones it has."""
    close = difflib.get_close_matches(game_id, list(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; e.g. {', '.join(sorted(known)[:5])}"
    return UserError(f"no {what} game '{game_id}'{hint}")
