"""Trains the MNIST digit classifier that judges completions, and reports it.

  python -m scripts.train_classifier [--side=28] [--shift=] [--data_dir=] [--force]

Without --force a saved classifier whose checksums and recipe match is reused (that
is what eval.py does on demand); --force retrains it. Prints the test accuracy on the
10,000 test images, the training time and where the files are
(<data_dir>/classifier/mnist_<side>[_<shift>]/, see trainer/digit_judge.py). Exits with
status 1 if a 28×28 classifier is below the project's 99% target.
"""
import argparse
import json
import shutil
import sys

TARGET = 0.99


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--side", type=int, default=28, help="image_size of the pixel models")
  ap.add_argument("--shift", default="", help="config.shift of the pixel models")
  ap.add_argument("--data_dir", default=None, help="default: $ATTNLAB_DATA_DIR or .data")
  ap.add_argument("--force", action="store_true", help="retrain even if a valid one exists")
  a = ap.parse_args(argv)
  from trainer import digit_judge
  folder = digit_judge.path(a.side, a.shift, a.data_dir)
  if a.force and folder.exists():
    shutil.rmtree(folder)
  _, meta = digit_judge.load(a.side, shift=a.shift, data_dir=a.data_dir,
                            log=lambda s: print(s, flush=True))
  print(json.dumps(meta, indent=1))
  print(f"classifier {folder}: test accuracy {meta['test_accuracy']:.4f}, trained in "
        f"{meta['train_seconds']:.0f} s on {meta['cpu_count']} CPU cores "
        f"({meta['device']}, jax {meta['jax']}, {meta['date']})")
  if a.side == 28 and not a.shift and meta["test_accuracy"] < TARGET:
    print(f"below the {TARGET:.0%} target", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
