"""The cluster configs in cluster/ are accepted by the tools that read them and keep the cluster closed.

Launcher YAMLs are validated the way `ray up` validates them (Ray's own JSON schema, then
``prepare_config`` + ``validate_config``, all offline); KubeRay manifests against the
fields the ray.io/v1 CRDs require. Every config must have a GPU worker type, token auth on
every node, dashboards on loopback (unless a manifest is listed as a deliberate opt-in),
only real ``ray start`` flags, and fairdp commands that name a study spec. Each checker
returns a list of problems, and the tests at the end feed it broken copies to show that it
catches them.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"
YAMLS = sorted(p for p in CLUSTER.iterdir() if p.suffix in (".yaml", ".yml"))
EXPECTED = {"aws.yaml", "gcp.yaml", "onprem.yaml", "kuberay-raycluster.yaml", "kuberay-rayjob.yaml"}
RAY_SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# Manifests whose head dashboard listens beyond loopback on purpose. KubeRay's operator polls
# a RayJob's status, and its submitter Pod calls the Jobs API, through the head Service.
DASHBOARD_OPT_IN = {"kuberay-rayjob.yaml"}
STUDY_ARG = re.compile(r"(?:^|/)studies/[A-Za-z0-9_.-]+\.ya?ml$")
FAIRDP_OPTIONS = {
    "run": {"--results", "--address", "--seeds", "--epochs", "--repair"},
    "search": {"--results", "--address", "--trials", "--mode"},
}
FAIRDP_FLAGS = {"--repair"}  # options that take no value


def load(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def is_kuberay(doc) -> bool:
    return isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ray.io/")


def _classify() -> tuple[list[Path], list[Path]]:
    launcher, kuberay = [], []
    for path in YAMLS:
        try:
            docs = load(path)
        except yaml.YAMLError:
            continue  # test_parses reports it
        (kuberay if docs and all(is_kuberay(d) for d in docs) else launcher).append(path)
    return launcher, kuberay


LAUNCHER, KUBERAY = _classify()


def ids(paths):
    return [p.name for p in paths]


def strings(obj):
    """Every string anywhere in a parsed YAML document."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def commands(text: str) -> list[list[str]]:
    """Simple shell commands in ``text`` (split at ; && || | and newlines), as argv lists."""
    out = []
    for segment in re.split(r";|&&|\|\||\||\n", text.replace("\\\n", " ")):
        try:
            argv = shlex.split(segment, comments=True)
        except ValueError:
            continue
        while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", argv[0]):
            argv = argv[1:]  # leading VAR=value assignments
        if argv and argv[0] == "export":
            continue
        if argv:
            out.append(argv)
        if "--" in argv:  # `ray job submit ... -- fairdp run ...`
            out.append(argv[argv.index("--") + 1:])
    return out


def ray_start_calls(text: str) -> list[list[str]]:
    return [argv[2:] for argv in commands(text) if argv[:2] == ["ray", "start"]]


def option(args: list[str], name: str) -> str | None:
    """The value of ``--name=value`` / ``--name value`` in args, '' for a bare flag, None if absent."""
    for i, a in enumerate(args):
        if a == name:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            return "" if nxt.startswith("-") else nxt
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def ray_start_options() -> set[str]:
    """The options `ray start --help` lists (hidden ones left out)."""
    from ray.scripts.scripts import start

    return {o for p in start.params if not getattr(p, "hidden", False) for o in p.opts if o.startswith("--")}


def launcher_commands(cfg: dict) -> list[str]:
    keys = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
            "head_start_ray_commands", "worker_start_ray_commands")
    out = [c for k in keys for c in cfg.get(k) or []]
    for node in (cfg.get("available_node_types") or {}).values():
        for k in ("initialization_commands", "worker_setup_commands"):
            out += node.get(k) or []
    return out


# ---------------------------------------------------------------- checkers (lists of problems)


def schema_problems(cfg: dict) -> list[str]:
    schema = json.loads(RAY_SCHEMA.read_text())
    return [f"schema: {'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}"
            for e in jsonschema.Draft7Validator(schema).iter_errors(cfg)]


def launcher_problems(cfg: dict) -> list[str]:
    """What `ray up` would reject, checked offline."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    problems = schema_problems(cfg)
    for key in ("cluster_name", "provider", "max_workers"):
        if key not in cfg:
            problems.append(f"missing {key}")
    provider = cfg.get("provider") or {}
    if not provider.get("type"):
        problems.append("missing provider.type")
    if provider.get("type") == "local":
        # The local provider makes its own single node type; `ray up` aborts if the file declares any.
        for key in ("available_node_types", "head_node_type"):
            if key in cfg:
                problems.append(f"{key} is not supported for provider local")
        if not provider.get("head_ip") or not provider.get("worker_ips"):
            problems.append("provider local needs head_ip and worker_ips")
    else:
        types = cfg.get("available_node_types") or {}
        if not types:
            problems.append("no available_node_types")
        for name, node in types.items():
            for key in ("resources", "node_config"):
                if not isinstance(node.get(key), dict):
                    problems.append(f"node type {name}: missing {key}")
        if cfg.get("head_node_type") not in types:
            problems.append(f"head_node_type {cfg.get('head_node_type')!r} is not among available_node_types")
    if not problems:
        try:
            validate_config(prepare_config(copy.deepcopy(cfg)))
        except Exception as e:  # ray up's own verdict
            problems.append(f"ray up would reject it: {type(e).__name__}: {e}")
    return problems


def launcher_gpu_problems(cfg: dict) -> list[str]:
    provider = cfg["provider"]["type"]
    if provider == "local":
        # One node type: each machine's `ray start` detects its GPUs; setup must install CUDA torch there.
        setup = " ".join(launcher_commands(cfg))
        if "nvidia-smi" not in setup or "torch" not in setup:
            return ["provider local: setup_commands do not install a CUDA torch on GPU machines"]
        return []
    types = cfg.get("available_node_types") or {}
    gpu = {n: t for n, t in types.items()
           if n != cfg.get("head_node_type") and (t.get("resources") or {}).get("GPU", 0) >= 1
           and t.get("max_workers", 1) >= 1}
    if not gpu:
        return ["no worker node type declares GPU resources"]
    problems = []
    for name, node in gpu.items():
        nc = node.get("node_config") or {}
        if provider == "aws" and not re.match(r"(g|p)\d", str(nc.get("InstanceType", ""))):
            problems.append(f"{name}: InstanceType {nc.get('InstanceType')!r} has no NVIDIA GPU")
        if provider == "gcp":
            if not nc.get("guestAccelerators"):
                problems.append(f"{name}: no guestAccelerators")
            if not any(s.get("onHostMaintenance") == "TERMINATE" for s in nc.get("scheduling") or []):
                problems.append(f"{name}: GPU instances need scheduling onHostMaintenance TERMINATE")
    return problems


def launcher_start_problems(cfg: dict) -> list[str]:
    """Token auth on every node, the dashboard on loopback, the token file on every node."""
    problems = []
    heads = [a for c in cfg.get("head_start_ray_commands") or [] for a in ray_start_calls(c)]
    workers = [a for c in cfg.get("worker_start_ray_commands") or [] for a in ray_start_calls(c)]
    if len(heads) != 1 or option(heads[0], "--head") is None:
        problems.append("head_start_ray_commands must run `ray start --head` once")
    if len(workers) != 1 or option(workers[0], "--address") != "$RAY_HEAD_IP:6379":
        problems.append("worker_start_ray_commands must run `ray start --address=$RAY_HEAD_IP:6379` once")
    for args in heads:
        if option(args, "--dashboard-host") not in LOOPBACK:
            problems.append(f"head dashboard-host {option(args, '--dashboard-host')!r} is not loopback")
    for cmd in launcher_commands(cfg):
        for args in ray_start_calls(cmd):
            host = option(args, "--dashboard-host")
            if host is not None and host not in LOOPBACK:
                problems.append(f"dashboard bound to {host}: {cmd!r}")
        if ray_start_calls(cmd) and not re.search(r"\bRAY_AUTH_MODE=token\b.*\bray start\b", cmd, re.S):
            problems.append(f"ray start without RAY_AUTH_MODE=token: {cmd!r}")
    mounts = cfg.get("file_mounts") or {}
    if mounts.get("~/.ray/auth_token") != "~/.ray/auth_token":
        problems.append("file_mounts does not copy ~/.ray/auth_token to the nodes")
    return problems


def ray_start_flag_problems(text: str) -> list[str]:
    known = ray_start_options()
    problems = []
    for args in ray_start_calls(text):
        for a in args:
            if a.startswith("--") and a.split("=", 1)[0] not in known:
                problems.append(f"ray start has no option {a.split('=', 1)[0]}")
    return problems


def fairdp_problems(text: str) -> list[str]:
    """Every `fairdp run|search` names a study spec studies/<name>.yaml and only real options."""
    problems = []
    for argv in commands(text):
        if not argv or Path(argv[0]).name != "fairdp":
            continue
        if len(argv) < 2 or argv[1] not in FAIRDP_OPTIONS:
            continue  # fairdp data ..., fairdp analyze ...
        sub, rest, positional = argv[1], argv[2:], []
        i = 0
        while i < len(rest):
            a = rest[i]
            if a.startswith("--"):
                name = a.split("=", 1)[0]
                if name not in FAIRDP_OPTIONS[sub]:
                    problems.append(f"fairdp {sub} has no option {name}")
                if "=" not in a and name not in FAIRDP_FLAGS:
                    i += 1
            else:
                positional.append(a)
            i += 1
        if len(positional) != 1 or not STUDY_ARG.search(positional[0]):
            problems.append(f"fairdp {sub} does not name one studies/<name>.yaml spec: {' '.join(argv)!r}")
    return problems


def cluster_specs(doc: dict) -> list[tuple[str, dict]]:
    if doc.get("kind") == "RayCluster":
        return [("spec", doc.get("spec") or {})]
    if doc.get("kind") == "RayJob":
        return [("spec.rayClusterSpec", (doc.get("spec") or {}).get("rayClusterSpec") or {})]
    return []


def _containers(template) -> list:
    return (((template or {}).get("spec") or {}).get("containers")) or []


def kuberay_problems(doc: dict) -> list[str]:
    """The fields the ray.io/v1 CRDs require, plus what fairdp needs from them."""
    problems = []
    if doc.get("apiVersion") != "ray.io/v1":
        problems.append(f"apiVersion {doc.get('apiVersion')!r} is not ray.io/v1")
    if doc.get("kind") not in ("RayCluster", "RayJob"):
        problems.append(f"kind {doc.get('kind')!r} is not RayCluster or RayJob")
    if not (doc.get("metadata") or {}).get("name"):
        problems.append("metadata.name missing")
    if doc.get("kind") == "RayJob":
        spec = doc.get("spec") or {}
        if not isinstance(spec.get("entrypoint"), str) or not spec["entrypoint"].strip():
            problems.append("RayJob spec.entrypoint missing")
        if not isinstance(spec.get("rayClusterSpec"), dict):
            problems.append("RayJob spec.rayClusterSpec missing")
    for where, cs in cluster_specs(doc):
        if cs.get("rayVersion") != ray.__version__:
            problems.append(f"{where}.rayVersion {cs.get('rayVersion')!r} is not the Ray in use ({ray.__version__})")
        if (cs.get("authOptions") or {}).get("mode") != "token":
            problems.append(f"{where}.authOptions.mode is not token")
        head = cs.get("headGroupSpec")
        if not isinstance(head, dict):
            problems.append(f"{where}.headGroupSpec missing")
            head = {}
        groups = [("headGroupSpec", head)]
        workers = cs.get("workerGroupSpecs")
        if not isinstance(workers, list) or not workers:
            problems.append(f"{where}.workerGroupSpecs missing")
            workers = []
        names = [w.get("groupName") for w in workers]
        if len(set(names)) != len(names):
            problems.append(f"{where}: duplicate groupName")
        for w in workers:
            name = w.get("groupName")
            if not name:
                problems.append(f"{where}: a worker group has no groupName")
            counts = [w.get(k) for k in ("minReplicas", "replicas", "maxReplicas")]
            if not all(isinstance(c, int) for c in counts):
                problems.append(f"{where}.{name}: replicas, minReplicas and maxReplicas must be integers")
            elif not counts[0] <= counts[1] <= counts[2]:
                problems.append(f"{where}.{name}: needs minReplicas <= replicas <= maxReplicas")
            groups.append((f"workerGroupSpecs.{name}", w))
        known = ray_start_options()
        for gname, g in groups:
            params = g.get("rayStartParams")
            if not isinstance(params, dict):
                problems.append(f"{where}.{gname}.rayStartParams missing")
                params = {}
            for key, value in params.items():
                if "--" + key not in known:
                    problems.append(f"{where}.{gname}.rayStartParams: ray start has no option --{key}")
                if not isinstance(value, str):
                    problems.append(f"{where}.{gname}.rayStartParams.{key} must be a string")
            containers = _containers(g.get("template"))
            if not containers:
                problems.append(f"{where}.{gname}.template.spec.containers missing")
            for c in containers:
                if not c.get("name") or not c.get("image"):
                    problems.append(f"{where}.{gname}: a container lacks name or image")
    return problems


def kuberay_gpu_problems(doc: dict) -> list[str]:
    problems = []
    for where, cs in cluster_specs(doc):
        gpu_groups = [w for w in cs.get("workerGroupSpecs") or []
                      if w.get("maxReplicas", 0) >= 1
                      and any(float(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0)) >= 1
                              for c in _containers(w.get("template")))]
        if not gpu_groups:
            problems.append(f"{where}: no worker group with nvidia.com/gpu limits")
    return problems


def kuberay_dashboard_problems(doc: dict, filename: str) -> list[str]:
    """KubeRay sets dashboard-host 0.0.0.0 when rayStartParams has none, so it must be explicit."""
    problems = []
    for where, cs in cluster_specs(doc):
        host = ((cs.get("headGroupSpec") or {}).get("rayStartParams") or {}).get("dashboard-host")
        if host is None:
            problems.append(f"{where}: no dashboard-host (KubeRay then binds the dashboard to 0.0.0.0)")
        elif host not in LOOPBACK:
            if filename not in DASHBOARD_OPT_IN:
                problems.append(f"{where}: dashboard bound to {host}")
            elif (cs.get("authOptions") or {}).get("mode") != "token":
                problems.append(f"{where}: dashboard bound to {host} without token auth")
    return problems


def readme_code() -> str:
    text = (CLUSTER / "README.md").read_text()
    return "\n".join(re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S))


# ---------------------------------------------------------------- the configs


def test_the_expected_configs_exist():
    assert EXPECTED <= {p.name for p in YAMLS}
    assert (CLUSTER / "README.md").is_file()
    assert {"aws.yaml", "gcp.yaml", "onprem.yaml"} <= set(ids(LAUNCHER))
    assert {"kuberay-raycluster.yaml", "kuberay-rayjob.yaml"} <= set(ids(KUBERAY))


@pytest.mark.parametrize("path", YAMLS, ids=ids(YAMLS))
def test_parses(path):
    docs = load(path)
    assert docs and all(isinstance(d, dict) for d in docs)


@pytest.mark.parametrize("path", LAUNCHER, ids=ids(LAUNCHER))
def test_launcher_config_is_what_ray_up_accepts(path):
    (cfg,) = load(path)
    assert launcher_problems(cfg) == []


@pytest.mark.parametrize("path", LAUNCHER, ids=ids(LAUNCHER))
def test_launcher_config_has_gpu_workers(path):
    (cfg,) = load(path)
    assert launcher_gpu_problems(cfg) == []


@pytest.mark.parametrize("path", LAUNCHER, ids=ids(LAUNCHER))
def test_launcher_nodes_start_with_token_auth_and_a_loopback_dashboard(path):
    (cfg,) = load(path)
    assert launcher_start_problems(cfg) == []


@pytest.mark.parametrize("path", LAUNCHER, ids=ids(LAUNCHER))
def test_launcher_pins_the_ray_in_use(path):
    (cfg,) = load(path)
    pins = re.findall(r"\bray(?:\[[^\]]*\])?==([0-9][^\s\"']*)", " ".join(launcher_commands(cfg)))
    assert pins and set(pins) == {ray.__version__}


@pytest.mark.parametrize("path", KUBERAY, ids=ids(KUBERAY))
def test_kuberay_manifest_has_the_required_fields(path):
    for doc in load(path):
        assert kuberay_problems(doc) == []


@pytest.mark.parametrize("path", KUBERAY, ids=ids(KUBERAY))
def test_kuberay_manifest_has_a_gpu_group(path):
    for doc in load(path):
        assert kuberay_gpu_problems(doc) == []


@pytest.mark.parametrize("path", KUBERAY, ids=ids(KUBERAY))
def test_kuberay_dashboard_is_explicit_and_loopback_unless_opted_in(path):
    for doc in load(path):
        assert kuberay_dashboard_problems(doc, path.name) == []


def test_the_rayjob_runs_a_fairdp_study():
    (job,) = load(CLUSTER / "kuberay-rayjob.yaml")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["fairdp", "run"] and fairdp_problems(job["spec"]["entrypoint"]) == []
    assert option(argv, "--results")


CLOSED = [p for p in [*YAMLS, CLUSTER / "README.md"] if p.name not in DASHBOARD_OPT_IN]


@pytest.mark.parametrize("path", CLOSED, ids=ids(CLOSED))
def test_no_dashboard_on_all_interfaces_outside_the_opt_in(path):
    text = path.read_text()
    assert not re.search(r"dashboard-host[\"']?\s*[=:]\s*[\"']?(0\.0\.0\.0|::)(?![0-9a-f:])", text)


@pytest.mark.parametrize("path", [*YAMLS, CLUSTER / "README.md"], ids=[*ids(YAMLS), "README.md"])
def test_ray_start_flags_exist(path):
    text = readme_code() if path.suffix == ".md" else "\n".join(
        s for d in load(path) for s in strings(d))
    assert ray_start_flag_problems(text) == []


@pytest.mark.parametrize("path", [*YAMLS, CLUSTER / "README.md"], ids=[*ids(YAMLS), "README.md"])
def test_fairdp_commands_name_a_study_spec(path):
    text = readme_code() if path.suffix == ".md" else "\n".join(
        s for d in load(path) for s in strings(d))
    assert fairdp_problems(text) == []


def test_the_token_auth_the_configs_rely_on_is_the_installed_rays():
    """RAY_AUTH_MODE from the environment, `ray get-auth-token`, ~/.ray/auth_token."""
    from ray._private.authentication import authentication_token_setup as setup
    from ray.scripts.scripts import cli

    assert setup.AUTH_MODE_ENV_VAR == "RAY_AUTH_MODE"
    assert setup._get_default_token_path() == Path.home() / ".ray" / "auth_token"
    assert "get-auth-token" in cli.commands
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        assert name in (CLUSTER / "README.md").read_text()


def test_the_image_is_built_on_the_ray_in_use():
    text = (CLUSTER / "Dockerfile").read_text()
    assert f"rayproject/ray:{ray.__version__}-" in text


# ---------------------------------------------------------------- the checkers catch breakage


@pytest.fixture
def aws():
    return load(CLUSTER / "aws.yaml")[0]


@pytest.fixture
def rayjob():
    return load(CLUSTER / "kuberay-rayjob.yaml")[0]


@pytest.fixture
def raycluster():
    return load(CLUSTER / "kuberay-raycluster.yaml")[0]


def test_checker_rejects_unknown_keys_and_a_missing_head_type(aws):
    bad = copy.deepcopy(aws)
    bad["no_such_key"] = 1
    assert any("no_such_key" in p for p in launcher_problems(bad))
    bad = copy.deepcopy(aws)
    bad["head_node_type"] = "nope"
    assert launcher_problems(bad)
    bad = copy.deepcopy(aws)
    bad["available_node_types"]["head"]["resources"] = {"CPU": 0.5}  # the schema wants integers
    assert launcher_problems(bad)


def test_checker_rejects_node_types_on_the_local_provider():
    cfg = load(CLUSTER / "onprem.yaml")[0]
    cfg["available_node_types"] = {"gpu": {"resources": {"GPU": 1}, "node_config": {}}}
    assert launcher_problems(cfg)


def test_checker_rejects_a_config_without_gpu_workers(aws):
    del aws["available_node_types"]["gpu_worker"]
    assert launcher_gpu_problems(aws)


def test_checker_rejects_an_exposed_dashboard_and_missing_auth(aws):
    exposed = copy.deepcopy(aws)
    exposed["head_start_ray_commands"][-1] = exposed["head_start_ray_commands"][-1].replace(
        "--dashboard-host=127.0.0.1", "--dashboard-host=0.0.0.0")
    assert any("0.0.0.0" in p for p in launcher_start_problems(exposed))
    no_auth = copy.deepcopy(aws)
    no_auth["worker_start_ray_commands"][-1] = no_auth["worker_start_ray_commands"][-1].replace(
        "export RAY_AUTH_MODE=token;", "")
    assert any("RAY_AUTH_MODE" in p for p in launcher_start_problems(no_auth))
    no_token = copy.deepcopy(aws)
    del no_token["file_mounts"]["~/.ray/auth_token"]
    assert launcher_start_problems(no_token)


def test_checker_rejects_unknown_ray_start_flags():
    assert ray_start_flag_problems("ray stop; RAY_AUTH_MODE=token ray start --head --dashboard-hostname=x")
    assert ray_start_flag_problems("ray start --address=h:6379 --auth-token=x")
    assert not ray_start_flag_problems("ray start --head --port=6379 --dashboard-host=127.0.0.1")


def test_checker_rejects_fairdp_commands_without_a_study_spec():
    assert fairdp_problems("fairdp run study.yaml --results s3://b/p")
    assert fairdp_problems("fairdp run studies/x.txt")
    assert fairdp_problems("fairdp run studies/x.yaml --bogus 1")
    assert not fairdp_problems("fairdp run /app/studies/x.yaml --results s3://b/p --seeds 0,1")
    assert not fairdp_problems("fairdp search studies/x.yaml --trials 20 --address auto")
    assert fairdp_problems("ray job submit --address http://127.0.0.1:8265 -- fairdp run x.yaml")


def test_checker_rejects_broken_kuberay_manifests(rayjob, raycluster):
    no_host = copy.deepcopy(raycluster)
    del no_host["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"]
    assert kuberay_dashboard_problems(no_host, "kuberay-raycluster.yaml")
    assert kuberay_dashboard_problems(rayjob, "kuberay-raycluster.yaml")  # 0.0.0.0 outside the opt-in
    no_auth = copy.deepcopy(rayjob)
    del no_auth["spec"]["rayClusterSpec"]["authOptions"]
    assert kuberay_dashboard_problems(no_auth, "kuberay-rayjob.yaml") and kuberay_problems(no_auth)
    no_gpu = copy.deepcopy(raycluster)
    no_gpu["spec"]["workerGroupSpecs"] = [g for g in no_gpu["spec"]["workerGroupSpecs"] if g["groupName"] != "gpu"]
    assert kuberay_gpu_problems(no_gpu)
    no_name = copy.deepcopy(raycluster)
    del no_name["spec"]["workerGroupSpecs"][0]["groupName"]
    assert kuberay_problems(no_name)
    no_template = copy.deepcopy(rayjob)
    del no_template["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert kuberay_problems(no_template)
    bad_counts = copy.deepcopy(raycluster)
    bad_counts["spec"]["workerGroupSpecs"][0]["minReplicas"] = 99
    assert kuberay_problems(bad_counts)
