"""Wildcard binds of a pod's Python programs take the pod's address; the python image's sitecustomize."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vplane.runtime import importhook, podbind
from vplane.runtime.images import PYSITE

POD_IP = "127.10.0.77"


def test_wildcard_binds_take_the_pods_address() -> None:
    v4, v6 = socket.AF_INET, socket.AF_INET6
    assert podbind.bind_address(v4, ("0.0.0.0", 8080), POD_IP) == (POD_IP, 8080)
    assert podbind.bind_address(v4, ("", 0), POD_IP) == (POD_IP, 0)
    assert podbind.bind_address(v4, ("127.0.0.1", 8080), POD_IP) == ("127.0.0.1", 8080)  # explicit: kept
    dual = podbind.bind_address(v6, ("::", 8080, 0, 0), POD_IP, v6only=lambda: False)
    assert dual == (f"::ffff:{POD_IP}", 8080, 0, 0)
    assert podbind.bind_address(v6, ("::", 8080, 0, 0), POD_IP, v6only=lambda: True) == ("::", 8080, 0, 0)
    assert podbind.bind_address(socket.AF_UNIX, "/tmp/sock", POD_IP) == "/tmp/sock"


def test_only_a_servers_lookup_of_every_address_is_answered_with_the_pods() -> None:
    passive = socket.AI_PASSIVE
    assert podbind.passive_host(None, 0, passive)
    assert podbind.passive_host("0.0.0.0", socket.AF_INET, passive)
    assert podbind.passive_host("::", 0, passive)
    assert not podbind.passive_host(None, 0, 0)  # a client's lookup of nothing: loopback, as ever
    assert not podbind.passive_host("web", 0, passive)
    assert not podbind.passive_host(None, socket.AF_INET6, passive)  # asked for IPv6 only


def test_a_callback_runs_right_after_its_modules_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "podbind_probe_module.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []

    def callback() -> None:
        seen.append(sys.modules["podbind_probe_module"].VALUE)

    importhook.after_import("podbind_probe_module", callback)
    assert seen == []
    try:
        import podbind_probe_module  # noqa: F401

        assert seen == [7]  # called once the module ran, not before
        importhook.after_import("podbind_probe_module", callback)
        assert seen == [7, 7]  # already imported: called at once
    finally:
        sys.modules.pop("podbind_probe_module", None)


def _in_pod(program: str) -> str:
    """``program`` run as the python image runs it: its directory first on PYTHONPATH, the pod's variables."""
    path = os.pathsep.join(filter(None, (PYSITE, os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, podbind.BIND_ENV: POD_IP, "VPLANE_HOSTS_FILE": os.devnull}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_a_pods_python_program_binds_its_pods_address() -> None:
    out = _in_pod(
        "import socket\n"
        "s = socket.socket(); s.bind(('0.0.0.0', 0)); print(s.getsockname()[0]); s.close()\n"
        "info = socket.getaddrinfo(None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)\n"
        "print(info[0][4][0])\n"
        "c = socket.getaddrinfo(None, 80, type=socket.SOCK_STREAM)\n"
        "print(c[0][4][0] in ('127.0.0.1', '::1'))\n"
    )
    assert out.splitlines() == [POD_IP, POD_IP, "True"]


def test_a_program_without_sockets_imports_nothing_more() -> None:
    assert (
        _in_pod("import sys; print(sorted({'socket', 'typing', 'uvloop', 'asyncio'} & set(sys.modules)))")
        == "[]"
    )
