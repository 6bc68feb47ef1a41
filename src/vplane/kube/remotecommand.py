"""The streaming protocols of exec, attach and port-forward (pure: names, negotiation, framing).

**Remote command over WebSocket** (``k8s.io/apimachinery/pkg/util/remotecommand``, kubelet's
``cri/streaming/remotecommand``): every binary message is one channel byte then data. Channels: stdin 0,
stdout 1, stderr 2, error 3, resize 4 (JSON ``{"Width": w, "Height": h}``); ``v5.channel.k8s.io`` adds
the close signal: a client message ``[255, channel]`` ends that channel (stdin's end of input). The error
channel carries the final v1 Status from ``v4`` on (a plain error text before); the server ends the
connection after writing it. The ``base64.`` variants send text messages whose first character is the
channel as a digit, the rest base64. Subprotocols in the server's order: v5, v4 (binary then base64),
v3, v2, v1 (``channel.k8s.io``, also what a client that names none gets).

**Remote command over SPDY**: the same channels as SPDY streams named by their ``streamtype`` header
(``error``, ``stdin``, ``stdout``, ``stderr``, ``resize``); the protocol is negotiated with
``X-Stream-Protocol-Version``.

**Port-forward over WebSocket** (kubelet's ``cri/streaming/portforward/websocket.go``): for the i-th
port of the ``port`` query parameter, data on channel 2i and errors on channel 2i+1; the server's first
message on each of those channels is the port number, two bytes little-endian.

**Port-forward over SPDY** (``portforward.k8s.io``): a pair of streams per connection, ``streamtype``
``error`` and ``data``, with the ``port`` and the pair's ``requestid`` headers. kubectl 1.30+ tunnels
that SPDY session in WebSocket binary messages (subprotocol ``SPDY/3.1+portforward.k8s.io``).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE = 255
"""v5's close signal: ``[255, channel]`` from the client ends that channel."""

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
V3 = "v3.channel.k8s.io"
V2 = "v2.channel.k8s.io"
V1 = "channel.k8s.io"
V1_BASE64 = "base64.channel.k8s.io"
REMOTE_COMMAND_WEBSOCKET = (V5, V4, V4_BASE64, V3, V2, V1, V1_BASE64)
"""WebSocket subprotocols exec and attach serve, preferred first."""
REMOTE_COMMAND_SPDY = (V5, V4, V3, V2, V1)
"""``X-Stream-Protocol-Version`` values exec and attach serve over SPDY."""

PORT_FORWARD_SPDY = "portforward.k8s.io"
PORT_FORWARD_TUNNEL = "SPDY/3.1+portforward.k8s.io"
"""The WebSocket subprotocol of kubectl's SPDY-in-WebSocket port-forward (KEP-4006)."""
PORT_FORWARD_WEBSOCKET = (V4, V4_BASE64, "")
"""The channel protocols of WebSocket port-forward ("" is a client that names none)."""

STREAM_TYPE_HEADER = "streamtype"
PORT_HEADER = "port"
REQUEST_ID_HEADER = "requestid"
STREAM_TYPES = {"stdin": STDIN, "stdout": STDOUT, "stderr": STDERR, "error": ERROR, "resize": RESIZE}

NON_ZERO_EXIT_CODE = "NonZeroExitCode"
EXIT_CODE_CAUSE = "ExitCode"


def offered(header_values: Sequence[str]) -> list[str]:
    """The protocols a client offers in (possibly several, comma-separated) header values, in order."""
    return [p.strip() for value in header_values for p in value.split(",") if p.strip()]


def negotiate(client: Sequence[str], server: Sequence[str]) -> str | None:
    """The first protocol the client offers that the server serves (the client's order, as wsstream's
    handshake picks); a client that offers none gets "" if the server serves that. None: no match."""
    for protocol in client or [""]:
        if protocol in server:
            return protocol
    return None


def is_base64(protocol: str) -> bool:
    return "base64." in protocol


def status_on_error_channel(protocol: str) -> bool:
    """From v4 on, the error channel carries a v1 Status; before, plain error text."""
    return protocol in (V5, V4, V4_BASE64)


def has_resize(protocol: str) -> bool:
    return protocol not in (V1, V1_BASE64, V2)


def encode(protocol: str, channel: int, data: bytes) -> bytes | str:
    """One WebSocket message: binary ``channel + data``, or for base64 protocols text ``"<digit>" +
    base64(data)``."""
    if is_base64(protocol):
        return chr(ord("0") + channel) + base64.b64encode(data).decode()
    return bytes([channel]) + data


def decode(protocol: str, message: bytes | str) -> tuple[int, bytes]:
    """(channel, data) of a client message; ValueError if it is not one."""
    if isinstance(message, str) and not is_base64(protocol):
        # A text frame on a binary protocol is read as its bytes, as wsstream does (the Python client
        # sends ``chr(channel) + text`` as text frames).
        message = message.encode()
    if isinstance(message, str):
        if not message:
            raise ValueError("empty message")
        channel = ord(message[0]) - ord("0")
        if not 0 <= channel <= 9:
            raise ValueError(f"invalid channel {message[0]!r}")
        try:
            return channel, base64.b64decode(message[1:], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("invalid base64 data") from None
    if not message:
        raise ValueError("empty message")
    return message[0], bytes(message[1:])


@dataclass(frozen=True)
class TerminalSize:
    width: int
    height: int


def parse_resize(data: bytes) -> TerminalSize | None:
    """A resize message (``{"Width": w, "Height": h}``); None for anything else (ignored, as upstream
    logs and drops a bad one)."""
    try:
        doc = json.loads(data)
        width, height = int(doc["Width"]), int(doc["Height"])
    except (ValueError, TypeError, KeyError):
        return None
    if not (0 <= width < 1 << 16 and 0 <= height < 1 << 16):
        return None
    return TerminalSize(width, height)


# -- options (the kubelet's query parameters) ------------------------------------------------------------

KUBELET_STDIN, KUBELET_STDOUT, KUBELET_STDERR, KUBELET_TTY, KUBELET_COMMAND = (
    "input",
    "output",
    "error",
    "tty",
    "command",
)
"""The kubelet's names for the streams (``api.ExecStdinParam`` and friends); the API server's are
``stdin``, ``stdout``, ``stderr``, ``tty``, ``command``."""


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: tuple[str, ...] = ()


def kubelet_options(query: Mapping[str, Sequence[str]]) -> StreamOptions:
    """``remotecommand.NewOptions``: ``1`` turns a stream on; a terminal has no separate stderr; at
    least one stream. ValueError with upstream's text otherwise."""

    def on(name: str) -> bool:
        values = query.get(name) or []
        return bool(values) and values[0] == "1"

    tty = on(KUBELET_TTY)
    options = StreamOptions(
        on(KUBELET_STDIN),
        on(KUBELET_STDOUT),
        on(KUBELET_STDERR) and not tty,
        tty,
        tuple(query.get(KUBELET_COMMAND) or ()),
    )
    if not (options.stdin or options.stdout or options.stderr):
        raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
    return options


def _api_bool(query: Mapping[str, Sequence[str]], name: str) -> bool:
    values = query.get(name) or []
    return bool(values) and values[0].lower() in ("1", "t", "true")


def kubelet_query(subresource: str, query: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """The API server's ``streamParams``: PodExecOptions/PodAttachOptions/PodPortForwardOptions from the
    client's query, as the kubelet's parameters."""
    params: list[tuple[str, str]] = []
    if subresource == "portforward":
        ports = [p for value in query.get("ports") or [] for p in value.split(",") if p]
        if ports:
            params.append((PORT_HEADER, ",".join(ports)))
        return params
    for api_name, kubelet_name in (
        ("stdin", KUBELET_STDIN),
        ("stdout", KUBELET_STDOUT),
        ("stderr", KUBELET_STDERR),
        ("tty", KUBELET_TTY),
    ):
        if _api_bool(query, api_name):
            params.append((kubelet_name, "1"))
    if subresource == "exec":
        params += [(KUBELET_COMMAND, c) for c in query.get("command") or []]
    return params


def parse_ports(values: Sequence[str]) -> list[int]:
    """The kubelet's ``port`` parameter (repeated or comma-separated); ValueError with upstream's text."""
    ports: list[int] = []
    for value in values:
        if not value:
            raise ValueError('query parameter "port" cannot be empty')
        for part in value.split(","):
            try:
                port = int(part, 10)
                if not 0 <= port < 1 << 16 or not part.isdigit():
                    raise ValueError
            except ValueError:
                raise ValueError(f'unable to parse "{value}" as a port: invalid syntax') from None
            if port < 1:
                raise ValueError(f'port "{value}" must be > 0')
            ports.append(port)
    return ports


def port_prefix(port: int) -> bytes:
    """The first message on a port-forward channel: the port, little-endian."""
    return struct.pack("<H", port)


def port_channels(index: int) -> tuple[int, int]:
    """The (data, error) channels of the index-th forwarded port."""
    return 2 * index, 2 * index + 1


def parse_spdy_port(value: str) -> int:
    """A port-forward stream's ``port`` header; ValueError with the kubelet's text."""
    try:
        port = int(value, 10)
        if not value.isdigit():
            raise ValueError
    except ValueError:
        raise ValueError(f'unable to parse "{value}" as a port: invalid syntax') from None
    if not 0 < port < 1 << 16:
        raise ValueError(f'port "{value}" must be > 0')
    return port


# -- the error channel's final Status (kubelet's ``ServeExec``/``ServeAttach``) -----------------------------


def success_status() -> dict[str, object]:
    return {"metadata": {}, "status": "Success"}


def exit_code_status(command: Sequence[str], code: int) -> dict[str, object]:
    """A command that exited non-zero: reason ``NonZeroExitCode`` and the code as the ``ExitCode`` cause
    (kubectl exits with it and prints ``command terminated with exit code N``). The message is the
    kubelet's around containerd's exit error (``error executing command [sh -c exit 3], exit code 3``)."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"[{' '.join(command)}], exit code {code}",
        "reason": NON_ZERO_EXIT_CODE,
        "details": {"causes": [{"reason": EXIT_CODE_CAUSE, "message": str(code)}]},
    }
