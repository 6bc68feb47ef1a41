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
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
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


def _rule(group: str, resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": [group], "resources": resources, "verbs": list(verbs)}


def cluster_roles() -> list[Obj]:
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
            # Upstream's bootstrap policy: user-level actions in a namespace, not the system's `/status`
            # subresources or quota and limits.
            [
                _rule(
                    "",
                    [
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward",
                        "secrets",
                        "services/proxy",
                    ],
                    _READ,
                ),
                _rule("", ["serviceaccounts"], ["impersonate"]),
                _rule("", ["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"], _WRITE),
                _rule("", ["pods/eviction", "serviceaccounts/token"], ["create"]),
                _rule(
                    "",
                    [
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "endpoints",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets",
                        "events",
                    ],
                    _WRITE,
                ),
                _rule(
                    "apps",
                    [
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale",
                    ],
                    _WRITE,
                ),
                _rule("autoscaling", ["horizontalpodautoscalers"], _WRITE),
                _rule("batch", ["jobs", "cronjobs"], _WRITE),
                _rule("policy", ["poddisruptionbudgets"], _WRITE),
                _rule("networking.k8s.io", ["networkpolicies", "ingresses"], _WRITE),
                _rule("discovery.k8s.io", ["endpointslices"], _WRITE),
            ],
            labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-view",
            [
                _rule(
                    "",
                    [
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps",
                    ],
                    _READ,
                ),
                _rule(
                    "",
                    [
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log",
                    ],
                    _READ,
                ),
                _rule("", ["namespaces"], _READ),
                _rule(
                    "apps",
                    [
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                    ],
                    _READ,
                ),
                _rule("autoscaling", ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], _READ),
                _rule("batch", ["jobs", "cronjobs", "cronjobs/status", "jobs/status"], _READ),
                _rule("policy", ["poddisruptionbudgets", "poddisruptionbudgets/status"], _READ),
                _rule("networking.k8s.io", ["networkpolicies", "ingresses", "ingresses/status"], _READ),
                _rule("discovery.k8s.io", ["endpointslices"], _READ),
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
            "system:monitoring",
            [
                {
                    "nonResourceURLs": [
                        "/healthz",
                        "/healthz/*",
                        "/livez",
                        "/livez/*",
                        "/metrics",
                        "/metrics/slis",
                        "/readyz",
                        "/readyz/*",
                    ],
                    "verbs": ["get"],
                },
            ],
        ),
        _cluster_role(
            "system:service-account-issuer-discovery",
            [
                {
                    "nonResourceURLs": [
                        "/.well-known/openid-configuration",
                        "/.well-known/openid-configuration/",
                        "/openid/v1/jwks",
                        "/openid/v1/jwks/",
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
        _cluster_binding("system:monitoring", "system:monitoring", [_group("system:monitoring")]),
        _cluster_binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            [_group("system:serviceaccounts")],
        ),
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
