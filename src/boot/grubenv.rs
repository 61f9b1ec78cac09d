//! GRUB's environment block (`grub/grubenv` on BOOT): 1024 bytes, a header line, `name=value`
//! lines and `#` padding. GRUB reads it with `load_env` and writes it in place with `save_env`
//! (through the file's block list: the file must keep its size and its blocks), so the node
//! writes it the same way: the whole 1024 bytes over the same file, never a new one.
//!
//! The two names used: `saved_entry`, the slot booted by default, and `next_entry`, a slot to
//! boot once (GRUB clears it as it boots it).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub const SIZE: usize = 1024;
const HEADER: &str = "# GRUB Environment Block\n";

#[derive(Debug, thiserror::Error)]
pub enum GrubEnvError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}: not a GRUB environment block ({len} bytes, header {header:?})")]
    NotABlock { path: String, len: usize, header: String },
    #[error("grubenv: {name}={value:?}: names and values may not hold newlines, backslashes or '='")]
    Value { name: String, value: String },
    #[error("grubenv: the variables take {need} bytes; the block holds {SIZE}")]
    Full { need: usize },
}

/// The variables of a block.
pub fn decode(block: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(block)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A block holding `vars`, padded with `#` to [`SIZE`].
pub fn encode(vars: &BTreeMap<String, String>) -> Result<Vec<u8>, GrubEnvError> {
    let mut out = HEADER.to_string();
    for (k, v) in vars {
        let bad = |s: &str| s.contains(['\n', '\\']);
        if k.is_empty() || bad(k) || k.contains('=') || bad(v) {
            return Err(GrubEnvError::Value { name: k.clone(), value: v.clone() });
        }
        out.push_str(&format!("{k}={v}\n"));
    }
    if out.len() > SIZE {
        return Err(GrubEnvError::Full { need: out.len() });
    }
    let mut block = out.into_bytes();
    block.resize(SIZE, b'#');
    Ok(block)
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> GrubEnvError + '_ {
    move |source| GrubEnvError::Io { path: path.display().to_string(), source }
}

/// Reads the block at `path`.
pub fn read(path: &Path) -> Result<BTreeMap<String, String>, GrubEnvError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    if bytes.len() != SIZE || !bytes.starts_with(HEADER.as_bytes()) {
        let header = String::from_utf8_lossy(&bytes[..bytes.len().min(HEADER.len())]).into_owned();
        return Err(GrubEnvError::NotABlock { path: path.display().to_string(), len: bytes.len(), header });
    }
    Ok(decode(&bytes))
}

/// Makes a new block at `path` holding `vars` (the imager and an install do; nothing else
/// creates one).
pub fn create(path: &Path, vars: &BTreeMap<String, String>) -> Result<(), GrubEnvError> {
    let block = encode(vars)?;
    std::fs::write(path, &block).map_err(io_err(path))?;
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(io_err(path))
}

/// Changes the block at `path` in place: read, `change`, written back over the same bytes and
/// synced. A missing or damaged block is an error: GRUB could not write a new one either.
pub fn update(
    path: &Path,
    change: impl FnOnce(&mut BTreeMap<String, String>),
) -> Result<BTreeMap<String, String>, GrubEnvError> {
    let mut vars = read(path)?;
    change(&mut vars);
    let block = encode(&vars)?;
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
    file.write_all_at(&block, 0).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))?;
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_stay_1024_bytes() {
        let vars = BTreeMap::from([("next_entry".to_string(), "B".to_string()), ("saved_entry".into(), "A".into())]);
        let block = encode(&vars).unwrap();
        assert_eq!(block.len(), SIZE);
        assert!(block.starts_with(b"# GRUB Environment Block\nnext_entry=B\nsaved_entry=A\n#"));
        assert_eq!(decode(&block), vars);
        assert!(encode(&BTreeMap::from([("a".into(), "x\ny".into())])).is_err());
        assert!(matches!(encode(&BTreeMap::from([("a".into(), "x".repeat(2000))])), Err(GrubEnvError::Full { .. })));
    }

    #[test]
    fn updates_write_over_the_same_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grubenv");
        create(&path, &BTreeMap::new()).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        update(&path, |v| {
            v.insert("next_entry".into(), "B".into());
        })
        .unwrap();
        assert_eq!(read(&path).unwrap().get("next_entry").map(String::as_str), Some("B"));
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE as u64);
        // GRUB's own tool reads ours.
        let out = std::process::Command::new("grub-editenv").arg(&path).arg("list").output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "next_entry=B\n");
        std::fs::write(&path, b"junk").unwrap();
        assert!(matches!(read(&path), Err(GrubEnvError::NotABlock { .. })));
    }
}
