"""Section `limits`: the machine's measured GEMM peak and copy bandwidth, and how close the measured
steps came to them (training MFU, decode bandwidth efficiency)."""

from __future__ import annotations

from statistics import median

import torch

from r3l.bench.flops import ModelShape, decode_bytes, decode_flops, training_flops, utilization
from r3l.bench.machine import copy_bandwidth, gemm_peak
from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.build import generator_dtype, resolve_device

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
DECODE_COUNTS = {
    "hf": "counted step by step by the decode loop; decode time is the token loop after prefill",
    "vllm": "estimated from request lengths (vLLM reports no steps: one continuous batch assumed, so the "
    "weights read are a lower bound); decode time is the whole engine call, prefill included",
}


@section("limits", order=20, needs=("side_by_side",), title="Against the machine's limits")
def limits(ctx: BenchContext) -> SectionResult:
    measured = ctx.results["side_by_side"]
    device = resolve_device(ctx.config.model.device)
    dtype = measured.data["settings"]["dtype"] or "float32"
    peak = gemm_peak(DTYPES[dtype], device)
    bandwidth = copy_bandwidth(device)
    generator_bytes = DTYPES[generator_dtype(ctx.config)].itemsize
    data, details = efficiency(
        measured.data["model_shape"],
        measured.details["steps"],
        peak["flops_per_s"],
        bandwidth["bytes_per_s"],
        generator_bytes,
    )
    data.update(
        {
            "gemm_peak": peak,
            "copy_bandwidth": bandwidth,
            "device": str(device),
            "decode_counts": DECODE_COUNTS.get(ctx.config.generator.name, "counted by the generator"),
        }
    )
    return SectionResult(data, table(data), details)


def step_figures(shape: ModelShape, step: dict, peak: float, bandwidth: float, value_bytes: int) -> dict:
    """Training MFU and decode efficiency of one measured step (decode figures only where it reports them)."""
    work = step["work"]
    flops = training_flops(shape, work["positions"], work["attention_pairs"], work["head_positions"])
    figures = {
        "train_flops": flops,
        "train_mfu": utilization(flops, step["train_seconds"], peak),
        "train_flops_per_trained_token": flops / max(step["trained_tokens"], 1),
    }
    if work.get("padded_positions"):
        figures["train_padding_fraction"] = 1.0 - work["positions"] / work["padded_positions"]
    decode = step.get("decode") or {}
    if decode.get("decode_seconds"):
        read = decode_bytes(shape, decode["decode_steps"], decode["decode_kv_positions"], value_bytes)
        compute = decode_flops(shape, decode["decode_rows"], decode["decode_kv_positions"])
        figures.update(
            {
                "decode_bytes": read,
                "decode_bytes_per_token": read / max(decode["decode_rows"], 1),
                "decode_tokens_per_s": decode["decode_rows"] / decode["decode_seconds"],
                "decode_efficiency": utilization(read, decode["decode_seconds"], bandwidth),
                "decode_flops_utilization": utilization(compute, decode["decode_seconds"], peak),
            }
        )
    return figures


def efficiency(
    model_shape: dict, steps_by_side: dict[str, list[dict]], peak: float, bandwidth: float, value_bytes: int
) -> tuple[dict, dict]:
    """Per side, the median over measured steps of each figure; and the per-step figures."""
    shape = ModelShape(**{k: v for k, v in model_shape.items() if k in ModelShape.__dataclass_fields__})
    sides, details = {}, {}
    for side, steps in steps_by_side.items():
        figures = [step_figures(shape, step, peak, bandwidth, value_bytes) for step in steps]
        keys = sorted({key for f in figures for key in f})
        sides[side] = {key: median(f[key] for f in figures if key in f) for key in keys}
        details[side] = figures
    return {"sides": sides}, {"steps": details}


def table(data: dict) -> str:
    peak, bandwidth = data["gemm_peak"], data["copy_bandwidth"]
    lines = [
        "| figure | value |",
        "|---|---|",
        f"| matmul peak, measured ({peak['dtype']}, {peak['size']}x{peak['size']} GEMM) | "
        f"{peak['flops_per_s'] / 1e12:.2f} TFLOP/s |",
        f"| memory bandwidth, measured (copy of {data['copy_bandwidth']['buffer_mib']} MiB, read + write) | "
        f"{bandwidth['bytes_per_s'] / 1e9:.1f} GB/s |",
    ]
    names = {"r3l": "r3l", "trl": "TRL"}
    for side, figures in data["sides"].items():
        name = names.get(side, side)
        lines.append(
            f"| {name} training MFU (model FLOPs of the forward/backward it ran / training time / peak) | "
            f"**{figures['train_mfu']:.1%}** ({figures['train_flops_per_trained_token'] / 1e9:.2f} GFLOP "
            f"per trained token) |"
        )
        if "train_padding_fraction" in figures:
            lines.append(
                f"| {name} padding in the update (share of forwarded positions) | "
                f"{figures['train_padding_fraction']:.0%} |"
            )
        if "decode_efficiency" in figures:
            lines.append(
                f"| {name} decode efficiency (weight + KV bytes read / decode time / bandwidth) | "
                f"**{figures['decode_efficiency']:.1%}** ({figures['decode_bytes_per_token'] / 1e6:.1f} MB "
                f"per token, {figures['decode_tokens_per_s']:.0f} tokens/s) |"
            )
            lines.append(
                f"| {name} decode compute (decode FLOPs / decode time / peak) | "
                f"{figures['decode_flops_utilization']:.1%} |"
            )
    lines.append("")
    lines.append(
        "Medians over the measured steps. Training time covers the whole update (forward, backward, "
        f"optimizer, weight sync to the generator). Decode work: {data.get('decode_counts', '')}."
    )
    return "\n".join(lines) + "\n"
