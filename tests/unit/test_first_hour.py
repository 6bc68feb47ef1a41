"""Pure pieces of issue 7's first-use fixes: listen addresses, data-directory claims and locks, private
files, settings listings, the kept kubeconfig context, the container a pod log/exec addresses, library log
levels, and a SQLite store that stops writing after a failed commit."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

from vplane.apiserver.reviews import pod_container
from vplane.cli.options import (
    DataDirLock,
    UsageProblem,
    claim_private_dir,
    describe_settings,
    holder_text,
    parse_listen,
    startup_error,
)
from vplane.cli.up import keep_context
from vplane.kube import errors
from vplane.storage.interface import StorageError
from vplane.storage.sqlite import SQLiteStore
from vplane.support.files import write_private
from vplane.support.kubeconfig import current_context, kubeconfig_doc, write_kubeconfig
from vplane.support.logging import library_level


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave files readable by others, to show modes come from the code."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_parse_listen_accepts_host_port_and_refuses_out_of_range_ports() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:6443") == ("::1", 6443)
    assert parse_listen(":10443") == ("127.0.0.1", 10443)
    with pytest.raises(UsageProblem, match=r"port 99999 is out of range \(0-65535\)"):
        parse_listen("127.0.0.1:99999")
    with pytest.raises(UsageProblem, match="expected HOST:PORT"):
        parse_listen("localhost")


def test_startup_errors_for_a_taken_port_are_one_line() -> None:
    error = startup_error(OSError(98, "error while attempting to bind"), "127.0.0.1:10443")
    assert error is not None
    assert error.message == "cannot listen on 127.0.0.1:10443: address already in use"
    assert startup_error(ValueError("x"), "127.0.0.1:1") is None


def test_a_directory_others_can_read_is_refused_with_the_fix(tmp_path: Path, open_umask: None) -> None:
    fresh = claim_private_dir(tmp_path / "new" / "data")
    assert fresh.stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    with pytest.raises(click.ClickException) as info:
        claim_private_dir(shared)
    assert info.value.message == (
        f"data directory {shared} is accessible by other users (mode 0755); fix it with: chmod 700 {shared}"
    )


def test_a_shared_directory_is_refused_without_suggesting_chmod(tmp_path: Path) -> None:
    """`--data-dir /tmp` must not be answered with `chmod 700 /tmp`."""
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(click.ClickException) as info:
        claim_private_dir(shared)
    assert info.value.message == (
        f"data directory {shared} is not yours alone (owner uid {os.getuid()}, mode 1777); "
        "use a directory of your own"
    )


def test_a_held_lock_names_its_holder(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path).acquire()
    first.set_address("https://127.0.0.1:10443")
    with pytest.raises(click.ClickException) as info:
        DataDirLock(tmp_path).acquire()  # another open file description: flock conflicts as across processes
    assert (
        info.value.message
        == f"data directory {tmp_path} is in use by vplane pid {os.getpid()} (https://127.0.0.1:10443)"
    )
    first.release()
    DataDirLock(tmp_path).acquire().release()


def test_holder_text_copes_with_empty_or_foreign_content() -> None:
    assert holder_text("") == "another vplane process"
    assert holder_text('{"pid": 7, "address": ""}') == "vplane pid 7 (still starting)"


def test_private_files_are_created_0600_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "dir" / "secret"
    write_private(path, "key")
    assert path.read_text() == "key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    write_kubeconfig(tmp_path / "kubeconfig.yaml", kubeconfig_doc([("a", "https://x", b"ca", "t")], "a"))
    assert (tmp_path / "kubeconfig.yaml").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_restart_keeps_the_users_context_if_it_is_still_ours(tmp_path: Path) -> None:
    names = ["vplane_management", "vplane_client_default", "vplane_target_default"]
    assert keep_context("vplane_target_default", names) == "vplane_target_default"
    assert keep_context("someone-elses", names) == "vplane_client_default"
    assert keep_context(None, names) == "vplane_client_default"
    path = tmp_path / "kubeconfig.yaml"
    assert current_context(path) is None
    write_kubeconfig(
        path, kubeconfig_doc([("vplane_management", "https://x", b"ca", "t")], "vplane_management")
    )
    assert current_context(path) == "vplane_management"


class _Example(BaseModel):
    data_dir: Path
    retries: int = 3
    """How often to try.

    Twice more than once."""
    names: list[str] = ["a"]


def test_list_settings_shows_names_types_defaults_and_docstrings() -> None:
    assert describe_settings(_Example) == [
        "retries (int) = 3",
        "    How often to try.",
        "",
        "    Twice more than once.",
        'names (list[str]) = ["a"]',
    ]


def test_pod_container_follows_upstreams_validate_container() -> None:
    def pod(*names: str, init: tuple[str, ...] = ()) -> dict[str, object]:
        return {
            "metadata": {"name": "web"},
            "spec": {
                "initContainers": [{"name": n} for n in init],
                "containers": [{"name": n} for n in names],
            },
        }

    assert pod_container(pod("app"), "") == "app"
    assert pod_container(pod("app", init=("setup",)), "setup") == "setup"
    with pytest.raises(errors.StatusError) as bad:
        pod_container(pod("app"), "sidecar")
    assert (bad.value.code, bad.value.message) == (400, "container sidecar is not valid for pod web")
    with pytest.raises(errors.StatusError) as many:
        pod_container(pod("app", "sidecar", init=("setup",)), "")
    assert (
        many.value.message
        == "a container name must be specified for pod web, choose one of: [setup app sidecar]"
    )
    assert errors.pod_without_host("web").message == "pod web does not have a host assigned"


def test_libraries_log_at_warning_unless_debugging() -> None:
    assert library_level(logging.INFO) == logging.WARNING
    assert library_level(logging.ERROR) == logging.ERROR
    assert library_level(logging.DEBUG) == logging.DEBUG


async def test_a_failed_commit_stops_the_store_from_writing(tmp_path: Path) -> None:
    """Another writer's row makes the next commit fail; the store then refuses every write and says so."""
    store = SQLiteStore(tmp_path / "state.db")
    await store.start()
    assert (tmp_path / "state.db").stat().st_mode & 0o777 == 0o600
    await store.create("/a", b"1")
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("INSERT INTO log VALUES (2, '/intruder', 2, 0, 0, x'7b7d')")
    with pytest.raises(StorageError, match="commit failed: UNIQUE constraint failed: log.rev"):
        await store.create("/b", b"2")
    failure = await store.wait_failed()
    assert "UNIQUE constraint failed: log.rev" in str(failure)
    with pytest.raises(StorageError, match="store refuses writes after a failed commit"):
        await store.create("/c", b"3")
    await store.close()
