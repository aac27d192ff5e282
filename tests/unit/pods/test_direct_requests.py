"""The routes of the calls sent straight through the client's session (`direct_requests`) are
the library's own: each method's path, verb, positional parameters and auth setting are read
from its generated code, so a new library version that moved one fails here rather than on a
cluster."""

from __future__ import annotations

import inspect
import re

import pytest
from kubernetes_asyncio import client

from services.controller.pods import direct_requests


@pytest.mark.parametrize("name", sorted(direct_requests.ROUTES))
def test_each_route_is_the_librarys_call(name: str) -> None:
    route = direct_requests.ROUTES[name]
    method = getattr(client.CoreV1Api, name)
    assert direct_requests.route(method) is route
    source = inspect.getsource(getattr(client.CoreV1Api, f"{name}_with_http_info"))
    call = re.search(r"call_api\(\s*'([^']+)', '([A-Z]+)'", source)
    assert call is not None and call.groups() == (route.path, route.verb)
    assert re.search(r"auth_settings = (\[[^\]]*\])", source).group(1) == str(  # type: ignore[union-attr]
        direct_requests.AUTH_SETTINGS
    )
    named = [
        p.name
        for p in inspect.signature(method).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"
    ]
    assert route.params[: len(named)] == tuple(named)
    # A body the method takes as a keyword (a deletion's options) comes last.
    assert set(route.params[len(named) :]) <= {"body"}
    assert "'body'" in source


def test_other_methods_go_through_the_library() -> None:
    assert direct_requests.route(client.CoreV1Api.read_namespaced_pod) is None
    assert direct_requests.route(client.CoreV1Api.list_namespaced_pod) is None
