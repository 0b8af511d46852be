"""Tests of attention/."""
