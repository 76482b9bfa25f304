"""Errors that the CLI reports as one line on stderr with exit status 2."""


class InputError(ValueError):
    """Bad user input: a missing or corrupt file, a malformed spec, an out-of-range value.

    The message is a single line that names the offending file, column or key path.
    """


def last_line(text: str, fallback: str, limit: int = 500) -> str:
    """The last non-blank line of an error's text (where a traceback or a wrapped error says
    what went wrong), stripped and cut to ``limit`` characters; ``fallback`` if it has none."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[-1] if lines else fallback)[:limit]
