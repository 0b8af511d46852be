# attnlab: `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)

.PHONY: demo test table setup clean

# (Re)creates the virtual environment when it is missing or requirements changed.
$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

setup: $(VENV)/.installed

# The training demo arrives with the research-loop issue; until then the demo is
# the attention library's own tour (variants, flash vs XLA timing).
demo: $(VENV)/.installed
	$(PY) -m scripts.attention_demo

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2

# Rewrites the variant table in README.md from the registry.
table: $(VENV)/.installed
	$(PY) -m scripts.variant_table --write

clean:
	rm -rf $(VENV) .pytest_cache
