"""The learner: turns experiences into one optimizer step (micro-batches, accumulation, KL, clipping)."""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Sequence

import torch

from r3l.algorithms import POLICY_LOSSES, aggregate, entropy_from_logits, kl_penalty, token_logprobs
from r3l.algorithms.rollout_correction import ROLLOUT_CORRECTIONS, mismatch_metrics, mismatch_sums
from r3l.config import AlgorithmConfig, LoraConfig, TrainConfig
from r3l.errors import UserError
from r3l.experience import Experience
from r3l.learner.attention import attention_kernel, avoid_cudnn_attention
from r3l.learner.batching import (
    collate,
    collate_shared_prefix,
    forward_work,
    micro_batches,
    prefix_micro_batches,
    shared_prefix_length,
)
from r3l.learner.checkpoint import OPTIMIZER_FILE
from r3l.learner.schedule import make_scheduler
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


def can_share_prefix(share_prefix: bool, gradient_checkpointing: bool, has_decoder: bool) -> bool:
    """Whether shared prefixes can run at all: asked for (train.share_prefix), a model whose decoder and head
    the learner can split, and no gradient checkpointing (the KV-cache prefix path cannot run under it). Where
    they cannot, FSDP shards layer by layer (a layer then runs once per forward)."""
    return share_prefix and not gradient_checkpointing and has_decoder


def backward_adding_nothing(loss: torch.Tensor) -> None:
    """A backward pass whose gradients are all zero (finite even when `loss` is not): on sharded ranks every
    rank must run each backward, since FSDP reduces gradients in it."""
    (torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * 0.0).backward()


class MaskedLogits(torch.nn.Module):
    """The policy's forward as the learner runs it: logits [N, V] at the N positions whose next token is
    trained (the LM head runs on those only), through a shared prefix's cache when the batch has one. One
    module around the policy, so that sharded (FSDP2, its root) its forward gathers the embedding and head."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        selected = batch["loss_mask"] > 0
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
        ranks=None,
    ):
        self.ranks = ranks  # a RankGroup when the model is sharded across processes (distributed/fsdp.py)
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
        self.forward_modules = {id(model): MaskedLogits(model)}
        if self.ref_model is not None:
            self.forward_modules[id(self.ref_model)] = MaskedLogits(self.ref_model)
        if ranks is not None:  # before the optimizer: sharding replaces the parameters
            ranks.shard(model, self.forward_modules[id(model)], per_layer=not self._prefix_path_on)
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            trainable, lr=train.lr, betas=train.betas, weight_decay=train.weight_decay, fused=self.fused_optimizer
        )
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
        selected = batch["loss_mask"] > 0
        if "allowed_index" in batch:
            logits = constrain_logits(logits, batch["allowed_index"][selected], batch["allowed_table"])
        values = token_logprobs(logits[None], batch["targets"][selected][None], self.temperature)[0]
        full = torch.zeros(batch["loss_mask"].shape, dtype=values.dtype, device=values.device)
        full = full.index_put((selected.nonzero(as_tuple=True)), values)
        return full, logits

    def _old_logprobs(self, experiences, batches, stand_in) -> list[torch.Tensor | None]:
        old = []
        with torch.no_grad():
            for mb in batches:  # a None (another rank's turn) still runs, since a sharded forward is a collective
                values = self._logprobs(self.model, self._collate([experiences[i] for i in mb or stand_in]))[0]
                old.append(values if mb is not None else None)
        return old

    def _zero_advantage_is_free(self) -> bool:
        return (
            self.train.skip_zero_advantage
            and self.ref_model is None
            and getattr(self.loss_fn, "advantage_weighted", False)
        )

    @property
    def _prefix_path_on(self) -> bool:
        return can_share_prefix(
            self.train.share_prefix, self.gradient_checkpointing, split_head(self.model)[0] is not None
        )

    def _share_prefix(self, experiences: Sequence[Experience]) -> bool:
        return self._prefix_path_on and all(shared_prefix_length(e) > 0 for e in experiences)

    def _collate(self, experiences: Sequence[Experience]) -> dict[str, torch.Tensor]:
        if self._share_prefix(experiences):
            batch = collate_shared_prefix(experiences, self.pad_id)
        else:
            batch = collate(experiences, self.pad_id)
        return {name: tensor.to(self.device) for name, tensor in batch.items()}

    def _loss_parts(self, trained: Sequence[Experience]) -> list[tuple[str, list[Experience], object, dict]]:
        """(name, experiences, loss function, loss args), each part normalised on its own. SFT-objective
        samples join the policy part (algorithm.sft_loss=policy_loss: a positive sample whose advantage is
        its weight) or form their own part trained by the weighted NLL (sft_loss=nll)."""
        if self.algorithm.sft_loss == "policy_loss":
            return [("policy", list(trained), self.loss_fn, self.algorithm.loss_args)]
        policy = [e for e in trained if e.objective == "policy"]
        sft = [e for e in trained if e.objective == "sft"]
        parts = [
            ("policy", policy, self.loss_fn, self.algorithm.loss_args),
            ("sft", sft, POLICY_LOSSES.get("sft"), {"weighted": True}),
        ]
        return [part for part in parts if part[1]]

    def _denominator(self, experiences: Sequence[Experience]) -> float:
        if self.algorithm.aggregation == "token-mean":
            return float(sum(e.num_trained_tokens for e in experiences))
        return float(len(experiences))

    def _micro_batches(self, experiences: Sequence[Experience]) -> list[list[int]]:
        if self._share_prefix(experiences):
            return prefix_micro_batches(experiences, self.train.micro_batch_size, self.train.micro_batch_overhead)
        return micro_batches(
            [len(e.tokens) for e in experiences], self.train.micro_batch_size, self.train.micro_batch_overhead
        )

    def update(self, experiences: Sequence[Experience], behaviour_logprobs: bool = False) -> dict[str, float]:
        """One optimizer step per pass over `experiences` (advantages must already be set). With
        `behaviour_logprobs` (experiences explored by older weights) a ratio-based loss takes the generator's
        stored log-probabilities as the old policy instead of the learner's own, unless a rollout correction is
        on: then the learner's own log-probs are the old policy and the correction weighs each token by
        pi_old / mu (decoupled PPO)."""
        trained = [e for e in experiences if e.num_trained_tokens > 0]
        if not trained:
            return {"trained_tokens": 0.0}
        all_tokens = sum(e.num_trained_tokens for e in trained)
        kl_denominator = self._denominator(trained)  # one KL mean over every trained token, whatever the part
        skipped = 0
        plan = []  # (part name, experiences, micro-batches, loss function, loss args, denominator)
        for name, members, loss_fn, loss_args in self._loss_parts(trained):
            denominator = self._denominator(members)
            if name == "policy" and self._zero_advantage_is_free():
                kept = [e for e in members if e.advantage != 0.0]
                skipped, members = len(members) - len(kept), kept
            batches = self._micro_batches(members)
            if not batches:
                continue
            mine = self.ranks.share(batches) if self.ranks is not None else batches
            plan.append((name, members, mine, loss_fn, loss_args, denominator, batches[0]))
        behaviour_is_old = behaviour_logprobs and self.algorithm.rollout_correction == "none"
        stored_old = (
            {name: self._old_logprobs(members, batches, stand_in) for name, members, batches, *_, stand_in in plan}
            if self.algorithm.updates_per_batch > 1 and not behaviour_is_old
            else None
        )
        sums: dict[str, float] = defaultdict(float)
        self.model.train()
        finite = True
        for update in range(self.algorithm.updates_per_batch):
            self.optimizer.zero_grad(set_to_none=True)
            for name, members, batches, loss_fn, loss_args, denominator, stand_in in plan:
                for index, mb in enumerate(batches):
                    batch = self._collate([members[i] for i in mb or stand_in])
                    old = (
                        stored_old[name][index] if stored_old else (batch["gen_logprobs"] if behaviour_is_old else None)
                    )
                    finite &= self._accumulate(
                        batch,
                        old,
                        denominator,
                        kl_denominator,
                        sums,
                        update == 0,
                        loss_fn,
                        loss_args,
                        prefix="" if name == "policy" else f"{name}_",
                        counted=mb is not None,
                    )
            if self.ranks is not None:  # every rank steps, or none does
                finite = self.ranks.all_true(finite)
            for parameter in self.model.parameters():  # skipped experiences still count as zero gradients
                if parameter.requires_grad and parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
            norm = torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], self.train.grad_clip
            )
            grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # sharded: a DTensor
            sums["grad_norm"] += grad_norm
            finite &= math.isfinite(grad_norm)
            if not finite:  # never applied: the gradients are dropped, nothing steps
                self.optimizer.zero_grad(set_to_none=True)
                break
            self.optimizer.step()
        self.nonfinite_streak = 0 if finite else self.nonfinite_streak + 1
        self.nonfinite_updates += not finite
        if finite:
            self.scheduler.step()
        metrics = {"nonfinite_update": float(not finite), "nonfinite_updates": float(self.nonfinite_updates)}
        gap_max = sums.pop("max:generator_logprob_gap", 0.0)
        if self.ranks is not None:  # each rank summed its own micro-batches; the grad norm is already global
            sums = defaultdict(
                float,
                {**self.ranks.sum({k: v for k, v in sums.items() if k != "grad_norm"}), "grad_norm": sums["grad_norm"]},
            )
            gap_max = self.ranks.max(gap_max)
        metrics.update(mismatch_metrics(sums))
        metrics["generator_logprob_gap_max"] = gap_max
        for prefix in {"" if name == "policy" else f"{name}_" for name, *_ in plan}:
            tokens = sums.pop(f"{prefix}tokens", 0.0)
            for key in [k for k in sums if k.startswith(f"{prefix}token:")]:
                metrics[prefix + key.split(":", 1)[1]] = sums.pop(key) / max(tokens, 1.0)
        for key in [k for k in sums if k.startswith("work:")]:
            metrics["forward_" + key.split(":", 1)[1]] = sums.pop(key)
        passes = self.algorithm.updates_per_batch if finite else update + 1
        metrics["loss"] = sums["loss"] / passes
        metrics["grad_norm"] = sums["grad_norm"] / passes
        if "kl" in sums:
            metrics["kl"] = sums["kl"]
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        metrics["trained_tokens"] = float(all_tokens)
        metrics["skipped_zero_advantage"] = float(skipped)
        sft_samples = sum(e.objective == "sft" for e in trained)
        if sft_samples:
            metrics["sft_samples"] = float(sft_samples)
        return metrics

    def _accumulate(
        self,
        batch,
        old_logprobs,
        denominator: float,
        kl_denominator: float,
        sums: dict[str, float],
        first_pass: bool,
        loss_fn,
        loss_args: dict,
        prefix: str = "",
        counted: bool = True,
    ) -> bool:
        """Add one micro-batch's gradient; `sums` collects the loss, KL and token-weighted metrics
        (keys "<prefix>token:<name>", divided by "<prefix>tokens" at the end). False when the loss is not finite
        (its gradients are then dropped with the update). On sharded ranks a backward always runs (it is a
        collective): with weight zero for a stand-in micro-batch (`counted=False`), which adds nothing."""
        mask = batch["loss_mask"]
        logprobs, logits = self._logprobs(self.model, batch)
        old = old_logprobs if old_logprobs is not None else logprobs.detach()
        advantages = batch["advantages"]
        if self.algorithm.rollout_correction != "none" and prefix == "":
            weights = self.correction(old.detach() - batch["gen_logprobs"], self.algorithm.rollout_correction_threshold)
            weights = torch.where(batch["behaviour_in_context"] > 0, weights, torch.ones_like(weights))
            advantages = advantages * weights
            if first_pass and counted:
                sums["mismatch:weight"] += float((weights * mask).sum())
                sums["mismatch:dropped"] += float(((weights == 0) & (mask > 0)).sum())
                sums["mismatch:weight_tokens"] += float(mask.sum())
        loss, loss_metrics = loss_fn(
            logprobs,
            old,
            advantages,
            mask,
            aggregation=self.algorithm.aggregation,
            denominator=denominator,
            **loss_args,
        )
        if not counted:  # the policy's forward and backward are the collectives; the unsharded reference is not
            backward_adding_nothing(loss)
            return True
        kl = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logprobs = self._logprobs(self.ref_model, batch)[0]
            kl = aggregate(
                kl_penalty(logprobs, ref_logprobs, self.algorithm.kl_estimator),
                mask,
                self.algorithm.aggregation,
                kl_denominator,
            )
            loss = loss + self.algorithm.kl_coef * kl
        # the backward first, the loss read after (on a GPU .item() waits for the device, which then has the
        # backward queued): a non-finite loss's gradients are dropped with the whole update (`update` checks
        # every loss and the gradient norm), so running its backward changes nothing
        (loss * self.ranks.backward_scale if self.ranks is not None else loss).backward()
        if kl is not None:
            sums["kl"] += kl.item() / self.algorithm.updates_per_batch
        sums["loss"] += loss.item()
        finite = math.isfinite(sums["loss"])
        for key, work in forward_work(batch).items():
            sums[f"work:{key}"] += work
        if not first_pass:
            return finite
        count = float(mask.sum())
        sums[f"{prefix}tokens"] += count
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach()[None], temperature=self.temperature)[0]
            sums[f"{prefix}token:entropy"] += float((entropy * mask[mask > 0]).sum())
            in_context = mask * batch["behaviour_in_context"]
            for key, value in mismatch_sums(
                logprobs, batch["gen_logprobs"], in_context, self.algorithm.rollout_correction_threshold
            ).items():
                if key == "gap_max":
                    sums["max:generator_logprob_gap"] = max(sums["max:generator_logprob_gap"], value)
                else:
                    sums[f"mismatch:{key}"] += value
            for key, value in loss_metrics.items():
                sums[f"{prefix}token:{key}"] += value * count
        return finite
