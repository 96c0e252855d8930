"""The learner's optimizer: AdamW on fp32 master weights, or AdamW with stochastic rounding on bf16 ones.

AdamW moves each weight by about `lr` a step. A bf16 weight of size w can only move by multiples of w * 2^-8, so
at lr 1e-6 and weights around 0.02 the update rounds back to the weight it came from: torch's AdamW on bf16
weights changed 2 % of them in 10 steps where fp32 changed all. Stochastic rounding rounds the fp32 result up or
down with the probability that makes the rounded weight's expectation the fp32 one, so small updates accumulate
on average instead of vanishing (Gupta et al. 2015; Zamirai et al. 2020 for bf16 training). Its Adam moments are
fp32, as `r3l plan` counts them; no fp32 copy of the weights is kept.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

CHUNK_ELEMENTS = 1 << 24  # a large tensor is updated in chunks, so the fp32 working copy stays small
LOW_BITS = 1 << 16  # the bits an fp32 value loses on its way to bf16


def stochastic_round_to_bf16(values: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """`values` (fp32) rounded to bf16 up or down in magnitude by `noise` (int32, uniform in [0, 2^16)): a value
    whose dropped low 16 bits are k rounds away from zero when noise >= 2^16 - k, i.e. with probability k / 2^16.
    Non-finite values are rounded to nearest."""
    bits = values.contiguous().view(torch.int32)
    rounded = torch.bitwise_and(bits + noise, -LOW_BITS).view(torch.float32).to(torch.bfloat16)
    return torch.where(torch.isfinite(values), rounded, values.to(torch.bfloat16))


def adamw_step(
    weights: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> torch.Tensor:
    """One AdamW update (decoupled weight decay, bias-corrected moments, as torch.optim.AdamW) of fp32 `weights`,
    in place on `weights` and the two moments; returns `weights`."""
    beta1, beta2 = betas
    weights.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denominator = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(eps)
    return weights.addcdiv_(exp_avg, denominator, value=-lr / (1 - beta1**step))


def local(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) parameter's own shard; a plain tensor as it is."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class StochasticRoundingAdamW(torch.optim.Optimizer):
    """AdamW for bf16 weights: the update is computed in fp32 from fp32 moments and written back stochastically
    rounded (fp32 weights, if any, are written back as they are). The rounding noise comes from `seed`, the step
    and the parameter's index, so a resumed run rounds as the uninterrupted one would."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        seed: int = 0,
    ):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.seed = seed

    def load_state_dict(self, state_dict: dict) -> None:
        """As torch's, but the moments stay fp32 (torch casts a loaded state to its parameter's dtype, bf16)."""
        super().load_state_dict(state_dict)
        saved_ids = [index for group in state_dict["param_groups"] for index in group["params"]]
        parameters = [parameter for group in self.param_groups for parameter in group["params"]]
        for saved_id, parameter in zip(saved_ids, parameters, strict=True):
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state_dict["state"].get(saved_id, {}):
                    saved = state_dict["state"][saved_id][key]
                    self.state[parameter][key] = saved.to(device=local(parameter).device, dtype=torch.float32)

    @torch.no_grad()
    def step(self, closure=None):  # no closure: r3l computes the loss outside
        if closure is not None:
            raise ValueError("StochasticRoundingAdamW takes no closure")
        index = 0
        for group in self.param_groups:
            for parameter in group["params"]:
                index += 1
                if parameter.grad is None:
                    continue
                self._update(parameter, group, index)
        return None

    def _update(self, parameter: torch.Tensor, group: dict, index: int) -> None:
        assert parameter.grad is not None
        weights, grad = local(parameter), local(parameter.grad)
        state = self.state[parameter]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros(weights.shape, dtype=torch.float32, device=weights.device)
            state["exp_avg_sq"] = torch.zeros(weights.shape, dtype=torch.float32, device=weights.device)
        state["step"] += 1
        generator = torch.Generator(device=weights.device)
        generator.manual_seed(hash((self.seed, state["step"], index)) & (2**63 - 1))
        settings = {k: group[k] for k in ("lr", "betas", "eps", "weight_decay")}
        flat_weights, flat_grad = weights.view(-1), grad.reshape(-1)
        moments = state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)
        for start in range(0, flat_weights.numel(), CHUNK_ELEMENTS):
            chunk = slice(start, start + CHUNK_ELEMENTS)
            updated = adamw_step(
                flat_weights[chunk].float(),
                flat_grad[chunk].float(),
                moments[0][chunk],
                moments[1][chunk],
                state["step"],
                **settings,
            )
            if flat_weights.dtype == torch.bfloat16:
                noise = torch.randint(
                    0, LOW_BITS, updated.shape, dtype=torch.int32, device=updated.device, generator=generator
                )
                updated = stochastic_round_to_bf16(updated, noise)
            flat_weights[chunk].copy_(updated)


def build_optimizer(
    parameters: list[torch.Tensor],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    fused: bool,
    seed: int = 0,
) -> torch.optim.Optimizer:
    """torch's AdamW where every trained weight is fp32 (or fp16/fp64); the stochastic-rounding AdamW as soon as one
    is bf16, whose updates torch's would round away."""
    if any(parameter.dtype == torch.bfloat16 for parameter in parameters):
        return StochasticRoundingAdamW(parameters, lr=lr, betas=betas, weight_decay=weight_decay, seed=seed)
    return torch.optim.AdamW(parameters, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused)
