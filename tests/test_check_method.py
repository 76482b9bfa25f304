"""``fairdp check-method MODULE``: fairdp's method contract run on a plugin's methods."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO, run_cli, run_main

BROKEN = '''
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gap_reg_base", {base!r})
base = importlib.util.module_from_spec(spec)
sys.modules["gap_reg_base"] = base
spec.loader.exec_module(base)
from fairdp.methods import register_method
from fairdp.privacy import Guarantee

@register_method
class Unlabelled(base.GapReg):
    """Reports a finite eps without saying what it protects."""
    name = "gap_reg_unlabelled"

    def privacy(self, config, run):
        return Guarantee(1.0, 0.0)
'''


def test_a_module_that_registers_nothing_or_does_not_import_is_exit_2(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    proc = run_main("check-method", str(empty))
    assert proc.returncode == 2 and "registers no method" in proc.stderr
    # the one real CLI start of `check-method` in the fast set
    proc = run_cli("check-method", str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and "missing.py" in proc.stderr


@pytest.mark.slow
def test_the_example_plugin_passes_and_a_method_breaking_the_contract_fails(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN.format(base=str(REPO / "examples" / "gap_reg.py")))
    # the two checks at once, each on one thread (two torch thread pools on two cores spin-wait
    # for each other: tests/conftest.py), each as a user runs it
    with ThreadPoolExecutor(2) as pool:
        good, bad = pool.map(lambda module: run_cli("check-method", module, env={"OMP_NUM_THREADS": "1"}),
                             [str(REPO / "examples" / "gap_reg.py"), str(broken)])
    assert good.returncode == 0, good.stdout[-3000:]
    assert good.stdout.count("PASSED") == 6 and "[gap_reg]" in good.stdout
    assert bad.returncode == 1
    assert "FAILED" in bad.stdout and "test_a_private_method_says_what_its_eps_protects[gap_reg_unlabelled]" in bad.stdout
    assert "test_bad_configs_are_refused_naming_the_key[gap_reg_unlabelled] PASSED" in bad.stdout
