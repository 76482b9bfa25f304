"""Results on S3, against a real S3-protocol server (moto's server mode over HTTP, the
``s3`` fixture): stores that retry while the server does not answer and then stop with one
line naming the endpoint, and the single-writer lease that keeps two drivers off one
location (conditional create, expiry on the store's clock, take-over with If-Match)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import yaml

from fairdp.errors import InputError, StoreUnavailable
from fairdp.study import ResultStore
from fairdp.study.store import _lease
from fairdp.study.store._lease import LEASE_NAME, S3Lease, object_store_lease
from tests.conftest import assert_input_error, run_cli, run_main
from tests.s3server import CREDENTIALS, Gate, free_port

ROWS = [{"study": "s", "dataset": "synthetic", "method": "unconstrained", "seed": 0, "config_id": "c0",
         "status": "ok"}]


def _store(s3, prefix="r"):
    return ResultStore(s3.uri(s3.bucket(), prefix))


def test_a_write_is_retried_while_the_store_refuses_connections_and_lands_once(s3):
    bucket = s3.bucket()
    gate = Gate(s3.port)
    store = ResultStore(f"s3://{bucket}/r?endpoint_override=127.0.0.1:{gate.port}&scheme=http")
    gate.close()  # as if the server were down: connection refused
    threading.Timer(3.0, gate.open).start()
    t0 = time.monotonic()
    path = store.write_pack(ROWS, "synthetic", "unconstrained", 0, "p0")
    assert time.monotonic() - t0 >= 2.5  # it really waited for the store to come back
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == 1 and store.pack_files() == [path]


def test_a_request_to_a_stalled_store_waits_for_it(s3):
    store = _store(s3)
    s3.pause()  # SIGSTOP: connections accepted, never answered
    threading.Timer(3.0, s3.resume).start()
    store.checkpoint("p0").write(b"state")
    assert store.checkpoint("p0").read() == b"state"


def test_an_unreachable_store_stops_with_one_line_naming_the_endpoint_within_the_budget(s3, monkeypatch):
    port = free_port()  # nothing listens there
    store = ResultStore(f"s3://nowhere/r?endpoint_override=127.0.0.1:{port}&scheme=http")
    monkeypatch.setenv("FAIRDP_STORE_RETRY_S", "2")
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        store.checkpoint("p0").write(b"state")
    waited = time.monotonic() - t0
    message = str(err.value)
    assert f"http://127.0.0.1:{port}" in message and "\n" not in message and "resume" in message
    assert 1.0 <= waited <= 6.0, waited  # retried with back-off, for about the budget and no longer


def test_errors_a_retry_cannot_cure_are_not_retried(s3, monkeypatch):
    store = ResultStore(s3.uri("no-such-bucket-fairdp", "r"))
    monkeypatch.setenv("FAIRDP_STORE_RETRY_S", "60")
    t0 = time.monotonic()
    with pytest.raises(OSError):
        store.write_pack(ROWS, "synthetic", "unconstrained", 0, "p0")
    assert time.monotonic() - t0 < 10


def _lease_of(store, command="run", ttl=60.0):
    return S3Lease(_lease._client(store), store.location, store.root, command, ttl)


def test_the_lease_admits_one_writer_and_is_given_back(s3):
    store = _store(s3)
    with object_store_lease(store, "run") as first:
        with pytest.raises(InputError, match=f"in use by fairdp run on .*pid {os.getpid()}.*{LEASE_NAME}"):
            _lease_of(store, "search").acquire()
        assert first.holder()[0]["token"] == first.me["token"]
    assert first.holder() is None  # released: the next run takes it at once
    with object_store_lease(store, "run"):
        pass


def test_a_lease_not_renewed_for_its_time_to_live_is_taken_over_once(s3, caplog):
    store = _store(s3)
    gone = _lease_of(store, ttl=2.0)
    gone.me["host"] = "another-host"  # a driver elsewhere that stopped renewing (a SIGKILL)
    gone.acquire()
    with pytest.raises(InputError, match="another-host"):
        _lease_of(store).acquire()  # still within its time to live
    time.sleep(3.2)  # Last-Modified has a one-second resolution
    racers = [_lease_of(store) for _ in range(4)]
    won, errors = [], []

    def take(lease):
        try:
            lease.acquire()
            won.append(lease)
        except InputError as e:
            errors.append(e)

    threads = [threading.Thread(target=take, args=(r,)) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(errors) == 3  # If-Match: exactly one take-over wins
    assert won[0].holder()[0]["token"] == won[0].me["token"]
    assert "took over the lease of fairdp run on another-host" in caplog.text  # a warning of fairdp's logger


def test_a_driver_that_lost_its_lease_stops(s3, monkeypatch):
    store = _store(s3)
    stalled = _lease_of(store, ttl=1.5)
    stalled.acquire()
    time.sleep(2.6)
    _lease_of(store).acquire()  # another driver took over the expired lease
    interrupted = threading.Event()
    monkeypatch.setattr(_lease._thread, "interrupt_main", interrupted.set)
    stalled._renew_loop()  # its first renewal finds the lease replaced
    assert stalled.lost.is_set() and interrupted.is_set()


def test_a_holder_of_this_host_that_is_gone_is_waited_out(s3, caplog):
    store = _store(s3)
    dead = _lease_of(store, ttl=2.0)
    dead.me["pid"] = 2**22 + 12345  # no such process
    dead.acquire()
    t0 = time.monotonic()
    _lease_of(store).acquire()
    assert time.monotonic() - t0 >= 1.0
    assert "which no longer runs, expires in" in caplog.text


STUDY = {"name": "s3-run", "dataset": {"name": "synthetic", "rows": 300, "features": 6}, "seeds": [0],
         "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
         "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [1.0]}}}, "pack_size": 1}


def test_a_run_into_s3_stores_every_row_once_and_a_second_driver_is_refused(s3, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    uri = s3.uri(s3.bucket(), "results")
    env = dict(CREDENTIALS)
    run = run_cli("run", str(study), "--results", uri, "--executor", "local", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    df, corrupt = ResultStore(uri).read()
    assert corrupt == [] and len(df) == 3 and not df.duplicated(["method", "seed", "config_id"]).any()
    assert ResultStore(uri).checkpoint_ids() == []  # finished packs leave no checkpoint behind
    # a driver holding the lease elsewhere: the second is refused before it writes anything
    bucket, prefix = uri[len("s3://"):].split("?")[0].split("/", 1)
    other = {"token": "x", "pid": 1, "host": "head-node", "command": "run", "since": "now", "ttl_s": 600}
    s3.client().put_object(Bucket=bucket, Key=f"{prefix}/{LEASE_NAME}", Body=json.dumps(other).encode())
    before = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"])
    again = run_main("run", str(study), "--results", uri, "--executor", "local", "--seeds", "1")  # s3: credentials set
    assert_input_error(again, uri, "head-node")
    after = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert after == before
