"""Module discovery: a new environment, strategy or generator is one file with one decorator."""
import sys

import pytest

from r3l.registry import import_submodules


def test_a_new_module_in_a_package_is_found(tmp_path, monkeypatch):
    package = tmp_path / "plugins_here"
    package.mkdir()
    (package / "__init__.py").write_text("from r3l.registry import Registry\nTHINGS = Registry('thing')\n")
    (package / "greeter.py").write_text(
        "from plugins_here import THINGS\n\n@THINGS.register('greeter')\ndef greet():\n    return 'hello'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_submodules("plugins_here")
    assert sys.modules["plugins_here"].THINGS.get("greeter")() == "hello"
    # walked once per process: a module added later (a run's source tree edited under it) is not imported halfway
    (package / "late.py").write_text("raise AssertionError('imported after the walk')\n")
    import_submodules("plugins_here")
    assert "plugins_here.late" not in sys.modules


def test_a_walk_that_failed_is_tried_again(tmp_path, monkeypatch):
    package = tmp_path / "plugins_broken"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("raise ImportError('bad plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(2):
        with pytest.raises(ImportError, match="bad plugin"):
            import_submodules("plugins_broken")


def test_the_packages_find_their_own_modules():
    from r3l.build import GENERATOR_PACKAGES
    from r3l.envs import available
    from r3l.explore import STRATEGIES, make_strategy  # noqa: F401
    from r3l.rollout.generator import GENERATORS

    assert {name for name, _ in available()} == {"alfworld", "arithmetic", "countdown", "dataset", "function_calling",
                                                  "gsm", "gym", "math", "openenv", "scienceworld", "textarena",
                                                  "textworld_express", "verifiers", "webshop"}
    import_submodules("r3l.explore", *GENERATOR_PACKAGES)
    assert set(STRATEGIES.names()) == {"critique", "plain", "r3", "r3l"}
    assert set(GENERATORS.names()) == {"hf", "scripted", "vllm"}
