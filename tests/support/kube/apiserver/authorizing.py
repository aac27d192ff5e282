"""RBAC as the API server enforces it for Pods' service accounts, and the tokens it issues them
(TokenRequest). A request without a token issued here is a test's own, a cluster admin's."""

from __future__ import annotations

import collections
import datetime
import secrets
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tests.support.kube.apiserver import (
    errors,
    kinds,
    store,
    watches,
)


def names(listed: Any, value: str) -> bool:
    """Whether an RBAC rule's list names `value` (or ``*``)."""
    return bool(listed) and ("*" in listed or value in listed)


class Authorizer:
    """Issues service account tokens and authorizes the requests bearing them."""

    def __init__(self, objects: store.Store) -> None:
        self.store = objects
        self.tokens: dict[str, tuple[str, str]] = {}
        """Tokens issued through TokenRequest -> (namespace, service account)."""
        self.authorized: collections.Counter[str] = collections.Counter()
        """Requests RBAC allowed, by ``USER VERB RESOURCE`` (``system:serviceaccount:…``)."""

    def authorize(
        self,
        request: web.Request,
        verb: str,
        path: str,
        namespace: str | None,
        name: str | None = None,
        *,
        group: str | None = None,
    ) -> None:
        """RBAC for a request bearing a token issued here (a Pod's service account): allowed
        when a rule of a Role bound in the namespace, or of a ClusterRole bound there or
        cluster-wide, names the verb, the API group, the resource (``pods/status`` for a
        subresource) and, if it lists ``resourceNames``, the name; else 403 ``Forbidden`` with
        the API server's message. A request with no token, or one not issued here (a test's
        kubeconfig may carry one), is the test's own, a cluster admin's: always allowed."""
        header = request.headers.get("Authorization", "")
        who = self.tokens.get(header.removeprefix("Bearer ").strip()) if header else None
        if who is None:
            return
        resource = path.split("/")[0]
        version = kinds.KINDS[resource][2]
        if group is None:
            group = version.split("/")[0] if "/" in version else ""
        user = f"system:serviceaccount:{who[0]}:{who[1]}"
        for rule in self.rules(who, namespace):
            if (
                names(rule.get("verbs"), verb)
                and names(rule.get("apiGroups"), group)
                and names(rule.get("resources"), path)
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
            ):
                self.authorized[f"{user} {verb} {path}"] += 1
                return
        subject = f'{resource} "{name}"' if name else resource
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise errors.ApiError(
            403,
            f'{subject} is forbidden: User "{user}" cannot {verb} resource "{path}" in API '
            f'group "{group}" {where}',
        )

    def rules(self, who: tuple[str, str], namespace: str | None) -> list[dict[str, Any]]:
        """The rules of every role bound to the service account `who` that apply in
        `namespace` (cluster-wide bindings, and the namespace's own)."""

        def binds(binding: Mapping[str, Any]) -> bool:
            return any(
                s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == who
                for s in binding.get("subjects") or ()
            )

        found: list[dict[str, Any]] = []
        bindings = [(b, None) for b in self.store.objects("clusterrolebindings")]
        if namespace:
            bindings += [(b, namespace) for b in self.store.objects("rolebindings", namespace)]
        for binding, where in bindings:
            if not binds(binding):
                continue
            ref = binding.get("roleRef") or {}
            if ref.get("kind") == "Role" and where:
                role = self.store.get("roles", ref.get("name", ""), where)
            else:
                role = self.store.get("clusterroles", ref.get("name", ""))
            found += (role or {}).get("rules") or []
        return found

    def issue_token(self, entry: watches.Entry) -> dict[str, Any]:
        """A TokenRequest's answer: a new token for the service account, for an hour."""
        meta = entry.obj["metadata"]
        token = "emulated." + secrets.token_urlsafe(32)
        self.tokens[token] = (meta["namespace"], meta["name"])
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600},
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
