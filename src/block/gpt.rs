//! GPT partition-table planning and encoding for disk images.
//!
//! Pure: the plan (where each partition starts and ends) and the bytes of the protective MBR,
//! the primary and backup headers and the entry array are functions of the request alone;
//! GUIDs come from the caller. It must never touch a device or file.

/// Logical sector size of the images we write.
pub const SECTOR: u64 = 512;
/// Partitions start on 1 MiB boundaries, as sgdisk and Talos do.
pub const ALIGN_SECTORS: u64 = 2048;
const ENTRIES: u32 = 128;
const ENTRY_SIZE: u32 = 128;
const ENTRY_SECTORS: u64 = (ENTRIES as u64 * ENTRY_SIZE as u64) / SECTOR;

/// GPT attribute bit 2: legacy BIOS bootable (Talos sets it on the BIOS partition).
pub const ATTR_LEGACY_BIOS_BOOTABLE: u64 = 1 << 2;

/// A partition as requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSpec {
    pub name: String,
    pub type_guid: Guid,
    pub guid: Guid,
    pub size_bytes: u64,
    pub attributes: u64,
}

/// A partition placed on the disk: inclusive LBA range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub spec: PartitionSpec,
    pub first_lba: u64,
    pub last_lba: u64,
}

impl Placed {
    pub fn offset(&self) -> u64 {
        self.first_lba * SECTOR
    }
    pub fn size(&self) -> u64 {
        (self.last_lba - self.first_lba + 1) * SECTOR
    }
}

/// The whole disk: its size and partitions in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub disk_guid: Guid,
    pub total_sectors: u64,
    pub partitions: Vec<Placed>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GptError {
    #[error("partition {name}: size {size} bytes is not a positive multiple of {SECTOR}")]
    Size { name: String, size: u64 },
    #[error("partition {name}: name longer than 36 UTF-16 units")]
    Name { name: String },
    #[error("{0} partitions do not fit a {ENTRIES}-entry table")]
    TooMany(usize),
    #[error("GUID {0:?}: expected 8-4-4-4-12 hex digits")]
    Guid(String),
}

/// A GUID held in its textual (big-endian) byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    pub fn parse(s: &str) -> Result<Self, GptError> {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        let groups: Vec<usize> = s.split('-').map(str::len).collect();
        if hex.len() != 32 || groups != [8, 4, 4, 4, 12] {
            return Err(GptError::Guid(s.to_string()));
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).map_err(|_| GptError::Guid(s.to_string()))?;
        }
        Ok(Guid(b))
    }

    /// A version-4-shaped GUID derived from a seed, so images get pinned but distinct GUIDs.
    pub fn derived(seed: &[u8]) -> Self {
        use sha2::Digest;
        let d = sha2::Sha256::digest(seed);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Guid(b)
    }

    /// GPT's on-disk form: the first three fields little-endian.
    pub fn to_disk(self) -> [u8; 16] {
        let mut b = self.0;
        b[0..4].reverse();
        b[4..6].reverse();
        b[6..8].reverse();
        b
    }
}

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        for (i, x) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{x:02x}")?;
        }
        Ok(())
    }
}

/// Lays partitions out back to back from LBA 2048, each aligned to 1 MiB, and sizes the disk
/// to hold them plus 1 MiB at the end for the backup table.
pub fn plan(disk_guid: Guid, specs: &[PartitionSpec]) -> Result<Plan, GptError> {
    if specs.len() > ENTRIES as usize {
        return Err(GptError::TooMany(specs.len()));
    }
    let mut next = ALIGN_SECTORS;
    let mut partitions = Vec::new();
    for s in specs {
        if s.size_bytes == 0 || s.size_bytes % SECTOR != 0 {
            return Err(GptError::Size { name: s.name.clone(), size: s.size_bytes });
        }
        if s.name.encode_utf16().count() > 36 {
            return Err(GptError::Name { name: s.name.clone() });
        }
        let first = next.div_ceil(ALIGN_SECTORS) * ALIGN_SECTORS;
        let last = first + s.size_bytes / SECTOR - 1;
        partitions.push(Placed { spec: s.clone(), first_lba: first, last_lba: last });
        next = last + 1;
    }
    let end = next.div_ceil(ALIGN_SECTORS) * ALIGN_SECTORS;
    Ok(Plan { disk_guid, total_sectors: end + ALIGN_SECTORS, partitions })
}

/// CRC-32 (IEEE 802.3, reflected, as GPT uses).
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The encoded table: write `mbr` at LBA 0, `primary` at LBA 1 (header + entries, 33
/// sectors) and `backup` ending at the disk's last sector.
pub struct Encoded {
    pub mbr: [u8; 512],
    pub primary: Vec<u8>,
    pub backup: Vec<u8>,
    pub backup_offset: u64,
}

impl Plan {
    pub fn last_lba(&self) -> u64 {
        self.total_sectors - 1
    }
    pub fn first_usable(&self) -> u64 {
        2 + ENTRY_SECTORS
    }
    pub fn last_usable(&self) -> u64 {
        self.last_lba() - 1 - ENTRY_SECTORS
    }

    pub fn encode(&self) -> Encoded {
        let mut entries = vec![0u8; (ENTRIES * ENTRY_SIZE) as usize];
        for (i, p) in self.partitions.iter().enumerate() {
            let e = &mut entries[i * ENTRY_SIZE as usize..(i + 1) * ENTRY_SIZE as usize];
            e[0..16].copy_from_slice(&p.spec.type_guid.to_disk());
            e[16..32].copy_from_slice(&p.spec.guid.to_disk());
            e[32..40].copy_from_slice(&p.first_lba.to_le_bytes());
            e[40..48].copy_from_slice(&p.last_lba.to_le_bytes());
            e[48..56].copy_from_slice(&p.spec.attributes.to_le_bytes());
            for (j, unit) in p.spec.name.encode_utf16().enumerate() {
                e[56 + j * 2..58 + j * 2].copy_from_slice(&unit.to_le_bytes());
            }
        }
        let entries_crc = crc32(&entries);
        let header = |current: u64, backup: u64, entries_lba: u64| {
            let mut h = vec![0u8; SECTOR as usize];
            h[0..8].copy_from_slice(b"EFI PART");
            h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
            h[12..16].copy_from_slice(&92u32.to_le_bytes());
            h[24..32].copy_from_slice(&current.to_le_bytes());
            h[32..40].copy_from_slice(&backup.to_le_bytes());
            h[40..48].copy_from_slice(&self.first_usable().to_le_bytes());
            h[48..56].copy_from_slice(&self.last_usable().to_le_bytes());
            h[56..72].copy_from_slice(&self.disk_guid.to_disk());
            h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
            h[80..84].copy_from_slice(&ENTRIES.to_le_bytes());
            h[84..88].copy_from_slice(&ENTRY_SIZE.to_le_bytes());
            h[88..92].copy_from_slice(&entries_crc.to_le_bytes());
            let crc = crc32(&h[..92]);
            h[16..20].copy_from_slice(&crc.to_le_bytes());
            h
        };
        let mut primary = header(1, self.last_lba(), 2);
        primary.extend_from_slice(&entries);
        let mut backup = entries.clone();
        backup.extend_from_slice(&header(self.last_lba(), 1, self.last_lba() - ENTRY_SECTORS));
        let backup_offset = (self.last_lba() - ENTRY_SECTORS) * SECTOR;
        Encoded { mbr: self.protective_mbr(), primary, backup, backup_offset }
    }

    /// A protective MBR: one 0xEE partition covering the disk (capped at 2^32-1 sectors).
    fn protective_mbr(&self) -> [u8; 512] {
        let mut m = [0u8; 512];
        let e = 0x1be;
        m[e + 1..e + 4].copy_from_slice(&[0x00, 0x02, 0x00]); // CHS of LBA 1
        m[e + 4] = 0xee;
        m[e + 5..e + 8].copy_from_slice(&[0xff, 0xff, 0xff]);
        m[e + 8..e + 12].copy_from_slice(&1u32.to_le_bytes());
        let size = u32::try_from(self.total_sectors - 1).unwrap_or(u32::MAX);
        m[e + 12..e + 16].copy_from_slice(&size.to_le_bytes());
        m[510] = 0x55;
        m[511] = 0xaa;
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn spec(name: &str, mib: u64) -> PartitionSpec {
        PartitionSpec {
            name: name.into(),
            type_guid: Guid::parse("0FC63DAF-8483-4772-8E79-3D69D8477DE4").unwrap(),
            guid: Guid::derived(name.as_bytes()),
            size_bytes: mib * MIB,
            attributes: 0,
        }
    }

    #[test]
    fn talos_layout_plan() {
        // (sizes in MiB, expected (first, last) LBAs, total sectors)
        type Case = (&'static [u64], &'static [(u64, u64)], u64);
        let cases: &[Case] = &[
            (&[100, 1, 1000, 1], &[(2048, 206847), (206848, 208895), (208896, 2256895), (2256896, 2258943)], 2260992),
            (&[1], &[(2048, 4095)], 6144),
        ];
        for (sizes, want, total) in cases {
            let specs: Vec<_> = sizes.iter().enumerate().map(|(i, s)| spec(&format!("p{i}"), *s)).collect();
            let p = plan(Guid::derived(b"d"), &specs).unwrap();
            let got: Vec<_> = p.partitions.iter().map(|x| (x.first_lba, x.last_lba)).collect();
            assert_eq!(&got, want, "{sizes:?}");
            assert_eq!(p.total_sectors, *total);
            assert!(p.partitions.last().unwrap().last_lba <= p.last_usable());
        }
    }

    #[test]
    fn plan_rejects_bad_sizes_and_names() {
        let mut s = spec("x", 1);
        s.size_bytes = 1000;
        assert_eq!(plan(Guid::derived(b""), &[s]), Err(GptError::Size { name: "x".into(), size: 1000 }));
        let long = spec(&"n".repeat(37), 1);
        assert!(matches!(plan(Guid::derived(b""), &[long]), Err(GptError::Name { .. })));
    }

    #[test]
    fn guid_text_and_disk_forms() {
        let g = Guid::parse("C12A7328-F81F-11D2-BA4B-00A0C93EC93B").unwrap();
        assert_eq!(g.to_string(), "c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
        assert_eq!(g.to_disk()[..8], [0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11]);
        for bad in ["", "C12A7328F81F11D2BA4B00A0C93EC93B", "C12A7328-F81F-11D2-BA4B-00A0C93EC93G"] {
            assert_eq!(Guid::parse(bad), Err(GptError::Guid(bad.into())));
        }
        let d = Guid::derived(b"seed");
        assert_eq!(d.0[6] >> 4, 4);
        assert_eq!(d.0[8] >> 6, 2);
    }

    #[test]
    fn crc32_known_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn header_fields_and_crcs() {
        let p = plan(Guid::derived(b"d"), &[spec("A", 1)]).unwrap();
        let e = p.encode();
        assert_eq!(&e.primary[0..8], b"EFI PART");
        let mut h = e.primary[..92].to_vec();
        let stored = u32::from_le_bytes(h[16..20].try_into().unwrap());
        h[16..20].fill(0);
        assert_eq!(crc32(&h), stored);
        assert_eq!(e.primary.len(), 512 * 33);
        assert_eq!(e.backup.len(), 512 * 33);
        assert_eq!(e.backup_offset + 33 * 512, p.total_sectors * 512);
        assert_eq!(e.mbr[0x1c2], 0xee);
        assert_eq!(&e.mbr[510..], &[0x55, 0xaa]);
    }
}
