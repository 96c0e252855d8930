"""Under bf16 autocast the learner casts each weight to bf16 once per pass, not once per micro-batch, and the
gradients and the updated weights are exactly what casting per micro-batch gives (the casts never outlive their
weights: a second update reads the weights the first one wrote)."""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.learner.learner import Learner
from tests.test_micro_batch_invariance import batch


class WeightCasts(TorchDispatchMode):
    """Counts the casts of the given tensors to bf16."""

    def __init__(self, watched):
        super().__init__()
        self.watched = {tensor.data_ptr() for tensor in watched}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16:
            self.count += args[0].data_ptr() in self.watched
        return func(*args, **kwargs)


def learner(cast_once: bool) -> Learner:
    from r3l.models import load_policy

    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny-random")
    model = model.float()
    train = TrainConfig(micro_batch_size=2, grad_clip=1e9, lr=1e-3)
    made = Learner(model, tokenizer, AlgorithmConfig(kl_coef=0.0), train, temperature=1.0, autocast_bf16=True)
    if not cast_once:
        made._weights_cast_once = contextlib.nullcontext  # type: ignore[method-assign]
    return made


def two_updates(cast_once: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The gradients of two consecutive updates and the weights after them."""
    made = learner(cast_once)
    gradients = []
    step = made.optimizer.step

    def recording_step(*args, **kwargs):
        gradients.append(torch.cat([p.grad.flatten().clone() for p in made.model.parameters()]))
        return step(*args, **kwargs)

    made.optimizer.step = recording_step  # type: ignore[method-assign]
    experiences = batch(made.model.config.vocab_size)
    for _ in range(2):
        made.update(experiences)
    return gradients, [p.detach().clone() for p in made.model.parameters()]


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")  # by the test, on purpose
def test_casting_once_per_pass_changes_no_gradient_and_no_weight():
    once_gradients, once_weights = two_updates(cast_once=True)
    each_gradients, each_weights = two_updates(cast_once=False)
    assert len(once_gradients) == 2 and once_gradients[1].abs().max() > 0
    for once, each in zip(once_gradients, each_gradients):
        assert torch.equal(once, each)  # bit for bit: a stale cast in the second update would show here
    for once, each in zip(once_weights, each_weights):
        assert torch.equal(once, each)


def test_each_weight_is_cast_once_per_pass():
    counts = {}
    for cast_once in (True, False):
        made = learner(cast_once)
        experiences = batch(made.model.config.vocab_size)
        matrices = [p for p in made.model.parameters() if p.dim() == 2]
        with WeightCasts(matrices) as casts:
            metrics = made.update(experiences)
        counts[cast_once] = casts.count
    assert metrics["trained_tokens"] > 0
    assert counts[True] == len(matrices)  # every weight matrix once in the pass
    assert counts[False] >= 3 * counts[True] and counts[False] % counts[True] == 0  # once per micro-batch (4 here)
