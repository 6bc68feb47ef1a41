"""One pod's life on this node (the kubelet's pod worker): sandbox, init containers, containers, restarts,
probes, graceful termination, and the status and events a kubelet writes about it.

The worker is level-triggered, like the kubelet's ``syncPod``: every change (the pod object, a process
exit, a probe result, a back-off running out) wakes it; :meth:`PodWorker.sync` compares what the spec
wants with what runs and takes the next steps; the status is then generated from the containers' states
(``vplane.runtime.status``) and written if it changed. Its state is kept in ``<pod dir>/pod.json`` so a
restarted runtime adopts the pod's running processes and keeps its restart counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from vplane.controllers.client import TransportError
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj
from vplane.runtime import images, podbind, probes
from vplane.runtime.containers import ContainerProcess, ExitStatus
from vplane.runtime.status import (
    ContainerState,
    Terminated,
    exit_reason,
    format_duration,
    is_sidecar,
    pod_conditions,
    pod_phase,
    rfc3339,
)
from vplane.runtime.volumes import ConfigError, MountError, PodVolumes, container_env

if TYPE_CHECKING:
    from vplane.runtime.node import NodeRuntime

log = structlog.get_logger("vplane.runtime.pods")

TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def pod_full_name(pod: Obj) -> str:
    """``name_namespace(uid)``: how the kubelet names a pod in messages (``format.Pod``)."""
    meta = _d(pod.get("metadata"))
    return f"{meta.get('name')}_{meta.get('namespace')}({meta.get('uid')})"


def container_hash(container: Obj) -> str:
    return hashlib.sha256(json.dumps(container, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ExecContext:
    """How to run a command "in" a running container: its resolved image, environment and directory.

    This is what exec (``kubectl exec``), exec probes and lifecycle hooks use; see ``vplane.runtime``."""

    image: images.PulledImage
    env: dict[str, str]
    cwd: Path
    pod_ip: str

    def argv(self, command: Sequence[str]) -> list[str]:
        """The command as the container would run it (aliases, its PATH); raises ``images.StartError``."""
        return images.container_argv(self.image, list(command), None, self.env, expand_vars=False)


@dataclass
class _Running:
    """What belongs to one running instance: its process, its probes and how it was started."""

    process: ContainerProcess
    spec_hash: str
    exec_context: ExecContext | None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    trackers: dict[str, probes.ProbeTracker] = field(default_factory=dict)


class PodWorker:
    def __init__(self, rt: NodeRuntime, pod: Obj, saved: Obj | None = None) -> None:
        self.rt = rt
        self.pod = pod
        meta = _d(pod.get("metadata"))
        self.uid = str(meta.get("uid", ""))
        self.namespace = str(meta.get("namespace", ""))
        self.name = str(meta.get("name", ""))
        self.dir = rt.settings.pods_dir / self.uid
        self.ip = ""
        self.start_time: float | None = None
        self.states: dict[str, ContainerState] = {}
        self.instances: dict[str, int] = {}
        self.container_ids: dict[str, dict[str, int]] = {}
        """Each container's recent instances by container ID (which log file a container ID's output is in)."""
        self.running: dict[str, _Running] = {}
        self.starting: dict[str, ContainerProcess] = {}
        self.kill_requests: dict[str, str] = {}
        self.terminal = False
        self.removed = False
        self.stopping = False
        self.sandbox_ready = False
        self.volumes: PodVolumes | None = None
        self.wake = asyncio.Event()
        self.next_sync: float | None = None
        self.status_dirty = asyncio.Event()
        self.last_status: Obj | None = None
        self.task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()
        self._backoff_event_at: dict[str, float] = {}
        self._last_volume_sync = 0.0
        self._log = log.bind(pod=f"{self.namespace}/{self.name}")
        self._init_states(saved)

    # -- state ------------------------------------------------------------------------------------

    @property
    def spec(self) -> Obj:
        return _d(self.pod.get("spec"))

    def _container_specs(self) -> list[tuple[Obj, bool]]:
        """Every container with whether it is an init container: init, regular, then ephemeral ones."""
        return (
            [(_d(c), True) for c in _l(self.spec.get("initContainers"))]
            + [(_d(c), False) for c in _l(self.spec.get("containers"))]
            + [(_d(c), False) for c in _l(self.spec.get("ephemeralContainers"))]
        )

    def _field_path(self, name: str) -> str:
        for key in ("initContainers", "ephemeralContainers"):
            if any(_d(c).get("name") == name for c in _l(self.spec.get(key))):
                return f"spec.{key}{{{name}}}"
        return f"spec.containers{{{name}}}"

    def _add_ephemeral_states(self) -> None:
        """Ephemeral containers arrive after the pod started (the ``ephemeralcontainers`` subresource)."""
        for container in map(_d, _l(self.spec.get("ephemeralContainers"))):
            name = str(container.get("name", ""))
            if name not in self.states:
                self.states[name] = ContainerState(name=name, image=str(container.get("image", "")))
            self.states[name].ephemeral = True

    def _init_states(self, saved: Obj | None) -> None:
        status = _d(self.pod.get("status"))
        saved_containers = _d((saved or {}).get("containers"))
        has_init = bool(_l(self.spec.get("initContainers")))
        for container, init in self._container_specs():
            name = str(container.get("name", ""))
            state = ContainerState(
                name=name,
                init=init,
                sidecar=init and is_sidecar(container),
                image=str(container.get("image", "")),
            )
            if not init and has_init:
                state.waiting_reason = "PodInitializing"
            saved_state = _d(saved_containers.get(name))
            if saved_state:
                state.restart_count = int(saved_state.get("restartCount") or 0)
                state.ever_started = bool(saved_state.get("everStarted"))
                state.image = str(saved_state.get("image") or state.image)
                state.image_id = str(saved_state.get("imageID") or "")
                state.container_id = str(saved_state.get("containerID") or "")
                if saved_state.get("lastTerminated"):
                    state.last_terminated = Terminated.from_json(saved_state["lastTerminated"])
                if saved_state.get("terminated"):
                    state.terminated = Terminated.from_json(saved_state["terminated"])
                if saved_state.get("waiting"):
                    state.set_waiting(
                        str(saved_state["waiting"]), str(saved_state.get("waitingMessage") or "")
                    )
                self.instances[name] = int(saved_state.get("instance", -1))
                self.container_ids[name] = {str(k): int(v) for k, v in _d(saved_state.get("ids")).items()}
            self.states[name] = state
        self._add_ephemeral_states()
        if saved:
            self.ip = str(saved.get("ip") or "")
            self.start_time = saved.get("startTime")
            self.terminal = bool(saved.get("terminal"))
            self._adopt(status)
        elif status.get("phase") in ("Succeeded", "Failed"):
            self.terminal = True  # finished before this runtime saw it (another node's, or wiped data)
        if self.start_time is None and status.get("startTime"):
            self.start_time = _parse_time(str(status["startTime"]))

    def _adopt(self, status: Obj) -> None:
        """Re-attach to the processes an earlier runtime left running; note how the others ended."""
        ready_before = {
            str(_d(c).get("name")): bool(_d(c).get("ready"))
            for key in ("containerStatuses", "initContainerStatuses")
            for c in _l(status.get(key))
        }
        specs = {str(c.get("name", "")): c for c, _ in self._container_specs()}
        for name, state in self.states.items():
            instance = self.instances.get(name, -1)
            if instance < 0 or not state.container_id or state.terminated is not None:
                continue
            process = ContainerProcess.adopt(
                self._instance_dir(name, instance), self._log_path(name, instance), state.container_id
            )
            if process.running:
                self._log.info("adopted running container", container=name, pid=process.pid)
                state.set_running(process.started_at or time.time(), state.container_id)
                state.ready = ready_before.get(name, False)
                container = specs.get(name, {})
                state.started = container.get("startupProbe") is None
                self._watch(name, container, process, adopted=True)
            else:
                self._record_exit(name, process, process.ended or ExitStatus(137, time.time(), unknown=True))

    def _save(self) -> None:
        doc = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "ip": self.ip,
            "startTime": self.start_time,
            "terminal": self.terminal,
            "containers": {
                name: {
                    "restartCount": s.restart_count,
                    "instance": self.instances.get(name, -1),
                    "containerID": s.container_id,
                    "everStarted": s.ever_started,
                    "image": s.image,
                    "imageID": s.image_id,
                    "terminated": s.terminated.to_json() if s.terminated else None,
                    "lastTerminated": s.last_terminated.to_json() if s.last_terminated else None,
                    "waiting": s.waiting_reason if not s.running and s.terminated is None else "",
                    "waitingMessage": s.waiting_message,
                    "ids": self.container_ids.get(name, {}),
                }
                for name, s in self.states.items()
            },
        }
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / "pod.json.tmp"
            tmp.write_text(json.dumps(doc))
            tmp.replace(self.dir / "pod.json")
        except OSError as exc:
            self._log.warning("cannot save pod state", error=str(exc))

    def _instance_dir(self, name: str, instance: int) -> Path:
        return self.dir / "containers" / name / str(instance)

    def _log_path(self, name: str, instance: int) -> Path:
        return self.dir / "logs" / name / f"{instance}.log"

    def log_path_for(self, name: str, previous: bool) -> Path | None:
        """The log file of the container's current (or previous) instance."""
        instance = self.instances.get(name, -1)
        if previous:
            instance -= 1
        return self._log_path(name, instance) if instance >= 0 else None

    def log_path_by_id(self, name: str, container_id: str) -> Path | None:
        instance = self.container_ids.get(name, {}).get(container_id)
        return self._log_path(name, instance) if instance is not None else None

    def is_running(self, name: str) -> bool:
        return name in self.running

    # -- control ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    def update(self, pod: Obj) -> None:
        """A new version of the pod; only a change of what the kubelet acts on wakes the worker (its own
        status writes come back here too)."""
        before = _acted_on(self.pod)
        self.pod = pod
        self._add_ephemeral_states()
        if _acted_on(pod) != before:
            self.wake.set()

    def remove(self) -> None:
        """The pod is gone from the API (deleted with no grace, or finished deleting)."""
        self.removed = True
        self.wake.set()

    def _wake_at(self, when: float) -> None:
        if self.next_sync is None or when < self.next_sync:
            self.next_sync = when

    async def _run(self) -> None:
        try:
            if self.start_time is None:
                self.start_time = time.time()
            self._status_changed()
            writer = asyncio.create_task(self._status_writer())
            try:
                await self._loop()
            finally:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("pod worker failed")
        finally:
            self.done.set()

    async def _loop(self) -> None:
        while True:
            if self.removed:
                await self._kill_all(self.rt.settings.minimum_grace_period_seconds, "")
                self._cleanup()
                return
            if self.stopping:
                return
            if _d(self.pod.get("metadata")).get("deletionTimestamp"):
                await self._terminate()
                return
            self.next_sync = None
            try:
                await self.sync()
            except (StatusError, TransportError) as exc:
                self._log.warning("pod sync failed", error=str(exc))
                self._wake_at(time.time() + 1.0)
            except Exception:
                self._log.exception("pod sync failed")
                self._wake_at(time.time() + self.rt.settings.crash_backoff_seconds)
            self._status_changed()
            timeout = None if self.next_sync is None else max(0.0, self.next_sync - time.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.wake.wait()
            self.wake.clear()

    # -- sync -------------------------------------------------------------------------------------

    async def sync(self) -> None:
        if not self.terminal:
            await self._sync_containers()
        if self.terminal and self.running:
            # A finished pod's sidecars and ephemeral containers are stopped, as the kubelet stops every
            # container of a terminal pod (regular ones first).
            await self._kill_all(float(self.spec.get("terminationGracePeriodSeconds") or 30), "")

    async def _sync_containers(self) -> None:
        if not await self._sandbox():
            return
        if not await self._init_containers():
            return
        for container in map(_d, _l(self.spec.get("initContainers"))):
            if is_sidecar(container):
                await self._sync_sidecar(container)
        for container in map(_d, _l(self.spec.get("containers"))):
            await self._sync_container(container)
        for container in map(_d, _l(self.spec.get("ephemeralContainers"))):
            await self._sync_ephemeral(container)
        self._check_terminal()

    async def _sandbox(self) -> bool:
        """The pod's address and volumes; False (with ``FailedMount``) while a volume cannot be set up."""
        if not self.ip:
            # hostNetwork pods share the node's address; the others get one of their own.
            self.ip = self.rt.host_ip if self.spec.get("hostNetwork") else self.rt.allocate_ip(self.uid)
            self._save()
        now = time.time()
        if self.volumes is None:
            self.volumes = self.rt.pod_volumes(self.dir, self.ip)
        due = (
            now - self._last_volume_sync >= self.rt.settings.volume_resync_seconds
            or self.volumes.tokens_due()
        )
        if self.sandbox_ready and not due:
            self._wake_at(self._last_volume_sync + self.rt.settings.volume_resync_seconds)
            return True
        try:
            await self.volumes.setup(self.pod)
        except MountError as exc:
            self.rt.events.pod_event(self.pod, "Warning", "FailedMount", str(exc))
            self._wake_at(now + self.rt.settings.volume_retry_seconds)
            return self.sandbox_ready
        for warning in self.volumes.warnings:
            self.rt.events.pod_event(self.pod, "Warning", "FailedMount", warning)
        self.volumes.warnings.clear()
        self._last_volume_sync = now
        self._wake_at(now + self.rt.settings.volume_resync_seconds)
        if not self.sandbox_ready:
            self.sandbox_ready = True
            self._status_changed()
        return True

    async def _init_containers(self) -> bool:
        """Run init containers one after another; True once all have succeeded (and every sidecar, an init
        container with ``restartPolicy: Always``, has started: it then keeps running beside the others)."""
        regular_started = any(
            self.states[str(_d(c).get("name"))].ever_started for c in _l(self.spec.get("containers"))
        )
        if regular_started:
            return True
        for container in map(_d, _l(self.spec.get("initContainers"))):
            name = str(container.get("name", ""))
            state = self.states[name]
            if is_sidecar(container):
                if not state.running:
                    await self._sync_sidecar(container)
                if not (state.running and state.started):
                    return False  # not (yet) running, or its startup probe holds the next one back
                continue
            if state.terminated is not None and state.terminated.exit_code == 0:
                continue
            if state.running:
                await self._handle_kill_request(name)
                return False
            ended = state.terminated
            if ended is not None and self.spec.get("restartPolicy") == "Never":
                self.terminal = True
                self._save()
                return False
            backing_off = state.waiting_reason == "CrashLoopBackOff"
            if (ended is not None or backing_off) and not self._restart_allowed(name, state):
                return False
            await self._start(container, state, init=True)
            return False
        return True

    async def _sync_container(self, container: Obj) -> None:
        name = str(container.get("name", ""))
        state = self.states[name]
        running = self.running.get(name)
        if running is not None:
            if running.spec_hash != container_hash(container):
                self.kill_requests.setdefault(name, f"Container {name} definition changed, will be restarted")
            await self._handle_kill_request(name)
            return
        if state.terminated is not None:
            policy = self.spec.get("restartPolicy") or "Always"
            wants = policy == "Always" or (policy == "OnFailure" and state.terminated.exit_code != 0)
            if not wants or not self._restart_allowed(name, state):
                return
        elif state.waiting_reason == "CrashLoopBackOff" and not self._restart_allowed(name, state):
            return
        await self._start(container, state, init=False)

    async def _sync_sidecar(self, container: Obj) -> bool:
        """Keep a sidecar running: started, and restarted whenever it ends (with the crash back-off), whatever
        the pod's restart policy. True when it was started now."""
        name = str(container.get("name", ""))
        state = self.states[name]
        if name in self.running:
            await self._handle_kill_request(name)
            return False
        if (state.terminated is not None or state.waiting_reason == "CrashLoopBackOff") and not (
            self._restart_allowed(name, state)
        ):
            return False
        await self._start(container, state, init=True)
        return True

    async def _sync_ephemeral(self, container: Obj) -> None:
        """An ephemeral container runs once (its image pulled with the usual back-off); once it has started
        or ended it is left alone, as the kubelet never restarts one."""
        name = str(container.get("name", ""))
        state = self.states[name]
        if self.terminal or state.ever_started or state.terminated is not None or name in self.running:
            return
        await self._start(container, state, init=False)

    def _restart_allowed(self, name: str, state: ContainerState) -> bool:
        """The kubelet's ``doBackOff``: wait out the back-off counted from the container's last finish,
        showing ``CrashLoopBackOff`` meanwhile."""
        ended = state.terminated or state.last_terminated
        if ended is None:
            return True
        key = f"{self.uid}/{name}"
        backoff = self.rt.crash_backoff
        left = backoff.in_backoff_since(key, ended.finished_at)
        if left > 0:
            if state.terminated is not None:
                state.last_terminated, state.terminated = state.terminated, None
            message = (
                f"back-off {format_duration(backoff.get(key))} restarting failed container={name} "
                f"pod={pod_full_name(self.pod)}"
            )
            state.set_waiting("CrashLoopBackOff", message)
            if self._backoff_event_at.get(name) != ended.finished_at:
                self._backoff_event_at[name] = ended.finished_at
                self.rt.events.pod_event(
                    self.pod,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {name} in pod {pod_full_name(self.pod)}",
                    self._field_path(name),
                )
            self._save()
            self._wake_at(time.time() + left)
            return False
        backoff.next(key)
        return True

    # -- starting a container ---------------------------------------------------------------------

    async def _pull(self, container: Obj, state: ContainerState) -> images.PulledImage | None:
        """The kubelet's image manager, against the catalogue: events, back-off, waiting reasons."""
        name = str(container.get("name", ""))
        image = str(container.get("image", ""))
        field_path = self._field_path(name)
        events = self.rt.events
        policy = container.get("imagePullPolicy") or "IfNotPresent"
        try:
            images.parse_image(image)
        except images.InvalidImageName as exc:
            message = f'Failed to apply default image tag "{image}": {exc}'
            events.pod_event(self.pod, "Warning", "InspectFailed", message, field_path)
            events.pod_event(self.pod, "Warning", "Failed", "Error: InvalidImageName", field_path)
            state.set_waiting("InvalidImageName", message)
            return None
        present = self.rt.catalogue_has(image)
        if policy == "Never" and not present:
            message = f'Container image "{image}" is not present with pull policy of Never'
            events.pod_event(self.pod, "Warning", "ErrImageNeverPull", message, field_path)
            events.pod_event(self.pod, "Warning", "Failed", "Error: ErrImageNeverPull", field_path)
            state.set_waiting("ErrImageNeverPull", message)
            self._wake_at(time.time() + self.rt.settings.pod_resync_seconds)
            return None
        if present and policy != "Always":
            pulled = self.rt.catalogue.pull(image)
            events.pod_event(
                self.pod,
                "Normal",
                "Pulled",
                f'Container image "{image}" already present on machine and can be accessed by the pod',
                field_path,
            )
            return pulled
        key = f"{self.uid}_{image}"
        backoff = self.rt.image_backoff
        left = backoff.in_backoff_since_update(key)
        if left > 0:
            message = f'Back-off pulling image "{image}"'
            events.pod_event(self.pod, "Normal", "BackOff", message, field_path)
            events.pod_event(self.pod, "Warning", "Failed", "Error: ImagePullBackOff", field_path)
            previous = self.rt.pull_errors.get(key)
            state.set_waiting("ImagePullBackOff", f"{message}: {previous}" if previous else message)
            self._wake_at(time.time() + min(left, self.rt.settings.pod_resync_seconds))
            return None
        events.pod_event(self.pod, "Normal", "Pulling", f'Pulling image "{image}"', field_path)
        started = time.monotonic()
        try:
            pulled = self.rt.catalogue.pull(image)
        except images.ImagePullError as exc:
            events.pod_event(
                self.pod, "Warning", "Failed", f'Failed to pull image "{image}": {exc}', field_path
            )
            events.pod_event(self.pod, "Warning", "Failed", "Error: ErrImagePull", field_path)
            backoff.next(key)
            self.rt.pull_errors[key] = f"ErrImagePull: {exc}"
            state.set_waiting("ErrImagePull", str(exc))
            self._wake_at(time.time() + self.rt.settings.pod_resync_seconds)
            return None
        self.rt.pull_errors.pop(key, None)
        took = format_duration(time.monotonic() - started)
        events.pod_event(
            self.pod,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {took} ({took} including waiting). Image size: {pulled.size} bytes.',
            field_path,
        )
        return pulled

    async def _start(self, container: Obj, state: ContainerState, *, init: bool) -> None:
        name = str(container.get("name", ""))
        field_path = self._field_path(name)
        events = self.rt.events
        assert self.volumes is not None
        pulled = await self._pull(container, state)
        if pulled is None:
            self._save()
            return
        root = self.dir / "containers" / name / "root"
        try:
            env = await self._environment(container, pulled, root)
        except (ConfigError, MountError) as exc:
            events.pod_event(self.pod, "Warning", "Failed", f"Error: {exc}", field_path)
            state.set_waiting("CreateContainerConfigError", str(exc))
            self._wake_at(time.time() + self.rt.settings.pod_resync_seconds)
            self._save()
            return
        start_error = ""
        try:
            argv = images.container_argv(pulled, _l(container.get("command")), _l(container.get("args")), env)
        except images.StartError as exc:
            argv, start_error = [], str(exc)
        cwd = self.volumes.working_dir(container, root, pulled.entry.working_dir)
        if state.ever_started:  # a new instance of a container that ran before: one more restart
            if state.terminated is not None:
                state.last_terminated, state.terminated = state.terminated, None
            state.restart_count += 1
        instance = self.instances.get(name, -1) + 1
        self.instances[name] = instance
        container_id = "vplane://" + secrets.token_hex(32)
        ids = self.container_ids.setdefault(name, {})
        ids[container_id] = instance
        for old_id in list(ids)[:-3]:
            del ids[old_id]
        state.image = _status_image(str(container.get("image", "")))
        state.image_id = pulled.image_id
        events.pod_event(self.pod, "Normal", "Created", "Container created", field_path)
        process = ContainerProcess(
            self._instance_dir(name, instance), self._log_path(name, instance), container_id
        )
        state.container_id = container_id
        failed: ExitStatus | None
        if start_error:
            failed = ExitStatus(128, time.time(), start_error=start_error)
        else:
            process.spawn(
                argv,
                env,
                cwd,
                tty=bool(container.get("tty")),
                stdin=bool(container.get("stdin")),
                stdin_once=bool(container.get("stdinOnce")),
            )
            self.starting[name] = process  # stopped with the others if the worker is stopped meanwhile
            try:
                failed = await process.wait_started(self.rt.settings.container_start_timeout_seconds)
            finally:
                self.starting.pop(name, None)
        if failed is not None:
            message = failed.start_error or "failed to start container process"
            events.pod_event(self.pod, "Warning", "Failed", f"Error: {message}", field_path)
            now = time.time()
            state.ever_started = True
            state.set_terminated(
                Terminated(
                    failed.exit_code, "StartError", failed.finished_at or now, now, message, container_id
                )
            )
            self._save()
            self._wake_at(time.time())
            return
        events.pod_event(self.pod, "Normal", "Started", "Container started", field_path)
        state.set_running(process.started_at or time.time(), container_id)
        state.started = container.get("startupProbe") is None
        state.ready = False
        self._save()
        self._status_changed()
        context = ExecContext(pulled, env, cwd, self.ip)
        self._watch(name, container, process, context=context)
        post_start = _d(_d(container.get("lifecycle")).get("postStart"))
        if post_start:
            ok = await self._hook(
                name, post_start, context, float(self.spec.get("terminationGracePeriodSeconds") or 30)
            )
            if not ok:
                events.pod_event(
                    self.pod, "Warning", "FailedPostStartHook", "PostStartHook failed", field_path
                )
                self.kill_requests[name] = ""
                await self._handle_kill_request(name, reason="FailedPostStartHook")

    async def _environment(self, container: Obj, pulled: images.PulledImage, root: Path) -> dict[str, str]:
        assert self.volumes is not None
        base: dict[str, str] = {}
        base.update(pulled.entry.env)
        base["HOSTNAME"] = str(self.spec.get("hostname") or self.name)
        base["HOME"] = str(root)
        if self.spec.get("enableServiceLinks", True) is not False:
            base.update(self.rt.service_env(self.namespace))
        base.update(self.rt.api_env())

        def skipped(message: str) -> None:
            self.rt.events.pod_event(self.pod, "Warning", "InvalidEnvironmentVariableNames", message)

        env = await container_env(
            self.pod,
            container,
            self.rt.sources,
            base,
            self.rt.host_ip,
            self.ip,
            self.rt.allocatable,
            images.expand,
            skipped,
        )
        extras = {
            "POD_IP": self.ip,
            "VPLANE_HOSTS_FILE": str(self.rt.hosts_path),
            "VPLANE_DNS_SEARCH": " ".join(
                [
                    f"{self.namespace}.svc.{self.rt.settings.cluster_domain}",
                    f"svc.{self.rt.settings.cluster_domain}",
                    self.rt.settings.cluster_domain,
                ]
            ),
            "VPLANE_POD_DIR": str(self.dir),
            "VPLANE_NODE_ROOT": str(self.rt.settings.data_dir),
        }
        if not self.spec.get("hostNetwork"):
            extras[podbind.BIND_ENV] = self.ip  # the python image's wildcard binds (vplane.runtime.podbind)
        if self.volumes.kubeconfig is not None:
            extras["KUBECONFIG"] = str(self.volumes.kubeconfig)
        extras.update(self.volumes.container_mounts(container, root))
        curlrc = self.rt.curlrc_dir()
        if curlrc is not None:
            extras["CURL_HOME"] = str(curlrc)
        for key, value in extras.items():
            env.setdefault(key, value)
        env["VPLANE_NODE_ROOT"] = str(self.rt.settings.data_dir)  # the runtime finds its processes by it
        return env

    # -- running containers -----------------------------------------------------------------------

    def _watch(
        self,
        name: str,
        container: Obj,
        process: ContainerProcess,
        *,
        context: ExecContext | None = None,
        adopted: bool = False,
    ) -> None:
        if context is None:
            context = self._adopted_context(container)
        running = _Running(process, container_hash(container), context)
        self.running[name] = running
        running.tasks.append(asyncio.create_task(self._wait_exit(name, process)))
        if context is not None:
            for kind, key in (
                ("Startup", "startupProbe"),
                ("Readiness", "readinessProbe"),
                ("Liveness", "livenessProbe"),
            ):
                probe = container.get(key)
                if isinstance(probe, dict):
                    tracker = probes.ProbeTracker.from_spec(kind, probe)
                    if kind == "Readiness" and adopted:
                        tracker.result = self.states[name].ready
                    running.trackers[kind] = tracker
                    running.tasks.append(
                        asyncio.create_task(self._probe_loop(name, container, kind, probe, tracker, running))
                    )
        state = self.states[name]
        if "Readiness" not in running.trackers and (state.sidecar or not state.init) and not state.ephemeral:
            state.ready = True

    def _adopted_context(self, container: Obj) -> ExecContext | None:
        """An adopted container's exec context, recomputed from its spec (its environment is in the shim's
        spec file)."""
        name = str(container.get("name", ""))
        instance = self.instances.get(name, -1)
        try:
            spec = json.loads((self._instance_dir(name, instance) / "spec.json").read_text())
            pulled = self.rt.catalogue.pull(str(container.get("image", "")))
        except (OSError, ValueError, images.ImagePullError, images.InvalidImageName):
            return None
        return ExecContext(pulled, dict(spec.get("env") or {}), Path(spec.get("cwd") or self.dir), self.ip)

    async def _wait_exit(self, name: str, process: ContainerProcess) -> None:
        status = await process.wait()
        self._record_exit(name, process, status)
        running = self.running.pop(name, None)
        if running is not None:
            for task in running.tasks:
                if task is not asyncio.current_task():
                    task.cancel()
        self.wake.set()

    def _record_exit(self, name: str, process: ContainerProcess, status: ExitStatus) -> None:
        state = self.states[name]
        if status.unknown:
            terminated = Terminated(
                137,
                "ContainerStatusUnknown",
                status.finished_at,
                process.started_at or state.running_since,
                "The container could not be located when the pod was terminated",
                state.container_id,
            )
        else:
            reason = "StartError" if status.start_error else exit_reason(status.exit_code)
            message = status.start_error
            if not message and status.exit_code != 0:
                message = self._termination_message(name)
            terminated = Terminated(
                status.exit_code,
                reason,
                status.finished_at,
                process.started_at or state.running_since,
                message,
                state.container_id,
            )
        state.ever_started = True
        state.set_terminated(terminated)
        self.kill_requests.pop(name, None)
        self._save()
        self._status_changed()

    def _termination_message(self, name: str) -> str:
        """``terminationMessagePolicy: FallbackToLogsOnError``: the log's tail becomes the message."""
        container = next((c for c, _ in self._container_specs() if c.get("name") == name), {})
        if container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return ""
        path = self.log_path_for(name, previous=False)
        if path is None:
            return ""
        from vplane.runtime.logs import parse_line

        try:
            raw = path.read_bytes()[-64 * 1024 :]
        except OSError:
            return ""
        lines = [p.text.decode(errors="replace") for p in map(parse_line, raw.splitlines()) if p is not None]
        text = "\n".join(lines[-TERMINATION_LOG_LINES:])
        return text[-TERMINATION_LOG_BYTES:]

    async def _probe_loop(
        self,
        name: str,
        container: Obj,
        kind: str,
        probe: Obj,
        tracker: probes.ProbeTracker,
        running: _Running,
    ) -> None:
        state = self.states[name]
        initial = float(probe.get("initialDelaySeconds") or 0)
        period = float(probe.get("periodSeconds") or 10)
        started = state.running_since or time.time()
        delay = started + initial - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            startup = running.trackers.get("Startup")
            if kind != "Startup" and startup is not None and startup.result is not True:
                await asyncio.sleep(period)
                continue
            if kind == "Startup" and tracker.result is True:
                return
            ok, output = await probes.probe_once(
                probe, container, self.ip, self._exec_runner(running.exec_context)
            )
            if name not in self.running or self.running[name] is not running:
                return
            if not ok:
                self.rt.events.pod_event(
                    self.pod, "Warning", "Unhealthy", f"{kind} probe failed: {output}", self._field_path(name)
                )
            if tracker.observe(ok):
                if kind == "Readiness":
                    state.ready = bool(tracker.result)
                    self._status_changed()
                elif kind == "Startup" and tracker.result:
                    state.started = True
                    self._status_changed()
                    if state.sidecar:
                        self.wake.set()  # the next init container waits for this one to have started
                elif not tracker.result:
                    self.kill_requests[name] = (
                        f"Container {name} failed {kind.lower()} probe, will be restarted"
                    )
                    self.wake.set()
                    return
            await asyncio.sleep(period)

    def _exec_runner(self, context: ExecContext | None) -> probes.ExecRunner:
        async def run(command: Sequence[str], limit: float) -> tuple[int | None, str]:
            if context is None:
                return 1, "the container's environment is not known"
            try:
                argv = context.argv(command)
            except images.StartError as exc:
                return 1, str(exc)
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=context.env,
                cwd=str(context.cwd),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                async with asyncio.timeout(limit):
                    out, _ = await process.communicate()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
                return None, ""
            return process.returncode, out.decode(errors="replace")

        return run

    async def _hook(self, name: str, handler: Obj, context: ExecContext | None, budget: float) -> bool:
        if isinstance(handler.get("exec"), dict):
            command = [str(a) for a in handler["exec"].get("command") or []]
            code, _ = await self._exec_runner(context)(command, budget)
            return code == 0
        if isinstance(handler.get("httpGet"), dict):
            container = next((c for c, _ in self._container_specs() if c.get("name") == name), {})
            ok, _ = await probes.probe_http(handler["httpGet"], self.ip, container, budget)
            return ok
        if isinstance(handler.get("sleep"), dict):
            await asyncio.sleep(min(float(handler["sleep"].get("seconds") or 0), budget))
            return True
        return True

    async def _handle_kill_request(self, name: str, reason: str = "") -> None:
        message = self.kill_requests.get(name)
        if message is None or name not in self.running:
            return
        grace = float(self.spec.get("terminationGracePeriodSeconds") or 30)
        await self._kill(name, grace, message)

    async def _kill(self, name: str, grace: float, message: str) -> None:
        """The kubelet's ``killContainer``: event, preStop hook, SIGTERM, SIGKILL after the grace period."""
        running = self.running.get(name)
        if running is None:
            return
        self.rt.events.pod_event(
            self.pod, "Normal", "Killing", message or f"Stopping container {name}", self._field_path(name)
        )
        container = next((c for c, _ in self._container_specs() if c.get("name") == name), {})
        started = time.monotonic()
        pre_stop = _d(_d(container.get("lifecycle")).get("preStop"))
        if pre_stop and grace > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    ok = await self._hook(name, pre_stop, running.exec_context, grace)
                    if not ok:
                        self.rt.events.pod_event(
                            self.pod,
                            "Warning",
                            "FailedPreStopHook",
                            "PreStopHook failed",
                            self._field_path(name),
                        )
            grace -= time.monotonic() - started
        grace = max(grace, self.rt.settings.minimum_grace_period_seconds)
        await stop_process(running.process, grace)

    async def _kill_all(self, grace: float, reason: str) -> None:
        """Stop every container: the others first, then the sidecars (in reverse order) with what is left of
        the grace period, so a sidecar (a proxy, a log shipper) outlives the containers it serves."""
        started = time.monotonic()
        sidecars = [n for n in reversed(list(self.running)) if self.states.get(n, _NO_STATE).sidecar]
        names = [n for n in self.running if n not in sidecars]
        exits = [self.running[name].tasks[0] for name in names]  # each instance's exit watcher records it
        starting = list(self.starting.values())
        await asyncio.gather(
            *(self._kill(name, grace, reason) for name in names),
            *(stop_process(process, grace) for process in starting),
            return_exceptions=True,
        )
        await asyncio.gather(*exits, return_exceptions=True)
        left = max(grace - (time.monotonic() - started), 0.0)
        for name in sidecars:
            if name in self.running:
                exit_watch = self.running[name].tasks[0]
                await asyncio.gather(self._kill(name, left, reason), return_exceptions=True)
                await asyncio.gather(exit_watch, return_exceptions=True)

    def _check_terminal(self) -> None:
        """All regular containers ended and none will restart: the pod is finished."""
        policy = self.spec.get("restartPolicy") or "Always"
        if policy == "Always":
            return
        for container in map(_d, _l(self.spec.get("containers"))):
            state = self.states[str(container.get("name"))]
            if state.terminated is None:
                return
            if policy == "OnFailure" and state.terminated.exit_code != 0:
                return
        if not self.terminal:
            self.terminal = True
            self._save()
            self._status_changed()

    # -- termination ------------------------------------------------------------------------------

    async def _terminate(self) -> None:
        """Graceful deletion: stop every container within the pod's grace period, write the final status,
        then delete the pod with no grace (the kubelet's ``syncTerminatingPod`` and status manager)."""
        meta = _d(self.pod.get("metadata"))
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.spec.get("terminationGracePeriodSeconds", 30)
        await self._kill_all(float(grace), "")
        for state in self.states.values():
            if not state.running and state.terminated is None and state.last_terminated is not None:
                state.terminated, state.last_terminated = state.last_terminated, None
                state.waiting_reason = ""
        self.terminal = True
        self._save()
        self.last_status = None
        await self._write_status()
        while not self.removed:
            try:
                await self.rt.delete_pod(self.namespace, self.name, self.uid)
                break
            except (StatusError, TransportError) as exc:
                if isinstance(exc, StatusError) and exc.code in (404, 409):
                    break  # gone already, or another pod of that name now (not ours to delete)
                self._log.warning("cannot delete terminated pod", error=str(exc))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.wake.wait()
            self.wake.clear()
        self._cleanup()

    def _cleanup(self) -> None:
        if not self.spec.get("hostNetwork"):
            self.rt.release_ip(self.uid, self.ip)
        self.rt.crash_backoff.forget_prefix(f"{self.uid}/")
        self.rt.image_backoff.forget_prefix(f"{self.uid}_")
        for key in [k for k in self.rt.pull_errors if k.startswith(f"{self.uid}_")]:
            del self.rt.pull_errors[key]
        shutil.rmtree(self.dir, ignore_errors=True)

    async def stop(self, grace: float, write_status: bool) -> None:
        """The runtime is stopping: end this pod's processes (it runs again when the runtime does)."""
        self.stopping = True
        self.wake.set()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        pod_grace = float(self.spec.get("terminationGracePeriodSeconds") or 30)
        await self._kill_all(min(pod_grace, grace), "")
        if write_status and not self.removed:
            with contextlib.suppress(StatusError, TransportError, TimeoutError):
                async with asyncio.timeout(2.0):
                    self.last_status = None
                    await self._write_status()

    async def detach(self) -> None:
        """The runtime is handing its pods over to another runtime of this node (a tenant's new leader): stop
        watching them and leave their processes running; the next runtime adopts them from their shims."""
        self.stopping = True
        tasks = [t for running in self.running.values() for t in running.tasks]
        if self.task is not None:
            tasks.append(self.task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def kill_now(self) -> None:
        """SIGKILL every process of the pod (a second Ctrl-C: nothing is waited for)."""
        for running in self.running.values():
            running.process.signal(signal.SIGKILL)

    # -- status -----------------------------------------------------------------------------------

    def _status_changed(self) -> None:
        self.status_dirty.set()

    def status(self) -> Obj:
        spec = self.spec
        phase = pod_phase(spec, self.states, self.terminal)
        existing = [_d(c) for c in _l(_d(self.pod.get("status")).get("conditions"))]
        generation = _d(self.pod.get("metadata")).get("generation")
        conditions = pod_conditions(
            spec,
            self.states,
            phase,
            self.sandbox_ready and not self.terminal,
            existing,
            time.time(),
            generation if isinstance(generation, int) else None,
        )
        status: Obj = {}
        if isinstance(generation, int):
            status["observedGeneration"] = generation
        status["phase"] = phase
        status["conditions"] = conditions
        status["hostIP"] = self.rt.host_ip
        status["hostIPs"] = [{"ip": self.rt.host_ip}]
        if self.ip and self.sandbox_ready:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        if self.start_time is not None:
            status["startTime"] = rfc3339(self.start_time)
        mounts = {str(c.get("name")): _status_mounts(c) for c, _ in self._container_specs()}
        inits = [_d(c) for c in _l(spec.get("initContainers"))]
        if inits:
            status["initContainerStatuses"] = [
                self.states[str(c.get("name"))].to_api(mounts.get(str(c.get("name")))) for c in inits
            ]
        status["containerStatuses"] = [
            self.states[str(c.get("name"))].to_api(mounts.get(str(c.get("name"))))
            for c in map(_d, _l(spec.get("containers")))
        ]
        ephemeral = [_d(c) for c in _l(spec.get("ephemeralContainers"))]
        if ephemeral:
            status["ephemeralContainerStatuses"] = [
                self.states[str(c.get("name"))].to_api(mounts.get(str(c.get("name")))) for c in ephemeral
            ]
        return status

    async def _status_writer(self) -> None:
        while True:
            await self.status_dirty.wait()
            await asyncio.sleep(self.rt.settings.status_batch_seconds)
            self.status_dirty.clear()
            try:
                await self._write_status()
            except (StatusError, TransportError) as exc:
                if isinstance(exc, StatusError) and exc.code == 404:
                    continue
                self._log.warning("cannot write pod status", error=str(exc))
                await asyncio.sleep(1.0)
                self.status_dirty.set()

    async def _write_status(self) -> None:
        status = self.status()
        comparable = _without_times(status)
        if self.last_status is not None and comparable == self.last_status:
            return
        patch: Obj = {"status": status}
        updated = await self.rt.client.patch(
            self.rt.pods_resource, self.name, patch, namespace=self.namespace, subresource="status"
        )
        self.last_status = comparable
        if _d(updated.get("metadata")).get("uid") == self.uid:
            # Keep what others own (PodScheduled, readiness gates) for the next generation of conditions.
            self.pod = {**self.pod, "status": updated.get("status") or {}}


_NO_STATE = ContainerState(name="")


def _acted_on(pod: Obj) -> tuple[Any, ...]:
    meta = _d(pod.get("metadata"))
    return (
        pod.get("spec"),
        meta.get("deletionTimestamp"),
        meta.get("deletionGracePeriodSeconds"),
        meta.get("labels"),
        meta.get("annotations"),
    )


def _status_mounts(container: Obj) -> list[Obj]:
    out = []
    for mount in map(_d, _l(container.get("volumeMounts"))):
        entry: Obj = {"name": mount.get("name"), "mountPath": mount.get("mountPath")}
        if mount.get("readOnly"):
            entry["readOnly"] = True
            entry["recursiveReadOnly"] = "Disabled"
        out.append(entry)
    return out


def _status_image(image: str) -> str:
    """The image a container status reports: the normalized reference (as containerd reports it)."""
    try:
        return str(images.parse_image(image))
    except images.InvalidImageName:
        return image


def _without_times(status: Obj) -> Obj:
    copy = json.loads(json.dumps(status))
    for condition in copy.get("conditions") or []:
        condition.pop("lastProbeTime", None)
    return copy  # type: ignore[no-any-return]


def _parse_time(value: str) -> float | None:
    import calendar

    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


async def stop_process(process: ContainerProcess, grace: float) -> ExitStatus:
    """SIGTERM to the process group, SIGKILL after ``grace`` seconds; returns how it ended."""
    process.signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            return await process.wait()
    except TimeoutError:
        process.signal(signal.SIGKILL)
        try:
            async with asyncio.timeout(5.0):
                return await process.wait()
        except TimeoutError:
            process.kill_shim()
            return await process.wait()
