//! Addresses for a cluster: node names, MACs, the LAN's multicast group and port, and free
//! loopback ports for the forwarded API. Every candidate is a pure function of the cluster name
//! (and of the groups other clusters already hold; API ports are then probed), so a cluster's
//! addresses are predictable and two clusters do not share a LAN.
//!
//! Never allocates anything outside 127.0.0.1 and the administratively chosen 230.0.0.0/8 range.

use std::fmt;
use std::net::{Ipv4Addr, TcpListener};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::ProvisionError;

/// The node roles Talos knows; a role decides the node's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Controlplane,
    Worker,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Controlplane => "controlplane",
            Role::Worker => "worker",
        })
    }
}

/// The most nodes one cluster may have: keeps the node index inside one MAC octet with room.
pub const MAX_NODES: usize = 64;

/// A cluster name is a DNS-label-like word, because it prefixes node (host) names.
pub fn validate_name(name: &str) -> Result<(), ProvisionError> {
    let ok = (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok { Ok(()) } else { Err(ProvisionError::InvalidName { name: name.to_string() }) }
}

/// Node names and roles in boot order: control planes first, as Talos names them
/// (`<cluster>-controlplane-1`, `<cluster>-worker-1`).
pub fn node_names(cluster: &str, controlplanes: usize, workers: usize) -> Result<Vec<(String, Role)>, ProvisionError> {
    if controlplanes == 0 {
        return Err(ProvisionError::InvalidNodeCount("a cluster needs at least one control plane node".into()));
    }
    if controlplanes + workers > MAX_NODES {
        return Err(ProvisionError::InvalidNodeCount(format!(
            "{} nodes asked, at most {MAX_NODES} per cluster",
            controlplanes + workers
        )));
    }
    let cp = (1..=controlplanes).map(|i| (format!("{cluster}-controlplane-{i}"), Role::Controlplane));
    let w = (1..=workers).map(|i| (format!("{cluster}-worker-{i}"), Role::Worker));
    Ok(cp.chain(w).collect())
}

/// 64-bit FNV-1a: small, stable across releases and platforms (unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// An Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in &mut out {
            let part = parts.next().ok_or_else(|| format!("{s:?} is not six hex octets"))?;
            if part.len() != 2 {
                return Err(format!("{s:?} is not six hex octets"));
            }
            *byte = u8::from_str_radix(part, 16).map_err(|e| format!("{s:?}: {e}"))?;
        }
        if parts.next().is_some() {
            return Err(format!("{s:?} is not six hex octets"));
        }
        Ok(Mac(out))
    }
}

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Which of a node's two NICs a MAC is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    /// User-mode network carrying the forwarded API port.
    Api = 0,
    /// The shared node-to-node LAN.
    Lan = 1,
}

/// A node's MAC: QEMU's locally administered unicast prefix `52:54`, two bytes of the cluster
/// name's hash, the NIC, and the node index (1-based). Distinct per node, NIC and (almost surely)
/// cluster.
pub fn mac(cluster: &str, nic: Nic, index: usize) -> Mac {
    let h = fnv1a(cluster.as_bytes()).to_be_bytes();
    // Node counts are capped at MAX_NODES, so the index fits an octet.
    let idx = u8::try_from(index + 1).unwrap_or(u8::MAX);
    Mac([0x52, 0x54, h[0], h[1], nic as u8, idx])
}

/// A node's SMBIOS system UUID (QEMU `-uuid`), which the node reads as its machine UUID and
/// which the nodeID disk-encryption key is derived from: a version 8 (RFC 9562, custom) UUID
/// made of the SHA-256 of the cluster name and the node index (0-based), so a cluster created
/// again under the same name gives its nodes the same UUIDs, and two nodes never share one.
pub fn machine_uuid(cluster: &str, index: usize) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("talosbox machine uuid\0{cluster}\0{index}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The node-to-node LAN's subnet, as Talos's QEMU clusters number it: node `index` (0-based)
/// is `10.5.0.(2 + index)/24`.
pub const LAN_PREFIX_LEN: u8 = 24;

/// The LAN address of node `index` (0-based). Node counts are capped at [`MAX_NODES`], so the
/// address stays inside the /24.
pub fn lan_address(index: usize) -> Ipv4Addr {
    let host = u8::try_from(index + 2).unwrap_or(u8::MAX - 1);
    Ipv4Addr::new(10, 5, 0, host)
}

/// The multicast group and UDP port a cluster's LAN uses (QEMU `-netdev socket,mcast=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mcast {
    pub group: Ipv4Addr,
    pub port: u16,
}

impl fmt::Display for Mcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.group, self.port)
    }
}

impl FromStr for Mcast {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (g, p) = s.rsplit_once(':').ok_or_else(|| format!("{s:?} is not GROUP:PORT"))?;
        let group: Ipv4Addr = g.parse().map_err(|e| format!("{g:?}: {e}"))?;
        let port: u16 = p.parse().map_err(|e| format!("{p:?}: {e}"))?;
        Ok(Mcast { group, port })
    }
}

impl Serialize for Mcast {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mcast {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// The LAN address for `cluster`: derived from the name's hash, stepping to the next candidate
/// while the group or the port is already `taken` by another cluster.
pub fn mcast(cluster: &str, taken: &[Mcast]) -> Mcast {
    let base = fnv1a(cluster.as_bytes());
    let mut attempt: u64 = 0;
    loop {
        let h = base.wrapping_add(attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes();
        let candidate = Mcast {
            group: Ipv4Addr::new(230, h[0], h[1], 1 + h[2] % 254),
            port: 20000 + u16::from_be_bytes([h[3], h[4]]) % 20000,
        };
        if !taken.iter().any(|t| t.group == candidate.group || t.port == candidate.port) {
            return candidate;
        }
        attempt += 1;
    }
}

/// Where the kernel keeps the range it hands out ephemeral ports from (bind to port 0, and the
/// source port of every outgoing connection).
pub const EPHEMERAL_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The lowest port an API forward may get: below it sit well-known services' ports.
pub const API_PORT_MIN: u16 = 10000;

/// Parses [`EPHEMERAL_RANGE`]'s text: two port numbers, low and high.
pub fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut words = text.split_whitespace();
    let lo = words.next()?.parse().ok()?;
    let hi = words.next()?.parse().ok()?;
    (words.next().is_none() && lo <= hi).then_some((lo, hi))
}

/// The kernel's ephemeral port range, low and high.
pub fn ephemeral_range() -> Result<(u16, u16), ProvisionError> {
    let path = std::path::PathBuf::from(EPHEMERAL_RANGE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ProvisionError::PortRange { path: path.clone(), detail: e.to_string() })?;
    parse_port_range(&text)
        .ok_or_else(|| ProvisionError::PortRange { path, detail: format!("{:?} is not two port numbers", text.trim()) })
}

/// Whether 127.0.0.1:`port` can be bound right now (nobody listens there).
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// The loopback ports forwarded to the API of `cluster`'s `n` nodes. They come from outside the
/// kernel's `ephemeral` range, because a port found free there (bind to port 0) is released
/// before QEMU binds it and the kernel may hand it to any outgoing connection in between; outside
/// it, only a program binding that very number can take it. Like [`mcast`], the candidates are a
/// pure function of the cluster name; each is kept when `free` says nobody holds it.
pub fn api_ports(
    cluster: &str,
    n: usize,
    ephemeral: (u16, u16),
    free: &mut dyn FnMut(u16) -> bool,
) -> Result<Vec<u16>, ProvisionError> {
    let (lo, hi) = ephemeral;
    let pool: Vec<u16> = (API_PORT_MIN..=u16::MAX).filter(|p| !(lo..=hi).contains(p)).collect();
    let none = || ProvisionError::NoFreePort { cluster: cluster.to_string(), wanted: n, lo, hi };
    let len = u64::try_from(pool.len()).map_err(|_| none())?;
    if len == 0 {
        return Err(none());
    }
    let base = fnv1a(format!("{cluster}/api").as_bytes());
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    // Hash steps revisit some candidates; four rounds of the pool tries (almost) all of them.
    for attempt in 0..len * 4 {
        if ports.len() == n {
            break;
        }
        let h = base.wrapping_add(attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let port = usize::try_from(h % len).ok().and_then(|i| pool.get(i).copied()).ok_or_else(none)?;
        if !ports.contains(&port) && free(port) {
            ports.push(port);
        }
    }
    if ports.len() == n { Ok(ports) } else { Err(none()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MAC goes into a node's launch file and comes back the same; malformed text is refused.
    #[test]
    fn macs_round_trip_as_text() {
        let m = mac("dev", Nic::Lan, 3);
        assert_eq!(m.to_string().parse::<Mac>(), Ok(m));
        assert_eq!(serde_json::from_str::<Mac>(&serde_json::to_string(&m).unwrap()).unwrap(), m);
        for bad in ["", "52:54:00:00:00", "52:54:00:00:00:01:02", "52:54:00:00:00:1", "52:54:00:00:00:zz"] {
            assert!(bad.parse::<Mac>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_valid_and_invalid() {
        for ok in ["talosbox", "a", "dev-1", "x0-y1"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1abc", "Abc", "a_b", "a b", "a-", "a/b", &"a".repeat(41)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_names_in_talos_style() {
        let names = node_names("dev", 2, 1).unwrap();
        let names: Vec<_> = names.iter().map(|(n, r)| format!("{n}/{r}")).collect();
        assert_eq!(
            names,
            ["dev-controlplane-1/controlplane", "dev-controlplane-2/controlplane", "dev-worker-1/worker"]
        );
        assert!(node_names("dev", 0, 1).is_err());
        assert!(node_names("dev", 1, MAX_NODES).is_err());
    }

    #[test]
    fn fnv_known_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn macs_are_distinct_and_locally_administered() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..MAX_NODES {
            for nic in [Nic::Api, Nic::Lan] {
                let m = mac("dev", nic, i);
                assert_eq!(m.0[0] & 0b11, 0b10, "unicast, locally administered: {m}");
                assert!(seen.insert(m.0), "duplicate {m}");
            }
        }
        assert_ne!(mac("dev", Nic::Lan, 0), mac("prod", Nic::Lan, 0));
        assert_eq!(mac("dev", Nic::Lan, 0).to_string(), "52:54:ca:9a:01:01");
    }

    #[test]
    fn machine_uuids_are_stable_distinct_and_version_8() {
        let a = machine_uuid("dev", 0);
        assert_eq!(a, machine_uuid("dev", 0), "stable");
        assert_ne!(a, machine_uuid("dev", 1), "per node");
        assert_ne!(a, machine_uuid("dew", 0), "per cluster");
        // The name and index are separated: ("dev1", 0) is not ("dev", 10).
        assert_ne!(machine_uuid("dev1", 0), machine_uuid("dev", 10));
        let groups: Vec<&str> = a.split('-').collect();
        assert_eq!(groups.iter().map(|g| g.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{a}");
        assert!(groups[2].starts_with('8'), "version 8: {a}");
        assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'), "RFC 9562 variant: {a}");
    }

    #[test]
    fn mcast_is_stable_multicast_and_avoids_taken() {
        let a = mcast("dev", &[]);
        assert_eq!(a, mcast("dev", &[]));
        assert!(a.group.is_multicast());
        assert_eq!(a.group.octets()[0], 230);
        assert!((20000..40000).contains(&a.port));
        let b = mcast("dev", &[a]);
        assert_ne!(a.group, b.group);
        assert_ne!(a.port, b.port);
        let same_port = Mcast { group: Ipv4Addr::new(230, 9, 9, 9), port: a.port };
        assert_ne!(mcast("dev", &[same_port]).port, a.port);
        assert_eq!(a.to_string().parse::<Mcast>().unwrap(), a);
        assert!("230.1.1.1".parse::<Mcast>().is_err());
    }

    #[test]
    fn port_range_parses_the_proc_file() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_port_range("1024 65535"), Some((1024, 65535)));
        for bad in ["", "32768", "a b", "60999 32768", "1 2 3", "1 70000"] {
            assert_eq!(parse_port_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn api_ports_are_stable_distinct_and_outside_the_ephemeral_range() {
        let range = (32768, 60999);
        let ports = api_ports("dev", 8, range, &mut |_| true).unwrap();
        assert_eq!(ports, api_ports("dev", 8, range, &mut |_| true).unwrap(), "a pure function of the name");
        assert_ne!(ports, api_ports("prod", 8, range, &mut |_| true).unwrap());
        let set: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(set.len(), 8);
        for p in &ports {
            assert!(*p >= API_PORT_MIN && !(range.0..=range.1).contains(p), "{p}");
        }
        // A busy candidate is skipped, the others stay.
        let busy = ports[0];
        let next = api_ports("dev", 8, range, &mut |p| p != busy).unwrap();
        assert!(!next.contains(&busy));
        assert_eq!(next[..7], ports[1..]);
        // Nothing left outside the range, or nothing free: one error naming the range.
        let err = api_ports("dev", 1, (1024, 65535), &mut |_| true).unwrap_err().to_string();
        assert!(err.contains("outside the ephemeral range 1024-65535"), "{err}");
        assert!(api_ports("dev", 1, range, &mut |_| false).is_err());
    }

    /// On this host: the ports are outside the kernel's real ephemeral range, bindable, and a
    /// port somebody listens on is not handed out.
    #[test]
    fn api_ports_on_this_host_avoid_ephemeral_and_busy_ports() {
        let range = ephemeral_range().unwrap();
        let first = api_ports("busy", 1, range, &mut port_is_free).unwrap()[0];
        assert!(!(range.0..=range.1).contains(&first), "{first} is in the ephemeral range {range:?}");
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, first)).unwrap();
        let ports = api_ports("busy", 4, range, &mut port_is_free).unwrap();
        assert!(!ports.contains(&first), "{first} is held by this test");
        for p in ports {
            assert!(!(range.0..=range.1).contains(&p), "{p} is in the ephemeral range {range:?}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
        }
        drop(held);
    }
}
