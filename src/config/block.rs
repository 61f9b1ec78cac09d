//! The typed block view of a machine config: the volume documents `VolumeConfig`,
//! `UserVolumeConfig`, `RawVolumeConfig`, `ExistingVolumeConfig`, `ExternalVolumeConfig` and
//! `SwapVolumeConfig` as checked values, under Talos's rules (`pkg/machinery/config/types/block`):
//! which system volumes may be configured and how, names that still fit a GPT partition label
//! once prefixed (`u-<name>` in 36 characters), sizes as Talos reads them (`10GiB`, `2.5TB`,
//! `90%`, `-10GiB`), encryption keys with one type each, and the rules across documents (a user
//! volume and an existing volume of one name; STATE encryption written in two places). The
//! block controllers read [`BlockView`] and never see a malformed size or a key without a type:
//! every error names its document and field
//! (`UserVolumeConfig data: provisioning.minSize: "10 parsecs" is not a size: ...`).
//!
//! CEL selectors are kept as their source text with the environment they are evaluated in,
//! and compiled once here ([`Config::block`] through [`BlockView::cel_expressions`]), so a
//! syntax error, an unknown field or a result that is not a bool is refused when the config is
//! applied, naming the document and the field, before anything acts on it. Which disk a
//! selector picks needs the node's disks and is never decided here.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use super::ConfigError;
use super::document::{Config, Document};
use super::reader::R;
use super::value::Path;

/// A GPT partition name's length in characters, the room for a prefixed volume name.
pub const PARTITION_LABEL_LENGTH: usize = 36;
/// Volume id prefixes, by kind: the id is also the partition label.
pub const USER_VOLUME_PREFIX: &str = "u-";
pub const RAW_VOLUME_PREFIX: &str = "r-";
pub const EXISTING_VOLUME_PREFIX: &str = "e-";
pub const EXTERNAL_VOLUME_PREFIX: &str = "x-";
pub const SWAP_VOLUME_PREFIX: &str = "s-";
/// Where user, existing and external volumes are mounted, each at `<this>/<name>`.
pub const USER_VOLUME_MOUNT_POINT: &str = "/var/mnt";
/// The PCR a TPM key is sealed to unless its options say otherwise (Secure Boot state).
pub const SECURE_BOOT_STATE_PCR: u8 = 7;
/// The PCR whose signed policy a TPM key also checks (the UKI's measurements).
pub const UKI_PCR: u8 = 11;
/// The shortest scrub interval Talos accepts.
pub const MIN_SCRUB_INTERVAL: Duration = Duration::from_secs(10);

/// A byte count as Talos's `ByteSize` reads it: a decimal number (`,` thousands separators
/// allowed) and an optional SI or IEC unit, case-insensitive (`100MB`, `2.5GiB`, `1048576`,
/// `10 gb`); a leading `-` marks it as counted back from the end of the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize {
    pub bytes: u64,
    pub negative: bool,
}

/// go-humanize's unit table (`ParseBytes`), lower case; no unit is bytes.
const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1000),
    ("kb", 1000),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1000 * 1000),
    ("mb", 1000 * 1000),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1000 * 1000 * 1000),
    ("gb", 1000 * 1000 * 1000),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("t", 1000 * 1000 * 1000 * 1000),
    ("tb", 1000 * 1000 * 1000 * 1000),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
    ("p", 1000 * 1000 * 1000 * 1000 * 1000),
    ("pb", 1000 * 1000 * 1000 * 1000 * 1000),
    ("pi", 1 << 50),
    ("pib", 1 << 50),
    ("e", 1000 * 1000 * 1000 * 1000 * 1000 * 1000),
    ("eb", 1000 * 1000 * 1000 * 1000 * 1000 * 1000),
    ("ei", 1 << 60),
    ("eib", 1 << 60),
];

impl TryFrom<&str> for ByteSize {
    type Error = String;

    fn try_from(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not a size: {why}");
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ',')).unwrap_or(rest.len());
        let number: String = rest[..end].chars().filter(|&c| c != ',').collect();
        let value: f64 = number.parse().map_err(|_| bad("it must start with a number"))?;
        let unit = rest[end..].trim().to_lowercase();
        let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(bad(&format!(
                "unknown unit {unit:?} (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB, EB, EiB)"
            )));
        };
        // As Talos computes it: in floating point, truncated.
        let bytes = value * scale as f64;
        if bytes >= u64::MAX as f64 {
            return Err(bad("too large"));
        }
        Ok(ByteSize { bytes: bytes as u64, negative })
    }
}

/// A maximum size as Talos's `Size` reads it: a [`ByteSize`] or a percentage of the disk
/// (`50%`, `33.4%` is 33), either one perhaps negative (counted back from the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Bytes(ByteSize),
    Percent { percent: u64, negative: bool },
}

impl Size {
    /// The byte count; 0 for a percentage (Talos's `Value`).
    pub fn value(&self) -> u64 {
        match self {
            Size::Bytes(b) => b.bytes,
            Size::Percent { .. } => 0,
        }
    }

    /// The percentage, if it is one (Talos's `RelativeValue`).
    pub fn relative_value(&self) -> Option<u64> {
        match self {
            Size::Bytes(_) => None,
            Size::Percent { percent, .. } => Some(*percent),
        }
    }

    pub fn is_relative(&self) -> bool {
        matches!(self, Size::Percent { .. })
    }

    pub fn is_negative(&self) -> bool {
        match self {
            Size::Bytes(b) => b.negative,
            Size::Percent { negative, .. } => *negative,
        }
    }
}

impl TryFrom<&str> for Size {
    type Error = String;

    fn try_from(text: &str) -> Result<Self, String> {
        if !text.contains('%') {
            return ByteSize::try_from(text).map(Size::Bytes);
        }
        let bad = |why: &str| format!("{text:?} is not a percentage: {why}");
        let Some(number) = text.strip_suffix('%') else { return Err(bad("it must end with '%'")) };
        let (negative, number) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number),
        };
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        // Talos would take NaN; nobody means it.
        if value.is_nan() || !(0.0..=100.0).contains(&value) {
            return Err(bad("it must be between 0 and 100"));
        }
        Ok(Size::Percent { percent: value as u64, negative })
    }
}

/// The variables a CEL expression is evaluated with (Talos's `celenv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CelEnv {
    /// `disk`, `system_disk`: picks a disk to provision on.
    DiskLocator,
    /// `volume`, `disk`: picks an existing volume.
    VolumeLocator,
}

/// A CEL expression as written; compiled and evaluated elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelExpression {
    source: String,
    env: CelEnv,
}

impl CelEnv {
    /// The CEL module's environment of the same name.
    pub fn selector_env(self) -> crate::block::selector::Env {
        match self {
            CelEnv::DiskLocator => crate::block::selector::Env::DiskLocator,
            CelEnv::VolumeLocator => crate::block::selector::Env::VolumeLocator,
        }
    }
}

impl CelExpression {
    pub fn new(source: impl Into<String>, env: CelEnv) -> CelExpression {
        CelExpression { source: source.into(), env }
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn env(&self) -> CelEnv {
        self.env
    }
}

/// Where a CEL expression was written, for errors about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelSite<'a> {
    /// The document's name in messages: `UserVolumeConfig data`.
    pub doc: String,
    /// `provisioning.diskSelector.match`.
    pub path: String,
    pub expression: &'a CelExpression,
}

/// A secret from the config (a passphrase, a KMS endpoint); its text is only reachable
/// through [`Secret::expose`] and never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where a volume goes and how big it is (`provisioning`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provisioning {
    pub disk_selector: Option<CelExpression>,
    pub grow: Option<bool>,
    pub min_size: Option<ByteSize>,
    pub max_size: Option<Size>,
}

impl Provisioning {
    /// Whether anything is said (Talos's `ProvisioningRequested`): for a promotable system
    /// volume, whether it gets a partition of its own.
    pub fn is_requested(&self) -> bool {
        self.disk_selector.is_some() || self.grow.is_some() || self.min_size.is_some() || self.max_size.is_some()
    }
}

/// The one encryption provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncryptionProvider {
    Luks2,
}

/// `encryption`: how a volume is encrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encryption {
    pub provider: EncryptionProvider,
    /// In the order written; each slot once.
    pub keys: Vec<EncryptionKey>,
    /// `aes-xts-plain64` or an adiantum cipher; `None`: the provider's default.
    pub cipher: Option<String>,
    pub key_size: Option<u32>,
    pub block_size: Option<u64>,
    /// dm-crypt performance options (`no_read_workqueue`, ...).
    pub options: Vec<String>,
    pub allow_discards: bool,
}

impl Encryption {
    /// STATE's encryption as Talos keeps it in META (tag 9, `StateEncryptionConfig`): the
    /// JSON of v1alpha1's `EncryptionConfig`, so an encrypted STATE opens before the
    /// configuration on it can be read. No passphrase is ever in it. Talos keeps a static
    /// passphrase here in clear; here a static key is kept as a recovery slot (its slot, kept
    /// by the key sync, and no passphrase): STATE opens before its configuration by the keys
    /// the node holds (nodeID, tpm, kms) or, with a static key alone, with the passphrase
    /// given through `talosctl unlock`; once a configuration is in force its static key is
    /// the configuration's. Nothing secret exists on a node before STATE is open, so whatever
    /// META kept to open a static slot unattended would be that passphrase on the same disk
    /// (or as good as it), and a passphrase written once for many nodes and volumes would be
    /// read off any of them. `lockToState` cannot help: STATE holds the salt.
    pub fn to_meta_json(&self) -> String {
        use serde_json::{Map, Value, json};
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|k| {
                let mut key = Map::new();
                match &k.kind {
                    KeyKind::NodeId => {
                        key.insert("nodeID".into(), json!({}));
                    }
                    KeyKind::Kms { endpoint } => {
                        key.insert("kms".into(), json!({ "endpoint": endpoint.expose() }));
                    }
                    KeyKind::Tpm(tpm) => {
                        let mut t = Map::new();
                        if tpm.check_secureboot_status_on_enroll {
                            t.insert("checkSecurebootStatusOnEnroll".into(), Value::Bool(true));
                        }
                        if tpm.pcrs != [SECURE_BOOT_STATE_PCR] {
                            t.insert("options".into(), json!({ "pcrs": tpm.pcrs }));
                        }
                        key.insert("tpm".into(), Value::Object(t));
                    }
                    KeyKind::Static { .. } | KeyKind::Recovery { .. } => {
                        key.insert("recovery".into(), json!({}));
                    }
                }
                key.insert("slot".into(), json!(k.slot));
                if k.lock_to_state {
                    key.insert("lockToState".into(), Value::Bool(true));
                }
                Value::Object(key)
            })
            .collect();
        let mut out = Map::new();
        out.insert("provider".into(), json!("luks2"));
        out.insert("keys".into(), Value::Array(keys));
        if let Some(c) = &self.cipher {
            out.insert("cipher".into(), json!(c));
        }
        if let Some(n) = self.key_size {
            out.insert("keySize".into(), json!(n));
        }
        if let Some(n) = self.block_size {
            out.insert("blockSize".into(), json!(n));
        }
        if !self.options.is_empty() {
            out.insert("options".into(), json!(self.options));
        }
        if self.allow_discards {
            out.insert("allowDiscards".into(), Value::Bool(true));
        }
        Value::Object(out).to_string()
    }

    /// Reads what [`Encryption::to_meta_json`] (or Talos) kept in META, by the same rules as
    /// a `VolumeConfig` document's `encryption` (JSON is YAML): an unknown field is an error.
    pub fn from_meta_json(text: &str) -> Result<Encryption, ConfigError> {
        if text.contains('\n') {
            return Err(ConfigError::Invalid {
                doc: "META StateEncryptionConfig".into(),
                path: String::new(),
                reason: "not one line of JSON".into(),
            });
        }
        let doc = format!("apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption: {text}\n");
        let loaded = crate::config::load(&doc)?;
        let view = loaded.config.block()?;
        view.volume(SystemVolume::State).and_then(|v| v.encryption.clone()).ok_or_else(|| ConfigError::Invalid {
            doc: "META StateEncryptionConfig".into(),
            path: "encryption".into(),
            reason: "names no encryption".into(),
        })
    }
}

/// One LUKS2 key slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptionKey {
    pub slot: u32,
    pub kind: KeyKind,
    /// Mix the node's STATE-held salt into the key.
    pub lock_to_state: bool,
}

/// Where a key comes from. With more than one written, Talos takes the first of static,
/// nodeID, kms, tpm; so does this view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyKind {
    Static {
        passphrase: Secret,
    },
    /// Derived from the machine's UUID and the partition label.
    NodeId,
    /// Sealed by a KMS server (`endpoint` is a gRPC address; it may carry credentials).
    Kms {
        endpoint: Secret,
    },
    Tpm(TpmKey),
    /// Beyond Talos: a passphrase slot for when the other keys fail, opened with the
    /// passphrase written here or, when none is (as META keeps STATE's), with one given
    /// through `talosctl unlock`. A slot without a passphrase here is kept as it is.
    Recovery {
        passphrase: Option<Secret>,
    },
}

/// A key sealed by the TPM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmKey {
    pub check_secureboot_status_on_enroll: bool,
    /// The PCRs the key is bound to: [`SECURE_BOOT_STATE_PCR`] unless `options` says (an empty
    /// list binds to none).
    pub pcrs: Vec<u8>,
}

impl TpmKey {
    /// The PCRs whose signed policy the key checks.
    pub fn pub_key_pcrs(&self) -> Vec<u8> {
        vec![UKI_PCR]
    }
}

/// A filesystem talosbox formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesystemType {
    Xfs,
    Ext4,
}

impl FilesystemType {
    pub fn as_str(self) -> &'static str {
        match self {
            FilesystemType::Xfs => "xfs",
            FilesystemType::Ext4 => "ext4",
        }
    }
}

/// `filesystem.xfs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XfsOptions {
    pub min_allocation_group_size: Option<u64>,
}

/// A user volume's `filesystem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filesystem {
    /// xfs unless said.
    pub kind: FilesystemType,
    pub project_quota_support: bool,
    pub xfs: Option<XfsOptions>,
}

impl Default for Filesystem {
    fn default() -> Self {
        Filesystem { kind: FilesystemType::Xfs, project_quota_support: false, xfs: None }
    }
}

/// `mount`: the options a volume is mounted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountOptions {
    pub read_only: bool,
    pub disable_access_time: bool,
    /// nosuid and nodev; on unless said.
    pub secure: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { read_only: false, disable_access_time: false, secure: true }
    }
}

/// A volume's `trim` or `scrub`: whether and how often.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Periodic {
    pub enabled: Option<bool>,
    /// `None`: the default interval.
    pub interval: Option<Duration>,
}

/// The system volumes a `VolumeConfig` may configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SystemVolume {
    State,
    Ephemeral,
    ImageCache,
    Etcd,
    Cri,
    Kubelet,
    Log,
}

impl SystemVolume {
    /// In Talos's order.
    pub const ALL: [SystemVolume; 7] = [
        SystemVolume::State,
        SystemVolume::Ephemeral,
        SystemVolume::ImageCache,
        SystemVolume::Etcd,
        SystemVolume::Cri,
        SystemVolume::Kubelet,
        SystemVolume::Log,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SystemVolume::State => "STATE",
            SystemVolume::Ephemeral => "EPHEMERAL",
            SystemVolume::ImageCache => "IMAGECACHE",
            SystemVolume::Etcd => "ETCD",
            SystemVolume::Cri => "CRI",
            SystemVolume::Kubelet => "KUBELET",
            SystemVolume::Log => "LOG",
        }
    }

    /// A directory under EPHEMERAL unless provisioned onto a partition of its own.
    pub fn is_promotable(self) -> bool {
        matches!(self, SystemVolume::Etcd | SystemVolume::Cri | SystemVolume::Kubelet | SystemVolume::Log)
    }
}

impl TryFrom<&str> for SystemVolume {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        SystemVolume::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| {
            let names: Vec<String> = SystemVolume::ALL.iter().map(|v| format!("{:?}", v.as_str())).collect();
            format!("only [{}] volumes are supported", names.join(" "))
        })
    }
}

/// A `VolumeConfig` document: settings of a system volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeDoc {
    pub name: SystemVolume,
    pub provisioning: Provisioning,
    /// `filesystem.xfs` (system volumes are always xfs).
    pub xfs: Option<XfsOptions>,
    pub encryption: Option<Encryption>,
    pub mount: MountOptions,
    pub trim: Option<Periodic>,
    pub scrub: Option<Periodic>,
}

/// What a user volume is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserVolumeType {
    /// A partition carved on a selected disk.
    Partition,
    /// A directory on EPHEMERAL.
    Directory,
    /// A whole selected disk.
    Disk,
}

/// A `UserVolumeConfig` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserVolumeDoc {
    pub name: String,
    pub volume_type: UserVolumeType,
    pub provisioning: Provisioning,
    pub filesystem: Filesystem,
    pub encryption: Option<Encryption>,
    pub mount: MountOptions,
    pub trim: Option<Periodic>,
    pub scrub: Option<Periodic>,
}

impl UserVolumeDoc {
    /// `u-<name>`: the volume's id and its partition label.
    pub fn volume_id(&self) -> String {
        format!("{USER_VOLUME_PREFIX}{}", self.name)
    }

    /// `/var/mnt/<name>`.
    pub fn mount_path(&self) -> String {
        format!("{USER_VOLUME_MOUNT_POINT}/{}", self.name)
    }
}

/// A `RawVolumeConfig` document: a partition left unformatted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawVolumeDoc {
    pub name: String,
    pub provisioning: Provisioning,
    pub encryption: Option<Encryption>,
}

impl RawVolumeDoc {
    /// `r-<name>`.
    pub fn volume_id(&self) -> String {
        format!("{RAW_VOLUME_PREFIX}{}", self.name)
    }
}

/// An `ExistingVolumeConfig` document: a volume already on a disk, found and mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingVolumeDoc {
    pub name: String,
    /// `discovery.volumeSelector.match`.
    pub volume_selector: CelExpression,
    pub mount: MountOptions,
    pub trim: Option<Periodic>,
    pub scrub: Option<Periodic>,
}

impl ExistingVolumeDoc {
    /// `e-<name>`.
    pub fn volume_id(&self) -> String {
        format!("{EXISTING_VOLUME_PREFIX}{}", self.name)
    }

    /// `/var/mnt/<name>`.
    pub fn mount_path(&self) -> String {
        format!("{USER_VOLUME_MOUNT_POINT}/{}", self.name)
    }
}

/// An `ExternalVolumeConfig` document: a virtiofs share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalVolumeDoc {
    pub name: String,
    /// `mount.virtiofs.tag`.
    pub virtiofs_tag: String,
    pub mount: MountOptions,
}

impl ExternalVolumeDoc {
    /// `x-<name>`.
    pub fn volume_id(&self) -> String {
        format!("{EXTERNAL_VOLUME_PREFIX}{}", self.name)
    }

    /// `/var/mnt/<name>`.
    pub fn mount_path(&self) -> String {
        format!("{USER_VOLUME_MOUNT_POINT}/{}", self.name)
    }
}

/// A `SwapVolumeConfig` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapVolumeDoc {
    pub name: String,
    pub provisioning: Provisioning,
    pub encryption: Option<Encryption>,
}

impl SwapVolumeDoc {
    /// `s-<name>`.
    pub fn volume_id(&self) -> String {
        format!("{SWAP_VOLUME_PREFIX}{}", self.name)
    }
}

/// Beyond Talos (#2213): a `DiskWipeConfig` document. Every disk its selector matches is wiped
/// once (its partition table and signatures), then remembered in META by its WWID or serial,
/// so the wipe is never repeated, whatever the configuration does later. The system disk, a
/// read-only disk and a disk a volume is on are never wiped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskWipeDoc {
    pub name: String,
    pub disk_selector: CelExpression,
}

/// The volume documents of a config, checked, each list in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockView {
    pub volumes: Vec<VolumeDoc>,
    pub user_volumes: Vec<UserVolumeDoc>,
    pub raw_volumes: Vec<RawVolumeDoc>,
    pub existing_volumes: Vec<ExistingVolumeDoc>,
    pub external_volumes: Vec<ExternalVolumeDoc>,
    pub swap_volumes: Vec<SwapVolumeDoc>,
    /// v1alpha1's `machine.disks`, the user disks before volume documents.
    pub user_disks: Vec<UserDisk>,
    pub disk_wipes: Vec<DiskWipeDoc>,
}

/// One entry of v1alpha1's `machine.disks`: partitions made on `device` in the order listed,
/// each formatted xfs and mounted at its mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDisk {
    pub device: String,
    pub partitions: Vec<UserDiskPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDiskPartition {
    /// Bytes; 0 (`size` left out) for the rest of the disk, allowed only for the last one.
    pub size: u64,
    pub mountpoint: String,
}

impl UserDisk {
    /// Talos's volume id for partition `index` (1-based): `<device>-<index>`.
    pub fn volume_id(&self, index: usize) -> String {
        format!("{}-{index}", self.device)
    }
}

impl BlockView {
    /// The `VolumeConfig` of a system volume, if the config has one (Talos's `ByName`).
    pub fn volume(&self, name: SystemVolume) -> Option<&VolumeDoc> {
        self.volumes.iter().find(|v| v.name == name)
    }

    /// Every CEL expression, with where it was written: the hook for compiling them all when
    /// a config is applied.
    pub fn cel_expressions(&self) -> Vec<CelSite<'_>> {
        fn site<'a>(kind: &str, name: &str, path: &str, expression: Option<&'a CelExpression>) -> Option<CelSite<'a>> {
            Some(CelSite { doc: format!("{kind} {name}"), path: path.to_string(), expression: expression? })
        }
        let disk = "provisioning.diskSelector.match";
        let volumes = self
            .volumes
            .iter()
            .map(|v| site("VolumeConfig", v.name.as_str(), disk, v.provisioning.disk_selector.as_ref()));
        let user = self
            .user_volumes
            .iter()
            .map(|v| site("UserVolumeConfig", &v.name, disk, v.provisioning.disk_selector.as_ref()));
        let raw = self
            .raw_volumes
            .iter()
            .map(|v| site("RawVolumeConfig", &v.name, disk, v.provisioning.disk_selector.as_ref()));
        let existing = self
            .existing_volumes
            .iter()
            .map(|v| site("ExistingVolumeConfig", &v.name, "discovery.volumeSelector.match", Some(&v.volume_selector)));
        let swap = self
            .swap_volumes
            .iter()
            .map(|v| site("SwapVolumeConfig", &v.name, disk, v.provisioning.disk_selector.as_ref()));
        let wipes = self
            .disk_wipes
            .iter()
            .map(|w| site("DiskWipeConfig", &w.name, "diskSelector.match", Some(&w.disk_selector)));
        volumes.chain(user).chain(raw).chain(existing).chain(swap).chain(wipes).flatten().collect()
    }
}

/// How a kind's provisioning is judged (Talos's `ProvisioningSpec.Validate(required, sizes)`).
#[derive(Clone, Copy)]
struct Rules {
    /// A disk selector and a size must be given.
    required: bool,
    /// Sizes and grow may be given at all.
    sizes: bool,
}

const ALLOWED_NAME: &str = "name can only contain lowercase and uppercase ASCII letters, digits, and hyphens";

impl R<'_> {
    /// A volume's name: given, of letters, digits and `-`, and short enough to fit a partition
    /// label after `prefix` (`None`: no label is made from it).
    fn volume_name(&self, doc: &Document, prefix: Option<&str>) -> Result<String, ConfigError> {
        let path = Path::keys("name");
        let name = doc.name().unwrap_or_default();
        if name.is_empty() {
            return Err(self.invalid(&path, "name is required"));
        }
        if let Some(prefix) = prefix {
            let max = PARTITION_LABEL_LENGTH - prefix.len();
            if name.len() > max {
                return Err(self.invalid(
                    &path,
                    format!(
                        "name must be between 1 and {max} characters long (its partition label {prefix}{name} must fit in {PARTITION_LABEL_LENGTH})"
                    ),
                ));
            }
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(self.invalid(&path, ALLOWED_NAME));
        }
        Ok(name.to_string())
    }

    fn provisioning(&self, path: &Path, rules: Rules) -> Result<Provisioning, ConfigError> {
        let selector = path.key("diskSelector").key("match");
        let p = Provisioning {
            disk_selector: self.str(&selector).map(|s| CelExpression::new(s, CelEnv::DiskLocator)),
            grow: self.opt_bool(&path.key("grow")),
            min_size: self.parse(&path.key("minSize"), |s| ByteSize::try_from(s))?,
            max_size: self.parse(&path.key("maxSize"), |s| Size::try_from(s))?,
        };
        if rules.required && p.disk_selector.is_none() {
            return Err(self.invalid(&selector, "disk selector is required"));
        }
        if !rules.sizes {
            let written =
                [("minSize", p.min_size.is_some()), ("maxSize", p.max_size.is_some()), ("grow", p.grow.is_some())];
            if let Some((key, _)) = written.into_iter().find(|(_, set)| *set) {
                return Err(self.invalid(&path.key(key), "min size, max size and grow are not supported"));
            }
            return Ok(p);
        }
        if p.min_size.is_some_and(|m| m.negative) {
            return Err(self.invalid(&path.key("minSize"), "min size cannot be negative"));
        }
        match (p.min_size, p.max_size) {
            (Some(min), Some(Size::Bytes(max))) if !max.negative && min.bytes > max.bytes => {
                return Err(self.invalid(&path.key("minSize"), "min size is greater than max size"));
            }
            (None, None) if rules.required => {
                return Err(self.invalid(path, "min size or max size is required"));
            }
            _ => {}
        }
        Ok(p)
    }

    /// Whether a `provisioning` says anything (Talos's `ProvisioningSpec.IsZero`, negated).
    fn provisioning_written(&self, path: &Path) -> bool {
        self.str(&path.key("diskSelector").key("match")).is_some()
            || self.opt_bool(&path.key("grow")).is_some()
            || self.str(&path.key("minSize")).is_some()
            || self.str(&path.key("maxSize")).is_some()
    }

    /// Whether an `encryption` says anything (Talos's `EncryptionSpec.IsZero`, negated).
    fn encryption_written(&self, path: &Path) -> bool {
        self.has(&path.key("provider")) || !self.list(&path.key("keys")).is_empty()
    }

    fn encryption(&self, path: &Path) -> Result<Option<Encryption>, ConfigError> {
        if !self.encryption_written(path) {
            return Ok(None);
        }
        let provider = match self.str(&path.key("provider")) {
            Some("luks2") => EncryptionProvider::Luks2,
            other => {
                return Err(self.invalid(
                    &path.key("provider"),
                    format!("unsupported encryption provider: {} (luks2 is the one provider)", other.unwrap_or("none")),
                ));
            }
        };
        let keys_path = path.key("keys");
        let count = self.list(&keys_path).len();
        if count == 0 {
            return Err(self.invalid(&keys_path, "encryption keys are required"));
        }
        let mut keys: Vec<EncryptionKey> = Vec::with_capacity(count);
        for i in 0..count {
            let p = keys_path.index(i);
            let slot: u32 = self.int(&p.key("slot"))?.unwrap_or(0);
            if keys.iter().any(|k| k.slot == slot) {
                return Err(self.invalid(&p.key("slot"), format!("duplicate key slot {slot}")));
            }
            let tpm = if self.has(&p.key("tpm")) { Some(self.tpm_key(&p.key("tpm"))?) } else { None };
            let kind = if self.has(&p.key("static")) {
                KeyKind::Static { passphrase: Secret(self.string(&p.key("static").key("passphrase"))) }
            } else if self.has(&p.key("nodeID")) {
                KeyKind::NodeId
            } else if self.has(&p.key("kms")) {
                KeyKind::Kms { endpoint: Secret(self.string(&p.key("kms").key("endpoint"))) }
            } else if let Some(tpm) = tpm {
                KeyKind::Tpm(tpm)
            } else if self.has(&p.key("recovery")) {
                let pass = self.string(&p.key("recovery").key("passphrase"));
                KeyKind::Recovery { passphrase: (!pass.is_empty()).then_some(Secret(pass)) }
            } else {
                return Err(self.invalid(
                    &p,
                    format!(
                        "at least one encryption key type must be specified for slot {slot} (static, nodeID, kms, tpm or recovery)"
                    ),
                ));
            };
            keys.push(EncryptionKey { slot, kind, lock_to_state: self.bool(&p.key("lockToState")) });
        }
        Ok(Some(Encryption {
            provider,
            keys,
            cipher: self.str(&path.key("cipher")).map(str::to_string),
            key_size: self.int(&path.key("keySize"))?,
            block_size: self.int(&path.key("blockSize"))?,
            options: self.strings(&path.key("options")),
            allow_discards: self.bool(&path.key("allowDiscards")),
        }))
    }

    fn tpm_key(&self, path: &Path) -> Result<TpmKey, ConfigError> {
        let options = path.key("options");
        let pcrs = if self.has(&options) {
            let list = options.key("pcrs");
            let mut pcrs = Vec::new();
            for (i, v) in self.list(&list).iter().enumerate() {
                let n = v.as_i64().unwrap_or(-1);
                match u8::try_from(n).ok().filter(|n| *n <= 23) {
                    Some(pcr) => pcrs.push(pcr),
                    None => return Err(self.invalid(&list.index(i), format!("TPM PCR {n} is out of range (0-23)"))),
                }
            }
            pcrs
        } else {
            vec![SECURE_BOOT_STATE_PCR]
        };
        Ok(TpmKey { check_secureboot_status_on_enroll: self.bool(&path.key("checkSecurebootStatusOnEnroll")), pcrs })
    }

    fn xfs(&self, path: &Path) -> Result<Option<XfsOptions>, ConfigError> {
        if !self.has(path) {
            return Ok(None);
        }
        let size = path.key("minAllocationGroupSize");
        let min = self.parse(&size, |s| ByteSize::try_from(s))?;
        if min.is_some_and(|m| m.negative) {
            return Err(self.invalid(&size, "the minimum allocation group size cannot be negative"));
        }
        Ok(Some(XfsOptions { min_allocation_group_size: min.map(|m| m.bytes) }))
    }

    /// Whether a user volume's `filesystem` says anything (Talos's `FilesystemSpec.IsZero`).
    fn filesystem_written(&self, path: &Path) -> bool {
        ["type", "projectQuotaSupport", "xfs"].iter().any(|k| self.has(&path.key(k)))
    }

    fn filesystem(&self, path: &Path) -> Result<Filesystem, ConfigError> {
        let kind = match self.str(&path.key("type")) {
            None | Some("xfs") => FilesystemType::Xfs,
            Some("ext4") => FilesystemType::Ext4,
            Some(other) => {
                return Err(self.invalid(
                    &path.key("type"),
                    format!("unsupported filesystem type: {other} (talosbox formats xfs and ext4)"),
                ));
            }
        };
        let project_quota_support = self.bool(&path.key("projectQuotaSupport"));
        if project_quota_support && kind != FilesystemType::Xfs {
            return Err(self.invalid(
                &path.key("projectQuotaSupport"),
                "project quota support is only available for xfs filesystem",
            ));
        }
        let xfs = self.xfs(&path.key("xfs"))?;
        if xfs.is_some() && kind != FilesystemType::Xfs {
            return Err(self.invalid(&path.key("xfs"), "xfs options are only available for xfs filesystem"));
        }
        Ok(Filesystem { kind, project_quota_support, xfs })
    }

    /// `mount`, with the fields the kind has (the others are refused by the schema).
    fn mount(&self, path: &Path) -> MountOptions {
        MountOptions {
            read_only: self.bool(&path.key("readOnly")),
            disable_access_time: self.bool(&path.key("disableAccessTime")),
            secure: self.opt_bool(&path.key("secure")).unwrap_or(true),
        }
    }

    fn trim(&self, path: &Path) -> Result<Option<Periodic>, ConfigError> {
        self.periodic(path, |nanos| if nanos < 0 { Err("trim interval cannot be negative".into()) } else { Ok(()) })
    }

    fn scrub(&self, path: &Path) -> Result<Option<Periodic>, ConfigError> {
        self.periodic(path, |nanos| {
            if nanos != 0 && nanos < MIN_SCRUB_INTERVAL.as_nanos() as i128 {
                Err(format!("scrub interval: minimum value is {}s", MIN_SCRUB_INTERVAL.as_secs()))
            } else {
                Ok(())
            }
        })
    }

    fn periodic(
        &self,
        path: &Path,
        check: impl Fn(i128) -> Result<(), String>,
    ) -> Result<Option<Periodic>, ConfigError> {
        if !self.has(path) {
            return Ok(None);
        }
        let interval = path.key("interval");
        let nanos = self.parse(&interval, go_duration)?.unwrap_or(0);
        check(nanos).map_err(|e| self.invalid(&interval, e))?;
        Ok(Some(Periodic {
            enabled: self.opt_bool(&path.key("enabled")),
            interval: (nanos > 0).then(|| Duration::from_nanos(nanos as u64)),
        }))
    }

    fn volume_doc(&self) -> Result<VolumeDoc, ConfigError> {
        let root = Path::root();
        let name_path = Path::keys("name");
        let name = SystemVolume::try_from(self.str(&name_path).unwrap_or_default())
            .map_err(|e| self.invalid(&name_path, e))?;
        let v = VolumeDoc {
            name,
            provisioning: self.provisioning(&root.key("provisioning"), Rules { required: false, sizes: true })?,
            xfs: self.xfs(&Path::keys("filesystem.xfs"))?,
            encryption: self.encryption(&root.key("encryption"))?,
            mount: self.mount(&root.key("mount")),
            trim: self.trim(&root.key("trim"))?,
            scrub: self.scrub(&root.key("scrub"))?,
        };
        // Talos compares the mount spec with its zero value: any field written counts.
        let mount_written = self.has(&Path::keys("mount.secure")) || self.has(&Path::keys("mount.disableAccessTime"));
        let label = name.as_str();
        let no_mount =
            || self.invalid(&root.key("mount"), format!("mount config is not allowed for the {label:?} volume"));
        match name {
            SystemVolume::State => {
                if v.provisioning.is_requested() {
                    return Err(self.invalid(
                        &root.key("provisioning"),
                        format!("provisioning config is not allowed for the {label:?} volume"),
                    ));
                }
                if let Some(i) = v.encryption.iter().flat_map(|e| &e.keys).position(|k| k.lock_to_state) {
                    return Err(self.invalid(
                        &Path::keys("encryption.keys").index(i).key("lockToState"),
                        format!("state-locked key is not allowed for the {label:?} volume"),
                    ));
                }
                if mount_written {
                    return Err(no_mount());
                }
            }
            SystemVolume::ImageCache => {
                if mount_written {
                    return Err(no_mount());
                }
                if v.xfs.is_some() {
                    return Err(self.invalid(
                        &root.key("filesystem"),
                        format!("filesystem config is not allowed for the {label:?} volume"),
                    ));
                }
            }
            _ if name.is_promotable() && mount_written && !v.provisioning.is_requested() => {
                return Err(self.invalid(
                    &root.key("mount"),
                    format!(
                        "mount config for the {label:?} volume is only supported when it is provisioned onto a dedicated partition"
                    ),
                ));
            }
            _ => {}
        }
        Ok(v)
    }

    fn user_volume_doc(&self, doc: &Document) -> Result<UserVolumeDoc, ConfigError> {
        let root = Path::root();
        let name = self.volume_name(doc, Some(USER_VOLUME_PREFIX))?;
        let volume_type = match self.str(&root.key("volumeType")) {
            None | Some("partition") => UserVolumeType::Partition,
            Some("directory") => UserVolumeType::Directory,
            Some("disk") => UserVolumeType::Disk,
            Some(other) => {
                return Err(self.invalid(&root.key("volumeType"), format!("unsupported volume type {other:?}")));
            }
        };
        let (prov, fs, enc) = (root.key("provisioning"), root.key("filesystem"), root.key("encryption"));
        let (provisioning, filesystem, encryption) = match volume_type {
            UserVolumeType::Directory => {
                let invalid = |path: &Path, what: &str| {
                    Err(self.invalid(path, format!("{what} is invalid for volumeType directory")))
                };
                if self.provisioning_written(&prov) {
                    return invalid(&prov, "provisioning spec");
                }
                if self.encryption_written(&enc) {
                    return invalid(&enc, "encryption spec");
                }
                if self.filesystem_written(&fs) {
                    return invalid(&fs, "filesystem spec");
                }
                if self.has(&Path::keys("mount.disableAccessTime")) {
                    return invalid(&Path::keys("mount.disableAccessTime"), "mount.disableAccessTime");
                }
                (Provisioning::default(), Filesystem::default(), None)
            }
            UserVolumeType::Disk | UserVolumeType::Partition => {
                let sizes = volume_type == UserVolumeType::Partition;
                (
                    self.provisioning(&prov, Rules { required: true, sizes })?,
                    self.filesystem(&fs)?,
                    self.encryption(&enc)?,
                )
            }
        };
        Ok(UserVolumeDoc {
            name,
            volume_type,
            provisioning,
            filesystem,
            encryption,
            mount: self.mount(&root.key("mount")),
            trim: self.trim(&root.key("trim"))?,
            scrub: self.scrub(&root.key("scrub"))?,
        })
    }

    /// `RawVolumeConfig` and `SwapVolumeConfig`, which share their fields.
    fn partition_doc(
        &self,
        doc: &Document,
        prefix: &str,
    ) -> Result<(String, Provisioning, Option<Encryption>), ConfigError> {
        let name = self.volume_name(doc, Some(prefix))?;
        let provisioning = self.provisioning(&Path::keys("provisioning"), Rules { required: true, sizes: true })?;
        Ok((name, provisioning, self.encryption(&Path::keys("encryption"))?))
    }

    fn existing_volume_doc(&self, doc: &Document) -> Result<ExistingVolumeDoc, ConfigError> {
        // Talos checks no length here: an existing volume's label is not made from its name.
        let name = self.volume_name(doc, None)?;
        let selector = Path::keys("discovery.volumeSelector.match");
        let volume_selector = self
            .str(&selector)
            .map(|s| CelExpression::new(s, CelEnv::VolumeLocator))
            .ok_or_else(|| self.invalid(&selector, "volume selector is required"))?;
        Ok(ExistingVolumeDoc {
            name,
            volume_selector,
            mount: self.mount(&Path::keys("mount")),
            trim: self.trim(&Path::keys("trim"))?,
            scrub: self.scrub(&Path::keys("scrub"))?,
        })
    }

    fn external_volume_doc(&self, doc: &Document) -> Result<ExternalVolumeDoc, ConfigError> {
        let name = self.volume_name(doc, Some(EXTERNAL_VOLUME_PREFIX))?;
        let fs_type = Path::keys("filesystemType");
        match self.str(&fs_type) {
            Some("virtiofs") => {}
            other => {
                return Err(self.invalid(
                    &fs_type,
                    format!("invalid filesystem type: {} (virtiofs is the one type)", other.unwrap_or("none")),
                ));
            }
        }
        let virtiofs = Path::keys("mount.virtiofs");
        if !self.has(&virtiofs) {
            return Err(self.invalid(&virtiofs, "virtiofs mount spec is required"));
        }
        let tag = self
            .str(&virtiofs.key("tag"))
            .ok_or_else(|| self.invalid(&virtiofs.key("tag"), "virtiofs tag is required"))?;
        Ok(ExternalVolumeDoc { name, virtiofs_tag: tag.to_string(), mount: self.mount(&Path::keys("mount")) })
    }
}

/// Go's `time.ParseDuration` (`168h0m0s`, `1.5h`, `-30s`, `0`), in nanoseconds.
fn go_duration(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a duration (like 168h, 30m or 90s)");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_end);
        let (frac, after) = match after.strip_prefix('.') {
            Some(after) => after.split_at(after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len())),
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(bad());
        }
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{text:?} is not a duration: a unit (ns, us, ms, s, m, h) is missing")),
            _ => return Err(bad()),
        };
        let whole: u128 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
        let mut part = whole.checked_mul(scale).ok_or_else(bad)?;
        // Go keeps the fraction's leading digits only as far as they matter.
        let mut unit_frac = scale;
        for d in frac.bytes().take(30) {
            unit_frac /= 10;
            part += u128::from(d - b'0') * unit_frac;
        }
        total = total.checked_add(part).ok_or_else(bad)?;
        if total > i64::MAX as u128 + u128::from(negative) {
            return Err(format!("{text:?} is not a duration: too long"));
        }
        rest = after;
    }
    let total = total as i128;
    Ok(if negative { -total } else { total })
}

impl Config {
    /// The typed volume documents, checked one by one and against each other.
    pub fn block(&self) -> Result<BlockView, ConfigError> {
        let mut view = BlockView::default();
        // User and existing volumes share one name space (Talos's `ConflictsWithKinds`).
        let mut mounted: HashMap<String, &'static str> = HashMap::new();
        for doc in self.documents() {
            let r = R::of(doc);
            match doc.kind() {
                "VolumeConfig" => view.volumes.push(r.volume_doc()?),
                "UserVolumeConfig" => view.user_volumes.push(r.user_volume_doc(doc)?),
                "RawVolumeConfig" => {
                    let (name, provisioning, encryption) = r.partition_doc(doc, RAW_VOLUME_PREFIX)?;
                    view.raw_volumes.push(RawVolumeDoc { name, provisioning, encryption });
                }
                "ExistingVolumeConfig" => view.existing_volumes.push(r.existing_volume_doc(doc)?),
                "ExternalVolumeConfig" => view.external_volumes.push(r.external_volume_doc(doc)?),
                "SwapVolumeConfig" => {
                    let (name, provisioning, encryption) = r.partition_doc(doc, SWAP_VOLUME_PREFIX)?;
                    view.swap_volumes.push(SwapVolumeDoc { name, provisioning, encryption });
                }
                "DiskWipeConfig" => {
                    let name = r.volume_name(doc, None)?;
                    let path = Path::keys("diskSelector.match");
                    let Some(selector) = r.str(&path).filter(|s| !s.trim().is_empty()) else {
                        return Err(r.invalid(&path, "a disk selector is required: the wipe names its disks"));
                    };
                    view.disk_wipes
                        .push(DiskWipeDoc { name, disk_selector: CelExpression::new(selector, CelEnv::DiskLocator) });
                }
                _ => continue,
            }
            if let kind @ ("UserVolumeConfig" | "ExistingVolumeConfig") = doc.kind() {
                let name = doc.name().unwrap_or_default().to_string();
                if let Some(other) = mounted.get(&name).filter(|other| **other != kind) {
                    return Err(r.invalid(
                        &Path::keys("name"),
                        format!(
                            "conflicts with {other} {name}: user and existing volumes share names (both mount at {USER_VOLUME_MOUNT_POINT}/{name})"
                        ),
                    ));
                }
                mounted.insert(name, kind);
            }
        }
        self.refuse_double_system_disk_encryption(&view)?;
        self.legacy_system_disk_encryption(&mut view)?;
        view.user_disks = self.legacy_user_disks()?;
        let volume_mounts: Vec<(String, &str)> = (view.user_volumes.iter().map(|v| (&v.name, "UserVolumeConfig")))
            .chain(view.existing_volumes.iter().map(|v| (&v.name, "ExistingVolumeConfig")))
            .chain(view.external_volumes.iter().map(|v| (&v.name, "ExternalVolumeConfig")))
            .map(|(name, kind)| (format!("{USER_VOLUME_MOUNT_POINT}/{name}"), kind))
            .collect();
        for (i, disk) in view.user_disks.iter().enumerate() {
            for (j, part) in disk.partitions.iter().enumerate() {
                if let Some((_, kind)) = volume_mounts.iter().find(|(path, _)| *path == part.mountpoint)
                    && let Some(v1) = self.v1alpha1()
                {
                    return Err(R::of(v1).invalid(
                        &Path::keys("machine.disks").index(i).key("partitions").index(j).key("mountpoint"),
                        format!(
                            "{} is where {kind} {} is mounted",
                            part.mountpoint,
                            &part.mountpoint[USER_VOLUME_MOUNT_POINT.len() + 1..]
                        ),
                    ));
                }
            }
        }
        for site in view.cel_expressions() {
            let expression = site.expression;
            crate::block::selector::Expression::compile(expression.as_str(), expression.env().selector_env()).map_err(
                |e| ConfigError::Invalid { doc: site.doc.clone(), path: site.path.clone(), reason: e.to_string() },
            )?;
        }
        Ok(view)
    }

    /// v1alpha1's `machine.disks`, as Talos checks it: a device, and a size on every partition
    /// but the last; beyond Talos, a mount point on each (one without would be formatted and
    /// never mounted), under `/var` (the rest of the tree is read-only) and none twice.
    fn legacy_user_disks(&self) -> Result<Vec<UserDisk>, ConfigError> {
        let Some(v1) = self.v1alpha1() else { return Ok(Vec::new()) };
        let r = R::of(v1);
        let disks = Path::keys("machine.disks");
        let mut out: Vec<UserDisk> = Vec::new();
        let mut mountpoints: HashMap<String, Path> = HashMap::new();
        for (i, _) in r.list(&disks).iter().enumerate() {
            let at = disks.index(i);
            let Some(device) = r.str(&at.key("device")) else {
                return Err(r.invalid(&at.key("device"), "a user disk needs its device"));
            };
            if !device.starts_with("/dev/") {
                return Err(r.invalid(&at.key("device"), format!("{device:?} is not a device path under /dev")));
            }
            if let Some(j) = out.iter().position(|d| d.device == device) {
                return Err(r.invalid(&at.key("device"), format!("{device} is listed already, at machine.disks[{j}]")));
            }
            let listed = r.list(&at.key("partitions"));
            let mut partitions = Vec::new();
            for (j, _) in listed.iter().enumerate() {
                let part = at.key("partitions").index(j);
                let size = match r.at(&part.key("size")) {
                    None => 0,
                    Some(v) => match (v.as_i64(), v.as_str()) {
                        (Some(n), _) => {
                            u64::try_from(n).map_err(|_| r.invalid(&part.key("size"), format!("{n} is negative")))?
                        }
                        (None, Some(text)) => {
                            let b = ByteSize::try_from(text).map_err(|e| r.invalid(&part.key("size"), e))?;
                            if b.negative {
                                return Err(r.invalid(&part.key("size"), "a partition's size cannot be negative"));
                            }
                            b.bytes
                        }
                        _ => {
                            return Err(
                                r.invalid(&part.key("size"), "a size is a number of bytes or a string like 10GiB")
                            );
                        }
                    },
                };
                if size == 0 && j + 1 != listed.len() {
                    return Err(r.invalid(
                        &part.key("size"),
                        format!("partition for disk {device:?} is set to occupy full disk, but it's not the last partition in the list"),
                    ));
                }
                let Some(mountpoint) = r.str(&part.key("mountpoint")) else {
                    return Err(r.invalid(&part.key("mountpoint"), "a user disk partition needs its mount point"));
                };
                if !mountpoint.starts_with('/') || mountpoint.split('/').any(|c| c == ".." || c == ".") {
                    return Err(r.invalid(&part.key("mountpoint"), format!("{mountpoint:?} is not an absolute path")));
                }
                let mountpoint = mountpoint.trim_end_matches('/').to_string();
                if !mountpoint.starts_with("/var/") {
                    return Err(r.invalid(
                        &part.key("mountpoint"),
                        format!("{mountpoint:?} is not under /var: the root filesystem is read-only, user disks mount under /var"),
                    ));
                }
                if let Some(first) = mountpoints.insert(mountpoint.clone(), part.key("mountpoint")) {
                    return Err(r.invalid(
                        &part.key("mountpoint"),
                        format!("{mountpoint} is the mount point of {first} already"),
                    ));
                }
                partitions.push(UserDiskPartition { size, mountpoint });
            }
            out.push(UserDisk { device: device.to_string(), partitions });
        }
        Ok(out)
    }

    /// v1alpha1's `machine.systemDiskEncryption.{state,ephemeral}`, as Talos still reads it:
    /// the volume's encryption, as if its `VolumeConfig` document said it (both at once is
    /// refused before this).
    fn legacy_system_disk_encryption(&self, view: &mut BlockView) -> Result<(), ConfigError> {
        let Some(v1) = self.v1alpha1() else { return Ok(()) };
        let r = R::of(v1);
        for (volume, key) in [(SystemVolume::State, "state"), (SystemVolume::Ephemeral, "ephemeral")] {
            let Some(encryption) = r.encryption(&Path::keys("machine.systemDiskEncryption").key(key))? else {
                continue;
            };
            match view.volumes.iter_mut().find(|v| v.name == volume) {
                Some(doc) => doc.encryption = Some(encryption),
                None => view.volumes.push(VolumeDoc {
                    name: volume,
                    provisioning: Provisioning::default(),
                    xfs: None,
                    encryption: Some(encryption),
                    mount: MountOptions::default(),
                    trim: None,
                    scrub: None,
                }),
            }
        }
        Ok(())
    }

    /// Talos's `V1Alpha1ConflictValidate`: STATE or EPHEMERAL encryption is written in one
    /// place, the `VolumeConfig` or v1alpha1's `machine.systemDiskEncryption`.
    fn refuse_double_system_disk_encryption(&self, view: &BlockView) -> Result<(), ConfigError> {
        let Some(v1) = self.v1alpha1() else { return Ok(()) };
        for (volume, key) in [(SystemVolume::State, "state"), (SystemVolume::Ephemeral, "ephemeral")] {
            let legacy = Path::keys("machine.systemDiskEncryption").key(key);
            let written = v1.value().at(&legacy).is_some_and(|v| !v.is_null());
            if written && view.volume(volume).is_some_and(|v| v.encryption.is_some()) {
                return Err(ConfigError::Invalid {
                    doc: format!("VolumeConfig {}", volume.as_str()),
                    path: "encryption".into(),
                    reason: format!(
                        "system disk encryption for {:?} is configured in both v1alpha1 ({legacy}) and VolumeConfig",
                        volume.as_str()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The `VolumeConfig` documents, checked.
    pub fn volume_configs(&self) -> Result<Vec<VolumeDoc>, ConfigError> {
        Ok(self.block()?.volumes)
    }

    /// The `UserVolumeConfig` documents, checked.
    pub fn user_volume_configs(&self) -> Result<Vec<UserVolumeDoc>, ConfigError> {
        Ok(self.block()?.user_volumes)
    }

    /// The `RawVolumeConfig` documents, checked.
    pub fn raw_volume_configs(&self) -> Result<Vec<RawVolumeDoc>, ConfigError> {
        Ok(self.block()?.raw_volumes)
    }

    /// The `ExistingVolumeConfig` documents, checked.
    pub fn existing_volume_configs(&self) -> Result<Vec<ExistingVolumeDoc>, ConfigError> {
        Ok(self.block()?.existing_volumes)
    }

    /// The `ExternalVolumeConfig` documents, checked.
    pub fn external_volume_configs(&self) -> Result<Vec<ExternalVolumeDoc>, ConfigError> {
        Ok(self.block()?.external_volumes)
    }

    /// The `SwapVolumeConfig` documents, checked.
    pub fn swap_volume_configs(&self) -> Result<Vec<SwapVolumeDoc>, ConfigError> {
        Ok(self.block()?.swap_volumes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{golden, load};

    fn view(text: &str) -> Result<BlockView, ConfigError> {
        load(text).unwrap_or_else(|e| panic!("load: {e}\n{text}")).config.block()
    }

    fn doc(kind: &str, body: &str) -> String {
        format!("apiVersion: v1alpha1\nkind: {kind}\n{body}")
    }

    const V1: &str = "version: v1alpha1\nmachine:\n  type: worker\n";

    #[test]
    fn a_disk_wipe_names_its_disks_by_cel() {
        let text =
            doc("DiskWipeConfig", "name: scratch\ndiskSelector:\n  match: disk.serial == \"talosbox-extra-3\"\n");
        let v = view(&text).unwrap();
        assert_eq!(v.disk_wipes.len(), 1);
        assert_eq!(v.disk_wipes[0].name, "scratch");
        assert_eq!(v.disk_wipes[0].disk_selector.as_str(), "disk.serial == \"talosbox-extra-3\"");
        let sites = v.cel_expressions();
        assert!(sites.iter().any(|s| s.doc == "DiskWipeConfig scratch" && s.path == "diskSelector.match"));
        let unknown = load(&doc("DiskWipeConfig", "name: scratch\ndiskSelector:\n  match: 'true'\nmethod: zeroes\n"));
        assert!(unknown.unwrap_err().to_string().contains("method"));
    }

    #[test]
    fn machine_disks_read_as_talos_reads_them() {
        let text = format!(
            "{V1}  disks:\n    - device: /dev/vdc\n      partitions:\n        - size: 200MiB\n          mountpoint: /var/mnt/a/\n        - size: 104857600\n          mountpoint: /var/lib/b\n        - mountpoint: /var/srv/c\n    - device: /dev/disk/by-id/virtio-x\n      partitions:\n        - mountpoint: /var/mnt/d\n"
        );
        let v = view(&text).unwrap();
        let parts = |d: &UserDisk| d.partitions.iter().map(|p| (p.size, p.mountpoint.clone())).collect::<Vec<_>>();
        assert_eq!(v.user_disks.len(), 2);
        assert_eq!(v.user_disks[0].device, "/dev/vdc");
        assert_eq!(
            parts(&v.user_disks[0]),
            [(200 << 20, "/var/mnt/a".to_string()), (100 << 20, "/var/lib/b".into()), (0, "/var/srv/c".into())]
        );
        assert_eq!(v.user_disks[0].volume_id(3), "/dev/vdc-3");
        assert_eq!(parts(&v.user_disks[1]), [(0, "/var/mnt/d".to_string())]);
        assert!(view(V1).unwrap().user_disks.is_empty());
    }

    #[test]
    fn bad_machine_disks_are_refused_naming_the_field() {
        let disk = |body: &str| format!("{V1}  disks:\n{body}");
        let cases = [
            ("    - partitions:\n        - mountpoint: /var/mnt/a\n", "machine.disks[0].device", "needs its device"),
            ("    - device: vdc\n", "machine.disks[0].device", "not a device path"),
            (
                "    - device: /dev/vdc\n      partitions:\n        - mountpoint: /var/mnt/a\n        - size: 1GiB\n          mountpoint: /var/mnt/b\n",
                "machine.disks[0].partitions[0].size",
                "occupy full disk, but it's not the last partition",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - size: 1GiB\n",
                "machine.disks[0].partitions[0].mountpoint",
                "needs its mount point",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - size: 1 parsec\n          mountpoint: /var/x\n",
                "machine.disks[0].partitions[0].size",
                "not a size",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - size: -1GiB\n          mountpoint: /var/x\n",
                "machine.disks[0].partitions[0].size",
                "negative",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - mountpoint: var/x\n",
                "machine.disks[0].partitions[0].mountpoint",
                "not an absolute path",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - mountpoint: /var/../etc\n",
                "machine.disks[0].partitions[0].mountpoint",
                "not an absolute path",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - mountpoint: /srv/x\n",
                "machine.disks[0].partitions[0].mountpoint",
                "not under /var",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - mountpoint: /var\n",
                "machine.disks[0].partitions[0].mountpoint",
                "not under /var",
            ),
            (
                "    - device: /dev/vdc\n      partitions:\n        - size: 1GiB\n          mountpoint: /var/x\n    - device: /dev/vdd\n      partitions:\n        - mountpoint: /var/x/\n",
                "machine.disks[1].partitions[0].mountpoint",
                "mount point of machine.disks[0].partitions[0].mountpoint already",
            ),
            ("    - device: /dev/vdc\n    - device: /dev/vdc\n", "machine.disks[1].device", "listed already"),
        ];
        for (body, path, reason) in cases {
            let err = view(&disk(body)).unwrap_err().to_string();
            assert!(err.contains(path) && err.contains(reason), "{body}: {err}");
        }
        let clash = format!(
            "{V1}  disks:\n    - device: /dev/vdc\n      partitions:\n        - mountpoint: /var/mnt/data\n---\n{}",
            doc("UserVolumeConfig", "name: data\nprovisioning:\n  diskSelector:\n    match: 'true'\n  minSize: 1GiB\n")
        );
        let err = view(&clash).unwrap_err().to_string();
        assert!(
            err.contains("machine.disks[0].partitions[0].mountpoint") && err.contains("UserVolumeConfig data"),
            "{err}"
        );
    }

    #[test]
    fn sizes_read_as_talos_reads_them() {
        // Talos's own table (`size_test.go`), then go-humanize's units.
        let cases: &[(&str, Size)] = &[
            ("100%", Size::Percent { percent: 100, negative: false }),
            ("33.4%", Size::Percent { percent: 33, negative: false }),
            ("33.4124%", Size::Percent { percent: 33, negative: false }),
            ("-100%", Size::Percent { percent: 100, negative: true }),
            ("-33.4%", Size::Percent { percent: 33, negative: true }),
            ("0%", Size::Percent { percent: 0, negative: false }),
            ("1048576", Size::Bytes(ByteSize { bytes: 1048576, negative: false })),
            ("2.5GiB", Size::Bytes(ByteSize { bytes: 2684354560, negative: false })),
            ("2.5GB", Size::Bytes(ByteSize { bytes: 2500000000, negative: false })),
            ("2.5G", Size::Bytes(ByteSize { bytes: 2500000000, negative: false })),
            ("1MiB", Size::Bytes(ByteSize { bytes: 1048576, negative: false })),
            ("-1048576", Size::Bytes(ByteSize { bytes: 1048576, negative: true })),
            ("-2.5GiB", Size::Bytes(ByteSize { bytes: 2684354560, negative: true })),
            ("-2.5G", Size::Bytes(ByteSize { bytes: 2500000000, negative: true })),
            ("100MB", Size::Bytes(ByteSize { bytes: 100_000_000, negative: false })),
            ("10 gb", Size::Bytes(ByteSize { bytes: 10_000_000_000, negative: false })),
            ("1,000", Size::Bytes(ByteSize { bytes: 1000, negative: false })),
            ("1.5kib", Size::Bytes(ByteSize { bytes: 1536, negative: false })),
            ("2.5TiB", Size::Bytes(ByteSize { bytes: 2748779069440, negative: false })),
            ("1Ei", Size::Bytes(ByteSize { bytes: 1 << 60, negative: false })),
            ("512b", Size::Bytes(ByteSize { bytes: 512, negative: false })),
            (".5K", Size::Bytes(ByteSize { bytes: 500, negative: false })),
        ];
        for (text, want) in cases {
            assert_eq!(Size::try_from(*text).as_ref(), Ok(want), "{text}");
        }
        let percent = Size::try_from("-90%").unwrap();
        assert_eq!(
            (percent.value(), percent.relative_value(), percent.is_relative(), percent.is_negative()),
            (0, Some(90), true, true)
        );
        let bytes = Size::try_from("10GiB").unwrap();
        assert_eq!(
            (bytes.value(), bytes.relative_value(), bytes.is_relative(), bytes.is_negative()),
            (10 << 30, None, false, false)
        );

        let refused: &[(&str, &str)] = &[
            (
                "10 parsecs",
                "\"10 parsecs\" is not a size: unknown unit \"parsecs\" (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB, EB, EiB)",
            ),
            ("GiB", "\"GiB\" is not a size: it must start with a number"),
            ("-", "\"-\" is not a size: it must start with a number"),
            ("--1GiB", "\"--1GiB\" is not a size: it must start with a number"),
            ("1.2.3GiB", "\"1.2.3GiB\" is not a size: it must start with a number"),
            (" 1GiB", "\" 1GiB\" is not a size: it must start with a number"),
            (
                "1e9",
                "\"1e9\" is not a size: unknown unit \"e9\" (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB, EB, EiB)",
            ),
            ("20EiB", "\"20EiB\" is not a size: too large"),
            ("101%", "\"101%\" is not a percentage: it must be between 0 and 100"),
            ("--5%", "\"--5%\" is not a percentage: it must be between 0 and 100"),
            ("NaN%", "\"NaN%\" is not a percentage: it must be between 0 and 100"),
            ("10%x", "\"10%x\" is not a percentage: it must end with '%'"),
            ("%", "\"%\" is not a percentage: not a number"),
            ("ten%", "\"ten%\" is not a percentage: not a number"),
        ];
        for (text, want) in refused {
            assert_eq!(Size::try_from(*text).unwrap_err(), *want, "{text}");
        }
        // A minimum is never a percentage.
        assert!(ByteSize::try_from("50%").unwrap_err().contains("unknown unit \"%\""));
    }

    #[test]
    fn durations_read_as_go_reads_them() {
        let s = 1_000_000_000i128;
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("-0", 0),
            ("168h0m0s", 168 * 3600 * s),
            ("1.5h", 5400 * s),
            ("1h30m", 5400 * s),
            ("120s", 120 * s),
            ("+10s", 10 * s),
            ("-30s", -30 * s),
            ("500ms", s / 2),
            ("2us", 2000),
            ("3\u{b5}s", 3000),
            ("3\u{3bc}s", 3000),
            ("7ns", 7),
            (".5s", s / 2),
            ("1.s", s),
            ("2562047h47m16.854775807s", i64::MAX as i128),
            ("-2562047h47m16.854775808s", i64::MIN as i128),
        ];
        for (text, want) in cases {
            assert_eq!(go_duration(text), Ok(*want), "{text}");
        }
        for bad in ["", "-", "h", "1d", "1.5", "100", ".s", "1h 30m", "2562047h47m16.854775808s"] {
            assert!(go_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            go_duration("100").unwrap_err(),
            "\"100\" is not a duration: a unit (ns, us, ms, s, m, h) is missing"
        );
        assert_eq!(go_duration("1d").unwrap_err(), "\"1d\" is not a duration (like 168h, 30m or 90s)");
    }

    /// Every Talos example loads, reads, renders and loads again to the same documents; the
    /// typed view of each is the golden `view.txt`.
    #[test]
    fn talos_examples_read() {
        let files: Vec<String> = golden::files("block").into_iter().filter(|f| f.ends_with(".yaml")).collect();
        assert!(files.len() >= 20, "{files:?}");
        let mut rendered = String::new();
        for file in &files {
            let text = golden::read(&format!("block/{file}"));
            let loaded = load(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(loaded.warnings.is_empty(), "{file}: {:?}", loaded.warnings);
            let view = loaded.config.block().unwrap_or_else(|e| panic!("{file}: {e}"));
            let again = load(&loaded.config.to_yaml()).unwrap_or_else(|e| panic!("{file}: reload: {e}")).config;
            assert_eq!(again, loaded.config, "{file}: round trip");
            assert_eq!(again.block().unwrap(), view, "{file}: round trip of the view");
            let count = view.volumes.len()
                + view.user_volumes.len()
                + view.raw_volumes.len()
                + view.existing_volumes.len()
                + view.external_volumes.len()
                + view.swap_volumes.len();
            assert_eq!(count, loaded.config.documents().len(), "{file}: a document was not read");
            rendered.push_str(&format!("=== {file}\n"));
            let docs = view
                .volumes
                .iter()
                .map(|d| format!("{d:#?}"))
                .chain(view.user_volumes.iter().map(|d| format!("{d:#?}")))
                .chain(view.raw_volumes.iter().map(|d| format!("{d:#?}")))
                .chain(view.existing_volumes.iter().map(|d| format!("{d:#?}")))
                .chain(view.external_volumes.iter().map(|d| format!("{d:#?}")))
                .chain(view.swap_volumes.iter().map(|d| format!("{d:#?}")));
            for d in docs {
                rendered.push_str(&d);
                rendered.push('\n');
            }
        }
        assert!(!rendered.contains("topsecret") && !rendered.contains("imagesecret"), "a secret printed");
        golden::check("block/view.txt", &rendered);
    }

    #[test]
    fn talos_examples_mean_what_talos_says() {
        let read = |file: &str| {
            let text = golden::read(&format!("block/{file}"));
            load(&text).unwrap().config.block().unwrap()
        };
        let state = read("volumeconfig_state.yaml");
        let v = state.volume(SystemVolume::State).unwrap();
        let enc = v.encryption.as_ref().unwrap();
        assert_eq!(enc.provider, EncryptionProvider::Luks2);
        assert_eq!(enc.keys.len(), 2);
        let tpm = TpmKey { check_secureboot_status_on_enroll: false, pcrs: vec![SECURE_BOOT_STATE_PCR] };
        assert_eq!(enc.keys[0], EncryptionKey { slot: 0, kind: KeyKind::Tpm(tpm.clone()), lock_to_state: false });
        assert_eq!(tpm.pub_key_pcrs(), [UKI_PCR]);
        let KeyKind::Static { passphrase } = &enc.keys[1].kind else { panic!("not static: {:?}", enc.keys[1]) };
        assert_eq!((enc.keys[1].slot, passphrase.expose()), (1, "topsecret"));
        assert_eq!(format!("{passphrase:?}"), "Secret(<redacted>)");
        assert!(state.volume(SystemVolume::Ephemeral).is_none());

        let pcrs = |file: &str| {
            let v = read(file);
            let KeyKind::Tpm(t) = &v.volumes[0].encryption.as_ref().unwrap().keys[0].kind else { panic!("{file}") };
            t.pcrs.clone()
        };
        assert_eq!(pcrs("volumeconfig_tpm_encryption_no_options.yaml"), [7]);
        assert_eq!(pcrs("volumeconfig_tpm_encryption_with_pcr_settings.yaml"), [0, 7]);
        assert_eq!(pcrs("volumeconfig_tpm_encryption_with_pcrs_disabled.yaml"), Vec::<u8>::new());

        let negative = read("volumeconfig_negativemaxsize.yaml");
        let p = &negative.volumes[0].provisioning;
        assert_eq!(p.min_size, Some(ByteSize { bytes: 10 << 30, negative: false }));
        assert_eq!(p.max_size, Some(Size::Bytes(ByteSize { bytes: 10 << 30, negative: true })));
        assert!(p.is_requested() && p.grow.is_none() && p.disk_selector.is_none());
        let empty = read("volumeconfig_empty.yaml");
        assert_eq!(empty.volumes[0].name, SystemVolume::Ephemeral);
        assert!(!empty.volumes[0].provisioning.is_requested());
        assert_eq!(empty.volumes[0].mount, MountOptions { read_only: false, disable_access_time: false, secure: true });
        let xfs = read("volumeconfig_xfs.yaml");
        assert_eq!(xfs.volumes[0].xfs, Some(XfsOptions { min_allocation_group_size: Some(128 << 30) }));

        let user = read("uservolumeconfig_diskselector.yaml");
        let u = &user.user_volumes[0];
        assert_eq!(
            (u.name.as_str(), u.volume_type, u.filesystem.kind),
            ("ceph-data", UserVolumeType::Partition, FilesystemType::Xfs)
        );
        assert_eq!((u.volume_id(), u.mount_path()), ("u-ceph-data".to_string(), "/var/mnt/ceph-data".to_string()));
        let selector = u.provisioning.disk_selector.as_ref().unwrap();
        assert_eq!(
            (selector.as_str(), selector.env()),
            ("disk.transport == \"nvme\" && !system_disk", CelEnv::DiskLocator)
        );
        assert_eq!(u.provisioning.max_size.map(|s| s.value()), Some(100 << 30));
        let quota = read("uservolumeconfig_prjquota.yaml");
        assert!(quota.user_volumes[0].filesystem.project_quota_support);

        let raw = read("rawvolumeconfig_encrypted.yaml");
        let r = &raw.raw_volumes[0];
        assert_eq!(r.volume_id(), "r-secret-store");
        let enc = r.encryption.as_ref().unwrap();
        assert_eq!((enc.cipher.as_deref(), enc.allow_discards), (Some("aes-xts-plain64"), true));
        let existing = read("existingvolumeconfig_selector.yaml");
        let e = &existing.existing_volumes[0];
        assert_eq!((e.volume_id(), e.volume_selector.env()), ("e-my-lovely-volume".to_string(), CelEnv::VolumeLocator));
        let external = read("externalvolumeconfig_basicvirtiofs.yaml");
        let x = &external.external_volumes[0];
        assert_eq!(
            (x.volume_id(), x.virtiofs_tag.as_str(), x.mount_path()),
            ("x-my-virtiofs-volume".into(), "Data", "/var/mnt/my-virtiofs-volume".into())
        );
        let swap = read("swapvolumeconfig_diskselector.yaml");
        assert_eq!(swap.swap_volumes[0].volume_id(), "s-big");

        let promoted = read("patch-dedicated-system-volumes-controlplane.yaml");
        let kubelet = promoted.volume(SystemVolume::Kubelet).unwrap();
        assert!(!kubelet.mount.secure && kubelet.provisioning.is_requested());
        assert!(SystemVolume::Kubelet.is_promotable() && !SystemVolume::State.is_promotable());
    }

    #[test]
    fn every_key_kind_and_option_reads() {
        let text = doc(
            "UserVolumeConfig",
            "name: vault\nvolumeType: disk\nprovisioning:\n  diskSelector:\n    match: disk.serial == \"X1\"\n\
             filesystem:\n  type: ext4\nencryption:\n  provider: luks2\n  keySize: 512\n  blockSize: 4096\n\
             \x20 options: [no_read_workqueue, no_write_workqueue]\n  keys:\n\
             \x20   - slot: 3\n      nodeID: {}\n      lockToState: true\n\
             \x20   - slot: 4\n      kms:\n        endpoint: https://kms.example:4443\n\
             \x20   - slot: 5\n      tpm:\n        checkSecurebootStatusOnEnroll: true\n        options: {}\n\
             \x20   - slot: 6\n      static:\n        passphrase: first\n      tpm: {}\n\
             mount:\n  disableAccessTime: true\n  secure: false\ntrim:\n  enabled: true\n  interval: 24h\n\
             scrub:\n  enabled: false\n  interval: 0s\n",
        );
        let v = view(&text).unwrap();
        let u = &v.user_volumes[0];
        assert_eq!((u.volume_type, u.filesystem.kind), (UserVolumeType::Disk, FilesystemType::Ext4));
        assert_eq!(u.mount, MountOptions { read_only: false, disable_access_time: true, secure: false });
        assert_eq!(u.trim, Some(Periodic { enabled: Some(true), interval: Some(Duration::from_secs(86400)) }));
        assert_eq!(u.scrub, Some(Periodic { enabled: Some(false), interval: None }));
        let enc = u.encryption.as_ref().unwrap();
        assert_eq!((enc.key_size, enc.block_size, enc.cipher.as_deref()), (Some(512), Some(4096), None));
        assert_eq!(enc.options, ["no_read_workqueue", "no_write_workqueue"]);
        assert_eq!((enc.keys[0].slot, &enc.keys[0].kind, enc.keys[0].lock_to_state), (3, &KeyKind::NodeId, true));
        let KeyKind::Kms { endpoint } = &enc.keys[1].kind else { panic!("{:?}", enc.keys[1]) };
        assert_eq!(endpoint.expose(), "https://kms.example:4443");
        // `options: {}` names no PCR: the key is bound to none.
        assert_eq!(enc.keys[2].kind, KeyKind::Tpm(TpmKey { check_secureboot_status_on_enroll: true, pcrs: vec![] }));
        // Two types in one key: the first of Talos's order wins.
        assert!(matches!(&enc.keys[3].kind, KeyKind::Static { passphrase } if passphrase.expose() == "first"));
        assert!(!format!("{v:?}").contains("kms.example"), "an endpoint printed");

        let directory =
            view(&doc("UserVolumeConfig", "name: cache\nvolumeType: directory\nmount:\n  secure: false\n")).unwrap();
        let d = &directory.user_volumes[0];
        assert_eq!((d.volume_type, d.mount.secure, d.encryption.is_none()), (UserVolumeType::Directory, false, true));
        // A provider-less encryption block with nothing but a cipher says nothing (Talos's IsZero).
        let quiet = view(&doc("VolumeConfig", "name: EPHEMERAL\nencryption:\n  cipher: aes-xts-plain64\n")).unwrap();
        assert!(quiet.volumes[0].encryption.is_none());
        let existing = view(&doc(
            "ExistingVolumeConfig",
            "name: a-name-longer-than-any-partition-label-would-allow\ndiscovery:\n  volumeSelector:\n    match: volume.label == \"x\"\nmount:\n  readOnly: true\n",
        ))
        .unwrap();
        assert!(existing.existing_volumes[0].mount.read_only && existing.existing_volumes[0].mount.secure);
    }

    #[test]
    fn bad_documents_name_their_field() {
        let user = |body: &str| doc("UserVolumeConfig", &format!("name: data\n{body}"));
        let sel = "provisioning:\n  diskSelector:\n    match: '!system_disk'\n  minSize: 1GiB\n";
        let with_sel = |body: &str| user(&format!("{sel}{body}"));
        let long = "x".repeat(35);
        let keys = |keys: &str| format!("encryption:\n  provider: luks2\n  keys:\n{keys}");
        let cases: Vec<(String, String)> = vec![
            (doc("UserVolumeConfig", "volumeType: directory\n"), "UserVolumeConfig: name: name is required".into()),
            (
                doc("UserVolumeConfig", &format!("name: {long}\nvolumeType: directory\n")),
                format!("UserVolumeConfig {long}: name: name must be between 1 and 34 characters long (its partition label u-{long} must fit in 36)"),
            ),
            (
                doc("UserVolumeConfig", "name: some/name\nvolumeType: directory\n"),
                format!("UserVolumeConfig some/name: name: {ALLOWED_NAME}"),
            ),
            (
                doc("UserVolumeConfig", "name: data_1\nvolumeType: directory\n"),
                format!("UserVolumeConfig data_1: name: {ALLOWED_NAME}"),
            ),
            (
                doc("VolumeConfig", "name: wrong\n"),
                "VolumeConfig wrong: name: only [\"STATE\" \"EPHEMERAL\" \"IMAGECACHE\" \"ETCD\" \"CRI\" \"KUBELET\" \"LOG\"] volumes are supported".into(),
            ),
            (
                doc("VolumeConfig", "name: ephemeral\n"),
                "VolumeConfig ephemeral: name: only [\"STATE\" \"EPHEMERAL\" \"IMAGECACHE\" \"ETCD\" \"CRI\" \"KUBELET\" \"LOG\"] volumes are supported".into(),
            ),
            (
                doc("VolumeConfig", "name: IMAGECACHE\nfilesystem:\n  xfs:\n    minAllocationGroupSize: 128GiB\n"),
                "VolumeConfig IMAGECACHE: filesystem: filesystem config is not allowed for the \"IMAGECACHE\" volume".into(),
            ),
            (
                doc("VolumeConfig", "name: IMAGECACHE\nmount:\n  secure: true\n"),
                "VolumeConfig IMAGECACHE: mount: mount config is not allowed for the \"IMAGECACHE\" volume".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  minSize: 2.5TiB\n  maxSize: 10GiB\n"),
                "VolumeConfig EPHEMERAL: provisioning.minSize: min size is greater than max size".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  minSize: -10GiB\n  maxSize: 10GiB\n"),
                "VolumeConfig EPHEMERAL: provisioning.minSize: min size cannot be negative".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  maxSize: 10 parsecs\n"),
                "VolumeConfig EPHEMERAL: provisioning.maxSize: \"10 parsecs\" is not a size: unknown unit \"parsecs\" (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB, EB, EiB)".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  maxSize: 150%\n"),
                "VolumeConfig EPHEMERAL: provisioning.maxSize: \"150%\" is not a percentage: it must be between 0 and 100".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  minSize: 10%\n"),
                "VolumeConfig EPHEMERAL: provisioning.minSize: \"10%\" is not a size: unknown unit \"%\" (B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB, EB, EiB)".into(),
            ),
            (
                doc("VolumeConfig", "name: STATE\nprovisioning:\n  minSize: 2.5GiB\n"),
                "VolumeConfig STATE: provisioning: provisioning config is not allowed for the \"STATE\" volume".into(),
            ),
            (
                doc("VolumeConfig", &format!("name: STATE\n{}", keys("    - slot: 0\n      nodeID: {}\n    - slot: 1\n      tpm: {}\n      lockToState: true\n"))),
                "VolumeConfig STATE: encryption.keys[1].lockToState: state-locked key is not allowed for the \"STATE\" volume".into(),
            ),
            (
                doc("VolumeConfig", &format!("name: STATE\n{}", keys("    - tpm:\n        options:\n          pcrs: [7, 24, 25]\n"))),
                "VolumeConfig STATE: encryption.keys[0].tpm.options.pcrs[1]: TPM PCR 24 is out of range (0-23)".into(),
            ),
            (
                doc("VolumeConfig", &format!("name: STATE\n{}", keys("    - tpm:\n        options:\n          pcrs: [-1]\n"))),
                "VolumeConfig STATE: encryption.keys[0].tpm.options.pcrs[0]: TPM PCR -1 is out of range (0-23)".into(),
            ),
            (
                doc("VolumeConfig", "name: STATE\nmount:\n  disableAccessTime: false\n"),
                "VolumeConfig STATE: mount: mount config is not allowed for the \"STATE\" volume".into(),
            ),
            (
                doc("VolumeConfig", "name: ETCD\nmount:\n  disableAccessTime: true\n"),
                "VolumeConfig ETCD: mount: mount config for the \"ETCD\" volume is only supported when it is provisioned onto a dedicated partition".into(),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nfilesystem:\n  xfs:\n    minAllocationGroupSize: -1GiB\n"),
                "VolumeConfig EPHEMERAL: filesystem.xfs.minAllocationGroupSize: the minimum allocation group size cannot be negative".into(),
            ),
            (user("provisioning:\n  minSize: 1GiB\n"), "UserVolumeConfig data: provisioning.diskSelector.match: disk selector is required".into()),
            (
                user("provisioning:\n  diskSelector:\n    match: '!system_disk'\n"),
                "UserVolumeConfig data: provisioning: min size or max size is required".into(),
            ),
            (
                user("volumeType: disk\nprovisioning:\n  diskSelector:\n    match: '!system_disk'\n  grow: true\n"),
                "UserVolumeConfig data: provisioning.grow: min size, max size and grow are not supported".into(),
            ),
            (with_sel("volumeType: disk\n"), "UserVolumeConfig data: provisioning.minSize: min size, max size and grow are not supported".into()),
            (
                user("volumeType: directory\nprovisioning:\n  maxSize: 1GiB\n"),
                "UserVolumeConfig data: provisioning: provisioning spec is invalid for volumeType directory".into(),
            ),
            (
                user("volumeType: directory\nencryption:\n  provider: luks2\n"),
                "UserVolumeConfig data: encryption: encryption spec is invalid for volumeType directory".into(),
            ),
            (
                user("volumeType: directory\nfilesystem:\n  projectQuotaSupport: false\n"),
                "UserVolumeConfig data: filesystem: filesystem spec is invalid for volumeType directory".into(),
            ),
            (
                user("volumeType: directory\nmount:\n  disableAccessTime: true\n"),
                "UserVolumeConfig data: mount.disableAccessTime: mount.disableAccessTime is invalid for volumeType directory".into(),
            ),
            (
                with_sel("filesystem:\n  type: btrfs\n"),
                "UserVolumeConfig data: filesystem.type: unsupported filesystem type: btrfs (talosbox formats xfs and ext4)".into(),
            ),
            (
                with_sel("filesystem:\n  type: ext4\n  projectQuotaSupport: true\n"),
                "UserVolumeConfig data: filesystem.projectQuotaSupport: project quota support is only available for xfs filesystem".into(),
            ),
            (
                with_sel("filesystem:\n  type: ext4\n  xfs: {}\n"),
                "UserVolumeConfig data: filesystem.xfs: xfs options are only available for xfs filesystem".into(),
            ),
            (
                with_sel("encryption:\n  keys:\n    - slot: 0\n      nodeID: {}\n"),
                "UserVolumeConfig data: encryption.provider: unsupported encryption provider: none (luks2 is the one provider)".into(),
            ),
            (with_sel("encryption:\n  provider: luks2\n"), "UserVolumeConfig data: encryption.keys: encryption keys are required".into()),
            (
                with_sel(&keys("    - slot: 0\n")),
                "UserVolumeConfig data: encryption.keys[0]: at least one encryption key type must be specified for slot 0 (static, nodeID, kms, tpm or recovery)".into(),
            ),
            (
                with_sel(&keys("    - slot: 1\n      nodeID: {}\n    - slot: 1\n      tpm: {}\n")),
                "UserVolumeConfig data: encryption.keys[1].slot: duplicate key slot 1".into(),
            ),
            (
                with_sel(&keys("    - nodeID: {}\n    - tpm: {}\n")),
                "UserVolumeConfig data: encryption.keys[1].slot: duplicate key slot 0".into(),
            ),
            (with_sel(&keys("    - slot: -1\n      nodeID: {}\n")), "UserVolumeConfig data: encryption.keys[0].slot: -1 is out of range".into()),
            (with_sel("trim:\n  interval: -1h\n"), "UserVolumeConfig data: trim.interval: trim interval cannot be negative".into()),
            (with_sel("scrub:\n  interval: 5s\n"), "UserVolumeConfig data: scrub.interval: scrub interval: minimum value is 10s".into()),
            (
                with_sel("scrub:\n  interval: 100\n"),
                "UserVolumeConfig data: scrub.interval: \"100\" is not a duration: a unit (ns, us, ms, s, m, h) is missing".into(),
            ),
            (doc("DiskWipeConfig", "name: scratch\n"), "DiskWipeConfig scratch: diskSelector.match: a disk selector is required: the wipe names its disks".into()),
            (
                doc("DiskWipeConfig", "name: scr atch\ndiskSelector:\n  match: 'true'\n"),
                format!("DiskWipeConfig scr atch: name: {ALLOWED_NAME}"),
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nscrub:\n  interval: 1w\n"),
                "VolumeConfig EPHEMERAL: scrub.interval: \"1w\" is not a duration (like 168h, 30m or 90s)".into(),
            ),
            (
                doc("ExistingVolumeConfig", "name: old\ndiscovery: {}\n"),
                "ExistingVolumeConfig old: discovery.volumeSelector.match: volume selector is required".into(),
            ),
            (doc("ExistingVolumeConfig", "discovery: {}\n"), "ExistingVolumeConfig: name: name is required".into()),
            (
                doc("ExistingVolumeConfig", "name: old\ndiscovery:\n  volumeSelector:\n    match: 'true'\ntrim:\n  interval: -1s\n"),
                "ExistingVolumeConfig old: trim.interval: trim interval cannot be negative".into(),
            ),
            (doc("RawVolumeConfig", "name: r1\n"), "RawVolumeConfig r1: provisioning.diskSelector.match: disk selector is required".into()),
            (
                doc("RawVolumeConfig", "name: r1\nprovisioning:\n  diskSelector:\n    match: 'true'\n"),
                "RawVolumeConfig r1: provisioning: min size or max size is required".into(),
            ),
            (
                doc("SwapVolumeConfig", &format!("name: {long}\n")),
                format!("SwapVolumeConfig {long}: name: name must be between 1 and 34 characters long (its partition label s-{long} must fit in 36)"),
            ),
            (
                doc("SwapVolumeConfig", "name: swap\nprovisioning:\n  diskSelector:\n    match: 'true'\n  maxSize: 1GiB\nencryption:\n  provider: luks2\n"),
                "SwapVolumeConfig swap: encryption.keys: encryption keys are required".into(),
            ),
            (
                doc("ExternalVolumeConfig", "name: share\nmount:\n  virtiofs:\n    tag: t\n"),
                "ExternalVolumeConfig share: filesystemType: invalid filesystem type: none (virtiofs is the one type)".into(),
            ),
            (
                doc("ExternalVolumeConfig", "name: share\nfilesystemType: virtiofs\n"),
                "ExternalVolumeConfig share: mount.virtiofs: virtiofs mount spec is required".into(),
            ),
            (
                doc("ExternalVolumeConfig", "name: share\nfilesystemType: virtiofs\nmount:\n  virtiofs: {}\n"),
                "ExternalVolumeConfig share: mount.virtiofs.tag: virtiofs tag is required".into(),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(view(&text).unwrap_err().to_string(), want, "{text}");
        }
    }

    #[test]
    fn unknown_and_mistyped_fields_are_refused_at_load() {
        let cases: &[(&str, &str)] = &[
            (
                "name: d\nencryption:\n  provider: luks2\n  keys:\n    - tpm:\n        pcrs: [7]\n",
                "UserVolumeConfig d: encryption.keys[0].tpm.pcrs: unknown field (line 8)",
            ),
            (
                "name: d\nprovisioning:\n  diskSelector:\n    expr: x\n",
                "UserVolumeConfig d: provisioning.diskSelector.expr: unknown field (line 6)",
            ),
            (
                "name: d\nvolumeType: tmpfs\n",
                "UserVolumeConfig d: volumeType: \"tmpfs\" is not one of directory, disk, partition (line 4)",
            ),
            (
                "name: d\nencryption:\n  provider: luks1\n",
                "UserVolumeConfig d: encryption.provider: \"luks1\" is not one of luks2 (line 5)",
            ),
            (
                "name: d\nprovisioning:\n  grow: sometimes\n",
                "UserVolumeConfig d: provisioning.grow: expected boolean, got string \"sometimes\" (line 5)",
            ),
            ("name: d\nmount:\n  readOnly: true\n", "UserVolumeConfig d: mount.readOnly: unknown field (line 5)"),
        ];
        for (body, want) in cases {
            let err = load(&doc("UserVolumeConfig", body)).unwrap_err().to_string();
            assert_eq!(err, *want, "{body}");
        }
    }

    #[test]
    fn rules_across_documents() {
        let user = doc("UserVolumeConfig", "name: data\nvolumeType: directory\n");
        let existing = doc(
            "ExistingVolumeConfig",
            "name: data\ndiscovery:\n  volumeSelector:\n    match: volume.label == \"data\"\n",
        );
        let both = format!("{user}---\n{existing}");
        assert_eq!(
            view(&both).unwrap_err().to_string(),
            "ExistingVolumeConfig data: name: conflicts with UserVolumeConfig data: user and existing volumes share names (both mount at /var/mnt/data)"
        );
        let reversed = format!("{existing}---\n{user}");
        assert_eq!(
            view(&reversed).unwrap_err().to_string(),
            "UserVolumeConfig data: name: conflicts with ExistingVolumeConfig data: user and existing volumes share names (both mount at /var/mnt/data)"
        );
        // Different kinds with other prefixes may share a name, as in Talos.
        let raw =
            doc("RawVolumeConfig", "name: data\nprovisioning:\n  diskSelector:\n    match: 'true'\n  minSize: 1GiB\n");
        let fine = view(&format!("{user}---\n{raw}")).unwrap();
        assert_eq!(
            (fine.user_volumes[0].volume_id(), fine.raw_volumes[0].volume_id()),
            ("u-data".into(), "r-data".into())
        );
        // Two documents of one kind and name are refused when loading.
        let twice = format!("{user}---\n{user}");
        assert_eq!(
            load(&twice).unwrap_err().to_string(),
            "UserVolumeConfig data: duplicate document (line 6; first at line 1)"
        );

        let legacy = "version: v1alpha1\nmachine:\n  type: worker\n  systemDiskEncryption:\n    state:\n      provider: luks2\n      keys:\n        - slot: 0\n          nodeID: {}\n";
        let state = doc("VolumeConfig", "name: STATE\nencryption:\n  provider: luks2\n  keys:\n    - tpm: {}\n");
        assert_eq!(
            view(&format!("{legacy}---\n{state}")).unwrap_err().to_string(),
            "VolumeConfig STATE: encryption: system disk encryption for \"STATE\" is configured in both v1alpha1 (machine.systemDiskEncryption.state) and VolumeConfig"
        );
        // The legacy setting of one volume does not bar the other's document.
        let ephemeral =
            doc("VolumeConfig", "name: EPHEMERAL\nencryption:\n  provider: luks2\n  keys:\n    - nodeID: {}\n");
        assert!(view(&format!("{legacy}---\n{ephemeral}")).is_ok());
        // Nor does a STATE document that does not encrypt.
        assert!(view(&format!("{legacy}---\n{}", doc("VolumeConfig", "name: STATE\n"))).is_ok());
    }

    #[test]
    fn cel_expressions_are_listed_with_their_place() {
        let text = [
            doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  diskSelector:\n    match: system_disk\n"),
            doc("VolumeConfig", "name: STATE\n"),
            doc(
                "UserVolumeConfig",
                "name: data\nprovisioning:\n  diskSelector:\n    match: disk.rotational\n  maxSize: 1GiB\n",
            ),
            doc(
                "ExistingVolumeConfig",
                "name: old\ndiscovery:\n  volumeSelector:\n    match: volume.label == \"old\"\n",
            ),
            doc(
                "SwapVolumeConfig",
                "name: sw\nprovisioning:\n  diskSelector:\n    match: '!system_disk'\n  maxSize: 1GiB\n",
            ),
        ]
        .join("---\n");
        let v = view(&text).unwrap();
        let sites: Vec<(String, String, &str, CelEnv)> = v
            .cel_expressions()
            .into_iter()
            .map(|s| (s.doc, s.path, s.expression.as_str(), s.expression.env()))
            .collect();
        let disk = "provisioning.diskSelector.match".to_string();
        assert_eq!(
            sites,
            [
                ("VolumeConfig EPHEMERAL".to_string(), disk.clone(), "system_disk", CelEnv::DiskLocator),
                ("UserVolumeConfig data".to_string(), disk.clone(), "disk.rotational", CelEnv::DiskLocator),
                (
                    "ExistingVolumeConfig old".to_string(),
                    "discovery.volumeSelector.match".to_string(),
                    "volume.label == \"old\"",
                    CelEnv::VolumeLocator
                ),
                ("SwapVolumeConfig sw".to_string(), disk, "!system_disk", CelEnv::DiskLocator),
            ]
        );
    }

    #[test]
    fn a_bad_selector_is_refused_at_load_with_its_place() {
        let sel = |kind: &str, name: &str, expr: &str| {
            doc(kind, &format!("name: {name}\nprovisioning:\n  diskSelector:\n    match: '{expr}'\n  maxSize: 1GiB\n"))
        };
        let cases: Vec<(String, &str, &str)> = vec![
            (
                sel("UserVolumeConfig", "data", "disk.size >"),
                "UserVolumeConfig data",
                "provisioning.diskSelector.match",
            ),
            (
                sel("RawVolumeConfig", "raw", "disk.nosuchfield"),
                "RawVolumeConfig raw",
                "provisioning.diskSelector.match",
            ),
            (sel("SwapVolumeConfig", "swap", "disk.size"), "SwapVolumeConfig swap", "provisioning.diskSelector.match"),
            (
                sel("UserVolumeConfig", "data", "volume.partition_label == \"x\""),
                "UserVolumeConfig data",
                "provisioning.diskSelector.match",
            ),
            (
                doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  diskSelector:\n    match: 'disk.size > 10'\n"),
                "VolumeConfig EPHEMERAL",
                "provisioning.diskSelector.match",
            ),
            (
                doc("ExistingVolumeConfig", "name: old\ndiscovery:\n  volumeSelector:\n    match: 'system_disk'\n"),
                "ExistingVolumeConfig old",
                "discovery.volumeSelector.match",
            ),
        ];
        for (text, want_doc, want_path) in cases {
            match view(&text) {
                Err(ConfigError::Invalid { doc, path, reason }) => {
                    assert_eq!((doc.as_str(), path.as_str()), (want_doc, want_path), "{text}");
                    assert!(reason.starts_with("CEL expression "), "{reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // The message as a user reads it.
        let err = view(&sel("UserVolumeConfig", "data", "disk.nosuchfield")).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "UserVolumeConfig data: provisioning.diskSelector.match: CEL expression \"disk.nosuchfield\": "
            ),
            "{err}"
        );
        assert!(err.contains("nosuchfield"), "{err}");
        // What compiles is kept as written.
        let ok = view(&sel("UserVolumeConfig", "data", "!system_disk && disk.size > 10u * GiB")).unwrap();
        assert_eq!(
            ok.user_volumes[0].provisioning.disk_selector.as_ref().unwrap().as_str(),
            "!system_disk && disk.size > 10u * GiB"
        );
    }

    #[test]
    fn accessors_and_defaults() {
        let cfg = load("version: v1alpha1\nmachine:\n  type: worker\n").unwrap().config;
        assert_eq!(cfg.block().unwrap(), BlockView::default());
        let text = [
            doc("VolumeConfig", "name: EPHEMERAL\n"),
            doc("UserVolumeConfig", "name: u\nvolumeType: directory\n"),
            doc("RawVolumeConfig", "name: r\nprovisioning:\n  diskSelector:\n    match: 'true'\n  maxSize: 1GiB\n"),
            doc("ExistingVolumeConfig", "name: e\ndiscovery:\n  volumeSelector:\n    match: 'true'\n"),
            doc("ExternalVolumeConfig", "name: x\nfilesystemType: virtiofs\nmount:\n  virtiofs:\n    tag: t\n"),
            doc("SwapVolumeConfig", "name: s\nprovisioning:\n  diskSelector:\n    match: 'true'\n  maxSize: 1GiB\n"),
        ]
        .join("---\n");
        let cfg = load(&text).unwrap().config;
        assert_eq!(cfg.volume_configs().unwrap()[0].name, SystemVolume::Ephemeral);
        assert_eq!(cfg.user_volume_configs().unwrap()[0].name, "u");
        assert_eq!(cfg.raw_volume_configs().unwrap()[0].name, "r");
        assert_eq!(cfg.existing_volume_configs().unwrap()[0].name, "e");
        assert_eq!(cfg.external_volume_configs().unwrap()[0].name, "x");
        assert_eq!(cfg.swap_volume_configs().unwrap()[0].name, "s");
        for v in SystemVolume::ALL {
            assert_eq!(SystemVolume::try_from(v.as_str()), Ok(v));
        }
        assert_eq!(FilesystemType::Ext4.as_str(), "ext4");
        assert_eq!(Filesystem::default().kind, FilesystemType::Xfs);
    }
}
