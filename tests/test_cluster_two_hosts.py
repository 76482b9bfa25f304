"""A real two-host Ray cluster on this machine, each host a network namespace
(``tests/netns.py``), token authentication on: a small study runs from the head's
namespace with ``fairdp run --address``, the results are complete, and packs that ran at
the same time (the driver's progress trace says when each ran) ran on both nodes. The fault
tests (``test_cluster_faults.py``) use the same cluster with three hosts."""

import json
import sys

import pytest
import yaml

from fairdp.study import ResultStore
from tests.conftest import REPO, default_cpu_precision
from tests.netns import NETNS_REASON, Cluster, netns_usable, packs_at_once

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("netns"),  # with --dist loadgroup: one cluster at a time
              pytest.mark.skipif(not netns_usable(), reason=NETNS_REASON)]


def test_a_study_runs_on_both_hosts_of_a_two_node_cluster(tmp_path):
    study = tmp_path / "two.yaml"
    study.write_text(yaml.safe_dump({
        "name": "two-hosts",
        "dataset": {"name": "synthetic", "rows": 2000, "features": 8},
        "seeds": [0, 1, 2, 3],
        "train": {"epochs": 4, "batch_size": 200},  # packs of a second or two: two usually run at once
        "evaluate": {"leakage": False, "mdl": False},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}},
        "pack_size": 2,
    }))
    results = tmp_path / "results"
    trace = tmp_path / "progress-trace.json"
    with Cluster(tmp_path, workers=1, head_cpus=1, port=6390, net=213) as cluster:
        run = cluster.popen(cluster.head, [sys.executable, "-m", "fairdp", "run", str(study), "--results",
                                           str(results), "--address", cluster.address], "driver.out", cwd=REPO,
                            env={**cluster.env, "FAIRDP_PROGRESS_TRACE": str(trace)})
        assert run.wait(timeout=600) == 0, (cluster.logs / "driver.out").read_text()[-3000:]
        nodes = {cluster.head_ip, *cluster.worker_ips}
    df, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(df) == 4 * 5
    assert not df.duplicated(["method", "seed", "config_id"]).any() and (df["status"] == "ok").all()
    assert set(df["node"]) <= nodes, df["node"].value_counts()
    # Ray places the packs; a host has one CPU, a pack takes one: two packs running at once ran on
    # two hosts, and each row must name its own. Two at once is Ray's choice, not fairdp's (on a
    # loaded machine one host may finish every pack before the other's worker has started)
    at_once = packs_at_once(json.loads(trace.read_text())["events"])
    assert at_once <= 2, at_once
    if at_once == 2:
        assert set(df["node"]) == nodes, df["node"].value_counts()
    print(f"\nTWO HOSTS: at most {at_once} packs at once, rows per host {dict(df['node'].value_counts())}")
    # no train.precision: the driver connects before it chooses, asks both nodes' CPUs, and says
    # what it chose and why in its settings line
    out = (cluster.logs / "driver.out").read_text().replace("tf32 on CUDA, float32 on a CPU", "float32")
    assert f"precision {default_cpu_precision()} (" in out, out[-3000:]
    assert "worker's CPU" in out and "bf16 if the CPU of every node" not in out, out[-3000:]
    assert (df.loc[df["method"] == "federate", "precision"] == default_cpu_precision()).all()
