"""experimental.proxy.customResources: upstream's validation messages, verbatim, and the targets derived."""

from __future__ import annotations

import pytest

from vplane.kube import tenantconfig
from vplane.kube.proxyconfig import Proxy, proxy_targets, split_key, validate, validate_sync_conflicts


def proxy(entries: dict[str, dict[str, object]]) -> Proxy:
    return Proxy.model_validate({"customResources": entries})


TARGET = {"targetVirtualCluster": {"name": "target"}}


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("widgets.example.com/v1", ("widgets", "example.com", "v1")),
        ("*.example.com/v1", ("*", "example.com", "v1")),
        ("myresources.example.com", None),
        ("/v1", None),
        ("*/v1", None),
        ("widgets/v1", None),
        ("a.b/v1/x", None),
        (".example.com/v1", None),
    ],
)
def test_split_key(key: str, parsed: tuple[str, str, str] | None) -> None:
    assert split_key(key) == parsed


def test_invalid_key_message() -> None:
    assert validate(proxy({"myresources.example.com": {"enabled": True, **TARGET}})) == [
        "experimental.proxy.customResources['myresources.example.com']: invalid resource path "
        "\"myresources.example.com\", expected format 'resource.group/version' or '*.group/version' "
        "(e.g., 'resource.my-org.com/v1' or '*.my-org.com/v1')"
    ]


def test_target_required_even_when_disabled() -> None:
    assert validate(proxy({"widgets.example.com/v1": {"enabled": False}})) == [
        "experimental.proxy.customResources['widgets.example.com/v1'].targetVirtualCluster is required"
    ]


def test_an_entry_with_several_faults_reports_each() -> None:
    assert validate(proxy({"widgets.example.com/v1": {"enabled": True, "accessResources": "mine"}})) == [
        "experimental.proxy.customResources['widgets.example.com/v1'].targetVirtualCluster is required",
        "experimental.proxy.customResources['widgets.example.com/v1'].accessResources: invalid value "
        "\"mine\", must be 'owned' or 'all'",
    ]


def test_access_resources_enum() -> None:
    assert validate(proxy({"widgets.example.com/v1": {**TARGET, "accessResources": "mine"}})) == [
        "experimental.proxy.customResources['widgets.example.com/v1'].accessResources: invalid value "
        "\"mine\", must be 'owned' or 'all'"
    ]


def test_wildcard_and_explicit_conflict_only_within_one_version() -> None:
    conflicting = proxy(
        {
            "*.example.com/v1": {"enabled": True, **TARGET},
            "widgets.example.com/v1": {"enabled": True, **TARGET},
        }
    )
    assert validate(conflicting) == [
        'experimental.proxy.customResources: wildcard entry "*.example.com/v1" cannot be combined with '
        'explicit entry "widgets.example.com/v1" for the same group/version'
    ]
    fine = proxy(
        {
            "*.example.com/v1": {"enabled": True, **TARGET},
            "widgets.example.com/v1alpha1": {"enabled": True, **TARGET},
        }
    )
    assert validate(fine) == []


def test_entries_of_one_group_version_must_agree_as_written() -> None:
    other_target = proxy(
        {
            "gadgets.example.com/v1": {"enabled": True, **TARGET},
            "widgets.example.com/v1": {"enabled": True, "targetVirtualCluster": {"name": "other"}},
        }
    )
    assert validate(other_target) == [
        'experimental.proxy.customResources: entries "gadgets.example.com/v1" and "widgets.example.com/v1" '
        'share group/version "example.com/v1" but set different targetVirtualCluster'
    ]
    # omitted and explicit default differ as written (spec §1.2 rule 7)
    omitted_vs_owned = proxy(
        {
            "gadgets.example.com/v1": {"enabled": True, **TARGET},
            "widgets.example.com/v1": {"enabled": True, **TARGET, "accessResources": "owned"},
        }
    )
    assert validate(omitted_vs_owned) == [
        'experimental.proxy.customResources: entries "gadgets.example.com/v1" and "widgets.example.com/v1" '
        'share group/version "example.com/v1" but set different accessResources'
    ]
    # disabled entries take no part in cross-entry checks
    disabled = proxy(
        {
            "gadgets.example.com/v1": {"enabled": True, **TARGET},
            "widgets.example.com/v1": {"enabled": False, "targetVirtualCluster": {"name": "other"}},
        }
    )
    assert validate(disabled) == []


def test_sync_and_proxy_groups_conflict() -> None:
    p = proxy({"widgets.example.com/v1": {"enabled": True, **TARGET}})
    sync = {"toHost": {"customResources": {"gizmos.example.com": {"enabled": True}}}}
    assert validate_sync_conflicts(sync, p) == [
        'custom resource group "example.com" is used in both sync.toHost.customResources '
        "(gizmos.example.com) and proxy.customResources (widgets.example.com/v1). Resources from the same "
        "group cannot be used in both sync and proxy"
    ]
    both = {
        "toHost": {"customResources": {"a.b.c": {"enabled": True}}},
        "fromHost": {"customResources": {"a.b.c": {"enabled": True}}},
    }
    assert validate_sync_conflicts(both, Proxy()) == [
        "custom resource a.b.c exists in sync.toHost.customResources and sync.fromHost.customResources. "
        "Syncing is only supported one way"
    ]


def test_targets_in_alphabetical_port_order_with_defaults() -> None:
    p = proxy(
        {
            "widgets.zeta.io/v1": {"enabled": True, **TARGET},
            "gadgets.alpha.io/v2": {
                "enabled": True,
                "targetVirtualCluster": {"name": "t2", "project": "other"},
                "accessResources": "all",
            },
            "gizmos.alpha.io/v2": {
                "enabled": True,
                "targetVirtualCluster": {"name": "t2", "project": "other"},
                "accessResources": "all",
            },
            "off.beta.io/v1": {"enabled": False, **TARGET},
            "*.gamma.io/v1": {"enabled": True, **TARGET},
        }
    )
    assert validate(p) == []
    targets = proxy_targets(p, "default")
    assert [(t.group_version, t.port) for t in targets] == [
        ("alpha.io/v2", 9100),
        ("gamma.io/v1", 9101),
        ("zeta.io/v1", 9102),
    ]
    alpha, gamma, zeta = targets
    assert (alpha.target_project, alpha.access, alpha.resources) == ("other", "all", ("gadgets", "gizmos"))
    assert (gamma.wildcard, gamma.resources) == (True, ())
    assert (zeta.target_project, zeta.access, zeta.target_label) == ("default", "owned", "default/target")


def test_no_targets_when_every_entry_is_disabled() -> None:
    p = proxy({"widgets.example.com/v1": {"enabled": False, **TARGET}})
    assert validate(p) == []
    assert proxy_targets(p, "default") == []


def test_tenant_config_reports_proxy_errors_as_causes() -> None:
    values = "experimental:\n  proxy:\n    customResources:\n      widgets.example.com/v1:\n        enabled: true\n"
    causes = tenantconfig.validate(values)
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": "experimental.proxy.customResources['widgets.example.com/v1'].targetVirtualCluster "
            "is required",
            "field": "spec.template.helmRelease.values",
        }
    ]
    unknown = "experimental:\n  proxy:\n    customResources:\n      w.e.com/v1:\n        targetVirtualCluster: {nam: x}\n"
    assert tenantconfig.validate(unknown)[0]["field"].startswith(
        "spec.template.helmRelease.values[experimental.proxy.customResources"
    )
    ok = "experimental:\n  proxy:\n    customResources:\n      w.e.com/v1: {enabled: true, targetVirtualCluster: {name: t}}\n"
    assert tenantconfig.validate(ok) == []
    assert [t.group_version for t in tenantconfig.parse(ok).proxy_targets("default")] == ["e.com/v1"]


def test_tenant_config_refuses_yaml_aliases() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    causes = tenantconfig.validate(bomb)
    assert len(causes) == 1 and "aliases are not supported (found *a)" in causes[0]["message"]
