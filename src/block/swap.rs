//! The Linux swap area header (version 1, `SWAPSPACE2`), as `mkswap` writes it and the kernel's
//! `swapon(2)` reads it: one page at the start of the area, whose first KiB is left blank for
//! boot bits, then `version` (1), `last_page` (the index of the area's last whole page),
//! `nr_badpages` (0), the UUID and a 16-byte label; the page ends with the ten magic bytes.
//! Integers are in the machine's byte order (little-endian on the targets the node runs on).
//!
//! Pure: [`header`] builds the page and never writes it; the volume manager writes it over a
//! volume it found empty (or holding an older swap area), never over anything else.

/// Where the header's fields start: after the boot bits.
const FIELDS_AT: usize = 1024;
/// The signature at the end of the header page.
pub const MAGIC: &[u8; 10] = b"SWAPSPACE2";
/// The one header version the kernel knows.
pub const VERSION: u32 = 1;
/// The longest label: the header has 16 bytes for it, of which mkswap keeps the last for a
/// terminating NUL.
pub const LABEL_LENGTH: usize = 15;
/// The fewest pages `mkswap` accepts for an area (the header page included).
pub const MIN_PAGES: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("page size {0} is not a power of two of at least 4096 bytes")]
    PageSize(usize),
    #[error("{size} bytes hold {pages} pages of {page_size} bytes, fewer than the {MIN_PAGES} a swap area needs")]
    TooSmall { size: u64, page_size: usize, pages: u64 },
    #[error("{size} bytes are more pages of {page_size} bytes than a swap header can count")]
    TooLarge { size: u64, page_size: usize },
    #[error("label {label:?} is longer than {LABEL_LENGTH} bytes")]
    Label { label: String },
}

/// The header page of a swap area of `size` bytes with pages of `page_size` bytes.
pub fn header(page_size: usize, size: u64, uuid: [u8; 16], label: &str) -> Result<Vec<u8>, SwapError> {
    if !page_size.is_power_of_two() || page_size < 4096 {
        return Err(SwapError::PageSize(page_size));
    }
    let pages = size / page_size as u64;
    if pages < MIN_PAGES {
        return Err(SwapError::TooSmall { size, page_size, pages });
    }
    let last_page = u32::try_from(pages - 1).map_err(|_| SwapError::TooLarge { size, page_size })?;
    if label.len() > LABEL_LENGTH {
        return Err(SwapError::Label { label: label.to_string() });
    }
    let mut page = vec![0u8; page_size];
    let fields = &mut page[FIELDS_AT..];
    fields[0..4].copy_from_slice(&VERSION.to_ne_bytes());
    fields[4..8].copy_from_slice(&last_page.to_ne_bytes());
    // nr_badpages stays 0.
    fields[12..28].copy_from_slice(&uuid);
    fields[28..28 + label.len()].copy_from_slice(label.as_bytes());
    page[page_size - MAGIC.len()..].copy_from_slice(MAGIC);
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const UUID: [u8; 16] =
        [0x8f, 0x3c, 0x2e, 0x55, 0x1d, 0x4b, 0x4c, 0x7a, 0x9b, 0x0e, 0x61, 0x2d, 0xc4, 0x17, 0x90, 0x3a];
    const UUID_TEXT: &str = "8f3c2e55-1d4b-4c7a-9b0e-612dc417903a";

    #[test]
    fn the_page_is_the_one_mkswap_writes() {
        for (page_size, size, label) in
            [(4096, 64u64 << 20, "s-swap"), (4096, (64 << 20) + 1000, ""), (16384, 8 << 20, "fifteen-bytes-k")]
        {
            let dir = tempfile::tempdir().unwrap();
            let theirs = dir.path().join("mkswap.img");
            std::fs::File::create(&theirs).unwrap().set_len(size).unwrap();
            let mut cmd = Command::new("mkswap");
            cmd.args(["-q", "-p", &page_size.to_string(), "-U", UUID_TEXT]);
            if !label.is_empty() {
                cmd.args(["-L", label]);
            }
            let out = cmd.arg(&theirs).output().expect("mkswap (util-linux) runs");
            assert!(out.status.success(), "mkswap: {}", String::from_utf8_lossy(&out.stderr));
            let written = std::fs::read(&theirs).unwrap();
            let ours = header(page_size, size, UUID, label).unwrap();
            let differs = ours.iter().zip(&written[..page_size]).position(|(a, b)| a != b);
            assert_eq!(differs, None, "first differing byte; page size {page_size}, {size} bytes, label {label:?}");
        }
    }

    #[test]
    fn blkid_reads_the_label_uuid_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("swap.img");
        std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
        let page = header(4096, 32 << 20, UUID, "s-swap").unwrap();
        std::fs::write(&img, &page).unwrap();
        std::fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(32 << 20).unwrap();
        let out = Command::new("blkid").args(["-p", "-o", "export"]).arg(&img).output().unwrap();
        let ids = String::from_utf8_lossy(&out.stdout);
        for want in ["TYPE=swap", "LABEL=s-swap", &format!("UUID={UUID_TEXT}"), "VERSION=1"] {
            assert!(ids.lines().any(|l| l == want), "{want} in\n{ids}");
        }
        // The node's own prober agrees.
        let found = crate::block::probe::probe_path(&img, 512).unwrap().unwrap();
        assert_eq!((found.name(), found.label.as_deref()), ("swap", Some("s-swap")));
    }

    #[test]
    fn what_cannot_be_a_swap_area_is_refused() {
        assert_eq!(header(4000, 1 << 20, UUID, ""), Err(SwapError::PageSize(4000)));
        assert_eq!(header(2048, 1 << 20, UUID, ""), Err(SwapError::PageSize(2048)));
        assert_eq!(
            header(4096, 9 * 4096 + 4095, UUID, ""),
            Err(SwapError::TooSmall { size: 9 * 4096 + 4095, page_size: 4096, pages: 9 })
        );
        assert_eq!(
            header(4096, (1u64 << 32) * 4096 + 4096, UUID, ""),
            Err(SwapError::TooLarge { size: (1u64 << 32) * 4096 + 4096, page_size: 4096 })
        );
        assert_eq!(
            header(4096, 1 << 20, UUID, "sixteen-bytes-xx"),
            Err(SwapError::Label { label: "sixteen-bytes-xx".into() })
        );
        let page = header(4096, 10 * 4096, UUID, "").unwrap();
        assert_eq!(u32::from_ne_bytes(page[1028..1032].try_into().unwrap()), 9, "last_page");
    }
}
