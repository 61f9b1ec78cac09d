//! The device-mapper `crypt` target line that opens a LUKS2 volume, as cryptsetup builds it
//! (the kernel's Documentation/admin-guide/device-mapper/dm-crypt.rst): `start length cipher
//! key iv_offset device offset [#opt_params opt_params]`, all in 512-byte sectors. Loading
//! it into the kernel is the caller's; the key in the line is hex, so the line is a secret.

use zeroize::Zeroizing;

use super::header::SegmentSize;
use super::{Header, Luks2Error, Result, VolumeKey};

/// The name Talos gives an opened volume: `luks2-<volume id>` (`/dev/mapper/luks2-STATE`).
pub fn mapping_name(volume_id: &str) -> String {
    format!("luks2-{volume_id}")
}

/// Optional dm-crypt flags: Talos's `allowDiscards` and its `--perf-*` options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmCryptOptions {
    pub allow_discards: bool,
    pub same_cpu_crypt: bool,
    pub no_read_workqueue: bool,
    pub no_write_workqueue: bool,
}

/// The one `crypt` target of an opened volume, as device-mapper loads it: where it starts and
/// how long it is (512-byte sectors), and its parameters (`cipher key iv_offset device offset
/// [#opt_params opt_params]`), which hold the key in hex and so are a secret.
#[derive(Debug)]
pub struct CryptTarget {
    pub start: u64,
    pub length: u64,
    pub params: Zeroizing<String>,
}

/// The table line for the data segment of `hdr` on `device` (a path or `major:minor`) of
/// `device_sectors` 512-byte sectors, with `key` (whose length is checked against the header).
pub fn dm_crypt_table(
    hdr: &Header,
    key: &VolumeKey,
    device: &str,
    device_sectors: u64,
    opts: &DmCryptOptions,
) -> Result<Zeroizing<String>> {
    let target = dm_crypt_target(hdr, key, device, device_sectors, opts)?;
    Ok(Zeroizing::new(format!("{} {} {}", target.start, target.length, target.params.as_str())))
}

/// The `crypt` target of [`dm_crypt_table`], as a value to hand to device-mapper.
pub fn dm_crypt_target(
    hdr: &Header,
    key: &VolumeKey,
    device: &str,
    device_sectors: u64,
    opts: &DmCryptOptions,
) -> Result<CryptTarget> {
    let seg = hdr.data_segment()?;
    if key.len() != hdr.key_size()? {
        return Err(Luks2Error::WrongVolumeKey);
    }
    let offset = seg.offset / 512;
    let per_sector = u64::from(seg.sector_size / 512);
    let length = match seg.size {
        SegmentSize::Bytes(n) => n / 512,
        SegmentSize::Dynamic => {
            device_sectors.checked_sub(offset).filter(|&n| n > 0).ok_or_else(|| Luks2Error::NoSpace {
                what: "the data segment".into(),
                reason: format!("{device} has {device_sectors} sectors, the data starts at sector {offset}"),
            })?
        }
    };
    if !length.is_multiple_of(per_sector) {
        return Err(Luks2Error::NoSpace {
            what: "the data segment".into(),
            reason: format!("{length} sectors of {device} are not whole {}-byte sectors", seg.sector_size),
        });
    }
    let mut features: Vec<String> = [
        (opts.allow_discards, "allow_discards"),
        (opts.same_cpu_crypt, "same_cpu_crypt"),
        (opts.no_read_workqueue, "no_read_workqueue"),
        (opts.no_write_workqueue, "no_write_workqueue"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name.to_string())
    .collect();
    if seg.sector_size != 512 {
        features.push(format!("sector_size:{}", seg.sector_size));
    }

    let mut params = Zeroizing::new(String::with_capacity(256));
    params.push_str(&format!("{} ", seg.encryption));
    for b in key.as_bytes() {
        params.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        params.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    params.push_str(&format!(" {} {device} {offset}", seg.iv_tweak));
    if !features.is_empty() {
        params.push_str(&format!(" {} {}", features.len(), features.join(" ")));
    }
    Ok(CryptTarget { start: 0, length, params })
}

#[cfg(test)]
mod tests {
    use super::super::header::{Digest, Metadata, Segment};
    use super::super::kdf::Hash;
    use super::*;

    fn header(sector_size: u32, size: SegmentSize) -> (Header, VolumeKey) {
        let key = VolumeKey::from_bytes((0..64).collect());
        let mut digest = Digest::create(&key, Hash::Sha256, 1000, 0).unwrap();
        digest.keyslots = vec![0];
        let mut segment = Segment::crypt(16 << 20, sector_size);
        segment.size = size;
        let mut metadata = Metadata::new(0x4000, (16 << 20) - 0x8000, segment, digest);
        let ks: super::super::Keyslot = serde_json::from_value(serde_json::json!({
            "type": "luks2", "key_size": 64,
            "af": {"type": "luks1", "stripes": 4000, "hash": "sha256"},
            "area": {"type": "raw", "offset": "32768", "size": "258048", "encryption": "aes-xts-plain64", "key_size": 64},
            "kdf": {"type": "pbkdf2", "hash": "sha256", "iterations": 1000, "salt": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}
        }))
        .unwrap();
        metadata.keyslots.insert(0, ks);
        let hdr = Header {
            hdr_size: 0x4000,
            seqid: 1,
            label: String::new(),
            subsystem: String::new(),
            uuid: "0dbb9714-fea5-48e9-8413-c7b839cead9d".into(),
            metadata,
        };
        (hdr, key)
    }

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
                       202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

    #[test]
    fn table_lines() {
        let (hdr, key) = header(512, SegmentSize::Dynamic);
        let line = dm_crypt_table(&hdr, &key, "/dev/vda5", 32768 + 2048, &DmCryptOptions::default()).unwrap();
        assert_eq!(*line, format!("0 2048 aes-xts-plain64 {HEX} 0 /dev/vda5 32768"));

        let (hdr, key) = header(4096, SegmentSize::Dynamic);
        let opts = DmCryptOptions {
            allow_discards: true,
            no_read_workqueue: true,
            no_write_workqueue: true,
            ..Default::default()
        };
        let line = dm_crypt_table(&hdr, &key, "253:3", 32768 + 4096, &opts).unwrap();
        assert_eq!(
            *line,
            format!(
                "0 4096 aes-xts-plain64 {HEX} 0 253:3 32768 4 allow_discards no_read_workqueue no_write_workqueue sector_size:4096"
            )
        );

        let (hdr, key) = header(4096, SegmentSize::Bytes(1 << 20));
        let line = dm_crypt_table(&hdr, &key, "7:0", 1 << 30, &DmCryptOptions::default()).unwrap();
        assert_eq!(*line, format!("0 2048 aes-xts-plain64 {HEX} 0 7:0 32768 1 sector_size:4096"));

        // The target handed to device-mapper is the line's fields, never the line parsed back.
        let target = dm_crypt_target(&hdr, &key, "7:0", 1 << 30, &DmCryptOptions::default()).unwrap();
        assert_eq!((target.start, target.length), (0, 2048));
        assert_eq!(*target.params, format!("aes-xts-plain64 {HEX} 0 7:0 32768 1 sector_size:4096"));
    }

    #[test]
    fn table_refusals() {
        let (hdr, key) = header(4096, SegmentSize::Dynamic);
        let none = DmCryptOptions::default();
        assert!(matches!(dm_crypt_table(&hdr, &key, "7:0", 32768, &none), Err(Luks2Error::NoSpace { .. })));
        assert!(matches!(dm_crypt_table(&hdr, &key, "7:0", 32768 + 9, &none), Err(Luks2Error::NoSpace { .. })));
        let short = VolumeKey::from_bytes(vec![0; 32]);
        assert!(matches!(dm_crypt_table(&hdr, &short, "7:0", 1 << 20, &none), Err(Luks2Error::WrongVolumeKey)));
        assert_eq!(mapping_name("STATE"), "luks2-STATE");
    }
}
