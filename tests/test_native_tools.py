"""Function calling in the model's own format: the tools reach the chat template's `tools=` on every path that
starts a conversation from a task (first attempts, R3's reflection and retry, R3L's retry, evaluation), token-exact.

Qwen2.5's chat template (tests/helpers/qwen2_5_chat_template.jinja, as Qwen2.5-Coder-0.5B-Instruct ships it) is put
on the tiny model's tokenizer (SmolLM2's, the same ChatML tokens), so these tests need no Qwen weights; SmolLM2's
own template takes no tools and shows the fallback.
"""

import copy
import json
from pathlib import Path

import pytest
import torch

from r3l.agent.episodes import EpisodeRunner, EpisodeStart
from r3l.envs.function_calling import FunctionCallingEnv
from r3l.errors import UserError
from r3l.reflection.prompts import ReflectionPrompts
from r3l.reflection.retry import as_attempt, reflect_and_retry
from r3l.rollout.chat import PromptFormat, encode_prompt, template_takes_tools, tools_block, tools_in_system
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import Completion, SamplingParams
from r3l.rollout.hf import HFGenerator

QWEN_TEMPLATE = (Path(__file__).parent / "helpers" / "qwen2_5_chat_template.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def qwen_style(tiny):
    """The tiny model's tokenizer with Qwen2.5's chat template."""
    tokenizer = copy.deepcopy(tiny[1])
    tokenizer.chat_template = QWEN_TEMPLATE
    return tokenizer


def text_of(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=False)


def completion_of(tokenizer, text):
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return Completion(tokens, [-0.5] * len(tokens), text, "stop")


def test_a_template_that_takes_tools_renders_them_itself(qwen_style, tiny):
    assert template_takes_tools(qwen_style) and not template_takes_tools(tiny[1])
    prompt = text_of(qwen_style, encode_prompt(qwen_style, PromptFormat().messages("Weather in Oslo?"), TOOLS))
    expected = qwen_style.apply_chat_template(
        [{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert prompt == expected and json.dumps(TOOLS[0]) in prompt and "<tool_call>" in prompt
    assert prompt.startswith("<|im_start|>system\nYou are Qwen")  # the template's own system message, then the tools


def test_a_template_without_tools_gets_the_same_block_in_its_system_message(tiny):
    tokenizer = tiny[1]
    messages = PromptFormat().messages("Weather in Oslo?", "Be brief.")
    prompt = text_of(tokenizer, encode_prompt(tokenizer, messages, TOOLS))
    assert f"<|im_start|>system\nBe brief.\n\n{tools_block(TOOLS)}<|im_end|>" in prompt
    assert tools_in_system(messages[1:], TOOLS)[0] == {"role": "system", "content": tools_block(TOOLS)}
    # Qwen's template writes the same block after its system message
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = QWEN_TEMPLATE
    assert f"Be brief.\n\n{tools_block(TOOLS)}<|im_end|>" in text_of(qwen, encode_prompt(qwen, messages, TOOLS))


def test_a_template_that_teaches_another_tool_format_is_refused(tiny):
    tokenizer = copy.deepcopy(tiny[1])
    tokenizer.chat_template = (
        "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}{% for m in messages %}"
        "{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    with pytest.raises(UserError, match="set env.args.tool_format=prompt"):
        encode_prompt(tokenizer, PromptFormat().messages("hi"), TOOLS)


def test_a_conversation_with_tools_stays_token_exact(qwen_style):
    conversation = TokenConversation.start(qwen_style, PromptFormat().messages("Weather in Oslo?"), tools=TOOLS)
    reply = completion_of(
        qwen_style, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    span = conversation.add_assistant(reply, trained=True)
    conversation.add_user("Now Bergen.")
    conversation.add_assistant(completion_of(qwen_style, "<tool_call>"), trained=True)
    assert conversation.drift() == 0 and conversation.tokens[span[0] : span[1]] == reply.tokens
    for part in (conversation.copy(), conversation.before_turn(1), conversation.after_turn(0)):
        assert part.tools == TOOLS and "# Tools" in text_of(qwen_style, part.tokens)
    without = TokenConversation.start(qwen_style, PromptFormat().messages("Weather in Oslo?"))
    assert "# Tools" not in text_of(qwen_style, without.tokens)


def xlam_file(tmp_path):
    path = tmp_path / "xlam.jsonl"
    rows = [
        {
            "id": i,
            "query": f"What is the weather in City{i}?",
            "tools": [{"name": "get_weather", "description": "Weather.", "parameters": {"city": {"type": "str"}}}],
            "answers": [{"name": "get_weather", "arguments": {"city": f"City{i}"}}],
        }
        for i in range(4)
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def test_every_conversation_of_a_function_calling_task_gives_the_tools_to_the_template(tiny, qwen_style, tmp_path):
    """First attempts (and evaluation, which plays them), R3L's retry with guidance and R3's reflection and retry."""
    path = xlam_file(tmp_path)

    def make_env():
        return FunctionCallingEnv(source="xlam", path=path, test_fraction=0.5, seed=1)

    tasks = list(make_env().tasks("test"))
    generator = HFGenerator(tiny[0], qwen_style, dtype=torch.float32)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5)
    runner = EpisodeRunner(make_env, generator, qwen_style)
    bases = runner.run([EpisodeStart(task) for task in tasks], params)
    retries = runner.run([EpisodeStart(base.task, base, 0, "Check the city.") for base in bases], params)
    runner.close()
    for base, retry in zip(bases, retries):
        tools = base.task.data["tools"]
        for conversation in (base.conversation, retry.conversation, retry.distilled):
            text = text_of(qwen_style, conversation.tokens)
            assert conversation.tools == tools and json.dumps(tools[0]) in text
            assert text.count("<|im_start|>system") == 1 and base.task.data["question"] in text
        assert "Check the city." in text_of(qwen_style, retry.conversation.tokens)
        assert "Check the city." not in text_of(qwen_style, retry.distilled.tokens)
    attempts = [as_attempt(base) for base in bases]
    r3 = reflect_and_retry(attempts, make_env, generator, ReflectionPrompts.load(), params, params, n_reflections=1)
    for (retry,) in r3:
        text = text_of(qwen_style, retry.conversation.tokens)
        assert retry.conversation.tools == retry.failure.task.data["tools"] and text.count("# Tools") == 1
        assert text.count(retry.failure.task.data["question"]) == 2  # asked, and asked again by the retry message


def test_the_prompt_format_keeps_tools_out_of_the_template(tmp_path):
    env = FunctionCallingEnv(source="xlam", path=xlam_file(tmp_path), tool_format="prompt")
    task = env.tasks("train")[0]
    assert "tools" not in task.data and task.prompt.startswith("Available functions:")


def test_structured_replies_are_tool_call_blocks_of_the_listed_functions(tiny, tmp_path):
    pytest.importorskip("xgrammar")
    from r3l.rollout.constraints import Constrainer

    model, tokenizer = tiny
    constrainer = Constrainer(tokenizer, model.config.vocab_size)
    env = FunctionCallingEnv(source="xlam", path=xlam_file(tmp_path), test_fraction=0.5)
    task = env.tasks("test")[0]
    env.reset(task)
    constraint = env.reply_constraint(None)

    def follows(text):
        return constrainer.replay(constraint, tokenizer(text, add_special_tokens=False)["input_ids"])[1]

    call = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": [1, 2.5e1, {"a": null}]}}'
        "\n</tool_call>"
    )
    assert follows(call) and follows(call + "\n" + call.replace("Oslo", 'Os\\"lo'))
    assert env.verify(task, call).feedback.startswith("argument 'city'")  # read as any other reply
    for bad in (
        '```json\n{"name": "get_weather", "arguments": {}}\n```',
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": []}\n</tool_call>',
        'Sure. <tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',
    ):
        assert not follows(bad), bad
