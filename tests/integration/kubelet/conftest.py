"""The kubelet fixtures (tests/support/kubelet.py) for these tests."""

from tests.support.kubelet import kube_scheduler, kubelet

__all__ = ["kube_scheduler", "kubelet"]
