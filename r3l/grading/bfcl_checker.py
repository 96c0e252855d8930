"""BFCL's own AST checker as an r3l verdict: `official_verdict(calls, ground_truth, functions, category)`.

The verdict is the one bfcl-eval's maintained checker gives
(`bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker`, Language.PYTHON), not a re-implementation: r3l
only converts its parsed calls into BFCL's model output format ([{name: {argument: value}}]) and BFCL's
error list into one line of feedback. The checker reads parsed JSON values; nothing is evaluated or run.
Any exception it raises on a reply counts as a failed verdict whose feedback says so.

It is cheap: over 35,000 right and wrong replies to the default categories' tasks, `official_verdict` took
50-75 us a reply on one CPU core (the checker itself 35-40 us; parsing the reply adds ~30 us). The checker
is imported once, in a few milliseconds.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from r3l.errors import UserError
from r3l.grading.tool_calls import Call, correct_verdict, count_mismatch, failed_verdict
from r3l.grading.verdict import Verdict

MISSING_CHECKER = "the official BFCL checker needs bfcl-eval: pip install --no-deps bfcl-eval"
MAX_CLAUSE_CHARS = 200
_MODEL_CONFIG = "bfcl_eval.constants.model_config"
_MODEL_NAME = "gorilla-openfunctions-v2"  # a model BFCL keeps function names for (underscore_to_dot=False)


@functools.lru_cache(maxsize=1)
def load_ast_checker() -> tuple[Callable[..., dict[str, Any]], Any, str]:
    """(ast_checker, Language.PYTHON, model name to pass), imported once.

    `ast_checker` imports `MODEL_CONFIG_MAPPING` from `bfcl_eval.constants.model_config`, which imports
    every model handler and so the API clients (anthropic, openai, ...) that `pip install --no-deps
    bfcl-eval` leaves out. The checker's only use of it is `convert_func_name`: for a function name with a
    '.', `MODEL_CONFIG_MAPPING[model].underscore_to_dot` says whether the model wrote it with '_' instead
    (models whose API forbids '.'). So when that module cannot be imported, a stand-in whose every entry
    says `underscore_to_dot=False` (names are kept as written, right for a model that writes the names it
    is given, as r3l's prompt asks) is put in `sys.modules` for the import of the checker alone and taken
    out again. When the real module imports, the model passed is one it lists with underscore_to_dot=False.
    """
    try:
        importlib.import_module("bfcl_eval.constants.enums")
    except ImportError:
        raise UserError(MISSING_CHECKER) from None
    try:
        mapping = importlib.import_module(_MODEL_CONFIG).MODEL_CONFIG_MAPPING
    except Exception:  # noqa: BLE001 - the API clients are missing, or fail to import in some other way
        mapping = None
    if mapping is None:
        module = _import_with_stand_in()
        model_name = _MODEL_NAME
    else:
        module = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        model_name = _keeping_names(mapping)
    from bfcl_eval.constants.enums import Language

    return module.ast_checker, Language.PYTHON, model_name


class _KeepNames(dict):
    """Stand-in MODEL_CONFIG_MAPPING: every model keeps '.' in function names."""

    def __missing__(self, model: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(underscore_to_dot=False)


def _import_with_stand_in() -> types.ModuleType:
    stand_in = types.ModuleType(_MODEL_CONFIG, "r3l stand-in: see r3l.grading.bfcl_checker.load_ast_checker")
    stand_in.MODEL_CONFIG_MAPPING = _KeepNames()  # type: ignore[attr-defined]  # a module made here
    parent = importlib.import_module("bfcl_eval.constants")
    previous = sys.modules.get(_MODEL_CONFIG)
    sys.modules[_MODEL_CONFIG] = stand_in
    try:
        return importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    finally:
        if previous is None:
            sys.modules.pop(_MODEL_CONFIG, None)
        else:
            sys.modules[_MODEL_CONFIG] = previous
        if getattr(parent, "model_config", None) is stand_in:
            delattr(parent, "model_config")


def _keeping_names(mapping: Mapping[str, Any]) -> str:
    """A model id that `convert_func_name` looks up unchanged (no '_') and that keeps '.' in names."""
    if _MODEL_NAME in mapping and not mapping[_MODEL_NAME].underscore_to_dot:
        return _MODEL_NAME
    for name, config in mapping.items():
        if "_" not in name and not getattr(config, "underscore_to_dot", True):
            return name
    raise UserError(f"{_MODEL_CONFIG} lists no model that keeps '.' in function names; reinstall bfcl-eval")


def checker_category(category: str) -> str:
    """BFCL's test category name for an r3l category ('simple' is 'simple_python' since BFCL v4).

    The checker only looks for 'parallel', then 'multiple', in the name; anything else is a simple task.
    """
    return "simple_python" if category == "simple" else category


def model_output(calls: Sequence[Call]) -> list[dict[str, dict[str, Any]]]:
    """r3l's parsed calls in the form BFCL's decoder hands its checker."""
    return [{call.name: dict(call.arguments)} for call in calls]


def official_verdict(
    calls: Sequence[Call],
    ground_truth: Sequence[Mapping[str, Any]],
    functions: Sequence[Mapping[str, Any]],
    category: str,
) -> Verdict:
    """BFCL's AST checker's judgement of `calls` for a task of `category` ('simple', 'live_multiple', ...)."""
    checker, language, model_name = load_ast_checker()
    try:
        result = checker(
            list(functions), model_output(calls), list(ground_truth), language, checker_category(category), model_name
        )
        valid = bool(result.get("valid"))
        errors = result.get("error") or []
    except Exception as error:  # noqa: BLE001 - a reply must never crash the verifier
        return Verdict(
            reward=0.0,
            success=False,
            feedback=_clip(f"the BFCL checker could not read the calls ({type(error).__name__}: {error})"),
        )
    if valid:
        return correct_verdict(len(calls))
    clauses = [_clip(clause) for clause in _clauses(errors) if clause.strip()]
    if len(calls) != len(ground_truth):
        made = count_mismatch(len(calls), len(ground_truth))
        clauses = [f"{clause} ({made})" if clause == "Wrong number of functions" else clause for clause in clauses]
    return failed_verdict(clauses)


def _clauses(errors: Any) -> list[str]:
    """BFCL's error list flattened: strings as they are; a parallel task's per-call entries
    ({"Model Result Index i": {"sub_error": [...]}}) as 'call i: <error>'."""
    if isinstance(errors, str):
        return [errors]
    clauses: list[str] = []
    for error in errors if isinstance(errors, (list, tuple)) else [errors]:
        if isinstance(error, Mapping):
            for key, detail in error.items():
                where = str(key).replace("Model Result Index ", "call ")
                subs = detail.get("sub_error") if isinstance(detail, Mapping) else detail
                clauses += [f"{where}: {sub}" for sub in _clauses(subs)]
        else:
            clauses.append(str(error))
    return clauses


def _clip(text: str) -> str:
    """One line of at most MAX_CLAUSE_CHARS, without BFCL's closing full stop (clauses are '; '-joined)."""
    text = " ".join(text.split())
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]
    return text if len(text) <= MAX_CLAUSE_CHARS else text[: MAX_CLAUSE_CHARS - 3] + "..."
