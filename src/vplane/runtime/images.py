"""The image catalogue: which local command an image reference stands for.

There is no container engine: an "image" is an entry in this catalogue, matched by repository (any tag or
digest), that gives what an OCI image config would, an entrypoint, a default command, environment and a
working directory, plus *aliases*, program names that run something else (``vplane`` runs
``python -m vplane.cli.main`` of this very install). Container ``command`` replaces the entrypoint and
``args`` the default command, as in Docker. "Pulling" an image checks that the programs it needs exist on
this machine; an image the catalogue does not know fails to pull as a missing image does.

Built in: vplane's own image (name set by ``RuntimeSettings.vplane_image``), ``curlimages/curl`` (the
machine's curl), ``busybox`` and ``alpine`` (the machine's shell and tools; default command ``sh``) and
``python`` (this interpreter). Operators add or override entries in a YAML file
(``RuntimeSettings.image_catalogue_file``)::

    images:
    - name: nginx                      # normalized to docker.io/library/nginx; matches every tag
      entrypoint: [/usr/sbin/nginx]
      cmd: [-g, daemon off;]
      env: {NGINX_PORT: "8080"}
      path: [/opt/nginx/bin]           # prepended to PATH
      workingDir: /tmp
      requires: [/usr/sbin/nginx]      # "pull" fails unless these exist
      aliases: {python: [/usr/bin/python3]}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_REGISTRY = "docker.io"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH Docker images commonly set; an image's processes search it (then the catalogue's ``path``)."""

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_REGISTRY = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-fA-F0-9]{32,}$")


class InvalidImageName(ValueError):
    """The reference cannot be parsed (the kubelet's ``InvalidImageName``)."""


class ImagePullError(Exception):
    """The image is not in the catalogue, or a program it needs is missing on this machine."""


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """Registry and repository: what catalogue entries match."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        if self.digest:
            return f"{self.name}@{self.digest}"
        return f"{self.name}:{self.tag or 'latest'}"


def parse_image(reference: str) -> ImageRef:
    """Docker's reference grammar, normalized: ``busybox`` is ``docker.io/library/busybox:latest``."""
    text = reference.strip()
    if not text or text != reference or any(c.isspace() for c in text):
        raise InvalidImageName(f"couldn't parse image name {json.dumps(reference)}: invalid reference format")
    name, at, digest = text.partition("@")
    tag = ""
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
    parts = name.split("/")
    registry = DEFAULT_REGISTRY
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, parts = parts[0], parts[1:]
    if registry == DEFAULT_REGISTRY and len(parts) == 1:
        parts = ["library", *parts]
    bad = (
        not _REGISTRY.match(registry)
        or not parts
        or any(not _COMPONENT.match(p) for p in parts)
        or (tag and not _TAG.match(tag))
        or (digest and not _DIGEST.match(digest))
        or (at and not digest)
    )
    if bad:
        raise InvalidImageName(f"couldn't parse image name {json.dumps(reference)}: invalid reference format")
    return ImageRef(
        registry.lower() if registry == DEFAULT_REGISTRY else registry, "/".join(parts), tag, digest
    )


def normalize_name(name: str) -> str:
    """A catalogue entry's repository, normalized like a reference (a tag or digest given is ignored)."""
    return parse_image(name).name


@dataclass(frozen=True)
class ImageEntry:
    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()
    working_dir: str = ""
    requires: tuple[str, ...] = ()
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def digest(self) -> str:
        """A stable ``sha256:`` of the entry: the image ID reported in container statuses."""
        doc = {
            "name": self.name,
            "entrypoint": self.entrypoint,
            "cmd": self.cmd,
            "env": dict(sorted(self.env.items())),
            "path": self.path,
            "workingDir": self.working_dir,
            "aliases": {k: list(v) for k, v in sorted(self.aliases.items())},
        }
        return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class PulledImage:
    ref: ImageRef
    entry: ImageEntry
    size: int
    """Bytes of the programs the image needs (what "Image size" reports)."""

    @property
    def image_id(self) -> str:
        return f"{self.ref.name}@{self.entry.digest()}"

    def search_path(self, env_path: str | None = None) -> str:
        """The PATH its processes search: the container's own PATH if set, else the catalogue's dirs then
        the default."""
        if env_path is not None:
            return env_path
        return os.pathsep.join([*self.entry.path, self.entry.env.get("PATH", DEFAULT_PATH)])


PYSITE = str(Path(__file__).resolve().parent / "pysite")
"""The directory whose ``sitecustomize`` the python image runs first."""


def builtin_entries(vplane_image: str, python: str = sys.executable) -> list[ImageEntry]:
    shell = ImageEntry(name="", cmd=("sh",), env={"PATH": DEFAULT_PATH}, requires=("sh",))
    vplane_env = {"PATH": DEFAULT_PATH}
    if os.environ.get("PYTHONPATH"):
        # A development install (and the tests) runs vplane from a source tree named by PYTHONPATH.
        vplane_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    vplane_cmd = (python, "-m", "vplane.cli.main")
    # The python image's programs start with the pod's network view (vplane.runtime.podbind), and a shell
    # in it finds `python` and `python3` (this interpreter's directory first on PATH) as in the real image.
    python_env = {
        "PATH": os.pathsep.join((str(Path(python).parent), DEFAULT_PATH)),
        "PYTHONPATH": os.pathsep.join(filter(None, (PYSITE, vplane_env.get("PYTHONPATH")))),
    }
    return [
        ImageEntry(
            name=normalize_name(vplane_image),
            entrypoint=("vplane",),
            cmd=("--help",),
            env=vplane_env,
            requires=(python,),
            aliases={"vplane": vplane_cmd, "python": (python,), "python3": (python,)},
        ),
        ImageEntry(
            name=normalize_name("curlimages/curl"),
            cmd=("curl",),
            env={"PATH": DEFAULT_PATH},
            requires=("curl", "sh"),
        ),
        ImageEntry(**{**shell.__dict__, "name": normalize_name("busybox")}),
        ImageEntry(**{**shell.__dict__, "name": normalize_name("alpine")}),
        ImageEntry(
            name=normalize_name("python"),
            cmd=("python3",),
            env=python_env,
            requires=(python,),
            aliases={"python": (python,), "python3": (python,)},
        ),
    ]


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings")
    return tuple(value)


def entries_from_yaml(text: str, source: str = "image catalogue") -> list[ImageEntry]:
    """Entries of an operator's catalogue file; any mistake is a ``ValueError`` naming the entry."""
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("images", []), list):
        raise ValueError(f"{source}: expected a map with a list 'images'")
    entries: list[ImageEntry] = []
    for index, raw in enumerate(doc.get("images") or []):
        where = f"{source}: images[{index}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ValueError(f"{where}: an entry needs a 'name'")
        unknown = set(raw) - {"name", "entrypoint", "cmd", "env", "path", "workingDir", "requires", "aliases"}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        env = raw.get("env") or {}
        aliases = raw.get("aliases") or {}
        if not isinstance(env, dict) or not isinstance(aliases, dict):
            raise ValueError(f"{where}: 'env' and 'aliases' are maps")
        try:
            name = normalize_name(raw["name"])
        except InvalidImageName as exc:
            raise ValueError(f"{where}: {exc}") from None
        entries.append(
            ImageEntry(
                name=name,
                entrypoint=_strings(raw.get("entrypoint"), f"{where}.entrypoint"),
                cmd=_strings(raw.get("cmd"), f"{where}.cmd"),
                env={str(k): str(v) for k, v in env.items()},
                path=_strings(raw.get("path"), f"{where}.path"),
                working_dir=str(raw.get("workingDir") or ""),
                requires=_strings(raw.get("requires"), f"{where}.requires"),
                aliases={str(k): _strings(v, f"{where}.aliases.{k}") for k, v in aliases.items()},
            )
        )
    return entries


def _program_size(program: str, search_path: str) -> int | None:
    found = program if os.sep in program else shutil.which(program, path=search_path)
    if found is None:
        return None
    try:
        return os.stat(found).st_size
    except OSError:
        return None


class ImageCatalogue:
    def __init__(self, entries: Sequence[ImageEntry]) -> None:
        self.entries: dict[str, ImageEntry] = {}
        for entry in entries:
            self.entries[entry.name] = entry  # later entries (the operator's) override

    @classmethod
    def load(cls, vplane_image: str, path: Path | None = None) -> ImageCatalogue:
        entries = builtin_entries(vplane_image)
        if path is not None:
            entries += entries_from_yaml(path.read_text(), str(path))
        return cls(entries)

    def pull(self, reference: str) -> PulledImage:
        """What "pulling" ``reference`` gives: raises :class:`InvalidImageName` or :class:`ImagePullError`."""
        ref = parse_image(reference)
        entry = self.entries.get(ref.name)
        if entry is None:
            raise ImagePullError(f'image "{ref}" not found in the node\'s image catalogue')
        search = os.pathsep.join([*entry.path, entry.env.get("PATH", DEFAULT_PATH)])
        size = 0
        for program in entry.requires:
            found = _program_size(program, search)
            if found is None:
                raise ImagePullError(
                    f'image "{ref}" needs {os.path.basename(program)}, which is not installed on this machine'
                )
            size += found
        return PulledImage(ref, entry, size)


# -- commands -------------------------------------------------------------------------------------


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is a literal ``$``, and
    a reference to an undefined variable is left as written."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(sub, value)


class StartError(Exception):
    """The container's process could not be started (the kubelet's ``StartError``, exit code 128)."""


def container_argv(
    image: PulledImage,
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    env: Mapping[str, str],
    *,
    expand_vars: bool = True,
) -> list[str]:
    """The process to run: Docker's entrypoint/cmd rules, ``$(VAR)`` expansion of the container's own
    command and args (not of an exec's command), then the image's aliases and a PATH lookup."""

    def ex(value: str) -> str:
        return expand(value, env) if expand_vars else value

    if command:
        argv = [ex(a) for a in command] + [ex(a) for a in args or []]
    else:
        tail = [ex(a) for a in args] if args else list(image.entry.cmd)
        argv = list(image.entry.entrypoint) + tail
    if not argv:
        raise StartError("failed to start container process: no command specified")
    alias = image.entry.aliases.get(argv[0])
    if alias:
        argv = [*alias, *argv[1:]]
    program = argv[0]
    if os.sep not in program:
        found = shutil.which(program, path=image.search_path(env.get("PATH")))
        if found is None:
            raise StartError(
                f'failed to start container process: exec: "{program}": executable file not found in $PATH'
            )
        argv[0] = found
    elif not os.access(program, os.X_OK):
        raise StartError(
            f'failed to start container process: exec: "{program}": stat {program}: no such file or directory'
            if not os.path.exists(program)
            else f'failed to start container process: exec: "{program}": permission denied'
        )
    return argv
