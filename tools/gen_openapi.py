"""Generate ``src/vplane/kube/openapi_builtin.json``: OpenAPI v3 component schemas for the built-in kinds.

Run by hand from the repository root whenever the served kinds or the pinned ``kubernetes`` client change::

    .venv/bin/python tools/gen_openapi.py          # rewrite the JSON file
    .venv/bin/python tools/gen_openapi.py --check  # exit 1 if the committed file is out of date

Why it exists: ``kubectl create/apply -f`` download ``/openapi/v3`` and compute client-side-apply patches from
it. They need every kind's schema with ``metadata`` as an ObjectMeta ``$ref`` and the strategic-merge
extensions (spec sections 4 and S3). Serving a generated file keeps the server free of the client library.

Where the facts come from:

* Structure (properties, their types, ``required``) is read from the ``kubernetes`` client's generated models:
  ``openapi_types``, ``attribute_map`` and the pydantic ``model_fields`` (a field is required when it has
  no default).
* The client flattens a few upstream types (Time versus MicroTime, IntOrString, Quantity, FieldsV1, the
  apiextensions JSON wrappers) and drops the patch and list markers. Those come from the tables below. They
  were checked against the ``patchStrategy``/``patchMergeKey`` struct tags and the ``+listType``,
  ``+listMapKey``, ``+mapType`` and ``+structType`` markers in k8s.io/api, k8s.io/apimachinery,
  k8s.io/apiextensions-apiserver and k8s.io/kube-aggregator (heads of mid-2026).
* No upstream descriptions are copied. Top-level kinds carry a one-line description of our own, because
  ``kubectl explain`` prints one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes.client.models as client_models

Schema = dict[str, Any]

OUT = Path(__file__).resolve().parent.parent / "src" / "vplane" / "kube" / "openapi_builtin.json"
REF = "#/components/schemas/"

# Upstream definition-name prefixes (the Go package path, reversed and dotted).
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
CORE = "io.k8s.api.core.v1"
APPS = "io.k8s.api.apps.v1"
BATCH = "io.k8s.api.batch.v1"
AUTOSCALING = "io.k8s.api.autoscaling.v1"
COORD = "io.k8s.api.coordination.v1"
RBAC = "io.k8s.api.rbac.v1"
AUTHZ = "io.k8s.api.authorization.v1"
AUTHN = "io.k8s.api.authentication.v1"
ADMREG = "io.k8s.api.admissionregistration.v1"
EVENTS = "io.k8s.api.events.v1"
AUTOSCALING_V2 = "io.k8s.api.autoscaling.v2"
POLICY = "io.k8s.api.policy.v1"
NETWORKING = "io.k8s.api.networking.v1"
STORAGE = "io.k8s.api.storage.v1"
SCHEDULING = "io.k8s.api.scheduling.v1"
NODE = "io.k8s.api.node.v1"
DISCOVERY = "io.k8s.api.discovery.v1"
CERTIFICATES = "io.k8s.api.certificates.v1"
RESOURCE = "io.k8s.api.resource.v1"
FLOWCONTROL = "io.k8s.api.flowcontrol.v1"
VERSION_INFO = "io.k8s.apimachinery.pkg.version.Info"
SCHED_A3 = "io.k8s.api.scheduling.v1alpha3"
APIEXT = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"
APIREG = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1"

TIME = f"{META}.Time"
MICROTIME = f"{META}.MicroTime"
FIELDSV1 = f"{META}.FieldsV1"
INTSTR = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
RAWEXT = "io.k8s.apimachinery.pkg.runtime.RawExtension"
JSON_ANY = f"{APIEXT}.JSON"

# --------------------------------------------------------------------------------------------------
# Served kinds: (group, version, kind, client class, package, our one-line description).
# A "<class>List" model in the client means the kind is listable; its List kind is added automatically.
# --------------------------------------------------------------------------------------------------
KINDS: list[tuple[str, str, str, str, str, str]] = [
    ("", "v1", "Namespace", "V1Namespace", CORE, "A named scope that most other objects live in."),
    (
        "",
        "v1",
        "ConfigMap",
        "V1ConfigMap",
        CORE,
        "Non-secret configuration as string or binary key-value pairs.",
    ),
    ("", "v1", "Secret", "V1Secret", CORE, "Sensitive key-value data; values are base64 on the wire."),
    ("", "v1", "ServiceAccount", "V1ServiceAccount", CORE, "An identity for processes that run in pods."),
    ("", "v1", "Service", "V1Service", CORE, "A stable name and address in front of a set of pods."),
    ("", "v1", "Endpoints", "V1Endpoints", CORE, "The addresses and ports that back a Service."),
    ("", "v1", "Pod", "V1Pod", CORE, "A group of containers scheduled together onto one node."),
    ("", "v1", "Event", "CoreV1Event", CORE, "A report of something that happened to an object."),
    ("", "v1", "Node", "V1Node", CORE, "A machine that runs pods."),
    ("", "v1", "Binding", "V1Binding", CORE, "Binds a pod to a node (what a scheduler posts)."),
    ("", "v1", "ComponentStatus", "V1ComponentStatus", CORE, "The health of a control plane component."),
    ("", "v1", "LimitRange", "V1LimitRange", CORE, "Per-namespace defaults and bounds for resource amounts."),
    (
        "",
        "v1",
        "PersistentVolume",
        "V1PersistentVolume",
        CORE,
        "A piece of storage in the cluster, provisioned by an administrator or a storage class.",
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "V1PersistentVolumeClaim",
        CORE,
        "A user's request for storage, bound to a persistent volume.",
    ),
    ("", "v1", "PodTemplate", "V1PodTemplate", CORE, "A stored pod template."),
    (
        "",
        "v1",
        "ReplicationController",
        "V1ReplicationController",
        CORE,
        "Keeps a number of identical pods running (the older form of a ReplicaSet).",
    ),
    ("", "v1", "ResourceQuota", "V1ResourceQuota", CORE, "Limits on aggregate resource use in a namespace."),
    (
        "apps",
        "v1",
        "StatefulSet",
        "V1StatefulSet",
        APPS,
        "Pods with stable identities and storage, rolled in order.",
    ),
    ("apps", "v1", "DaemonSet", "V1DaemonSet", APPS, "Runs a copy of a pod on each eligible node."),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "V1ControllerRevision",
        APPS,
        "An immutable snapshot of a workload's template, kept for rollbacks.",
    ),
    ("batch", "v1", "CronJob", "V1CronJob", BATCH, "Creates Jobs on a repeating schedule."),
    (
        "autoscaling",
        "v1",
        "HorizontalPodAutoscaler",
        "V1HorizontalPodAutoscaler",
        AUTOSCALING,
        "Scales a workload between bounds to hold CPU utilization at a target.",
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "V2HorizontalPodAutoscaler",
        AUTOSCALING_V2,
        "Scales a workload between bounds to hold metrics at their targets.",
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "V1PodDisruptionBudget",
        POLICY,
        "Bounds how many pods of a set voluntary disruptions may take down at once.",
    ),
    ("policy", "v1", "Eviction", "V1Eviction", POLICY, "Asks to evict a pod, subject to disruption budgets."),
    ("networking.k8s.io", "v1", "Ingress", "V1Ingress", NETWORKING, "HTTP routes from outside to services."),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "V1IngressClass",
        NETWORKING,
        "Names the controller that implements a class of ingresses.",
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "V1NetworkPolicy",
        NETWORKING,
        "Which traffic may reach or leave a set of pods.",
    ),
    (
        "networking.k8s.io",
        "v1",
        "IPAddress",
        "V1IPAddress",
        NETWORKING,
        "An IP address allocated to a service.",
    ),
    (
        "networking.k8s.io",
        "v1",
        "ServiceCIDR",
        "V1ServiceCIDR",
        NETWORKING,
        "A range service addresses come from.",
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "V1StorageClass",
        STORAGE,
        "A class of storage that claims can ask for, and how to provision it.",
    ),
    (
        "storage.k8s.io",
        "v1",
        "CSIDriver",
        "V1CSIDriver",
        STORAGE,
        "How the cluster talks to a CSI volume driver.",
    ),
    ("storage.k8s.io", "v1", "CSINode", "V1CSINode", STORAGE, "The CSI drivers installed on a node."),
    (
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "V1CSIStorageCapacity",
        STORAGE,
        "Storage capacity a CSI driver reports for a topology segment.",
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "V1VolumeAttachment",
        STORAGE,
        "A request to attach a volume to a node.",
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttributesClass",
        "V1VolumeAttributesClass",
        STORAGE,
        "Mutable attributes (such as performance) a volume can be given.",
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "V1PriorityClass",
        SCHEDULING,
        "A named priority that pods refer to.",
    ),
    (
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "V1RuntimeClass",
        NODE,
        "A container runtime configuration pods can ask for.",
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "V1EndpointSlice",
        DISCOVERY,
        "A subset of the endpoints that back a service.",
    ),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "V1CertificateSigningRequest",
        CERTIFICATES,
        "A request for a certificate, approved or denied, then signed.",
    ),
    (
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "V1DeviceClass",
        RESOURCE,
        "A class of devices that claims can ask for.",
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "ResourceV1ResourceClaim",
        RESOURCE,
        "A request for devices, allocated by the scheduler.",
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "V1ResourceClaimTemplate",
        RESOURCE,
        "A template each pod's own ResourceClaim is made from.",
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "V1ResourceSlice",
        RESOURCE,
        "Devices a driver offers in a pool.",
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "V1FlowSchema",
        FLOWCONTROL,
        "Which requests go to which priority level.",
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "V1PriorityLevelConfiguration",
        FLOWCONTROL,
        "How many requests of a priority level run at once, and how the rest wait.",
    ),
    ("apps", "v1", "Deployment", "V1Deployment", APPS, "Declarative rollouts of a replicated pod template."),
    ("apps", "v1", "ReplicaSet", "V1ReplicaSet", APPS, "Keeps a number of identical pods running."),
    ("autoscaling", "v1", "Scale", "V1Scale", AUTOSCALING, "The scale subresource of a scalable object."),
    ("batch", "v1", "Job", "V1Job", BATCH, "Runs pods until a number of them complete."),
    ("coordination.k8s.io", "v1", "Lease", "V1Lease", COORD, "A lock with a holder and a renewal time."),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "V1CustomResourceDefinition",
        APIEXT,
        "Adds a custom resource type to the API.",
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "V1APIService",
        APIREG,
        "Routes one API group-version to a local or aggregated server.",
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "V1Role", RBAC, "Namespaced permission rules."),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "V1ClusterRole",
        RBAC,
        "Cluster-wide permission rules.",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "V1RoleBinding",
        RBAC,
        "Grants a role's rules to subjects in a namespace.",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "V1ClusterRoleBinding",
        RBAC,
        "Grants a cluster role's rules to subjects cluster-wide.",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "V1SelfSubjectAccessReview",
        AUTHZ,
        "Asks whether the caller may perform an action.",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "V1SubjectAccessReview",
        AUTHZ,
        "Asks whether a given user may perform an action.",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "V1LocalSubjectAccessReview",
        AUTHZ,
        "A subject access review scoped to one namespace.",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "V1SelfSubjectRulesReview",
        AUTHZ,
        "Lists the actions the caller may perform in a namespace.",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "V1SelfSubjectReview",
        AUTHN,
        "Reports who the server thinks the caller is.",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "TokenReview",
        "V1TokenReview",
        AUTHN,
        "Asks who a bearer token belongs to.",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
        "AuthenticationV1TokenRequest",
        AUTHN,
        "Requests a token for a service account.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "V1ValidatingAdmissionPolicy",
        ADMREG,
        "CEL rules that accept or reject API requests.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "V1ValidatingAdmissionPolicyBinding",
        ADMREG,
        "Applies a validating admission policy to matching resources.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "V1MutatingWebhookConfiguration",
        ADMREG,
        "Admission webhooks that may change API requests before they are stored.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "V1ValidatingWebhookConfiguration",
        ADMREG,
        "Admission webhooks that accept or reject API requests.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingAdmissionPolicy",
        "V1MutatingAdmissionPolicy",
        ADMREG,
        "CEL mutations applied to API requests before they are stored.",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingAdmissionPolicyBinding",
        "V1MutatingAdmissionPolicyBinding",
        ADMREG,
        "Applies a mutating admission policy to matching resources.",
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "EventsV1Event",
        EVENTS,
        "A report of something that happened to an object.",
    ),
]

# Group-versions that accept DeleteOptions bodies and stream WatchEvents (upstream lists every one).
SERVED_GVS = sorted({(g, v) for g, v, *_ in KINDS})

# meta/v1 kinds that are not tied to one group-version.
META_KINDS: list[tuple[str, str, list[tuple[str, str]], str]] = [
    (
        "Status",
        "V1Status",
        [("", "v1")],
        "The result of an operation that returns no object, such as an error.",
    ),
    ("DeleteOptions", "V1DeleteOptions", SERVED_GVS, "Options for a delete request."),
    ("WatchEvent", "V1WatchEvent", SERVED_GVS, "One event of a watch stream."),
    ("APIVersions", "V1APIVersions", [("", "v1")], "The versions of the legacy core API."),
    ("APIGroupList", "V1APIGroupList", [("", "v1")], "The API groups a server serves."),
    ("APIGroup", "V1APIGroup", [("", "v1")], "One API group and its versions."),
    ("APIResourceList", "V1APIResourceList", [("", "v1")], "The resources of one group/version."),
]

# Definitions served without a kind of their own.
PLAIN_DEFINITIONS: list[tuple[str, str, str]] = [
    (VERSION_INFO, "VersionInfo", "The server's version, as /version answers."),
]

# --------------------------------------------------------------------------------------------------
# Which package a client class belongs to.
# --------------------------------------------------------------------------------------------------
CLASS_RE = re.compile(r"^(?P<prefix>[A-Z][a-z]+)?(?P<version>V\d+(?:alpha\d+|beta\d+)?)(?P<name>[A-Z]\w*)$")

# The client prefixes a class with its group where two packages share a Go type name.
# Defaults upstream publishes in its v3 schemas that server-side apply needs to key list items (a port
# applied without a protocol must key like the stored one, which has the default filled in).
DEFAULTS: dict[tuple[str, str], object] = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.EndpointPort", "protocol"): "TCP",
}

PREFIX_PACKAGES = {
    "Core": CORE,
    "Events": EVENTS,
    "Discovery": DISCOVERY,
    "Flowcontrol": FLOWCONTROL,
    "Resource": RESOURCE,
    "Storage": STORAGE,
    "Rbac": RBAC,
    "Authentication": AUTHN,
    "Admissionregistration": ADMREG,
    "Apiextensions": APIEXT,
    "Apiregistration": APIREG,
}

# Classes referred to from a package other than their own. Every other class inherits the package of the
# type that refers to it; the generator fails if that guess would change the API version.
CLASS_PACKAGES = {
    **{
        cls: META
        for cls in (
            "V1ObjectMeta",
            "V1ListMeta",
            "V1OwnerReference",
            "V1ManagedFieldsEntry",
            "V1Status",
            "V1StatusDetails",
            "V1StatusCause",
            "V1DeleteOptions",
            "V1Preconditions",
            "V1WatchEvent",
            "V1LabelSelector",
            "V1LabelSelectorRequirement",
            "V1FieldSelectorRequirement",
            "V1Condition",
        )
    },
    "V1PodTemplateSpec": CORE,
    "V1NodeSelector": CORE,
    "V1Toleration": CORE,
    "V1PersistentVolumeSpec": CORE,
    "V1TypedLocalObjectReference": CORE,
    "V1PersistentVolumeClaim": CORE,
    "V1ObjectReference": CORE,
    "V1EventSource": CORE,
    "V1alpha3WorkloadPodGroupSchedulingPolicy": SCHED_A3,
    "V1alpha3WorkloadPodGroupSchedulingConstraints": SCHED_A3,
    "V1alpha3WorkloadPodGroupDisruptionMode": SCHED_A3,
    "V1alpha3WorkloadPodGroupResourceClaim": SCHED_A3,
}

# --------------------------------------------------------------------------------------------------
# Types the client flattens. Keys are (definition, property); values are a type in the client's notation
# where a dotted name is an upstream definition. "datetime" defaults to Time; "object" must be listed.
# --------------------------------------------------------------------------------------------------
RESOURCE_LIST = f"Dict[str, {QUANTITY}]"
TYPE_FACTS: dict[tuple[str, str], str] = {
    **{
        (definition, prop): MICROTIME
        for definition, prop in (
            (f"{CORE}.Event", "eventTime"),
            (f"{CORE}.EventSeries", "lastObservedTime"),
            (f"{EVENTS}.Event", "eventTime"),
            (f"{EVENTS}.EventSeries", "lastObservedTime"),
            (f"{COORD}.LeaseSpec", "acquireTime"),
            (f"{COORD}.LeaseSpec", "renewTime"),
        )
    },
    **{
        (definition, prop): RESOURCE_LIST
        for definition, prop in (
            (f"{CORE}.ContainerStatus", "allocatedResources"),
            (f"{CORE}.NodeStatus", "allocatable"),
            (f"{CORE}.NodeStatus", "capacity"),
            (f"{CORE}.PodSpec", "overhead"),
            (f"{CORE}.PodStatus", "allocatedResources"),
            (f"{CORE}.ResourceRequirements", "limits"),
            (f"{CORE}.ResourceRequirements", "requests"),
            (f"{CORE}.VolumeResourceRequirements", "limits"),
            (f"{CORE}.VolumeResourceRequirements", "requests"),
        )
    },
    **{
        (definition, prop): RESOURCE_LIST
        for definition, prop in (
            (f"{CORE}.PersistentVolumeSpec", "capacity"),
            (f"{CORE}.PersistentVolumeClaimStatus", "capacity"),
            (f"{CORE}.PersistentVolumeClaimStatus", "allocatedResources"),
            (f"{CORE}.ResourceQuotaSpec", "hard"),
            (f"{CORE}.ResourceQuotaStatus", "hard"),
            (f"{CORE}.ResourceQuotaStatus", "used"),
            (f"{CORE}.LimitRangeItem", "default"),
            (f"{CORE}.LimitRangeItem", "defaultRequest"),
            (f"{CORE}.LimitRangeItem", "max"),
            (f"{CORE}.LimitRangeItem", "maxLimitRequestRatio"),
            (f"{CORE}.LimitRangeItem", "min"),
            (f"{NODE}.Overhead", "podFixed"),
        )
    },
    **{
        (definition, prop): QUANTITY
        for definition, prop in (
            (f"{STORAGE}.CSIStorageCapacity", "capacity"),
            (f"{STORAGE}.CSIStorageCapacity", "maximumVolumeSize"),
            (f"{AUTOSCALING_V2}.MetricTarget", "value"),
            (f"{AUTOSCALING_V2}.MetricTarget", "averageValue"),
            (f"{AUTOSCALING_V2}.MetricValueStatus", "value"),
            (f"{AUTOSCALING_V2}.MetricValueStatus", "averageValue"),
            (f"{CORE}.EmptyDirVolumeSource", "sizeLimit"),
            (f"{CORE}.NodeAllocatableMappedResources", "quantity"),
            (f"{CORE}.NodeAllocatableOverheadResources", "perContainer"),
            (f"{CORE}.NodeAllocatableOverheadResources", "perPod"),
            (f"{CORE}.ResourceFieldSelector", "divisor"),
        )
    },
    **{
        (definition, prop): INTSTR
        for definition, prop in (
            (f"{APPS}.RollingUpdateDeployment", "maxSurge"),
            (f"{APPS}.RollingUpdateDeployment", "maxUnavailable"),
            (f"{APPS}.RollingUpdateDaemonSet", "maxSurge"),
            (f"{APPS}.RollingUpdateDaemonSet", "maxUnavailable"),
            (f"{APPS}.RollingUpdateStatefulSetStrategy", "maxUnavailable"),
            (f"{POLICY}.PodDisruptionBudgetSpec", "maxUnavailable"),
            (f"{POLICY}.PodDisruptionBudgetSpec", "minAvailable"),
            (f"{NETWORKING}.NetworkPolicyPort", "port"),
            (f"{CORE}.HTTPGetAction", "port"),
            (f"{CORE}.ServicePort", "targetPort"),
            (f"{CORE}.TCPSocketAction", "port"),
        )
    },
    (f"{META}.ManagedFieldsEntry", "fieldsV1"): FIELDSV1,
    (f"{META}.WatchEvent", "object"): RAWEXT,
    (f"{APPS}.ControllerRevision", "data"): RAWEXT,
    (f"{RESOURCE}.OpaqueDeviceConfiguration", "parameters"): RAWEXT,
    (f"{RESOURCE}.AllocatedDeviceStatus", "data"): RAWEXT,
    (f"{APIEXT}.CustomResourceSubresources", "status"): f"{APIEXT}.CustomResourceSubresourceStatus",
    (f"{APIEXT}.JSONSchemaProps", "additionalItems"): f"{APIEXT}.JSONSchemaPropsOrBool",
    (f"{APIEXT}.JSONSchemaProps", "additionalProperties"): f"{APIEXT}.JSONSchemaPropsOrBool",
    (f"{APIEXT}.JSONSchemaProps", "default"): JSON_ANY,
    (f"{APIEXT}.JSONSchemaProps", "dependencies"): f"Dict[str, {APIEXT}.JSONSchemaPropsOrStringArray]",
    (f"{APIEXT}.JSONSchemaProps", "enum"): f"List[{JSON_ANY}]",
    (f"{APIEXT}.JSONSchemaProps", "example"): JSON_ANY,
    (f"{APIEXT}.JSONSchemaProps", "items"): f"{APIEXT}.JSONSchemaPropsOrArray",
    (
        f"{SCHED_A3}.WorkloadPodGroupSchedulingPolicy",
        "basic",
    ): f"{SCHED_A3}.WorkloadPodGroupBasicSchedulingPolicy",
    (
        f"{SCHED_A3}.WorkloadPodGroupDisruptionMode",
        "single",
    ): f"{SCHED_A3}.WorkloadPodGroupSingleDisruptionMode",
    (f"{SCHED_A3}.WorkloadPodGroupDisruptionMode", "all"): f"{SCHED_A3}.WorkloadPodGroupAllDisruptionMode",
}

# Definitions with no client class: the special types' own OpenAPI hooks, and empty or opaque structs.
OPAQUE: Schema = {"x-kubernetes-preserve-unknown-fields": True}
LEAF_SCHEMAS: dict[str, Schema] = {
    TIME: {"type": "string", "format": "date-time"},
    MICROTIME: {"type": "string", "format": "date-time"},
    INTSTR: {
        "format": "int-or-string",
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}]},
    FIELDSV1: {"type": "object", **OPAQUE},
    RAWEXT: {"type": "object", **OPAQUE},
    JSON_ANY: OPAQUE,
    f"{APIEXT}.JSONSchemaPropsOrArray": OPAQUE,
    f"{APIEXT}.JSONSchemaPropsOrBool": OPAQUE,
    f"{APIEXT}.JSONSchemaPropsOrStringArray": OPAQUE,
    f"{APIEXT}.CustomResourceSubresourceStatus": {"type": "object"},
    f"{SCHED_A3}.WorkloadPodGroupBasicSchedulingPolicy": {"type": "object"},
    f"{SCHED_A3}.WorkloadPodGroupSingleDisruptionMode": {"type": "object"},
    f"{SCHED_A3}.WorkloadPodGroupAllDisruptionMode": {"type": "object"},
}


# --------------------------------------------------------------------------------------------------
# Patch and list extensions, per definition and property.
# --------------------------------------------------------------------------------------------------
def ext(
    *, patch: str = "", key: str = "", list_type: str = "", keys: Iterable[str] = (), map_type: str = ""
) -> Schema:
    """One property's ``x-kubernetes-*`` extensions, spelled as the upstream markers are."""
    out: Schema = {}
    if patch:
        out["x-kubernetes-patch-strategy"] = patch
    if key:
        out["x-kubernetes-patch-merge-key"] = key
    if list_type:
        out["x-kubernetes-list-type"] = list_type
    if keys:
        out["x-kubernetes-list-map-keys"] = list(keys)
    if map_type:
        out["x-kubernetes-map-type"] = map_type
    return out


ATOMIC = ext(list_type="atomic")
SET = ext(list_type="set")
ATOMIC_MAP = ext(map_type="atomic")


def merge_map(key: str, *more_keys: str, patch: str = "merge") -> Schema:
    """A list merged by ``key`` in strategic merge patch and keyed the same way (plus ``more_keys``) in apply."""
    return ext(patch=patch, key=key, list_type="map", keys=(key, *more_keys))


def map_list(*keys: str) -> Schema:
    """A list keyed for server-side apply only (no strategic-merge key upstream)."""
    return ext(list_type="map", keys=keys)


EXTENSIONS: dict[str, dict[str, Schema]] = {
    f"{ADMREG}.MatchResources": {
        "excludeResourceRules": ATOMIC,
        "resourceRules": ATOMIC,
    },
    f"{ADMREG}.MutatingAdmissionPolicySpec": {
        "matchConditions": merge_map("name"),
        "mutations": ATOMIC,
        "variables": ATOMIC,
    },
    f"{ADMREG}.MutatingWebhook": {
        "admissionReviewVersions": ATOMIC,
        "matchConditions": merge_map("name"),
        "rules": ATOMIC,
    },
    f"{ADMREG}.MutatingWebhookConfiguration": {
        "webhooks": merge_map("name"),
    },
    f"{ADMREG}.NamedRuleWithOperations": {
        "apiGroups": ATOMIC,
        "apiVersions": ATOMIC,
        "operations": ATOMIC,
        "resourceNames": ATOMIC,
        "resources": ATOMIC,
    },
    f"{ADMREG}.RuleWithOperations": {
        "apiGroups": ATOMIC,
        "apiVersions": ATOMIC,
        "operations": ATOMIC,
        "resources": ATOMIC,
    },
    f"{ADMREG}.TypeChecking": {
        "expressionWarnings": ATOMIC,
    },
    f"{ADMREG}.ValidatingAdmissionPolicyBindingSpec": {
        "validationActions": SET,
    },
    f"{ADMREG}.ValidatingAdmissionPolicySpec": {
        "auditAnnotations": ATOMIC,
        "matchConditions": merge_map("name"),
        "validations": ATOMIC,
        "variables": merge_map("name"),
    },
    f"{ADMREG}.ValidatingAdmissionPolicyStatus": {
        "conditions": map_list("type"),
    },
    f"{ADMREG}.ValidatingWebhook": {
        "admissionReviewVersions": ATOMIC,
        "matchConditions": merge_map("name"),
        "rules": ATOMIC,
    },
    f"{ADMREG}.ValidatingWebhookConfiguration": {
        "webhooks": merge_map("name"),
    },
    f"{APPS}.DeploymentSpec": {
        "strategy": ext(patch="retainKeys"),
    },
    f"{APPS}.StatefulSetSpec": {
        "volumeClaimTemplates": ATOMIC,
    },
    f"{APPS}.StatefulSetStatus": {
        "conditions": merge_map("type"),
    },
    f"{APPS}.DaemonSetStatus": {
        "conditions": merge_map("type"),
    },
    f"{AUTOSCALING_V2}.HorizontalPodAutoscalerSpec": {
        "metrics": ATOMIC,
    },
    f"{AUTOSCALING_V2}.HorizontalPodAutoscalerStatus": {
        "conditions": merge_map("type"),
        "currentMetrics": ATOMIC,
    },
    f"{AUTOSCALING_V2}.HPAScalingRules": {
        "policies": ATOMIC,
    },
    f"{BATCH}.CronJobStatus": {
        "active": ATOMIC,
    },
    f"{CERTIFICATES}.CertificateSigningRequestSpec": {
        "groups": ATOMIC,
        "usages": ATOMIC,
    },
    f"{CERTIFICATES}.CertificateSigningRequestStatus": {
        "conditions": map_list("type"),
    },
    f"{CORE}.PersistentVolumeSpec": {
        "accessModes": ATOMIC,
        "mountOptions": ATOMIC,
    },
    f"{CORE}.PersistentVolumeClaimStatus": {
        "accessModes": ATOMIC,
        "conditions": merge_map("type"),
    },
    f"{CORE}.ReplicationControllerStatus": {
        "conditions": merge_map("type"),
    },
    f"{CORE}.ResourceQuotaSpec": {
        "scopes": ATOMIC,
    },
    f"{CORE}.LimitRangeSpec": {
        "limits": ATOMIC,
    },
    f"{CORE}.ComponentStatus": {
        "conditions": merge_map("type"),
    },
    f"{DISCOVERY}.EndpointSlice": {
        "endpoints": ATOMIC,
        "ports": ATOMIC,
    },
    f"{DISCOVERY}.Endpoint": {
        "addresses": SET,
    },
    f"{FLOWCONTROL}.FlowSchemaStatus": {
        "conditions": map_list("type"),
    },
    f"{FLOWCONTROL}.PriorityLevelConfigurationStatus": {
        "conditions": map_list("type"),
    },
    f"{FLOWCONTROL}.FlowSchemaSpec": {
        "rules": ATOMIC,
    },
    f"{NETWORKING}.IngressSpec": {
        "rules": ATOMIC,
        "tls": ATOMIC,
    },
    f"{NETWORKING}.HTTPIngressRuleValue": {
        "paths": ATOMIC,
    },
    f"{NETWORKING}.NetworkPolicySpec": {
        "egress": ATOMIC,
        "ingress": ATOMIC,
        "policyTypes": ATOMIC,
    },
    f"{NETWORKING}.ServiceCIDRSpec": {
        "cidrs": ATOMIC,
    },
    f"{NETWORKING}.ServiceCIDRStatus": {
        "conditions": merge_map("type"),
    },
    f"{POLICY}.PodDisruptionBudgetStatus": {
        "conditions": merge_map("type"),
    },
    f"{STORAGE}.CSINodeSpec": {
        "drivers": merge_map("name"),
    },
    f"{STORAGE}.StorageClass": {
        "allowedTopologies": ATOMIC,
        "mountOptions": ATOMIC,
    },
    f"{STORAGE}.CSIDriverSpec": {
        "tokenRequests": ATOMIC,
        "volumeLifecycleModes": SET,
    },
    f"{APPS}.DeploymentStatus": {
        "conditions": merge_map("type"),
    },
    f"{APPS}.ReplicaSetStatus": {
        "conditions": merge_map("type"),
    },
    f"{AUTHN}.TokenRequestSpec": {
        "audiences": ATOMIC,
    },
    f"{AUTHN}.TokenReviewSpec": {
        "audiences": ATOMIC,
    },
    f"{AUTHN}.TokenReviewStatus": {
        "audiences": ATOMIC,
    },
    f"{AUTHN}.UserInfo": {
        "groups": ATOMIC,
    },
    f"{AUTHZ}.FieldSelectorAttributes": {
        "requirements": ATOMIC,
    },
    f"{AUTHZ}.LabelSelectorAttributes": {
        "requirements": ATOMIC,
    },
    f"{AUTHZ}.NonResourceRule": {
        "nonResourceURLs": ATOMIC,
        "verbs": ATOMIC,
    },
    f"{AUTHZ}.ResourceRule": {
        "apiGroups": ATOMIC,
        "resourceNames": ATOMIC,
        "resources": ATOMIC,
        "verbs": ATOMIC,
    },
    f"{AUTHZ}.SubjectAccessReviewSpec": {
        "groups": ATOMIC,
    },
    f"{AUTHZ}.SubjectRulesReviewStatus": {
        "nonResourceRules": ATOMIC,
        "resourceRules": ATOMIC,
    },
    f"{BATCH}.JobSchedulingConfiguration": {
        "resourceClaims": merge_map("name"),
    },
    f"{BATCH}.JobStatus": {
        "conditions": ext(patch="merge", key="type", list_type="atomic"),
    },
    f"{BATCH}.PodFailurePolicy": {
        "rules": ATOMIC,
    },
    f"{BATCH}.PodFailurePolicyOnExitCodesRequirement": {
        "values": SET,
    },
    f"{BATCH}.PodFailurePolicyRule": {
        "onPodConditions": ATOMIC,
    },
    f"{BATCH}.SuccessPolicy": {
        "rules": ATOMIC,
    },
    f"{BATCH}.UncountedTerminatedPods": {
        "failed": SET,
        "succeeded": SET,
    },
    f"{CORE}.Capabilities": {
        "add": ATOMIC,
        "drop": ATOMIC,
    },
    f"{CORE}.CephFSVolumeSource": {
        "monitors": ATOMIC,
    },
    f"{CORE}.ConfigMapProjection": {
        "items": ATOMIC,
    },
    f"{CORE}.ConfigMapVolumeSource": {
        "items": ATOMIC,
    },
    f"{CORE}.Container": {
        "args": ATOMIC,
        "command": ATOMIC,
        "env": merge_map("name"),
        "envFrom": ATOMIC,
        "ports": merge_map("containerPort", "protocol"),
        "resizePolicy": ATOMIC,
        "restartPolicyRules": ATOMIC,
        "volumeDevices": merge_map("devicePath"),
        "volumeMounts": merge_map("mountPath"),
    },
    f"{CORE}.ContainerImage": {
        "names": ATOMIC,
    },
    f"{CORE}.ContainerRestartRuleOnExitCodes": {
        "values": SET,
    },
    f"{CORE}.ContainerStatus": {
        "allocatedResourcesStatus": merge_map("name"),
        "volumeMounts": merge_map("mountPath"),
    },
    f"{CORE}.DownwardAPIProjection": {
        "items": ATOMIC,
    },
    f"{CORE}.DownwardAPIVolumeSource": {
        "items": ATOMIC,
    },
    f"{CORE}.EndpointSubset": {
        "addresses": ATOMIC,
        "notReadyAddresses": ATOMIC,
        "ports": ATOMIC,
    },
    f"{CORE}.Endpoints": {
        "subsets": ATOMIC,
    },
    f"{CORE}.EphemeralContainer": {
        "args": ATOMIC,
        "command": ATOMIC,
        "env": merge_map("name"),
        "envFrom": ATOMIC,
        "ports": merge_map("containerPort", "protocol"),
        "resizePolicy": ATOMIC,
        "restartPolicyRules": ATOMIC,
        "volumeDevices": merge_map("devicePath"),
        "volumeMounts": merge_map("mountPath"),
    },
    f"{CORE}.ExecAction": {
        "command": ATOMIC,
    },
    f"{CORE}.FCVolumeSource": {
        "targetWWNs": ATOMIC,
        "wwids": ATOMIC,
    },
    f"{CORE}.HTTPGetAction": {
        "httpHeaders": ATOMIC,
    },
    f"{CORE}.HostAlias": {
        "hostnames": ATOMIC,
    },
    f"{CORE}.ISCSIVolumeSource": {
        "portals": ATOMIC,
    },
    f"{CORE}.LinuxContainerUser": {
        "supplementalGroups": ATOMIC,
    },
    f"{CORE}.LoadBalancerIngress": {
        "ports": ATOMIC,
    },
    f"{CORE}.LoadBalancerStatus": {
        "ingress": ATOMIC,
    },
    f"{CORE}.NamespaceSpec": {
        "finalizers": ATOMIC,
    },
    f"{CORE}.NamespaceStatus": {
        "conditions": merge_map("type"),
    },
    f"{CORE}.NodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": ATOMIC,
    },
    f"{CORE}.NodeAllocatableResourceClaimStatus": {
        "containers": SET,
        "mapping": merge_map("name"),
        "overhead": merge_map("name"),
    },
    f"{CORE}.NodePodPreemptionPolicy": {
        "disableResizePreemption": SET,
    },
    f"{CORE}.NodeSelector": {
        "nodeSelectorTerms": ATOMIC,
    },
    f"{CORE}.NodeSelectorRequirement": {
        "values": ATOMIC,
    },
    f"{CORE}.NodeSelectorTerm": {
        "matchExpressions": ATOMIC,
        "matchFields": ATOMIC,
    },
    f"{CORE}.NodeSpec": {
        "podCIDRs": ext(patch="merge", list_type="set"),
        "taints": ATOMIC,
    },
    f"{CORE}.NodeStatus": {
        "addresses": merge_map("type"),
        "conditions": merge_map("type"),
        "declaredFeatures": ATOMIC,
        "images": ATOMIC,
        "runtimeHandlers": ATOMIC,
        "volumesAttached": ATOMIC,
        "volumesInUse": ATOMIC,
    },
    f"{CORE}.PersistentVolumeClaimSpec": {
        "accessModes": ATOMIC,
    },
    f"{CORE}.PodAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": ATOMIC,
        "requiredDuringSchedulingIgnoredDuringExecution": ATOMIC,
    },
    f"{CORE}.PodAffinityTerm": {
        "matchLabelKeys": ATOMIC,
        "mismatchLabelKeys": ATOMIC,
        "namespaces": ATOMIC,
    },
    f"{CORE}.PodAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": ATOMIC,
        "requiredDuringSchedulingIgnoredDuringExecution": ATOMIC,
    },
    f"{CORE}.PodDNSConfig": {
        "nameservers": ATOMIC,
        "options": ATOMIC,
        "searches": ATOMIC,
    },
    f"{CORE}.PodExtendedResourceClaimStatus": {
        "requestMappings": ATOMIC,
    },
    f"{CORE}.PodSecurityContext": {
        "supplementalGroups": ATOMIC,
        "sysctls": ATOMIC,
    },
    f"{CORE}.PodSpec": {
        "containers": merge_map("name"),
        "ephemeralContainers": merge_map("name"),
        "evictionResponders": merge_map("name"),
        "hostAliases": merge_map("ip"),
        "imagePullSecrets": merge_map("name"),
        "initContainers": merge_map("name"),
        "nodeSelector": ATOMIC_MAP,
        "readinessGates": ATOMIC,
        "resourceClaims": merge_map("name", patch="merge,retainKeys"),
        "schedulingGates": merge_map("name"),
        "tolerations": ATOMIC,
        "topologySpreadConstraints": merge_map("topologyKey", "whenUnsatisfiable"),
        "volumes": merge_map("name", patch="merge,retainKeys"),
    },
    f"{CORE}.PodStatus": {
        "conditions": merge_map("type"),
        "containerStatuses": ATOMIC,
        "ephemeralContainerStatuses": ATOMIC,
        "hostIPs": ext(patch="merge", key="ip", list_type="atomic"),
        "initContainerStatuses": ATOMIC,
        "nodeAllocatableResourceClaimStatuses": merge_map("resourceClaimName"),
        "podIPs": merge_map("ip"),
        "resourceClaimStatuses": merge_map("name", patch="merge,retainKeys"),
        "volumeHealth": map_list("name"),
    },
    f"{CORE}.PodVolumeHealth": {
        "healthConditions": merge_map("status", "reason"),
    },
    f"{CORE}.ProjectedVolumeSource": {
        "sources": ATOMIC,
    },
    f"{CORE}.RBDVolumeSource": {
        "monitors": ATOMIC,
    },
    f"{CORE}.ResourceRequirements": {
        "claims": map_list("name"),
    },
    f"{CORE}.ResourceStatus": {
        "resources": map_list("resourceID"),
    },
    f"{CORE}.SecretProjection": {
        "items": ATOMIC,
    },
    f"{CORE}.SecretVolumeSource": {
        "items": ATOMIC,
    },
    f"{CORE}.ServiceAccount": {
        "imagePullSecrets": ATOMIC,
        "secrets": merge_map("name"),
    },
    f"{CORE}.ServiceSpec": {
        "clusterIPs": ATOMIC,
        "externalIPs": ATOMIC,
        "ipFamilies": ATOMIC,
        "loadBalancerSourceRanges": ATOMIC,
        "ports": merge_map("port", "protocol"),
        "selector": ATOMIC_MAP,
    },
    f"{CORE}.ServiceStatus": {
        "conditions": merge_map("type"),
    },
    f"{CORE}.TopologySpreadConstraint": {
        "matchLabelKeys": ATOMIC,
    },
    f"{CORE}.VolumeMount": {
        "bindMountOptions": SET,
    },
    f"{RBAC}.AggregationRule": {
        "clusterRoleSelectors": ATOMIC,
    },
    f"{RBAC}.ClusterRole": {
        "rules": ATOMIC,
    },
    f"{RBAC}.ClusterRoleBinding": {
        "subjects": ATOMIC,
    },
    f"{RBAC}.PolicyRule": {
        "apiGroups": ATOMIC,
        "nonResourceURLs": ATOMIC,
        "resourceNames": ATOMIC,
        "resources": ATOMIC,
        "verbs": ATOMIC,
    },
    f"{RBAC}.Role": {
        "rules": ATOMIC,
    },
    f"{RBAC}.RoleBinding": {
        "subjects": ATOMIC,
    },
    f"{SCHED_A3}.WorkloadPodGroupSchedulingConstraints": {
        "topology": ATOMIC,
    },
    f"{APIEXT}.CustomResourceDefinitionNames": {
        "categories": ATOMIC,
        "shortNames": ATOMIC,
    },
    f"{APIEXT}.CustomResourceDefinitionSpec": {
        "versions": ATOMIC,
    },
    f"{APIEXT}.CustomResourceDefinitionStatus": {
        "conditions": map_list("type"),
        "storedVersions": ATOMIC,
    },
    f"{APIEXT}.CustomResourceDefinitionVersion": {
        "additionalPrinterColumns": ATOMIC,
        "selectableFields": ATOMIC,
    },
    f"{APIEXT}.JSONSchemaProps": {
        "allOf": ATOMIC,
        "anyOf": ATOMIC,
        "enum": ATOMIC,
        "oneOf": ATOMIC,
        "required": ATOMIC,
        "x-kubernetes-list-map-keys": ATOMIC,
        "x-kubernetes-validations": merge_map("rule"),
    },
    f"{APIEXT}.WebhookConversion": {
        "conversionReviewVersions": ATOMIC,
    },
    f"{META}.DeleteOptions": {
        "dryRun": ATOMIC,
    },
    f"{META}.FieldSelectorRequirement": {
        "values": ATOMIC,
    },
    f"{META}.LabelSelector": {
        "matchExpressions": ATOMIC,
    },
    f"{META}.LabelSelectorRequirement": {
        "values": ATOMIC,
    },
    f"{META}.ObjectMeta": {
        "finalizers": ext(patch="merge", list_type="set"),
        "managedFields": ATOMIC,
        "ownerReferences": merge_map("uid"),
    },
    f"{META}.StatusDetails": {
        "causes": ATOMIC,
    },
    f"{APIREG}.APIServiceSpec": {
        "caBundle": ATOMIC,
    },
    f"{APIREG}.APIServiceStatus": {
        "conditions": merge_map("type"),
    },
}

# Structs marked +structType=atomic upstream: replaced whole by apply, never merged field by field.
ATOMIC_STRUCTS: set[str] = {
    f"{ADMREG}.MatchResources",
    f"{ADMREG}.NamedRuleWithOperations",
    f"{ADMREG}.ParamKind",
    f"{ADMREG}.ParamRef",
    f"{ADMREG}.Variable",
    f"{CORE}.ConfigMapKeySelector",
    f"{CORE}.EndpointAddress",
    f"{CORE}.EndpointPort",
    f"{CORE}.EvictionResponder",
    f"{CORE}.FileKeySelector",
    f"{CORE}.LocalObjectReference",
    f"{CORE}.NodeSelector",
    f"{CORE}.NodeSelectorTerm",
    f"{CORE}.ObjectFieldSelector",
    f"{CORE}.ObjectReference",
    f"{CORE}.ResourceFieldSelector",
    f"{CORE}.SecretKeySelector",
    f"{CORE}.TypedLocalObjectReference",
    f"{RBAC}.RoleRef",
    f"{RBAC}.Subject",
    f"{META}.LabelSelector",
    f"{META}.OwnerReference",
}


# --------------------------------------------------------------------------------------------------
# The walk.
# --------------------------------------------------------------------------------------------------
class Generator:
    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}
        self.class_defs: dict[str, str] = {}
        self.used_facts: set[tuple[str, str]] = set()

    def definition_of(self, cls_name: str, parent_package: str) -> str:
        """Upstream definition name for a client class reached from a type in ``parent_package``."""
        m = CLASS_RE.match(cls_name)
        if m is None:
            raise SystemExit(f"unexpected client class name {cls_name}")
        if m["prefix"]:
            package = PREFIX_PACKAGES[m["prefix"]]
        elif cls_name in CLASS_PACKAGES:
            package = CLASS_PACKAGES[cls_name]
        else:
            package = parent_package
            if package.rpartition(".")[2] != m["version"].lower():
                raise SystemExit(f"{cls_name} reached from {parent_package}: add it to CLASS_PACKAGES")
        definition = f"{package}.{m['name']}"
        known = self.class_defs.setdefault(cls_name, definition)
        if known != definition:
            raise SystemExit(f"{cls_name} maps to both {known} and {definition}: add it to CLASS_PACKAGES")
        return definition

    def add_class(self, cls_name: str, definition: str) -> None:
        if definition in self.schemas:
            return
        cls = getattr(client_models, cls_name)
        package = definition.rpartition(".")[0]
        schema: Schema = {"type": "object"}
        self.schemas[definition] = schema  # placeholder first: the walk is recursive
        props: Schema = {}
        required: list[str] = []
        # Pydantic renames fields that clash with Python keywords (_continue -> var_continue); match on wire names.
        fields = {(f.serialization_alias or n): f for n, f in cls.model_fields.items()}
        for attr, py_type in cls.openapi_types.items():
            name = cls.attribute_map[attr]
            fact = TYPE_FACTS.get((definition, name))
            if fact is not None:
                self.used_facts.add((definition, name))
                py_type = fact
            elif "object" in py_type:
                raise SystemExit(f"{definition}.{name} is '{py_type}' in the client: add it to TYPE_FACTS")
            prop = self.type_schema(py_type, package, definition, name)
            if name == "metadata" and py_type == "V1ObjectMeta":
                prop["default"] = {}
            prop.update(EXTENSIONS.get(definition, {}).get(name, {}))
            if (definition, name) in DEFAULTS:
                prop["default"] = DEFAULTS[(definition, name)]
            props[name] = prop
            if fields[name].is_required():
                required.append(name)
        schema["properties"] = props
        if required:
            schema["required"] = sorted(required)
        if definition in ATOMIC_STRUCTS:
            schema["x-kubernetes-map-type"] = "atomic"
        for prop_name in EXTENSIONS.get(definition, {}):
            if prop_name not in props:
                raise SystemExit(f"EXTENSIONS names {definition}.{prop_name}, which the client lacks")

    def ref(self, definition: str) -> Schema:
        # allOf keeps sibling keys (default, extensions) valid OpenAPI 3.0, as upstream does.
        return {"allOf": [{"$ref": REF + definition}]}

    def type_schema(self, py_type: str, package: str, owner: str, prop: str) -> Schema:
        py_type = py_type.strip()
        if py_type.startswith("List[") and py_type.endswith("]"):
            items = self.type_schema(py_type[5:-1], package, owner, prop)
            if "allOf" in items:
                items["default"] = {}
            return {"type": "array", "items": items}
        if py_type.startswith("Dict[str, ") and py_type.endswith("]"):
            values = self.type_schema(py_type[10:-1], package, owner, prop)
            return {"type": "object", "additionalProperties": values}
        scalar = {
            "str": {"type": "string"},
            "int": {"type": "integer"},
            "float": {"type": "number", "format": "double"},
            "bool": {"type": "boolean"},
            "bytes": {"type": "string", "format": "byte"},
        }.get(py_type)
        if scalar is not None:
            return dict(scalar)
        if py_type == "datetime":
            return self.leaf(TIME)
        if "." in py_type:
            return self.leaf(py_type)
        definition = self.definition_of(py_type, package)
        self.add_class(py_type, definition)
        return self.ref(definition)

    def leaf(self, definition: str) -> Schema:
        if definition not in self.schemas:
            if definition not in LEAF_SCHEMAS:
                raise SystemExit(f"no schema for {definition}")
            self.schemas[definition] = json.loads(json.dumps(LEAF_SCHEMAS[definition]))
        return self.ref(definition)


# Fields whose upstream descriptions server-side Tables use as column descriptions (upstream's printers
# take them from the Go types' SwaggerDoc, which the client's field descriptions reproduce).
TABLE_DESCRIPTIONS: list[tuple[str, str, str]] = [
    (f"{META}.ObjectMeta", "V1ObjectMeta", "name"),
    (f"{META}.ObjectMeta", "V1ObjectMeta", "creationTimestamp"),
    (f"{CORE}.PodStatus", "V1PodStatus", "podIP"),
    (f"{CORE}.PodStatus", "V1PodStatus", "nominatedNodeName"),
    (f"{CORE}.PodSpec", "V1PodSpec", "nodeName"),
    (f"{CORE}.PodSpec", "V1PodSpec", "readinessGates"),
    (f"{CORE}.PodSpec", "V1PodSpec", "nodeSelector"),
    (f"{CORE}.ReplicationControllerSpec", "V1ReplicationControllerSpec", "replicas"),
    (f"{CORE}.ReplicationControllerSpec", "V1ReplicationControllerSpec", "selector"),
    (f"{CORE}.ReplicationControllerStatus", "V1ReplicationControllerStatus", "replicas"),
    (f"{CORE}.ReplicationControllerStatus", "V1ReplicationControllerStatus", "readyReplicas"),
    (f"{APPS}.ReplicaSetSpec", "V1ReplicaSetSpec", "replicas"),
    (f"{APPS}.ReplicaSetSpec", "V1ReplicaSetSpec", "selector"),
    (f"{APPS}.ReplicaSetStatus", "V1ReplicaSetStatus", "replicas"),
    (f"{APPS}.ReplicaSetStatus", "V1ReplicaSetStatus", "readyReplicas"),
    (f"{APPS}.DaemonSetStatus", "V1DaemonSetStatus", "desiredNumberScheduled"),
    (f"{APPS}.DaemonSetStatus", "V1DaemonSetStatus", "currentNumberScheduled"),
    (f"{APPS}.DaemonSetStatus", "V1DaemonSetStatus", "numberReady"),
    (f"{APPS}.DaemonSetStatus", "V1DaemonSetStatus", "updatedNumberScheduled"),
    (f"{APPS}.DaemonSetStatus", "V1DaemonSetStatus", "numberAvailable"),
    (f"{APPS}.DaemonSetSpec", "V1DaemonSetSpec", "selector"),
    (f"{APPS}.DeploymentStatus", "V1DeploymentStatus", "updatedReplicas"),
    (f"{APPS}.DeploymentStatus", "V1DeploymentStatus", "availableReplicas"),
    (f"{APPS}.DeploymentSpec", "V1DeploymentSpec", "selector"),
    (f"{APPS}.ControllerRevision", "V1ControllerRevision", "revision"),
    (f"{BATCH}.JobStatus", "V1JobStatus", "succeeded"),
    (f"{BATCH}.JobSpec", "V1JobSpec", "selector"),
    (f"{BATCH}.CronJobSpec", "V1CronJobSpec", "schedule"),
    (f"{BATCH}.CronJobSpec", "V1CronJobSpec", "timeZone"),
    (f"{BATCH}.CronJobSpec", "V1CronJobSpec", "suspend"),
    (f"{BATCH}.CronJobStatus", "V1CronJobStatus", "active"),
    (f"{BATCH}.CronJobStatus", "V1CronJobStatus", "lastScheduleTime"),
    (f"{CORE}.ServiceSpec", "V1ServiceSpec", "type"),
    (f"{CORE}.ServiceSpec", "V1ServiceSpec", "clusterIP"),
    (f"{CORE}.ServiceSpec", "V1ServiceSpec", "externalIPs"),
    (f"{CORE}.ServiceSpec", "V1ServiceSpec", "ports"),
    (f"{CORE}.ServiceSpec", "V1ServiceSpec", "selector"),
    (f"{CORE}.Endpoints", "V1Endpoints", "subsets"),
    (f"{CORE}.NodeSystemInfo", "V1NodeSystemInfo", "kubeletVersion"),
    (f"{CORE}.NodeSystemInfo", "V1NodeSystemInfo", "osImage"),
    (f"{CORE}.NodeSystemInfo", "V1NodeSystemInfo", "kernelVersion"),
    (f"{CORE}.NodeSystemInfo", "V1NodeSystemInfo", "containerRuntimeVersion"),
    (f"{CORE}.NodeStatus", "V1NodeStatus", "addresses"),
    (f"{CORE}.Event", "CoreV1Event", "lastTimestamp"),
    (f"{CORE}.Event", "CoreV1Event", "firstTimestamp"),
    (f"{CORE}.Event", "CoreV1Event", "count"),
    (f"{CORE}.Event", "CoreV1Event", "type"),
    (f"{CORE}.Event", "CoreV1Event", "reason"),
    (f"{CORE}.Event", "CoreV1Event", "involvedObject"),
    (f"{CORE}.Event", "CoreV1Event", "source"),
    (f"{CORE}.Event", "CoreV1Event", "message"),
    (f"{CORE}.ObjectReference", "V1ObjectReference", "fieldPath"),
    (f"{CORE}.Secret", "V1Secret", "type"),
    (f"{CORE}.Secret", "V1Secret", "data"),
    (f"{CORE}.ConfigMap", "V1ConfigMap", "data"),
    (f"{CORE}.ServiceAccount", "V1ServiceAccount", "secrets"),
    (f"{CORE}.PersistentVolumeSpec", "V1PersistentVolumeSpec", "capacity"),
    (f"{CORE}.PersistentVolumeSpec", "V1PersistentVolumeSpec", "accessModes"),
    (f"{CORE}.PersistentVolumeSpec", "V1PersistentVolumeSpec", "persistentVolumeReclaimPolicy"),
    (f"{CORE}.PersistentVolumeSpec", "V1PersistentVolumeSpec", "claimRef"),
    (f"{CORE}.PersistentVolumeSpec", "V1PersistentVolumeSpec", "volumeMode"),
    (f"{CORE}.PersistentVolumeStatus", "V1PersistentVolumeStatus", "phase"),
    (f"{CORE}.PersistentVolumeStatus", "V1PersistentVolumeStatus", "reason"),
    (f"{CORE}.PersistentVolumeClaimStatus", "V1PersistentVolumeClaimStatus", "phase"),
    (f"{CORE}.PersistentVolumeClaimStatus", "V1PersistentVolumeClaimStatus", "capacity"),
    (f"{CORE}.PersistentVolumeClaimStatus", "V1PersistentVolumeClaimStatus", "accessModes"),
    (f"{CORE}.PersistentVolumeClaimSpec", "V1PersistentVolumeClaimSpec", "volumeName"),
    (f"{CORE}.PersistentVolumeClaimSpec", "V1PersistentVolumeClaimSpec", "volumeMode"),
    (f"{AUTOSCALING_V2}.HorizontalPodAutoscalerSpec", "V2HorizontalPodAutoscalerSpec", "scaleTargetRef"),
    (f"{AUTOSCALING_V2}.HorizontalPodAutoscalerSpec", "V2HorizontalPodAutoscalerSpec", "metrics"),
    (f"{AUTOSCALING_V2}.HorizontalPodAutoscalerSpec", "V2HorizontalPodAutoscalerSpec", "minReplicas"),
    (f"{AUTOSCALING_V2}.HorizontalPodAutoscalerSpec", "V2HorizontalPodAutoscalerSpec", "maxReplicas"),
    (f"{AUTOSCALING_V2}.HorizontalPodAutoscalerStatus", "V2HorizontalPodAutoscalerStatus", "currentReplicas"),
    (f"{NETWORKING}.NetworkPolicySpec", "V1NetworkPolicySpec", "podSelector"),
    (f"{RBAC}.RoleBinding", "V1RoleBinding", "roleRef"),
    (f"{RBAC}.ClusterRoleBinding", "V1ClusterRoleBinding", "roleRef"),
    (f"{CERTIFICATES}.CertificateSigningRequestSpec", "V1CertificateSigningRequestSpec", "signerName"),
    (f"{CERTIFICATES}.CertificateSigningRequestSpec", "V1CertificateSigningRequestSpec", "request"),
    (f"{CERTIFICATES}.CertificateSigningRequestSpec", "V1CertificateSigningRequestSpec", "expirationSeconds"),
    (f"{CERTIFICATES}.CertificateSigningRequestStatus", "V1CertificateSigningRequestStatus", "conditions"),
    (f"{COORD}.LeaseSpec", "V1LeaseSpec", "holderIdentity"),
    (f"{STORAGE}.StorageClass", "V1StorageClass", "provisioner"),
    (f"{STORAGE}.StorageClass", "V1StorageClass", "reclaimPolicy"),
    (f"{STORAGE}.StorageClass", "V1StorageClass", "volumeBindingMode"),
    (f"{STORAGE}.StorageClass", "V1StorageClass", "allowVolumeExpansion"),
    (f"{STORAGE}.VolumeAttachmentSpec", "V1VolumeAttachmentSpec", "attacher"),
    (f"{STORAGE}.VolumeAttachmentSpec", "V1VolumeAttachmentSpec", "nodeName"),
    (f"{STORAGE}.VolumeAttachmentSource", "V1VolumeAttachmentSource", "persistentVolumeName"),
    (f"{STORAGE}.VolumeAttachmentStatus", "V1VolumeAttachmentStatus", "attached"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "attachRequired"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "podInfoOnMount"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "storageCapacity"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "tokenRequests"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "requiresRepublish"),
    (f"{STORAGE}.CSIDriverSpec", "V1CSIDriverSpec", "volumeLifecycleModes"),
    (f"{STORAGE}.CSIStorageCapacity", "V1CSIStorageCapacity", "storageClassName"),
    (f"{STORAGE}.CSIStorageCapacity", "V1CSIStorageCapacity", "capacity"),
    (f"{STORAGE}.VolumeAttributesClass", "V1VolumeAttributesClass", "driverName"),
    (f"{SCHEDULING}.PriorityClass", "V1PriorityClass", "value"),
    (f"{SCHEDULING}.PriorityClass", "V1PriorityClass", "globalDefault"),
    (f"{SCHEDULING}.PriorityClass", "V1PriorityClass", "preemptionPolicy"),
    (f"{DISCOVERY}.EndpointSlice", "V1EndpointSlice", "addressType"),
    (f"{DISCOVERY}.EndpointSlice", "V1EndpointSlice", "ports"),
    (f"{DISCOVERY}.EndpointSlice", "V1EndpointSlice", "endpoints"),
    (f"{FLOWCONTROL}.PriorityLevelConfigurationReference", "V1PriorityLevelConfigurationReference", "name"),
    (f"{FLOWCONTROL}.FlowSchemaSpec", "V1FlowSchemaSpec", "matchingPrecedence"),
    (f"{FLOWCONTROL}.FlowSchemaSpec", "V1FlowSchemaSpec", "distinguisherMethod"),
    (f"{FLOWCONTROL}.PriorityLevelConfigurationSpec", "V1PriorityLevelConfigurationSpec", "type"),
    (
        f"{FLOWCONTROL}.LimitedPriorityLevelConfiguration",
        "V1LimitedPriorityLevelConfiguration",
        "nominalConcurrencyShares",
    ),
    (f"{FLOWCONTROL}.QueuingConfiguration", "V1QueuingConfiguration", "queues"),
    (f"{FLOWCONTROL}.QueuingConfiguration", "V1QueuingConfiguration", "handSize"),
    (f"{FLOWCONTROL}.QueuingConfiguration", "V1QueuingConfiguration", "queueLengthLimit"),
    (f"{RESOURCE}.ResourceSliceSpec", "V1ResourceSliceSpec", "nodeName"),
    (f"{RESOURCE}.ResourceSliceSpec", "V1ResourceSliceSpec", "driver"),
    (f"{RESOURCE}.ResourcePool", "V1ResourcePool", "name"),
    (f"{META}.Status", "V1Status", "status"),
    (f"{META}.Status", "V1Status", "reason"),
]


def lightkube_description(definition: str, wire: str) -> str | None:
    """A field description from lightkube-models' docstrings, which keep the ones the client drops (fields
    that are a ``$ref`` lose theirs in the client's models)."""
    package, _, type_name = definition.rpartition(".")
    group_version = "_".join(package.split(".")[-2:])  # io.k8s.api.apps.v1 -> apps_v1
    module = importlib.import_module(f"lightkube.models.{group_version}")
    doc = getattr(module, type_name).__doc__ or ""
    m = re.search(rf"\* \*\*{re.escape(wire)}\*\* ``[^`]*`` - (.*?)(?=\n\s*\* \*\*|\Z)", doc, re.S)
    if m is None:
        return None
    return " ".join(line.strip() for line in m.group(1).strip().splitlines())


def table_descriptions() -> dict[str, str]:
    """``<definition>.<field>`` -> the field's upstream description (wire facts: Tables carry them)."""
    out: dict[str, str] = {}
    for definition, cls_name, wire in TABLE_DESCRIPTIONS:
        cls = getattr(client_models, cls_name)
        python = {v: k for k, v in cls.attribute_map.items()}[wire]
        description = cls.model_fields[python].description or lightkube_description(definition, wire)
        if not description:
            raise SystemExit(f"{cls_name}.{wire} has no description in the client or lightkube-models")
        out[f"{definition}.{wire}"] = description
    return out


def gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def generate() -> Schema:
    gen = Generator()
    kinds: list[dict[str, str]] = []

    def add_kind(cls_name: str, definition: str, gvks: list[dict[str, str]], description: str) -> None:
        gen.class_defs[cls_name] = definition
        gen.add_class(cls_name, definition)
        schema = gen.schemas[definition]
        schema["description"] = description
        schema["x-kubernetes-group-version-kind"] = gvks
        kinds.extend({**g, "definition": definition} for g in gvks)

    for group, version, kind, cls_name, package, description in KINDS:
        name = CLASS_RE.match(cls_name)
        assert name is not None
        add_kind(cls_name, f"{package}.{name['name']}", [gvk(group, version, kind)], description)
        list_cls = cls_name + "List"
        if not hasattr(client_models, list_cls) and name["prefix"]:
            list_cls = (
                cls_name[len(name["prefix"]) :] + "List"
            )  # ResourceV1ResourceClaim -> V1ResourceClaimList
        if hasattr(client_models, list_cls):
            add_kind(
                list_cls,
                f"{package}.{name['name']}List",
                [gvk(group, version, kind + "List")],
                f"A list of {kind} objects.",
            )
    for kind, cls_name, gvs, description in META_KINDS:
        add_kind(cls_name, f"{META}.{kind}", [gvk(g, v, kind) for g, v in gvs], description)
    for definition, cls_name, description in PLAIN_DEFINITIONS:
        gen.class_defs[cls_name] = definition
        gen.add_class(cls_name, definition)
        gen.schemas[definition]["description"] = description

    unused = set(TYPE_FACTS) - gen.used_facts
    if unused:
        raise SystemExit(f"TYPE_FACTS entries the walk never reached: {sorted(unused)}")
    for definition in EXTENSIONS:
        if definition not in gen.schemas:
            raise SystemExit(f"EXTENSIONS names {definition}, which the walk never reached")
    for definition in ATOMIC_STRUCTS:
        if definition not in gen.schemas:
            raise SystemExit(f"ATOMIC_STRUCTS names {definition}, which the walk never reached")
    kinds.sort(key=lambda k: (k["group"], k["version"], k["kind"]))
    return {"schemas": gen.schemas, "kinds": kinds, "descriptions": table_descriptions()}


def render(doc: Schema) -> str:
    return json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the committed file is out of date")
    args = parser.parse_args()
    text = render(generate())
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date; run tools/gen_openapi.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
