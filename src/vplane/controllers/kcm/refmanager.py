"""Adoption and release by selector (upstream ``ControllerRefManager``).

A controller owns the objects whose controller reference names it. It adopts orphans its selector
matches (a strategic merge patch adding the reference, guarded by the dependent's UID) once it has
re-read itself from the server and found it alive, and releases objects it owns that its selector no
longer matches (a patch deleting its reference by owner UID). Objects another controller owns are left
alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from vplane.controllers.client import KubeAPI, Resource
from vplane.controllers.kcm import pods as podutil
from vplane.kube.errors import StatusError
from vplane.kube.labels import Selector
from vplane.kube.objects import Obj


class ClaimErrors(Exception):
    """Some adoptions or releases failed; the controller retries the key."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def adopt_patch(owner: Obj, dependent: Obj) -> Obj:
    return {
        "metadata": {"ownerReferences": [podutil.new_controller_ref(owner)], "uid": podutil.uid_of(dependent)}
    }


def release_patch(owner: Obj, dependent: Obj) -> Obj:
    return {
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": podutil.uid_of(owner)}],
            "uid": podutil.uid_of(dependent),
        }
    }


async def recheck_alive(client: KubeAPI, resource: Resource, owner: Obj) -> None:
    """``RecheckDeletionTimestamp``: adopt only if a fresh read shows the owner still there and not deleting."""
    fresh = await client.get(resource, podutil.name_of(owner), namespace=podutil.namespace_of(owner) or None)
    kind = owner.get("kind", "")
    where = f"{podutil.namespace_of(owner)}/{podutil.name_of(owner)}"
    if podutil.uid_of(fresh) != podutil.uid_of(owner):
        raise RuntimeError(
            f"original {kind} {where} is gone: got uid {podutil.uid_of(fresh)}, wanted {podutil.uid_of(owner)}"
        )
    deleted = podutil.meta(fresh).get("deletionTimestamp")
    if deleted:
        raise RuntimeError(f"{kind} {where} has just been deleted at {deleted}")


async def claim(
    client: KubeAPI,
    resource: Resource,
    owner: Obj,
    selector: Selector,
    candidates: Iterable[Obj],
    *,
    can_adopt: Callable[[], Awaitable[None]],
    match: Callable[[Obj], bool] | None = None,
) -> list[Obj]:
    """The candidates ``owner`` controls after adopting and releasing as needed (``ClaimObject``)."""
    owner_uid = podutil.uid_of(owner)
    owner_deleting = podutil.is_deleting(owner)
    namespace = podutil.namespace_of(owner)
    adopt_checked = False
    claimed: list[Obj] = []
    failures: list[Exception] = []

    def matches(obj: Obj) -> bool:
        return selector.matches(podutil.labels_of(obj)) and (match is None or match(obj))

    for obj in candidates:
        ref = podutil.controller_ref(obj)
        try:
            if ref is not None:
                if ref.get("uid") != owner_uid:
                    continue
                if matches(obj):
                    claimed.append(obj)
                    continue
                if owner_deleting:
                    continue
                await client.patch(
                    resource,
                    podutil.name_of(obj),
                    release_patch(owner, obj),
                    namespace=podutil.namespace_of(obj),
                    patch_type="strategic",
                )
                continue
            if owner_deleting or not matches(obj) or podutil.is_deleting(obj):
                continue
            if namespace and podutil.namespace_of(obj) != namespace:
                continue
            if not adopt_checked:
                await can_adopt()
                adopt_checked = True
            adopted = await client.patch(
                resource,
                podutil.name_of(obj),
                adopt_patch(owner, obj),
                namespace=podutil.namespace_of(obj),
                patch_type="strategic",
            )
            adopted.setdefault("apiVersion", resource.api_version)
            adopted.setdefault("kind", resource.kind)
            claimed.append(adopted)
        except StatusError as exc:
            if exc.code == 404:
                continue
            failures.append(exc)
        except RuntimeError as exc:  # the owner cannot adopt: nothing else will succeed this round
            failures.append(exc)
            break
    if failures:
        raise ClaimErrors(failures)
    return claimed
