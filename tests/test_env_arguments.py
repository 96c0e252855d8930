"""An environment's settings as `r3l envs NAME` shows them: every setting of every environment has a help text."""

from r3l.envs import available, env_class
from r3l.envs.arguments import describe, env_arguments


def test_every_setting_of_every_environment_has_help():
    missing = [
        f"{name}.{argument.name}"
        for name, _ in available()
        for argument in env_arguments(env_class(name))
        if not argument.help.strip()
    ]
    assert not missing, f"settings without help (argument_help): {', '.join(missing)}"


def test_help_of_a_base_class_reaches_the_environments_built_on_it():
    text = describe("textworld_express", env_class("textworld_express"))
    assert "max_steps" in text and "turns an episode may take" in text  # from TextGameEnv
    assert "game_params" in text and "numLocations" in text  # its own
