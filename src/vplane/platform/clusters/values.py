"""The agent's Helm values and release decisions, and the kubeconfigs the platform accepts: pure data.

Values precedence (spec §10.3): the Cluster's ``loft.sh/agent-values`` annotation (the UI's "Extra Agent
Values") over the platform's ``agent_values`` setting over the platform's defaults; the connection values
(``token``, ``url``, ``additionalCA``, ``insecureSkipVerify``) are the platform's and always win, so an
annotation cannot point an agent at another platform or give it another key.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import yaml

from vplane.kube import yamlsafe

RELEASE_NAME = "loft"
CHART_NAME = "vplane-agent"
CONNECTION_KEYS = ("token", "url", "additionalCA", "insecureSkipVerify")


class AgentValuesInvalid(ValueError):
    """The Extra Agent Values cannot be used; the message names the cause."""


def parse_agent_values(text: str | None, source: str = "annotation loft.sh/agent-values") -> dict[str, Any]:
    """YAML from a user: the safe loader without aliases (``vplane.kube.yamlsafe``); a mapping or nothing."""
    if not text or not text.strip():
        return {}
    try:
        doc = yamlsafe.load(text)
    except yaml.YAMLError as exc:
        raise AgentValuesInvalid(f"the Extra Agent Values ({source}) are not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AgentValuesInvalid(
            f"the Extra Agent Values ({source}) must be a YAML mapping, not a {type(doc).__name__}"
        )
    bad = _non_string_key(doc, "")
    if bad is not None:
        # Helm's values are JSON objects: a key like `1:` or `true:` has no meaning there (and the release
        # fingerprint could not be computed); say where it is rather than fail the pass later.
        raise AgentValuesInvalid(
            f"the Extra Agent Values ({source}) have a key that is not a string at {bad}"
        )
    return doc


def _non_string_key(node: Any, path: str) -> str | None:
    """The path of the first mapping key that is not a string, anywhere in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                return f"{path}.{key!r}" if path else repr(key)
            found = _non_string_key(value, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found = _non_string_key(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's own rule for values files: maps merge key by key, anything else is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def extra_values(
    defaults: Mapping[str, Any], platform: Mapping[str, Any], annotation: str | None
) -> dict[str, Any]:
    """Everything but the connection values: defaults < platform ``agent_values`` < the annotation."""
    merged = deep_merge(deep_merge(defaults, platform), parse_agent_values(annotation))
    for key in CONNECTION_KEYS:
        merged.pop(key, None)
    return merged


def connection_values(token: str, url: str, ca_pem: bytes | None, insecure: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {"token": token, "url": url}
    if ca_pem:
        values["additionalCA"] = base64.b64encode(ca_pem).decode()
    if insecure:
        values["insecureSkipVerify"] = True
    return values


def desired_values(extra: Mapping[str, Any], connection: Mapping[str, Any]) -> dict[str, Any]:
    return deep_merge(extra, connection)


# -- the release ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """What ``helm list -o json`` and ``helm get values -o json`` say about the agent release."""

    revision: int
    status: str
    chart: str
    """``<name>-<version>`` as helm prints it."""
    values: dict[str, Any]


def chart_version_of(chart: str, name: str = CHART_NAME) -> str:
    return chart[len(name) + 1 :] if chart.startswith(name + "-") else ""


Action = Literal["install", "upgrade", "none"]


def release_action(current: Release | None, values: Mapping[str, Any], version: str) -> tuple[Action, str]:
    """Install when absent; upgrade when the chart version is not exactly the platform's (not a minimum:
    spec §13), the values drifted from what the platform sets, or the last operation did not end
    ``deployed``; the second item says why, for the log."""
    if current is None:
        return "install", "the agent release does not exist"
    deployed = chart_version_of(current.chart)
    if deployed != version:
        return "upgrade", f"the agent chart is {deployed or current.chart}, the platform is {version}"
    if current.status != "deployed":
        return "upgrade", f"the agent release is {current.status}"
    if current.values != dict(values):
        drifted = sorted(
            k for k in set(current.values) | set(values) if current.values.get(k) != values.get(k)
        )
        return "upgrade", "the agent values drifted: " + ", ".join(drifted)
    return "none", ""


# -- who wrote a revision -------------------------------------------------------------------------------
# Anyone with helm can write the release (the connect command, a hand-run upgrade, a GitOps tool), and
# every write reads "Upgrade complete" in `helm history`. The platform signs its own revisions through
# helm's description, so the history tells its writes from everyone else's, and shows when it wrote the
# same chart and values again: the mark of a release something keeps moving away (the doctor's loop row).

PLATFORM_WRITER = "vplane-platform"
_WHY_LIMIT = 200
_PLATFORM_REVISION = re.compile(
    rf"^(?:Install|Upgrade) complete by {PLATFORM_WRITER} \(([0-9a-f]{{12}})\)(?:: (.*))?$", re.DOTALL
)


def content_digest(version: str, values: Mapping[str, Any]) -> str:
    """12 hex characters of SHA-256 over the chart version and the values: equal digests, equal release
    content. The token is among the values; 48 bits of a digest of a random key reveal nothing of it."""
    raw = orjson.dumps([version, values], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()[:12]


def release_description(action: Action, why: str, version: str, values: Mapping[str, Any]) -> str:
    """The description of a revision the platform writes (``helm upgrade --description``): helm's own words
    first (what people grep for), then who wrote it, what (:func:`content_digest`) and why."""
    done = "Install complete" if action == "install" else "Upgrade complete"
    text = f"{done} by {PLATFORM_WRITER} ({content_digest(version, values)})"
    why = " ".join(why.split())[:_WHY_LIMIT]  # one line, bounded: key names come from users' values
    return f"{text}: {why}" if why else text


@dataclass(frozen=True)
class PlatformRevision:
    digest: str
    why: str


def platform_revision(description: str) -> PlatformRevision | None:
    """What the platform wrote in a revision's description; None for a revision it did not write (helm
    replaces the description of a failed or pending operation, so those read as nobody's)."""
    found = _PLATFORM_REVISION.match(description)
    return PlatformRevision(found.group(1), found.group(2) or "") if found else None


# -- kubeconfigs the platform holds ------------------------------------------------------------------

_CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority-data", "insecure-skip-verify", "tls-server-name", "proxy-url"}
)
_USER_FIELDS = frozenset({"token", "client-certificate-data", "client-key-data", "username", "password"})


class KubeconfigRefused(ValueError):
    pass


def sanitize_kubeconfig(text: str, context: str | None = None) -> dict[str, Any]:
    """One context of a kubeconfig a Cluster's ``spec.config`` Secret holds, inline credentials only.

    The platform refuses ``exec`` and ``auth-provider`` users and file references (``tokenFile``,
    ``client-certificate``, ``certificate-authority`` paths): whoever can write that Secret would
    otherwise make the platform (and the helm it runs) execute commands or read the platform's own
    files."""
    try:
        doc = yamlsafe.load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigRefused(f"the kubeconfig is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise KubeconfigRefused("the kubeconfig is not a YAML mapping")
    name = context or doc.get("current-context")
    contexts = {
        c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)
    }
    if not name and len(contexts) == 1:
        name = next(iter(contexts))
    if name not in contexts:
        raise KubeconfigRefused(
            f"the kubeconfig has no context {name!r}" if name else "the kubeconfig names no context"
        )
    ctx = contexts[name]
    clusters = {
        c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or [] if isinstance(c, dict)
    }
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or [] if isinstance(u, dict)}
    cluster = clusters.get(ctx.get("cluster"))
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise KubeconfigRefused(f"context {name!r} names no cluster with a server")
    user = users.get(ctx.get("user"), {})
    if not isinstance(user, dict):
        raise KubeconfigRefused(f"context {name!r} names an invalid user")
    for field, allowed, what in ((cluster, _CLUSTER_FIELDS, "cluster"), (user, _USER_FIELDS, "user")):
        refused = sorted(k for k in field if k not in allowed and not str(k).startswith("extensions"))
        if refused:
            raise KubeconfigRefused(
                f"the kubeconfig's {what} uses {', '.join(refused)}: the platform accepts inline "
                "credentials only (no exec or auth-provider plugins, no file paths)"
            )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": dict(cluster)}],
        "users": [{"name": "user", "user": dict(user)}],
        "contexts": [{"name": "cluster", "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": "cluster",
    }


def kubeconfig(server: str, ca_pem: bytes, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cluster",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "cluster", "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": "cluster",
    }
