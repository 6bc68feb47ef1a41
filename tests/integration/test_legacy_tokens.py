"""Legacy service-account token Secrets against ``vplane apiserver`` with its controller manager, driven by
kubectl: the token controller fills a ``kubernetes.io/service-account-token`` Secret (``token``, ``ca.crt``,
``namespace``, the account's UID), the token authenticates as the account (``kubectl auth whoami``), stops
working when its Secret changes or goes, and the Secret goes with its account."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controllerkit import wait_for
from harness import APIServerProcess, Kubectl

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    running = APIServerProcess(tmp_path_factory.mktemp("tokens") / "apiserver", {"controller_manager": True})
    running.start()
    yield running
    running.stop()


@pytest.fixture
def k(server: APIServerProcess, kubectl_path: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_path, server.kubeconfig, tmp_path / "kubecache")


@pytest.fixture
def ns(k: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    k.run("create", "namespace", name)
    yield name
    k.run("delete", "namespace", name, "--wait=false", check=False)


def token_secret(name: str, account: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": account}},
            "type": "kubernetes.io/service-account-token",
        }
    )


def get(k: Kubectl, ns: str, *what: str) -> Any:
    return json.loads(k.run("get", *what, "-n", ns, "-o", "json").out)


def whoami(server: APIServerProcess, token: str) -> tuple[int, Any]:
    body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
    code, _, answer = server.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body,
        {"Content-Type": "application/json"},
        token=token,
    )
    return code, json.loads(answer)


def filled(k: Kubectl, ns: str, name: str) -> dict[str, Any] | None:
    secret = get(k, ns, "secret", name)
    return secret if {"token", "ca.crt", "namespace"} <= set(secret.get("data") or {}) else None


def test_token_secret_is_filled_and_authenticates(
    server: APIServerProcess, k: Kubectl, ns: str, tmp_path: Path
) -> None:
    k.run("create", "serviceaccount", "builder", "-n", ns)
    k.apply(token_secret("builder-token", "builder"), "-n", ns)
    secret = wait_for(lambda: filled(k, ns, "builder-token"), "token, ca.crt and namespace filled")
    account = get(k, ns, "serviceaccount", "builder")
    assert (
        secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == account["metadata"]["uid"]
    )
    data = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert data["namespace"] == ns
    assert data["ca.crt"] == (server.data_dir / "pki" / "ca.crt").read_text()
    token = data["token"]
    code, review = whoami(server, token)
    assert code == 201, review
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{ns}:builder"
    assert user["uid"] == account["metadata"]["uid"]
    assert set(user["groups"]) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    }
    # kubectl with the token is that account (and RBAC applies to it)
    assert f"system:serviceaccount:{ns}:builder" in k.run("auth", "whoami", "--token", token).out
    denied = k.fails("get", "pods", "-n", ns, "--token", token)
    assert f'User "system:serviceaccount:{ns}:builder" cannot list resource "pods"' in denied.stderr
    # a token the Secret no longer holds stops working
    k.run("patch", "secret", "builder-token", "-n", ns, "--type=merge", "-p", '{"data":{"token":"Zm9v"}}')
    assert whoami(server, token)[0] == 401
    # a forged token (signature not the server's) never works
    head, payload, _ = token.split(".")
    assert whoami(server, f"{head}.{payload}.{'A' * 86}")[0] == 401


def test_secret_goes_with_its_account(server: APIServerProcess, k: Kubectl, ns: str) -> None:
    k.run("create", "serviceaccount", "shortlived", "-n", ns)
    k.apply(token_secret("shortlived-token", "shortlived"), "-n", ns)
    secret = wait_for(lambda: filled(k, ns, "shortlived-token"), "filled")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert whoami(server, token)[0] == 201
    k.run("delete", "serviceaccount", "shortlived", "-n", ns)
    wait_for(
        lambda: k.run("get", "secret", "shortlived-token", "-n", ns, check=False).code != 0,
        "the token Secret deleted with its account",
    )
    assert whoami(server, token)[0] == 401
    # a Secret for an account that does not exist is deleted as well
    k.apply(token_secret("orphan-token", "nobody"), "-n", ns)
    wait_for(
        lambda: k.run("get", "secret", "orphan-token", "-n", ns, check=False).code != 0, "orphan deleted"
    )


def test_an_account_being_deleted_stops_legacy_tokens_at_once_and_bound_ones_after_a_minute(
    server: APIServerProcess, k: Kubectl, ns: str
) -> None:
    """An account whose deletion a finalizer holds: its legacy token stops working as soon as the deletion
    starts (upstream's legacy validator), a bound token only a minute past the deletion deadline (here:
    still working right after it); neither works once the account is gone."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "leaving", "finalizers": ["example.com/hold"]},
    }
    k.apply(json.dumps(account), "-n", ns)
    k.apply(token_secret("leaving-token", "leaving"), "-n", ns)
    secret = wait_for(lambda: filled(k, ns, "leaving-token"), "token filled")
    legacy = base64.b64decode(secret["data"]["token"]).decode()
    bound = k.run("create", "token", "leaving", "-n", ns).out.strip()
    assert whoami(server, legacy)[0] == 201 and whoami(server, bound)[0] == 201
    k.run("delete", "serviceaccount", "leaving", "-n", ns, "--wait=false")
    assert get(k, ns, "serviceaccount", "leaving")["metadata"]["deletionTimestamp"]
    assert whoami(server, legacy)[0] == 401
    assert whoami(server, bound)[0] == 201
    k.run(
        "patch",
        "serviceaccount",
        "leaving",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    wait_for(lambda: whoami(server, bound)[0] == 401 or None, "bound token refused once the account is gone")
