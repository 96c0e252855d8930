"""The CLI makes torch's OpenMP threads wait passively unless the user chose how they wait."""

import json
import os
import subprocess
import sys

from r3l.threads import openmp_wait_defaults


def test_passive_waiting_unless_a_wait_setting_is_given():
    assert openmp_wait_defaults({}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert openmp_wait_defaults({"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert openmp_wait_defaults({"GOMP_SPINCOUNT": "10000"}) == {}
    assert openmp_wait_defaults({"OMP_NUM_THREADS": "2"}) == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_the_cli_sets_it_before_torch_starts(tmp_path):
    """`r3l config` runs main(); the environment it leaves is what a training run's torch starts with."""
    probe = (
        "import os, sys, json; sys.argv = ['r3l', 'config', 'model=tiny-random']\n"
        "from r3l.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1])["OMP_WAIT_POLICY"] == "ACTIVE"
