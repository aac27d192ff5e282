"""Shared parts of the sidecar tests: a scene with a fenced and a replacement attempt.

The fenced attempt (e-42, generation 3) works in a real git worktree with commits, staged,
unstaged and untracked changes and a Claude Code (or Codex) session in its harness home; the
real `Capturer` writes its checkpoint through a real store. The replacement (e-43, generation
4) restores through a real sidecar gRPC server on loopback. The controller's Recovery service
is a small REAL grpc.aio servicer on loopback that records what it receives (a test double of
a remote service over real gRPC).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import pathlib
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import (
    recovery_pb2,
    recovery_pb2_grpc,
    restorer_pb2,
    restorer_pb2_grpc,
    types_pb2,
)

from services.common import directives, logs, rpc, settings, tokens
from services.common.checkpoints import backends, records, storing
from services.restorer import captures, capturing, launching, restores, retrying, sidecar
from services.restorer.harness import claude_code
from tests.support import fake_harness, git_repos, store_server

WORKER_KEY = "test-worker-key-" + "w" * 32
SESSION_ID = "0b0c5d1e-7f3a-4c2b-9a8e-1d2c3b4a5f60"
CODEX_SESSION_ID = "5f2c7a10-1b2c-4d3e-8f9a-0a1b2c3d4e5f"
CONVERSATION_SECRET = "the user asked about the launch codes"
CONVERSATION = [
    json.dumps({"type": "user", "sessionId": SESSION_ID, "message": CONVERSATION_SECRET}),
    json.dumps(
        {"type": "assistant", "text": "a line\u2028separator and a paragraph\u2029separator"},
        ensure_ascii=False,
    ),
    json.dumps({"type": "user", "message": "thanks"}),
]
SCOPE = launching.Scope("example", "eng-2", "t-eng-2", 1, "e-42", 3)
REPLACEMENT = launching.Scope("example", "eng-2", "t-eng-2", 1, "e-43", 4)
C = directives.Continuity


# --- files ---------------------------------------------------------------------------------


def full_snapshot(root: pathlib.Path) -> dict[str, tuple[int, bytes]]:
    """Every entry below `root`, `.git` included: (mode, bytes or link target); dirs too."""
    found: dict[str, tuple[int, bytes]] = {}
    if not os.path.lexists(root):
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = pathlib.Path(dirpath)
        for name in [*filenames, *dirnames]:
            path = here / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                found[relative] = (info.st_mode, os.readlink(path).encode())
            elif stat.S_ISDIR(info.st_mode):
                found[relative] = (info.st_mode, b"")
            else:
                found[relative] = (info.st_mode, path.read_bytes())
    return found


def claude_session(home: pathlib.Path, cwd: pathlib.Path, lines: list[str]) -> pathlib.Path:
    """A Claude Code session file where `claude --resume` looks for it from `cwd`."""
    folder = home / ".claude" / "projects" / claude_code.project_key(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{SESSION_ID}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def codex_session(home: pathlib.Path, cwd: pathlib.Path, lines: list[str]) -> pathlib.Path:
    """A Codex rollout file (first record: session_meta) and its session index line."""
    folder = home / ".codex" / "sessions" / "2026" / "12" / "02"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-2026-12-02T15-00-00-{CODEX_SESSION_ID}.jsonl"
    meta = {"type": "session_meta", "payload": {"id": CODEX_SESSION_ID, "cwd": str(cwd)}}
    path.write_text("".join(line + "\n" for line in [json.dumps(meta), *lines]), encoding="utf-8")
    index = {"id": CODEX_SESSION_ID, "thread_name": "fix", "updated_at": "2026-12-02T15:00:00Z"}
    (home / ".codex" / "session_index.jsonl").write_text(json.dumps(index) + "\n")
    return path


# --- the scene -----------------------------------------------------------------------------


@dataclasses.dataclass
class Scene:
    """A fenced attempt with its work, and the folders of its replacement."""

    tmp: pathlib.Path
    project: git_repos.Project
    fakes: fake_harness.FakeHarnesses
    fenced_home: pathlib.Path
    home: pathlib.Path
    attempt_dir: pathlib.Path
    worktree: pathlib.Path
    harness: str = claude_code.NAME
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def executable(self) -> str:
        return str(self.fakes.path("claude" if self.harness == claude_code.NAME else "codex"))

    def command(self) -> tuple[str, ...]:
        if self.harness == claude_code.NAME:
            return (self.executable, "--model", "opus", "fix the failing test")
        return (self.executable, "--model", "gpt-5", "fix the failing test")

    def launch(
        self,
        directive: directives.Directive,
        *,
        scope: launching.Scope = REPLACEMENT,
        projects: tuple[launching.Project, ...] | None = None,
        remote: bool = False,
        store_addr: str | None = None,
        restore_grant: str = "",
        capture_grant: str = "",
        restores_from: int = 3,
    ) -> launching.LaunchRecord:
        return launching.LaunchRecord(
            scope=scope,
            directive=directive,
            projects=projects or (launching.Project("app", self.project.url),),
            worker_image="registry.local/agent-worker:1.4.2",
            harness=self.harness,
            restores_from_generation=0 if directive.recovery is C.FRESH else restores_from,
            restore_grant=restore_grant,
            capture_grant=capture_grant,
            command=self.command(),
            checkpoint_remote=remote,
            store_addr=store_addr,
        )

    def write_launch(self, launch: launching.LaunchRecord, name: str = "launch.json") -> str:
        path = self.tmp / name
        path.write_text(json.dumps(launching.to_json(launch)))
        path.chmod(0o600)
        return str(path)

    def conf(self, **extra: str) -> settings.RestorerSettings:
        """Restorer settings from an environment dict (the replacement's by default)."""
        env = {
            "AGENTIHOOKS_ATTEMPT_DIR": str(self.attempt_dir),
            "AGENTIHOOKS_HARNESS_HOME": str(self.home),
            **self.env,
        }
        env.update({f"AGENTIHOOKS_{k}": v for k, v in extra.items()})
        return settings.load_restorer({k: v for k, v in env.items() if v})

    def untouched(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Snapshots of the replacement's worktree and harness home."""
        return full_snapshot(self.worktree), full_snapshot(self.home)


def make_scene(
    tmp: pathlib.Path, *, harness: str = claude_code.NAME, existing: bool = False
) -> Scene:
    """The fenced attempt's worktree and session; the replacement's folders (empty worktree)."""
    project = git_repos.project(tmp / "fenced")
    fakes = fake_harness.install(tmp / "bin")
    fenced_home = tmp / "fenced" / "home"
    fenced_home.mkdir(parents=True)
    if harness == claude_code.NAME:
        claude_session(fenced_home, project.worktree, CONVERSATION)
    else:
        codex_session(fenced_home, project.worktree, CONVERSATION)
    replacement = tmp / "replacement"
    home = replacement / "home"
    home.mkdir(parents=True)
    worktree = replacement / "worktree"
    if existing:
        git_repos.git(replacement, "clone", "-q", project.url, str(worktree))
    else:
        worktree.mkdir()
    return Scene(
        tmp=tmp,
        project=project,
        fakes=fakes,
        fenced_home=fenced_home,
        home=home,
        attempt_dir=replacement,
        worktree=worktree,
        harness=harness,
    )


def fenced_attempt(scene: Scene) -> restores.Attempt:
    return restores.Attempt(scene.project.worktree, scene.tmp / "fenced", scene.fenced_home)


async def capture(
    scene: Scene,
    storage: settings.StorageSettings,
    *,
    launch: launching.LaunchRecord | None = None,
    control_addr: str | None = None,
    credential: str | None = None,
) -> captures.Captured:
    """The fenced attempt captures its checkpoint through the real Capturer."""
    fenced = launch or scene.launch(directives.FRESH, scope=SCOPE)
    capturer = capturing.Capturer(
        fenced,
        fenced_attempt(scene),
        storage,
        control_addr=control_addr,
        worker_credential=credential,
    )
    return await capturer.capture()


async def capture_remote(
    scene: Scene, store: store_server.StoreServer, *, credential: str, control: str
) -> tuple[captures.Captured, str]:
    """The fenced attempt captures through the checkpoint-store service; returns the
    checkpoint and a read grant for the replacement."""
    _, write_grant = store.grant(tokens.Right.WRITE, tokens.Right.READ)
    fenced = scene.launch(
        directives.FRESH,
        scope=SCOPE,
        remote=True,
        store_addr=store.addr,
        capture_grant=write_grant,
    )
    captured = await capture(
        scene, settings.load_storage({}), launch=fenced, control_addr=control, credential=credential
    )
    _, read_grant = store.grant(tokens.Right.READ)
    return captured, read_grant


def directive_for(captured: captures.Captured, kind: directives.Continuity) -> directives.Directive:
    session = captured.native_session_id if kind is C.NATIVE else None
    return directives.Directive(captured.checkpoint_id, kind, session, captured.watermark)


def local_store(root: pathlib.Path) -> storing.ArtifactStore:
    backend = backends.open_backend(str(root), None, None)
    assert backend is not None
    return backend.scoped(storing.StoreScope("example", "t-eng-2", 1))


def checkpoint_storage(tmp: pathlib.Path) -> settings.StorageSettings:
    """The storage settings of a local checkpoint folder, `tmp`/checkpoints."""
    return settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp / "checkpoints")})


async def stored_record(tmp: pathlib.Path, checkpoint_id: str) -> dict[str, Any]:
    """The record of a checkpoint in `checkpoint_storage(tmp)`."""
    data = await local_store(tmp / "checkpoints").get_manifest(checkpoint_id)
    assert data is not None
    return records.decode_manifest(data)[0]


async def rewrite_record(
    store: storing.ArtifactStore, checkpoint_id: str, change: Callable[[dict[str, Any]], None]
) -> None:
    """Change the stored record and store it again with a matching manifest hash."""
    data = await store.get_manifest(checkpoint_id)
    assert data is not None
    record, _ = records.decode_manifest(data)
    change(record)
    await store.put_manifest(checkpoint_id, records.encode_manifest(record))


def object_path(root: pathlib.Path, sha256: str) -> pathlib.Path:
    return root / "example" / "t-eng-2" / "1" / "objects" / sha256[:2] / sha256


def manifest_path(root: pathlib.Path, checkpoint_id: str) -> pathlib.Path:
    return root / "example" / "t-eng-2" / "1" / "records" / f"{checkpoint_id}.json"


# --- the sidecar over real gRPC ------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """What one sidecar's Restore stream said, and its status afterwards."""

    events: list[restorer_pb2.RestoreEvent]
    status: restorer_pb2.RestoreStatus

    @property
    def steps(self) -> list[tuple[str, str]]:
        return [(e.step.step, e.step.status) for e in self.events if e.HasField("step")]

    @property
    def last(self) -> restorer_pb2.RestoreEvent:
        return self.events[-1]

    @property
    def reason(self) -> str:
        assert self.last.HasField("refused"), self.last
        return str(self.last.refused.reason)

    @property
    def ready(self) -> restorer_pb2.RestoreReady:
        assert self.last.HasField("ready"), self.last
        return self.last.ready


@dataclasses.dataclass
class Sidecar:
    """A running sidecar server and a stub for it."""

    service: sidecar.RestorerService
    stub: restorer_pb2_grpc.RestorerStub
    addr: str

    async def restore(self, worktree: pathlib.Path) -> Run:
        events = [
            e async for e in self.stub.Restore(restorer_pb2.RestoreRequest(worktree=str(worktree)))
        ]
        status = await self.stub.GetRestoreStatus(restorer_pb2.GetRestoreStatusRequest())
        return Run(events, status)


@dataclasses.dataclass
class _Server:
    server: grpc.aio.Server
    channel: grpc.aio.Channel


async def start_sidecar(
    conf: settings.RestorerSettings,
    **kwargs: Any,
) -> tuple[Sidecar, Callable[[], Any]]:
    """Start a real sidecar server on a free loopback port; returns it and its stopper."""
    service = sidecar.RestorerService(conf, report_retry=retrying.Retry(2, 0.05), **kwargs)
    server, port = await rpc.start_server("127.0.0.1:0", [service.register], [sidecar.SERVICE_NAME])
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")

    async def stop() -> None:
        await channel.close()
        await server.stop(None)
        await service.aclose()

    return Sidecar(service, restorer_pb2_grpc.RestorerStub(channel), f"127.0.0.1:{port}"), stop


async def restore_once(conf: settings.RestorerSettings, worktree: pathlib.Path) -> Run:
    """One sidecar, one Restore call through it, then the sidecar stops."""
    car, stop = await start_sidecar(conf)
    try:
        return await car.restore(worktree)
    finally:
        await stop()


# --- the controller's Recovery service, as a recording test double over real gRPC ----------


class RecoveryDouble(recovery_pb2_grpc.RecoveryServicer):
    """Records GetLaunchRecord, ReportRestore and ReportCapture calls; checks the credential."""

    def __init__(self, credential: str) -> None:
        self.credential = credential
        self.launch: recovery_pb2.LaunchRecord | None = None
        self.reports: list[list[recovery_pb2.RestoreReport]] = []
        self.captures: list[recovery_pb2.ReportCaptureRequest] = []
        self.refuse_outcome: str | None = None
        self.presented: list[str | None] = []

    async def _check(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        token = tokens.bearer(rpc.metadata(context))
        self.presented.append(token)
        if token != self.credential:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "credential invalid")

    async def GetLaunchRecord(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> recovery_pb2.LaunchRecord:
        await self._check(context)
        assert self.launch is not None
        return self.launch

    async def ReportRestore(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> recovery_pb2.RestoreReportAck:
        await self._check(context)
        got = [report async for report in request_iterator]
        self.reports.append(got)
        if self.refuse_outcome is not None:
            context.set_trailing_metadata(((rpc.REASON_KEY, self.refuse_outcome),))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.refuse_outcome)
        final = got[-1]
        if final.HasField("outcome"):
            outcome = types_pb2.RestoreOutcome()
            outcome.CopyFrom(final.outcome)
            outcome.verified = True
            return recovery_pb2.RestoreReportAck(outcome=outcome)
        return recovery_pb2.RestoreReportAck()

    async def ReportCapture(
        self, request: recovery_pb2.ReportCaptureRequest, context: Any
    ) -> recovery_pb2.ReportCaptureResponse:
        await self._check(context)
        self.captures.append(request)
        return recovery_pb2.ReportCaptureResponse()


def worker_credential(execution_id: str = "e-43", generation: int = 4) -> str:
    _, token = tokens.mint_worker_credential(
        WORKER_KEY,
        swarm="example",
        seat="eng-2",
        execution_id=execution_id,
        execution_generation=generation,
    )
    return token


def launch_pb(launch: launching.LaunchRecord) -> recovery_pb2.LaunchRecord:
    """The LaunchRecord message the controller would send for `launch`."""
    d = launch.directive
    directive = types_pb2.RestoreDirective(
        checkpoint_id=d.checkpoint_id or "",
        recovery=launching.continuity_pb(d.recovery),
        session_id=d.session_id or "",
    )
    if d.watermark is not None:
        directive.watermark = d.watermark
    s = launch.scope
    return recovery_pb2.LaunchRecord(
        scope=types_pb2.AttemptScope(
            swarm=s.swarm,
            seat=s.seat,
            task_id=s.task_id,
            task_generation=s.task_generation,
            execution_id=s.execution_id,
            execution_generation=s.execution_generation,
        ),
        directive=directive,
        registration=types_pb2.Registration(
            projects=[
                types_pb2.Project(name=p.name, repository=p.repository) for p in launch.projects
            ],
            worker_image=launch.worker_image,
            harness=launch.harness,
        ),
        restores_from_generation=launch.restores_from_generation,
        restore_grant=launch.restore_grant,
        capture_grant=launch.capture_grant,
        command=list(launch.command),
        checkpoint_remote=launch.checkpoint_remote,
        store_addr=launch.store_addr or "",
    )


async def start_recovery(credential: str) -> tuple[RecoveryDouble, str, Callable[[], Any]]:
    """The Recovery double on a free loopback port: the double, its address, its stopper."""
    double = RecoveryDouble(credential)  # type: ignore[abstract]  # the RPCs it does not serve
    server, port = await rpc.start_server(
        "127.0.0.1:0",
        [lambda s: recovery_pb2_grpc.add_RecoveryServicer_to_server(double, s)],
        ["agentihooks.swarm.v2.Recovery"],
    )

    async def stop() -> None:
        await server.stop(None)

    return double, f"127.0.0.1:{port}", stop


# --- logs ----------------------------------------------------------------------------------


STAMP = frozenset({"time", "level", "service"})


class JsonLogs:
    """Every log record of the process as the JSON lines the restorer would print."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(logs.JsonFormatter("restorer"))

    def lines(self) -> list[dict[str, Any]]:
        """Each line as printed, less its `time`, `level` and `service` (which every line
        must carry: checked here), so a test compares the line's own fields."""
        out = []
        for line in self.stream.getvalue().splitlines():
            if line:
                parsed = json.loads(line)
                assert {"time", "level", "service"} <= set(parsed), line
                out.append({k: v for k, v in parsed.items() if k not in STAMP})
        return out

    def text(self) -> str:
        return self.stream.getvalue()

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == name]


@pytest.fixture
def json_logs() -> Iterator[JsonLogs]:
    """Capture every log record of the test as the restorer's JSON lines."""
    captured = JsonLogs()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(captured.handler)
    root.setLevel(logging.INFO)
    try:
        yield captured
    finally:
        root.removeHandler(captured.handler)
        root.setLevel(old_level)


@pytest.fixture
def scene(tmp_path: pathlib.Path) -> Scene:
    """A Claude Code scene: the fenced attempt's work, an empty replacement worktree."""
    return make_scene(tmp_path)
