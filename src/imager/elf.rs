//! ELF files the image carries from the build host: is a binary static, and if not, which
//! loader and shared libraries must travel with it.
//!
//! Reads the program headers (PT_INTERP, PT_LOAD, PT_DYNAMIC) and the dynamic section's
//! DT_NEEDED entries itself, and finds each library where the loader looks when there is no
//! ld.so.cache: the Debian multiarch directories. The closure keeps every file at its host
//! path and every symlink as a symlink, so the loader in the rootfs finds them as the host's
//! does. It must never execute a file it inspects (no `ldd`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Where libraries are searched for, in order: the directories Debian's loader searches by
/// default on x86-64 (and so finds them in the rootfs, which carries no ld.so.cache).
pub const LIBRARY_DIRS: &[&str] = &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"];

const EM_X86_64: u16 = 62;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{}: not a 64-bit little-endian ELF file", path.display())]
    NotElf { path: PathBuf },
    #[error("{}: ELF machine {machine}, not x86-64", path.display())]
    Machine { path: PathBuf, machine: u16 },
    #[error("{}: {what} outside the file", path.display())]
    Truncated { path: PathBuf, what: &'static str },
    #[error(
        "{}: has {tag} {value:?}; only libraries in {} are carried, at the paths the loader searches by default",
        path.display(), LIBRARY_DIRS.join(" and ")
    )]
    SearchPath { path: PathBuf, tag: &'static str, value: String },
    #[error("{}: needs {library}, which is in none of {}", needed_by.display(), LIBRARY_DIRS.join(", "))]
    NotFound { library: String, needed_by: PathBuf },
    #[error("{}: needs {library}, a relative path", needed_by.display())]
    RelativeNeeded { library: String, needed_by: PathBuf },
    #[error("carrying {}: not an absolute path", path.display())]
    Relative { path: PathBuf },
    #[error("carrying {}: neither a file nor a symlink", path.display())]
    NotAFile { path: PathBuf },
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

/// What the loader needs to run one ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dynamic {
    /// The program interpreter (PT_INTERP); None for a static binary or a library.
    pub interpreter: Option<String>,
    /// DT_NEEDED, in the file's order.
    pub needed: Vec<String>,
}

impl Dynamic {
    /// Runs without a loader or libraries (static, or static-pie).
    pub fn is_static(&self) -> bool {
        self.interpreter.is_none() && self.needed.is_empty()
    }
}

/// Reads the interpreter and DT_NEEDED of `elf` (the contents of `path`, named in errors).
pub fn parse(path: &Path, elf: &[u8]) -> Result<Dynamic, ElfError> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err(ElfError::NotElf { path: path.to_path_buf() });
    }
    let trunc = |what| ElfError::Truncated { path: path.to_path_buf(), what };
    let u16_at = |o: usize| elf.get(o..o.checked_add(2)?).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| elf.get(o..o.checked_add(4)?).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let u64_at = |o: usize| elf.get(o..o.checked_add(8)?).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let machine = u16_at(0x12).ok_or_else(|| trunc("ELF header"))?;
    if machine != EM_X86_64 {
        return Err(ElfError::Machine { path: path.to_path_buf(), machine });
    }
    let phoff = u64_at(0x20).ok_or_else(|| trunc("ELF header"))? as usize;
    let phentsize = u16_at(0x36).ok_or_else(|| trunc("ELF header"))? as usize;
    let phnum = u16_at(0x38).ok_or_else(|| trunc("ELF header"))? as usize;

    let mut dynamic = Dynamic::default();
    // (vaddr, offset, filesz) of each PT_LOAD, to turn DT_STRTAB's address into an offset.
    let mut loads = Vec::new();
    let mut dyn_range = None;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let kind = u32_at(ph).ok_or_else(|| trunc("program header table"))?;
        let field = |o| u64_at(ph + o).map(|v| v as usize).ok_or_else(|| trunc("program header table"));
        let (offset, vaddr, filesz) = (field(8)?, field(16)?, field(32)?);
        match kind {
            PT_INTERP => {
                let raw = elf.get(offset..offset.saturating_add(filesz)).ok_or_else(|| trunc("PT_INTERP"))?;
                dynamic.interpreter = Some(String::from_utf8_lossy(raw).trim_end_matches('\0').to_string());
            }
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_DYNAMIC => dyn_range = Some((offset, filesz)),
            _ => {}
        }
    }
    let Some((dyn_off, dyn_size)) = dyn_range else { return Ok(dynamic) };

    let (mut needed, mut strtab, mut strsz, mut search) = (Vec::new(), None, None, None);
    for e in (dyn_off..dyn_off.saturating_add(dyn_size)).step_by(16) {
        let tag = u64_at(e).ok_or_else(|| trunc("PT_DYNAMIC"))?;
        let val = u64_at(e + 8).ok_or_else(|| trunc("PT_DYNAMIC"))? as usize;
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_RPATH => search = Some(("DT_RPATH", val)),
            DT_RUNPATH => search = Some(("DT_RUNPATH", val)),
            _ => {}
        }
    }
    if needed.is_empty() && search.is_none() {
        return Ok(dynamic);
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else { return Err(trunc("DT_STRTAB")) };
    let strtab = loads
        .iter()
        .find(|(vaddr, _, filesz)| (*vaddr..vaddr.saturating_add(*filesz)).contains(&strtab))
        .map(|(vaddr, offset, _)| strtab - vaddr + offset)
        .ok_or_else(|| trunc("DT_STRTAB"))?;
    let table = elf.get(strtab..strtab.saturating_add(strsz)).ok_or_else(|| trunc("DT_STRTAB"))?;
    let string = |at: usize| -> Result<String, ElfError> {
        let rest = table.get(at..).ok_or_else(|| trunc("a dynamic string"))?;
        let end = rest.iter().position(|b| *b == 0).ok_or_else(|| trunc("a dynamic string"))?;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    if let Some((tag, at)) = search {
        return Err(ElfError::SearchPath { path: path.to_path_buf(), tag, value: string(at)? });
    }
    dynamic.needed = needed.into_iter().map(string).collect::<Result<_, _>>()?;
    Ok(dynamic)
}

/// How one carried path is carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// A regular file, copied from the host path.
    File,
    /// A symlink with this target, as on the host.
    Symlink(PathBuf),
}

/// Host paths to carry at the same paths in the image: files, the symlinks leading to them, and
/// for each dynamic ELF file its loader and libraries, transitively.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Closure {
    entries: BTreeMap<PathBuf, Carried>,
}

impl Closure {
    /// Adds `path` (absolute; symlinks followed, each carried as a symlink) and, if it is a
    /// dynamic ELF file, everything it needs to run.
    pub fn add(&mut self, path: &Path) -> Result<(), ElfError> {
        if !path.is_absolute() {
            return Err(ElfError::Relative { path: path.to_path_buf() });
        }
        let path = normalize(path);
        if self.entries.contains_key(&path) {
            return Ok(());
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|source| ElfError::Io {
            what: "carrying",
            path: path.clone(),
            source,
        })?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(|source| ElfError::Io {
                what: "reading symlink",
                path: path.clone(),
                source,
            })?;
            let resolved = path.parent().unwrap_or(Path::new("/")).join(&target);
            self.entries.insert(path, Carried::Symlink(target));
            return self.add(&resolved);
        }
        if !meta.is_file() {
            return Err(ElfError::NotAFile { path });
        }
        let data =
            std::fs::read(&path).map_err(|source| ElfError::Io { what: "reading", path: path.clone(), source })?;
        self.entries.insert(path.clone(), Carried::File);
        if data.starts_with(b"\x7fELF") {
            self.add_dependencies(&path, &data)?;
        }
        Ok(())
    }

    /// Adds the loader and libraries `elf` (the contents of `path`, carried by other means)
    /// needs, without `path` itself.
    pub fn add_dependencies(&mut self, path: &Path, elf: &[u8]) -> Result<(), ElfError> {
        let dynamic = parse(path, elf)?;
        if let Some(interp) = &dynamic.interpreter {
            self.add(Path::new(interp))?;
        }
        for library in dynamic.needed {
            let found = if library.contains('/') {
                if !library.starts_with('/') {
                    return Err(ElfError::RelativeNeeded { library, needed_by: path.to_path_buf() });
                }
                PathBuf::from(&library)
            } else {
                LIBRARY_DIRS
                    .iter()
                    .map(|d| Path::new(d).join(&library))
                    .find(|p| p.exists())
                    .ok_or_else(|| ElfError::NotFound { library: library.clone(), needed_by: path.to_path_buf() })?
            };
            self.add(&found)?;
        }
        Ok(())
    }

    /// Every carried path (absolute) with how it is carried, sorted by path.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, &Carried)> {
        self.entries.iter().map(|(p, c)| (p.as_path(), c))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// `path` with `.` and `..` resolved by name, as the image (which has no directory symlinks)
/// resolves it.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// DT_NEEDED as binutils' readelf reads it.
    fn readelf_needed(path: &str) -> Vec<String> {
        let out = Command::new("readelf").args(["-d", path]).output().expect("readelf (binutils) runs");
        assert!(out.status.success(), "readelf -d {path}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
            .collect()
    }

    #[test]
    fn parse_matches_readelf() {
        // (file, its PT_INTERP): programs and libc name the loader; other libraries do not.
        for (path, interp) in [
            ("/bin/sh", Some("/lib64/ld-linux-x86-64.so.2")),
            ("/usr/sbin/mkfs.xfs", Some("/lib64/ld-linux-x86-64.so.2")),
            ("/usr/sbin/mke2fs", Some("/lib64/ld-linux-x86-64.so.2")),
            ("/lib/x86_64-linux-gnu/libc.so.6", Some("/lib64/ld-linux-x86-64.so.2")),
            ("/lib/x86_64-linux-gnu/libblkid.so.1", None),
        ] {
            let data =
                std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e} (apt-get install xfsprogs e2fsprogs)"));
            let d = parse(Path::new(path), &data).unwrap();
            let want = readelf_needed(path);
            assert!(!want.is_empty(), "{path} has no DT_NEEDED");
            assert_eq!(d.needed, want, "{path}");
            assert_eq!(d.interpreter.as_deref(), interp, "{path}");
            assert!(!d.is_static());
        }
    }

    #[test]
    fn a_static_pie_binary_needs_nothing() {
        // Debian's ldconfig (libc-bin) is static-pie, as the talosbox binary is.
        let data = std::fs::read("/sbin/ldconfig").unwrap();
        let d = parse(Path::new("/sbin/ldconfig"), &data).unwrap();
        assert!(d.is_static(), "{d:?}");
        let mut c = Closure::default();
        c.add_dependencies(Path::new("/sbin/ldconfig"), &data).unwrap();
        assert!(c.is_empty());
    }

    #[test]
    fn parse_refuses_what_is_not_x86_64_elf() {
        assert!(matches!(parse(Path::new("x"), b"not an elf"), Err(ElfError::NotElf { .. })));
        let mut sh = std::fs::read("/bin/sh").unwrap();
        sh[0x12] = 183; // aarch64
        assert!(matches!(parse(Path::new("sh"), &sh), Err(ElfError::Machine { machine: 183, .. })));
        let sh = std::fs::read("/bin/sh").unwrap();
        let err = parse(Path::new("sh"), &sh[..4096]).unwrap_err();
        assert!(matches!(err, ElfError::Truncated { .. }), "{err}");
    }

    #[test]
    fn closure_of_mkfs_xfs() {
        let mut c = Closure::default();
        c.add(Path::new("/usr/sbin/mkfs.xfs")).unwrap();
        let paths: Vec<String> = c.entries().map(|(p, _)| p.display().to_string()).collect();
        // Every DT_NEEDED of the program and of each library is carried under its soname.
        let mut want: Vec<String> = readelf_needed("/usr/sbin/mkfs.xfs");
        want.extend(readelf_needed("/lib/x86_64-linux-gnu/libblkid.so.1"));
        for soname in &want {
            assert!(paths.iter().any(|p| p.ends_with(&format!("/{soname}"))), "{soname} missing: {paths:?}");
        }
        assert_eq!(c.entries().find(|(p, _)| *p == Path::new("/usr/sbin/mkfs.xfs")).unwrap().1, &Carried::File);
        // The loader is carried at PT_INTERP's path, and the symlink's target with it.
        let (_, loader) = c.entries().find(|(p, _)| *p == Path::new("/lib64/ld-linux-x86-64.so.2")).unwrap();
        if let Carried::Symlink(target) = loader {
            let resolved = normalize(&Path::new("/lib64").join(target));
            assert!(c.entries().any(|(p, _)| p == resolved), "{} not carried: {paths:?}", resolved.display());
        }
        // A soname link is carried with the file it names.
        let (_, uuid) = c.entries().find(|(p, _)| p.ends_with("libuuid.so.1")).unwrap();
        let Carried::Symlink(target) = uuid else { panic!("libuuid.so.1 is a link on Debian") };
        assert!(c.entries().any(|(p, k)| p.ends_with(target) && *k == Carried::File), "{paths:?}");
        assert!(matches!(c.add(Path::new("usr/sbin/mkfs.xfs")), Err(ElfError::Relative { .. })));
        assert!(matches!(c.add(Path::new("/usr/sbin")), Err(ElfError::NotAFile { .. })));
    }

    #[test]
    fn normalize_by_name() {
        assert_eq!(
            normalize(Path::new("/lib64/../lib/./x86_64-linux-gnu/ld.so")),
            Path::new("/lib/x86_64-linux-gnu/ld.so")
        );
        assert_eq!(normalize(Path::new("/../a")), Path::new("/a"));
    }
}
