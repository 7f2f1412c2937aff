"""The scale-out suite's fixture: one cluster per test module (tests/scaleout/cluster.py)."""

import pytest

from tests.scaleout.cluster import Cluster


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.close()
