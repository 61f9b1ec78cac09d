//! The field table of every machine-config document kind: names, wire types and enum values.
//!
//! Kept by hand. It was first written out of Talos's published machine-config JSON schema
//! (siderolabs/talos at ad8823176e75, the commit `testdata/talos/` comes from, whose newest
//! configs are v1.15's; `pkg/machinery/config/schemas/config.schema.json`), but neither that
//! schema nor a generator is in this repository, and rows have been added by hand since. The
//! deprecated `v1alpha1` fields that schema no longer documents come from the schemas of Talos
//! v1.7.0 to v1.13.9, checked against and ordered like the Go field list at that commit.
//!
//! Where the schema and Talos's decoder disagree, the table follows the decoder: the kinds
//! `UnattendedInstallConfig` and `KubeSpanEndpointsConfig` (the schema misnames them),
//! `ImageVerificationConfig` (missing from it), `acceptedCAs` (lists, not one object), the
//! list-valued enums, `DiskPartition.size` (a number or a string) and `machine.type` (any
//! string; validation judges it).
//!
//! To add a field: put `f("name", Ty::…)` in its object's `O_…` static at the place Talos's Go
//! struct has it (the order Talos writes), with enum values as Talos spells them; a new kind is
//! a `k(…)` row in `KINDS` and a static for its root object. Then say in `policy.rs` whether
//! the field is a secret, needs a reboot or is kept but not acted on, and add a config that
//! uses the field to the tests.
//!
//! Beyond Talos, two fields and one kind: an encryption key's `recovery` (a passphrase slot
//! that is opened through `talosctl unlock` and never kept in META), in both key objects;
//! `machine.install.diskSelector.match` (the install disk by a CEL expression, Talos #11255);
//! and `DiskWipeConfig` (a disk wiped once, its record kept in META; Talos #2213).
//!
//! Field names, types and enum values are interface facts. What talosbox does with a field is
//! not here but in `policy.rs`. Fields appear in Talos's order, which is the order Talos writes.

use super::schema::{Field, Kind, Obj, Ty};

const fn f(name: &'static str, ty: Ty) -> Field {
    Field { name, ty }
}

const fn k(
    kind: &'static str,
    api_version: &'static str,
    named: bool,
    group: &'static str,
    root: &'static Obj,
) -> Kind {
    Kind { kind, api_version, named, group, root: Ty::Obj(root) }
}

/// Every document kind, the v1alpha1 document first.
pub(super) static KINDS: &[Kind] = &[
    k("v1alpha1", "", false, "v1alpha1", &O_V1ALPHA1_CONFIG),
    k("DiskWipeConfig", "v1alpha1", true, "block", &O_BLOCK_DISK_WIPE_CONFIG_V1_ALPHA1),
    k("ExistingVolumeConfig", "v1alpha1", true, "block", &O_BLOCK_EXISTING_VOLUME_CONFIG_V1_ALPHA1),
    k("ExternalVolumeConfig", "v1alpha1", true, "block", &O_BLOCK_EXTERNAL_VOLUME_CONFIG_V1_ALPHA1),
    k("FilesystemScrubConfig", "v1alpha1", false, "block", &O_BLOCK_FILESYSTEM_SCRUB_CONFIG_V1_ALPHA1),
    k("FilesystemTrimConfig", "v1alpha1", false, "block", &O_BLOCK_FILESYSTEM_TRIM_CONFIG_V1_ALPHA1),
    k("RawVolumeConfig", "v1alpha1", true, "block", &O_BLOCK_RAW_VOLUME_CONFIG_V1_ALPHA1),
    k("SwapVolumeConfig", "v1alpha1", true, "block", &O_BLOCK_SWAP_VOLUME_CONFIG_V1_ALPHA1),
    k("UserVolumeConfig", "v1alpha1", true, "block", &O_BLOCK_USER_VOLUME_CONFIG_V1_ALPHA1),
    k("VolumeConfig", "v1alpha1", true, "block", &O_BLOCK_VOLUME_CONFIG_V1_ALPHA1),
    k("ZswapConfig", "v1alpha1", false, "block", &O_BLOCK_ZSWAP_CONFIG_V1_ALPHA1),
    k("DiscoveryIdentityConfig", "v1alpha1", false, "cluster", &O_CLUSTER_DISCOVERY_IDENTITY_CONFIG_V1_ALPHA1),
    k("DiscoveryServiceConfig", "v1alpha1", true, "cluster", &O_CLUSTER_DISCOVERY_SERVICE_CONFIG_V1_ALPHA1),
    k("ContainerConfig", "v1alpha1", true, "container", &O_CONTAINER_CONTAINER_CONFIG_V1_ALPHA1),
    k("CRIBaseRuntimeSpecConfig", "v1alpha1", false, "cri", &O_CRI_CRI_BASE_RUNTIME_SPEC_CONFIG_V1_ALPHA1),
    k("CRICustomizationConfig", "v1alpha1", true, "cri", &O_CRI_CRI_CUSTOMIZATION_CONFIG_V1_ALPHA1),
    k("ImageCacheConfig", "v1alpha1", false, "cri", &O_CRI_IMAGE_CACHE_CONFIG_V1_ALPHA1),
    k("RegistryAuthConfig", "v1alpha1", true, "cri", &O_CRI_REGISTRY_AUTH_CONFIG_V1_ALPHA1),
    k("RegistryMirrorConfig", "v1alpha1", true, "cri", &O_CRI_REGISTRY_MIRROR_CONFIG_V1_ALPHA1),
    k("RegistryTLSConfig", "v1alpha1", true, "cri", &O_CRI_REGISTRY_TLS_CONFIG_V1_ALPHA1),
    k("ExtensionServiceConfig", "v1alpha1", true, "extensions", &O_EXTENSIONS_SERVICE_CONFIG_V1_ALPHA1),
    k("PCIDriverRebindConfig", "v1alpha1", true, "hardware", &O_HARDWARE_PCI_DRIVER_REBIND_CONFIG_V1_ALPHA1),
    k("KubeAPIServerCAConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_API_SERVER_CA_CONFIG_V1_ALPHA1),
    k("KubeAPIServerConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_API_SERVER_CONFIG_V1_ALPHA1),
    k("KubeAdmissionControlConfig", "v1alpha1", true, "k8s", &O_K8S_KUBE_ADMISSION_CONTROL_CONFIG_V1_ALPHA1),
    k("KubeAggregatorCAConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_AGGREGATOR_CA_CONFIG_V1_ALPHA1),
    k("KubeAuditPolicyConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_AUDIT_POLICY_CONFIG_V1_ALPHA1),
    k("KubeAuthenticationConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_AUTHENTICATION_CONFIG_V1_ALPHA1),
    k("KubeAuthorizerConfig", "v1alpha1", true, "k8s", &O_K8S_KUBE_AUTHORIZER_CONFIG_V1_ALPHA1),
    k("KubeClusterConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_CLUSTER_CONFIG_V1_ALPHA1),
    k("KubeControllerManagerConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_CONTROLLER_MANAGER_CONFIG_V1_ALPHA1),
    k("KubeCoreDNSConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_CORE_DNS_CONFIG_V1_ALPHA1),
    k("KubeCredentialProviderConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_CREDENTIAL_PROVIDER_CONFIG_V1_ALPHA1),
    k("KubeEtcdEncryptionConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_ETCD_ENCRYPTION_CONFIG_V1_ALPHA1),
    k("KubeExternalManifestConfig", "v1alpha1", true, "k8s", &O_K8S_KUBE_EXTERNAL_MANIFEST_CONFIG_V1_ALPHA1),
    k("KubeFlannelCNIConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_FLANNEL_CNI_CONFIG_V1_ALPHA1),
    k("KubeInlineManifestConfig", "v1alpha1", true, "k8s", &O_K8S_KUBE_INLINE_MANIFEST_CONFIG_V1_ALPHA1),
    k("KubeNetworkConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_NETWORK_CONFIG_V1_ALPHA1),
    k("KubeNodeConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_NODE_CONFIG_V1_ALPHA1),
    k("KubePrismConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_PRISM_CONFIG_V1_ALPHA1),
    k("KubeProxyConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_PROXY_CONFIG_V1_ALPHA1),
    k("KubeSchedulerConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_SCHEDULER_CONFIG_V1_ALPHA1),
    k("KubeServiceAccountConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_SERVICE_ACCOUNT_CONFIG_V1_ALPHA1),
    k("KubeStaticPodConfig", "v1alpha1", true, "k8s", &O_K8S_KUBE_STATIC_POD_CONFIG_V1_ALPHA1),
    k("KubeTalosAPIAccessConfig", "v1alpha1", false, "k8s", &O_K8S_KUBE_TALOS_API_ACCESS_CONFIG_V1_ALPHA1),
    k("KubeletConfig", "v1alpha1", false, "k8s", &O_K8S_KUBELET_CONFIG_V1_ALPHA1),
    k("BGPInstanceConfig", "v1alpha1", true, "network", &O_NETWORK_BGP_INSTANCE_CONFIG_V1_ALPHA1),
    k("BlackholeRouteConfig", "v1alpha1", true, "network", &O_NETWORK_BLACKHOLE_ROUTE_CONFIG_V1_ALPHA1),
    k("BondConfig", "v1alpha1", true, "network", &O_NETWORK_BOND_CONFIG_V1_ALPHA1),
    k("BridgeConfig", "v1alpha1", true, "network", &O_NETWORK_BRIDGE_CONFIG_V1_ALPHA1),
    k("DHCPv4Config", "v1alpha1", true, "network", &O_NETWORK_DHC_PV4_CONFIG_V1_ALPHA1),
    k("DHCPv6Config", "v1alpha1", true, "network", &O_NETWORK_DHC_PV6_CONFIG_V1_ALPHA1),
    k("DummyLinkConfig", "v1alpha1", true, "network", &O_NETWORK_DUMMY_LINK_CONFIG_V1_ALPHA1),
    k("EthernetConfig", "v1alpha1", true, "network", &O_NETWORK_ETHERNET_CONFIG_V1_ALPHA1),
    k("HCloudVIPConfig", "v1alpha1", true, "network", &O_NETWORK_H_CLOUD_VIP_CONFIG_V1_ALPHA1),
    k("HTTPProbeConfig", "v1alpha1", true, "network", &O_NETWORK_HTTP_PROBE_CONFIG_V1_ALPHA1),
    k("HostnameConfig", "v1alpha1", false, "network", &O_NETWORK_HOSTNAME_CONFIG_V1_ALPHA1),
    k("KubeSpanConfig", "v1alpha1", false, "network", &O_NETWORK_KUBE_SPAN_CONFIG_V1_ALPHA1),
    k("KubeSpanEndpointsConfig", "v1alpha1", false, "network", &O_NETWORK_KUBESPAN_ENDPOINTS_CONFIG_V1_ALPHA1),
    k("Layer2VIPConfig", "v1alpha1", true, "network", &O_NETWORK_LAYER2_VIP_CONFIG_V1_ALPHA1),
    k("LinkAliasConfig", "v1alpha1", true, "network", &O_NETWORK_LINK_ALIAS_CONFIG_V1_ALPHA1),
    k("LinkConfig", "v1alpha1", true, "network", &O_NETWORK_LINK_CONFIG_V1_ALPHA1),
    k("NetworkDefaultActionConfig", "v1alpha1", false, "network", &O_NETWORK_DEFAULT_ACTION_CONFIG_V1_ALPHA1),
    k("NetworkRuleConfig", "v1alpha1", true, "network", &O_NETWORK_RULE_CONFIG_V1_ALPHA1),
    k("ResolverConfig", "v1alpha1", false, "network", &O_NETWORK_RESOLVER_CONFIG_V1_ALPHA1),
    k("RoutingRuleConfig", "v1alpha1", true, "network", &O_NETWORK_ROUTING_RULE_CONFIG_V1_ALPHA1),
    k("StaticHostConfig", "v1alpha1", true, "network", &O_NETWORK_STATIC_HOST_CONFIG_V1_ALPHA1),
    k("TCPProbeConfig", "v1alpha1", true, "network", &O_NETWORK_TCP_PROBE_CONFIG_V1_ALPHA1),
    k("TimeSyncConfig", "v1alpha1", false, "network", &O_NETWORK_TIME_SYNC_CONFIG_V1_ALPHA1),
    k("VLANConfig", "v1alpha1", true, "network", &O_NETWORK_VLAN_CONFIG_V1_ALPHA1),
    k("VRFConfig", "v1alpha1", true, "network", &O_NETWORK_VRF_CONFIG_V1_ALPHA1),
    k("VethConfig", "v1alpha1", true, "network", &O_NETWORK_VETH_CONFIG_V1_ALPHA1),
    k("WireguardConfig", "v1alpha1", true, "network", &O_NETWORK_WIREGUARD_CONFIG_V1_ALPHA1),
    k("EnvironmentConfig", "v1alpha1", false, "runtime", &O_RUNTIME_ENVIRONMENT_V1_ALPHA1),
    k("EtcFileConfig", "v1alpha1", true, "runtime", &O_RUNTIME_ETC_FILE_CONFIG_V1_ALPHA1),
    k("EventSinkConfig", "v1alpha1", false, "runtime", &O_RUNTIME_EVENT_SINK_V1_ALPHA1),
    k("KernelModuleConfig", "v1alpha1", true, "runtime", &O_RUNTIME_KERNEL_MODULE_CONFIG_V1_ALPHA1),
    k("KmsgLogConfig", "v1alpha1", true, "runtime", &O_RUNTIME_KMSG_LOG_V1_ALPHA1),
    k("OOMConfig", "v1alpha1", false, "runtime", &O_RUNTIME_OOMV1_ALPHA1),
    k("SecurityProfileConfig", "v1alpha1", false, "runtime", &O_RUNTIME_SECURITY_PROFILE_CONFIG_V1_ALPHA1),
    k("SysctlConfig", "v1alpha1", false, "runtime", &O_RUNTIME_SYSCTL_CONFIG_V1_ALPHA1),
    k("SysfsConfig", "v1alpha1", false, "runtime", &O_RUNTIME_SYSFS_CONFIG_V1_ALPHA1),
    k("UdevRulesConfig", "v1alpha1", false, "runtime", &O_RUNTIME_UDEV_RULES_CONFIG_V1_ALPHA1),
    k("UnattendedInstallConfig", "v1alpha1", false, "runtime", &O_RUNTIME_UNATTENDED_INSTALL_CONFIG_V1_ALPHA1),
    k("WatchdogTimerConfig", "v1alpha1", false, "runtime", &O_RUNTIME_WATCHDOG_TIMER_V1_ALPHA1),
    k("ImageVerificationConfig", "v1alpha1", false, "security", &O_SECURITY_IMAGE_VERIFICATION_CONFIG_V1_ALPHA1),
    k("TrustedRootsConfig", "v1alpha1", true, "security", &O_SECURITY_TRUSTED_ROOTS_CONFIG_V1_ALPHA1),
    k("SideroLinkConfig", "v1alpha1", false, "siderolink", &O_SIDEROLINK_CONFIG_V1_ALPHA1),
    k("LVMLogicalVolumeConfig", "v1alpha1", true, "storage", &O_STORAGE_LVM_LOGICAL_VOLUME_CONFIG_V1_ALPHA1),
    k("LVMVolumeGroupConfig", "v1alpha1", true, "storage", &O_STORAGE_LVM_VOLUME_GROUP_CONFIG_V1_ALPHA1),
    k("RAIDArrayConfig", "v1alpha1", true, "storage", &O_STORAGE_RAID_ARRAY_CONFIG_V1_ALPHA1),
];

static O_BLOCK_VOLUME_SELECTOR: Obj = Obj { name: "block.VolumeSelector", fields: &[f("match", Ty::Str)] };
static O_BLOCK_VOLUME_DISCOVERY_SPEC: Obj =
    Obj { name: "block.VolumeDiscoverySpec", fields: &[f("volumeSelector", Ty::Obj(&O_BLOCK_VOLUME_SELECTOR))] };
static O_BLOCK_EXISTING_MOUNT_SPEC: Obj = Obj {
    name: "block.ExistingMountSpec",
    fields: &[f("readOnly", Ty::Bool), f("disableAccessTime", Ty::Bool), f("secure", Ty::Bool)],
};
static O_BLOCK_TRIM_CONFIG: Obj =
    Obj { name: "block.TrimConfig", fields: &[f("enabled", Ty::Bool), f("interval", Ty::Str)] };
static O_BLOCK_SCRUB_CONFIG: Obj =
    Obj { name: "block.ScrubConfig", fields: &[f("enabled", Ty::Bool), f("interval", Ty::Str)] };
static O_BLOCK_EXISTING_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.ExistingVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("discovery", Ty::Obj(&O_BLOCK_VOLUME_DISCOVERY_SPEC)),
        f("mount", Ty::Obj(&O_BLOCK_EXISTING_MOUNT_SPEC)),
        f("trim", Ty::Obj(&O_BLOCK_TRIM_CONFIG)),
        f("scrub", Ty::Obj(&O_BLOCK_SCRUB_CONFIG)),
    ],
};
static O_BLOCK_VIRTIOFS_MOUNT_SPEC: Obj = Obj { name: "block.VirtiofsMountSpec", fields: &[f("tag", Ty::Str)] };
static O_BLOCK_EXTERNAL_MOUNT_SPEC: Obj = Obj {
    name: "block.ExternalMountSpec",
    fields: &[
        f("readOnly", Ty::Bool),
        f("disableAccessTime", Ty::Bool),
        f("secure", Ty::Bool),
        f("virtiofs", Ty::Obj(&O_BLOCK_VIRTIOFS_MOUNT_SPEC)),
    ],
};
static O_BLOCK_EXTERNAL_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.ExternalVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("filesystemType", Ty::Enum(&["virtiofs"])),
        f("mount", Ty::Obj(&O_BLOCK_EXTERNAL_MOUNT_SPEC)),
    ],
};
static O_BLOCK_FILESYSTEM_TRIM_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "block.FilesystemTrimConfigV1Alpha1", fields: &[f("interval", Ty::Str)] };
static O_BLOCK_FILESYSTEM_SCRUB_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "block.FilesystemScrubConfigV1Alpha1", fields: &[f("interval", Ty::Str)] };
static O_BLOCK_DISK_SELECTOR: Obj = Obj { name: "block.DiskSelector", fields: &[f("match", Ty::Str)] };
static O_BLOCK_PROVISIONING_SPEC: Obj = Obj {
    name: "block.ProvisioningSpec",
    fields: &[
        f("diskSelector", Ty::Obj(&O_BLOCK_DISK_SELECTOR)),
        f("grow", Ty::Bool),
        f("minSize", Ty::Str),
        f("maxSize", Ty::Str),
    ],
};
static O_BLOCK_ENCRYPTION_KEY_STATIC: Obj =
    Obj { name: "block.EncryptionKeyStatic", fields: &[f("passphrase", Ty::Str)] };
static O_BLOCK_ENCRYPTION_KEY_NODE_ID: Obj = Obj { name: "block.EncryptionKeyNodeID", fields: &[] };
static O_BLOCK_ENCRYPTION_KEY_KMS: Obj = Obj { name: "block.EncryptionKeyKMS", fields: &[f("endpoint", Ty::Str)] };
static O_BLOCK_ENCRYPTION_KEY_TPM_OPTIONS: Obj =
    Obj { name: "block.EncryptionKeyTPMOptions", fields: &[f("pcrs", Ty::List(&Ty::Int))] };
static O_BLOCK_ENCRYPTION_KEY_TPM: Obj = Obj {
    name: "block.EncryptionKeyTPM",
    fields: &[f("options", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_TPM_OPTIONS)), f("checkSecurebootStatusOnEnroll", Ty::Bool)],
};
static O_BLOCK_ENCRYPTION_KEY_RECOVERY: Obj =
    Obj { name: "block.EncryptionKeyRecovery", fields: &[f("passphrase", Ty::Str)] };
static O_BLOCK_ENCRYPTION_KEY: Obj = Obj {
    name: "block.EncryptionKey",
    fields: &[
        f("slot", Ty::Int),
        f("static", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_STATIC)),
        f("nodeID", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_NODE_ID)),
        f("kms", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_KMS)),
        f("tpm", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_TPM)),
        f("lockToState", Ty::Bool),
        f("recovery", Ty::Obj(&O_BLOCK_ENCRYPTION_KEY_RECOVERY)),
    ],
};
static O_BLOCK_ENCRYPTION_SPEC: Obj = Obj {
    name: "block.EncryptionSpec",
    fields: &[
        f("provider", Ty::Enum(&["luks2"])),
        f("keys", Ty::List(&Ty::Obj(&O_BLOCK_ENCRYPTION_KEY))),
        f("cipher", Ty::Enum(&["aes-xts-plain64", "xchacha12,aes-adiantum-plain64", "xchacha20,aes-adiantum-plain64"])),
        f("keySize", Ty::Int),
        f("blockSize", Ty::Int),
        f("options", Ty::List(&Ty::Str)),
        f("allowDiscards", Ty::Bool),
    ],
};
static O_BLOCK_RAW_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.RawVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("provisioning", Ty::Obj(&O_BLOCK_PROVISIONING_SPEC)),
        f("encryption", Ty::Obj(&O_BLOCK_ENCRYPTION_SPEC)),
    ],
};
static O_BLOCK_DISK_WIPE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.DiskWipeConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("diskSelector", Ty::Obj(&O_BLOCK_DISK_SELECTOR))],
};
static O_BLOCK_SWAP_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.SwapVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("provisioning", Ty::Obj(&O_BLOCK_PROVISIONING_SPEC)),
        f("encryption", Ty::Obj(&O_BLOCK_ENCRYPTION_SPEC)),
    ],
};
static O_BLOCK_XFS_SPEC: Obj = Obj { name: "block.XFSSpec", fields: &[f("minAllocationGroupSize", Ty::Str)] };
static O_BLOCK_FILESYSTEM_SPEC: Obj = Obj {
    name: "block.FilesystemSpec",
    fields: &[
        f("type", Ty::Enum(&["ext4", "xfs", "btrfs"])),
        f("projectQuotaSupport", Ty::Bool),
        f("xfs", Ty::Obj(&O_BLOCK_XFS_SPEC)),
    ],
};
static O_BLOCK_USER_MOUNT_SPEC: Obj =
    Obj { name: "block.UserMountSpec", fields: &[f("disableAccessTime", Ty::Bool), f("secure", Ty::Bool)] };
static O_BLOCK_USER_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.UserVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("volumeType", Ty::Enum(&["directory", "disk", "partition"])),
        f("provisioning", Ty::Obj(&O_BLOCK_PROVISIONING_SPEC)),
        f("filesystem", Ty::Obj(&O_BLOCK_FILESYSTEM_SPEC)),
        f("encryption", Ty::Obj(&O_BLOCK_ENCRYPTION_SPEC)),
        f("mount", Ty::Obj(&O_BLOCK_USER_MOUNT_SPEC)),
        f("trim", Ty::Obj(&O_BLOCK_TRIM_CONFIG)),
        f("scrub", Ty::Obj(&O_BLOCK_SCRUB_CONFIG)),
    ],
};
static O_BLOCK_SYSTEM_VOLUME_FILESYSTEM_SPEC: Obj =
    Obj { name: "block.SystemVolumeFilesystemSpec", fields: &[f("xfs", Ty::Obj(&O_BLOCK_XFS_SPEC))] };
static O_BLOCK_MOUNT_SPEC: Obj =
    Obj { name: "block.MountSpec", fields: &[f("secure", Ty::Bool), f("disableAccessTime", Ty::Bool)] };
static O_BLOCK_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "block.VolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("provisioning", Ty::Obj(&O_BLOCK_PROVISIONING_SPEC)),
        f("filesystem", Ty::Obj(&O_BLOCK_SYSTEM_VOLUME_FILESYSTEM_SPEC)),
        f("encryption", Ty::Obj(&O_BLOCK_ENCRYPTION_SPEC)),
        f("mount", Ty::Obj(&O_BLOCK_MOUNT_SPEC)),
        f("trim", Ty::Obj(&O_BLOCK_TRIM_CONFIG)),
        f("scrub", Ty::Obj(&O_BLOCK_SCRUB_CONFIG)),
    ],
};
static O_BLOCK_ZSWAP_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "block.ZswapConfigV1Alpha1", fields: &[f("maxPoolPercent", Ty::Int), f("shrinkerEnabled", Ty::Bool)] };
static O_CLUSTER_DISCOVERY_IDENTITY_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "cluster.DiscoveryIdentityConfigV1Alpha1",
    fields: &[f("clusterID", Ty::Str), f("clusterSecret", Ty::Str)],
};
static O_CLUSTER_DISCOVERY_SERVICE_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "cluster.DiscoveryServiceConfigV1Alpha1", fields: &[f("name", Ty::Str), f("endpoint", Ty::Str)] };
static O_CONTAINER_CONTAINER_RUN_AS: Obj =
    Obj { name: "container.ContainerRunAs", fields: &[f("uid", Ty::Int), f("gid", Ty::Int)] };
static O_CONTAINER_USER_VOLUME_MOUNT: Obj = Obj {
    name: "container.UserVolumeMount",
    fields: &[
        f("name", Ty::Str),
        f("destination", Ty::Str),
        f("options", Ty::List(&Ty::Enum(&["ro", "rw", "noexec", "nosuid", "nodev", "noatime", "rbind", "rshared"]))),
    ],
};
static O_CONTAINER_TMPFS_MOUNT: Obj = Obj {
    name: "container.TmpfsMount",
    fields: &[f("destination", Ty::Str), f("size", Ty::Str), f("options", Ty::List(&Ty::Str))],
};
static O_CONTAINER_HOST_PATH_MOUNT: Obj = Obj {
    name: "container.HostPathMount",
    fields: &[f("source", Ty::Str), f("destination", Ty::Str), f("options", Ty::List(&Ty::Str))],
};
static O_CONTAINER_CONTAINER_MOUNT: Obj = Obj {
    name: "container.ContainerMount",
    fields: &[
        f("userVolume", Ty::Obj(&O_CONTAINER_USER_VOLUME_MOUNT)),
        f("tmpfs", Ty::Obj(&O_CONTAINER_TMPFS_MOUNT)),
        f("hostPath", Ty::Obj(&O_CONTAINER_HOST_PATH_MOUNT)),
    ],
};
static O_CONTAINER_CONTAINER_CAPABILITIES: Obj = Obj {
    name: "container.ContainerCapabilities",
    fields: &[f("add", Ty::List(&Ty::Str)), f("drop", Ty::List(&Ty::Str))],
};
static O_CONTAINER_CONTAINER_SECURITY: Obj = Obj {
    name: "container.ContainerSecurity",
    fields: &[f("profile", Ty::Str), f("capabilities", Ty::Obj(&O_CONTAINER_CONTAINER_CAPABILITIES))],
};
static O_CONTAINER_CONTAINER_NETWORK: Obj = Obj { name: "container.ContainerNetwork", fields: &[f("mode", Ty::Str)] };
static O_CONTAINER_CONTAINER_RESOURCE_LIMITS: Obj =
    Obj { name: "container.ContainerResourceLimits", fields: &[f("cpu", Ty::Str), f("memory", Ty::Str)] };
static O_CONTAINER_CONTAINER_RESOURCES: Obj = Obj {
    name: "container.ContainerResources",
    fields: &[f("limits", Ty::Obj(&O_CONTAINER_CONTAINER_RESOURCE_LIMITS))],
};
static O_CONTAINER_CONTAINER_DEPENDS_ON: Obj = Obj {
    name: "container.ContainerDependsOn",
    fields: &[
        f("paths", Ty::List(&Ty::Str)),
        f("networks", Ty::List(&Ty::Enum(&["addresses", "connectivity", "hostname", "etcfiles"]))),
        f("time", Ty::Bool),
        f("containers", Ty::List(&Ty::Str)),
    ],
};
static O_CONTAINER_CONTAINER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "container.ContainerConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("image", Ty::Str),
        f("entrypoint", Ty::List(&Ty::Str)),
        f("args", Ty::List(&Ty::Str)),
        f("workingDir", Ty::Str),
        f("runAs", Ty::Obj(&O_CONTAINER_CONTAINER_RUN_AS)),
        f("environment", Ty::List(&Ty::Str)),
        f("mounts", Ty::List(&Ty::Obj(&O_CONTAINER_CONTAINER_MOUNT))),
        f("security", Ty::Obj(&O_CONTAINER_CONTAINER_SECURITY)),
        f("network", Ty::Obj(&O_CONTAINER_CONTAINER_NETWORK)),
        f("resources", Ty::Obj(&O_CONTAINER_CONTAINER_RESOURCES)),
        f("dependsOn", Ty::Obj(&O_CONTAINER_CONTAINER_DEPENDS_ON)),
    ],
};
static O_CRI_CRI_BASE_RUNTIME_SPEC_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "cri.CRIBaseRuntimeSpecConfigV1Alpha1", fields: &[f("overrides", Ty::Any)] };
static O_CRI_CRI_CUSTOMIZATION_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "cri.CRICustomizationConfigV1Alpha1", fields: &[f("name", Ty::Str), f("content", Ty::Str)] };
static O_CRI_LOCAL_IMAGE_CACHE_CONFIG: Obj =
    Obj { name: "cri.LocalImageCacheConfig", fields: &[f("enabled", Ty::Bool)] };
static O_CRI_IMAGE_CACHE_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "cri.ImageCacheConfigV1Alpha1", fields: &[f("local", Ty::Obj(&O_CRI_LOCAL_IMAGE_CACHE_CONFIG))] };
static O_CRI_REGISTRY_AUTH_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "cri.RegistryAuthConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("username", Ty::Str),
        f("password", Ty::Str),
        f("auth", Ty::Str),
        f("identityToken", Ty::Str),
    ],
};
static O_CRI_REGISTRY_ENDPOINT: Obj =
    Obj { name: "cri.RegistryEndpoint", fields: &[f("url", Ty::Str), f("overridePath", Ty::Bool)] };
static O_CRI_REGISTRY_MIRROR_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "cri.RegistryMirrorConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("endpoints", Ty::List(&Ty::Obj(&O_CRI_REGISTRY_ENDPOINT))),
        f("skipFallback", Ty::Bool),
    ],
};
static O_CRI_REGISTRY_TLS_CONFIG_V1_ALPHA1_CLIENT_IDENTITY: Obj =
    Obj { name: "cri.RegistryTLSConfigV1Alpha1.clientIdentity", fields: &[f("cert", Ty::Str), f("key", Ty::Str)] };
static O_CRI_REGISTRY_TLS_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "cri.RegistryTLSConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("clientIdentity", Ty::Obj(&O_CRI_REGISTRY_TLS_CONFIG_V1_ALPHA1_CLIENT_IDENTITY)),
        f("ca", Ty::Str),
        f("insecureSkipVerify", Ty::Bool),
    ],
};
static O_EXTENSIONS_CONFIG_FILE: Obj =
    Obj { name: "extensions.ConfigFile", fields: &[f("content", Ty::Str), f("mountPath", Ty::Str)] };
static O_EXTENSIONS_SERVICE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "extensions.ServiceConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("configFiles", Ty::List(&Ty::Obj(&O_EXTENSIONS_CONFIG_FILE))),
        f("environment", Ty::List(&Ty::Str)),
    ],
};
static O_HARDWARE_PCI_DRIVER_REBIND_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "hardware.PCIDriverRebindConfigV1Alpha1", fields: &[f("name", Ty::Str), f("targetDriver", Ty::Str)] };
static O_K8S_KUBE_ADMISSION_CONTROL_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeAdmissionControlConfigV1Alpha1", fields: &[f("name", Ty::Str), f("configuration", Ty::Any)] };
static O_K8S_KUBE_AGGREGATOR_CA_CONFIG_V1_ALPHA1_ISSUING_CA: Obj =
    Obj { name: "k8s.KubeAggregatorCAConfigV1Alpha1.issuingCA", fields: &[f("cert", Ty::Str), f("key", Ty::Str)] };
static O_K8S_KUBE_AGGREGATOR_CA_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeAggregatorCAConfigV1Alpha1",
    fields: &[
        f("issuingCA", Ty::Obj(&O_K8S_KUBE_AGGREGATOR_CA_CONFIG_V1_ALPHA1_ISSUING_CA)),
        f("acceptedCAs", Ty::List(&Ty::Str)),
    ],
};
static O_K8S_KUBE_API_SERVER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeAPIServerConfigV1Alpha1",
    fields: &[
        f("image", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("env", Ty::Map(&Ty::Str)),
        f("resources", Ty::Any),
        f("apiPort", Ty::Int),
        f("certExtraSANs", Ty::List(&Ty::Str)),
        f("startupProbes", Ty::Bool),
    ],
};
static O_K8S_KUBE_API_SERVER_CA_CONFIG_V1_ALPHA1_ISSUING_CA: Obj =
    Obj { name: "k8s.KubeAPIServerCAConfigV1Alpha1.issuingCA", fields: &[f("cert", Ty::Str), f("key", Ty::Str)] };
static O_K8S_KUBE_API_SERVER_CA_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeAPIServerCAConfigV1Alpha1",
    fields: &[
        f("issuingCA", Ty::Obj(&O_K8S_KUBE_API_SERVER_CA_CONFIG_V1_ALPHA1_ISSUING_CA)),
        f("acceptedCAs", Ty::List(&Ty::Str)),
    ],
};
static O_K8S_KUBE_AUDIT_POLICY_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeAuditPolicyConfigV1Alpha1", fields: &[f("configuration", Ty::Any)] };
static O_K8S_KUBE_AUTHENTICATION_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeAuthenticationConfigV1Alpha1", fields: &[f("configuration", Ty::Any)] };
static O_K8S_KUBE_AUTHORIZER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeAuthorizerConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("type", Ty::Enum(&["Node", "RBAC", "Webhook"])), f("webhook", Ty::Any)],
};
static O_K8S_KUBE_CLUSTER_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeClusterConfigV1Alpha1", fields: &[f("clusterName", Ty::Str), f("endpoint", Ty::Str)] };
static O_K8S_KUBE_CONTROLLER_MANAGER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeControllerManagerConfigV1Alpha1",
    fields: &[
        f("enabled", Ty::Bool),
        f("image", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("env", Ty::Map(&Ty::Str)),
        f("resources", Ty::Any),
    ],
};
static O_K8S_KUBE_CORE_DNS_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeCoreDNSConfigV1Alpha1", fields: &[f("enabled", Ty::Bool), f("image", Ty::Str)] };
static O_K8S_KUBE_CREDENTIAL_PROVIDER_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeCredentialProviderConfigV1Alpha1", fields: &[f("configuration", Ty::Any)] };
static O_K8S_KUBE_ETCD_ENCRYPTION_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeEtcdEncryptionConfigV1Alpha1", fields: &[f("config", Ty::Any)] };
static O_K8S_KUBE_EXTERNAL_MANIFEST_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeExternalManifestConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("headers", Ty::Map(&Ty::Str)), f("url", Ty::Str)],
};
static O_K8S_KUBE_FLANNEL_CNI_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeFlannelCNIConfigV1Alpha1",
    fields: &[
        f("backendType", Ty::Str),
        f("backendPort", Ty::Int),
        f("backendMTU", Ty::Int),
        f("backendExtraConfig", Ty::Any),
        f("resources", Ty::Any),
        f("extraArgs", Ty::List(&Ty::Str)),
        f("kubeNetworkPoliciesEnabled", Ty::Bool),
    ],
};
static O_K8S_KUBE_INLINE_MANIFEST_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeInlineManifestConfigV1Alpha1", fields: &[f("name", Ty::Str), f("manifest", Ty::Str)] };
static O_K8S_KUBELET_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeletConfigV1Alpha1",
    fields: &[
        f("image", Ty::Str),
        f("config", Ty::Any),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("clusterDNS", Ty::List(&Ty::Str)),
        f("defaultRuntimeSeccompProfileEnabled", Ty::Bool),
    ],
};
static O_K8S_KUBE_PRISM_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubePrismConfigV1Alpha1", fields: &[f("port", Ty::Int), f("tlsServerName", Ty::Str)] };
static O_K8S_KUBE_NETWORK_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeNetworkConfigV1Alpha1",
    fields: &[
        f("dnsDomain", Ty::Str),
        f("podSubnets", Ty::List(&Ty::Str)),
        f("serviceSubnets", Ty::List(&Ty::Str)),
        f("nodeCIDRMaskSizeIPv4", Ty::Int),
        f("nodeCIDRMaskSizeIPv6", Ty::Int),
    ],
};
static O_K8S_NODE_IP_CONFIG: Obj = Obj { name: "k8s.NodeIPConfig", fields: &[f("validSubnets", Ty::List(&Ty::Str))] };
static O_K8S_KUBE_NODE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeNodeConfigV1Alpha1",
    fields: &[
        f("skipNodeRegistration", Ty::Bool),
        f("registerWithFQDN", Ty::Bool),
        f("nodeIP", Ty::Obj(&O_K8S_NODE_IP_CONFIG)),
        f("labels", Ty::Map(&Ty::Str)),
        f("annotations", Ty::Map(&Ty::Str)),
        f("taints", Ty::Map(&Ty::Str)),
    ],
};
static O_K8S_KUBE_PROXY_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeProxyConfigV1Alpha1",
    fields: &[
        f("enabled", Ty::Bool),
        f("image", Ty::Str),
        f("mode", Ty::Str),
        f("config", Ty::Any),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("resources", Ty::Any),
    ],
};
static O_K8S_KUBE_SCHEDULER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeSchedulerConfigV1Alpha1",
    fields: &[
        f("enabled", Ty::Bool),
        f("image", Ty::Str),
        f("config", Ty::Any),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("env", Ty::Map(&Ty::Str)),
        f("resources", Ty::Any),
    ],
};
static O_K8S_ISSUER_SERVICE_ACCOUNT_CONFIG: Obj =
    Obj { name: "k8s.IssuerServiceAccountConfig", fields: &[f("privateKey", Ty::Str), f("issuerURL", Ty::Str)] };
static O_K8S_ACCEPTED_SERVICE_ACCOUNT_CONFIG: Obj = Obj {
    name: "k8s.AcceptedServiceAccountConfig",
    fields: &[
        f("publicKeys", Ty::List(&Ty::Str)),
        f("issuers", Ty::List(&Ty::Str)),
        f("audiences", Ty::List(&Ty::Str)),
    ],
};
static O_K8S_KUBE_SERVICE_ACCOUNT_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeServiceAccountConfigV1Alpha1",
    fields: &[
        f("issuer", Ty::Obj(&O_K8S_ISSUER_SERVICE_ACCOUNT_CONFIG)),
        f("accepted", Ty::Obj(&O_K8S_ACCEPTED_SERVICE_ACCOUNT_CONFIG)),
    ],
};
static O_K8S_KUBE_STATIC_POD_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "k8s.KubeStaticPodConfigV1Alpha1", fields: &[f("name", Ty::Str), f("pod", Ty::Any)] };
static O_K8S_KUBE_TALOS_API_ACCESS_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "k8s.KubeTalosAPIAccessConfigV1Alpha1",
    fields: &[f("allowedRoles", Ty::List(&Ty::Str)), f("allowedKubernetesNamespaces", Ty::List(&Ty::Str))],
};
static O_NETWORK_BGP_IMPORT_ROUTE: Obj =
    Obj { name: "network.BGPImportRoute", fields: &[f("bgpInstance", Ty::Str), f("prefixes", Ty::List(&Ty::Str))] };
static O_NETWORK_BGPBFD_CONFIG: Obj = Obj {
    name: "network.BGPBFDConfig",
    fields: &[f("transmitInterval", Ty::Str), f("receiveInterval", Ty::Str), f("detectMultiplier", Ty::Int)],
};
static O_NETWORK_BGP_NEIGHBOR_CONFIG: Obj = Obj {
    name: "network.BGPNeighborConfig",
    fields: &[
        f("address", Ty::Str),
        f("link", Ty::Str),
        f("peerASN", Ty::Int),
        f("localASN", Ty::Int),
        f("passive", Ty::Bool),
        f("holdTime", Ty::Str),
        f("bfd", Ty::Obj(&O_NETWORK_BGPBFD_CONFIG)),
    ],
};
static O_NETWORK_BGP_INSTANCE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.BGPInstanceConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("vrf", Ty::Str),
        f("localASN", Ty::Int),
        f("routerID", Ty::Str),
        f("routeSource", Ty::Str),
        f("advertise", Ty::List(&Ty::Str)),
        f("multipath", Ty::Bool),
        f("maxPaths", Ty::Int),
        f("installRoutes", Ty::Bool),
        f("importRoutes", Ty::List(&Ty::Obj(&O_NETWORK_BGP_IMPORT_ROUTE))),
        f("neighbors", Ty::List(&Ty::Obj(&O_NETWORK_BGP_NEIGHBOR_CONFIG))),
    ],
};
static O_NETWORK_BLACKHOLE_ROUTE_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "network.BlackholeRouteConfigV1Alpha1", fields: &[f("name", Ty::Str), f("metric", Ty::Int)] };
static O_NETWORK_ADDRESS_CONFIG: Obj =
    Obj { name: "network.AddressConfig", fields: &[f("address", Ty::Str), f("routePriority", Ty::Int)] };
static O_NETWORK_ROUTE_CONFIG: Obj = Obj {
    name: "network.RouteConfig",
    fields: &[
        f("destination", Ty::Str),
        f("gateway", Ty::Str),
        f("source", Ty::Str),
        f("metric", Ty::Int),
        f("mtu", Ty::Int),
        f("table", Ty::Str),
    ],
};
static O_NETWORK_BOND_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.BondConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("hardwareAddr", Ty::Str),
        f("links", Ty::List(&Ty::Str)),
        f(
            "bondMode",
            Ty::Enum(&[
                "balance-rr",
                "active-backup",
                "balance-xor",
                "broadcast",
                "802.3ad",
                "balance-tlb",
                "balance-alb",
            ]),
        ),
        f("miimon", Ty::Int),
        f("updelay", Ty::Int),
        f("downdelay", Ty::Int),
        f("useCarrier", Ty::Bool),
        f("xmitHashPolicy", Ty::Enum(&["layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4"])),
        f("arpInterval", Ty::Int),
        f("arpIpTargets", Ty::List(&Ty::Str)),
        f("nsIp6Targets", Ty::List(&Ty::Str)),
        f("arpValidate", Ty::Enum(&["none", "active", "backup", "all", "filter", "filter-active", "filter-backup"])),
        f("arpAllTargets", Ty::Enum(&["any", "all"])),
        f("lacpRate", Ty::Enum(&["slow", "fast"])),
        f("failOverMac", Ty::Enum(&["none", "active", "follow"])),
        f("adSelect", Ty::Enum(&["stable", "bandwidth", "count"])),
        f("adActorSysPrio", Ty::Int),
        f("adUserPortKey", Ty::Int),
        f("adLACPActive", Ty::Enum(&["on", "off"])),
        f("primary", Ty::Str),
        f("primaryReselect", Ty::Enum(&["always", "better", "failure"])),
        f("resendIGMP", Ty::Int),
        f("minLinks", Ty::Int),
        f("lpInterval", Ty::Int),
        f("packetsPerSlave", Ty::Int),
        f("numPeerNotif", Ty::Int),
        f("tlbLogicalLb", Ty::Int),
        f("allSlavesActive", Ty::Int),
        f("peerNotifDelay", Ty::Int),
        f("missedMax", Ty::Int),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_BRIDGE_STP_CONFIG: Obj = Obj { name: "network.BridgeSTPConfig", fields: &[f("enabled", Ty::Bool)] };
static O_NETWORK_BRIDGE_VLAN_CONFIG: Obj =
    Obj { name: "network.BridgeVLANConfig", fields: &[f("filtering", Ty::Bool)] };
static O_NETWORK_BRIDGE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.BridgeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("hardwareAddr", Ty::Str),
        f("links", Ty::List(&Ty::Str)),
        f("stp", Ty::Obj(&O_NETWORK_BRIDGE_STP_CONFIG)),
        f("vlan", Ty::Obj(&O_NETWORK_BRIDGE_VLAN_CONFIG)),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_DEFAULT_ACTION_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "network.DefaultActionConfigV1Alpha1", fields: &[f("ingress", Ty::Enum(&["accept", "block"]))] };
static O_NETWORK_DHC_PV4_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.DHCPv4ConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("routeMetric", Ty::Int),
        f("ignoreHostname", Ty::Bool),
        f("ignoreRoutes", Ty::Bool),
        f("clientIdentifier", Ty::Enum(&["none", "mac", "duid"])),
        f("duidRaw", Ty::Str),
    ],
};
static O_NETWORK_DHC_PV6_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.DHCPv6ConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("routeMetric", Ty::Int),
        f("ignoreHostname", Ty::Bool),
        f("clientIdentifier", Ty::Enum(&["none", "mac", "duid"])),
        f("duidRaw", Ty::Str),
    ],
};
static O_NETWORK_DUMMY_LINK_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.DummyLinkConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("hardwareAddr", Ty::Str),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_ETHERNET_RINGS_CONFIG: Obj = Obj {
    name: "network.EthernetRingsConfig",
    fields: &[
        f("rx", Ty::Int),
        f("tx", Ty::Int),
        f("rx-mini", Ty::Int),
        f("rx-jumbo", Ty::Int),
        f("rx-buf-len", Ty::Int),
        f("cqe-size", Ty::Int),
        f("tx-push", Ty::Bool),
        f("rx-push", Ty::Bool),
        f("tx-push-buf-len", Ty::Int),
        f("tcp-data-split", Ty::Bool),
    ],
};
static O_NETWORK_ETHERNET_CHANNELS_CONFIG: Obj = Obj {
    name: "network.EthernetChannelsConfig",
    fields: &[f("rx", Ty::Int), f("tx", Ty::Int), f("other", Ty::Int), f("combined", Ty::Int)],
};
static O_NETWORK_ETHERNET_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.EthernetConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("features", Ty::Map(&Ty::Bool)),
        f("rings", Ty::Obj(&O_NETWORK_ETHERNET_RINGS_CONFIG)),
        f("channels", Ty::Obj(&O_NETWORK_ETHERNET_CHANNELS_CONFIG)),
        f("wakeOnLan", Ty::List(&Ty::Str)),
    ],
};
static O_NETWORK_H_CLOUD_VIP_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.HCloudVIPConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("link", Ty::Str), f("apiToken", Ty::Str)],
};
static O_NETWORK_HOSTNAME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.HostnameConfigV1Alpha1",
    fields: &[f("auto", Ty::Enum(&["stable", "off"])), f("hostname", Ty::Str)],
};
static O_NETWORK_HTTP_PROBE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.HTTPProbeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("interval", Ty::Str),
        f("failureThreshold", Ty::Int),
        f("url", Ty::Str),
        f("timeout", Ty::Str),
    ],
};
static O_NETWORK_KUBE_SPAN_FILTERS_CONFIG: Obj = Obj {
    name: "network.KubeSpanFiltersConfig",
    fields: &[f("endpoints", Ty::List(&Ty::Str)), f("excludeAdvertisedNetworks", Ty::List(&Ty::Str))],
};
static O_NETWORK_KUBE_SPAN_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.KubeSpanConfigV1Alpha1",
    fields: &[
        f("enabled", Ty::Bool),
        f("advertiseKubernetesNetworks", Ty::Bool),
        f("allowDownPeerBypass", Ty::Bool),
        f("harvestExtraEndpoints", Ty::Bool),
        f("mtu", Ty::Int),
        f("filters", Ty::Obj(&O_NETWORK_KUBE_SPAN_FILTERS_CONFIG)),
    ],
};
static O_NETWORK_KUBESPAN_ENDPOINTS_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.KubespanEndpointsConfigV1Alpha1",
    fields: &[f("extraAnnouncedEndpoints", Ty::List(&Ty::Str))],
};
static O_NETWORK_LAYER2_VIP_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "network.Layer2VIPConfigV1Alpha1", fields: &[f("name", Ty::Str), f("link", Ty::Str)] };
static O_NETWORK_LINK_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.LinkConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_LINK_SELECTOR: Obj = Obj { name: "network.LinkSelector", fields: &[f("match", Ty::Str)] };
static O_NETWORK_LINK_ALIAS_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.LinkAliasConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("selector", Ty::Obj(&O_NETWORK_LINK_SELECTOR))],
};
static O_NETWORK_NAMESERVER_CONFIG: Obj = Obj {
    name: "network.NameserverConfig",
    fields: &[f("address", Ty::Str), f("protocol", Ty::Enum(&["Do53", "DoT", "DoH"])), f("tlsServerName", Ty::Str)],
};
static O_NETWORK_SEARCH_DOMAINS_CONFIG: Obj = Obj {
    name: "network.SearchDomainsConfig",
    fields: &[f("domains", Ty::List(&Ty::Str)), f("disableDefault", Ty::Bool)],
};
static O_NETWORK_HOST_DNS_CONFIG: Obj = Obj {
    name: "network.HostDNSConfig",
    fields: &[f("enabled", Ty::Bool), f("forwardKubeDNSToHost", Ty::Bool), f("resolveMemberNames", Ty::Bool)],
};
static O_NETWORK_RESOLVER_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.ResolverConfigV1Alpha1",
    fields: &[
        f("nameservers", Ty::List(&Ty::Obj(&O_NETWORK_NAMESERVER_CONFIG))),
        f("searchDomains", Ty::Obj(&O_NETWORK_SEARCH_DOMAINS_CONFIG)),
        f("hostDNS", Ty::Obj(&O_NETWORK_HOST_DNS_CONFIG)),
    ],
};
static O_NETWORK_ROUTING_RULE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.RoutingRuleConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("src", Ty::Str),
        f("dst", Ty::Str),
        f("table", Ty::Str),
        f("action", Ty::Int),
        f("iifName", Ty::Str),
        f("oifName", Ty::Str),
        f("fwMark", Ty::Int),
        f("fwMask", Ty::Int),
    ],
};
static O_NETWORK_RULE_PORT_SELECTOR: Obj = Obj {
    name: "network.RulePortSelector",
    fields: &[
        f("ports", Ty::List(&Ty::OneOf(&[Ty::Int, Ty::Str]))),
        f("protocol", Ty::Enum(&["tcp", "udp", "icmp", "icmpv6"])),
    ],
};
static O_NETWORK_INGRESS_RULE: Obj =
    Obj { name: "network.IngressRule", fields: &[f("subnet", Ty::Str), f("except", Ty::Str)] };
static O_NETWORK_RULE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.RuleConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("portSelector", Ty::Obj(&O_NETWORK_RULE_PORT_SELECTOR)),
        f("ingress", Ty::List(&Ty::Obj(&O_NETWORK_INGRESS_RULE))),
    ],
};
static O_NETWORK_STATIC_HOST_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "network.StaticHostConfigV1Alpha1", fields: &[f("name", Ty::Str), f("hostnames", Ty::List(&Ty::Str))] };
static O_NETWORK_TCP_PROBE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.TCPProbeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("interval", Ty::Str),
        f("failureThreshold", Ty::Int),
        f("endpoint", Ty::Str),
        f("timeout", Ty::Str),
    ],
};
static O_NETWORK_NTP_CONFIG: Obj =
    Obj { name: "network.NTPConfig", fields: &[f("servers", Ty::List(&Ty::Str)), f("useNTS", Ty::Bool)] };
static O_NETWORK_PTP_CONFIG: Obj = Obj { name: "network.PTPConfig", fields: &[f("devices", Ty::List(&Ty::Str))] };
static O_NETWORK_TIME_SYNC_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.TimeSyncConfigV1Alpha1",
    fields: &[
        f("enabled", Ty::Bool),
        f("bootTimeout", Ty::Str),
        f("ntp", Ty::Obj(&O_NETWORK_NTP_CONFIG)),
        f("ptp", Ty::Obj(&O_NETWORK_PTP_CONFIG)),
    ],
};
static O_NETWORK_VETH_PEER_CONFIG: Obj = Obj {
    name: "network.VethPeerConfig",
    fields: &[
        f("name", Ty::Str),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_VETH_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.VethConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("peer", Ty::Obj(&O_NETWORK_VETH_PEER_CONFIG)),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_VLAN_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.VLANConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("vlanID", Ty::Int),
        f("vlanMode", Ty::Enum(&["802.1q", "802.1ad"])),
        f("parent", Ty::Str),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_VRF_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.VRFConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("hardwareAddr", Ty::Str),
        f("links", Ty::List(&Ty::Str)),
        f("table", Ty::Str),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_NETWORK_WIREGUARD_PEER: Obj = Obj {
    name: "network.WireguardPeer",
    fields: &[
        f("publicKey", Ty::Str),
        f("presharedKey", Ty::Str),
        f("endpoint", Ty::Str),
        f("persistentKeepaliveInterval", Ty::Str),
        f("allowedIPs", Ty::List(&Ty::Str)),
    ],
};
static O_NETWORK_WIREGUARD_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "network.WireguardConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("privateKey", Ty::Str),
        f("listenPort", Ty::Int),
        f("firewallMark", Ty::Int),
        f("peers", Ty::List(&Ty::Obj(&O_NETWORK_WIREGUARD_PEER))),
        f("up", Ty::Bool),
        f("mtu", Ty::Int),
        f("addresses", Ty::List(&Ty::Obj(&O_NETWORK_ADDRESS_CONFIG))),
        f("routes", Ty::List(&Ty::Obj(&O_NETWORK_ROUTE_CONFIG))),
        f("multicast", Ty::Bool),
    ],
};
static O_RUNTIME_ENVIRONMENT_V1_ALPHA1: Obj =
    Obj { name: "runtime.EnvironmentV1Alpha1", fields: &[f("variables", Ty::Map(&Ty::Str))] };
static O_RUNTIME_ETC_FILE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "runtime.EtcFileConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("mode", Ty::Int), f("contents", Ty::Str)],
};
static O_RUNTIME_EVENT_SINK_V1_ALPHA1: Obj =
    Obj { name: "runtime.EventSinkV1Alpha1", fields: &[f("endpoint", Ty::Str)] };
static O_RUNTIME_KERNEL_MODULE_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "runtime.KernelModuleConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("parameters", Ty::List(&Ty::Str))],
};
static O_RUNTIME_KMSG_LOG_V1_ALPHA1: Obj =
    Obj { name: "runtime.KmsgLogV1Alpha1", fields: &[f("name", Ty::Str), f("url", Ty::Str)] };
static O_RUNTIME_OOMV1_ALPHA1: Obj = Obj {
    name: "runtime.OOMV1Alpha1",
    fields: &[
        f("triggerExpression", Ty::Str),
        f("cgroupRankingExpression", Ty::Str),
        f("strictCgroupClassOrdering", Ty::Bool),
        f("sampleInterval", Ty::Str),
    ],
};
static O_RUNTIME_SECURITY_PROFILE_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "runtime.SecurityProfileConfigV1Alpha1", fields: &[f("workloadIsolation", Ty::Bool)] };
static O_RUNTIME_SYSCTL_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "runtime.SysctlConfigV1Alpha1", fields: &[f("params", Ty::Map(&Ty::Str))] };
static O_RUNTIME_SYSFS_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "runtime.SysfsConfigV1Alpha1", fields: &[f("params", Ty::Map(&Ty::Str))] };
static O_RUNTIME_UDEV_RULES_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "runtime.UdevRulesConfigV1Alpha1", fields: &[f("rules", Ty::List(&Ty::Str))] };
static O_RUNTIME_INSTALLER_SPEC: Obj = Obj { name: "runtime.InstallerSpec", fields: &[f("image", Ty::Str)] };
static O_RUNTIME_DISK_SELECTOR_SPEC: Obj = Obj { name: "runtime.DiskSelectorSpec", fields: &[f("match", Ty::Str)] };
static O_RUNTIME_PROVISIONING_SPEC: Obj = Obj {
    name: "runtime.ProvisioningSpec",
    fields: &[f("diskSelector", Ty::Obj(&O_RUNTIME_DISK_SELECTOR_SPEC)), f("wipe", Ty::Bool)],
};
static O_RUNTIME_UNATTENDED_INSTALL_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "runtime.UnattendedInstallConfigV1Alpha1",
    fields: &[
        f("reboot", Ty::Bool),
        f("installer", Ty::Obj(&O_RUNTIME_INSTALLER_SPEC)),
        f("provisioning", Ty::Obj(&O_RUNTIME_PROVISIONING_SPEC)),
    ],
};
static O_RUNTIME_WATCHDOG_TIMER_V1_ALPHA1: Obj =
    Obj { name: "runtime.WatchdogTimerV1Alpha1", fields: &[f("device", Ty::Str), f("timeout", Ty::Str)] };
static O_SECURITY_TRUSTED_ROOTS_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "security.TrustedRootsConfigV1Alpha1", fields: &[f("name", Ty::Str), f("certificates", Ty::Str)] };
static O_SIDEROLINK_CONFIG_V1_ALPHA1: Obj =
    Obj { name: "siderolink.ConfigV1Alpha1", fields: &[f("apiUrl", Ty::Str), f("uniqueToken", Ty::Str)] };
static O_STORAGE_LVM_LOGICAL_VOLUME_PROVISIONING_SPEC: Obj = Obj {
    name: "storage.LVMLogicalVolumeProvisioningSpec",
    fields: &[f("volumeGroup", Ty::Str), f("minSize", Ty::Str), f("maxSize", Ty::Str)],
};
static O_STORAGE_LVM_LOGICAL_VOLUME_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "storage.LVMLogicalVolumeConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("type", Ty::Str),
        f("mirrors", Ty::Int),
        f("stripes", Ty::Int),
        f("provisioning", Ty::Obj(&O_STORAGE_LVM_LOGICAL_VOLUME_PROVISIONING_SPEC)),
    ],
};
static O_STORAGE_LVM_VOLUME_SELECTOR_SPEC: Obj =
    Obj { name: "storage.LVMVolumeSelectorSpec", fields: &[f("match", Ty::Str)] };
static O_STORAGE_PROVISIONING_SPEC: Obj = Obj {
    name: "storage.ProvisioningSpec",
    fields: &[f("volumeSelector", Ty::Obj(&O_STORAGE_LVM_VOLUME_SELECTOR_SPEC))],
};
static O_STORAGE_LVM_VOLUME_GROUP_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "storage.LVMVolumeGroupConfigV1Alpha1",
    fields: &[f("name", Ty::Str), f("provisioning", Ty::Obj(&O_STORAGE_PROVISIONING_SPEC))],
};
static O_STORAGE_RAID_VOLUME_SELECTOR: Obj = Obj { name: "storage.RAIDVolumeSelector", fields: &[f("match", Ty::Str)] };
static O_STORAGE_RAID_PROVISIONING_SPEC: Obj = Obj {
    name: "storage.RAIDProvisioningSpec",
    fields: &[f("volumeSelector", Ty::Obj(&O_STORAGE_RAID_VOLUME_SELECTOR))],
};
static O_STORAGE_RAID_ARRAY_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "storage.RAIDArrayConfigV1Alpha1",
    fields: &[
        f("name", Ty::Str),
        f("level", Ty::Enum(&["raid1"])),
        f("metadata", Ty::Enum(&["1.0", "1.2"])),
        f("provisioning", Ty::Obj(&O_STORAGE_RAID_PROVISIONING_SPEC)),
    ],
};
static O_V1ALPHA1_MACHINE_CONFIG_CA: Obj =
    Obj { name: "v1alpha1.MachineConfig.ca", fields: &[f("crt", Ty::Str), f("key", Ty::Str)] };
static O_X509_PEM_ENCODED_CERTIFICATE: Obj = Obj { name: "x509.PEMEncodedCertificate", fields: &[f("crt", Ty::Str)] };
static O_V1ALPHA1_MACHINE_CONTROLLER_MANAGER_CONFIG: Obj =
    Obj { name: "v1alpha1.MachineControllerManagerConfig", fields: &[f("disabled", Ty::Bool)] };
static O_V1ALPHA1_MACHINE_SCHEDULER_CONFIG: Obj =
    Obj { name: "v1alpha1.MachineSchedulerConfig", fields: &[f("disabled", Ty::Bool)] };
static O_V1ALPHA1_MACHINE_CONTROL_PLANE_CONFIG: Obj = Obj {
    name: "v1alpha1.MachineControlPlaneConfig",
    fields: &[
        f("controllerManager", Ty::Obj(&O_V1ALPHA1_MACHINE_CONTROLLER_MANAGER_CONFIG)),
        f("scheduler", Ty::Obj(&O_V1ALPHA1_MACHINE_SCHEDULER_CONFIG)),
    ],
};
static O_V1ALPHA1_LINUX_ID_MAPPING: Obj = Obj {
    name: "v1alpha1.LinuxIDMapping",
    fields: &[f("containerID", Ty::Int), f("hostID", Ty::Int), f("size", Ty::Int)],
};
static O_V1ALPHA1_EXTRA_MOUNT: Obj = Obj {
    name: "v1alpha1.ExtraMount",
    fields: &[
        f("destination", Ty::Str),
        f("type", Ty::Str),
        f("source", Ty::Str),
        f("options", Ty::List(&Ty::Str)),
        f("uidMappings", Ty::List(&Ty::Obj(&O_V1ALPHA1_LINUX_ID_MAPPING))),
        f("gidMappings", Ty::List(&Ty::Obj(&O_V1ALPHA1_LINUX_ID_MAPPING))),
    ],
};
static O_V1ALPHA1_KUBELET_NODE_IP_CONFIG: Obj =
    Obj { name: "v1alpha1.KubeletNodeIPConfig", fields: &[f("validSubnets", Ty::List(&Ty::Str))] };
static O_V1ALPHA1_KUBELET_CONFIG: Obj = Obj {
    name: "v1alpha1.KubeletConfig",
    fields: &[
        f("image", Ty::Str),
        f("clusterDNS", Ty::List(&Ty::Str)),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("extraMounts", Ty::List(&Ty::Obj(&O_V1ALPHA1_EXTRA_MOUNT))),
        f("extraConfig", Ty::Any),
        f("credentialProviderConfig", Ty::Any),
        f("defaultRuntimeSeccompProfileEnabled", Ty::Bool),
        f("registerWithFQDN", Ty::Bool),
        f("nodeIP", Ty::Obj(&O_V1ALPHA1_KUBELET_NODE_IP_CONFIG)),
        f("skipNodeRegistration", Ty::Bool),
        f("disableManifestsDirectory", Ty::Bool),
    ],
};
static O_V1ALPHA1_NETWORK_DEVICE_SELECTOR: Obj = Obj {
    name: "v1alpha1.NetworkDeviceSelector",
    fields: &[
        f("busPath", Ty::Str),
        f("hardwareAddr", Ty::Str),
        f("permanentAddr", Ty::Str),
        f("pciID", Ty::Str),
        f("driver", Ty::Str),
        f("physical", Ty::Bool),
    ],
};
static O_V1ALPHA1_ROUTE: Obj = Obj {
    name: "v1alpha1.Route",
    fields: &[
        f("network", Ty::Str),
        f("gateway", Ty::Str),
        f("source", Ty::Str),
        f("metric", Ty::Int),
        f("mtu", Ty::Int),
    ],
};
static O_V1ALPHA1_BOND: Obj = Obj {
    name: "v1alpha1.Bond",
    fields: &[
        f("interfaces", Ty::List(&Ty::Str)),
        f("deviceSelectors", Ty::List(&Ty::Obj(&O_V1ALPHA1_NETWORK_DEVICE_SELECTOR))),
        f("arpIPTarget", Ty::List(&Ty::Str)),
        f("mode", Ty::Str),
        f("xmitHashPolicy", Ty::Str),
        f("lacpRate", Ty::Str),
        f("adActorSystem", Ty::Str),
        f("arpValidate", Ty::Str),
        f("arpAllTargets", Ty::Str),
        f("primary", Ty::Str),
        f("primaryReselect", Ty::Str),
        f("failOverMac", Ty::Str),
        f("adSelect", Ty::Str),
        f("miimon", Ty::Int),
        f("updelay", Ty::Int),
        f("downdelay", Ty::Int),
        f("arpInterval", Ty::Int),
        f("resendIgmp", Ty::Int),
        f("minLinks", Ty::Int),
        f("lpInterval", Ty::Int),
        f("packetsPerSlave", Ty::Int),
        f("numPeerNotif", Ty::Int),
        f("tlbDynamicLb", Ty::Int),
        f("allSlavesActive", Ty::Int),
        f("useCarrier", Ty::Bool),
        f("adActorSysPrio", Ty::Int),
        f("adUserPortKey", Ty::Int),
        f("peerNotifyDelay", Ty::Int),
    ],
};
static O_V1ALPHA1_STP: Obj = Obj { name: "v1alpha1.STP", fields: &[f("enabled", Ty::Bool)] };
static O_V1ALPHA1_BRIDGE_VLAN: Obj = Obj { name: "v1alpha1.BridgeVLAN", fields: &[f("vlanFiltering", Ty::Bool)] };
static O_V1ALPHA1_BRIDGE: Obj = Obj {
    name: "v1alpha1.Bridge",
    fields: &[
        f("interfaces", Ty::List(&Ty::Str)),
        f("stp", Ty::Obj(&O_V1ALPHA1_STP)),
        f("vlan", Ty::Obj(&O_V1ALPHA1_BRIDGE_VLAN)),
    ],
};
static O_V1ALPHA1_BRIDGE_PORT: Obj = Obj { name: "v1alpha1.BridgePort", fields: &[f("master", Ty::Str)] };
static O_V1ALPHA1_VIP_EQUINIX_METAL_CONFIG: Obj =
    Obj { name: "v1alpha1.VIPEquinixMetalConfig", fields: &[f("apiToken", Ty::Str)] };
static O_V1ALPHA1_VIPH_CLOUD_CONFIG: Obj = Obj { name: "v1alpha1.VIPHCloudConfig", fields: &[f("apiToken", Ty::Str)] };
static O_V1ALPHA1_DEVICE_VIP_CONFIG: Obj = Obj {
    name: "v1alpha1.DeviceVIPConfig",
    fields: &[
        f("ip", Ty::Str),
        f("equinixMetal", Ty::Obj(&O_V1ALPHA1_VIP_EQUINIX_METAL_CONFIG)),
        f("hcloud", Ty::Obj(&O_V1ALPHA1_VIPH_CLOUD_CONFIG)),
    ],
};
static O_V1ALPHA1_DHCP_OPTIONS: Obj = Obj {
    name: "v1alpha1.DHCPOptions",
    fields: &[f("routeMetric", Ty::Int), f("ipv4", Ty::Bool), f("ipv6", Ty::Bool), f("duidv6", Ty::Str)],
};
static O_V1ALPHA1_VLAN: Obj = Obj {
    name: "v1alpha1.Vlan",
    fields: &[
        f("addresses", Ty::List(&Ty::Str)),
        f("cidr", Ty::Str),
        f("routes", Ty::List(&Ty::Obj(&O_V1ALPHA1_ROUTE))),
        f("dhcp", Ty::Bool),
        f("vlanId", Ty::Int),
        f("mtu", Ty::Int),
        f("vip", Ty::Obj(&O_V1ALPHA1_DEVICE_VIP_CONFIG)),
        f("dhcpOptions", Ty::Obj(&O_V1ALPHA1_DHCP_OPTIONS)),
    ],
};
static O_V1ALPHA1_DEVICE_WIREGUARD_PEER: Obj = Obj {
    name: "v1alpha1.DeviceWireguardPeer",
    fields: &[
        f("publicKey", Ty::Str),
        f("endpoint", Ty::Str),
        f("persistentKeepaliveInterval", Ty::Str),
        f("allowedIPs", Ty::List(&Ty::Str)),
    ],
};
static O_V1ALPHA1_DEVICE_WIREGUARD_CONFIG: Obj = Obj {
    name: "v1alpha1.DeviceWireguardConfig",
    fields: &[
        f("privateKey", Ty::Str),
        f("listenPort", Ty::Int),
        f("firewallMark", Ty::Int),
        f("peers", Ty::List(&Ty::Obj(&O_V1ALPHA1_DEVICE_WIREGUARD_PEER))),
    ],
};
static O_V1ALPHA1_DEVICE: Obj = Obj {
    name: "v1alpha1.Device",
    fields: &[
        f("interface", Ty::Str),
        f("deviceSelector", Ty::Obj(&O_V1ALPHA1_NETWORK_DEVICE_SELECTOR)),
        f("addresses", Ty::List(&Ty::Str)),
        f("cidr", Ty::Str),
        f("routes", Ty::List(&Ty::Obj(&O_V1ALPHA1_ROUTE))),
        f("bond", Ty::Obj(&O_V1ALPHA1_BOND)),
        f("bridge", Ty::Obj(&O_V1ALPHA1_BRIDGE)),
        f("bridgePort", Ty::Obj(&O_V1ALPHA1_BRIDGE_PORT)),
        f("vlans", Ty::List(&Ty::Obj(&O_V1ALPHA1_VLAN))),
        f("mtu", Ty::Int),
        f("dhcp", Ty::Bool),
        f("ignore", Ty::Bool),
        f("dummy", Ty::Bool),
        f("dhcpOptions", Ty::Obj(&O_V1ALPHA1_DHCP_OPTIONS)),
        f("wireguard", Ty::Obj(&O_V1ALPHA1_DEVICE_WIREGUARD_CONFIG)),
        f("vip", Ty::Obj(&O_V1ALPHA1_DEVICE_VIP_CONFIG)),
    ],
};
static O_V1ALPHA1_EXTRA_HOST: Obj =
    Obj { name: "v1alpha1.ExtraHost", fields: &[f("ip", Ty::Str), f("aliases", Ty::List(&Ty::Str))] };
static O_V1ALPHA1_KUBE_SPAN_FILTERS: Obj = Obj {
    name: "v1alpha1.KubeSpanFilters",
    fields: &[f("endpoints", Ty::List(&Ty::Str)), f("excludeAdvertisedNetworks", Ty::List(&Ty::Str))],
};
static O_V1ALPHA1_NETWORK_KUBE_SPAN: Obj = Obj {
    name: "v1alpha1.NetworkKubeSpan",
    fields: &[
        f("enabled", Ty::Bool),
        f("advertiseKubernetesNetworks", Ty::Bool),
        f("allowDownPeerBypass", Ty::Bool),
        f("harvestExtraEndpoints", Ty::Bool),
        f("mtu", Ty::Int),
        f("filters", Ty::Obj(&O_V1ALPHA1_KUBE_SPAN_FILTERS)),
    ],
};
static O_V1ALPHA1_NETWORK_CONFIG: Obj = Obj {
    name: "v1alpha1.NetworkConfig",
    fields: &[
        f("hostname", Ty::Str),
        f("interfaces", Ty::List(&Ty::Obj(&O_V1ALPHA1_DEVICE))),
        f("nameservers", Ty::List(&Ty::Str)),
        f("searchDomains", Ty::List(&Ty::Str)),
        f("extraHostEntries", Ty::List(&Ty::Obj(&O_V1ALPHA1_EXTRA_HOST))),
        f("kubespan", Ty::Obj(&O_V1ALPHA1_NETWORK_KUBE_SPAN)),
        f("disableSearchDomain", Ty::Bool),
    ],
};
static O_V1ALPHA1_DISK_PARTITION: Obj = Obj {
    name: "v1alpha1.DiskPartition",
    fields: &[f("size", Ty::OneOf(&[Ty::Int, Ty::Str])), f("mountpoint", Ty::Str)],
};
static O_V1ALPHA1_MACHINE_DISK: Obj = Obj {
    name: "v1alpha1.MachineDisk",
    fields: &[f("device", Ty::Str), f("partitions", Ty::List(&Ty::Obj(&O_V1ALPHA1_DISK_PARTITION)))],
};
static O_V1ALPHA1_INSTALL_DISK_SELECTOR: Obj = Obj {
    name: "v1alpha1.InstallDiskSelector",
    fields: &[
        f("size", Ty::Str),
        f("name", Ty::Str),
        f("model", Ty::Str),
        f("serial", Ty::Str),
        f("modalias", Ty::Str),
        f("uuid", Ty::Str),
        f("wwid", Ty::Str),
        f("type", Ty::Enum(&["ssd", "hdd", "nvme", "sd"])),
        f("busPath", Ty::Str),
        f("match", Ty::Str),
    ],
};
static O_V1ALPHA1_INSTALL_EXTENSION_CONFIG: Obj =
    Obj { name: "v1alpha1.InstallExtensionConfig", fields: &[f("image", Ty::Str)] };
static O_V1ALPHA1_INSTALL_CONFIG: Obj = Obj {
    name: "v1alpha1.InstallConfig",
    fields: &[
        f("disk", Ty::Str),
        f("diskSelector", Ty::Obj(&O_V1ALPHA1_INSTALL_DISK_SELECTOR)),
        f("extraKernelArgs", Ty::List(&Ty::Str)),
        f("image", Ty::Str),
        f("extensions", Ty::List(&Ty::Obj(&O_V1ALPHA1_INSTALL_EXTENSION_CONFIG))),
        f("bootloader", Ty::Bool),
        f("wipe", Ty::Bool),
        f("legacyBIOSSupport", Ty::Bool),
        f("grubUseUKICmdline", Ty::Bool),
    ],
};
static O_V1ALPHA1_MACHINE_FILE: Obj = Obj {
    name: "v1alpha1.MachineFile",
    fields: &[
        f("content", Ty::Str),
        f("permissions", Ty::Int),
        f("path", Ty::Str),
        f("op", Ty::Enum(&["create", "append", "overwrite"])),
    ],
};
static O_V1ALPHA1_TIME_CONFIG: Obj = Obj {
    name: "v1alpha1.TimeConfig",
    fields: &[f("disabled", Ty::Bool), f("servers", Ty::List(&Ty::Str)), f("bootTimeout", Ty::Str)],
};
static O_V1ALPHA1_REGISTRY_MIRROR_CONFIG: Obj = Obj {
    name: "v1alpha1.RegistryMirrorConfig",
    fields: &[f("endpoints", Ty::List(&Ty::Str)), f("overridePath", Ty::Bool), f("skipFallback", Ty::Bool)],
};
static O_V1ALPHA1_REGISTRY_TLS_CONFIG_CLIENT_IDENTITY: Obj =
    Obj { name: "v1alpha1.RegistryTLSConfig.clientIdentity", fields: &[f("crt", Ty::Str), f("key", Ty::Str)] };
static O_V1ALPHA1_REGISTRY_TLS_CONFIG: Obj = Obj {
    name: "v1alpha1.RegistryTLSConfig",
    fields: &[
        f("clientIdentity", Ty::Obj(&O_V1ALPHA1_REGISTRY_TLS_CONFIG_CLIENT_IDENTITY)),
        f("ca", Ty::Str),
        f("insecureSkipVerify", Ty::Bool),
    ],
};
static O_V1ALPHA1_REGISTRY_AUTH_CONFIG: Obj = Obj {
    name: "v1alpha1.RegistryAuthConfig",
    fields: &[f("username", Ty::Str), f("password", Ty::Str), f("auth", Ty::Str), f("identityToken", Ty::Str)],
};
static O_V1ALPHA1_REGISTRY_CONFIG: Obj = Obj {
    name: "v1alpha1.RegistryConfig",
    fields: &[f("tls", Ty::Obj(&O_V1ALPHA1_REGISTRY_TLS_CONFIG)), f("auth", Ty::Obj(&O_V1ALPHA1_REGISTRY_AUTH_CONFIG))],
};
static O_V1ALPHA1_REGISTRIES_CONFIG: Obj = Obj {
    name: "v1alpha1.RegistriesConfig",
    fields: &[
        f("mirrors", Ty::Map(&Ty::Obj(&O_V1ALPHA1_REGISTRY_MIRROR_CONFIG))),
        f("config", Ty::Map(&Ty::Obj(&O_V1ALPHA1_REGISTRY_CONFIG))),
    ],
};
static O_V1ALPHA1_ENCRYPTION_KEY_STATIC: Obj =
    Obj { name: "v1alpha1.EncryptionKeyStatic", fields: &[f("passphrase", Ty::Str)] };
static O_V1ALPHA1_ENCRYPTION_KEY_NODE_ID: Obj = Obj { name: "v1alpha1.EncryptionKeyNodeID", fields: &[] };
static O_V1ALPHA1_ENCRYPTION_KEY_KMS: Obj =
    Obj { name: "v1alpha1.EncryptionKeyKMS", fields: &[f("endpoint", Ty::Str)] };
static O_V1ALPHA1_ENCRYPTION_KEY_TPM: Obj =
    Obj { name: "v1alpha1.EncryptionKeyTPM", fields: &[f("checkSecurebootStatusOnEnroll", Ty::Bool)] };
static O_V1ALPHA1_ENCRYPTION_KEY_RECOVERY: Obj =
    Obj { name: "v1alpha1.EncryptionKeyRecovery", fields: &[f("passphrase", Ty::Str)] };
static O_V1ALPHA1_ENCRYPTION_KEY: Obj = Obj {
    name: "v1alpha1.EncryptionKey",
    fields: &[
        f("static", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY_STATIC)),
        f("nodeID", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY_NODE_ID)),
        f("kms", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY_KMS)),
        f("slot", Ty::Int),
        f("tpm", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY_TPM)),
        f("recovery", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY_RECOVERY)),
    ],
};
static O_V1ALPHA1_ENCRYPTION_CONFIG: Obj = Obj {
    name: "v1alpha1.EncryptionConfig",
    fields: &[
        f("provider", Ty::Str),
        f("keys", Ty::List(&Ty::Obj(&O_V1ALPHA1_ENCRYPTION_KEY))),
        f("cipher", Ty::Enum(&["aes-xts-plain64", "xchacha12,aes-adiantum-plain64", "xchacha20,aes-adiantum-plain64"])),
        f("keySize", Ty::Int),
        f("blockSize", Ty::Int),
        f("options", Ty::List(&Ty::Enum(&["no_read_workqueue", "no_write_workqueue", "same_cpu_crypt"]))),
    ],
};
static O_V1ALPHA1_SYSTEM_DISK_ENCRYPTION_CONFIG: Obj = Obj {
    name: "v1alpha1.SystemDiskEncryptionConfig",
    fields: &[
        f("state", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_CONFIG)),
        f("ephemeral", Ty::Obj(&O_V1ALPHA1_ENCRYPTION_CONFIG)),
    ],
};
static O_V1ALPHA1_KUBERNETES_TALOS_API_ACCESS_CONFIG: Obj = Obj {
    name: "v1alpha1.KubernetesTalosAPIAccessConfig",
    fields: &[
        f("enabled", Ty::Bool),
        f("allowedRoles", Ty::List(&Ty::Str)),
        f("allowedKubernetesNamespaces", Ty::List(&Ty::Str)),
    ],
};
static O_V1ALPHA1_KUBE_PRISM: Obj =
    Obj { name: "v1alpha1.KubePrism", fields: &[f("enabled", Ty::Bool), f("port", Ty::Int)] };
static O_V1ALPHA1_HOST_DNS_CONFIG: Obj = Obj {
    name: "v1alpha1.HostDNSConfig",
    fields: &[f("enabled", Ty::Bool), f("forwardKubeDNSToHost", Ty::Bool), f("resolveMemberNames", Ty::Bool)],
};
static O_V1ALPHA1_IMAGE_CACHE_CONFIG: Obj =
    Obj { name: "v1alpha1.ImageCacheConfig", fields: &[f("localEnabled", Ty::Bool)] };
static O_V1ALPHA1_FEATURES_CONFIG: Obj = Obj {
    name: "v1alpha1.FeaturesConfig",
    fields: &[
        f("rbac", Ty::Bool),
        f("stableHostname", Ty::Bool),
        f("kubernetesTalosAPIAccess", Ty::Obj(&O_V1ALPHA1_KUBERNETES_TALOS_API_ACCESS_CONFIG)),
        f("apidCheckExtKeyUsage", Ty::Bool),
        f("diskQuotaSupport", Ty::Bool),
        f("kubePrism", Ty::Obj(&O_V1ALPHA1_KUBE_PRISM)),
        f("hostDNS", Ty::Obj(&O_V1ALPHA1_HOST_DNS_CONFIG)),
        f("imageCache", Ty::Obj(&O_V1ALPHA1_IMAGE_CACHE_CONFIG)),
        f("nodeAddressSortAlgorithm", Ty::Str),
    ],
};
static O_V1ALPHA1_UDEV_CONFIG: Obj = Obj { name: "v1alpha1.UdevConfig", fields: &[f("rules", Ty::List(&Ty::Str))] };
static O_V1ALPHA1_LOGGING_DESTINATION: Obj = Obj {
    name: "v1alpha1.LoggingDestination",
    fields: &[f("endpoint", Ty::Str), f("format", Ty::Enum(&["json_lines"])), f("extraTags", Ty::Map(&Ty::Str))],
};
static O_V1ALPHA1_LOGGING_CONFIG: Obj = Obj {
    name: "v1alpha1.LoggingConfig",
    fields: &[f("destinations", Ty::List(&Ty::Obj(&O_V1ALPHA1_LOGGING_DESTINATION)))],
};
static O_V1ALPHA1_KERNEL_MODULE_CONFIG: Obj =
    Obj { name: "v1alpha1.KernelModuleConfig", fields: &[f("name", Ty::Str), f("parameters", Ty::List(&Ty::Str))] };
static O_V1ALPHA1_KERNEL_CONFIG: Obj = Obj {
    name: "v1alpha1.KernelConfig",
    fields: &[f("modules", Ty::List(&Ty::Obj(&O_V1ALPHA1_KERNEL_MODULE_CONFIG)))],
};
static O_V1ALPHA1_MACHINE_SECCOMP_PROFILE: Obj =
    Obj { name: "v1alpha1.MachineSeccompProfile", fields: &[f("name", Ty::Str), f("value", Ty::Any)] };
static O_V1ALPHA1_MACHINE_CONFIG: Obj = Obj {
    name: "v1alpha1.MachineConfig",
    fields: &[
        f("type", Ty::Str),
        f("token", Ty::Str),
        f("ca", Ty::Obj(&O_V1ALPHA1_MACHINE_CONFIG_CA)),
        f("acceptedCAs", Ty::List(&Ty::Obj(&O_X509_PEM_ENCODED_CERTIFICATE))),
        f("certSANs", Ty::List(&Ty::Str)),
        f("controlPlane", Ty::Obj(&O_V1ALPHA1_MACHINE_CONTROL_PLANE_CONFIG)),
        f("kubelet", Ty::Obj(&O_V1ALPHA1_KUBELET_CONFIG)),
        f("pods", Ty::List(&Ty::Any)),
        f("network", Ty::Obj(&O_V1ALPHA1_NETWORK_CONFIG)),
        f("disks", Ty::List(&Ty::Obj(&O_V1ALPHA1_MACHINE_DISK))),
        f("install", Ty::Obj(&O_V1ALPHA1_INSTALL_CONFIG)),
        f("files", Ty::List(&Ty::Obj(&O_V1ALPHA1_MACHINE_FILE))),
        f("env", Ty::Map(&Ty::Str)),
        f("time", Ty::Obj(&O_V1ALPHA1_TIME_CONFIG)),
        f("sysctls", Ty::Map(&Ty::Str)),
        f("sysfs", Ty::Map(&Ty::Str)),
        f("registries", Ty::Obj(&O_V1ALPHA1_REGISTRIES_CONFIG)),
        f("systemDiskEncryption", Ty::Obj(&O_V1ALPHA1_SYSTEM_DISK_ENCRYPTION_CONFIG)),
        f("features", Ty::Obj(&O_V1ALPHA1_FEATURES_CONFIG)),
        f("udev", Ty::Obj(&O_V1ALPHA1_UDEV_CONFIG)),
        f("logging", Ty::Obj(&O_V1ALPHA1_LOGGING_CONFIG)),
        f("kernel", Ty::Obj(&O_V1ALPHA1_KERNEL_CONFIG)),
        f("seccompProfiles", Ty::List(&Ty::Obj(&O_V1ALPHA1_MACHINE_SECCOMP_PROFILE))),
        f("baseRuntimeSpecOverrides", Ty::Any),
        f("nodeLabels", Ty::Map(&Ty::Str)),
        f("nodeAnnotations", Ty::Map(&Ty::Str)),
        f("nodeTaints", Ty::Map(&Ty::Str)),
    ],
};
static O_V1ALPHA1_CONTROL_PLANE_CONFIG: Obj =
    Obj { name: "v1alpha1.ControlPlaneConfig", fields: &[f("endpoint", Ty::Str), f("localAPIServerPort", Ty::Int)] };
static O_V1ALPHA1_FLANNEL_CNI_CONFIG: Obj = Obj {
    name: "v1alpha1.FlannelCNIConfig",
    fields: &[f("extraArgs", Ty::List(&Ty::Str)), f("kubeNetworkPoliciesEnabled", Ty::Bool)],
};
static O_V1ALPHA1_CNI_CONFIG: Obj = Obj {
    name: "v1alpha1.CNIConfig",
    fields: &[
        f("name", Ty::Enum(&["flannel", "custom", "none"])),
        f("urls", Ty::List(&Ty::Str)),
        f("flannel", Ty::Obj(&O_V1ALPHA1_FLANNEL_CNI_CONFIG)),
    ],
};
static O_V1ALPHA1_CLUSTER_NETWORK_CONFIG: Obj = Obj {
    name: "v1alpha1.ClusterNetworkConfig",
    fields: &[
        f("cni", Ty::Obj(&O_V1ALPHA1_CNI_CONFIG)),
        f("dnsDomain", Ty::Str),
        f("podSubnets", Ty::List(&Ty::Str)),
        f("serviceSubnets", Ty::List(&Ty::Str)),
    ],
};
static O_V1ALPHA1_CLUSTER_CONFIG_CA: Obj =
    Obj { name: "v1alpha1.ClusterConfig.ca", fields: &[f("crt", Ty::Str), f("key", Ty::Str)] };
static O_V1ALPHA1_CLUSTER_CONFIG_AGGREGATOR_CA: Obj =
    Obj { name: "v1alpha1.ClusterConfig.aggregatorCA", fields: &[f("crt", Ty::Str), f("key", Ty::Str)] };
static O_V1ALPHA1_CLUSTER_CONFIG_SERVICE_ACCOUNT: Obj =
    Obj { name: "v1alpha1.ClusterConfig.serviceAccount", fields: &[f("key", Ty::Str)] };
static O_V1ALPHA1_VOLUME_MOUNT_CONFIG: Obj = Obj {
    name: "v1alpha1.VolumeMountConfig",
    fields: &[f("hostPath", Ty::Str), f("mountPath", Ty::Str), f("readonly", Ty::Bool)],
};
static O_V1ALPHA1_ADMISSION_PLUGIN_CONFIG: Obj =
    Obj { name: "v1alpha1.AdmissionPluginConfig", fields: &[f("name", Ty::Str), f("configuration", Ty::Any)] };
static O_V1ALPHA1_AUTHORIZATION_CONFIG_AUTHORIZER_CONFIG: Obj = Obj {
    name: "v1alpha1.AuthorizationConfigAuthorizerConfig",
    fields: &[f("type", Ty::Str), f("name", Ty::Str), f("webhook", Ty::Any)],
};
static O_V1ALPHA1_API_SERVER_CONFIG: Obj = Obj {
    name: "v1alpha1.APIServerConfig",
    fields: &[
        f("image", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("extraVolumes", Ty::List(&Ty::Obj(&O_V1ALPHA1_VOLUME_MOUNT_CONFIG))),
        f("env", Ty::Map(&Ty::Str)),
        f("certSANs", Ty::List(&Ty::Str)),
        f("disablePodSecurityPolicy", Ty::Bool),
        f("admissionControl", Ty::List(&Ty::Obj(&O_V1ALPHA1_ADMISSION_PLUGIN_CONFIG))),
        f("auditPolicy", Ty::Any),
        f("resources", Ty::Any),
        f("authorizationConfig", Ty::List(&Ty::Obj(&O_V1ALPHA1_AUTHORIZATION_CONFIG_AUTHORIZER_CONFIG))),
    ],
};
static O_V1ALPHA1_CONTROLLER_MANAGER_CONFIG: Obj = Obj {
    name: "v1alpha1.ControllerManagerConfig",
    fields: &[
        f("image", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("extraVolumes", Ty::List(&Ty::Obj(&O_V1ALPHA1_VOLUME_MOUNT_CONFIG))),
        f("env", Ty::Map(&Ty::Str)),
        f("resources", Ty::Any),
    ],
};
static O_V1ALPHA1_PROXY_CONFIG: Obj = Obj {
    name: "v1alpha1.ProxyConfig",
    fields: &[
        f("disabled", Ty::Bool),
        f("image", Ty::Str),
        f("mode", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
    ],
};
static O_V1ALPHA1_SCHEDULER_CONFIG: Obj = Obj {
    name: "v1alpha1.SchedulerConfig",
    fields: &[
        f("image", Ty::Str),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("extraVolumes", Ty::List(&Ty::Obj(&O_V1ALPHA1_VOLUME_MOUNT_CONFIG))),
        f("env", Ty::Map(&Ty::Str)),
        f("resources", Ty::Any),
        f("config", Ty::Any),
    ],
};
static O_V1ALPHA1_REGISTRY_KUBERNETES_CONFIG: Obj =
    Obj { name: "v1alpha1.RegistryKubernetesConfig", fields: &[f("disabled", Ty::Bool)] };
static O_V1ALPHA1_REGISTRY_SERVICE_CONFIG: Obj =
    Obj { name: "v1alpha1.RegistryServiceConfig", fields: &[f("disabled", Ty::Bool), f("endpoint", Ty::Str)] };
static O_V1ALPHA1_DISCOVERY_REGISTRIES_CONFIG: Obj = Obj {
    name: "v1alpha1.DiscoveryRegistriesConfig",
    fields: &[
        f("kubernetes", Ty::Obj(&O_V1ALPHA1_REGISTRY_KUBERNETES_CONFIG)),
        f("service", Ty::Obj(&O_V1ALPHA1_REGISTRY_SERVICE_CONFIG)),
    ],
};
static O_V1ALPHA1_CLUSTER_DISCOVERY_CONFIG: Obj = Obj {
    name: "v1alpha1.ClusterDiscoveryConfig",
    fields: &[f("enabled", Ty::Bool), f("registries", Ty::Obj(&O_V1ALPHA1_DISCOVERY_REGISTRIES_CONFIG))],
};
static O_V1ALPHA1_ETCD_CONFIG_CA: Obj =
    Obj { name: "v1alpha1.EtcdConfig.ca", fields: &[f("crt", Ty::Str), f("key", Ty::Str)] };
static O_V1ALPHA1_ETCD_CONFIG: Obj = Obj {
    name: "v1alpha1.EtcdConfig",
    fields: &[
        f("image", Ty::Str),
        f("ca", Ty::Obj(&O_V1ALPHA1_ETCD_CONFIG_CA)),
        f("extraArgs", Ty::Map(&Ty::OneOf(&[Ty::Str, Ty::List(&Ty::Str)]))),
        f("subnet", Ty::Str),
        f("advertisedSubnets", Ty::List(&Ty::Str)),
        f("listenSubnets", Ty::List(&Ty::Str)),
    ],
};
static O_V1ALPHA1_CORE_DNS: Obj =
    Obj { name: "v1alpha1.CoreDNS", fields: &[f("disabled", Ty::Bool), f("image", Ty::Str)] };
static O_V1ALPHA1_EXTERNAL_CLOUD_PROVIDER_CONFIG: Obj = Obj {
    name: "v1alpha1.ExternalCloudProviderConfig",
    fields: &[f("enabled", Ty::Bool), f("manifests", Ty::List(&Ty::Str))],
};
static O_V1ALPHA1_CLUSTER_INLINE_MANIFEST: Obj =
    Obj { name: "v1alpha1.ClusterInlineManifest", fields: &[f("name", Ty::Str), f("contents", Ty::Str)] };
static O_V1ALPHA1_ADMIN_KUBECONFIG_CONFIG: Obj =
    Obj { name: "v1alpha1.AdminKubeconfigConfig", fields: &[f("certLifetime", Ty::Str)] };
static O_V1ALPHA1_CLUSTER_CONFIG: Obj = Obj {
    name: "v1alpha1.ClusterConfig",
    fields: &[
        f("id", Ty::Str),
        f("secret", Ty::Str),
        f("controlPlane", Ty::Obj(&O_V1ALPHA1_CONTROL_PLANE_CONFIG)),
        f("clusterName", Ty::Str),
        f("network", Ty::Obj(&O_V1ALPHA1_CLUSTER_NETWORK_CONFIG)),
        f("token", Ty::Str),
        f("aescbcEncryptionSecret", Ty::Str),
        f("secretboxEncryptionSecret", Ty::Str),
        f("ca", Ty::Obj(&O_V1ALPHA1_CLUSTER_CONFIG_CA)),
        f("acceptedCAs", Ty::List(&Ty::Obj(&O_X509_PEM_ENCODED_CERTIFICATE))),
        f("aggregatorCA", Ty::Obj(&O_V1ALPHA1_CLUSTER_CONFIG_AGGREGATOR_CA)),
        f("serviceAccount", Ty::Obj(&O_V1ALPHA1_CLUSTER_CONFIG_SERVICE_ACCOUNT)),
        f("apiServer", Ty::Obj(&O_V1ALPHA1_API_SERVER_CONFIG)),
        f("controllerManager", Ty::Obj(&O_V1ALPHA1_CONTROLLER_MANAGER_CONFIG)),
        f("proxy", Ty::Obj(&O_V1ALPHA1_PROXY_CONFIG)),
        f("scheduler", Ty::Obj(&O_V1ALPHA1_SCHEDULER_CONFIG)),
        f("discovery", Ty::Obj(&O_V1ALPHA1_CLUSTER_DISCOVERY_CONFIG)),
        f("etcd", Ty::Obj(&O_V1ALPHA1_ETCD_CONFIG)),
        f("coreDNS", Ty::Obj(&O_V1ALPHA1_CORE_DNS)),
        f("externalCloudProvider", Ty::Obj(&O_V1ALPHA1_EXTERNAL_CLOUD_PROVIDER_CONFIG)),
        f("extraManifests", Ty::List(&Ty::Str)),
        f("extraManifestHeaders", Ty::Map(&Ty::Str)),
        f("inlineManifests", Ty::List(&Ty::Obj(&O_V1ALPHA1_CLUSTER_INLINE_MANIFEST))),
        f("adminKubeconfig", Ty::Obj(&O_V1ALPHA1_ADMIN_KUBECONFIG_CONFIG)),
        f("allowSchedulingOnMasters", Ty::Bool),
        f("allowSchedulingOnControlPlanes", Ty::Bool),
    ],
};
static O_V1ALPHA1_CONFIG: Obj = Obj {
    name: "v1alpha1.Config",
    fields: &[
        f("version", Ty::Enum(&["v1alpha1"])),
        f("debug", Ty::Bool),
        f("persist", Ty::Bool),
        f("machine", Ty::Obj(&O_V1ALPHA1_MACHINE_CONFIG)),
        f("cluster", Ty::Obj(&O_V1ALPHA1_CLUSTER_CONFIG)),
    ],
};
static O_SECURITY_IMAGE_KEYLESS_VERIFIER_V1_ALPHA1: Obj = Obj {
    name: "security.ImageKeylessVerifierV1Alpha1",
    fields: &[f("issuer", Ty::Str), f("subject", Ty::Str), f("subjectRegex", Ty::Str)],
};
static O_SECURITY_IMAGE_PUBLIC_KEY_VERIFIER_V1_ALPHA1: Obj =
    Obj { name: "security.ImagePublicKeyVerifierV1Alpha1", fields: &[f("certificate", Ty::Str)] };
static O_SECURITY_IMAGE_VERIFICATION_RULE_V1_ALPHA1: Obj = Obj {
    name: "security.ImageVerificationRuleV1Alpha1",
    fields: &[
        f("image", Ty::Str),
        f("skip", Ty::Bool),
        f("deny", Ty::Bool),
        f("keyless", Ty::Obj(&O_SECURITY_IMAGE_KEYLESS_VERIFIER_V1_ALPHA1)),
        f("publicKey", Ty::Obj(&O_SECURITY_IMAGE_PUBLIC_KEY_VERIFIER_V1_ALPHA1)),
    ],
};
static O_SECURITY_IMAGE_VERIFICATION_CONFIG_V1_ALPHA1: Obj = Obj {
    name: "security.ImageVerificationConfigV1Alpha1",
    fields: &[f("rules", Ty::List(&Ty::Obj(&O_SECURITY_IMAGE_VERIFICATION_RULE_V1_ALPHA1)))],
};
