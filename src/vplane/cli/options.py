"""Shared command-line plumbing for the server commands.

``--set name=value`` overrides for any settings field and ``--list-settings`` to see them; claiming a data
directory (private, one process at a time); and running a server until SIGINT, SIGTERM or SIGHUP: the
first signal stops it in order, a second one stops it at once. Anything the user did wrong is one line
(``Error: ...``) and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import errno
import fcntl
import gc
import inspect
import json
import os
import signal
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from vplane.support.files import PRIVATE_FILE, others_can_access, private_dir

M = TypeVar("M", bound=BaseModel)


class UsageProblem(click.ClickException):
    """A bad argument, said in one line (click's UsageError prints the usage text around it)."""

    exit_code = 2


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageProblem(f"--listen {value}: expected HOST:PORT")
    number = int(port)
    if number > 65535:
        raise UsageProblem(f"--listen {value}: port {number} is out of range (0-65535)")
    return host.strip("[]") or "127.0.0.1", number


def build_settings(model: type[M], base: dict[str, Any], overrides: tuple[str, ...]) -> M:
    values = dict(base)
    for item in overrides:
        name, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--set")
        values[name.strip().replace("-", "_")] = yaml.safe_load(raw) if raw else ""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from None


# -- --list-settings ---------------------------------------------------------------------------------


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring under each field of a settings class (and its bases), read from the source."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = name or str(annotation)
    for module in ("pathlib.", "typing.", "datetime."):
        text = text.replace(module, "")
    return text


def _default_text(field: Any) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
        if not isinstance(value, dict | list | BaseModel):
            return "(generated)"
    else:
        return "(required)"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value, default=str)


def describe_settings(model: type[BaseModel], skip: Iterable[str] = ()) -> list[str]:
    """``--list-settings``: each field's name, type, default and docstring, for ``--set NAME=VALUE``."""
    docs = field_docs(model)
    skipped = set(skip)
    lines: list[str] = []
    for name, field in model.model_fields.items():
        if name in skipped:
            continue
        if field.is_required():
            continue  # set by the command's own options
        lines.append(f"{name} ({_type_name(field.annotation)}) = {_default_text(field)}")
        for doc_line in docs.get(name, "").splitlines():
            lines.append(f"    {doc_line}".rstrip())
    return lines


def list_settings_option(
    model: Callable[[], type[BaseModel]],
    skip: Iterable[str] = ("listen_host", "listen_port"),
    nested: Callable[[], list[tuple[tuple[str, ...], type[BaseModel]]]] | None = None,
) -> Callable[[Any], Any]:
    """A ``--list-settings`` flag that prints the names ``--set`` accepts and exits. ``nested`` names the
    fields that take another settings class as a YAML map (``--set apiserver='{name: value}'``)."""
    skipped = tuple(skip)

    def show(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if not value or ctx.resilient_parsing:
            return
        cls = model()
        click.echo(f"--set NAME=VALUE (VALUE is YAML) accepts these {cls.__name__} fields:")
        for line in describe_settings(cls, skipped):
            click.echo(f"  {line}")
        for fields, inner in nested() if nested is not None else []:
            click.echo("")
            also = f" (and {', '.join(fields[1:])})" if len(fields) > 1 else ""
            click.echo(
                f"--set {fields[0]}='{{NAME: VALUE, ...}}'{also} accepts these {inner.__name__} fields:"
            )
            for line in describe_settings(inner, ("listen_host", "listen_port")):
                click.echo(f"  {line}")
        ctx.exit(0)

    return click.option(
        "--list-settings",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="List the settings --set accepts, with their defaults, and exit.",
    )


# -- data directories --------------------------------------------------------------------------------


LOCK_NAME = "vplane.lock"


def private_process() -> None:
    """Every file a server process creates is its owner's alone (state, keys, kubeconfigs, logs)."""
    os.umask(0o077)


def claim_private_dir(path: Path) -> Path:
    """Create ``path`` 0700, or refuse one that group or others can reach (it holds every credential)."""
    try:
        private_dir(path)
        info = path.stat()
    except OSError as exc:
        raise click.ClickException(f"data directory {path}: {exc.strerror or exc}") from None
    mode = info.st_mode
    if info.st_uid != os.getuid() or mode & 0o1000:  # someone else's, or a shared one like /tmp
        raise click.ClickException(
            f"data directory {path} is not yours alone (owner uid {info.st_uid}, mode {mode & 0o7777:04o}); "
            "use a directory of your own"
        )
    if others_can_access(mode):
        raise click.ClickException(
            f"data directory {path} is accessible by other users (mode {mode & 0o777:04o}); "
            f"fix it with: chmod 700 {path}"
        )
    return path


def holder_text(content: str) -> str:
    """Who holds a lock, from the lock file's content (``{"pid": ..., "address": ...}``)."""
    try:
        info = json.loads(content)
    except ValueError:
        info = None
    if not isinstance(info, dict) or "pid" not in info:
        return "another vplane process"
    address = info.get("address") or "still starting"
    return f"vplane pid {info['pid']} ({address})"


class DataDirLock:
    """An ``flock`` on ``<dir>/vplane.lock``: one process per data directory, released by the kernel
    when the process ends however it ends. The file names the holder so a refusal can say who."""

    def __init__(self, directory: Path, name: str = LOCK_NAME, subject: str = "") -> None:
        self.directory = directory
        self.path = directory / name
        self.subject = subject or f"data directory {directory}"
        self._fd: int | None = None
        self._address = ""

    def acquire(self) -> DataDirLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            content = ""
            with contextlib.suppress(OSError):
                content = os.pread(fd, 4096, 0).decode(errors="replace")
            os.close(fd)
            raise click.ClickException(f"{self.subject} is in use by {holder_text(content)}") from None
        self._fd = fd
        self._write()
        return self

    def set_address(self, address: str) -> None:
        self._address = address
        self._write()

    def _write(self) -> None:
        if self._fd is None:
            return
        data = json.dumps({"pid": os.getpid(), "address": self._address}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


# -- running a server --------------------------------------------------------------------------------


GC_YOUNG_THRESHOLD = 10_000
"""Net container allocations between young-generation collections (CPython's default is 700).

A server under load keeps a few thousand objects alive per batch of in-flight requests; at the default
every collection walks them all a few hundred times a second, about 5% of the CPU of a create-heavy load
(measured in bench/apiserver). Ten thousand keeps young collections to a few per second."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def startup_error(exc: BaseException, listen: str) -> click.ClickException | None:
    """One line for what commonly goes wrong while a server starts (the port is taken, ...)."""
    if isinstance(exc, click.ClickException):
        return exc
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        where = f" on {listen}" if listen else ""
        return click.ClickException(f"cannot listen{where}: {os.strerror(exc.errno).lower()}")
    return None


def run_until_signalled(
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[Any]],
    ready_file: Path | None = None,
    ready_text: Callable[[], str] | None = None,
    *,
    listen: str = "",
    locks: Iterable[DataDirLock] = (),
    address: Callable[[], str] | None = None,
    force_stop: Callable[[], None] | None = None,
    failure: Callable[[], Awaitable[BaseException]] | None = None,
) -> None:
    """Start, serve until a signal (or until ``failure`` returns), stop.

    A signal during start-up stops too. The second signal ends the process at once: ``force_stop`` (kill
    child processes) and exit, without waiting for anything. The locks get the served address once
    ready and are released after a clean stop."""
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    held = list(locks)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        received: list[int] = []

        def on_signal(signum: int) -> None:
            received.append(signum)
            if len(received) == 1:
                click.echo("stopping (press Ctrl-C again to stop at once)", err=True)
                stopping.set()
                return
            click.echo("stopping at once", err=True)
            if force_stop is not None:
                with contextlib.suppress(Exception):
                    force_stop()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        starting: asyncio.Task[Any] = asyncio.ensure_future(start())
        signalled = asyncio.create_task(stopping.wait())
        await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
            await stop()
            return
        signalled.cancel()
        error = starting.exception()
        if error is not None:
            await stop()
            translated = startup_error(error, listen)
            if translated is None:
                raise error
            raise translated
        text = address() if address is not None else ""
        for lock in held:
            lock.set_address(text)
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(ready_text() if ready_text else "ready")
            tmp.replace(ready_file)
        waiters: set[asyncio.Task[Any]] = {asyncio.create_task(stopping.wait())}
        failing: asyncio.Task[BaseException] | None = None
        if failure is not None:
            failing = asyncio.create_task(_await(failure()))
            waiters.add(failing)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in waiters:
            task.cancel()
        failed = (
            failing.result() if failing is not None and failing.done() and not failing.cancelled() else None
        )
        if failed is not None:
            click.echo(f"stopping: {failed}", err=True)
        await stop()
        if failed is not None:
            raise click.ClickException(f"stopped after a storage failure: {failed}")

    try:
        if os.environ.get("VPLANE_UVLOOP", "1") != "0":
            try:
                import uvloop  # optional speed-up
            except ImportError:
                asyncio.run(main())
            else:
                uvloop.run(main())
        else:
            asyncio.run(main())
    finally:
        for lock in held:
            lock.release()


async def _await(awaitable: Awaitable[BaseException]) -> BaseException:
    return await awaitable
