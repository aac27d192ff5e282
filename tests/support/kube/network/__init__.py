"""Networking for the emulated cluster: `pod_network` (a network namespace and address per Pod
on the node's bridge, /etc/hosts and resolv.conf, and the Service proxy standing in for
kube-proxy) and `portforward` (the SPDY-over-WebSocket tunnel of ``kubectl port-forward``)."""
