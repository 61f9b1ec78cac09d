//! The key derivations of LUKS2: Argon2i/Argon2id and PBKDF2 for keyslots, PBKDF2 for the
//! volume key digest, and the hashes the anti-forensic splitter diffuses with; plus the
//! measurement cryptsetup makes to pick costs for a wanted unlock time.

use std::time::{Duration, Instant};

use argon2::{Algorithm, Argon2, Params, Version};
use sha2::{Digest as _, Sha256, Sha512};
use zeroize::Zeroizing;

use super::{Luks2Error, Result};

/// cryptsetup's floor for PBKDF2 (NIST SP 800-132).
pub(crate) const PBKDF2_MIN_ITERATIONS: u32 = 1000;
/// cryptsetup's limits for Argon2 keyslots it writes: at least 4 passes, 32 KiB to 4 GiB,
/// 1 to 4 lanes.
const ARGON2_MIN_TIME: u32 = 4;
const ARGON2_MIN_MEMORY_KIB: u32 = 32;
const ARGON2_MAX_MEMORY_KIB: u32 = 4 << 20;
const ARGON2_MAX_PARALLEL: u32 = 4;
/// The time cryptsetup gives the volume key digest.
pub(crate) const DIGEST_TIME: Duration = Duration::from_millis(125);
/// The unlock time cryptsetup aims a LUKS2 keyslot at (`--iter-time`, 2000 ms by default),
/// which is what Talos gets: it passes no `--iter-time`.
pub const TALOS_ITER_TIME: Duration = Duration::from_secs(2);

/// A hash named in LUKS2 metadata (`hash` of a PBKDF2 keyslot or digest, `af.hash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha256 => "sha256",
            Hash::Sha512 => "sha512",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Hash> {
        match name {
            "sha256" => Some(Hash::Sha256),
            "sha512" => Some(Hash::Sha512),
            _ => None,
        }
    }

    pub(crate) fn output_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha512 => 64,
        }
    }

    /// The hash of `parts` concatenated, into `out` (at most `output_len` bytes).
    pub(crate) fn hash_into(self, parts: &[&[u8]], out: &mut [u8]) {
        match self {
            Hash::Sha256 => {
                let mut h = Sha256::new();
                parts.iter().for_each(|p| h.update(p));
                let d = h.finalize();
                out.copy_from_slice(&d[..out.len()]);
            }
            Hash::Sha512 => {
                let mut h = Sha512::new();
                parts.iter().for_each(|p| h.update(p));
                let d = h.finalize();
                out.copy_from_slice(&d[..out.len()]);
            }
        }
    }

    pub(crate) fn pbkdf2(self, password: &[u8], salt: &[u8], iterations: u32, out: &mut [u8]) {
        match self {
            Hash::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, out),
            Hash::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, out),
        }
    }
}

/// How a keyslot's passphrase becomes the key of its area. `memory_kib` and `parallel` are
/// the JSON's `memory` (KiB) and `cpus` (lanes); `time` is Argon2's passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kdf {
    Argon2id { time: u32, memory_kib: u32, parallel: u32 },
    Argon2i { time: u32, memory_kib: u32, parallel: u32 },
    Pbkdf2 { hash: Hash, iterations: u32 },
}

impl Kdf {
    /// What Talos formats with, through cryptsetup's defaults: argon2id with up to 1 GiB and
    /// 4 lanes, and the fewest passes; [`Kdf::limit_to_host`] and [`Kdf::calibrate`] turn
    /// this ceiling into cryptsetup's choice for a machine.
    pub const fn talos_default() -> Kdf {
        Kdf::Argon2id { time: ARGON2_MIN_TIME, memory_kib: 1 << 20, parallel: ARGON2_MAX_PARALLEL }
    }

    /// The JSON `type`.
    pub fn name(&self) -> &'static str {
        match self {
            Kdf::Argon2id { .. } => "argon2id",
            Kdf::Argon2i { .. } => "argon2i",
            Kdf::Pbkdf2 { .. } => "pbkdf2",
        }
    }

    /// cryptsetup's adjustments to the machine: no more lanes than online CPUs, and no more
    /// than half the physical memory.
    pub fn limit_to_host(self, physical_memory_kib: u64, online_cpus: u32) -> Kdf {
        let fit = |memory_kib: u32, parallel: u32| {
            let parallel = parallel.min(online_cpus.max(1));
            let half = u32::try_from(physical_memory_kib / 2).unwrap_or(u32::MAX);
            let memory_kib = memory_kib.min(half).max(ARGON2_MIN_MEMORY_KIB.max(8 * parallel));
            (memory_kib, parallel)
        };
        match self {
            Kdf::Argon2id { time, memory_kib, parallel } => {
                let (memory_kib, parallel) = fit(memory_kib, parallel);
                Kdf::Argon2id { time, memory_kib, parallel }
            }
            Kdf::Argon2i { time, memory_kib, parallel } => {
                let (memory_kib, parallel) = fit(memory_kib, parallel);
                Kdf::Argon2i { time, memory_kib, parallel }
            }
            pbkdf2 => pbkdf2,
        }
    }

    /// Costs that take about `target` on this machine for a `key_len`-byte output, the way
    /// cryptsetup benchmarks: for Argon2, `memory_kib` is the ceiling; memory grows to it
    /// first, then passes (never below 4); when even the minimum is too slow, memory shrinks.
    /// For PBKDF2, the iterations (never below 1000).
    pub fn calibrate(self, target: Duration, key_len: usize) -> Result<Kdf> {
        Ok(match self {
            Kdf::Pbkdf2 { hash, .. } => Kdf::Pbkdf2 { hash, iterations: calibrate_pbkdf2(hash, key_len, target)? },
            Kdf::Argon2id { memory_kib, parallel, .. } => {
                let (time, memory_kib) = calibrate_argon2(Algorithm::Argon2id, memory_kib, parallel, key_len, target)?;
                Kdf::Argon2id { time, memory_kib, parallel }
            }
            Kdf::Argon2i { memory_kib, parallel, .. } => {
                let (time, memory_kib) = calibrate_argon2(Algorithm::Argon2i, memory_kib, parallel, key_len, target)?;
                Kdf::Argon2i { time, memory_kib, parallel }
            }
        })
    }

    /// Derives `out.len()` bytes from `passphrase` and `salt`.
    pub fn derive(&self, passphrase: &[u8], salt: &[u8], out: &mut [u8]) -> Result<()> {
        match *self {
            Kdf::Pbkdf2 { hash, iterations } => {
                hash.pbkdf2(passphrase, salt, iterations, out);
                Ok(())
            }
            Kdf::Argon2id { time, memory_kib, parallel } => {
                argon2(Algorithm::Argon2id, time, memory_kib, parallel, passphrase, salt, out)
            }
            Kdf::Argon2i { time, memory_kib, parallel } => {
                argon2(Algorithm::Argon2i, time, memory_kib, parallel, passphrase, salt, out)
            }
        }
    }

    /// Whether cryptsetup would write (and so accept back) these costs.
    pub(crate) fn check_writable(&self) -> std::result::Result<(), String> {
        match *self {
            Kdf::Pbkdf2 { iterations, .. } if iterations < PBKDF2_MIN_ITERATIONS => {
                Err(format!("pbkdf2 iterations {iterations} are below {PBKDF2_MIN_ITERATIONS}"))
            }
            Kdf::Pbkdf2 { .. } => Ok(()),
            Kdf::Argon2id { time, memory_kib, parallel } | Kdf::Argon2i { time, memory_kib, parallel } => {
                if time < ARGON2_MIN_TIME {
                    Err(format!("{} time {time} is below {ARGON2_MIN_TIME}", self.name()))
                } else if !(1..=ARGON2_MAX_PARALLEL).contains(&parallel) {
                    Err(format!("{} parallel {parallel} is not 1 to {ARGON2_MAX_PARALLEL}", self.name()))
                } else if memory_kib < ARGON2_MIN_MEMORY_KIB.max(8 * parallel) || memory_kib > ARGON2_MAX_MEMORY_KIB {
                    Err(format!(
                        "{} memory {memory_kib} KiB is not {} to {ARGON2_MAX_MEMORY_KIB} KiB",
                        self.name(),
                        ARGON2_MIN_MEMORY_KIB.max(8 * parallel)
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }
}

fn argon2(
    algorithm: Algorithm,
    time: u32,
    memory_kib: u32,
    parallel: u32,
    passphrase: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let err = |e: argon2::Error| Luks2Error::Kdf {
        what: format!("{algorithm:?} time {time}, memory {memory_kib} KiB, {parallel} lanes"),
        reason: e.to_string(),
    };
    let params = Params::new(memory_kib, time, parallel, Some(out.len())).map_err(err)?;
    fits_in_memory(memory_kib, mem_available_kib()).map_err(|reason| Luks2Error::Kdf {
        what: format!("{algorithm:?} time {time}, memory {memory_kib} KiB, {parallel} lanes"),
        reason,
    })?;
    Argon2::new(algorithm, Version::V0x13, params).hash_password_into(passphrase, salt, out).map_err(err)
}

/// What the machine keeps free beside an Argon2 derivation.
const MEMORY_HEADROOM_KIB: u64 = 32 << 10;

/// The memory the kernel says is available (`MemAvailable`), in KiB; `None` when unknown.
fn mem_available_kib() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Whether an Argon2 derivation of `memory_kib` fits in what is available. A keyslot made
/// elsewhere (cryptsetup scales its cost up to 1 GiB to the machine that formats) may ask more
/// than a small node has: the allocation would succeed and the kernel kill the process that
/// touches it, on a node machined itself. Refused instead, with the figures.
fn fits_in_memory(memory_kib: u32, available_kib: Option<u64>) -> std::result::Result<(), String> {
    match available_kib {
        Some(free) if u64::from(memory_kib) + MEMORY_HEADROOM_KIB > free => Err(format!(
            "it needs {} MiB of memory and {} MiB are available here (keeping {} MiB free): \
             open it on a machine with more memory, or add a keyslot with a lower memory cost",
            memory_kib >> 10,
            free >> 10,
            MEMORY_HEADROOM_KIB >> 10
        )),
        _ => Ok(()),
    }
}

/// The iterations of PBKDF2-`hash` that take about `target` here.
pub(crate) fn calibrate_pbkdf2(hash: Hash, key_len: usize, target: Duration) -> Result<u32> {
    let salt = [0u8; super::SALT_LEN];
    let mut out = Zeroizing::new(vec![0u8; key_len]);
    let mut iterations: u32 = 1 << 12;
    loop {
        let start = Instant::now();
        hash.pbkdf2(b"calibration", &salt, iterations, &mut out);
        let took = start.elapsed();
        // Long enough to extrapolate from; cryptsetup measures at least half a second.
        if took >= target / 2 || iterations >= 1 << 30 {
            let per = took.as_secs_f64() / f64::from(iterations);
            let n = (target.as_secs_f64() / per.max(1e-12)).min(f64::from(u32::MAX)) as u32;
            return Ok(n.max(PBKDF2_MIN_ITERATIONS));
        }
        iterations = iterations.saturating_mul(if took < target / 16 { 8 } else { 2 });
    }
}

/// Passes and memory for Argon2 taking about `target`, memory at most `max_memory_kib`.
fn calibrate_argon2(
    algorithm: Algorithm,
    max_memory_kib: u32,
    parallel: u32,
    key_len: usize,
    target: Duration,
) -> Result<(u32, u32)> {
    let salt = [0u8; super::SALT_LEN];
    let mut out = Zeroizing::new(vec![0u8; key_len]);
    let min_memory = ARGON2_MIN_MEMORY_KIB.max(8 * parallel);
    let max_memory = max_memory_kib.clamp(min_memory, ARGON2_MAX_MEMORY_KIB);
    let mut measure = |time: u32, memory: u32| -> Result<f64> {
        let start = Instant::now();
        argon2(algorithm, time, memory, parallel, b"calibration", &salt, &mut out)?;
        Ok(start.elapsed().as_secs_f64().max(1e-6))
    };
    let target = target.as_secs_f64();
    // Cost is about proportional to passes × memory: measure small, then scale, memory first.
    let (mut time, mut memory) = (ARGON2_MIN_TIME, min_memory);
    let mut took = measure(time, memory)?;
    for _ in 0..8 {
        if (0.95..=1.1).contains(&(took / target)) {
            break;
        }
        let work = f64::from(time) * f64::from(memory) * target / took;
        let (t, m) = if work <= f64::from(ARGON2_MIN_TIME) * f64::from(max_memory) {
            (
                f64::from(ARGON2_MIN_TIME),
                (work / f64::from(ARGON2_MIN_TIME)).clamp(f64::from(min_memory), f64::from(max_memory)),
            )
        } else {
            ((work / f64::from(max_memory)).min(f64::from(u32::MAX)), f64::from(max_memory))
        };
        let (t, m) = ((t as u32).max(ARGON2_MIN_TIME), m as u32);
        if (t, m) == (time, memory) {
            break;
        }
        (time, memory) = (t, m);
        took = measure(time, memory)?;
    }
    Ok((time, memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argon2_memory_beyond_what_is_free_is_refused_with_the_figures() {
        assert!(fits_in_memory(64 << 10, Some(1 << 20)).is_ok());
        assert!(fits_in_memory(64 << 10, None).is_ok(), "unknown: tried");
        let e = fits_in_memory(1 << 20, Some(600 << 10)).unwrap_err();
        assert!(e.starts_with("it needs 1024 MiB of memory and 600 MiB are available here"), "{e}");
        // The headroom counts.
        assert!(fits_in_memory(100 << 10, Some(120 << 10)).is_err());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn pbkdf2_matches_rfc_7914_and_python() {
        // RFC 7914, section 11 (PBKDF2-HMAC-SHA256).
        let mut out = [0u8; 64];
        Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 1 }.derive(b"passwd", b"salt", &mut out).unwrap();
        assert_eq!(
            hex(&out),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc\
             49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783"
        );
        Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 80000 }.derive(b"Password", b"NaCl", &mut out).unwrap();
        assert_eq!(
            hex(&out),
            "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56\
             a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d"
        );
        // hashlib.pbkdf2_hmac('sha512', b'password', b'salt', 1000, 64).
        Kdf::Pbkdf2 { hash: Hash::Sha512, iterations: 1000 }.derive(b"password", b"salt", &mut out).unwrap();
        assert_eq!(
            hex(&out),
            "afe6c5530785b6cc6b1c6453384731bd5ee432ee549fd42fb6695779ad8a1c5b\
             f59de69c48f774efc4007d5298f9033c0241d5ab69305e7b64eceeb8d834cfec"
        );
    }

    #[test]
    fn argon2_matches_the_reference_implementation() {
        // phc-winner-argon2's src/test.c, version 0x13, password "password", salt "somesalt".
        let mut out = [0u8; 32];
        let cases = [
            (
                Kdf::Argon2id { time: 2, memory_kib: 256, parallel: 2 },
                "6d093c501fd5999645e0ea3bf620d7b8be7fd2db59c20d9fff9539da2bf57037",
            ),
            (
                Kdf::Argon2id { time: 2, memory_kib: 256, parallel: 1 },
                "9dfeb910e80bad0311fee20f9c0e2b12c17987b4cac90c2ef54d5b3021c68bfe",
            ),
            (
                Kdf::Argon2id { time: 2, memory_kib: 1 << 16, parallel: 1 },
                "09316115d5cf24ed5a15a31a3ba326e5cf32edc24702987c02b6566f61913cf7",
            ),
            (
                Kdf::Argon2i { time: 2, memory_kib: 1 << 16, parallel: 1 },
                "c1628832147d9720c5bd1cfd61367078729f6dfb6f8fea9ff98158e0d7816ed0",
            ),
        ];
        for (kdf, want) in cases {
            kdf.derive(b"password", b"somesalt", &mut out).unwrap();
            assert_eq!(hex(&out), want, "{kdf:?}");
        }
    }

    #[test]
    fn writable_costs_follow_cryptsetup_limits() {
        let ok = [
            Kdf::talos_default(),
            Kdf::Argon2id { time: 4, memory_kib: 32, parallel: 4 },
            Kdf::Argon2i { time: 4, memory_kib: 32, parallel: 1 },
            Kdf::Pbkdf2 { hash: Hash::Sha512, iterations: 1000 },
        ];
        for k in ok {
            assert_eq!(k.check_writable(), Ok(()), "{k:?}");
        }
        let bad = [
            Kdf::Argon2id { time: 3, memory_kib: 1024, parallel: 1 },
            Kdf::Argon2id { time: 4, memory_kib: 16, parallel: 1 },
            Kdf::Argon2id { time: 4, memory_kib: 1024, parallel: 0 },
            Kdf::Argon2id { time: 4, memory_kib: 1024, parallel: 5 },
            Kdf::Argon2id { time: 4, memory_kib: (4 << 20) + 1, parallel: 1 },
            Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 999 },
        ];
        for k in bad {
            assert!(k.check_writable().is_err(), "{k:?}");
        }
    }

    #[test]
    fn host_limits_cap_lanes_and_memory() {
        let k = Kdf::talos_default().limit_to_host(512 << 10, 2);
        assert_eq!(k, Kdf::Argon2id { time: 4, memory_kib: 256 << 10, parallel: 2 });
        let k = Kdf::talos_default().limit_to_host(16 << 20, 64);
        assert_eq!(k, Kdf::talos_default());
        let p = Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 5000 };
        assert_eq!(p.limit_to_host(1, 1), p);
    }

    #[test]
    fn calibration_lands_near_the_target() {
        let target = Duration::from_millis(150);
        let Kdf::Argon2id { time, memory_kib, parallel } =
            Kdf::Argon2id { time: 4, memory_kib: 64 << 10, parallel: 1 }.calibrate(target, 64).unwrap()
        else {
            panic!("kind changed");
        };
        assert!(time >= 4 && (32..=64 << 10).contains(&memory_kib) && parallel == 1, "{time} {memory_kib}");
        let start = Instant::now();
        let mut out = [0u8; 64];
        Kdf::Argon2id { time, memory_kib, parallel }.derive(b"x", &[0; 32], &mut out).unwrap();
        let took = start.elapsed();
        // A shared two-core machine: generous bounds, but an uncalibrated guess misses them.
        assert!(took > target / 4 && took < target * 4, "{took:?} for time {time}, memory {memory_kib}");

        let iterations = calibrate_pbkdf2(Hash::Sha256, 32, Duration::from_millis(50)).unwrap();
        assert!(iterations >= PBKDF2_MIN_ITERATIONS);
        let start = Instant::now();
        Hash::Sha256.pbkdf2(b"x", &[0; 32], iterations, &mut out[..32]);
        let took = start.elapsed();
        assert!(took > Duration::from_millis(12) && took < Duration::from_millis(200), "{took:?} for {iterations}");
    }
}
