# Everything a fresh clone needs: `make demo` runs the main job, `make test` the tests.
# The virtual environment is created on first use. torch is pinned (TORCH_SPEC) so that
# no installer resolves an open `torch` range to a multi-GB CUDA build on a CPU-only
# machine; override TORCH_SPEC to choose another build elsewhere.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fairdp-installed

.PHONY: setup test-tools demo notebook test test-slow test-cuda lint clean-venv

setup: $(STAMP)

# The installs are quiet; each step says what it does and for about how long, so a fresh
# machine's minutes of set-up are not a silent terminal. uv installs the ~220 packages: 14 s
# here against pip's 123 s for the same releases (pip freeze identical). uv reads none of pip's
# configuration, so tools/uv_sources.py hands it pip's find-links, index URLs and constraints
# (a machine's local wheels and version caps hold for both), and uv, like pip, takes the best
# version over all indexes. Where uv cannot be installed or fails, pip installs as it always
# did, torch first and pinned so that pip never resolves an open `torch` range to a CUDA build.
# Byte-compiling the ~26,000 installed modules takes a minute on all cores (compileall -j 0).
# The .pyc files must be there: machines that set PYTHONDONTWRITEBYTECODE (this one does) would
# otherwise compile ray, torch and pandas from source in every process a test starts (make test
# went from 9.6 to 11.2 minutes); fairdp too (an edited module is recompiled in memory until the
# next set-up). The packages' own test folders (3,452 modules) are left out: nothing imports
# them. A few files that are not Python 3.11 (torch's py312 test helpers) do not compile.
UV_SPEC ?= uv==0.13.9
EXTRAS := dev,text,s3,tracking,wandb
PIP := $(PY) -m pip install --quiet --no-compile --disable-pip-version-check
$(STAMP): pyproject.toml Makefile tools/uv_sources.py
	@test -x $(PY) || { echo "make setup: creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "make setup: installing $(TORCH_SPEC), fairdp and its extras $(EXTRAS) (Ray, Optuna, MLflow, ...) with uv"
	@echo "            (under a minute from local wheels; pip's way, the fallback, takes about 2 minutes)"
	@{ $(PIP) "$(UV_SPEC)" && $(VENV)/bin/uv pip install --quiet --python $(PY) \
	    --index-strategy unsafe-best-match $$($(PY) tools/uv_sources.py) \
	    "$(TORCH_SPEC)" -e ".[$(EXTRAS)]"; } || { \
	  echo "make setup: uv did not install; pip instead: $(TORCH_SPEC) first, then fairdp[$(EXTRAS)]"; \
	  $(PIP) "$(TORCH_SPEC)" && $(PIP) -e ".[$(EXTRAS)]"; }
	@echo "make setup: byte-compiling the installed modules on every core"
	@$(PY) -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib fairdp >/dev/null 2>&1 || true
	@echo "make setup: done ($(VENV))"
	@touch $@

demo: $(STAMP)
	$(PY) -m fairdp run studies/demo.yaml
	@echo "make demo: rows equal results/demo-reference bit for bit only on the same kind of CPU (native bf16) with the same torch"
	@echo "  build; elsewhere they should agree within seed noise. To see which: $(VENV)/bin/fairdp compare results/demo results/demo-reference"

# examples/quickstart.ipynb in JupyterLab on 127.0.0.1 (the notebook extra, installed on first use)
notebook: $(STAMP)
	@test -x $(VENV)/bin/jupyter-lab || { echo "make notebook: installing JupyterLab (the notebook extra, a minute)"; \
	  $(PY) -m pip install --quiet --disable-pip-version-check -e ".[notebook]"; }
	$(VENV)/bin/jupyter lab --ip 127.0.0.1 examples/quickstart.ipynb

# Debian's dieharder, the random-number battery tests/test_rng.py runs on the engine's streams,
# Debian's chromium, the headless browser tests/test_report_browser.py renders the HTML
# report in, and shellcheck, which checks cluster/slurm/fairdp.sbatch; installed where apt-get
# can as root, else those tests skip and say so.
TEST_PACKAGES := dieharder chromium shellcheck
test-tools:
	@missing=""; command -v dieharder >/dev/null || missing="dieharder"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $$missing >/dev/null 2>&1; }; }; } || \
	  echo "not installed:$$missing (apt-get install $(TEST_PACKAGES)): their tests will skip"

# pytest-xdist workers. An xdist_group runs whole on one worker (--dist loadgroup), first
# (tests/conftest.py): the network namespace clusters, which must not share the machine with
# each other, and each module whose shared module-scoped runs one worker should compute once.
# Both sets wait on much (Ray and subprocess start-ups, in the slow set cluster start-ups and
# faults held for seconds): 3 workers keep 2 cores busy through those waits (the fast set took
# 9 min 3 s on 3 against 10 min 26 s on 2, back to back on 2 cores; 4 slowed the Ray tests).
TEST_WORKERS ?= 3
SLOW_WORKERS ?= 3
XDIST := --dist loadgroup --durations=15

test: $(STAMP) test-tools
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) $(XDIST)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow -n $(SLOW_WORKERS) $(XDIST)

# on a machine with a CUDA GPU (and a CUDA torch: TORCH_SPEC); skipped without one
test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda

lint: $(STAMP)
	$(VENV)/bin/ruff check fairdp tests benchmarks tools

clean-venv:
	rm -rf $(VENV)
