"""A study over the user's own modules (``architecture.models``): a factory named by file or
module path per role, its keyword arguments, the rows saying which module trained them, and
refusals that name the key."""

import dataclasses
import hashlib
import json
import re
import shutil

import pytest
import yaml
from torch import nn

from fairdp.engine import ModelRef
from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec
from tests.conftest import REPO, assert_input_error, run_main

EXAMPLE = REPO / "examples" / "models.py"


def _raw(models, methods=None) -> dict:
    return {"name": "models-e2e", "dataset": {"name": "synthetic", "rows": 1200, "features": 8},
            "seeds": [0], "train": {"epochs": 2, "batch_size": 200},
            "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
            "architecture": {"models": models},
            "methods": methods or {"federate": {"grid": {"lam": [0.5], "eps": [2.0, 8.0]}},
                                   "dpsgd": {"grid": {"eps": [2.0], "clip_primal": [1.0]}}}}


def test_a_study_over_a_module_from_a_file_stores_rows_naming_it(tmp_path):
    """The example file copied beside the study, named relative to it: FEDERATE trains the
    module as its encoder (beside its hand-packed classifier and privatiser), DP-SGD clips
    per sample through it; the rows' architecture names the factory and its arguments."""
    shutil.copy(EXAMPLE, tmp_path / "models.py")
    study = tmp_path / "study.yaml"
    raw = _raw({"encoder": {"factory": "models.py:residual_mlp", "width": 16, "blocks": 1}})
    raw["methods"]["dpsgd"]["grid"]["encoder.width"] = [8, 24]  # a module keyword swept: one pack per width
    study.write_text(yaml.safe_dump(raw))
    results = tmp_path / "r"
    run = run_main("run", str(study), "--results", str(results), "--executor", "local", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    df, _ = ResultStore(results).read()
    assert len(df) == 4 and (df["status"] == "ok").all()
    widths = {}
    for method, arch in df[["method", "architecture"]].itertuples(index=False):
        models = dict((role, ref) for role, ref in json.loads(arch)["models"])
        # the file relative to the study and its content's digest, not where the folder lies
        assert models["encoder"]["factory"] == "models.py:residual_mlp"
        assert models["encoder"]["digest"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()[:16]
        kwargs = dict(models["encoder"]["kwargs"])
        assert kwargs["blocks"] == 1
        widths.setdefault(method, []).append(kwargs["width"])
    assert sorted(widths["federate"]) == [16, 16] and sorted(widths["dpsgd"]) == [8, 24]
    dpsgd = df[df["method"] == "dpsgd"]
    assert dpsgd["pack_id"].nunique() == 2 and (dpsgd["pack_size"] == 1).all()
    assert (dpsgd["eps_formal"] < 2.0 + 1e-9).all()
    # FEDERATE: the module beside its hand-packed classifier; DP-SGD: one chain through the module
    assert df.set_index("method")["packing"].to_dict() == {"federate": "mixed", "dpsgd": "functional"}


def test_a_module_path_and_its_keywords_reach_the_factory():
    spec = parse_spec(_raw({"classifier": {"factory": "torch.nn:Linear", "bias": False}},
                           {"unconstrained": {}}))
    (method,) = spec.methods
    arch = method.settings.architecture
    module = dict(arch.models)["classifier"].build(300, 2)
    assert module.bias is None and module.weight.shape == (2, 300)


@pytest.mark.parametrize("models, methods, message", [
    ({"decoder": "torch.nn:Linear"}, None, "architecture.models.decoder: unknown role"),
    ({"encoder": "no_such_module_xyz:f"}, None, "architecture.models.encoder: no module named"),
    ({"encoder": "torch.nn:NoSuchLayer"}, None, "architecture.models.encoder: torch.nn has no function 'NoSuchLayer'"),
    ({"encoder": "missing.py:f"}, None, "architecture.models.encoder: .*missing.py: no such file"),
    ({"encoder": "no_registered_name"}, None, "no model named 'no_registered_name'"),
    ({"encoder": {"width": 3}}, None, "architecture.models.encoder: needs a factory"),
    ({"adversary": "torch.nn:Linear"}, {"multi_adversarial": {}},
     "architecture.models.adversary: 'multi_adversarial' takes no module of the user's as its adversary"),
    ({"encoder": "torch.nn:Linear"}, {"inlp": {}}, "'inlp' takes no module of the user's as its encoder"),
    # module keywords as grid keys: a role with a module of the user's, a Python name, a scalar
    ({"encoder": "torch.nn:Linear"}, {"dpsgd": {"grid": {"classifier.bias": [True, False]}}},
     "methods.dpsgd.grid.classifier.bias: no module of the user's is the classifier"),
    ({"encoder": "torch.nn:Linear"}, {"dpsgd": {"grid": {"adversary.bias": [True]}}},
     "methods.dpsgd.grid.adversary.bias: 'dpsgd' takes no module of the user's as its 'adversary'"),
    ({"encoder": "torch.nn:Linear"}, {"dpsgd": {"grid": {"encoder.2x": [1]}}},
     "methods.dpsgd.grid.encoder.2x: a module's keyword must be a Python name"),
    ({"encoder": "torch.nn:Linear"}, {"dpsgd": {"grid": {"encoder.bias": [True, {"a": 1}]}}},
     r"methods.dpsgd.grid.encoder.bias\[1\]: a module's keyword takes a finite number, a string or a boolean"),
])
def test_a_model_that_cannot_be_used_is_refused_naming_its_key(models, methods, message):
    with pytest.raises(InputError, match=message if "\\[" in message else
                       message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(_raw(models, methods))


def test_a_registered_or_installed_model_is_named_by_its_name(tmp_path, monkeypatch):
    """``register_model`` in a plugin, or the ``fairdp.models`` entry-point group of an
    installed package: a study writes the name instead of the import path."""
    import textwrap

    import fairdp.engine._models as models_module
    from fairdp.engine import model_names, register_model

    monkeypatch.setattr(models_module, "_MODELS", {})
    register_model("two_layers")(lambda i, o, width=8: nn.Sequential(nn.Linear(i, width), nn.ReLU(), nn.Linear(width, o)))
    (tmp_path / "installed_nets.py").write_text(textwrap.dedent("""
        from torch import nn

        def wide(in_features, out_features):
            return nn.Linear(in_features, out_features)
        """))
    dist = tmp_path / "installed_nets-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-nets\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fairdp.models]\nwide_linear = installed_nets:wide\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {"two_layers", "wide_linear"} <= set(model_names())
    spec = parse_spec(_raw({"encoder": {"factory": "two_layers", "width": 4}, "classifier": "wide_linear"},
                           {"unconstrained": {}}))
    models = dict(spec.methods[0].settings.architecture.models)
    assert models["encoder"].build(8, 300)[0].out_features == 4
    assert models["classifier"].build(300, 2).out_features == 2


def test_an_architecture_without_models_is_described_as_before_models_existed():
    """Checkpoints key on the architecture's repr and rows store its dict: studies and killed
    packs of an earlier fairdp resume and compare unchanged."""
    from fairdp.engine import Architecture

    arch = Architecture()
    assert repr(arch) == "Architecture(encoder=(300, 300), classifier=(), adversary=(300, 300), dropout=0.1)"
    assert arch.to_dict() == {"encoder": (300, 300), "classifier": (), "adversary": (300, 300), "dropout": 0.1}


@pytest.mark.parametrize("body, names", [
    ("return nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o))",
     ["architecture.models.encoder", "bad.py:net()", "cannot be packed: 1 (BatchNorm1d): batch statistics"]),
    ("return nn.Linear(i, o + 1)", ["architecture.models.encoder", "maps a batch of (2, 8) to (2, 301); its role needs (2, 300)"]),
    ("raise ValueError('channels must divide\\n the width')", ["architecture.models.encoder",
                                                              "ValueError: channels must divide the width"]),
])
def test_a_module_that_cannot_be_trained_is_refused_before_anything_is_written(tmp_path, body, names):
    (tmp_path / "bad.py").write_text(f"from torch import nn\n\n\ndef net(i, o):\n    {body}\n")
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_raw({"encoder": "bad.py:net"}, {"unconstrained": {}})))
    run = run_main("run", str(study), "--results", str(tmp_path / "r"), "--executor", "local", cwd=tmp_path)
    assert_input_error(run, *names)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.parquet"))


BUILT_WIDTHS = []


def recording_net(i, o, width=4):
    """A factory that records the width each build asked for."""
    BUILT_WIDTHS.append(width)
    return nn.Sequential(nn.Linear(i, width), nn.ReLU(), nn.Linear(width, o))


def test_configs_that_sweep_a_module_keyword_train_their_own_networks_apart():
    """train_pack builds each config's module with its own keyword, one fit per network shape,
    and gives each config what it gives alone."""
    import numpy as np

    from fairdp.data import load_dataset
    from fairdp.engine import TrainSettings
    from fairdp.engine._shared import architecture_from
    from fairdp.methods import get_method

    BUILT_WIDTHS.clear()
    data = load_dataset("synthetic", rows=600, features=6, seed=2)
    method = get_method("dpsgd")
    arch = architecture_from({"encoder": [8], "classifier": []}, data.name)
    arch = dataclasses.replace(arch, models=(("encoder", ModelRef("tests.test_models_in_studies:recording_net")),))
    configs = [{"eps": 4.0, "clip_primal": 1.0, "encoder.width": w} for w in (3, 5)]
    settings = TrainSettings(epochs=1, batch_size=128, dtype="float64")
    both = method.train_pack(data, configs, seed=0, settings=settings, arch=arch)
    assert sorted(set(BUILT_WIDTHS)) == [3, 5]
    for i, config in enumerate(configs):
        alone = method.train_pack(data, [config], seed=0, settings=settings, arch=arch)
        np.testing.assert_array_equal(both.predictions["test"][i], alone.predictions["test"][0])
        np.testing.assert_allclose(both.representations["test"][i], alone.representations["test"][0], rtol=1e-12)
    with pytest.raises(InputError, match="config.classifier.bias: no module of the user's is the classifier"):
        method.train_pack(data, [{**configs[0], "classifier.bias": False}], seed=0, settings=settings, arch=arch)


def test_module_keywords_are_read_from_a_config_by_role():
    """The one definition of a module keyword that the spec, the planner, the rows and the
    methods share: a dotted key is ``role.keyword``; hyperparameters and settings are not."""
    from fairdp.engine._shared import is_model_keyword, model_keywords
    from fairdp.study.run._plan import setting_key

    config = {"eps": 1.0, "lr": 0.01, "encoder.width": 32, "encoder.depth": 2, "adversary.act": "relu"}
    assert model_keywords(config) == {"encoder": {"width": 32, "depth": 2}, "adversary": {"act": "relu"}}
    assert model_keywords({"eps": 1.0, "lr": 0.01}) == {}
    assert [k for k in config if is_model_keyword(k)] == ["encoder.width", "encoder.depth", "adversary.act"]
    # packs split by network shape: configs differing only in a module keyword never share one
    assert setting_key(config) != setting_key({**config, "encoder.width": 64})
    assert setting_key(config) == setting_key({**config, "eps": 8.0})


SWEEP_NET = '''from torch import nn


def net(i, o, width=4):
    return nn.Sequential(nn.Linear(i, width), nn.ReLU(), nn.Linear(width, o))
'''


def _sweep_study(folder, method: str = "unconstrained", grid: dict | None = None, **top):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nets.py").write_text(SWEEP_NET)
    raw = {"name": "sweep", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0],
           "train": {"epochs": 2, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
           "architecture": {"encoder": [8], "models": {"encoder": "nets.py:net"}},
           "methods": {method: {"grid": {"encoder.width": [4, 8], **(grid or {})}}}, **top}
    (folder / "s.yaml").write_text(yaml.safe_dump(raw))
    return folder / "s.yaml"


def test_a_study_that_sweeps_a_module_keyword_reruns_and_a_moved_copy_resumes(tmp_path):
    """Each stored row's architecture holds its own swept width; a rerun compares it with the
    study's without the swept keyword. Moved with its model file, the study is the same study
    (the file is named relative to it, with its content's digest); with the file's code
    changed, it is refused by name."""
    study = _sweep_study(tmp_path / "a")
    first = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=study.parent)
    assert first.returncode == 0, first.stderr[-2000:]
    again = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=study.parent)
    assert again.returncode == 0, again.stderr[-2000:]
    shutil.copytree(study.parent, tmp_path / "moved")
    moved = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=tmp_path / "moved")
    assert moved.returncode == 0, moved.stderr[-2000:]
    rows, _ = ResultStore(tmp_path / "moved" / "r").read()
    assert len(rows) == 2 and (rows["status"] == "ok").all()
    with open(tmp_path / "moved" / "nets.py", "a") as f:
        f.write("# edited\n")
    changed = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=tmp_path / "moved")
    assert_input_error(changed, "nets.py:net (the encoder) at digest", "its code changed")


@pytest.mark.slow
def test_a_sweeping_study_killed_then_moved_resumes_with_the_rows_of_a_run_never_killed(tmp_path):
    """DP-SGD through a module of the user's whose width the grid sweeps, one config a pack:
    SIGKILL once a pack is stored, the study's folder moved, and the same command there
    completes it, bit-equal to a run never killed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd

    from fairdp.schema import METRIC_COLUMNS

    study = _sweep_study(tmp_path / "a", "dpsgd", {"eps": [2.0], "clip_primal": [1.0]}, pack_size=1)
    study.parent.joinpath("s.yaml").write_text(study.read_text().replace("epochs: 2", "epochs: 6"))
    proc = subprocess.Popen([sys.executable, "-m", "fairdp", "run", "s.yaml", "--results", "r", "--executor", "local"],
                            cwd=study.parent, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = ResultStore(study.parent / "r")
    try:
        deadline = time.monotonic() + 240
        while not store.pack_files() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(store.pack_files()) == 1, "killed too late or too early"
    shutil.move(study.parent, tmp_path / "moved")
    resumed = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=tmp_path / "moved")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    whole = run_main("run", "s.yaml", "--results", "whole", "--executor", "local", cwd=tmp_path / "moved")
    assert whole.returncode == 0, whole.stderr[-2000:]
    key = ["method", "seed", "config_id"]
    columns = [*key, "architecture", *METRIC_COLUMNS, "eps_formal", "best_epoch"]
    got = ResultStore(tmp_path / "moved" / "r").read()[0][columns].sort_values(key).reset_index(drop=True)
    want = ResultStore(tmp_path / "moved" / "whole").read()[0][columns].sort_values(key).reset_index(drop=True)
    assert len(got) == 2 and got["architecture"].nunique() == 2
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_a_list_keyword_reaches_the_factory_as_a_tuple_and_a_mapping_is_refused_by_name(tmp_path):
    (tmp_path / "nets.py").write_text("from torch import nn\n\n\ndef net(i, o, sizes=(4,)):\n"
                                      "    return nn.Sequential(nn.Linear(i, sizes[-1]), nn.Linear(sizes[-1], o))\n")
    ref = ModelRef.parse({"factory": "nets.py:net", "sizes": [8, 16]}, "architecture.models.encoder", tmp_path)
    assert dict(ref.kwargs) == {"sizes": (8, 16)} and hash(ref)
    assert ref.build(3, 2)[0].out_features == 16
    assert json.loads(json.dumps(ref.to_dict()))["kwargs"] == [["sizes", [8, 16]]]
    with pytest.raises(InputError, match=r"^architecture.models.encoder.sizes: a factory's keyword takes"):
        ModelRef.parse({"factory": "nets.py:net", "sizes": {"a": 1}}, "architecture.models.encoder", tmp_path)


# modules that pass a shape check and failed inside training, after packs had started
BROKEN = '''import torch
import torch.nn.functional as F
from torch import nn


class Fixed(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.o = o

    def forward(self, x):
        return x[:, :1].expand(-1, self.o) * 2


class Cell(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.cell = nn.GRUCell(i, o)

    def forward(self, x):
        return self.cell(x)


class FunctionalDropout(nn.Linear):
    def forward(self, x):
        return super().forward(F.dropout(x, 0.5, self.training))


class Double(nn.Linear):
    def forward(self, x):
        return super().forward(x).double()


def no_parameters(i, o):
    return Fixed(o)


def gru_cell(i, o):
    return Cell(i, o)


def functional_dropout(i, o):
    return FunctionalDropout(i, o)


def float64_out(i, o):
    return Double(i, o)


def lazy(i, o):
    return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, o))


def zero_width(i, o, width=0):
    return nn.Sequential(nn.Linear(i, width), nn.ReLU(), nn.Linear(width, o))
'''


@pytest.mark.parametrize("factory, method, precision, says", [
    ("no_parameters", "federate", None, "has no parameters to train"),
    ("gru_cell", "dpsgd", None, "its per-sample gradients cannot be computed"),
    ("functional_dropout", "federate", None, "a packed training step fails"),
    ("float64_out", "federate", "bf16", "returns float64 for float32 inputs: its output must keep the training dtype"),
    ("float64_out", "federate", "float32", "returns float64 for float32 inputs: its output must keep the training dtype"),
    ("lazy", "federate", None, "cannot be packed"),
    ("zero_width", "federate", None, "its parameter 0.weight has no entries (a layer of width 0)"),
])
def test_a_module_that_would_fail_inside_training_is_refused_before_anything_is_written(tmp_path, factory, method,
                                                                                           precision, says):
    from fairdp.study._context import load_study_data
    from fairdp.study.spec._spec import check_models

    (tmp_path / "broken.py").write_text(BROKEN)
    grid = {"federate": {"lam": [0.5], "eps": [2.0]}, "dpsgd": {"eps": [2.0], "clip_primal": [1.0]}}[method]
    raw = _raw({"encoder": f"broken.py:{factory}"}, {method: {"grid": grid}})
    if precision:
        raw["train"]["precision"] = precision
    spec = parse_spec(raw, base_dir=tmp_path)
    with pytest.raises(InputError) as err:
        check_models(spec, load_study_data("synthetic", {"rows": 1200, "features": 8}), [method])
    message = str(err.value)
    assert message.startswith(f"architecture.models.encoder: broken.py:{factory}() for 8 inputs and ")
    assert says in message and "\n" not in message


def test_check_model_fails_a_module_that_cannot_train_a_packed_step(tmp_path):
    (tmp_path / "broken.py").write_text(BROKEN)
    run = run_main("check-model", "broken.py:functional_dropout", "--in", "5", "--out", "3", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    failed = [ln for ln in run.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL  a row's output does not depend on the rest of its batch, "
                                                     "in training mode: its forward is not a function of its input"), failed
    run = run_main("check-model", "broken.py:gru_cell", "--in", "5", "--out", "3", cwd=tmp_path)
    failed = [ln for ln in run.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith(
        "FAIL  trains a packed step in float32 and under bf16 autocast: its per-sample gradients cannot be computed: "), failed


def test_the_settings_line_says_which_networks_take_the_architectures_dropout(tmp_path):
    """architecture.dropout applies to the built-in MLPs only, after the encoder's layers and
    between hidden layers (a linear classifier has none); the line said "dropout 0.1" for a
    study whose only dropout-taking part was the user's encoder."""
    from fairdp.engine._shared import architecture_from, describe_architecture

    shutil.copy(EXAMPLE, tmp_path / "models.py")
    mine = {"encoder": {"factory": "models.py:residual_mlp", "width": 8, "blocks": 1}}
    arch = architecture_from({"models": mine}, "synthetic", base_dir=tmp_path)
    assert describe_architecture(arch, 0).endswith("classifier linear, no MLP dropout")
    assert describe_architecture(arch, 1).endswith("1 adversary 300-300, dropout 0.1 in the adversary MLP")
    assert describe_architecture(architecture_from({}, "synthetic"), 1) == \
        "encoder 300-300, classifier linear, 1 adversary 300-300, dropout 0.1"


def test_a_swept_module_keyword_is_grouped_on_by_selection_by_and_searched_by_a_search(tmp_path):
    """selection.by and --by take a module keyword a grid sweeps (each row's value read from its
    architecture), and search.space searches one: each trial builds its own network."""
    study = _sweep_study(tmp_path / "a", selection={"by": ["encoder.width"]})
    run = run_main("run", "s.yaml", "--results", "r", "--executor", "local", cwd=study.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| Dataset | Method | encoder.width |" in run.stdout.replace("Guarantee | ", "")  # one row per width
    analyze = run_main("analyze", "r", "--by", "encoder.width", "--format", "csv", cwd=study.parent)
    assert analyze.returncode == 0, analyze.stderr[-2000:]
    assert sorted(line.split(",")[2] for line in analyze.stdout.splitlines()[1:]) == ["4", "8"]
    raw = yaml.safe_load(study.read_text())
    raw.pop("selection")
    raw["methods"] = {"unconstrained": {}}
    raw["search"] = {"method": "unconstrained", "trials": 3, "population": 2, "seed": 0,
                     "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
                     "space": {"encoder.width": {"low": 2, "high": 12}}}
    study.write_text(yaml.safe_dump(raw))
    search = run_main("search", "s.yaml", "--results", "rs", "--executor", "local", cwd=study.parent)
    assert search.returncode == 0, search.stderr[-2000:]
    rows, _ = ResultStore(study.parent / "rs").read()
    widths = [dict(json.loads(a)["models"][0][1]["kwargs"])["width"] for a in rows["architecture"]]
    # repeats of a width are answered from the stored row: one row per distinct width proposed
    assert 1 <= len(rows) <= 3 and len(set(widths)) == len(rows)
    assert all(2 <= w <= 12 and isinstance(w, int) for w in widths)


@pytest.mark.parametrize("space, message", [
    ({"classifier.width": {"low": 2, "high": 4}}, "search.space.classifier.width: no module of the user's is the "
                                                  "classifier"),
    ({"encoder.width": {"low": 4, "high": 2}}, "search.space.encoder.width.high: must be > low"),
    ({"encoder.width": {"low": "a", "high": 2}}, "search.space.encoder.width: low and high must be finite numbers"),
])
def test_a_search_over_a_module_keyword_is_refused_by_name(tmp_path, space, message):
    (tmp_path / "nets.py").write_text(SWEEP_NET)
    raw = {"name": "kw", "dataset": {"name": "synthetic", "rows": 600, "features": 6},
           "architecture": {"models": {"encoder": "nets.py:net"}}, "methods": {"unconstrained": {}},
           "search": {"method": "unconstrained", "objectives": {"valid_accuracy": "max"}, "space": space}}
    with pytest.raises(InputError, match=re.escape(message)):
        parse_spec(raw, base_dir=tmp_path)
