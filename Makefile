# Everything a fresh clone needs: `make demo` runs the main job, `make test` the tests.
# The virtual environment is created on first use. torch is installed first, pinned,
# so that pip never resolves an open `torch` range to a multi-GB CUDA build on a
# CPU-only machine; override TORCH_SPEC (e.g. a CUDA wheel index) elsewhere.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fairdp-installed

.PHONY: setup demo test test-slow test-cuda lint clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev,text]"
	@touch $@

demo: $(STAMP)
	$(PY) -m fairdp run studies/demo.yaml

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow 

# on a machine with a CUDA GPU (and a CUDA torch: TORCH_SPEC); skipped without one
test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda

lint: $(STAMP)
	$(VENV)/bin/ruff check fairdp tests benchmarks

clean-venv:
	rm -rf $(VENV)
