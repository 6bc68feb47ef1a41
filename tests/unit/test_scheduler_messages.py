"""The ``FailedScheduling`` message, spelled as kube-scheduler 1.36 spells it (``FitError.Error()``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_scheduler_builders import cluster, node, pod, schedule

from vplane.controllers.scheduler.framework import (
    NOTE_LENGTH_LIMIT,
    Diagnosis,
    NodeToStatus,
    fit_error_message,
    truncate_note,
    unresolvable,
    unschedulable,
)


def test_reasons_are_counted_per_node_and_sorted_as_strings() -> None:
    statuses = {
        "n1": unschedulable("Insufficient cpu"),
        "n2": unschedulable("Insufficient cpu", "Insufficient memory"),
        "n3": unresolvable("node(s) had untolerated taint(s)"),
    }
    message = fit_error_message(3, Diagnosis(NodeToStatus(statuses)))
    assert message == (
        "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
    )


def test_counts_sort_as_text_not_numbers() -> None:
    statuses = {f"a{i}": unschedulable("Insufficient cpu") for i in range(10)}
    statuses |= {f"b{i}": unresolvable("node(s) were unschedulable") for i in range(2)}
    assert fit_error_message(12, Diagnosis(NodeToStatus(statuses))) == (
        "0/12 nodes are available: 10 Insufficient cpu, 2 node(s) were unschedulable."
    )


def test_nodes_not_looked_at_get_the_absent_status() -> None:
    statuses = NodeToStatus(
        {"n1": unschedulable("Insufficient cpu")},
        absent=unresolvable("Preemption is not helpful for scheduling"),
    )
    assert fit_error_message(3, Diagnosis(statuses)) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 Preemption is not helpful for scheduling."
    )


def test_pre_filter_and_post_filter_messages() -> None:
    diagnosis = Diagnosis(
        pre_filter_message="pod affinity terms conflict", post_filter_message="preemption: x."
    )
    assert (
        fit_error_message(2, diagnosis)
        == "0/2 nodes are available: pod affinity terms conflict. preemption: x."
    )


def test_one_node_short_of_cpu_reads_as_upstream() -> None:
    result = schedule(cluster([node("n1", cpu="1")]), pod("p", cpu="2"))
    assert result.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_the_first_failing_plugin_names_the_reason() -> None:
    nodes = [
        node("cordoned", unschedulable=True, cpu="0"),
        node("tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], cpu="0"),
        node("other-zone", labels={"zone": "b"}, cpu="0"),
        node("small", labels={"zone": "a"}, cpu="100m"),
    ]
    result = schedule(cluster(nodes), pod("p", cpu="1", nodeSelector={"zone": "a"}))
    assert result.message == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s), 1 node(s) were unschedulable."
    )
    assert result.diagnosis.unschedulable_plugins == {
        "NodeUnschedulable",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
    }


def test_an_empty_cluster() -> None:
    result = schedule(cluster([]), pod("p"))
    assert result.no_nodes and result.message == "no nodes available to schedule pods"


def test_conflicting_node_name_terms_fail_in_pre_filter() -> None:
    terms = [
        {
            "matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["a"]},
                {"key": "metadata.name", "operator": "In", "values": ["b"]},
            ]
        }
    ]
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    result = schedule(cluster([node("a"), node("b")]), pod("p", affinity=affinity))
    assert result.message == "0/2 nodes are available: pod affinity terms conflict."


def test_notes_are_truncated_to_the_api_limit() -> None:
    assert truncate_note("short") == "short"
    long = "x" * 2000
    cut = truncate_note(long)
    assert len(cut) == NOTE_LENGTH_LIMIT and cut.endswith(" ...")


@given(
    st.dictionaries(
        st.sampled_from(["Insufficient cpu", "Too many pods", "node(s) were unschedulable"]),
        st.integers(1, 30),
        min_size=1,
    )
)
def test_the_histogram_adds_up_to_the_nodes(counts: dict[str, int]) -> None:
    statuses = {}
    for reason, count in counts.items():
        for i in range(count):
            statuses[f"{reason}-{i}"] = unschedulable(reason)
    message = fit_error_message(len(statuses), Diagnosis(NodeToStatus(statuses)))
    body = message.split(": ", 1)[1].rstrip(".")
    parts = body.split(", ")
    assert parts == sorted(parts)
    assert sum(int(p.split(" ", 1)[0]) for p in parts) == len(statuses)
