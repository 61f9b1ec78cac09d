//! META on a real block device: a 1 MiB file attached read-write as a loop device (util-linux
//! `losetup`), written through the node's META store, then read back from the backing file
//! after the device is gone, so what was written went through the block layer and its flushes.
//! Needs root (CI runs as root); without it the test fails loudly rather than passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use talosbox::block::meta::{self, MetaStore, tag};

/// A loop device over a file, detached on drop.
struct Loop {
    device: PathBuf,
}

impl Loop {
    fn attach(file: &Path) -> Loop {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .expect("running losetup (apt-get install util-linux)");
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        Loop { device: PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()) }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_written_to_a_loop_device_lands_on_its_backing_file() {
    assert!(rustix::process::geteuid().is_root(), "kernel_meta needs root (loop devices); run it as root as CI does");
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(meta::PARTITION_SIZE).unwrap();
    let dev = Loop::attach(file.path());

    assert_eq!(meta::load(&dev.device).unwrap().origin(), &meta::Origin::Blank);
    let store = MetaStore::new();
    let device = dev.device.clone();
    store.update(device.clone(), |m| m.set(tag::UUID_OVERRIDE, "2b5a3e9c-0000-4000-8000-000000000001")).await.unwrap();
    store.update(device.clone(), |m| m.set(tag::USER_RESERVED2, vec![0xab; 100_000])).await.unwrap();
    store.update(device.clone(), |m| Ok(m.delete(tag::UUID_OVERRIDE))).await.unwrap();
    let through_device = meta::load(&dev.device).unwrap();
    drop(dev);

    let backing = std::fs::read(file.path()).unwrap();
    assert_eq!(backing.len() as u64, meta::PARTITION_SIZE);
    let copy1 = meta::decode_copy(&backing[..meta::COPY_LENGTH]).unwrap();
    let copy2 = meta::decode_copy(&backing[meta::COPY_LENGTH..2 * meta::COPY_LENGTH]).unwrap();
    assert_eq!(copy1, copy2);
    assert_eq!(copy1.keys().copied().collect::<Vec<_>>(), [tag::USER_RESERVED2]);
    assert_eq!(copy1[&tag::USER_RESERVED2], vec![0xab; 100_000]);
    assert_eq!(through_device.get(tag::USER_RESERVED2), Some(&copy1[&tag::USER_RESERVED2][..]));
}
