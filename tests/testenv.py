"""Loaded as a pytest plugin (`-p tests.testenv` in pytest.ini), before pytest-django reads
the settings: the data folder and $AGENVOY_HOME of the test run are temporary folders, so no
test touches a real configuration, and two runs never share a test database. (A conftest.py
is loaded only after the settings were read: too late for this.)"""

import os
import tempfile
from pathlib import Path

_RUN_DIR = Path(tempfile.mkdtemp(prefix="agenvoy-test-"))
os.environ["AGENVOY_DATA_DIR"] = str(_RUN_DIR / "data")
os.environ["AGENVOY_HOME"] = str(_RUN_DIR / "home")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key-not-for-production")
# The loop guard (SPEC 25.2) off for the run, consoles started by tests included (they inherit
# this environment): property tests and module-wide consoles repeat one call of one token many
# times on purpose. The tests of the guard itself turn it on (tests/test_guards.py).
os.environ.setdefault("AGENVOY_REPEAT_LIMIT", "0")
