"""The image catalogue: reference normalization, Docker's entrypoint/cmd rules, ``$(VAR)`` expansion,
aliases and PATH lookup, pull failures, and the operators' YAML file."""

from __future__ import annotations

import sys

import pytest

from vplane.runtime import images
from vplane.runtime.images import (
    ImageCatalogue,
    ImagePullError,
    InvalidImageName,
    container_argv,
    parse_image,
)


@pytest.mark.parametrize(
    ("reference", "normalized", "name"),
    [
        ("busybox", "docker.io/library/busybox:latest", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox:1.36", "docker.io/library/busybox"),
        ("curlimages/curl:8.5.0", "docker.io/curlimages/curl:8.5.0", "docker.io/curlimages/curl"),
        ("ghcr.io/vplane/vplane:v0.1", "ghcr.io/vplane/vplane:v0.1", "ghcr.io/vplane/vplane"),
        ("localhost:5000/app", "localhost:5000/app:latest", "localhost:5000/app"),
        (
            "alpine@sha256:" + "a" * 64,
            "docker.io/library/alpine@sha256:" + "a" * 64,
            "docker.io/library/alpine",
        ),
    ],
)
def test_references_normalize_as_docker_does(reference: str, normalized: str, name: str) -> None:
    ref = parse_image(reference)
    assert (str(ref), ref.name) == (normalized, name)


@pytest.mark.parametrize(
    "reference", ["", "Busybox", "busy box", "a:b:c/d", "busybox@sha256:xyz", " busybox"]
)
def test_invalid_references_are_refused_with_the_kubelet_words(reference: str) -> None:
    with pytest.raises(InvalidImageName, match="invalid reference format"):
        parse_image(reference)


def test_any_tag_of_vplanes_image_runs_this_vplane() -> None:
    catalogue = ImageCatalogue.load("ghcr.io/vplane/vplane")
    for tag in (
        "ghcr.io/vplane/vplane",
        "ghcr.io/vplane/vplane:v9",
        "ghcr.io/vplane/vplane@sha256:" + "b" * 64,
    ):
        pulled = catalogue.pull(tag)
        argv = container_argv(
            pulled, None, ["apiserver", "--listen", "$(POD_IP):6443"], {"POD_IP": "127.10.0.3"}
        )
        assert argv == [sys.executable, "-m", "vplane.cli.main", "apiserver", "--listen", "127.10.0.3:6443"]


def test_command_replaces_the_entrypoint_and_args_the_default_command() -> None:
    pulled = ImageCatalogue.load("ghcr.io/vplane/vplane").pull("busybox")
    assert container_argv(pulled, None, None, {})[1:] == []  # sh, found on PATH
    assert container_argv(pulled, None, None, {})[0].endswith("/sh")
    argv = container_argv(
        pulled, ["sh", "-c"], ["echo $(GREETING) $$(GREETING) $(MISSING)"], {"GREETING": "hi"}
    )
    assert argv[1:] == ["-c", "echo hi $(GREETING) $(MISSING)"]


def test_an_exec_command_is_not_expanded() -> None:
    pulled = ImageCatalogue.load("ghcr.io/vplane/vplane").pull("busybox")
    argv = container_argv(pulled, ["echo", "$(HOME)"], None, {"HOME": "/x"}, expand_vars=False)
    assert argv[1:] == ["$(HOME)"]


def test_a_missing_program_is_a_start_error_as_runc_words_it() -> None:
    pulled = ImageCatalogue.load("ghcr.io/vplane/vplane").pull("busybox")
    with pytest.raises(
        images.StartError, match=r'exec: "no-such-program": executable file not found in \$PATH'
    ):
        container_argv(pulled, ["no-such-program"], None, {})


def test_unknown_images_fail_to_pull() -> None:
    catalogue = ImageCatalogue.load("ghcr.io/vplane/vplane")
    with pytest.raises(ImagePullError, match='image "docker.io/library/nginx:1.25" not found in the node'):
        catalogue.pull("nginx:1.25")


def test_an_image_whose_program_is_missing_fails_to_pull() -> None:
    catalogue = ImageCatalogue(
        images.entries_from_yaml("images: [{name: tool, requires: [no-such-tool-here]}]")
    )
    with pytest.raises(ImagePullError, match="needs no-such-tool-here, which is not installed"):
        catalogue.pull("tool")


def test_operators_extend_and_override_the_catalogue() -> None:
    text = """
images:
- name: nginx
  entrypoint: [/bin/echo]
  cmd: [serving]
  env: {PORT: "8080"}
  aliases: {nginx: [/bin/echo, nginx]}
- name: busybox
  cmd: [echo, overridden]
"""
    catalogue = ImageCatalogue(
        [*images.builtin_entries("ghcr.io/vplane/vplane"), *images.entries_from_yaml(text)]
    )
    nginx = catalogue.pull("nginx:1.27")
    assert container_argv(nginx, None, None, {}) == ["/bin/echo", "serving"]
    assert container_argv(nginx, ["nginx", "-t"], None, {}) == ["/bin/echo", "nginx", "-t"]
    assert nginx.entry.env["PORT"] == "8080"
    assert catalogue.pull("busybox").entry.cmd == ("echo", "overridden")
    assert nginx.image_id.startswith("docker.io/library/nginx@sha256:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("images: [{entrypoint: [x]}]", r"images\[0\]: an entry needs a 'name'"),
        ("images: [{name: x, colour: red}]", "unknown fields"),
        ("images: [{name: x, cmd: sh}]", "expected a list of strings"),
        ("images: [{name: 'Bad Name'}]", "invalid reference format"),
    ],
)
def test_catalogue_file_mistakes_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        images.entries_from_yaml(text)
