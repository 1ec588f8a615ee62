"""Errors the command line turns into one-line messages."""


class UserError(Exception):
    """Bad input from the user: the CLI prints it on one line and exits with status 2."""


class RunFailed(Exception):
    """A run that cannot go on (diverged, too many skipped steps): the CLI prints it and exits 1."""


class AuditFailed(Exception):
    """A campaign audit found violations: the CLI lists them and exits 1."""
