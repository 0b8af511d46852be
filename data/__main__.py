"""The data command line (what `make data` and `make demo` run).

  python -m data fetch [--data_dir DIR] [--mirror DIR] [dataset ...]
      copies (or downloads) and verifies the raw files, one line per file
  python -m data build [--data_dir DIR] [--mirror DIR] [dataset ...]
      the same, then builds the TFDS datasets and the Multi30k sentencepiece model

Datasets: mnist, tiny_shakespeare, multi30k (default: all). A missing mirror file is
downloaded from its official URL; every file is checked against its sha256
(`data.fetch`). Errors end in one line on stderr and exit status 1.
pycode, named only (`python -m data fetch pycode`: its sdists are downloaded by pip,
~21 MB, unless the mirror holds them), is the code corpus of the text task
(`data.pycode`): fetch and build both verify its archives and extract its tree.
"""
import argparse
import sys

from data import fetch
from data import pycode


def main(argv=None) -> int:
  """Runs the command in argv (default sys.argv[1:]); returns the exit status."""
  p = argparse.ArgumentParser(prog="python -m data",
                              description=__doc__.split("\n")[0])
  sub = p.add_subparsers(dest="command", required=True, metavar="{fetch,build}")
  for name, what in (("fetch", "copy or download, and verify, the raw files"),
                     ("build", "fetch, then build the TFDS datasets and the Multi30k "
                               "sentencepiece model")):
    c = sub.add_parser(name, help=what, description=what)
    c.add_argument("datasets", nargs="*", metavar="dataset",
                   help=f"any of {', '.join(fetch.DATASETS + (pycode.NAME,))} "
                   f"(default: all but {pycode.NAME})")
    c.add_argument("--data_dir", default=None,
                   help="destination (default $ATTNLAB_DATA_DIR or <repo>/.data)")
    c.add_argument("--mirror", default=None, help="local copy to copy from "
                   "(default $ATTNLAB_DATA_MIRROR or <repo>/../shared/data)")
  args = p.parse_args(argv)
  names = args.datasets or list(fetch.DATASETS)
  try:
    for name in names:
      if name == pycode.NAME:
        pycode.prepare(args.data_dir, args.mirror, log=print)
      else:
        fetch.prepare(name, args.data_dir, args.mirror, log=print)
    if args.command == "build":
      from data import builders  # TFDS loads only when something is built
      for name in names:
        if name == pycode.NAME:  # the text task prepares its TFDS form on first use
          continue
        for line in builders.build(name, args.data_dir):
          print(line)
  except fetch.DataError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
