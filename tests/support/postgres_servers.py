"""Start real PostgreSQL servers for tests: a single server and a primary with a streaming standby.

Plain functions and context managers, no pytest: any test area can import
this file (``tests/postgres/conftest.py`` shows how) and wrap the helpers in
its own fixtures.  Debian's binaries are used (``/usr/lib/postgresql/<ver>/bin``,
the newest version present); the machine's own PostgreSQL on 5432 is never
touched: every server here has its own data directory, a free 127.0.0.1 port
and its Unix socket in its own temporary directory.

* :func:`postgres_server` yields a :class:`PostgresServer` with a database and
  role ``hookrouter`` (trust authentication on 127.0.0.1), ``fsync=on`` and
  ``synchronous_commit=on``.  ``stop(mode)`` / ``start()`` restart it on the
  same port with its data; ``stop("immediate")`` and ``kill9()`` crash it, so
  the next ``start()`` runs crash recovery.
* :func:`primary_with_standby` yields a :class:`Replicated` pair: a primary and
  a hot standby cloned by ``pg_basebackup -R`` and streaming from it; with
  ``sync=True`` the primary's ``synchronous_standby_names`` names the standby,
  so a commit returns only once the standby has flushed it.
* :func:`multi_host_dsn` builds a libpq multi-host URI with
  ``target_session_attrs=read-write`` (what a router uses to follow a failover).

``initdb`` runs once per process into a template that later servers copy
(about 1.5 s saved per server).  Everything started is stopped on exit (by
the postmaster's PID), temporary directories removed, even when the body raises.
When the tests run as root the servers run as the ``postgres`` OS user, since
PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.redis_servers import free_port

DATABASE = "hookrouter"
ROLE = "hookrouter"
SUPERUSER = "postgres"
STANDBY_NAME = "hr_standby"
_OS_USER = "postgres"

# Small and quick: tests want a server in well under a second, not throughput.
_SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "16MB",
    "max_connections": "40",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "max_replication_slots": "5",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1s",
    "checkpoint_timeout": "30min",
    "dynamic_shared_memory_type": "posix",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
}


def pg_bin_dir() -> Path:
    """The bin directory of the newest PostgreSQL installed under /usr/lib/postgresql."""
    root = Path("/usr/lib/postgresql")
    versions = []
    if root.is_dir():
        for child in root.iterdir():
            if re.fullmatch(r"\d+(\.\d+)?", child.name) and (child / "bin" / "initdb").exists():
                versions.append((float(child.name), child / "bin"))
    if not versions:
        raise RuntimeError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql)"
        )
    return max(versions)[1]


def _as_root() -> bool:
    return os.geteuid() == 0


def _server_user_prefix() -> list[str]:
    """Run a command as the ``postgres`` user when we are root (exec, no extra process)."""
    if not _as_root():
        return []
    return ["setpriv", f"--reuid={_OS_USER}", f"--regid={_OS_USER}", "--init-groups", "--"]


def _run_as_server_user(
    args: Sequence[str], timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL binary as the ``postgres`` user when we are root, else as ourselves."""
    cmd = [*_server_user_prefix(), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout}{done.stderr}"
        )
    return done


def _make_owned_tempdir(prefix: str) -> Path:
    """A fresh temporary directory the server user can write."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if _as_root():
        pw = pwd.getpwnam(_OS_USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(0o700)
    return path


def _chown_tree(path: Path) -> None:
    if not _as_root():
        return
    pw = pwd.getpwnam(_OS_USER)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)


def _write_settings(conf: Path, settings: dict[str, str]) -> None:
    """Append settings to a postgresql.conf (later lines override earlier ones)."""
    with conf.open("a") as f:
        f.write("\n# tests/support/postgres_servers.py\n")
        for key, value in settings.items():
            f.write(f"{key} = {value}\n")


# One initdb per process: later servers copy this directory.
_templates: dict[Path, Path] = {}


def _template_dir() -> Path:
    """A data directory from one ``initdb`` per process, with the role and database made."""
    bin_dir = pg_bin_dir()
    if bin_dir in _templates:
        return _templates[bin_dir]
    holder = _make_owned_tempdir("pgtemplate-")
    atexit.register(shutil.rmtree, holder, True)
    data = holder / "data"
    # --no-sync: the template is copied, never crashed; servers made from it run with fsync=on.
    _run_as_server_user(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
         "-E", "UTF8", "--locale=C", "--no-sync"]
    )  # fmt: skip
    (data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "host all all 127.0.0.1/32 trust\n"
        "host replication all 127.0.0.1/32 trust\n"
    )
    # Create the role and database once, in single-user mode (no port, no socket needed).
    boot = subprocess.run(
        [
            *_server_user_prefix(),
            str(bin_dir / "postgres"),
            "--single",
            "-D",
            str(data),
            "postgres",
        ],
        input=(
            f"CREATE ROLE {ROLE} LOGIN REPLICATION;\nCREATE DATABASE {DATABASE} OWNER {ROLE};\n"
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if boot.returncode != 0 or "ERROR" in boot.stdout + boot.stderr:
        raise RuntimeError(f"template setup failed: {boot.stdout}{boot.stderr}")
    _templates[bin_dir] = data
    return data


@dataclass
class PostgresServer:
    """One postmaster that a test controls, in its own data directory."""

    port: int
    root: Path  # holds data/, the socket and the log
    bin_dir: Path
    pid: int | None = field(default=None, repr=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def dsn(self) -> str:
        """libpq URI for the ``hookrouter`` role and database."""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def superuser_dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def configure(self, settings: dict[str, str]) -> None:
        _write_settings(self.data_dir / "postgresql.conf", settings)

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (again, on the same port) and wait until it accepts connections.

        The postmaster is this process's child (``setpriv`` execs it as the
        server user), so its PID is known and a killed postmaster is reaped here.
        """
        if self.running:
            return
        self._reap()
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir),
                "-p", str(self.port), "-k", str(self.socket_dir)]  # fmt: skip
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                _server_user_prefix() + args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own process group: a Ctrl-C in the terminal reaches the tests, not the server.
                start_new_session=True,
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while self._status() not in ("ready", "standby"):
            if self.proc.poll() is not None:
                self._reap()
                raise RuntimeError(f"postgres on {self.port} exited\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"postgres on {self.port} not ready\n{self.log_tail()}")
            time.sleep(0.01)

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop the server by signalling its PID.

        ``smart``/``fast`` shut down cleanly; ``immediate`` is a crash as far
        as the data is concerned (the next start runs recovery).
        """
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}.get(
            mode
        )
        if sig is None:
            raise ValueError(f"unknown stop mode {mode!r}")
        if not self.running:
            self._reap()
            return
        assert self.pid is not None
        children = _children(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        if not self._wait_exit(children, timeout):
            self.kill9()
        self._reap()

    def kill9(self, timeout: float = 10.0) -> None:
        """SIGKILL the postmaster by its PID, as a crash would; its backends follow it.

        The backends notice the postmaster's death and exit on their own; any
        still there after ``timeout`` are SIGKILLed too, so that ``start()`` is
        not refused for shared memory still in use.
        """
        if not self.running:
            self._reap()
            return
        assert self.pid is not None
        children = _children(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if not self._wait_exit(children, timeout):
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            if not self._wait_exit(children, timeout):
                raise TimeoutError(f"postgres on {self.port}: processes survive SIGKILL")
        self._reap()

    def _wait_exit(self, children: Sequence[int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None:
                self.proc.poll()
            if not self.running and not any(_alive(c) for c in children):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def _reap(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        self.proc = None
        self.pid = None

    def _status(self) -> str:
        """The postmaster's readiness word in postmaster.pid (what pg_ctl -w reads)."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return ""
        if len(lines) < 8 or not lines[0].strip().isdigit() or int(lines[0]) != self.pid:
            return ""
        return lines[7].strip()

    def promote(self, timeout: float = 30.0) -> None:
        """Promote this standby to a primary and wait until it accepts writes."""
        _run_as_server_user(
            [str(self.bin_dir / "pg_ctl"), "promote", "-D", str(self.data_dir),
             "-w", "-t", str(int(timeout))],
            timeout=timeout + 10,
        )  # fmt: skip

    def psql(
        self,
        sql: str,
        *,
        user: str = SUPERUSER,
        database: str = DATABASE,
        timeout: float = 30.0,
        dsn: str | None = None,
    ) -> str:
        """Run SQL through ``psql`` (unaligned, tuples only) and return its output, stripped."""
        target = dsn or f"postgresql://{user}@127.0.0.1:{self.port}/{database}"
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-Atq", "-d", target,
             "-c", sql],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"psql on {self.port} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def reload(self, timeout: float = 10.0) -> None:
        """``pg_reload_conf()``, returning once new sessions see the files re-read.

        The call only signals the postmaster: a connection made right after it
        may still be forked with the old settings or ``pg_hba.conf``. A fresh
        session's ``pg_conf_load_time()`` is the postmaster's last reload.
        """
        before = self.psql("SELECT pg_conf_load_time()")
        self.psql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while self.psql("SELECT pg_conf_load_time()") == before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.port} did not reload its configuration")
            time.sleep(0.02)

    def in_recovery(self) -> bool:
        return self.psql("SELECT pg_is_in_recovery()") == "t"

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (pg_ctl's child is reaped by init, not by us).
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _new_server(settings: dict[str, str] | None = None) -> PostgresServer:
    root = _make_owned_tempdir("pg-")
    try:
        shutil.copytree(_template_dir(), root / "data", symlinks=True)
        (root / "data").chmod(0o700)
        _chown_tree(root)
        server = PostgresServer(port=0, root=root, bin_dir=pg_bin_dir())
        server.configure({**_SERVER_SETTINGS, **(settings or {})})
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


def _start_on_free_port(server: PostgresServer) -> None:
    # Another process may take the port between free_port() and bind: retry.
    last: Exception | None = None
    for _ in range(5):
        server.port = free_port()
        try:
            server.start()
            return
        except RuntimeError as exc:
            server.stop("immediate")
            last = exc
    raise RuntimeError(f"could not start postgres: {last}")


def _dispose(server: PostgresServer) -> None:
    try:
        server.stop("immediate")
    except Exception:
        server.kill9()
    finally:
        shutil.rmtree(server.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """A running PostgreSQL with the ``hookrouter`` role and database, stopped and removed on exit.

    ``settings`` are extra postgresql.conf lines (name -> value as written in the file).
    """
    server = _new_server(settings)
    try:
        _start_on_free_port(server)
        yield server
    finally:
        _dispose(server)


@dataclass
class Replicated:
    """A primary and a hot standby streaming from it."""

    primary: PostgresServer
    standby: PostgresServer
    sync: bool

    @property
    def dsn(self) -> str:
        """Multi-host DSN over both servers; libpq picks whichever accepts writes."""
        return multi_host_dsn([self.primary.port, self.standby.port])

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Block until the primary sees the standby streaming (as ``sync`` when it should)."""
        want = "sync" if self.sync else "async"
        deadline = time.monotonic() + timeout
        while True:
            state = self.primary.psql(
                "SELECT sync_state FROM pg_stat_replication "
                f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
            )
            if state == want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"standby not streaming as {want} (got {state!r})\n{self.standby.log_tail()}"
                )
            time.sleep(0.05)


def multi_host_dsn(
    ports: Sequence[int],
    *,
    user: str = ROLE,
    database: str = DATABASE,
    host: str = "127.0.0.1",
    target_session_attrs: str = "read-write",
) -> str:
    """``postgresql://user@host:p1,host:p2/db?target_session_attrs=read-write``."""
    hosts = ",".join(f"{host}:{p}" for p in ports)
    return f"postgresql://{user}@{hosts}/{database}?target_session_attrs={target_session_attrs}"


@contextlib.contextmanager
def primary_with_standby(
    sync: bool = True, settings: dict[str, str] | None = None
) -> Iterator[Replicated]:
    """A primary plus a streaming standby (``pg_basebackup -R``), both on free ports.

    With ``sync`` the primary's ``synchronous_standby_names`` names the standby,
    so every commit waits until the standby has flushed it to disk.  The standby
    itself has no ``synchronous_standby_names``: once promoted it commits alone.
    """
    with contextlib.ExitStack() as stack:
        primary = _new_server(settings)
        stack.callback(_dispose, primary)
        _start_on_free_port(primary)

        standby_root = _make_owned_tempdir("pg-standby-")
        standby = PostgresServer(port=0, root=standby_root, bin_dir=primary.bin_dir)
        stack.callback(_dispose, standby)
        _run_as_server_user(
            [str(primary.bin_dir / "pg_basebackup"), "-d",
             f"host=127.0.0.1 port={primary.port} user={SUPERUSER} "
             f"application_name={STANDBY_NAME}",
             "-D", str(standby.data_dir), "-R", "-X", "stream", "-c", "fast", "--no-sync"]
        )  # fmt: skip
        standby.configure({"synchronous_standby_names": "''", "cluster_name": f"'{STANDBY_NAME}'"})
        for _ in range(5):
            standby.port = free_port()
            try:
                standby.start()
                break
            except RuntimeError:
                standby.stop("immediate")
        else:
            raise RuntimeError(f"could not start the standby\n{standby.log_tail()}")

        pair = Replicated(primary, standby, sync)
        if sync:
            primary.psql(f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'")
            primary.reload()
        pair.wait_streaming()
        yield pair
