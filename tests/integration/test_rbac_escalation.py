"""RBAC escalation prevention as kubectl sees it: nobody grants, through a role or a binding, rights they do
not hold, unless they may ``bind`` that role or ``escalate`` roles (upstream's ``policybased`` storages).

Identities are made with impersonation from the admin kubeconfig (``--as``), so each user has exactly the
rights the test binds to it (plus what every authenticated user has: discovery and self-reviews).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration

RBAC = "rbac.authorization.k8s.io"
HELD = "is attempting to grant RBAC permissions not currently held:\n"
EVERYTHING = '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n{NonResourceURLs:["*"], Verbs:["*"]}'


def _uid() -> str:
    return os.urandom(3).hex()


def _rules(*rules: dict[str, list[str]]) -> list[dict[str, list[str]]]:
    return list(rules)


def grant(kubectl: Kubectl, user: str, rules: list[Any], namespace: str = "") -> None:
    """Give ``user`` exactly ``rules``: a Role and RoleBinding in ``namespace``, or cluster-wide ones."""
    name = f"grant-{user}"
    if namespace:
        role = {"kind": "Role", "metadata": {"name": name, "namespace": namespace}, "rules": rules}
        binding: dict[str, Any] = {"kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace}}
    else:
        role = {"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}
        binding = {"kind": "ClusterRoleBinding", "metadata": {"name": name}}
    binding["roleRef"] = {"apiGroup": RBAC, "kind": role["kind"], "name": name}
    binding["subjects"] = [{"apiGroup": RBAC, "kind": "User", "name": user}]
    for obj in (role, binding):
        kubectl.apply(json.dumps({"apiVersion": f"{RBAC}/v1", **obj}))


def manifest(kind: str, name: str, namespace: str = "", **fields: Any) -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return json.dumps({"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, **fields})


def denied(user: str, groups: str = '"system:authenticated"') -> str:
    return f'user "{user}" (groups=[{groups}]) {HELD}'


def test_create_clusterrolebindings_alone_cannot_bind_cluster_admin(
    kubectl: Kubectl, shared_apiserver: APIServerProcess
) -> None:
    """The issue's first case: a user whose only right is `create clusterrolebindings` binds cluster-admin
    to itself (and could then read every Secret). It is 403 with upstream's text, nothing is stored, and the
    user still cannot read Secrets."""
    user = f"mallory-{_uid()}"
    grant(
        kubectl,
        user,
        _rules({"apiGroups": [RBAC], "resources": ["clusterrolebindings"], "verbs": ["create"]}),
    )
    result = kubectl.fails(
        "create",
        "clusterrolebinding",
        f"pwn-{user}",
        "--clusterrole=cluster-admin",
        f"--user={user}",
        f"--as={user}",
    )
    assert result.stderr == (
        f'error: failed to create clusterrolebinding: clusterrolebindings.{RBAC} "pwn-{user}" is forbidden: '
        f"{denied(user)}{EVERYTHING}\n"
    )
    # the same on the wire, with a group of its own: a Status with upstream's reason and details
    body = manifest(
        "ClusterRoleBinding",
        f"pwn-{user}",
        roleRef={"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
        subjects=[{"apiGroup": RBAC, "kind": "User", "name": user}],
    )
    status, _, raw = shared_apiserver.request(
        "POST",
        f"/apis/{RBAC}/v1/clusterrolebindings",
        body.encode(),
        {"Content-Type": "application/json", "Impersonate-User": user, "Impersonate-Group": "g1"},
    )
    answer = json.loads(raw)
    groups = '"g1" "system:authenticated"'
    assert (status, answer["reason"], answer["details"]) == (
        403,
        "Forbidden",
        {"name": f"pwn-{user}", "group": RBAC, "kind": "clusterrolebindings"},
    )
    assert answer["message"] == (
        f'clusterrolebindings.{RBAC} "pwn-{user}" is forbidden: {denied(user, groups)}{EVERYTHING}'
    )
    assert "NotFound" in kubectl.fails("get", "clusterrolebinding", f"pwn-{user}").stderr
    assert "forbidden" in kubectl.fails("get", "secrets", "-A", f"--as={user}").stderr


def test_bind_verb_lets_a_user_bind_exactly_the_roles_named(kubectl: Kubectl) -> None:
    """`bind` on clusterroles/cluster-admin (resourceNames) is enough to bind cluster-admin, and only it."""
    user, other = f"binder-{_uid()}", f"bound-{_uid()}"
    grant(
        kubectl,
        user,
        _rules(
            {"apiGroups": [RBAC], "resources": ["clusterrolebindings"], "verbs": ["create"]},
            {
                "apiGroups": [RBAC],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": ["cluster-admin"],
            },
        ),
    )
    kubectl.run(
        "create",
        "clusterrolebinding",
        f"ok-{other}",
        "--clusterrole=cluster-admin",
        f"--user={other}",
        f"--as={user}",
    )
    assert kubectl.run("auth", "can-i", "get", "secrets", "-A", f"--as={other}").stdout == "yes\n"
    result = kubectl.fails(
        "create", "clusterrolebinding", f"no-{other}", "--clusterrole=view", f"--user={other}", f"--as={user}"
    )
    assert f'clusterrolebindings.{RBAC} "no-{other}" is forbidden: {denied(user)}' in result.stderr
    assert '{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list" "watch"]}' in result.stderr


def test_namespace_admin_cannot_grant_itself_more(kubectl: Kubectl, namespace: str) -> None:
    """A namespace `admin` (the aggregated ClusterRole, bound by a RoleBinding) cannot write a Role with `*`
    nor bind cluster-admin there, but can grant what it holds: a Role of its own rules, `edit`."""
    user, other = f"nsadmin-{_uid()}", f"dev-{_uid()}"
    kubectl.run("create", "rolebinding", "ns-admin", "--clusterrole=admin", f"--user={user}", "-n", namespace)
    star = manifest(
        "Role", "star", namespace, rules=[{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    )
    result = kubectl.fails("create", "-f", "-", f"--as={user}", input=star)
    assert result.stderr == (
        f'Error from server (Forbidden): error when creating "STDIN": roles.{RBAC} "star" is forbidden: '
        f'{denied(user)}{{APIGroups:["*"], Resources:["*"], Verbs:["*"]}}\n'
    )
    result = kubectl.fails(
        "create",
        "rolebinding",
        "ca",
        "--clusterrole=cluster-admin",
        f"--user={user}",
        "-n",
        namespace,
        f"--as={user}",
    )
    assert result.stderr == (
        f'error: failed to create rolebinding: rolebindings.{RBAC} "ca" is forbidden: {denied(user)}{EVERYTHING}\n'
    )
    result = kubectl.fails(
        "create",
        "rolebinding",
        "gone",
        "--clusterrole=no-such-role",
        f"--user={user}",
        "-n",
        namespace,
        f"--as={user}",
    )
    assert (
        result.stderr
        == f'error: failed to create rolebinding: clusterroles.{RBAC} "no-such-role" not found\n'
    )
    kubectl.run(
        "create",
        "role",
        "cm-reader",
        "--verb=get,list",
        "--resource=configmaps",
        "-n",
        namespace,
        f"--as={user}",
    )
    kubectl.run(
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        f"--user={other}",
        "-n",
        namespace,
        f"--as={user}",
    )
    kubectl.run(
        "create",
        "rolebinding",
        "dev-edit",
        "--clusterrole=edit",
        f"--user={other}",
        "-n",
        namespace,
        f"--as={user}",
    )
    assert (
        kubectl.run("auth", "can-i", "create", "secrets", "-n", namespace, f"--as={other}").stdout == "yes\n"
    )


def test_escalate_verb_allows_roles_beyond_the_authors_rights(kubectl: Kubectl, namespace: str) -> None:
    """`escalate` on roles lets its holder write a Role it does not hold; without it the same is 403."""
    plain, escalator = f"plain-{_uid()}", f"escalator-{_uid()}"
    role_rights = {"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["create"]}
    grant(kubectl, plain, [role_rights], namespace)
    grant(kubectl, escalator, [{**role_rights, "verbs": ["create", "escalate"]}], namespace)
    secrets = manifest(
        "Role", "secrets", namespace, rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    )
    result = kubectl.fails("create", "-f", "-", f"--as={plain}", input=secrets)
    assert result.stderr.endswith(
        f'roles.{RBAC} "secrets" is forbidden: {denied(plain)}{{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}}\n'
    )
    kubectl.run("create", "-f", "-", f"--as={escalator}", input=secrets)
    assert (
        kubectl.run("get", "role", "secrets", "-n", namespace, "-o", "name").stdout
        == f"role.{RBAC}/secrets\n"
    )


def test_updates_patches_apply_and_dry_runs_are_checked(kubectl: Kubectl, namespace: str) -> None:
    """Every way to change a role or binding is checked: PUT, JSON/merge patches, server-side apply,
    server dry runs; and joining an existing binding to a role one does not hold."""
    user = f"editor-{_uid()}"
    grant(
        kubectl,
        user,
        _rules(
            {
                "apiGroups": [RBAC],
                "resources": ["roles", "rolebindings"],
                "verbs": ["get", "create", "update", "patch"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ),
        namespace,
    )
    as_user = ("-n", namespace, f"--as={user}")
    kubectl.run("create", "role", "r", "--verb=get", "--resource=configmaps", *as_user)
    missing = '{APIGroups:[""], Resources:["configmaps"], Verbs:["list"]}'
    refused = f'roles.{RBAC} "r" is forbidden: {denied(user)}{missing}\n'
    result = kubectl.fails(
        "patch",
        "role",
        "r",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/rules/0/verbs/-","value":"list"}]',
        *as_user,
    )
    assert result.stderr == f"Error from server (Forbidden): {refused}"
    bigger = manifest(
        "Role",
        "r",
        namespace,
        rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    )
    result = kubectl.fails("replace", "-f", "-", *as_user, input=bigger)
    assert result.stderr == f'Error from server (Forbidden): error when replacing "STDIN": {refused}'
    result = kubectl.fails("apply", "--server-side", "--force-conflicts", "-f", "-", *as_user, input=bigger)
    assert result.stderr == f"Error from server (Forbidden): {refused}"
    result = kubectl.fails(
        "create", "role", "dry", "--verb=list", "--resource=configmaps", "--dry-run=server", *as_user
    )
    assert result.stderr == (
        f'Error from server (Forbidden): roles.{RBAC} "dry" is forbidden: {denied(user)}{missing}\n'
    )
    # a change within the author's rights still works, and labels alone do too
    kubectl.run("label", "role", "r", "team=a", *as_user)
    assert (
        kubectl.run("get", "role", "r", "-n", namespace, "-o", "jsonpath={.rules[0].verbs}").stdout
        == '["get"]'
    )
    # an existing binding to a role the user does not hold cannot be joined
    kubectl.run("create", "rolebinding", "ops", "--clusterrole=edit", "--user=nobody", "-n", namespace)
    result = kubectl.fails(
        "patch",
        "rolebinding",
        "ops",
        "--type=merge",
        "-p",
        json.dumps({"subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}]}),
        *as_user,
    )
    assert result.stderr.startswith(
        f'Error from server (Forbidden): rolebindings.{RBAC} "ops" is forbidden: {denied(user)}'
    )
    subjects = kubectl.run("get", "rolebinding", "ops", "-n", namespace, "-o", "jsonpath={.subjects[*].name}")
    assert subjects.stdout == "nobody"


def test_clusterroles_with_non_resource_urls(kubectl: Kubectl) -> None:
    """A ClusterRole's nonResourceURLs must be held too: `/logs/*` covers `/logs/app.log` but not `/logs`;
    discovery paths every authenticated user holds can be granted."""
    user = f"urls-{_uid()}"
    grant(
        kubectl,
        user,
        _rules(
            {"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create"]},
            {"nonResourceURLs": ["/logs/*"], "verbs": ["get"]},
        ),
    )
    ok = manifest(
        "ClusterRole",
        f"logs-{user}",
        rules=[{"nonResourceURLs": ["/logs/app.log", "/apis/x"], "verbs": ["get"]}],
    )
    kubectl.run("create", "-f", "-", f"--as={user}", input=ok)
    more = manifest(
        "ClusterRole",
        f"more-{user}",
        rules=[{"nonResourceURLs": ["/metrics", "/logs", "/logs/a"], "verbs": ["get"]}],
    )
    result = kubectl.fails("create", "-f", "-", f"--as={user}", input=more)
    assert result.stderr.endswith(
        f'clusterroles.{RBAC} "more-{user}" is forbidden: {denied(user)}'
        '{NonResourceURLs:["/logs"], Verbs:["get"]}\n{NonResourceURLs:["/metrics"], Verbs:["get"]}\n'
    )


def test_aggregation_rule_needs_cluster_admin_rights(kubectl: Kubectl) -> None:
    """Setting an aggregationRule (which can gather any rules) needs cluster-admin's rules."""
    user = f"aggregator-{_uid()}"
    grant(kubectl, user, _rules({"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create"]}))
    agg = manifest(
        "ClusterRole",
        f"agg-{user}",
        aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate": "true"}}]},
    )
    result = kubectl.fails("create", "-f", "-", f"--as={user}", input=agg)
    assert result.stderr == (
        f'Error from server (Forbidden): error when creating "STDIN": clusterroles.{RBAC} "agg-{user}" is '
        "forbidden: must have cluster-admin privileges to use the aggregationRule\n"
    )
    kubectl.run("create", "-f", "-", input=agg)


def test_missing_roles_of_the_author_are_reported(kubectl: Kubectl) -> None:
    """A binding of the author's whose role is gone is named after the missing rules, as upstream's
    `resolution errors`."""
    user = f"dangling-{_uid()}"
    grant(kubectl, user, _rules({"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create"]}))
    kubectl.run(
        "create", "clusterrolebinding", f"dangling-{user}", f"--clusterrole=gone-{user}", f"--user={user}"
    )
    role = manifest(
        "ClusterRole", f"r-{user}", rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    )
    result = kubectl.fails("create", "-f", "-", f"--as={user}", input=role)
    assert result.stderr.endswith(
        f'{denied(user)}{{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}}'
        f'; resolution errors: [clusterroles.{RBAC} "gone-{user}" not found]\n'
    )


def test_system_masters_and_the_admin_are_not_checked(kubectl: Kubectl, namespace: str) -> None:
    """The admin user and any member of system:masters write any role or binding; the same user without
    the group is refused."""
    user = f"master-{_uid()}"
    grant(
        kubectl, user, _rules({"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["create"]}), namespace
    )
    star = manifest(
        "Role", "star", namespace, rules=[{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    )
    assert HELD in kubectl.fails("create", "-f", "-", f"--as={user}", input=star).stderr
    kubectl.run("create", "-f", "-", f"--as={user}", "--as-group=system:masters", input=star)
    kubectl.run(
        "create", "clusterrolebinding", f"admin-{user}", "--clusterrole=cluster-admin", f"--user={user}"
    )
    kubectl.run(
        "create",
        "rolebinding",
        "all",
        "--clusterrole=cluster-admin",
        f"--user={user}",
        "-n",
        namespace,
        f"--as={user}",
    )
