//! Keyslots: the volume key split by the anti-forensic splitter (LUKS1's AF, `stripes` blocks
//! diffused with a hash) and encrypted with a key derived from the passphrase, in an area of
//! the keyslots region. The area is aes-xts-plain64 in 512-byte sectors whose IVs count from 0
//! at the area's start (cryptsetup's keyslot storage), whatever the data segment's sector size.

use std::io::{Read, Seek, SeekFrom};

use aes::cipher::consts::U16;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, BlockSizeUser, KeyInit};
use aes::{Aes128, Aes256};
use serde_json::Map;
use xts_mode::{Xts128, get_tweak_default};
use zeroize::Zeroizing;

use super::header::{Af, Area, Header, Keyslot, KeyslotKdf};
use super::kdf::{Hash, Kdf};
use super::{CIPHER, Device, Luks2Error, Result, SALT_LEN, STRIPES, VolumeKey};

const AREA_SECTOR: usize = 512;

/// The bytes the split key occupies in its area: `key_len × stripes`, in whole sectors.
pub(crate) fn material_len(key_len: usize, stripes: u32) -> usize {
    (key_len * stripes as usize).div_ceil(AREA_SECTOR) * AREA_SECTOR
}

/// LUKS1's diffusion: each hash-sized block of `buf` replaced by the hash of its index (u32,
/// big-endian) and the block; a short last block takes the hash's first bytes.
fn diffuse(buf: &mut [u8], hash: Hash) {
    let step = hash.output_len();
    let mut out = Zeroizing::new(vec![0u8; step]);
    for (i, block) in buf.chunks_mut(step).enumerate() {
        hash.hash_into(&[&(i as u32).to_be_bytes(), block], &mut out[..block.len()]);
        block.copy_from_slice(&out[..block.len()]);
    }
}

/// Splits `key` into `stripes` blocks: all but the last are random, and the last is `key`
/// XOR the diffused XOR-chain of the others, so every block is needed to recover it.
pub(crate) fn af_split(key: &[u8], stripes: u32, hash: Hash) -> Result<Zeroizing<Vec<u8>>> {
    let n = key.len();
    let mut out = Zeroizing::new(vec![0u8; n * stripes as usize]);
    let last = (stripes as usize - 1) * n;
    super::random(&mut out[..last])?;
    let mut acc = Zeroizing::new(vec![0u8; n]);
    for block in out[..last].chunks(n) {
        acc.iter_mut().zip(block).for_each(|(a, b)| *a ^= b);
        diffuse(&mut acc, hash);
    }
    for (o, (a, k)) in out[last..].iter_mut().zip(acc.iter().zip(key)) {
        *o = a ^ k;
    }
    Ok(out)
}

/// The inverse of [`af_split`]: the key of `key_len` bytes from `stripes` blocks.
pub(crate) fn af_merge(material: &[u8], key_len: usize, stripes: u32, hash: Hash) -> Zeroizing<Vec<u8>> {
    let last = (stripes as usize - 1) * key_len;
    let mut acc = Zeroizing::new(vec![0u8; key_len]);
    for block in material[..last].chunks(key_len) {
        acc.iter_mut().zip(block).for_each(|(a, b)| *a ^= b);
        diffuse(&mut acc, hash);
    }
    acc.iter_mut().zip(&material[last..last + key_len]).for_each(|(a, b)| *a ^= b);
    acc
}

fn xts<C>(key: &[u8], data: &mut [u8], encrypt: bool) -> Result<()>
where
    C: BlockSizeUser<BlockSize = U16> + BlockCipherEncrypt + BlockCipherDecrypt + KeyInit,
{
    let half = key.len() / 2;
    let bad = |_| Luks2Error::Kdf { what: "the keyslot area key".into(), reason: format!("{} bytes", key.len()) };
    let xts = Xts128::new(C::new_from_slice(&key[..half]).map_err(bad)?, C::new_from_slice(&key[half..]).map_err(bad)?);
    if encrypt {
        xts.encrypt_area(data, AREA_SECTOR, 0, get_tweak_default);
    } else {
        xts.decrypt_area(data, AREA_SECTOR, 0, get_tweak_default);
    }
    Ok(())
}

/// aes-xts-plain64 over a keyslot area (`data` is whole 512-byte sectors from its start).
fn crypt_area(key: &[u8], data: &mut [u8], encrypt: bool) -> Result<()> {
    match key.len() {
        32 => xts::<Aes128>(key, data, encrypt),
        64 => xts::<Aes256>(key, data, encrypt),
        n => Err(Luks2Error::Unsupported { feature: format!("a {}-bit aes-xts key", n * 8) }),
    }
}

impl Header {
    /// Finds the keyslot `passphrase` opens, trying high-priority slots first, then normal
    /// ones, each group by id (cryptsetup's order; priority 0 slots are only opened by id),
    /// and returns its id with the verified volume key.
    pub fn unlock<R: Read + Seek>(&self, dev: &mut R, passphrase: &[u8]) -> Result<(u32, VolumeKey)> {
        let digest = self.segment_digest()?;
        let mut order: Vec<(u32, u32)> = digest
            .keyslots
            .iter()
            .filter_map(|id| self.metadata.keyslots.get(id).map(|k| (k.priority.unwrap_or(1), *id)))
            .filter(|&(priority, _)| priority > 0)
            .collect();
        order.sort_by_key(|&(priority, id)| (std::cmp::Reverse(priority), id));
        let mut tried = Vec::new();
        for (_, slot) in order {
            match self.unlock_slot(dev, slot, passphrase) {
                Ok(key) => return Ok((slot, key)),
                Err(Luks2Error::WrongPassphraseForSlot { .. }) => tried.push(slot),
                Err(e) => return Err(e),
            }
        }
        Err(Luks2Error::WrongPassphrase { tried })
    }

    /// Opens keyslot `slot` with `passphrase`: derives the area key, decrypts the area,
    /// merges the stripes and checks the result against the segment's digest.
    pub fn unlock_slot<R: Read + Seek>(&self, dev: &mut R, slot: u32, passphrase: &[u8]) -> Result<VolumeKey> {
        let ks = self.metadata.keyslots.get(&slot).ok_or(Luks2Error::NoKeyslot(slot))?;
        let digest = self.segment_digest()?;
        if !digest.keyslots.contains(&slot) {
            return Err(Luks2Error::Invalid {
                field: format!("keyslots.{slot}"),
                reason: "not assigned to the data segment's digest".into(),
            });
        }
        let mut area_key = Zeroizing::new(vec![0u8; ks.area.key_size as usize]);
        ks.kdf.kdf.derive(passphrase, &ks.kdf.salt, &mut area_key)?;
        let mut material = Zeroizing::new(vec![0u8; material_len(ks.key_size as usize, ks.af.stripes)]);
        let offset = ks.area.offset;
        let io = |source| Luks2Error::Io { what: "reading a keyslot area", offset, source };
        dev.seek(SeekFrom::Start(offset)).map_err(io)?;
        dev.read_exact(&mut material).map_err(io)?;
        crypt_area(&area_key, &mut material, false)?;
        let key = af_merge(&material, ks.key_size as usize, ks.af.stripes, ks.af.hash);
        if !digest.matches(&key) {
            return Err(Luks2Error::WrongPassphraseForSlot { slot });
        }
        Ok(VolumeKey(key))
    }

    /// Writes a keyslot `slot` for `passphrase` holding `key` into a free area and adds it to
    /// this header (and to the segment's digest); the caller writes the header.
    pub(crate) fn store_keyslot<D: Device>(
        &mut self,
        dev: &mut D,
        slot: u32,
        key: &VolumeKey,
        passphrase: &[u8],
        kdf: &Kdf,
    ) -> Result<()> {
        if self.metadata.keyslots.contains_key(&slot) {
            return Err(Luks2Error::KeyslotInUse(slot));
        }
        let len = material_len(key.len(), STRIPES);
        let size = (len as u64).div_ceil(4096) * 4096;
        let offset = self.free_area(size)?;
        let mut salt = vec![0u8; SALT_LEN];
        super::random(&mut salt)?;
        let keyslot = Keyslot {
            kind: "luks2".into(),
            key_size: key.len() as u32,
            af: Af { kind: "luks1".into(), stripes: STRIPES, hash: Hash::Sha256, extra: Map::new() },
            area: Area {
                kind: "raw".into(),
                offset,
                size,
                encryption: CIPHER.into(),
                key_size: key.len() as u32,
                extra: Map::new(),
            },
            kdf: KeyslotKdf { kdf: *kdf, salt },
            priority: None,
            extra: Map::new(),
        };

        let mut area_key = Zeroizing::new(vec![0u8; keyslot.area.key_size as usize]);
        kdf.derive(passphrase, &keyslot.kdf.salt, &mut area_key)?;
        let mut material = af_split(key.as_bytes(), STRIPES, keyslot.af.hash)?;
        material.resize(len, 0);
        crypt_area(&area_key, &mut material, true)?;
        let io = |source| Luks2Error::Io { what: "writing a keyslot area", offset, source };
        dev.seek(SeekFrom::Start(offset)).map_err(io)?;
        dev.write_all(&material).map_err(io)?;

        self.metadata.keyslots.insert(slot, keyslot);
        let digest = self
            .metadata
            .digests
            .values_mut()
            .find(|d| d.segments.contains(&0))
            .ok_or_else(|| Luks2Error::Invalid { field: "digests".into(), reason: "none for segment 0".into() })?;
        digest.keyslots.push(slot);
        digest.keyslots.sort_unstable();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_split_and_merge_round_trip() {
        for (len, stripes, hash) in
            [(64, 4000, Hash::Sha256), (32, 4000, Hash::Sha512), (48, 3, Hash::Sha256), (20, 1, Hash::Sha256)]
        {
            let key: Vec<u8> = (0..len as u8).collect();
            let split = af_split(&key, stripes, hash).unwrap();
            assert_eq!(split.len(), len * stripes as usize);
            assert_eq!(&af_merge(&split, len, stripes, hash)[..], &key[..], "{len} {stripes}");
            // Every stripe matters: change one early byte and the key is lost.
            if stripes > 1 {
                let mut damaged = split.clone();
                damaged[0] ^= 1;
                assert_ne!(&af_merge(&damaged, len, stripes, hash)[..], &key[..]);
            }
        }
    }

    #[test]
    fn af_merge_of_a_known_split() {
        // Two stripes of a 40-byte key with SHA-256 (one whole and one short block): the first
        // stripe is zeros, so the key is the second stripe XOR diffuse(zeros), which is
        // SHA-256(be32(0) || 32 zeros) followed by the first 8 bytes of SHA-256(be32(1) || 8 zeros).
        use sha2::{Digest as _, Sha256};
        let mut material = vec![0u8; 80];
        material[40..].fill(0xff);
        let mut want = Sha256::new().chain_update([0u8; 4]).chain_update([0u8; 32]).finalize().to_vec();
        want.extend_from_slice(&Sha256::new().chain_update(1u32.to_be_bytes()).chain_update([0u8; 8]).finalize()[..8]);
        want.iter_mut().for_each(|b| *b ^= 0xff);
        assert_eq!(&af_merge(&material, 40, 2, Hash::Sha256)[..], &want[..]);
    }

    #[test]
    fn area_sizes_are_cryptsetups() {
        // luksDump of a 512-bit key: "Area length: 258048".
        assert_eq!((material_len(64, 4000) as u64).div_ceil(4096) * 4096, 258048);
        assert_eq!(material_len(64, 4000), 256000);
        assert_eq!(material_len(48, 4000), 192000);
        assert_eq!(material_len(20, 3), 512);
    }

    #[test]
    fn xts_area_matches_ieee_1619_and_round_trips() {
        // IEEE P1619 XTS-AES-128 vector 1: keys all zero, data unit 0, 32 zero bytes.
        let mut block = [0u8; 512];
        crypt_area(&[0u8; 32], &mut block, true).unwrap();
        assert_eq!(
            block[..32].iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "917cf69ebd68b2ec9b9fe9a3eadda692cd43d2f59598ed858c02c2652fbf922e"
        );
        for len in [32, 64] {
            let key: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(7)).collect();
            let plain: Vec<u8> = (0..2048u32).map(|i| (i % 251) as u8).collect();
            let mut data = plain.clone();
            crypt_area(&key, &mut data, true).unwrap();
            assert_ne!(data, plain);
            // Sectors are independent: the second sector's IV is 1, not a continuation.
            let mut second = plain[512..1024].to_vec();
            crypt_area(&key, &mut second, true).unwrap();
            assert_ne!(second, data[512..1024]);
            crypt_area(&key, &mut data, false).unwrap();
            assert_eq!(data, plain);
        }
        assert!(crypt_area(&[0u8; 16], &mut [0u8; 512], true).is_err());
        assert!(crypt_area(&[0u8; 48], &mut [0u8; 512], true).is_err());
    }
}
