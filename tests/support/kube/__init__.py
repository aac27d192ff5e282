"""Kubernetes for the tests: an API server, nodes, networking and controllers that behave as a
cluster's do, driven only through real clients (kubernetes-asyncio, kubectl).

- `apiserver`: the API server emulator (`apiserver.emulator.K8sEmulator`, the ``k8s_emulator``
  fixture), with its store and watches, discovery, validation, patches, RBAC and Events.
- `node`: a kubelet that runs each Pod's containers as real processes in mount and UTS
  namespaces, with volumes, probes, cgroup memory limits and OOM kills.
- `network`: Pod networking and a Service proxy (kube-proxy), and ``kubectl port-forward``'s
  tunnel.
- `controllers`: the control-plane loops: a scheduler, the workload controllers (Deployments,
  ReplicaSets, StatefulSets) and cert-manager.
- `clusters` assembles a scheduler and kubelets; `api_client` is how every part but the API
  server talks to it; `objects` reads what it answers; `kubectl` runs the real kubectl.
"""
