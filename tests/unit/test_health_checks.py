"""/livez, /readyz and /healthz answers (k8s.io/apiserver's healthz package): the decision alone."""

from __future__ import annotations

from vplane.apiserver import health


def checks(**failing: str) -> dict[str, health.Check]:
    def check(name: str) -> health.Check:
        return lambda: failing.get(name)

    return {
        name: check(name) for name in ("ping", "log", "etcd", "etcd-readiness", "informer-sync", "shutdown")
    }


def test_a_healthy_endpoint_says_ok_and_lists_its_checks_when_verbose() -> None:
    assert health.answer("livez", None, {}, checks()) == (200, "ok")
    assert health.answer("livez", None, {"verbose": [""]}, checks()) == (
        200,
        "[+]ping ok\n[+]log ok\n[+]etcd ok\nlivez check passed\n",
    )


def test_a_failing_check_makes_a_500_that_lists_every_check_verbose_or_not() -> None:
    status, text = health.answer("readyz", None, {}, checks(shutdown="process is shutting down"))
    assert status == 500
    assert text == (
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n"
        "[-]shutdown failed: reason withheld\nreadyz check failed\n"
    )


def test_exclusions_skip_checks_and_warn_about_unknown_names_even_when_failing() -> None:
    status, text = health.answer(
        "readyz", None, {"exclude": ["etcd,zz", "aa"]}, checks(etcd="disk full", **{"informer-sync": "no"})
    )
    assert status == 500
    assert "[+]etcd excluded: ok\n" in text and "[-]informer-sync failed: reason withheld\n" in text
    assert text.endswith(
        'warn: some health checks cannot be excluded: no matches for "aa","zz"\nreadyz check failed\n'
    )
    assert health.answer("livez", None, {"exclude": ["etcd"]}, checks(etcd="disk full")) == (200, "ok")


def test_one_check_alone_and_a_check_the_endpoint_lacks() -> None:
    assert health.answer("readyz", "etcd", {}, checks()) == (200, "ok")
    assert health.answer("readyz", "etcd", {}, checks(etcd="the store refuses writes")) == (
        500,
        "internal server error: the store refuses writes\n",
    )
    assert health.answer("livez", "shutdown", {}, checks()) is None
    assert health.answer("healthz", "nope", {}, checks()) is None
