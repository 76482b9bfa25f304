"""Errors that the CLI reports as one line on stderr: bad input (exit status 2), a run stopped
by a failure outside any pack (exit status 1)."""


class InputError(ValueError):
    """Bad user input: a missing or corrupt file, a malformed spec, an out-of-range value.

    The message is a single line that names the offending file, column or key path.
    """


class RunAborted(RuntimeError):
    """A run or search that stopped on a failure no pack owns (Ray's scheduler gave up, e.g.
    after its memory monitor killed a worker); what finished is stored and resumes."""


def last_line(text: str, fallback: str, limit: int = 500) -> str:
    """The last non-blank line of an error's text (where a traceback or a wrapped error says
    what went wrong), stripped and cut to ``limit`` characters; ``fallback`` if it has none."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[-1] if lines else fallback)[:limit]
