"""Speed, memory and error measurements of the attention ops and of the project itself,
results/benchmarks/ and their sibling pages (studies/__init__.py's MAP lists every
module)."""
