"""trainer.progress: a tqdm bar on a terminal, plain lines in a log file (a bar's
carriage returns glue a redirected log's lines together)."""
import io

from trainer import progress


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_off_a_terminal_the_bar_is_plain_lines_on_one_a_tqdm_bar():
  log = io.StringIO()
  b = progress.bar(10, "eval", file=log, every_s=0, unit="batch")
  assert isinstance(b, progress.Plain)
  for _ in range(10):
    b.update(1)
  b.set_postfix(loss="1.5", refresh=False)
  b.close()
  b.close()                                   # once
  lines = log.getvalue().splitlines()
  assert "\r" not in log.getvalue() and len(lines) == 11, lines
  assert lines[0].startswith("eval: 1/10 (10%), ") and "batch/s" in lines[0]
  assert "ETA" in lines[0] and lines[-1].startswith("eval: 10/10 (100%)")
  assert lines[-1].endswith("loss=1.5")
  quiet = io.StringIO()
  b = progress.bar(None, "BLEU", file=quiet, every_s=3600)   # a line at most hourly
  b.update(5)
  assert quiet.getvalue() == ""
  b.close()
  assert quiet.getvalue().startswith("BLEU: 5, ")             # and one at the end
  tty = Terminal()
  b = progress.bar(3, "train", file=tty)
  assert not isinstance(b, progress.Plain)
  b.update(3)
  b.close()
  assert "\r" in tty.getvalue()
