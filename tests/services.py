"""Real Redis and PostgreSQL servers for tests: started on free local ports in temporary
folders, stopped at the end. PostgreSQL refuses to run as root, so as root it runs as the
`postgres` system user the Debian package creates."""

import os
import shutil
import subprocess
from pathlib import Path

from tests.live import free_port, wait_until


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (scripts/install-system.sh installs it)")
    return found[-1].parent


def _end(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL if the server outlives `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Redis:
    def __init__(self, base: Path) -> None:
        self.port = free_port()
        self.dir = base / "redis"
        self.dir.mkdir(parents=True)
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        try:
            wait_until(self._ping, 10, what="redis up")
        except BaseException:
            self.stop()
            raise

    def _ping(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return out.stdout.strip() == "PONG"

    def stop(self) -> None:
        _end(self.proc, 10)


class Postgres:
    def __init__(self, base: Path) -> None:
        self.port = free_port()
        self.dir = base / "pg"
        self.dir.mkdir(parents=True)
        self.bin = _pg_bin()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
            os.chmod(base, 0o755)
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.dir / "data"),
                "-U",
                "agenvoy",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        self.proc = subprocess.Popen(
            self._wrap(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.dir / "data"),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.dir),
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(self._ready, 30, 0.2, what="postgres up")
            self._run(self._on_our_database("createdb"))
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql://agenvoy@127.0.0.1:{self.port}/agenvoy"

    def _on_our_database(self, tool: str) -> list[str]:
        """A PostgreSQL client command on the `agenvoy` database as the `agenvoy` role."""
        return [str(self.bin / tool), "-h", "127.0.0.1", "-p", str(self.port), "-U", "agenvoy", "agenvoy"]

    def _wrap(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_root else cmd

    def _run(self, cmd: list[str]) -> None:
        out = subprocess.run(self._wrap(cmd), capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {out.stderr[-2000:]}")

    def _ready(self) -> bool:
        return (
            subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            ).returncode
            == 0
        )

    def dump(self) -> bytes:
        """The whole database as `pg_dump` writes it (plain SQL): every row, as stored."""
        out = subprocess.run(
            self._wrap(self._on_our_database("pg_dump")),
            capture_output=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"pg_dump failed: {out.stderr[-2000:]!r}")
        return out.stdout

    def stop(self) -> None:
        _end(self.proc, 15)
