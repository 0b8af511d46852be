"""The test suite; one folder per package (attention, models, trainer, data, studies)."""
