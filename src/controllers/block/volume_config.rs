//! `VolumeConfigController`: the volumes a node wants, as Talos's controller and its
//! transformers (`volumeconfig/{system,user}_volumes.go`) make them from the machine
//! configuration, each a `VolumeConfig` labelled with where it came from, and for each one to
//! be mounted a `VolumeMountRequest` of the same id.
//!
//! Always: META (located only: the installer or the imager made it; 1 MiB, no filesystem) and
//! STATE (100 MiB, xfs, at `/system/state`, 0700, nosuid nodev noexec). Without a
//! configuration STATE is only located, opened with the encryption META keeps for it (tag 9)
//! if any: the configuration is on it. A node whose disk has no STATE yet makes it once a
//! configuration is in force, encrypted if that configuration says so. Once a configuration is in force:
//! EPHEMERAL (at least 2 GiB, grown into the rest of the system disk unless its
//! `VolumeConfig` document says otherwise, xfs, at `/var`), the `/var/mnt` directory under it,
//! and one volume per volume document, in the user wave (0) so EPHEMERAL is provisioned
//! first: `u-<name>` (a partition labelled so, a whole disk, or a directory), `r-<name>` (a
//! partition left unformatted and unmounted), `e-<name>` (found by its selector, never made or
//! formatted), `x-<name>` (a virtiofs share) and `s-<name>` (a swap partition, enabled). Each
//! user, existing and external volume is mounted at `/var/mnt/<name>`: under the `/var/mnt`
//! mount, which is under EPHEMERAL's, so it waits for both.
//!
//! Encryption written in a document (or in v1alpha1's `machine.systemDiskEncryption`) is
//! carried into the `VolumeConfig` as Talos carries it. A configuration whose volume documents do not read (one stored
//! before a rule existed) changes nothing: the volumes already wanted stay. Pure: it writes
//! resources and touches nothing.

use std::collections::BTreeMap;

use crate::config::block::{
    BlockView, Encryption, EncryptionProvider as ConfigProvider, FilesystemType as ConfigFilesystem, KeyKind,
    MountOptions, Provisioning, Size, SystemVolume, USER_VOLUME_MOUNT_POINT, UserDisk, UserVolumeType,
};
use crate::cosi::{Context, Controller, Input, Output, Pointer, ReconcileError};
use crate::resources::block::{
    Disk, DiskSelector, EXISTING_VOLUME_LABEL, EXTERNAL_VOLUME_LABEL, EncryptionKey, EncryptionKeyType,
    EncryptionProvider, EncryptionSpec, FilesystemSpec, FilesystemType, LocatorSpec, MountSpec, NAMESPACE,
    PartitionSpec, ProvisioningSpec, RAW_VOLUME_LABEL, SWAP_VOLUME_LABEL, SYSTEM_VOLUME_LABEL,
    USER_DISK_CONFIG_STATUS_ID, USER_DISK_LABEL, USER_VOLUME_LABEL, UserDiskConfigStatus, VolumeConfig,
    VolumeMountRequest, VolumeType, WAVE_LEGACY_USER_DISKS, WAVE_SYSTEM_DISK, WAVE_USER_VOLUMES,
};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::runtime::{self as rt, MetaKey};

/// The META tag that keeps STATE's encryption (Talos's `StateEncryptionConfig`).
pub const STATE_ENCRYPTION_TAG: u8 = crate::block::meta::tag::STATE_ENCRYPTION_CONFIG;

pub const STATE: &str = "STATE";
pub const EPHEMERAL: &str = "EPHEMERAL";
pub const META: &str = super::system_disk::META_VOLUME;
/// The id of the `/var/mnt` directory volume, the parent of every user mount.
pub const USER_VOLUME_MOUNT_ID: &str = USER_VOLUME_MOUNT_POINT;
/// Talos's "Linux filesystem data" partition type.
pub const LINUX_DATA: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
/// Talos's "Linux swap" partition type.
pub const LINUX_SWAP: &str = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F";
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Talos's `MinUserVolumeSize`: a user, raw or swap volume without a minimum gets this one.
pub const MIN_USER_VOLUME_SIZE: u64 = 100 * MIB;
/// EPHEMERAL's minimum unless its document says (Talos's `EphemeralMinSize`).
pub const EPHEMERAL_MIN_SIZE: u64 = 2 * GIB;
/// STATE's size (Talos's `StateSize`).
pub const STATE_SIZE: u64 = 100 * MIB;
/// Who the requests written here are from.
pub const REQUESTER: &str = "VolumeConfigController";

/// One volume to publish: its `VolumeConfig`, the label saying what made it, and the request
/// to mount it, if it is to be mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeResource {
    pub id: String,
    pub label: &'static str,
    pub config: VolumeConfig,
    pub mount: Option<VolumeMountRequest>,
}

/// Talos's locator for a volume it made: its partition label.
fn label_match(label: &str) -> LocatorSpec {
    LocatorSpec { expression: format!("volume.partition_label == '{label}'"), ..LocatorSpec::default() }
}

fn request(id: &str) -> VolumeMountRequest {
    VolumeMountRequest { volume_id: id.to_string(), requester: REQUESTER.to_string(), ..VolumeMountRequest::default() }
}

/// A user mount request: `secure` is nosuid, nodev and noexec together (Talos's
/// `HandleUserVolumeMountRequest`).
fn user_request(id: &str, mount: &MountOptions) -> VolumeMountRequest {
    VolumeMountRequest {
        read_only: mount.read_only,
        disable_access_time: mount.disable_access_time,
        secure: mount.secure,
        no_exec: mount.secure,
        ..request(id)
    }
}

/// Where a volume document's volume is mounted: `<name>` under `/var/mnt`.
fn user_mount(name: &str) -> MountSpec {
    MountSpec {
        target_path: name.to_string(),
        parent_id: USER_VOLUME_MOUNT_ID.to_string(),
        file_mode: 0o755,
        ..MountSpec::default()
    }
}

/// A document's `provisioning` as a partition spec: the minimum (or `default_min`), the
/// maximum in bytes or percent, counted back from the end when negative, and `grow`.
fn partition_spec(
    p: &Provisioning,
    default_min: u64,
    default_grow: bool,
    label: &str,
    type_uuid: &str,
) -> PartitionSpec {
    let (max_size, relative_max_size) = match p.max_size {
        None => (0, 0),
        Some(Size::Bytes(b)) => (b.bytes, 0),
        Some(Size::Percent { percent, .. }) => (0, percent),
    };
    PartitionSpec {
        min_size: p.min_size.map(|m| m.bytes).filter(|m| *m != 0).unwrap_or(default_min),
        max_size,
        relative_max_size,
        negative_max_size: p.max_size.is_some_and(|m| m.is_negative()),
        grow: p.grow.unwrap_or(default_grow),
        label: label.to_string(),
        type_uuid: type_uuid.to_string(),
    }
}

/// A volume document's own partition (user, raw, swap): labelled and located by its id, at
/// the user volumes' wave, on a disk its selector picks (none when it has no selector).
fn document_partition(
    id: &str,
    provisioning: &Provisioning,
    encryption: Option<&Encryption>,
    type_uuid: &str,
    filesystem_spec: FilesystemSpec,
) -> VolumeConfig {
    VolumeConfig {
        kind: VolumeType::Partition,
        provisioning: ProvisioningSpec {
            wave: WAVE_USER_VOLUMES,
            disk_selector: selector(provisioning, "false"),
            partition_spec: partition_spec(provisioning, MIN_USER_VOLUME_SIZE, false, id, type_uuid),
            filesystem_spec,
        },
        encryption: encryption_spec(encryption),
        locator: label_match(id),
        ..VolumeConfig::default()
    }
}

/// A document's disk selector, or Talos's `noMatch` when it has none.
fn selector(p: &Provisioning, default: &str) -> DiskSelector {
    let expression = p.disk_selector.as_ref().map_or(default, |e| e.as_str()).to_string();
    DiskSelector { expression, ..DiskSelector::default() }
}

/// Talos's `ConvertEncryptionConfiguration`.
pub fn encryption_spec(e: Option<&Encryption>) -> EncryptionSpec {
    let Some(e) = e else { return EncryptionSpec::default() };
    let keys = e
        .keys
        .iter()
        .map(|k| {
            let key = EncryptionKey { slot: k.slot, lock_to_state: k.lock_to_state, ..EncryptionKey::default() };
            match &k.kind {
                KeyKind::Static { passphrase } => EncryptionKey {
                    kind: EncryptionKeyType::Static,
                    static_passphrase: passphrase.expose().to_string(),
                    ..key
                },
                KeyKind::NodeId => EncryptionKey { kind: EncryptionKeyType::NodeId, ..key },
                KeyKind::Recovery { passphrase } => EncryptionKey {
                    kind: EncryptionKeyType::Recovery,
                    static_passphrase: passphrase.as_ref().map(|p| p.expose().to_string()).unwrap_or_default(),
                    ..key
                },
                KeyKind::Kms { endpoint } => {
                    EncryptionKey { kind: EncryptionKeyType::Kms, kms_endpoint: endpoint.expose().to_string(), ..key }
                }
                KeyKind::Tpm(tpm) => EncryptionKey {
                    kind: EncryptionKeyType::Tpm,
                    tpm_check_secureboot_status_on_enroll: tpm.check_secureboot_status_on_enroll,
                    tpm_pcrs: tpm.pcrs.clone(),
                    tpm_pub_key_pcrs: tpm.pub_key_pcrs(),
                    ..key
                },
            }
        })
        .collect();
    EncryptionSpec {
        provider: match e.provider {
            ConfigProvider::Luks2 => EncryptionProvider::Luks2,
        },
        keys,
        cipher: e.cipher.clone().unwrap_or_default(),
        key_size: e.key_size.unwrap_or(0),
        block_size: e.block_size.unwrap_or(0),
        perf_options: e.options.clone(),
        allow_discards: e.allow_discards,
    }
}

fn filesystem(kind: ConfigFilesystem) -> FilesystemType {
    match kind {
        ConfigFilesystem::Xfs => FilesystemType::Xfs,
        ConfigFilesystem::Ext4 => FilesystemType::Ext4,
    }
}

/// Where STATE's encryption comes from: the configuration in force (`view`, the parsed one
/// the config controller handed on) when it says, as Talos's `manageStateConfigPresent`;
/// else what META keeps (`state_meta`), as Talos's `manageStateNoConfig` for the boots that
/// must open STATE before the configuration on it can be read. A configuration applied in
/// this boot is taken as it was parsed, never from the JSON written to META for the next
/// boot (that JSON drops a recovery key's passphrase). Unlike Talos, a configuration that
/// says nothing of STATE's encryption leaves META's: STATE is not decrypted by a
/// configuration that stops saying how it is encrypted.
pub fn state_encryption<'a>(view: Option<&'a BlockView>, state_meta: Option<&'a Encryption>) -> Option<&'a Encryption> {
    view.and_then(|v| v.volume(SystemVolume::State)).and_then(|d| d.encryption.as_ref()).or(state_meta)
}

/// The volumes wanted: the system ones, and with a configuration in force (`view`) the ones
/// its documents ask for. `state_meta`: STATE's encryption as META keeps it, for the boots
/// that must open STATE before the configuration on it is read (the configuration's, when one
/// is in force and says, comes first, as in Talos).
pub fn volume_resources(view: Option<&BlockView>, state_meta: Option<&Encryption>) -> Vec<VolumeResource> {
    let system = |id: &str, config: VolumeConfig, mount: Option<VolumeMountRequest>| VolumeResource {
        id: id.to_string(),
        label: SYSTEM_VOLUME_LABEL,
        config,
        mount,
    };
    let mut out = vec![
        system(
            META,
            VolumeConfig {
                kind: VolumeType::Partition,
                locator: LocatorSpec {
                    expression: format!(
                        "volume.partition_label == '{META}' && volume.name in ['', 'talosmeta'] && volume.size == 1048576u"
                    ),
                    ..LocatorSpec::default()
                },
                ..VolumeConfig::default()
            },
            None,
        ),
        system(
            STATE,
            VolumeConfig {
                kind: VolumeType::Partition,
                // Made only once a configuration says how (it may encrypt STATE); until then
                // only found, as Talos does.
                provisioning: if view.is_some() {
                    ProvisioningSpec {
                        wave: WAVE_SYSTEM_DISK,
                        disk_selector: DiskSelector { expression: "system_disk".into(), ..DiskSelector::default() },
                        partition_spec: PartitionSpec {
                            min_size: STATE_SIZE,
                            max_size: STATE_SIZE,
                            label: STATE.into(),
                            type_uuid: LINUX_DATA.into(),
                            ..PartitionSpec::default()
                        },
                        filesystem_spec: FilesystemSpec { kind: FilesystemType::Xfs, label: STATE.into() },
                    }
                } else {
                    ProvisioningSpec::default()
                },
                encryption: encryption_spec(state_encryption(view, state_meta)),
                locator: label_match(STATE),
                mount: MountSpec {
                    target_path: "/system/state".into(),
                    file_mode: 0o700,
                    secure: true,
                    no_exec: true,
                    ..MountSpec::default()
                },
                ..VolumeConfig::default()
            },
            Some(VolumeMountRequest { secure: true, no_exec: true, ..request(STATE) }),
        ),
    ];
    let Some(view) = view else { return out };

    let ephemeral_doc = view.volume(SystemVolume::Ephemeral);
    let none = Provisioning::default();
    let provisioning = ephemeral_doc.map_or(&none, |d| &d.provisioning);
    let mount = ephemeral_doc.map(|d| d.mount).unwrap_or_default();
    out.push(system(
        EPHEMERAL,
        VolumeConfig {
            kind: VolumeType::Partition,
            provisioning: ProvisioningSpec {
                wave: WAVE_SYSTEM_DISK,
                disk_selector: selector(provisioning, "system_disk"),
                partition_spec: partition_spec(provisioning, EPHEMERAL_MIN_SIZE, true, EPHEMERAL, LINUX_DATA),
                filesystem_spec: FilesystemSpec { kind: FilesystemType::Xfs, label: EPHEMERAL.into() },
            },
            encryption: encryption_spec(ephemeral_doc.and_then(|d| d.encryption.as_ref())),
            locator: label_match(EPHEMERAL),
            mount: MountSpec {
                target_path: "/var".into(),
                file_mode: 0o755,
                secure: mount.secure,
                ..MountSpec::default()
            },
            ..VolumeConfig::default()
        },
        Some(VolumeMountRequest {
            secure: mount.secure,
            no_exec: false,
            disable_access_time: mount.disable_access_time,
            ..request(EPHEMERAL)
        }),
    ));
    out.push(system(
        USER_VOLUME_MOUNT_ID,
        VolumeConfig {
            kind: VolumeType::Directory,
            mount: MountSpec {
                target_path: "mnt".into(),
                parent_id: EPHEMERAL.into(),
                file_mode: 0o755,
                ..MountSpec::default()
            },
            ..VolumeConfig::default()
        },
        // Its request stands on its own (see `user_volume_mount_request`).
        None,
    ));

    for doc in &view.user_volumes {
        let id = doc.volume_id();
        let fs = FilesystemSpec { kind: filesystem(doc.filesystem.kind), ..FilesystemSpec::default() };
        let mount = MountSpec { project_quota_support: doc.filesystem.project_quota_support, ..user_mount(&doc.name) };
        let config = match doc.volume_type {
            UserVolumeType::Directory => VolumeConfig {
                kind: VolumeType::Directory,
                mount: MountSpec { bind_target: Some(doc.name.clone()), ..user_mount(&doc.name) },
                ..VolumeConfig::default()
            },
            UserVolumeType::Disk => VolumeConfig {
                kind: VolumeType::Disk,
                provisioning: ProvisioningSpec {
                    wave: WAVE_USER_VOLUMES,
                    disk_selector: selector(&doc.provisioning, "false"),
                    partition_spec: PartitionSpec {
                        type_uuid: LINUX_DATA.into(),
                        grow: true,
                        ..PartitionSpec::default()
                    },
                    filesystem_spec: fs,
                },
                encryption: encryption_spec(doc.encryption.as_ref()),
                locator: LocatorSpec {
                    disk_match: selector(&doc.provisioning, "false").expression,
                    ..LocatorSpec::default()
                },
                mount,
                ..VolumeConfig::default()
            },
            UserVolumeType::Partition => VolumeConfig {
                mount,
                ..document_partition(&id, &doc.provisioning, doc.encryption.as_ref(), LINUX_DATA, fs)
            },
        };
        let mount = user_request(&id, &doc.mount);
        out.push(VolumeResource { id, label: USER_VOLUME_LABEL, config, mount: Some(mount) });
    }

    for doc in &view.raw_volumes {
        let id = doc.volume_id();
        let config =
            document_partition(&id, &doc.provisioning, doc.encryption.as_ref(), LINUX_DATA, FilesystemSpec::default());
        out.push(VolumeResource { id, label: RAW_VOLUME_LABEL, config, mount: None });
    }

    for doc in &view.existing_volumes {
        let id = doc.volume_id();
        let config = VolumeConfig {
            kind: VolumeType::Partition,
            locator: LocatorSpec { expression: doc.volume_selector.as_str().to_string(), ..LocatorSpec::default() },
            mount: user_mount(&doc.name),
            ..VolumeConfig::default()
        };
        let mount = user_request(&id, &doc.mount);
        out.push(VolumeResource { id, label: EXISTING_VOLUME_LABEL, config, mount: Some(mount) });
    }

    for doc in &view.external_volumes {
        let id = doc.volume_id();
        let config = VolumeConfig {
            kind: VolumeType::External,
            provisioning: ProvisioningSpec {
                wave: WAVE_USER_VOLUMES,
                disk_selector: DiskSelector { external: doc.virtiofs_tag.clone(), ..DiskSelector::default() },
                filesystem_spec: FilesystemSpec { kind: FilesystemType::Virtiofs, ..FilesystemSpec::default() },
                ..ProvisioningSpec::default()
            },
            mount: user_mount(&doc.name),
            ..VolumeConfig::default()
        };
        let mount = user_request(&id, &doc.mount);
        out.push(VolumeResource { id, label: EXTERNAL_VOLUME_LABEL, config, mount: Some(mount) });
    }

    for doc in &view.swap_volumes {
        let id = doc.volume_id();
        let swap = FilesystemSpec { kind: FilesystemType::Swap, ..FilesystemSpec::default() };
        let config = document_partition(&id, &doc.provisioning, doc.encryption.as_ref(), LINUX_SWAP, swap);
        let mount = request(&id);
        out.push(VolumeResource { id, label: SWAP_VOLUME_LABEL, config, mount: Some(mount) });
    }
    out
}

/// The volumes of v1alpha1's `machine.disks` (Talos's `UserDiskConfigController`): per
/// partition, id `<device>-<n>`, in the legacy wave (after every volume document's), on the
/// disk at `device` (`resolve` maps a `/dev/disk/by-*` name to the disk's path), sized as
/// written (the last one without a size takes the rest), xfs, found again by the partition's
/// index on that disk (no label, as Talos leaves it) and mounted at its mount point, as a path
/// under `/var/mnt`'s or EPHEMERAL's mount, so it is mounted after them and never hidden.
pub fn user_disk_resources(disks: &[UserDisk], resolve: impl Fn(&str) -> String) -> Vec<VolumeResource> {
    let mut out = Vec::new();
    for disk in disks {
        let dev = resolve(&disk.device);
        for (i, part) in disk.partitions.iter().enumerate() {
            let id = disk.volume_id(i + 1);
            let grow = part.size == 0;
            let config = VolumeConfig {
                kind: VolumeType::Partition,
                provisioning: ProvisioningSpec {
                    wave: WAVE_LEGACY_USER_DISKS,
                    disk_selector: DiskSelector {
                        expression: format!("disk.dev_path == '{dev}'"),
                        ..DiskSelector::default()
                    },
                    partition_spec: PartitionSpec {
                        min_size: if grow { MIN_USER_VOLUME_SIZE } else { part.size },
                        max_size: part.size,
                        grow,
                        type_uuid: LINUX_DATA.into(),
                        ..PartitionSpec::default()
                    },
                    filesystem_spec: FilesystemSpec { kind: FilesystemType::Xfs, ..FilesystemSpec::default() },
                },
                locator: LocatorSpec {
                    expression: format!("volume.parent_dev_path == '{dev}' && volume.partition_index == {}u", i + 1),
                    ..LocatorSpec::default()
                },
                mount: legacy_mount(&part.mountpoint),
                ..VolumeConfig::default()
            };
            out.push(VolumeResource { id: id.clone(), label: USER_DISK_LABEL, config, mount: Some(request(&id)) });
        }
    }
    out
}

/// Where a `machine.disks` partition is mounted (the config keeps them under `/var`): below
/// `/var/mnt` as a path under that volume's mount, else as a path under EPHEMERAL's.
fn legacy_mount(mountpoint: &str) -> MountSpec {
    let under =
        |parent: &str| mountpoint.strip_prefix(parent).and_then(|p| p.strip_prefix('/')).filter(|p| !p.is_empty());
    let (target_path, parent_id) = match under(USER_VOLUME_MOUNT_POINT) {
        Some(rest) => (rest, USER_VOLUME_MOUNT_ID),
        None => (under("/var").unwrap_or(mountpoint), EPHEMERAL),
    };
    MountSpec {
        target_path: target_path.to_string(),
        parent_id: parent_id.to_string(),
        file_mode: 0o755,
        ..MountSpec::default()
    }
}

/// The request to mount `/var/mnt`, which Talos keeps whether or not a configuration is in
/// force, so the parent of every user mount is never taken down between configurations.
pub fn user_volume_mount_request() -> VolumeMountRequest {
    request(USER_VOLUME_MOUNT_ID)
}

#[derive(Default)]
pub struct VolumeConfigController;

#[async_trait::async_trait]
impl Controller for VolumeConfigController {
    fn name(&self) -> String {
        "VolumeConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
            Input::weak::<MetaKey>(rt::NAMESPACE).with_id(MetaKey::id(STATE_ENCRYPTION_TAG)),
            // For `machine.disks` devices named by a /dev/disk/by-* link.
            Input::weak::<Disk>(NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![
            Output::exclusive::<VolumeConfig>(),
            Output::exclusive::<VolumeMountRequest>(),
            Output::exclusive::<UserDiskConfigStatus>(),
            Output::exclusive::<crate::resources::block::DiskWipeConfig>(),
        ]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mc = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?.filter(|mc| mc.is_running());
        let view = match mc {
            None => None,
            Some(mc) => match mc.spec().parsed().map_or(Ok(None), |p| {
                let machine =
                    p.config.v1alpha1().is_some_and(|d| d.value().get("machine").is_some_and(|m| !m.is_null()));
                if machine { p.block.clone().map(Some) } else { Ok(None) }
            }) {
                Ok(view) => view,
                Err(e) => {
                    // The volumes wanted so far stay: nothing is torn down over a config that
                    // does not read.
                    ctx.fail_key(
                        Pointer::of::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID),
                        format!("machine configuration volumes ignored: {e}"),
                    );
                    return Ok(());
                }
            },
        };
        let meta_key = MetaKey::id(STATE_ENCRYPTION_TAG);
        let state_meta = match ctx.get::<MetaKey>(rt::NAMESPACE, &meta_key)? {
            None => None,
            Some(k) => match Encryption::from_meta_json(&k.spec().value) {
                Ok(e) => Some(e),
                Err(e) => {
                    // STATE is then opened by what the configuration says, if it can be read.
                    ctx.fail_key(
                        Pointer::of::<MetaKey>(rt::NAMESPACE, &meta_key),
                        format!("STATE's encryption in META does not read: {e}"),
                    );
                    None
                }
            },
        };
        ctx.start_tracking_outputs();
        let system = BTreeMap::from([(SYSTEM_VOLUME_LABEL.to_string(), String::new())]);
        ctx.apply_labeled(NAMESPACE, USER_VOLUME_MOUNT_ID, user_volume_mount_request(), system)?;
        let disks: Vec<Disk> = ctx.list::<Disk>(NAMESPACE)?.into_iter().map(|d| d.spec().clone()).collect();
        let resolve = |device: &str| {
            disks
                .iter()
                .find(|d| d.symlinks.iter().any(|l| l == device))
                .map_or_else(|| device.to_string(), |d| d.dev_path.clone())
        };
        let user_disks = view.as_ref().map(|v| user_disk_resources(&v.user_disks, resolve)).unwrap_or_default();
        if view.is_some() {
            ctx.apply(NAMESPACE, USER_DISK_CONFIG_STATUS_ID, UserDiskConfigStatus { ready: true, torn_down: false })?;
        }
        for wipe in view.iter().flat_map(|v| &v.disk_wipes) {
            let spec =
                crate::resources::block::DiskWipeConfig { disk_selector: wipe.disk_selector.as_str().to_string() };
            ctx.apply(NAMESPACE, &wipe.name, spec)?;
        }
        for r in volume_resources(view.as_ref(), state_meta.as_ref()).into_iter().chain(user_disks) {
            let labels = BTreeMap::from([(r.label.to_string(), String::new())]);
            ctx.apply_labeled(NAMESPACE, &r.id, r.config, labels.clone())?;
            if let Some(m) = r.mount {
                ctx.apply_labeled(NAMESPACE, &r.id, m, labels)?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::block::EncryptionKeyType as K;

    fn view(docs: &[(&str, &str)]) -> BlockView {
        let text: Vec<String> =
            docs.iter().map(|(kind, body)| format!("apiVersion: v1alpha1\nkind: {kind}\n{body}")).collect();
        crate::config::load(&text.join("---\n")).unwrap().config.block().unwrap()
    }

    fn find<'a>(all: &'a [VolumeResource], id: &str) -> &'a VolumeResource {
        all.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no {id} in {:?}", all.iter().map(|r| &r.id).collect::<Vec<_>>()))
    }

    #[test]
    fn machine_disks_become_legacy_wave_partitions_found_by_index() {
        let text = "version: v1alpha1\nmachine:\n  type: worker\n  disks:\n    - device: /dev/disk/by-id/virtio-extra\n      partitions:\n        - size: 200MiB\n          mountpoint: /var/mnt/a\n        - size: 1GiB\n          mountpoint: /var/lib/b\n        - mountpoint: /var/srv/c\n";
        let v = crate::config::load(text).unwrap().config.block().unwrap();
        let resolve =
            |d: &str| if d == "/dev/disk/by-id/virtio-extra" { "/dev/vdc".to_string() } else { d.to_string() };
        let all = user_disk_resources(&v.user_disks, resolve);
        let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            ["/dev/disk/by-id/virtio-extra-1", "/dev/disk/by-id/virtio-extra-2", "/dev/disk/by-id/virtio-extra-3"]
        );
        // (min, max, grow, mount target, mount parent) per partition.
        let want = [
            (200 * MIB, 200 * MIB, false, "a", USER_VOLUME_MOUNT_ID),
            (GIB, GIB, false, "lib/b", EPHEMERAL),
            (MIN_USER_VOLUME_SIZE, 0, true, "srv/c", EPHEMERAL),
        ];
        for (i, (r, (min, max, grow, target, parent))) in all.iter().zip(want).enumerate() {
            let c = &r.config;
            let p = &c.provisioning;
            assert_eq!(r.label, USER_DISK_LABEL);
            assert_eq!((c.kind, p.wave), (VolumeType::Partition, WAVE_LEGACY_USER_DISKS));
            assert_eq!(p.disk_selector.expression, "disk.dev_path == '/dev/vdc'");
            assert_eq!(
                c.locator.expression,
                format!("volume.parent_dev_path == '/dev/vdc' && volume.partition_index == {}u", i + 1)
            );
            assert_eq!((p.partition_spec.min_size, p.partition_spec.max_size, p.partition_spec.grow), (min, max, grow));
            assert_eq!((p.partition_spec.label.as_str(), p.partition_spec.type_uuid.as_str()), ("", LINUX_DATA));
            assert_eq!(p.filesystem_spec.kind, FilesystemType::Xfs);
            assert_eq!((c.mount.target_path.as_str(), c.mount.parent_id.as_str()), (target, parent));
            assert_eq!(r.mount.as_ref().map(|m| m.volume_id.as_str()), Some(r.id.as_str()));
            for (kind, expression) in [
                (crate::config::block::CelEnv::DiskLocator, &p.disk_selector.expression),
                (crate::config::block::CelEnv::VolumeLocator, &c.locator.expression),
            ] {
                crate::block::selector::Expression::compile(expression, kind.selector_env())
                    .unwrap_or_else(|e| panic!("{expression}: {e}"));
            }
        }
    }

    #[test]
    fn without_a_configuration_only_meta_and_state() {
        let all = volume_resources(None, None);
        let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["META", "STATE"]);
        let meta = find(&all, META);
        assert!(!meta.config.provisioning.is_requested(), "META is only located");
        assert_eq!(meta.mount, None);
        let state = find(&all, STATE);
        assert_eq!(state.config.locator.expression, "volume.partition_label == 'STATE'");
        assert!(!state.config.provisioning.is_requested(), "STATE is only located until a configuration says how");
        assert_eq!(state.config.encryption, EncryptionSpec::default());
        assert_eq!((state.config.mount.target_path.as_str(), state.config.mount.file_mode), ("/system/state", 0o700));
        let m = state.mount.as_ref().unwrap();
        assert_eq!((m.volume_id.as_str(), m.secure, m.no_exec), ("STATE", true, true));
        assert_eq!(user_volume_mount_request().volume_id, "/var/mnt");

        // With a configuration STATE is made (100 MiB, xfs, on the system disk, first wave).
        let all = volume_resources(Some(&BlockView::default()), None);
        let p = &find(&all, STATE).config.provisioning;
        assert_eq!(p.wave, WAVE_SYSTEM_DISK);
        assert_eq!(p.disk_selector.expression, "system_disk");
        assert_eq!(
            (p.partition_spec.min_size, p.partition_spec.max_size, p.partition_spec.grow),
            (STATE_SIZE, STATE_SIZE, false)
        );
        assert_eq!(p.filesystem_spec.kind, FilesystemType::Xfs);
    }

    /// The decision alone: the parsed configuration's when it says, META's otherwise; a
    /// configuration applied in this boot keeps what only it has (a recovery passphrase),
    /// whatever META was given for the next boot.
    #[test]
    fn state_encryption_is_the_parsed_configurations_else_metas() {
        let state_doc = |keys: &str| {
            view(&[("VolumeConfig", &format!("name: STATE\nencryption:\n  provider: luks2\n  keys:\n{keys}"))])
        };
        let configured = state_doc("    - slot: 0\n      nodeID: {}\n");
        let recovery = state_doc("    - slot: 0\n      recovery:\n        passphrase: hidden\n");
        let legacy = "version: v1alpha1\nmachine:\n  type: worker\n  systemDiskEncryption:\n    state:\n      provider: luks2\n      keys:\n        - slot: 0\n          static:\n            passphrase: s\n";
        let legacy = crate::config::load(legacy).unwrap().config.block().unwrap();
        let silent = BlockView::default();
        let meta = Encryption::from_meta_json(r#"{"keys":[{"slot":0,"tpm":{}}],"provider":"luks2"}"#).unwrap();
        // What this boot gave META for the recovery configuration: the slot, not the passphrase.
        let recovery_meta = {
            let e = recovery.volume(SystemVolume::State).and_then(|d| d.encryption.as_ref()).unwrap();
            Encryption::from_meta_json(&e.to_meta_json()).unwrap()
        };
        type Case<'a> = (&'a str, Option<&'a BlockView>, Option<&'a Encryption>, Vec<(K, &'a str)>);
        let cases: [Case; 9] = [
            ("no configuration, nothing in META: plain", None, None, vec![]),
            ("no configuration: META's", None, Some(&meta), vec![(K::Tpm, "")]),
            ("the configuration's, nothing in META", Some(&configured), None, vec![(K::NodeId, "")]),
            ("both: the configuration's", Some(&configured), Some(&meta), vec![(K::NodeId, "")]),
            ("v1alpha1's systemDiskEncryption says too", Some(&legacy), Some(&meta), vec![(K::Static, "s")]),
            ("a configuration silent on it leaves META's", Some(&silent), Some(&meta), vec![(K::Tpm, "")]),
            ("silent, nothing in META: plain", Some(&silent), None, vec![]),
            (
                "applied this boot: the passphrase parsed, not META's copy",
                Some(&recovery),
                Some(&recovery_meta),
                vec![(K::Recovery, "hidden")],
            ),
            ("the next boot: META's copy, opened by unlock", None, Some(&recovery_meta), vec![(K::Recovery, "")]),
        ];
        for (name, v, m, want) in cases {
            let spec = encryption_spec(state_encryption(v, m));
            let got: Vec<(K, &str)> = spec.keys.iter().map(|k| (k.kind, k.static_passphrase.as_str())).collect();
            assert_eq!(got, want, "{name}");
            let all = volume_resources(v, m);
            assert_eq!(find(&all, STATE).config.encryption, spec, "{name}: the STATE volume carries it");
        }
    }

    /// STATE's encryption: the configuration's when it says (a `VolumeConfig` document or
    /// v1alpha1's `machine.systemDiskEncryption.state`), else what META keeps; the JSON kept
    /// in META reads back as what was written.
    #[test]
    fn state_encryption_comes_from_the_configuration_or_from_meta() {
        let legacy = "version: v1alpha1\nmachine:\n  type: worker\n  systemDiskEncryption:\n    state:\n      provider: luks2\n      keys:\n        - slot: 0\n          tpm: {}\n        - slot: 1\n          static:\n            passphrase: \"re\\\"covery\"\n";
        let from_config = crate::config::load(legacy).unwrap().config.block().unwrap();
        let enc = from_config.volume(SystemVolume::State).and_then(|v| v.encryption.clone()).unwrap();
        let json = enc.to_meta_json();
        // A static passphrase never goes to META: its slot is kept as a recovery slot, opened
        // by `talosctl unlock` when the node's own keys do not open STATE.
        assert_eq!(json, r#"{"keys":[{"slot":0,"tpm":{}},{"recovery":{},"slot":1}],"provider":"luks2"}"#);
        assert!(!json.contains("passphrase"), "{json}");
        let back = Encryption::from_meta_json(&json).unwrap();
        assert_eq!(
            back.keys[1],
            crate::config::block::EncryptionKey {
                slot: 1,
                kind: KeyKind::Recovery { passphrase: None },
                lock_to_state: false
            }
        );

        // No configuration: META's, and STATE is only located.
        let all = volume_resources(None, Some(&back));
        let state = &find(&all, STATE).config;
        assert!(!state.provisioning.is_requested());
        let kinds: Vec<(u32, K)> = state.encryption.keys.iter().map(|k| (k.slot, k.kind)).collect();
        assert_eq!(kinds, [(0, K::Tpm), (1, K::Recovery)]);
        assert_eq!(state.encryption.keys[1].static_passphrase, "");
        // With a configuration in force, the configuration's static key.
        let all = volume_resources(Some(&from_config), Some(&back));
        let key = &find(&all, STATE).config.encryption.keys[1];
        assert_eq!((key.kind, key.static_passphrase.as_str()), (K::Static, "re\"covery"));
        // What Talos wrote in clear still opens STATE (it is rewritten without it once a
        // configuration is in force).
        let talos =
            Encryption::from_meta_json(r#"{"provider":"luks2","keys":[{"slot":0,"static":{"passphrase":"p"}}]}"#)
                .unwrap();
        let all = volume_resources(None, Some(&talos));
        let key = &find(&all, STATE).config.encryption.keys[0];
        assert_eq!((key.kind, key.static_passphrase.as_str()), (K::Static, "p"));

        // The configuration's comes first; one that does not say leaves META's.
        let other =
            view(&[("VolumeConfig", "name: STATE\nencryption:\n  provider: luks2\n  keys:\n    - nodeID: {}\n")]);
        let all = volume_resources(Some(&other), Some(&back));
        assert_eq!(find(&all, STATE).config.encryption.keys.iter().map(|k| k.kind).collect::<Vec<_>>(), [K::NodeId]);
        let all = volume_resources(Some(&BlockView::default()), Some(&back));
        assert_eq!(find(&all, STATE).config.encryption.keys.len(), 2);
        // A recovery key: its passphrase goes to the VolumeConfig, never to META, whose JSON
        // reads back as a recovery slot with none (kept, opened by `talosctl unlock`).
        let rec = view(&[(
            "VolumeConfig",
            "name: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      tpm: {}\n    - slot: 1\n      recovery:\n        passphrase: hidden\n",
        )]);
        let enc = rec.volume(SystemVolume::State).and_then(|v| v.encryption.clone()).unwrap();
        let json = enc.to_meta_json();
        assert_eq!(json, r#"{"keys":[{"slot":0,"tpm":{}},{"recovery":{},"slot":1}],"provider":"luks2"}"#);
        let all = volume_resources(Some(&rec), None);
        let key = &find(&all, STATE).config.encryption.keys[1];
        assert_eq!((key.kind, key.static_passphrase.as_str()), (K::Recovery, "hidden"));
        let from_meta = Encryption::from_meta_json(&json).unwrap();
        let all = volume_resources(None, Some(&from_meta));
        let key = &find(&all, STATE).config.encryption.keys[1];
        assert_eq!((key.slot, key.kind, key.static_passphrase.as_str()), (1, K::Recovery, ""));
        // Legacy EPHEMERAL encryption is EPHEMERAL's.
        let eph = "version: v1alpha1\nmachine:\n  type: worker\n  systemDiskEncryption:\n    ephemeral:\n      provider: luks2\n      keys:\n        - slot: 0\n          nodeID: {}\n";
        let v = crate::config::load(eph).unwrap().config.block().unwrap();
        let all = volume_resources(Some(&v), None);
        assert_eq!(
            find(&all, EPHEMERAL).config.encryption.keys.iter().map(|k| k.kind).collect::<Vec<_>>(),
            [K::NodeId]
        );

        // META that does not read is refused with what is wrong.
        let e = Encryption::from_meta_json(r#"{"provider":"luks2","keys":[{"slot":0,"nodeID":{}}],"bogus":1}"#)
            .unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        assert!(Encryption::from_meta_json("{\"provider\":\n\"luks2\"}").is_err());
    }

    /// The ids, labels, waves, partition labels and types, locators, mount paths and parents
    /// of every kind of volume, as Talos's transformers give them.
    #[test]
    fn every_volume_kind_becomes_what_talos_makes() {
        let sel = "provisioning:\n  diskSelector:\n    match: '!system_disk'\n";
        let v = view(&[
            (
                "UserVolumeConfig",
                &format!("name: data\n{sel}  minSize: 1GiB\n  maxSize: 10GiB\nfilesystem:\n  type: ext4\n"),
            ),
            ("UserVolumeConfig", "name: scratch\nvolumeType: directory\n"),
            ("UserVolumeConfig", &format!("name: whole\nvolumeType: disk\n{sel}")),
            ("RawVolumeConfig", &format!("name: raw\n{sel}  maxSize: 50%\n")),
            (
                "ExistingVolumeConfig",
                "name: old\ndiscovery:\n  volumeSelector:\n    match: volume.label == 'OLD'\nmount:\n  readOnly: true\n",
            ),
            ("ExternalVolumeConfig", "name: share\nfilesystemType: virtiofs\nmount:\n  virtiofs:\n    tag: host\n"),
            ("SwapVolumeConfig", &format!("name: swap\n{sel}  maxSize: -1GiB\n  grow: true\n")),
        ]);
        let all = volume_resources(Some(&v), None);
        type Row = (
            &'static str,
            &'static str,
            VolumeType,
            i64,
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            &'static str,
        );
        // id, label, type, wave, partition label, partition type, locator, mount target, parent
        let rows: [Row; 11] = [
            (
                "META",
                SYSTEM_VOLUME_LABEL,
                VolumeType::Partition,
                0,
                "",
                "",
                "volume.partition_label == 'META' && volume.name in ['', 'talosmeta'] && volume.size == 1048576u",
                "",
                "",
            ),
            (
                "STATE",
                SYSTEM_VOLUME_LABEL,
                VolumeType::Partition,
                -1,
                "STATE",
                LINUX_DATA,
                "volume.partition_label == 'STATE'",
                "/system/state",
                "",
            ),
            (
                "EPHEMERAL",
                SYSTEM_VOLUME_LABEL,
                VolumeType::Partition,
                -1,
                "EPHEMERAL",
                LINUX_DATA,
                "volume.partition_label == 'EPHEMERAL'",
                "/var",
                "",
            ),
            ("/var/mnt", SYSTEM_VOLUME_LABEL, VolumeType::Directory, 0, "", "", "", "mnt", "EPHEMERAL"),
            (
                "u-data",
                USER_VOLUME_LABEL,
                VolumeType::Partition,
                0,
                "u-data",
                LINUX_DATA,
                "volume.partition_label == 'u-data'",
                "data",
                "/var/mnt",
            ),
            ("u-scratch", USER_VOLUME_LABEL, VolumeType::Directory, 0, "", "", "", "scratch", "/var/mnt"),
            ("u-whole", USER_VOLUME_LABEL, VolumeType::Disk, 0, "", LINUX_DATA, "", "whole", "/var/mnt"),
            (
                "r-raw",
                RAW_VOLUME_LABEL,
                VolumeType::Partition,
                0,
                "r-raw",
                LINUX_DATA,
                "volume.partition_label == 'r-raw'",
                "",
                "",
            ),
            (
                "e-old",
                EXISTING_VOLUME_LABEL,
                VolumeType::Partition,
                0,
                "",
                "",
                "volume.label == 'OLD'",
                "old",
                "/var/mnt",
            ),
            ("x-share", EXTERNAL_VOLUME_LABEL, VolumeType::External, 0, "", "", "", "share", "/var/mnt"),
            (
                "s-swap",
                SWAP_VOLUME_LABEL,
                VolumeType::Partition,
                0,
                "s-swap",
                LINUX_SWAP,
                "volume.partition_label == 's-swap'",
                "",
                "",
            ),
        ];
        assert_eq!(all.len(), rows.len(), "{:?}", all.iter().map(|r| &r.id).collect::<Vec<_>>());
        for (id, label, kind, wave, part_label, part_type, locator, target, parent) in rows {
            let r = find(&all, id);
            let c = &r.config;
            assert_eq!(
                (r.label, c.kind, c.provisioning.wave, c.provisioning.partition_spec.label.as_str()),
                (label, kind, wave, part_label),
                "{id}"
            );
            assert_eq!(c.provisioning.partition_spec.type_uuid, part_type, "{id}");
            assert_eq!(c.locator.expression, locator, "{id}");
            assert_eq!((c.mount.target_path.as_str(), c.mount.parent_id.as_str()), (target, parent), "{id}");
            if !parent.is_empty() || id == EPHEMERAL {
                assert_eq!(c.mount.file_mode, 0o755, "{id}");
            }
            assert!(c.parent_id.is_empty(), "{id}: the mount has the parent, not the volume");
        }

        // Sizes and filesystems.
        let data = &find(&all, "u-data").config.provisioning;
        assert_eq!(
            (data.partition_spec.min_size, data.partition_spec.max_size, data.partition_spec.grow),
            (1 << 30, 10 << 30, false)
        );
        assert_eq!(data.disk_selector.expression, "!system_disk");
        assert_eq!(data.filesystem_spec, FilesystemSpec { kind: FilesystemType::Ext4, label: String::new() });
        let raw = &find(&all, "r-raw").config.provisioning;
        assert_eq!((raw.partition_spec.min_size, raw.partition_spec.relative_max_size), (MIN_USER_VOLUME_SIZE, 50));
        assert_eq!(raw.filesystem_spec.kind, FilesystemType::None);
        let swap = &find(&all, "s-swap").config.provisioning;
        assert_eq!(
            (swap.partition_spec.max_size, swap.partition_spec.negative_max_size, swap.partition_spec.grow),
            (1 << 30, true, true)
        );
        assert_eq!(swap.filesystem_spec.kind, FilesystemType::Swap);
        let whole = find(&all, "u-whole");
        assert_eq!(whole.config.locator.disk_match, "!system_disk");
        assert!(whole.config.provisioning.partition_spec.grow);
        let dir = find(&all, "u-scratch");
        assert_eq!(dir.config.mount.bind_target.as_deref(), Some("scratch"));
        assert!(!dir.config.provisioning.is_requested());
        let existing = find(&all, "e-old");
        assert!(!existing.config.provisioning.is_requested(), "an existing volume is never provisioned");
        assert_eq!(existing.config.provisioning.filesystem_spec.kind, FilesystemType::None, "nor formatted");
        let share = &find(&all, "x-share").config.provisioning;
        assert_eq!(
            (share.disk_selector.external.as_str(), share.filesystem_spec.kind),
            ("host", FilesystemType::Virtiofs)
        );

        // Who is mounted, and how (read-only, secure, noexec): `secure` is nosuid, nodev and
        // noexec for the documents.
        type Flags = Option<(bool, bool, bool)>;
        let requests: Vec<(&str, Flags)> =
            all.iter().map(|r| (r.id.as_str(), r.mount.as_ref().map(|m| (m.read_only, m.secure, m.no_exec)))).collect();
        assert_eq!(
            requests,
            [
                ("META", None),
                ("STATE", Some((false, true, true))),
                ("EPHEMERAL", Some((false, true, false))),
                ("/var/mnt", None),
                ("u-data", Some((false, true, true))),
                ("u-scratch", Some((false, true, true))),
                ("u-whole", Some((false, true, true))),
                ("r-raw", None),
                ("e-old", Some((true, true, true))),
                ("x-share", Some((false, true, true))),
                ("s-swap", Some((false, false, false))),
            ]
        );
        for r in &all {
            if let Some(m) = &r.mount {
                assert_eq!((m.volume_id.as_str(), m.requester.as_str()), (r.id.as_str(), REQUESTER));
            }
        }
    }

    #[test]
    fn a_volume_config_overrides_ephemeral_and_carries_encryption() {
        let v = view(&[
            (
                "VolumeConfig",
                "name: EPHEMERAL\nprovisioning:\n  diskSelector:\n    match: disk.size > 100u * GiB\n  minSize: 5GiB\n  maxSize: 40GiB\n  grow: false\nmount:\n  secure: false\n  disableAccessTime: true\nencryption:\n  provider: luks2\n  cipher: aes-xts-plain64\n  keys:\n    - slot: 0\n      nodeID: {}\n      lockToState: true\n    - slot: 1\n      static:\n        passphrase: topsecret\n    - slot: 2\n      tpm:\n        checkSecurebootStatusOnEnroll: true\n",
            ),
            (
                "VolumeConfig",
                "name: STATE\nencryption:\n  provider: luks2\n  keys:\n    - kms:\n        endpoint: https://kms:4443\n",
            ),
        ]);
        let all = volume_resources(Some(&v), None);
        let eph = find(&all, EPHEMERAL);
        let p = &eph.config.provisioning;
        assert_eq!(p.disk_selector.expression, "disk.size > 100u * GiB");
        assert_eq!(
            (p.partition_spec.min_size, p.partition_spec.max_size, p.partition_spec.grow),
            (5 << 30, 40 << 30, false)
        );
        assert!(!eph.config.mount.secure);
        let m = eph.mount.as_ref().unwrap();
        assert_eq!((m.secure, m.no_exec, m.disable_access_time), (false, false, true));
        let e = &eph.config.encryption;
        assert_eq!((e.provider, e.cipher.as_str()), (EncryptionProvider::Luks2, "aes-xts-plain64"));
        let keys: Vec<(u32, K, bool)> = e.keys.iter().map(|k| (k.slot, k.kind, k.lock_to_state)).collect();
        assert_eq!(keys, [(0, K::NodeId, true), (1, K::Static, false), (2, K::Tpm, false)]);
        assert_eq!(e.keys[1].static_passphrase, "topsecret");
        assert_eq!(
            (
                e.keys[2].tpm_check_secureboot_status_on_enroll,
                e.keys[2].tpm_pcrs.clone(),
                e.keys[2].tpm_pub_key_pcrs.clone()
            ),
            (true, vec![7], vec![11])
        );
        let state = &find(&all, STATE).config.encryption;
        assert_eq!((state.keys[0].kind, state.keys[0].kms_endpoint.as_str()), (K::Kms, "https://kms:4443"));

        // Without the document: Talos's defaults.
        let plain = volume_resources(Some(&BlockView::default()), None);
        let p = &find(&plain, EPHEMERAL).config.provisioning;
        assert_eq!(p.disk_selector.expression, "system_disk");
        assert_eq!(
            (p.partition_spec.min_size, p.partition_spec.max_size, p.partition_spec.grow),
            (EPHEMERAL_MIN_SIZE, 0, true)
        );
        assert!(find(&plain, EPHEMERAL).config.mount.secure);
        assert_eq!(find(&plain, EPHEMERAL).config.encryption, EncryptionSpec::default());
    }
}
