"""R3L (arXiv 2601.03715): reflect on every base episode, retry from the pivot the reflection names with its
guidance, store the retry without the guidance in the base episodes' group, mask the prefix a retry shares
with its base (pivotal credit), and train reflection + guided retry as SFT when the retry improved.

Switches (algorithm.strategy_args): `reflect_retry` (off: every episode is a base episode),
`retry_from` pivot | scratch (Reflect-GRPO), `retry_guidance` (off: the retry restarts from the same pivot
without the guidance text, a control for "is it the words or the restart?"), `guidance_role` user | system,
`pivotal_credit`, `distill_guidance`,
`aux_sft`, `improvement`, `retries_per_base`, `train_success_reflections`. Positive amplification is the advantage
function (`positive_amplified`) and the SFT loss is `algorithm.sft_loss`, both chosen in the preset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from statistics import mean
from typing import Literal

from pydantic import Field

from r3l.agent.credit import pivotal_mask, turns_only
from r3l.agent.episodes import EpisodeStart, GuidanceRole, Trajectory, termination_metrics, trainable
from r3l.agent.improvement import IMPROVEMENT_RULES, retry_improved
from r3l.agent.records import conversation_experience, episode_metrics, trajectory_experience
from r3l.agent.retry_plan import choose_retries, split_budget
from r3l.envs import Task
from r3l.errors import UserError
from r3l.experience import Experience, Segment
from r3l.explore import STRATEGIES, Strategy, StrategySettings
from r3l.explore.clock import PhaseClock
from r3l.reflection.guidance import (
    build_guidance,
    environment_verdict,
    load_guidance_template,
    load_reflect_template,
    reflection_prompt,
)
from r3l.reflection.report import REPORT_PARSERS, Report, ReportError, ReportStats, needs_retry, outcome_agreement
from r3l.reflection.report_schema import fitting_field_chars, report_constraint, verdict_outcomes
from r3l.rollout.chat import renders_later_system_messages
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import Completion


class R3LSettings(StrategySettings):
    reflect_retry: bool = Field(True, description="reflect and retry (off: the whole group is base episodes)")
    base_fraction: float = Field(0.5, gt=0, le=1, description="share of the group budget spent on base episodes")
    retry_from: Literal["pivot", "scratch"] = Field("pivot", description="scratch: restart at step 0 (Reflect-GRPO)")
    retry_guidance: bool = Field(
        True,
        description="put the report's guidance before the observation at the pivot (off: the same retry from the "
        "same pivot without any guidance text, a control)",
    )
    guidance_role: GuidanceRole = Field(
        "user",
        description="where the guidance goes: user = before the observation in the pivot's user turn; system = a "
        "system message of its own before that turn, appended to the system prompt at step 0 (the R3L code's way; "
        "needs a chat template that writes a later system message)",
    )
    pivotal_credit: bool = Field(True, description="mask the prefix a retry shares with its base, in both")
    distill_guidance: bool = Field(True, description="store the retry without the guidance text")
    aux_sft: bool = Field(True, description="train reflection and guided retry as SFT when the retry improved")
    improvement: Literal["reference", "any_gain"] = Field(
        "reference",
        description="reference: the retry succeeds and beats its base (more reward, or fewer steps "
        "where steps are a cost: not in the math dialogue); any_gain: any reward gain counts",
    )
    success_reward: float = Field(1.0, description="the reward at which an episode counts as a success")
    retries_per_base: int = Field(1, gt=0, description="retries one base episode may get")
    fill_unused_slots: Literal["none", "fresh"] = Field(
        "none",
        description="retry slots no base episode takes: none = the group is smaller (R3L's ALFWorld code); "
        "fresh = one more unguided episode each (its WebShop, ScienceWorld and math code)",
    )
    train_success_reflections: bool = Field(
        True,
        description="train the reflection on a successful base episode whose report says 'success' as SFT (R3L's code)",
    )
    sft_weight: float = Field(1.0, ge=0, description="advantage (weight) of each auxiliary SFT sample")
    retry_objective: Literal["policy", "shaped"] = Field(
        "policy",
        description="how a retry trains: policy = as a sample of its group; shaped = policy shaping, an off-policy "
        "refinement (Critique-GRPO)",
    )
    reflect_on_success: bool = Field(
        True, description="also reflect on successful base episodes (may retry an inefficient success)"
    )
    reflection_max_new_tokens: int = Field(4096, gt=0)
    reflection_temperature: float | None = Field(
        None, ge=0, description="temperature of the reflections (unset: sampling.temperature; the R3L paper: 0.7)"
    )
    report_parser: Literal["r3l", "reference"] = Field(
        "r3l",
        description="r3l: the last balanced JSON object, outcome in any case, non-empty text fields; "
        "reference: the R3L code's reading (first '{' to last '}', exact outcome, any field values)",
    )
    show_verdict: bool = Field(
        True,
        description="end the log the reflection reads with the environment's verdict "
        "(success or failure, and the reward), so the report judges the outcome it was shown",
    )
    reflect_prompt: str | None = Field(None, description="text file replacing the reflection template")
    guidance_prompt: str | None = Field(
        None,
        description="text file replacing the guidance template "
        "(r3l/prompts/r3l_guidance_brief.txt: root cause and suggestion only)",
    )


@dataclass
class Reflection:
    """The reflection on one base episode: the prompt it answered, what the model wrote, the parsed report."""

    prompt: TokenConversation
    completion: Completion
    result: Report | ReportError
    temperature: float = 1.0  # what the completion was sampled at (the learner scores it there)

    @property
    def report(self) -> Report | None:
        return self.result if isinstance(self.result, Report) else None


@dataclass
class Retry:
    start: EpisodeStart
    episode: Trajectory
    improved: bool = False


@dataclass
class BaseRun:
    """One base episode and what came of it: its reflection and its retries."""

    task: Task
    group: str
    run: str  # shared by the base and its retries in the records
    episode: Trajectory
    reflection: Reflection | None = None
    retries: list[Retry] = field(default_factory=list)

    @property
    def wants_retry(self) -> bool:
        report = self.reflection.report if self.reflection is not None else None
        return report is not None and needs_retry(report)


def step_log(trajectory: Trajectory) -> list[tuple[str, str | None, str]]:
    """(observation, thought, action) per step, as the reflection reads them."""
    log = []
    for step in trajectory.steps:
        action = step.action if step.action is not None else f"(no action; the reply was: {step.completion.text[:300]})"
        log.append((step.observation, step.thought, action))
    return log


def group_contiguous(groups: Sequence[Sequence[BaseRun]], fills: Sequence[BaseRun]) -> list[BaseRun]:
    """Each task's runs, then its fill episodes, task by task: the order a batch split across rollout workers
    comes back in, so the learner sees the same sequence either way."""
    extra: dict[str, list[BaseRun]] = {}
    for run in fills:
        extra.setdefault(run.group, []).append(run)
    return [run for group in groups for run in [*group, *extra.pop(group[0].group, [])]]


@STRATEGIES.register("r3l")
class R3LStrategy(Strategy):
    Settings = R3LSettings
    settings: R3LSettings

    def __init__(self, context, **settings):
        super().__init__(context, **settings)
        self.reflect_template = load_reflect_template(self.settings.reflect_prompt)
        self.guidance_template = load_guidance_template(self.settings.guidance_prompt)
        self.improved = IMPROVEMENT_RULES.get(self.settings.improvement)
        s = self.settings
        guided = s.reflect_retry and s.retry_guidance
        if guided and s.guidance_role == "system" and not renders_later_system_messages(context.tokenizer):
            raise UserError(
                "algorithm.strategy_args.guidance_role=system: this model's chat template drops, refuses or moves a "
                "system message after the first turn, so the guidance would not stand at the pivot; use "
                "guidance_role=user"
            )

    # --- one training step ----------------------------------------------------------------------
    def explore(self, tasks: Sequence[Task], step: int):
        c, s = self.context, self.settings
        seed = None if c.sampling.seed is None else c.sampling.seed + step
        n_base, n_retry = split_budget(c.group_size, s.base_fraction, s.reflect_retry)
        self._check_replayable(n_retry)
        clock = PhaseClock()
        with clock.phase("base"):
            groups = self._play_bases(tasks, step, n_base, seed)
        runs = [run for group in groups for run in group]
        if n_retry:
            with clock.phase("reflect"):
                self._reflect(runs, None if seed is None else seed + 1)
        with clock.phase("retry"):
            lost, fills = self._retry(groups, n_retry, None if seed is None else seed + 2)
        experiences = [e for run in group_contiguous(groups, fills) for e in self._experiences(run)]
        metrics = self._metrics(groups, n_retry * len(tasks), lost)
        metrics.update(clock.metrics())
        metrics["success_reflections_trained"] = float(
            sum(e.meta.get("sft_of") == "success_reflection" for e in experiences)
        )
        if s.fill_unused_slots == "fresh":
            metrics["filled_slots"] = float(len(fills))
        return experiences, metrics

    def _check_replayable(self, n_retry: int) -> None:
        if (
            n_retry
            and self.settings.retry_from == "pivot"
            and self.runner.retry_from_pivot
            and not self.runner.deterministic
        ):
            raise UserError(
                f"environment '{self.runner.env_name}' is not deterministic, so a retry cannot replay the "
                "base episode up to its pivot; set algorithm.strategy_args.retry_from=scratch"
            )

    def _play_bases(self, tasks: Sequence[Task], step: int, n_base: int, seed: int | None) -> list[list[BaseRun]]:
        """`n_base` base episodes per task, one list per task in the batch."""
        episodes = self.runner.run(
            [EpisodeStart(task) for task in tasks for _ in range(n_base)], replace(self.context.sampling, seed=seed)
        )
        repeated = {task_id for task_id, count in Counter(task.id for task in tasks).items() if count > 1}
        groups = []
        for t, task in enumerate(tasks):
            group = f"step{step}-{task.id}"  # a task given twice in a batch is one group, as in the plain strategy
            run = f"{group}@{t}" if task.id in repeated else group
            groups.append([BaseRun(task, group, f"{run}/base{k}", episodes[t * n_base + k]) for k in range(n_base)])
        return groups

    def _reflect(self, runs: Sequence[BaseRun], seed: int | None) -> None:
        """One report per base episode (successes too, unless reflect_on_success is off); bad reports are kept
        with their reason, never fatal."""
        c, s = self.context, self.settings
        rules = c.prompt_format.system_prompt or self.runner.system_prompt or ""
        chosen = [run for run in runs if trainable(run.episode) and (s.reflect_on_success or not run.episode.success)]
        if not chosen:
            return
        prompts = [
            TokenConversation.start(
                c.tokenizer,
                [
                    {
                        "role": "user",
                        "content": reflection_prompt(
                            step_log(run.episode),
                            run.episode.feedback,
                            rules,
                            self.reflect_template,
                            verdict=environment_verdict(run.episode.success, run.episode.reward)
                            if s.show_verdict
                            else None,
                        ),
                    }
                ],
            )
            for run in chosen
        ]
        temperature = c.sampling.temperature if s.reflection_temperature is None else s.reflection_temperature
        params = replace(
            c.sampling,
            max_new_tokens=s.reflection_max_new_tokens,
            temperature=temperature,
            stop=(),
            seed=seed,
            stop_at_json_close=True,  # a report is complete once its object closes; the rest would be trained
        )
        constraints = (
            None
            if c.report_field_chars is None
            else [
                report_constraint(
                    run.episode.num_steps,
                    fitting_field_chars(c.report_field_chars, s.reflection_max_new_tokens),
                    verdict_outcomes(run.episode.success if s.show_verdict else None),
                )
                for run in chosen
            ]
        )
        completions = c.generator.generate([prompt.tokens for prompt in prompts], params, n=1, constraints=constraints)
        for run, prompt, (completion,) in zip(chosen, prompts, completions):
            try:
                result: Report | ReportError = REPORT_PARSERS.get(s.report_parser)(
                    completion.text, run.episode.num_steps
                )
            except ReportError as error:
                result = error
            run.reflection = Reflection(prompt, completion, result, params.temperature)

    def _retry(
        self, groups: Sequence[Sequence[BaseRun]], n_retry: int, seed: int | None
    ) -> tuple[Counter, list[BaseRun]]:
        """Retry the chosen base episodes of each task from their pivots (and, with fill_unused_slots=fresh, play
        one more unguided episode per slot left over). Returns (the retries not kept, counted by ending:
        replay_mismatch, env_error; the extra episodes)."""
        s = self.settings
        chosen, fills = [], []
        for group in groups:
            picked = choose_retries([run for run in group if run.wants_retry], n_retry, s.retries_per_base)
            chosen += picked
            if s.fill_unused_slots == "fresh":
                fills += [(group[0], n) for n in range(n_retry - len(picked))]
        from_pivot = s.retry_from == "pivot" and self.runner.retry_from_pivot
        starts = []
        for run in chosen:
            # choose_retries takes runs that want a retry: each has a report that names a step
            report = run.reflection.report if run.reflection is not None else None
            assert report is not None and report.retry_from_step is not None
            starts.append(
                EpisodeStart(
                    run.task,
                    run.episode,
                    report.retry_from_step if from_pivot else 0,
                    build_guidance(report, self.guidance_template) if s.retry_guidance else None,
                    s.guidance_role,
                )
            )
        starts += [EpisodeStart(first.task) for first, _ in fills]
        if not starts:
            return Counter(), []
        played = self.runner.run(starts, replace(self.context.sampling, seed=seed))
        lost: Counter = Counter()
        for run, start, episode in zip(chosen, starts, played):
            if episode.termination == "replay_mismatch" or not trainable(episode):
                lost[episode.termination] += 1
                continue
            base = run.episode
            better = retry_improved(
                self.improved,
                (episode.reward, episode.num_steps),
                (base.reward, base.num_steps),
                s.success_reward,
                self.runner.steps_are_a_cost,
            )
            run.retries.append(Retry(start, episode, better))
        extra = [
            BaseRun(first.task, first.group, f"{first.run.rsplit('/', 1)[0]}/fill{n}", episode)
            for (first, n), episode in zip(fills, played[len(chosen) :])
        ]
        return lost, extra

    # --- experiences ----------------------------------------------------------------------------
    def _experiences(self, run: BaseRun) -> list[Experience]:
        s = self.settings
        if not trainable(run.episode):
            return []
        records = [self._base_experience(run)]
        records += [self._retry_experience(run, retry) for retry in run.retries]
        if s.aux_sft:
            improving = [retry for retry in run.retries if retry.improved]
            if improving:
                records.append(self._reflection_sft(run, reward=improving[0].episode.reward))
            records += [self._guided_sft(run, retry) for retry in improving]
            if not improving and s.train_success_reflections and self._perfect(run):
                records.append(self._reflection_sft(run, reward=run.episode.reward, of="success_reflection"))
        return records

    def _perfect(self, run: BaseRun) -> bool:
        """A successful base episode whose valid report also says 'success'."""
        report = run.reflection.report if run.reflection is not None else None
        return (
            report is not None
            and report.trajectory_outcome == "success"
            and run.episode.reward >= self.settings.success_reward
        )

    def _base_experience(self, run: BaseRun) -> Experience:
        experience = trajectory_experience(run.episode, run.group, "base", run=run.run)
        if run.reflection is not None:
            experience.meta["reflection"] = run.reflection.completion.text
            result = run.reflection.result
            if isinstance(result, Report):
                experience.meta["report"] = asdict(result)
            else:
                experience.meta["report_error"] = result.reason_code
        if run.retries:  # the shared prefix is the one of its (first) retry
            pivot = run.retries[0].start.pivot
            experience.pivot = pivot
            if self.settings.pivotal_credit:
                experience.loss_mask = pivotal_mask(experience.loss_mask, experience.turn_spans, pivot)
        return experience

    def _retry_experience(self, run: BaseRun, retry: Retry) -> Experience:
        s = self.settings
        episode, start = retry.episode, retry.start
        conversation = episode.distilled if s.distill_guidance else episode.conversation
        experience = trajectory_experience(
            episode,
            run.group,
            "retry",
            conversation,
            run=run.run,
            guidance=start.guidance,
            guidance_role=start.guidance_role if start.guidance else None,
            retry_from=s.retry_from,
            improved=retry.improved,
            base_reward=run.episode.reward,
            base_success=run.episode.success,
            guidance_in_tokens=not s.distill_guidance,
        )
        experience.pivot = start.pivot
        experience.objective = s.retry_objective
        if s.pivotal_credit:
            experience.loss_mask = pivotal_mask(experience.loss_mask, experience.turn_spans, start.pivot)
        return experience

    def _reflection_sft(self, run: BaseRun, reward: float, of: str = "reflection") -> Experience:
        reflection = run.reflection
        assert reflection is not None  # a run with an improving retry, or a perfect report, was reflected on
        conversation = reflection.prompt.copy()
        span = conversation.add_assistant(reflection.completion, trained=True)
        experience = conversation_experience(
            conversation,
            run.group,
            "sft",
            reward,
            reflection.completion.text,
            objective="sft",
            advantage=self.settings.sft_weight,
            task_id=run.task.id,
            run=run.run,
            sft_of=of,
            improved=of == "reflection",
        )
        experience.segments = [Segment(*span, "reflection", reflection.temperature)]
        return experience

    def _guided_sft(self, run: BaseRun, retry: Retry) -> Experience:
        conversation = retry.episode.conversation
        experience = trajectory_experience(
            retry.episode,
            run.group,
            "sft",
            conversation,
            run=run.run,
            improved=True,
            sft_of="guided_retry",
            guidance=retry.start.guidance,
        )
        experience.loss_mask = turns_only(conversation.loss_mask, conversation.turn_spans, retry.start.pivot)
        experience.objective = "sft"
        experience.advantage = self.settings.sft_weight
        experience.pivot = retry.start.pivot
        return experience

    # --- metrics --------------------------------------------------------------------------------
    def _metrics(self, groups: Sequence[Sequence[BaseRun]], slots: int, lost: Counter):
        runs = [run for group in groups for run in group]
        bases = [run.episode for run in runs]
        metrics = episode_metrics([[run.episode for run in group] for group in groups])
        reflected = [(run, run.reflection) for run in runs if run.reflection is not None]
        stats = ReportStats()
        stats.extend(reflection.result for _, reflection in reflected)
        metrics.update(stats.metrics())
        agreement = outcome_agreement((reflection.result, run.episode.success) for run, reflection in reflected)
        if agreement is not None:
            metrics["report_outcome_agreement"] = agreement
        reflection_tokens = {id(run): len(reflection.completion.tokens) for run, reflection in reflected}
        metrics["reflection_length"] = sum(reflection_tokens.values()) / max(1, len(reflected))
        retries = [(run, retry) for run in runs for retry in run.retries]
        metrics["replay_mismatches"] = float(lost["replay_mismatch"])
        metrics["retry_env_errors"] = float(lost["env_error"])
        metrics["retry_slots_unused"] = (slots - len(retries) - sum(lost.values())) / slots if slots else 0.0
        successes = sum(b.success for b in bases)
        metrics.update(
            {
                "base_count": float(len(bases)),
                "base_successes": float(successes),
                "base_generated_tokens": float(sum(b.generated_tokens for b in bases)),
            }
        )
        if successes:
            metrics["generated_tokens_per_success/base"] = sum(b.generated_tokens for b in bases) / successes
        metrics["generated_tokens"] += sum(reflection_tokens.values())
        if not retries:
            return metrics
        episodes = [retry.episode for _, retry in retries]
        pivots = [retry.start.pivot for _, retry in retries]
        metrics.update(
            {
                "retry_count": float(len(episodes)),
                "retry_success": mean(float(e.success) for e in episodes),
                "retry_reward": mean(e.reward for e in episodes),
                "retry_improvement_rate": mean(float(retry.improved) for _, retry in retries),
                "pivot_mean": mean(pivots),
                "pivot_zero_fraction": mean(float(p == 0) for p in pivots),
                "pivot_relative_mean": mean(
                    retry.start.pivot / max(1, run.episode.num_steps) for run, retry in retries
                ),
                **{f"pivot_count/{pivot}": float(count) for pivot, count in sorted(Counter(pivots).items())},
                "retry_tokenization_drift_rate": mean(float(e.conversation.drift() > 0) for e in episodes),
                **termination_metrics(episodes, prefix="retry_"),
            }
        )
        retry_tokens = sum(e.generated_tokens for e in episodes)
        metrics["generated_tokens"] += retry_tokens
        # what a successful retry cost: the tokens generated after the pivot and the reflections the
        # retries needed (once per retried base)
        reflected_cost = sum(reflection_tokens[id(run)] for run in {id(run): run for run, _ in retries}.values())
        cost = retry_tokens + reflected_cost
        retry_successes = sum(e.success for e in episodes)
        metrics.update(
            {
                "retry_successes": float(retry_successes),
                "retry_generated_tokens": float(retry_tokens),
                "retry_reflection_tokens": float(reflected_cost),
            }
        )
        if retry_successes:
            metrics[f"generated_tokens_per_success/retry_{self.settings.retry_from}"] = cost / retry_successes
        return metrics
