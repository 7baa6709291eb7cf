"""Tests of the surface layer."""
