"""The admissionregistration.k8s.io/v1 kinds for webhooks and mutating policies, registered like the
built-in kinds (discovery, OpenAPI, tables come from the registry): ``MutatingWebhookConfiguration``,
``ValidatingWebhookConfiguration``, ``MutatingAdmissionPolicy`` and ``MutatingAdmissionPolicyBinding``.
Their defaults and validation are :mod:`vplane.kube.admissionregistration`'s; the plug-ins that act on
them are :mod:`vplane.apiserver.webhooks` and :mod:`vplane.apiserver.mutatingpolicy`.
"""

from __future__ import annotations

from vplane.apiserver.registry import Registry, ResourceType, Strategy
from vplane.kube import admissionregistration
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

GROUP = "admissionregistration.k8s.io"
_DEFINITIONS = "io.k8s.api.admissionregistration.v1"


class WebhookConfigurationStrategy(Strategy):
    uses_generation = True

    def __init__(self, *, mutating: bool) -> None:
        self.mutating = mutating

    def default(self, obj: Obj) -> None:
        admissionregistration.default_webhook_configuration(obj, mutating=self.mutating)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return admissionregistration.validate_webhook_configuration(obj, old, mutating=self.mutating)


class MutatingAdmissionPolicyStrategy(Strategy):
    uses_generation = True

    def default(self, obj: Obj) -> None:
        admissionregistration.default_mutating_policy(obj)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return admissionregistration.validate_mutating_policy(obj)


class MutatingAdmissionPolicyBindingStrategy(Strategy):
    uses_generation = True

    def default(self, obj: Obj) -> None:
        admissionregistration.default_mutating_policy_binding(obj)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        return admissionregistration.validate_mutating_policy_binding(obj)


def _kind(resource: str, kind: str, strategy: Strategy, storage_version: str = "") -> ResourceType:
    return ResourceType(
        GROUP,
        "v1",
        resource,
        kind,
        False,
        categories=("api-extensions",),
        strategy=strategy,
        schema_definition=f"{_DEFINITIONS}.{kind}",
        storage_version=storage_version,
    )


def types() -> list[ResourceType]:
    return [
        _kind(
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            WebhookConfigurationStrategy(mutating=True),
        ),
        _kind(
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            WebhookConfigurationStrategy(mutating=False),
        ),
        # 1.36 serves the mutating policies as v1 but still stores them as v1beta1 (its storageVersionHash
        # says so); objects here are v1 and need no conversion.
        _kind(
            "mutatingadmissionpolicies",
            "MutatingAdmissionPolicy",
            MutatingAdmissionPolicyStrategy(),
            storage_version="v1beta1",
        ),
        _kind(
            "mutatingadmissionpolicybindings",
            "MutatingAdmissionPolicyBinding",
            MutatingAdmissionPolicyBindingStrategy(),
            storage_version="v1beta1",
        ),
    ]


def install(registry: Registry) -> None:
    for rtype in types():
        registry.add(rtype)
