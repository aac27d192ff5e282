"""A real Redis Cluster on loopback: three masters and a replica each, from `redis-server
--cluster-enabled yes` processes joined by `redis-cli --cluster create`.

Waits are on the cluster's own answers (`CLUSTER INFO`, `ROLE`) with generous deadlines, never a
fixed sleep, so a loaded machine only makes it slower.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import signal
import subprocess
import time

from tests.support import binaries, ports

START_TIMEOUT_S = 180.0
START_ATTEMPTS = 3
"""How many times `start` forms the cluster, each on fresh ports: a port picked free a moment
ago can be taken before its node binds it (another test's outgoing connection draws its source
port from the same range), and that node then exits at once."""


class NodeDidNotStart(Exception):
    """A node or the cluster's creation failed in a way fresh ports may mend."""


def _last_lines(output: bytes, lines: int = 8) -> str:
    return " / ".join(output.decode(errors="replace").strip().splitlines()[-lines:])


def _tail(log: pathlib.Path) -> str:
    try:
        return _last_lines(log.read_bytes(), 4)
    except OSError:
        return "(no log)"


@dataclasses.dataclass
class Node:
    port: int
    bus_port: int
    folder: pathlib.Path
    proc: subprocess.Popen[bytes] | None = None


class RedisCluster:
    """Six redis-server processes (3 masters, 3 replicas) forming one cluster."""

    def __init__(self, folder: pathlib.Path, masters: int = 3, replicas: int = 1) -> None:
        self.folder = folder
        self.masters = masters
        self.replicas = replicas
        self.nodes: list[Node] = []
        self._place_nodes()

    def _place_nodes(self) -> None:
        self.nodes = [
            Node(ports.free_port(), ports.free_port(), self.folder / f"node-{i}")
            for i in range(self.masters * (1 + self.replicas))
        ]

    @property
    def url(self) -> str:
        """The URL the services take: one node's address; the client discovers the rest."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def cli(self, port: int, *args: str, timeout: float = 60.0) -> str:
        done = subprocess.run(
            [binaries.require("redis-cli"), "-p", str(port), *args],
            capture_output=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout.decode()

    def _start_node(self, node: Node) -> None:
        """Start one node and wait until it answers; raises `NodeDidNotStart` with its log if it
        exits first (its port or bus port taken, say)."""
        node.folder.mkdir(parents=True, exist_ok=True)
        node.proc = subprocess.Popen(
            [
                binaries.require("redis-server"),
                "--port",
                str(node.port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                # The bus port is named: the default (port + 10000) may not exist for a free
                # port taken from the ephemeral range.
                "--cluster-port",
                str(node.bus_port),
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--dir",
                str(node.folder),
                "--logfile",
                "redis.log",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if node.proc.poll() is not None:
                raise NodeDidNotStart(
                    f"redis-server on port {node.port} (bus {node.bus_port}) exited with "
                    f"{node.proc.returncode}: {_tail(node.folder / 'redis.log')}"
                )
            try:
                if self.cli(node.port, "ping", timeout=10.0).strip() == "PONG":
                    return
            except subprocess.SubprocessError:
                pass
            if time.monotonic() > deadline:
                raise NodeDidNotStart(f"redis-server on port {node.port} never answered PING")
            time.sleep(0.05)

    def start(self) -> None:
        """Form the cluster; if a node cannot start or `redis-cli --cluster create` fails, stop
        everything and form it again on fresh ports (`START_ATTEMPTS` in all). The error names
        what each attempt printed."""
        failures: list[str] = []
        for attempt in range(START_ATTEMPTS):
            if attempt:
                self.stop()
                shutil.rmtree(self.folder, ignore_errors=True)
                self._place_nodes()
            try:
                for node in self.nodes:
                    self._start_node(node)
                self._create()
            except NodeDidNotStart as e:
                failures.append(str(e))
                continue
            self.wait_ok()
            self.wait_replicated()
            return
        raise AssertionError(
            f"the Redis Cluster did not form in {START_ATTEMPTS} attempts: " + " | ".join(failures)
        )

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        done = subprocess.run(
            [
                binaries.require("redis-cli"),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            logs = "; ".join(
                f"{n.port}: {_tail(n.folder / 'redis.log')}"
                for n in self.nodes
                if n.proc is not None and n.proc.poll() is not None
            )
            raise NodeDidNotStart(
                f"redis-cli --cluster create exited with {done.returncode}: "
                f"{_last_lines(done.stdout + done.stderr)}"
                + (f"; exited nodes: {logs}" if logs else "")
            )

    def wait_replicated(self) -> None:
        """Until every replica reports its link to its master up (`ROLE`: `connected`): the
        cluster answers `ok` as soon as slots are assigned, but a replica that has not synced
        cannot take over with `CLUSTER FAILOVER`, and its master's view may not list it yet."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            roles = [self.cli(n.port, "role").split() for n in self.nodes if n.proc is not None]
            replicas = [r for r in roles if r[0] == "slave"]
            if len(replicas) == self.masters * self.replicas and all(
                r[3] == "connected" for r in replicas
            ):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the replicas did not connect: {roles}")
            time.sleep(0.2)

    def wait_ok(self) -> None:
        """Until every running node reports `cluster_state:ok` and sees every slot assigned."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            states = []
            for node in self.nodes:
                if node.proc is None or node.proc.poll() is not None:
                    continue
                try:
                    states.append(self.cli(node.port, "cluster", "info"))
                except subprocess.SubprocessError:
                    states.append("")
            if states and all(
                "cluster_state:ok" in s and "cluster_slots_ok:16384" in s for s in states
            ):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the Redis Cluster did not become ready: {states}")
            time.sleep(0.2)

    def role(self, node: Node) -> str:
        return self.cli(node.port, "role").split()[0]

    def master_of_slot_for(self, key: str) -> Node:
        """The node serving `key`'s slot now."""
        slot = int(self.cli(self.nodes[0].port, "cluster", "keyslot", key).strip())
        for line in self.cli(self.nodes[0].port, "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for span in fields[8:]:
                lo, _, hi = span.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                    return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"no master serves the slot of {key!r}")

    def replica_of(self, master: Node) -> Node:
        """A replica of `master`, as its own `ROLE` says; waits for one that is connected (the
        cluster's gossip and the replication link come up after the slots are assigned)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for node in self.nodes:
                if node is master or node.proc is None or node.proc.poll() is not None:
                    continue
                role = self.cli(node.port, "role").split()
                if role[0] == "slave" and int(role[2]) == master.port and role[3] == "connected":
                    return node
            if time.monotonic() > deadline:
                raise AssertionError(f"the master on port {master.port} has no connected replica")
            time.sleep(0.2)

    def failover(self, replica: Node) -> None:
        """`CLUSTER FAILOVER` on a replica: it becomes its master's master, with no write lost;
        returns once it reports itself master and the cluster is ok again."""
        assert self.cli(replica.port, "cluster", "failover").strip() == "OK"
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.role(replica) != "master":
            if time.monotonic() > deadline:
                raise AssertionError("the replica did not take over")
            time.sleep(0.1)
        self.wait_ok()

    def cut_off(self, replica: Node, master: Node) -> None:
        """Cut `replica` off its `master` as a partition would: the replica process is stopped
        (SIGSTOP) and the master drops its link (`CLIENT KILL TYPE replica`), so nothing
        written meanwhile reaches the replica, not even through a socket buffer. `resume`
        lets it run again."""
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGSTOP)
        self.cli(master.port, "client", "kill", "type", "replica")
        deadline = time.monotonic() + START_TIMEOUT_S
        while "connected_slaves:0" not in self.cli(master.port, "info", "replication"):
            if time.monotonic() > deadline:
                raise AssertionError("the master kept its replica")
            time.sleep(0.05)

    def resume(self, node: Node) -> None:
        """Let a node stopped by `cut_off` run again."""
        assert node.proc is not None
        node.proc.send_signal(signal.SIGCONT)

    def kill(self, node: Node) -> None:
        """SIGKILL a node (its data on disk stays: `restart` brings it back)."""
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(30)

    def restart(self, node: Node) -> None:
        """Start a killed node again with its data and cluster config: a master that was
        replaced meanwhile rejoins as a replica of the node that took its slots."""
        self._start_node(node)

    def takeover(self, replica: Node) -> None:
        """`CLUSTER FAILOVER TAKEOVER` on a replica whose master is gone: it takes the slots
        without its master's agreement and without catching up, as an operator promoting a
        replica would; returns once it is master and every running node sees the cluster ok."""
        assert self.cli(replica.port, "cluster", "failover", "takeover").strip() == "OK"
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.role(replica) != "master":
            if time.monotonic() > deadline:
                raise AssertionError("the replica did not take over")
            time.sleep(0.1)
        self.wait_ok()

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)  # a node stopped by `cut_off`
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(30)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(30)
