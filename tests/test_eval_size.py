"""An eval.size above the test split is said in one line and the whole split used, never cut silently."""

from r3l.build import held_out_tasks
from r3l.config import load_config
from r3l.envs import make


def test_an_eval_size_above_the_split_is_said_and_the_whole_split_used(capsys):
    config = load_config(None, ["env=countdown", "env.args.test_size=5", "eval.size=8"])
    env = make("countdown", **config.env.args)
    assert len(held_out_tasks(config, env)) == 5
    said = capsys.readouterr().err
    assert "eval.size=8 asks for more held-out tasks than environment 'countdown' has in its test split (5)" in said
    assert "set eval.size=5" in said
    smaller = load_config(None, ["env=countdown", "env.args.test_size=5", "eval.size=3"])
    assert [t.id for t in held_out_tasks(smaller, env)] == [t.id for t in env.tasks("test")[:3]]
    assert capsys.readouterr().err == ""
