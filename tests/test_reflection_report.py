"""R3L reflection reports: JSON extraction, validation reason codes, stats, guidance and the trajectory log."""

import json

import pytest

from r3l.reflection.guidance import (
    build_guidance,
    environment_verdict,
    format_trajectory_log,
    load_guidance_template,
    load_reflect_template,
    reflection_prompt,
)
from r3l.reflection.report import (
    MAX_CHARS,
    OUTCOMES,
    REASON_CODES,
    REPORT_KEYS,
    Report,
    ReportError,
    ReportStats,
    extract_json_object,
    needs_retry,
    parse_report,
)


def report_json(**overrides):
    base = {
        "trajectory_summary": "Went to the kitchen, opened the fridge.",
        "root_cause_analysis": "It never picked up the apple",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "Take the apple before leaving the kitchen",
        "retry_from_step": 2,
    }
    base.update(overrides)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def code_of(text, num_steps=5):
    with pytest.raises(ReportError) as caught:
        parse_report(text, num_steps)
    return caught.value.reason_code


def test_constants():
    assert OUTCOMES == ("success", "success_but_inefficient", "failure")
    assert set(REPORT_KEYS) == {
        "trajectory_summary",
        "root_cause_analysis",
        "trajectory_outcome",
        "improvement_suggestion",
        "retry_from_step",
    }


def test_valid_report_in_a_fence_with_prose_and_think():
    text = (
        "<think>Let me see {what} happened.</think>\nHere is my analysis:\n```json\n"
        + report_json()
        + "\n```\nHope this helps!"
    )
    report = parse_report(text, num_steps=5)
    assert report == Report(
        "Went to the kitchen, opened the fridge.",
        "It never picked up the apple",
        "failure",
        "Take the apple before leaving the kitchen",
        2,
    )
    assert needs_retry(report)


def test_last_object_wins():
    text = report_json(retry_from_step=1) + "\nOn second thought:\n" + report_json(retry_from_step=3)
    assert parse_report(text, 5).retry_from_step == 3
    # a trailing brace group that is not JSON does not hide the last valid object
    assert parse_report(report_json() + " {not json}", 5).retry_from_step == 2


def test_braces_and_quotes_inside_strings():
    text = "prose { unmatched\n" + report_json(root_cause_analysis='Used "}" and {x} wrongly \\ oops {')
    report = parse_report(text, 5)
    assert report.root_cause_analysis == 'Used "}" and {x} wrongly \\ oops {'
    assert extract_json_object('x {"a": {"b": "}{"}} y') == {"a": {"b": "}{"}}


def test_outcome_is_normalized_case_and_whitespace():
    report = parse_report(report_json(trajectory_outcome="  Success_But_Inefficient "), 5)
    assert report.trajectory_outcome == "success_but_inefficient" and needs_retry(report)


def test_missing_key():
    assert code_of(report_json(root_cause_analysis=...)) == "missing_key"
    assert code_of(report_json(trajectory_summary="   ")) == "missing_key"
    assert code_of(report_json(improvement_suggestion=...)) == "missing_key"
    assert code_of(report_json(retry_from_step=...)) == "missing_key"


def test_unknown_outcome():
    assert code_of(report_json(trajectory_outcome="partial")) == "bad_outcome"


@pytest.mark.parametrize("step, expected", [("3", 3), (" 4 ", 4), (0, 0), (4, 4)])
def test_retry_from_step_accepts_integers_and_digit_strings(step, expected):
    assert parse_report(report_json(retry_from_step=step), 5).retry_from_step == expected


@pytest.mark.parametrize("step", [3.0, 2.5, True, False, -1, "-1", 5, 99, "2.5", "", "two", [1], {"s": 1}])
def test_retry_from_step_rejects_the_rest(step):
    assert code_of(report_json(retry_from_step=step)) == "bad_step"


def test_zero_steps_cannot_be_retried():
    assert code_of(report_json(retry_from_step=0), num_steps=0) == "bad_step"


def test_success_needs_no_retry_fields():
    report = parse_report(report_json(trajectory_outcome="success", improvement_suggestion=..., retry_from_step=...), 5)
    assert report.trajectory_outcome == "success" and report.retry_from_step is None
    assert report.improvement_suggestion is None and not needs_retry(report)
    # present but invalid retry fields are ignored on success
    report = parse_report(report_json(trajectory_outcome="SUCCESS", retry_from_step=2.5), 5)
    assert report.retry_from_step is None


@pytest.mark.parametrize(
    "text, code",
    [
        ("I think the agent did fine.", "no_json"),
        ("", "no_json"),
        ('{"trajectory_summary": "cut off', "invalid_json"),
        ("{'trajectory_summary': 'single quotes'}", "invalid_json"),
        ('```json\n["a", "list"]\n```', "not_object"),
        ("42", "not_object"),
    ],
)
def test_not_a_json_object(text, code):
    assert code_of(text) == code


def test_huge_input_is_too_long():
    text = report_json() + " " * MAX_CHARS
    assert code_of(text) == "too_long"


def test_report_error_codes_are_fixed():
    with pytest.raises(ValueError):
        ReportError("whatever", "x")
    assert ReportError("bad_step", "x").reason_code == "bad_step"


def test_stats_count_valid_and_invalid_by_code():
    stats = ReportStats()
    assert stats.metrics()["invalid_report_rate"] == 0.0
    for text in [report_json(), report_json(), "nothing", report_json(retry_from_step=9)]:
        try:
            stats.add(parse_report(text, 5))
        except ReportError as error:
            stats.add(error)
    stats.add("bad_outcome")
    assert stats.valid == 2 and stats.total == 5
    assert stats.invalid == {"no_json": 1, "bad_step": 1, "bad_outcome": 1}
    metrics = stats.metrics()
    assert metrics["invalid_report_rate"] == pytest.approx(3 / 5)
    assert metrics["valid_report_rate"] == pytest.approx(2 / 5)
    assert metrics["invalid_report/bad_step"] == pytest.approx(1 / 5)
    assert metrics["invalid_report/too_long"] == 0.0
    assert {k for k in metrics if k.startswith("invalid_report/")} == {f"invalid_report/{c}" for c in REASON_CODES}
    with pytest.raises(ValueError):
        stats.add("not a code")


def test_guidance_holds_the_whole_report_and_asks_not_to_mention_it():
    report = parse_report(report_json(), 5)
    text = build_guidance(report)
    assert "It never picked up the apple" in text and "Take the apple before leaving the kitchen" in text
    shown = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert shown == {
        "trajectory_summary": report.trajectory_summary,
        "root_cause_analysis": report.root_cause_analysis,
        "trajectory_outcome": report.trajectory_outcome,
        "improvement_suggestion": report.improvement_suggestion,
        "retry_from_step": report.retry_from_step,
    }
    assert "Do not mention or refer to this guidance" in text
    brief = build_guidance(report, load_guidance_template("r3l_guidance_brief.txt"))
    assert "It never picked up the apple" in brief and "{" not in brief
    assert build_guidance(report, "Why: {root_cause} | Do: {suggestion} | {other}") == (
        "Why: It never picked up the apple | Do: Take the apple before leaving the kitchen | {other}"
    )
    with pytest.raises(ValueError):
        build_guidance(Report("s", "r", "success"))


def test_default_templates_have_their_placeholders():
    reflect = load_reflect_template()
    assert all(p in reflect for p in ("{rules}", "{log}", "{num_steps}"))
    assert all(key in reflect for key in REPORT_KEYS)
    assert "{report}" in load_guidance_template()


STEPS = [
    ("You are in a kitchen.", "I should open the fridge.", "open fridge"),
    ("The fridge is open. You see an apple.", "", "go to hallway"),
]


def test_trajectory_log_format():
    assert format_trajectory_log(STEPS, "Task failed: no apple in hand.", "") == (
        "Step 0\n"
        "Observation: You are in a kitchen.\n"
        "Thought: I should open the fridge.\n"
        "Action: open fridge\n"
        "\n"
        "Step 1\n"
        "Observation: The fridge is open. You see an apple.\n"
        "Action: go to hallway\n"
        "\n"
        "Final feedback: Task failed: no apple in hand."
    )
    assert format_trajectory_log(STEPS[:1], "ok", "Pick up the apple.").startswith(
        "Rules: Pick up the apple.\n\nStep 0\n"
    )
    assert format_trajectory_log(STEPS[:1], "Task failed.", verdict=environment_verdict(False, 0.0)).endswith(
        "Final feedback: Task failed.\n\nVerdict of the environment: failure (reward 0)"
    )
    assert environment_verdict(True, 0.5) == "success (reward 0.5)"


def test_reflection_prompt_fills_the_template():
    prompt = reflection_prompt(STEPS, "failed", "Use {braces} freely.", template="R: {rules}\nL: {log}\nN: {num_steps}")
    assert prompt == ("R: Use {braces} freely.\nL: " + format_trajectory_log(STEPS, "failed") + "\nN: 2")
    default = reflection_prompt(STEPS, "failed", "Pick up the apple.")
    assert "Pick up the apple." in default and "Step 1\nObservation" in default and "{log}" not in default


# ---------------------------------------------------------------- the R3L code's reading
def _report(**fields):
    base = {
        "trajectory_summary": "went west",
        "root_cause_analysis": "east was right",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "go east",
        "retry_from_step": 1,
    }
    return json.dumps({**base, **fields})


def test_the_reference_reading_takes_first_brace_to_last_brace():
    from r3l.reflection.report import REPORT_PARSERS

    reference, ours = REPORT_PARSERS.get("reference"), REPORT_PARSERS.get("r3l")
    assert reference(f"Sure! {_report()} Done.", 3).retry_from_step == 1
    two = f'Example: {{"a": 1}} Mine: {_report()}'  # two objects: the reference's slice is not JSON
    with pytest.raises(ReportError) as caught:
        reference(two, 3)
    assert caught.value.reason_code == "invalid_json"
    assert ours(two, 3).retry_from_step == 1  # r3l: the last balanced object


@pytest.mark.parametrize(
    "fields, reference_ok, r3l_ok",
    [
        ({"trajectory_outcome": "Failure"}, False, True),  # the reference compares the outcome exactly
        ({"trajectory_summary": ""}, True, False),  # the reference only asks that a text field be present
        ({"improvement_suggestion": ""}, True, False),
        ({"retry_from_step": "1"}, False, True),  # a digit string: the reference's retry fails on it, r3l converts
        ({"retry_from_step": 1.0}, False, False),  # a float: the reference's retry fails on it
        ({"retry_from_step": True}, False, False),
        ({"retry_from_step": 3}, False, False),  # out of [0, 3)
    ],
)
def test_reference_and_r3l_readings_differ_where_fidelity_says(fields, reference_ok, r3l_ok):
    from r3l.reflection.report import REPORT_PARSERS

    for name, expected in (("reference", reference_ok), ("r3l", r3l_ok)):
        try:
            REPORT_PARSERS.get(name)(_report(**fields), 3)
            accepted = True
        except ReportError:
            accepted = False
        assert accepted == expected, (name, fields)


def test_the_reference_reading_of_a_success_needs_no_pivot():
    from r3l.reflection.report import REPORT_PARSERS

    report = REPORT_PARSERS.get("reference")(
        _report(trajectory_outcome="success", retry_from_step=None, improvement_suggestion=None), 3
    )
    assert report.trajectory_outcome == "success" and report.retry_from_step is None


def test_outcome_agreement_on_hand_counts():
    from r3l.reflection.report import outcome_agreement

    failed = Report("s", "r", "failure", "do better", 0)
    fine = Report("s", "r", "success")
    slow = Report("s", "r", "success_but_inefficient", "fewer steps", 1)
    # agree, agree, agree, disagree (a failed episode called a success), invalid reports not counted
    judged = [
        (failed, False),
        (fine, True),
        (slow, True),
        (slow, False),
        (ReportError("invalid_json", "x"), False),
        ("no_json", True),
    ]
    assert outcome_agreement(judged) == 3 / 4
    assert outcome_agreement([(failed, True)]) == 0.0
    assert outcome_agreement([("no_json", False)]) is None
