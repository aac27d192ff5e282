"""A real redis-server master with one replica (`--replicaof`), both processes of one test, and
a way to cut the replica off and bring it back.

Cut off means what a partition does to replication: the replica process is stopped (SIGSTOP)
and the master drops its link (`CLIENT KILL TYPE replica`), so nothing written meanwhile reaches
the replica, not even through a socket buffer, and `WAIT 1` confirms nothing. Brought back
(SIGCONT), the replica reconnects by itself and catches up from the master's backlog.
"""

from __future__ import annotations

import pathlib
import signal
import subprocess
import time

import redis as sync_redis

from tests.support import binaries, ports


class ReplicatedRedis:
    """A master and its replica on free loopback ports, without persistence.

    Args:
        folder: Their working folders live here.
    """

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.master_port = ports.free_port()
        self.replica_port = ports.free_port()
        self.url = f"redis://127.0.0.1:{self.master_port}/0"
        self.replica_url = f"redis://127.0.0.1:{self.replica_port}/0"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._replica: subprocess.Popen[bytes] | None = None

    def _start(self, port: int, *extra: str) -> subprocess.Popen[bytes]:
        folder = self.folder / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [
                binaries.require("redis-server"),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._procs.append(proc)
        ports.wait_port(port)
        return proc

    def start(self) -> None:
        """Start both; return once the replica acknowledges writes (`wait_online`)."""
        # No wait before a full sync (Redis waits 5 s by default for more replicas to join).
        self._start(self.master_port, "--repl-diskless-sync-delay", "0")
        self._replica = self._start(
            self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port)
        )
        self.wait_online()

    def wait_online(self) -> None:
        """Until the replica acknowledges a write (`WAIT 1`): the master lists a replica as
        online before it has loaded what it was sent and acknowledges anything."""
        client = sync_redis.Redis(port=self.master_port)
        deadline = time.monotonic() + ports.MIN_DEADLINE_S
        try:
            while True:
                pipe = client.pipeline(transaction=False)
                pipe.incr("replicated-redis:probe")
                pipe.execute_command("WAIT", 1, 100)
                if pipe.execute()[1] == 1:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError("the replica acknowledged nothing")
        finally:
            client.close()

    def cut_off(self) -> None:
        """Stop the replica and make the master drop its link (see the module)."""
        assert self._replica is not None
        self._replica.send_signal(signal.SIGSTOP)
        client = sync_redis.Redis(port=self.master_port)
        try:
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
            deadline = time.monotonic() + ports.MIN_DEADLINE_S
            while client.info("replication")["connected_slaves"] != 0:
                if time.monotonic() > deadline:
                    raise AssertionError("the master kept its replica")
                time.sleep(0.02)
        finally:
            client.close()

    def bring_back(self) -> None:
        """Let the replica run again: it reconnects and catches up by itself."""
        assert self._replica is not None
        self._replica.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(ports.MIN_DEADLINE_S)
