"""The plain strategy (GRPO, OPMD, RAFT): a group of independent episodes per task, one experience each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from r3l.agent.episodes import EpisodeStart, trainable
from r3l.agent.records import episode_metrics, trajectory_experience
from r3l.envs import Task
from r3l.explore import STRATEGIES, Strategy
from r3l.explore.clock import PhaseClock


@STRATEGIES.register("plain")
class PlainStrategy(Strategy):
    def explore(self, tasks: Sequence[Task], step: int):
        context = self.context
        params = replace(context.sampling, seed=None if context.sampling.seed is None else context.sampling.seed + step)
        starts = [EpisodeStart(task) for task in tasks for _ in range(context.group_size)]
        clock = PhaseClock()
        with clock.phase("base"):
            played = self.runner.run(starts, params)
        groups = [played[i * context.group_size : (i + 1) * context.group_size] for i in range(len(tasks))]
        experiences = [
            trajectory_experience(trajectory, group=f"step{step}-{task.id}")
            for task, group in zip(tasks, groups)
            for trajectory in group
            if trainable(trajectory)
        ]
        return experiences, {**episode_metrics(groups), **clock.metrics()}
