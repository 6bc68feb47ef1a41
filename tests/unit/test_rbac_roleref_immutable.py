"""A binding's roleRef cannot change; the refusal prints the new RoleRef as upstream's ``field.Invalid`` does
(Go's ``%#v`` of the struct). It printed ``"dict"``, which a Helm upgrade narrowing the agent's
``rbac.clusterRole`` showed in the Cluster's status.message (replay of runbook 003)."""

from __future__ import annotations

from vplane.apiserver.kinds.apis import RBACStrategy


def _binding(role: str) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "loft", "namespace": "vcluster-platform"}],
    }


def test_changing_role_ref_is_refused_with_the_new_ref_printed_as_upstream() -> None:
    causes = RBACStrategy().validate(_binding("view"), _binding("cluster-admin"))
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", '
            'Name:"view"}: cannot change roleRef',
            "field": "roleRef",
        }
    ]


def test_an_unchanged_role_ref_is_accepted() -> None:
    assert RBACStrategy().validate(_binding("view"), _binding("view")) == []
