"""certificates.k8s.io/v1 CertificateSigningRequests and their approval flow.

A create records who asked (``spec.username``, ``uid``, ``groups``, ``extra``: set by admission from the
request's user, whatever the body said). ``/approval`` changes only the Approved and Denied conditions,
``/status`` only the rest of the status (the issued certificate, Failed), as upstream's three strategies do.
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

from cryptography import x509

from vplane.apiserver import timeutil
from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.kinds.common import d, lst, rt
from vplane.apiserver.registry import ResourceType, Strategy, Subresource
from vplane.kube import errors, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

USAGES = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
]
APPROVAL_TYPES = ("Approved", "Denied")
MIN_EXPIRATION_SECONDS = 600
SIGNER_MESSAGE = "must be a fully qualified domain and path of the form 'example.com/signer-name'"


def _pem_request(value: Any) -> str | None:
    """Why ``spec.request`` (base64 of PEM) is not a certificate request, or None."""
    if not value:
        return None
    try:
        pem = base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return "illegal base64 data"
    if b"-----BEGIN CERTIFICATE REQUEST-----" not in pem:
        return "PEM block type must be CERTIFICATE REQUEST"
    try:
        x509.load_pem_x509_csr(pem)
    except ValueError as exc:
        return f"x509: malformed certificate request: {exc}"
    return None


def _signer_name(value: str) -> list[str]:
    domain, _, path = value.partition("/")
    if not path or validation.dns1123_subdomain(domain) or "/" in path and not path.strip("/"):
        return [SIGNER_MESSAGE]
    return []


def _conditions(conditions: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, condition in enumerate(lst(conditions)):
        condition = d(condition)
        kind = condition.get("type")
        if not kind:
            causes.append(errors.field_required(f"{path}[{i}].type"))
            continue
        if kind in APPROVAL_TYPES or kind == "Failed":
            if kind in seen:
                causes.append(errors.field_duplicate(f"{path}[{i}].type", kind))
            seen.add(str(kind))
        status = condition.get("status")
        if kind in APPROVAL_TYPES and status not in (None, "", "True"):
            causes.append(errors.field_not_supported(f"{path}[{i}].status", status, ["True"]))
        elif status not in (None, "", "True", "False", "Unknown"):
            causes.append(
                errors.field_not_supported(f"{path}[{i}].status", status, ["False", "True", "Unknown"])
            )
    if {"Approved", "Denied"} <= seen:
        for i, condition in enumerate(lst(conditions)):
            if d(condition).get("type") == "Denied":
                causes.append(
                    errors.field_invalid(
                        f"{path}[{i}].type", "Denied", "Approved and Denied conditions are mutually exclusive"
                    )
                )
    return causes


class CSRStrategy(Strategy):
    supported_field_labels = frozenset({"spec.signerName"})
    status_subresources = frozenset({"status", "approval"})

    def __init__(self, clock: timeutil.Clock = timeutil.wall_clock) -> None:
        self.clock = clock

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        obj["spec"] = copy.deepcopy(old.get("spec"))

    def prepare_for_subresource_update(self, subresource: str, obj: Obj, old: Obj) -> None:
        obj["spec"] = copy.deepcopy(old.get("spec"))
        wanted = d(obj.get("status"))
        status = copy.deepcopy(d(old.get("status")))
        old_conditions = lst(status.get("conditions"))
        if subresource == "approval":
            # Only the Approved and Denied conditions come from the request; the rest stay as they were.
            kept = [c for c in old_conditions if d(c).get("type") not in APPROVAL_TYPES]
            chosen = [c for c in lst(wanted.get("conditions")) if d(c).get("type") in APPROVAL_TYPES]
            status["conditions"] = kept + chosen
        elif subresource == "status":
            status = copy.deepcopy(wanted)
            approvals = [c for c in old_conditions if d(c).get("type") in APPROVAL_TYPES]
            others = [c for c in lst(wanted.get("conditions")) if d(c).get("type") not in APPROVAL_TYPES]
            status["conditions"] = approvals + others
        if not status.get("conditions"):
            status.pop("conditions", None)
        self._stamp(status, old_conditions)
        obj["status"] = status

    def _stamp(self, status: Obj, old_conditions: list[Any]) -> None:
        """Upstream fills lastUpdateTime and lastTransitionTime the client left empty."""
        now = timeutil.rfc3339(self.clock())
        previous = {d(c).get("type"): d(c) for c in old_conditions}
        for condition in lst(status.get("conditions")):
            if not isinstance(condition, dict):
                continue
            condition.setdefault("status", "True")
            before = previous.get(condition.get("type"))
            if not condition.get("lastUpdateTime"):
                condition["lastUpdateTime"] = now
            if not condition.get("lastTransitionTime"):
                same = before is not None and before.get("status") == condition.get("status")
                condition["lastTransitionTime"] = (
                    before.get("lastTransitionTime")
                    if same and before and before.get("lastTransitionTime")
                    else now
                )

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec.request"), errors.field_required("spec.signerName")]
        causes: list[Cause] = []
        request = spec.get("request")
        if not request:
            causes.append(errors.field_required("spec.request"))
        else:
            problem = _pem_request(request)
            if problem is not None:
                causes.append(errors.field_invalid("spec.request", "<certificate request>", problem))
        signer = spec.get("signerName")
        if not signer:
            causes.append(errors.field_required("spec.signerName"))
        elif isinstance(signer, str):
            causes += [errors.field_invalid("spec.signerName", signer, m) for m in _signer_name(signer)]
        for i, usage in enumerate(lst(spec.get("usages"))):
            if usage not in USAGES:
                causes.append(errors.field_not_supported(f"spec.usages[{i}]", usage, USAGES))
        expiration = spec.get("expirationSeconds")
        if isinstance(expiration, int) and expiration < MIN_EXPIRATION_SECONDS:
            causes.append(
                errors.field_invalid(
                    "spec.expirationSeconds",
                    expiration,
                    "may not specify a duration less than 600 seconds (10 minutes)",
                )
            )
        causes += _conditions(d(obj.get("status")).get("conditions"), "status.conditions")
        return causes

    def validate_update(self, obj: Obj, old: Obj, subresource: str) -> list[Cause]:
        causes = self.validate(obj, old)
        old_types = {d(c).get("type") for c in lst(d(old.get("status")).get("conditions"))}
        new_types = {d(c).get("type") for c in lst(d(obj.get("status")).get("conditions"))}
        for kind in APPROVAL_TYPES:
            if kind in old_types and kind not in new_types:
                causes.append(
                    errors.field_forbidden(
                        "status.conditions", f'updates may not remove a condition of type "{kind}"'
                    )
                )
        certificate = d(old.get("status")).get("certificate")
        if certificate and d(obj.get("status")).get("certificate") != certificate:
            causes.append(
                errors.field_forbidden(
                    "status.certificate", "updates may not modify existing certificate content"
                )
            )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"spec.signerName": str(d(obj.get("spec")).get("signerName", ""))}


class RequesterAdmission:
    """Records the requesting user in a new CSR's spec, as upstream's strategy does from the request
    context (a client cannot claim another identity)."""

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if (
            request.operation != "CREATE"
            or rtype.resource != "certificatesigningrequests"
            or rtype.group != "certificates.k8s.io"
            or request.obj is None
        ):
            return
        spec = request.obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        user = request.ctx.user
        spec["username"] = user.name
        for key in ("uid", "groups", "extra"):
            spec.pop(key, None)
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}


def types(clock: timeutil.Clock = timeutil.wall_clock) -> list[ResourceType]:
    return [
        rt(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            False,
            short_names=("csr",),
            strategy=CSRStrategy(clock),
            status=True,
            subresources={
                "approval": Subresource("approval", "CertificateSigningRequest", ("get", "patch", "update"))
            },
        )
    ]
