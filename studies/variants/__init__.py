"""The variants pages, results/variants_<task>/: every attention variant on one task under
one budget (studies/__init__.py's MAP lists every module)."""
