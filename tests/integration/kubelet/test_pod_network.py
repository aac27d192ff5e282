"""Pod networking (`Kubelet(network=True)`), Services through the Service proxy, cluster names in
``/etc/hosts``, and the in-cluster API: what the processes in the Pods really reach."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from tests.integration.kubelet import pods
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.kube.controllers import scheduling
from tests.support.kube.network import pod_network
from tests.support.kube.node import kubelet

DEADLINE = 120.0  # seconds; these machines are loaded

# Answers every HTTP GET with the Pod's name and the address the request came from.
SERVE = """
import http.server, json, os, socket
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"pod": socket.gethostname(), "peer": self.client_address[0]}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), Answer).serve_forever()
"""

# Fetches a URL five times (retrying until it answers) and prints each answer as a line.
FETCH = """
import sys, time, urllib.request
url, seen, deadline = sys.argv[1], 0, time.monotonic() + 100
while seen < 5:
    try:
        print(urllib.request.urlopen(url, timeout=10).read().decode(), flush=True)
        seen += 1
    except OSError as exc:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
"""

# Lists the Pods of its namespace through the in-cluster configuration, as the controller does.
IN_CLUSTER = """
import asyncio, json, os
from kubernetes_asyncio import client, config
async def main():
    config.load_incluster_config()
    async with client.ApiClient() as api:
        namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
        listed = await client.CoreV1Api(api).list_namespaced_pod(namespace)
        try:
            await client.CoreV1Api(api).list_namespaced_secret(namespace)
            refused = None
        except client.ApiException as exc:
            refused = [exc.status, json.loads(exc.body)["message"]]
        print(json.dumps({
            "host": os.environ["KUBERNETES_SERVICE_HOST"],
            "pods": sorted(p.metadata.name for p in listed.items),
            "secrets": refused,
        }), flush=True)
asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def networked(tmp_path: Any) -> AsyncIterator[tuple[Any, kubelet.Kubelet]]:
    async with (
        k8s_emulator.serving(in_cluster=True) as k8s,
        scheduling.Scheduler(k8s.url),
        pod_network.ServiceProxy(k8s.url),
        kubelet.Kubelet(k8s.url, "node-1", root=tmp_path / "kubelet", network=True) as node,
    ):
        k8s.hold_deletions = True
        yield k8s, node


def server(name: str) -> dict[str, Any]:
    body = pods.pod(
        name,
        [
            pods.python(
                "web",
                SERVE,
                ports=[{"name": "web", "containerPort": 8000}],
                readinessProbe={"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1},
            )
        ],
    )
    body["metadata"]["labels"] = {"app": "web"}
    return body


def running_ready(pod: Any) -> bool:
    status = (pod or {}).get("status") or {}
    return status.get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ()
    )


async def test_pods_get_their_own_addresses_and_reach_a_service_by_name(tmp_path: Any) -> None:
    """Two Pods listen on the same port (each its own network namespace), each with its own
    address on the node's subnet, and are Ready by an httpGet probe to that address; a third Pod
    fetches ``http://web:8000`` (the Service's short name, from its ``/etc/hosts``) through the
    Service proxy and is answered by both."""
    async with networked(tmp_path) as (k8s, node):
        await client.CoreV1Api(k8s.api_client).create_namespaced_service(
            pods.NS,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {
                    "selector": {"app": "web"},
                    "ports": [{"port": 8000, "targetPort": "web"}],
                },
            },
        )
        for name in ("web-a", "web-b"):
            await pods.create(k8s, server(name))
        ready = [
            await node.wait_for_pod(pods.NS, name, running_ready, timeout=DEADLINE)
            for name in ("web-a", "web-b")
        ]
        addresses = [p["status"]["podIP"] for p in ready]
        assert node.network is not None and node.network.subnet is not None
        assert len(set(addresses)) == 2
        for address in addresses:
            assert address.startswith("10.244.") and address != node.network.gateway
        await pods.create(
            k8s,
            pods.pod("fetch", [pods.python("fetch", FETCH, args=["http://web:8000/"])]),
        )
        done = await node.wait_for_pod(pods.NS, "fetch", pods.terminal, timeout=DEADLINE)
        log = node.logs(pods.NS, "fetch", "fetch")
        assert pods.phase(done) == "Succeeded", log
        answers = [json.loads(line) for line in log.splitlines()]
        assert {a["pod"] for a in answers} == {"web-a", "web-b"}
        # The proxy works in user space: servers see connections from the node's bridge.
        assert {a["peer"] for a in answers} == {node.network.gateway}
        assert done["status"]["podIP"] not in addresses
        service = await client.CoreV1Api(k8s.api_client).read_namespaced_service("web", pods.NS)
        hosts = (node.root / "pods").glob("*/hosts")
        assert any(service.spec.cluster_ip in h.read_text() for h in hosts)


async def test_a_pod_with_a_service_account_reads_the_api_in_cluster(tmp_path: Any) -> None:
    """A Pod of a service account gets ``KUBERNETES_SERVICE_HOST``/``PORT`` and the token
    volume (token, ca.crt, namespace) and lists Pods with kubernetes-asyncio's
    ``load_incluster_config``: over HTTPS to the Service ``default/kubernetes``, verified against
    the namespace's ``kube-root-ca.crt``, with a token the API server issued. Its Role lets it
    list Pods; listing Secrets, which no rule grants, is refused 403 as RBAC refuses it."""
    async with networked(tmp_path) as (k8s, node):
        await client.CoreV1Api(k8s.api_client).create_namespaced_service_account(
            pods.NS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}
        )
        rbac = client.RbacAuthorizationV1Api(k8s.api_client)
        await rbac.create_namespaced_role(
            pods.NS,
            {
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        await rbac.create_namespaced_role_binding(
            pods.NS,
            {
                "metadata": {"name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": pods.NS}],
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "pod-reader",
                },
            },
        )
        body = pods.pod("reader", [pods.python("read", IN_CLUSTER)])
        body["spec"]["serviceAccountName"] = "reader"
        await pods.create(k8s, body)
        done = await node.wait_for_pod(pods.NS, "reader", pods.terminal, timeout=DEADLINE)
        log = node.logs(pods.NS, "reader", "read")
        assert pods.phase(done) == "Succeeded", log
        seen = json.loads(log.splitlines()[-1])
        master = k8s.get("services", "kubernetes", "default")
        assert seen == {
            "host": master["spec"]["clusterIP"],
            "pods": ["reader"],
            "secrets": [
                403,
                'secrets is forbidden: User "system:serviceaccount:default:reader" cannot list '
                'resource "secrets" in API group "" in the namespace "default"',
            ],
        }
        assert set(k8s.tokens.values()) == {(pods.NS, "reader")}
        assert k8s.calls["create serviceaccounts/token"] == 1


async def test_no_token_without_automount_and_a_missing_account_holds_the_pod(
    tmp_path: Any,
) -> None:
    """``automountServiceAccountToken: false`` mounts no token (and asks for none); a Pod
    naming a service account that does not exist stays ContainerCreating, saying so."""
    async with networked(tmp_path) as (k8s, node):
        check = "import os; print(os.path.exists('/var/run/secrets/kubernetes.io'), flush=True)"
        body = pods.pod("quiet", [pods.python("check", check)])
        body["spec"]["automountServiceAccountToken"] = False
        await pods.create(k8s, body)
        done = await node.wait_for_pod(pods.NS, "quiet", pods.terminal, timeout=DEADLINE)
        assert pods.phase(done) == "Succeeded"
        assert node.logs(pods.NS, "quiet", "check").strip() == "False"
        assert k8s.calls["create serviceaccounts/token"] == 0
        body = pods.pod("orphan", [pods.python("check", check)])
        body["spec"]["serviceAccountName"] = "nobody"
        await pods.create(k8s, body)
        pod = await node.wait_for_pod(
            pods.NS,
            "orphan",
            lambda p: (
                'serviceaccount "nobody" not found'
                in str(((p or {}).get("status") or {}).get("message"))
            ),
            timeout=DEADLINE,
        )
        assert pods.phase(pod) == "Pending"


async def test_closing_removes_the_bridge_and_the_cluster_addresses(tmp_path: Any) -> None:
    """Everything the network made on this machine goes with the kubelet and the proxy: the
    bridge, the Pods' veths and the cluster IPs added to ``lo``."""
    async with networked(tmp_path) as (k8s, node):
        await pods.create(k8s, server("web-a"))
        await node.wait_for_pod(pods.NS, "web-a", running_ready, timeout=DEADLINE)
        assert node.network is not None
        bridge = node.network.bridge
        master = k8s.get("services", "kubernetes", "default")["spec"]["clusterIP"]
        links = pod_network._ip("-o", "link", "show").stdout.decode()
        assert bridge in links and f"master {bridge}" in links
        assert master in pod_network._ip("-4", "addr", "show", "dev", "lo").stdout.decode()
    links = pod_network._ip("-o", "link", "show").stdout.decode()
    assert bridge not in links
    assert master not in pod_network._ip("-4", "addr", "show", "dev", "lo").stdout.decode()
