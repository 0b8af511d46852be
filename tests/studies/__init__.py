"""Tests of studies/."""
