"""Tests of the resources layer."""
