"""A throwaway PostgreSQL server for the SQL tests.

Uses Debian's ``postgresql`` package (``apt-get install -y postgresql``; the
Makefile's test target installs it when ``initdb`` is missing). The cluster
lives in a temp dir, listens on a free loopback port with its socket in that
dir, trusts local connections, and runs as the ``postgres`` user when the
tests run as root (PostgreSQL refuses to run as root). It is stopped and
deleted at the end of the session.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 60
"""pg_ctl -w waits this long for the server to accept connections."""


def find_pg_bin() -> Path | None:
    """Directory holding ``initdb``/``pg_ctl`` (PATH first, then Debian's versioned dirs)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        self.bin = find_pg_bin()
        if self.bin is None:
            pytest.fail("PostgreSQL is not installed: run `apt-get install -y postgresql` (or `make test`, "
                        "which installs it), or deselect with -m 'not postgres'")
        self.root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.run_as: str | None = None
        if os.geteuid() == 0:
            self.run_as = "postgres" if _user_exists("postgres") else "nobody"
            user = pwd.getpwnam(self.run_as)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> "PostgresServer":
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                  "-w", "-t", str(STARTUP_TIMEOUT_S), "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="session")
def postgres_url():
    """SQLAlchemy URL of a PostgreSQL server started for this test session."""
    server = PostgresServer().start()
    try:
        yield server.url
    finally:
        server.stop()
