"""R3L's experience rules on hand-built episodes: which retries are trained as SFT, the reflection of a
successful base, the SFT weights (one retry per base is checked on real games in test_r3l.py)."""

from r3l.agent.episodes import EpisodeStart, Step, Trajectory
from r3l.envs import Task
from r3l.explore import ExploreContext
from r3l.explore.r3l import BaseRun, R3LStrategy, Reflection, Retry
from r3l.reflection.report import Report, ReportError
from r3l.rollout.chat import PromptFormat
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import SamplingParams
from tests.test_conversation import completion_of

TASK = Task(id="t0", prompt="Find the coin.")


def episode(tokenizer, rewards, success):
    """An episode of len(rewards) turns earning these per-step rewards."""
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("You are in a room.", "Play."))
    steps = []
    for index, reward in enumerate(rewards):
        completion = completion_of(tokenizer, f"<action>look {index}</action>")
        conversation.add_assistant(completion, trained=True)
        conversation.add_user(f"Room {index}.")
        steps.append(Step(f"Room {index - 1}.", completion, None, f"look {index}", f"look {index}", reward))
    return Trajectory(
        TASK, conversation, steps, success=success, feedback="done", termination="done", distilled=conversation.copy()
    )


def reflection(tokenizer, report):
    prompt = TokenConversation.start(tokenizer, [{"role": "user", "content": "Reflect on this log."}])
    return Reflection(prompt, completion_of(tokenizer, '{"trajectory_summary": "..."}'), report)


def strategy(tokenizer, **settings):
    context = ExploreContext(
        make_env=None, generator=None, tokenizer=tokenizer, sampling=SamplingParams(), group_size=4
    )
    return R3LStrategy(context, **settings)


RETRY_REPORT = Report("went west", "should go east", "failure", "go east first", 1)


def run_with_retry(tokenizer, base_rewards, base_success, retry_rewards, retry_success, settings=None):
    s = strategy(tokenizer, **(settings or {}))
    base = episode(tokenizer, base_rewards, base_success)
    run = BaseRun(TASK, "g", "g/base0", base, reflection(tokenizer, RETRY_REPORT))
    retry = episode(tokenizer, retry_rewards, retry_success)
    improved = s.improved(retry.reward, retry.num_steps, base.reward, base.num_steps, s.settings.success_reward)
    run.retries.append(Retry(EpisodeStart(TASK, base, 1, "guidance"), retry, improved))
    return s, s._experiences(run)


def test_a_partial_reward_retry_that_does_not_succeed_gets_no_sft(tiny):
    _, tokenizer = tiny
    _, records = run_with_retry(tokenizer, [0.1, 0.1, 0.0], False, [0.1, 0.2, 0.3], False)  # 0.2 -> 0.6
    assert [r.kind for r in records] == ["base", "retry"]
    _, records = run_with_retry(tokenizer, [0.1, 0.1, 0.0], False, [0.1, 0.2, 0.3], False, {"improvement": "any_gain"})
    assert [r.kind for r in records] == ["base", "retry", "sft", "sft"]


def test_a_successful_retry_trains_reflection_and_guided_retry_as_positive_samples(tiny):
    _, tokenizer = tiny
    _, records = run_with_retry(tokenizer, [0.0, 0.0, 0.0], False, [0.0, 0.0, 1.0], True)
    base, retry, reflection_sft, guided = records
    assert retry.meta["improved"] and retry.objective == "policy" and base.pivot == retry.pivot == 1
    assert (reflection_sft.meta["sft_of"], guided.meta["sft_of"]) == ("reflection", "guided_retry")
    for sample in (reflection_sft, guided):  # weight 1, trained by the policy loss (algorithm.sft_loss)
        assert sample.objective == "sft" and sample.kind == "sft" and sample.advantage == 1.0
        assert sample.reward == 1.0
    spans = guided.turn_spans
    assert not any(guided.loss_mask[a] for a, _ in spans[:1]) and all(guided.loss_mask[a] for a, _ in spans[1:])


def test_the_reflection_on_a_successful_base_that_says_success_is_trained(tiny):
    _, tokenizer = tiny
    s = strategy(tokenizer)
    base = episode(tokenizer, [0.0, 1.0], True)
    perfect = BaseRun(TASK, "g", "g/base0", base, reflection(tokenizer, Report("found it", "good", "success")))
    records = s._experiences(perfect)
    assert [(r.kind, r.objective, r.meta.get("sft_of")) for r in records] == [
        ("base", "policy", None),
        ("sft", "sft", "success_reflection"),
    ]
    assert records[1].reward == 1.0 and records[1].advantage == 1.0
    assert sum(records[1].loss_mask) == len(perfect.reflection.completion.tokens)  # the reflection only
    inefficient = BaseRun(
        TASK,
        "g",
        "g/base1",
        base,
        reflection(tokenizer, Report("found it", "slow", "success_but_inefficient", "go straight", 0)),
    )
    failed = BaseRun(
        TASK,
        "g",
        "g/base2",
        episode(tokenizer, [0.0, 0.0], False),
        reflection(tokenizer, Report("lost", "?", "success")),
    )
    invalid = BaseRun(TASK, "g", "g/base3", base, reflection(tokenizer, ReportError("no_json", "no JSON")))
    for run in (inefficient, failed, invalid):
        assert [r.kind for r in s._experiences(run)] == ["base"]
    off = strategy(tokenizer, train_success_reflections=False)
    assert [r.kind for r in off._experiences(perfect)] == ["base"]


def test_fewer_steps_improve_only_where_steps_are_a_cost():
    from r3l.agent.improvement import IMPROVEMENT_RULES, retry_improved
    from r3l.envs.math_dialogue import MathDialogueEnv

    reference = IMPROVEMENT_RULES.get("reference")
    # both succeed (reward 1); the retry takes 1 step where its base took 3
    assert retry_improved(reference, (1.0, 1), (1.0, 3), 1.0, steps_are_a_cost=True)
    # the math dialogue: a first-attempt success after a third-attempt one is no improvement (the reference's
    # DAPO and Countdown workflows have no fewer-steps clause)
    assert not MathDialogueEnv.steps_are_a_cost
    assert not retry_improved(reference, (1.0, 1), (1.0, 3), 1.0, steps_are_a_cost=MathDialogueEnv.steps_are_a_cost)
    assert retry_improved(reference, (1.0, 1), (0.0, 3), 1.0, steps_are_a_cost=False)
