"""Learner-vs-generator log-prob gap on one model (issue 25): python scripts/logprob_gap.py MODEL

HF generator in fp32 samples 2 replies to each of 8 arithmetic prompts; the learner recomputes their log-probs
with and without the shared-prefix layout and bf16 autocast, and the mean and max |gap| per token are printed.
"""

import sys
import time

import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.envs import make
from r3l.experience import Experience
from r3l.learner.learner import Learner
from r3l.models import load_policy
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator

name = sys.argv[1]
torch.manual_seed(0)
model, tok = load_policy(name)
env = make("arithmetic", train_size=0, test_size=8, max_digits=2)
fmt = PromptFormat()
prompts = [encode_prompt(tok, fmt.messages(t.prompt, env.system_prompt)) for t in env.tasks("test")]
for dtype in (torch.float32,):
    gen = HFGenerator(model, tok, dtype=dtype)
    t = time.time()
    rows = gen.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=24, seed=0), n=2)
    print("generated", time.time() - t, "s")
    exps = []
    for p, row in zip(prompts, rows):
        for c in row:
            exps.append(
                Experience(
                    group="g",
                    kind="base",
                    tokens=list(p) + list(c.tokens),
                    loss_mask=[0] * len(p) + [1] * len(c.tokens),
                    reward=0.0,
                    logprobs=[0.0] * len(p) + list(c.logprobs),
                )
            )
    print(repr(tok.decode(rows[0][0].tokens)))
    for share in (False, True):
        for autocast in (False, True):
            learner = Learner(
                model, tok, AlgorithmConfig(), TrainConfig(share_prefix=share), temperature=1.0, autocast_bf16=autocast
            )
            batch, _ = learner._collate(exps)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                lp, _ = learner._logprobs(model, batch)
            mask = batch["loss_mask"] > 0
            gap = (lp[mask] - batch["gen_logprobs"][mask]).abs()
            settings = f"gen {dtype} share_prefix={share} autocast_bf16={autocast}"
            print(f"{settings}: mean gap {gap.mean():.4f} max {gap.max():.4f}")
