"""Upstream's CertificateApproval, CertificateSigning and CertificateSubjectRestriction admission plug-ins.

Once the controller manager signs approved requests, approving one is issuing a certificate the API server
believes, so it needs what upstream asks for: ``approve`` on ``signers.certificates.k8s.io`` named after
the signer (or ``<domain>/*``) to change a request's approval, ``sign`` to write its certificate, and no
``system:masters`` in the subject of a ``kubernetes.io/kube-apiserver-client`` request at all.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

from cryptography import x509
from cryptography.x509.oid import NameOID

from vplane.apiserver.admission import AdmissionRequest
from vplane.apiserver.authz import Attributes
from vplane.kube import errors
from vplane.kube.objects import Obj

GROUP = "certificates.k8s.io"
RESOURCE = "certificatesigningrequests"
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"


def _d(value: object) -> Obj:
    return value if isinstance(value, dict) else {}


def _signer(obj: Obj | None) -> str:
    return str(_d(_d(obj).get("spec")).get("signerName") or "")


def requests_masters(obj: Obj) -> bool:
    """Whether the request's subject names ``system:masters`` as an organization (a group)."""
    try:
        csr = x509.load_pem_x509_csr(base64.b64decode(str(_d(obj.get("spec")).get("request") or "")))
    except ValueError:
        return False  # validation already refused a malformed request
    return any(
        a.value == "system:masters" for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )


class CertificateAdmission:
    def __init__(self, authorize: Callable[[Attributes], Awaitable[bool]]) -> None:
        self.authorize = authorize

    async def _may(self, request: AdmissionRequest, verb: str, signer: str) -> bool:
        """``IsAuthorizedForSignerName``: the signer by name, or every signer of its domain."""
        user = request.ctx.user
        if await self.authorize(Attributes(user, verb, True, "", GROUP, "v1", "signers", "", signer)):
            return True
        domain = signer.split("/", 1)[0]
        return await self.authorize(
            Attributes(user, verb, True, "", GROUP, "v1", "signers", "", f"{domain}/*")
        )

    async def admit(self, request: AdmissionRequest) -> None:
        rtype = request.rtype
        if rtype.group != GROUP or rtype.resource != RESOURCE or request.obj is None:
            return
        signer = _signer(request.obj) or _signer(request.old)
        if request.operation == "CREATE" and not request.subresource:
            if signer == KUBE_APISERVER_CLIENT and requests_masters(request.obj):
                raise errors.forbidden(
                    RESOURCE,
                    GROUP,
                    request.name,
                    f"use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed",
                )
            return
        if request.operation != "UPDATE":
            return
        if request.subresource == "approval":
            if not await self._may(request, "approve", signer):
                raise errors.forbidden(
                    RESOURCE,
                    GROUP,
                    request.name,
                    f'user not permitted to approve requests with signerName "{signer}"',
                )
        elif request.subresource == "status":
            before = _d(_d(request.old).get("status")).get("certificate")
            after = _d(request.obj.get("status")).get("certificate")
            if before != after and not await self._may(request, "sign", signer):
                raise errors.forbidden(
                    RESOURCE,
                    GROUP,
                    request.name,
                    f'user not permitted to sign requests with signerName "{signer}"',
                )
