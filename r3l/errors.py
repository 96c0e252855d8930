"""The one error type for bad user input: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input from the user (config, data, names). The message says what is wrong and how to fix it."""
