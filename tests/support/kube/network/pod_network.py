"""Pod networking for the emulator's kubelet, and a Service proxy standing in for kube-proxy.

`PodNetwork` gives each Pod of one node its own network namespace (the Pod sandbox's, from
``unshare --net``) joined to a bridge on this machine by a veth pair, as a CNI bridge plugin
does: the node's Pod subnet is a /24 of 10.244.0.0/16 (random, so that two nodes or two test
processes rarely collide), its first address is the bridge's (the Pods' default route), and each
Pod takes the next free one as ``status.podIP``. The Pod's interface is ``eth0``; its ``lo`` is
its own, so containers of two Pods may listen on the same port.

`ServiceProxy` does what kube-proxy does for ``ClusterIP`` Services, in user space: each Service's
cluster IP is added to this machine's ``lo`` and every port of it is a listener there that
forwards each connection to one ready endpoint, in turn: for a Service with a selector, a Pod of
its namespace matching it that is ``Running``, ``Ready`` and not being deleted (at the Pod's
``podIP`` and the ``targetPort``, a number or a container port's name); for a Service without
one, the addresses and ports of its Endpoints object (how ``default/kubernetes`` reaches the
API server). A connection with no endpoint is closed at once, as a rejected one. Pods reach
the cluster IPs through their default route (this machine). As kube-proxy's old userspace mode,
it opens a new connection to the endpoint: servers see connections from the node's bridge
address (or 127.0.0.1), not the client Pod's.

`hosts_file` writes what cluster DNS would answer, as an ``/etc/hosts``: each Service's cluster
IP under ``NAME.NAMESPACE.svc.cluster.local``, ``NAME.NAMESPACE.svc``, ``NAME.NAMESPACE`` and,
for the Pod's own namespace, ``NAME`` (the search path a Pod's resolv.conf gives); the kubelet
binds it over every container's ``/etc/hosts`` and rewrites it in place when Services change.
`resolv_conf` is the Pod's ``/etc/resolv.conf``: the search path and a name server on the Pod's
own loopback that nothing answers, so a name outside the cluster fails at once (there is no
DNS server; this machine's is not reachable from a Pod).

Not emulated: NetworkPolicies (stored, not enforced), traffic between Pods of different nodes
(each node's subnet is only on its own bridge; reach them through a Service), NodePort and
LoadBalancer Services, session affinity, UDP, IPv6. Needs root and ``ip`` (iproute2).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from tests.support.kube import api_client

log = logging.getLogger("tests.pod_network")

DOMAIN = "cluster.local"
_SUBNETS_IN_USE: set[str] = set()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        [shutil.which("ip") or "ip", *args], capture_output=True, timeout=60, check=False
    )
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done


def _routed() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The IPv4 networks this machine already routes (so a new Pod subnet avoids them)."""
    found = set()
    for line in _ip("-4", "route", "show").stdout.decode().splitlines():
        with contextlib.suppress(ValueError):
            found.add(ipaddress.ip_network(line.split()[0], strict=False))
    return found


class PodNetwork:
    """One node's Pod subnet and bridge; `attach` joins a Pod sandbox's namespace to it."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(3)
        self.bridge = f"kb{self.token}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self._free: list[str] = []
        self._pods: dict[str, tuple[str, str]] = {}  # Pod uid -> (address, host veth)

    def open(self) -> None:
        """Pick a free /24 of 10.244.0.0/16 and make the bridge with its first address."""
        routed = _routed()
        candidates = [f"10.244.{n}.0/24" for n in range(256)]
        secrets.SystemRandom().shuffle(candidates)
        for text in candidates:
            subnet = ipaddress.IPv4Network(text)
            if text in _SUBNETS_IN_USE or any(subnet.overlaps(r) for r in routed):
                continue
            _SUBNETS_IN_USE.add(text)
            self.subnet = subnet
            break
        else:
            raise OSError("no free /24 in 10.244.0.0/16 for the node's Pods")
        assert self.subnet is not None
        hosts = [str(h) for h in self.subnet.hosts()]
        self.gateway, self._free = hosts[0], hosts[1:]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def allocate(self, uid: str) -> str:
        """The Pod's address (the same for the same uid until `detach`)."""
        if uid not in self._pods:
            if not self._free:
                raise OSError(f"the node's Pod subnet {self.subnet} is full")
            self._pods[uid] = (self._free.pop(0), f"kv{secrets.token_hex(5)}")
        return self._pods[uid][0]

    def attach(self, uid: str, pid: int) -> str:
        """Join the network namespace of process `pid` (the Pod's sandbox) to the bridge: a veth
        pair, ``eth0`` inside with the Pod's address and the bridge as default route, ``lo`` up.
        Returns the Pod's address."""
        address = self.allocate(uid)
        host_end = self._pods[uid][1]
        inner = "kp" + host_end[2:]
        _ip("link", "add", host_end, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", str(pid))
        _ip("link", "set", host_end, "master", self.bridge)
        _ip("link", "set", host_end, "up")
        enter = shutil.which("nsenter") or "nsenter"
        for args in (
            ("link", "set", inner, "name", "eth0"),
            ("addr", "add", f"{address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
            ("route", "add", "default", "via", self.gateway),
        ):
            done = subprocess.run(
                [enter, "-t", str(pid), "-n", shutil.which("ip") or "ip", *args],
                capture_output=True,
                timeout=60,
                check=False,
            )
            if done.returncode != 0:
                raise OSError(f"ip {' '.join(args)} in the Pod: {done.stderr.decode().strip()}")
        return address

    def detach(self, uid: str) -> None:
        """Remove the Pod's veth pair and free its address."""
        found = self._pods.pop(uid, None)
        if found is None:
            return
        _ip("link", "del", found[1], check=False)
        self._free.append(found[0])

    def close(self) -> None:
        for uid in list(self._pods):
            self.detach(uid)
        if self.subnet is not None:
            _ip("link", "del", self.bridge, check=False)
            _SUBNETS_IN_USE.discard(str(self.subnet))
            self.subnet = None


def hosts_file(
    namespace: str, pod_name: str, pod_ip: str, services: Iterable[Mapping[str, Any]]
) -> str:
    """The ``/etc/hosts`` of a Pod of `namespace`: itself and every Service's names."""
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{pod_ip}\t{pod_name}",
    ]
    for service in sorted(
        services, key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])
    ):
        address = (service.get("spec") or {}).get("clusterIP")
        if not address or address == "None":
            continue
        name, where = service["metadata"]["name"], service["metadata"]["namespace"]
        names = [f"{name}.{where}.svc.{DOMAIN}", f"{name}.{where}.svc", f"{name}.{where}"]
        if where == namespace:
            names.append(name)
        lines.append(f"{address}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def resolv_conf(namespace: str) -> str:
    """A Pod's ``/etc/resolv.conf``: the cluster's search path, and no name server that
    answers (every cluster name is in ``/etc/hosts``; other names fail at once, where this
    machine's resolver would be unreachable from the Pod's network and time out)."""
    search = f"{namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}"
    return f"search {search}\nnameserver 127.0.0.1\noptions ndots:5 timeout:1 attempts:1\n"


def _labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    if not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _target_port(pod: Mapping[str, Any], target: Any) -> int | None:
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


class ServiceProxy:
    """kube-proxy for ``ClusterIP`` Services, in user space. ``async with ServiceProxy(url):``"""

    def __init__(self, api_url: str) -> None:
        self._api = api_client.ApiServer(api_url)
        self._services: dict[tuple[str, str], dict[str, Any]] = {}
        self._endpoints: dict[tuple[str, str], dict[str, Any]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._listeners: dict[tuple[str, int], asyncio.Server] = {}
        self._addresses: dict[str, int] = {}  # cluster IP on lo -> listeners using it
        self._turn = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._pipes: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Connections forwarded so far."""

    async def __aenter__(self) -> ServiceProxy:
        await self._api.open()
        for path, handle in (
            ("/api/v1/pods", self._on_pod),
            ("/api/v1/endpoints", self._on_endpoints),
            ("/api/v1/services", self._on_service),
        ):
            task = asyncio.create_task(api_client.inform(self._api, path, {}, handle))
            self._tasks.append(task)
        return self

    async def __aexit__(self, *_: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # No new connections first; one turn of the loop lets a connection accepted just
        # before register itself; then every connection is ended.
        for server in self._listeners.values():
            server.close()
        await asyncio.sleep(0)
        pipes = list(self._pipes)
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        for key in list(self._listeners):
            await self._unlisten(key)
        await self._api.close()

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._pods.pop(pod["metadata"]["uid"], None)
        else:
            self._pods[pod["metadata"]["uid"]] = pod

    async def _on_endpoints(self, kind: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED":
            self._endpoints.pop(key, None)
        else:
            self._endpoints[key] = obj

    async def _on_service(self, kind: str, service: dict[str, Any]) -> None:
        key = (service["metadata"]["namespace"], service["metadata"]["name"])
        self._services.pop(key, None)
        if kind != "DELETED":
            self._services[key] = service
        wanted = {
            (s["spec"]["clusterIP"], int(p["port"]))
            for s in self._services.values()
            if (s.get("spec") or {}).get("clusterIP") not in (None, "", "None")
            for p in s["spec"].get("ports") or ()
        }
        for listener in [k for k in self._listeners if k not in wanted]:
            await self._unlisten(listener)
        for address, port in sorted(wanted - set(self._listeners)):
            await self._listen(address, port)

    async def _listen(self, address: str, port: int) -> None:
        if self._addresses.get(address, 0) == 0:
            done = await asyncio.to_thread(
                _ip, "addr", "add", f"{address}/32", "dev", "lo", check=False
            )
            if done.returncode != 0 and b"exists" not in done.stderr:
                log.error("cannot add %s to lo: %s", address, done.stderr.decode().strip())
                return
        self._addresses[address] = self._addresses.get(address, 0) + 1

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # The connection's own task (asyncio's server made it): closing the proxy cancels
            # it, and it ends quietly rather than as a cancelled callback asyncio would log.
            with contextlib.suppress(asyncio.CancelledError):
                await self._forward(address, port, reader, writer)

        try:
            self._listeners[address, port] = await asyncio.start_server(accept, address, port)
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", address, port, exc)
            await self._release(address)

    async def _unlisten(self, key: tuple[str, int]) -> None:
        server = self._listeners.pop(key)
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
        await self._release(key[0])

    async def _release(self, address: str) -> None:
        self._addresses[address] -= 1
        if self._addresses[address] == 0:
            del self._addresses[address]
            await asyncio.to_thread(_ip, "addr", "del", f"{address}/32", "dev", "lo", check=False)

    def backends(self, namespace: str, name: str, port: int) -> list[tuple[str, int]]:
        """The ready endpoints of a Service's port, as (address, port)."""
        service = self._services.get((namespace, name))
        if service is None:
            return []
        spec = service.get("spec") or {}
        entry = next((p for p in spec.get("ports") or () if int(p["port"]) == port), None)
        if entry is None:
            return []
        selector = spec.get("selector")
        if not selector:
            found = []
            for subset in (self._endpoints.get((namespace, name)) or {}).get("subsets") or ():
                ports = [
                    int(p["port"])
                    for p in subset.get("ports") or ()
                    if p.get("name") == entry.get("name") or len(subset.get("ports") or ()) == 1
                ]
                found += [(a["ip"], p) for a in subset.get("addresses") or () for p in ports]
            return found
        target = entry.get("targetPort", entry["port"])
        found = []
        for pod in sorted(self._pods.values(), key=lambda p: p["metadata"]["name"]):
            if pod["metadata"].get("namespace") != namespace or not _ready(pod):
                continue
            if not _labels_match(selector, pod["metadata"].get("labels") or {}):
                continue
            number = _target_port(pod, target)
            if number is not None:
                found.append((pod["status"]["podIP"], number))
        return found

    async def _forward(
        self, address: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            key = next(
                (k for k, s in self._services.items() if s["spec"].get("clusterIP") == address),
                None,
            )
            choices = self.backends(*key, port) if key else []
            if not choices:
                return
            self._turn += 1
            host, target = choices[self._turn % len(choices)]
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(host, target)
            except OSError:
                return
            self.connections += 1
            try:
                await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            finally:
                upstream_writer.close()
        finally:
            writer.close()
            self._pipes.discard(task)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):
        sink.close()
