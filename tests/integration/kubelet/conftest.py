"""The kubelet fixtures (tests/support/kube/node/kubelet.py) for these tests.

A machine that cannot run the kubelet (no root, no cgroup v1 memory, no `unshare`) fails every
test here with the reason, loudly: these tests are never skipped.
"""

import pytest

from tests.support.kube.clusters import kube_scheduler, kubelet
from tests.support.kube.node import kubelet as kubelet_module

__all__ = ["kube_scheduler", "kubelet"]


@pytest.fixture(autouse=True)
def _kubelet_can_run() -> None:
    reason = kubelet_module.unsupported_reason()
    if reason is not None:
        pytest.fail(f"the kubelet cannot run Pods on this machine: {reason}")
