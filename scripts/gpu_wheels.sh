#!/usr/bin/env bash
# Fills <repo>/.whl with the Python 3.12 wheels that `make setup WHEELS=.whl
# SYSTEM_SITE=1 GPU=cuda13-local` needs on a GPU machine that reaches no registry: every
# pin of requirements.txt except jax and jaxlib (the machine's image has them, with its
# CUDA plugin, at the pinned version), each with --no-deps, plus the dependencies of
# those pins that the image lacks (../shared/gpu/wheels.sh's list). pip then takes
# what the image already has at a satisfying version and installs the rest from here.
#   bash scripts/gpu_wheels.sh        (repo root, on a machine that reaches PyPI)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
mkdir -p "$root/.whl"
grep -qx '/.whl/' "$root/.git/info/exclude" 2>/dev/null || echo '/.whl/' >> "$root/.git/info/exclude"
cd "$root/.whl"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
opts=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .)
pins=$(grep -E '^[A-Za-z].*==' "$root/requirements.txt" | grep -v 'python_version < "3.12"' \
       | sed 's/;.*//' | grep -vE '^(jax|jaxlib)==')
for p in $pins dm-tree immutabledict simple_parsing docstring-parser tensorflow-metadata \
         googleapis-common-protos termcolor toml; do
  python3 -m pip download -q "${opts[@]}" "$p" 2>&1 | grep -v '^WARNING' || true
done
ls promise-*.whl >/dev/null 2>&1 || python3 -m pip wheel -q --no-deps promise -w . 2>&1 | grep -v '^WARNING' || true
ls -1 | wc -l
du -sh .
