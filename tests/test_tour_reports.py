"""Structured R3L reports agree with the environment's verdict they were shown (the README tour's reports on the
embedded model judged failed episodes "success" and asked for no retry: no pivot, no retry to see)."""

import pytest

from r3l.config import load_config
from r3l.reflection import report_schema as schemas
from r3l.reflection.report import OUTCOMES


def test_a_shown_verdict_limits_the_outcomes_a_report_may_give():
    assert schemas.verdict_outcomes(False) == ("failure",)
    assert schemas.verdict_outcomes(True) == ("success", "success_but_inefficient")
    assert schemas.verdict_outcomes(None) == OUTCOMES


def test_the_schema_lists_only_those_outcomes():
    assert schemas.report_schema(3, 10)["properties"]["trajectory_outcome"]["enum"] == list(OUTCOMES)
    failed = schemas.report_schema(3, 10, schemas.verdict_outcomes(False))
    assert failed["properties"]["trajectory_outcome"]["enum"] == ["failure"]
    assert failed["properties"]["retry_from_step"] == {"type": "integer", "minimum": 0, "maximum": 2}


@pytest.mark.parametrize("show_verdict", [True, False])
def test_structured_reports_agree_with_the_verdict_they_were_shown(show_verdict):
    from r3l.build import build_parts
    from r3l.seeding import seed_everything

    config = load_config(
        None,
        [
            "model=tiny-random",
            "algorithm=r3l",
            "sampling.group_size=4",
            "sampling.max_new_tokens=6",
            "structured.reports=true",
            "structured.report_field_chars=8",
            f"algorithm.strategy_args.show_verdict={str(show_verdict).lower()}",
        ],
    )
    seed_everything(config.run.seed)
    parts = build_parts(config)
    tasks = parts.make_env().tasks("train")[:3]
    _, metrics = parts.strategy.explore(tasks, step=0)
    assert metrics["valid_report_rate"] == 1.0 and metrics["report_count"] == 6
    if show_verdict:
        assert metrics["report_outcome_agreement"] == 1.0
    else:  # the model judges alone: the tiny random model's outcomes are its own (here not all agree)
        assert metrics["report_outcome_agreement"] < 1.0


def test_the_embedded_model_decodes_its_reports_under_the_schema_by_default():
    """Only R3L reads these keys (r3l/build.py hands report_field_chars to the strategies' context, where only
    R3L's reflections use it): the default GRPO job trains as before."""
    from r3l.config import model_preset

    assert model_preset("smollm2-135m-instruct") == {"structured": {"reports": True, "report_field_chars": 120}}
    embedded = load_config(None, ["algorithm=r3l", "env=textworld_express"]).structured
    assert (embedded.reports, embedded.report_field_chars, embedded.replies) == (True, 120, True)
    assert load_config(None, ["model=tiny-random", "algorithm=r3l"]).structured.reports is False
    assert load_config(None, ["structured.reports=false"]).structured.reports is False


def test_free_text_reflections_stop_where_their_report_is_complete():
    """R3L's reflections ask the generator to stop once the report's JSON object closes (the HF loop stops there,
    vLLM's reply is cut there): tokens after it would be trained as part of the reflection."""
    from r3l.build import build_parts
    from r3l.seeding import seed_everything

    config = load_config(
        None, ["model=tiny-random", "algorithm=r3l", "sampling.group_size=2", "sampling.max_new_tokens=4"]
    )
    seed_everything(config.run.seed)
    parts = build_parts(config)
    asked = []
    generate = parts.generator.generate

    def recording(prompts, params, n=1, constraints=None):
        asked.append(params)
        return generate(prompts, params, n=n, constraints=constraints)

    parts.generator.generate = recording
    parts.strategy.context.generator.generate = recording
    parts.strategy.explore(parts.make_env().tasks("train")[:2], step=0)
    reflections = [params for params in asked if params.max_new_tokens != config.sampling.max_new_tokens]
    assert reflections and all(params.stop_at_json_close for params in reflections)
    assert not any(params.stop_at_json_close for params in asked if params not in reflections)
