"""What the API server tells clients about itself: its version, the discovery documents that map
kinds to resources (as kubectl reads them) and the OpenAPI v3 documents (``--validate``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.support.kube.apiserver import (
    errors,
    kinds,
)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-emulated"})


async def openapi(request: web.Request) -> web.Response:
    """OpenAPI v3 as far as kubectl reads it: the root names a document per group/version,
    and each document's PATCH operations declare ``fieldValidation``, so kubectl leaves
    validation to the server (``--validate=strict``, its default) instead of downloading
    schemas. The emulator takes the parameter and checks what `validation.validate` checks; it does
    not know every field of every kind, so an unknown field is not refused here."""
    versions = sorted({v for _, _, v in kinds.KINDS.values()})
    paths = {("api/" if v == "v1" else "apis/") + v: v for v in versions}
    wanted = request.match_info.get("path")
    if wanted is None:
        return web.json_response(
            {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash=0"} for p in paths}}
        )
    version = paths.get(wanted)
    if version is None:
        return errors.status_response(
            errors.ApiError(404, "the server could not find the requested resource")
        )
    group, _, short = version.rpartition("/")
    operations: dict[str, Any] = {}
    for name, (kind, namespaced, gv) in kinds.KINDS.items():
        if gv != version:
            continue
        where = f"/{wanted}/namespaces/{{namespace}}" if namespaced else f"/{wanted}"
        operations[f"{where}/{name}/{{name}}"] = {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": group,
                    "version": short,
                    "kind": kind,
                },
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return web.json_response(
        {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.31.0-emulated"},
            "paths": operations,
        }
    )


async def discovery(request: web.Request) -> web.Response:
    """Legacy (unaggregated) discovery, as kubectl reads it to map kinds to resources:
    ``/api``, ``/apis``, ``/api/v1`` and ``/apis/GROUP/VERSION``."""
    host = request.host
    if request.path == "/api":
        return web.json_response(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
            }
        )
    versions = sorted(
        {v for _, _, v in kinds.KINDS.values() if "/" in v} | {v for v, _ in kinds.VIEWS}
    )
    if request.path == "/apis":
        groups = []
        for version in versions:
            group = version.split("/")[0]
            entry = {"groupVersion": version, "version": version.split("/")[1]}
            groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    group = request.match_info.get("group")
    version = f"{group}/{request.match_info['version']}" if group else "v1"
    if version not in {v for _, _, v in kinds.KINDS.values()} | {v for v, _ in kinds.VIEWS}:
        return errors.status_response(
            errors.ApiError(404, "the server could not find the requested resource")
        )
    resources = []
    served = [(name, *kind, False) for name, kind in sorted(kinds.KINDS.items())]
    served += [
        (name, *kinds.KINDS[stored][:2], v, True) for (v, name), stored in kinds.VIEWS.items()
    ]
    for name, kind, namespaced, gv, view in served:
        if gv != version:
            continue
        verbs = ["create", "delete", "get", "list", "patch", "update"]
        verbs += [] if view else ["watch"]  # a view's watch is not served
        resources.append(
            {
                "name": name,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": verbs,
                "shortNames": kinds.SHORT_NAMES.get(name, []),
            }
        )
        subresources = ["status"] if name not in ("secrets", "configmaps") else []
        subresources = [] if view else subresources
        subresources += ["binding"] if name == "pods" else []
        subresources += ["scale"] if name in kinds.SCALED else []
        for sub in subresources:
            resources.append(
                {
                    "name": f"{name}/{sub}",
                    "singularName": "",
                    "namespaced": namespaced,
                    "kind": "Scale" if sub == "scale" else kind,
                    "verbs": ["create"] if sub == "binding" else ["get", "patch", "update"],
                }
            )
    return web.json_response(
        {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": version,
            "resources": resources,
        }
    )
