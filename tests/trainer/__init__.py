"""Tests of trainer/."""
