"""Test server that never answers anything: reads stdin, writes nothing to stdout.

Exits when stdin closes. HANG_STUBBORN=1: ignore SIGTERM and stay alive after stdin closes
(only SIGKILL ends it), to exercise a client's kill escalation.
"""

import os
import signal
import time

stubborn = os.environ.get("HANG_STUBBORN")
if stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while os.read(0, 65536):
    pass
while stubborn:
    time.sleep(3600)
