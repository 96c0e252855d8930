"""Where is failure worth learning from, for one model? (issue 21) First-try and second-try success on candidate
settings, each failure given one reflection and one more try (R3's evaluation, greedy), as a Markdown table.

    python scripts/candidate_settings.py MODEL OUT_DIR [LABEL ...] [key=value ...]   (default: every candidate)

For each setting: first-try success, second-try success, how many first-try failures the second try recovered,
and how many reflections refused the task ("I can't assist"). Reads each run's eval.json.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

ARITHMETIC = ["env.args.allow_negation=false", "env.args.allow_parentheses=false"]  # the default job's env
CANDIDATES = {
    "arithmetic 1-digit +- (default job)": (None, []),
    "arithmetic 2-digit +-, 2-4 terms": (None, [*ARITHMETIC, "env.args.max_digits=2", "env.args.max_terms=4"]),
    "arithmetic 2-digit +-*, 2-3 terms": (None, [*ARITHMETIC, "env.args.max_digits=2",
                                                 'env.args.operators=["+","-","*"]']),
    "arithmetic 3-digit +-*, 2-3 terms, reasoning": (None, ["env=arithmetic", *ARITHMETIC,
                                                            "env.args.max_digits=3", "env.args.max_terms=3",
                                                            'env.args.operators=["+","-","*"]',
                                                            "sampling.max_new_tokens=160", "eval.max_new_tokens=160"]),
    "gsm, reasoning": (None, ["env=gsm", "sampling.max_new_tokens=256",
                              "eval.max_new_tokens=256"]),
    "gsm, reasoning, tags asked in the system prompt": (None, [
        "env=gsm", "sampling.max_new_tokens=256", "eval.max_new_tokens=256",
        "env.system_prompt=Reason step by step, then write only the final number inside <answer></answer> tags."]),
    "countdown 3 numbers": ("examples/r3_countdown_cpu.yaml", ["sampling.max_new_tokens=192",
                                                               "eval.max_new_tokens=192"]),
    "BFCL simple": ("examples/r3_function_calling_cpu.yaml", ["env.args.test_size=40"]),
    "BFCL multiple": ("examples/r3_function_calling_cpu.yaml", ["env.args.categories=[multiple]",
                                                                "env.args.test_size=40"]),
}
REFUSAL = re.compile(r"can(?:no|')t assist|unable to (?:assist|help)|I apologi[sz]e, but", re.I)


def run(model: str, out: Path, label: str, size: int, extra: list[str]) -> dict:
    config, overrides = CANDIDATES[label]
    overrides = [*overrides, *extra]
    folder = out / re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    command = ["r3l", "eval", *([config] if config else []), *overrides, f"model={model}", "eval.attempts=2",
               f"eval.size={size}", "eval.reflection_max_new_tokens=96", "--out", str(folder)]
    started = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    record = json.loads((folder / "eval.json").read_text())
    failures = [s for s in record["samples"] if not s["first_success"]]
    return {"label": label, "n": record["total"], "first": record["first_try"]["success"],
            "second": record["second_try"]["success"], "failures": len(failures),
            "recovered": sum(bool(s.get("second_success")) for s in failures),
            "refusals": sum(bool(REFUSAL.search(s.get("reflection", ""))) for s in failures),
            "seconds": time.time() - started, "command": " ".join(command)}


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    labels = [a for a in sys.argv[3:] if "=" not in a] or list(CANDIDATES)
    extra = [a for a in sys.argv[3:] if "=" in a]  # key=value overrides for every setting
    size = 40
    rows = []
    print("| setting | tasks | 1st try | 2nd try | failures recovered | reflections refusing | seconds |")
    print("|---|---|---|---|---|---|---|")
    for label in labels:
        row = run(model, out, label, size, extra)
        rows.append(row)
        print(f"| {label} | {row['n']} | {row['first']:.2f} | {row['second']:.2f} | {row['recovered']}/{row['failures']} "
              f"| {row['refusals']}/{row['failures']} | {row['seconds']:.0f} |", flush=True)
    (out / "candidates.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
