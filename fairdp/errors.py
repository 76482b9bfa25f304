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


class StoreFault(RunAborted):
    """The results store cannot take a write (a full disk, an object store that does not
    answer): the run stops at once, since every pack after it would fail the same way."""


class DiskFull(StoreFault):
    """A results file could not be written for lack of space: the run stops at once (every
    pack after it would fail the same way), keeping what is stored, and the same command
    resumes once there is room."""

    def __init__(self, path: str, needed: int | None, free: int | None):
        self.path, self.needed, self.free = path, needed, free
        need = f"needs about {_size(needed)}" if needed else "needs more"
        have = f", {_size(free)} free" if free is not None else ""
        super().__init__(f"{path}: no space left on the device ({need}{have}); the packs that finished are "
                         f"stored: free some space and run the same command to resume")

    def __reduce__(self):  # crosses process boundaries (Ray) with its fields
        return DiskFull, (self.path, self.needed, self.free)


class StoreUnavailable(StoreFault):
    """An object store that did not answer for the whole retry budget: the run stops with
    one line naming the endpoint, keeping every pack already stored."""

    def __init__(self, location: str, endpoint: str, waited_s: float, cause: str):
        self.location, self.endpoint, self.waited_s, self.cause = location, endpoint, waited_s, cause
        super().__init__(f"{location}: the object store at {endpoint} did not answer for {waited_s:.0f} s "
                         f"({cause}); the packs that finished are stored: run the same command to resume once it "
                         f"is back")

    def __reduce__(self):
        return StoreUnavailable, (self.location, self.endpoint, self.waited_s, self.cause)


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC, as the OS or pyarrow (which words it in its own message) reports it."""
    import errno

    return getattr(error, "errno", None) == errno.ENOSPC or "no space left on device" in str(error).lower()
