"""A kubelet for the Kubernetes API emulator: Pods run as real processes.

`Kubelet` plays one node against an API server's REST API only (aiohttp, the way a real kubelet
talks to the API server): it registers its Node (``Ready`` True), watches the Pods bound to it
(``fieldSelector=spec.nodeName=<node>``), reads Secrets, ConfigMaps and PersistentVolumeClaims,
writes each Pod's status through ``pods/{name}/status`` and finishes graceful deletions with a
delete at grace 0. A scheduler (`tests.support.kube.controllers.scheduling`) binds unbound
Pods to a ready node through the Pod ``/binding`` subresource.

What a Pod gets, as the kubelet and a container runtime would give it:

- The "image" is this machine with this project installed: ``command`` + ``args`` run as given
  (there is no image entrypoint); ``PATH`` is the venv's ``bin`` (so ``python3`` and the
  project's console scripts such as ``agentihooks-restorer`` resolve) then
  ``/usr/local/bin:/usr/bin:/bin``; ``HOSTNAME`` is the Pod name and ``HOME`` the user's home from
  /etc/passwd (``/`` when it has none), unless ``env`` sets them. ``env`` takes ``value`` (with
  ``$(VAR)`` expansion), ``valueFrom.secretKeyRef``, ``valueFrom.configMapKeyRef`` (a key of the
  ConfigMap's ``data``), ``fieldRef`` and ``resourceFieldRef``; ``envFrom`` takes ``secretRef``
  and ``configMapRef`` (every key of ``data``; ``binaryData`` is not used), each with ``prefix``,
  and ``env`` wins over it. A missing Secret, ConfigMap or key leaves the container ``waiting``
  with reason ``CreateContainerConfigError`` (message ``secret "x" not found``, ``configmap "x"
  not found`` or ``couldn't find key k in ConfigMap ns/x``; retried every ``config_retry``
  seconds, so it starts once the object appears) unless the reference is ``optional``, which is
  then skipped; so does ``runAsNonRoot`` with user 0. ``workingDir`` is created if missing.
- Each Pod has a mount namespace and a UTS namespace (``unshare --mount --uts --propagation
  private``, held by a sandbox process as the pause container holds a real Pod's namespaces; the
  hostname is the Pod's name). Inside it every container gets
  its own root: a tmpfs holding bind mounts of the host's top-level entries, with the container's
  volume mounts bound on top, and its processes ``chroot`` there. A mount path missing on the
  host is made inside tmpfs copies of its parent folders (each entry bound from the host), so
  nothing is created, mounted over or changed on the host; every mount lives in the namespace and
  disappears with it. Volumes: ``emptyDir`` (a folder per Pod under the kubelet's root, mode 0777,
  group ``fsGroup``; ``medium: Memory`` is a tmpfs in the namespace), ``secret`` (files from the
  Secret's data) and ``configMap`` (files from the ConfigMap's ``data`` as UTF-8 text and its
  ``binaryData`` decoded), both every key or ``items`` (key -> path, ``mode``), mode
  ``defaultMode``/``items[].mode``, 0644 by default, mounted read-only, ``optional`` honoured;
  ``persistentVolumeClaim`` (``claimName`` read from the Pod's namespace; its data is the folder
  ``<root>/claims/<namespace>/<claim>`` on this machine, `Kubelet.claim_path`, mode 0777, given to
  ``fsGroup`` as a kubelet does: group and group read/write on every file, set-group-ID folders,
  ``fsGroupChangePolicy: OnRootMismatch`` honoured; kept when the Pod is deleted, so the next Pod
  with the claim, such as a StatefulSet's replacement, sees the same files; ``readOnly`` makes
  the mount read-only) and ``hostPath``; ``readOnly`` and ``subPath`` mounts. A missing Secret,
  ConfigMap (not ``optional``), item key or claim keeps every container of the Pod ``waiting``
  with reason ``ContainerCreating`` and the Pod's status ``message`` saying what is missing
  (retried every ``config_retry`` seconds, so the Pod starts once it appears). The containers of
  a Pod share a volume's folder, so they see the same contents. Image paths (the project, its
  venv, the Python installation) stay traversable by any user, and stay visible under a volume
  mounted on one of their parents (such as the worker template's ``/work``): they are bound back
  over the volume, which then shows an empty mount-point folder for them.
- ``securityContext``: ``runAsUser``/``runAsGroup`` (setuid/setgid, from the container or the
  Pod), ``fsGroup`` and ``supplementalGroups`` as supplementary groups, ``runAsNonRoot``,
  ``allowPrivilegeEscalation: false`` (no_new_privs). Capabilities, seccomp and
  ``readOnlyRootFilesystem`` are not applied.
- Each container runs in a cgroup v1 memory cgroup under this process's own, with
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``: no swap beyond it) from
  ``resources.limits.memory``. A container the kernel OOM-killed (the cgroup's ``oom_kill`` count)
  is reported ``terminated`` with reason ``OOMKilled``. When a container's main process ends,
  whatever is left in its cgroup is killed and the cgroup removed.
- Order: init containers with ``restartPolicy: Always`` (native sidecars) start and keep running
  (restarted with back-off when they exit, counting ``restartCount``); the next init container,
  and the main containers, start once the sidecar has started (its ``startupProbe`` passed; without
  one, once its process runs). Ordinary init containers run to completion in order. Probes
  (startup, readiness, liveness): ``exec`` (in the container), ``tcpSocket``, ``httpGet`` (``scheme:
  HTTPS`` without verifying the certificate, as a kubelet does), ``grpc``
  (the gRPC health service), on 127.0.0.1. Restart policies ``Never``, ``OnFailure`` and ``Always``
  (back-off ``backoff``: ``CrashLoopBackOff`` while waiting). Once every main container has
  terminated for good, the sidecars get SIGTERM in reverse order (SIGKILL after
  ``terminationGracePeriodSeconds``) and the phase becomes ``Succeeded`` or ``Failed``.
- Deletion: a Pod with a ``deletionTimestamp`` has its main containers sent SIGTERM, then its
  sidecars, and what still runs when ``deletionGracePeriodSeconds`` ran out gets SIGKILL; the
  terminal status is written, then the kubelet deletes the Pod at grace 0 (precondition: its uid).
  The emulator keeps gracefully deleted Pods only with ``hold_deletions`` (set by the fixture, as
  a real API server does for every Pod bound to a node); a Pod removed at once is killed within
  two seconds.
- Status as a kubelet writes it: ``phase``, ``conditions`` (PodReadyToStartContainers,
  Initialized, ContainersReady, Ready, PodScheduled; conditions written by others are kept),
  ``containerStatuses``/``initContainerStatuses`` (``state``, ``lastState``, ``ready``,
  ``started``, ``restartCount``, ``image``, ``imageID``, ``containerID``, ``name``), ``startTime``,
  ``hostIP``/``podIP`` 127.0.0.1.
- `Kubelet.stop` freezes the node (the node's cgroup v1 freezer, else SIGSTOP to each process
  group), stops the kubelet's own work and sets the Node's conditions ``Unknown`` as the node
  controller would; `Kubelet.start` thaws it and posts ``Ready`` True again.
- Each container run's stdout and stderr go to one log file (`Kubelet.logs`, like
  ``kubectl logs [--previous]``); logs and claims' folders are kept until the kubelet closes,
  other volumes until the Pod is deleted.

- With ``network=True`` (`tests.support.kube.network.pod_network`): each Pod's sandbox also has its
  own network namespace (``unshare --net``), joined to the node's bridge by a veth pair; the Pod's
  address (``status.podIP``, ``fieldRef: status.podIP``) is on the node's /24 of 10.244.0.0/16 and
  probes go to it. Every container's ``/etc/hosts`` names each Service's cluster IP (kept current as
  Services change) and its ``/etc/resolv.conf`` has the cluster's search path. When the API server
  serves in-cluster (the Service ``default/kubernetes`` exists), containers get
  ``KUBERNETES_SERVICE_HOST``/``PORT`` and, unless ``automountServiceAccountToken`` is false,
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (``token`` from a TokenRequest for the Pod's
  service account, ``ca.crt`` from ``kube-root-ca.crt``, ``namespace``); a missing service account
  keeps the Pod ``ContainerCreating``. `pod_network.ServiceProxy` forwards the cluster IPs.

Not emulated: networking without ``network=True`` (every Pod shares the host's network: podIP
127.0.0.1, ports can collide), PID and IPC namespaces (a container's main process is not PID 1),
images and pulls, CPU limits, lifecycle hooks, projected (but the service account token),
downwardAPI and other volume types, ephemeral containers, in-place updates, evictions. Secret
and ConfigMap volumes are files under the kubelet's folder (not a tmpfs), written when the Pod
starts and not updated when the object changes. A claim is only a folder on this machine, one
per kubelet (like a local volume: a Pod on another node sees another folder): no
PersistentVolume or binding (the claim's ``status`` is neither read nor written), no capacity,
StorageClass or access-mode enforcement (any number of Pods may mount it read-write), and its
data stays when the claim is deleted (a claim made again with the same name sees it). A
``hostPath`` of type ``DirectoryOrCreate`` is created on the host, as it is by a kubelet.

Where each part lives: `kubelet` (the `Kubelet`: lifecycle, what tests read, admitting Pods),
`pod_lifecycles` (one Pod's life), `volumes` and `volume_files` (volumes), `environments`
(identities and environments), `runtime` (sandboxes, container runs, freezing; the sandbox
itself is `mounting`, the launcher `launching`, both run as files of their own), `probes`,
`statuses` (Pod status), `registering` (the Node), `log_serving`, `cgroups`, `processes`,
`resources`, `pods` (what the kubelet holds of a Pod), `context` (what the parts share).
The scheduler is `tests.support.kube.controllers.scheduling`; `tests.support.kube.clusters`
assembles a scheduler and kubelets (``cluster``) and has the ``kube_scheduler`` and
``kubelet`` fixtures; `tests.support.kube.objects` reads statuses and conditions;
`tests.support.kube.api_client` is how all of them talk to the API server.

`Kubelet` (``start``, ``stop``, ``close``, ``logs``, ``log_path``, ``volume_path``,
``claim_path``, ``pid``, ``pod_uids``, ``wait_for_pod``, ``memory_cgroup``, ``stopped``) is an
async context manager; closing a kubelet kills every process it started (by process group and
by cgroup), removes its cgroups and its folders (claims' included), even when a test fails.
Needs root, cgroup v1 memory and ``unshare``: see `kubelet.unsupported_reason`.
"""
