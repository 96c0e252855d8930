"""The learner: turns experiences into one optimizer step (micro-batches, accumulation, KL, clipping)."""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from r3l.algorithms import POLICY_LOSSES, aggregate, entropy_from_logits, kl_penalty, token_logprobs
from r3l.algorithms.rollout_correction import (
    ROLLOUT_CORRECTIONS,
    gap_sums_by_kind,
    mismatch_metrics,
    mismatch_sums,
)
from r3l.algorithms.tempered import tempered_entropy, tempered_token_logprobs
from r3l.config import AlgorithmConfig, LoraConfig, TrainConfig
from r3l.errors import UserError
from r3l.experience import KINDS, Experience
from r3l.learner.attention import attention_kernel, avoid_cudnn_attention
from r3l.learner.batching import (
    collate,
    collate_shared_prefix,
    forward_work,
    micro_batches,
    prefix_micro_batches,
    shared_prefix_length,
    trained_positions,
)
from r3l.learner.checkpoint import OPTIMIZER_FILE
from r3l.learner.device_sums import Sums, host_floats, sums_on_host
from r3l.learner.optimizer import StochasticRoundingAdamW, build_optimizer
from r3l.learner.ranks import OneProcess, Ranks, backward_adding_nothing
from r3l.learner.schedule import make_scheduler
from r3l.learner.update_size import WeightSample, update_metrics
from r3l.models.cache import cache_of, with_cache
from r3l.rollout.constraints import constrain_logits


def split_head(model):
    """(decoder, LM head) of a transformers causal LM (LoRA-wrapped or not), or (None, None) if unknown."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    return (decoder, head) if decoder is not None and head is not None else (None, None)


def apply_lora(model, lora: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig, get_peft_model

    settings = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, settings)


class AdaptersOff:
    """The KL reference of a LoRA policy: the policy itself with its adapters disabled, so no copy of the weights
    is held (the base weights are frozen under LoRA, so this is the model before training)."""


class MaskedLogits(torch.nn.Module):
    """The policy's forward as the learner runs it: logits [N, V] at the N positions whose next token is
    trained (the LM head runs on those only), through a shared prefix's cache when the batch has one. One
    module around the policy, so that sharded (FSDP2, its root) its forward gathers the embedding and head."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        selected = trained_positions(batch)
        decoder, head = split_head(self.policy)
        if decoder is None:
            return self.policy(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).logits[:, :-1][selected]
        if "prefix_ids" in batch:
            hidden = suffix_hidden(decoder, batch)
        else:
            hidden = decoder(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).last_hidden_state
        return head(hidden[:, :-1][selected])


def suffix_hidden(decoder, batch) -> torch.Tensor:
    """Run each shared prefix once, fan its keys/values out to its experiences, then run the suffixes.
    Gradients reach the prefix through the cache, summed over the experiences that share it."""
    positions = torch.arange(batch["prefix_ids"].shape[1], device=batch["prefix_ids"].device)
    prefix = decoder(
        input_ids=batch["prefix_ids"],
        attention_mask=batch["prefix_mask"],
        position_ids=positions[None].expand_as(batch["prefix_ids"]),
        use_cache=True,
    )
    cache = cache_of(prefix)
    cache.batch_select_indices(batch["prefix_index"])
    attention = torch.cat([batch["prefix_mask"][batch["prefix_index"]], batch["attention_mask"]], dim=1)
    return decoder(
        input_ids=batch["input_ids"],
        attention_mask=attention,
        position_ids=batch["suffix_positions"],
        use_cache=True,
        **with_cache(decoder, cache),
    ).last_hidden_state


def per_layer_units(share_prefix: bool, gradient_checkpointing: bool) -> bool:
    """Whether FSDP wraps each decoder layer on its own: yes unless the shared-prefix forward runs (it calls the
    decoder's layers through one KV cache, so the policy is one unit); gradient checkpointing turns that path off,
    and then whole fp32 parameters gathered for the full forward and backward would waste the sharding."""
    return not share_prefix or gradient_checkpointing


class Learner:
    def __init__(
        self,
        model,
        tokenizer,
        algorithm: AlgorithmConfig,
        train: TrainConfig,
        *,
        temperature: float,
        autocast_bf16: bool = True,
        ref_model=None,
        total_steps: int | None = None,
        gradient_checkpointing: bool = False,
        ranks: Ranks | None = None,
    ):
        self.ranks: Ranks = ranks or OneProcess()  # distributed/fsdp.py's RankGroup when sharded across processes
        self.gradient_checkpointing = gradient_checkpointing  # the KV-cache prefix path cannot run under it
        self.model = model
        self.pad_id = tokenizer.pad_token_id
        self.algorithm = algorithm
        self.train = train
        self.temperature = temperature if temperature > 0 else 1.0
        self.autocast_bf16 = autocast_bf16
        self.ref_model = ref_model if algorithm.kl_coef > 0 else None
        self.nonfinite_updates = 0  # updates dropped because a loss or the gradient norm was NaN/inf
        self.nonfinite_streak = 0  # of them, how many in a row up to now
        self.loss_fn = POLICY_LOSSES.get(algorithm.policy_loss)
        self.correction = ROLLOUT_CORRECTIONS.get(algorithm.rollout_correction)
        if isinstance(self.ref_model, AdaptersOff) and not callable(getattr(model, "disable_adapter", None)):
            raise ValueError("an adapters-off KL reference needs a LoRA (PEFT) policy")
        self.forward_modules = {id(model): MaskedLogits(model)}
        if self.ref_model is not None and not isinstance(self.ref_model, AdaptersOff):
            self.forward_modules[id(self.ref_model)] = MaskedLogits(self.ref_model)
        self.ranks.shard(
            model,
            self.forward_modules[id(model)],
            per_layer=per_layer_units(train.share_prefix, gradient_checkpointing),
        )
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(  # stochastic rounding where a trained weight is bf16
            trainable, lr=train.lr, betas=train.betas, weight_decay=train.weight_decay, fused=self.fused_optimizer
        )
        self.weight_sample = WeightSample(trainable)  # what each update changed (update/* metrics)
        avoid_cudnn_attention(self.device)
        self.scheduler = make_scheduler(self.optimizer, total_steps or train.steps, train.warmup_ratio, train.schedule)

    def training_state(self) -> dict:
        """What a checkpoint keeps of the learner besides the weights."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "nonfinite_updates": self.nonfinite_updates,
        }

    def load_training_state(self, state: dict) -> None:
        if "optimizer" not in state:
            raise UserError(
                "this checkpoint's optimizer state was saved sharded by several learner ranks; resume "
                "with the distributed.learner_ranks it was written with"
            )
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, RuntimeError) as error:
            raise UserError(
                f"the checkpoint's {OPTIMIZER_FILE} does not fit this model's parameters ({error}); "
                "resume with the config saved in the run directory"
            ) from None
        self.scheduler.load_state_dict(state["scheduler"])
        self.nonfinite_updates = state.get("nonfinite_updates", 0)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def fused_optimizer(self) -> bool:
        """One fused AdamW kernel over all parameters (CPU and CUDA; 3x faster than the per-tensor loop on CPU)."""
        return self.device.type in ("cpu", "cuda") and all(
            p.is_floating_point() for p in self.model.parameters() if p.requires_grad
        )

    def _autocast(self):
        if self.autocast_bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def _weights_cast_once(self):
        """Around one pass's micro-batches: each weight is cast to bf16 once, not once per micro-batch. autocast
        keeps the casts of the weights that require grad until its outermost region closes, so one region is held
        open over the pass, with autocast off inside it except in the forwards (`_autocast`), as before: the
        losses and backwards run exactly as they did. It closes before the optimizer steps, so no cast outlives
        its weights. Not on sharded ranks (FSDP frees gathered weights after each layer) nor with gradient
        checkpointing (the casts would stay alive across the layers the checkpoints free)."""
        if not self.autocast_bf16 or not isinstance(self.ranks, OneProcess) or self.gradient_checkpointing:
            yield
            return
        device = self.device.type
        with torch.autocast(device, dtype=torch.bfloat16), torch.autocast(device, enabled=False):
            yield

    def _masked_logits(self, model, batch) -> torch.Tensor:
        """Logits [N, V] at the N positions whose next token is trained (see MaskedLogits)."""
        # checkpointed layers recompute in backward, outside this context, so they keep the default kernel
        kernel = (
            contextlib.nullcontext() if self.gradient_checkpointing else attention_kernel(model, batch, self.device)
        )
        with self._autocast(), kernel:
            return self.forward_modules[id(model)](batch)

    def _logprobs(self, model, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-target log-probabilities [B, T-1] (zero where untrained) and the masked logits; a token sampled
        under a constraint is scored among the tokens its constraint allowed there."""
        logits = self._masked_logits(model, batch)
        selected = trained_positions(batch)
        if "allowed_index" in batch:
            logits = constrain_logits(logits, batch["allowed_index"][selected], batch["allowed_table"])
        if "temperatures" in batch:  # some tokens were sampled at another temperature than the run's
            values = tempered_token_logprobs(logits, batch["targets"][selected], batch["temperatures"][selected])
        else:
            values = token_logprobs(logits[None], batch["targets"][selected][None], self.temperature)[0]
        full = torch.zeros(batch["loss_mask"].shape, dtype=values.dtype, device=values.device)
        full = full.index_put(selected, values)
        return full, logits

    def _old_logprobs(self, experiences, batches, stand_in) -> list[torch.Tensor | None]:
        old = []
        with torch.no_grad():
            for mb in batches:  # a None (another rank's turn) still runs, since a sharded forward is a collective
                batch, _ = self._collate([experiences[i] for i in mb or stand_in])
                values = self._logprobs(self.model, batch)[0]
                old.append(values if mb is not None else None)
        return old

    def _zero_advantage_is_free(self) -> bool:
        return (
            self.train.skip_zero_advantage
            and self.ref_model is None
            and getattr(self.loss_fn, "advantage_weighted", False)
        )

    def _share_prefix(self, experiences: Sequence[Experience]) -> bool:
        return (
            self.train.share_prefix
            and not self.gradient_checkpointing
            and split_head(self.model)[0] is not None
            and all(shared_prefix_length(e) > 0 for e in experiences)
        )

    def _collate(self, experiences: Sequence[Experience]) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        """The micro-batch on the learner's device, with its trained positions and its forward work counted on
        the host first (read on the device, each would wait for it)."""
        if self._share_prefix(experiences):
            batch = collate_shared_prefix(experiences, self.pad_id, self.temperature)
        else:
            batch = collate(experiences, self.pad_id, self.temperature)
        batch["trained_rows"], batch["trained_cols"] = (batch["loss_mask"] > 0).nonzero(as_tuple=True)
        work = forward_work(batch)
        pinned = self.device.type == "cuda"  # a copy from pinned memory is queued, not waited for
        return {
            name: (tensor.pin_memory() if pinned else tensor).to(self.device, non_blocking=pinned)
            for name, tensor in batch.items()
        }, work

    def _denominator(self, experiences: Sequence[Experience]) -> float:
        if self.algorithm.aggregation == "token-mean":
            return float(sum(e.num_trained_tokens for e in experiences))
        return float(len(experiences))

    def _micro_batches(self, experiences: Sequence[Experience]) -> list[list[int]]:
        caps = (self.train.micro_batch_size, self.train.micro_batch_overhead, self.train.micro_batch_tokens)
        if self._share_prefix(experiences):
            return prefix_micro_batches(experiences, *caps)
        return micro_batches([len(e.tokens) for e in experiences], *caps)

    def _loss_parts(self, trained: Sequence[Experience]) -> list[tuple[str, list[Experience], Any, dict]]:
        """(name, experiences, loss function, loss args), each part normalised on its own. SFT-objective
        samples join the policy part (algorithm.sft_loss=policy_loss: a positive sample whose advantage is
        its weight) or form their own part trained by the weighted NLL (sft_loss=nll); shaped-objective samples
        (Critique-GRPO's refinements) form their own part trained by policy shaping."""
        shaped = [e for e in trained if e.objective == "shaped"]
        rest = [e for e in trained if e.objective != "shaped"]
        if self.algorithm.sft_loss == "policy_loss":
            parts = [("policy", rest, self.loss_fn, self.algorithm.loss_args)]
        else:
            parts = [
                ("policy", [e for e in rest if e.objective == "policy"], self.loss_fn, self.algorithm.loss_args),
                ("sft", [e for e in rest if e.objective == "sft"], POLICY_LOSSES.get("sft"), {"weighted": True}),
            ]
        parts.append(("shaped", shaped, POLICY_LOSSES.get("policy_shaping"), {"gamma": self.algorithm.shaping_gamma}))
        return [part for part in parts if part[1]]

    def update(self, experiences: Sequence[Experience], behaviour_logprobs: bool = False) -> dict[str, float]:
        """One optimizer step per pass over `experiences` (advantages must already be set). With
        `behaviour_logprobs` (experiences explored by older weights) a ratio-based loss takes the generator's
        stored log-probabilities as the old policy instead of the learner's own, unless a rollout correction is
        on: then the learner's own log-probs are the old policy and the correction weighs each token by
        pi_old / mu (decoupled PPO)."""
        trained = [e for e in experiences if e.num_trained_tokens > 0]
        if not trained:
            return {"trained_tokens": 0.0}
        plan = self._plan(trained, behaviour_logprobs)
        sums: Sums = defaultdict(float)
        self.model.train()
        before = self.weight_sample.read()
        finite, passes = self._passes(plan, sums)
        if finite:
            sums.update({f"update:{key}": value for key, value in self.weight_sample.sums(before).items()})
        self.nonfinite_streak = 0 if finite else self.nonfinite_streak + 1
        self.nonfinite_updates += not finite
        if finite:
            self.scheduler.step()
        return self._metrics(plan, sums, finite, passes)

    def _plan(self, trained: list[Experience], behaviour_logprobs: bool) -> UpdatePlan:
        """The loss parts, this rank's micro-batches of each, and the old log-probabilities each part uses."""
        plan = UpdatePlan(trained, kl_denominator=self._denominator(trained))  # one KL mean over every token
        for name, members, loss_fn, loss_args in self._loss_parts(trained):
            denominator = self._denominator(members)
            if name == "policy" and self._zero_advantage_is_free():
                kept = [e for e in members if e.advantage != 0.0]
                plan.skipped, members = len(members) - len(kept), kept
            batches = self._micro_batches(members)
            if batches:
                shared = self.ranks.share(batches)
                plan.parts.append(LossPart(name, members, shared, loss_fn, loss_args, denominator, batches[0]))
        plan.behaviour_is_old = behaviour_logprobs and self.algorithm.rollout_correction == "none"
        if self.algorithm.updates_per_batch > 1 and not plan.behaviour_is_old:
            for part in plan.parts:
                part.stored_old = self._old_logprobs(part.members, part.batches, part.stand_in)
        return plan

    def _passes(self, plan: UpdatePlan, sums: Sums) -> tuple[bool, int]:
        """`updates_per_batch` optimizer steps over the plan; the first non-finite one drops its gradients and
        ends the update (on every rank alike). Returns whether every pass was finite and how many ran."""
        finite, passes = True, 0
        for index in range(self.algorithm.updates_per_batch):
            passes = index + 1
            self.optimizer.zero_grad(set_to_none=True)
            with self._weights_cast_once():
                loss = sum((self._accumulate_part(part, plan, sums, first_pass=index == 0) for part in plan.parts), 0.0)
            norm = self._clip_gradients()  # global on sharded ranks, so each rank reads the same
            loss_value, grad_norm = host_floats([loss, norm])  # the pass's one wait for the device
            sums["loss"] += loss_value
            sums["grad_norm"] += grad_norm
            finite = self.ranks.all_true(finite and math.isfinite(loss_value))  # every rank steps, or none does
            finite &= math.isfinite(grad_norm)
            if not finite:  # never applied: the gradients are dropped, nothing steps
                self.optimizer.zero_grad(set_to_none=True)
                break
            self.optimizer.step()
        return finite, passes

    def _accumulate_part(self, part: LossPart, plan: UpdatePlan, sums: Sums, first_pass: bool) -> Any:
        """Add the part's micro-batches' gradients; their summed loss, a tensor not yet read."""
        loss: Any = 0.0
        for index, mb in enumerate(part.batches):
            batch, work = self._collate([part.members[i] for i in mb or part.stand_in])
            if part.stored_old is not None:
                old = part.stored_old[index]
            else:
                old = batch["gen_logprobs"] if plan.behaviour_is_old else None
            loss = loss + self._accumulate(batch, old, part, plan.kl_denominator, sums, first_pass, mb is not None)
            if mb is not None:
                for key, value in work.items():
                    sums[f"work:{key}"] += value
        return loss

    def _clip_gradients(self) -> torch.Tensor:
        """Clip the gradient norm (a skipped experience still counts as zero gradients); the norm, not yet read."""
        for parameter in self.model.parameters():
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.train.grad_clip
        )
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # sharded: a DTensor

    def _metrics(self, plan: UpdatePlan, device_sums: Sums, finite: bool, passes: int) -> dict[str, float]:
        """The update's metrics, summed over ranks (the grad norm is already global)."""
        sums = sums_on_host(device_sums)
        gap_max = self.ranks.max(sums.pop("max:generator_logprob_gap", 0.0))
        kind_gap_max = {kind: self.ranks.max(sums.pop(f"max:generator_logprob_gap/{kind}", 0.0)) for kind in KINDS}
        grad_norm = sums.pop("grad_norm", 0.0)
        sums = defaultdict(float, self.ranks.sum(sums))
        metrics = {"nonfinite_update": float(not finite), "nonfinite_updates": float(self.nonfinite_updates)}
        metrics.update(mismatch_metrics(sums))
        metrics["generator_logprob_gap_max"] = gap_max
        for kind, peak in kind_gap_max.items():
            if f"generator_logprob_gap/{kind}" in metrics:
                metrics[f"generator_logprob_gap_max/{kind}"] = peak
        update_sums = {key.split(":", 1)[1]: sums.pop(key) for key in [k for k in sums if k.startswith("update:")]}
        metrics.update(update_metrics(update_sums, self.optimizer.param_groups[0]["lr"]))
        if "update/changed_share" in metrics:
            metrics["update/low_precision"] = float(self.weight_sample.low_precision)
            metrics["update/stochastic_rounding"] = float(isinstance(self.optimizer, StochasticRoundingAdamW))
        for prefix in {part.prefix for part in plan.parts}:
            tokens = sums.pop(f"{prefix}tokens", 0.0)
            for key in [k for k in sums if k.startswith(f"{prefix}token:")]:
                metrics[prefix + key.split(":", 1)[1]] = sums.pop(key) / max(tokens, 1.0)
        for key in [k for k in sums if k.startswith("work:")]:
            metrics["forward_" + key.split(":", 1)[1]] = sums.pop(key)
        metrics["loss"] = sums["loss"] / passes
        metrics["grad_norm"] = grad_norm / passes
        if "kl" in sums:
            metrics["kl"] = sums["kl"]
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        metrics["trained_tokens"] = float(sum(e.num_trained_tokens for e in plan.trained))
        metrics["skipped_zero_advantage"] = float(plan.skipped)
        sft_samples = sum(e.objective == "sft" for e in plan.trained)
        if sft_samples:
            metrics["sft_samples"] = float(sft_samples)
        return metrics

    def _accumulate(
        self,
        batch,
        old_logprobs,
        part: LossPart,
        kl_denominator: float,
        sums: Sums,
        first_pass: bool,
        counted: bool = True,
    ) -> Any:
        """Add one micro-batch's gradient and return its loss (detached, not read: a non-finite one drops the
        whole update, `_passes`); `sums` collects the KL and token-weighted metrics (keys "<prefix>token:<name>",
        divided by "<prefix>tokens" at the end). On sharded ranks a backward always runs (it is a collective):
        with weight zero for a stand-in micro-batch (`counted=False`), which adds nothing and returns 0."""
        logprobs, logits = self._logprobs(self.model, batch)
        old = old_logprobs if old_logprobs is not None else logprobs.detach()
        advantages = self._corrected_advantages(batch, old, part, sums, record=first_pass and counted)
        loss, loss_metrics = part.loss_fn(
            logprobs,
            old,
            advantages,
            batch["loss_mask"],
            aggregation=self.algorithm.aggregation,
            denominator=part.denominator,
            **part.loss_args,
        )
        if not counted:  # the policy's forward and backward are collectives; so is an adapters-off reference's
            if isinstance(self.ref_model, AdaptersOff):
                self._reference_logprobs(batch)
            backward_adding_nothing(loss)
            return 0.0
        loss = loss + self._kl_term(batch, logprobs, kl_denominator, sums)
        (loss * self.ranks.backward_scale).backward()
        if first_pass:
            self._token_sums(batch, logprobs, logits, loss_metrics, part.prefix, sums)
        return loss.detach()

    def _corrected_advantages(self, batch, old, part: LossPart, sums: Sums, record: bool):
        """The advantages, weighted by the rollout correction on policy tokens explored in context."""
        advantages = batch["advantages"]
        if self.algorithm.rollout_correction == "none" or part.prefix != "":
            return advantages
        weights = self.correction(old.detach() - batch["gen_logprobs"], self.algorithm.rollout_correction_threshold)
        weights = torch.where(batch["behaviour_in_context"] > 0, weights, torch.ones_like(weights))
        if record:
            mask = batch["loss_mask"]
            sums["mismatch:weight"] += (weights * mask).sum()
            sums["mismatch:dropped"] += ((weights == 0) & (mask > 0)).sum()
            sums["mismatch:weight_tokens"] += mask.sum()
        return advantages * weights

    def _kl_term(self, batch, logprobs, kl_denominator: float, sums: Sums):
        """kl_coef times the KL to the reference over the micro-batch's trained tokens (0 without a reference)."""
        if self.ref_model is None:
            return 0.0
        ref_logprobs = self._reference_logprobs(batch)
        kl = aggregate(
            kl_penalty(logprobs, ref_logprobs, self.algorithm.kl_estimator),
            batch["loss_mask"],
            self.algorithm.aggregation,
            kl_denominator,
        )
        sums["kl"] += kl.detach() / self.algorithm.updates_per_batch
        return self.algorithm.kl_coef * kl

    @torch.no_grad()
    def _reference_logprobs(self, batch) -> torch.Tensor:
        if isinstance(self.ref_model, AdaptersOff):
            with self.model.disable_adapter():
                return self._logprobs(self.model, batch)[0]
        return self._logprobs(self.ref_model, batch)[0]

    def _token_sums(self, batch, logprobs, logits, loss_metrics, prefix: str, sums: Sums) -> None:
        """Token-weighted sums of entropy, generator/learner mismatch and the loss's metrics (first pass only)."""
        mask = batch["loss_mask"]
        count = mask.sum()
        sums[f"{prefix}tokens"] += count
        with torch.no_grad():
            if "temperatures" in batch:
                entropy = tempered_entropy(logits.detach(), batch["temperatures"][trained_positions(batch)])
            else:
                entropy = entropy_from_logits(logits.detach()[None], temperature=self.temperature)[0]
            sums[f"{prefix}token:entropy"] += (entropy * mask[trained_positions(batch)]).sum()
            in_context = mask * batch["behaviour_in_context"]
            threshold = self.algorithm.rollout_correction_threshold
            for key, value in mismatch_sums(logprobs, batch["gen_logprobs"], in_context, threshold).items():
                if key == "gap_max":
                    keep_max(sums, "max:generator_logprob_gap", value)
                else:
                    sums[f"mismatch:{key}"] += value
            by_kind = gap_sums_by_kind(logprobs, batch["gen_logprobs"], in_context, batch["token_kinds"], KINDS)
            for kind, (tokens, gap, peak) in by_kind.items():
                sums[f"mismatch:{kind}/tokens"] += tokens
                sums[f"mismatch:{kind}/gap"] += gap
                keep_max(sums, f"max:generator_logprob_gap/{kind}", peak)
            for key, value in loss_metrics.items():
                sums[f"{prefix}token:{key}"] += value * count


def keep_max(sums: Sums, key: str, value: torch.Tensor) -> None:
    """sums[key] = the larger of it (where set) and `value`, kept on the device."""
    known = sums.get(key)
    sums[key] = value if known is None else torch.maximum(known, value)


@dataclass
class LossPart:
    """One part of an update: its experiences, this rank's micro-batches of them (None: another rank's turn, a
    stand-in runs), its loss and the normaliser it is averaged by."""

    name: str
    members: list[Experience]
    batches: list[list[int] | None]
    loss_fn: Any
    loss_args: dict
    denominator: float
    stand_in: list[int]  # the first micro-batch: what a rank runs in a turn that is not its own
    stored_old: list[torch.Tensor | None] | None = None  # the old policy's log-probs, when several passes need them

    @property
    def prefix(self) -> str:
        return "" if self.name == "policy" else f"{self.name}_"


@dataclass
class UpdatePlan:
    trained: list[Experience]
    kl_denominator: float
    parts: list[LossPart] = field(default_factory=list)
    skipped: int = 0  # zero-advantage experiences left out of the forward and backward passes
    behaviour_is_old: bool = False  # the generator's log-probs are the old policy (stale batches, no correction)
