"""What the length study's `gpu` preset carries to a lent GPU and back (issue 105 item 3).

The GPU machine reaches no registry and a device call carries at most 64 MiB, so:
  to it      the sdists of the preset's slice of the corpus (`slice_packages`: the
             PACKAGES whose extracted folder the preset's `files` glob reads; networkx
             and pygments, 7 MB of the 21 MB), copied from the data dir into a mirror
             folder the call carries (`mirror_slice`, on this machine), then verified
             by sha256 and extracted there (`prepare_slice`, data.pycode.prepare);
  back       a tarball (`pack`) of the preset's page folder (its ledger: a run there
             is never trained again) and of each run's workdir that has no result.json
             yet (a run cut off by the call's time limit), with its newest checkpoint
             only (about 10 MB for this model); the next call carries the workdirs and
             the committed ledger, and the run resumes from that checkpoint.
"""
from __future__ import annotations

import fnmatch
import os
import pathlib
import shutil
import tarfile

from data import fetch, pycode
from studies.length import presets


def slice_packages(preset: str = "gpu") -> list:
  """The data.pycode.PACKAGES entries whose top folder under <data_dir>/pycode the
  preset's `files` glob reads (all of them for a preset that reads the whole corpus)."""
  p = presets.preset(preset)
  if not p.files:
    return list(pycode.PACKAGES)
  top = p.files.split("/")[1]           # "pycode/[np]*/**/*.py" -> "[np]*"
  got = [x for x in pycode.PACKAGES if fnmatch.fnmatch(x[0], top)]
  if not got:
    raise ValueError(f"preset {preset}: its files {p.files!r} match no package of "
                     f"data.pycode ({', '.join(x[0] for x in pycode.PACKAGES)})")
  return got


def mirror_slice(dest: str, preset: str = "gpu", data_dir=None) -> list[str]:
  """Copies the slice's verified archives (fetching any missing: data.pycode) into
  dest/pycode_sdist/, the layout a data mirror has. Returns the copied paths."""
  archives = pycode.fetch_archives(data_dir, packages=slice_packages(preset))
  folder = pathlib.Path(dest) / pycode.SDIST_SUBDIR
  folder.mkdir(parents=True, exist_ok=True)
  out = []
  for name, path in archives.items():
    shutil.copyfile(path, folder / name)
    out.append(str(folder / name))
  return out


def prepare_slice(preset: str = "gpu", data_dir=None, mirror=None, log=None) -> pathlib.Path:
  """On the GPU machine: the slice's archives from `mirror` (default the data mirror,
  $ATTNLAB_DATA_MIRROR), sha256-checked, extracted under <data_dir>/pycode. Never
  downloads: a missing archive is a one-line DataError naming it."""
  def refuse(specs, folder):
    raise fetch.DataError(f"{', '.join(specs)}: not in the mirror "
                          f"({mirror or fetch.default_mirror()}/{pycode.SDIST_SUBDIR}); "
                          "carry it (python -m scripts.lm_length --mirror_slice=.mirror)")
  return pycode.prepare(data_dir, mirror, log, download=refuse,
                        packages=slice_packages(preset))


def unfinished(root: str, preset: str = "gpu") -> list[str]:
  """The run workdirs under root/<preset>/ with no result.json (cut off mid-run)."""
  base = os.path.join(root, preset)
  if not os.path.isdir(base):
    return []
  return sorted(os.path.join(base, n) for n in os.listdir(base)
                if os.path.isdir(os.path.join(base, n))
                and not os.path.exists(os.path.join(base, n, "result.json")))


def newest_checkpoint(workdir: str) -> str | None:
  """workdir/checkpoints/<step> of the highest step, or None."""
  ck = os.path.join(workdir, "checkpoints")
  steps = [n for n in os.listdir(ck) if n.isdigit()] if os.path.isdir(ck) else []
  return os.path.join(ck, max(steps, key=int)) if steps else None


def pack(path: str, root: str, out: str, preset: str = "gpu") -> list[str]:
  """Writes the tarball `path` (gzip) of `out` (the preset's page folder) and of each
  unfinished workdir under root/<preset>/ with its newest checkpoint only, the names
  relative to the current folder (the repo root), so that `tar xzf` there puts them
  back. Returns the member folders."""
  members = [out] if os.path.isdir(out) else []
  with tarfile.open(path, "w:gz") as tar:
    if members:
      tar.add(out)
    for wd in unfinished(root, preset):
      keep = newest_checkpoint(wd)
      for name in sorted(os.listdir(wd)):
        full = os.path.join(wd, name)
        if name == "checkpoints":     # the newest step, and what is not a step
          for n in sorted(os.listdir(full)):
            if not n.isdigit() or os.path.join(full, n) == keep:
              tar.add(os.path.join(full, n))
        else:
          tar.add(full)
      members.append(wd)
  return members
