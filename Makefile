# Two commands a new user needs: `make index` (index the bundled book) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1

.PHONY: setup index test test-fast lint bench ui clean

setup: $(VENV)/.installed

# torch is pinned to the CPU build through requirements/constraints.txt; llama-cpp-python
# compiles from source once (~12 min on 2 cores), then pip's cache keeps the wheel.
$(VENV)/.installed: pyproject.toml requirements/constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -c requirements/constraints.txt -e ".[test,distributed,server]"
	touch $@

index: setup
	$(VENV)/bin/kgloom index

# pytest exits 5 when it collects no test; that alone is not a failure here.
test: setup
	$(PY) -m pytest -q -rs --durations=10 || [ $$? -eq 5 ]

# The inner loop, under 2 minutes on 2 cores: leaves out the tests marked slow (the real
# model or embedder) and integration (the asset graph, a server, a browser or another
# program end to end); `make test` runs them all, as CI does.
test-fast: setup
	$(PY) -m pytest -q -m "not slow and not integration" --durations=5 || [ $$? -eq 5 ]

# ruff and pyright (basic mode), configured in pyproject.toml; CI runs it before the tests.
# PYRIGHT_PYTHON_IGNORE_WARNINGS: no look-up of the newest pyright on each run.
lint: setup
	$(VENV)/bin/ruff check kgloom tests bench
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(VENV)/bin/pyright --pythonpath $(PY)

# the quick benches over an existing index (run `make index` first); bench/README.md lists the others
bench: setup
	$(PY) bench/eval_gold.py
	$(PY) bench/bench_graph.py

ui: setup
	$(VENV)/bin/kgloom ui

clean:
	rm -rf data/output
