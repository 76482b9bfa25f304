"""The suite's own scheduling: under ``--dist loadgroup`` (make test, make test-slow) the tests
of one ``xdist_group`` run on one worker, one after another. The namespace clusters rely on it
(two at once overload the machine their timings assume), and the modules grouped for their
shared runs train those once. pytest 9.2 with pytest-xdist 3.8 silently stopped grouping
(pytest-dev/pytest-xdist#1386): this fails if an upgrade does that again."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("xdist")

GROUPED = textwrap.dedent("""
    import os
    import pytest

    pytestmark = pytest.mark.xdist_group("one")

    @pytest.fixture(scope="module")
    def shared():
        with open(os.environ["SETUPS"], "a") as f:
            f.write(f"{os.getpid()}\\n")

    @pytest.mark.parametrize("i", range(8))
    def test_grouped(shared, i):
        pass
""")
UNGROUPED = textwrap.dedent("""
    import pytest

    @pytest.mark.parametrize("i", range(8))
    def test_alone(i):
        pass
""")


@pytest.mark.slow  # a pytest run of its own with two workers (16 s here); make test-slow is grouped too
def test_a_group_runs_on_one_worker_and_its_module_fixture_once(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_alone.py").write_text(UNGROUPED)
    setups = tmp_path / "setups.txt"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", "-v", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "SETUPS": str(setups)}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    workers = {line.split()[0] for line in proc.stdout.splitlines() if "test_grouped" in line and "PASSED" in line}
    assert len(workers) == 1, proc.stdout  # e.g. {"[gw0]"}
    assert len(setups.read_text().split()) == 1
