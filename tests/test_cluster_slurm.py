"""The SLURM recipe (cluster/slurm/fairdp.sbatch): its shell is valid and clean
(``bash -n``, shellcheck where installed), every ``ray start`` flag it passes exists in the
installed Ray, and a simulated two-node allocation runs a study with it: two network
namespaces play the nodes, the test sets SLURM's environment variables, and stand-ins for
``scontrol show hostnames`` and ``srun -w NODE`` (run the command inside that node's
namespace) take the place of SLURM's own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import yaml

from fairdp.study import ResultStore
from tests.conftest import REPO
from tests.netns import NETNS_REASON, RAY, Cluster, netns_usable, packs_at_once

SCRIPT = REPO / "cluster" / "slurm" / "fairdp.sbatch"


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="needs shellcheck (apt-get install shellcheck; make test-tools does it as root)")
def test_shellcheck_finds_nothing():
    out = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def _ray_start_flags(text: str) -> set[str]:
    """The flags of the script's ``ray start`` lines (continuations joined) and of the port
    array they expand."""
    joined = text.replace("\\\n", " ")
    lines = [ln for ln in joined.splitlines() if '"$ray" start' in ln]
    ports = re.search(r"^ports=\((.*?)\)$", joined, flags=re.S | re.M)
    assert lines and ports, "the script no longer starts Ray the way this test reads it"
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", " ".join(lines) + " " + ports.group(1)))


def test_every_ray_start_flag_exists_in_the_installed_ray():
    text = SCRIPT.read_text()
    flags = _ray_start_flags(text)
    help_text = subprocess.run([RAY, "start", "--help"], capture_output=True, text=True, check=True).stdout
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", help_text, flags=re.M))
    assert {"--head", "--block", "--port", "--address", "--node-manager-port"} <= flags
    assert flags - {"--nodes", "--ntasks"} <= known, sorted(flags - {"--nodes", "--ntasks"} - known)
    assert "--dashboard-host=127.0.0.1" in text and "RAY_AUTH_MODE=token" in text


SCONTROL = """#!{python}
# stand-in for `scontrol show hostnames LIST`: the simulated allocation's node names
import os, sys
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
print("\\n".join(n.split("=")[0] for n in os.environ["FAKE_SLURM_NODES"].split(",")))
"""
SRUN = """#!{python}
# stand-in for `srun --nodes=1 --ntasks=1 -w NODE CMD...`: CMD inside NODE's network namespace
import os, sys
args = sys.argv[1:]
node = None
while args and args[0].startswith("-"):
    flag = args.pop(0)
    if flag == "-w":
        node = args.pop(0)
nodes = dict(n.split("=") for n in os.environ["FAKE_SLURM_NODES"].split(","))
os.execvp("ip", ["ip", "netns", "exec", nodes[node], *args])
"""


@pytest.mark.slow
@pytest.mark.xdist_group("netns")  # with --dist loadgroup: one namespace cluster at a time
@pytest.mark.skipif(not netns_usable(), reason=NETNS_REASON)
def test_a_simulated_two_node_allocation_runs_a_study(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("scontrol", SCONTROL), ("srun", SRUN)):
        (bin_dir / name).write_text(textwrap.dedent(body.format(python=sys.executable)))
        (bin_dir / name).chmod(0o755)
    study = tmp_path / "slurm.yaml"
    study.write_text(yaml.safe_dump({
        "name": "slurm", "dataset": {"name": "synthetic", "rows": 800, "features": 8}, "seeds": [0, 1, 2, 3],
        "train": {"epochs": 2, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}},
        "pack_size": 2,
    }))
    results = tmp_path / "results"
    trace = tmp_path / "progress-trace.json"
    network = Cluster(tmp_path, workers=1, net=215)
    try:
        network._network()  # the namespaces and their link only: the script starts Ray itself
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
        for key in ("RAY_worker_niceness", "RAY_prestart_worker_first_driver"):  # conftest's, for the suite's load
            env[key] = os.environ[key]
        env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", FAIRDP_VENV=str(REPO / ".venv"),
                   SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="node[0-1]", SLURM_NNODES="2", SLURM_CPUS_PER_TASK="1",
                   FAKE_SLURM_NODES=f"node0={network.head},node1={network.workers[0]}",
                   FAIRDP_HEAD_IP=network.head_ip, PYTHONUNBUFFERED="1", FAIRDP_PROGRESS_TRACE=str(trace))
        # the batch script runs on the first node, as sbatch runs it
        run = subprocess.run(["ip", "netns", "exec", network.head, "bash", str(SCRIPT), str(study), str(results)],
                             env=env, cwd=REPO, capture_output=True, text=True, timeout=600, start_new_session=True)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
        assert "2 nodes (node0 node1)" in run.stdout
    finally:
        network.__exit__()
    df, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(df) == 4 * 5 and not df.duplicated(["method", "seed", "config_id"]).any()
    nodes = {network.head_ip, network.worker_ips[0]}
    assert set(df["node"]) <= nodes, df["node"].value_counts()
    # one CPU a node, one a pack: two packs at once (the driver's progress trace) ran on both
    # nodes; whether two ran at once is Ray's placement (the worker node may join late), not fairdp's
    if packs_at_once(json.loads(trace.read_text())["events"]) == 2:
        assert set(df["node"]) == nodes, df["node"].value_counts()
