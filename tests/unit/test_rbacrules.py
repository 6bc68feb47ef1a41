"""RBAC escalation prevention: rule coverage, the denial's wording, and the admission plug-in's decisions.

Coverage and formatting follow upstream ``pkg/registry/rbac/validation`` (``Covers``, ``ruleCovers``,
``CompactRules``) and ``CompactString``; the plug-in's rules follow the ``policybased`` storages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vplane.apiserver import builtin, policy
from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.authz import Attributes, RBACAuthorizer, RBACIndex, rule_allows
from vplane.apiserver.context import RequestContext, UserInfo
from vplane.apiserver.escalation import EscalationPrevention
from vplane.apiserver.registry import Registry
from vplane.kube import errors, rbacrules
from vplane.kube.objects import Obj
from vplane.kube.rbacrules import PolicyRule, compact_string, covers, describe_missing, rule_covers
from vplane.kube.requestinfo import RequestInfo

RBAC = "rbac.authorization.k8s.io"


def rule(**fields: list[str]) -> PolicyRule:
    return PolicyRule.from_obj(
        {
            {"groups": "apiGroups", "urls": "nonResourceURLs", "names": "resourceNames"}.get(k, k): v
            for k, v in fields.items()
        }
    )


# -- coverage ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "wanted", "covered"),
    [
        (
            rule(groups=["*"], resources=["*"], verbs=["*"]),
            rule(groups=[""], resources=["secrets"], verbs=["get"]),
            True,
        ),
        (
            rule(groups=[""], resources=["secrets"], verbs=["get"]),
            rule(groups=[""], resources=["secrets"], verbs=["get"]),
            True,
        ),
        (
            rule(groups=[""], resources=["secrets"], verbs=["get"]),
            rule(groups=[""], resources=["secrets"], verbs=["list"]),
            False,
        ),
        (
            rule(groups=[""], resources=["secrets"], verbs=["get"]),
            rule(groups=["apps"], resources=["secrets"], verbs=["get"]),
            False,
        ),
        # a held wildcard covers a wanted one, a held list never covers a wanted "*"
        (
            rule(groups=[""], resources=["pods", "secrets"], verbs=["*"]),
            rule(groups=[""], resources=["*"], verbs=["get"]),
            False,
        ),
        (
            rule(groups=[""], resources=["pods"], verbs=["get", "list"]),
            rule(groups=[""], resources=["pods"], verbs=["*"]),
            False,
        ),
        # subresources: "*/scale" covers any resource's scale; "pods/*" is only the literal "pods/*"
        (
            rule(groups=["apps"], resources=["*/scale"], verbs=["get"]),
            rule(groups=["apps"], resources=["deployments/scale"], verbs=["get"]),
            True,
        ),
        (
            rule(groups=[""], resources=["pods/*"], verbs=["get"]),
            rule(groups=[""], resources=["pods/log"], verbs=["get"]),
            False,
        ),
        (
            rule(groups=[""], resources=["pods/*"], verbs=["get"]),
            rule(groups=[""], resources=["pods/*"], verbs=["get"]),
            True,
        ),
        (
            rule(groups=[""], resources=["*/*"], verbs=["get"]),
            rule(groups=[""], resources=["pods/*"], verbs=["get"]),
            True,
        ),
        (
            rule(groups=[""], resources=["pods"], verbs=["get"]),
            rule(groups=[""], resources=["pods/log"], verbs=["get"]),
            False,
        ),
        # resource names: none held means all names; held names cover only those names, never "all"
        (
            rule(groups=[""], resources=["cm"], verbs=["get"]),
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["a"]),
            True,
        ),
        (
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["a", "b"]),
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["b"]),
            True,
        ),
        (
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["a"]),
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["c"]),
            False,
        ),
        (
            rule(groups=[""], resources=["cm"], verbs=["get"], names=["a"]),
            rule(groups=[""], resources=["cm"], verbs=["get"]),
            False,
        ),
        # non-resource URLs: exact, "*", and prefixes ending in "*" (every trailing "*" trimmed)
        (rule(urls=["*"], verbs=["get"]), rule(urls=["/metrics"], verbs=["get"]), True),
        (rule(urls=["/logs/*"], verbs=["get"]), rule(urls=["/logs/kube.log"], verbs=["get"]), True),
        (rule(urls=["/logs/*"], verbs=["get"]), rule(urls=["/logs"], verbs=["get"]), False),
        (rule(urls=["/logs**"], verbs=["get"]), rule(urls=["/logs*x"], verbs=["get"]), True),
        (rule(urls=["/logs**"], verbs=["get"]), rule(urls=["/logsx"], verbs=["get"]), True),
        (rule(urls=["/healthz"], verbs=["get"]), rule(urls=["/healthz/etcd"], verbs=["get"]), False),
        (rule(urls=["/logs/*"], verbs=["get"]), rule(urls=["/logs/*"], verbs=["get"]), True),
        (rule(urls=["/logs/a"], verbs=["get"]), rule(urls=["/logs/*"], verbs=["get"]), False),
        # resource rules and URL rules never cover each other
        (rule(groups=["*"], resources=["*"], verbs=["*"]), rule(urls=["/metrics"], verbs=["get"]), False),
        (rule(urls=["*"], verbs=["*"]), rule(groups=[""], resources=["pods"], verbs=["get"]), False),
    ],
)
def test_rule_coverage(owner: PolicyRule, wanted: PolicyRule, covered: bool) -> None:
    assert (covers([owner], [wanted]) == []) is covered


def test_covers_returns_the_uncovered_pieces_in_breakdown_order() -> None:
    owner = [rule(groups=[""], resources=["pods"], verbs=["get"])]
    wanted = [rule(groups=["", "apps"], resources=["pods", "secrets"], verbs=["get", "list"], names=["x"])]
    missing = covers(owner, wanted)
    assert [compact_string(p) for p in missing] == [
        '{APIGroups:[""], Resources:["pods"], ResourceNames:["x"], Verbs:["list"]}',
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["x"], Verbs:["get"]}',
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["x"], Verbs:["list"]}',
        '{APIGroups:["apps"], Resources:["pods"], ResourceNames:["x"], Verbs:["get"]}',
        '{APIGroups:["apps"], Resources:["pods"], ResourceNames:["x"], Verbs:["list"]}',
        '{APIGroups:["apps"], Resources:["secrets"], ResourceNames:["x"], Verbs:["get"]}',
        '{APIGroups:["apps"], Resources:["secrets"], ResourceNames:["x"], Verbs:["list"]}',
    ]


def test_rules_without_groups_or_verbs_grant_nothing_and_need_nothing() -> None:
    """A rule with resources but no apiGroups breaks down to nothing (upstream ``BreakdownRule``)."""
    assert covers([], [rule(resources=["pods"], verbs=["get"]), rule(groups=[""], resources=["pods"])]) == []
    assert covers(
        [rule(groups=[""], resources=["pods"])], [rule(groups=[""], resources=["pods"], verbs=["get"])]
    )


def test_malformed_rule_fields_count_as_empty() -> None:
    assert PolicyRule.from_obj({"verbs": "get", "apiGroups": [1, ""], "resources": None}) == PolicyRule(
        api_groups=("",)
    )
    assert PolicyRule.from_obj("nonsense") == PolicyRule()


# -- properties ----------------------------------------------------------------------------------------

_GROUPS = st.sampled_from(["", "apps", "*", "rbac.authorization.k8s.io"])
_RESOURCES = st.sampled_from(
    ["pods", "secrets", "pods/log", "pods/*", "*/log", "*/*", "*", "deployments/scale"]
)
_VERBS = st.sampled_from(["get", "list", "create", "bind", "escalate", "*"])
_NAMES = st.sampled_from(["a", "b", "cluster-admin"])
_URLS = st.sampled_from(
    ["*", "/api", "/api/*", "/api/v1", "/apis*", "/apis/x", "/logs**", "/logs*x", "/logsx", "/"]
)


def _lists(elements: st.SearchStrategy[str], max_size: int = 3) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(elements, max_size=max_size).map(tuple)


policy_rules = st.one_of(
    st.builds(
        PolicyRule,
        api_groups=_lists(_GROUPS),
        resources=_lists(_RESOURCES),
        resource_names=_lists(_NAMES, 2),
        verbs=_lists(_VERBS),
    ),
    st.builds(PolicyRule, non_resource_urls=_lists(_URLS), verbs=_lists(_VERBS)),
)


def _as_obj(r: PolicyRule) -> Obj:
    obj: Obj = {"verbs": list(r.verbs)}
    if r.api_groups:
        obj["apiGroups"] = list(r.api_groups)
    if r.resources:
        obj["resources"] = list(r.resources)
    if r.resource_names:
        obj["resourceNames"] = list(r.resource_names)
    if r.non_resource_urls:
        obj["nonResourceURLs"] = list(r.non_resource_urls)
    return obj


def _attrs_of(piece: PolicyRule) -> Attributes:
    user = UserInfo("u")
    if piece.non_resource_urls:
        return Attributes(user, piece.verbs[0], False, path=piece.non_resource_urls[0])
    resource, _, sub = piece.resources[0].partition("/")
    name = piece.resource_names[0] if piece.resource_names else ""
    return Attributes(user, piece.verbs[0], True, "ns", piece.api_groups[0], "v1", resource, sub, name)


@settings(max_examples=400)
@given(owner=policy_rules, wanted=policy_rules)
@example(owner=rule(urls=["/logs**"], verbs=["get"]), wanted=rule(urls=["/logsx"], verbs=["get"]))
@example(
    owner=rule(groups=[""], resources=["*/log"], verbs=["*"]),
    wanted=rule(groups=[""], resources=["pods/log"], verbs=["get"]),
)
def test_a_piece_is_covered_exactly_when_the_authorizer_would_allow_it(
    owner: PolicyRule, wanted: PolicyRule
) -> None:
    """Coverage never grants more than authorization: each piece of a rule is covered by a held rule
    exactly when the RBAC authorizer would allow that piece's request under the held rule (so an
    escalation check cannot be passed with rights the authorizer would not honour, nor refused for rights
    it would)."""
    for piece in rbacrules.breakdown(wanted):
        assert rule_covers(owner, piece) == rule_allows(_as_obj(owner), _attrs_of(piece)), piece


@settings(max_examples=300)
@given(rules=st.lists(policy_rules, max_size=4), more=st.lists(policy_rules, max_size=3))
def test_held_rules_cover_themselves_and_more_rights_never_miss_more(
    rules: list[PolicyRule], more: list[PolicyRule]
) -> None:
    assert covers(rules, rules) == []
    missing = covers(rules, more)
    assert len(covers(rules + more, more)) == 0
    assert len(covers(rules + [PolicyRule(api_groups=("x",), resources=("y",), verbs=("z",))], more)) <= len(
        missing
    )


@settings(max_examples=300)
@given(owner=st.lists(policy_rules, max_size=3), wanted=st.lists(policy_rules, max_size=3))
def test_covered_rules_leave_nothing_missing_and_compaction_keeps_every_piece(
    owner: list[PolicyRule], wanted: list[PolicyRule]
) -> None:
    """Compaction only merges verbs: the pieces of the compacted rules are the missing pieces (as a multiset
    over group/resource/name/verb and URL/verb)."""
    missing = covers(owner, wanted)
    compacted = rbacrules.compact_rules(missing)
    assert sorted(map(compact_string, missing)) == sorted(
        compact_string(p) for r in compacted for p in rbacrules.breakdown(r)
    )
    assert (missing == []) == (describe_missing(missing) == [])


# -- the denial's text ---------------------------------------------------------------------------------


def test_compact_string_prints_fields_in_upstream_order_with_go_quoting() -> None:
    assert compact_string(rule(groups=[""], resources=["secrets"], verbs=["get"])) == (
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    assert compact_string(rule(urls=["/logs/*", "/x"], verbs=["get", "post"])) == (
        '{NonResourceURLs:["/logs/*" "/x"], Verbs:["get" "post"]}'
    )
    assert compact_string(rule(groups=["a"], resources=["r"], names=['q"u\\o\n'], verbs=["v"])) == (
        '{APIGroups:["a"], Resources:["r"], ResourceNames:["q\\"u\\\\o\\n"], Verbs:["v"]}'
    )
    assert compact_string(PolicyRule()) == "{}"


def test_missing_rules_are_compacted_by_resource_deduplicated_and_sorted() -> None:
    wanted = [
        rule(groups=["", "apps"], resources=["secrets"], verbs=["get", "list"]),
        rule(groups=[""], resources=["secrets"], verbs=["get"]),
        rule(urls=["/b", "/a"], verbs=["get"]),
        rule(urls=["/a"], verbs=["get"]),
        rule(groups=[""], resources=["cm"], verbs=["get", "watch"], names=["x"]),
    ]
    assert describe_missing(covers([], wanted)) == [
        '{APIGroups:[""], Resources:["cm"], ResourceNames:["x"], Verbs:["get" "watch"]}',
        # upstream appends the verbs of every matching piece, repeats included
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "get"]}',
        '{APIGroups:["apps"], Resources:["secrets"], Verbs:["get" "list"]}',
        '{NonResourceURLs:["/a"], Verbs:["get"]}',
        '{NonResourceURLs:["/b"], Verbs:["get"]}',
    ]


def test_escalation_error_has_upstreams_shape() -> None:
    exc = errors.rbac_escalation(
        "roles",
        "x",
        "alice",
        ("g1", "system:authenticated"),
        ['{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'],
    )
    assert (exc.code, exc.reason) == (403, "Forbidden")
    assert exc.message == (
        'roles.rbac.authorization.k8s.io "x" is forbidden: user "alice" (groups=["g1" "system:authenticated"]) '
        "is attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    assert exc.details == {"name": "x", "group": RBAC, "kind": "roles"}


def test_escalation_error_lists_resolution_errors_as_go_prints_an_aggregate() -> None:
    one = errors.rbac_escalation(
        "roles", "x", "u", (), ["{A}", "{B}"], ['clusterroles.rbac.authorization.k8s.io "a" not found']
    )
    assert one.message.endswith(
        'user "u" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{A}\n{B}'
        '; resolution errors: [clusterroles.rbac.authorization.k8s.io "a" not found]'
    )
    two = errors.rbac_escalation("roles", "x", "u", (), ["{A}"], ["e1", "e2", "e1"])
    assert two.message.endswith("; resolution errors: [[e1, e2]]")
    same = errors.rbac_escalation("roles", "x", "u", (), ["{A}"], ["e1", "e1"])
    assert same.message.endswith("; resolution errors: [e1]")


def test_aggregation_rule_error() -> None:
    exc = errors.rbac_aggregation_rule("agg")
    assert exc.message == (
        'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: '
        "must have cluster-admin privileges to use the aggregationRule"
    )


def test_only_gc_fields() -> None:
    old = {"metadata": {"name": "r", "resourceVersion": "3", "labels": {"a": "b"}}, "rules": []}
    gc = {
        "metadata": {"name": "r", "labels": {"a": "b"}, "finalizers": ["f"], "ownerReferences": [{}]},
        "rules": [],
    }
    assert rbacrules.only_gc_fields_change(gc, old)
    assert not rbacrules.only_gc_fields_change({**gc, "rules": [{"verbs": ["get"]}]}, old)
    assert not rbacrules.only_gc_fields_change({"metadata": {"name": "r"}, "rules": []}, old)


# -- the rule resolver ---------------------------------------------------------------------------------


def _index(*objs: Obj) -> RBACIndex:
    index = RBACIndex()
    for obj in (*policy.cluster_roles(), *policy.cluster_role_bindings(), *objs):
        meta = obj["metadata"]
        resource = obj["kind"].lower() + "s"
        index.put(resource, obj, meta.get("namespace", ""), meta["name"])
    return index


def _binding(kind: str, name: str, role_kind: str, role: str, user: str, namespace: str = "") -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [{"kind": "User", "name": user}],
    }


def _role(kind: str, name: str, rules: list[Obj], namespace: str = "", **extra: Any) -> Obj:
    meta: Obj = {"name": name, **extra.pop("metadata", {})}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "rules": rules, **extra}


def test_aggregation_is_transitive_like_upstreams_controller() -> None:
    """``admin`` aggregates ``edit``, which aggregates ``view``: admin holds configmaps and namespaces."""
    rules = rbacrules.rules_from(RBACAuthorizer(_index()).cluster_role_rules("admin"))
    assert covers(rules, [rule(groups=[""], resources=["configmaps"], verbs=["create"])]) == []
    assert covers(rules, [rule(groups=[""], resources=["namespaces"], verbs=["get"])]) == []
    assert covers(rules, [rule(groups=[RBAC], resources=["roles"], verbs=["create"])]) == []


def test_aggregation_cycles_end() -> None:
    a = _role(
        "ClusterRole",
        "a",
        [{"apiGroups": [""], "resources": ["a"], "verbs": ["get"]}],
        metadata={"labels": {"to-b": "1"}},
        aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"to-a": "1"}}]},
    )
    b = _role(
        "ClusterRole",
        "b",
        [{"apiGroups": [""], "resources": ["b"], "verbs": ["get"]}],
        metadata={"labels": {"to-a": "1"}},
        aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"to-b": "1"}}]},
    )
    authz = RBACAuthorizer(_index(a, b))
    assert sorted(r["resources"][0] for r in authz.cluster_role_rules("a")) == ["a", "b"]


def test_rules_with_errors_reports_missing_roles_in_name_order() -> None:
    index = _index(
        _binding("ClusterRoleBinding", "z", "ClusterRole", "gone-z", "u"),
        _binding("ClusterRoleBinding", "a", "ClusterRole", "gone-a", "u"),
        _binding("ClusterRoleBinding", "m", "Thing", "x", "u"),
        _binding("RoleBinding", "r", "Role", "gone-r", "u", "ns"),
        _binding("RoleBinding", "o", "Role", "gone-o", "u", "other"),
    )
    _rules, problems = RBACAuthorizer(index).rules_with_errors(
        UserInfo("u", groups=("system:authenticated",)), "ns"
    )
    assert problems == [
        'clusterroles.rbac.authorization.k8s.io "gone-a" not found',
        'unsupported role reference kind: "Thing"',
        'clusterroles.rbac.authorization.k8s.io "gone-z" not found',
        'roles.rbac.authorization.k8s.io "gone-r" not found',
    ]


# -- the admission plug-in -----------------------------------------------------------------------------


class Plugin:
    """The plug-in over an RBAC index, with an authorizer that answers from RBAC and records what it was
    asked."""

    def __init__(self, *objs: Obj) -> None:
        self.authz = RBACAuthorizer(_index(*objs))
        self.asked: list[Attributes] = []
        self.registry = Registry()
        builtin.install(self.registry)

        async def authorize(attrs: Attributes) -> bool:
            self.asked.append(attrs)
            return self.authz.authorize(attrs).allowed

        self.plugin = EscalationPrevention(self.authz, authorize)

    def admit(
        self,
        user: UserInfo,
        resource: str,
        obj: Obj,
        namespace: str = "",
        old: Obj | None = None,
        url_name: str = "",
    ) -> None:
        rtype = self.registry.get(RBAC, "v1", resource)
        assert rtype is not None
        verb = "update" if old is not None else "create"
        info = RequestInfo(True, "/", verb, "apis", RBAC, "v1", namespace, resource, "", url_name)
        request = AdmissionRequest(
            RequestContext(user, info),
            "UPDATE" if old is not None else "CREATE",
            rtype,
            "",
            namespace,
            obj["metadata"]["name"],
            obj,
            old,
        )
        asyncio.run(self.plugin.admit(request))

    def denial(self, *args: Any, **kwargs: Any) -> str:
        with pytest.raises(errors.StatusError) as info:
            self.admit(*args, **kwargs)
        assert info.value.code in (403, 404)
        return info.value.message


ALICE = UserInfo("alice", groups=("system:authenticated",))
CREATE_CRB = _role(
    "ClusterRole", "crb", [{"apiGroups": [RBAC], "resources": ["clusterrolebindings"], "verbs": ["create"]}]
)
ADMIN_OF_NS = _binding("RoleBinding", "adm", "ClusterRole", "admin", "alice", "ns")


def test_binding_cluster_admin_needs_its_rules_or_bind() -> None:
    p = Plugin(CREATE_CRB, _binding("ClusterRoleBinding", "crb", "ClusterRole", "crb", "alice"))
    pwn = _binding("ClusterRoleBinding", "pwn", "ClusterRole", "cluster-admin", "alice")
    assert p.denial(ALICE, "clusterrolebindings", pwn) == (
        'clusterrolebindings.rbac.authorization.k8s.io "pwn" is forbidden: user "alice" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n{NonResourceURLs:["*"], Verbs:["*"]}'
    )
    bind = p.asked[-1]
    assert (bind.verb, bind.group, bind.resource, bind.name, bind.namespace) == (
        "bind",
        RBAC,
        "clusterroles",
        "cluster-admin",
        "",
    )
    binder = _role(
        "ClusterRole",
        "binder",
        [
            {
                "apiGroups": [RBAC],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": ["cluster-admin"],
            }
        ],
    )
    p = Plugin(binder, _binding("ClusterRoleBinding", "binder", "ClusterRole", "binder", "alice"))
    p.admit(ALICE, "clusterrolebindings", pwn)
    # resourceNames are honoured: binding another role is still checked against held rules
    assert "not currently held" in p.denial(
        ALICE, "clusterrolebindings", _binding("ClusterRoleBinding", "v", "ClusterRole", "admin", "alice")
    )


def test_superusers_are_not_checked() -> None:
    p = Plugin()
    pwn = _binding("ClusterRoleBinding", "pwn", "ClusterRole", "cluster-admin", "alice")
    p.admit(UserInfo("admin", groups=("system:masters",)), "clusterrolebindings", pwn)
    assert p.asked == []


def test_namespace_admin_grants_only_what_it_holds_there() -> None:
    p = Plugin(ADMIN_OF_NS)
    star = _role("Role", "star", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], "ns")
    assert p.denial(ALICE, "roles", star, "ns").endswith(
        'not currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}'
    )
    cm = _role(
        "Role",
        "cm",
        [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "create"]}],
        "ns",
    )
    p.admit(ALICE, "roles", cm, "ns")
    # the same role in a namespace alice does not administer
    assert "not currently held" in p.denial(
        ALICE, "roles", {**cm, "metadata": {"name": "cm", "namespace": "b"}}, "b"
    )
    p.admit(ALICE, "rolebindings", _binding("RoleBinding", "e", "ClusterRole", "edit", "bob", "ns"), "ns")
    assert p.denial(
        ALICE,
        "rolebindings",
        _binding("RoleBinding", "ca", "ClusterRole", "cluster-admin", "alice", "ns"),
        "ns",
    ).startswith('rolebindings.rbac.authorization.k8s.io "ca" is forbidden: user "alice"')
    assert (
        p.denial(
            ALICE, "rolebindings", _binding("RoleBinding", "m", "ClusterRole", "missing", "alice", "ns"), "ns"
        )
        == 'clusterroles.rbac.authorization.k8s.io "missing" not found'
    )
    assert p.denial(
        ALICE, "rolebindings", _binding("RoleBinding", "m", "Role", "missing", "alice", "ns"), "ns"
    ) == ('roles.rbac.authorization.k8s.io "missing" not found')


def test_escalate_verb_is_asked_with_the_urls_name_and_namespace() -> None:
    escalator = _role(
        "Role", "esc", [{"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["escalate"]}], "ns"
    )
    p = Plugin(escalator, _binding("RoleBinding", "esc", "Role", "esc", "alice", "ns"))
    star = _role("Role", "star", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], "ns")
    p.admit(ALICE, "roles", star, "ns")
    asked = p.asked[-1]
    assert (asked.verb, asked.resource, asked.namespace, asked.name) == ("escalate", "roles", "ns", "")
    # escalate limited by resourceNames matches only requests whose URL names the role (updates, apply)
    named = _role(
        "Role",
        "esc",
        [{"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["escalate"], "resourceNames": ["star"]}],
        "ns",
    )
    p = Plugin(named, _binding("RoleBinding", "esc", "Role", "esc", "alice", "ns"))
    assert "not currently held" in p.denial(ALICE, "roles", star, "ns")
    p.admit(ALICE, "roles", star, "ns", old=star, url_name="star")


def test_updates_are_checked_unless_only_gc_fields_change() -> None:
    role = _role("ClusterRole", "big", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
    p = Plugin()
    relabelled = {**role, "metadata": {"name": "big", "labels": {"x": "y"}}}
    assert "not currently held" in p.denial(ALICE, "clusterroles", relabelled, old=role)
    finalized = {**role, "metadata": {"name": "big", "finalizers": ["f"]}}
    p.admit(ALICE, "clusterroles", finalized, old=role)
    binding = _binding("ClusterRoleBinding", "b", "ClusterRole", "cluster-admin", "nobody")
    owned = {**binding, "metadata": {"name": "b", "ownerReferences": [{"name": "o"}]}}
    p.admit(ALICE, "clusterrolebindings", owned, old=binding)
    joined = {**binding, "subjects": [{"kind": "User", "name": "alice"}]}
    assert "not currently held" in p.denial(ALICE, "clusterrolebindings", joined, old=binding)


def test_aggregation_rule_needs_cluster_admin_rules() -> None:
    maker = _role(
        "ClusterRole",
        "maker",
        [{"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create", "update"]}],
    )
    p = Plugin(maker, _binding("ClusterRoleBinding", "maker", "ClusterRole", "maker", "alice"))
    agg = _role(
        "ClusterRole", "agg", [], aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}
    )
    assert p.denial(ALICE, "clusterroles", agg) == errors.rbac_aggregation_rule("agg").message
    plain = _role("ClusterRole", "agg", [])
    p.admit(ALICE, "clusterroles", plain)
    # removing an aggregationRule is a change to it as well
    assert p.denial(ALICE, "clusterroles", plain, old=agg) == errors.rbac_aggregation_rule("agg").message
    # an empty selector list is no aggregation
    p.admit(
        ALICE, "clusterroles", _role("ClusterRole", "e", [], aggregationRule={"clusterRoleSelectors": []})
    )
    p = Plugin(_binding("ClusterRoleBinding", "ca", "ClusterRole", "cluster-admin", "alice"))
    p.admit(ALICE, "clusterroles", agg)


def test_other_kinds_and_subresources_are_not_looked_at() -> None:
    p = Plugin()
    registry = p.registry
    rtype = registry.get("", "v1", "configmaps")
    assert rtype is not None
    info = RequestInfo(True, "/", "create")
    request = AdmissionRequest(
        RequestContext(ALICE, info), "CREATE", rtype, "", "ns", "c", {"metadata": {}}, None
    )
    asyncio.run(p.plugin.admit(request))
    delete = AdmissionRequest(
        RequestContext(ALICE, info),
        "DELETE",
        registry.get(RBAC, "v1", "clusterrolebindings"),  # type: ignore[arg-type]
        "",
        "",
        "cluster-admin",
        None,
        {"metadata": {"name": "cluster-admin"}},
    )
    asyncio.run(p.plugin.admit(delete))
    assert p.asked == []


def test_cached_rules_follow_every_rbac_change() -> None:
    """The authorizer keeps resolved rules between requests; a binding or role written, changed or deleted
    must be seen by the very next decision."""
    index = RBACIndex()
    authorizer = RBACAuthorizer(index)
    alice = UserInfo("alice", groups=("system:authenticated",))
    get_pods = Attributes(alice, "get", True, namespace="ns", resource="pods", version="v1", name="p")
    assert not authorizer.authorize(get_pods).allowed

    role: Obj = {
        "metadata": {"name": "r"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    index.put("clusterroles", role, "", "r")
    assert not authorizer.authorize(get_pods).allowed  # a role alone grants nothing
    binding: Obj = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }
    index.put("clusterrolebindings", binding, "", "b")
    assert authorizer.authorize(get_pods).allowed
    assert authorizer.authorize(get_pods).allowed  # from the cache

    narrowed = {**role, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
    index.put("clusterroles", narrowed, "", "r")
    assert not authorizer.authorize(get_pods).allowed
    index.put("clusterroles", role, "", "r")
    assert authorizer.authorize(get_pods).allowed
    index.put("clusterrolebindings", None, "", "b")
    assert not authorizer.authorize(get_pods).allowed
    # Another user (or the same name with other groups) never reads alice's entry.
    index.put("clusterrolebindings", binding, "", "b")
    assert authorizer.authorize(get_pods).allowed
    bob = UserInfo("bob", groups=("system:authenticated",))
    assert not authorizer.authorize(
        Attributes(bob, "get", True, namespace="ns", resource="pods", name="p")
    ).allowed
    # rules_for hands out copies: a caller changing its list changes nothing cached.
    authorizer.rules_for(alice, "ns").clear()
    assert authorizer.authorize(get_pods).allowed


def test_rules_cache_starts_over_past_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from vplane.apiserver import authz

    monkeypatch.setattr(authz, "RULES_CACHE_ENTRIES", 2)
    authorizer = RBACAuthorizer(RBACIndex())
    for name in ("a", "b", "c"):
        authorizer.rules_for(UserInfo(name), "ns")
    assert len(authorizer._rules) == 1  # cleared when full, then "c" added
