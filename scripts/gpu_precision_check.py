"""The GPU check of issue 51: what bf16 weights, long multi-turn updates and FSDP units do on a GPU, with only
torch, transformers and peft installed (no vLLM, no Ray). One table row per measurement; the exit status is the
number of failed rows.

    python scripts/gpu_precision_check.py                      # one CUDA GPU, full shapes
    python scripts/gpu_precision_check.py --device cpu --small # the suite's run: tiny shapes, seconds
    python scripts/gpu_precision_check.py --parts adamw,memory # some parts only

Parts (each through the project's own code: r3l.learner.learner.Learner, r3l.models.load_policy, r3l.plan,
r3l.rollout.hf.HFGenerator):
  adamw   AdamW at lr 1e-6, 10 steps, on one 4096x4096 weight (std 0.02): fp32 weights, bf16 weights, and bf16
          weights under r3l.learner.optimizer.StochasticRoundingAdamW (where it exists). Each row gives the share
          of elements that changed and the update kept: the update's projection on the fp32 update, over the fp32
          update's size (1 = the fp32 update, 0 = nothing moved). Passes when fp32 keeps its update and stochastic
          rounding keeps it within 20 %; plain bf16's row is the finding (expected far below 1), shown, not judged.
  memory  random:qwen2.5-1.5b (fp32 master weights, bf16 autocast, gradient checkpointing, KL reference), one
          multi-turn-shaped update: one micro-batch of 2 rows x 16,384 tokens, each 8 turns of a 1,472-token
          observation and a 512-token reply (4,096 trained tokens a row). torch.cuda.max_memory_allocated against
          r3l.plan's peak for the same layout, the learner alone (no generator); passes within 25 %.
  fsdp    random:qwen2.5-0.5b: one update on one FSDP2 rank (NCCL on CUDA, gloo on the CPU; per-layer units,
          gradient checkpointing) against the same update in one plain process, fp32 without autocast so that
          equal means equal: gradients within 1e-4 (relative L2), loss within 1e-5, weights within 1 % of lr
          (the one process runs without checkpointing, so that the check covers it too).
  decode  the HF generator's decode modes (dynamic, static, compiled) at the 1.5B shape in bf16: 32 prompts of
          128 tokens, 256 new tokens each, tokens/s of the second call (the first compiles). --small leaves the
          compiled mode out: torch.compile takes ~90 s on a 2-core CPU (tests/test_static_decode.py runs it).

Time on one H100, estimated from FLOP counts (measured times replace these once a GPU has run it): start-up and
random initialisation of the three models on the CPU ~40 s; adamw < 1 s; memory ~6.6e14 FLOPs (8 x 1.31e9
non-embedding parameters x 32,768 positions for forward, recomputation and backward, 1.8e14 of causal attention at
16k, 1.3e14 for the reference's forward) = ~2 s at 300 TFLOP/s, 7 s at 100; fsdp ~1.2e13 fp32 FLOPs = < 1 s;
decode is bound by launches, not FLOPs: ~30 ms a step eager x 256 steps x 2 calls x 2 modes = ~30 s, plus ~90 s
of torch.compile for the compiled mode. In all about 3 minutes, within the 6 allowed (gpu_check.sh stops it at 6).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

GIB = 2**30


@dataclass
class Row:
    part: str
    ok: bool | None  # None: shown, not judged
    detail: str
    seconds: float = 0.0

    @property
    def result(self) -> str:
        return {True: "passed", False: "failed", None: "shown"}[self.ok]


@dataclass(frozen=True)
class Sizes:
    """The shapes a run measures at: full (a GPU) or small (the suite's CPU run)."""

    weight: int
    memory_model: str
    memory_turns: int
    memory_observation: int
    memory_reply: int
    memory_prompt: int
    fsdp_model: str
    fsdp_rows: int
    fsdp_length: int
    decode_model: str
    decode_prompts: int
    decode_prompt_length: int
    decode_new_tokens: int
    decode_modes: tuple[str, ...]


FULL = Sizes(4096, "random:qwen2.5-1.5b", 8, 1472, 512, 512, "random:qwen2.5-0.5b", 4, 1024,
             "random:qwen2.5-1.5b", 32, 128, 256, ("dynamic", "static", "compiled"))  # fmt: skip
SMALL = Sizes(256, "random:qwen2.5-tiny", 2, 48, 16, 32, "random:qwen2.5-tiny", 4, 48,
              "random:qwen2.5-tiny", 4, 16, 16, ("dynamic", "static"))  # fmt: skip


# ---- the arithmetic, pure ----------------------------------------------------------------------------------------


def share_changed(before: torch.Tensor, after: torch.Tensor) -> float:
    """The share of elements whose value changed."""
    return (before != after).float().mean().item()


def update_kept(before: torch.Tensor, after: torch.Tensor, reference: torch.Tensor) -> float:
    """How much of the `reference` update (a tensor of changes) `after - before` makes: its projection on the
    reference over the reference's squared norm (1: all of it, 0: none)."""
    change = after.double() - before.double()
    reference = reference.double()
    return (change * reference).sum().item() / max((reference * reference).sum().item(), 1e-300)


def relative_difference(value: torch.Tensor, expected: torch.Tensor) -> float:
    """||value - expected|| / ||expected|| (0 when both are zero)."""
    scale = expected.double().norm().item()
    gap = (value.double() - expected.double()).norm().item()
    return gap / scale if scale > 0 else gap


def within(measured: float, estimate: float, tolerance: float) -> bool:
    """Whether `estimate` is within `tolerance` (a fraction) of `measured`."""
    return measured > 0 and abs(estimate / measured - 1.0) <= tolerance


def turns_mask(prompt: int, turns: int, observation: int, reply: int) -> list[int]:
    """A multi-turn row's loss mask: the prompt, then per turn an observation (untrained) and a reply (trained)."""
    return [0] * prompt + ([0] * observation + [1] * reply) * turns


# ---- the parts -----------------------------------------------------------------------------------------------------


def adamw_part(device: torch.device, sizes: Sizes) -> list[Row]:
    steps, lr = 10, 1e-6
    generator = torch.Generator().manual_seed(0)
    start = (torch.randn(sizes.weight, sizes.weight, generator=generator) * 0.02).bfloat16()
    gradients = [torch.randn(sizes.weight, sizes.weight, generator=generator) * 1e-3 for _ in range(steps)]

    def run(dtype: torch.dtype, optimizer_class) -> torch.Tensor:
        weight = torch.nn.Parameter(start.to(device=device, dtype=dtype))
        optimizer = optimizer_class([weight], lr=lr, betas=(0.9, 0.999), weight_decay=0.01, eps=1e-8)
        for gradient in gradients:
            weight.grad = gradient.to(device=device, dtype=dtype)
            optimizer.step()
        return weight.detach().float().cpu()

    before = start.float()
    fp32 = run(torch.float32, torch.optim.AdamW)
    reference = fp32 - before
    rows = []
    kept = update_kept(before, fp32, reference)
    rows.append(Row("adamw lr 1e-6: fp32 weights", kept > 0.99, adamw_detail(before, fp32, reference)))
    bf16 = run(torch.bfloat16, torch.optim.AdamW)
    rows.append(Row("adamw lr 1e-6: bf16 weights (the finding)", None, adamw_detail(before, bf16, reference)))
    try:
        from r3l.learner.optimizer import StochasticRoundingAdamW
    except ImportError:
        rows.append(Row("adamw lr 1e-6: bf16, stochastic rounding", None, "not available (no r3l.learner.optimizer)"))
    else:
        rounded = run(torch.bfloat16, StochasticRoundingAdamW)
        kept = update_kept(before, rounded, reference)
        detail = adamw_detail(before, rounded, reference)
        rows.append(Row("adamw lr 1e-6: bf16, stochastic rounding", abs(kept - 1.0) <= 0.2, detail))
    return rows


def adamw_detail(before: torch.Tensor, after: torch.Tensor, reference: torch.Tensor) -> str:
    return (
        f"{share_changed(before, after):.2%} of {before.numel():,} changed, "
        f"update kept {update_kept(before, after, reference):.3f}"
    )


def memory_part(device: torch.device, sizes: Sizes) -> list[Row]:
    from r3l.config import AlgorithmConfig, TrainConfig
    from r3l.learner.learner import Learner
    from r3l.models import load_policy
    from r3l.plan import Layout, memory_parts, model_shape, peak_gib

    model, tokenizer = load_policy(sizes.memory_model)
    reference = copy.deepcopy(model).eval().requires_grad_(False).to(device)
    model.gradient_checkpointing_enable()
    model = model.to(device)
    mask = turns_mask(sizes.memory_prompt, sizes.memory_turns, sizes.memory_observation, sizes.memory_reply)
    batch = random_experiences(model.config.vocab_size, [mask, mask], [1.0, -1.0])
    train = TrainConfig(micro_batch_size=2, lr=1e-6, share_prefix=False)
    learner = Learner(
        model,
        tokenizer,
        AlgorithmConfig(kl_coef=0.01),
        train,
        temperature=1.0,
        autocast_bf16=device.type == "cuda",
        ref_model=reference,
        gradient_checkpointing=True,
    )
    layout = Layout(
        ranks=1,
        model_bytes=4,
        lora_rank=None,
        lora_targets=(),
        gradient_checkpointing=True,
        micro_batch=2,
        context=len(mask),
        trained_tokens=2 * sum(mask),
        kl_reference=True,
        generator="vllm",  # at a share of 0: the learner alone, as measured here
        vllm_share=0.0,
        vllm_sleeps=True,
        sequences=2,
        decoded_at_once=0,
    )
    estimate = peak_gib(memory_parts(model_shape(sizes.memory_model), layout, 80.0), layout)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # from here the peak counts everything held: weights, reference, ...
    metrics = learner.update(batch)
    finite = metrics.get("nonfinite_update") == 0.0
    shape = f"2 rows x {len(mask):,} tokens, {sum(mask):,} trained each, KL on"
    if device.type != "cuda":  # the CPU allocator keeps no peak of its own; the suite checks the path runs
        return [Row("memory: one multi-turn update vs r3l plan", finite, f"{shape}: plan {estimate:.3f} GiB")]
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() / GIB
    detail = (
        f"{shape}: max_memory_allocated {measured:.2f} GiB, plan {estimate:.2f} GiB "
        f"(plan / measured {estimate / measured:.2f}; reserved {torch.cuda.max_memory_reserved() / GIB:.2f} GiB)"
    )
    return [Row("memory: one multi-turn update vs r3l plan", finite and within(measured, estimate, 0.25), detail)]


def random_experiences(vocab: int, masks: list[list[int]], advantages: list[float]):
    from r3l.experience import Experience

    generator = torch.Generator().manual_seed(1)
    return [
        Experience(
            group="g",
            kind="base",
            tokens=torch.randint(3, vocab, (len(mask),), generator=generator).tolist(),
            loss_mask=mask,
            logprobs=[-1.0] * len(mask),
            reward=advantage,
            advantage=advantage,
        )
        for mask, advantage in zip(masks, advantages)
    ]


def fsdp_part(device: torch.device, sizes: Sizes) -> list[Row]:
    from torch.distributed.fsdp import FSDPModule

    from r3l.config import AlgorithmConfig, TrainConfig
    from r3l.distributed.fsdp import RankGroup
    from r3l.learner.learner import Learner
    from r3l.models import load_policy

    model, tokenizer = load_policy(sizes.fsdp_model)
    sharded = copy.deepcopy(model).to(device)
    sharded.gradient_checkpointing_enable()
    model = model.to(device)
    half = sizes.fsdp_length // 2
    masks = [[0] * half + [1] * (sizes.fsdp_length - half)] * sizes.fsdp_rows
    advantages = [(-1.0) ** row * (1 + row) / sizes.fsdp_rows for row in range(sizes.fsdp_rows)]
    batch = random_experiences(model.config.vocab_size, masks, advantages)
    train = TrainConfig(micro_batch_size=2, lr=1e-4, share_prefix=False)
    plain = Learner(model, tokenizer, AlgorithmConfig(), train, temperature=1.0, autocast_bf16=False)
    expected = plain.update(batch)
    # the learner group's backends (distributed/learner_group.py): its metric sums reduce CPU tensors
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    with one_rank_group(backend, device):
        learner = Learner(
            sharded,
            tokenizer,
            AlgorithmConfig(),
            train,
            temperature=1.0,
            autocast_bf16=False,
            gradient_checkpointing=True,
            ranks=RankGroup(),
        )
        root = learner.forward_modules[id(sharded)]
        units = sum(isinstance(module, FSDPModule) for module in root.modules())
        metrics = learner.update(batch)
        gradients, weights = {}, {}
        for name, parameter in sharded.named_parameters():
            gradients[name] = full(parameter.grad)
            weights[name] = full(parameter.detach())
    expected_gradients = {name: p.grad for name, p in model.named_parameters()}
    gradient_gap = max(relative_difference(gradients[name], g) for name, g in expected_gradients.items())
    weight_gap = max((weights[name] - p.detach()).abs().max().item() for name, p in model.named_parameters())
    loss_gap = abs(metrics["loss"] - expected["loss"]) / max(abs(expected["loss"]), 1e-12)
    layers = model.config.num_hidden_layers
    ok = units == layers + 1 and gradient_gap < 1e-4 and loss_gap < 1e-5 and weight_gap < 1e-2 * train.lr
    shown = backend.removeprefix("cpu:gloo,cuda:")
    detail = (
        f"{shown}, {units} FSDP units ({layers} layers + root), checkpointing, {sizes.fsdp_rows} rows x "
        f"{sizes.fsdp_length}: gradients {gradient_gap:.1e} (relative), loss {loss_gap:.1e}, weights {weight_gap:.1e}"
    )
    return [Row("fsdp: one rank, per-layer units + checkpointing = one process", ok, detail)]


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


@contextlib.contextmanager
def one_rank_group(backend: str, device: torch.device) -> Iterator[None]:
    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    extra = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, rank=0, world_size=1, **extra)  # type: ignore[arg-type]
    try:
        yield
    finally:
        dist.destroy_process_group()


def decode_part(device: torch.device, sizes: Sizes) -> list[Row]:
    from r3l.models import load_policy
    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model, tokenizer = load_policy(sizes.decode_model, dtype=dtype)
    model = model.to(device)
    generator = torch.Generator().manual_seed(2)
    prompts = torch.randint(3, len(tokenizer), (sizes.decode_prompts, sizes.decode_prompt_length), generator=generator)
    params = SamplingParams(temperature=1.0, max_new_tokens=sizes.decode_new_tokens, seed=0)
    rows = []
    for mode in sizes.decode_modes:
        started = time.perf_counter()  # this mode's row: its own time
        sampler = HFGenerator(model, tokenizer, dtype=dtype, decode=mode)
        sampler.generate(prompts.tolist(), params)  # the first call compiles (compiled) and warms the caches
        first = time.perf_counter() - started
        before = sampler.stats
        sampler.generate(prompts.tolist(), params)
        after = sampler.stats
        tokens = after["generated_tokens"] - before["generated_tokens"]
        seconds = after["generate_seconds"] - before["generate_seconds"]
        detail = (
            f"{tokens / seconds:,.0f} tokens/s ({sizes.decode_prompts} prompts x {sizes.decode_prompt_length} + "
            f"{sizes.decode_new_tokens} new, {dtype_name(dtype)}); first call {first:.1f} s"
        )
        rows.append(Row(f"decode: {mode}", tokens > 0, detail, time.perf_counter() - started))
        del sampler
        free(device)
    return rows


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


PARTS: dict[str, Callable[[torch.device, Sizes], list[Row]]] = {
    "adamw": adamw_part,
    "fsdp": fsdp_part,
    "memory": memory_part,
    "decode": decode_part,
}


# ---- running -------------------------------------------------------------------------------------------------------


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_part(name: str, device: torch.device, sizes: Sizes) -> list[Row]:
    """The part's rows, timed; a part that raises is one failed row naming the error."""
    started = time.perf_counter()
    try:
        rows = PARTS[name](device, sizes)
    except Exception as error:  # noqa: BLE001 - a GPU check reports every part, whatever one of them does
        first_line = (str(error).strip().splitlines() or [""])[0]
        rows = [Row(name, False, f"{type(error).__name__}: {first_line}"[:200])]
    finally:
        free(device)
    for row in rows:
        row.seconds = row.seconds or time.perf_counter() - started
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| part | result | measured | s |", "|---|---|---|---|"]
    lines += [f"| {row.part} | {row.result} | {row.detail} | {row.seconds:.0f} |" for row in rows]
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--small", action="store_true", help="tiny shapes (seconds on a CPU), for the suite")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    names = [name for name in args.parts.split(",") if name]
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        print(f"error: unknown part {unknown[0]!r}; parts: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: torch sees no CUDA device; pass --device cpu (with --small for tiny shapes)", file=sys.stderr)
        return 2
    if device.type == "cuda" and device.index is None:  # NCCL and set_device need the index
        device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    sizes = SMALL if args.small else FULL
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {where}; {'small' if args.small else 'full'} shapes", flush=True)
    rows: list[Row] = []
    for name in names:
        part_rows = run_part(name, device, sizes)
        for row in part_rows:
            print(f"{row.part}: {row.result}, {row.detail} ({row.seconds:.0f} s)", flush=True)
        rows += part_rows
    print()
    print(table(rows))
    failed = sum(row.ok is False for row in rows)
    print(f"failed rows: {failed}")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
