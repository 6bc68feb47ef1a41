"""The scheduling framework's vocabulary: statuses, a pod's diagnosis, and upstream's failure message.

``fit_error_message`` is ``framework.FitError.Error()``: ``0/N nodes are available:`` then the
PreFilter message, or the filter reasons counted over nodes and sorted as strings (``"2 Insufficient
cpu"`` sorts before ``"3 node(s) ..."`` and after ``"10 ..."``, as Go's ``sort.Strings`` sorts them), then
the PostFilter (preemption) message as is.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

NO_NODE_AVAILABLE = "0/{} nodes are available"
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
"""``ErrNoNodesAvailable``: the message when the cluster has no nodes at all."""
NOTE_LENGTH_LIMIT = 1024
"""``validation.NoteLengthLimit``: event notes longer than this are truncated with `` ...``."""


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    SKIP = 4


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's answer: a code, the reasons (each counted once per node in the message) and the plugin."""

    code: Code
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def success(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return Status(self.code, self.reasons, plugin)


SUCCESS = Status(Code.SUCCESS)


def unschedulable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, reasons, plugin)


def unresolvable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)


@dataclass(slots=True)
class NodeToStatus:
    """``framework.NodeToStatus``: statuses of the nodes that were looked at, and one for the others."""

    statuses: dict[str, Status] = field(default_factory=dict)
    absent: Status = field(default_factory=lambda: unresolvable())

    def get(self, node: str) -> Status:
        return self.statuses.get(node, self.absent)


@dataclass(slots=True)
class Diagnosis:
    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pre_filter_message: str = ""
    post_filter_message: str = ""

    def add_plugin_status(self, status: Status) -> None:
        if status.plugin and status.rejected:
            self.unschedulable_plugins.add(status.plugin)


def fit_error_message(num_all_nodes: int, diagnosis: Diagnosis) -> str:
    """``FitError.Error()`` (pkg/scheduler/framework/types.go)."""
    message = NO_NODE_AVAILABLE.format(num_all_nodes) + ":"
    if diagnosis.pre_filter_message:
        message += f" {diagnosis.pre_filter_message}."
    else:
        reasons: Counter[str] = Counter()
        statuses = diagnosis.node_to_status.statuses
        for status in statuses.values():
            for reason in status.reasons:
                reasons[reason] += 1
        if len(statuses) < num_all_nodes:
            for reason in diagnosis.node_to_status.absent.reasons:
                reasons[reason] += num_all_nodes - len(statuses)
        histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
        if histogram:
            message += " " + ", ".join(histogram) + "."
    if diagnosis.post_filter_message:
        message += " " + diagnosis.post_filter_message
    return message


def truncate_note(message: str) -> str:
    """``truncateMessage``: the scheduler keeps event notes within the API's limit (counted in bytes)."""
    if len(message.encode()) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    cut = message.encode()[: NOTE_LENGTH_LIMIT - len(suffix)].decode(errors="ignore")
    return cut + suffix
