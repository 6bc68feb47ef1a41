"""CertificateSigningRequest signing and cleaning (upstream ``pkg/controller/certificates/signer`` and
``.../cleaner``).

``csrsigning`` signs approved requests for ``kubernetes.io/kube-apiserver-client``,
``kubernetes.io/kube-apiserver-client-kubelet`` and ``kubernetes.io/kubelet-serving`` with the cluster CA
(``cluster_signing_cert_file``/``cluster_signing_key_file``; ``vplane apiserver`` gives its own CA), after
upstream's checks for each signer; a request that fails them gets the ``Failed`` condition with reason
``SignerValidationFailure`` and upstream's message. The certificate keeps the request's subject and
subject alternative names, carries exactly the requested usages, starts five minutes in the past and
lasts ``expirationSeconds`` (at least 10 minutes) capped at ``cluster_signing_duration_seconds`` (one
year), less the five minutes when it lasts 8 hours or more, and never past the CA.

``csrapproving`` approves kubelet client requests (signer ``kubernetes.io/kube-apiserver-client-kubelet``,
a valid kubelet client request) when a SubjectAccessReview for the requester allows ``create`` on
``certificatesigningrequests/selfnodeclient`` (a node renewing its own certificate: the requester is the
common name) or ``certificatesigningrequests/nodeclient`` (a bootstrapper asking for a node), with
upstream's ``AutoApproved`` condition and messages; anything else is left to a human. Pending requests are
looked at again every resync period (12 to 24 h), so a requester granted the permission later is approved.

``csrcleaner`` deletes requests that are done with: approved or denied or failed for an hour, pending for
a day, or whose certificate has expired (each deadline a setting).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from vplane.controllers.client import Resource
from vplane.controllers.kcm import pods as podutil
from vplane.controllers.kcm.context import ControllerContext, ManagedController
from vplane.controllers.kcm.timefmt import format_time, parse_time
from vplane.kube.errors import StatusError
from vplane.kube.objects import Obj

CSRS = Resource("certificates.k8s.io/v1", "CertificateSigningRequest", "certificatesigningrequests", False)

KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
SIGNERS = (KUBE_APISERVER_CLIENT, KUBELET_CLIENT, KUBELET_SERVING)

BACKDATE_SECONDS = 300.0
SHORT_SECONDS = 8 * 3600.0
MIN_DURATION_SECONDS = 600.0

_KEY_USAGES = {
    "signing": "digital_signature",
    "digital signature": "digital_signature",
    "content commitment": "content_commitment",
    "key encipherment": "key_encipherment",
    "key agreement": "key_agreement",
    "data encipherment": "data_encipherment",
    "cert sign": "key_cert_sign",
    "crl sign": "crl_sign",
    "encipher only": "encipher_only",
    "decipher only": "decipher_only",
}
_EXT_KEY_USAGES = {
    "any": ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "ipsec end system": ObjectIdentifier("1.3.6.1.5.5.7.3.5"),
    "ipsec tunnel": ObjectIdentifier("1.3.6.1.5.5.7.3.6"),
    "ipsec user": ObjectIdentifier("1.3.6.1.5.5.7.3.7"),
    "timestamping": ExtendedKeyUsageOID.TIME_STAMPING,
    "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
    "microsoft sgc": ObjectIdentifier("1.3.6.1.4.1.311.10.3.3"),
    "netscape sgc": ObjectIdentifier("2.16.840.1.113730.4.1"),
}


# -- pure decisions -------------------------------------------------------------------------------------------


def parse_request(csr: Obj) -> x509.CertificateSigningRequest:
    """``spec.request``: base64 on the wire, of a PEM ``CERTIFICATE REQUEST``."""
    raw = base64.b64decode(str(podutil.spec(csr).get("request") or ""))
    return x509.load_pem_x509_csr(raw)


def _organizations(request: x509.CertificateSigningRequest) -> list[str]:
    return [str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def _common_name(request: x509.CertificateSigningRequest) -> str:
    names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _sans(request: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def _san_kinds(request: x509.CertificateSigningRequest) -> dict[str, int]:
    sans = _sans(request)
    if sans is None:
        return {"dns": 0, "ip": 0, "email": 0, "uri": 0}
    return {
        "dns": len(sans.get_values_for_type(x509.DNSName)),
        "ip": len(sans.get_values_for_type(x509.IPAddress)),
        "email": len(sans.get_values_for_type(x509.RFC822Name)),
        "uri": len(sans.get_values_for_type(x509.UniformResourceIdentifier)),
    }


def validate(signer: str, request: x509.CertificateSigningRequest, usages: Sequence[str]) -> str | None:
    """Upstream's checks for each signer (``ValidateKubeletServingCSR``, ``ValidateKubeletClientCSR``,
    ``validAPIServerClientUsages``): the failure message, or None."""
    given = set(usages)
    if signer == KUBE_APISERVER_CLIENT:
        for usage in usages:
            if usage not in ("digital signature", "key encipherment", "client auth"):
                return f"invalid usage for client certificate: {usage}"
        if "client auth" not in given:
            return "missing required usage for client certificate: client auth"
        return None
    sans = _san_kinds(request)
    if _organizations(request) != ["system:nodes"]:
        return "subject organization is not system:nodes"
    if signer == KUBELET_SERVING:
        if not sans["dns"] and not sans["ip"]:
            return "DNS or IP subjectAltName is required"
        if sans["email"]:
            return "Email subjectAltNames are not allowed"
        if sans["uri"]:
            return "URI subjectAltNames are not allowed"
        required = {"digital signature", "key encipherment", "server auth"}
        if given not in (required, {"digital signature", "server auth"}):
            return "usages did not match [digital signature key encipherment server auth]"
        if not _common_name(request).startswith("system:node:"):
            return "subject common name does not begin with system:node:"
        return None
    if sans["dns"]:
        return "DNS subjectAltNames are not allowed"
    if sans["email"]:
        return "Email subjectAltNames are not allowed"
    if sans["ip"]:
        return "IP subjectAltNames are not allowed"
    if sans["uri"]:
        return "URI subjectAltNames are not allowed"
    if not _common_name(request).startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    required = {"digital signature", "key encipherment", "client auth"}
    if given not in (required, {"digital signature", "client auth"}):
        return "usages did not match [client auth digital signature key encipherment]"
    return None


def duration(expiration_seconds: object, cert_ttl: float) -> float:
    """``signer.duration``: the requested lifetime, at least 10 minutes, at most the signer's."""
    if not isinstance(expiration_seconds, int) or isinstance(expiration_seconds, bool):
        return cert_ttl
    return max(min(float(expiration_seconds), cert_ttl), MIN_DURATION_SECONDS)


def validity(now: float, ttl: float, signer_not_after: float) -> tuple[float, float]:
    """``PermissiveSigningPolicy``: (notBefore, notAfter)."""
    not_before = now - BACKDATE_SECONDS
    not_after = now + ttl if ttl < SHORT_SECONDS else now + ttl - BACKDATE_SECONDS
    if signer_not_after <= not_before or signer_not_after <= now:
        raise ValueError(f"the signer has expired: NotAfter={format_time(signer_not_after)}")
    return not_before, min(not_after, signer_not_after)


@dataclass(frozen=True)
class SigningCA:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> SigningCA:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
            raise ValueError("the signing key must be an EC, RSA or Ed25519 private key")
        return cls(x509.load_pem_x509_certificate(cert_pem), key)


def sign(
    ca: SigningCA, request: x509.CertificateSigningRequest, usages: Sequence[str], ttl: float, now: float
) -> bytes:
    """The certificate, PEM: the request's subject, key and subject alternative names, the requested usages
    and nothing else of the request's extensions."""
    not_before, not_after = validity(now, ttl, ca.cert.not_valid_after_utc.timestamp())
    flags = dict.fromkeys(
        (
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    extended: list[ObjectIdentifier] = []
    for usage in usages:
        if usage in _KEY_USAGES:
            flags[_KEY_USAGES[usage]] = True
        elif usage in _EXT_KEY_USAGES and _EXT_KEY_USAGES[usage] not in extended:
            extended.append(_EXT_KEY_USAGES[usage])
        else:
            raise ValueError(f"unrecognized usage: {usage}")
    public_key = request.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(ca.cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.datetime.fromtimestamp(not_before, datetime.UTC))
        .not_valid_after(datetime.datetime.fromtimestamp(not_after, datetime.UTC))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if any(flags.values()):
        if not flags["key_agreement"]:
            flags["encipher_only"] = flags["decipher_only"] = False
        builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    sans = _sans(request)
    if sans is not None:
        builder = builder.add_extension(sans, critical=False)
    algorithm = None if isinstance(ca.key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(ca.key, algorithm).public_bytes(serialization.Encoding.PEM)


def condition(csr: Obj, kind: str) -> Obj | None:
    for cond in podutil.status(csr).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind and cond.get("status", "True") == "True":
            return cond
    return None


def needs_signing(csr: Obj) -> bool:
    return (
        condition(csr, "Approved") is not None
        and condition(csr, "Failed") is None
        and not podutil.status(csr).get("certificate")
        and podutil.spec(csr).get("signerName") in SIGNERS
    )


@dataclass(frozen=True)
class CleanerDeadlines:
    approved: float = 3600.0
    denied: float = 3600.0
    failed: float = 3600.0
    pending: float = 86400.0


def cleanup_at(csr: Obj, deadlines: CleanerDeadlines) -> float | None:
    """When the cleaner deletes the request: the earliest of the deadlines its state has (a certificate's
    expiry too), or None when nothing applies yet."""
    candidates: list[float] = []
    for kind, wait in (
        ("Approved", deadlines.approved),
        ("Denied", deadlines.denied),
        ("Failed", deadlines.failed),
    ):
        cond = condition(csr, kind)
        if cond is not None:
            since = parse_time(cond.get("lastUpdateTime")) or parse_time(cond.get("lastTransitionTime"))
            if since is not None:
                candidates.append(since + wait)
    if not any(condition(csr, k) for k in ("Approved", "Denied", "Failed")):
        created = parse_time(podutil.meta(csr).get("creationTimestamp"))
        if created is not None:
            candidates.append(created + deadlines.pending)
    certificate = podutil.status(csr).get("certificate")
    if certificate:
        try:
            cert = x509.load_pem_x509_certificate(base64.b64decode(str(certificate)))
            candidates.append(cert.not_valid_after_utc.timestamp())
        except ValueError:
            pass
    return min(candidates) if candidates else None


# -- auto-approval (upstream ``approver/sarapprove.go``) ----------------------------------------------------------

SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)
SELF_NODE_CLIENT = (
    "selfnodeclient",
    "Auto approving self kubelet client certificate after SubjectAccessReview.",
)
NODE_CLIENT = ("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview.")


def decided(csr: Obj) -> bool:
    return condition(csr, "Approved") is not None or condition(csr, "Denied") is not None


def resync_period(minimum: float, draw: Callable[[], float] = random.random) -> float:
    """``ResyncPeriod``: between the minimum and twice it, drawn once, so informers started together do not
    resync together."""
    return minimum * (draw() + 1)


def pending_keys(csrs: Iterable[Obj]) -> list[str]:
    """The requests a resync hands back to ``csrapproving``: the undecided, unissued ones (re-syncing any
    other is a no-op upstream too)."""
    return [podutil.name_of(c) for c in csrs if not podutil.status(c).get("certificate") and not decided(c)]


def approval_candidates(csr: Obj, request: x509.CertificateSigningRequest) -> list[tuple[str, str]]:
    """The (subresource, approval message) pairs to ask about, in upstream's order: a kubelet client
    request is a ``nodeclient`` one, and a ``selfnodeclient`` one first when its requester is the common
    name it asks for."""
    spec = podutil.spec(csr)
    if spec.get("signerName") != KUBELET_CLIENT:
        return []
    if validate(KUBELET_CLIENT, request, [str(u) for u in spec.get("usages") or ()]) is not None:
        return []
    found = []
    if spec.get("username") == _common_name(request):
        found.append(SELF_NODE_CLIENT)
    found.append(NODE_CLIENT)
    return found


def access_review(csr: Obj, subresource: str) -> Obj:
    """The SubjectAccessReview asking whether the requester may ``create`` the subresource."""
    spec = podutil.spec(csr)
    review_spec: Obj = {
        "user": spec.get("username") or "",
        "groups": list(spec.get("groups") or ()),
        "resourceAttributes": {
            "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests",
            "verb": "create",
            "subresource": subresource,
            "version": "*",
        },
    }
    if spec.get("uid"):
        review_spec["uid"] = spec["uid"]
    if spec.get("extra"):
        review_spec["extra"] = spec["extra"]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": review_spec}


def approved(csr: Obj, message: str, now: float) -> Obj:
    stamp = format_time(now)
    status = dict(podutil.status(csr))
    status["conditions"] = [
        *(status.get("conditions") or []),
        {
            "type": "Approved",
            "status": "True",
            "reason": "AutoApproved",
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
        },
    ]
    return {**csr, "status": status}


# -- the controllers --------------------------------------------------------------------------------------------


class CSRSigningController(ManagedController):
    name = "certificatesigningrequest-signing-controller"

    def __init__(self, ctx: ControllerContext) -> None:
        settings = ctx.settings
        self.ca: SigningCA | None = None
        if settings.cluster_signing_cert_file and settings.cluster_signing_key_file:
            with (
                open(settings.cluster_signing_cert_file, "rb") as cert,
                open(settings.cluster_signing_key_file, "rb") as key,
            ):
                self.ca = SigningCA.load(cert.read(), key.read())
        self.cert_ttl = settings.cluster_signing_duration_seconds
        self.csrs = ctx.informers.informer(CSRS)
        super().__init__(ctx, self.csrs, [], 5)  # upstream runs five signing workers

    async def started(self) -> None:
        if self.ca is None:
            self.log.warning(
                "no cluster signing CA (cluster_signing_cert_file, cluster_signing_key_file): not signing"
            )

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None or self.ca is None or not needs_signing(csr):
            return None
        spec = podutil.spec(csr)
        try:
            request = parse_request(csr)
        except ValueError as exc:
            raise RuntimeError(f'unable to parse csr "{podutil.name_of(csr)}": {exc}') from exc
        problem = validate(str(spec["signerName"]), request, [str(u) for u in spec.get("usages") or []])
        status = dict(podutil.status(csr))
        if problem is not None:
            now = format_time(self.clock())
            status["conditions"] = [
                *(status.get("conditions") or []),
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "SignerValidationFailure",
                    "message": problem,
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                },
            ]
        else:
            ttl = duration(spec.get("expirationSeconds"), self.cert_ttl)
            pem = sign(self.ca, request, [str(u) for u in spec.get("usages") or []], ttl, self.clock())
            status["certificate"] = base64.b64encode(pem).decode()
        try:
            await self.client.replace_status(CSRS, {**csr, "status": status})
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise
        return None


class CSRCleanerController(ManagedController):
    name = "csrcleaner"

    def __init__(self, ctx: ControllerContext) -> None:
        settings = ctx.settings
        self.deadlines = CleanerDeadlines(
            settings.csr_approved_expiration_seconds,
            settings.csr_denied_expiration_seconds,
            settings.csr_failed_expiration_seconds,
            settings.csr_pending_expiration_seconds,
        )
        self.csrs = ctx.informers.informer(CSRS)
        super().__init__(ctx, self.csrs, [], 1)

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None:
            return None
        when = cleanup_at(csr, self.deadlines)
        if when is None:
            return None
        now = self.clock()
        if when > now:
            return when - now + 0.001
        try:
            await self.client.delete(CSRS, podutil.name_of(csr))
        except StatusError as exc:
            if exc.code != 404:
                raise
        self.log.info("cleaned up a certificate signing request", name=podutil.name_of(csr))
        return None


class CSRApprovingController(ManagedController):
    name = "csrapproving"

    def __init__(self, ctx: ControllerContext) -> None:
        self.csrs = ctx.informers.informer(CSRS)
        super().__init__(ctx, self.csrs, [], 5)  # upstream runs five approving workers
        self.resync = resync_period(ctx.settings.csr_approving_min_resync_period_seconds)

    async def run(self) -> None:
        """Reconcile, and every resync period hand the pending requests back: a requester refused by the
        SubjectAccessReview may since have been granted the permission (upstream's informer resync)."""
        for informer in self.informers:
            await informer.wait_for_sync()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.controller.run())
            tasks.create_task(self._resync())

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            for key in pending_keys(self.csrs.objects()):
                self.enqueue(key)

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None or podutil.status(csr).get("certificate") or decided(csr):
            return None
        try:
            request = parse_request(csr)
        except ValueError as exc:
            raise RuntimeError(f'unable to parse csr "{podutil.name_of(csr)}": {exc}') from exc
        tried = []
        for subresource, message in approval_candidates(csr, request):
            tried.append(subresource)
            review = await self.client.create(SUBJECT_ACCESS_REVIEWS, access_review(csr, subresource))
            if (review.get("status") or {}).get("allowed") is True:
                try:
                    await self.client.replace_subresource(
                        CSRS, approved(csr, message, self.clock()), "approval"
                    )
                except StatusError as exc:
                    if exc.code == 404:
                        return None
                    raise
                return None
        if tried:
            # upstream's IgnorableError: logged, not retried (a new version of the request comes back)
            self.log.info(
                "recognized csr but subject access review was not approved",
                csr=podutil.name_of(csr),
                tried=tried,
            )
        return None
