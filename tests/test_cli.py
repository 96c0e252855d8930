"""The CLI's quick commands: `r3l --help`, `r3l envs`, `r3l config` and a refused model name answer without
importing torch, transformers or reasoning-gym (seconds of imports on a loaded machine)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "reasoning_gym")
PROBE = """
import json, sys
from r3l import cli
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["r3l", *args]
try:
    cli.main()
except SystemExit:
    pass
print(json.dumps(sorted(name for name in heavy if name in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args, status",
    [
        (["--help"], 0),
        (["envs"], 0),
        (["envs", "textworld_express"], 0),
        (["config", "model=tiny-random"], 0),
        (["train", "model=/nonexistent"], 2),
        (["train", "model=./no/such/dir", "env=countdown"], 2),
        (["eval", "--model", "random:no-such-shape"], 2),
        (["rollout", "model=/nonexistent"], 2),
        (["bench", "model=nobody/no/such/model"], 2),
    ],
)
def test_quick_commands_and_a_refused_model_import_nothing_heavy(args, status, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    *lines, imported = result.stderr.strip().splitlines()
    assert json.loads(imported) == [], (args, imported)
    if status:
        assert lines[-1].startswith("error: ") and "model" in lines[-1], result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_crash_in_native_code_says_where_it_happened():
    """An abort (a C++ library's std::terminate, glibc's heap checks) kills the process without a Python traceback;
    the CLI turns on faulthandler so that it still prints each thread's stack."""
    crash = "import os, sys\nfrom r3l import cli\ncli.app = lambda **_: os.abort()\nsys.argv = ['r3l']\ncli.main()"
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120)
    assert done.returncode == -6
    assert "Fatal Python error: Aborted" in done.stderr and "cli.py" in done.stderr, done.stderr[-1000:]


@pytest.mark.parametrize("stderr", ["None", "io.StringIO()"])
def test_a_stderr_without_a_file_descriptor_does_not_stop_the_cli(stderr):
    """faulthandler needs a file descriptor; where stderr has none (absent, or captured in memory) it is skipped."""
    probe = f"import io, sys\nfrom r3l import cli\nsys.stderr = {stderr}\nsys.argv = ['r3l', 'envs']\ncli.main()"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "arithmetic" in done.stdout, done.stderr[-1000:]


ENDING = """
import atexit, json, sys, threading, time
from r3l import cli


class Teardown:
    def __del__(self):
        print("teardown ran", file=sys.stderr)  # module globals are cleared in the interpreter's teardown


kept = Teardown()
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
sys.stdout.write("buffered, ")  # no newline, to a pipe: flushed only at the end
sys.argv = ["r3l", *json.loads(sys.argv[1])]
cli.entry()
"""


@pytest.mark.parametrize("args, status", [(["envs"], 0), (["train", "model=/nonexistent"], 2)])
def test_a_command_ends_without_the_interpreters_teardown_but_with_what_an_exit_does(args, status):
    """`r3l` skips Python's teardown of torch's and transformers' modules (~0.8 s a command), and keeps what an
    exit does: non-daemon threads finish, then the atexit handlers run, buffered output is written, the status
    is the command's."""
    done = subprocess.run([sys.executable, "-c", ENDING, json.dumps(args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr[-1000:]
    assert done.stdout.startswith("buffered, ") and done.stdout.endswith("thread finished\natexit ran\n")
    assert "teardown ran" not in done.stderr
    assert (status == 0) == ("error: " not in done.stderr)
