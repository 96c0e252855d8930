"""What r3l knows about particular games of the `gym` and `textarena` envs, each in a registry by game family (the
id without its version and variant: 'FrozenLake8x8-v1' -> 'FrozenLake', 'Mastermind-v0-hard' -> 'Mastermind'):

- `INTROS`: text put before the first observation where the game's own does not say what the game is; it is
  read from the game as made, so it is true of it (FrozenLake says whether its ice is slippery).
- `IDENTITIES`: what makes two seeds the same game, so a split can hold distinct games (FrozenLake: its map;
  GuessTheNumber: the number; Mastermind: the code; Sokoban: the room; Minesweeper: the seed, since its mines are
  laid at the first move from the game's seeded generator). Other TextArena games: the first observation and the
  game's whole starting state; other games: the seed (a first observation need not show what is hidden).
- `MOVES`: the form of a move, as an EBNF expression over the game's own settings, for structured replies
  (`<think>` free, then `<action>` a move of that form); other games whose moves are text: any text without '<'.

FrozenLake's maps: `frozen_lake_map` draws a random map per task seed with Gymnasium's own `generate_random_map`
(always solvable), of a given size and hole probability.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Hashable
from typing import Any

from r3l.envs.reply_grammar import literal

FROZEN_LAKE = (
    "Frozen lake: walk from S (start) to G (goal) over frozen tiles F without stepping into a hole H. "
    "Your position is the tile in square brackets."
)
FREE_MOVE = "[^<]{1,80}"  # any move text, bounded, that cannot open or close a tag


def family(game_id: str) -> str:
    """'FrozenLake8x8-v1' -> 'FrozenLake', 'Mastermind-v0-hard' -> 'Mastermind', 'ale_py:X' -> 'ale_py:X'."""
    return re.split(r"8x8|-v\d", game_id)[0]


def game_key(identity: Hashable) -> str:
    """A short stable name of a game's identity (kept in each task's data as 'game')."""
    return hashlib.blake2b(repr(identity).encode(), digest_size=6).hexdigest()


# --- FrozenLake ------------------------------------------------------------------------------------------------------
def slippery(unwrapped: Any) -> bool:
    """Whether a FrozenLake game's moves can go sideways (its transition table has several outcomes per move)."""
    return len(unwrapped.P[0][0]) > 1


def frozen_lake_intro(unwrapped: Any) -> str:
    ice = (
        "The ice is slippery: a move can go sideways."
        if slippery(unwrapped)
        else "The ice is not slippery: every move goes where you send it."
    )
    return f"{FROZEN_LAKE} {ice}"


def frozen_lake_map(seed: int, size: int, hole_probability: float) -> list[str]:
    """Gymnasium's random FrozenLake map for `seed`: `size` x `size`, each tile a hole with `hole_probability`
    (Gymnasium's p is the chance of a frozen tile), with a path from S to G."""
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    return generate_random_map(size=size, p=1.0 - hole_probability, seed=seed)


def map_of(unwrapped: Any) -> tuple[str, ...]:
    return tuple(b"".join(row).decode() for row in unwrapped.desc)


INTROS: dict[str, Callable[[Any], str]] = {"FrozenLake": frozen_lake_intro}  # family -> intro of the unwrapped game

# --- identities: (unwrapped game, seed, first observation) -> what makes it that game ------------------------------
Identity = Callable[[Any, int, str], Hashable]


def _state(unwrapped: Any, key: str) -> Hashable:
    return repr(unwrapped.state.game_state.get(key))


IDENTITIES: dict[str, Identity] = {
    "FrozenLake": lambda game, seed, first: (
        map_of(game) if hasattr(game, "desc") else default_identity(game, seed, first)
    ),
    "GuessTheNumber": lambda game, seed, first: _state(game, "game_number"),
    "Mastermind": lambda game, seed, first: _state(game, "secret_code"),
    "Sokoban": lambda game, seed, first: _state(game, "board"),
    "Wordle": lambda game, seed, first: _state(game, "secret_word"),
    "Minesweeper": lambda game, seed, first: seed,  # mines are laid at the first move, from the seeded generator
}


def default_identity(game: Any, seed: int, first: str) -> Hashable:
    state = getattr(getattr(game, "state", None), "game_state", None)
    if not isinstance(state, dict):
        return seed
    return first, repr(sorted(state.items(), key=lambda item: str(item[0])))


def identity(game_id: str, unwrapped: Any, seed: int, first_observation: str) -> Hashable:
    return IDENTITIES.get(family(game_id), default_identity)(unwrapped, seed, first_observation)


# --- moves: the unwrapped game -> (EBNF expression of one move, extra rules) -----------------------------------------
def one_of(values: range | list[str]) -> str:
    return "(" + " | ".join(literal(str(value)) for value in values) + ")"


def _bracketed(inner: str) -> str:
    return f'"[" {inner} "]"'


MOVES: dict[str, Callable[[Any], str]] = {
    "GuessTheNumber": lambda game: _bracketed(one_of(range(game.min_number, game.max_number + 1))),
    "Mastermind": lambda game: _bracketed(' " " '.join([one_of(range(1, game.num_numbers + 1))] * game.code_length)),
    "Minesweeper": lambda game: _bracketed(f'{one_of(range(game.rows))} " " {one_of(range(game.cols))}'),
    "Sokoban": lambda game: _bracketed(one_of(["up", "down", "left", "right"])),
    "Wordle": lambda game: _bracketed(f"[a-z]{{{game.word_length}}}"),
}


def move_form(game_id: str, unwrapped: Any) -> str:
    """The EBNF expression a move of this game matches (any bounded text for a game r3l does not know)."""
    form = MOVES.get(family(game_id))
    return form(unwrapped) if form is not None else FREE_MOVE
