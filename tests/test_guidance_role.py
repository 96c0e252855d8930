"""Where R3L's guidance goes (`strategy_args.guidance_role`): before the observation in the pivot's user turn (user),
or a system message of its own before that turn, appended to the system prompt at step 0 (system, the R3L code's
way). Hand messages for the placement, the embedded model's tokenizer for the tokens, the real TextWorldExpress
coin game for a retry, and templates that drop or refuse a later system message for the refusal."""

import copy

import pytest

from r3l.agent.episodes import EpisodeRunner, EpisodeStart, guided_opening, guided_turns
from r3l.errors import UserError
from r3l.rollout.chat import PromptFormat, renders_later_system_messages, template_default_system
from r3l.rollout.conversation import TokenConversation
from r3l.testing.scripted import ScriptedGenerator
from tests.test_conversation import completion_of
from tests.test_episodes import PARAMS, make_coin, runner_for
from tests.test_r3l_rules import strategy

GUIDANCE = "Note from a previous attempt: open the door first.\n"
OPENING = [{"role": "system", "content": "Play."}, {"role": "user", "content": "You are in a room."}]


def test_after_step_0_the_guidance_is_in_the_user_turn_or_a_system_message_of_its_own():
    assert guided_turns("Room 2.", GUIDANCE, "user") == [
        {"role": "user", "content": "Note from a previous attempt: open the door first.\n\nRoom 2."}
    ]
    assert guided_turns("Room 2.", GUIDANCE, "system") == [
        {"role": "system", "content": "Note from a previous attempt: open the door first."},
        {"role": "user", "content": "Room 2."},
    ]
    for role in ("user", "system"):  # the control: no guidance, the observation alone
        assert guided_turns("Room 2.", None, role) == [{"role": "user", "content": "Room 2."}]


def test_at_step_0_the_guidance_ends_the_system_prompt_or_leads_the_observation():
    assert guided_opening(OPENING, GUIDANCE, "system") == [
        {"role": "system", "content": "Play.\n\nNote from a previous attempt: open the door first."},
        {"role": "user", "content": "You are in a room."},
    ]
    assert guided_opening(OPENING, GUIDANCE, "user") == [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": "Note from a previous attempt: open the door first.\n\nYou are in a room."},
    ]
    no_system = OPENING[1:]
    assert guided_opening(no_system, GUIDANCE, "system") == [
        {"role": "system", "content": "Note from a previous attempt: open the door first."},
        *no_system,
    ]
    assert guided_opening(no_system, GUIDANCE, "system", "You are a helpful assistant.") == [
        {
            "role": "system",
            "content": "You are a helpful assistant.\n\nNote from a previous attempt: open the door first.",
        },
        *no_system,
    ]
    assert guided_opening(OPENING, None, "system") == OPENING
    assert OPENING[0]["content"] == "Play."  # the episode's own messages are not changed


def test_a_system_message_added_mid_conversation_is_token_exact_and_never_trained(tiny):
    _, tokenizer = tiny
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("You are in a room.", "Play."))
    conversation.add_assistant(completion_of(tokenizer, "<action>look</action>"), trained=True)
    trained = sum(conversation.loss_mask)
    before = len(conversation.tokens)
    conversation.add_turns(guided_turns("Room 1.", GUIDANCE, "system"))
    assert conversation.drift() == 0 and sum(conversation.loss_mask) == trained
    added = tokenizer.decode(conversation.tokens[before:])
    assert added.index("<|im_start|>system\n" + GUIDANCE.strip()) < added.index("<|im_start|>user\nRoom 1.")
    assert added.endswith("<|im_start|>assistant\n")


def with_template(tokenizer, template):
    changed = copy.deepcopy(tokenizer)
    changed.chat_template = template
    return changed


FIRST_SYSTEM_ONLY = (
    "{% for m in messages %}{% if m['role'] != 'system' or loop.first %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SYSTEM_MESSAGES_ON_TOP = (  # DeepSeek-R1's way: every system message joined into the header
    "{% set ns = namespace(system='') %}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = ns.system + m['content'] + '\n' %}{% endif %}{% endfor %}{{ ns.system }}"
    "{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
REFUSES_LATER_SYSTEM = (
    "{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be first') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)


def test_a_template_that_drops_or_refuses_a_later_system_message_is_found(tiny):
    _, tokenizer = tiny
    assert renders_later_system_messages(tokenizer)
    assert not renders_later_system_messages(with_template(tokenizer, FIRST_SYSTEM_ONLY))
    assert not renders_later_system_messages(with_template(tokenizer, REFUSES_LATER_SYSTEM))
    assert not renders_later_system_messages(with_template(tokenizer, SYSTEM_MESSAGES_ON_TOP))
    assert renders_later_system_messages(with_template(tokenizer, None))  # no template: every message is written


def test_system_guidance_on_such_a_template_is_refused_before_anything_runs(tiny):
    _, tokenizer = tiny
    dropping = with_template(tokenizer, FIRST_SYSTEM_ONLY)
    with pytest.raises(UserError, match="guidance_role=system.*use guidance_role=user"):
        strategy(dropping, guidance_role="system")
    strategy(dropping)  # the default (user) needs nothing of the template
    strategy(dropping, guidance_role="system", retry_guidance=False)  # no guidance is ever put anywhere
    strategy(tokenizer, guidance_role="system")


@pytest.mark.parametrize("pivot", [0, 3])
def test_a_retry_with_system_guidance_shows_it_as_a_system_message_and_distils_without_it(tiny, pivot):
    env = make_coin()
    task = env.tasks("train")[0]
    env.close()
    runner = runner_for(tiny)
    base = runner.run([EpisodeStart(task)], PARAMS)[0]
    retry = runner.run([EpisodeStart(task, base, pivot, GUIDANCE, "system")], PARAMS)[0]
    assert retry.termination != "replay_mismatch" and retry.actions[:pivot] == base.actions[:pivot]
    text = runner.tokenizer.decode(retry.conversation.tokens)
    if pivot == 0:
        assert f"{runner.system_prompt}\n\n{GUIDANCE.strip()}<|im_end|>" in text
    else:
        observation = base.steps[pivot].observation
        assert f"<|im_start|>system\n{GUIDANCE.strip()}<|im_end|>\n<|im_start|>user\n{observation}" in text
    assert text.count(GUIDANCE.strip()) == 1 and retry.conversation.drift() == 0
    assert GUIDANCE.strip() not in runner.tokenizer.decode(retry.distilled.tokens)
    shared = base.conversation.turn_spans[pivot][0]
    assert retry.distilled.tokens[:shared] == base.conversation.tokens[:shared]
    runner.close()


def test_the_system_prompt_a_template_writes_by_itself_is_read_from_it(tiny):
    _, tokenizer = tiny
    smollm = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert template_default_system(tokenizer) == smollm
    assert template_default_system(with_template(tokenizer, FIRST_SYSTEM_ONLY)) is None  # writes none
    assert template_default_system(with_template(tokenizer, None)) is None


def test_a_step_0_retry_without_a_system_prompt_keeps_the_templates_own(tiny):
    """System guidance at step 0 ends the system prompt the model would have seen: here the template's default,
    which a system message of the guidance alone would have replaced."""
    model, tokenizer = tiny
    runner = EpisodeRunner(make_coin, ScriptedGenerator(model, tokenizer), tokenizer, PromptFormat(system_prompt=""))
    env = make_coin()
    task = env.tasks("train")[0]
    env.close()
    base = runner.run([EpisodeStart(task)], PARAMS)[0]
    retry = runner.run([EpisodeStart(task, base, 0, GUIDANCE, "system")], PARAMS)[0]
    default = template_default_system(tokenizer)
    assert tokenizer.decode(base.conversation.tokens).startswith(f"<|im_start|>system\n{default}<|im_end|>")
    guided = tokenizer.decode(retry.conversation.tokens)
    assert guided.startswith(f"<|im_start|>system\n{default}\n\n{GUIDANCE.strip()}<|im_end|>\n<|im_start|>user\n")
    prompt = base.conversation.turn_spans[0][0]
    assert retry.distilled.tokens[:prompt] == base.conversation.tokens[:prompt]
    runner.close()
