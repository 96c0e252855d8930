"""Typed run configuration: YAML file + dotted command-line overrides, validated by pydantic."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from r3l.errors import UserError

PRESET_DIR = Path(__file__).parent / "presets"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _name_shorthand(value: Any) -> Any:
    """Let `model=tiny-random` stand for `model.name=tiny-random` (same for env, generator, algorithm)."""
    return {"name": value} if isinstance(value, str) else value


class LoraConfig(Section):
    enabled: bool = False
    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]


class ModelConfig(Section):
    name: str = "smollm2-135m-instruct"
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: str = Field("auto", description="auto (cuda when available, else cpu), cpu, cuda, cuda:N")
    autocast_bf16: bool | Literal["auto"] = Field(
        "auto",
        description="train under bf16 autocast (fp32 master weights); auto: where bf16 is native (a GPU, "
        "a CPU with AVX512-BF16 or AMX), else fp32",
    )
    gradient_checkpointing: bool = False
    lora: LoraConfig = LoraConfig()

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return _name_shorthand(value)


class Message(Section):
    role: Literal["system", "user", "assistant"]
    content: str


def _env_shorthand(value: Any) -> Any:
    """`env=NAME` as for the other sections, and `env=NAME:ID` for `env.name=NAME env.args.id=ID` (gym:FrozenLake-v1,
    textarena:Mastermind-v0; the split is at the first colon)."""
    value = _name_shorthand(value)
    if not (isinstance(value, dict) and isinstance(value.get("name"), str) and ":" in value["name"]):
        return value
    name, _, game = value["name"].partition(":")
    args = value.get("args") or {}
    if not isinstance(args, dict) or args.get("id", game) != game:
        raise ValueError(
            f"env '{value['name']}' names the game '{game}' but env.args.id is {args.get('id')!r}; give the game once"
        )
    return {**value, "name": name, "args": {**args, "id": game}}


class EnvConfig(Section):
    name: str = "arithmetic"
    args: dict[str, Any] = {}
    system_prompt: str | None = Field(None, description="replaces the environment's own system prompt")
    few_shot: list[Message] = Field([], description="example turns placed before each task's first message")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return _env_shorthand(value)


class GeneratorConfig(Section):
    """The generator (`generator.name`) and its dtype; every other key is the chosen generator's own setting, read
    from its constructor and checked when it is built (`r3l generators` lists them, `r3l config` shows them)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str = "hf"
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="generation dtype; auto: bfloat16 where bf16 is native (a GPU, a CPU with AVX512-BF16 "
        "or AMX), else float32",
    )

    @property
    def settings(self) -> dict[str, Any]:
        """The generator's own settings as given (not yet checked against its constructor)."""
        return dict(self.model_extra or {})

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return _name_shorthand(value)


class SamplingConfig(Section):
    group_size: int = Field(8, gt=0, description="completions sampled per task (G)")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, gt=0)
    stop: list[str] = []


class AgentConfig(Section):
    """Limits and format of multi-turn episodes (single-turn environments end after one reply anyway)."""

    max_turns: int = Field(30, gt=0, description="assistant turns per episode (the environment may stop sooner)")
    max_context_tokens: int = Field(4096, gt=0, description="an episode stops before its context would pass this")
    terminate_on: list[Literal["format_error", "inadmissible", "repeated_action"]] = Field(
        ["format_error", "inadmissible", "repeated_action"], description="early stops, each counted in the metrics"
    )
    repeat_limit: int = Field(
        3,
        ge=2,
        description="the same action this many times in a row stops the episode when its repeats left the "
        "observation unchanged (a repeated move that changes the state, as in a grid game, goes on)",
    )
    action_tag: str = Field("action", min_length=1)
    think_tag: str = Field("think", min_length=1)
    stop_after_action: bool = Field(True, description="end a turn at </action> (tagged environments)")
    env_workers: int = Field(16, gt=0, description="simulator instances alive at once (episodes in flight)")
    env_processes: int = Field(
        0,
        ge=0,
        description="run environments in this many spawned processes, each with its own simulator, stepped "
        "in parallel (0: in the training process, one after another); a process that dies ends its episode as "
        "env_error",
    )
    env_timeout: float | None = Field(
        None,
        gt=0,
        description="seconds a simulator may take to answer one reset, "
        "replay or step before it is killed and the episode ends as env_error "
        "(null: wait forever)",
    )


class StructuredConfig(Section):
    """Structured decoding (xgrammar, with generator hf or vllm). Off by default, as in the papers: free text."""

    reports: bool = Field(
        False,
        description="R3L reflections decoded under the report's JSON schema (every key, "
        "trajectory_outcome one of its three words, retry_from_step an integer inside the episode)",
    )
    replies: bool = Field(
        False,
        description="each reply decoded under its environment's grammar: text games "
        "<think> free then <action> one of the admissible actions; arithmetic <answer> a number",
    )
    report_field_chars: int = Field(
        300,
        gt=0,
        description="longest text field of a structured report (R3L lowers "
        "it so that a report always fits reflection_max_new_tokens)",
    )
    think_chars: int | Literal["auto"] | None = Field(
        "auto",
        description="longest free text before a structured action or answer: auto = half the reply's "
        "max_new_tokens, so the action always fits after it (a token holds at least one character); null: unbounded",
    )


class AlgorithmConfig(Section):
    name: str = "grpo"
    strategy: str = "plain"
    strategy_args: dict[str, Any] = Field({}, description="settings of the exploration strategy (see its Settings)")
    advantage: str = "grpo"
    advantage_args: dict[str, Any] = {}
    policy_loss: str = "ppo_clip"
    loss_args: dict[str, Any] = {}
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_coef: float = Field(0.0, ge=0)
    kl_estimator: str = "k3"
    updates_per_batch: int = Field(1, gt=0, description="optimizer passes over each batch (PPO epochs)")
    shaping_gamma: float = Field(
        0.1,
        gt=0,
        description="shaped-objective samples (Critique-GRPO's refinements) train by -A * p / (p + gamma), in a "
        "part of their own",
    )
    sft_loss: Literal["policy_loss", "nll"] = Field(
        "policy_loss",
        description="how SFT-objective samples (R3L's auxiliary SFT) train: policy_loss = the "
        "policy loss with advantage = their weight, one normaliser with the rest (R3L's code); nll = weighted "
        "NLL with its own normaliser",
    )
    rollout_correction: str = Field(
        "none",
        description="importance-sampling correction for the generator/learner log-prob mismatch on policy "
        "samples: none | tis (weights min(pi/mu, C)) | mis (weights pi/mu, tokens with pi/mu > C dropped)",
    )
    rollout_correction_threshold: float = Field(
        2.0,
        gt=1,
        description="C: tis truncates the weights at C, mis drops tokens whose ratio exceeds C; the "
        "mismatch metrics count tokens whose ratio leaves [1/C, C]",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, value: Any) -> Any:
        value = _name_shorthand(value)
        if isinstance(value, dict) and "name" in value:
            return merge_algorithm(algorithm_preset(value["name"]), value)
        return value


class TrainConfig(Section):
    steps: int = Field(30, ge=0)
    tasks_per_step: int = Field(8, gt=0)
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    schedule: Literal["constant", "cosine"] = "constant"
    micro_batch_size: int = Field(16, gt=0, description="most experiences one forward pass takes")
    micro_batch_tokens: int | None = Field(
        None,
        gt=0,
        description="most padded positions (rows x width, shared prefixes once) one forward pass takes, so that "
        "the learner's activation memory is bounded by tokens, not rows; an experience longer than this is a "
        "pass of its own (null: rows alone cap a pass)",
    )
    micro_batch_overhead: int = Field(
        64,
        ge=0,
        description="padded positions one more forward pass is worth: experiences of like lengths share a "
        "micro-batch, cut where padding costs more than this (raise it on a GPU, where a pass's fixed cost "
        "outweighs positions)",
    )
    grad_clip: float = Field(1.0, gt=0)
    share_prefix: bool = Field(True, description="compute a prompt shared by a group once per micro-batch")
    skip_zero_advantage: bool = Field(
        True,
        description="skip experiences whose gradient is exactly zero "
        "(advantage 0 with an advantage-weighted loss and no KL)",
    )
    checkpoint_every: int = Field(10, ge=0, description="steps between checkpoints; 0 = only at the end")
    keep_checkpoints: int = Field(
        1,
        gt=0,
        description="newest checkpoints kept; only the newest keeps the "
        "optimizer state (resume), older ones keep their weights (eval)",
    )
    keep_optimizer: bool = Field(
        False,
        description="keep the optimizer state in a finished run's last checkpoint (to train it further with "
        "--resume and more steps); dropped by default: it is twice the weights' size",
    )
    sampling_threads: int | None = Field(
        None,
        ge=1,
        description="torch threads while sampling (rollouts, reflections, retries, held-out evaluation); unset: "
        "the step's plan (r3l/threads.py: one thread in both phases for a bf16 policy under 300M parameters, "
        "whose small operations gain nothing from more, measured; every thread otherwise)",
    )
    release_free_memory: bool = Field(
        True,
        description="hand the allocator's free pages back to the system after "
        "each step (glibc malloc_trim), so resident memory shows what the run holds",
    )
    mmap_threshold_kib: int | None = Field(
        None,
        gt=0,
        description="glibc: blocks of at least this many KiB are mapped apart and returned to the system when "
        "freed (no heap fragmentation, at the cost of fresh pages for each); unset: glibc's own sliding threshold "
        "(docs/BENCH.md, Memory)",
    )
    budget_tokens: int | None = Field(
        None,
        gt=0,
        description="stop once the run has generated this many tokens (setup such as R3's failure set "
        "included), before train.steps if sooner: a baseline run on to another arm's budget (r3l compare "
        "--match-budget)",
    )
    budget_seconds: float | None = Field(
        None,
        gt=0,
        description="stop once the run has spent this many seconds (setup, steps and evaluations), before "
        "train.steps if sooner",
    )
    max_nonfinite_updates: int = Field(
        3,
        gt=0,
        description="stop the run after this many updates in a row whose "
        "loss or gradient norm was NaN/inf (each is dropped, never applied)",
    )


class EvalConfig(Section):
    size: int | None = Field(
        100, ge=0, description="held-out tasks, the first of the test split; 0 skips evaluation; null: the whole split"
    )
    exclude_train_overlap: bool = Field(
        False,
        description="leave out held-out tasks that are training tasks by content (the same prompt, or the same "
        "problem by the environment's near-duplicate key); counted at start either way",
    )
    draws: int | None = Field(
        None,
        ge=1,
        description="sampled episodes per held-out task, averaged (null: 4 where eval.temperature > 0 and one "
        "attempt, else 1; greedy evaluation draws once)",
    )
    every: int = Field(0, ge=0, description="steps between evaluations; 0 = before and after training only")
    temperature: float = Field(0.0, ge=0)
    max_new_tokens: int | None = None
    attempts: Literal[1, 2] = Field(1, description="2: R3's first try, reflection, second try on failures")
    seed: int = 1234
    # R3's two-attempt evaluation (attempts=2); its own settings, whatever the training strategy
    reflect_prompt: str | None = Field(None, description="attempts=2: text file replacing R3's reflection instruction")
    retry_prompt: str | None = Field(None, description="attempts=2: text file replacing R3's retry instruction")
    include_feedback: bool = Field(
        False, description="attempts=2: put the verifier's feedback in the reflection prompt"
    )
    reflection_max_new_tokens: int | None = Field(
        None,
        gt=0,
        description="attempts=2: length limit of the reflection (unset: the training strategy's "
        "reflection_max_new_tokens where it has one, else 128)",
    )
    reflection_temperature: float | None = Field(
        None,
        ge=0,
        description="attempts=2: temperature of the reflection (unset: the training strategy's "
        "reflection_temperature where set, else eval.temperature)",
    )
    verdict_control: bool = Field(
        True,
        description="attempts=2: also ask each failure once more after the verdict alone (no reflection), the "
        "control that tells the reflection's share of a second-try gain",
    )

    @model_validator(mode="after")
    def _draws_with_one_attempt(self) -> EvalConfig:
        if self.draws is not None and self.draws > 1 and self.attempts == 2:
            raise ValueError("eval.draws > 1 goes with one attempt; R3's two-attempt evaluation draws once a task")
        return self

    @property
    def resolved_draws(self) -> int:
        """eval.draws, with null resolved: 4 sampled draws where the evaluation samples (one attempt), else 1."""
        if self.draws is not None:
            return self.draws
        return 4 if self.temperature > 0 and self.attempts == 1 else 1


class LoggingConfig(Section):
    tensorboard: bool = True
    wandb: dict[str, Any] | None = None
    progress: bool = True
    dump_experiences: bool = False


class DistributedConfig(Section):
    """Scale-out. Left at its defaults, everything runs in one process."""

    rollout_workers: int = Field(
        0, ge=0, description="Ray actors that explore shards of each batch (0: the training process explores)"
    )
    learner_ranks: int = Field(
        1,
        ge=1,
        description="processes the learner is sharded across with FSDP2 (gloo on "
        "CPU, NCCL on GPUs: one GPU each); 1: the training process alone",
    )
    sharded_checkpoints: bool = Field(
        False,
        description="learner_ranks > 1: each rank saves its shards of the "
        "policy and optimizer (torch.distributed.checkpoint) instead of gathering the "
        "optimizer on rank 0; the weights are still written whole, for r3l eval",
    )
    ray_address: str | None = Field(
        None, description="an existing Ray cluster (auto, or ray://HOST:PORT); default: start a local one"
    )
    worker_cpus: float = Field(1.0, gt=0, description="CPUs per rollout worker (also its torch threads)")
    worker_gpus: float = Field(0.0, ge=0, description="GPUs per rollout worker (fractions share one)")
    placement: Literal["pack", "spread", "strict_spread"] = Field(
        "pack",
        description="how Ray places the rollout workers on a cluster's nodes (a placement group: pack = "
        "as few nodes as fit, spread = across nodes where possible, strict_spread = one node each)",
    )
    weight_sync: Literal["object_store", "broadcast"] = Field(
        "object_store",
        description="how weights reach the rollout workers: Ray's object store (one copy per "
        "node), or a bucketed broadcast over a gloo process group of the trainer and the workers",
    )
    on_worker_failure: Literal["fail", "retry"] = Field(
        "fail", description="a worker that dies or times out: stop the run, or replace it and rerun its shard once"
    )
    worker_timeout_s: float = Field(
        1800.0, gt=0, description="a worker's start, weight sync or shard must finish within this"
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="S: explore the next S batches while the learner trains "
        "(needs rollout_workers); no batch is trained more than S updates after the weights "
        "it was explored with. 0: synchronous",
    )

    @model_validator(mode="after")
    def _settings_that_need_others(self) -> DistributedConfig:
        if self.sharded_checkpoints and self.learner_ranks < 2:
            raise ValueError("distributed.sharded_checkpoints needs distributed.learner_ranks of 2 or more")
        if self.max_staleness and not self.rollout_workers:
            raise ValueError(
                "distributed.max_staleness needs rollout workers to explore while the learner trains: "
                "set distributed.rollout_workers (1 or more), or max_staleness=0"
            )
        return self


class RewardConfig(Section):
    functions: list[str] = Field(
        [],
        description="reward functions with TRL's signature fn(prompts, completions, **columns) -> list[float], as "
        "'package.module:function' or 'file.py:function', added to a single-turn environment's own reward",
    )
    weights: list[float] | None = Field(None, description="one weight per function (default 1 each)")
    env_weight: float = Field(1.0, ge=0, description="the weight of the environment's own reward in the sum")
    success_threshold: float | None = Field(
        None, description="a summed reward at or above this is a success; unset: the environment's verdict decides"
    )


class RunConfig(Section):
    dir: str = "runs"
    name: str | None = None
    seed: int = 0


class Config(Section):
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    env: EnvConfig = EnvConfig()
    generator: GeneratorConfig = GeneratorConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    sampling: SamplingConfig = SamplingConfig()
    agent: AgentConfig = AgentConfig()
    structured: StructuredConfig = StructuredConfig()
    reward: RewardConfig = RewardConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    logging: LoggingConfig = LoggingConfig()
    distributed: DistributedConfig = DistributedConfig()


_ARGS_OF = {"strategy_args": "strategy", "advantage_args": "advantage", "loss_args": "policy_loss"}


def merge_algorithm(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`changes` over `base`: the *_args mappings merge key by key, except that a changed strategy,
    advantage or loss drops the base's arguments for the old one."""
    merged = {**base, **changes}
    for args, owner in _ARGS_OF.items():
        if owner in changes and changes[owner] != base.get(owner):
            merged[args] = dict(changes.get(args) or {})
        elif isinstance(base.get(args), dict) and isinstance(changes.get(args), dict):
            merged[args] = {**base[args], **changes[args]}
    return merged


def algorithm_preset(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """An algorithm preset from r3l/presets/algorithms/NAME.yaml; `extends: OTHER` starts from OTHER."""
    path = PRESET_DIR / "algorithms" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (PRESET_DIR / "algorithms").glob("*.yaml"))
        raise ValueError(f"unknown algorithm '{name}'; choose one of: {', '.join(known)}")
    if name in _seen:
        raise ValueError(f"algorithm presets extend each other in a loop: {' -> '.join((*_seen, name))}")
    preset = yaml.safe_load(path.read_text()) or {}
    parent = preset.pop("extends", None)
    if parent is not None:
        preset = merge_algorithm(algorithm_preset(parent, (*_seen, name)), preset)
    return {**preset, "name": name}


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise UserError(f"override '{text}' is not key=value; write e.g. train.lr=1e-5")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise UserError(f"override '{text}' has an empty key; write e.g. train.lr=1e-5")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_override(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "env", "generator", "algorithm"):
            child = {"name": child}
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise UserError(f"cannot set {'.'.join(path)}: '{part}' is a value, not a section")
        node[part] = child
        node = child
    same_name = isinstance(value, str) and _name_shorthand(node.get(path[0]) or {}).get("name") == value
    if len(path) == 1 and path[0] in SECTIONS_WITH_SHORTHAND and same_name:
        return  # `env=arithmetic` on a config that already plays arithmetic keeps its settings
    node[path[-1]] = value  # `env=countdown` picks countdown with its own defaults; `env.name=...` keeps the rest


def read_yaml(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if not file.exists():
        raise UserError(f"config file {path} does not exist; pass an existing YAML file or a preset name")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text (byte {error.start}); save the config as UTF-8 YAML") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory; pass a YAML file or a preset name") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: invalid YAML ({getattr(error, 'problem', error)}); fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a mapping of sections (run, model, env, ...)")
    return data


def read_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's tree; `extends: OTHER.yaml` (a path relative to the file) starts from OTHER's tree, which
    the file's own sections lie over key by key (extend_tree)."""
    data = read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise UserError(f"{path}: `extends` must name one YAML file (e.g. extends: base.yaml), got {parent!r}")
    here = Path(path).resolve()
    parent_path = Path(path).parent / parent
    if parent_path.resolve() in (*_seen, here):
        chain = " -> ".join(str(p) for p in (*_seen, here, parent_path.resolve()))
        raise UserError(f"config files extend each other in a loop: {chain}; remove one `extends`")
    return extend_tree(read_config_file(parent_path, (*_seen, here)), data)


def extend_tree(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """A child config file's tree over its parent's (merge_trees), except its `algorithm`: one that names another
    algorithm starts afresh, as `algorithm=NAME` does (the parent's strategy, loss and their arguments belong to
    the parent's algorithm); one that keeps the algorithm merges as presets do (merge_algorithm)."""
    merged = merge_trees(parent, child)
    below, above = _name_shorthand(parent.get("algorithm")), _name_shorthand(child.get("algorithm"))
    if isinstance(below, dict) and isinstance(above, dict):
        same = "name" not in above or above["name"] == below.get("name", AlgorithmConfig.model_fields["name"].default)
        merged["algorithm"] = copy.deepcopy(merge_algorithm(below, above) if same else above)
    return merged


def resolve_config_path(path: str) -> Path:
    """A config argument is a YAML path, or the name of a preset shipped in r3l/presets/."""
    candidate = Path(path)
    if candidate.exists() or candidate.suffix in (".yaml", ".yml"):
        return candidate
    preset = PRESET_DIR / f"{path}.yaml"
    if preset.exists():
        return preset
    known = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    raise UserError(f"no config file or preset '{path}'; presets: {', '.join(known)}")


def format_validation_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{where}'; check the spelling (see `r3l config` for every key)"
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    got = first.get("input")
    shown = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
    return f"config error at '{where}': {message}{shown}"


DEFAULT_PRESET = "default"
SECTIONS_WITH_SHORTHAND = ("model", "env", "generator", "algorithm")


def merge_trees(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, section by section (a `model: NAME` shorthand counts as `model: {name: NAME}`), as a
    new tree: overrides applied to it leave `base` and `top` as they were."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        below = merged.get(key)
        if key in SECTIONS_WITH_SHORTHAND:
            below, value = _name_shorthand(below), _name_shorthand(value)
        merged[key] = (
            merge_trees(below, value) if isinstance(below, dict) and isinstance(value, dict) else copy.deepcopy(value)
        )
    return merged


def model_preset(name: Any) -> dict[str, Any]:
    """Settings a built-in model needs besides the shared defaults (r3l/presets/models/ALIAS.yaml), or {}."""
    return _preset_file("models", name)


def env_preset(name: Any, model: Any = None) -> dict[str, Any]:
    """Settings an environment needs besides the shared defaults (r3l/presets/envs/NAME.yaml), or {}: a reply
    long enough for its format, its held-out split, and under `models: {MODEL: ...}` what it needs with one model
    (the embedded 135M model plays text games only with structured replies)."""
    preset = _preset_file("envs", name)
    per_model = preset.pop("models", None) or {}
    return merge_trees(preset, per_model.get(model, {}) if isinstance(model, str) else {})


def flat_settings(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A tree's leaves by their dotted keys (`sampling.max_new_tokens`), in the tree's order."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _preset_file(kind: str, name: Any) -> dict[str, Any]:
    if not isinstance(name, str) or Path(name).name != name or name.startswith("."):  # a path is no preset's name
        return {}
    path = PRESET_DIR / kind / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def chosen_model(tree: dict[str, Any]) -> Any:
    return _name_shorthand(tree.get("model") or {}).get("name", ModelConfig().name)


def chosen_env(tree: dict[str, Any]) -> Any:
    """The environment's registered name (`gym` for `env=gym:FrozenLake-v1`), or None where the tree names none."""
    name = _name_shorthand(tree.get("env") or {}).get("name")
    return name.partition(":")[0] if isinstance(name, str) else name


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Validate CONFIG (default: the `default` preset) with dotted overrides applied in order (see `config_tree`)."""
    tree = config_tree(path, overrides)
    try:
        return Config.model_validate(tree)
    except ValidationError as error:
        raise UserError(format_validation_error(error)) from None


def config_tree(path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """CONFIG's tree with the presets of its model and environment, and the overrides, in place. A built-in model's
    preset (r3l/presets/models/) lies under a config file of the user's and over the shipped presets; so does the
    chosen environment's (r3l/presets/envs/), except that an environment chosen on the command line over a file
    made for another one lies over that file too, since the file's reply length and held-out size were set for the
    other environment. The overrides always win: `r3l train model=ALIAS` gets the model's learning rate,
    `env=textworld_express` replies long enough for an action, `env=... sampling.max_new_tokens=N` keeps N."""
    file = resolve_config_path(path or DEFAULT_PRESET)
    written = read_config_file(file)
    tree = merge_trees({}, written)
    for override in overrides:
        apply_override(tree, *parse_override(override))
    model, environment = chosen_model(tree), chosen_env(tree)
    model_settings, env_settings = model_preset(model), env_preset(environment, model)
    if not (model_settings or env_settings):
        return tree
    shipped = file.resolve().parent == PRESET_DIR.resolve()
    if shipped:
        tree = merge_trees(merge_trees(written, env_settings), model_settings)
    elif environment != chosen_env(written):
        tree = merge_trees(merge_trees(model_settings, written), env_settings)
    else:
        tree = merge_trees(merge_trees(env_settings, model_settings), written)
    for override in overrides:
        apply_override(tree, *parse_override(override))
    return tree


def yaml_value(value: Any) -> str:
    """A value as YAML writes it in flow style (true, null, [a, b])."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def env_preset_note(path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> str | None:
    """One line naming the settings the chosen environment brought, where it was chosen on the command line over a
    config made for another one (None otherwise, or where it brings none)."""
    tree = merge_trees({}, read_config_file(resolve_config_path(path or DEFAULT_PRESET)))
    written_env = chosen_env(tree)
    for override in overrides:
        apply_override(tree, *parse_override(override))
    environment = chosen_env(tree)
    settings = flat_settings(env_preset(environment, chosen_model(tree)))
    if environment == written_env or not settings:
        return None
    shown = ", ".join(f"{key}={yaml_value(value)}" for key, value in settings.items())
    return f"env {environment} brings its own settings: {shown} (a key=value given after it wins)"


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
