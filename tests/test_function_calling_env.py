"""The function_calling environment: real BFCL data, seeded splits, gold answers, the checker setting, and
the xLAM file loader. (tests/test_bfcl_official.py compares the checkers on thousands of replies.)"""

import importlib.util
import json

import pytest

import r3l.envs
from r3l.envs.function_calling import FunctionCallingEnv
from r3l.errors import UserError

needs_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None, reason="needs BFCL data: pip install --no-deps bfcl-eval"
)


def first_acceptable_reply(ground_truth):
    """A reply in our format from BFCL's possible answer: each argument's first value, optional ones ('') skipped."""
    calls = []
    for entry in ground_truth:
        ((name, arguments),) = entry.items()
        calls.append(
            {
                "name": name,
                "arguments": {argument: values[0] for argument, values in arguments.items() if "" not in values},
            }
        )
    return "I will call the tools.\n<tool_call>" + json.dumps(calls) + "</tool_call>"


@needs_bfcl
def test_bfcl_splits_are_deterministic_disjoint_and_cover_the_categories():
    env = r3l.envs.make("function_calling")
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (800, 200)  # simple 400, multiple 200, parallel 200, parallel_multiple 200
    ids = {split: [task.data["source_id"] for task in env.tasks(split)] for split in ("train", "test")}
    assert not set(ids["train"]) & set(ids["test"]) and len(set(ids["train"])) == 800
    again = FunctionCallingEnv(train_size=10, test_size=5)
    assert [t.data["source_id"] for t in again.tasks("test")] == ids["test"][:5]
    assert [t.data["source_id"] for t in again.tasks("train")] == ids["train"][:10]
    assert [t.id for t in again.tasks("train")][:2] == ["function_calling-train-0", "function_calling-train-1"]
    other = FunctionCallingEnv(seed=1)
    assert [t.data["source_id"] for t in other.tasks("test")] != ids["test"]
    categories = {task.data["category"] for task in test}
    assert categories == {"simple", "multiple", "parallel", "parallel_multiple"}
    assert sum(task.data["category"] == "simple" for task in test) == 80  # stratified: 20% of each category
    task = test[0]  # native (default): the request alone, the functions as the chat template's tools
    assert task.prompt == task.data["question"] and env.system_prompt is None
    assert [tool["function"] for tool in task.data["tools"]] == task.answer["functions"]
    prompted = FunctionCallingEnv(tool_format="prompt").tasks("test")[0]
    assert prompted.data["source_id"] == task.data["source_id"] and "tools" not in prompted.data
    assert prompted.prompt.startswith("Available functions:\n[{") and "\n\nRequest: " in prompted.prompt
    assert "<tool_call></tool_call>" in FunctionCallingEnv(tool_format="prompt").system_prompt


@needs_bfcl
def test_real_bfcl_gold_answers_verify():
    env = FunctionCallingEnv(categories=["simple", "parallel_multiple"])
    by_id = {task.data["source_id"]: task for split in ("train", "test") for task in env.tasks(split)}
    for source_id in ("simple_python_0", "parallel_multiple_0"):
        task = by_id[source_id]
        reply = first_acceptable_reply(task.answer["ground_truth"])
        verdict = env.verify(task, reply)
        assert verdict.success and verdict.reward == 1.0, (source_id, verdict.feedback)
    task = by_id["parallel_multiple_0"]  # two different functions, written in the other order, one tag each
    calls = json.loads(first_acceptable_reply(task.answer["ground_truth"]).split("<tool_call>")[1][:-12])
    assert env.verify(task, "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in reversed(calls))).success
    assert not env.verify(task, f"<tool_call>{json.dumps(calls[:1])}</tool_call>").success
    for split in ("train", "test"):  # every task's stored reference solution passes
        for task in env.tasks(split):
            assert env.verify(task, env.solution(task)).success, task.data["source_id"]


@needs_bfcl
def test_bad_model_output_gives_feedback_not_errors():
    env = FunctionCallingEnv(categories="simple", test_size=1)
    task = env.tasks("test")[0]
    for reply, feedback in [
        ("no tags here", "no <tool_call> block found"),
        ("<tool_call>{oops</tool_call>", "the tool call is not valid JSON"),
        ("<tool_call>" * 20000, "the reply is too long"),
        ('<tool_call>{"name": "__import__(\'os\')", "arguments": {}}</tool_call>', "not found in model output"),
    ]:
        env.reset(task)
        result = env.step(reply)
        assert result.done and result.reward == 0.0 and not result.info["success"]
        assert feedback in result.info["feedback"] and "\n" not in result.info["feedback"]
    strict = FunctionCallingEnv(categories="simple", test_size=1, checker="strict")
    assert (
        "which is not an available function"
        in strict.verify(task, '<tool_call>{"name": "__import__(\'os\')", "arguments": {}}</tool_call>').feedback
    )
    tagged = FunctionCallingEnv(categories="simple", test_size=1, tag="call", tool_format="prompt")
    assert "<call></call>" in tagged.system_prompt and "<tool_call>" not in tagged.system_prompt
    assert tagged.verify(task, tagged.solution(task)).success
    assert not tagged.verify(task, env.solution(task)).success


def test_bad_settings_are_one_line_user_errors(tmp_path):
    for kwargs, message in [
        (dict(source="glaive"), "env.args.source must be one of bfcl, xlam"),
        (dict(categories=["simple", "irrelevance"]), "unknown BFCL category 'irrelevance'"),
        (dict(test_fraction=1.0), "env.args.test_fraction must be in [0, 1)"),
        (dict(checker="ast"), "env.args.checker must be one of official, strict, lenient, got 'ast'"),
        (dict(source="xlam"), "env.args.path is needed"),
        (dict(source="xlam", path=str(tmp_path / "none.jsonl")), "not found"),
        (dict(path=str(tmp_path)), "no BFCL data for category 'simple'"),
        (dict(tool_format="json"), "env.args.tool_format must be one of native, prompt"),
        (dict(tag="call"), "env.args.tag='call' needs env.args.tool_format=prompt"),
        (dict(test_size=10**6), "env.args.test_size=1000000 asks for more tasks than the split has"),
    ]:
        with pytest.raises(UserError) as error:
            FunctionCallingEnv(**kwargs)
        assert message in str(error.value) and "\n" not in str(error.value)


@needs_bfcl
def test_checker_setting_official_strict_lenient():
    envs = {
        checker: FunctionCallingEnv(categories=["simple"], checker=checker)
        for checker in ("official", "strict", "lenient")
    }
    assert envs["official"].checker == FunctionCallingEnv(categories=["simple"]).checker == "official"
    by_id = {task.data["source_id"]: task for task in envs["official"].tasks("train") + envs["official"].tasks("test")}

    def verdicts(source_id, arguments):
        task = by_id[source_id]
        ((name, _),) = task.answer["ground_truth"][0].items()
        text = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        return {checker: env.verify(task, text).success for checker, env in envs.items()}

    # simple_python_93: location ['LA'], timeframe [7], format ['IMAX']
    assert verdicts("simple_python_93", {"location": "LA", "timeframe": 7, "format": "IMAX"}) == {
        "official": True,
        "strict": True,
        "lenient": True,
    }
    assert verdicts("simple_python_93", {"location": "la", "timeframe": 7, "format": "I-MAX"}) == {
        "official": True,
        "strict": False,
        "lenient": True,
    }
    assert verdicts("simple_python_93", {"location": "LA", "timeframe": 7.0, "format": "IMAX"}) == {
        "official": False,
        "strict": False,
        "lenient": False,
    }
    # simple_python_17: number [450], formatted [true, ""]; the schema requires both
    assert verdicts("simple_python_17", {"number": 450, "formatted": True}) == {
        "official": True,
        "strict": True,
        "lenient": True,
    }
    assert verdicts("simple_python_17", {"number": 450}) == {"official": False, "strict": True, "lenient": True}
    with pytest.raises(UserError, match="has no setting env.args.lenient_strings"):
        r3l.envs.make("function_calling", lenient_strings=True)


@needs_bfcl
def test_tasks_no_reply_can_pass_are_left_out():
    from r3l.envs.function_calling import _read_json_lines, _unsolvable, bfcl_data_dir, bfcl_files

    left_out = {}
    for category in ("live_simple", "live_multiple"):
        questions, answers = bfcl_files(bfcl_data_dir(), category)
        gold = {record["id"]: record["ground_truth"] for record in _read_json_lines(answers)}
        for record in _read_json_lines(questions):
            reason = _unsolvable(gold[record["id"]], record["function"])
            if reason:
                left_out[record["id"]] = reason
    assert left_out == {
        "live_simple_106-63-0": "an argument of record has no acceptable value",
        "live_simple_112-68-0": "an argument of record has no acceptable value",
        "live_multiple_507-149-4": "Flights_4_SearchOnewayFlight's schema requires 'origin_airport', "
        "which the ground truth wants left out",
        "live_multiple_862-181-3": "the ground truth requires 'journey_start_time', which Trains_1_FindTrains's "
        "schema does not list",
        "live_multiple_964-207-0": "the ground truth requires 'question', which transfer_to_human_agent's "
        "schema does not list",
    }
    env = FunctionCallingEnv(categories=["live_simple", "live_multiple"], test_fraction=0)
    kept = {task.data["source_id"] for task in env.tasks("train")}
    assert len(kept) == 258 + 1053 - 5 and not kept & set(left_out)


def test_missing_bfcl_package_names_the_install_line(monkeypatch):
    import r3l.envs.function_calling as module

    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"needs BFCL data: pip install --no-deps bfcl-eval"):
        FunctionCallingEnv()


def test_bfcl_folder_given_by_path(tmp_path):
    question = {
        "id": "simple_7",
        "question": [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}]],
        "function": [
            {
                "name": "weather",
                "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
    }
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "BFCL_v3_simple.json").write_text(json.dumps(question) + "\n")
    (tmp_path / "possible_answer" / "BFCL_v3_simple.json").write_text(
        json.dumps({"id": "simple_7", "ground_truth": [{"weather": {"city": ["Oslo"]}}]}) + "\n"
    )
    env = FunctionCallingEnv(path=str(tmp_path), categories=["simple"], test_fraction=0)
    (task,) = env.tasks("train")
    assert task.prompt == "Context: Be brief.\n\nWeather in Oslo?"
    (prompted,) = FunctionCallingEnv(
        path=str(tmp_path), categories=["simple"], test_fraction=0, tool_format="prompt"
    ).tasks("train")
    assert "Context: Be brief.\n\nRequest: Weather in Oslo?" in prompted.prompt
    assert env.verify(task, '<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>').success
    assert env.verify(task, '<tool_call>{"name": "weather", "arguments": {"city": "oslo"}}</tool_call>').success
    strict = FunctionCallingEnv(path=str(tmp_path), categories=["simple"], test_fraction=0, checker="strict")
    assert not strict.verify(task, '<tool_call>{"name": "weather", "arguments": {"city": "oslo"}}</tool_call>').success


def xlam_row(index, **changes):
    row = {
        "id": index,
        "query": f"What is the weather in city {index}?",
        "tools": json.dumps(
            [
                {
                    "name": "get_weather",
                    "description": "Weather.",
                    "parameters": {"city": {"type": "str"}, "days": {"type": "int", "default": 1}},
                }
            ]
        ),
        "answers": json.dumps([{"name": "get_weather", "arguments": {"city": f"City{index}", "days": index}}]),
    }
    row.update(changes)
    return json.dumps(row)


def test_xlam_file_loads_splits_and_verifies_exactly(tmp_path):
    path = tmp_path / "xlam.jsonl"
    path.write_text("\n".join(xlam_row(i) for i in range(10)) + "\n\n")
    env = r3l.envs.make("function_calling", source="xlam", path=str(path), seed=3)  # checker: official
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (8, 2)
    assert not {t.data["source_id"] for t in train} & {t.data["source_id"] for t in test}
    assert [t.prompt for t in test] == [
        t.prompt for t in FunctionCallingEnv(source="xlam", path=str(path), seed=3).tasks("test")
    ]
    task = train[0]
    assert task.prompt == task.data["question"] and task.data["tools"] == [
        {"type": "function", "function": function} for function in task.answer["functions"]
    ]
    index = task.data["source_id"]
    good = json.dumps({"name": "get_weather", "arguments": {"days": index, "city": f"City{index}"}})
    assert env.verify(task, f"<tool_call>{good}</tool_call>").success
    wrong = json.dumps({"name": "get_weather", "arguments": {"days": str(index), "city": f"City{index}"}})
    assert (
        env.verify(task, f"<tool_call>{wrong}</tool_call>").feedback
        == f"argument 'days' of get_weather is '{index}', expected {index}"
    )
    extra = env.verify(task, f"<tool_call>[{good}, {good}]</tool_call>")
    assert extra.feedback == "made 2 calls, expected 1"
    missing = env.verify(task, "<tool_call>[]</tool_call>")
    assert missing.feedback == "made 0 calls, expected 1; missing a call to get_weather"
    lenient = FunctionCallingEnv(source="xlam", path=str(path), seed=3, checker="lenient")
    shouted = json.dumps({"name": "get_weather", "arguments": {"days": index, "city": f"CITY{index}"}})
    assert not env.verify(task, f"<tool_call>{shouted}</tool_call>").success  # xLAM: verify_exact, always
    assert not lenient.verify(task, f"<tool_call>{shouted}</tool_call>").success
    as_list = tmp_path / "xlam.json"
    as_list.write_text(json.dumps([json.loads(xlam_row(i)) for i in range(3)]))
    assert len(FunctionCallingEnv(source="xlam", path=str(as_list), test_fraction=0).tasks("train")) == 3


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 2: invalid JSON"),
        (xlam_row(1, answers="[{'name': 'x'}]"), "line 2: field 'answers' is not valid JSON"),
        (xlam_row(1, answers=json.dumps([{"name": "x", "arguments": "{}"}])), "line 2: 'answers' must be a list"),
        (json.dumps({"query": "hi", "tools": "[]"}), "line 2: no 'answers' field"),
        (xlam_row(1, query=""), "line 2: 'query' must be a non-empty string"),
    ],
)
def test_xlam_bad_rows_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(xlam_row(0) + "\n" + line + "\n")
    with pytest.raises(UserError) as error:
        FunctionCallingEnv(source="xlam", path=str(path))
    assert str(error.value).startswith(f"{path} line 2") and message in str(error.value)


@needs_bfcl
def test_a_reply_without_a_closed_tool_call_block_misses_the_format():
    env = FunctionCallingEnv(categories="simple", test_size=1)
    fenced = '```json\n{"name": "f", "arguments": {}}\n```'  # Qwen2.5-Coder-0.5B's free reply: the call, untagged
    assert env.answer_format_missing(fenced) is True
    assert env.answer_format_missing('<tool_call>{"name": "f", "arguments": {}}') is True  # never closed
    assert env.answer_format_missing("<tool_call>{oops</tool_call>") is False  # the format, with bad JSON inside
    assert env.answer_format_missing(env.solution(env.tasks("test")[0])) is False
    tagged = FunctionCallingEnv(categories="simple", test_size=1, tag="call", tool_format="prompt")
    assert tagged.answer_format_missing('<call>{"name": "f", "arguments": {}}</call>') is False
    assert tagged.answer_format_missing('<tool_call>{"name": "f", "arguments": {}}</tool_call>') is True
