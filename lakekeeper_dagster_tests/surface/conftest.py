"""Fixtures of the surface tests: the observed tables (`test_observations.make_observed_tables`), for the modules that
do not define `tables` themselves."""

from __future__ import annotations

import pytest

from lakekeeper_dagster_tests.surface.test_observations import make_observed_tables


@pytest.fixture
def tables(spark, database, data_dir):
    return make_observed_tables(spark, database, data_dir)
