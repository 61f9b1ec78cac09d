//! The two copies of the LUKS2 header and the JSON metadata they carry.
//!
//! On-disk facts (cryptsetup's docs/on-disk-format-luks2.pdf and lib/luks2/luks2.h): each
//! copy is a 4096-byte binary header followed by the JSON area, `hdr_size` bytes in all; the
//! primary sits at 0 with magic `LUKS\xba\xbe`, the secondary right after it with `SKUL\xba\xbe`.
//! Big-endian fields: version (u16) at 6, hdr_size at 8, seqid at 16, label (48) at 24,
//! checksum_alg (32) at 72, salt (64) at 104, uuid (40) at 168, subsystem (48) at 208,
//! hdr_offset at 256, checksum (64) at 448. The checksum is SHA-256 over the whole `hdr_size`
//! bytes with the checksum field zeroed. The copy with the higher seqid among the valid ones
//! wins; a damaged primary is found again by trying the secondary at each offset it may have.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::kdf::{Hash, Kdf};
use super::{CIPHER, Device, Luks2Error, MAX_KEYSLOTS, MAX_TOKENS, Result, SALT_LEN, Token, VolumeKey};
use crate::block::read_at;

const MAGIC_PRIMARY: &[u8; 6] = b"LUKS\xba\xbe";
const MAGIC_SECONDARY: &[u8; 6] = b"SKUL\xba\xbe";
pub(crate) const BINARY_LEN: usize = 4096;
pub(crate) const LABEL_LEN: usize = 48;
const OFF_VERSION: usize = 6;
const OFF_HDR_SIZE: usize = 8;
const OFF_SEQID: usize = 16;
const OFF_LABEL: usize = 24;
const OFF_CSUM_ALG: usize = 72;
const CSUM_ALG_LEN: usize = 32;
const OFF_SALT: usize = 104;
const HDR_SALT_LEN: usize = 64;
const OFF_UUID: usize = 168;
const UUID_LEN: usize = 40;
const OFF_SUBSYSTEM: usize = 208;
const OFF_HDR_OFFSET: usize = 256;
const OFF_CSUM: usize = 448;
const CSUM_LEN: usize = 64;
/// The sizes a header may have, which are also where a secondary copy may start.
const HDR_SIZES: [u64; 9] = [0x4000, 0x8000, 0x1_0000, 0x2_0000, 0x4_0000, 0x8_0000, 0x10_0000, 0x20_0000, 0x40_0000];

/// A LUKS2 header: the binary fields both copies share and the JSON metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// Binary header plus JSON area, in bytes; the secondary copy starts here.
    pub hdr_size: u64,
    /// Raised on every write (cryptsetup's "Epoch").
    pub seqid: u64,
    pub label: String,
    pub subsystem: String,
    pub uuid: String,
    pub metadata: Metadata,
}

/// The JSON metadata. Objects keep the fields this code does not know (`extra`) so a rewrite
/// loses nothing cryptsetup put there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub keyslots: BTreeMap<u32, Keyslot>,
    pub tokens: BTreeMap<u32, Token>,
    pub segments: BTreeMap<u32, Segment>,
    pub digests: BTreeMap<u32, Digest>,
    pub config: Config,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Keyslot {
    /// Always `luks2` here.
    #[serde(rename = "type")]
    pub kind: String,
    /// The volume key's size in bytes.
    pub key_size: u32,
    pub af: Af,
    pub area: Area,
    pub kdf: KeyslotKdf,
    /// 0 ignore (tried only when named), 1 normal (also when absent), 2 high (tried first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The anti-forensic splitter: always cryptsetup's (`luks1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Af {
    #[serde(rename = "type")]
    pub kind: String,
    pub stripes: u32,
    pub hash: Hash,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where a keyslot's split key lies, and how it is encrypted there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Area {
    /// Always `raw` here.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(with = "dec")]
    pub offset: u64,
    #[serde(with = "dec")]
    pub size: u64,
    pub encryption: String,
    /// The area key's size in bytes.
    pub key_size: u32,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A keyslot's KDF and its salt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawKdf", into = "RawKdf")]
pub struct KeyslotKdf {
    pub kdf: Kdf,
    pub salt: Vec<u8>,
}

/// The JSON shape of a keyslot's `kdf`.
#[derive(Serialize, Deserialize)]
struct RawKdf {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<Hash>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iterations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpus: Option<u32>,
    #[serde(with = "b64")]
    salt: Vec<u8>,
}

impl TryFrom<RawKdf> for KeyslotKdf {
    type Error = String;

    fn try_from(r: RawKdf) -> std::result::Result<KeyslotKdf, String> {
        let need = |v: Option<u32>, name: &str| v.ok_or_else(|| format!("{} kdf without {name}", r.kind));
        let kdf = match r.kind.as_str() {
            "pbkdf2" => Kdf::Pbkdf2 {
                hash: r.hash.ok_or("pbkdf2 kdf without hash")?,
                iterations: need(r.iterations, "iterations")?,
            },
            "argon2id" | "argon2i" => {
                let (time, memory_kib, parallel) =
                    (need(r.time, "time")?, need(r.memory, "memory")?, need(r.cpus, "cpus")?);
                if r.kind == "argon2id" {
                    Kdf::Argon2id { time, memory_kib, parallel }
                } else {
                    Kdf::Argon2i { time, memory_kib, parallel }
                }
            }
            other => return Err(format!("kdf type {other:?}")),
        };
        Ok(KeyslotKdf { kdf, salt: r.salt })
    }
}

impl From<KeyslotKdf> for RawKdf {
    fn from(k: KeyslotKdf) -> RawKdf {
        let mut r = RawKdf {
            kind: k.kdf.name().into(),
            hash: None,
            iterations: None,
            time: None,
            memory: None,
            cpus: None,
            salt: k.salt,
        };
        match k.kdf {
            Kdf::Pbkdf2 { hash, iterations } => (r.hash, r.iterations) = (Some(hash), Some(iterations)),
            Kdf::Argon2id { time, memory_kib, parallel } | Kdf::Argon2i { time, memory_kib, parallel } => {
                (r.time, r.memory, r.cpus) = (Some(time), Some(memory_kib), Some(parallel))
            }
        }
        r
    }
}

/// A data segment: where the encrypted data lies and how it is encrypted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Always `crypt` here.
    #[serde(rename = "type")]
    pub kind: String,
    /// Bytes from the start of the device.
    #[serde(with = "dec")]
    pub offset: u64,
    pub size: SegmentSize,
    /// The IV of the segment's first sector.
    #[serde(with = "dec")]
    pub iv_tweak: u64,
    pub encryption: String,
    pub sector_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A segment's length: to the end of the device (`dynamic`), or fixed, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentSize {
    Dynamic,
    Bytes(u64),
}

impl Serialize for SegmentSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            SegmentSize::Dynamic => s.serialize_str("dynamic"),
            SegmentSize::Bytes(n) => s.serialize_str(&n.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for SegmentSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<SegmentSize, D::Error> {
        let s = String::deserialize(d)?;
        if s == "dynamic" {
            return Ok(SegmentSize::Dynamic);
        }
        s.parse().map(SegmentSize::Bytes).map_err(|_| serde::de::Error::custom(format!("segment size {s:?}")))
    }
}

impl Segment {
    /// A `crypt` segment of aes-xts-plain64 from `offset` to the end of the device.
    pub fn crypt(offset: u64, sector_size: u32) -> Segment {
        Segment {
            kind: "crypt".into(),
            offset,
            size: SegmentSize::Dynamic,
            iv_tweak: 0,
            encryption: CIPHER.into(),
            sector_size,
            flags: None,
            extra: Map::new(),
        }
    }
}

/// The PBKDF2 digest that tells a right volume key from a wrong one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Digest {
    /// Always `pbkdf2` here.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(with = "ids")]
    pub keyslots: Vec<u32>,
    #[serde(with = "ids")]
    pub segments: Vec<u32>,
    pub hash: Hash,
    pub iterations: u32,
    #[serde(with = "b64")]
    pub salt: Vec<u8>,
    #[serde(with = "b64")]
    pub digest: Vec<u8>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Digest {
    /// The digest of `key` for `segment`, with a fresh salt; no keyslots yet.
    pub(crate) fn create(key: &VolumeKey, hash: Hash, iterations: u32, segment: u32) -> Result<Digest> {
        let mut salt = vec![0u8; SALT_LEN];
        super::random(&mut salt)?;
        let mut digest = vec![0u8; hash.output_len()];
        hash.pbkdf2(key.as_bytes(), &salt, iterations, &mut digest);
        Ok(Digest {
            kind: "pbkdf2".into(),
            keyslots: Vec::new(),
            segments: vec![segment],
            hash,
            iterations,
            salt,
            digest,
            extra: Map::new(),
        })
    }

    /// Whether `key` is the key this digest was made of (compared in constant time).
    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        let mut out = zeroize::Zeroizing::new(vec![0u8; self.digest.len()]);
        self.hash.pbkdf2(key, &self.salt, self.iterations, &mut out);
        out.iter().zip(&self.digest).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// The JSON area's size: `hdr_size` − 4096.
    #[serde(with = "dec")]
    pub json_size: u64,
    /// The keyslot areas' size, from 2 × `hdr_size`.
    #[serde(with = "dec")]
    pub keyslots_size: u64,
    /// Persistent activation flags (`allow-discards`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Requirements>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Requirements {
    #[serde(default)]
    pub mandatory: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Metadata {
    /// Metadata with one segment and its digest, and no keyslots or tokens yet.
    pub(crate) fn new(hdr_size: u64, keyslots_size: u64, segment: Segment, digest: Digest) -> Metadata {
        Metadata {
            keyslots: BTreeMap::new(),
            tokens: BTreeMap::new(),
            segments: BTreeMap::from([(0, segment)]),
            digests: BTreeMap::from([(0, digest)]),
            config: Config {
                json_size: hdr_size - BINARY_LEN as u64,
                keyslots_size,
                flags: None,
                requirements: None,
                extra: Map::new(),
            },
            extra: Map::new(),
        }
    }
}

impl Header {
    /// Reads both copies of the header from `dev` and returns the valid one with the higher
    /// seqid, after refusing by name what this module does not implement.
    pub fn read<R: Read + Seek>(dev: &mut R) -> Result<Header> {
        let mut head = [0u8; 8];
        if read_at(dev, 0, &mut head).map_err(|source| Luks2Error::Io { what: "reading", offset: 0, source })?
            && head[..6] == *MAGIC_PRIMARY
            && be16(&head, OFF_VERSION) == 1
        {
            return Err(Luks2Error::Luks1);
        }
        let primary = read_copy(dev, 0, MAGIC_PRIMARY)?;
        let secondary = match &primary {
            Ok(p) => read_copy(dev, p.hdr_size, MAGIC_SECONDARY)?,
            Err(_) => {
                let mut found = Err(CopyError::NoMagic);
                for offset in HDR_SIZES {
                    match read_copy(dev, offset, MAGIC_SECONDARY)? {
                        Ok(c) => {
                            found = Ok(c);
                            break;
                        }
                        Err(CopyError::NoMagic) => {}
                        Err(e) => found = Err(e),
                    }
                }
                found
            }
        };
        let chosen = match (primary, secondary) {
            (Ok(p), Ok(s)) => {
                if s.seqid > p.seqid {
                    s
                } else {
                    p
                }
            }
            (Ok(c), Err(_)) | (Err(_), Ok(c)) => c,
            (Err(CopyError::NoMagic), Err(CopyError::NoMagic)) => return Err(Luks2Error::NotLuks),
            (Err(p), Err(s)) => return Err(Luks2Error::Damaged { primary: p.to_string(), secondary: s.to_string() }),
        };
        check_supported(&chosen.json)?;
        let metadata: Metadata = serde_json::from_value(chosen.json).map_err(Luks2Error::Json)?;
        let hdr = Header {
            hdr_size: chosen.hdr_size,
            seqid: chosen.seqid,
            label: chosen.label,
            subsystem: chosen.subsystem,
            uuid: chosen.uuid,
            metadata,
        };
        hdr.validate()?;
        Ok(hdr)
    }

    /// Writes both copies (primary first), each with a fresh salt, and syncs.
    pub(crate) fn write<D: Device>(&self, dev: &mut D) -> Result<()> {
        self.validate()?;
        let json = serde_json::to_vec(&self.metadata).map_err(Luks2Error::Json)?;
        let json_size = self.hdr_size as usize - BINARY_LEN;
        // The JSON must end with at least one NUL inside its area.
        if json.len() >= json_size {
            return Err(Luks2Error::NoSpace {
                what: "the JSON metadata".into(),
                reason: format!("{} bytes do not fit the {json_size}-byte JSON area", json.len()),
            });
        }
        for (offset, magic) in [(0, MAGIC_PRIMARY), (self.hdr_size, MAGIC_SECONDARY)] {
            let mut area = vec![0u8; self.hdr_size as usize];
            area[..6].copy_from_slice(magic);
            area[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&2u16.to_be_bytes());
            area[OFF_HDR_SIZE..OFF_HDR_SIZE + 8].copy_from_slice(&self.hdr_size.to_be_bytes());
            area[OFF_SEQID..OFF_SEQID + 8].copy_from_slice(&self.seqid.to_be_bytes());
            put_str(&mut area[OFF_LABEL..OFF_LABEL + LABEL_LEN], &self.label);
            put_str(&mut area[OFF_CSUM_ALG..OFF_CSUM_ALG + CSUM_ALG_LEN], "sha256");
            super::random(&mut area[OFF_SALT..OFF_SALT + HDR_SALT_LEN])?;
            put_str(&mut area[OFF_UUID..OFF_UUID + UUID_LEN], &self.uuid);
            put_str(&mut area[OFF_SUBSYSTEM..OFF_SUBSYSTEM + LABEL_LEN], &self.subsystem);
            area[OFF_HDR_OFFSET..OFF_HDR_OFFSET + 8].copy_from_slice(&offset.to_be_bytes());
            area[BINARY_LEN..BINARY_LEN + json.len()].copy_from_slice(&json);
            let sum = checksum(&area);
            area[OFF_CSUM..OFF_CSUM + sum.len()].copy_from_slice(&sum);
            let io = |source| Luks2Error::Io { what: "writing the LUKS2 header", offset, source };
            dev.seek(SeekFrom::Start(offset)).map_err(io)?;
            dev.write_all(&area).map_err(io)?;
        }
        dev.sync().map_err(|source| Luks2Error::Io { what: "syncing the LUKS2 header", offset: 0, source })
    }

    /// The data segment (there is exactly one, id 0).
    pub fn data_segment(&self) -> Result<&Segment> {
        self.metadata.segments.get(&0).ok_or_else(|| invalid("segments", "no segment 0"))
    }

    /// The digest that verifies the data segment's key.
    pub fn segment_digest(&self) -> Result<&Digest> {
        self.metadata
            .digests
            .values()
            .find(|d| d.segments.contains(&0))
            .ok_or_else(|| invalid("digests", "none for segment 0"))
    }

    /// The volume key's size in bytes, from the keyslots of the segment's digest.
    pub fn key_size(&self) -> Result<usize> {
        let digest = self.segment_digest()?;
        digest
            .keyslots
            .iter()
            .find_map(|k| self.metadata.keyslots.get(k))
            .map(|k| k.key_size as usize)
            .ok_or_else(|| invalid("digests", "the segment's digest has no keyslots"))
    }

    pub fn token(&self, id: u32) -> Option<&Token> {
        self.metadata.tokens.get(&id)
    }

    /// Whether `key` is this volume's key.
    pub fn verify_key(&self, key: &VolumeKey) -> Result<bool> {
        Ok(self.segment_digest()?.matches(key.as_bytes()))
    }

    /// The structural checks both reading and writing rely on: sizes agree, areas sit in
    /// the keyslot area without overlapping each other or the data, references resolve.
    fn validate(&self) -> Result<()> {
        let m = &self.metadata;
        if !HDR_SIZES.contains(&self.hdr_size) {
            return Err(invalid("hdr_size", format!("{} is not a LUKS2 header size", self.hdr_size)));
        }
        if m.config.json_size + BINARY_LEN as u64 != self.hdr_size {
            return Err(invalid(
                "config.json_size",
                format!("{} with a {}-byte header", m.config.json_size, self.hdr_size),
            ));
        }
        if !m.config.keyslots_size.is_multiple_of(4096) {
            return Err(invalid(
                "config.keyslots_size",
                format!("{} is not a multiple of 4096", m.config.keyslots_size),
            ));
        }
        let areas_start = 2 * self.hdr_size;
        let areas_end = areas_start + m.config.keyslots_size;
        let mut areas: Vec<(u64, u64, u32)> = Vec::new();
        for (&id, ks) in &m.keyslots {
            let field = |f: &str| format!("keyslots.{id}.{f}");
            if id >= MAX_KEYSLOTS {
                return Err(invalid(format!("keyslots.{id}"), format!("ids are below {MAX_KEYSLOTS}")));
            }
            if ![32, 64].contains(&ks.key_size) {
                return Err(Luks2Error::Unsupported {
                    feature: format!("keyslot {id} key size {} bits (aes-xts takes 256 or 512)", ks.key_size * 8),
                });
            }
            if ![32, 64].contains(&ks.area.key_size) {
                return Err(Luks2Error::Unsupported {
                    feature: format!("keyslot {id} area key size {} bits", ks.area.key_size * 8),
                });
            }
            if ks.af.stripes == 0 {
                return Err(invalid(field("af.stripes"), "0"));
            }
            let need = super::keyslot::material_len(ks.key_size as usize, ks.af.stripes) as u64;
            if ks.area.size < need {
                return Err(invalid(field("area.size"), format!("{} bytes cannot hold {need}", ks.area.size)));
            }
            if !ks.area.offset.is_multiple_of(512)
                || ks.area.offset < areas_start
                || ks.area.offset + ks.area.size > areas_end
            {
                return Err(invalid(
                    field("area"),
                    format!(
                        "bytes {}..{} are not inside the keyslots area {areas_start}..{areas_end}",
                        ks.area.offset,
                        ks.area.offset + ks.area.size
                    ),
                ));
            }
            if ks.kdf.salt.len() != SALT_LEN {
                return Err(invalid(field("kdf.salt"), format!("{} bytes, not {SALT_LEN}", ks.kdf.salt.len())));
            }
            if let Some(&(_, _, other)) =
                areas.iter().find(|&&(o, s, _)| ks.area.offset < o + s && o < ks.area.offset + ks.area.size)
            {
                return Err(invalid(field("area"), format!("overlaps keyslot {other}'s")));
            }
            areas.push((ks.area.offset, ks.area.size, id));
        }
        let segment = self.data_segment()?;
        if ![512, 1024, 2048, 4096].contains(&segment.sector_size) {
            return Err(invalid("segments.0.sector_size", segment.sector_size.to_string()));
        }
        if segment.offset < areas_end || !segment.offset.is_multiple_of(u64::from(segment.sector_size)) {
            return Err(invalid(
                "segments.0.offset",
                format!("{} is inside the metadata (..{areas_end}) or not sector-aligned", segment.offset),
            ));
        }
        if let SegmentSize::Bytes(n) = segment.size
            && !n.is_multiple_of(u64::from(segment.sector_size))
        {
            return Err(invalid("segments.0.size", format!("{n} is not a whole number of sectors")));
        }
        for (&id, d) in &m.digests {
            if let Some(k) = d.keyslots.iter().find(|k| !m.keyslots.contains_key(k)) {
                return Err(invalid(format!("digests.{id}.keyslots"), format!("keyslot {k} does not exist")));
            }
            if let Some(s) = d.segments.iter().find(|s| !m.segments.contains_key(s)) {
                return Err(invalid(format!("digests.{id}.segments"), format!("segment {s} does not exist")));
            }
            if d.salt.len() != SALT_LEN || d.digest.len() < 20 || d.digest.len() > d.hash.output_len() {
                return Err(invalid(format!("digests.{id}"), "salt or digest of the wrong length"));
            }
        }
        if m.digests.values().filter(|d| d.segments.contains(&0)).count() != 1 {
            return Err(invalid("digests", "segment 0 needs exactly one digest"));
        }
        for (&id, t) in &m.tokens {
            if id >= MAX_TOKENS {
                return Err(invalid(format!("tokens.{id}"), format!("ids are below {MAX_TOKENS}")));
            }
            if let Some(k) = t.keyslots.iter().find(|k| !m.keyslots.contains_key(k)) {
                return Err(invalid(format!("tokens.{id}.keyslots"), format!("keyslot {k} does not exist")));
            }
        }
        Ok(())
    }

    /// Where a new keyslot area of `len` bytes fits: the lowest gap in the keyslots area.
    pub(crate) fn free_area(&self, len: u64) -> Result<u64> {
        let start = 2 * self.hdr_size;
        let end = start + self.metadata.config.keyslots_size;
        let mut used: Vec<(u64, u64)> = self.metadata.keyslots.values().map(|k| (k.area.offset, k.area.size)).collect();
        used.sort();
        let mut at = start;
        for (offset, size) in used {
            if offset >= at + len {
                break;
            }
            at = at.max(offset + size);
        }
        if at + len > end {
            return Err(Luks2Error::NoSpace {
                what: "a keyslot area".into(),
                reason: format!("{len} bytes do not fit the free space of the keyslots area {start}..{end}"),
            });
        }
        Ok(at)
    }
}

/// Why one copy of the header is unusable.
#[derive(Debug)]
enum CopyError {
    NoMagic,
    Bad(String),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::NoMagic => f.write_str("no LUKS2 magic"),
            CopyError::Bad(why) => f.write_str(why),
        }
    }
}

/// One copy, checked: magic, version, size, own offset, checksum, parseable JSON.
struct Copy {
    hdr_size: u64,
    seqid: u64,
    label: String,
    subsystem: String,
    uuid: String,
    json: Value,
}

/// Reads the copy at `offset`: `Ok(Err(_))` says why it is not valid; `Err` is an I/O error.
fn read_copy<R: Read + Seek>(
    dev: &mut R,
    offset: u64,
    magic: &[u8; 6],
) -> Result<std::result::Result<Copy, CopyError>> {
    let io = |source| Luks2Error::Io { what: "reading the LUKS2 header", offset, source };
    let mut bin = vec![0u8; BINARY_LEN];
    if !read_at(dev, offset, &mut bin).map_err(io)? || bin[..6] != *magic {
        return Ok(Err(CopyError::NoMagic));
    }
    let at = |what: String| Ok(Err(CopyError::Bad(format!("at byte {offset}: {what}"))));
    let version = be16(&bin, OFF_VERSION);
    if version != 2 {
        return at(format!("version {version}"));
    }
    let hdr_size = be64(&bin, OFF_HDR_SIZE);
    if !HDR_SIZES.contains(&hdr_size) {
        return at(format!("header size {hdr_size}"));
    }
    let hdr_offset = be64(&bin, OFF_HDR_OFFSET);
    if hdr_offset != offset {
        return at(format!("records offset {hdr_offset}"));
    }
    let alg = get_str(&bin[OFF_CSUM_ALG..OFF_CSUM_ALG + CSUM_ALG_LEN]);
    if alg != "sha256" {
        return at(format!("checksum algorithm {alg:?} (only sha256 is supported)"));
    }
    let mut area = bin;
    area.resize(hdr_size as usize, 0);
    if !read_at(dev, offset + BINARY_LEN as u64, &mut area[BINARY_LEN..]).map_err(io)? {
        return at("the JSON area runs past the end of the device".into());
    }
    let sum = checksum(&area);
    if area[OFF_CSUM..OFF_CSUM + sum.len()] != sum {
        return at("checksum mismatch".into());
    }
    let json = &area[BINARY_LEN..];
    let end = json.iter().position(|&b| b == 0).unwrap_or(json.len());
    let json: Value = match serde_json::from_slice(&json[..end]) {
        Ok(v) => v,
        Err(e) => return at(format!("JSON: {e}")),
    };
    Ok(Ok(Copy {
        hdr_size,
        seqid: be64(&area, OFF_SEQID),
        label: get_str(&area[OFF_LABEL..OFF_LABEL + LABEL_LEN]),
        subsystem: get_str(&area[OFF_SUBSYSTEM..OFF_SUBSYSTEM + LABEL_LEN]),
        uuid: get_str(&area[OFF_UUID..OFF_UUID + UUID_LEN]),
        json,
    }))
}

/// SHA-256 of a whole copy (binary header and JSON area) with its checksum field as zeros.
pub(crate) fn checksum(area: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(&area[..OFF_CSUM]);
    h.update([0u8; CSUM_LEN]);
    h.update(&area[OFF_CSUM + CSUM_LEN..]);
    h.finalize().into()
}

/// Refuses, by name, what a header may hold and this module does not implement. Runs on the
/// raw JSON, before the typed parse, so the error names the feature rather than a field.
fn check_supported(json: &Value) -> Result<()> {
    let unsupported = |feature: String| Err(Luks2Error::Unsupported { feature });
    let s = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let objects = |key: &str| json.get(key).and_then(Value::as_object).cloned().unwrap_or_default();

    if let Some(mandatory) = json.pointer("/config/requirements/mandatory").and_then(Value::as_array)
        && !mandatory.is_empty()
    {
        let names: Vec<String> = mandatory.iter().map(|v| v.as_str().unwrap_or("?").to_string()).collect();
        return unsupported(format!(
            "mandatory requirements {} (an unfinished reencryption, hardware OPAL encryption, or another feature this reader lacks)",
            names.join(", ")
        ));
    }
    let segments = objects("segments");
    if segments.len() > 1 {
        return unsupported(format!("{} data segments (a reencryption in progress)", segments.len()));
    }
    for (id, seg) in &segments {
        if s(seg, "type") != "crypt" {
            return unsupported(format!("segment {id} of type {:?}", s(seg, "type")));
        }
        if let Some(integrity) = seg.get("integrity").filter(|v| !v.is_null()) {
            return unsupported(format!(
                "integrity protection (dm-integrity) on segment {id}: {:?}",
                integrity.get("type").and_then(Value::as_str).unwrap_or("?")
            ));
        }
        if s(seg, "encryption") != CIPHER {
            return unsupported(format!(
                "cipher {:?} on segment {id} (only {CIPHER} is supported)",
                s(seg, "encryption")
            ));
        }
    }
    for (id, ks) in &objects("keyslots") {
        if s(ks, "type") != "luks2" {
            return unsupported(format!("keyslot {id} of type {:?} (only luks2)", s(ks, "type")));
        }
        let af = ks.get("af").cloned().unwrap_or_default();
        if s(&af, "type") != "luks1" {
            return unsupported(format!("keyslot {id} anti-forensic splitter {:?} (only luks1)", s(&af, "type")));
        }
        if Hash::from_name(&s(&af, "hash")).is_none() {
            return unsupported(format!("keyslot {id} splitter hash {:?} (only sha256, sha512)", s(&af, "hash")));
        }
        let area = ks.get("area").cloned().unwrap_or_default();
        if s(&area, "type") != "raw" {
            return unsupported(format!("keyslot {id} area of type {:?} (only raw)", s(&area, "type")));
        }
        if s(&area, "encryption") != CIPHER {
            return unsupported(format!(
                "cipher {:?} on keyslot {id} (only {CIPHER} is supported)",
                s(&area, "encryption")
            ));
        }
        let kdf = ks.get("kdf").cloned().unwrap_or_default();
        match s(&kdf, "type").as_str() {
            "argon2id" | "argon2i" => {}
            "pbkdf2" if Hash::from_name(&s(&kdf, "hash")).is_some() => {}
            "pbkdf2" => {
                return unsupported(format!("keyslot {id} pbkdf2 hash {:?} (only sha256, sha512)", s(&kdf, "hash")));
            }
            other => return unsupported(format!("keyslot {id} kdf {other:?} (only argon2id, argon2i, pbkdf2)")),
        }
    }
    for (id, d) in &objects("digests") {
        if s(d, "type") != "pbkdf2" {
            return unsupported(format!("digest {id} of type {:?} (only pbkdf2)", s(d, "type")));
        }
        if Hash::from_name(&s(d, "hash")).is_none() {
            return unsupported(format!("digest {id} hash {:?} (only sha256, sha512)", s(d, "hash")));
        }
    }
    Ok(())
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Luks2Error {
    Luks2Error::Invalid { field: field.into(), reason: reason.into() }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// A NUL-terminated string field.
fn get_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Fills a string field, leaving at least one NUL (the caller checked the length).
fn put_str(field: &mut [u8], s: &str) {
    let n = s.len().min(field.len() - 1);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// u64 values, which LUKS2 JSON writes as decimal strings.
mod dec {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|_| serde::de::Error::custom(format!("{s:?} is not a decimal u64")))
    }
}

/// Lists of keyslot or segment ids, which LUKS2 JSON writes as strings.
pub(crate) mod ids {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u32], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|i| i.to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        Vec::<String>::deserialize(d)?
            .into_iter()
            .map(|s| s.parse().map_err(|_| serde::de::Error::custom(format!("id {s:?}"))))
            .collect()
    }
}

/// Bytes as standard, padded base64 (salts, digests; Go's encoding of `[]byte` too); `null`
/// reads as empty, as Go writes a nil slice.
pub(crate) mod b64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Vec::new()),
            Some(s) => STANDARD.decode(s.as_bytes()).map_err(|e| serde::de::Error::custom(format!("base64: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A header written through [`Header::write`], as a cryptsetup-like image (headers only).
    fn sample() -> (Header, Cursor<Vec<u8>>) {
        let key = VolumeKey::from_bytes(vec![7; 64]);
        let digest = Digest::create(&key, Hash::Sha256, 1000, 0).unwrap();
        let mut hdr = Header {
            hdr_size: 0x4000,
            seqid: 5,
            label: "STATE".into(),
            subsystem: String::new(),
            uuid: "0dbb9714-fea5-48e9-8413-c7b839cead9d".into(),
            metadata: Metadata::new(0x4000, (1 << 20) - 0x8000, Segment::crypt(1 << 20, 4096), digest),
        };
        hdr.metadata.keyslots.insert(
            0,
            Keyslot {
                kind: "luks2".into(),
                key_size: 64,
                af: Af { kind: "luks1".into(), stripes: 4000, hash: Hash::Sha256, extra: Map::new() },
                area: Area {
                    kind: "raw".into(),
                    offset: 0x8000,
                    size: 258048,
                    encryption: CIPHER.into(),
                    key_size: 64,
                    extra: Map::new(),
                },
                kdf: KeyslotKdf { kdf: Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 1000 }, salt: vec![1; 32] },
                priority: None,
                extra: Map::new(),
            },
        );
        hdr.metadata.digests.get_mut(&0).unwrap().keyslots.push(0);
        let mut dev = Cursor::new(vec![0u8; 2 << 20]);
        hdr.write(&mut dev).unwrap();
        (hdr, dev)
    }

    #[test]
    fn a_written_header_reads_back_and_checksums() {
        let (hdr, mut dev) = sample();
        assert_eq!(Header::read(&mut dev).unwrap(), hdr);
        let img = dev.get_ref();
        for (offset, magic) in [(0usize, MAGIC_PRIMARY), (0x4000, MAGIC_SECONDARY)] {
            let area = &img[offset..offset + 0x4000];
            assert_eq!(&area[..6], magic);
            assert_eq!(be64(area, OFF_HDR_OFFSET), offset as u64);
            // The checksum is plain SHA-256 of the area with the checksum field zeroed.
            let mut zeroed = area.to_vec();
            zeroed[OFF_CSUM..OFF_CSUM + CSUM_LEN].fill(0);
            let want: [u8; 32] = Sha256::digest(&zeroed).into();
            assert_eq!(&area[OFF_CSUM..OFF_CSUM + 32], &want);
            assert!(area[OFF_CSUM + 32..OFF_CSUM + CSUM_LEN].iter().all(|&b| b == 0));
        }
        // Each copy has its own salt.
        assert_ne!(img[OFF_SALT..OFF_SALT + 64], img[0x4000 + OFF_SALT..0x4000 + OFF_SALT + 64]);
        let text = std::str::from_utf8(&img[4096..4096 + 200]).unwrap();
        assert!(text.starts_with(r#"{"keyslots":{"0":{"type":"luks2","key_size":64,"#), "{text}");
    }

    #[test]
    fn a_damaged_copy_falls_back_to_the_other() {
        let (hdr, dev) = sample();
        // A flipped JSON byte in the primary: the secondary is read.
        let mut img = dev.clone().into_inner();
        img[5000] ^= 1;
        assert_eq!(Header::read(&mut Cursor::new(img.clone())).unwrap(), hdr);
        // The primary wiped entirely: the secondary is found by scanning.
        let mut wiped = dev.clone().into_inner();
        wiped[..0x4000].fill(0);
        assert_eq!(Header::read(&mut Cursor::new(wiped)).unwrap(), hdr);
        // Both damaged: an error naming both.
        img[0x4000 + 5000] ^= 1;
        match Header::read(&mut Cursor::new(img)) {
            Err(Luks2Error::Damaged { primary, secondary }) => {
                assert!(primary.contains("checksum mismatch") && secondary.contains("checksum mismatch"));
            }
            other => panic!("{other:?}"),
        }
        // Nothing there at all.
        assert!(matches!(Header::read(&mut Cursor::new(vec![0u8; 1 << 20])), Err(Luks2Error::NotLuks)));
    }

    #[test]
    fn the_higher_seqid_wins() {
        let (mut hdr, mut dev) = sample();
        let old = dev.get_ref()[..0x4000].to_vec();
        hdr.seqid += 1;
        hdr.label = "NEWER".into();
        hdr.write(&mut dev).unwrap();
        // A write torn after the secondary: the primary is older but valid.
        dev.get_mut()[..0x4000].copy_from_slice(&old);
        assert_eq!(Header::read(&mut dev).unwrap().label, "NEWER");
    }

    /// Rewrites the primary's JSON (and its checksum), leaving no secondary.
    fn with_json(edit: impl Fn(&mut Value)) -> Cursor<Vec<u8>> {
        let (_, dev) = sample();
        let mut img = dev.into_inner();
        let mut json: Value =
            serde_json::from_slice(&img[4096..4096 + img[4096..0x4000].iter().position(|&b| b == 0).unwrap()]).unwrap();
        edit(&mut json);
        let text = serde_json::to_vec(&json).unwrap();
        img[4096..0x4000].fill(0);
        img[4096..4096 + text.len()].copy_from_slice(&text);
        let sum = checksum(&img[..0x4000]);
        img[OFF_CSUM..OFF_CSUM + 32].copy_from_slice(&sum);
        img[0x4000..0x8000].fill(0);
        Cursor::new(img)
    }

    type Edit = Box<dyn Fn(&mut Value)>;

    #[test]
    fn unsupported_features_are_refused_by_name() {
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|j| j["config"]["requirements"] = serde_json::json!({"mandatory": ["online-reencrypt-v2"]})),
                "online-reencrypt-v2",
            ),
            (Box::new(|j| j["segments"]["0"]["encryption"] = "serpent-xts-plain64".into()), "serpent-xts-plain64"),
            (
                Box::new(
                    |j| j["segments"]["0"]["integrity"] = serde_json::json!({"type": "hmac(sha256)", "journal_encryption": "none", "journal_integrity": "none"}),
                ),
                "dm-integrity",
            ),
            (Box::new(|j| j["segments"]["1"] = j["segments"]["0"].clone()), "2 data segments"),
            (Box::new(|j| j["keyslots"]["0"]["type"] = "reencrypt".into()), "keyslot 0 of type \"reencrypt\""),
            (Box::new(|j| j["keyslots"]["0"]["af"]["type"] = "luks3".into()), "splitter \"luks3\""),
            (Box::new(|j| j["keyslots"]["0"]["af"]["hash"] = "sha1".into()), "splitter hash \"sha1\""),
            (Box::new(|j| j["keyslots"]["0"]["area"]["encryption"] = "aes-cbc-essiv:sha256".into()), "aes-cbc-essiv"),
            (Box::new(|j| j["keyslots"]["0"]["kdf"]["type"] = "scrypt".into()), "kdf \"scrypt\""),
            (Box::new(|j| j["keyslots"]["0"]["kdf"]["hash"] = "whirlpool".into()), "pbkdf2 hash \"whirlpool\""),
            (Box::new(|j| j["digests"]["0"]["type"] = "hmac".into()), "digest 0 of type \"hmac\""),
            (Box::new(|j| j["keyslots"]["0"]["key_size"] = 16.into()), "key size 128 bits"),
        ];
        for (edit, name) in cases {
            match Header::read(&mut with_json(edit)) {
                Err(e @ Luks2Error::Unsupported { .. }) => assert!(e.to_string().contains(name), "{e} lacks {name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // The unchanged JSON, rewritten the same way, reads.
        assert!(Header::read(&mut with_json(|_| {})).is_ok());
    }

    #[test]
    fn inconsistent_metadata_is_invalid() {
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|j| j["config"]["json_size"] = "4096".into()), "config.json_size"),
            (Box::new(|j| j["keyslots"]["0"]["area"]["offset"] = "4096".into()), "keyslots.0.area"),
            (Box::new(|j| j["keyslots"]["0"]["area"]["size"] = "4096".into()), "keyslots.0.area.size"),
            (Box::new(|j| j["segments"]["0"]["offset"] = "32768".into()), "segments.0.offset"),
            (Box::new(|j| j["digests"]["0"]["keyslots"] = serde_json::json!(["0", "3"])), "digests.0.keyslots"),
            (Box::new(|j| j["tokens"]["0"] = serde_json::json!({"type": "x", "keyslots": ["9"]})), "tokens.0.keyslots"),
            (
                Box::new(|j| {
                    j["keyslots"]["1"] = j["keyslots"]["0"].clone();
                }),
                "overlaps keyslot 0",
            ),
        ];
        for (edit, name) in cases {
            match Header::read(&mut with_json(edit)) {
                Err(e @ Luks2Error::Invalid { .. }) => assert!(e.to_string().contains(name), "{e} lacks {name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn luks1_is_refused() {
        let mut img = vec![0u8; 1 << 20];
        img[..6].copy_from_slice(MAGIC_PRIMARY);
        img[6..8].copy_from_slice(&1u16.to_be_bytes());
        assert!(matches!(Header::read(&mut Cursor::new(img)), Err(Luks2Error::Luks1)));
    }

    #[test]
    fn free_areas_are_first_fit() {
        let (mut hdr, _) = sample();
        assert_eq!(hdr.free_area(258048).unwrap(), 0x8000 + 258048);
        // A hole before keyslot 0's area is used first once it is big enough.
        hdr.metadata.keyslots.get_mut(&0).unwrap().area.offset = 0x8000 + 8192;
        assert_eq!(hdr.free_area(8192).unwrap(), 0x8000);
        assert_eq!(hdr.free_area(8193).unwrap(), 0x8000 + 8192 + 258048);
        assert!(matches!(hdr.free_area(1 << 20), Err(Luks2Error::NoSpace { .. })));
    }

    #[test]
    fn segment_sizes_and_ids_use_strings() {
        let seg: Segment = serde_json::from_str(
            r#"{"type":"crypt","offset":"16777216","size":"1048576","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":512,"flags":["x"],"future":1}"#,
        )
        .unwrap();
        assert_eq!(seg.size, SegmentSize::Bytes(1 << 20));
        assert_eq!(seg.extra["future"], 1);
        let back = serde_json::to_value(&seg).unwrap();
        assert_eq!(back["size"], "1048576");
        assert_eq!(back["offset"], "16777216");
        assert_eq!(back["future"], 1);
        assert!(
            serde_json::from_str::<Segment>(
                r#"{"type":"crypt","offset":"-1","size":"dynamic","iv_tweak":"0","encryption":"x","sector_size":512}"#
            )
            .is_err()
        );
    }
}
