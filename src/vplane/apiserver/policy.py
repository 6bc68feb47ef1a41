"""Objects every fresh server starts with: system namespaces and the default RBAC policy.

The roles mirror upstream's bootstrap policy where clients depend on them (``cluster-admin``, the
``admin``/``edit``/``view`` aggregation, discovery and self-review for every authenticated user, and the
delegation roles extension API servers use).
"""

from __future__ import annotations

from vplane.kube.objects import Obj

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _cluster_role(
    name: str,
    rules: list[Obj],
    labels: dict[str, str] | None = None,
    aggregate: list[dict[str, str]] | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
        },
        "rules": rules,
    }
    if aggregate:
        obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": m} for m in aggregate]}
    return obj


def _cluster_binding(name: str, role: str, subjects: list[Obj]) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def _group(name: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}


def cluster_roles() -> list[Obj]:
    core = ["configmaps", "secrets", "services", "endpoints", "pods", "pods/log", "serviceaccounts", "events"]
    apps = ["deployments", "replicasets", "deployments/scale"]
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_role("admin", [], aggregate=[{"rbac.authorization.k8s.io/aggregate-to-admin": "true"}]),
        _cluster_role(
            "edit",
            [],
            labels={"rbac.authorization.k8s.io/aggregate-to-admin": "true"},
            aggregate=[{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}],
        ),
        _cluster_role(
            "view",
            [],
            labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
            aggregate=[{"rbac.authorization.k8s.io/aggregate-to-view": "true"}],
        ),
        _cluster_role(
            "system:aggregate-to-admin",
            [
                {
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["roles", "rolebindings"],
                    "verbs": _READ + _WRITE,
                },
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["localsubjectaccessreviews"],
                    "verbs": ["create"],
                },
            ],
            labels={"rbac.authorization.k8s.io/aggregate-to-admin": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-edit",
            [
                {"apiGroups": [""], "resources": core, "verbs": _READ + _WRITE},
                {"apiGroups": ["apps"], "resources": apps, "verbs": _READ + _WRITE},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": _READ + _WRITE},
            ],
            labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-view",
            [
                {
                    "apiGroups": [""],
                    "resources": [r for r in core if r != "secrets"] + ["namespaces"],
                    "verbs": _READ,
                },
                {"apiGroups": ["apps"], "resources": apps, "verbs": _READ},
            ],
            labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"},
        ),
        _cluster_role(
            "system:discovery",
            [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/readyz",
                        "/version",
                        "/version/",
                        "/openapi",
                        "/openapi/*",
                    ],
                    "verbs": ["get"],
                },
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [
                {
                    "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"],
                },
            ],
        ),
        _cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _cluster_role(
            "system:auth-delegator",
            [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["subjectaccessreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
    ]


def cluster_role_bindings() -> list[Obj]:
    return [
        _cluster_binding("cluster-admin", "cluster-admin", [_group("system:masters")]),
        _cluster_binding("system:discovery", "system:discovery", [_group("system:authenticated")]),
        _cluster_binding("system:basic-user", "system:basic-user", [_group("system:authenticated")]),
        _cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            [_group("system:authenticated"), _group("system:unauthenticated")],
        ),
    ]


def namespaces() -> list[Obj]:
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in SYSTEM_NAMESPACES]


def extension_authentication(client_ca: str, requestheader_ca: str, allowed_names: list[str]) -> list[Obj]:
    """``kube-system/extension-apiserver-authentication`` and the role that lets extension servers read it.

    Extension API servers (anything behind an APIService) read it to learn which client CA to trust and
    which front-proxy certificate may assert ``X-Remote-*`` identities.
    """
    import json

    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": {
                "client-ca-file": client_ca,
                "requestheader-client-ca-file": requestheader_ca,
                "requestheader-allowed-names": json.dumps(allowed_names),
                "requestheader-username-headers": '["X-Remote-User"]',
                "requestheader-uid-headers": '["X-Remote-Uid"]',
                "requestheader-group-headers": '["X-Remote-Group"]',
                "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {
                "name": "extension-apiserver-authentication-reader",
                "namespace": "kube-system",
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            },
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["extension-apiserver-authentication"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
    ]
