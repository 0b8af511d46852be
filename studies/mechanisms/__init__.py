"""One mechanism each, trained or probed: attention maps, the gated layer, MLA's cache,
packing, positions (studies/__init__.py's MAP lists every module)."""
