"""A real S3-protocol server for tests: moto's server mode (``moto_server``), a separate
process speaking S3 over HTTP, reached through pyarrow's S3FileSystem and boto3 exactly as
a user's S3-compatible store is. Started in its own process group, stopped by that group."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fairdp-test", "AWS_SECRET_ACCESS_KEY": "fairdp-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
MOTO = os.path.join(os.path.dirname(sys.executable), "moto_server")


def available() -> str | None:
    """None if a server can be started, else why not."""
    if not os.path.exists(MOTO) and shutil.which("moto_server") is None:
        return "needs moto's server (pip install 'moto[server]'; make setup installs it)"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "needs boto3 (pip install 'fairdp[s3]')"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class S3Server:
    """``moto_server`` on ``host:port``, optionally inside a network namespace (``netns``).
    With ``wait=False`` the constructor returns as soon as it has started the server, and
    :meth:`wait` waits for it to answer (it starts while the caller does something else)."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, netns: str | None = None,
                 log_path: str | None = None, wait: bool = True):
        self.host, self.port, self.netns = host, port or free_port(host if netns is None else "127.0.0.1"), netns
        self.endpoint = f"http://{self.host}:{self.port}"
        cmd = [MOTO if os.path.exists(MOTO) else "moto_server", "-H", self.host, "-p", str(self.port)]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        log = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env={**os.environ, **CREDENTIALS}, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if log_path:
            log.close()  # the server has its own copy
        if wait:
            self.wait()

    def wait(self, timeout: float = 60) -> None:
        """Return once the server accepts connections."""
        if self.netns:
            self._wait_in_netns(timeout)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"moto_server exited with {self.proc.returncode}"
            try:
                self.client().list_buckets()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)
        raise AssertionError(f"moto_server did not answer at {self.endpoint}")

    def _wait_in_netns(self, timeout: float) -> None:
        """One Python in the server's namespace tries to connect every 0.1 s (one started per
        try, importing boto3, took a second each)."""
        code = (f"import socket, time\n"
                f"while True:\n"
                f"    try:\n"
                f"        socket.create_connection(('{self.host}', {self.port}), 1).close()\n"
                f"        break\n"
                f"    except OSError:\n"
                f"        time.sleep(0.1)\n")
        probe = subprocess.Popen(["ip", "netns", "exec", self.netns, sys.executable, "-c", code],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while probe.poll() is None:
                assert self.proc.poll() is None, f"moto_server exited with {self.proc.returncode}"
                assert time.monotonic() < deadline, f"moto_server did not answer at {self.endpoint}"
                time.sleep(0.1)
            assert probe.returncode == 0, f"the probe of {self.endpoint} exited with {probe.returncode}"
        finally:
            if probe.poll() is None:
                os.killpg(probe.pid, signal.SIGKILL)
                probe.wait(timeout=10)

    def in_netns(self, code: str) -> str:
        """Run Python ``code`` (``s3`` is a boto3 client of this server) in the server's
        namespace; returns its standard output."""
        prelude = (f"import boto3; s3 = boto3.client('s3', endpoint_url='{self.endpoint}', "
                   f"aws_access_key_id='{CREDENTIALS['AWS_ACCESS_KEY_ID']}', "
                   f"aws_secret_access_key='{CREDENTIALS['AWS_SECRET_ACCESS_KEY']}', region_name='us-east-1')\n")
        out = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", prelude + code],
                             capture_output=True, text=True, timeout=120, env={**os.environ, **CREDENTIALS})
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-1500:])
        return out.stdout

    def client(self):
        import boto3
        from botocore.config import Config

        if self.netns:  # reach it from here through its namespace's address: run clients inside instead
            raise RuntimeError("a namespaced server is reached from inside its namespace")
        return boto3.client("s3", endpoint_url=self.endpoint, config=Config(connect_timeout=2, read_timeout=10,
                                                                            retries={"max_attempts": 1}),
                            **_keys())

    def bucket(self) -> str:
        name = f"fairdp-{uuid.uuid4().hex[:10]}"
        if self.netns:
            self.in_netns(f"s3.create_bucket(Bucket='{name}')")
        else:
            self.client().create_bucket(Bucket=name)
        return name

    def uri(self, bucket: str, prefix: str) -> str:
        return f"s3://{bucket}/{prefix}?endpoint_override={self.host}:{self.port}&scheme=http"

    def pause(self) -> None:
        """Stop the server (SIGSTOP): connections are accepted by the kernel and never answered."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _keys() -> dict:
    return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]}


class Gate:
    """A TCP forwarder in front of a server that can be closed (connections refused, as when
    the server process is down) and opened again, the server keeping its state meanwhile."""

    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        import threading

        self.host, self.target, self.port = host, target_port, free_port(host)
        self._threading = threading
        self._listener: socket.socket | None = None
        self.open()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self._listener = listener
        self._threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.host, self.target))
            for a, b in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
