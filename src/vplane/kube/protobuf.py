"""Decoding of ``application/vnd.kubernetes.protobuf`` request bodies.

kubectl 1.32 and later sends built-in kinds as protobuf through its typed clientset and has no JSON
fallback (spec §0 item 1, §5), so the server has to read them; it always answers in JSON.

A body is the magic ``k8s\\x00`` and a ``runtime.Unknown`` (apimachinery ``pkg/runtime/generated.proto``:
1 typeMeta {1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType) whose ``raw`` is the object's
own message. Like upstream's protobuf serializer, ``contentEncoding`` and ``contentType`` are ignored.

:func:`decode` turns the object into exactly the dict kubectl's JSON body for it would be, so nothing
downstream sees a second shape. gogo-protobuf writes every non-pointer field (zero or not) and pointer
fields only when set; Go's encoding/json then decides what to print. The rules follow from that:

* A field marked ``!`` in :data:`_SCHEMA` is one Go prints even when empty (a pointer, or no
  ``omitempty``): a scalar keeps its zero value (``replicas: 0``, ``allowed: false``), a zero time prints
  ``null``, and an absent list or map prints ``null`` (``rules: null`` on an aggregated ClusterRole).
  Unmarked scalars are dropped when zero and unmarked lists and maps when absent; so is the one unmarked
  time, ``creationTimestamp``, when zero (``omitzero`` since 1.34; kubectl 1.32 still printed ``null``).
* Messages are always kept, even empty: encoding/json never omits a struct, and a pointer to an empty
  one carries meaning (``emptyDir: {}``). So a Deployment has ``strategy: {}`` and ``status: {}``.
* Other fields absent from the wire stay absent. Only a hand-made body can lack a non-pointer field;
  Go would print its zero value there.
* ``Quantity`` prints as its string, passed through as sent rather than re-canonicalized;
  ``IntOrString`` as an int or a string. ``int32`` fields are read as signed 64-bit, not truncated.
* Strings must be UTF-8 (Go would pass invalid bytes through and print U+FFFD; we answer 400 instead).
* Wire data that upstream's generated ``Unmarshal`` would reject (truncation, wrong wire type, overlong
  varint, groups, field number 0) is a 400; unknown field numbers are skipped, as upstream does.

Field numbers, JSON names, pointer-ness and ``omitempty`` were derived mechanically from the struct tags
in k8s.io/api and k8s.io/apimachinery v0.36.3 ``types.go`` and cross-checked against each package's
``generated.proto`` (the file named above each block of the schema).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from vplane.kube import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
# What a client may send instead when a kind has no protobuf table here (for the 415 message).
_OTHER_MEDIA_TYPES = ("application/json", "application/yaml")

# The schema: one message per line (continuation lines are indented). A field is
# ``NUMBER [*]name[:TYPE][!]`` where TYPE defaults to a string and is one of
#   str bytes int bool                  scalars (bytes print as base64; int covers int32 and int64)
#   Time MicroTime                      metav1.Time / MicroTime {1 seconds, 2 nanos}, printed RFC 3339
#   Quantity IntOrString                resource.Quantity {1 string}; intstr {1 type, 2 intVal, 3 strVal}
#   Raw                                 FieldsV1 / RawExtension {1 raw}: the raw bytes are JSON
#   Strings                             ExtraValue {1 repeated items}: prints as a list of strings
#   <Message>                           a message defined in this schema
# ``[T]`` is repeated, ``{T}`` is map<string, T> (entries {1 key, 2 value}). ``!`` marks a field Go prints
# even when empty (see the module docstring); ``*`` inlines the message's fields into the parent (Go's
# ``json:",inline"``). Fields are listed in Go struct order, which is also the JSON key order.
_SCHEMA = """
# k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto
ObjectMeta = 1 name, 2 generateName, 3 namespace, 4 selfLink, 5 uid, 6 resourceVersion, 7 generation:int,
    8 creationTimestamp:Time, 9 deletionTimestamp:Time!, 10 deletionGracePeriodSeconds:int!,
    11 labels:{str}, 12 annotations:{str}, 13 ownerReferences:[OwnerReference], 14 finalizers:[str],
    17 managedFields:[ManagedFieldsEntry]
OwnerReference = 5 apiVersion!, 1 kind!, 3 name!, 4 uid!, 6 controller:bool!, 7 blockOwnerDeletion:bool!
ManagedFieldsEntry = 1 manager, 2 operation, 3 apiVersion, 4 time:Time!, 6 fieldsType, 7 fieldsV1:Raw!,
    8 subresource
Condition = 1 type!, 2 status!, 3 observedGeneration:int, 4 lastTransitionTime:Time!, 5 reason!,
    6 message!
LabelSelector = 1 matchLabels:{str}, 2 matchExpressions:[LabelSelectorRequirement]
LabelSelectorRequirement = 1 key!, 2 operator!, 3 values:[str]
FieldSelectorRequirement = 1 key!, 2 operator!, 3 values:[str]
DeleteOptions = 1 gracePeriodSeconds:int!, 2 preconditions:Preconditions, 3 orphanDependents:bool!,
    4 propagationPolicy!, 5 dryRun:[str], 6 ignoreStoreReadErrorWithClusterBreakingPotential:bool!
Preconditions = 1 uid!, 2 resourceVersion!
# k8s.io/api/core/v1/generated.proto
ConfigMap = 1 metadata:ObjectMeta, 4 immutable:bool!, 2 data:{str}, 3 binaryData:{bytes}
Secret = 1 metadata:ObjectMeta, 5 immutable:bool!, 2 data:{bytes}, 4 stringData:{str}, 3 type
Namespace = 1 metadata:ObjectMeta, 2 spec:NamespaceSpec, 3 status:NamespaceStatus
NamespaceSpec = 1 finalizers:[str]
NamespaceStatus = 1 phase, 2 conditions:[NamespaceCondition]
NamespaceCondition = 1 type!, 2 status!, 4 lastTransitionTime:Time!, 5 reason, 6 message
ServiceAccount = 1 metadata:ObjectMeta, 2 secrets:[ObjectReference],
    3 imagePullSecrets:[LocalObjectReference], 4 automountServiceAccountToken:bool!
ObjectReference = 1 kind, 2 namespace, 3 name, 4 uid, 5 apiVersion, 6 resourceVersion, 7 fieldPath
LocalObjectReference = 1 name
Service = 1 metadata:ObjectMeta, 2 spec:ServiceSpec, 3 status:ServiceStatus
ServiceSpec = 1 ports:[ServicePort], 2 selector:{str}, 3 clusterIP, 18 clusterIPs:[str], 4 type,
    5 externalIPs:[str], 7 sessionAffinity, 8 loadBalancerIP, 9 loadBalancerSourceRanges:[str],
    10 externalName, 11 externalTrafficPolicy, 12 healthCheckNodePort:int,
    13 publishNotReadyAddresses:bool, 14 sessionAffinityConfig:SessionAffinityConfig, 19 ipFamilies:[str],
    17 ipFamilyPolicy!, 20 allocateLoadBalancerNodePorts:bool!, 21 loadBalancerClass!,
    22 internalTrafficPolicy!, 23 trafficDistribution!
ServicePort = 1 name, 2 protocol, 6 appProtocol!, 3 port:int!, 4 targetPort:IntOrString, 5 nodePort:int
SessionAffinityConfig = 1 clientIP:ClientIPConfig
ClientIPConfig = 1 timeoutSeconds:int!
ServiceStatus = 1 loadBalancer:LoadBalancerStatus, 2 conditions:[Condition]
LoadBalancerStatus = 1 ingress:[LoadBalancerIngress]
LoadBalancerIngress = 1 ip, 2 hostname, 3 ipMode!, 4 ports:[PortStatus]
PortStatus = 1 port:int!, 2 protocol!, 3 error!
core.Event = 1 metadata:ObjectMeta, 2 involvedObject:ObjectReference, 3 reason, 4 message,
    5 source:EventSource, 6 firstTimestamp:Time!, 7 lastTimestamp:Time!, 8 count:int, 9 type,
    10 eventTime:MicroTime!, 11 series:core.EventSeries, 12 action, 13 related:ObjectReference,
    14 reportingComponent!, 15 reportingInstance!
EventSource = 1 component, 2 host
core.EventSeries = 1 count:int, 2 lastObservedTime:MicroTime!
ResourceQuota = 1 metadata:ObjectMeta, 2 spec:ResourceQuotaSpec, 3 status:ResourceQuotaStatus
ResourceQuotaSpec = 1 hard:{Quantity}, 2 scopes:[str], 3 scopeSelector:ScopeSelector
ScopeSelector = 1 matchExpressions:[ScopedResourceSelectorRequirement]
ScopedResourceSelectorRequirement = 1 scopeName!, 2 operator!, 3 values:[str]
ResourceQuotaStatus = 1 hard:{Quantity}, 2 used:{Quantity}
TypedLocalObjectReference = 1 apiGroup!, 2 kind!, 3 name!
PodTemplateSpec = 1 metadata:ObjectMeta, 2 spec:PodSpec
PodSpec = 1 volumes:[Volume], 20 initContainers:[Container], 2 containers:[Container]!,
    34 ephemeralContainers:[EphemeralContainer], 3 restartPolicy, 4 terminationGracePeriodSeconds:int!,
    5 activeDeadlineSeconds:int!, 6 dnsPolicy, 7 nodeSelector:{str}, 8 serviceAccountName,
    9 serviceAccount, 21 automountServiceAccountToken:bool!, 10 nodeName, 11 hostNetwork:bool,
    12 hostPID:bool, 13 hostIPC:bool, 27 shareProcessNamespace:bool!,
    14 securityContext:PodSecurityContext, 15 imagePullSecrets:[LocalObjectReference], 16 hostname,
    17 subdomain, 18 affinity:Affinity, 19 schedulerName, 22 tolerations:[Toleration],
    23 hostAliases:[HostAlias], 24 priorityClassName, 25 priority:int!, 26 dnsConfig:PodDNSConfig,
    28 readinessGates:[PodReadinessGate], 29 runtimeClassName!, 30 enableServiceLinks:bool!,
    31 preemptionPolicy!, 32 overhead:{Quantity}, 33 topologySpreadConstraints:[TopologySpreadConstraint],
    35 setHostnameAsFQDN:bool!, 36 os:PodOS, 37 hostUsers:bool!, 38 schedulingGates:[PodSchedulingGate],
    39 resourceClaims:[PodResourceClaim], 40 resources:ResourceRequirements, 41 hostnameOverride!,
    43 schedulingGroup:PodSchedulingGroup
Volume = 1 name!, 2 *volumeSource:VolumeSource
VolumeSource = 1 hostPath:HostPathVolumeSource, 2 emptyDir:EmptyDirVolumeSource,
    3 gcePersistentDisk:GCEPersistentDiskVolumeSource,
    4 awsElasticBlockStore:AWSElasticBlockStoreVolumeSource, 5 gitRepo:GitRepoVolumeSource,
    6 secret:SecretVolumeSource, 7 nfs:NFSVolumeSource, 8 iscsi:ISCSIVolumeSource,
    9 glusterfs:GlusterfsVolumeSource, 10 persistentVolumeClaim:PersistentVolumeClaimVolumeSource,
    11 rbd:RBDVolumeSource, 12 flexVolume:FlexVolumeSource, 13 cinder:CinderVolumeSource,
    14 cephfs:CephFSVolumeSource, 15 flocker:FlockerVolumeSource, 16 downwardAPI:DownwardAPIVolumeSource,
    17 fc:FCVolumeSource, 18 azureFile:AzureFileVolumeSource, 19 configMap:ConfigMapVolumeSource,
    20 vsphereVolume:VsphereVirtualDiskVolumeSource, 21 quobyte:QuobyteVolumeSource,
    22 azureDisk:AzureDiskVolumeSource, 23 photonPersistentDisk:PhotonPersistentDiskVolumeSource,
    26 projected:ProjectedVolumeSource, 24 portworxVolume:PortworxVolumeSource,
    25 scaleIO:ScaleIOVolumeSource, 27 storageos:StorageOSVolumeSource, 28 csi:CSIVolumeSource,
    29 ephemeral:EphemeralVolumeSource, 30 image:ImageVolumeSource
HostPathVolumeSource = 1 path!, 2 type!
EmptyDirVolumeSource = 1 medium, 2 sizeLimit:Quantity
GCEPersistentDiskVolumeSource = 1 pdName!, 2 fsType, 3 partition:int, 4 readOnly:bool
AWSElasticBlockStoreVolumeSource = 1 volumeID!, 2 fsType, 3 partition:int, 4 readOnly:bool
GitRepoVolumeSource = 1 repository!, 2 revision, 3 directory
SecretVolumeSource = 1 secretName, 2 items:[KeyToPath], 3 defaultMode:int!, 4 optional:bool!
KeyToPath = 1 key!, 2 path!, 3 mode:int!
NFSVolumeSource = 1 server!, 2 path!, 3 readOnly:bool
ISCSIVolumeSource = 1 targetPortal!, 2 iqn!, 3 lun:int!, 4 iscsiInterface, 5 fsType, 6 readOnly:bool,
    7 portals:[str], 8 chapAuthDiscovery:bool, 11 chapAuthSession:bool, 10 secretRef:LocalObjectReference,
    12 initiatorName!
GlusterfsVolumeSource = 1 endpoints!, 2 path!, 3 readOnly:bool
PersistentVolumeClaimVolumeSource = 1 claimName!, 2 readOnly:bool
RBDVolumeSource = 1 monitors:[str]!, 2 image!, 3 fsType, 4 pool, 5 user, 6 keyring,
    7 secretRef:LocalObjectReference, 8 readOnly:bool
FlexVolumeSource = 1 driver!, 2 fsType, 3 secretRef:LocalObjectReference, 4 readOnly:bool, 5 options:{str}
CinderVolumeSource = 1 volumeID!, 2 fsType, 3 readOnly:bool, 4 secretRef:LocalObjectReference
CephFSVolumeSource = 1 monitors:[str]!, 2 path, 3 user, 4 secretFile, 5 secretRef:LocalObjectReference,
    6 readOnly:bool
FlockerVolumeSource = 1 datasetName, 2 datasetUUID
DownwardAPIVolumeSource = 1 items:[DownwardAPIVolumeFile], 2 defaultMode:int!
DownwardAPIVolumeFile = 1 path!, 2 fieldRef:ObjectFieldSelector, 3 resourceFieldRef:ResourceFieldSelector,
    4 mode:int!
ObjectFieldSelector = 1 apiVersion, 2 fieldPath!
ResourceFieldSelector = 1 containerName, 2 resource!, 3 divisor:Quantity
FCVolumeSource = 1 targetWWNs:[str], 2 lun:int!, 3 fsType, 4 readOnly:bool, 5 wwids:[str]
AzureFileVolumeSource = 1 secretName!, 2 shareName!, 3 readOnly:bool
ConfigMapVolumeSource = 1 *localObjectReference:LocalObjectReference, 2 items:[KeyToPath],
    3 defaultMode:int!, 4 optional:bool!
VsphereVirtualDiskVolumeSource = 1 volumePath!, 2 fsType, 3 storagePolicyName, 4 storagePolicyID
QuobyteVolumeSource = 1 registry!, 2 volume!, 3 readOnly:bool, 4 user, 5 group, 6 tenant
AzureDiskVolumeSource = 1 diskName!, 2 diskURI!, 3 cachingMode!, 4 fsType!, 5 readOnly:bool!, 6 kind!
PhotonPersistentDiskVolumeSource = 1 pdID!, 2 fsType
ProjectedVolumeSource = 1 sources:[VolumeProjection]!, 2 defaultMode:int!
VolumeProjection = 1 secret:SecretProjection, 2 downwardAPI:DownwardAPIProjection,
    3 configMap:ConfigMapProjection, 4 serviceAccountToken:ServiceAccountTokenProjection,
    5 clusterTrustBundle:ClusterTrustBundleProjection, 6 podCertificate:PodCertificateProjection
SecretProjection = 1 *localObjectReference:LocalObjectReference, 2 items:[KeyToPath], 4 optional:bool!
DownwardAPIProjection = 1 items:[DownwardAPIVolumeFile]
ConfigMapProjection = 1 *localObjectReference:LocalObjectReference, 2 items:[KeyToPath], 4 optional:bool!
ServiceAccountTokenProjection = 1 audience, 2 expirationSeconds:int!, 3 path!
ClusterTrustBundleProjection = 1 name!, 2 signerName!, 3 labelSelector:LabelSelector, 5 optional:bool!,
    4 path!
PodCertificateProjection = 1 signerName, 2 keyType, 3 maxExpirationSeconds:int!, 4 credentialBundlePath,
    5 keyPath, 6 certificateChainPath, 7 userAnnotations:{str}
PortworxVolumeSource = 1 volumeID!, 2 fsType, 3 readOnly:bool
ScaleIOVolumeSource = 1 gateway!, 2 system!, 3 secretRef:LocalObjectReference, 4 sslEnabled:bool,
    5 protectionDomain, 6 storagePool, 7 storageMode, 8 volumeName, 9 fsType, 10 readOnly:bool
StorageOSVolumeSource = 1 volumeName, 2 volumeNamespace, 3 fsType, 4 readOnly:bool,
    5 secretRef:LocalObjectReference
CSIVolumeSource = 1 driver!, 2 readOnly:bool!, 3 fsType!, 4 volumeAttributes:{str},
    5 nodePublishSecretRef:LocalObjectReference
EphemeralVolumeSource = 1 volumeClaimTemplate:PersistentVolumeClaimTemplate
PersistentVolumeClaimTemplate = 1 metadata:ObjectMeta, 2 spec:PersistentVolumeClaimSpec
PersistentVolumeClaimSpec = 1 accessModes:[str], 4 selector:LabelSelector,
    2 resources:VolumeResourceRequirements, 3 volumeName, 5 storageClassName!, 6 volumeMode!,
    7 dataSource:TypedLocalObjectReference, 8 dataSourceRef:TypedObjectReference,
    9 volumeAttributesClassName!
VolumeResourceRequirements = 1 limits:{Quantity}, 2 requests:{Quantity}
TypedObjectReference = 1 apiGroup!, 2 kind!, 3 name!, 4 namespace!
ImageVolumeSource = 1 reference, 2 pullPolicy
Container = 1 name!, 2 image, 3 command:[str], 4 args:[str], 5 workingDir, 6 ports:[ContainerPort],
    19 envFrom:[EnvFromSource], 7 env:[EnvVar], 8 resources:ResourceRequirements,
    23 resizePolicy:[ContainerResizePolicy], 24 restartPolicy!,
    25 restartPolicyRules:[ContainerRestartRule], 9 volumeMounts:[VolumeMount],
    21 volumeDevices:[VolumeDevice], 10 livenessProbe:Probe, 11 readinessProbe:Probe,
    22 startupProbe:Probe, 12 lifecycle:Lifecycle, 13 terminationMessagePath, 20 terminationMessagePolicy,
    14 imagePullPolicy, 15 securityContext:SecurityContext, 16 stdin:bool, 17 stdinOnce:bool, 18 tty:bool
ContainerPort = 1 name, 2 hostPort:int, 3 containerPort:int!, 4 protocol, 5 hostIP
EnvFromSource = 1 prefix, 2 configMapRef:ConfigMapEnvSource, 3 secretRef:SecretEnvSource
ConfigMapEnvSource = 1 *localObjectReference:LocalObjectReference, 2 optional:bool!
SecretEnvSource = 1 *localObjectReference:LocalObjectReference, 2 optional:bool!
EnvVar = 1 name!, 2 value, 3 valueFrom:EnvVarSource
EnvVarSource = 1 fieldRef:ObjectFieldSelector, 2 resourceFieldRef:ResourceFieldSelector,
    3 configMapKeyRef:ConfigMapKeySelector, 4 secretKeyRef:SecretKeySelector, 5 fileKeyRef:FileKeySelector
ConfigMapKeySelector = 1 *localObjectReference:LocalObjectReference, 2 key!, 3 optional:bool!
SecretKeySelector = 1 *localObjectReference:LocalObjectReference, 2 key!, 3 optional:bool!
FileKeySelector = 1 volumeName!, 2 path!, 3 key!, 4 optional:bool!
ResourceRequirements = 1 limits:{Quantity}, 2 requests:{Quantity}, 3 claims:[ResourceClaim]
ResourceClaim = 1 name!, 2 request
ContainerResizePolicy = 1 resourceName!, 2 restartPolicy!
ContainerRestartRule = 1 action, 2 exitCodes:ContainerRestartRuleOnExitCodes
ContainerRestartRuleOnExitCodes = 1 operator, 2 values:[int]
VolumeMount = 1 name!, 2 readOnly:bool, 7 recursiveReadOnly!, 3 mountPath!, 4 subPath,
    5 mountPropagation!, 6 subPathExpr
VolumeDevice = 1 name!, 2 devicePath!
Probe = 1 *handler:ProbeHandler, 2 initialDelaySeconds:int, 3 timeoutSeconds:int, 4 periodSeconds:int,
    5 successThreshold:int, 6 failureThreshold:int, 7 terminationGracePeriodSeconds:int!
ProbeHandler = 1 exec:ExecAction, 2 httpGet:HTTPGetAction, 3 tcpSocket:TCPSocketAction, 4 grpc:GRPCAction
ExecAction = 1 command:[str]
HTTPGetAction = 1 path, 2 port:IntOrString, 3 host, 4 scheme, 5 httpHeaders:[HTTPHeader]
HTTPHeader = 1 name!, 2 value!
TCPSocketAction = 1 port:IntOrString, 2 host
GRPCAction = 1 port:int!, 2 service!
Lifecycle = 1 postStart:LifecycleHandler, 2 preStop:LifecycleHandler, 3 stopSignal!
LifecycleHandler = 1 exec:ExecAction, 2 httpGet:HTTPGetAction, 3 tcpSocket:TCPSocketAction,
    4 sleep:SleepAction
SleepAction = 1 seconds:int!
SecurityContext = 1 capabilities:Capabilities, 2 privileged:bool!, 3 seLinuxOptions:SELinuxOptions,
    10 windowsOptions:WindowsSecurityContextOptions, 4 runAsUser:int!, 8 runAsGroup:int!,
    5 runAsNonRoot:bool!, 6 readOnlyRootFilesystem:bool!, 7 allowPrivilegeEscalation:bool!, 9 procMount!,
    11 seccompProfile:SeccompProfile, 12 appArmorProfile:AppArmorProfile
Capabilities = 1 add:[str], 2 drop:[str]
SELinuxOptions = 1 user, 2 role, 3 type, 4 level
WindowsSecurityContextOptions = 1 gmsaCredentialSpecName!, 2 gmsaCredentialSpec!, 3 runAsUserName!,
    4 hostProcess:bool!
SeccompProfile = 1 type!, 2 localhostProfile!
AppArmorProfile = 1 type!, 2 localhostProfile!
EphemeralContainer = 1 *ephemeralContainerCommon:EphemeralContainerCommon, 2 targetContainerName
EphemeralContainerCommon = 1 name!, 2 image, 3 command:[str], 4 args:[str], 5 workingDir,
    6 ports:[ContainerPort], 19 envFrom:[EnvFromSource], 7 env:[EnvVar], 8 resources:ResourceRequirements,
    23 resizePolicy:[ContainerResizePolicy], 24 restartPolicy!,
    25 restartPolicyRules:[ContainerRestartRule], 9 volumeMounts:[VolumeMount],
    21 volumeDevices:[VolumeDevice], 10 livenessProbe:Probe, 11 readinessProbe:Probe,
    22 startupProbe:Probe, 12 lifecycle:Lifecycle, 13 terminationMessagePath, 20 terminationMessagePolicy,
    14 imagePullPolicy, 15 securityContext:SecurityContext, 16 stdin:bool, 17 stdinOnce:bool, 18 tty:bool
PodSecurityContext = 1 seLinuxOptions:SELinuxOptions, 8 windowsOptions:WindowsSecurityContextOptions,
    2 runAsUser:int!, 6 runAsGroup:int!, 3 runAsNonRoot:bool!, 4 supplementalGroups:[int],
    12 supplementalGroupsPolicy!, 5 fsGroup:int!, 7 sysctls:[Sysctl], 9 fsGroupChangePolicy!,
    10 seccompProfile:SeccompProfile, 11 appArmorProfile:AppArmorProfile, 13 seLinuxChangePolicy!
Sysctl = 1 name!, 2 value!
Affinity = 1 nodeAffinity:NodeAffinity, 2 podAffinity:PodAffinity, 3 podAntiAffinity:PodAntiAffinity
NodeAffinity = 1 requiredDuringSchedulingIgnoredDuringExecution:NodeSelector,
    2 preferredDuringSchedulingIgnoredDuringExecution:[PreferredSchedulingTerm]
NodeSelector = 1 nodeSelectorTerms:[NodeSelectorTerm]!
NodeSelectorTerm = 1 matchExpressions:[NodeSelectorRequirement], 2 matchFields:[NodeSelectorRequirement]
NodeSelectorRequirement = 1 key!, 2 operator!, 3 values:[str]
PreferredSchedulingTerm = 1 weight:int!, 2 preference:NodeSelectorTerm
PodAffinity = 1 requiredDuringSchedulingIgnoredDuringExecution:[PodAffinityTerm],
    2 preferredDuringSchedulingIgnoredDuringExecution:[WeightedPodAffinityTerm]
PodAffinityTerm = 1 labelSelector:LabelSelector, 2 namespaces:[str], 3 topologyKey!,
    4 namespaceSelector:LabelSelector, 5 matchLabelKeys:[str], 6 mismatchLabelKeys:[str]
WeightedPodAffinityTerm = 1 weight:int!, 2 podAffinityTerm:PodAffinityTerm
PodAntiAffinity = 1 requiredDuringSchedulingIgnoredDuringExecution:[PodAffinityTerm],
    2 preferredDuringSchedulingIgnoredDuringExecution:[WeightedPodAffinityTerm]
Toleration = 1 key, 2 operator, 3 value, 4 effect, 5 tolerationSeconds:int!
HostAlias = 1 ip!, 2 hostnames:[str]
PodDNSConfig = 1 nameservers:[str], 2 searches:[str], 3 options:[PodDNSConfigOption]
PodDNSConfigOption = 1 name, 2 value!
PodReadinessGate = 1 conditionType!
TopologySpreadConstraint = 1 maxSkew:int!, 2 topologyKey!, 3 whenUnsatisfiable!,
    4 labelSelector:LabelSelector, 5 minDomains:int!, 6 nodeAffinityPolicy!, 7 nodeTaintsPolicy!,
    8 matchLabelKeys:[str]
PodOS = 1 name!
PodSchedulingGate = 1 name!
PodResourceClaim = 1 name!, 3 resourceClaimName!, 4 resourceClaimTemplateName!
PodSchedulingGroup = 1 podGroupName!
# k8s.io/api/apps/v1/generated.proto
Deployment = 1 metadata:ObjectMeta, 2 spec:DeploymentSpec, 3 status:DeploymentStatus
DeploymentSpec = 1 replicas:int!, 2 selector:LabelSelector, 3 template:PodTemplateSpec,
    4 strategy:DeploymentStrategy, 5 minReadySeconds:int, 6 revisionHistoryLimit:int!, 7 paused:bool,
    9 progressDeadlineSeconds:int!
DeploymentStrategy = 1 type, 2 rollingUpdate:RollingUpdateDeployment
RollingUpdateDeployment = 1 maxUnavailable:IntOrString, 2 maxSurge:IntOrString
DeploymentStatus = 1 observedGeneration:int, 2 replicas:int, 3 updatedReplicas:int, 7 readyReplicas:int,
    4 availableReplicas:int, 5 unavailableReplicas:int, 9 terminatingReplicas:int!,
    6 conditions:[DeploymentCondition], 8 collisionCount:int!
DeploymentCondition = 1 type!, 2 status!, 6 lastUpdateTime:Time!, 7 lastTransitionTime:Time!, 4 reason,
    5 message
# k8s.io/api/batch/v1/generated.proto
Job = 1 metadata:ObjectMeta, 2 spec:JobSpec, 3 status:JobStatus
JobSpec = 1 parallelism:int!, 2 completions:int!, 3 activeDeadlineSeconds:int!,
    11 podFailurePolicy:PodFailurePolicy, 16 successPolicy:SuccessPolicy, 7 backoffLimit:int!,
    12 backoffLimitPerIndex:int!, 13 maxFailedIndexes:int!, 4 selector:LabelSelector,
    5 manualSelector:bool!, 6 template:PodTemplateSpec, 8 ttlSecondsAfterFinished:int!, 9 completionMode!,
    10 suspend:bool!, 14 podReplacementPolicy!, 15 managedBy!
PodFailurePolicy = 1 rules:[PodFailurePolicyRule]!
PodFailurePolicyRule = 1 action!, 2 onExitCodes:PodFailurePolicyOnExitCodesRequirement,
    3 onPodConditions:[PodFailurePolicyOnPodConditionsPattern]
PodFailurePolicyOnExitCodesRequirement = 1 containerName!, 2 operator!, 3 values:[int]!
PodFailurePolicyOnPodConditionsPattern = 1 type!, 2 status!
SuccessPolicy = 1 rules:[SuccessPolicyRule]!
SuccessPolicyRule = 1 succeededIndexes!, 2 succeededCount:int!
JobStatus = 1 conditions:[JobCondition], 2 startTime:Time!, 3 completionTime:Time!, 4 active:int,
    5 succeeded:int, 6 failed:int, 11 terminating:int!, 7 completedIndexes, 10 failedIndexes!,
    8 uncountedTerminatedPods:UncountedTerminatedPods, 9 ready:int!
JobCondition = 1 type!, 2 status!, 3 lastProbeTime:Time!, 4 lastTransitionTime:Time!, 5 reason, 6 message
UncountedTerminatedPods = 1 succeeded:[str], 2 failed:[str]
CronJob = 1 metadata:ObjectMeta, 2 spec:CronJobSpec, 3 status:CronJobStatus
CronJobSpec = 1 schedule!, 8 timeZone!, 2 startingDeadlineSeconds:int!, 3 concurrencyPolicy,
    4 suspend:bool!, 5 jobTemplate:JobTemplateSpec, 6 successfulJobsHistoryLimit:int!,
    7 failedJobsHistoryLimit:int!
JobTemplateSpec = 1 metadata:ObjectMeta, 2 spec:JobSpec
CronJobStatus = 1 active:[ObjectReference], 4 lastScheduleTime:Time!, 5 lastSuccessfulTime:Time!
# k8s.io/api/rbac/v1/generated.proto
Role = 1 metadata:ObjectMeta, 2 rules:[PolicyRule]!
PolicyRule = 1 verbs:[str]!, 2 apiGroups:[str], 3 resources:[str], 4 resourceNames:[str],
    5 nonResourceURLs:[str]
ClusterRole = 1 metadata:ObjectMeta, 2 rules:[PolicyRule]!, 3 aggregationRule:AggregationRule
AggregationRule = 1 clusterRoleSelectors:[LabelSelector]
RoleBinding = 1 metadata:ObjectMeta, 2 subjects:[Subject], 3 roleRef:RoleRef
Subject = 1 kind!, 2 apiGroup, 3 name!, 4 namespace
RoleRef = 1 apiGroup!, 2 kind!, 3 name!
ClusterRoleBinding = 1 metadata:ObjectMeta, 2 subjects:[Subject], 3 roleRef:RoleRef
# k8s.io/api/authorization/v1/generated.proto
SelfSubjectAccessReview = 1 metadata:ObjectMeta, 2 spec:SelfSubjectAccessReviewSpec,
    3 status:SubjectAccessReviewStatus
SelfSubjectAccessReviewSpec = 1 resourceAttributes:ResourceAttributes,
    2 nonResourceAttributes:NonResourceAttributes
ResourceAttributes = 1 namespace, 2 verb, 3 group, 4 version, 5 resource, 6 subresource, 7 name,
    8 fieldSelector:FieldSelectorAttributes, 9 labelSelector:LabelSelectorAttributes
FieldSelectorAttributes = 1 rawSelector, 2 requirements:[FieldSelectorRequirement]
LabelSelectorAttributes = 1 rawSelector, 2 requirements:[LabelSelectorRequirement]
NonResourceAttributes = 1 path, 2 verb
SubjectAccessReviewStatus = 1 allowed:bool!, 4 denied:bool, 2 reason, 3 evaluationError
SelfSubjectRulesReview = 1 metadata:ObjectMeta, 2 spec:SelfSubjectRulesReviewSpec,
    3 status:SubjectRulesReviewStatus
SelfSubjectRulesReviewSpec = 1 namespace
SubjectRulesReviewStatus = 1 resourceRules:[ResourceRule]!, 2 nonResourceRules:[NonResourceRule]!,
    3 incomplete:bool!, 4 evaluationError
ResourceRule = 1 verbs:[str]!, 2 apiGroups:[str], 3 resources:[str], 4 resourceNames:[str]
NonResourceRule = 1 verbs:[str]!, 2 nonResourceURLs:[str]
SubjectAccessReview = 1 metadata:ObjectMeta, 2 spec:SubjectAccessReviewSpec,
    3 status:SubjectAccessReviewStatus
SubjectAccessReviewSpec = 1 resourceAttributes:ResourceAttributes,
    2 nonResourceAttributes:NonResourceAttributes, 3 user, 4 groups:[str], 5 extra:{Strings}, 6 uid
LocalSubjectAccessReview = 1 metadata:ObjectMeta, 2 spec:SubjectAccessReviewSpec,
    3 status:SubjectAccessReviewStatus
# k8s.io/api/authentication/v1/generated.proto
SelfSubjectReview = 1 metadata:ObjectMeta, 2 status:SelfSubjectReviewStatus
SelfSubjectReviewStatus = 1 userInfo:UserInfo
UserInfo = 1 username, 2 uid, 3 groups:[str], 4 extra:{Strings}
TokenReview = 1 metadata:ObjectMeta, 2 spec:TokenReviewSpec, 3 status:TokenReviewStatus
TokenReviewSpec = 1 token, 2 audiences:[str]
TokenReviewStatus = 1 authenticated:bool, 2 user:UserInfo, 4 audiences:[str], 3 error
TokenRequest = 1 metadata:ObjectMeta, 2 spec:TokenRequestSpec, 3 status:TokenRequestStatus
TokenRequestSpec = 1 audiences:[str]!, 4 expirationSeconds:int!, 3 boundObjectRef:BoundObjectReference
BoundObjectReference = 1 kind, 2 apiVersion, 3 name, 4 uid
TokenRequestStatus = 1 token!, 2 expirationTimestamp:Time!
# k8s.io/api/coordination/v1/generated.proto
Lease = 1 metadata:ObjectMeta, 2 spec:LeaseSpec
LeaseSpec = 1 holderIdentity!, 2 leaseDurationSeconds:int!, 3 acquireTime:MicroTime!,
    4 renewTime:MicroTime!, 5 leaseTransitions:int!, 6 strategy!, 7 preferredHolder!
# k8s.io/api/events/v1/generated.proto
events.Event = 1 metadata:ObjectMeta, 2 eventTime:MicroTime!, 3 series:events.EventSeries,
    4 reportingController, 5 reportingInstance, 6 action, 7 reason, 8 regarding:ObjectReference,
    9 related:ObjectReference, 10 note, 11 type, 12 deprecatedSource:EventSource,
    13 deprecatedFirstTimestamp:Time!, 14 deprecatedLastTimestamp:Time!, 15 deprecatedCount:int
events.EventSeries = 1 count:int!, 2 lastObservedTime:MicroTime!
# k8s.io/api/policy/v1/generated.proto
PodDisruptionBudget = 1 metadata:ObjectMeta, 2 spec:PodDisruptionBudgetSpec,
    3 status:PodDisruptionBudgetStatus
PodDisruptionBudgetSpec = 1 minAvailable:IntOrString, 2 selector:LabelSelector,
    3 maxUnavailable:IntOrString, 4 unhealthyPodEvictionPolicy!
PodDisruptionBudgetStatus = 1 observedGeneration:int, 2 disruptedPods:{Time}, 3 disruptionsAllowed:int!,
    4 currentHealthy:int!, 5 desiredHealthy:int!, 6 expectedPods:int!, 7 conditions:[Condition]
Eviction = 1 metadata:ObjectMeta, 2 deleteOptions:DeleteOptions
# k8s.io/api/scheduling/v1/generated.proto
PriorityClass = 1 metadata:ObjectMeta, 2 value:int!, 3 globalDefault:bool, 4 description,
    5 preemptionPolicy!
# k8s.io/api/networking/v1/generated.proto
Ingress = 1 metadata:ObjectMeta, 2 spec:IngressSpec, 3 status:IngressStatus
IngressSpec = 4 ingressClassName!, 1 defaultBackend:IngressBackend, 2 tls:[IngressTLS],
    3 rules:[IngressRule]
IngressBackend = 4 service:IngressServiceBackend, 3 resource:TypedLocalObjectReference
IngressServiceBackend = 1 name!, 2 port:ServiceBackendPort
ServiceBackendPort = 1 name, 2 number:int
IngressTLS = 1 hosts:[str], 2 secretName
IngressRule = 1 host, 2 *ingressRuleValue:IngressRuleValue
IngressRuleValue = 1 http:HTTPIngressRuleValue
HTTPIngressRuleValue = 1 paths:[HTTPIngressPath]!
HTTPIngressPath = 1 path, 3 pathType!, 2 backend:IngressBackend
IngressStatus = 1 loadBalancer:IngressLoadBalancerStatus
IngressLoadBalancerStatus = 1 ingress:[IngressLoadBalancerIngress]
IngressLoadBalancerIngress = 1 ip, 2 hostname, 4 ports:[IngressPortStatus]
IngressPortStatus = 1 port:int!, 2 protocol!, 3 error!
# k8s.io/api/autoscaling/v1/generated.proto
v1.HorizontalPodAutoscaler = 1 metadata:ObjectMeta, 2 spec:v1.HPASpec, 3 status:v1.HPAStatus
v1.HPASpec = 1 scaleTargetRef:CrossVersionObjectReference, 2 minReplicas:int!, 3 maxReplicas:int!,
    4 targetCPUUtilizationPercentage:int!
CrossVersionObjectReference = 1 kind!, 2 name!, 3 apiVersion
v1.HPAStatus = 1 observedGeneration:int!, 2 lastScaleTime:Time!, 3 currentReplicas:int!,
    4 desiredReplicas:int!, 5 currentCPUUtilizationPercentage:int!
# k8s.io/api/autoscaling/v2/generated.proto
v2.HorizontalPodAutoscaler = 1 metadata:ObjectMeta, 2 spec:v2.HPASpec, 3 status:v2.HPAStatus
v2.HPASpec = 1 scaleTargetRef:CrossVersionObjectReference, 2 minReplicas:int!, 3 maxReplicas:int!,
    4 metrics:[MetricSpec], 5 behavior:HPABehavior
MetricSpec = 1 type!, 2 object:ObjectMetricSource, 3 pods:PodsMetricSource, 4 resource:ResourceMetricSource,
    7 containerResource:ContainerResourceMetricSource, 5 external:ExternalMetricSource
HPABehavior = 1 scaleUp:HPAScalingRules, 2 scaleDown:HPAScalingRules
HPAScalingRules = 3 stabilizationWindowSeconds:int!, 1 selectPolicy!, 2 policies:[HPAScalingPolicy],
    4 tolerance:Quantity
HPAScalingPolicy = 1 type!, 2 value:int!, 3 periodSeconds:int!
ObjectMetricSource = 1 describedObject:CrossVersionObjectReference, 2 target:MetricTarget,
    3 metric:MetricIdentifier
PodsMetricSource = 1 metric:MetricIdentifier, 2 target:MetricTarget
ResourceMetricSource = 1 name!, 2 target:MetricTarget
ContainerResourceMetricSource = 1 name!, 2 target:MetricTarget, 3 container!
ExternalMetricSource = 1 metric:MetricIdentifier, 2 target:MetricTarget
MetricIdentifier = 1 name!, 2 selector:LabelSelector
MetricTarget = 1 type!, 2 value:Quantity, 3 averageValue:Quantity, 4 averageUtilization:int!
v2.HPAStatus = 1 observedGeneration:int!, 2 lastScaleTime:Time!, 3 currentReplicas:int, 4 desiredReplicas:int!,
    5 currentMetrics:[MetricStatus]!, 6 conditions:[HPACondition]
HPACondition = 1 type!, 2 status!, 3 lastTransitionTime:Time!, 4 reason, 5 message
MetricStatus = 1 type!, 2 object:ObjectMetricStatus, 3 pods:PodsMetricStatus, 4 resource:ResourceMetricStatus,
    7 containerResource:ContainerResourceMetricStatus, 5 external:ExternalMetricStatus
ObjectMetricStatus = 1 metric:MetricIdentifier, 2 current:MetricValueStatus,
    3 describedObject:CrossVersionObjectReference
PodsMetricStatus = 1 metric:MetricIdentifier, 2 current:MetricValueStatus
ResourceMetricStatus = 1 name!, 2 current:MetricValueStatus
ContainerResourceMetricStatus = 1 name!, 2 current:MetricValueStatus, 3 container!
ExternalMetricStatus = 1 metric:MetricIdentifier, 2 current:MetricValueStatus
MetricValueStatus = 1 value:Quantity, 2 averageValue:Quantity, 3 averageUtilization:int!
# k8s.io/api/certificates/v1/generated.proto
CertificateSigningRequest = 1 metadata:ObjectMeta, 2 spec:CertificateSigningRequestSpec,
    3 status:CertificateSigningRequestStatus
CertificateSigningRequestSpec = 1 request:bytes!, 7 signerName!, 8 expirationSeconds:int!, 5 usages:[str],
    2 username, 3 uid, 4 groups:[str], 6 extra:{Strings}
CertificateSigningRequestStatus = 1 conditions:[CertificateSigningRequestCondition], 2 certificate:bytes
CertificateSigningRequestCondition = 1 type!, 6 status!, 2 reason, 3 message, 4 lastUpdateTime:Time!,
    5 lastTransitionTime:Time!
"""

# (apiVersion, kind) -> message. DeleteOptions is added for every group version, as upstream registers it.
_ROOTS = {
    "v1": "ConfigMap Secret Namespace ServiceAccount Service ResourceQuota Event=core.Event",
    "apps/v1": "Deployment",
    "batch/v1": "Job CronJob",
    "rbac.authorization.k8s.io/v1": "Role ClusterRole RoleBinding ClusterRoleBinding",
    "authorization.k8s.io/v1": "SelfSubjectAccessReview SelfSubjectRulesReview SubjectAccessReview "
    "LocalSubjectAccessReview",
    "authentication.k8s.io/v1": "SelfSubjectReview TokenReview TokenRequest",
    "coordination.k8s.io/v1": "Lease",
    "events.k8s.io/v1": "Event=events.Event",
    "policy/v1": "PodDisruptionBudget Eviction",
    "scheduling.k8s.io/v1": "PriorityClass",
    "networking.k8s.io/v1": "Ingress",
    "autoscaling/v1": "HorizontalPodAutoscaler=v1.HorizontalPodAutoscaler",
    "autoscaling/v2": "HorizontalPodAutoscaler=v2.HorizontalPodAutoscaler",
    "certificates.k8s.io/v1": "CertificateSigningRequest",
    "meta.k8s.io/v1": "",
}

_SCALARS = frozenset({"str", "bytes", "int", "bool"})
_SPECIAL = frozenset({"Time", "MicroTime", "Quantity", "IntOrString", "Raw", "Strings"})


_Label = Literal["one", "list", "map"]
_LABELS: dict[str, _Label] = {"": "one", "[": "list", "{": "map"}


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: str
    label: _Label
    keep_zero: bool
    inline: bool


_Message = dict[int, _Field]  # insertion order is Go struct order
_FIELD = re.compile(r"(\d+) (\*?)(\w+)(?::([\[{]?)([\w.]+)[\]}]?)?(!?)")


def _parse_schema(text: str) -> dict[str, _Message]:
    messages: dict[str, _Message] = {}
    for definition in re.split(r"\n(?=\S)", text.strip()):
        if definition.startswith("#"):
            continue
        name, _, body = definition.partition(" = ")
        fields: _Message = {}
        for spec in body.split(","):
            match = _FIELD.fullmatch(spec.strip())
            if match is None:
                raise ValueError(f"bad field {spec!r} in {name}")
            number, inline, field_name, bracket, type_, keep = match.groups()
            label = _LABELS[bracket or ""]
            fields[int(number)] = _Field(field_name, type_ or "str", label, bool(keep), bool(inline))
        messages[name] = fields
    known = _SCALARS | _SPECIAL | messages.keys()
    for name, fields in messages.items():
        for field in fields.values():
            if field.type not in known:
                raise ValueError(f"{name}.{field.name}: unknown type {field.type}")
    return messages


_MESSAGES = _parse_schema(_SCHEMA)
# Types whose upstream Unmarshal merges a second occurrence into the first (generated code does; the
# hand-written Time and Quantity ones replace), so their bytes are concatenated before decoding.
_MERGED = _MESSAGES.keys() | {"IntOrString", "Raw"}
_KINDS: dict[tuple[str, str], str] = {
    (api_version, kind): message or kind
    for api_version, names in _ROOTS.items()
    for kind, _, message in (entry.partition("=") for entry in names.split())
}
_KINDS.update({(api_version, "DeleteOptions"): "DeleteOptions" for api_version in _ROOTS})


def supported_kinds() -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs :func:`decode` has tables for."""
    return set(_KINDS)


def decode(body: bytes, *, api_version: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """Decode a protobuf request body into the object's JSON-shaped dict.

    ``api_version`` and ``kind`` (from the request path) fill in what the body's typeMeta leaves empty, as
    upstream's ``copyKindDefaults`` does. Checking that they agree with the body is the caller's job.
    Malformed data is a 400; a type without a table here is a 415.
    """
    if not body.startswith(_MAGIC):
        raise errors.bad_request(
            "provided data does not appear to be a protobuf message, expected prefix k8s\\x00"
        )
    if len(body) == len(_MAGIC):
        raise errors.bad_request("empty protobuf body")
    try:
        type_meta, raw = _envelope(body[len(_MAGIC) :])
    except _Malformed as exc:
        raise errors.bad_request(f"unable to decode protobuf body: {exc.describe()}") from None
    api_version = type_meta.get("apiVersion") or api_version
    kind = type_meta.get("kind") or kind
    if not kind:
        raise errors.bad_request("Object 'Kind' is missing in protobuf body")
    if not api_version:
        raise errors.bad_request("Object 'apiVersion' is missing in protobuf body")
    message = _KINDS.get((api_version, kind))
    if message is None:
        base = errors.unsupported_media_type(MEDIA_TYPE, _OTHER_MEDIA_TYPES)
        raise errors.StatusError(
            base.code,
            base.reason,
            f"{base.message} ({MEDIA_TYPE} is not supported for {api_version}, Kind={kind})",
        )
    try:
        obj = _decode_message(raw, _MESSAGES[message])
    except _Malformed as exc:
        raise errors.bad_request(f"unable to decode protobuf {kind}: {exc.describe()}") from None
    return {"kind": kind, "apiVersion": api_version, **obj}


class _Malformed(Exception):
    """Bad wire data; ``path`` collects field names on the way out so the 400 says where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def at(self, name: str) -> _Malformed:
        self.path.insert(0, name)
        return self

    def describe(self) -> str:
        return f"{'.'.join(self.path)}: {self.reason}" if self.path else self.reason


# ---- wire format (https://protobuf.dev/programming-guides/encoding/) ----

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if shift >= 64:  # the same limit as gogo's ErrIntOverflowGenerated
            raise _Malformed("varint overflows 64 bits")
        if pos >= len(buf):
            raise _Malformed("unexpected end of data")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def _read_fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value) for each field; bytes for length-delimited, else int."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0 or number >= 1 << 29:
            raise _Malformed(f"illegal field number {number}")
        value: int | bytes
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > end:
                raise _Malformed("unexpected end of data")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        elif wire == _BYTES:
            length, pos = _varint(buf, pos)
            if length > end - pos:
                raise _Malformed("unexpected end of data")
            value, pos = buf[pos : pos + length], pos + length
        else:  # 3/4 are proto2 groups, which no Kubernetes message uses; 6/7 do not exist
            raise _Malformed(f"unsupported wire type {wire}")
        yield number, wire, value


def _last(buf: bytes) -> dict[int, tuple[int, int | bytes]]:
    """Fields of a small fixed message, the last occurrence winning (proto semantics for scalars)."""
    return {number: (wire, value) for number, wire, value in _read_fields(buf)}


def _packed(buf: bytes) -> Iterator[int]:
    pos = 0
    while pos < len(buf):
        value, pos = _varint(buf, pos)
        yield value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# ---- decoding against the schema ----


def _envelope(buf: bytes) -> tuple[dict[str, str], bytes]:
    type_meta, raw = b"", b""
    for number, wire, value in _read_fields(buf):
        if number in (1, 2) and not isinstance(value, bytes):
            raise _Malformed(f"wrong wire type {wire}").at(("typeMeta", "raw")[number - 1])
        if number == 1 and isinstance(value, bytes):
            type_meta += value  # repeated message fields merge, i.e. concatenate
        elif number == 2 and isinstance(value, bytes):
            raw = value
    meta: dict[str, str] = {}
    for number, wire, value in _read_fields(type_meta):
        if number in (1, 2):
            meta[("apiVersion", "kind")[number - 1]] = _convert("str", wire, value)
    return meta, raw


def _decode_message(buf: bytes, message: _Message) -> dict[str, Any]:
    # Singular fields: (wire, value), with message bytes concatenated (a repeated occurrence merges).
    # Repeated and map fields: converted values as they come.
    found: dict[int, Any] = {}
    for number, wire, value in _read_fields(buf):
        field = message.get(number)
        if field is None:
            continue
        try:
            if field.label == "list":
                items = found.setdefault(number, [])
                if wire == _BYTES and field.type in ("int", "bool") and isinstance(value, bytes):
                    items.extend(_convert(field.type, _VARINT, v) for v in _packed(value))
                else:
                    items.append(_convert(field.type, wire, value))
            elif field.label == "map":
                key, item = _map_entry(field.type, wire, value)
                found.setdefault(number, {})[key] = item
            else:
                if wire != (_VARINT if field.type in ("int", "bool") else _BYTES):
                    raise _Malformed(f"wrong wire type {wire}")
                if number in found and field.type in _MERGED:
                    value = found[number][1] + value
                found[number] = (wire, value)
        except _Malformed as exc:
            raise exc.at(field.name) from None

    out: dict[str, Any] = {}
    for number, field in message.items():
        if number not in found:
            if field.keep_zero and field.label != "one":
                out[field.name] = None  # a nil slice or map without omitempty
            continue
        if field.label != "one":
            out[field.name] = found[number]
            continue
        try:
            value = _convert(field.type, *found[number])
        except _Malformed as exc:
            raise exc.at(field.name) from None
        if not field.keep_zero and (value is None or (not value and field.type in _SCALARS)):
            continue
        if field.inline:
            out.update(value)
        else:
            out[field.name] = value
    return out


def _map_entry(type_: str, wire: int, value: int | bytes) -> tuple[str, Any]:
    if wire != _BYTES or not isinstance(value, bytes):
        raise _Malformed(f"wrong wire type {wire}")
    key, item = "", None
    entry = _last(value)
    if 1 in entry:
        key = _convert("str", *entry[1])
    if 2 in entry:
        item = _convert(type_, *entry[2])
    else:  # a missing value is the zero value, as in Go
        item = _convert(type_, _VARINT, 0) if type_ in ("int", "bool") else _convert(type_, _BYTES, b"")
    return key, item


def _convert(type_: str, wire: int, value: int | bytes) -> Any:
    """One wire value of ``type_`` as JSON shows it (None for a zero time or an empty Raw)."""
    if type_ in ("int", "bool"):
        if wire != _VARINT or isinstance(value, bytes):
            raise _Malformed(f"wrong wire type {wire}")
        return _signed(value) if type_ == "int" else value != 0
    data = _bytes(wire, value)
    if type_ == "str":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed("string is not valid UTF-8") from None
    if type_ == "bytes":
        return base64.b64encode(data).decode("ascii")  # encoding/json's []byte: standard, padded
    if type_ in ("Time", "MicroTime"):
        return _time(data, micro=type_ == "MicroTime")
    if type_ == "Quantity":
        return _field(_last(data), 1, "str", "0")  # an empty Quantity is zero, printed "0"
    if type_ == "IntOrString":
        fields = _last(data)
        int_or_string = _field(fields, 1, "int", 0)
        if int_or_string == 0:
            return _field(fields, 2, "int", 0)
        if int_or_string == 1:
            return _field(fields, 3, "str", "")
        raise _Malformed(f"impossible IntOrString type {int_or_string}")
    if type_ == "Raw":
        fields = _last(data)
        raw = _bytes(*fields[1]) if 1 in fields else b""
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _Malformed("raw value is not valid JSON") from None
    if type_ == "Strings":
        return [_convert("str", w, v) for n, w, v in _read_fields(data) if n == 1]
    return _decode_message(data, _MESSAGES[type_])


def _bytes(wire: int, value: int | bytes) -> bytes:
    if wire != _BYTES or not isinstance(value, bytes):
        raise _Malformed(f"wrong wire type {wire}")
    return value


def _field(fields: dict[int, tuple[int, int | bytes]], number: int, type_: str, default: Any) -> Any:
    return _convert(type_, *fields[number]) if number in fields else default


_GO_ZERO_TIME = -62135596800  # time.Time{}.Unix(): 0001-01-01T00:00:00Z, which Go treats as unset
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time(data: bytes, *, micro: bool) -> str | None:
    """metav1.Time / MicroTime: RFC 3339 in UTC, as their MarshalJSON writes them.

    Upstream's ``time_proto.go`` reads an empty message as the zero time and drops the nanoseconds of a
    Time; ``micro_time_proto.go`` truncates a MicroTime to microseconds.
    """
    if not data:
        return None
    fields = _last(data)
    seconds: int = _field(fields, 1, "int", 0)
    nanos: int = _field(fields, 2, "int", 0)
    micros = 0
    if micro:  # Go's Duration.Truncate rounds toward zero
        micros = nanos // 1000 if nanos >= 0 else -(-nanos // 1000)
    if seconds == _GO_ZERO_TIME and micros == 0:
        return None
    try:
        moment = _EPOCH + timedelta(seconds=seconds, microseconds=micros)
    except OverflowError:
        raise _Malformed("time out of range") from None
    text = moment.replace(tzinfo=None).isoformat(timespec="microseconds" if micro else "seconds")
    return text + "Z"
