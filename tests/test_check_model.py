"""`fairdp check-model`: what it says of a module that can be packed and of ones that cannot."""

import pytest

from tests.conftest import REPO, assert_input_error, run_cli, run_main


def test_the_example_module_passes_every_check():
    run = run_cli("check-model", str(REPO / "examples" / "models.py") + ":residual_mlp", "--in", "8", "--out", "4",
                  "--set", "width=16", "--set", "blocks=1")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 8 and all(ln.startswith("PASS") for ln in lines)
    assert "residual_mlp(blocks=1, width=16)" in run.stderr


@pytest.mark.parametrize("body, failing", [
    ("nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o))", "FAIL  can be packed: 1 (BatchNorm1d): batch statistics"),
    ("Centred(i, o)", "FAIL  a row's output does not depend on the rest of its batch, in training mode: row 0's output "
                       "depends"),
    ("nn.Linear(i, o + 1)", "FAIL  maps rows to outputs: maps a batch of (6, 5) to (6, 4), not (6, 3)"),
])
def test_a_module_that_cannot_be_trained_fails_naming_why_and_skips_what_depends_on_it(tmp_path, body, failing):
    (tmp_path / "nets.py").write_text(
        "from torch import nn\n\n\n"
        "class Centred(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return super().forward(x - x.mean(0))  # mixes the rows of a batch\n\n\n"
        f"def net(i, o):\n    return {body}\n")
    run = run_main("check-model", "nets.py:net", "--in", "5", "--out", "3", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    failed = [ln for ln in lines if ln.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith(failing), lines
    after = lines[lines.index(failed[0]) + 1:]
    assert after and all(ln.startswith("SKIP") for ln in after)


@pytest.mark.parametrize("args, names", [
    (["missing.py:net", "--in", "3", "--out", "2"], ["FACTORY", "missing.py: no such file"]),
    (["torch.nn:Linear", "--in", "0", "--out", "2"], ["--in", "from 1 to"]),
    (["torch.nn:Linear", "--in", "3", "--out", "2", "--set", "bias"], ["--set", "KEY=VALUE"]),
    (["torch.nn:Linear", "--in", "100000000000", "--out", "2"], ["--in", "from 1 to 16,777,216"]),
    (["torch.nn:Linear", "--in", "1180591620717411303424", "--out", "2"], ["--in", "from 1 to 16,777,216"]),
    (["torch.nn:Linear", "--in", "3", "--out", "2", "--set", "width={"], ["--set width", "cannot parse value"]),
])
def test_bad_input_is_one_line_with_status_2(tmp_path, args, names):
    assert_input_error(run_main("check-model", *args, cwd=tmp_path), *names)


def test_check_model_reads_the_studys_modules_sizes_and_swept_keywords(tmp_path):
    """--spec: each module the study trains once, with its role's sizes from the data and the
    architecture and each swept keyword's value; --role keeps one role's."""
    import shutil

    import yaml

    shutil.copy(REPO / "examples" / "models.py", tmp_path / "models.py")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "chk", "dataset": {"name": "synthetic", "rows": 300, "features": 7}, "seeds": [0],
        "architecture": {"encoder": [16], "models": {
            "encoder": {"factory": "models.py:residual_mlp", "width": 8, "blocks": 1},
            "classifier": "torch.nn:Linear"}},
        "methods": {"unconstrained": {"grid": {"encoder.width": [8, 12]}}}}))
    run = run_main("check-model", "--spec", "s.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    heads = [ln for ln in run.stdout.splitlines() if ln and not ln.startswith(("PASS", "FAIL", "SKIP"))]
    assert heads == ["classifier: torch.nn:Linear() for 16 inputs and 2 outputs",
                     "encoder: models.py:residual_mlp(blocks=1, width=8) for 7 inputs and 16 outputs",
                     "encoder: models.py:residual_mlp(blocks=1, width=12) for 7 inputs and 16 outputs"]
    only = run_main("check-model", "--spec", "s.yaml", "--role", "classifier", cwd=tmp_path)
    assert [ln for ln in only.stdout.splitlines() if not ln.startswith("PASS")] == \
        ["classifier: torch.nn:Linear() for 16 inputs and 2 outputs"]
    assert_input_error(run_main("check-model", "--spec", "s.yaml", "--in", "3", cwd=tmp_path), "--spec", "--in")
    assert_input_error(run_main("check-model", "--spec", "s.yaml", "--role", "adversary", cwd=tmp_path),
                       "trains no module of the user's as its adversary")
