"""The decision page, results/choose/ (studies/__init__.py's MAP lists every module)."""
