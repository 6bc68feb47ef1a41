"""``/livez``, ``/readyz`` and ``/healthz`` as k8s.io/apiserver's healthz package answers them.

Monitoring, load balancers and ``kubectl get --raw '/readyz?verbose'`` read these: each endpoint runs its
named checks; ``?verbose`` lists them (``[+]etcd ok``) and ends ``readyz check passed``; ``?exclude=<name>``
skips one (``[+]etcd excluded: ok``, and a warning line for names that match nothing); a failing check
makes a 500 that lists every check, the failed ones as ``[-]<name> failed: reason withheld``; and
``/readyz/<name>`` runs one check (``ok``, or 500 ``internal server error: <why>``).

Only checks that test something here are listed (no post-start hooks vplane does not have):
``ping``; ``log``; ``etcd`` and ``etcd-readiness``, the store accepting writes (the name upstream gives its
storage check, whatever the backend); ``informer-sync``, the server's caches filled and its loops started;
``shutdown``, failing once the server has begun to stop, so load balancers drain it first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

Check = Callable[[], str | None]
"""A health check: None when healthy, else why not."""

ENDPOINTS: Mapping[str, Sequence[str]] = {
    "livez": ("ping", "log", "etcd"),
    "healthz": ("ping", "log", "etcd"),
    "readyz": ("ping", "log", "etcd", "etcd-readiness", "informer-sync", "shutdown"),
}


def answer(
    endpoint: str, check: str | None, query: Mapping[str, Sequence[str]], checks: Mapping[str, Check]
) -> tuple[int, str] | None:
    """The status and text/plain body for ``/<endpoint>[/<check>]``; None for a check the endpoint lacks
    (a 404, as upstream's mux gives)."""
    names = ENDPOINTS[endpoint]
    if check is not None:
        if check not in names:
            return None
        error = checks[check]()
        return (200, "ok") if error is None else (500, f"internal server error: {error}\n")
    excluded = {
        name.strip() for value in query.get("exclude", ()) for name in value.split(",") if name.strip()
    }
    lines: list[str] = []
    failed = False
    for name in names:
        if name in excluded:
            excluded.discard(name)
            lines.append(f"[+]{name} excluded: ok\n")
            continue
        if checks[name]() is None:
            lines.append(f"[+]{name} ok\n")
        else:
            failed = True
            lines.append(f"[-]{name} failed: reason withheld\n")
    if excluded:
        quoted = ",".join(f'"{name}"' for name in sorted(excluded))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}\n")
    if failed:
        return 500, "".join(lines) + f"{endpoint} check failed\n"
    if "verbose" not in query:
        return 200, "ok"
    return 200, "".join(lines) + f"{endpoint} check passed\n"
