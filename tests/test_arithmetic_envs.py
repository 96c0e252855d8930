"""The 'arithmetic' and 'gsm' environments, answer extraction and the named verifiers."""

import logging
import subprocess
import sys
import textwrap
from fractions import Fraction

import pytest

import r3l.envs
from r3l.envs.arithmetic import ArithmeticEnv, GsmEnv, clear_task_cache
from r3l.envs.base import Task
from r3l.errors import UserError
from r3l.grading.answer import extract_final_number, extract_tagged, parse_number, parse_number_literal
from r3l.grading.safe_math import evaluate
from r3l.grading.verifiers import VERIFIERS, answers_match

NO_ANSWER = "no answer found inside <answer></answer> tags"


@pytest.fixture(scope="module")
def arithmetic():
    return ArithmeticEnv(seed=0, train_size=40, test_size=20, max_digits=2)


@pytest.fixture(scope="module")
def gsm():
    return GsmEnv(seed=0, train_size=10, test_size=5)


def task(answer: str) -> Task:
    return Task(id="t", prompt="Calculate 6 * 7.", answer=answer)


# ---------------------------------------------------------------- answer extraction
def test_extract_tagged_takes_the_last_block_and_tolerates_case_and_spaces():
    assert extract_tagged("<answer>1</answer> then < Answer >\n 42 \n</ ANSWER>") == "42"
    assert extract_tagged("<answer>unclosed") is None
    assert extract_tagged("<final>x</final>", tag="final") == "x"


def test_extract_final_number():
    assert extract_final_number("so 3 apples cost $1,234.50 in total.") == "1234.50"
    assert extract_final_number("no digits") is None
    assert extract_final_number("it is -7") == "-7"


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", 42),
        (" -3.5 ", Fraction(-7, 2)),
        ("1,234", 1234),
        ("$18", 18),
        ("3/4", Fraction(3, 4)),
        ("12 apples", 12),
        ("42.", 42),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["x + 1", "forty", "1/0", "", "2 3"])
def test_parse_number_rejects_non_numbers(text):
    assert parse_number(text) is None


# ---------------------------------------------------------------- grading
@pytest.mark.parametrize(
    "answer, gold",
    [
        ("42", "42"),
        ("42.0", "42"),
        ("\\boxed{42}", "42"),
        ("$42$", "42"),
        ("1/2", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("\\frac{1}{2}", "0.5"),
        ("1+x", "x+1"),
        ("28,080", "28080"),
        ("−7", "-7"),
    ],
)
def test_answers_match(answer, gold):
    assert answers_match(answer, gold)


@pytest.mark.parametrize("answer, gold", [("41", "42"), ("1+x", "1"), ("forty-two", "42"), ("0.5", "1/3")])
def test_answers_do_not_match(answer, gold):
    assert not answers_match(answer, gold)


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("2 + 5", "7"),
        ("6 * 7", "42"),
        ("6*7", "42"),
        ("12/4", "3"),
        ("\\frac{84}{2}", "42"),
        ("84/2", "42"),
        ("7/1", "7"),
        ("2/4", "0.5"),
        ("\\sqrt{49}", "7"),
        ("x = 7", "7"),
        ("2^3", "8"),
        ("(7)", "7"),
    ],
)
def test_an_unevaluated_expression_never_matches_a_number(answer, gold):
    assert not answers_match(answer, gold)


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", 42),
        ("-3.5", Fraction(-7, 2)),
        ("$-55{,}761$", -55761),
        ("\\boxed{7}", 7),
        ("7 \\text{ cm}", 7),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("-3/4", Fraction(-3, 4)),
        ("50%", 50),
        ("42.", 42),
    ],
)
def test_parse_number_literal(text, value):
    assert parse_number_literal(text) == value


@pytest.mark.parametrize("text", ["2 + 5", "12/4", "7/1", "0/3", "\\frac{84}{2}", "\\sqrt{4}", "x = 7", "1e3", ""])
def test_parse_number_literal_refuses_expressions(text):
    assert parse_number_literal(text) is None


def test_a_restated_question_earns_nothing_in_any_numeric_verifier(arithmetic, gsm):
    restated = "<answer>2 + 5</answer>"
    assert not arithmetic.verify(task("7"), restated).success
    assert not gsm.verify(task("7"), restated).success
    for name in ("math", "numeric"):
        verdict = VERIFIERS.get(name)(restated, "7")
        assert not verdict.success and "not a number" in verdict.feedback
    assert not VERIFIERS.get("math")("\\boxed{2+5}", "7").success  # untagged: the boxed value must be a number
    assert VERIFIERS.get("math")("so 2 + 5 = 7", "7").success  # untagged: the last number


def test_arithmetic_env_grades_right_and_wrong(arithmetic):
    right = arithmetic.verify(task("42"), "6 times 7 is 42. <answer>42</answer>")
    assert (right.reward, right.success) == (1.0, True)
    latex = arithmetic.verify(task("-55761"), "<answer>$-55{,}761$</answer>")
    assert latex.success
    wrong = arithmetic.verify(task("42"), "<answer>32</answer>")
    assert (wrong.reward, wrong.success) == (0.0, False)
    assert wrong.feedback == "answered 32, which is not correct"  # the model may read it: no answer in it


def test_arithmetic_env_requires_tags(arithmetic):
    verdict = arithmetic.verify(task("42"), "The answer is 42.")
    assert (verdict.reward, verdict.feedback) == (0.0, NO_ANSWER)


def test_answer_is_revealed_in_feedback_only_when_asked():
    env = ArithmeticEnv(seed=0, train_size=1, test_size=1, reveal_answer_in_feedback=True)
    assert env.verify(task("42"), "<answer>32</answer>").feedback == "answered 32, the correct answer is 42"
    hidden = ArithmeticEnv(seed=0, train_size=1, test_size=1).verify(task("42"), "<answer>32</answer>")
    assert "42" not in hidden.feedback


def test_arithmetic_tasks_have_exact_integer_golds(arithmetic):
    for item in [*arithmetic.tasks("test"), *arithmetic.tasks("train")]:
        assert evaluate(item.data["expression"]).value == int(item.answer)
        assert item.prompt.startswith(item.data["question"]) and "<answer></answer>" in item.prompt
        assert arithmetic.verify(item, f"<answer>{item.answer}</answer>").success


def test_floor_division_golds_from_reasoning_gym_are_skipped(arithmetic):
    assert not arithmetic.keep({"answer": "0", "metadata": {"expression": "8 / -( 5 * -8 + -39 )"}})
    assert arithmetic.keep({"answer": "2", "metadata": {"expression": "8 / 4"}})


def test_arithmetic_settings_are_passed_through():
    env = ArithmeticEnv(
        seed=1,
        train_size=10,
        test_size=5,
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=1,
        operators=["+"],
        allow_parentheses=False,
    )
    for item in env.tasks("train"):
        left, plus, right = item.data["expression"].split()
        assert plus == "+" and int(left) + int(right) == int(item.answer)


def test_arithmetic_splits_disjoint_and_deterministic(arithmetic):
    train = {t.data["question"] for t in arithmetic.tasks("train")}
    test = {t.data["question"] for t in arithmetic.tasks("test")}
    assert len(train) == 40 and len(test) == 20 and not train & test
    clear_task_cache()
    again = ArithmeticEnv(seed=0, train_size=40, test_size=20, max_digits=2)
    assert [t.prompt for t in again.tasks("train")] == [t.prompt for t in arithmetic.tasks("train")]


def test_tiny_problem_space_is_a_clear_error():
    env = ArithmeticEnv(
        seed=0,
        train_size=500,
        test_size=5,
        min_terms=1,
        max_terms=1,
        min_digits=1,
        max_digits=1,
        allow_parentheses=False,
    )
    with pytest.raises(UserError, match="distinct tasks"):
        list(env.tasks("train"))


def test_gsm_env(gsm):
    item = gsm.tasks("test")[0]
    assert item.id == "gsm-test-0" and "<answer></answer>" in item.prompt
    assert gsm.verify(item, f"Reasoning... <answer>{item.answer}</answer>").success
    wrong = gsm.verify(item, "<answer>-1</answer>")
    assert not wrong.success and wrong.feedback == "answered -1, which is not correct"
    assert not {t.prompt for t in gsm.tasks("test")} & {t.prompt for t in gsm.tasks("train")}


def test_make_builds_both_and_rejects_bad_settings():
    assert isinstance(r3l.envs.make("arithmetic", train_size=2, test_size=2), ArithmeticEnv)
    assert isinstance(r3l.envs.make("gsm", train_size=2, test_size=2), GsmEnv)
    with pytest.raises(UserError, match="bad settings for environment 'arithmetic'"):
        r3l.envs.make("arithmetic", min_terms=3, max_terms=2)
    with pytest.raises(UserError, match="environment 'gsm' has no setting env.args.max_digits; its settings: "):
        r3l.envs.make("gsm", max_digits=3)


# ---------------------------------------------------------------- named verifiers
def test_verifier_registry_names():
    assert VERIFIERS.names() == ["exact", "math", "numeric"]
    with pytest.raises(UserError, match="unknown verifier 'fuzzy'"):
        VERIFIERS.get("fuzzy")


def test_math_verifier_falls_back_to_the_whole_reply():
    verify = VERIFIERS.get("math")
    assert verify("so the answer is \\boxed{\\frac{1}{2}}", "0.5").success
    assert verify("<answer>0.5</answer>", "1/2").success
    assert verify("I think it is 7", "8").feedback == "answered 7, the correct answer is 8"
    assert verify("no digits here", "8").feedback == NO_ANSWER


def test_exact_verifier():
    verify = VERIFIERS.get("exact")
    assert verify("<answer> Paris </answer>", "Paris").success
    assert verify("<answer>paris</answer>", "Paris").feedback == "answered paris, the correct answer is Paris"
    assert verify("Paris", "Paris").feedback == NO_ANSWER


def test_numeric_verifier():
    verify = VERIFIERS.get("numeric")
    assert verify("<answer>3.0000001</answer>", "3").success
    assert verify("the total is 1,200 dollars", "1200").success
    assert verify("<answer>3.01</answer>", "3").feedback == "answered 3.01, the correct answer is 3"
    assert (
        verify("<answer>three</answer>", "3").feedback
        == "answered three, which is not a number; give the final value alone"
    )
    assert "not a number" in verify("<answer>3</answer>", "three").feedback


def test_math_verify_does_not_warn_that_its_own_timeouts_are_off(caplog, monkeypatch):
    """r3l bounds each math-verify call with its own budget; math-verify's warning (once from its parser, once from
    its grader, in every run) that its timeouts are off is dropped at those loggers, and nothing else is."""
    grader = pytest.importorskip("math_verify.grader")
    parser = pytest.importorskip("math_verify.parser")
    for module in (grader, parser):
        monkeypatch.setattr(module, "TIMEOUT_WARNING_SHOWN", False)
    with caplog.at_level(logging.WARNING):
        assert VERIFIERS.get("math")("<answer>x^2+1</answer>", "x^2+1").success
        logging.getLogger("math_verify.parser").warning("another warning")
    assert "Timeout is disabled" not in caplog.text
    assert "another warning" in caplog.text


def test_the_first_symbolic_comparison_imports_nothing_inside_its_time_budget():
    """The first math-verify comparison in a process imports the rest of sympy (slow on a loaded machine: the
    reason '1+x' once failed to match 'x+1' under CI's load); that happens before the budget's clock starts."""
    pytest.importorskip("math_verify")
    probe = textwrap.dedent(
        """
        import sys
        from contextlib import contextmanager
        from r3l.grading import verifiers

        budgeted = verifiers._time_budget
        imported_inside = []

        @contextmanager
        def watched(seconds):
            before = set(sys.modules)
            with budgeted(seconds):
                yield
            imported_inside.extend(sorted(set(sys.modules) - before))

        verifiers._time_budget = watched
        assert verifiers.answers_match("1+x", "x+1")
        print(imported_inside)
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_arithmetic_split_is_kept_on_disk_and_written_once_a_walk(tmp_path, monkeypatch):
    """Every run starting walks the whole train split (to count the held-out tasks it shares by content), and
    reasoning-gym's division draws cost milliseconds: the split is stored, and a walk writes the store once,
    not once an item."""
    from r3l.envs import task_store

    monkeypatch.setenv("R3L_CACHE", str(tmp_path))
    writes = []
    save = task_store.save
    monkeypatch.setattr(task_store, "save", lambda *args: writes.append(1) or save(*args))
    clear_task_cache()
    drawn = ArithmeticEnv(seed=5, train_size=40, test_size=10)
    first = list(drawn.tasks("test")) + list(drawn.tasks("train"))
    assert len(first) == 50 and len(writes) <= 3  # the first item (settings checked), the test split, the train
    clear_task_cache()
    walked = ArithmeticEnv(seed=5, train_size=40, test_size=300)  # a walk stopped early draws a block, not all
    assert next(iter(walked.tasks("test"))) == walked.tasks("test")[0]
    assert len(walked.tasks("test")._draws.items) <= 64
    clear_task_cache()

    def no_draws(self, config, max_draws):
        return lambda index: pytest.fail("drew instead of loading")

    monkeypatch.setattr(ArithmeticEnv, "_make_draw", no_draws)
    loaded = ArithmeticEnv(seed=5, train_size=40, test_size=10)
    assert list(loaded.tasks("test")) + list(loaded.tasks("train")) == first
    clear_task_cache()


def test_a_split_kept_on_disk_is_loaded_without_importing_reasoning_gym(tmp_path, monkeypatch):
    """reasoning-gym takes ~1 s to import (sympy, matplotlib): a process whose split is on disk (every run after
    the first with these settings) neither imports it nor makes its dataset."""
    monkeypatch.setenv("R3L_CACHE", str(tmp_path))
    probe = textwrap.dedent(
        """
        import sys
        from r3l.envs.arithmetic import ArithmeticEnv
        from r3l.envs.countdown import CountdownEnv

        envs = [ArithmeticEnv(seed=3, train_size=20, test_size=5), CountdownEnv(seed=3, train_size=6, test_size=2)]
        print([task.prompt for env in envs for split in ("test", "train") for task in env.tasks(split)])
        print("reasoning_gym" in sys.modules)
        """
    )
    made, loaded = (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300) for _ in range(2)
    )
    assert made.returncode == 0 == loaded.returncode, made.stderr + loaded.stderr
    assert made.stdout.splitlines() == [loaded.stdout.splitlines()[0], "True"]  # the same tasks, drawn then loaded
    assert loaded.stdout.splitlines()[1] == "False"
