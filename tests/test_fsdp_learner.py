"""The learner on two FSDP2 ranks (gloo, CPU processes) makes the same update as one process: uneven
zero-advantage skipping (one rank runs a stand-in micro-batch), shared prefixes, LoRA and KL."""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from r3l.config import AlgorithmConfig, LoraConfig, TrainConfig
from r3l.distributed.fsdp import share_micro_batches
from r3l.experience import Experience
from tests.helpers.experience_groups import shared_prompt_groups

VARIANTS = {
    "plain": {},
    "shared-prefix": {"share_prefix": True},
    "lora": {"lora": True},
    "kl": {"kl": True},
    "lora-kl": {"lora": True, "kl": True},  # the reference: the sharded policy with its adapters off
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


def update_on_rank(rank: int, world: int, port: int, variant: dict, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from r3l.distributed.fsdp import RankGroup
    from r3l.learner.learner import Learner

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, tokenizer, algorithm, train, reference = build(variant)
        learner = Learner(
            model,
            tokenizer,
            algorithm,
            train,
            temperature=1.0,
            autocast_bf16=False,
            ref_model=reference,
            ranks=RankGroup(),
        )
        batch = experiences(model.config.vocab_size)
        if variant.get("nan"):  # one experience's advantage NaN: only the rank given it sees a NaN loss
            batch[0].advantage = float("nan")
        metrics = learner.update(batch)
        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save({"weights": weights, "metrics": metrics}, out)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_two_ranks_update_equals_one_process(tmp_path, name):
    from r3l.learner.learner import Learner

    variant = VARIANTS[name]
    out = str(tmp_path / "ranks.pt")
    mp.spawn(update_on_rank, args=(2, free_port(), variant, out), nprocs=2, join=True)
    sharded = torch.load(out)
    model, tokenizer, algorithm, train, reference = build(variant)
    learner = Learner(model, tokenizer, algorithm, train, temperature=1.0, autocast_bf16=False, ref_model=reference)
    metrics = learner.update(experiences(model.config.vocab_size))
    single, before = model.state_dict(), build(variant)[0].state_dict()
    assert sharded["weights"].keys() == single.keys()
    for key, value in sharded["weights"].items():
        assert torch.allclose(value, single[key], atol=1e-6), key
    assert any(not torch.equal(single[key], before[key]) for key in single)  # the update moved something
    for key in ("loss", "grad_norm", "trained_tokens", "skipped_zero_advantage", "forward_positions"):
        assert sharded["metrics"][key] == pytest.approx(metrics[key], rel=1e-6, abs=1e-9), key
    assert metrics["skipped_zero_advantage"] == (0 if variant.get("kl") else 3)  # KL makes zero advantages count


def test_a_nan_loss_on_one_rank_leaves_every_rank_unchanged(tmp_path):
    """The rank given a NaN advantage runs its backward anyway (a collective; the loss is read after it), the
    ranks agree the update is not finite, and none steps."""
    out = str(tmp_path / "ranks.pt")
    mp.spawn(update_on_rank, args=(2, free_port(), {"nan": True}, out), nprocs=2, join=True)
    sharded = torch.load(out)
    before = build({})[0].state_dict()
    assert sharded["metrics"]["nonfinite_update"] == 1.0
    assert all(torch.equal(value, before[key]) for key, value in sharded["weights"].items())
