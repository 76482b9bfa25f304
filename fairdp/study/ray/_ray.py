"""Ray sessions: embedded Ray kept on loopback, or an existing cluster by address."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from fairdp.errors import InputError, last_line
from fairdp.study.ray import _ray_reaper
from fairdp.study.ray._ray_reaper import MARK_VARIABLE

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
logger = logging.getLogger("fairdp")


def keep_ray_on_loopback() -> None:
    """Make a single-node Ray bind its services to 127.0.0.1 only.

    On Linux ``ray.init()`` binds to the machine's network address and opens unauthenticated
    ports on every interface (the ShadowRay exposure, CVE-2023-48022); ``_node_ip_address``
    does not prevent it. Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is imported,
    so the variable is set here, and the constant is patched too in case ``ray`` was
    imported before (the services read it at start time).
    """
    os.environ[LOOPBACK_ENV] = "0"
    import ray._private.ray_constants as ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def resolve_address(address: str | None) -> str | None:
    """The cluster to join: ``--address``, else ``RAY_ADDRESS``, else None (embedded Ray)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def token_path() -> Path:
    """Where Ray keeps the cluster token it generates (its default: ~/.ray/auth_token)."""
    return Path.home() / ".ray" / "auth_token"


def private_token_file() -> None:
    """Make this user's Ray token file readable by its owner only. Ray writes it with the
    umask's mode (0644 under 022): on a shared machine another user could read the token and
    submit code to the cluster. Ray creates the file inside ``ray.init``, so this runs
    before (an existing file) and right after (a new one)."""
    path = token_path()
    try:
        st = path.stat()
    except OSError:
        return
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        path.chmod(0o600)


class _DropMessages(logging.Filter):
    def __init__(self, needles: tuple[str, ...]):
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(n in message for n in self.needles)


@contextlib.contextmanager
def quiet_loggers(noise: dict[str, tuple[str, ...]]):
    """Drop, for the block, the records of each logger in ``noise`` whose message contains
    one of its strings: Ray's messages that fairdp replaces with its own, or that do not
    apply to how fairdp runs Ray. Every other record passes."""
    filters = [(logging.getLogger(name), _DropMessages(needles)) for name, needles in noise.items()]
    for named, f in filters:
        named.addFilter(f)
    try:
        yield
    finally:
        for named, f in filters:
            named.removeFilter(f)


# Ray announces at every embedded start that token authentication is on (and how to turn it
# off); fairdp keeps it on and the notice off the user's screen.
TOKEN_NOTICE = {"ray._private.authentication.authentication_token_setup": ("Token authentication is enabled",)}


@contextlib.contextmanager
def reaped_when_driver_ends():
    """Yield a mark to put in the environment of the processes an embedded Ray starts; a
    reaper process kills that node's processes once this process ends, a SIGKILL included,
    or once the block is left (what ``ray.shutdown`` left running): see ``_ray_reaper``.

    The reaper runs in a session of its own, so a Ctrl-C or a signal to this process's group
    does not end it before it has swept. Its stdin is the read end of a pipe whose only
    write end this process holds (not inherited by anything it starts): the end of the pipe
    is this process's end. Where no reaper can start the block runs without one."""
    token = secrets.token_hex(16)
    if sys.platform == "win32":  # Ray ties its processes to the driver's job object there
        yield token
        return
    read_end, write_end = os.pipe()
    try:
        reaper = subprocess.Popen([sys.executable, "-I", _ray_reaper.__file__, str(os.getpid()), token],
                                  stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    except OSError as e:
        logger.warning("no reaper for the embedded Ray (%s); a killed run may leave Ray processes", e)
        os.close(write_end)
        reaper = None
    finally:
        os.close(read_end)
    try:
        yield token
    finally:
        if reaper is not None:
            os.close(write_end)
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(timeout=_ray_reaper.SWEEP_FOR_S + 5)  # sweeps, then exits


@contextlib.contextmanager
def marked_environment(token: str):
    """``MARK_VARIABLE=token`` in this process's environment for the block only: the processes
    started inside carry it, those started after do not."""
    before = os.environ.get(MARK_VARIABLE)
    os.environ[MARK_VARIABLE] = token
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MARK_VARIABLE, None)
        else:
            os.environ[MARK_VARIABLE] = before


CONNECT_TIMEOUT_S = 5.0


def address_source(address: str | None) -> str:
    """What named the cluster: the ``--address`` flag or the ``RAY_ADDRESS`` variable."""
    return "--address" if address else "RAY_ADDRESS"


def check_reachable(address: str, source: str = "--address") -> None:
    """InputError within seconds if ``address`` is not host:port (or auto, ray://host:port), or
    nothing answers there (Ray itself retries for minutes). ``auto`` is left to Ray; a
    ``ray://`` address is checked at its host and port."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[1] if address.startswith("ray://") else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "://" in hostport or " " in host:
        raise InputError(f"{source}: expected host:port, auto or ray://host:port, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise InputError(f"{source} {address}: no Ray cluster answers there ({e.strerror or e}); "
                         f"is the head running and the port open?") from None


def connect_error(address: str, error: Exception) -> InputError:
    """One line for a failed connection; a token problem says which variables to set."""
    if any(w in str(error).lower() for w in ("auth", "token", "unauthenticated")):
        return InputError(f"--address {address}: the cluster refused this client's token "
                          f"({last_line(str(error), type(error).__name__, 200)}); set "
                          f"RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH to the cluster's token")
    return InputError(f"--address {address}: could not connect ({last_line(str(error), type(error).__name__, 300)})")


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None):
    """Connect to ``address`` or start an embedded single-node Ray on loopback; shut it down after.

    Yields the address mode used: 'embedded' or the address string. A Ray already
    initialised in this process (e.g. by the caller) is used as is and left running.
    """
    address = resolve_address(address)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune's default loggers include TensorBoard, which complains about NaN metrics (an mdl
    # that was not computed); the runners add the JSON logger that result grids read back.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    if address is None:
        keep_ray_on_loopback()
    import ray

    if ray.is_initialized():
        yield "existing"
        return
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                  configure_logging=True)
    with contextlib.ExitStack() as stack:
        if address is None:
            # the embedded node's processes must not outlive this process, however it ends;
            # a cluster reached by address is never touched
            token = stack.enter_context(reaped_when_driver_ends())
            # "local" always starts a new instance instead of joining one found on this machine
            private_token_file()
            with quiet_loggers(TOKEN_NOTICE), marked_environment(token):
                # no prestarted task workers: a study's trials are Tune actors, each in a worker
                # of its own, so the num_cpus workers Ray starts idle (~1 s of CPU and 300 MB
                # each) would only exit again unused
                ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus,
                         _system_config={"prestart_worker_first_driver": False}, **kwargs)
            private_token_file()  # the token Ray has just generated, if it had none
            mode = "embedded"
        else:
            check_reachable(address)
            try:
                ray.init(address=address, **kwargs)
            except Exception as e:  # noqa: BLE001 - Ray raises many types; the user needs one line
                raise connect_error(address, e) from None
            mode = address
        try:
            yield mode
        finally:
            ray.shutdown()
