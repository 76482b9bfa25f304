import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]

# Studies here on a few hundred synthetic rows set evaluate.min_group_count: 1, the plain
# definition: their groups hold fewer than the default 30 positives (synthetic 1,000 rows: 29 in
# a valid group), so every gap, what those tests check, would otherwise be NaN.

# Ray lowers its workers to nice 15. Beside the other xdist workers' training (nice 0, one
# scheduling group) an embedded Ray's trials then got ~3% of a core: the tiny study took 7.5
# min beside two busy loops, 88 s with the workers at nice 0. Every Ray this suite starts
# (embedded, `ray start` on the namespace nodes) inherits this.
os.environ.setdefault("RAY_worker_niceness", "0")
# and the `ray start` nodes of the cluster tests prestart no idle workers, as fairdp's embedded
# Ray does not (fairdp.study.ray._ray): 33 of them cost the slow set 73 s of CPU
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


def pytest_collection_modifyitems(items):
    """Tests in an ``xdist_group`` first: under ``--dist loadgroup`` a group runs whole on one
    worker, and the groups are the longest units (the namespace clusters; a module whose
    shared runs one worker computes once), so the ungrouped tests fill in around them instead
    of one worker finishing a late group alone."""
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


@pytest.fixture(scope="session", autouse=True)
def fresh_data_dir(tmp_path_factory):
    """One empty dataset cache per test session, so the fetched datasets are fetched for real.

    Set FAIRDP_TEST_REUSE_CACHE=1 to keep the developer's cache instead (faster reruns).
    """
    if os.environ.get("FAIRDP_TEST_REUSE_CACHE") == "1":
        yield Path(os.environ.get("FAIRDP_DATA_DIR", ""))
        return
    path = tmp_path_factory.mktemp("fairdp-data")
    old = os.environ.get("FAIRDP_DATA_DIR")
    os.environ["FAIRDP_DATA_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("FAIRDP_DATA_DIR", None)
    else:
        os.environ["FAIRDP_DATA_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Train and compute in-process on one thread, as a pack does with its one CPU
    (``cpus_per_trial``): torch, and numpy's and scikit-learn's BLAS (OpenBLAS) and OpenMP pools.

    On 2 cores with another job running, their threads spin-wait for each other: a 2000-step
    torch training loop took 32 s on 2 threads beside a busy loop per core, against 0.3 s on one,
    and scikit-learn's MLP probe (FEDERATE's protocol, 2,000 rows) 90-180 s instead of 5 s. Set
    FAIRDP_TEST_TORCH_THREADS to test with more.
    """
    import scipy.linalg  # noqa: F401 - load the pools first: a limit binds only those loaded
    import sklearn.utils._openmp_helpers  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    threads = int(os.environ.get("FAIRDP_TEST_TORCH_THREADS", "1"))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    with threadpool_limits(threads):
        yield
    torch.set_num_threads(before)


_REFUSE = """import sys
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {modules!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, _Refuse())
"""


def cpu_has_native_bf16() -> bool:
    """Read here, apart from ``fairdp.engine._settings.native_bf16``: whether the kernel lists a bf16 matmul
    extension (x86 AVX512-BF16 or AMX-BF16, Arm BF16) among this CPU's flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    words = set(text.split())
    return bool(words & {"avx512_bf16", "amx_bf16"}) or any(
        line.startswith("Features") and " bf16 " in f" {line.split(':', 1)[1]} " for line in text.splitlines())


def default_cpu_precision() -> str:
    """The precision a study with no ``train.precision`` and no stored rows trains in on this CPU."""
    return "bf16" if cpu_has_native_bf16() else "float32"


def env_without_ray(tmp_path: Path, modules: tuple[str, ...] = ("ray", "optuna")) -> dict:
    """The environment of a Python that cannot import ``modules`` (default Ray and Optuna: a
    ``sitecustomize`` that refuses them): what a GPU box without Ray, or a resume that must not
    start Ray, sees."""
    folder = tmp_path / ("no-" + "-".join(modules))
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_REFUSE.format(modules=tuple(modules)))
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd=REPO) -> subprocess.CompletedProcess:
    """Run ``python -m fairdp ARGS`` as a user would, capturing its output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fairdp", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout,
    )


def start_driver(*args: str) -> subprocess.Popen:
    """``python -m fairdp ARGS`` started in a session of its own, so that its process group is
    the run's (a test kills it whole), on an embedded Ray (RAY_ADDRESS unset), output discarded."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "fairdp", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is alive."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def assert_input_error(proc: subprocess.CompletedProcess, *names: str) -> str:
    """Exit status 2 and one line on stderr (after any progress lines) naming every ``names``."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("fairdp: error:")]
    assert len(errors) == 1, proc.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol server (moto's server mode) on loopback for the whole session;
    tests take a fresh bucket each (``s3`` fixture)."""
    from tests.s3server import S3Server, available

    reason = available()
    if reason:
        pytest.skip(reason)
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server with its credentials in this test's environment."""
    from tests.s3server import CREDENTIALS

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    return s3_server


def whole_report(out: Path, fmt: str = "md") -> str:
    """A report folder's text as one document: its first page, then every page under pages/ in
    the order the first page links them (what a reader who opens every link reads)."""
    out = Path(out)
    first = (out / f"report.{fmt}").read_text(encoding="utf-8")
    targets = re.findall(r'\(pages/([^)]+)\.md\)' if fmt == "md" else r'href="pages/([^"]+)\.html"', first)
    pages = [(out / "pages" / f"{t}.{fmt}").read_text(encoding="utf-8") for t in dict.fromkeys(targets)]
    return "\n".join([first, *pages])


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Markdown tables of ``text``: each a list of rows (header first, separator dropped) of cells."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def run_main(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    """``fairdp ARGS`` through ``fairdp.cli.main`` in this process (what ``python -m fairdp``
    calls), its output captured, in ``cwd``: for refusals, and local runs that need no process
    of their own, which a subprocess would spend seconds importing torch for (a refusal itself
    takes milliseconds). Embedded Ray runs stay in processes of their own (``run_cli``), and
    each command keeps a test through ``run_cli``, so the entry point itself is run."""
    import contextlib
    import io

    from fairdp.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()  # contextlib.chdir is Python 3.11's; fairdp supports 3.10
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's own refusals
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["fairdp", *args], code, out.getvalue(), err.getvalue())


def resolve_dotted(dotted: str):
    """The module or object a dotted path (``fairdp.study.run_study``) names, or None."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
        return obj
    return None


def confusion_text(draw) -> str | None:
    """A stored ``test_confusion`` as fairdp writes it, or as a hand-edited file might hold it:
    (G, C, C) counts (zeros included, ints or floats, spaced or not), another shape, text that
    is not numbers, or nothing."""
    kind = draw(st.sampled_from(["gcc", "gcc", "gcc", "2d", "ragged", "words", "none", "none", "nan"]))
    if kind == "none":
        return None
    if kind == "words":
        return draw(st.sampled_from(["", "[]", "[[[a,b],[c,d]]]", "[[[1,],[2,3]]]", "[[[]]]"]))
    g, c = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    counts = np.array(draw(st.lists(st.integers(0, 50), min_size=g * c * c, max_size=g * c * c)), dtype=float)
    counts = counts.reshape(g, c, c)
    if kind == "nan":
        counts[0, 0, 0] = np.nan
    value = counts.tolist() if draw(st.booleans()) else counts.astype(int).tolist() if kind != "nan" else counts.tolist()
    if kind == "2d":
        value = value[0]
    if kind == "ragged":
        value[0][0] = value[0][0] + [1]
    return json.dumps(value, separators=(",", ":") if draw(st.booleans()) else (", ", ": "))


def counts_text(y_pred: np.ndarray, y: np.ndarray, s: np.ndarray, n_classes: int = 2) -> str:
    """A split's per-group confusion counts (group, true label, predicted label) of two groups,
    as rows store them (``test_confusion``)."""
    from fairdp.fairness import confusion

    return json.dumps(confusion(y, y_pred, s, n_classes=n_classes, n_groups=2).tolist())
