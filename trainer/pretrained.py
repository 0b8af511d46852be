"""Shipped pretrained models: a folder per model under pretrained/ (this repository's),
the format, and its checksum, checked on every load.

  pretrained/<name>/weights.npz      the model's variables (parameters and buffers; no
                                     optimizer state, no RNG state), one array per path
  pretrained/<name>/pretrained.json  what train.py writes as workdir/config.json
                                     ("config", "model") and the provenance: the
                                     command that trained it, commit, machine, date,
                                     wall time, steps, test bits/dim, and "sha256",
                                     the checksum of weights.npz

  trainer.load_model("mnist14_linear")    # by name, like a workdir: (config, model, step)
  python eval.py --pretrained=mnist14_linear

`read` refuses weights whose sha256 differs from the recorded one (`ChecksumError`,
naming the file and both sums) and `fill` refuses arrays that are not the model's
(a missing, extra or differently shaped variable, named). Writing one from a workdir:
`studies.repro.shipping.export` (`python -m scripts.export_pretrained`).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib

import jax
import numpy as np
from flax import nnx

from trainer.config import TrainError

ROOT = pathlib.Path(__file__).resolve().parent.parent / "pretrained"
META, WEIGHTS = "pretrained.json", "weights.npz"
MAX_BYTES = 3 * 2 ** 20          # a shipped model's size limit (weights.npz)
STATE = nnx.Not(nnx.RngState)    # what is shipped of a model: all but its RNG streams


class ChecksumError(TrainError):
  """Shipped weights whose sha256 is not the one their pretrained.json records."""


def _flat(tree) -> tuple[list[str], list, object]:
  """(path strings, leaves, treedef) of a pure dict, paths like "blocks/0/attn/q/kernel"."""
  pairs, treedef = jax.tree_util.tree_flatten_with_path(tree)
  paths = ["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
           for p, _ in pairs]
  return paths, [v for _, v in pairs], treedef


def weights(model) -> dict[str, np.ndarray]:
  """{path: host array} of the model's shipped variables (all but RNG state), in their
  own dtypes."""
  paths, leaves, _ = _flat(nnx.to_pure_dict(nnx.state(model, STATE)))
  return {p: np.asarray(v) for p, v in zip(paths, leaves)}


def fill(model, arrays: dict, where: str = "the shipped weights") -> None:
  """Loads {path: array} (as `weights` returns) into model, in place. Raises TrainError
  naming the first missing, unexpected or differently shaped variable."""
  state = nnx.state(model, STATE)
  paths, leaves, treedef = _flat(nnx.to_pure_dict(state))
  missing = [p for p in paths if p not in arrays]
  extra = sorted(set(arrays) - set(paths))
  if missing or extra:
    raise TrainError(f"{where} do not fit the model their config builds: missing "
                     f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unexpected "
                     f"{extra[:3]}{'...' if len(extra) > 3 else ''}")
  for p, like in zip(paths, leaves):
    if tuple(arrays[p].shape) != tuple(like.shape):
      raise TrainError(f"{where}: {p} has shape {tuple(arrays[p].shape)}, the model's "
                       f"is {tuple(like.shape)}")
  new = jax.tree_util.tree_unflatten(
      treedef, [jax.numpy.asarray(arrays[p], dtype=l.dtype) for p, l in zip(paths, leaves)])
  nnx.replace_by_pure_dict(state, new)
  nnx.update(model, state)


def sha256(path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def save(folder, model, meta: dict, max_bytes: int = MAX_BYTES) -> dict:
  """Writes weights.npz and pretrained.json (meta plus sha256 and bytes) into folder;
  returns the metadata written. Refuses (TrainError, nothing written) weights larger
  than max_bytes."""
  buf = io.BytesIO()
  np.savez(buf, **weights(model))
  data = buf.getvalue()
  if len(data) > max_bytes:
    raise TrainError(f"the weights are {len(data) / 2 ** 20:.2f} MiB, over the "
                     f"{max_bytes / 2 ** 20:.2f} MiB limit of a shipped model; nothing "
                     "was written")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  meta = {**meta, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
  for name, payload in ((WEIGHTS, data), (META, (json.dumps(meta, indent=1,
                                                            sort_keys=True) + "\n").encode())):
    tmp = folder / (name + ".tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, folder / name)       # a reader never sees half a file
  return meta


def names(root=None) -> list[str]:
  """The shipped models under root (default ROOT), sorted."""
  root = pathlib.Path(root or ROOT)
  return sorted(p.name for p in root.iterdir() if (p / META).is_file()) if root.is_dir() else []


def find(name_or_path, root=None) -> pathlib.Path | None:
  """The folder of a shipped model: name_or_path itself if it holds a pretrained.json,
  else, for a bare name that is no existing path, root/<name> (root: default ROOT);
  None otherwise (a train.py workdir, or nothing)."""
  p, root = pathlib.Path(name_or_path), root or ROOT
  if (p / META).is_file():
    return p
  if not p.exists() and len(p.parts) == 1 and (pathlib.Path(root) / p / META).is_file():
    return pathlib.Path(root) / p
  return None


def read(folder) -> tuple[dict, dict]:
  """(metadata, {path: array}) of the shipped model in folder, its checksum checked
  (ChecksumError on a mismatch, TrainError on a missing file)."""
  folder = pathlib.Path(folder)
  meta_path, w = folder / META, folder / WEIGHTS
  try:
    meta = json.loads(meta_path.read_text())
    want = meta["sha256"]
  except (OSError, ValueError, KeyError) as e:
    raise TrainError(f"{meta_path} is not a shipped model's record ({e!r})") from None
  if not w.is_file():
    raise TrainError(f"{w} is missing: the shipped model {folder.name} is incomplete")
  got = sha256(w)
  if got != want:
    raise ChecksumError(f"checksum mismatch for {w}: {meta_path.name} records sha256 "
                        f"{want}, the file has {got}; the file is corrupt or was "
                        "replaced: restore it (git checkout) or re-export it")
  with np.load(w, allow_pickle=False) as z:
    return meta, {k: z[k] for k in z.files}
