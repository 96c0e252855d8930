"""The multi_turn section's episodes on vLLM (its automatic prefix caching on), run by the section in the
environment where vLLM is installed (VLLM_VENV, `.venv-vllm` in the checkout, or `.ci/vllm_tests`'s in r3l's cache):

    python -m r3l.bench.multi_turn_vllm CONFIG.yaml --turns 5,20

prints {workload: {turns: figures}} as JSON on its last line, the figures `play` measures for the HF generator.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# vLLM keeps its prefix cache on by default (V1); said here so that a changed default does not change the reading
ENGINE_ARGS = {"enable_prefix_caching": True, "enforce_eager": True}


def main() -> None:
    import torch

    from r3l.bench.flops import ModelShape
    from r3l.bench.multi_turn import WORKLOADS, episode_config, episode_tasks, play
    from r3l.bench.train_steps import per_workload
    from r3l.build import generator_dtype, load_model, make_generator
    from r3l.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--turns", default="5,10,20,40")
    args = parser.parse_args()
    turns_list = [int(turns) for turns in args.turns.split(",")]
    config = load_config(str(args.config), ["generator=vllm", f"generator.engine_args={json.dumps(ENGINE_ARGS)}"])
    model, tokenizer = load_model(config)
    generator = make_generator(config, model, tokenizer)
    shape, bytes_per_value = ModelShape.from_config(model.config), getattr(torch, generator_dtype(config)).itemsize

    def measure(chosen):
        tasks = episode_tasks(chosen)

        def played(turns):
            return play(episode_config(chosen, [], turns), generator, tokenizer, tasks, turns, shape, bytes_per_value)

        played(2)  # warm-up: first calls, simulators
        return {str(turns): played(turns) for turns in turns_list}

    print(json.dumps(per_workload(config, WORKLOADS, measure)))


if __name__ == "__main__":
    main()
