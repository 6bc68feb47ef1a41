"""Pod status as the kubelet writes it: pure functions of the pod's spec and its containers' states.

The rules follow the kubelet's status generation (``pkg/kubelet/kubelet_pods.go`` ``getPhase`` and
``generateAPIPodStatus``, ``pkg/kubelet/status/generate.go`` for the conditions): the phase from the
containers' states and the restart policy, the ``PodReadyToStartContainers``, ``Initialized``, ``Ready``
and ``ContainersReady`` conditions with upstream's reasons and messages, each condition keeping its
``lastTransitionTime`` while its status does not change, and conditions the kubelet does not own
(``PodScheduled``, ``DisruptionTarget``, readiness gates) carried over. kubectl's STATUS column is computed
from exactly these fields (``kube.printers.pod_status_cells``).

Also here: the kubelet's back-off (``flowcontrol.Backoff``) used for crash loops and image pulls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vplane.kube.objects import Obj

Clock = Callable[[], float]

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def go_list(names: Sequence[str]) -> str:
    """A Go ``%s`` of a []string: ``[a b]``."""
    return "[" + " ".join(names) + "]"


# -- container states ---------------------------------------------------------------------------


@dataclass
class Terminated:
    exit_code: int
    reason: str
    finished_at: float
    started_at: float | None = None
    message: str = ""
    container_id: str = ""
    signal: int = 0

    def to_api(self) -> Obj:
        out: Obj = {"exitCode": self.exit_code, "reason": self.reason}
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        out["startedAt"] = rfc3339(self.started_at) if self.started_at is not None else None
        out["finishedAt"] = rfc3339(self.finished_at)
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    def to_json(self) -> Obj:
        return {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": self.finished_at,
            "startedAt": self.started_at,
            "message": self.message,
            "containerID": self.container_id,
            "signal": self.signal,
        }

    @classmethod
    def from_json(cls, doc: Obj) -> Terminated:
        return cls(
            exit_code=int(doc.get("exitCode", 0)),
            reason=str(doc.get("reason", "")),
            finished_at=float(doc.get("finishedAt") or 0),
            started_at=None if doc.get("startedAt") is None else float(doc["startedAt"]),
            message=str(doc.get("message") or ""),
            container_id=str(doc.get("containerID") or ""),
            signal=int(doc.get("signal") or 0),
        )


def exit_reason(exit_code: int) -> str:
    """``Completed`` for 0, ``Error`` otherwise (what containerd reports for a process that exited)."""
    return "Completed" if exit_code == 0 else "Error"


@dataclass
class ContainerState:
    """What the runtime knows about one container of a pod; rendered into a ``ContainerStatus``."""

    name: str
    init: bool = False
    sidecar: bool = False
    """An init container with ``restartPolicy: Always``: it keeps running beside the containers."""
    ephemeral: bool = False
    """An ephemeral container (``kubectl debug``): started once, never restarted, never ready."""
    restart_count: int = 0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    running_since: float | None = None
    container_id: str = ""
    terminated: Terminated | None = None
    """The current state, when the container has ended and is not (yet) being restarted."""
    last_terminated: Terminated | None = None
    ready: bool = False
    started: bool = False
    image: str = ""
    image_id: str = ""
    ever_started: bool = False
    """The container ran at least once in this pod (init containers done, restarts counted)."""

    @property
    def running(self) -> bool:
        return self.running_since is not None

    def set_waiting(self, reason: str, message: str = "") -> None:
        self.waiting_reason, self.waiting_message = reason, message
        self.running_since = None

    def set_running(self, since: float, container_id: str) -> None:
        self.running_since = since
        self.container_id = container_id
        self.terminated = None
        self.waiting_reason = self.waiting_message = ""
        self.ever_started = True

    def set_terminated(self, terminated: Terminated) -> None:
        self.terminated = terminated
        self.running_since = None
        self.ready = False
        self.started = False

    def to_api(self, volume_mounts: list[Obj] | None = None) -> Obj:
        state: Obj
        if self.running_since is not None:
            state = {"running": {"startedAt": rfc3339(self.running_since)}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated.to_api()}
        else:
            waiting: Obj = {"reason": self.waiting_reason or "ContainerCreating"}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        out: Obj = {
            "name": self.name,
            "state": state,
            "lastState": {"terminated": self.last_terminated.to_api()} if self.last_terminated else {},
            "ready": self.ready and self.running,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": self.image_id,
        }
        current_id = self.container_id if self.running or self.terminated is not None else ""
        if current_id:
            out["containerID"] = current_id
        if not self.ephemeral:  # the kubelet leaves `started` out of an ephemeral container's status
            out["started"] = self.started and self.running
        if volume_mounts:
            out["volumeMounts"] = volume_mounts
        return out


# -- phase --------------------------------------------------------------------------------------


def is_sidecar(container: Obj) -> bool:
    """An init container with ``restartPolicy: Always`` (KEP-753): it keeps running beside the containers."""
    return container.get("restartPolicy") == "Always"


def pod_phase(spec: Obj, statuses: dict[str, ContainerState], terminal: bool) -> str:
    """The kubelet's ``getPhase``: ``terminal`` when the pod will run nothing more (all done, or deleted)."""
    restart_policy = spec.get("restartPolicy") or "Always"
    pending_init = failed_init = pending_sidecars = 0
    inits = [_d(c) for c in _l(spec.get("initContainers"))]
    for container in inits:
        if is_sidecar(container):
            continue  # counted with the containers below
        name = str(container.get("name", ""))
        cs = statuses.get(name)
        if cs is None or cs.running:
            pending_init += 1
        elif cs.terminated is not None:
            if cs.terminated.exit_code != 0:
                failed_init += 1
        elif cs.last_terminated is not None:
            if cs.last_terminated.exit_code != 0:
                failed_init += 1
        else:
            pending_init += 1
    unknown = running = waiting = stopped = succeeded = 0
    for container in inits:
        if not is_sidecar(container):
            continue
        cs = statuses.get(str(container.get("name", "")))
        if cs is None:
            unknown += 1
        elif cs.running:
            running += 1
            if not cs.started:
                pending_sidecars += 1
        elif cs.terminated is None and cs.last_terminated is None:
            pending_sidecars += 1
            waiting += 1
        # a sidecar that ended (and will be restarted) does not count toward the phase
    initialized = any(
        (cs := statuses.get(str(_d(c).get("name", "")))) is not None and cs.ever_started
        for c in _l(spec.get("containers"))
    )
    for container in _l(spec.get("containers")):
        cs = statuses.get(str(_d(container).get("name", "")))
        if cs is None:
            unknown += 1
        elif cs.running:
            running += 1
        elif cs.terminated is not None:
            stopped += 1
            if cs.terminated.exit_code == 0:
                succeeded += 1
        elif cs.last_terminated is not None:
            stopped += 1
        else:
            waiting += 1
    if failed_init > 0 and restart_policy == "Never":
        return "Failed"
    if pending_init > 0 or (pending_sidecars > 0 and not initialized):
        return "Pending"
    if waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


# -- conditions ---------------------------------------------------------------------------------


def _initialized(spec: Obj, statuses: dict[str, ContainerState], phase: str) -> Obj:
    inits = [str(_d(c).get("name", "")) for c in _l(spec.get("initContainers"))]
    if not inits:
        return {"type": "Initialized", "status": "True"}
    sidecars = {str(_d(c).get("name", "")) for c in _l(spec.get("initContainers")) if is_sidecar(_d(c))}
    unknown = [n for n in inits if n not in statuses]
    incomplete = [
        n
        for n in inits
        if n in statuses
        and (
            not (statuses[n].running and statuses[n].started)  # a sidecar is done initializing once started
            if n in sidecars
            else statuses[n].terminated is None or statuses[n].terminated.exit_code != 0  # type: ignore[union-attr]
        )
    ]
    if phase == "Succeeded" and not unknown:
        return {"type": "Initialized", "status": "True", "reason": "PodCompleted"}
    if any(
        statuses.get(str(_d(c).get("name", ""))) is not None
        and statuses[str(_d(c).get("name", ""))].ever_started
        for c in _l(spec.get("containers"))
    ):
        return {"type": "Initialized", "status": "True"}
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {go_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {go_list(incomplete)}")
    if messages:
        return {
            "type": "Initialized",
            "status": "False",
            "reason": "ContainersNotInitialized",
            "message": ", ".join(messages),
        }
    return {"type": "Initialized", "status": "True"}


def _terminal_ready(kind: str, phase: str) -> Obj:
    return {"type": kind, "status": "False", "reason": "PodFailed" if phase == "Failed" else "PodCompleted"}


def _containers_ready(spec: Obj, statuses: dict[str, ContainerState], phase: str) -> Obj:
    unknown: list[str] = []
    unready: list[str] = []
    sidecars = [c for c in map(_d, _l(spec.get("initContainers"))) if is_sidecar(c)]
    for container in [*sidecars, *_l(spec.get("containers"))]:
        name = str(_d(container).get("name", ""))
        cs = statuses.get(name)
        if cs is None:
            unknown.append(name)
        elif not (cs.ready and cs.running):
            unready.append(name)
    if phase == "Succeeded" and not unknown:
        return _terminal_ready("ContainersReady", phase)
    if phase == "Failed":
        return _terminal_ready("ContainersReady", phase)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {go_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {go_list(unready)}")
    if messages:
        return {
            "type": "ContainersReady",
            "status": "False",
            "reason": "ContainersNotReady",
            "message": ", ".join(messages),
        }
    return {"type": "ContainersReady", "status": "True"}


def _ready(spec: Obj, containers_ready: Obj, phase: str, existing: list[Obj]) -> Obj:
    if phase in ("Succeeded", "Failed"):
        return _terminal_ready("Ready", phase)
    if containers_ready["status"] != "True":
        return {**containers_ready, "type": "Ready"}
    gates = [str(_d(g).get("conditionType", "")) for g in _l(spec.get("readinessGates"))]
    by_type = {str(c.get("type")): c for c in existing}
    messages = []
    for gate in gates:
        condition = by_type.get(gate)
        if condition is None:
            messages.append(f'corresponding condition of pod readiness gate "{gate}" does not exist.')
        elif condition.get("status") != "True":
            messages.append(
                f'the status of pod readiness gate "{gate}" is not "True", but {condition.get("status")}'
            )
    if messages:
        return {
            "type": "Ready",
            "status": "False",
            "reason": "ReadinessGatesNotReady",
            "message": ", ".join(messages),
        }
    return {"type": "Ready", "status": "True"}


def pod_conditions(
    spec: Obj,
    statuses: dict[str, ContainerState],
    phase: str,
    sandbox_ready: bool,
    existing: list[Obj],
    now: float,
    generation: int | None = None,
) -> list[Obj]:
    """The kubelet's four conditions in its order, then the existing ones it does not own; each keeps its
    ``lastTransitionTime`` unless its status changed."""
    initialized = _initialized(spec, statuses, phase)
    containers_ready = _containers_ready(spec, statuses, phase)
    wanted = [
        {"type": "PodReadyToStartContainers", "status": "True" if sandbox_ready else "False"},
        initialized,
        _ready(spec, containers_ready, phase, existing),
        containers_ready,
    ]
    old = {str(c.get("type")): c for c in existing}
    out: list[Obj] = []
    for condition in wanted:
        full: Obj = {"type": condition["type"]}
        if generation is not None:
            full["observedGeneration"] = generation
        full["status"] = condition["status"]
        full["lastProbeTime"] = None
        previous = old.get(condition["type"])
        if (
            previous is not None
            and previous.get("status") == condition["status"]
            and previous.get("lastTransitionTime")
        ):
            full["lastTransitionTime"] = previous["lastTransitionTime"]
        else:
            full["lastTransitionTime"] = rfc3339(now)
        for key in ("reason", "message"):
            if condition.get(key):
                full[key] = condition[key]
        out.append(full)
    others = [c for c in existing if c.get("type") not in KUBELET_CONDITIONS]
    if not any(c.get("type") == "PodScheduled" for c in others):
        # The kubelet reports a pod it runs as scheduled (one created with spec.nodeName never met a
        # scheduler, so nothing else said so).
        others.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(now),
            }
        )
    return out + others


# -- back-off -----------------------------------------------------------------------------------


@dataclass
class _Entry:
    backoff: float
    last_update: float


@dataclass
class Backoff:
    """client-go's ``flowcontrol.Backoff`` as the kubelet uses it: per key, a delay that starts at
    ``initial`` and doubles to ``maximum`` with each :meth:`next`; an entry not updated for ``reset`` seconds
    (twice the maximum by default) starts over."""

    initial: float
    maximum: float
    reset: float
    clock: Clock = time.monotonic
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def _expired(self, entry: _Entry, at: float) -> bool:
        return at - entry.last_update > self.reset

    def next(self, key: str) -> float:
        """Record an attempt (a restart, a pull failure); returns the delay now in force."""
        now = self.clock()
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            entry = self._entries[key] = _Entry(self.initial, now)
        else:
            entry.backoff = min(entry.backoff * 2, self.maximum)
            entry.last_update = now
        return entry.backoff

    def get(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry.backoff if entry is not None else 0.0

    def in_backoff_since(self, key: str, event_time: float) -> float:
        """Seconds left before ``key`` may act again, counted from ``event_time`` (a container's finish):
        0 when it may act now (the kubelet's ``IsInBackOffSince``)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return 0.0
        return max(0.0, entry.backoff - (self.clock() - event_time))

    def in_backoff_since_update(self, key: str) -> float:
        """Seconds left counted from the last :meth:`next` (``IsInBackOffSinceUpdate``, image pulls)."""
        entry = self._entries.get(key)
        now = self.clock()
        if entry is None or self._expired(entry, now):
            return 0.0
        return max(0.0, entry.backoff - (now - entry.last_update))

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]


def format_duration(seconds: float) -> str:
    """Go's ``time.Duration`` text for whole and fractional seconds (``10s``, ``5m0s``, ``1.5s``, ``393ms``)."""
    if seconds < 1:
        ms = round(seconds * 1000)
        return f"{ms}ms" if ms else "0s"
    whole = round(seconds, 3)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(int(minutes), 60)
    sec_text = f"{secs:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{sec_text}s"
    if minutes:
        return f"{minutes}m{sec_text}s"
    return f"{sec_text}s"
