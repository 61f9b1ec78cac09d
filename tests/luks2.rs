//! The LUKS2 code against cryptsetup 2.x, on image files (no loop or device-mapper needed):
//! volumes formatted here pass `cryptsetup luksDump`, give up the same volume key to
//! `--dump-volume-key` and open with `--test-passphrase`; volumes cryptsetup formats (argon2id,
//! pbkdf2, 512- and 4096-byte sectors, 256- and 512-bit keys) read and unlock here with the key
//! cryptsetup dumps; keyslots and tokens added or removed on either side are seen by the other;
//! LUKS1, other ciphers, integrity and mandatory requirements are refused by name; a damaged
//! primary header falls back to the secondary. cryptsetup comes from cryptsetup-bin (in
//! tests/run's package list), blkid from util-linux. KDF costs are cryptsetup's minimums, so each case takes
//! milliseconds rather than the two seconds a node spends.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use talosbox::block::luks2::token::{KmsToken, TOKEN_TYPE_KMS, TOKEN_TYPE_TPM, TpmToken};
use talosbox::block::luks2::{
    self, DmCryptOptions, FormatOptions, Hash, Header, Kdf, Luks2Error, SegmentSize, Token, VolumeKey,
};

const MIB: u64 = 1 << 20;
/// cryptsetup's default data offset plus 4 MiB of data.
const IMAGE_SIZE: u64 = 20 * MIB;
const ARGON2: Kdf = Kdf::Argon2id { time: 4, memory_kib: 1024, parallel: 2 };
const PBKDF2: Kdf = Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 1000 };
/// cryptsetup's quickest argon2id and pbkdf2 (no benchmark; the digest then takes 1000).
const CS_ARGON2: &[&str] = &["--pbkdf", "argon2id", "--pbkdf-memory", "1024", "--pbkdf-force-iterations", "4"];
const CS_PBKDF2: &[&str] = &["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"];

/// A scratch directory holding an image and passphrase files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("talosbox-luks2-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the scratch directory");
        let s = Scratch(dir);
        File::create(s.image()).and_then(|f| f.set_len(IMAGE_SIZE)).expect("creating the image");
        s
    }

    fn image(&self) -> PathBuf {
        self.0.join("disk.img")
    }

    fn open(&self) -> File {
        OpenOptions::new().read(true).write(true).open(self.image()).expect("opening the image")
    }

    /// A key file holding `passphrase`, for cryptsetup's `--key-file`.
    fn key_file(&self, passphrase: &[u8]) -> PathBuf {
        let path = self.0.join(format!("key-{}", hex(&Sha256::digest(passphrase)[..6])));
        std::fs::write(&path, passphrase).expect("writing a key file");
        path
    }

    fn header(&self) -> Header {
        Header::read(&mut self.open()).expect("reading the LUKS2 header")
    }

    fn poke(&self, offset: u64, bytes: &[u8]) {
        self.open().write_all_at(bytes, offset).expect("writing the image");
    }

    fn peek(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.open().read_exact_at(&mut b, offset).expect("reading the image");
        b
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cryptsetup(args: &[&str], image: &Path) -> Output {
    cryptsetup_then(args, image, &[])
}

/// cryptsetup with `args`, the image, then `tail` (a new key file, a slot number).
fn cryptsetup_then(args: &[&str], image: &Path, tail: &[&str]) -> Output {
    Command::new("cryptsetup")
        .args(args)
        .arg(image)
        .args(tail)
        .output()
        .expect("running cryptsetup (apt-get install cryptsetup-bin)")
}

/// cryptsetup's stdout, asserting it succeeded.
fn cryptsetup_ok(args: &[&str], image: &Path) -> String {
    cryptsetup_ok_then(args, image, &[])
}

fn cryptsetup_ok_then(args: &[&str], image: &Path, tail: &[&str]) -> String {
    let out = cryptsetup_then(args, image, tail);
    assert!(
        out.status.success(),
        "cryptsetup {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Whether cryptsetup opens the volume with `passphrase` (optionally only in `slot`).
fn cryptsetup_accepts(s: &Scratch, passphrase: &[u8], slot: Option<u32>) -> bool {
    let key = s.key_file(passphrase);
    let slot = slot.map(|n| n.to_string());
    let mut args = vec!["open", "--test-passphrase", "--key-file", path(&key)];
    if let Some(n) = &slot {
        args.extend(["--key-slot", n]);
    }
    let out = cryptsetup(&args, &s.image());
    match out.status.code() {
        Some(0) => true,
        // cryptsetup's "no usable keyslot" / wrong passphrase.
        Some(1) | Some(2) => false,
        _ => panic!("cryptsetup {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// The volume key as `luksDump --dump-volume-key` prints it.
fn cryptsetup_volume_key(s: &Scratch, passphrase: &[u8]) -> Vec<u8> {
    let key = s.key_file(passphrase);
    let dump = cryptsetup_ok(&["luksDump", "--dump-volume-key", "--batch-mode", "--key-file", path(&key)], &s.image());
    let start = dump.find("MK dump:").expect("an MK dump line") + "MK dump:".len();
    let hex: String = dump[start..].chars().take_while(|c| c.is_ascii_hexdigit() || c.is_whitespace()).collect();
    hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).expect("a hex byte")).collect()
}

/// A `luksDump` line's value (`"Key:"` → `"512 bits"`), the first one after `section`.
fn dump_value(dump: &str, section: &str, name: &str) -> String {
    let rest = &dump[dump.find(section).unwrap_or_else(|| panic!("no {section} in {dump}"))..];
    let line = rest.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("no {name} in {dump}"));
    line.trim_start()[name.len()..].trim().to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn options(kdf: Kdf, key_size_bits: u32, sector_size: u32) -> FormatOptions {
    FormatOptions { kdf, key_size_bits, sector_size, digest_iterations: Some(1000), ..Default::default() }
}

fn format_here(s: &Scratch, opts: &FormatOptions, passphrase: &[u8]) -> (Header, VolumeKey) {
    luks2::format(&mut s.open(), opts, passphrase).expect("formatting")
}

fn format_with_cryptsetup(s: &Scratch, passphrase: &[u8], extra: &[&str]) {
    let key = s.key_file(passphrase);
    let mut args = vec!["luksFormat", "--type", "luks2", "--batch-mode", "--key-file", path(&key)];
    args.extend(extra);
    cryptsetup_ok(&args, &s.image());
}

#[test]
fn volumes_formatted_here_open_in_cryptsetup() {
    let cases = [
        ("argon2id", ARGON2, 512, 512),
        ("pbkdf2", PBKDF2, 512, 4096),
        ("argon2i-aes128", Kdf::Argon2i { time: 4, memory_kib: 64, parallel: 1 }, 256, 512),
        ("pbkdf2-2048", PBKDF2, 512, 2048),
    ];
    for (name, kdf, bits, sector) in cases {
        let s = Scratch::new(&format!("ours-{name}"));
        let opts = FormatOptions {
            label: "STATE".into(),
            uuid: Some("0DBB9714-FEA5-48E9-8413-C7B839CEAD9D".into()),
            ..options(kdf, bits, sector)
        };
        let (hdr, key) = format_here(&s, &opts, b"correct horse");
        assert_eq!(key.len() * 8, bits as usize);
        assert_eq!(s.header(), hdr, "{name}: the header reads back as written");

        let dump = cryptsetup_ok(&["luksDump"], &s.image());
        assert_eq!(dump_value(&dump, "LUKS header", "Version:"), "2", "{name}");
        assert_eq!(dump_value(&dump, "LUKS header", "Epoch:"), hdr.seqid.to_string(), "{name}");
        assert_eq!(dump_value(&dump, "LUKS header", "UUID:"), "0dbb9714-fea5-48e9-8413-c7b839cead9d", "{name}");
        assert_eq!(dump_value(&dump, "LUKS header", "Label:"), "STATE", "{name}");
        assert_eq!(dump_value(&dump, "Data segments", "offset:"), "16777216 [bytes]", "{name}");
        assert_eq!(dump_value(&dump, "Data segments", "cipher:"), "aes-xts-plain64", "{name}");
        assert_eq!(dump_value(&dump, "Data segments", "sector:"), format!("{sector} [bytes]"), "{name}");
        assert_eq!(dump_value(&dump, "Keyslots", "Key:"), format!("{bits} bits"), "{name}");
        assert_eq!(dump_value(&dump, "Keyslots", "Cipher key:"), format!("{bits} bits"), "{name}");
        assert_eq!(dump_value(&dump, "Keyslots", "PBKDF:"), kdf.name(), "{name}");
        assert_eq!(dump_value(&dump, "Keyslots", "AF stripes:"), "4000", "{name}");
        match kdf {
            Kdf::Pbkdf2 { iterations, .. } => {
                assert_eq!(dump_value(&dump, "Keyslots", "Iterations:"), iterations.to_string())
            }
            Kdf::Argon2id { time, memory_kib, parallel } | Kdf::Argon2i { time, memory_kib, parallel } => {
                assert_eq!(dump_value(&dump, "Keyslots", "Time cost:"), time.to_string());
                assert_eq!(dump_value(&dump, "Keyslots", "Memory:"), memory_kib.to_string());
                assert_eq!(dump_value(&dump, "Keyslots", "Threads:"), parallel.to_string());
            }
        }
        assert_eq!(dump_value(&dump, "Digests", "Iterations:"), "1000", "{name}");

        // blkid agrees it is LUKS2 with this UUID and label.
        let blkid = Command::new("blkid").args(["-p", "-o", "export"]).arg(s.image()).output().expect("running blkid");
        let blkid = String::from_utf8_lossy(&blkid.stdout);
        for want in ["TYPE=crypto_LUKS", "VERSION=2", "UUID=0dbb9714-fea5-48e9-8413-c7b839cead9d", "LABEL=STATE"] {
            assert!(blkid.lines().any(|l| l == want), "{name}: {want} not in {blkid}");
        }

        assert_eq!(cryptsetup_volume_key(&s, b"correct horse"), key.as_bytes(), "{name}: the same volume key");
        assert!(cryptsetup_accepts(&s, b"correct horse", Some(0)), "{name}");
        assert!(!cryptsetup_accepts(&s, b"correct horsf", None), "{name}: a wrong passphrase opens nothing");

        // And here: the slot opens, a wrong passphrase does not.
        let (slot, again) = hdr.unlock(&mut s.open(), b"correct horse").expect("unlocking here");
        assert_eq!((slot, again.as_bytes()), (0, key.as_bytes()));
        assert!(matches!(
            hdr.unlock(&mut s.open(), b"Correct horse"),
            Err(Luks2Error::WrongPassphrase { tried }) if tried == [0]
        ));
    }
}

#[test]
fn the_default_format_is_talos_s() {
    // Talos's luksFormat: cipher aes-xts-plain64, --key-size 512, argon2id, no --sector-size.
    let opts = FormatOptions::default();
    assert_eq!((opts.cipher.as_str(), opts.key_size_bits, opts.sector_size), ("aes-xts-plain64", 512, 512));
    assert_eq!(opts.kdf, Kdf::Argon2id { time: 4, memory_kib: 1 << 20, parallel: 4 });
    assert_eq!((opts.data_offset, opts.keyslot), (16 * MIB, 0));
    // The node's keyslot at a measured unlock time, here with a small ceiling to stay quick.
    let kdf = Kdf::Argon2id { time: 4, memory_kib: 8192, parallel: 4 }
        .limit_to_host(64 * 1024, 2)
        .calibrate(std::time::Duration::from_millis(100), 64)
        .expect("calibrating");
    let s = Scratch::new("default");
    let (hdr, key) = format_here(&s, &FormatOptions { kdf, digest_iterations: None, ..opts }, b"pw");
    let dump = cryptsetup_ok(&["luksDump"], &s.image());
    assert_eq!(dump_value(&dump, "Keyslots", "Threads:"), "2");
    assert_eq!(dump_value(&dump, "Data segments", "sector:"), "512 [bytes]");
    assert_eq!(dump_value(&dump, "Keyslots", "Area length:"), "258048 [bytes]");
    assert_eq!(dump_value(&dump, "Keyslots", "Area offset:"), "32768 [bytes]");
    let digest_iterations: u32 = dump_value(&dump, "Digests", "Iterations:").parse().expect("a number");
    assert!(digest_iterations >= 1000);
    assert_eq!(cryptsetup_volume_key(&s, b"pw"), key.as_bytes());
    let cfg = cryptsetup_ok(&["luksDump", "--dump-json-metadata"], &s.image());
    let json: Value = serde_json::from_str(&cfg).expect("cryptsetup's JSON dump");
    assert_eq!(json["config"]["json_size"], "12288");
    assert_eq!(json["config"]["keyslots_size"], "16744448");
    assert_eq!(json, serde_json::to_value(&hdr.metadata).expect("our JSON"));
}

#[test]
fn volumes_cryptsetup_formats_unlock_here() {
    let cases: [(&str, &[&str], u32, u32); 5] = [
        ("argon2id", CS_ARGON2, 512, 4096),
        ("pbkdf2", CS_PBKDF2, 512, 4096),
        (
            "sector-512",
            &["--pbkdf", "argon2id", "--pbkdf-memory", "1024", "--pbkdf-force-iterations", "4", "--sector-size", "512"],
            512,
            512,
        ),
        (
            "sector-4096-aes128",
            &["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--sector-size", "4096", "--key-size", "256"],
            256,
            4096,
        ),
        (
            "argon2i-sha512",
            &["--pbkdf", "argon2i", "--pbkdf-memory", "1024", "--pbkdf-force-iterations", "4", "--hash", "sha512"],
            512,
            4096,
        ),
    ];
    for (name, args, bits, sector) in cases {
        let s = Scratch::new(&format!("theirs-{name}"));
        // cryptsetup picks 4096-byte sectors on a file unless told.
        format_with_cryptsetup(&s, b"hunter2", args);
        let want = cryptsetup_volume_key(&s, b"hunter2");
        let hdr = s.header();
        let seg = hdr.data_segment().expect("a data segment");
        assert_eq!(
            (seg.encryption.as_str(), seg.sector_size, seg.offset),
            ("aes-xts-plain64", sector, 16 * MIB),
            "{name}"
        );
        assert_eq!(seg.size, SegmentSize::Dynamic, "{name}");
        assert_eq!(hdr.key_size().expect("a key size") * 8, bits as usize, "{name}");
        let dump = cryptsetup_ok(&["luksDump"], &s.image());
        assert_eq!(hdr.seqid.to_string(), dump_value(&dump, "LUKS header", "Epoch:"), "{name}");
        assert_eq!(hdr.uuid, dump_value(&dump, "LUKS header", "UUID:"), "{name}");
        let ks = &hdr.metadata.keyslots[&0];
        assert_eq!(ks.kdf.kdf.name(), dump_value(&dump, "Keyslots", "PBKDF:"), "{name}");
        assert_eq!(ks.af.hash.name(), dump_value(&dump, "Keyslots", "AF hash:"), "{name}");

        let (slot, key) = hdr.unlock(&mut s.open(), b"hunter2").expect("unlocking cryptsetup's volume");
        assert_eq!(slot, 0);
        assert_eq!(key.as_bytes(), want.as_slice(), "{name}: the key cryptsetup dumps");
        assert!(hdr.verify_key(&key).expect("verifying"));
        assert!(matches!(hdr.unlock(&mut s.open(), b"hunter3"), Err(Luks2Error::WrongPassphrase { .. })), "{name}");

        // The table cryptsetup would load (key given in hex rather than through the keyring).
        let sectors = (IMAGE_SIZE - 16 * MIB) / 512;
        let line = luks2::dm_crypt_table(&hdr, &key, "7:0", IMAGE_SIZE / 512, &DmCryptOptions::default())
            .expect("a table line");
        let mut want_line = format!("0 {sectors} aes-xts-plain64 {} 0 7:0 32768", hex(&want));
        if sector != 512 {
            want_line.push_str(&format!(" 1 sector_size:{sector}"));
        }
        assert_eq!(*line, want_line, "{name}");
    }
}

#[test]
fn keyslots_added_and_removed_on_either_side() {
    let s = Scratch::new("slots");
    let (hdr, key) = format_here(&s, &options(ARGON2, 512, 4096), b"first");

    // Added here at Talos's explicit slot number: cryptsetup opens it in that slot.
    let (hdr, slot) = luks2::add_keyslot(&mut s.open(), &hdr, &key, b"second", &PBKDF2, Some(3)).expect("adding");
    assert_eq!(slot, 3);
    assert!(cryptsetup_accepts(&s, b"second", Some(3)));
    assert!(cryptsetup_accepts(&s, b"first", Some(0)));
    let dump = cryptsetup_ok(&["luksDump"], &s.image());
    assert!(dump.contains("  3: luks2"), "{dump}");

    // Added by cryptsetup (at the lowest free slot, 1): it opens here.
    let before = hdr.clone();
    let first = s.key_file(b"first");
    let third = s.key_file(b"third");
    let mut args = vec!["luksAddKey", "--batch-mode", "--key-file", path(&first)];
    args.extend(CS_ARGON2);
    cryptsetup_ok_then(&args, &s.image(), &[path(&third)]);
    let hdr = s.header();
    assert_eq!(hdr.metadata.keyslots.keys().copied().collect::<Vec<_>>(), [0, 1, 3]);
    let (slot, k) = hdr.unlock(&mut s.open(), b"third").expect("unlocking cryptsetup's slot");
    assert_eq!((slot, k.as_bytes()), (1, key.as_bytes()));

    // The header held from before cryptsetup's change is refused rather than written over it.
    assert!(matches!(
        luks2::remove_keyslot(&mut s.open(), &before, 3),
        Err(Luks2Error::Stale { expected, found }) if found == expected + 1
    ));

    // Removed here: the area is wiped, cryptsetup no longer opens that passphrase, the others open.
    let area = hdr.metadata.keyslots[&0].area.clone();
    assert!(s.peek(area.offset, 4096).iter().any(|&b| b != 0), "the area holds key material");
    let hdr = luks2::remove_keyslot(&mut s.open(), &hdr, 0).expect("removing");
    assert!(s.peek(area.offset, area.size as usize).iter().all(|&b| b == 0), "the area is wiped");
    assert!(!cryptsetup_accepts(&s, b"first", None));
    assert!(cryptsetup_accepts(&s, b"second", None));
    assert!(cryptsetup_accepts(&s, b"third", None));
    assert!(matches!(hdr.unlock(&mut s.open(), b"first"), Err(Luks2Error::WrongPassphrase { .. })));
    assert_eq!(cryptsetup_volume_key(&s, b"second"), key.as_bytes());

    // Removed by cryptsetup: read here without it; the last slot is never removed here.
    cryptsetup_ok_then(&["luksKillSlot", "--batch-mode"], &s.image(), &["1"]);
    let hdr = s.header();
    assert_eq!(hdr.metadata.keyslots.keys().copied().collect::<Vec<_>>(), [3]);
    assert!(matches!(hdr.unlock(&mut s.open(), b"third"), Err(Luks2Error::WrongPassphrase { tried }) if tried == [3]));
    assert!(matches!(luks2::remove_keyslot(&mut s.open(), &hdr, 3), Err(Luks2Error::LastKeyslot(3))));
    assert!(cryptsetup_accepts(&s, b"second", Some(3)));
}

#[test]
fn keyslots_added_here_to_cryptsetup_volumes() {
    let s = Scratch::new("slots-theirs");
    format_with_cryptsetup(&s, b"theirs", CS_PBKDF2);
    let hdr = s.header();
    let (_, key) = hdr.unlock(&mut s.open(), b"theirs").expect("unlocking");
    // The wrong key is refused before anything is written.
    let wrong = VolumeKey::from_bytes(vec![0; 64]);
    assert!(matches!(
        luks2::add_keyslot(&mut s.open(), &hdr, &wrong, b"x", &ARGON2, None),
        Err(Luks2Error::WrongVolumeKey)
    ));
    assert!(matches!(
        luks2::add_keyslot(&mut s.open(), &hdr, &key, b"x", &ARGON2, Some(0)),
        Err(Luks2Error::KeyslotInUse(0))
    ));
    let (hdr, slot) = luks2::add_keyslot(&mut s.open(), &hdr, &key, b"ours", &ARGON2, None).expect("adding");
    assert_eq!(slot, 1);
    assert_eq!(s.header(), hdr);
    assert!(cryptsetup_accepts(&s, b"ours", Some(1)));
    assert!(cryptsetup_accepts(&s, b"theirs", Some(0)));
    assert_eq!(cryptsetup_volume_key(&s, b"ours"), key.as_bytes());
    // The last keyslot is never removed.
    let hdr = luks2::remove_keyslot(&mut s.open(), &hdr, 0).expect("removing slot 0");
    assert!(!cryptsetup_accepts(&s, b"theirs", None));
    assert!(matches!(luks2::remove_keyslot(&mut s.open(), &hdr, 1), Err(Luks2Error::LastKeyslot(1))));
    assert!(cryptsetup_accepts(&s, b"ours", None));
}

#[test]
fn tokens_travel_both_ways() {
    let s = Scratch::new("tokens");
    let (hdr, _) = format_here(&s, &options(PBKDF2, 512, 512), b"pw");

    // A Talos KMS token written here: cryptsetup lists and exports it as written.
    let kms = Token::talos(TOKEN_TYPE_KMS, &KmsToken { sealed_data: b"sealed by the KMS".to_vec() }).expect("a token");
    let hdr = luks2::set_token(&mut s.open(), &hdr, 0, &kms).expect("setting the token");
    let dump = cryptsetup_ok(&["luksDump"], &s.image());
    assert!(dump.contains(&format!("  0: {TOKEN_TYPE_KMS}")), "{dump}");
    let exported = cryptsetup_ok(&["token", "export", "--token-id", "0"], &s.image());
    let exported: Value = serde_json::from_str(&exported).expect("cryptsetup's token JSON");
    assert_eq!(exported, serde_json::to_value(&kms).expect("our token JSON"));
    assert_eq!(exported["UserData"]["sealedData"], "c2VhbGVkIGJ5IHRoZSBLTVM=");

    // A TPM token as Talos imports it through cryptsetup: read here.
    let tpm = r#"{"UserData":{"keyslots":[1],"sealed_blob_private":"AAEC","sealed_blob_public":"AwQF",
        "pcrs":[7],"pubkey_pcrs":[11],"alg":"sha256","policy_hash":"BgcI","key_name":"CQ=="},
        "type":"talos-tpm2","keyslots":[]}"#;
    let json = s.0.join("tpm.json");
    std::fs::write(&json, tpm).expect("writing the token");
    cryptsetup_ok(&["token", "import", "--token-id", "1", "--json-file", path(&json)], &s.image());
    let after = s.header();
    assert_eq!(after.seqid, hdr.seqid + 1);
    let t = after.token(1).expect("token 1");
    assert_eq!(t.kind, TOKEN_TYPE_TPM);
    let data: TpmToken = t.talos_user_data().expect("TPM token data");
    assert_eq!((data.key_slots, data.pcrs, data.pubkey_pcrs), (vec![1], vec![7], vec![11]));
    assert_eq!((data.sealed_blob_private, data.key_name), (vec![0, 1, 2], vec![9]));
    assert_eq!(
        after.token(0).expect("token 0").talos_user_data::<KmsToken>().expect("KMS data").sealed_data,
        b"sealed by the KMS"
    );

    // Replaced and removed here: cryptsetup sees it.
    let kms2 = Token::talos(TOKEN_TYPE_KMS, &KmsToken { sealed_data: vec![1] }).expect("a token");
    let hdr = luks2::set_token(&mut s.open(), &after, 0, &kms2).expect("replacing");
    let exported = cryptsetup_ok(&["token", "export", "--token-id", "0"], &s.image());
    assert!(exported.contains("\"sealedData\":\"AQ==\""), "{exported}");
    let hdr = luks2::remove_token(&mut s.open(), &hdr, 1).expect("removing");
    assert!(!cryptsetup(&["token", "export", "--token-id", "1"], &s.image()).status.success());
    assert!(matches!(luks2::remove_token(&mut s.open(), &hdr, 1), Err(Luks2Error::NoToken(1))));
    // A token bound to a keyslot that does not exist is refused.
    let bound = Token { keyslots: vec![5], ..kms2 };
    assert!(matches!(luks2::set_token(&mut s.open(), &hdr, 2, &bound), Err(Luks2Error::NoKeyslot(5))));
}

/// Rewrites the JSON of both header copies (and their checksums), as a newer cryptsetup or
/// one with dm-integrity would have written it.
fn edit_json(s: &Scratch, edit: impl Fn(&mut Value)) {
    let hdr_size = u64::from_be_bytes(s.peek(8, 8).try_into().expect("8 bytes"));
    for offset in [0, hdr_size] {
        let mut area = s.peek(offset, hdr_size as usize);
        let end = area[4096..].iter().position(|&b| b == 0).expect("a NUL after the JSON");
        let mut json: Value = serde_json::from_slice(&area[4096..4096 + end]).expect("header JSON");
        edit(&mut json);
        let text = serde_json::to_vec(&json).expect("JSON");
        area[4096..].fill(0);
        area[4096..4096 + text.len()].copy_from_slice(&text);
        area[448..512].fill(0);
        let sum = Sha256::digest(&area);
        area[448..480].copy_from_slice(&sum);
        s.poke(offset, &area);
    }
}

/// A change to a header's JSON.
type Edit = Box<dyn Fn(&mut Value)>;

fn refused(s: &Scratch) -> String {
    match Header::read(&mut s.open()) {
        Err(e) => e.to_string(),
        Ok(h) => panic!("read a header that should be refused: {h:?}"),
    }
}

#[test]
fn what_is_not_implemented_is_refused_by_name() {
    // LUKS1.
    let s = Scratch::new("luks1");
    let key = s.key_file(b"pw");
    cryptsetup_ok(
        &[
            "luksFormat",
            "--type",
            "luks1",
            "--batch-mode",
            "--key-file",
            path(&key),
            "--pbkdf-force-iterations",
            "1000",
        ],
        &s.image(),
    );
    assert!(matches!(Header::read(&mut s.open()), Err(Luks2Error::Luks1)));
    assert!(refused(&s).contains("LUKS1"));

    // Another cipher, formatted by cryptsetup.
    let s = Scratch::new("cbc");
    format_with_cryptsetup(
        &s,
        b"pw",
        &[
            "--cipher",
            "aes-cbc-essiv:sha256",
            "--key-size",
            "256",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
        ],
    );
    let e = refused(&s);
    assert!(e.contains("unsupported") && e.contains("aes-cbc-essiv:sha256"), "{e}");

    // cryptsetup cannot format serpent, integrity or a reencryption without device-mapper:
    // its header, edited as those would be; cryptsetup still reads each edited header, so
    // the refusal is ours, not a damaged checksum.
    let crafted: [(&str, Edit, &str); 3] = [
        (
            "serpent",
            Box::new(|j: &mut Value| {
                j["segments"]["0"]["encryption"] = "serpent-xts-plain64".into();
                j["keyslots"]["0"]["area"]["encryption"] = "serpent-xts-plain64".into();
            }),
            "cipher \"serpent-xts-plain64\"",
        ),
        (
            "integrity",
            Box::new(|j: &mut Value| {
                j["segments"]["0"]["integrity"] = serde_json::json!({
                    "type": "hmac(sha256)", "journal_encryption": "none", "journal_integrity": "none"
                });
            }),
            "integrity protection (dm-integrity) on segment 0: \"hmac(sha256)\"",
        ),
        (
            // cryptsetup 2.7's hardware OPAL; 2.6 reads it and lists the requirement. (A
            // reencryption's requirement needs its keyslot as well: the unit tests cover it.)
            "opal",
            Box::new(|j: &mut Value| {
                j["config"]["requirements"] = serde_json::json!({"mandatory": ["opal"]});
            }),
            "mandatory requirements opal",
        ),
    ];
    for (name, edit, words) in crafted {
        let s = Scratch::new(name);
        format_with_cryptsetup(&s, b"pw", CS_PBKDF2);
        edit_json(&s, edit);
        cryptsetup_ok(&["luksDump"], &s.image());
        let e = refused(&s);
        assert!(e.contains(words), "{name}: {e}");
    }
}

#[test]
fn a_damaged_primary_falls_back_to_the_secondary() {
    let s = Scratch::new("damaged");
    format_with_cryptsetup(&s, b"pw", CS_PBKDF2);
    let want = cryptsetup_volume_key(&s, b"pw");
    let pristine = s.peek(0, 32768);
    let hdr = s.header();

    // A flipped byte in the primary's JSON: the secondary is read, and it unlocks.
    s.poke(5000, &[pristine[5000] ^ 0x20]);
    assert_eq!(s.header(), hdr);
    assert_eq!(s.header().unlock(&mut s.open(), b"pw").expect("unlocking").1.as_bytes(), want.as_slice());
    // The primary's magic gone: the secondary is found by scanning.
    s.poke(0, &[0; 6]);
    assert_eq!(s.header(), hdr);

    // Both damaged: an error, as cryptsetup also finds no header.
    s.poke(16384 + 5000, &[pristine[16384 + 5000] ^ 0x20]);
    assert!(!cryptsetup(&["isLuks"], &s.image()).status.success());
    match Header::read(&mut s.open()) {
        Err(Luks2Error::Damaged { primary, secondary }) => {
            assert_eq!(primary, "no LUKS2 magic");
            assert!(secondary.contains("checksum mismatch"), "{secondary}");
        }
        other => panic!("{other:?}"),
    }

    // Writing here repairs both copies; cryptsetup reads them again.
    s.poke(0, &pristine);
    let hdr = s.header();
    let token = Token::talos(TOKEN_TYPE_KMS, &KmsToken { sealed_data: vec![] }).expect("a token");
    let hdr = luks2::set_token(&mut s.open(), &hdr, 0, &token).expect("writing both copies");
    cryptsetup_ok(&["luksDump"], &s.image());
    assert_eq!(cryptsetup_volume_key(&s, b"pw"), want);
    s.poke(0, &[0; 6]);
    assert_eq!(s.header(), hdr, "the rewritten secondary is valid");
}

/// The volume layer (Talos's keys, slot order and key sync) on an image, checked by
/// cryptsetup both ways: a volume it encrypts opens in cryptsetup by each configured key, and a
/// volume cryptsetup made opens here and gets the configured slots added.
mod volume_keys {
    use super::*;
    use talosbox::block::encryption::{self, KeyEnv};
    use talosbox::resources::block::{EncryptionKey, EncryptionKeyType, EncryptionSpec};

    const UUID: &str = "8d1f3a52-7c4e-4b19-9a63-2e5f0c7d8b41";

    fn key(slot: u32, kind: EncryptionKeyType, pass: &str) -> EncryptionKey {
        EncryptionKey { slot, kind, static_passphrase: pass.into(), ..EncryptionKey::default() }
    }

    fn env() -> KeyEnv<'static> {
        KeyEnv { volume_id: "u-secret", machine_uuid: Some(UUID), salt: None, kms: None, tpm: None, given: None }
    }

    #[test]
    fn a_volume_encrypted_here_opens_in_cryptsetup_by_each_key() {
        let s = Scratch::new("vol-here");
        let spec = EncryptionSpec {
            keys: vec![key(0, EncryptionKeyType::Static, "vm-secret"), key(1, EncryptionKeyType::NodeId, "")],
            ..EncryptionSpec::default()
        };
        let u = encryption::format(&mut s.open(), &spec, &env(), &mut || Ok(PBKDF2)).expect("encrypting");
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        assert!(cryptsetup_accepts(&s, b"vm-secret", Some(0)));
        assert!(cryptsetup_accepts(&s, format!("{UUID}u-secret").as_bytes(), Some(1)));
        assert!(!cryptsetup_accepts(&s, b"vm-secret", Some(1)));
        assert_eq!(cryptsetup_volume_key(&s, b"vm-secret"), u.key.as_bytes());
    }

    #[test]
    fn a_volume_cryptsetup_made_opens_here_and_gets_the_configured_slots() {
        let s = Scratch::new("vol-theirs");
        format_with_cryptsetup(&s, b"theirs", CS_PBKDF2);
        // Slot 0 is cryptsetup's; the config names it with the same passphrase, adds a nodeID
        // slot 1 and a recovery slot 5.
        let spec = EncryptionSpec {
            keys: vec![
                key(0, EncryptionKeyType::Static, "theirs"),
                key(1, EncryptionKeyType::NodeId, ""),
                key(5, EncryptionKeyType::Static, "recovery"),
            ],
            ..EncryptionSpec::default()
        };
        let u = encryption::open(&mut s.open(), &spec, &env(), &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!(u.slot, 0);
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        assert_eq!(cryptsetup_volume_key(&s, b"theirs"), u.key.as_bytes());
        assert!(cryptsetup_accepts(&s, format!("{UUID}u-secret").as_bytes(), Some(1)));
        assert!(cryptsetup_accepts(&s, b"recovery", Some(5)));
        // Dropping slot 0 from the config removes it; cryptsetup no longer opens with it.
        let spec = EncryptionSpec { keys: spec.keys[1..].to_vec(), ..spec };
        let u = encryption::open(&mut s.open(), &spec, &env(), &mut || Ok(PBKDF2)).expect("opening again");
        assert_eq!(u.slot, 1);
        assert!(!cryptsetup_accepts(&s, b"theirs", None));
        assert!(cryptsetup_accepts(&s, b"recovery", None));
    }
}

/// The `kms` key against a real KMS server, `talosctl kms-launch` (this binary, as a process):
/// the node's gRPC client seals and unseals through it, on TCP and on one connection over
/// stdin and stdout (how QEMU's guestfwd hands a node's connection to it); a volume whose slot 0
/// is a KMS key opens in cryptsetup with the passphrase the server unseals from the slot's
/// `sideroKMS` token; a server that is down costs the slot nothing, and one with another key
/// gets the slot sealed anew.
mod kms_keys {
    use super::*;
    use base64::Engine as _;
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};
    use talosbox::block::encryption::{self, KeyEnv, Kms};
    use talosbox::client::kms::GrpcKms;
    use talosbox::resources::block::{EncryptionKey, EncryptionKeyType, EncryptionSpec};

    const UUID: &str = "8d1f3a52-7c4e-4b19-9a63-2e5f0c7d8b41";
    const SALT: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// A `kms-launch` process on a loopback port, killed on drop.
    struct Server {
        child: Child,
        endpoint: String,
    }

    impl Server {
        fn start(key: &[u8; 32]) -> Server {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let child = Command::new(env!("CARGO_BIN_EXE_talosbox"))
                .args(["talosctl", "kms-launch", "--kms-addr", &format!("127.0.0.1:{port}"), "--kms-key"])
                .arg(base64::engine::general_purpose::STANDARD.encode(key))
                .stderr(Stdio::null())
                .spawn()
                .expect("starting talosctl kms-launch");
            let deadline = Instant::now() + Duration::from_secs(20);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "kms-launch did not listen on {port}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Server { child, endpoint: format!("grpc://127.0.0.1:{port}") }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn kms_key(slot: u32, endpoint: &str) -> EncryptionKey {
        EncryptionKey { slot, kind: EncryptionKeyType::Kms, kms_endpoint: endpoint.into(), ..Default::default() }
    }

    fn recovery(slot: u32) -> EncryptionKey {
        EncryptionKey {
            slot,
            kind: EncryptionKeyType::Static,
            static_passphrase: "recovery".into(),
            lock_to_state: true,
            ..Default::default()
        }
    }

    fn env<'a>(kms: &'a GrpcKms) -> KeyEnv<'a> {
        KeyEnv {
            volume_id: "u-vault",
            machine_uuid: Some(UUID),
            salt: Some(SALT),
            kms: Some(kms),
            tpm: None,
            given: None,
        }
    }

    fn sealed_in_slot(s: &Scratch, slot: u32) -> Vec<u8> {
        let h = s.header();
        let t = h.metadata.tokens.get(&slot).unwrap_or_else(|| panic!("no token {slot}: {:?}", h.metadata.tokens));
        assert_eq!(t.kind, TOKEN_TYPE_KMS);
        t.talos_user_data::<KmsToken>().expect("a sideroKMS token").sealed_data
    }

    #[test]
    fn a_kms_slot_opens_in_cryptsetup_and_survives_its_server() {
        let server = Server::start(&[0x11; 32]);
        let kms = GrpcKms;
        let s = Scratch::new("kms");
        let spec = EncryptionSpec { keys: vec![kms_key(0, &server.endpoint), recovery(1)], ..Default::default() };
        let made = encryption::format(&mut s.open(), &spec, &env(&kms), &mut || Ok(PBKDF2)).expect("encrypting");
        assert_eq!(made.slot, 0);
        assert!(made.failed_syncs.is_empty(), "{:?}", made.failed_syncs);

        // cryptsetup sees the token Talos writes, and the slot opens with what the server
        // unseals from it (base64, as Talos makes the passphrase); the recovery slot with its
        // passphrase and the salt.
        let dump = cryptsetup_ok(&["luksDump", "--dump-json-metadata"], &s.image());
        let json: Value = serde_json::from_str(&dump).expect("luksDump's JSON");
        assert_eq!(json["tokens"]["0"]["type"], "sideroKMS", "{dump}");
        assert!(json["tokens"]["0"]["UserData"]["sealedData"].is_string(), "{dump}");
        assert!(json["tokens"].get("1").is_none(), "{dump}");
        let plain = kms.unseal(&server.endpoint, UUID, &sealed_in_slot(&s, 0)).expect("unsealing");
        let pass = base64::engine::general_purpose::STANDARD.encode(&plain);
        assert!(cryptsetup_accepts(&s, pass.as_bytes(), Some(0)));
        assert!(cryptsetup_accepts(&s, &[b"recovery".as_slice(), SALT].concat(), Some(1)));
        assert!(!cryptsetup_accepts(&s, b"recovery", Some(1)), "the salt is part of the passphrase");
        assert_eq!(cryptsetup_volume_key(&s, pass.as_bytes()), made.key.as_bytes());

        let again = encryption::open(&mut s.open(), &spec, &env(&kms), &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!((again.slot, again.failed_syncs.len()), (0, 0), "{:?}", again.failed_syncs);

        // The server goes away: the recovery slot opens, slot 0 and its token stay as they were.
        let endpoint = server.endpoint.clone();
        drop(server);
        let before = s.header();
        let down = encryption::open(&mut s.open(), &spec, &env(&kms), &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!(down.slot, 1);
        assert_eq!(down.failed_syncs.len(), 1, "{:?}", down.failed_syncs);
        assert!(
            down.failed_syncs[0].starts_with("slot 0 (kms): failed to unseal KMS passphrase: "),
            "{:?}",
            down.failed_syncs
        );
        assert_eq!(s.header().metadata.keyslots[&0], before.metadata.keyslots[&0]);
        assert_eq!(s.header().metadata.tokens[&0], before.metadata.tokens[&0]);
        assert!(cryptsetup_accepts(&s, pass.as_bytes(), Some(0)));

        // A server with another key answers noise: slot 0 is sealed again by it, and opens.
        let other = Server::start(&[0x22; 32]);
        let spec = EncryptionSpec { keys: vec![kms_key(0, &other.endpoint), recovery(1)], ..spec };
        let resealed = encryption::open(&mut s.open(), &spec, &env(&kms), &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!(resealed.slot, 1);
        assert!(resealed.failed_syncs.is_empty(), "{:?}", resealed.failed_syncs);
        assert!(!cryptsetup_accepts(&s, pass.as_bytes(), Some(0)), "the old passphrase is gone");
        let back = encryption::open(&mut s.open(), &spec, &env(&kms), &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!(back.slot, 0);
        assert_ne!(endpoint, other.endpoint);
    }

    #[test]
    fn kms_launch_serves_one_connection_on_stdin_and_stdout() {
        // What QEMU's guestfwd=...-cmd: does: a listener whose every connection is handed to a
        // fresh `kms-launch --stdio` process.
        let dir = Scratch::new("kms-stdio");
        let key_file = dir.0.join("kms.key");
        std::fs::write(&key_file, base64::engine::general_purpose::STANDARD.encode([0x33u8; 32])).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let exe = env!("CARGO_BIN_EXE_talosbox");
        let accepting = std::thread::spawn(move || {
            let mut served = 0;
            for conn in listener.incoming().take(3) {
                let conn = conn.unwrap();
                let fd = |c: std::net::TcpStream| Stdio::from(std::os::fd::OwnedFd::from(c));
                let mut child = Command::new(exe)
                    .args(["talosctl", "kms-launch", "--stdio", "--kms-key-file"])
                    .arg(&key_file)
                    .stdin(fd(conn.try_clone().unwrap()))
                    .stdout(fd(conn))
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                assert!(child.wait().unwrap().success(), "kms-launch --stdio exits cleanly when the peer is done");
                served += 1;
            }
            served
        });
        let kms = GrpcKms;
        let endpoint = format!("grpc://127.0.0.1:{port}");
        let sealed = kms.seal(&endpoint, UUID, &[9u8; 32]).expect("sealing");
        assert_eq!(sealed.len(), 12 + 32 + 16);
        assert_eq!(kms.unseal(&endpoint, UUID, &sealed).expect("unsealing"), vec![9u8; 32]);
        let short = kms.seal(&endpoint, UUID, &[1u8; 8]).unwrap_err();
        assert!(short.contains("incorrect data length"), "{short}");
        assert_eq!(accepting.join().unwrap(), 3, "one process per connection");
    }
}

/// The `tpm` key against a real TPM 2.0, swtpm on its TCP socket interface: the client seals
/// to PCR values and unseals only while they hold; a volume whose slot 0 is a tpm key keeps
/// the sealed object in a `talos-tpm2` token cryptsetup reads, reopens by it, and opens by the
/// recovery slot once a PCR moved, keeping slot 0 as it was.
mod tpm_keys {
    use super::*;
    use std::net::TcpStream;
    use std::process::Child;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    use talosbox::block::encryption::{self, KeyEnv, Tpm};
    use talosbox::block::tpm::{self, Device};
    use talosbox::block::tpm_key;
    use talosbox::resources::block::{EncryptionKey, EncryptionKeyType, EncryptionSpec};
    use zeroize::Zeroizing;

    /// One swtpm process (TPM 2.0, started and cleared), killed on drop.
    struct SwTpm {
        child: Child,
        port: u16,
        _state: Scratch,
        uki: AtomicBool,
    }

    impl SwTpm {
        fn start(name: &str) -> SwTpm {
            let state = Scratch::new(name);
            let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let (port, ctrl) = (free(), free());
            let child = Command::new("swtpm")
                .args(["socket", "--tpm2", "--flags", "not-need-init,startup-clear"])
                .args(["--server", &format!("type=tcp,bindaddr=127.0.0.1,port={port}")])
                .args(["--ctrl", &format!("type=tcp,bindaddr=127.0.0.1,port={ctrl}")])
                .arg("--tpmstate")
                .arg(format!("dir={}", state.0.display()))
                .spawn()
                .expect("starting swtpm (tests/run installs it)");
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "swtpm did not listen on {port}");
                std::thread::sleep(Duration::from_millis(50));
            }
            SwTpm { child, port, _state: state, uki: AtomicBool::new(true) }
        }

        fn device(&self) -> Device {
            // swtpm serves one connection at a time: each caller gets its own, closed on drop.
            let mut last = None;
            for _ in 0..100 {
                match TcpStream::connect(("127.0.0.1", self.port)) {
                    Ok(s) => {
                        // A wedged TPM fails the test instead of hanging it.
                        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                        return Device::over(s);
                    }
                    Err(e) => last = Some(e),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            panic!("connecting to swtpm: {last:?}");
        }
    }

    impl Drop for SwTpm {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Tpm for SwTpm {
        fn seal(&self, secret: &[u8], pcrs: &[u8]) -> Result<TpmToken, String> {
            tpm_key::seal_token(&mut self.device(), secret, pcrs)
        }
        fn unseal(&self, token: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String> {
            tpm_key::unseal_token(&mut self.device(), token)
        }
        fn secure_boot(&self) -> Result<bool, String> {
            Ok(false)
        }
        fn uki_measured(&self) -> bool {
            self.uki.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn the_client_seals_to_pcr_values_and_unseals_only_while_they_hold() {
        let swtpm = SwTpm::start("tpm-client");
        let mut dev = swtpm.device();
        let before = dev.read_pcrs(&[7, 11]).expect("PCR_Read");
        assert_eq!(before.len(), 2);
        assert!(before.iter().all(|d| d.len() == 32));

        let sealed = dev.seal(b"a secret of the node", &[11, 7, 7]).expect("sealing");
        assert_eq!(sealed.pcrs, vec![7, 11], "sorted, without repeats");
        assert_eq!(sealed.policy_hash.len(), 32);
        assert_eq!(&dev.unseal(&sealed).expect("unsealing")[..], b"a secret of the node");
        // The storage key is derived again, not stored: a new connection unseals too.
        drop(dev);
        let mut dev = swtpm.device();
        assert_eq!(&dev.unseal(&sealed).expect("unsealing again")[..], b"a secret of the node");

        // A sealed object under one set of values says the PCRs moved, by the digest check and,
        // with that check skipped, by the TPM's own refusal of the policy session.
        dev.extend_pcr(7, &[0x5a; 32]).expect("PCR_Extend");
        assert_ne!(dev.read_pcrs(&[7]).unwrap()[0], before[0]);
        let moved = dev.unseal(&sealed).unwrap_err();
        assert_eq!(moved.to_string(), "the PCR values differ from those the key was sealed to (PCRs [7, 11])");
        let unchecked = tpm::Sealed { policy_hash: Vec::new(), ..sealed.clone() };
        assert!(matches!(dev.unseal(&unchecked).unwrap_err(), tpm::Error::PcrsMoved(_)));
        // Sealed again now, it opens now.
        let again = dev.seal(b"x", &[7, 11]).unwrap();
        assert_ne!(again.policy_hash, sealed.policy_hash);
        assert_eq!(&dev.unseal(&again).unwrap()[..], b"x");

        assert_eq!(dev.seal(b"x", &[24]).unwrap_err().to_string(), "PCR 24 is out of range (0–23)");
        let broken = tpm::Sealed { public: vec![0, 3, 1], ..sealed };
        assert!(dev.unseal(&broken).unwrap_err().to_string().starts_with("the sealed object does not parse"));
    }

    fn tpm_key() -> EncryptionKey {
        EncryptionKey {
            slot: 0,
            kind: EncryptionKeyType::Tpm,
            tpm_pcrs: vec![7],
            tpm_pub_key_pcrs: vec![11],
            ..EncryptionKey::default()
        }
    }

    fn recovery() -> EncryptionKey {
        EncryptionKey {
            slot: 1,
            kind: EncryptionKeyType::Static,
            static_passphrase: "recovery".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_tpm_slot_reopens_and_falls_back_to_the_recovery_slot_when_a_pcr_moves() {
        let swtpm = SwTpm::start("tpm-volume");
        let env =
            KeyEnv { volume_id: "u-sealed", machine_uuid: None, salt: None, kms: None, tpm: Some(&swtpm), given: None };
        let s = Scratch::new("tpm-vol");
        let spec = EncryptionSpec { keys: vec![tpm_key(), recovery()], ..EncryptionSpec::default() };
        let made = encryption::format(&mut s.open(), &spec, &env, &mut || Ok(PBKDF2)).expect("encrypting");
        assert_eq!(made.slot, 0);
        assert!(made.failed_syncs.is_empty(), "{:?}", made.failed_syncs);

        // cryptsetup reads the token: a talos-tpm2 token on keyslot 0 sealed to PCRs 7 and 11
        // (a UKI stub measured this boot), and the recovery slot opens by its passphrase.
        let dump = cryptsetup_ok(&["luksDump", "--dump-json-metadata"], &s.image());
        let json: Value = serde_json::from_str(&dump).expect("luksDump's JSON");
        assert_eq!(json["tokens"]["0"]["type"], TOKEN_TYPE_TPM, "{dump}");
        assert_eq!(json["tokens"]["0"]["keyslots"], serde_json::json!(["0"]), "{dump}");
        let sealed = s.header().metadata.tokens[&0].talos_user_data::<TpmToken>().expect("a talos-tpm2 token");
        assert_eq!(sealed.pcrs, vec![7, 11]);
        assert!(cryptsetup_accepts(&s, b"recovery", Some(1)));
        // The passphrase in the slot is what the TPM unseals from the token, in base64 (as
        // Talos makes it).
        let plain = swtpm.unseal(&sealed).expect("unsealing the token");
        assert_eq!(plain.len(), encryption::TPM_PASSPHRASE_LEN);
        let pass = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &*plain).into_bytes();
        assert!(cryptsetup_accepts(&s, &pass, Some(0)));
        assert_eq!(cryptsetup_volume_key(&s, &pass), made.key.as_bytes());

        let again = encryption::open(&mut s.open(), &spec, &env, &mut || Ok(PBKDF2)).expect("reopening");
        assert_eq!((again.slot, again.failed_syncs.len()), (0, 0), "{:?}", again.failed_syncs);

        // A changed boot (PCR 11 extended, as a new UKI would): slot 0 cannot unseal, the
        // recovery slot opens, slot 0 and its token are kept for when the values return.
        swtpm.device().extend_pcr(11, &[0x11; 32]).expect("PCR_Extend");
        let before = s.header();
        let fallback = encryption::open(&mut s.open(), &spec, &env, &mut || Ok(PBKDF2)).expect("opening");
        assert_eq!(fallback.slot, 1);
        assert_eq!(
            fallback.failed_syncs,
            vec!["slot 0 (tpm): the PCR values differ from those the key was sealed to (PCRs [7, 11])".to_string()]
        );
        assert_eq!(s.header().metadata.keyslots[&0], before.metadata.keyslots[&0]);
        assert_eq!(s.header().metadata.tokens[&0], before.metadata.tokens[&0]);
        assert_eq!(fallback.key.as_bytes(), made.key.as_bytes());
    }
}
