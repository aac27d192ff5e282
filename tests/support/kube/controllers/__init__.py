"""Control-plane loops beside the API server emulator, each talking to it only through its REST
API: `scheduling` (binds Pods to nodes), `workloads` (Deployments, ReplicaSets, StatefulSets)
and `cert_manager` (Issuers and Certificates become TLS Secrets)."""
