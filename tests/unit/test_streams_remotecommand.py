"""The channel protocols of exec, attach and port-forward (``vplane.kube.remotecommand``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vplane.kube import remotecommand as rc


def test_negotiation_follows_the_clients_order() -> None:
    assert rc.negotiate(["v5.channel.k8s.io", "v4.channel.k8s.io"], rc.REMOTE_COMMAND_WEBSOCKET) == rc.V5
    assert rc.negotiate(["v9.channel.k8s.io", "v4.channel.k8s.io"], rc.REMOTE_COMMAND_WEBSOCKET) == rc.V4
    assert rc.negotiate(["nope"], rc.REMOTE_COMMAND_WEBSOCKET) is None
    # a client that names none gets "" where that is served (port-forward's channel protocol)
    assert rc.negotiate([], rc.PORT_FORWARD_WEBSOCKET) == ""
    assert rc.negotiate([], rc.REMOTE_COMMAND_WEBSOCKET) is None
    # the Python client offers v5 then v4 for port-forward, which is v4's
    assert rc.negotiate([rc.V5, rc.V4], rc.PORT_FORWARD_WEBSOCKET) == rc.V4


def test_offered_splits_comma_separated_headers() -> None:
    assert rc.offered(["v5.channel.k8s.io, v4.channel.k8s.io", "channel.k8s.io"]) == [rc.V5, rc.V4, rc.V1]


protocols = st.sampled_from(rc.REMOTE_COMMAND_WEBSOCKET)


@given(protocols, st.integers(min_value=0, max_value=4), st.binary(max_size=100))
def test_messages_round_trip(protocol: str, channel: int, data: bytes) -> None:
    assert rc.decode(protocol, rc.encode(protocol, channel, data)) == (channel, data)


def test_base64_protocols_send_text() -> None:
    assert rc.encode(rc.V4_BASE64, rc.STDOUT, b"hi") == "1aGk="
    assert rc.decode(rc.V4_BASE64, "0aGk=") == (rc.STDIN, b"hi")
    with pytest.raises(ValueError):
        rc.decode(rc.V4_BASE64, "0***")
    with pytest.raises(ValueError):
        rc.decode(rc.V4_BASE64, "x")


def test_a_text_frame_on_a_binary_protocol_is_its_bytes() -> None:
    """The Python client writes ``chr(0) + text`` as a text frame; wsstream reads it as bytes."""
    assert rc.decode(rc.V5, "\x00ping\n") == (rc.STDIN, b"ping\n")
    with pytest.raises(ValueError):
        rc.decode(rc.V5, b"")


@given(st.binary(max_size=50), protocols)
def test_any_message_decodes_or_is_refused(junk: bytes, protocol: str) -> None:
    try:
        channel, _ = rc.decode(protocol, junk)
    except ValueError:
        return
    assert 0 <= channel <= 255


def test_resize_messages() -> None:
    assert rc.parse_resize(b'{"Width":80,"Height":24}') == rc.TerminalSize(80, 24)
    for bad in (b"", b"{}", b'{"Width":"x","Height":1}', b'{"Width":-1,"Height":1}', b"[1]"):
        assert rc.parse_resize(bad) is None


def test_kubelet_options() -> None:
    options = rc.kubelet_options(
        {"input": ["1"], "output": ["1"], "error": ["1"], "tty": ["1"], "command": ["sh"]}
    )
    assert options == rc.StreamOptions(stdin=True, stdout=True, stderr=False, tty=True, command=("sh",))
    with pytest.raises(ValueError, match="you must specify at least 1 of stdin, stdout, stderr"):
        rc.kubelet_options({"tty": ["1"], "command": ["sh"]})


def test_the_api_servers_options_become_the_kubelets() -> None:
    query = {
        "command": ["sh", "-c", "exit 3"],
        "stdin": ["true"],
        "stdout": ["1"],
        "stderr": ["false"],
        "tty": ["True"],
    }
    assert rc.kubelet_query("exec", query) == [
        ("input", "1"),
        ("output", "1"),
        ("tty", "1"),
        ("command", "sh"),
        ("command", "-c"),
        ("command", "exit 3"),
    ]
    assert rc.kubelet_query("attach", query) == [("input", "1"), ("output", "1"), ("tty", "1")]
    assert rc.kubelet_query("portforward", {"ports": ["80,443", "8080"]}) == [("port", "80,443,8080")]
    assert rc.kubelet_query("portforward", {}) == []


def test_ports() -> None:
    assert rc.parse_ports(["80,443", "8080"]) == [80, 443, 8080]
    for bad, why in (
        ([""], 'query parameter "port" cannot be empty'),
        (["x"], 'unable to parse "x" as a port'),
        (["70000"], 'unable to parse "70000" as a port'),
        (["-1"], 'unable to parse "-1" as a port'),
        (["0"], 'port "0" must be > 0'),
    ):
        with pytest.raises(ValueError, match=why):
            rc.parse_ports(bad)
    assert rc.parse_spdy_port("80") == 80
    with pytest.raises(ValueError, match='port "0" must be > 0'):
        rc.parse_spdy_port("0")
    with pytest.raises(ValueError, match="unable to parse"):
        rc.parse_spdy_port("+80")


def test_port_channels_and_prefix() -> None:
    assert rc.port_channels(0) == (0, 1)
    assert rc.port_channels(2) == (4, 5)
    assert rc.port_prefix(8080) == b"\x90\x1f"


def test_exit_statuses_as_kubectl_reads_them() -> None:
    status = rc.exit_code_status(["sh", "-c", "exit 3"], 3)
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"] == {"causes": [{"reason": "ExitCode", "message": "3"}]}
    assert status["message"] == (
        "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
    )
    assert json.loads(json.dumps(rc.success_status())) == {"metadata": {}, "status": "Success"}
    assert rc.status_on_error_channel(rc.V5) and not rc.status_on_error_channel(rc.V2)
