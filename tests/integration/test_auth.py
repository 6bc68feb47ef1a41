"""Authentication, impersonation and authorization as kubectl sees them (checklist M25-M27, S6, S7, S19)."""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import APIServerProcess, Kubectl
from vplane.support.tls import CertPair, client_context, issue_client, make_ca

pytestmark = pytest.mark.integration

GROUP = "authtest.example.com"

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def _uid() -> str:
    return os.urandom(3).hex()


def post(server: APIServerProcess, path: str, body: Any, token: str | None = "admin") -> tuple[int, Any]:
    status, _, raw = server.request(
        "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}, token=token
    )
    return status, json.loads(raw)


def whoami(result_stdout: str) -> dict[str, str]:
    """`kubectl auth whoami` table as {attribute: value}."""
    lines = result_stdout.strip().splitlines()
    assert lines[0].split() == ["ATTRIBUTE", "VALUE"], result_stdout
    rows = [re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines[1:]]
    return {key: value for key, value in rows}


# -- M25: authentication ---------------------------------------------------------------------------


def test_bad_token_is_unauthorized(kubectl: Kubectl) -> None:
    """`kubectl --token=bad get cm` prints `error: You must be logged in to the server (Unauthorized)`."""
    # With a cold discovery cache kubectl fails during discovery and prints client-go's generic text (as it
    # does against kube-apiserver); with a warm one the 401 Status of the list request is what it prints.
    kubectl.run("get", "cm")
    result = kubectl.fails("--token=bad", "get", "cm")
    assert (
        result.stderr.strip().splitlines()[-1] == "error: You must be logged in to the server (Unauthorized)"
    )


def test_no_credentials_get_401_except_health_and_version(shared_apiserver: APIServerProcess) -> None:
    """Anonymous requests get a 401 Status on /api but 200 on /healthz, /livez, /readyz and /version."""
    status, headers, raw = shared_apiserver.request("GET", "/api", token=None)
    assert status == 401
    assert headers["Content-Type"] == "application/json"
    body = json.loads(raw)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Unauthorized",
        401,
    )
    assert body["message"] == "Unauthorized"
    status, _, _ = shared_apiserver.request("GET", "/api/v1/namespaces/default/configmaps", token=None)
    assert status == 401
    for path in ("/healthz", "/livez", "/readyz"):
        status, _, raw = shared_apiserver.request("GET", path, token=None)
        assert (status, raw) == (200, b"ok"), path
    status, headers, raw = shared_apiserver.request("GET", "/version", token=None)
    assert status == 200
    assert json.loads(raw)["gitVersion"].startswith("v1.")


def test_malformed_authorization_header_is_401(shared_apiserver: APIServerProcess) -> None:
    """A bearer token that no authenticator knows is 401, never anonymous, even on /version."""
    status, _, raw = shared_apiserver.request("GET", "/api", token="not-a-token")
    assert status == 401
    assert json.loads(raw)["reason"] == "Unauthorized"


# -- M26: SelfSubjectAccessReview ------------------------------------------------------------------


def test_admin_can_create_widgets(kubectl: Kubectl) -> None:
    """`kubectl auth can-i create widgets` prints `yes` for the admin (SSAR, protobuf request body)."""
    kubectl.apply(json.dumps(WIDGET_CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/widgets.{GROUP}", "--timeout=10s")
    result = kubectl.run("auth", "can-i", "create", f"widgets.{GROUP}")
    assert result.stdout == "yes\n"
    result = kubectl.run("auth", "can-i", "create", "widgets")
    assert result.stdout == "yes\n"


# -- M27: impersonation ----------------------------------------------------------------------------


def test_impersonated_user_without_rights_is_forbidden(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl get cm --as=alice` is Forbidden with upstream's text naming User "alice"."""
    result = kubectl.fails("get", "cm", "-n", namespace, "--as=alice")
    assert result.stderr.strip() == (
        'Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource '
        f'"configmaps" in API group "" in the namespace "{namespace}"'
    )


def test_impersonated_groups_grant_access(kubectl: Kubectl, namespace: str) -> None:
    """--as-group adds groups (one Impersonate-Group header each): system:masters lets alice list."""
    kubectl.run("create", "configmap", "c1", "-n", namespace)
    result = kubectl.run(
        "get", "cm", "-n", namespace, "--as=alice", "--as-group=system:masters", "-o", "name"
    )
    assert result.stdout == "configmap/c1\n"
    result = kubectl.run(
        "auth",
        "whoami",
        "--as=alice",
        "--as-group=devs",
        "--as-group=ops",
        "--as-uid=123",
        "--as-user-extra=reason=testing",
        "--as-user-extra=reason=more",
        "--as-user-extra=scopes.example.com/x=y",
    )
    assert whoami(result.stdout) == {
        "Username": "alice",
        "UID": "123",
        "Groups": "[devs ops system:authenticated]",
        "Extra: reason": "[testing more]",
        "Extra: scopes.example.com/x": "[y]",
    }


def test_impersonation_needs_the_impersonate_verb(kubectl: Kubectl, namespace: str) -> None:
    """A user without `impersonate` on users gets Forbidden naming itself and the impersonated user."""
    kubectl.run("create", "serviceaccount", "sa-imp", "-n", namespace)
    token = kubectl.run("create", "token", "sa-imp", "-n", namespace).stdout.strip()
    kubectl.run("get", "cm", "-n", namespace)  # warm the discovery cache (discovery would fail the same way)
    result = kubectl.fails(f"--token={token}", "get", "cm", "-n", namespace, "--as=bob")
    assert result.stderr.strip() == (
        f'Error from server (Forbidden): users "bob" is forbidden: User "system:serviceaccount:{namespace}:sa-imp" '
        'cannot impersonate resource "users" in API group "" at the cluster scope'
    )


# -- S6: RBAC --------------------------------------------------------------------------------------


def test_rolebinding_grants_access(kubectl: Kubectl, namespace: str) -> None:
    """`auth can-i list cm --as=alice` says no, and yes once a RoleBinding to `view` exists (only there)."""
    user = f"alice-{_uid()}"
    result = kubectl.run("auth", "can-i", "list", "configmaps", "-n", namespace, f"--as={user}", check=False)
    assert (result.code, result.stdout) == (1, "no\n")
    kubectl.run(
        "create", "rolebinding", "alice-view", "--clusterrole=view", f"--user={user}", "-n", namespace
    )
    result = kubectl.run("auth", "can-i", "list", "configmaps", "-n", namespace, f"--as={user}")
    assert result.stdout == "yes\n"
    result = kubectl.run(
        "auth", "can-i", "create", "configmaps", "-n", namespace, f"--as={user}", check=False
    )
    assert (result.code, result.stdout) == (1, "no\n")
    result = kubectl.run("auth", "can-i", "list", "configmaps", "-n", "default", f"--as={user}", check=False)
    assert (result.code, result.stdout) == (1, "no\n")
    kubectl.run("create", "configmap", "seen", "-n", namespace)
    result = kubectl.run("get", "cm", "seen", "-n", namespace, f"--as={user}", "-o", "name")
    assert result.stdout == "configmap/seen\n"


def test_role_with_resource_names(kubectl: Kubectl, namespace: str) -> None:
    """A Role limited by resourceNames allows get on that name only."""
    user = f"rn-{_uid()}"
    kubectl.run("create", "configmap", "allowed", "-n", namespace)
    kubectl.run("create", "configmap", "other", "-n", namespace)
    kubectl.run(
        "create",
        "role",
        "one-cm",
        "--verb=get",
        "--resource=configmaps",
        "--resource-name=allowed",
        "-n",
        namespace,
    )
    kubectl.run("create", "rolebinding", "one-cm", "--role=one-cm", f"--user={user}", "-n", namespace)
    assert (
        kubectl.run("get", "cm", "allowed", "-n", namespace, f"--as={user}", "-o", "name").stdout
        == "configmap/allowed\n"
    )
    result = kubectl.fails("get", "cm", "other", "-n", namespace, f"--as={user}")
    assert result.stderr.strip() == (
        f'Error from server (Forbidden): configmaps "other" is forbidden: User "{user}" cannot get resource '
        f'"configmaps" in API group "" in the namespace "{namespace}"'
    )


def test_cluster_role_aggregation(kubectl: Kubectl, namespace: str) -> None:
    """An aggregated ClusterRole gains the rules of ClusterRoles matching its selector, including later ones."""
    uid = _uid()
    label = f"aggregate-{uid}.example.com/enabled"
    user = f"agg-{uid}"
    aggregated = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"agg-{uid}"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        "rules": [],
    }
    kubectl.apply(json.dumps(aggregated))
    kubectl.run("create", "rolebinding", "agg", f"--clusterrole=agg-{uid}", f"--user={user}", "-n", namespace)
    result = kubectl.run("auth", "can-i", "list", "secrets", "-n", namespace, f"--as={user}", check=False)
    assert (result.code, result.stdout) == (1, "no\n")
    part = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"agg-part-{uid}", "labels": {label: "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }
    kubectl.apply(json.dumps(part))
    result = kubectl.run("auth", "can-i", "list", "secrets", "-n", namespace, f"--as={user}")
    assert result.stdout == "yes\n"
    result = kubectl.run("auth", "can-i", "get", "secrets", "-n", namespace, f"--as={user}", check=False)
    assert (result.code, result.stdout) == (1, "no\n")


# -- S7: rules review and whoami -------------------------------------------------------------------


def test_can_i_list_for_admin_and_limited_user(kubectl: Kubectl, namespace: str) -> None:
    """`auth can-i --list` prints the admin's wildcard rules, and a bound user's view rules."""
    result = kubectl.run("auth", "can-i", "--list", "-n", namespace)
    rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert rows[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["*.*", "[]", "[]", "[*]"] in rows
    assert ["[*]", "[]", "[*]"] in rows
    user = f"lister-{_uid()}"
    kubectl.run("create", "rolebinding", "lister", "--clusterrole=view", f"--user={user}", "-n", namespace)
    result = kubectl.run("auth", "can-i", "--list", "-n", namespace, f"--as={user}")
    rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert ["configmaps", "[]", "[]", "[get", "list", "watch]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert not any(row[0] == "secrets" for row in rows)


def test_whoami_shows_admin_user_and_groups(kubectl: Kubectl) -> None:
    """`kubectl auth whoami` (SelfSubjectReview) shows the kubeconfig's user and its groups."""
    info = whoami(kubectl.run("auth", "whoami").stdout)
    assert info["Username"] == "admin"
    assert info["Groups"] == "[system:masters system:authenticated]"


# -- S19: client certificates ----------------------------------------------------------------------


def _cert_kubeconfig(server: APIServerProcess, path: Path, user: str, groups: list[str]) -> Path:
    pki = server.data_dir / "pki"
    ca = CertPair.read(pki / "ca.crt", pki / "ca.key")
    pair = issue_client(ca, user, groups)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server.url,
                    "certificate-authority-data": base64.b64encode(ca.cert_pem).decode(),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
                    "client-key-data": base64.b64encode(pair.key_pem).decode(),
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": user}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def test_client_certificate_authenticates_user_and_groups(
    shared_apiserver: APIServerProcess, kubectl: Kubectl, kubectl_path: str, namespace: str, tmp_path: Path
) -> None:
    """A client certificate signed by the cluster CA authenticates CN as the user and O as groups."""
    config = _cert_kubeconfig(shared_apiserver, tmp_path / "tls.yaml", "bob", ["devs"])
    bob = Kubectl(kubectl_path, config, tmp_path / "bobcache")
    info = whoami(bob.run("auth", "whoami").stdout)
    assert info["Username"] == "bob"
    assert info["Groups"] == "[devs system:authenticated]"
    result = bob.fails("get", "cm", "-n", namespace)
    assert 'User "bob" cannot list resource "configmaps"' in result.stderr
    kubectl.run("create", "rolebinding", "devs-view", "--clusterrole=view", "--group=devs", "-n", namespace)
    result = bob.run("get", "cm", "-n", namespace)
    assert result.stderr == f"No resources found in {namespace} namespace.\n"


def test_client_certificate_from_another_ca_is_rejected(
    shared_apiserver: APIServerProcess, tmp_path: Path
) -> None:
    """A client certificate from a foreign CA never authenticates: the TLS handshake or the request fails."""
    rogue = issue_client(make_ca("rogue"), "mallory", ["system:masters"])
    pki = shared_apiserver.data_dir / "pki"
    ctx = client_context((pki / "ca.crt").read_bytes(), rogue, tmp_path)
    req = urllib.request.Request(shared_apiserver.url + "/api/v1/namespaces")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        status = 0  # handshake refused, as kube-apiserver (Go's VerifyClientCertIfGiven) does
    assert status in (0, 401)


# -- TokenReview, SubjectAccessReview, service account tokens --------------------------------------


def test_token_review(shared_apiserver: APIServerProcess) -> None:
    """TokenReview authenticates a known token (user and groups) and reports an unknown one as unauthenticated."""
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": shared_apiserver.token},
    }
    status, body = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert status == 201, body
    assert body["kind"] == "TokenReview"
    assert body["apiVersion"] == "authentication.k8s.io/v1"
    assert body["status"]["authenticated"] is True
    assert body["status"]["user"]["username"] == "admin"
    assert "system:masters" in body["status"]["user"]["groups"]
    assert body["status"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
    review["spec"] = {"token": "nope"}
    status, body = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert status == 201, body
    assert body["status"].get("authenticated", False) is False
    assert not body["status"].get("user", {}).get("username")
    # A static (or add-on, or legacy) token is good for this API server only, as upstream's audience-
    # agnostic authenticators: a service checking tokens meant for itself must not accept it.
    review["spec"] = {"token": shared_apiserver.token, "audiences": ["vault"]}
    status, body = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert (status, body["status"].get("authenticated", False)) == (201, False)
    assert "audiences" not in body["status"]
    review["spec"]["audiences"] = ["vault", "https://kubernetes.default.svc.cluster.local"]
    status, body = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert body["status"]["authenticated"] is True
    assert body["status"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]


def test_subject_access_review(shared_apiserver: APIServerProcess, kubectl: Kubectl, namespace: str) -> None:
    """SubjectAccessReview answers for another user: denied, then allowed after a RoleBinding; groups count."""
    user = f"sar-{_uid()}"

    def review(spec_user: str, groups: list[str]) -> dict[str, Any]:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": spec_user,
                "groups": groups,
                "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "configmaps"},
            },
        }
        status, answer = post(shared_apiserver, "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        assert status == 201, answer
        assert answer["kind"] == "SubjectAccessReview"
        result: dict[str, Any] = answer["status"]
        return result

    assert review(user, []).get("allowed") is False
    assert review(user, ["system:masters"])["allowed"] is True
    kubectl.run("create", "rolebinding", "sar", "--clusterrole=view", f"--user={user}", "-n", namespace)
    assert review(user, [])["allowed"] is True


def test_self_subject_access_review_raw(shared_apiserver: APIServerProcess, namespace: str) -> None:
    """A JSON SelfSubjectAccessReview answers allowed for the admin, with the request echoed back."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": namespace, "verb": "delete", "resource": "secrets"}},
    }
    status, answer = post(shared_apiserver, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body)
    assert status == 201, answer
    assert answer["status"]["allowed"] is True
    assert answer["spec"]["resourceAttributes"]["resource"] == "secrets"


def test_service_account_token_authenticates(kubectl: Kubectl, namespace: str) -> None:
    """A token from `kubectl create token sa1` authenticates as system:serviceaccount:<ns>:sa1."""
    kubectl.run("create", "serviceaccount", "sa1", "-n", namespace)
    token = kubectl.run("create", "token", "sa1", "-n", namespace).stdout.strip()
    assert token
    info = whoami(kubectl.run(f"--token={token}", "auth", "whoami").stdout)
    assert info["Username"] == f"system:serviceaccount:{namespace}:sa1"
    assert (
        info["Groups"] == f"[system:serviceaccounts system:serviceaccounts:{namespace} system:authenticated]"
    )
    result = kubectl.run(
        f"--token={token}", "auth", "can-i", "list", "configmaps", "-n", namespace, check=False
    )
    assert (result.code, result.stdout) == (1, "no\n")
    kubectl.run(
        "create",
        "rolebinding",
        "sa1-view",
        "--clusterrole=view",
        f"--serviceaccount={namespace}:sa1",
        "-n",
        namespace,
    )
    result = kubectl.run(f"--token={token}", "auth", "can-i", "list", "configmaps", "-n", namespace)
    assert result.stdout == "yes\n"


def _jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def test_service_account_tokens_are_jwts_others_can_check_and_survive_a_restart(
    apiserver: APIServerProcess, kubectl_path: str, tmp_path: Path
) -> None:
    """Bound tokens as upstream's: a JWT with the issuer, audience, expiry and account claims, whose key
    the OIDC discovery endpoints publish (readable by service accounts), still good after the API server
    restarts (it signs with its persistent key, not a table in memory)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    apiserver.start()
    k = Kubectl(kubectl_path, apiserver.kubeconfig, tmp_path / "cache")
    k.run("create", "serviceaccount", "robot", "-n", "default")
    token = k.run("create", "token", "robot", "-n", "default", "--duration=1h").stdout.strip()
    claims = _jwt_claims(token)
    assert claims["iss"] == claims["aud"][0] == "https://kubernetes.default.svc.cluster.local"
    assert claims["sub"] == "system:serviceaccount:default:robot" and claims["exp"] - claims["iat"] == 3600
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "robot" and claims["jti"]
    config = json.loads(k.run(f"--token={token}", "get", "--raw", "/.well-known/openid-configuration").stdout)
    assert config["issuer"] == claims["iss"]
    assert config["jwks_uri"] == apiserver.url + "/openid/v1/jwks"
    # never the Host the caller sent: the document is cacheable by anyone in between
    _, _, raw = apiserver.request(
        "GET", "/.well-known/openid-configuration", headers={"Host": "evil.example"}
    )
    assert json.loads(raw)["jwks_uri"] == config["jwks_uri"]
    (jwk,) = json.loads(k.run(f"--token={token}", "get", "--raw", "/openid/v1/jwks").stdout)["keys"]

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    public = ec.EllipticCurvePublicNumbers(
        int.from_bytes(unb64(jwk["x"]), "big"), int.from_bytes(unb64(jwk["y"]), "big"), ec.SECP256R1()
    ).public_key()
    head, payload, signature = token.split(".")
    assert json.loads(unb64(head)) == {"alg": "ES256", "kid": jwk["kid"]}
    raw = unb64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{head}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))  # raises if not signed
    apiserver.restart()
    info = whoami(k.run(f"--token={token}", "auth", "whoami").stdout)
    assert info["Username"] == "system:serviceaccount:default:robot"
    assert info["Extra: authentication.kubernetes.io/credential-id"] == f"[JTI={claims['jti']}]"
    k.run("delete", "serviceaccount", "robot", "-n", "default")
    assert (
        k.run(f"--token={token}", "auth", "whoami", check=False).code == 1
    )  # the account is gone: so is the token


def test_tokens_for_other_audiences_and_tokens_bound_to_a_pod(
    kubectl: Kubectl, namespace: str, shared_apiserver: APIServerProcess
) -> None:
    """A token requested for another audience does not log in here, but a TokenReview for that audience
    accepts it; a token bound to a pod names the pod and ends with it."""
    kubectl.run("create", "serviceaccount", "app", "-n", namespace)
    vault = kubectl.run("create", "token", "app", "-n", namespace, "--audience=vault").stdout.strip()
    assert _jwt_claims(vault)["aud"] == ["vault"]
    assert kubectl.run(f"--token={vault}", "auth", "whoami", check=False).code == 1
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": vault}}
    status, answer = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert (status, answer["status"]["authenticated"]) == (201, False)
    review["spec"]["audiences"] = ["vault", "other"]
    _, answer = post(shared_apiserver, "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert answer["status"]["authenticated"] is True and answer["status"]["audiences"] == ["vault"]
    assert answer["status"]["user"]["username"] == f"system:serviceaccount:{namespace}:app"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "serviceAccountName": "app",
            "nodeName": "nowhere",
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    kubectl.run("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    bound = kubectl.run(
        "create", "token", "app", "-n", namespace, "--bound-object-kind=Pod", "--bound-object-name=p"
    ).stdout.strip()
    uid = kubectl.run("get", "pod", "p", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    assert _jwt_claims(bound)["kubernetes.io"]["pod"] == {"name": "p", "uid": uid}
    info = whoami(kubectl.run(f"--token={bound}", "auth", "whoami").stdout)
    assert info["Extra: authentication.kubernetes.io/pod-name"] == "[p]"
    assert info["Extra: authentication.kubernetes.io/pod-uid"] == f"[{uid}]"
    kubectl.run("create", "serviceaccount", "other", "-n", namespace)
    other = kubectl.fails(
        "create", "token", "other", "-n", namespace, "--bound-object-kind=Pod", "--bound-object-name=p"
    )
    assert other.stderr == (
        'error: failed to create token: cannot bind token for serviceaccount "other" to pod running with '
        "different serviceaccount name.\n"
    )
    mismatch = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "not-its-uid"}},
    }
    status, answer = post(
        shared_apiserver, f"/api/v1/namespaces/{namespace}/serviceaccounts/app/token", mismatch
    )
    assert (status, answer["message"]) == (
        409,
        'Operation cannot be fulfilled on Pod "p": the UID in the bound object reference (not-its-uid) does '
        "not match the UID in record. The object might have been deleted and then recreated",
    )
    mismatch["spec"]["boundObjectRef"] = {"kind": "ConfigMap", "apiVersion": "v1", "name": "p"}
    status, answer = post(
        shared_apiserver, f"/api/v1/namespaces/{namespace}/serviceaccounts/app/token", mismatch
    )
    assert (status, answer["message"]) == (400, "cannot bind token to object of type /v1, Kind=ConfigMap")
    mismatch["spec"]["boundObjectRef"] = {"kind": "Pod", "apiVersion": "apps/v1", "name": "p"}
    status, answer = post(
        shared_apiserver, f"/api/v1/namespaces/{namespace}/serviceaccounts/app/token", mismatch
    )
    assert (status, answer["message"]) == (400, "cannot bind token to object of type apps/v1, Kind=Pod")
    kubectl.run("delete", "pod", "p", "-n", namespace, "--grace-period=0", "--force")
    assert kubectl.run(f"--token={bound}", "auth", "whoami", check=False).code == 1


def test_token_request_for_missing_service_account_is_404(kubectl: Kubectl, namespace: str) -> None:
    """`kubectl create token` for a service account that does not exist fails with NotFound."""
    result = kubectl.fails("create", "token", "ghost", "-n", namespace)
    assert result.stderr.strip() == 'error: failed to create token: serviceaccounts "ghost" not found'
