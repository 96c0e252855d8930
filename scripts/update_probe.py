"""How far one learner update moves a policy, and which parameters move it (issue 25).

    python scripts/update_probe.py MODEL [--variants full:1e-5,full:1e-6,lora:1e-5] [override ...]

Explores one GRPO batch of the default job (arithmetic, 8 tasks x 8 samples) with MODEL, then for each
variant (learning rate, LoRA) applies one update to a fresh copy of the weights and measures, on 32 held-out
problems teacher-forced on the untrained model's greedy replies: the mean per-token KL(old || new), the mean
change of the greedy reply's log-probability, and the KL with only one parameter group's update kept (which
group the shift comes from). Greedy held-out success before and after one update is printed too.
"""

from __future__ import annotations

import copy
import sys
import time

import torch

from r3l.algorithms import assign_advantages
from r3l.build import eval_params, make_learner, trainable_policy
from r3l.config import load_config
from r3l.evaluate import held_out_evaluation
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.trainer import Trainer

GROUPS = {
    "lm_head": ("lm_head",),
    "embed": ("embed_tokens",),
    "attention": ("self_attn",),
    "mlp": ("mlp",),
    "norms": ("norm",),
}


def group_of(name: str) -> str:
    for group, keys in GROUPS.items():
        if any(key in name for key in keys):
            return group
    return "other"


def teacher_forced_logprobs(model, sequences, prompt_lengths):
    """Per-position log-softmax over the reply positions of each sequence (list of [T_reply, V])."""
    out = []
    with torch.no_grad():
        for tokens, start in zip(sequences, prompt_lengths):
            ids = torch.tensor([tokens])
            logits = model(input_ids=ids).logits[0, start - 1 : -1].float()
            out.append(torch.log_softmax(logits, -1))
    return out


def shift(old, new, sequences, prompt_lengths):
    kls, deltas = [], []
    for o, n, tokens, start in zip(old, new, sequences, prompt_lengths):
        kls.append((o.exp() * (o - n)).sum(-1).mean())
        target = torch.tensor(tokens[start:])
        deltas.append((n.gather(1, target[:, None]) - o.gather(1, target[:, None])).sum())
    return float(torch.stack(kls).mean()), float(torch.stack(deltas).mean())


DEFAULT_VARIANTS = "full:1e-5,full:1e-6,lora:1e-5"


def parse_variants(text: str) -> list[tuple[str, dict, bool]]:
    """'full:1e-5,lora:1e-4' -> [(label, train changes, lora?)]; LoRA at the config's rank (model.lora.r)."""
    variants = []
    for item in text.split(","):
        kind, _, lr = item.partition(":")
        if kind not in ("full", "lora") or not lr:
            sys.exit(f"error: variant '{item}' is not full:LR or lora:LR (e.g. --variants full:1e-6,lora:5e-5)")
        variants.append((f"lr {lr} {kind}", {"lr": float(lr)}, kind == "lora"))
    return variants


def main() -> None:
    args = sys.argv[1:]
    variant_text = DEFAULT_VARIANTS
    if "--variants" in args:
        at = args.index("--variants")
        variant_text = args[at + 1]
        del args[at : at + 2]
    name, overrides = args[0], args[1:]
    variants = parse_variants(variant_text)
    base = [
        "eval.size=32",
        "logging.progress=false",
        "logging.tensorboard=false",
        f"model={name}",
        "run.dir=/tmp/update_probe",
        *overrides,
    ]
    config = load_config(None, base)
    trainer = Trainer(config)
    parts = trainer.parts
    fmt = PromptFormat.from_config(config.env)
    _, _, metrics = held_out_evaluation(trainer.test_tasks, parts.strategy.context, eval_params(config))
    print(f"untrained greedy held-out success {metrics['eval/success']:.3f}")
    env = parts.make_env()
    prompts = [encode_prompt(parts.tokenizer, fmt.messages(t.prompt, env.system_prompt)) for t in trainer.test_tasks]
    replies = parts.generator.generate(prompts, eval_params(config), n=1)
    sequences = [list(p) + list(r[0].tokens) for p, r in zip(prompts, replies)]
    lengths = [len(p) for p in prompts]
    torch.manual_seed(0)
    experiences, explore_metrics = parts.strategy.explore(trainer._draw(0).tasks, 0)
    assign_advantages(experiences, config.algorithm.advantage, config.algorithm.advantage_args)
    print(
        f"batch: {len(experiences)} samples, success {explore_metrics.get('success', float('nan')):.3f}, "
        f"nonzero advantages {sum(e.advantage != 0 for e in experiences)}"
    )
    pristine = copy.deepcopy(trainer.parts.model.state_dict())
    old = teacher_forced_logprobs(trainer.parts.model, sequences, lengths)
    for label, train_changes, lora in variants:
        model = trainer.parts.model
        model.load_state_dict(pristine)
        variant = config.model_copy(deep=True)
        for key, value in train_changes.items():
            setattr(variant.train, key, value)
        variant.model.lora.enabled = lora
        policy, ref = trainable_policy(variant, model)
        learner = make_learner(variant, policy, parts.tokenizer, ref)
        started = time.time()
        update = learner.update(experiences)
        merged = policy.merge_and_unload() if lora else policy
        new = teacher_forced_logprobs(merged, sequences, lengths)
        kl, delta = shift(old, new, sequences, lengths)
        print(
            f"{label}: grad_norm {update['grad_norm']:.2f}, KL(old||new) per token {kl:.4f}, "
            f"greedy reply log-prob change {delta:+.3f} ({time.time() - started:.0f} s)"
        )
        if not lora:
            updated = {k: v.detach().clone() for k, v in merged.state_dict().items()}
            for group in sorted({group_of(k) for k in updated}):
                merged.load_state_dict({k: (updated[k] if group_of(k) == group else pristine[k]) for k in updated})
                kl_g, delta_g = shift(old, teacher_forced_logprobs(merged, sequences, lengths), sequences, lengths)
                rel = {
                    k: float((updated[k] - pristine[k]).norm() / pristine[k].norm().clamp_min(1e-12))
                    for k in updated
                    if group_of(k) == group
                }
                print(
                    f"    only {group:9s}: KL {kl_g:.4f}, log-prob change {delta_g:+.3f}, "
                    f"max relative weight change {max(rel.values()):.2e}"
                )
            merged.load_state_dict(updated)
        parts.generator.sync_weights(merged.state_dict())
        _, _, after = held_out_evaluation(trainer.test_tasks, parts.strategy.context, eval_params(config))
        print(f"    held-out greedy success after this one update {after['eval/success']:.3f}")
        if lora:
            model = merged
        trainer.parts.model = model
    trainer.close()


if __name__ == "__main__":
    main()
