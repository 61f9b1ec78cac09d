//! `EncryptionSaltController`: once STATE is mounted, the node's disk encryption salt is read
//! from `encryption-salt.yaml` there, or made (32 random bytes) and written there the first
//! time, and published as `EncryptionSalt` (`secrets`, id `salt`) for the `lockToState` keys
//! of the other volumes. The salt stays published when STATE is later unmounted: what opened
//! with it stays open, and it is the same salt on the next mount.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::controllers::block::volume_config::STATE;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{self as blk, MountStatus};
use crate::resources::secrets::{self as sec, EncryptionSalt};

/// Talos's `constants.EncryptionSaltFilename`, in STATE's root.
pub const SALT_FILE: &str = "encryption-salt.yaml";

/// The file's document: Talos's `EncryptionSaltSpec` as YAML.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SaltFile {
    #[serde(with = "crate::block::luks2::b64")]
    disk_salt: Vec<u8>,
}

#[derive(Default)]
pub struct EncryptionSaltController {
    established: bool,
}

impl EncryptionSaltController {
    pub fn new() -> Self {
        Self::default()
    }
}

/// The salt in `root`, made and written there if there is none. A file that is there but
/// unreadable is an error, never replaced: the volumes locked with it would be lost.
pub fn load_or_create(root: &Path) -> Result<EncryptionSalt, String> {
    let path = root.join(SALT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let file: SaltFile =
                serde_saphyr::from_str(&text).map_err(|e| format!("reading {}: {e}", path.display()))?;
            if file.disk_salt.len() != EncryptionSalt::SIZE {
                return Err(format!(
                    "{}: diskSalt is {} bytes, not {}",
                    path.display(),
                    file.disk_salt.len(),
                    EncryptionSalt::SIZE
                ));
            }
            Ok(EncryptionSalt { disk_salt: file.disk_salt })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut salt = vec![0u8; EncryptionSalt::SIZE];
            getrandom::fill(&mut salt).map_err(|e| format!("making the encryption salt: {e}"))?;
            let text = serde_saphyr::to_string(&SaltFile { disk_salt: salt.clone() })
                .map_err(|e| format!("encoding the encryption salt: {e}"))?;
            write_durably(&path, text.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
            Ok(EncryptionSalt { disk_salt: salt })
        }
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// Writes `bytes` to `path` by a synced temporary file renamed over it, then syncs the
/// directory: a power cut leaves the old file or the new one, never half of one.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let partial: PathBuf = path.with_extension("partial");
    let mut f = crate::pki::open_private(&partial)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&partial, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A fingerprint of the salt for the console (as Talos logs one): HMAC-SHA256 keyed by the
/// salt over a fixed text, so the salt itself is never shown.
pub fn fingerprint(salt: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, salt);
    let tag = ring::hmac::sign(&key, b"encryption salt checksum");
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait::async_trait]
impl Controller for EncryptionSaltController {
    fn name(&self) -> String {
        "EncryptionSaltController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<MountStatus>(blk::NAMESPACE).with_id(STATE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<EncryptionSalt>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        if self.established {
            return Ok(());
        }
        let Some(mount) = ctx.get::<MountStatus>(blk::NAMESPACE, STATE)? else {
            return Ok(());
        };
        if !mount.is_running() || mount.spec().target.is_empty() {
            return Ok(());
        }
        let root = PathBuf::from(&mount.spec().target);
        match ctx.blocking("establishing the encryption salt", move || load_or_create(&root)).await? {
            Ok(salt) => {
                crate::kernel::console::line(&format!(
                    "encryption salt established (checksum {})",
                    fingerprint(&salt.disk_salt)
                ));
                ctx.apply(sec::NAMESPACE, EncryptionSalt::ID, salt)?;
                self.established = true;
            }
            Err(e) => {
                crate::kernel::console::line(&format!("encryption salt: {e}; retrying in 30s"));
                ctx.requeue_after(std::time::Duration::from_secs(30));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path()).unwrap();
        assert_eq!(first.disk_salt.len(), 32);
        let text = std::fs::read_to_string(dir.path().join(SALT_FILE)).unwrap();
        assert!(text.starts_with("diskSalt: "), "{text}");
        assert_eq!(load_or_create(dir.path()).unwrap(), first);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(SALT_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_ne!(load_or_create(tempfile::tempdir().unwrap().path()).unwrap(), first);
    }

    #[test]
    fn a_damaged_salt_is_an_error_and_stays() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SALT_FILE), "diskSalt: AAAA\n").unwrap();
        let err = load_or_create(dir.path()).unwrap_err();
        assert!(err.contains("diskSalt is 3 bytes, not 32"), "{err}");
        std::fs::write(dir.path().join(SALT_FILE), "salt: x\n").unwrap();
        assert!(load_or_create(dir.path()).is_err());
        assert_eq!(std::fs::read_to_string(dir.path().join(SALT_FILE)).unwrap(), "salt: x\n");
    }

    #[test]
    fn the_fingerprint_hides_the_salt() {
        let salt = [7u8; 32];
        let f = fingerprint(&salt);
        assert_eq!(f.len(), 64);
        assert_eq!(f, fingerprint(&salt));
        assert_ne!(f, fingerprint(&[8u8; 32]));
    }
}
