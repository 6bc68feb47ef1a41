"""What a pod requests and what a node holds, as kube-scheduler counts them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vplane.controllers.scheduler import resources
from vplane.controllers.scheduler.resources import amount, is_scalar, pod_requests


def c(cpu: str | None = None, memory: str | None = None, restart: str | None = None, **extra: str) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None} | extra
    container: dict = {"name": "c", "resources": {"requests": requests}}
    if restart:
        container["restartPolicy"] = restart
    return container


def test_quantities_round_up_as_milli_value_and_value() -> None:
    assert amount("cpu", "100m") == 100
    assert amount("cpu", "1") == 1000
    assert amount("cpu", "0.0001") == 1  # MilliValue rounds up
    assert amount("cpu", "1.5") == 1500
    assert amount("memory", "1Gi") == 2**30
    assert amount("memory", "1.5k") == 1500
    assert amount("memory", "100m") == 1  # 0.1 byte rounds up to 1
    assert amount("cpu", "junk") == 0


def test_scalar_resources_are_extended_hugepages_and_prefixed_native() -> None:
    assert is_scalar("example.com/gpu")
    assert is_scalar("hugepages-2Mi")
    assert is_scalar("kubernetes.io/batch-cpu")
    assert is_scalar("attachable-volumes-aws-ebs")
    assert not is_scalar("cpu")
    assert not is_scalar("storage")
    assert not is_scalar("requests.example.com/gpu")


def test_containers_add_up_and_init_containers_set_a_floor() -> None:
    # upstream's computePodResourceRequest example: containers 2+1 cpu, 1G+1G; init 2cpu/1G and 2cpu/3G
    spec = {
        "containers": [c("2", "1G"), c("1", "1G")],
        "initContainers": [c("2", "1G"), c("2", "3G")],
    }
    assert pod_requests(spec) == {"cpu": 3000, "memory": 3_000_000_000}


def test_sidecars_run_beside_later_init_containers_and_the_app() -> None:
    spec = {
        "containers": [c("1")],
        "initContainers": [c("500m", restart="Always"), c("2")],
    }
    # the sidecar adds to the app (1.5) and runs during the second init container (2.5)
    assert pod_requests(spec)["cpu"] == 2500


def test_overhead_and_pod_level_resources() -> None:
    spec = {
        "containers": [c("1", "1Gi")],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "resources": {"requests": {"cpu": "3"}},
    }
    assert pod_requests(spec) == {"cpu": 3250, "memory": 2**30 + 120 * 2**20}


def test_a_limit_without_a_request_requests_the_limit() -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "example.com/gpu": "1"}}}]}
    assert pod_requests(spec) == {"cpu": 2000, "example.com/gpu": 1}


def test_non_zero_requests_assume_defaults_for_missing_cpu_and_memory() -> None:
    spec = {"containers": [c(), c(cpu="0")]}
    requests = pod_requests(spec, non_zero=True)
    # an explicit zero stays zero; a missing request is assumed (100m, 200Mi)
    assert requests["cpu"] == resources.DEFAULT_MILLI_CPU_REQUEST
    assert requests["memory"] == 2 * resources.DEFAULT_MEMORY_REQUEST
    assert pod_requests(spec) == {"cpu": 0}


def test_allocatable_falls_back_to_capacity_and_counts_pods() -> None:
    node = {"status": {"capacity": {"cpu": "2", "memory": "1Gi", "pods": "10", "example.com/gpu": "4"}}}
    assert resources.allocatable(node) == {"cpu": 2000, "memory": 2**30, "pods": 10, "example.com/gpu": 4}


@given(
    st.lists(st.integers(0, 4000), min_size=1, max_size=5),
    st.lists(st.integers(0, 4000), max_size=5),
)
def test_requests_are_the_larger_of_the_sum_and_the_largest_init_container(
    apps: list[int], inits: list[int]
) -> None:
    spec = {
        "containers": [c(f"{m}m") for m in apps],
        "initContainers": [c(f"{m}m") for m in inits],
    }
    assert pod_requests(spec)["cpu"] == max([sum(apps), *inits])
