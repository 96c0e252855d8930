"""Critique-GRPO (arXiv 2506.03106): a group of independent responses per task; each failed one gets a critique
in words, built from the ground truth (or, `critique=indicative`, only the verdict), and a refinement that reads
its failed response and the critique. Up to `refinements_per_group` refinements (successful ones first) join
their task's group, stored as answers to the question alone (without the critique), so their tokens were sampled
in another context than the one trained: the `critique_grpo` loss weighs those by policy shaping
(r3l/algorithms/policy_shaping.py) and the advantage compares the whole group, refinements included."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from statistics import mean
from typing import Literal

from pydantic import Field

from r3l.agent.episodes import EpisodeStart, Trajectory, trainable
from r3l.agent.records import episode_metrics, trajectory_experience
from r3l.envs import Task
from r3l.explore import STRATEGIES, Strategy, StrategySettings
from r3l.explore.clock import PhaseClock
from r3l.registry import Registry

CRITIQUES: Registry[Callable[[Trajectory], str]] = Registry("critique")


def _attempt(trajectory: Trajectory) -> str:
    return f"Your previous attempt:\n{trajectory.text.strip()}\n\n"


def _known_answer(task: Task) -> str | None:
    answer = task.answer
    if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) and str(answer).strip():
        return str(answer).strip()
    return None


@CRITIQUES.register("indicative")
def indicative_critique(trajectory: Trajectory) -> str:
    """The verdict alone, with the environment's feedback where it gave any."""
    feedback = f" {trajectory.feedback.strip()}" if trajectory.feedback.strip() else ""
    return f"{_attempt(trajectory)}Critique: the attempt above is incorrect.{feedback} Try again."


@CRITIQUES.register("ground_truth")
def ground_truth_critique(trajectory: Trajectory) -> str:
    """The verdict and the reference answer (as R3L ran the baseline); the verdict alone where the task has none."""
    answer = _known_answer(trajectory.task)
    if answer is None:
        return indicative_critique(trajectory)
    return (
        f"{_attempt(trajectory)}Critique: the attempt above is incorrect; the correct final answer is {answer}. "
        "Try again: reason your way to it and give it in the format asked."
    )


class CritiqueSettings(StrategySettings):
    critique: Literal["ground_truth", "indicative"] = Field(
        "ground_truth", description="what a critique tells: the reference answer (ground_truth) or only the verdict"
    )
    refinements_per_group: int = Field(
        1, ge=0, description="refinements joining each task's group, successful ones first (the paper's k)"
    )


@STRATEGIES.register("critique")
class CritiqueStrategy(Strategy):
    Settings = CritiqueSettings
    settings: CritiqueSettings

    def explore(self, tasks: Sequence[Task], step: int):
        c, s = self.context, self.settings
        seed = None if c.sampling.seed is None else c.sampling.seed + step
        clock = PhaseClock()
        with clock.phase("base"):
            starts = [EpisodeStart(task) for task in tasks for _ in range(c.group_size)]
            played = self.runner.run(starts, replace(c.sampling, seed=seed))
        groups = [played[i * c.group_size : (i + 1) * c.group_size] for i in range(len(tasks))]
        critique = CRITIQUES.get(s.critique)
        failed = [t for group in groups for t in group if trainable(t) and not t.success]
        refine = [EpisodeStart(t.task, t, 0, critique(t)) for t in failed] if s.refinements_per_group else []
        refined: list[Trajectory] = []
        if refine:
            with clock.phase("refine"):
                refined = self.runner.run(refine, replace(c.sampling, seed=None if seed is None else seed + 1))
        kept = self._keep(tasks, list(zip(refine, refined)))
        experiences = []
        for task, group in zip(tasks, groups):
            name = f"step{step}-{task.id}"
            experiences += [trajectory_experience(t, group=name) for t in group if trainable(t)]
            experiences += [
                trajectory_experience(
                    t, name, "retry", t.distilled, guidance=start.guidance, guidance_in_tokens=False, refinement=True
                )
                for start, t in kept[task.id]
            ]
        metrics = {**episode_metrics(groups), **clock.metrics()}
        if refined:
            metrics["refinement_success"] = mean(float(t.success) for t in refined)
        metrics["refinements_trained"] = float(sum(len(v) for v in kept.values()))
        return experiences, metrics

    def _keep(
        self, tasks: Sequence[Task], refined: Sequence[tuple[EpisodeStart, Trajectory]]
    ) -> dict[str, list[tuple[EpisodeStart, Trajectory]]]:
        """Each task's refinements to train: successful ones first, then in the order played, at most k."""
        kept: dict[str, list[tuple[EpisodeStart, Trajectory]]] = {task.id: [] for task in tasks}
        for start, t in refined:
            if trainable(t) and t.termination != "replay_mismatch" and t.distilled is not None:
                kept[t.task.id].append((start, t))
        k = self.settings.refinements_per_group
        return {key: sorted(value, key=lambda pair: not pair[1].success)[:k] for key, value in kept.items()}
