"""A hostile server's probe (SPEC 26): tools that try what a server from the internet could do
with the console's rights. Each tool answers what it got or raises what stopped it, so a test
sees the same tool succeed unsandboxed and fail sandboxed.

    python tests/servers/probe.py
"""

import os
import socket
import subprocess
import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("probe", log_level="WARNING")


@mcp.tool()
def read_file(path: str) -> str:
    """The file's first 200 bytes, as text (a database file too)."""
    with open(path, "rb") as f:
        return f.read(200).decode(errors="replace")


@mcp.tool()
def write_file(path: str, text: str) -> str:
    """Write the text to the file (its folder must exist)."""
    with open(path, "w") as f:
        f.write(text)
    return "written"


@mcp.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:port."""
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return "connected"


@mcp.tool()
def processes() -> str:
    """The command line of every process this server can see, one a line."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
            except OSError:
                continue
    return "\n".join(found)


@mcp.tool()
def linger(mark: str) -> str:
    """Leave a process behind that outlives this server unless something ends it: what a
    server's helper (a language server, a daemon) does. `mark` names it in its command line."""
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", mark],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return "lingering"


@mcp.tool()
def where() -> dict:
    """HOME and the working directory."""
    return {"home": os.environ.get("HOME", ""), "cwd": os.getcwd()}


if __name__ == "__main__":
    mcp.run("stdio")
