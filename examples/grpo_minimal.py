"""GRPO in one page, from r3l's registries: sample a group of answers per task, grade them, turn the rewards into
group-relative advantages, take one clipped policy-gradient step. It is what `r3l train` does on its default
job, without the trainer's checkpoints, logging, evaluation, prefix sharing and micro-batching.

    python examples/grpo_minimal.py                          # the embedded SmolLM2-135M, one-digit arithmetic
    python examples/grpo_minimal.py --model tiny-random --steps 1    # seconds: a tiny random model (the test)

Swap a piece by its registered name: --advantage (grpo, rloo, opmd, ...), --loss (ppo_clip, ...); another task is
`make(NAME, **settings)` with a name and settings from `r3l envs`.
"""

from __future__ import annotations

import argparse

import torch

from r3l.algorithms.advantages import ADVANTAGES
from r3l.algorithms.entropy import token_logprobs
from r3l.algorithms.losses import POLICY_LOSSES
from r3l.envs import judge, make
from r3l.models import load_policy
from r3l.registry import import_submodules
from r3l.rollout.generator import GENERATORS, SamplingParams
from r3l.seeding import seed_everything

# The default job's task (r3l/presets/default.yaml): one-digit addition and subtraction, the answer in tags.
TASK = {
    "min_terms": 2,
    "max_terms": 3,
    "max_digits": 1,
    "operators": ["+", "-"],
    "allow_negation": False,
    "allow_parentheses": False,
    "instruction": "",
}
SYSTEM = "Answer with only the final number inside <answer></answer> tags."
EXAMPLE = [{"role": "user", "content": "Calculate 2 + 3."}, {"role": "assistant", "content": "<answer>5</answer>"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--advantage", default="grpo")
    parser.add_argument("--loss", default="ppo_clip")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=8, help="tasks per step")
    parser.add_argument("--group-size", type=int, default=8, help="answers sampled per task")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    seed_everything(args.seed)
    import_submodules("r3l.rollout")  # each generator module registers itself: hf, vllm
    env = make("arithmetic", **TASK)
    model, tokenizer = load_policy(args.model)  # float32 weights on the CPU
    generator = GENERATORS.get("hf")(model, tokenizer, dtype=torch.float32)
    advantage_fn, loss_fn = ADVANTAGES.get(args.advantage), POLICY_LOSSES.get(args.loss)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    train_tasks = env.tasks("train")

    for step in range(args.steps):
        # 1. Explore: one prompt per task, a group of sampled answers for each.
        tasks = [train_tasks[(step * args.tasks + i) % len(train_tasks)] for i in range(args.tasks)]
        prompts = []
        for task in tasks:
            messages = [{"role": "system", "content": SYSTEM}, *EXAMPLE, {"role": "user", "content": env.reset(task)}]
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed * 1000 + step)
        groups = generator.generate(prompts, sampling, n=args.group_size)

        # 2. Grade every answer with the environment's verifier, then advantages relative to each task's group.
        rows = [(prompt, answer) for prompt, group in zip(prompts, groups) for answer in group]
        rewards = torch.tensor(
            [judge(env, task, answer.text).reward for task, group in zip(tasks, groups) for answer in group]
        )
        group_ids = torch.arange(len(tasks)).repeat_interleave(args.group_size)
        advantages = advantage_fn(rewards, group_ids)

        # 3. Learn: the answer's tokens are trained (loss mask 1), the prompt's are context only (attention mask).
        # Columns are positions 0..width-2 (position t predicts token t + 1); the LM head runs from the first
        # answer position on (logits_to_keep), so that the prompts cost no logits.
        width = max(len(prompt) + len(answer.tokens) for prompt, answer in rows)
        first = min(len(prompt) for prompt, _ in rows) - 1
        input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        loss_mask = torch.zeros(len(rows), width - 1)
        sampled_logprobs = torch.zeros(len(rows), width - 1)  # what the generator saw when it drew each token
        for row, (prompt, answer) in enumerate(rows):
            tokens = [*prompt, *answer.tokens]
            input_ids[row, : len(tokens)] = torch.tensor(tokens)
            attention_mask[row, : len(tokens)] = 1
            loss_mask[row, len(prompt) - 1 : len(tokens) - 1] = 1  # position t predicts token t + 1
            sampled_logprobs[row, len(prompt) - 1 : len(tokens) - 1] = torch.tensor(answer.logprobs)
        loss_mask, sampled_logprobs = loss_mask[:, first:], sampled_logprobs[:, first:]
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=width - first).logits
        logprobs = token_logprobs(logits[:, :-1], input_ids[:, first + 1 :], temperature=sampling.temperature)
        logprobs = logprobs * loss_mask
        gap = float(((logprobs.detach() - sampled_logprobs).abs() * loss_mask).sum() / loss_mask.sum())
        # One update per batch, so the old policy is the current one (ratio 1); the generator's own log-probs
        # (answer.logprobs) would be the old policy for a batch explored by older weights.
        loss, metrics = loss_fn(
            logprobs,
            logprobs.detach(),
            advantages[:, None].expand_as(loss_mask),
            loss_mask,
            aggregation="token-mean",
            denominator=float(loss_mask.sum()),
        )
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        generator.sync_weights(model.state_dict())  # the generator samples from its own copy of the weights
        print(
            f"step {step + 1}/{args.steps}  reward {rewards.mean():.3f}  "
            f"groups with a signal {int((advantages.view(len(tasks), -1).abs().sum(1) > 0).sum())}/{len(tasks)}  "
            f"loss {loss.item():+.4f}  grad norm {float(grad_norm):.3f}  clip fraction {metrics['clip_fraction']:.2f}  "
            f"generator/learner log-prob gap {gap:.5f}"
        )


if __name__ == "__main__":
    main()
