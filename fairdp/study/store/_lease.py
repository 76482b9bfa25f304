"""One writer per object-store results location: a lease object taken by conditional create.

A local results directory has a lock file (``_lock.py``); an S3 bucket has no exclusive
create of a file, but it has conditional writes: ``PutObject`` with ``If-None-Match: *``
succeeds for exactly one of several writers of a key, and ``If-Match: <etag>`` replaces an
object only if nobody replaced it since it was read. The lease is ``<results>/.fairdp.lease``
(hidden, so readers skip it), naming its owner and its time to live. Its holder renews it
every quarter of that time; a lease not renewed for its time to live, measured on the
store's clock (its ``Last-Modified`` against the ``Date`` of the answer, so that the
machines' clocks do not matter), belongs to a driver that is gone and is taken over with
``If-Match``, so that of two drivers taking over at once only one wins. A driver that loses
its lease (it stalled past its time to live and another took over) stops as a Ctrl-C would.

Rows are exactly-once whatever the lease does (a retried pack replaces its own file); the
lease keeps two drivers from planning and training the same packs twice.
"""

from __future__ import annotations

import _thread
import contextlib
import email.utils
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
import uuid

from fairdp.errors import InputError
from fairdp.study.store._lock import alive

logger = logging.getLogger(__name__)

LEASE_NAME = ".fairdp.lease"
TTL_S = 60.0
TTL_ENV = "FAIRDP_LEASE_TTL_S"


def _client(store):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise InputError(f"--results {store.location}: s3:// results need boto3 for their single-writer lease; "
                         f"pip install 'fairdp[s3]'") from None
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(store.location).query)
    endpoint = store.endpoint if "endpoint_override" in query else None  # else boto3's own (AWS_ENDPOINT_URL)
    config = Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint, region_name=store.fs.region or None, config=config)


def _code(error) -> str:
    return getattr(error, "response", {}).get("Error", {}).get("Code", "")


class S3Lease:
    """The lease of one S3 results location (``bucket/prefix``). Taking it over, waiting out a
    holder that is gone and losing it are warnings of the ``fairdp`` logger."""

    def __init__(self, client, location: str, root: str, command: str, ttl_s: float):
        self.client, self.location, self.command, self.ttl_s = client, location, command, ttl_s
        self.bucket, _, prefix = root.partition("/")
        self.key = f"{prefix}/{LEASE_NAME}" if prefix else LEASE_NAME
        self.uri = f"s3://{self.bucket}/{self.key}"
        self.me = {"token": uuid.uuid4().hex, "pid": os.getpid(), "host": socket.gethostname(), "command": command,
                   "since": time.strftime("%Y-%m-%d %H:%M:%S"), "ttl_s": ttl_s}
        self.etag: str | None = None
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- the store's answers -----------------------------------------------------------------
    def _put(self, **condition) -> str:
        return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(self.me).encode(),
                                      **condition)["ETag"]

    def holder(self) -> tuple[dict, str, float] | None:
        """(owner, etag, seconds since its last renewal by the store's clock), or None if free."""
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as e:  # noqa: BLE001 - botocore's ClientError
            if _code(e) in ("NoSuchKey", "404"):
                return None
            raise
        body = got["Body"].read()
        try:
            owner = json.loads(body)
        except ValueError:
            owner = {}
        now = email.utils.parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
        return owner, got["ETag"], (now - got["LastModified"]).total_seconds()

    # -- taking, keeping, giving back ----------------------------------------------------------
    def acquire(self) -> None:
        """Take the lease, or InputError naming its holder. A holder of this host that no
        longer runs (a SIGKILL) is waited out until its lease expires: its trials on other
        hosts stop within seconds of their driver, and by then they have."""
        waited = False
        while True:
            try:
                self.etag = self._put(IfNoneMatch="*")
                return
            except Exception as e:  # noqa: BLE001
                if _code(e) not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise InputError(f"--results {self.location}: cannot take the lease {self.uri} "
                                     f"({_code(e) or type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
            found = self.holder()
            if found is None:
                continue  # released in between
            owner, etag, age = found
            ttl = float(owner.get("ttl_s", self.ttl_s))
            who = f"fairdp {owner.get('command', '?')} on {owner.get('host', '?')} (pid {owner.get('pid', '?')}, " \
                  f"since {owner.get('since', '?')})"
            if age > ttl:
                try:
                    self.etag = self._put(IfMatch=etag)
                except Exception as e:  # noqa: BLE001
                    if _code(e) in ("PreconditionFailed", "412", "NoSuchKey", "ConditionalRequestConflict", "409"):
                        continue  # someone else took it (or gave it back) first: look again
                    raise
                logger.warning("fairdp: %s: took over the lease of %s, not renewed for %.0f s", self.location, who, age)
                return
            dead_here = owner.get("host") == self.me["host"] and isinstance(owner.get("pid"), int) \
                and not alive(owner["pid"])
            if dead_here and not waited:
                left = ttl - age + 1.0
                logger.warning("fairdp: %s: the lease of %s, which no longer runs, expires in %.0f s; waiting",
                               self.location, who, left)
                time.sleep(max(0.0, left))
                waited = True
                continue
            raise InputError(f"{self.location}: in use by {who}; its lease {self.uri} expires {ttl:.0f} s after its "
                             f"last renewal ({age:.0f} s ago): wait for that run to finish, or pass another --results")

    def _renew_loop(self) -> None:
        every = self.ttl_s / 4
        last_ok = time.monotonic()
        while not self._stop.wait(every):
            try:
                self.etag = self._put(IfMatch=self.etag)
                last_ok = time.monotonic()
                continue
            except Exception as e:  # noqa: BLE001
                taken = _code(e) in ("PreconditionFailed", "412", "NoSuchKey")
            if taken or time.monotonic() - last_ok > self.ttl_s:
                self.lost.set()
                logger.warning("fairdp: %s: lost the lease %s (%s); stopping: what finished is stored", self.location,
                               self.uri, "another fairdp took it over" if taken else f"not renewed for {self.ttl_s:g} s")
                _thread.interrupt_main()  # stop as a Ctrl-C does: trials stop, nothing half-written
                return

    def __enter__(self) -> S3Lease:
        self.acquire()
        self._renewer = threading.Thread(target=self._renew_loop, name="fairdp-lease", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=60)
        if not self.lost.is_set() and self.etag is not None:
            with contextlib.suppress(Exception):  # an expired lease is as good as a released one
                self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)


def object_store_lease(store, command: str):
    """The single-writer lease of an object-store results ``store`` (S3 and S3-compatible
    stores); other object stores have none and their docs say so."""
    if store.fs.type_name != "s3":
        return contextlib.nullcontext()
    ttl = float(os.environ.get(TTL_ENV, TTL_S))
    if not ttl > 0:
        raise InputError(f"{TTL_ENV}: must be > 0 seconds, got {ttl}")
    return S3Lease(_client(store), store.location, store.root, command, ttl)
