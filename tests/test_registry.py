"""Module discovery: a new environment, strategy or generator is one file with one decorator."""
import sys

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


def test_the_packages_find_their_own_modules():
    from r3l.build import GENERATOR_PACKAGES
    from r3l.envs import available
    from r3l.explore import STRATEGIES, make_strategy  # noqa: F401
    from r3l.rollout.generator import GENERATORS

    assert {name for name, _ in available()} == {"alfworld", "arithmetic", "countdown", "dataset", "function_calling",
                                                  "gsm", "gym", "math", "scienceworld", "textarena",
                                                  "textworld_express", "verifiers", "webshop"}
    import_submodules("r3l.explore", *GENERATOR_PACKAGES)
    assert set(STRATEGIES.names()) == {"plain", "r3", "r3l"}
    assert set(GENERATORS.names()) == {"hf", "scripted", "vllm"}
