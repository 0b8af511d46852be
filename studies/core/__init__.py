"""The shared core of the studies: the protocol, the sweep runner, runs and ledgers,
timing, plots, pages and their index (studies/__init__.py's MAP lists every module)."""
