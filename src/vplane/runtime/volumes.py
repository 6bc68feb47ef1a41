"""A pod's volumes as files under its directory, and how its processes find them.

Processes share the machine's file system (no mount namespace), so a volume cannot appear at its
``mountPath``. Each volume is a directory ``<pod dir>/volumes/<name>``; each container gets:

- ``VPLANE_MOUNT_<VOLUME>`` (the name upper-cased, ``-`` and ``.`` as ``_``): the volume's directory
  (with the mount's ``subPath``, for the first mount of that volume);
- ``VPLANE_MOUNTS``: a JSON map of every ``mountPath`` to its directory;
- ``VPLANE_ROOT``: a directory in which each ``mountPath`` exists as a symbolic link to its volume
  (``$VPLANE_ROOT/etc/config/key``), also the container's default working directory.

ConfigMap, Secret, downward API and projected volumes are written the kubelet's way (its "atomic
writer"): the files live in a timestamped directory, ``..data`` links to it and each key links through
``..data``, so an update replaces them all at once. They are rewritten when their source changes
(every ``volume_resync_seconds``). ``emptyDir`` is a directory kept for the pod's life,
``persistentVolumeClaim`` a directory per claim under the runtime's data directory kept after the pod (a
local-path provisioner, without capacity), ``hostPath`` the host path itself. Other volume types fail to
mount with a ``FailedMount`` event.

Service-account credentials: an explicit ``serviceAccountToken`` projection is requested through
TokenRequest. Without one, unless ``automountServiceAccountToken`` is false, the runtime writes the
equivalent of the ``kube-api-access`` volume (token, ``ca.crt``, ``namespace``) that admission adds
upstream, and points ``KUBECONFIG`` at a kubeconfig that uses it (``tokenFile``), so in-cluster clients
that read ``KUBECONFIG`` (kubectl, the kubernetes and lightkube Python clients, vplane) work unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any, Protocol

import yaml

from vplane.kube import quantity
from vplane.kube.objects import Obj

SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
IMPLICIT_TOKEN_VOLUME = "kube-api-access"


class MountError(Exception):
    """A volume cannot be set up (``FailedMount``): the message after ``MountVolume.SetUp failed``."""

    def __init__(self, volume: str, detail: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {detail}')
        self.volume = volume
        self.detail = detail


class ConfigError(Exception):
    """An environment variable cannot be resolved (``CreateContainerConfigError``)."""


class Sources(Protocol):
    """Where volume and environment content comes from (the API, through the runtime's client)."""

    async def configmap(self, namespace: str, name: str) -> Obj | None: ...

    async def secret(self, namespace: str, name: str) -> Obj | None: ...

    async def token(
        self, namespace: str, service_account: str, audiences: list[str], seconds: int, pod: Obj
    ) -> tuple[str, float]: ...


def env_suffix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# -- downward API -------------------------------------------------------------------------------

_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Obj, path: str, host_ip: str, pod_ip: str) -> str:
    """A ``fieldRef`` of the downward API (the kubelet's ``podFieldSelectorRuntimeValue``)."""
    meta, spec = _d(pod.get("metadata")), _d(pod.get("spec"))
    match = _FIELD_PATH.match(path)
    if match:
        return str(_d(meta.get(match.group(1))).get(match.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    if path in ("metadata.labels", "metadata.annotations"):
        items = _d(meta.get(path.split(".")[1]))
        return "\n".join(f"{k}={json.dumps(str(v))}" for k, v in sorted(items.items()))
    raise ConfigError(f'unsupported fieldPath: "{path}"')


def resource_value(pod: Obj, ref: Obj, container_name: str, allocatable: Mapping[str, str]) -> str:
    """A ``resourceFieldRef``: the container's limit or request over ``divisor``, rounded up; a limit that
    is not set is the node's allocatable amount (as upstream)."""
    resource = str(ref.get("resource", ""))
    name = str(ref.get("containerName") or container_name)
    container = next(
        (
            _d(c)
            for key in ("containers", "initContainers")
            for c in _l(_d(pod.get("spec")).get(key))
            if _d(c).get("name") == name
        ),
        {},
    )
    kind, _, what = resource.partition(".")
    value = _d(_d(container.get("resources")).get(kind)).get(what)
    if value is None and kind == "limits":
        value = allocatable.get(what)
    if value is None and kind == "requests":
        value = "0"
    amount = quantity.parse(value) if value is not None else None
    divisor = quantity.parse(ref.get("divisor") or "1") or Decimal(1)
    if amount is None:
        raise ConfigError(f"unsupported container resource : {resource!r}")
    return str(int((amount / divisor).to_integral_value(ROUND_CEILING)))


# -- the atomic writer --------------------------------------------------------------------------


def write_payload(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> bool:
    """Replace the files of a ConfigMap/Secret-like volume at once; False when nothing changed."""
    directory.mkdir(parents=True, exist_ok=True)
    data_link = directory / "..data"
    if data_link.is_symlink():
        current = directory / os.readlink(data_link)
        if _same_payload(current, files):
            return False
    stamp = directory / time.strftime(f"..%Y_%m_%d_%H_%M_%S.{time.time_ns() % 1_000_000_000:09d}")
    stamp.mkdir()
    for rel, (content, mode) in files.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode & 0o777)
    tmp_link = directory / "..data_tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(stamp.name)
    old = os.readlink(data_link) if data_link.is_symlink() else None
    os.replace(tmp_link, data_link)
    wanted_tops = {rel.split("/", 1)[0] for rel in files}
    for top in wanted_tops:
        link = directory / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    for entry in directory.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.is_symlink() and entry.name not in wanted_tops:
            entry.unlink()
    if old and old != stamp.name:
        shutil.rmtree(directory / old, ignore_errors=True)
    return True


def _same_payload(current: Path, files: Mapping[str, tuple[bytes, int]]) -> bool:
    try:
        existing = {str(p.relative_to(current)) for p in current.rglob("*") if p.is_file()}
        if existing != set(files):
            return False
        return all((current / rel).read_bytes() == content for rel, (content, _mode) in files.items())
    except OSError:
        return False


# -- volumes ------------------------------------------------------------------------------------


@dataclass
class TokenFile:
    path: Path
    expires: float
    issued: float

    def due(self, now: float) -> bool:
        return now >= self.issued + 0.8 * (self.expires - self.issued)


@dataclass
class PodVolumes:
    """Materializes one pod's volumes; :meth:`setup` is idempotent and rewrites what changed."""

    pod_dir: Path
    claims_dir: Path
    sources: Sources
    ca_pem: bytes
    api_server: str
    token_seconds: int
    allocatable: Mapping[str, str]
    host_ip: str = "127.0.0.1"
    pod_ip: str = ""
    paths: dict[str, Path] = field(default_factory=dict)
    tokens: dict[str, TokenFile] = field(default_factory=dict)
    kubeconfig: Path | None = None
    warnings: list[str] = field(default_factory=list)
    """Problems that do not stop the pod (an implicit service-account token that could not be issued)."""
    clock: Callable[[], float] = time.time
    token_wait: float = 0.0
    """How long a pod waits for its implicit service-account token before it runs without one."""
    first_setup: float = field(default_factory=time.time)

    @property
    def root(self) -> Path:
        return self.pod_dir / "volumes"

    async def setup(self, pod: Obj) -> None:
        spec = _d(pod.get("spec"))
        namespace = str(_d(pod.get("metadata")).get("namespace", ""))
        for volume in map(_d, _l(spec.get("volumes"))):
            name = str(volume.get("name", ""))
            self.paths[name] = await self._volume(pod, namespace, name, volume)
        await self._service_account(pod, namespace, spec)

    async def _volume(self, pod: Obj, namespace: str, name: str, volume: Obj) -> Path:
        directory = self.root / name
        if "emptyDir" in volume:
            directory.mkdir(parents=True, exist_ok=True)
            return directory
        if "hostPath" in volume:
            path = Path(str(_d(volume["hostPath"]).get("path", "")))
            kind = _d(volume["hostPath"]).get("type") or ""
            if kind in ("DirectoryOrCreate",):
                path.mkdir(parents=True, exist_ok=True)
            elif kind and kind != "FileOrCreate" and not path.exists():
                raise MountError(name, f"hostPath type check failed: {path} is not a {kind.lower()}")
            return path
        if "persistentVolumeClaim" in volume:
            claim = str(_d(volume["persistentVolumeClaim"]).get("claimName", ""))
            path = self.claims_dir / namespace / claim
            path.mkdir(parents=True, exist_ok=True)
            return path
        files: dict[str, tuple[bytes, int]] | None = None
        if "configMap" in volume:
            files = await self._object_files(namespace, name, _d(volume["configMap"]), "configmap")
        elif "secret" in volume:
            files = await self._object_files(namespace, name, _d(volume["secret"]), "secret")
        elif "downwardAPI" in volume:
            source = _d(volume["downwardAPI"])
            files = self._downward(pod, name, source, int(source.get("defaultMode") or 0o644))
        elif "projected" in volume:
            files = await self._projected(pod, namespace, name, _d(volume["projected"]))
        if files is None:
            kinds = [k for k in volume if k != "name"]
            raise MountError(
                name,
                f"volume type {kinds[0] if kinds else 'unknown'!r} is not supported by the vplane node runtime",
            )
        write_payload(directory, files)
        return directory

    async def _object_files(
        self, namespace: str, volume: str, source: Obj, kind: str, default_mode: int | None = None
    ) -> dict[str, tuple[bytes, int]]:
        ref = str(
            source.get("name") if kind == "configmap" else source.get("secretName", source.get("name", ""))
        )
        optional = bool(source.get("optional"))
        obj = await (self.sources.configmap if kind == "configmap" else self.sources.secret)(namespace, ref)
        mode = int(source.get("defaultMode") or default_mode or 0o644)
        if obj is None:
            if optional:
                return {}
            raise MountError(volume, f'{kind} "{ref}" not found')
        data: dict[str, bytes] = {}
        if kind == "configmap":
            data = {k: str(v).encode() for k, v in _d(obj.get("data")).items()}
            data.update({k: base64.b64decode(str(v)) for k, v in _d(obj.get("binaryData")).items()})
        else:
            data = {k: base64.b64decode(str(v)) for k, v in _d(obj.get("data")).items()}
        items = _l(source.get("items"))
        if not items:
            return {k: (v, mode) for k, v in data.items()}
        out: dict[str, tuple[bytes, int]] = {}
        for item in map(_d, items):
            key = str(item.get("key", ""))
            if key not in data:
                if optional:
                    continue
                label = "config" if kind == "configmap" else "secret"
                raise MountError(volume, f"{kind} references non-existent {label} key: {key}")
            out[str(item.get("path") or key)] = (data[key], int(item.get("mode") or mode))
        return out

    def _downward(self, pod: Obj, volume: str, source: Obj, mode: int) -> dict[str, tuple[bytes, int]]:
        out: dict[str, tuple[bytes, int]] = {}
        for item in map(_d, _l(source.get("items"))):
            path = str(item.get("path", ""))
            try:
                if isinstance(item.get("fieldRef"), dict):
                    value = field_value(
                        pod, str(item["fieldRef"].get("fieldPath", "")), self.host_ip, self.pod_ip
                    )
                elif isinstance(item.get("resourceFieldRef"), dict):
                    value = resource_value(pod, item["resourceFieldRef"], "", self.allocatable)
                else:
                    continue
            except ConfigError as exc:
                raise MountError(volume, str(exc)) from None
            out[path] = (value.encode(), int(item.get("mode") or mode))
        return out

    async def _projected(
        self, pod: Obj, namespace: str, volume: str, source: Obj
    ) -> dict[str, tuple[bytes, int]]:
        mode = int(source.get("defaultMode") or 0o644)
        out: dict[str, tuple[bytes, int]] = {}
        for projection in map(_d, _l(source.get("sources"))):
            if isinstance(projection.get("configMap"), dict):
                out.update(
                    await self._object_files(namespace, volume, projection["configMap"], "configmap", mode)
                )
            elif isinstance(projection.get("secret"), dict):
                out.update(await self._object_files(namespace, volume, projection["secret"], "secret", mode))
            elif isinstance(projection.get("downwardAPI"), dict):
                out.update(self._downward(pod, volume, projection["downwardAPI"], mode))
            elif isinstance(projection.get("serviceAccountToken"), dict):
                token_source = projection["serviceAccountToken"]
                path = str(token_source.get("path") or "token")
                token = await self._token(pod, namespace, volume, token_source)
                out[path] = (token.encode(), mode)
        return out

    async def _token(self, pod: Obj, namespace: str, volume: str, source: Obj) -> str:
        account = str(_d(pod.get("spec")).get("serviceAccountName") or "default")
        audiences = [str(source["audience"])] if source.get("audience") else []
        seconds = int(source.get("expirationSeconds") or self.token_seconds)
        try:
            token, expires = await self.sources.token(namespace, account, audiences, seconds, pod)
        except Exception as exc:
            raise MountError(volume, f"failed to fetch token: {exc}") from None
        now = self.clock()
        self.tokens[volume] = TokenFile(self.root / volume, expires, now)
        return token

    async def _service_account(self, pod: Obj, namespace: str, spec: Obj) -> None:
        mounted = self.mount_for(spec, SERVICE_ACCOUNT_PATH)
        directory = mounted
        if directory is None and spec.get("automountServiceAccountToken") is not False:
            directory = self.root / IMPLICIT_TOKEN_VOLUME
            previous = self.tokens.get(IMPLICIT_TOKEN_VOLUME)
            if previous is None or previous.due(self.clock()):
                try:
                    token = await self._token(pod, namespace, IMPLICIT_TOKEN_VOLUME, {})
                except MountError as exc:
                    if self.clock() - self.first_setup < self.token_wait:
                        raise  # the ServiceAccount may be about to be created: wait a little, as a mount
                    self.warnings.append(str(exc))
                    return
                write_payload(
                    directory,
                    {
                        "token": (token.encode(), 0o644),
                        "ca.crt": (self.ca_pem, 0o644),
                        "namespace": (namespace.encode(), 0o644),
                    },
                )
            self.paths[IMPLICIT_TOKEN_VOLUME] = directory
        if directory is None or not (directory / "token").exists():
            return
        ca = directory / "ca.crt"
        if not ca.exists():
            ca = self.pod_dir / "ca.crt"
            ca.write_bytes(self.ca_pem)
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "cluster", "cluster": {"server": self.api_server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": "serviceaccount", "user": {"tokenFile": str(directory / "token")}}],
            "contexts": [
                {
                    "name": "in-cluster",
                    "context": {"cluster": "cluster", "user": "serviceaccount", "namespace": namespace},
                }
            ],
            "current-context": "in-cluster",
        }
        self.kubeconfig = self.pod_dir / "kubeconfig"
        text = yaml.safe_dump(doc, sort_keys=False)
        if not self.kubeconfig.exists() or self.kubeconfig.read_text() != text:
            self.kubeconfig.write_text(text)

    def mount_for(self, spec: Obj, mount_path: str) -> Path | None:
        """The directory a container mount at ``mount_path`` names, if any container has one."""
        for key in ("containers", "initContainers"):
            for container in map(_d, _l(spec.get(key))):
                for mount in map(_d, _l(container.get("volumeMounts"))):
                    if str(mount.get("mountPath", "")).rstrip("/") == mount_path:
                        base = self.paths.get(str(mount.get("name", "")))
                        if base is not None:
                            return base / str(mount.get("subPath") or "")
        return None

    def tokens_due(self) -> bool:
        now = self.clock()
        return any(t.due(now) for t in self.tokens.values())

    def container_mounts(self, container: Obj, root: Path) -> dict[str, str]:
        """The container's environment for its mounts, and its root directory of links (see the module)."""
        env: dict[str, str] = {}
        table: dict[str, str] = {}
        root.mkdir(parents=True, exist_ok=True)
        for mount in map(_d, _l(container.get("volumeMounts"))):
            base = self.paths.get(str(mount.get("name", "")))
            if base is None:
                continue
            target = base / str(mount.get("subPath") or "") if mount.get("subPath") else base
            if mount.get("subPath"):
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists() and base.is_dir() and not (base / "..data").exists():
                    target.mkdir(parents=True, exist_ok=True)
            mount_path = str(mount.get("mountPath", ""))
            table[mount_path] = str(target)
            env.setdefault(f"VPLANE_MOUNT_{env_suffix(str(mount.get('name', '')))}", str(target))
            link = root / mount_path.lstrip("/")
            if mount_path.strip("/"):
                link.parent.mkdir(parents=True, exist_ok=True)
                if link.is_symlink() or link.exists():
                    if link.is_symlink() and os.readlink(link) == str(target):
                        continue
                    if link.is_symlink() or link.is_file():
                        link.unlink()
                    else:
                        continue
                link.symlink_to(target)
        env["VPLANE_MOUNTS"] = json.dumps(table, sort_keys=True)
        env["VPLANE_ROOT"] = str(root)
        return env

    def working_dir(self, container: Obj, root: Path, image_dir: str) -> Path:
        """The process's working directory: a mount it names, else the path itself if it exists on this
        machine, else the same path inside the container's root directory; by default the root directory."""
        wanted = str(container.get("workingDir") or image_dir or "")
        if not wanted:
            return root
        best: tuple[int, Path] | None = None
        for mount in map(_d, _l(container.get("volumeMounts"))):
            mount_path = str(mount.get("mountPath", "")).rstrip("/")
            base = self.paths.get(str(mount.get("name", "")))
            if base is None or not mount_path:
                continue
            if wanted == mount_path or wanted.startswith(mount_path + "/"):
                candidate = base / str(mount.get("subPath") or "") / wanted[len(mount_path) :].lstrip("/")
                if best is None or len(mount_path) > best[0]:
                    best = (len(mount_path), candidate)
        if best is not None:
            return best[1]
        if os.path.isdir(wanted):
            return Path(wanted)
        inside = root / wanted.lstrip("/")
        inside.mkdir(parents=True, exist_ok=True)
        return inside


# -- environment --------------------------------------------------------------------------------


async def container_env(
    pod: Obj,
    container: Obj,
    sources: Sources,
    base: Mapping[str, str],
    host_ip: str,
    pod_ip: str,
    allocatable: Mapping[str, str],
    expand: Callable[[str, Mapping[str, str]], str],
    on_skipped: Callable[[str], Awaitable[None] | None] | None = None,
) -> dict[str, str]:
    """The kubelet's ``makeEnvironmentVariables``: ``base`` (service variables), then ``envFrom``, then
    ``env`` in order, each value expanded against the variables defined before it."""
    namespace = str(_d(pod.get("metadata")).get("namespace", ""))
    env: dict[str, str] = dict(base)
    cache: dict[tuple[str, str], Obj | None] = {}

    async def load(kind: str, name: str) -> Obj | None:
        key = (kind, name)
        if key not in cache:
            cache[key] = await (sources.configmap if kind == "configmap" else sources.secret)(namespace, name)
        return cache[key]

    def values(kind: str, obj: Obj) -> dict[str, str]:
        if kind == "configmap":
            return {k: str(v) for k, v in _d(obj.get("data")).items()}
        return {k: base64.b64decode(str(v)).decode(errors="replace") for k, v in _d(obj.get("data")).items()}

    for source in map(_d, _l(container.get("envFrom"))):
        prefix = str(source.get("prefix") or "")
        for kind, field_name in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(field_name)
            if not isinstance(ref, dict):
                continue
            name = str(ref.get("name", ""))
            obj = await load(kind, name)
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{name}" not found')
            skipped = []
            for key, value in values(kind, obj).items():
                if "=" in key or not key:
                    skipped.append(key)
                    continue
                env[prefix + key] = value
            if skipped and on_skipped is not None:
                label = "configMap" if kind == "configmap" else "secret"
                result = on_skipped(
                    f"Keys [{', '.join(sorted(skipped))}] from the EnvFrom {label} {namespace}/{name} were skipped "
                    "since they are considered invalid environment variable names."
                )
                if result is not None:
                    await result
    for item in map(_d, _l(container.get("env"))):
        name = str(item.get("name", ""))
        if "value" in item or not isinstance(item.get("valueFrom"), dict):
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        source = item["valueFrom"]
        if isinstance(source.get("fieldRef"), dict):
            env[name] = field_value(pod, str(source["fieldRef"].get("fieldPath", "")), host_ip, pod_ip)
        elif isinstance(source.get("resourceFieldRef"), dict):
            env[name] = resource_value(
                pod, source["resourceFieldRef"], str(container.get("name", "")), allocatable
            )
        else:
            for kind, field_name, label in (
                ("configmap", "configMapKeyRef", "ConfigMap"),
                ("secret", "secretKeyRef", "Secret"),
            ):
                ref = source.get(field_name)
                if not isinstance(ref, dict):
                    continue
                obj_name, key = str(ref.get("name", "")), str(ref.get("key", ""))
                obj = await load(kind, obj_name)
                if obj is None:
                    if ref.get("optional"):
                        break
                    raise ConfigError(f'{kind} "{obj_name}" not found')
                found = values(kind, obj)
                if key not in found:
                    if ref.get("optional"):
                        break
                    raise ConfigError(f"couldn't find key {key} in {label} {namespace}/{obj_name}")
                env[name] = found[key]
                break
    return env
