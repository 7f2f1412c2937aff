"""The tests' own harness (issue 29.1): a test that fails while threads it started are still
calling ends, and so does the run. A pytest run of a failing test is started here as a
subprocess and must end, failed, within a bound; the same test written the old way (callers
that loop until an event the failure never sets) is shown to hang, so the check can tell."""

import subprocess
import sys
import textwrap

from tests.live import ROOT, free_port

BOUND = 30.0  # seconds for a whole pytest run of one failing test

FAILING_TEST = """
import threading
import time

import httpx2

from tests.live import background, wait_until

URL = "http://127.0.0.1:{port}/v1/mcp/call"  # nothing listens: every call fails at once


def caller(stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            httpx2.post(URL, json={{}}, timeout=5)
        except httpx2.HTTPError:
            stop.wait(0.2)


def test_it_fails_while_callers_run():
    with background(caller, (), ()):
        wait_until(lambda: False, 0.5, what="something that never comes")
"""

OLD_WAY = """
import threading

import httpx2

from tests.live import wait_until

URL = "http://127.0.0.1:{port}/v1/mcp/call"


def test_it_fails_while_callers_run():
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            try:
                httpx2.post(URL, json={{}}, timeout=5)
            except httpx2.HTTPError:
                pass

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: False, 0.5, what="something that never comes")
    stop.set()
"""


def run_alone(tmp_path, source: str, timeout: float) -> subprocess.CompletedProcess:
    test = tmp_path / "test_alone.py"
    test.write_text(textwrap.dedent(source.format(port=free_port())))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django", str(test)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_test_that_fails_inside_a_background_block_ends_and_so_does_the_run(tmp_path):
    out = run_alone(tmp_path, FAILING_TEST, BOUND)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed" in out.stdout and "something that never comes not reached" in out.stdout


def test_the_old_way_of_looping_callers_is_seen_to_hang(tmp_path):
    try:
        out = run_alone(tmp_path, OLD_WAY, 8)
    except subprocess.TimeoutExpired as exc:
        printed = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        assert "1 failed" in printed  # its summary printed, and then no end
    else:
        raise AssertionError(f"the old way ended: {out.stdout[-500:]}")
