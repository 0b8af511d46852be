# attnlab: `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)

DEMO_DIR ?= workdirs/mnist_demo

.PHONY: demo data test table setup clean lora-mnist

# (Re)creates the virtual environment when it is missing or requirements changed.
$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

setup: $(VENV)/.installed

# Copies (or downloads) and verifies the raw datasets into .data/ (or $$ATTNLAB_DATA_DIR),
# then builds the TFDS datasets and the Multi30k sentencepiece model.
data: $(VENV)/.installed
	$(PY) -m data.fetch --build

# The main job: train a small linear-attention MNIST pixel model (a few minutes on
# 2 CPU cores), then evaluate it: test bits/dim, completion PNG, images/s.
# A finished $(DEMO_DIR) is not retrained; `rm -rf $(DEMO_DIR)` to start over.
demo: $(VENV)/.installed
	$(PY) -m data.fetch mnist
	$(PY) train.py --config=configs/mnist.py --workdir=$(DEMO_DIR)
	$(PY) eval.py --workdir=$(DEMO_DIR) --eval_batches=0
	$(PY) -m scripts.demo_results --workdir=$(DEMO_DIR)

# The seed report's LoRA study, reproduced: results/lora_mnist/ (about 15 min, 2 cores).
lora-mnist: $(VENV)/.installed
	$(PY) -m data.fetch mnist
	$(PY) -m scripts.lora_mnist --preset=full

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2

# Rewrites the variant table in README.md from the registry.
table: $(VENV)/.installed
	$(PY) -m scripts.variant_table --write

clean:
	rm -rf $(VENV) .pytest_cache
