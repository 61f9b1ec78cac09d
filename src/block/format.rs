//! Making filesystems: the command lines of the mkfs programs the rootfs carries (the one
//! program a node executes, as in Talos), with options pinned so one xfsprogs or e2fsprogs
//! version lays a volume out the same way every time, whatever its defaults become. Pure:
//! it builds commands and never runs one.

use std::path::PathBuf;

use super::types::FilesystemType;

/// Where the rootfs carries the programs.
pub const MKFS_XFS: &str = "/usr/sbin/mkfs.xfs";
/// mke2fs, by its own name: called `mkfs.ext4` it insists on reading ext4 from mke2fs.conf.
pub const MKE2FS: &str = "/usr/sbin/mke2fs";

/// xfsprogs refuses filesystems under 300 MB unless it believes it runs under the test
/// suite; Talos's STATE is 100 MiB.
const XFS_SMALL: u64 = 300_000_000;

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl MkfsCommand {
    /// The same command, told to write over the signature a formatter of `fs` left
    /// unfinished: mkfs.xfs and mke2fs refuse a device that already carries one. Only for
    /// that case; everywhere else their refusal is a second guard for data the probe missed.
    pub fn over_unfinished(mut self, fs: FilesystemType) -> MkfsCommand {
        let force = if fs == FilesystemType::Xfs { "-f" } else { "-F" };
        self.args.insert(0, force.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("filesystem {0:?} is not made by the node")]
    Unsupported(FilesystemType),
    #[error("label {label:?} is longer than {max} bytes for {fs:?}")]
    Label { label: String, max: usize, fs: FilesystemType },
}

/// The command that makes `fs` labelled `label` on `device` of `size` bytes. The program is
/// found at `root` + its path (`/` on a node).
pub fn mkfs(root: &str, fs: FilesystemType, device: &str, label: &str, size: u64) -> Result<MkfsCommand, FormatError> {
    let program = |p: &str| PathBuf::from(format!("{}{p}", root.trim_end_matches('/')));
    match fs {
        FilesystemType::Xfs => {
            if label.len() > 12 {
                return Err(FormatError::Label { label: label.into(), max: 12, fs });
            }
            let mut args: Vec<String> = vec![
                // The features of xfsprogs 6.1's defaults, spelled out.
                "-m".into(),
                "crc=1,finobt=1,rmapbt=0,reflink=1,bigtime=1,inobtcount=1".into(),
                "-i".into(),
                "sparse=1".into(),
                "-n".into(),
                "ftype=1".into(),
                "-q".into(),
            ];
            if !label.is_empty() {
                args.extend(["-L".into(), label.into()]);
            }
            args.push(device.into());
            let env = if size < XFS_SMALL {
                ["TEST_DIR", "TEST_DEV", "QA_CHECK_FS"].iter().map(|k| (k.to_string(), "1".to_string())).collect()
            } else {
                Vec::new()
            };
            Ok(MkfsCommand { program: program(MKFS_XFS), args, env })
        }
        FilesystemType::Ext4 => {
            if label.len() > 16 {
                return Err(FormatError::Label { label: label.into(), max: 16, fs });
            }
            let mut args: Vec<String> = vec![
                "-q".into(),
                "-b".into(),
                "4096".into(),
                "-I".into(),
                "256".into(),
                // ext4 as Debian's mke2fs.conf defines it, base features included.
                "-O".into(),
                "sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr,has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize".into(),
                "-E".into(),
                "lazy_itable_init=1,lazy_journal_init=1".into(),
            ];
            if !label.is_empty() {
                args.extend(["-L".into(), label.into()]);
            }
            args.push(device.into());
            // No mke2fs.conf on a node: the defaults it would read are given above.
            Ok(MkfsCommand { program: program(MKE2FS), args, env: vec![("MKE2FS_CONFIG".into(), "/dev/null".into())] })
        }
        other => Err(FormatError::Unsupported(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(cmd: &MkfsCommand) {
        let out = Command::new(&cmd.program).args(&cmd.args).envs(cmd.env.iter().cloned()).output().unwrap();
        assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn blkid(path: &std::path::Path) -> String {
        let out = Command::new("blkid").args(["-p", "-o", "export"]).arg(path).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    #[test]
    fn a_100_mib_state_gets_xfs_that_xfs_repair_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("state.img");
        std::fs::File::create(&img).unwrap().set_len(100 << 20).unwrap();
        let cmd = mkfs("/", FilesystemType::Xfs, img.to_str().unwrap(), "STATE", 100 << 20).unwrap();
        assert_eq!(cmd.env.len(), 3, "under 300 MB the test-suite variables are set");
        run(&cmd);
        let ids = blkid(&img);
        assert!(ids.contains("TYPE=xfs") && ids.contains("LABEL=STATE"), "{ids}");
        let repair = Command::new("xfs_repair").args(["-n", "-f"]).arg(&img).output().unwrap();
        assert!(repair.status.success(), "{}", String::from_utf8_lossy(&repair.stderr));
    }

    #[test]
    fn ext4_without_a_config_file_is_what_fsck_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("data.img");
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let cmd = mkfs("/", FilesystemType::Ext4, img.to_str().unwrap(), "u-data", 64 << 20).unwrap();
        run(&cmd);
        let ids = blkid(&img);
        assert!(ids.contains("TYPE=ext4") && ids.contains("LABEL=u-data"), "{ids}");
        let fsck = Command::new("fsck.ext4").args(["-n", "-f"]).arg(&img).output().unwrap();
        assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stdout));
    }

    #[test]
    fn an_unfinished_xfs_is_refused_by_mkfs_and_made_again_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("eph.img");
        std::fs::File::create(&img).unwrap().set_len(300 << 20).unwrap();
        let cmd = mkfs("/", FilesystemType::Xfs, img.to_str().unwrap(), "EPHEMERAL", 300 << 20).unwrap();
        run(&cmd);
        let set = Command::new("xfs_db").args(["-x", "-c", "sb 0", "-c", "write inprogress 1"]).arg(&img).output();
        assert!(set.unwrap().status.success());
        let again = Command::new(&cmd.program).args(&cmd.args).output().unwrap();
        assert!(!again.status.success(), "mkfs.xfs writes over an existing xfs only when forced");
        run(&cmd.clone().over_unfinished(FilesystemType::Xfs));
        let probed = crate::block::probe::probe_path(&img, 512).unwrap().unwrap();
        assert!(!probed.unfinished);
        let repair = Command::new("xfs_repair").args(["-n", "-f"]).arg(&img).output().unwrap();
        assert!(repair.status.success(), "{}", String::from_utf8_lossy(&repair.stderr));
    }

    #[test]
    fn what_the_node_does_not_make_is_refused() {
        assert_eq!(
            mkfs("/", FilesystemType::Swap, "/dev/x", "", 1),
            Err(FormatError::Unsupported(FilesystemType::Swap))
        );
        assert!(matches!(
            mkfs("/", FilesystemType::Xfs, "/dev/x", "EPHEMERAL-LONG", 1),
            Err(FormatError::Label { .. })
        ));
        let big = mkfs("/", FilesystemType::Xfs, "/dev/vda6", "EPHEMERAL", 5 << 30).unwrap();
        assert!(big.env.is_empty());
        assert_eq!(big.program, PathBuf::from("/usr/sbin/mkfs.xfs"));
        assert_eq!(big.args.last().map(String::as_str), Some("/dev/vda6"));
    }
}
