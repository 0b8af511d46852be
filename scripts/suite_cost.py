"""What `make test` costs: CPU seconds, wall time and outcome with the machine's matmul
gauge, into results/suite/ (the study: studies/bench/suite_cost.py; the budget:
docs/testing.md).

  python -m scripts.suite_cost                      # runs `make test` here, ~10 minutes
  python -m scripts.suite_cost --cwd=../fresh       # in a fresh clone (a relative path:
                                                    # the page records the command)
  python -m scripts.suite_cost --page_only          # the page from results.json
  python -m scripts.suite_cost --cwd=../old --out=workdirs/old  # an older commit, then
  python -m scripts.suite_cost --add=workdirs/old/results.json  # into the history

Run it on an idle machine: the CPU seconds hold under load, the wall time does not.
"""
import argparse
import os

from studies.bench import suite_cost as sc
from studies.core import pages


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--cwd", default=".", help="the checkout to run the command in")
  p.add_argument("--command", default=" ".join(sc.COMMAND), help="the command, in words")
  p.add_argument("--out", default=sc.OUT)
  p.add_argument("--page_only", action="store_true",
                 help="rewrite the page from <out>/results.json")
  p.add_argument("--add", default="",
                 help="a results.json this command wrote elsewhere (e.g. --out=workdirs/x for "
                      "an older commit's clone): add it to <out>/history.json, keep "
                      "<out>/results.json, rewrite the page")
  p.add_argument("--cpu_log", default="",
                 help="keep every test's CPU seconds (JSON lines) at this path")
  a = p.parse_args(argv)
  if a.add:
    sc.append(pages.read_json(a.add), a.out)
  if a.page_only or a.add:
    rec = pages.read_json(os.path.join(a.out, "results.json"))
  else:
    rec = sc.measure(a.command.split(), cwd=a.cwd, by=pages.command_line(
        "scripts.suite_cost", argv, drop=("--out", "--cpu_log")),
        keep_log=os.path.abspath(a.cpu_log) if a.cpu_log else None)
    print(f"{rec['cpu_s']:.0f} CPU-s ({rec['user_s']:.0f} user + {rec['sys_s']:.0f} "
          f"system), {rec['wall_s']:.0f} s wall, status {rec['status']}: "
          f"{rec.get('passed', 0)} passed, {rec.get('failed', 0)} failed")
  sc.write(rec, a.out)
  print(f"wrote {a.out}/README.md")


if __name__ == "__main__":
  main()
