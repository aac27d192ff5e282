"""Typed settings for every service, read once from the environment.

The loader takes the environment as an argument (tests pass a dict). A bad value is refused at
start with a message naming the variable; the message never echoes a secret's value.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Mapping

from services.common import addresses, qualified_versions, tls_settings

PREFIX = "AGENTIHOOKS_"
DEFAULT_MAX_OBJECT_BYTES = 1 << 30  # 1 GiB: an object over this is refused as oversized.
MIN_KEY_BYTES = 32
DEFAULT_START_TIMEOUT_S = 60  # a rollout or a lease takeover leaves the controller away briefly
DEFAULT_REDIS_WAIT_MS = 2_000  # how long an acknowledgement waits for the replicas
MAX_REDIS_WAIT_MS = 10_000  # well within the CLI's deadlines (15 s) and the Redis read timeout


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(PREFIX + name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _required(env: Mapping[str, str], name: str, why: str) -> str:
    value = _get(env, name)
    if value is None:
        raise SettingsError(f"{PREFIX}{name} is not set: {why}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(env, name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{PREFIX}{name} must be true or false, not {value!r}")


def _int(
    env: Mapping[str, str],
    name: str,
    default: int,
    minimum: int = 1,
    maximum: int | None = None,
) -> int:
    value = _get(env, name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise SettingsError(f"{PREFIX}{name} must be a whole number, not {value!r}") from None
    if parsed < minimum:
        raise SettingsError(f"{PREFIX}{name} must be at least {minimum}")
    if maximum is not None and parsed > maximum:
        raise SettingsError(f"{PREFIX}{name} must be at most {maximum}")
    return parsed


def _absolute_path(env: Mapping[str, str], name: str) -> pathlib.Path | None:
    value = _get(env, name)
    if value is None:
        return None
    path = pathlib.Path(value)
    if not path.is_absolute():
        raise SettingsError(f"{PREFIX}{name} must be an absolute path, not the relative {value!r}")
    return path


def _address(env: Mapping[str, str], name: str, default: str | None) -> str | None:
    value = _get(env, name) or default
    if value is None:
        return None
    try:
        addresses.parse(value, listening=True)
    except addresses.Malformed as exc:
        raise SettingsError(
            f"{PREFIX}{name} must be HOST:PORT, not {addresses.shown(value)}: {exc}"
        ) from None
    return value


def _tls(env: Mapping[str, str]) -> tls_settings.TLSSettings:
    """The process's TLS files (`tls_settings.load`), checked now: a wrong mount stops the
    process at start."""
    try:
        return tls_settings.load(env)
    except tls_settings.TLSError as exc:
        raise SettingsError(str(exc)) from None


def _secret(env: Mapping[str, str], name: str, *, minimum: int) -> str | None:
    value = _get(env, name)
    if value is not None and len(value.encode()) < minimum:
        raise SettingsError(f"{PREFIX}{name} is too short: use at least {minimum} bytes")
    return value


@dataclasses.dataclass(frozen=True)
class StorageSettings:
    """Where checkpoints live. The bucket takes precedence over the root folder."""

    checkpoint_root: pathlib.Path | None
    checkpoint_bucket: str | None
    s3_endpoint_url: str | None
    max_object_bytes: int

    @property
    def configured(self) -> bool:
        return self.checkpoint_bucket is not None or self.checkpoint_root is not None


def load_storage(env: Mapping[str, str]) -> StorageSettings:
    """Read the checkpoint storage settings."""
    return StorageSettings(
        checkpoint_root=_absolute_path(env, "CHECKPOINT_ROOT"),
        checkpoint_bucket=_get(env, "CHECKPOINT_BUCKET"),
        s3_endpoint_url=_get(env, "S3_ENDPOINT_URL"),
        max_object_bytes=_int(env, "MAX_OBJECT_BYTES", DEFAULT_MAX_OBJECT_BYTES),
    )


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    """The checkpoint-store service."""

    listen: str
    redis_url: str
    grant_key: str = dataclasses.field(repr=False)
    storage: StorageSettings
    tls: tls_settings.TLSSettings = tls_settings.PLAINTEXT


def load_store(env: Mapping[str, str]) -> StoreSettings:
    """Read the checkpoint-store service's settings."""
    storage = load_storage(env)
    if not storage.configured:
        raise SettingsError(
            f"{PREFIX}CHECKPOINT_ROOT or {PREFIX}CHECKPOINT_BUCKET must be set "
            "for the checkpoint store"
        )
    key = _secret(env, "GRANT_KEY", minimum=MIN_KEY_BYTES)
    if key is None:
        raise SettingsError(f"{PREFIX}GRANT_KEY is not set: the store checks grants with it")
    return StoreSettings(
        listen=_address(env, "STORE_ADDR", "127.0.0.1:50052") or "127.0.0.1:50052",
        redis_url=_get(env, "REDIS_URL") or "redis://127.0.0.1:6379/0",
        grant_key=key,
        storage=storage,
        tls=_tls(env),
    )


@dataclasses.dataclass(frozen=True)
class RedisWait:
    """How durable a write must be before the controller answers it accepted (a decision, a
    pause, an outcome, an admission): on `replicas` replicas (Redis `WAIT`) and, with `aof`,
    also fsynced to the append-only file of the master and of those replicas (`WAITAOF`,
    Redis 7.2 or later), within `timeout_ms`. The default waits for nothing (one local Redis).
    """

    replicas: int = 0
    aof: bool = False
    timeout_ms: int = DEFAULT_REDIS_WAIT_MS

    @property
    def waits(self) -> bool:
        """Whether an acknowledgement waits for anything at all."""
        return self.replicas > 0 or self.aof


def load_redis_wait(env: Mapping[str, str]) -> RedisWait:
    """Read how durable an acknowledged write must be."""
    timeout = _int(env, "REDIS_WAIT_TIMEOUT_MS", DEFAULT_REDIS_WAIT_MS, maximum=MAX_REDIS_WAIT_MS)
    return RedisWait(
        replicas=_int(env, "REDIS_WAIT_REPLICAS", 0, minimum=0),
        aof=_bool(env, "REDIS_WAIT_AOF", False),
        timeout_ms=timeout,
    )


DEFAULT_RESYNC_RATE = 200
"""Resyncs nobody asked for, per second, across one controller's swarms (`pacing`)."""


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    """The controller."""

    listen: str
    http: str
    redis_url: str
    grant_key: str = dataclasses.field(repr=False)
    operator_token: str = dataclasses.field(repr=False)
    worker_image: str
    runtime: str
    namespace: str
    store_addr: str | None
    storage: StorageSettings
    lease_ms: int
    pass_interval_ms: int
    workdir: pathlib.Path
    pod_template: pathlib.Path | None
    entry_point: tuple[str, ...]
    worker_control_addr: str | None = None
    advertise_host: str | None = None
    redis_wait: RedisWait = RedisWait()
    tls: tls_settings.TLSSettings = tls_settings.PLAINTEXT
    resync_rate: int = DEFAULT_RESYNC_RATE


def _entry_point(env: Mapping[str, str], runtime: str) -> tuple[str, ...]:
    """The worker entry point the controller launches: in a Pod the image's
    `agentihooks-restorer entry` (the sidecar is its own container); on this machine a whole
    worker (sidecar and entry) run by this same interpreter."""
    value = _get(env, "ENTRY_POINT")
    if value is not None:
        return tuple(value.split())
    if runtime == "kubernetes":
        return ("agentihooks-restorer", "entry")
    return (sys.executable, "-m", "services.restorer.main", "worker")


CONTROLLER_SERVICE = "agentihooks-controller"
"""The controller's Service in deploy/k8s/: how worker Pods reach it by default."""


def _worker_control_addr(env: Mapping[str, str], runtime: str) -> str | None:
    """Where workers reach the controller's gRPC API: `AGENTIHOOKS_WORKER_CONTROL_ADDR`; on
    Kubernetes by default the controller's Service in its namespace, on the listen port. The
    local runtime derives it from the listen address instead (None here)."""
    value = _address(env, "WORKER_CONTROL_ADDR", None)
    if value is not None or runtime != "kubernetes":
        return value
    listen = _address(env, "CONTROL_ADDR", "127.0.0.1:50051") or "127.0.0.1:50051"
    namespace = _get(env, "NAMESPACE") or "default"
    return f"{CONTROLLER_SERVICE}.{namespace}.svc:{listen.rpartition(':')[2]}"


def load_controller(env: Mapping[str, str]) -> ControllerSettings:
    """Read the controller's settings."""
    runtime = _get(env, "RUNTIME") or "local"
    if runtime not in ("local", "kubernetes"):
        raise SettingsError(f"{PREFIX}RUNTIME must be local or kubernetes, not {runtime!r}")
    key = _secret(env, "GRANT_KEY", minimum=MIN_KEY_BYTES)
    if key is None:
        raise SettingsError(f"{PREFIX}GRANT_KEY is not set: the controller signs grants with it")
    token = _secret(env, "OPERATOR_TOKEN", minimum=16)
    if token is None:
        raise SettingsError(f"{PREFIX}OPERATOR_TOKEN is not set: operators authenticate with it")
    return ControllerSettings(
        listen=_address(env, "CONTROL_ADDR", "127.0.0.1:50051") or "127.0.0.1:50051",
        http=_address(env, "HTTP_ADDR", "127.0.0.1:8080") or "127.0.0.1:8080",
        redis_url=_get(env, "REDIS_URL") or "redis://127.0.0.1:6379/0",
        grant_key=key,
        operator_token=token,
        worker_image=_required(env, "WORKER_IMAGE", "it is the checkpoint compatibility key"),
        runtime=runtime,
        namespace=_get(env, "NAMESPACE") or "default",
        store_addr=_address(env, "STORE_ADDR", None),
        storage=load_storage(env),
        lease_ms=_int(env, "LEASE_MS", 10_000, minimum=500),
        pass_interval_ms=_int(env, "PASS_INTERVAL_MS", 2_000, minimum=50),
        workdir=_absolute_path(env, "WORKDIR")
        or pathlib.Path(env.get("HOME", "/tmp")) / ".agentihooks" / "workers",
        pod_template=_absolute_path(env, "POD_TEMPLATE"),
        entry_point=_entry_point(env, runtime),
        worker_control_addr=_worker_control_addr(env, runtime),
        advertise_host=_get(env, "ADVERTISE_HOST"),
        redis_wait=load_redis_wait(env),
        tls=_tls(env),
        resync_rate=_int(env, "RESYNC_RATE", DEFAULT_RESYNC_RATE, minimum=1),
    )


@dataclasses.dataclass(frozen=True)
class RestorerSettings:
    """The restorer sidecar and the worker entry point."""

    listen: str
    control_addr: str | None
    checkpoint_remote: bool
    worker_credential: str | None = dataclasses.field(repr=False)
    launch_record_file: pathlib.Path | None
    attempt_dir: pathlib.Path | None
    harness_home: pathlib.Path | None
    storage: StorageSettings
    harness_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    store_addr: str | None = None
    start_timeout_s: int = DEFAULT_START_TIMEOUT_S
    tls: tls_settings.TLSSettings = tls_settings.PLAINTEXT


HARNESS_VARIABLES = ("CLAUDE_CONFIG_DIR", "CODEX_HOME")
"""The agent CLIs' own variables that move where they keep their sessions and config; the
restorer reads the worker's, so it captures and restores where the CLI itself looks."""


def _harness_env(env: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in HARNESS_VARIABLES:
        value = env.get(name, "")
        if not value:
            continue
        if not pathlib.Path(value).is_absolute():
            raise SettingsError(f"{name} must be an absolute path, not the relative {value!r}")
        found[name] = value
    # Which harness versions are qualified travels with the harness variables: capture and
    # restore read it where they read those (a malformed value stops the restorer here).
    qualified = env.get(qualified_versions.VARIABLE, "").strip()
    if qualified:
        try:
            qualified_versions.parse(qualified)
        except qualified_versions.MalformedVersions as error:
            raise SettingsError(str(error)) from None
        found[qualified_versions.VARIABLE] = qualified
    return found


def load_restorer(env: Mapping[str, str]) -> RestorerSettings:
    """Read the restorer's settings.

    The store's address is read only with `AGENTIHOOKS_CHECKPOINT_REMOTE`: only then does the
    worker reach the checkpoint store itself.
    """
    checkpoint_remote = _bool(env, "CHECKPOINT_REMOTE", False)
    return RestorerSettings(
        listen=_address(env, "RESTORER_ADDR", "127.0.0.1:50053") or "127.0.0.1:50053",
        control_addr=_address(env, "CONTROL_ADDR", None),
        checkpoint_remote=checkpoint_remote,
        worker_credential=_get(env, "WORKER_CREDENTIAL"),
        launch_record_file=_absolute_path(env, "LAUNCH_RECORD"),
        attempt_dir=_absolute_path(env, "ATTEMPT_DIR"),
        harness_home=_absolute_path(env, "HARNESS_HOME"),
        storage=load_storage(env),
        harness_env=_harness_env(env),
        store_addr=_address(env, "STORE_ADDR", None) if checkpoint_remote else None,
        start_timeout_s=_int(env, "START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S, minimum=0),
        tls=_tls(env),
    )
