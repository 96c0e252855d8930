"""Random base experiences in groups that share a prompt, for tests of the learner's batching and ranks."""

from collections.abc import Callable, Sequence

import torch

from r3l.experience import Experience


def shared_prompt_groups(
    vocab: int,
    groups: Sequence[tuple[str, int, Sequence[float]]],
    reply_length: Callable[[int, int], int],
    generator: torch.Generator,
) -> list[Experience]:
    """One experience per advantage of each (name, prompt length, advantages) group, all behind the group's one
    random prompt; reply i has reply_length(i, prompt_length) random tokens, every one trained."""
    records = []
    for group, prompt_length, advantages in groups:
        prompt = torch.randint(3, vocab, (prompt_length,), generator=generator).tolist()
        for index, advantage in enumerate(advantages):
            reply = torch.randint(3, vocab, (reply_length(index, prompt_length),), generator=generator).tolist()
            records.append(
                Experience(
                    group=group,
                    kind="base",
                    tokens=prompt + reply,
                    loss_mask=[0] * prompt_length + [1] * len(reply),
                    logprobs=[-1.0] * (prompt_length + len(reply)),
                    reward=advantage,
                    advantage=advantage,
                )
            )
    return records
