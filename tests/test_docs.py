"""The documentation site (docs/, mkdocs.yml), the README and the quickstart notebook.

- the site builds with ``mkdocs build --strict`` (every link and anchor resolves, every
  mkdocstrings object renders, the hook's tables describe every column);
- docs/study-spec.md documents exactly the keys the study parser accepts: the accepted keys
  are read from the parser itself, by giving it an unknown key in each section and reading
  the keys its error lists ("allowed here: ..."), so a key added to or dropped from the parser
  fails here until the page follows;
- the results schema page lists every column of ``fairdp.schema``;
- examples/quickstart.ipynb runs (with this interpreter as its kernel) and draws its figure;
- README.md stays short, and no Markdown file links to or cites a file the repository lacks.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import markdown_tables

pytestmark = pytest.mark.xdist_group("docs")  # one xdist worker computes the module's shared runs once

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 150


# -- the site ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_site_builds_strict(site):
    for page in ("index.html", "study-spec/index.html", "results-schema/index.html", "methods/index.html",
                 "architecture/index.html", "extending/index.html", "api/index.html", "api/analysis/index.html",
                 "api/methods/index.html", "api/contract/index.html", "api/study/index.html", "api/data/index.html",
                 "api/metrics/index.html", "api/privacy/index.html", "api/engine/index.html",
                 "api/executors/index.html"):
        assert (site / page).is_file(), page
    # the API pages rendered their objects (mkdocstrings gives each an anchor with its path)
    # the API pages rendered their objects: mkdocstrings gives each an anchor with its path,
    # the defining module's for a name exported lazily (fairdp.analysis.write_report is
    # fairdp.analysis._report.write_report)
    import importlib

    import fairdp
    from tests.layers import PUBLIC_SURFACES

    def rendered(page: str, module: str, name: str) -> bool:
        return re.search(rf'id="{re.escape(module)}(\._\w+)?\.{re.escape(name)}"', (site / page).read_text()) is not None

    for name, module in fairdp._EXPORTS.items():
        assert rendered("api/index.html", module, name), f"fairdp.{name} is not rendered in docs/api/index.md"
    # every public name of every surface, on some API page (tests/test_layers.py checks the
    # pages' sources; this, that mkdocstrings found and drew each one)
    pages = [str(p.relative_to(site)) for p in (site / "api").rglob("index.html")]
    for surface in (s for s in PUBLIC_SURFACES if s != "fairdp"):
        for name in importlib.import_module(surface).__all__:
            assert any(rendered(page, surface, name) for page in pages), f"{surface}.{name} is rendered on no API page"
    for name in ("Method", "NeuralMethod", "HyperParam", "register_method"):
        assert rendered("api/methods/index.html", "fairdp.methods", name), name
    for name in ("PackStep", "PackContext", "Batch", "PackResult", "EpochReport"):
        assert rendered("api/contract/index.html", "fairdp.engine.contract", name), name


def test_results_schema_page_lists_every_column(site):
    from fairdp import schema
    from fairdp.methods import builtin_method_names, get_method

    html = (site / "results-schema/index.html").read_text()
    assert "fairdp:results-schema" not in html, "the hook did not replace its marker"
    for name in schema.FIXED_COLUMNS:
        assert f"<code>{name}</code>" in html, f"results schema page lacks column {name!r}"
    for name, kind in schema.result_columns([]):
        assert re.search(rf"<code>{re.escape(name)}</code></td>\s*<td><code>{re.escape(kind)}</code>", html), \
            f"column {name!r} is not listed with its type {kind!r}"
    hyperparams = {h.name for m in builtin_method_names() for h in get_method(m).hyperparams}
    for name in hyperparams:
        assert f"<code>{name}</code>" in html, f"results schema page lacks hyperparameter column {name!r}"


def test_methods_page_names_every_method(site):
    from fairdp.methods import builtin_method_names

    text = (DOCS / "methods.md").read_text()
    papers = _table_after(text, "## Papers")
    assert {row[0] for row in papers} == {f"`{m}`" for m in builtin_method_names()}
    html = (site / "methods/index.html").read_text()
    for name in builtin_method_names():
        assert f"<code>{name}</code>" in html


def test_methods_page_shows_the_example_plugin_as_it_is():
    """The plugin example on docs/methods.md is examples/gap_reg.py's code, ``per_config_attributes`` included."""
    example = (REPO / "examples/gap_reg.py").read_text()
    code = example[example.index("import torch"):].strip()
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "methods.md").read_text(), re.S)
    assert any(b.strip() == code for b in blocks), "docs/methods.md's plugin example differs from examples/gap_reg.py"
    assert "per_config_attributes" in code


# -- the study spec page against the parser ------------------------------------------------------

def _table_after(text: str, heading: str) -> list[list[str]]:
    """Data rows of the first table after ``heading``."""
    return markdown_tables(text[text.index(heading):])[0][1:]


def _documented_keys() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """key path -> its row, from every table of docs/study-spec.md; and, from the table of
    dataset options, option -> the datasets it lists."""
    keys, datasets = {}, {}
    for table in markdown_tables((DOCS / "study-spec.md").read_text()):
        header, rows = table[0], table[1:]
        assert header[0] == "key", f"a study-spec table whose first column is not 'key': {header}"
        for row in rows:
            m = re.fullmatch(r"`([^`]+)`", row[0])
            assert m, f"study-spec row whose key is not one backticked path: {row[0]!r}"
            assert m.group(1) not in keys, f"{m.group(1)} documented twice"
            keys[m.group(1)] = row
            if header[1] == "datasets":
                datasets[m.group(1)] = set(re.findall(r"`([^`]+)`", row[1]))
    return keys, datasets


B = "zz_not_a_key"
_BASE = {"name": "t", "dataset": "synthetic", "methods": {"federate": {}},
         "evaluate": {"leakage": True, "mdl": True}}
_SEARCH = {"method": "federate", "objectives": {"valid_accuracy": "max"},
           "space": {"eps": {"low": 1, "high": 2}, "lam": {"choices": [0.5]}}}
# Sections whose keys are names the study chooses (a method, a hyperparameter, an objective):
# the page documents each as one placeholder row.
_OPEN = {"methods.<method>", "methods.<method>.grid.<hyperparameter>", "search.space.<hyperparameter>",
         "search.objectives.<objective>", "search.fixed.<hyperparameter>"}
# Top-level keys whose value is not a mapping of fixed keys (their own rows say what they take).
_LEAVES = {"name", "description", "seeds", "pack_size", "plugins", "methods", "dataset"}


def _error(raw) -> str:
    from fairdp.errors import InputError
    from fairdp.study import parse_spec

    try:
        parse_spec(copy.deepcopy(raw))
    except InputError as e:
        return str(e)
    raise AssertionError(f"the parser accepted an unknown key: {raw}")


def _listed(raw, pattern: str = r"allowed here: (.*)$") -> set[str]:
    """The keys the parser's error for ``raw`` lists as accepted."""
    message = _error(raw)
    m = re.search(pattern, message)
    assert m, f"the parser's error no longer lists the accepted keys: {message!r}"
    return set(m.group(1).split(", "))


def _accepted_keys() -> tuple[set[str], dict[str, set[str]]]:
    """Every key path the study parser accepts (placeholders for chosen names), and each
    dataset option's datasets."""
    from fairdp.data import dataset_names

    top = _listed({**_BASE, B: 1})
    keys = set(top)
    sections = {
        "train": lambda k: {**_BASE, "train": {k: 1}},
        "evaluate": lambda k: {**_BASE, "evaluate": {k: 1}},
        "selection": lambda k: {**_BASE, "selection": {k: 1}},
        "resources": lambda k: {**_BASE, "resources": {k: 1}},
        "search": lambda k: {**_BASE, "search": {**_SEARCH, k: 1}},
        "tuning": lambda k: {**_BASE, "tuning": {"count": "poisson", "mean": 2, k: 1}},
        "prune": lambda k: {**_BASE, "prune": {"rungs": [1], k: 1}},
        "tracking.mlflow": lambda k: {**_BASE, "tracking": {"mlflow": {k: "x"}}},
        "tracking.wandb": lambda k: {**_BASE, "tracking": {"wandb": {k: "x"}}},
        "evaluate.probe": lambda k: {**_BASE, "evaluate": {"probe": {k: 1}}},
        "methods.<method>": lambda k: {**_BASE, "methods": {"federate": {k: 1}}},
        "methods.<method>.train": lambda k: {**_BASE, "methods": {"federate": {"train": {k: 1}}}},
        "methods.<method>.grid.<hyperparameter>":
            lambda k: {**_BASE, "methods": {"federate": {"grid": {"lam": {"start": 0, "stop": 1, "step": 1, k: 1}}}}},
        "search.space.<hyperparameter>": lambda k: {**_BASE, "search": {
            **_SEARCH, "space": {"eps": {"low": 1, "high": 2, k: 1}, "lam": {"choices": [0.5]}}}},
    }
    mappings = {s for s in sections if "." not in s} | {"architecture", "tracking"}
    new = top - _LEAVES - mappings
    assert not new, (f"the parser accepts top-level keys {sorted(new)} that this test does not know: add them to "
                     f"_LEAVES or sections in tests/test_docs.py, and document them in docs/study-spec.md")
    for path, raw in sections.items():
        keys |= {f"{path}.{k}" for k in _listed(raw(B))}
    # a search.space entry is a range or a choice: the choice's keys
    keys |= {f"search.space.<hyperparameter>.{k}" for k in _listed(
        {**_BASE, "search": {**_SEARCH, "space": {"eps": {"low": 1, "high": 2}, "lam": {"choices": [0.5], B: 1}}}})}
    arch = _listed({**_BASE, "architecture": {B: 1}}, r"fields: (.*)$")
    assert _listed({**_BASE, "methods": {"federate": {"architecture": {B: 1}}}}, r"fields: (.*)$") == arch
    # models maps each role to a factory: documented as one row over the roles
    keys |= {f"architecture.{k}" if k != "models" else "architecture.models.<role>" for k in arch}
    options: dict[str, set[str]] = {}
    for name in dataset_names():
        for option in _listed({**_BASE, "dataset": {"name": name, B: 1}}, r"it has: (.*)$") - {"none"}:
            options.setdefault(f"dataset.{option}", set()).add(name)
    keys |= {"dataset.name", *options, *_OPEN}
    return keys, options


def test_study_spec_documents_exactly_the_keys_the_parser_accepts():
    documented, doc_datasets = _documented_keys()
    accepted, datasets = _accepted_keys()
    missing = accepted - set(documented)
    assert not missing, f"the study parser accepts keys docs/study-spec.md lacks: {sorted(missing)}"
    extra = set(documented) - accepted
    assert not extra, f"docs/study-spec.md documents keys the study parser refuses: {sorted(extra)}"
    for option, names in datasets.items():
        assert doc_datasets.get(option) == names, (f"docs/study-spec.md: {option} is an option of {sorted(names)}, "
                                                   f"the page says {sorted(doc_datasets.get(option, ()))}")


def test_study_spec_lists_the_parsers_choices():
    """Where a key takes one of a fixed set of names, its row names every one of them."""
    from fairdp import schema
    from fairdp.data import dataset_names
    from fairdp.engine._settings import PRECISIONS
    from fairdp.engine._shared import ROLES
    from fairdp.privacy._shared import ACCOUNTANTS, COUNTS
    from fairdp.study.spec import _spec

    documented, _ = _documented_keys()
    choices = {"search.objectives.<objective>": schema.OBJECTIVES, "selection.fairness": schema.SELECTION_FAIRNESS,
               "dataset.name": dataset_names(), "train.precision": PRECISIONS, "tuning.count": COUNTS,
               "search.sampler": _spec.SAMPLERS, "architecture.models.<role>": ROLES,
               "train.accountant": ACCOUNTANTS}
    for key, names in choices.items():
        row = " ".join(documented[key][1:])
        for name in names:
            assert f"`{name}`" in row, f"docs/study-spec.md: the row of {key} does not name {name!r}"


def test_study_spec_example_is_a_valid_study():
    from fairdp.study import parse_spec
    from fairdp.study.spec._spec import read_study_yaml

    text = (DOCS / "study-spec.md").read_text()
    example = re.search(r"## A complete example\n.*?```yaml\n(.*?)```", text, re.S).group(1)
    spec = parse_spec(read_study_yaml(example))
    assert spec.n_configs > 0


# -- the notebook --------------------------------------------------------------------------------

@pytest.mark.slow  # a Jupyter kernel and a study on Adult: make test-slow (every step it takes is tested apart)
def test_quickstart_notebook_runs_with_the_documented_command(tmp_path):
    """The notebook, run as its first cell says (`jupyter nbconvert --execute`, installed by the
    dev extra): no error, fairdp's own Pareto figure, a front of more than one config, chosen on
    validation metrics, and the report written."""
    nbformat = pytest.importorskip("nbformat")

    path = REPO / "examples/quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    stored = [c for c in nb.cells if c.cell_type == "code"]
    assert stored and all(not c.outputs and c.execution_count is None for c in stored), \
        "examples/quickstart.ipynb must be stored without outputs"
    command = "jupyter nbconvert --to notebook --execute examples/quickstart.ipynb"
    assert command in nb.cells[0].source and "make notebook" in nb.cells[0].source
    code = "\n".join(c.source for c in stored)
    front_objectives = re.search(r"^objectives = (\{.*\})$", code, flags=re.M)
    assert front_objectives and "test_" not in front_objectives.group(1), \
        "the Pareto front must be found on validation metrics"
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))  # the kernel is this venv
    copy = tmp_path / "quickstart.ipynb"
    nbformat.write(nb, copy)
    env = {**os.environ, "TMPDIR": str(tmp_path), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "IPYTHONDIR": str(tmp_path / "ipython")}
    proc = subprocess.run([str(Path(sys.executable).with_name("jupyter")), *command.split()[1:-1], str(copy),
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = nbformat.read(tmp_path / "out" / "quickstart.ipynb", as_version=4)
    outputs = [o for c in ran.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the notebook drew no figure"
    (work,) = tmp_path.glob("fairdp-quickstart-*")
    assert (work / "pareto_front.png").is_file() and (work / "report" / "report.html").is_file()
    on_front = re.search(r"(\d+) of (\d+) adversarial configs are on", "".join(o.get("text", "") for o in outputs))
    assert on_front and int(on_front.group(1)) > 2, "the Pareto front is (nearly) a single point"
    assert ran.cells[-1].outputs[0]["text"].strip() == sys.prefix


# -- README and links ----------------------------------------------------------------------------

def test_readme_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    text = "\n".join(lines)
    for command in ("make demo", "make test"):
        assert command in text


_SKIP_DIRS = {".git", ".venv", "build", "site", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}
_FILE_EXTENSIONS = ("py", "md", "yaml", "yml", "json", "toml", "ipynb", "csv", "txt", "cfg", "sh", "parquet")


def _markdown_files() -> list[Path]:
    out = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        out += [Path(root) / f for f in files if f.endswith(".md")]
    return sorted(out)


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)


def _module_path(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _unresolved_name(dotted: str) -> str | None:
    """Why ``fairdp.x.y`` does not name a module of the repository or a name one defines; None if it does."""
    parts = dotted.split(".")
    module = None
    for i in range(1, len(parts) + 1):
        found = _module_path(parts[:i])
        if found is None:
            break
        module = found
    else:
        return None  # every part is a module
    name = parts[i - 1]
    if module is None:
        return f"{dotted}: no module {parts[0]}"
    if not re.search(rf"\b{re.escape(name)}\b", module.read_text()):
        return f"{dotted}: {module.relative_to(REPO)} has no name {name!r}"
    return None


def test_markdown_cites_only_files_that_exist():
    """Links resolve, and backticked repository paths (``fairdp/...``, ``tests/...``) and
    dotted module names (``fairdp.engine.fit_pack``) name what the repository has."""
    top_dirs = {p.name for p in REPO.iterdir() if p.is_dir() and p.name not in _SKIP_DIRS}
    problems = []
    files = _markdown_files()
    assert REPO / "README.md" in files and DOCS / "index.md" in files
    for md in files:
        where = md.relative_to(REPO)
        text = md.read_text()
        if "DESIGN.md" in text:
            problems.append(f"{where}: cites DESIGN.md, which is not in the repository")
        prose = _without_code_blocks(text)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor on the same page (mkdocs --strict checks those)
            if not (md.parent / target.split("#")[0]).exists():
                problems.append(f"{where}: link to {target}, which does not exist")
        for code in re.findall(r"`([^`\n]+)`", prose):
            token = re.sub(r"\(.*\)$", "", code.strip())
            if re.fullmatch(r"fairdp(\.[A-Za-z_]\w*)+", token):
                why = _unresolved_name(token)
                if why:
                    problems.append(f"{where}: `{code}`: {why}")
                continue
            if not re.fullmatch(r"[\w.\-/]+", token):
                continue  # placeholders, globs, commands: not one path
            first = token.split("/")[0]
            is_path = ("/" in token and first in top_dirs) or re.fullmatch(r"[A-Z][A-Z_]*\.md", token)
            if is_path and re.search(rf"\.({'|'.join(_FILE_EXTENSIONS)})$", token) and not (REPO / token).exists():
                problems.append(f"{where}: cites {token}, which is not in the repository")
            elif is_path and token.endswith("/") and not (REPO / token).is_dir() and not _generated(token):
                problems.append(f"{where}: cites directory {token}, which is not in the repository")
    assert not problems, "\n".join(problems)


def _generated(path: str) -> bool:
    """A path that fairdp's commands write (results of a run), git-ignored rather than shipped."""
    proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, capture_output=True)
    return proc.returncode == 0


# -- one source for each figure, and nothing the Markdown extensions swallow --------------------

_DURATION = re.compile(r"\b\d+(?:[.,]\d+)?(?:-\d+(?:[.,]\d+)?)? ?(?:min(?:utes?)?|s|seconds|hours?)\b")
_SENTENCE = re.compile(r"[^.]*?(?:make test|make demo|make setup)[^.]*\.", re.DOTALL)


def _page_text(html_path: Path) -> str:
    import html

    body = re.sub(r"<(script|style)\b.*?</\1>", "", html_path.read_text(encoding="utf-8"), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def _prose(markdown: str) -> str:
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", markdown, flags=re.S))


def test_every_brace_set_in_a_page_survives_the_build(site):
    """attr_list takes a trailing `{...}` for attributes: a grid written {8..16, 20} at the end of
    a table cell vanished from the methods page while --strict passed."""
    for page in DOCS.rglob("*.md"):
        rel = page.relative_to(DOCS)
        built = site / ("index.html" if rel.name == "index.md" and rel.parent == Path(".") else
                        rel.parent / ("" if rel.stem == "index" else rel.stem) / "index.html")
        sets = [m.group(0) for m in re.finditer(r"\{[^}\n]*\}", _prose(page.read_text(encoding="utf-8")))
                if not m.group(0).startswith(("{:", "{#", "{."))]
        text = _page_text(built) if sets else ""
        for s in sets:
            assert re.sub(r"\s+", " ", s) in text, f"docs/{rel}: {s} is not on the built page (write it as code)"


def test_the_home_page_takes_its_figures_from_the_readme(site):
    """docs/index.md said the demo takes 5 minutes and the suite about 9 while README.md said
    8-9 and 19: the home page now includes README's section, and no page restates a figure of
    the set-up commands that README does not give."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Two commands\n.*?(?=^## )", readme, flags=re.M | re.S).group(0)
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert "<!-- fairdp:readme-two-commands -->" in index
    assert not _DURATION.findall(_prose(index)) and "H100" not in index and "H200" not in index
    home = _page_text(site / "index.html")
    for figure in _DURATION.findall(section) + re.findall(r"\d[\d,]* passed", section):
        assert figure in home, f"README's {figure!r} is not on the built home page"
    for page in DOCS.rglob("*.md"):
        if page == DOCS / "development.md":  # the suite's timing history, each figure dated by its commit
            continue
        for sentence in _SENTENCE.findall(_prose(page.read_text(encoding="utf-8"))):
            for figure in _DURATION.findall(sentence):
                assert figure in section, (f"docs/{page.relative_to(DOCS)} gives {figure!r} for a make command; "
                                           "README.md's 'Two commands' is the one place for these figures")


def test_setup_says_what_it_installs_before_each_quiet_install():
    """`make setup` ran pip --quiet for minutes with nothing on the terminal."""
    recipe = re.search(r"^\$\(STAMP\):.*?\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), flags=re.M).group(1)
    lines = [ln.strip() for ln in recipe.splitlines()]
    installs = [i for i, ln in enumerate(lines) if "pip install" in ln or "$(PIP)" in ln]
    assert installs
    for i in installs:
        assert any(ln.lstrip("@").startswith("echo") for ln in lines[max(0, i - 2):i]), lines[i]
