"""The learner on two FSDP2 ranks (gloo, CPU processes) makes the same update as one process: uneven
zero-advantage skipping (one rank runs a stand-in micro-batch), shared prefixes, LoRA, KL and gradient
checkpointing in per-layer units; a loss poisoned on one rank only drops the update on both."""

import os
import re
import socket
from datetime import timedelta

import pytest
import torch
import torch.multiprocessing as mp

from r3l.config import AlgorithmConfig, LoraConfig, TrainConfig
from r3l.distributed.fsdp import share_micro_batches
from r3l.experience import Experience
from tests.helpers.experience_groups import shared_prompt_groups

COLLECTIVE_WAIT = timedelta(seconds=120)  # a rank left waiting in a collective fails the test instead of hanging it

VARIANTS = {
    "plain": {},
    "shared-prefix": {"share_prefix": True},
    "lora": {"lora": True},
    "kl": {"kl": True},
    "lora-kl": {"lora": True, "kl": True},  # the reference: the sharded policy with its adapters off
    # checkpointed layers recompute their forward in backward, each its own FSDP unit (re-gathered there); asked
    # for beside share_prefix, which checkpointing turns off, so the units are per layer all the same
    "checkpointing": {"checkpointing": True, "share_prefix": True},
}


def test_share_micro_batches_pads_every_rank_to_the_same_count():
    batches = [[0], [1], [2]]
    assert share_micro_batches(batches, 0, 2) == [[0], [2]]
    assert share_micro_batches(batches, 1, 2) == [[1], None]
    assert share_micro_batches(batches[:1], 1, 2) == [None]
    assert share_micro_batches([], 0, 2) == []


def experiences(vocab: int) -> list[Experience]:
    """Two groups sharing a prompt each; three of seven experiences have advantage zero (skipped)."""
    groups = (("a", 7, [1.0, 0.0, -1.0, 0.0]), ("b", 5, [0.5, 0.0, -0.5]))
    return shared_prompt_groups(vocab, groups, lambda index, _: 3 + 2 * index, torch.Generator().manual_seed(0))


def build(variant: dict):
    from r3l.learner.learner import AdaptersOff, apply_lora
    from r3l.models import load_policy

    model, tokenizer = load_policy("tiny-random")
    model = model.float()
    if variant.get("checkpointing"):
        model.gradient_checkpointing_enable()
    reference = None
    if variant.get("kl") and variant.get("lora"):
        reference = AdaptersOff()
    elif variant.get("kl"):
        import copy

        reference = copy.deepcopy(model).eval().requires_grad_(False)
    if variant.get("lora"):
        torch.manual_seed(1)
        model = apply_lora(model, LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))
    algorithm = AlgorithmConfig(kl_coef=0.1 if variant.get("kl") else 0.0)
    train = TrainConfig(micro_batch_size=1, share_prefix=bool(variant.get("share_prefix")), lr=1e-3)
    return model, tokenizer, algorithm, train, reference


def make_learner(variant: dict, ranks=None):
    from r3l.learner.learner import Learner

    model, tokenizer, algorithm, train, reference = build(variant)
    learner = Learner(
        model,
        tokenizer,
        algorithm,
        train,
        temperature=1.0,
        autocast_bf16=False,
        ref_model=reference,
        gradient_checkpointing=bool(variant.get("checkpointing")),
        ranks=ranks,
    )
    return model, learner


def layer_units(model) -> list[bool]:
    """Whether each decoder layer is an FSDP unit of its own."""
    from torch.distributed.fsdp import FSDPModule

    layers = [module for name, module in model.named_modules() if re.search(r"\.layers\.\d+$", name)]
    return [isinstance(module, FSDPModule) for module in layers]


def update_on_rank(rank: int, world: int, port: int, variant: dict, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from r3l.distributed.fsdp import RankGroup

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=COLLECTIVE_WAIT)
    try:
        model, learner = make_learner(variant, RankGroup())
        metrics = learner.update(experiences(model.config.vocab_size))
        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save({"weights": weights, "metrics": metrics, "layer_units": layer_units(model)}, out)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_two_ranks_update_equals_one_process(tmp_path, name):
    variant = VARIANTS[name]
    out = str(tmp_path / "ranks.pt")
    mp.spawn(update_on_rank, args=(2, free_port(), variant, out), nprocs=2, join=True)
    sharded = torch.load(out)
    model, learner = make_learner(variant)
    metrics = learner.update(experiences(model.config.vocab_size))
    single, before = model.state_dict(), build(variant)[0].state_dict()
    assert sharded["weights"].keys() == single.keys()
    for key, value in sharded["weights"].items():
        assert torch.allclose(value, single[key], atol=1e-6), key
    assert any(not torch.equal(single[key], before[key]) for key in single)  # the update moved something
    for key in ("loss", "grad_norm", "trained_tokens", "skipped_zero_advantage", "forward_positions"):
        assert sharded["metrics"][key] == pytest.approx(metrics[key], rel=1e-6, abs=1e-9), key
    assert metrics["skipped_zero_advantage"] == (0 if variant.get("kl") else 3)  # KL makes zero advantages count
    if variant.get("checkpointing"):
        assert model.is_gradient_checkpointing
        assert sharded["layer_units"] and all(sharded["layer_units"])  # each decoder layer an FSDP unit of its own


def poisoned_then_clean_on_rank(rank: int, world: int, port: int, out: str) -> None:
    """Rank 1 alone gets NaN advantages (rank 0's loss stays finite), then both get the clean batch. Each rank
    saves its own view: its shards before, after the poisoned and after the clean update, and both metrics."""
    import torch.distributed as dist

    from r3l.distributed.fsdp import RankGroup

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=COLLECTIVE_WAIT)
    try:
        model, learner = make_learner({}, RankGroup())

        def shards() -> dict[str, torch.Tensor]:
            return {name: p.detach().to_local().clone() for name, p in model.named_parameters()}

        batch = experiences(model.config.vocab_size)
        poisoned = experiences(model.config.vocab_size)
        if rank == 1:
            for experience in poisoned:
                if experience.advantage != 0.0:  # zeros stay zeros: both ranks plan the same micro-batches
                    experience.advantage = float("nan")
        before = shards()
        first = learner.update(poisoned)
        after_poisoned = shards()
        counters = (learner.nonfinite_updates, learner.nonfinite_streak, learner.scheduler.last_epoch)
        second = learner.update(batch)
        record = {
            "before": before,
            "after_poisoned": after_poisoned,
            "after_clean": shards(),
            "first": first,
            "second": second,
            "counters": counters,
        }
        torch.save(record, out.format(rank=rank))
    finally:
        dist.destroy_process_group()


def test_a_nan_loss_on_one_rank_leaves_every_rank_unchanged_and_the_next_update_works(tmp_path):
    """Rank 1's loss is NaN, rank 0's is finite: both run every backward (collectives), agree the update is not
    finite, and neither steps (no shard changes, the optimizer and schedule stay where they were); the counter
    rises on both. The next, finite update then makes the one-process update from the same weights."""
    out = str(tmp_path / "rank{rank}.pt")
    mp.spawn(poisoned_then_clean_on_rank, args=(2, free_port(), out), nprocs=2, join=True)
    model, learner = make_learner({})
    expected = learner.update(experiences(model.config.vocab_size))
    single = {name: p.detach() for name, p in model.named_parameters()}
    for rank in (0, 1):
        record = torch.load(out.format(rank=rank))
        assert record["first"]["nonfinite_update"] == 1.0 and record["first"]["nonfinite_updates"] == 1.0, rank
        assert record["counters"] == (1, 1, 0), rank  # one dropped update, the scheduler not stepped
        for name, value in record["after_poisoned"].items():
            assert torch.equal(value, record["before"][name]), (rank, name)
        assert record["second"]["nonfinite_update"] == 0.0 and record["second"]["nonfinite_updates"] == 1.0
        for key in ("loss", "grad_norm", "trained_tokens"):
            assert record["second"][key] == pytest.approx(expected[key], rel=1e-6), (rank, key)
        moved = [
            name for name, value in record["after_clean"].items() if not torch.equal(value, record["before"][name])
        ]
        assert moved, rank
        for name, value in record["after_clean"].items():  # this rank's shard (dim 0, chunked) of one process's
            pieces = single[name].chunk(2, dim=0)
            piece = pieces[rank] if rank < len(pieces) else single[name][:0]
            assert value.shape == piece.shape and torch.allclose(value, piece, atol=1e-6), (rank, name)
