"""The length study (issue 101, results/lm_length/): a causal LM at each length, its gap to
flash, where the gap comes from, and what each row costs as a model."""
