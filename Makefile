# Two commands a new user needs: `make index` (index the bundled book) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1

.PHONY: setup index test bench ui clean

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

# the quick benches over an existing index (run `make index` first); bench/README.md lists the others
bench: setup
	$(PY) bench/eval_gold.py
	$(PY) bench/bench_graph.py

ui: setup
	$(VENV)/bin/kgloom ui

clean:
	rm -rf data/output .dagster_home
