//! The fuzzing entry point of the config module: any bytes in, every stage run on what loads,
//! and a check that rendering is stable. It must never panic; a panic is a bug to fix here.

use super::diff::diff;
use super::load::load;
use super::patch::{Patch, apply};
use super::validate::validate;

/// Loads `data` as a config (invalid UTF-8 replaced) and, when it loads, renders, reloads,
/// validates, diffs and patches it. Panics only if rendering a loaded config does not load back
/// to the same text, which would be a bug.
pub fn fuzz_load(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(patch) = Patch::parse(&text)
        && let Ok(base) = load("version: v1alpha1\nmachine:\n  type: worker\n")
    {
        let _ = apply(&base.config, &[patch]);
    }
    let Ok(loaded) = load(&text) else { return };
    let config = loaded.config;
    let _ = validate(&config);
    let _ = config.machine();
    let yaml = config.to_yaml();
    let again = match load(&yaml) {
        Ok(again) => again.config,
        Err(e) => panic!("a loaded config renders to text that does not load: {e}\n{yaml}"),
    };
    assert_eq!(again.to_yaml(), yaml, "rendering is not stable");
    let d = diff(&config, &again);
    let _ = d.talos_text();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::tests::TALOS_FIXTURES;

    /// A fixed-seed generator (splitmix64), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            if n == 0 { 0 } else { (self.next() % n as u64) as usize }
        }
    }

    const EXTRA: &[&str] = &[
        "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n      - interface: eth0\n        vlans: [{vlanId: 5}]\n",
        "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 1500\n---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: d\n",
        "machine:\n  network:\n    hostname:\n      $patch: delete\n",
        "- op: add\n  path: /machine/x\n  value: {a: [1, 2.5, null, 'q']}\n",
        "a: &x {b: *x}\nc: [&y 1, *y]\n<<: {d: 1}\n",
        "version: v1alpha1\ncluster:\n  inlineManifests:\n    - name: m\n      contents: |\n        line\n\n        tail\n",
    ];

    fn mutate(rng: &mut Rng, seeds: &[&[u8]]) -> Vec<u8> {
        let base = seeds[rng.below(seeds.len())];
        let mut out = base.to_vec();
        for _ in 0..=rng.below(3) {
            let len = out.len();
            match rng.below(6) {
                0 if len > 0 => {
                    let at = rng.below(len);
                    out[at] ^= 1 << rng.below(8);
                }
                1 => out.truncate(rng.below(len + 1)),
                2 => {
                    let other = seeds[rng.below(seeds.len())];
                    let (cut, from) = (rng.below(len + 1), rng.below(other.len() + 1));
                    out.truncate(cut);
                    out.extend_from_slice(&other[from..]);
                }
                3 => {
                    const TOKENS: &[&[u8]] = &[
                        b": ", b"- ", b"\n", b"  ", b"{", b"[", b"'", b"\"", b"&a ", b"*a", b"!!str ", b"---\n",
                        b"|\n", b"#", b"\t", b"\xff",
                    ];
                    let token = TOKENS[rng.below(TOKENS.len())];
                    let at = rng.below(len + 1);
                    out.splice(at..at, token.iter().copied());
                }
                4 => {
                    // repeat a line
                    let text = String::from_utf8_lossy(&out).into_owned();
                    let lines: Vec<&str> = text.lines().collect();
                    if !lines.is_empty() {
                        let i = rng.below(lines.len());
                        let mut l = lines.clone();
                        l.insert(i, lines[i]);
                        out = (l.join("\n") + "\n").into_bytes();
                    }
                }
                _ => {
                    // drop a line
                    let text = String::from_utf8_lossy(&out).into_owned();
                    let mut lines: Vec<&str> = text.lines().collect();
                    if !lines.is_empty() {
                        lines.remove(rng.below(lines.len()));
                    }
                    out = (lines.join("\n") + "\n").into_bytes();
                }
            }
        }
        out
    }

    #[test]
    fn mutated_configs_never_panic() {
        let mut seeds: Vec<&[u8]> = TALOS_FIXTURES.iter().map(|(_, t)| t.as_bytes()).collect();
        seeds.extend(EXTRA.iter().map(|t| t.as_bytes()));
        let mut rng = Rng(0x7a10_5b0c);
        for seed in &seeds {
            fuzz_load(seed);
        }
        for round in 0..3000 {
            let input = mutate(&mut rng, &seeds);
            if std::panic::catch_unwind(|| fuzz_load(&input)).is_err() {
                panic!("round {round} panicked on {:?}", String::from_utf8_lossy(&input));
            }
        }
    }
}
