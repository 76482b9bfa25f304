"""SIGTERM stops a run or a search the way Ctrl-C does."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """While inside, ``kill PID`` (SIGTERM: a scheduler's stop, the end of a background job
    whose SIGINT the shell ignores) stops like Ctrl-C: finished packs stay stored, the running
    ones end, the same command resumes. Under Ray Tune the SIGINT handler is Tune's (a graceful
    stop); otherwise KeyboardInterrupt. Enter it after ``ray.init``, whose handler would
    otherwise print a stack dump and exit without fairdp's last line. A second SIGTERM (Tune
    has then put back the previous SIGINT handler) interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not signal.default_int_handler:
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
