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
