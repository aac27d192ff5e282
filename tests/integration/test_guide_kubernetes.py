"""Section 8 of the operator guide, run as written with the real kubectl against the Kubernetes
API emulator (its discovery, OpenAPI v3 and workload kinds, as kubectl reads them).

Each command is taken from the guide's text: the secrets and the bucket written, the TLS
Secrets made with openssl (the steps for a cluster without cert-manager), `kubectl apply -k
deploy/k8s/` from a copy of the repository's deploy/, `get pods`, `scale`, the provider key's
Secret, the overlay that replaces the worker Pod template, and the checks and the CLI over TLS
through port-forwards. The objects kubectl created are compared with what `kubectl kustomize`
renders from the same files.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import re
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from services.controller.pods import kubernetes, runtime, templates
from tests.support import ports
from tests.support.kube import clusters, kubectl, objects
from tests.support.kube.apiserver import emulator as emulators
from tests.support.kube.apiserver.emulator import K8sEmulator
from tests.support.kube.controllers import cert_manager
from tests.support.kube.controllers import workloads as k8s_workloads
from tests.support.kube.network import pod_network
from tests.support.kube.node import kubelet as kubelet_module
from tests.unit import test_deploy_manifests as k8s

NAMESPACE = "agentihooks"
RESOURCES = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Service": "services",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "NetworkPolicy": "networkpolicies",
}


class Operator:
    """A shell in a copy of the repository's deploy/, with kubectl pointed at the emulator."""

    def __init__(self, root: pathlib.Path, emulator: K8sEmulator) -> None:
        self.root = root
        self.emulator = emulator
        self.env = kubectl.environment(root, emulator.url)
        k8s.copy_deploy(root / "deploy" / "k8s")

    async def run(self, script: str) -> str:
        """Run `script` with bash from the copy's root; its output, or fail with both streams."""
        return await kubectl.succeed(script, cwd=self.root, env=self.env)

    async def prepare(self) -> None:
        """The guide's secrets and bucket steps, as written."""
        await self.run(k8s.shell_block("deploy/k8s/secrets/keys.env <<EOF"))
        await self.run(k8s.shell_block("AGENTIHOOKS_S3_ENDPOINT_URL=http://minio"))

    def stored(self, kind: str, name: str) -> Mapping[str, object] | None:
        namespace = None if kind in k8s.CLUSTER_SCOPED else NAMESPACE
        found: Mapping[str, object] | None = self.emulator.get(RESOURCES[kind], name, namespace)
        return found


def holds(stored: object, given: object) -> bool:
    """Whether the stored value is the given one, with what the API server defaults added to
    its objects (a Deployment's strategy, say)."""
    if isinstance(given, dict) and isinstance(stored, dict):
        return all(k in stored and holds(stored[k], v) for k, v in given.items())
    return stored == given


def decoded(data: object) -> dict[str, bytes]:
    assert isinstance(data, dict)
    return {k: base64.b64decode(v.replace("\n", "")) for k, v in data.items()}


def guide_lines(block_containing: str, *, leaving_out: str | None = None) -> str:
    """The lines of one of section 8's shell blocks (without those containing `leaving_out`)."""
    lines = k8s.shell_block(block_containing).splitlines()
    return "\n".join(line for line in lines if leaving_out is None or leaving_out not in line)


def inline_line(containing: str) -> str:
    """The one line of section 8's shell blocks that contains `containing`."""
    lines = [
        line
        for block in re.findall(r"```sh\n(.*?)```", k8s.section_8(), re.DOTALL)
        for line in block.splitlines()
        if containing in line
    ]
    assert len(lines) == 1, f"section 8 has {lines!r} for {containing!r}"
    return lines[0]


def inline_command(prefix: str) -> str:
    """The one command of section 8 written inline (in backticks) that starts with `prefix`."""
    found = re.findall(rf"`({re.escape(prefix)}[^`]*)`", k8s.section_8())
    assert len(set(found)) == 1, f"section 8 has {found!r} for {prefix!r}"
    return str(found[0])


@pytest.fixture
async def operator(k8s_emulator: K8sEmulator, tmp_path: pathlib.Path) -> Operator:
    person = Operator(tmp_path, k8s_emulator)
    await person.prepare()
    return person


async def test_apply_creates_every_rendered_object_and_applying_again_changes_nothing(
    operator: Operator,
) -> None:
    """`kubectl apply -k deploy/k8s/` and `get pods`, as the guide writes them: every object
    kustomize renders from the operator's files is created in its namespace (or cluster-wide),
    with the operator's keys and bucket endpoint; a second apply changes none of them."""
    # `rollout status` waits for Pods the emulator's workload kinds do not create.
    script = guide_lines("kubectl apply -k deploy/k8s/\n", leaving_out="rollout status")
    assert "kubectl apply -k deploy/k8s/" in script and "get pods" in script
    output = await operator.run(script)
    rendered = k8s.render(operator.root / "deploy" / "k8s")
    assert {o["kind"] for o in rendered} == set(RESOURCES)
    for obj in rendered:
        kind, name = obj["kind"], obj["metadata"]["name"]
        stored = operator.stored(kind, name)
        assert stored is not None, f"{kind} {name} was not created"
        assert f"/{name} created" in output, output
        for field in ("spec", "data", "rules", "subjects", "roleRef"):
            want, got = obj.get(field), stored.get(field)
            if kind == "Secret" and field == "data":
                # kustomize wraps long base64 values; the server keeps the bytes.
                want, got = decoded(want), decoded(got)
            assert holds(got, want), f"{kind} {name}: {field} differs"
    objects = k8s.Rendered(rendered, {}, operator.root / "deploy" / "k8s")
    keys = objects.generated("Secret", "agentihooks-keys")
    written = dict(
        line.split("=", 1)
        for line in (operator.root / "deploy/k8s/secrets/keys.env").read_text().splitlines()
    )
    stored_keys = operator.stored("Secret", keys["metadata"]["name"])
    assert stored_keys is not None
    data = stored_keys["data"]
    assert isinstance(data, dict)
    assert base64.b64decode(data["operator-token"]).decode() == written["operator-token"]
    settings_map = operator.stored(
        "ConfigMap", objects.generated("ConfigMap", "agentihooks-settings")["metadata"]["name"]
    )
    assert settings_map is not None
    assert settings_map["data"]["AGENTIHOOKS_S3_ENDPOINT_URL"] == "http://minio.minio.svc:9000"  # type: ignore[index]
    # Applying again changes nothing. kubectl compares text, and kustomize wraps base64 values
    # longer than 76 characters (the grant key) where the server keeps only the bytes: that
    # Secret is reported `configured`, as on a real cluster, with the same content.
    before = decoded(stored_keys["data"])
    again = await operator.run("kubectl apply -k deploy/k8s/")
    wrapped = f"secret/{keys['metadata']['name']} configured"
    assert wrapped in again, again
    assert again.count(" unchanged") == len(rendered) - 1, again
    after = operator.stored("Secret", keys["metadata"]["name"])
    assert after is not None and decoded(after["data"]) == before


async def test_scaling_the_controller_and_the_provider_key_secret(operator: Operator) -> None:
    """The guide's `kubectl scale` sets the controller Deployment's replicas through its scale
    subresource (until the next apply, unless an overlay keeps the count, as the guide says),
    and its `kubectl create secret` stores the provider key."""
    await operator.run("kubectl apply -k deploy/k8s/")
    scale = inline_command("kubectl -n agentihooks scale deployment/agentihooks-controller")
    assert "--replicas=3" in scale
    await operator.run(scale)
    controller = operator.stored("Deployment", "agentihooks-controller")
    assert controller is not None and controller["spec"]["replicas"] == 3  # type: ignore[index]
    # As the guide warns, the next apply sets the manifest's count again; an overlay's
    # `replicas:` entry keeps it.
    await operator.run("kubectl apply -k deploy/k8s/")
    controller = operator.stored("Deployment", "agentihooks-controller")
    assert controller is not None and controller["spec"]["replicas"] == 2  # type: ignore[index]
    overlay = operator.root / "my-deploy"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../deploy/k8s]\nreplicas:\n  - {name: agentihooks-controller, count: 3}\n"
    )
    await operator.run("kubectl apply -k my-deploy/")
    controller = operator.stored("Deployment", "agentihooks-controller")
    assert controller is not None and controller["spec"]["replicas"] == 3  # type: ignore[index]
    await operator.run(inline_command("kubectl -n agentihooks create secret generic anthropic"))
    key = operator.stored("Secret", "anthropic")
    assert key is not None
    assert key["data"] == {"api-key": base64.b64encode(b"YOUR-KEY").decode()}


async def test_the_overlay_replaces_the_worker_pod_template(operator: Operator) -> None:
    """The guide's overlay block, run as written, applies the system with its own copy of the
    template; once the operator edits the copy (the provider key, as the guide shows) and
    applies the overlay again, the controller mounts the edited template."""
    await operator.run(k8s.shell_block("cat > my-deploy/kustomization.yaml"))
    controller = operator.stored("Deployment", "agentihooks-controller")
    assert controller is not None
    template_path = operator.root / "my-deploy" / "worker-pod.yaml"
    template = yaml.safe_load(template_path.read_text())
    assert template == templates.with_worker_tls(templates.default_pod_template())
    entry = re.search(r"`(- \{name: ANTHROPIC_API_KEY[^`]*)`", k8s.section_8())
    assert entry is not None, "section 8 shows the provider key's env entry"
    (worker,) = [c for c in template["spec"]["containers"] if c["name"] == "worker"]
    worker.setdefault("env", []).extend(yaml.safe_load(entry.group(1)))
    template_path.write_text(yaml.safe_dump(template))
    await operator.run("kubectl apply -k my-deploy/")
    controller = operator.stored("Deployment", "agentihooks-controller")
    assert controller is not None
    volumes = controller["spec"]["template"]["spec"]["volumes"]  # type: ignore[index]
    mounted = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    maps = [
        m
        for m in operator.emulator.objects("configmaps", NAMESPACE)
        if m["metadata"]["name"] in mounted
        and m["metadata"]["name"].startswith("agentihooks-worker-pod-template")
    ]
    assert len(maps) == 1, mounted
    assert yaml.safe_load(maps[0]["data"]["worker-pod.yaml"]) == template


async def test_kubectl_logs_shows_why_a_sidecar_stopped_at_start(
    k8s_emulator: K8sEmulator, tmp_path: pathlib.Path
) -> None:
    """The guide's `kubectl logs POD -c restorer` on a worker Pod whose controller address does
    not answer: the Pod the controller renders runs on the kubelet, its sidecar stops with exit
    code 5, and kubectl (through the API server's pods/log, from the node's kubelet) shows the
    line the guide prints, naming the variable."""
    reason = kubelet_module.unsupported_reason()
    if reason is not None:
        pytest.fail(f"the kubelet cannot run Pods on this machine: {reason}")
    command = inline_command("kubectl logs POD -c restorer")
    (expected,) = re.findall(
        r"```\n(agentihooks-restorer: AGENTIHOOKS_CONTROL_ADDR=.*)\n```", k8s.section_8()
    )
    line = expected.split("; gRPC:")[0]
    line = line.replace("agentihooks-controller.agentihooks.svc:50051", "127.0.0.1:9")
    line = line.replace("in 60 s", "in 2 s")
    async with clusters.cluster(
        k8s_emulator, root=tmp_path / "nodes", backoff=(60.0, 60.0)
    ) as nodes:
        (kubelet,) = nodes.kubelets.values()
        rt = kubernetes.KubernetesRuntime(
            k8s_emulator.api_client, NAMESPACE, templates.default_pod_template()
        )
        spec = runtime.LaunchSpec(
            swarm="example",
            seat="eng-1",
            execution_id="e-1",
            generation=1,
            image="registry.local/agent-worker:1.4.2",
            command=("sleep", "300"),
            worker_credential="wk-guide-logs-credential",
            env={"AGENTIHOOKS_CONTROL_ADDR": "127.0.0.1:9", "AGENTIHOOKS_START_TIMEOUT_S": "2"},
        )
        name = templates.pod_name("example", "e-1")
        try:
            await rt.launch(spec)

            def stopped(pod: dict[str, Any] | None) -> bool:
                """The sidecar ended with 5, was restarted, ended again and now waits out its
                back-off: its newest run's log is complete."""
                status = objects.container_status(pod or {}, "restorer") or {}
                ended = (status.get("lastState") or {}).get("terminated") or {}
                waiting = (status.get("state") or {}).get("waiting") or {}
                return ended.get("exitCode") == 5 and waiting.get("reason") == "CrashLoopBackOff"

            await kubelet.wait_for_pod(NAMESPACE, name, stopped, timeout=120)
        finally:
            await rt.aclose()
        env = kubectl.environment(tmp_path, k8s_emulator.url)
        shown = await kubectl.succeed(
            f"{command.replace('POD', name)} -n {NAMESPACE}", cwd=tmp_path, env=env
        )
        assert line in shown, shown
        assert "start_check_retry" in shown and "AGENTIHOOKS_CONTROL_ADDR" in shown


async def minio_service(emulator: K8sEmulator, endpoint: str) -> None:
    """The guide's example object store, ``http://minio.minio.svc:9000``: a Service with no
    selector whose Endpoints name the moto server on this machine, as one would name an outside
    store (the Service proxy forwards the cluster IP there)."""
    port = int(endpoint.rsplit(":", 1)[1])
    emulator.create("namespaces", {"metadata": {"name": "minio"}})
    emulator.create(
        "services",
        {"metadata": {"name": "minio"}, "spec": {"ports": [{"port": 9000, "targetPort": port}]}},
        "minio",
    )
    emulator.create(
        "endpoints",
        {
            "metadata": {"name": "minio"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]}],
        },
        "minio",
    )


def with_timeouts(script: str) -> str:
    """Rollouts bounded generously: these machines are loaded."""
    return script.replace("rollout status ", "rollout status --timeout=600s ")


async def test_the_system_rolls_out_as_the_guide_says(
    tmp_path: pathlib.Path, s3_bucket: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Section 8's TLS steps without cert-manager, then its apply-and-check block and the
    controller's rollout, run as written, with the workload controllers making the Pods, the
    kubelet running them on a Pod network, the Service proxy and the in-cluster API: Redis (with
    the password from the keys Secret, its append-only file on the claim) rolls out, then both
    store replicas (ready by their gRPC health asked over mutual TLS, so they reach Redis by its
    Service name) and both controller replicas (ready by /readyz over HTTPS; they read the API
    in-cluster with their service account's token). `get pods` shows five Pods `1/1 Running`,
    and Redis answers with the operator's password only."""
    reason = kubelet_module.unsupported_reason()
    if reason is not None:
        pytest.fail(f"the kubelet cannot run Pods on this machine: {reason}")
    async with emulators.serving(in_cluster=True) as emulator:
        await minio_service(emulator, s3_bucket.endpoint_url)
        operator = Operator(tmp_path, emulator)
        await operator.prepare()
        await make_tls_secrets(operator)
        async with (
            clusters.cluster(emulator, root=tmp_path / "nodes", network=True) as nodes,
            pod_network.ServiceProxy(emulator.url),
            k8s_workloads.controllers(emulator.url),
        ):
            script = guide_lines("kubectl apply -k deploy/k8s/\n")
            assert "rollout status deployment/agentihooks-checkpoint-store" in script
            out = await operator.run(with_timeouts(script))
            assert "statefulset rolling update complete" in out or "roll out complete" in out, out
            assert 'deployment "agentihooks-checkpoint-store" successfully rolled out' in out, out
            listed = [line.split() for line in out.splitlines() if line.startswith("agentihooks-")]
            running = [row for row in listed if row[1:3] == ["1/1", "Running"]]
            assert len(running) >= 3, out
            rollout = inline_line("rollout status deployment/agentihooks-controller")
            out = await operator.run(with_timeouts(rollout))
            assert 'deployment "agentihooks-controller" successfully rolled out' in out, out
            shown = await operator.run("kubectl -n agentihooks get pods")
            rows = [line.split() for line in shown.splitlines()[1:]]
            assert len(rows) == 5 and all(r[1:3] == ["1/1", "Running"] for r in rows), shown
            assert emulator.tokens and set(emulator.tokens.values()) == {
                (NAMESPACE, "agentihooks-controller")
            }
            (kubelet,) = nodes.kubelets.values()
            claim = kubelet.claim_path(NAMESPACE, "data-agentihooks-redis-0")
            password = dict(
                line.split("=", 1)
                for line in (operator.root / "deploy/k8s/secrets/keys.env").read_text().splitlines()
            )["redis-password"]
            redis_ip = emulator.get("pods", "agentihooks-redis-0", NAMESPACE)["status"]["podIP"]
            answer = await kubectl.succeed(
                f"REDISCLI_AUTH={password} redis-cli -h {redis_ip} ping; "
                f"redis-cli -h {redis_ip} ping || true",
                cwd=tmp_path,
                env=operator.env,
            )
            lines = answer.splitlines()
            assert lines[0] == "PONG" and lines[1].startswith("NOAUTH"), answer
            assert (claim / "appendonlydir").is_dir(), sorted(p.name for p in claim.iterdir())
            await check_through_port_forwards(operator, kubelet, monkeypatch)


async def make_tls_secrets(operator: Operator) -> None:
    """The guide's openssl steps, run as written: they make the Secrets deploy/k8s/certificates/
    asks cert-manager for, with the names and usages its Certificates give."""
    await operator.run(k8s.shell_block("issue agentihooks-worker"))
    check_tls_secrets(operator)


async def test_cert_manager_issues_the_secrets_the_system_mounts(
    k8s_emulator: K8sEmulator, tmp_path: pathlib.Path
) -> None:
    """Section 8's cert-manager steps, run as written with cert-manager's controllers playing
    their part: the Issuers and Certificates of deploy/k8s/certificates/ are created, `kubectl
    wait` sees every Certificate Ready, and the Secrets hold what the workloads mount."""
    operator = Operator(tmp_path, k8s_emulator)
    script = k8s.shell_block("kubectl apply -k deploy/k8s/certificates/")
    async with cert_manager.running(k8s_emulator.url):
        out = await operator.run(script)
    assert out.count("condition met") == 4, out
    check_tls_secrets(operator)


def check_tls_secrets(operator: Operator) -> None:
    """The three TLS Secrets are there as deploy/k8s/certificates/ asks: each has tls.crt,
    tls.key and ca.crt, names what its Certificate names, serves and dials (server and client
    usages), and one CA signed them all."""
    folder = operator.root / "deploy" / "k8s" / "certificates"
    wanted = {
        o["spec"]["secretName"]: o["spec"]
        for o in k8s.render(folder)
        if o["kind"] == "Certificate" and not o["spec"].get("isCA")
    }
    authority = None
    for name, spec in wanted.items():
        secret = operator.stored("Secret", name)
        assert secret is not None, f"the guide's openssl steps made no Secret {name}"
        assert secret["type"] == "kubernetes.io/tls"
        data = decoded(secret["data"])
        assert set(data) == {"tls.crt", "tls.key", "ca.crt"}, name
        names = k8s.names_on(data["tls.crt"])
        assert names == {*spec["dnsNames"], *spec["ipAddresses"]}, name
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
        authority = authority or data["ca.crt"]
        assert data["ca.crt"] == authority, "one CA signs every certificate"
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(authority))


def guide_commands(block: str) -> list[str]:
    """The commands of a shell block, continuation lines joined."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def terminal(pod: Mapping[str, Any] | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def check_through_port_forwards(
    operator: Operator, kubelet: kubelet_module.Kubelet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's port-forward block and CLI block, run as written but for the local ports
    (free ones, in place of 50051, 8080 and 50052, which may be taken on this machine): the CA
    and the workers' certificate are read from their Secret, both port-forwards start
    (``Forwarding from``), the controller's gRPC health (TLS) and the store's (mutual TLS)
    answer SERVING through them with grpcurl -cacert, /healthz and /readyz answer ok over HTTPS
    (curl --cacert), plaintext gets no answer, and the CLI, dialing TLS with
    AGENTIHOOKS_TLS_CA_FILE, applies a swarm and shows its status; the controller's worker Pod
    runs, and its sidecar reaches the controller through the Service over TLS (`kubectl logs
    POD -c restorer` shows its restore). Then the Events the controller posted as it fenced the
    worker and replaced it (`check_events`)."""
    local = {port: ports.free_port() for port in (50051, 8080, 50052)}

    def localized(command: str) -> str:
        for port, free in local.items():
            command = command.replace(f"{port}:{port}", f"{free}:{port}")
            command = command.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
            command = command.replace(f"localhost:{port}", f"localhost:{free}")
        return command

    commands = guide_commands(k8s.shell_block("port-forward svc/agentihooks-controller"))
    forwards = [c.removesuffix("&").strip() for c in commands if c.endswith("&")]
    checks = [c for c in commands if not c.endswith("&")]
    assert len(forwards) == 2 and len(checks) == 6, commands
    assert all("-plaintext" not in c and "http://" not in c for c in checks), checks
    env = {**operator.env, "PATH": f"{pathlib.Path(sys.executable).parent}:{operator.env['PATH']}"}
    async with contextlib.AsyncExitStack() as stack:
        for forward in forwards:
            await stack.enter_async_context(
                kubectl.background(
                    localized(forward), cwd=operator.root, env=env, ready="Forwarding from"
                )
            )
        answers = await kubectl.succeed(localized("\n".join(checks)), cwd=operator.root, env=env)
        assert answers.count('"status": "SERVING"') == 2, answers
        assert answers.strip().endswith('{"status": "ok"}'), answers
        # Plaintext gets no answer; the store refuses a client without a certificate.
        refused = [
            f"grpcurl -plaintext localhost:{local[50051]} grpc.health.v1.Health/Check",
            f"grpcurl -cacert ca.crt localhost:{local[50052]} grpc.health.v1.Health/Check",
            f"curl -sS http://localhost:{local[8080]}/healthz",
        ]
        for command in refused:
            code, out, err = await kubectl.shell(command, cwd=operator.root, env=env)
            assert code != 0 and "SERVING" not in out and "ok" not in out, (command, out, err)
        (operator.root / "swarm.yaml").write_text(KUBERNETES_SWARM)
        cli = k8s.shell_block("s/^operator-token=//p")
        shown = await kubectl.succeed(localized(cli), cwd=operator.root, env=env)
        assert "admitted example.eng-1.1" in shown, shown
        # The worker may already have run and stopped (below): then its seat waits.
        row = r"^t-eng-1 +eng-1 +(worker|RECOVERY PENDING) +Write the progress notes$"
        assert re.search(row, shown, re.M), shown
        assert shown.strip().endswith('{"status": "ready"}'), shown
        # The controller made the seat's worker Pod through the in-cluster API; its sidecar
        # fetched the launch record from the controller's Service and restored (fresh:
        # generation 1). The "image" here has no Claude Code, so the entry point then stops
        # with 127, and the controller, from the Pod's real status, fences it: an application
        # exit with no checkpoint waits for a choice, fresh only.
        worker = templates.pod_name("example", "example.eng-1.1")
        await kubelet.wait_for_pod(NAMESPACE, worker, terminal, timeout=300)
        command = inline_command("kubectl logs POD -c restorer").replace("POD", worker)
        logs = await operator.run(f"{command} -n {NAMESPACE}")
        ready = [json.loads(line) for line in logs.splitlines() if '"restore_ready"' in line]
        assert ready and ready[0]["execution_id"] == "example.eng-1.1", logs
        assert ready[0]["recovery"] == "fresh", logs
        pod = operator.emulator.get("pods", worker, NAMESPACE)
        (entry,) = pod["status"]["containerStatuses"]
        assert entry["state"]["terminated"]["exitCode"] == 127, entry
        # Until now the controller could not list the bucket: moto (in this process) takes the
        # first label of a Host it does not know, `minio.minio.svc`, for a bucket name (the
        # virtual-hosted style), so the pass stopped before deciding and the stopped worker's
        # Pod stayed for `kubectl logs`. From here moto reads the guide's endpoint as a MinIO
        # does: the pass lists the attempt's checkpoints, records that it awaits a decision
        # and removes its Pod, as on a cluster.
        monkeypatch.setenv("MOTO_S3_CUSTOM_ENDPOINTS", "http://minio.minio.svc:9000")
        exports = [line for line in cli.splitlines() if line.startswith("export ")]
        status = localized("\n".join([*exports, "agentihooks swarm example status"]))

        async def fenced() -> None:
            # A call the controller did not answer in time (exit 6: the port-forward and the
            # pass's bucket listing on a loaded machine) is asked again, as an operator would.
            code, shown, err = await kubectl.shell(status, cwd=operator.root, env=env)
            assert code == 0, (code, err)
            assert "eng-1: application_exit  [recovery_pending]  offer: fresh only" in shown

        await ports.eventually(fenced, timeout=300, every=1.0)
        decide = localized("\n".join([*exports, inline_command(DECISION)]))
        try:
            await check_events(operator, decide, env)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\ncontroller logs:\n{controller_logs(kubelet)}") from None
    # The controller did it with its service account's token, as rbac.yaml allows, and can do
    # nothing more: a Secret is not its to read.
    emulator = operator.emulator
    controller = f"system:serviceaccount:{NAMESPACE}:agentihooks-controller"
    calls = ("create pods", "create secrets", "list pods", "watch pods", "list nodes")
    for call in (*calls, "create events"):
        assert emulator.authorized[f"{controller} {call}"] >= 1, (call, emulator.authorized)
    token = next(iter(emulator.tokens))
    (operator.root / "ca.crt").write_bytes(emulator.ca_pem)
    as_controller = (
        f"kubectl --server=https://127.0.0.1:{emulator.https_port} --certificate-authority=ca.crt"
        f" --token={token} -n {NAMESPACE} get secrets"
    )
    code, _, err = await kubectl.shell(as_controller, cwd=operator.root, env=operator.env)
    assert code == 1, err
    assert f'secrets is forbidden: User "{controller}" cannot list resource "secrets"' in err, err


DECISION = "agentihooks swarm example restore-decision"


def controller_logs(kubelet: kubelet_module.Kubelet) -> str:
    """The controller replicas' log lines about Events (for a failure's message)."""
    lines = []
    for path in sorted((kubelet.root / "logs").rglob("*.log")):
        if "agentihooks-controller" in str(path):
            text = path.read_text(errors="replace")
            lines += [f"{path.parent.parent.name}: {ln}" for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if "event" in ln or "lease" in ln)[-20000:]


def guide_output(command: str) -> list[str]:
    """The lines of the output block that follows section 8's shell block holding `command`."""
    found = re.search(re.escape(command) + r"\n```\n\n```\n(.*?)```", k8s.section_8(), re.DOTALL)
    assert found is not None, f"section 8 shows no output after {command!r}"
    return found.group(1).splitlines()


def event_table(lines: list[str], *, described: bool) -> dict[tuple[str, str], list[str]]:
    """Event rows by (reason, object) from `kubectl get events` (LAST SEEN, TYPE, REASON,
    OBJECT, MESSAGE) or, `described`, `kubectl describe`'s Events section (Type, Reason, Age,
    From, Message; the object is the Pod described, "")."""
    if described:
        at = lines.index("Events:") if "Events:" in lines else len(lines)
        lines = lines[at + 1 :]
    rows: dict[tuple[str, str], list[str]] = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip(), maxsplit=4)
        if len(cells) == 5 and not set(cells[0]) <= {"-"}:
            reason, kind = (cells[1], cells[0]) if described else (cells[2], cells[1])
            rows[reason, "" if described else cells[3]] = [kind, cells[4]]
    return rows


def shows(real: dict[tuple[str, str], list[str]], sample: dict[tuple[str, str], list[str]]) -> None:
    """Each of the guide's sample rows is in `real`: the same type, and the message up to its
    first `;` (what follows, the lost tail for one, depends on the moment the worker stopped)."""
    for key, (kind, message) in sample.items():
        assert key in real, (key, sorted(real))
        assert real[key][0] == kind, (key, real[key])
        assert real[key][1].startswith(message.split(";")[0]), (key, real[key], message)


async def check_events(operator: Operator, decide: str, env: Mapping[str, str]) -> None:
    """Section 8's Events, run as written: after the fence, `kubectl get events` lists `Fenced`
    and `AwaitingDecision` on the stopped worker's Pod as the guide shows them; after the
    guide's `restore-decision … fresh`, `kubectl describe pod` on the replacement shows why it
    exists (`DecisionAccepted`) and `ReplacementLaunched` (its node is cordoned meanwhile, so
    that it is still there to describe), and once it ran, `get events` shows its
    `OutcomeVerified` (fresh) as the guide does. The controller posted them in-cluster, through
    the RBAC of rbac.yaml; no key of keys.env is in any of it."""
    (listing,) = guide_commands(k8s.shell_block("get events --field-selector"))
    (describe,) = guide_commands(k8s.shell_block("describe pod example-"))
    listed_sample = event_table(guide_output(listing), described=False)
    described_sample = event_table(guide_output(describe), described=True)
    assert {k[0] for k in listed_sample} == {"Fenced", "AwaitingDecision"}, listed_sample
    assert {k[0] for k in described_sample} == {
        "DecisionAccepted",
        "ReplacementLaunched",
        "OutcomeVerified",
    }
    shown: list[str] = []

    async def listed(*reasons: str) -> dict[tuple[str, str], list[str]]:
        out = await operator.run(listing)
        shown.append(out)
        rows = event_table(out.splitlines(), described=False)
        assert set(reasons) <= {k[0] for k in rows}, out
        return rows

    rows = await ports.eventually(lambda: listed("Fenced", "AwaitingDecision"), timeout=300)
    shows(rows, listed_sample)
    await operator.run("kubectl cordon node-1")
    try:
        applied = await kubectl.succeed(decide, cwd=operator.root, env=env)
        assert "applied: fresh accepted" in applied, applied

        async def described() -> dict[tuple[str, str], list[str]]:
            out = await operator.run(describe)
            shown.append(out)
            rows = event_table(out.splitlines(), described=True)
            assert {"DecisionAccepted", "ReplacementLaunched"} <= {k[0] for k in rows}, out
            return rows

        rows = await ports.eventually(described, timeout=300)
        shows(rows, {k: v for k, v in described_sample.items() if k[0] != "OutcomeVerified"})
    finally:
        await operator.run("kubectl uncordon node-1")
    replacement = describe.split()[-1]
    rows = await ports.eventually(lambda: listed("OutcomeVerified"), timeout=300)
    outcome = described_sample["OutcomeVerified", ""]
    shows(rows, {("OutcomeVerified", f"pod/{replacement}"): outcome})
    keys = (operator.root / "deploy/k8s/secrets/keys.env").read_text().splitlines()
    for key in keys:
        assert key.split("=", 1)[1] not in "".join(shown)


KUBERNETES_SWARM = """\
swarm: example
worker_image: registry.local/agent-worker:1.4.2
harness: claude_code
command: ["claude"]
restore_automation: true
checkpoint_remote: true
seats:
  - seat: eng-1
    task: {text: "Write the progress notes", awaiting: worker}
"""
