"""The rollouts package's expected failure (import-light: the commands' error tables import it)."""


class StackError(ValueError):
    """The stack cannot run rollouts as asked (a flag missing, a service down): the message names the fix."""
