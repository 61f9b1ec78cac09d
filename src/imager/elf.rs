//! The binary that goes into the image: is it static, and if not, which shared libraries
//! must travel with it.
//!
//! Reads ELF program headers (pure) and asks `ldd` for the library closure. It must never
//! execute the binary itself.

use super::host::{self, HostError};
use std::path::{Path, PathBuf};

const PT_INTERP: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{}: not a 64-bit little-endian ELF file", path.display())]
    NotElf { path: PathBuf },
    #[error("{}: program header table outside the file", path.display())]
    Truncated { path: PathBuf },
    #[error(transparent)]
    Host(#[from] HostError),
}

/// The program interpreter named by PT_INTERP, or None for a static binary.
pub fn interpreter(path: &Path, elf: &[u8]) -> Result<Option<String>, ElfError> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err(ElfError::NotElf { path: path.to_path_buf() });
    }
    let trunc = || ElfError::Truncated { path: path.to_path_buf() };
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| elf.get(o..o + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let u64_at = |o: usize| elf.get(o..o + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let phoff = u64_at(0x20).ok_or_else(trunc)? as usize;
    let phentsize = u16_at(0x36).ok_or_else(trunc)? as usize;
    let phnum = u16_at(0x38).ok_or_else(trunc)? as usize;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph).ok_or_else(trunc)? == PT_INTERP {
            let off = u64_at(ph + 8).ok_or_else(trunc)? as usize;
            let size = u64_at(ph + 32).ok_or_else(trunc)? as usize;
            let raw = elf.get(off..off + size).ok_or_else(trunc)?;
            let s = String::from_utf8_lossy(raw).trim_end_matches('\0').to_string();
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Absolute library paths from `ldd` output (`name => /path (addr)` and `/path (addr)`).
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let target = l.split_once("=>").map_or(l, |(_, t)| t.trim());
            let path = target.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// The shared-library closure of a dynamic binary, as absolute paths.
pub fn libraries(binary: &Path) -> Result<Vec<PathBuf>, ElfError> {
    let out = host::run(host::LDD, "listing shared libraries", host::command(host::LDD).arg(binary))?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn interpreter_of_host_binaries() {
        let sh = std::fs::read("/bin/sh").unwrap();
        let interp = interpreter(Path::new("/bin/sh"), &sh).unwrap();
        assert!(interp.is_some_and(|i| i.contains("ld-linux")));
        assert!(matches!(interpreter(Path::new("x"), b"not an elf"), Err(ElfError::NotElf { .. })));
    }
}
