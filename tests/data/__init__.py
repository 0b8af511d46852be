"""Tests of data/."""
