"""What the emulator serves: each resource's kind, scope and group/version, its short names, the
views of stored resources and which resources have a /scale subresource."""

from __future__ import annotations

from tests.support.kube.apiserver import events as k8s_events

# resource -> (kind, namespaced, group/version): what the controller uses (Pods, Secrets, Nodes)
# and what `kubectl apply -k deploy/k8s/` creates.
KINDS = {
    "pods": ("Pod", True, "v1"),
    "secrets": ("Secret", True, "v1"),
    "nodes": ("Node", False, "v1"),
    "namespaces": ("Namespace", False, "v1"),
    "serviceaccounts": ("ServiceAccount", True, "v1"),
    "configmaps": ("ConfigMap", True, "v1"),
    "services": ("Service", True, "v1"),
    "endpoints": ("Endpoints", True, "v1"),
    "persistentvolumeclaims": ("PersistentVolumeClaim", True, "v1"),
    "events": ("Event", True, "v1"),
    "deployments": ("Deployment", True, "apps/v1"),
    "statefulsets": ("StatefulSet", True, "apps/v1"),
    "replicasets": ("ReplicaSet", True, "apps/v1"),
    "roles": ("Role", True, "rbac.authorization.k8s.io/v1"),
    "rolebindings": ("RoleBinding", True, "rbac.authorization.k8s.io/v1"),
    "clusterroles": ("ClusterRole", False, "rbac.authorization.k8s.io/v1"),
    "clusterrolebindings": ("ClusterRoleBinding", False, "rbac.authorization.k8s.io/v1"),
    "networkpolicies": ("NetworkPolicy", True, "networking.k8s.io/v1"),
    # cert-manager's kinds, as its CRDs serve them (deploy/k8s/certificates/;
    # `tests.support.kube.controllers.cert_manager` plays its controller).
    "certificates": ("Certificate", True, "cert-manager.io/v1"),
    "issuers": ("Issuer", True, "cert-manager.io/v1"),
}


# (group/version, resource) served as a view of a stored resource: Events, stored once as core
# v1 and also served as events.k8s.io/v1 (converted each way,
# `tests.support.kube.apiserver.events`).
VIEWS = {(k8s_events.GROUP_VERSION, "events"): "events"}


# Subresources served beyond /status: Pod /binding and the workloads' /scale.
SCALED = frozenset({"deployments", "statefulsets", "replicasets"})


SHORT_NAMES = {
    "pods": ["po"],
    "nodes": ["no"],
    "namespaces": ["ns"],
    "serviceaccounts": ["sa"],
    "configmaps": ["cm"],
    "services": ["svc"],
    "endpoints": ["ep"],
    "persistentvolumeclaims": ["pvc"],
    "events": ["ev"],
    "deployments": ["deploy"],
    "statefulsets": ["sts"],
    "replicasets": ["rs"],
    "networkpolicies": ["netpol"],
}
