# attnlab: `make demo` runs the main job, `make test` the test suite.
# A Python >= 3.12 (jax 0.11 needs it); scripts/find_python.sh says where it looked.
PYTHON ?= $(shell scripts/find_python.sh)
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)
# malloc's large blocks on transparent huge pages (glibc >= 2.35; ignored elsewhere):
# XLA:CPU's buffers of a step otherwise fault in 4 KiB at a time on every step.
# results/cpu_presets/ measures each preset with it and without; studies/core/runs.py says
# more (the studies' child processes get it too). A GLIBC_TUNABLES of yours stands.
export GLIBC_TUNABLES ?= glibc.malloc.hugetlb=1
# GPU=cuda12 (or cuda13): also install jax's CUDA plugin at the jax version pinned in
# requirements.txt, e.g. `make demo GPU=cuda12`. Unset: the CPU build only.
# GPU=cuda13-local (or cuda12-local): the plugin alone, over the CUDA the machine has
# installed (match its major version: `nvidia-smi` names it).
GPU ?=
# WHEELS=DIR: install offline from the wheels in DIR (pip --no-index --find-links), for
# a machine that reaches no package registry. SYSTEM_SITE=1: the environment also sees
# the interpreter's own packages (a GPU image's jax, jaxlib and CUDA plugin at the
# pinned versions), so that only the missing wheels travel. The GPU machines' recipe:
#   bash ../shared/gpu/wheels.sh   (here; then .whl travels with the tree)
#   make setup GPU=cuda13-local WHEELS=.whl SYSTEM_SITE=1 && make test-gpu GPU=cuda13-local
WHEELS ?=
SYSTEM_SITE ?=
PIP_FROM := $(if $(WHEELS),--no-index --find-links $(WHEELS))
STAMP := $(VENV)/.installed$(if $(GPU),-$(GPU))
# pytest workers for `make test-gpu` (they share the GPU: conftest.py turns off
# XLA's preallocation of 75% of its memory per process)
GPU_WORKERS ?= 4

DEMO_DIR ?= workdirs/mnist_demo
# The shipped pretrained model `make demo` shows beside the user's own run (pretrained/).
SHIPPED ?= mnist14_linear

.PHONY: demo demo-page pages data test test-all test-gpu table setup clean lora-mnist tensorboard

# (Re)creates the virtual environment when it is missing, was made by another Python,
# or requirements changed.
$(STAMP): requirements.txt
	@v() { "$$1" -c 'import sys; print(sys.version_info[:2])' 2>/dev/null; }; \
	  if [ -x $(PY) ] && [ "$$(v $(PY))" != "$$(v $(PYTHON))" ]; then \
	    echo "$(VENV) was made by Python $$(v $(PY)); remaking it with $(PYTHON)"; rm -rf $(VENV); fi
	test -x $(PY) || $(PYTHON) -m venv $(if $(SYSTEM_SITE),--system-site-packages) $(VENV)
	$(if $(WHEELS),,$(PY) -m pip install -q --upgrade pip)
	$(PY) -m pip install -q $(PIP_FROM) -r requirements.txt
	$(if $(GPU),$(PY) -m pip install -q $(PIP_FROM) "jax[$(GPU)]==$$($(PY) -c 'import jax; print(jax.__version__)')")
	touch $@

setup: $(STAMP)

# Copies (or downloads) and verifies the raw datasets into .data/ (or $$ATTNLAB_DATA_DIR),
# then builds the TFDS datasets and the Multi30k sentencepiece model.
data: $(STAMP)
	$(PY) -m data build

# The main job: evaluate the shipped pretrained model $(SHIPPED) (its completions,
# judged, and images/s), then train your own small linear-attention MNIST pixel model
# (14×14, about 5 min on 2 CPU cores) and evaluate it the same way: test bits/dim,
# completion PNG, images/s. The page of both goes to $(DEMO_DIR)/page/README.md
# (untracked: the tree stays clean).
# A finished $(DEMO_DIR) is not retrained; `rm -rf $(DEMO_DIR)` to start over.
demo: $(STAMP)
	$(PY) -m data fetch mnist
	$(PY) eval.py --pretrained=$(SHIPPED) --out=$(DEMO_DIR)/shipped
	$(PY) train.py --config=configs/mnist_demo.py --workdir=$(DEMO_DIR)
	$(PY) eval.py --workdir=$(DEMO_DIR)
	$(PY) -m scripts.demo_results --workdir=$(DEMO_DIR) --shipped=$(SHIPPED)

# Rewrites the committed results/mnist_demo/ page from a finished `make demo` run.
demo-page: $(STAMP)
	$(PY) -m scripts.demo_results --workdir=$(DEMO_DIR) --out=results/mnist_demo

# Rewrites every results page from the JSON committed beside it (nothing is measured):
# the list of pages and their commands is studies/core/all_pages.py's PAGES.
pages: $(STAMP)
	$(PY) -m scripts.pages

# The seed report's LoRA study, redone: results/lora_mnist/ (about 15 min, 2 cores).
lora-mnist: $(STAMP)
	$(PY) -m data fetch mnist
	$(PY) -m scripts.lora_mnist --preset=full

# The suite less the tests marked slow (end-to-end study runs): CI's command, within
# 10 minutes on 2 cores. test-all: every test.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow" --durations=25

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=10

# The whole suite on the GPU (make test-gpu GPU=cuda12); fails if jax sees no GPU.
test-gpu: $(STAMP)
	$(PY) -c 'import jax, sys; sys.exit(jax.default_backend() != "gpu" and "jax sees no GPU: " + str(jax.devices()))'
	$(PY) -m pytest -q -n $(GPU_WORKERS)

# TensorBoard over the runs' events (workdir/tb) under LOGDIR, on http://localhost:6006.
tensorboard: $(STAMP)
	$(VENV)/bin/tensorboard --logdir $(or $(LOGDIR),workdirs)

# Rewrites the variant, positions and segments tables in docs/variants.md from the registry.
table: $(STAMP)
	$(PY) -m scripts.variant_table --write

clean:
	rm -rf $(VENV) .pytest_cache
