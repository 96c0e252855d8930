"""The multi-turn episode runner on the real TextWorldExpress simulator: token-exact turns, each early stop
counted, limits, replay from a pivot without a duplicated observation."""

import pytest

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart, termination_metrics
from r3l.envs import make
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=48, stop=("</action>",), seed=0)


class FixedReply(ScriptedGenerator):
    """The scripted backend, made to write one fixed reply every turn."""

    reply = ""

    def script(self, prompt_text, sample, seed, max_new_tokens=10**6):
        return self.reply


def make_coin():
    return make("textworld_express", games=["coin"], max_steps=6)


def runner_for(tiny, generator_class=ScriptedGenerator, **limits):
    model, tokenizer = tiny
    return EpisodeRunner(make_coin, generator_class(model, tokenizer), tokenizer, limits=AgentLimits(**limits))


@pytest.fixture(scope="module")
def task():
    env = make_coin()
    task = env.tasks("train")[0]
    env.close()
    return task


def test_episodes_are_token_exact_and_play_admissible_actions(tiny, task):
    runner = runner_for(tiny)
    episodes = runner.run([EpisodeStart(task), EpisodeStart(task)], PARAMS)
    for episode in episodes:
        assert episode.termination == "done" and (episode.success or episode.num_steps == 6)
        assert all(step.admissible and step.played == step.action for step in episode.steps)
        conversation = episode.conversation
        assert len(conversation.turn_spans) == episode.num_steps
        for step, (start, end) in zip(episode.steps, conversation.turn_spans):
            assert conversation.tokens[start:end] == step.completion.tokens
            assert conversation.loss_mask[start:end] == [1] * (end - start)
        assert sum(conversation.loss_mask) == sum(end - start for start, end in conversation.turn_spans)
        assert conversation.drift() == 0  # the scripted replies are tokenised as a fresh encoding would
        assert episode.reward == pytest.approx(sum(step.reward for step in episode.steps))
    runner.close()


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("I would like to look around.", "format_error"),
        ("<think>fly</think><action>fly to the moon</action>", "inadmissible"),
        ("<action>look around</action>", "repeated_action"),
    ],
)
def test_early_stops_are_counted(tiny, task, reply, reason):
    FixedReply.reply = reply
    runner = runner_for(tiny, FixedReply)
    episodes = runner.run([EpisodeStart(task)], PARAMS)
    expected_steps = {"format_error": 1, "inadmissible": 1, "repeated_action": 3}[reason]
    assert episodes[0].termination == reason and episodes[0].num_steps == expected_steps
    assert not episodes[0].success and episodes[0].feedback
    assert termination_metrics(episodes)[f"termination/{reason}"] == 1.0
    runner.close()


def test_early_stops_can_be_switched_off(tiny, task):
    FixedReply.reply = "<action>fly to the moon</action>"
    runner = runner_for(tiny, FixedReply, terminate_on=(), max_turns=4)
    episode = runner.run([EpisodeStart(task)], PARAMS)[0]
    assert episode.termination == "max_turns" and episode.num_steps == 4
    assert not any(step.admissible for step in episode.steps)
    runner.close()


def test_context_limit_stops_before_the_prompt_overflows(tiny, task):
    runner = runner_for(tiny, max_context_tokens=600)
    episode = runner.run([EpisodeStart(task)], PARAMS)[0]
    assert episode.termination == "context_limit"
    assert len(episode.conversation.tokens) + PARAMS.max_new_tokens > 600
    runner.close()


def test_retry_from_pivot_replays_and_shows_the_pivot_observation_once(tiny, task):
    runner = runner_for(tiny)
    base = runner.run([EpisodeStart(task)], PARAMS)[0]
    pivot = 3
    guidance = "Note from a previous attempt: search the other rooms."
    retry = runner.run([EpisodeStart(task, base, pivot, guidance)], PARAMS)[0]
    assert retry.prefix_steps == pivot and retry.actions[:pivot] == base.actions[:pivot]
    shared = base.conversation.turn_spans[pivot][0]
    assert retry.distilled.tokens[:shared] == base.conversation.tokens[:shared]
    guided_text = runner.tokenizer.decode(retry.conversation.tokens)
    observation = base.steps[pivot].observation
    assert (
        guided_text.count(observation.strip())
        == 1
        + sum(  # once at the pivot, plus any identical later ones
            step.observation.strip() == observation.strip() for step in retry.steps[pivot + 1 :]
        )
    )
    assert guidance in guided_text and guidance not in runner.tokenizer.decode(retry.distilled.tokens)
    assert retry.distilled.tokens[shared:] != [] and retry.generated_tokens == sum(
        len(step.completion.tokens) for step in retry.steps[pivot:]
    )
    runner.close()
