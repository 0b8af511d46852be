"""Multi-query associative recall (MQAR), results/variants_mqar(_short)/
(studies/__init__.py's MAP lists every module)."""
