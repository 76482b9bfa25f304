"""Methods from outside the package: the example plugin (examples/gap_reg.py) in a study run,
a search and the analysis; plugins as modules and as installed entry points; refusals."""

import shutil
import textwrap

import numpy as np
import pandas as pd
import pytest
import yaml

import fairdp._imports as imports_module
import fairdp.methods._registry as registry
from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.errors import InputError
from fairdp.methods import get_method, load_plugins, method_names
from fairdp.metrics import dp_gap
from fairdp.study import ResultStore, parse_spec
from tests.conftest import REPO, assert_input_error, run_cli, run_main

EXAMPLE = REPO / "examples" / "gap_reg.py"


@pytest.fixture
def scratch_registry(monkeypatch):
    """Methods a test registers are gone after it (the registry is process-wide)."""
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(imports_module, "LOADED", dict(imports_module.LOADED))


def test_gap_reg_lowers_the_demographic_parity_gap():
    """What the example method is for, over three seeds: on data whose label depends on the
    attribute, lam_gap = 5 at least halves the test DP gap of lam_gap = 0."""
    load_plugins([str(EXAMPLE)])
    data = load_dataset("synthetic", rows=3000, features=10, label_correlation=0.6, seed=0)
    gaps = []
    for seed in range(3):
        res = get_method("gap_reg").train_pack(data, [{"lam_gap": 0.0}, {"lam_gap": 5.0}], seed=seed,
                                               settings=TrainSettings(epochs=10, batch_size=200))
        gaps.append([dp_gap(p, data.split("test").s) for p in res.predictions["test"]])
    free, penalised = np.mean(gaps, axis=0)
    assert free > 40 and penalised < free / 2, gaps


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_plugin_method_outside_the_package_runs_searches_and_is_analysed(tmp_path, executor):
    """The example file copied to a directory of its own, named relative to the study file:
    `fairdp run` trains it with its own column in the rows (on embedded Ray, in the slow set:
    there Ray's workers import the plugin, and the model file the encoders of unconstrained,
    DP-SGD and PF-LD come from, the last two accounted by PLD), `fairdp analyze --selected` reports its
    hyperparameter, and `fairdp search` searches it (locally)."""
    home = tmp_path / "my_methods"
    home.mkdir()
    shutil.copy(EXAMPLE, home / "gap_reg.py")
    shutil.copy(REPO / "examples" / "models.py", home / "models.py")
    study = home / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "plugin-e2e", "plugins": ["gap_reg.py"],
        "dataset": {"name": "synthetic", "rows": 1200, "features": 8, "label_correlation": 0.6},
        "seeds": [0], "train": {"epochs": 3, "batch_size": 200, **({"accountant": "pld"} if executor == "ray" else {})},
        "evaluate": {"leakage": False, "mdl": False}, "selection": {"fairness": "dp_gap"},
        # unconstrained over a module of the user's from a file beside the study: Ray's workers import it too
        "methods": {"unconstrained": {"architecture": {"models": {"encoder": {"factory": "models.py:residual_mlp",
                                                                              "width": 16, "blocks": 1}}}},
                    "gap_reg": {"grid": {"lam_gap": [0.0, 2.0, 5.0]}},
                    # on Ray, DP-SGD and PF-LD clip per sample through the module, accounted by PLD
                    # (locally: tests/test_models_in_studies.py and tests/test_privacy_pld.py)
                    **({name: {"grid": grid, "architecture": {"models": {"encoder": {
                        "factory": "models.py:residual_mlp", "width": 16, "blocks": 1}}}}
                        for name, grid in (("dpsgd", {"eps": [2.0], "clip_primal": [1.0]}),
                                           ("pfld", {"eps": [2.0], "fairness_notion": ["dp"], "clip_primal": [1.0],
                                                     "clip_dual": [5.0]}))} if executor == "ray" else {})},
        "search": {"method": "gap_reg", "population": 2, "trials": 4, "seed": 0,
                   "objectives": {"valid_accuracy": "max", "valid_dp_gap": "min"},
                   "space": {"lam_gap": {"low": 0.0, "high": 5.0}}},
    }))
    results = tmp_path / "r"
    run = run_cli("run", str(study), "--results", str(results), "--executor", executor, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    df, _ = ResultStore(results).read()
    assert len(df) == (6 if executor == "ray" else 4) and (df["status"] == "ok").all()
    if executor == "ray":
        private = df[df["method"].isin(["dpsgd", "pfld"])]
        assert (private["accountant"] == "pld").all() and (private["packing"] == "functional").all()
        assert (private["eps_formal"] <= 2.0).all() and private["architecture"].str.contains("residual_mlp").all()
        assert df.loc[~df["method"].isin(["dpsgd", "pfld"]), "accountant"].isna().all()
    gap = df[df["method"] == "gap_reg"]
    assert sorted(gap["lam_gap"]) == [0.0, 2.0, 5.0]
    assert df.loc[df["method"] == "unconstrained", "lam_gap"].isna().all()
    assert df.loc[df["method"] == "unconstrained", "architecture"].str.contains("residual_mlp").all()
    assert np.isinf(gap["eps_formal"]).all()

    analyze = run_main("analyze", str(results), "--fairness", "dp_gap", "--selected", "--format", "csv")
    assert analyze.returncode == 0, analyze.stderr
    table = pd.read_csv(pd.io.common.StringIO(analyze.stdout))
    assert "lam_gap" in table.columns
    picked = table.set_index("method").loc["gap_reg", "lam_gap"]
    assert picked in (0.0, 2.0, 5.0)

    # in a process of its own: it loads the plugin, which would stay in this process's registry
    search = run_cli("search", str(study), "--results", str(results), "--executor", "local", cwd=tmp_path)
    assert search.returncode == 0, search.stderr[-3000:]
    after, _ = ResultStore(results).read()
    searched = after[(after["method"] == "gap_reg") & ~after["lam_gap"].isin([0.0, 2.0, 5.0])]
    assert len(searched) >= 2 and searched["lam_gap"].between(0, 5).all()
    assert not after.duplicated(["method", "seed", "config_id"]).any()


def _study(plugins, methods=None) -> dict:
    return {"name": "p", "plugins": plugins, "dataset": {"name": "synthetic", "rows": 600},
            "methods": methods or {"unconstrained": {}}}


def _plugin(tmp_path, name: str, body: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent("""
        from fairdp.methods import HyperParam, NeuralMethod, register_method
    """) + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("body, message", [
    ("""
     @register_method
     class Clash(NeuralMethod):
         name = "federate"
         def paper_grid(self, dataset): return {}
     """, "registered twice"),
    ("""
     @register_method
     class Reserved(NeuralMethod):
         name = "reserved_column"
         hyperparams = (HyperParam("seed", low=0),)
         def paper_grid(self, dataset): return {"seed": [1]}
     """, "'seed': the name of a result column"),
    ("""
     @register_method
     class Retyped(NeuralMethod):
         name = "retyped_eps"
         hyperparams = (HyperParam("eps", choices=("small", "large")),)
         def paper_grid(self, dataset): return {"eps": ["small"]}
     """, "'eps': declared as float64 and as string"),
    ("""
     @register_method
     class BadName(NeuralMethod):
         name = "Bad Name"
         def paper_grid(self, dataset): return {}
     """, "lowercase letters"),
    ("import no_such_module_anywhere\n", "ModuleNotFoundError"),
    ("def broken(:\n", "SyntaxError"),
])
def test_a_plugin_the_registry_refuses_is_a_one_line_error_naming_it(tmp_path, scratch_registry, body, message):
    path = _plugin(tmp_path, "bad_plugin", body)
    with pytest.raises(InputError) as err:
        parse_spec(_study(["bad_plugin.py"]), base_dir=tmp_path)
    text = str(err.value)
    assert text.startswith(f"plugins[0]: {path}") and message in text and "\n" not in text, text


def test_a_missing_plugin_exits_2_before_anything_is_written(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(_study(["nowhere.py"])))
    proc = run_main("run", str(study), "--results", str(tmp_path / "r"))  # fairdp's main, in this process
    assert_input_error(proc, "plugins[0]", "nowhere.py")
    assert not (tmp_path / "r").exists()
    for bad in ("just/a/dir/", 3):
        with pytest.raises(InputError, match=r"^plugins\[0\]"):
            parse_spec(_study([bad]), base_dir=tmp_path)
    with pytest.raises(InputError, match="^plugins: must be a list"):
        parse_spec(_study("gap_reg.py"), base_dir=tmp_path)


def test_a_plugin_module_on_the_path_and_its_method_in_the_spec(tmp_path, monkeypatch, scratch_registry):
    _plugin(tmp_path, "my_fair_methods", """
        @register_method
        class Dotted(NeuralMethod):
            name = "dotted_plugin"
            hyperparams = (HyperParam("lam_dotted", low=0.0),)
            def paper_grid(self, dataset): return {"lam_dotted": [0.5]}
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = parse_spec(_study(["my_fair_methods"], {"dotted_plugin": {}}), base_dir="/")
    assert spec.plugins == ("my_fair_methods",)
    assert spec.methods[0].configs == ({"lam_dotted": 0.5},)
    with pytest.raises(InputError, match=r"^plugins\[0\]: no module named 'not_installed_methods'"):
        parse_spec(_study(["not_installed_methods"]), base_dir="/")


def test_installed_packages_register_methods_through_the_entry_point_group(tmp_path, monkeypatch, scratch_registry):
    (tmp_path / "installed_fair.py").write_text(textwrap.dedent("""
        from fairdp.methods import NeuralMethod

        class Installed(NeuralMethod):
            name = "installed_method"
            def paper_grid(self, dataset): return {}
        """))
    dist = tmp_path / "installed_fair-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-fair\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fairdp.methods]\ninstalled = installed_fair:Installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    assert "installed_method" in method_names()
    assert get_method("installed_method").name == "installed_method"
