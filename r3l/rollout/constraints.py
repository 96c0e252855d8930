"""Structured decoding: what a reply may be (a grammar or a JSON schema), the tokens it allowed at each sampled
position, and the logits masked to them.

Grammars are compiled and followed by xgrammar (the library vLLM itself uses), so the HF generator and vLLM
constrain alike. A constrained completion keeps the allowed-token bitmask of every position it sampled
(`TokenMasks`, rows deduplicated), and the learner masks its logits with the same bitmasks: the log-probability
trained is the one the token was sampled with, log p(token | allowed) = logit - logsumexp(allowed logits).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

BITS = 32  # xgrammar packs 32 tokens per int32 word: bit j of word i allows token 32 * i + j
MASKED_LOGIT = -1e30  # finite, so 0 * logit stays 0 in entropies; exp() of it underflows to exactly 0


@dataclass(frozen=True)
class Constraint:
    """What a reply may be: an EBNF grammar (`grammar`) or a JSON schema (`json_schema`), as text."""

    kind: Literal["grammar", "json_schema"]
    spec: str
    name: str = ""  # what it constrains (report, action, answer), for counting

    def __post_init__(self) -> None:
        if self.kind not in ("grammar", "json_schema"):
            raise ValueError(f"unknown constraint kind {self.kind!r}")


@dataclass
class TokenMasks:
    """The tokens each constrained position of one completion allowed: position `positions[k]` (an index into
    the completion's tokens) allowed the tokens set in bitmask row `table[rows[k]]`."""

    positions: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    table: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 0), dtype=torch.int32))

    def __len__(self) -> int:
        return len(self.positions)

    def after(self, cut: int) -> TokenMasks:
        """The masks of positions >= `cut`, renumbered from `cut`."""
        kept = [(p - cut, r) for p, r in zip(self.positions, self.rows) if p >= cut]
        return TokenMasks([p for p, _ in kept], [r for _, r in kept], self.table)


class MaskRecorder:
    """Collects one bitmask row per sampled position, storing each distinct row once."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.rows: list[int] = []
        self._table: list[torch.Tensor] = []
        self._seen: dict[bytes, int] = {}

    def add(self, position: int, bitmask_row: torch.Tensor) -> None:
        key = hashlib.blake2b(bitmask_row.numpy().tobytes(), digest_size=16).digest()
        if key not in self._seen:
            self._seen[key] = len(self._table)
            self._table.append(bitmask_row.clone())
        self.positions.append(position)
        self.rows.append(self._seen[key])

    def drop_last(self) -> None:
        self.positions.pop()
        self.rows.pop()

    def masks(self) -> TokenMasks:
        table = torch.stack(self._table) if self._table else torch.zeros((0, 0), dtype=torch.int32)
        return TokenMasks(list(self.positions), list(self.rows), table)


def allowed_tokens(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Packed bitmask rows [K, W] (int32) -> allowed [K, vocab_size] (bool)."""
    shifts = torch.arange(BITS, device=bitmask.device, dtype=torch.int32)
    bits = (bitmask[..., None] >> shifts) & 1  # arithmetic shift: the sign bit of word i is token 32 i + 31
    return bits.reshape(*bitmask.shape[:-1], -1)[..., :vocab_size].bool()


def constrain_logits(logits: torch.Tensor, index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`logits` [N, V] with the tokens each row's bitmask forbids set to MASKED_LOGIT. `index` [N] names each
    row's bitmask in `table` [U, W], -1 for an unconstrained row. Differentiable in the allowed logits."""
    constrained = index >= 0
    if not bool(constrained.any()):
        return logits
    allowed = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    allowed[constrained] = allowed_tokens(table[index[constrained]].to(logits.device), logits.shape[-1])
    return logits.masked_fill(~allowed, MASKED_LOGIT)


def stack_masks(
    spans: Sequence[tuple[int, int, TokenMasks]], shape: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(index [B, T], table [U, W]) for a batch: `spans` are (row, offset, masks) with `offset` the batch column
    of the masks' position 0; index -1 where nothing was constrained."""
    index = torch.full(shape, -1, dtype=torch.long)
    tables = []
    base = 0
    for row, offset, masks in spans:
        if not len(masks):
            continue
        columns = torch.tensor(masks.positions, dtype=torch.long) + offset
        inside = (columns >= 0) & (columns < shape[1])
        index[row, columns[inside]] = torch.tensor(masks.rows, dtype=torch.long)[inside] + base
        tables.append(masks.table)
        base += masks.table.shape[0]
    table = torch.cat(tables) if tables else torch.zeros((0, 0), dtype=torch.int32)
    return index, table


class Constrainer:
    """Compiles constraints for one tokenizer (cached) and follows them token by token with xgrammar."""

    def __init__(self, tokenizer, vocab_size: int, cache_bytes: int = 256 << 20):
        import xgrammar

        self._xgr = xgrammar
        self.vocab_size = vocab_size
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_limit_bytes=cache_bytes)
        self.words = xgrammar.get_bitmask_shape(1, vocab_size)[1]

    def compiled(self, constraint: Constraint):
        if constraint.kind == "json_schema":
            # compact JSON, as vLLM compiles a schema with disable_any_whitespace (set by the vLLM generator)
            return self._compiler.compile_json_schema(constraint.spec, any_whitespace=False, separators=(",", ":"))
        return self._compiler.compile_grammar(constraint.spec)

    def follower(self, constraint: Constraint) -> Follower:
        return Follower(self._xgr.GrammarMatcher(self.compiled(constraint)), self._xgr, self.words)

    def replay(self, constraint: Constraint, tokens: Sequence[int]) -> tuple[TokenMasks, bool]:
        """The masks a completion of `tokens` was sampled under, and whether every token was allowed."""
        follower = self.follower(constraint)
        for token in tokens:
            follower.fill()
            if not follower.accept(token):
                return follower.recorder.masks(), False
        return follower.recorder.masks(), True

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        """Set the forbidden logits of each row to -inf in place (xgrammar's kernel); `bitmask` [B, W], all
        bits set on rows without a constraint."""
        self._xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))


class Follower:
    """One completion's grammar state: `fill` the next position's bitmask, `accept` the sampled token."""

    def __init__(self, matcher, xgr, words: int):
        self._matcher = matcher
        self.bitmask = xgr.allocate_token_bitmask(1, words * BITS)
        self.recorder = MaskRecorder()
        self._position = 0
        self.broken = False  # a sampled token the grammar did not take (then the row goes on unconstrained)

    def fill(self) -> torch.Tensor:
        """The bitmask row [W] of the next position (recorded)."""
        self._matcher.fill_next_token_bitmask(self.bitmask)
        self.recorder.add(self._position, self.bitmask[0])
        return self.bitmask[0]

    def accept(self, token: int) -> bool:
        self._position += 1
        if self._matcher.is_terminated():
            return True  # the grammar is complete; what follows (a stop token) ends the reply
        accepted = bool(self._matcher.accept_token(int(token)))
        if not accepted:  # never trained as constrained: its mask forbids it
            self.broken = True
            self.recorder.drop_last()
        return accepted
