"""The `scripted` generator, a test backend: its text comes from a script, its tokens and log-probabilities
from the real model and tokenizer, so every path (masks, groups, advantages, learner) runs end to end
without a capable model.

The script reads the prompt's last turn: after a reflection request it writes a reflection, after a
retry request a second answer that is right about half of the time (it solves countdown and arithmetic
prompts itself), otherwise a wrong first answer. In an agent game (a system prompt asking for <action>
tags) it plays one of the admissible actions the observation lists ("Valid actions: ..."), never the
same one twice in a row; asked for an R3L report it writes a valid JSON report whose pivot it draws
from the trajectory's steps (outcome "success" or, for half the longer ones, "success_but_inefficient" when the
log's final feedback says the task was completed).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Annotated

import torch
from pydantic import Field

from r3l.algorithms import token_logprobs
from r3l.errors import UserError
from r3l.grading.safe_math import ExpressionError, evaluate
from r3l.rollout.generator import GENERATORS, Completion, SamplingParams, unconstrained
from r3l.rollout.hf import HFGenerator
from r3l.rollout.seeds import row_seeds

REFLECTIONS = (
    "I did not check that my answer satisfies every condition of the task. Next time I will verify it step by step.",
    "I answered too quickly and got the arithmetic wrong. I should compute each operation carefully.",
    "My answer ignored part of the question. I will reread the task and use every given number exactly once.",
)
REFLECT_MARKERS = ("reflect on what went wrong", "reflect on")
RETRY_MARKERS = ("try again",)
REPORT_MARKER = "retry_from_step"
GAME_MARKER = "<action>"
FALLBACK_ACTIONS = ("look around", "inventory", "look around", "task")


def report_for(log_prompt: str, draw: float) -> str:
    """A well-formed R3L report for the trajectory log in `log_prompt`, pivot chosen by `draw` in [0, 1)."""
    found = re.search(r"\((\d+) steps, numbered from 0\)", log_prompt)
    steps = int(found.group(1)) if found else 1
    completed = log_prompt.rsplit("Final feedback:", 1)[-1].strip().lower().startswith("task completed")
    if completed and (steps <= 1 or draw < 0.5):  # half the longer successes are judged inefficient
        return json.dumps(
            {
                "trajectory_summary": "The agent completed the task.",
                "root_cause_analysis": "Every step moved toward the goal.",
                "trajectory_outcome": "success",
                "improvement_suggestion": None,
                "retry_from_step": None,
            }
        )
    outcome = "success_but_inefficient" if completed else "failure"
    pivot = min(steps - 1, int(draw * steps))
    return json.dumps(
        {
            "trajectory_summary": f"The agent took {steps} steps without reaching the goal.",
            "root_cause_analysis": f"At step {pivot} the agent chose an action that did not help.",
            "trajectory_outcome": outcome,
            "improvement_suggestion": f"From step {pivot}, try a different action that explores "
            "unvisited places or uses the task's objects.",
            "retry_from_step": pivot,
        }
    )


def game_action(last_user: str, previous: str | None, draw: float) -> str:
    """One admissible action from the observation's 'Valid actions:' list (or a safe fallback)."""
    listed = re.search(r"Valid actions:\s*(.+?)\s*$", last_user, re.S)
    actions = [a.strip() for a in listed.group(1).split(",") if a.strip()] if listed else list(FALLBACK_ACTIONS)
    choices = [a for a in actions if a != previous] or actions
    return choices[int(draw * len(choices))]


def countdown_solution(numbers: Sequence[int], target: int) -> str | None:
    """A brute-force search over orders, operators and bracketings (fine for up to 4 numbers)."""
    for order in itertools.permutations(numbers):
        for expression, value in _expressions([str(n) for n in order], [Fraction(n) for n in order]):
            if value == target:
                return expression
    return None


def _expressions(texts: list[str], values: list[Fraction]):
    if len(texts) == 1:
        yield texts[0], values[0]
        return
    for split in range(1, len(texts)):
        for left_text, left in _expressions(texts[:split], values[:split]):
            for right_text, right in _expressions(texts[split:], values[split:]):
                yield f"({left_text} + {right_text})", left + right
                yield f"({left_text} - {right_text})", left - right
                yield f"({left_text} * {right_text})", left * right
                if right != 0:
                    yield f"({left_text} / {right_text})", left / right


def solve(question: str) -> str | None:
    """The right answer for the prompts the script knows: countdown and plain arithmetic."""
    countdown = re.search(r"numbers \[([\d,\s]+)\].*?equals (\-?\d+)", question, re.S)
    if countdown:
        numbers = [int(n) for n in countdown.group(1).split(",") if n.strip()]
        return countdown_solution(numbers, int(countdown.group(2))) if len(numbers) <= 4 else None
    arithmetic = re.search(r"Calculate (.+?)\.?\s*$", question.strip().splitlines()[0] if question.strip() else "")
    if arithmetic:
        try:
            value = evaluate(arithmetic.group(1)).value
        except ExpressionError:
            return None
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return None


def coin(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@GENERATORS.register("scripted")
class ScriptedGenerator(HFGenerator):
    """Test backend: replies scripted from the prompt and a seeded coin (a right answer at `success_rate`)."""

    def __init__(
        self,
        model,
        tokenizer,
        dtype: torch.dtype = torch.float32,
        prefill_chunk: Annotated[int, Field(gt=0, description="prompts prefilled together")] = 64,
        success_rate: Annotated[float, Field(ge=0, le=1, description="share of replies that answer right")] = 0.5,
        first_success_rate: Annotated[
            float, Field(ge=0, le=1, description="the same for a task's first attempt (R3's failure set)")
        ] = 0.0,
    ):
        super().__init__(model, tokenizer, dtype=dtype, prefill_chunk=prefill_chunk)
        self.success_rate = success_rate
        self.first_success_rate = first_success_rate

    def script(self, prompt_text: str, sample: int, seed: int | None, max_new_tokens: int = 10**6) -> str:
        turns = [t for t in re.split(r"<\|im_start\|>|<\|im_end\|>", prompt_text) if t.strip()]
        users = [t[len("user") :].strip() for t in turns if t.startswith("user")]
        last = users[-1].lower() if users else prompt_text.lower()
        first_question = users[0] if users else prompt_text
        game = any(t.startswith("system") and GAME_MARKER in t for t in turns)
        if REPORT_MARKER in last and not game:  # a game turn may quote a report (R3L's guidance): still a move
            return report_for(users[-1], coin("report", prompt_text, sample, seed))
        if game:
            played = re.findall(r"<action>(.*?)</action>", "".join(t for t in turns if t.startswith("assistant")))
            action = game_action(
                users[-1] if users else "",
                played[-1].strip() if played else None,
                coin("act", prompt_text, sample, seed),
            )
            reply = f"<think>I will try: {action}.</think><action>{action}</action>"
            if len(self.tokenizer(reply, add_special_tokens=False)["input_ids"]) >= max_new_tokens:
                reply = f"<action>{action}</action>"  # the thought does not fit the reply budget
            return reply
        if any(marker in last for marker in RETRY_MARKERS):
            answer = solve(first_question)
            if answer is not None and coin(prompt_text, sample, seed) < self.success_rate:
                return f"<answer>{answer}</answer>"
            return "<answer>1 + 1</answer>"
        if any(marker in last for marker in REFLECT_MARKERS):
            return REFLECTIONS[int(coin(prompt_text, sample, seed) * len(REFLECTIONS))]
        answer = solve(first_question)
        if answer is not None and coin("first", prompt_text, sample, seed) < self.first_success_rate:
            return f"<answer>{answer}</answer>"
        return "<answer>0</answer>"

    def _reply_logits(self, ids: torch.Tensor, prompt_length: int) -> torch.Tensor:
        """Logits at the positions that score the reply; the LM head runs on those only."""
        from r3l.learner.learner import split_head

        decoder, head = split_head(self.model)
        if decoder is None:
            return self.model(input_ids=ids).logits[:, prompt_length - 1 : -1]
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
        return head(hidden[:, prompt_length - 1 : -1])

    @torch.inference_mode()
    def generate(self, prompts, params: SamplingParams, n: int = 1, constraints=None) -> list[list[Completion]]:
        if not unconstrained(constraints):
            raise UserError(
                "the scripted generator writes its script's text and cannot follow structured-decoding "
                "constraints; use generator=hf or turn the structured switches off"
            )
        results = []
        seeds = iter(row_seeds(params.seed, prompts, n))  # a row's script depends on its prompt, not its batch
        temperature = params.temperature if params.temperature > 0 else 1.0
        for prompt in prompts:
            prompt_text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
            group = []
            for sample in range(n):
                seed = next(seeds)  # with a seed the row's seed tells samples apart; without, the sample index
                text = self.script(prompt_text, sample if seed is None else 0, seed, params.max_new_tokens)
                tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"][: params.max_new_tokens - 1]
                tokens = tokens + [self.tokenizer.eos_token_id]
                ids = torch.tensor([list(prompt) + tokens], device=self.device)
                logits = self._reply_logits(ids, len(prompt))
                logprobs = token_logprobs(logits, ids[:, len(prompt) :], temperature)[0].tolist()
                group.append(
                    Completion(tokens, logprobs, self.tokenizer.decode(tokens, skip_special_tokens=True), "stop")
                )
            results.append(group)
        return results
