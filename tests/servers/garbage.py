"""Test server that prints non-JSON lines on stdout instead of speaking MCP.

python tests/servers/garbage.py           prints a few lines, then exits
GARBAGE_FOREVER=1 ...                        keeps printing a line every 0.1 s
"""

import os
import sys
import time

print("this is not JSON", flush=True)
print("{broken json", flush=True)
print('{"jsonrpc": "2.0", "nonsense": true}', flush=True)
while os.environ.get("GARBAGE_FOREVER"):
    print(f"garbage {time.time()}", flush=True)
    time.sleep(0.1)
sys.exit(3)
