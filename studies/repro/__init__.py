"""Reproductions and shipped models on MNIST: completion, LoRA, the demo, pretrained/
(studies/__init__.py's MAP lists every module)."""
