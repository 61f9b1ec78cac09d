//! Unified kernel images (PE32+): reading a UKI's sections, as a node does with an upgrade's
//! UKI, and assembling one, as the imager does: appending `.osrel`, `.cmdline`, `.linux` and
//! `.initrd` sections to the systemd EFI stub and fixing up its headers.
//!
//! Pure: bytes in, bytes out, with the PE header's timestamp taken from the caller (never the
//! clock) so the same inputs give the same image. It must never rewrite the stub's own
//! sections, only append after them, and after anything the stub file carries behind its
//! last section (a COFF symbol table, an Authenticode certificate table).

/// A section to append: an 8-byte-or-shorter name and its contents.
pub struct Section<'a> {
    pub name: &'a str,
    pub data: &'a [u8],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PeError {
    #[error("EFI stub: {what} at offset {offset:#x} is outside the {len}-byte file")]
    Truncated { what: &'static str, offset: usize, len: usize },
    #[error("EFI stub: {0}")]
    Format(&'static str),
    #[error("EFI stub: header room for {room} more section(s), {wanted} wanted")]
    NoRoom { room: usize, wanted: usize },
    #[error("UKI section name {0:?} is longer than 8 bytes")]
    Name(String),
    #[error("UKI would exceed the 4 GiB PE size limit")]
    TooLarge,
}

const SECTION_HEADER: usize = 40;
/// Data directory entry 4 (Certificate Table): its offset in the PE32+ optional header.
const CERTIFICATE_TABLE_INDEX: u32 = 4;
const CERTIFICATE_TABLE: usize = 112 + 8 * CERTIFICATE_TABLE_INDEX as usize;
/// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ
const DATA_READ: u32 = 0x4000_0040;

/// The PE layout facts the append needs, read from the stub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub coff: usize,
    pub opt: usize,
    pub sections: usize,
    pub section_table: usize,
    pub section_alignment: u32,
    pub file_alignment: u32,
    pub size_of_headers: u32,
    /// End of the last section in memory (RVA) and in the file.
    pub virt_end: u32,
    pub raw_end: u32,
    /// First byte of section data in the file: the section table may not grow past it.
    pub first_raw: u32,
    /// Length of the whole file, which may extend past `raw_end`.
    pub file_len: u64,
    /// Data directory entries present: NumberOfRvaAndSizes, capped by SizeOfOptionalHeader.
    pub rva_count: u32,
}

fn rd<const N: usize>(b: &[u8], off: usize, what: &'static str) -> Result<[u8; N], PeError> {
    b.get(off..off + N).and_then(|s| s.try_into().ok()).ok_or(PeError::Truncated { what, offset: off, len: b.len() })
}
fn u16_at(b: &[u8], off: usize, what: &'static str) -> Result<u16, PeError> {
    rd::<2>(b, off, what).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], off: usize, what: &'static str) -> Result<u32, PeError> {
    rd::<4>(b, off, what).map(u32::from_le_bytes)
}
fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn align_up(v: u64, a: u64) -> u64 {
    if a <= 1 { v } else { v.div_ceil(a) * a }
}

/// Reads the layout of a PE32+ image.
pub fn layout(pe: &[u8]) -> Result<Layout, PeError> {
    if rd::<2>(pe, 0, "DOS magic")? != *b"MZ" {
        return Err(PeError::Format("no MZ signature"));
    }
    let pe_off = u32_at(pe, 0x3c, "e_lfanew")? as usize;
    if rd::<4>(pe, pe_off, "PE signature")? != *b"PE\0\0" {
        return Err(PeError::Format("no PE signature"));
    }
    let coff = pe_off + 4;
    let sections = u16_at(pe, coff + 2, "NumberOfSections")? as usize;
    let opt_size = u16_at(pe, coff + 16, "SizeOfOptionalHeader")? as usize;
    let opt = coff + 20;
    if u16_at(pe, opt, "optional header magic")? != 0x20b {
        return Err(PeError::Format("not PE32+"));
    }
    let section_alignment = u32_at(pe, opt + 32, "SectionAlignment")?;
    let file_alignment = u32_at(pe, opt + 36, "FileAlignment")?;
    let size_of_headers = u32_at(pe, opt + 60, "SizeOfHeaders")?;
    let rva_count = if opt_size >= 112 {
        u32_at(pe, opt + 108, "NumberOfRvaAndSizes")?.min(((opt_size - 112) / 8) as u32)
    } else {
        0
    };
    let section_table = opt + opt_size;
    let (mut virt_end, mut raw_end, mut first_raw) = (0u32, 0u32, u32::MAX);
    for i in 0..sections {
        let s = section_table + i * SECTION_HEADER;
        let vsize = u32_at(pe, s + 8, "VirtualSize")?;
        let va = u32_at(pe, s + 12, "VirtualAddress")?;
        let raw_size = u32_at(pe, s + 16, "SizeOfRawData")?;
        let raw_ptr = u32_at(pe, s + 20, "PointerToRawData")?;
        virt_end = virt_end.max(va.saturating_add(vsize.max(raw_size)));
        raw_end = raw_end.max(raw_ptr.saturating_add(raw_size));
        if raw_size > 0 {
            first_raw = first_raw.min(raw_ptr);
        }
    }
    if first_raw == u32::MAX {
        first_raw = size_of_headers;
    }
    Ok(Layout {
        coff,
        opt,
        sections,
        section_table,
        section_alignment,
        file_alignment,
        size_of_headers,
        virt_end,
        raw_end,
        first_raw,
        file_len: pe.len() as u64,
        rva_count,
    })
}

/// The sections of a PE image, by name, each its bytes in the file (the smaller of its
/// virtual size and its raw size: a UKI's `.linux` and `.initrd` are exactly their files).
pub fn sections(pe: &[u8]) -> Result<Vec<(String, &[u8])>, PeError> {
    let l = layout(pe)?;
    let mut out = Vec::with_capacity(l.sections);
    for i in 0..l.sections {
        let s = l.section_table + i * SECTION_HEADER;
        let raw_name = rd::<8>(pe, s, "section name")?;
        let name = String::from_utf8_lossy(&raw_name).trim_end_matches('\0').to_string();
        let vsize = u32_at(pe, s + 8, "VirtualSize")? as usize;
        let raw_size = u32_at(pe, s + 16, "SizeOfRawData")? as usize;
        let raw_ptr = u32_at(pe, s + 20, "PointerToRawData")? as usize;
        let len = if vsize == 0 { raw_size } else { vsize.min(raw_size) };
        let data = pe.get(raw_ptr..raw_ptr + len).ok_or(PeError::Truncated {
            what: "section data",
            offset: raw_ptr,
            len: pe.len(),
        })?;
        out.push((name, data));
    }
    Ok(out)
}

impl Layout {
    /// How many more 40-byte section headers fit before the headers end.
    pub fn room(&self) -> usize {
        let limit = self.size_of_headers.min(self.first_raw) as usize;
        let used = self.section_table + self.sections * SECTION_HEADER;
        limit.saturating_sub(used) / SECTION_HEADER
    }
}

/// Where an appended section lands: its RVA and file offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub va: u32,
    pub raw_ptr: u32,
    pub raw_size: u32,
    pub virt_size: u32,
}

/// Places sections of the given sizes one after another: in memory behind the image's last
/// section, in the file behind the end of the file (which may hold data past the last
/// section's raw data, such as symbols or a certificate table, that must stay intact), each
/// aligned to SectionAlignment in memory and FileAlignment in the file.
pub fn place(l: &Layout, sizes: &[usize]) -> Result<Vec<Placement>, PeError> {
    let mut va = align_up(l.virt_end as u64, l.section_alignment as u64);
    let mut raw = align_up((l.raw_end as u64).max(l.file_len), l.file_alignment as u64);
    let mut out = Vec::new();
    for &size in sizes {
        let raw_size = align_up(size as u64, l.file_alignment as u64);
        let p = Placement {
            va: u32::try_from(va).map_err(|_| PeError::TooLarge)?,
            raw_ptr: u32::try_from(raw).map_err(|_| PeError::TooLarge)?,
            raw_size: u32::try_from(raw_size).map_err(|_| PeError::TooLarge)?,
            virt_size: u32::try_from(size).map_err(|_| PeError::TooLarge)?,
        };
        out.push(p);
        va = align_up(va + size as u64, l.section_alignment as u64);
        raw += raw_size;
    }
    u32::try_from(raw).map_err(|_| PeError::TooLarge)?;
    u32::try_from(va).map_err(|_| PeError::TooLarge)?;
    Ok(out)
}

/// The PE checksum: 16-bit one's-complement-style sum of the file with the CheckSum field
/// taken as zero, folded, plus the file length.
pub fn checksum(pe: &[u8], checksum_off: usize) -> u32 {
    let mut sum: u64 = 0;
    let mut i = 0;
    while i < pe.len() {
        let word = if i == checksum_off || i == checksum_off + 2 {
            0
        } else {
            let lo = pe[i] as u64;
            let hi = pe.get(i + 1).copied().unwrap_or(0) as u64;
            lo | (hi << 8)
        };
        sum += word;
        sum = (sum & 0xffff) + (sum >> 16);
        i += 2;
    }
    sum = (sum & 0xffff) + (sum >> 16);
    (sum as u32).wrapping_add(pe.len() as u32)
}

/// Builds the UKI: the stub with `sections` appended, TimeDateStamp = `timestamp`.
pub fn assemble(stub: &[u8], sections: &[Section], timestamp: u32) -> Result<Vec<u8>, PeError> {
    let l = layout(stub)?;
    if l.room() < sections.len() {
        return Err(PeError::NoRoom { room: l.room(), wanted: sections.len() });
    }
    for s in sections {
        if s.name.len() > 8 {
            return Err(PeError::Name(s.name.to_string()));
        }
    }
    let placed = place(&l, &sections.iter().map(|s| s.data.len()).collect::<Vec<_>>())?;
    let end = placed.last().map_or(l.raw_end, |p| p.raw_ptr + p.raw_size) as usize;
    let mut out = stub.to_vec();
    out.resize(end.max(stub.len()), 0);
    let mut added_init = 0u32;
    for (i, (s, p)) in sections.iter().zip(&placed).enumerate() {
        let h = l.section_table + (l.sections + i) * SECTION_HEADER;
        out[h..h + SECTION_HEADER].fill(0);
        out[h..h + s.name.len()].copy_from_slice(s.name.as_bytes());
        put_u32(&mut out, h + 8, p.virt_size);
        put_u32(&mut out, h + 12, p.va);
        put_u32(&mut out, h + 16, p.raw_size);
        put_u32(&mut out, h + 20, p.raw_ptr);
        put_u32(&mut out, h + 36, DATA_READ);
        let start = p.raw_ptr as usize;
        out[start..start + s.data.len()].copy_from_slice(s.data);
        added_init = added_init.checked_add(p.raw_size).ok_or(PeError::TooLarge)?;
    }
    let n = u16::try_from(l.sections + sections.len()).map_err(|_| PeError::TooLarge)?;
    put_u16(&mut out, l.coff + 2, n);
    put_u32(&mut out, l.coff + 4, timestamp);
    let init = u32_at(&out, l.opt + 8, "SizeOfInitializedData")?;
    put_u32(&mut out, l.opt + 8, init.checked_add(added_init).ok_or(PeError::TooLarge)?);
    let virt_end = placed.last().map_or(l.virt_end as u64, |p| p.va as u64 + p.virt_size as u64);
    let size_of_image = align_up(virt_end, l.section_alignment as u64);
    put_u32(&mut out, l.opt + 56, u32::try_from(size_of_image).map_err(|_| PeError::TooLarge)?);
    // A signature over the stub does not cover the UKI: drop the Certificate Table entry so
    // nothing points at a stale signature (the UKI can be signed afresh).
    if l.rva_count > CERTIFICATE_TABLE_INDEX {
        out[l.opt + CERTIFICATE_TABLE..l.opt + CERTIFICATE_TABLE + 8].fill(0);
    }
    let sum = checksum(&out, l.opt + 64);
    put_u32(&mut out, l.opt + 64, sum);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal PE32+ image: headers in 0x400 bytes, one `.text` section at RVA 0x1000.
    fn tiny_pe(section_alignment: u32) -> Vec<u8> {
        let mut b = vec![0u8; 0x600];
        b[0..2].copy_from_slice(b"MZ");
        put_u32(&mut b, 0x3c, 0x80);
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        let coff = 0x84;
        put_u16(&mut b, coff, 0x8664);
        put_u16(&mut b, coff + 2, 1);
        put_u16(&mut b, coff + 16, 240);
        let opt = coff + 20;
        put_u16(&mut b, opt, 0x20b);
        put_u32(&mut b, opt + 8, 0x200);
        put_u32(&mut b, opt + 32, section_alignment);
        put_u32(&mut b, opt + 36, 0x200);
        put_u32(&mut b, opt + 56, 0x2000);
        put_u32(&mut b, opt + 60, 0x400);
        let s = opt + 240;
        b[s..s + 5].copy_from_slice(b".text");
        put_u32(&mut b, s + 8, 0x10);
        put_u32(&mut b, s + 12, 0x1000);
        put_u32(&mut b, s + 16, 0x200);
        put_u32(&mut b, s + 20, 0x400);
        b
    }

    #[test]
    fn sections_read_back_what_was_appended() {
        let stub = tiny_pe(0x200);
        let pe = assemble(
            &stub,
            &[Section { name: ".cmdline", data: b"console=ttyS0" }, Section { name: ".linux", data: &[7u8; 1000] }],
            0,
        )
        .unwrap();
        let got = sections(&pe).unwrap();
        let find = |n: &str| got.iter().find(|(name, _)| name == n).map(|(_, d)| *d);
        assert_eq!(find(".cmdline"), Some(&b"console=ttyS0"[..]));
        assert_eq!(find(".linux").map(<[u8]>::len), Some(1000));
        assert!(sections(b"not a pe").is_err());
    }

    #[test]
    fn placement_table() {
        // (section alignment, sizes, expected (va, raw_ptr, raw_size))
        type Case = (u32, &'static [usize], &'static [(u32, u32, u32)]);
        let cases: &[Case] = &[
            (0x200, &[1], &[(0x1200, 0x600, 0x200)]),
            (0x200, &[0x200, 0x201], &[(0x1200, 0x600, 0x200), (0x1400, 0x800, 0x400)]),
            (0x1000, &[5, 0x1001, 1], &[(0x2000, 0x600, 0x200), (0x3000, 0x800, 0x1200), (0x5000, 0x1a00, 0x200)]),
        ];
        for (align, sizes, want) in cases {
            let l = layout(&tiny_pe(*align)).unwrap();
            let got: Vec<_> = place(&l, sizes).unwrap().iter().map(|p| (p.va, p.raw_ptr, p.raw_size)).collect();
            assert_eq!(&got, want, "alignment {align:#x} sizes {sizes:?}");
        }
    }

    #[test]
    fn room_counts_free_header_slots() {
        let l = layout(&tiny_pe(0x200)).unwrap();
        // table at 0x84+20+240 = 0x188, one section used -> 0x1b0; (0x400-0x1b0)/40 = 14
        assert_eq!(l.room(), 14);
    }

    #[test]
    fn assemble_updates_headers() {
        let stub = tiny_pe(0x200);
        let uki = assemble(
            &stub,
            &[Section { name: ".osrel", data: b"ID=x\n" }, Section { name: ".linux", data: &[1u8; 0x300] }],
            77,
        )
        .unwrap();
        let l = layout(&uki).unwrap();
        assert_eq!(l.sections, 3);
        assert_eq!(u32_at(&uki, l.coff + 4, "").unwrap(), 77);
        assert_eq!(u32_at(&uki, l.opt + 8, "").unwrap(), 0x200 + 0x200 + 0x400);
        assert_eq!(u32_at(&uki, l.opt + 56, "").unwrap(), 0x1800);
        assert_eq!(uki.len(), 0xc00);
        assert_eq!(&uki[0x600..0x605], b"ID=x\n");
        assert_eq!(u32_at(&uki, l.opt + 64, "").unwrap(), checksum(&uki, l.opt + 64));
    }

    /// `tiny_pe` as a signed stub with symbols: a COFF symbol table and a certificate table
    /// behind the last section's raw data (0x600), the file ending unaligned at 0x698.
    fn stub_with_trailer() -> Vec<u8> {
        let mut b = tiny_pe(0x200);
        let (coff, opt) = (0x84, 0x84 + 20);
        put_u32(&mut b, coff + 8, 0x600); // PointerToSymbolTable
        put_u32(&mut b, coff + 12, 2); // NumberOfSymbols: 36 bytes, then a 4-byte string table
        put_u32(&mut b, opt + 108, 16); // NumberOfRvaAndSizes
        put_u32(&mut b, opt + 144, 0x628); // Certificate Table: file offset
        put_u32(&mut b, opt + 148, 0x70); // and size
        b.extend((0..0x98u32).map(|i| 0x80 | i as u8));
        b
    }

    #[test]
    fn sections_go_behind_trailing_data() {
        let stub = stub_with_trailer();
        let l = layout(&stub).unwrap();
        assert_eq!((l.raw_end, l.file_len, l.rva_count), (0x600, 0x698, 16));
        let got: Vec<_> = place(&l, &[1, 0x201]).unwrap().iter().map(|p| (p.va, p.raw_ptr, p.raw_size)).collect();
        assert_eq!(got, [(0x1200, 0x800, 0x200), (0x1400, 0xa00, 0x400)]);

        let uki = assemble(
            &stub,
            &[Section { name: ".osrel", data: b"ID=x\n" }, Section { name: ".linux", data: &[1u8; 0x300] }],
            77,
        )
        .unwrap();
        let u = layout(&uki).unwrap();
        assert_eq!(uki.len(), 0xe00);
        assert_eq!(uki[0x600..0x698], stub[0x600..0x698], "the stub's trailing bytes were overwritten");
        assert!(uki[0x698..0x800].iter().all(|&b| b == 0), "padding up to FileAlignment");
        assert_eq!(&uki[0x800..0x805], b"ID=x\n");
        assert_eq!(uki[0xa00..0xd00], [1u8; 0x300]);
        assert_eq!(u32_at(&uki, u.coff + 8, "").unwrap(), 0x600, "symbols still where the header says");
        assert_eq!(u32_at(&uki, u.opt + 56, "").unwrap(), 0x1800, "SizeOfImage: memory layout is unchanged");
        assert_eq!(u32_at(&uki, u.opt + 144, "").unwrap(), 0, "Certificate Table offset");
        assert_eq!(u32_at(&uki, u.opt + 148, "").unwrap(), 0, "Certificate Table size");
        assert_eq!(u32_at(&uki, u.opt + 64, "").unwrap(), checksum(&uki, u.opt + 64));
        // The new section headers describe what is in the file.
        for (i, (name, raw_ptr)) in [(".osrel", 0x800), (".linux", 0xa00)].into_iter().enumerate() {
            let h = u.section_table + (1 + i) * SECTION_HEADER;
            assert_eq!(&uki[h..h + name.len()], name.as_bytes());
            assert_eq!(u32_at(&uki, h + 20, "").unwrap(), raw_ptr, "{name} PointerToRawData");
        }
    }

    #[test]
    fn checksum_ignores_its_own_field() {
        let mut a = vec![1u8, 0, 2, 0, 0xff, 0xff, 3, 0];
        let c1 = checksum(&a, 4);
        a[4] = 0x12;
        assert_eq!(checksum(&a, 4), c1);
        assert_eq!(c1, 1 + 2 + 8); // the 4-byte field (offsets 4..8) counts as zero
        // carry folding: 0xffff + 0x0002 = 0x10001 -> 0x0002
        assert_eq!(checksum(&[0xff, 0xff, 2, 0], 100), 2 + 4);
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(layout(b"XX"), Err(PeError::Format("no MZ signature")));
        let stub = tiny_pe(0x200);
        let many: Vec<Section> = (0..15).map(|_| Section { name: ".x", data: b"" }).collect();
        assert_eq!(assemble(&stub, &many, 0), Err(PeError::NoRoom { room: 14, wanted: 15 }));
        let long = [Section { name: ".toolongname", data: b"" }];
        assert_eq!(assemble(&stub, &long, 0), Err(PeError::Name(".toolongname".into())));
    }
}
