"""What the CLI says in one line: bad user input (exit 2), a run that cannot go on (exit 1), an interrupt
(exit 130)."""


class UserError(Exception):
    """Bad input from the user (config, data, names). The message says what is wrong and how to fix it."""


class RunStopped(Exception):
    """A run that cannot go on (e.g. its updates keep diverging). The CLI prints the message on one line and
    exits 1; the run directory keeps its last good checkpoint."""


class Interrupted(BaseException):
    """Ctrl-C, told apart from a failure: the message says what was kept and how to go on; the CLI prints it on
    one line and exits 130. A BaseException like KeyboardInterrupt (no `except Exception` swallows it), but not a
    KeyboardInterrupt, which typer turns into a silent exit before r3l's entry point can say anything."""
