"""The one error type for bad user input: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input from the user (config, data, names). The message says what is wrong and how to fix it."""


class RunStopped(Exception):
    """A run that cannot go on (e.g. its updates keep diverging). The CLI prints the message on one line and
    exits 1; the run directory keeps its last good checkpoint."""
