//! The DHCPv6 message (RFC 8415) and the options the client sends and reads (client and
//! server ids, IA_NA with its addresses and status, option request, elapsed time, DNS
//! servers and domain list of RFC 3646, NTP servers of RFC 5908, client FQDN of RFC 4704):
//! a pure codec from bytes to a [`Message`] and back.

use std::net::Ipv6Addr;

pub const CLIENT_PORT: u16 = 546;
pub const SERVER_PORT: u16 = 547;
/// All_DHCP_Relay_Agents_and_Servers.
pub const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// Message types.
pub mod kind {
    pub const SOLICIT: u8 = 1;
    pub const ADVERTISE: u8 = 2;
    pub const REQUEST: u8 = 3;
    pub const RENEW: u8 = 5;
    pub const REBIND: u8 = 6;
    pub const REPLY: u8 = 7;
    pub const RELEASE: u8 = 8;
}

/// Option codes.
pub mod code {
    pub const CLIENT_ID: u16 = 1;
    pub const SERVER_ID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IA_ADDR: u16 = 5;
    pub const ORO: u16 = 6;
    pub const PREFERENCE: u16 = 7;
    pub const ELAPSED_TIME: u16 = 8;
    pub const STATUS_CODE: u16 = 13;
    pub const RAPID_COMMIT: u16 = 14;
    pub const DNS_SERVERS: u16 = 23;
    pub const DOMAIN_LIST: u16 = 24;
    pub const CLIENT_FQDN: u16 = 39;
    pub const NTP_SERVER: u16 = 56;
}

/// Status codes.
pub mod status {
    pub const SUCCESS: u16 = 0;
    pub const NO_ADDRS_AVAIL: u16 = 2;
    pub const NO_BINDING: u16 = 3;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("DHCPv6 message of {len} bytes is shorter than its header")]
    Truncated { len: usize },
    #[error("DHCPv6 option {code} runs past the end of its container")]
    OptionOverrun { code: u16 },
}

/// Options in the order they came (an option may repeat, as IA_ADDR inside an IA_NA does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options(pub Vec<(u16, Vec<u8>)>);

impl Options {
    pub fn decode(mut data: &[u8]) -> Result<Options, PacketError> {
        let mut options = Vec::new();
        while !data.is_empty() {
            if data.len() < 4 {
                return Err(PacketError::OptionOverrun { code: 0 });
            }
            let code = u16::from_be_bytes([data[0], data[1]]);
            let len = usize::from(u16::from_be_bytes([data[2], data[3]]));
            let value = data.get(4..4 + len).ok_or(PacketError::OptionOverrun { code })?;
            options.push((code, value.to_vec()));
            data = &data[4 + len..];
        }
        Ok(Options(options))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for (code, value) in &self.0 {
            out.extend_from_slice(&code.to_be_bytes());
            out.extend_from_slice(&(value.len() as u16).to_be_bytes());
            out.extend_from_slice(value);
        }
    }

    pub fn get(&self, code: u16) -> Option<&[u8]> {
        self.0.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    pub fn all(&self, code: u16) -> impl Iterator<Item = &[u8]> {
        self.0.iter().filter(move |(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    pub fn push(&mut self, code: u16, value: Vec<u8>) {
        self.0.push((code, value));
    }
}

/// An address of an IA_NA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IaAddress {
    pub address: Ipv6Addr,
    /// Seconds.
    pub preferred: u32,
    /// Seconds.
    pub valid: u32,
}

/// An identity association for non-temporary addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaNa {
    pub iaid: u32,
    /// Seconds; 0 leaves it to the client.
    pub t1: u32,
    pub t2: u32,
    pub addresses: Vec<IaAddress>,
    /// The IA's status code, if it carries one.
    pub status: Option<u16>,
}

impl IaNa {
    pub fn decode(data: &[u8]) -> Result<IaNa, PacketError> {
        if data.len() < 12 {
            return Err(PacketError::OptionOverrun { code: code::IA_NA });
        }
        let word = |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let options = Options::decode(&data[12..])?;
        let mut addresses = Vec::new();
        for a in options.all(code::IA_ADDR) {
            if a.len() < 24 {
                return Err(PacketError::OptionOverrun { code: code::IA_ADDR });
            }
            let octets: [u8; 16] = a[..16].try_into().unwrap_or([0; 16]);
            let w = |at: usize| u32::from_be_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]);
            addresses.push(IaAddress { address: Ipv6Addr::from(octets), preferred: w(16), valid: w(20) });
        }
        let status = options.get(code::STATUS_CODE).and_then(status_of);
        Ok(IaNa { iaid: word(0), t1: word(4), t2: word(8), addresses, status })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [self.iaid, self.t1, self.t2] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        let mut options = Options::default();
        for a in &self.addresses {
            let mut v = a.address.octets().to_vec();
            v.extend_from_slice(&a.preferred.to_be_bytes());
            v.extend_from_slice(&a.valid.to_be_bytes());
            options.push(code::IA_ADDR, v);
        }
        options.encode(&mut out);
        out
    }
}

fn status_of(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?))
}

/// A DHCPv6 client/server message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: u8,
    /// 24 bits.
    pub xid: u32,
    pub options: Options,
}

impl Message {
    pub fn new(kind: u8, xid: u32) -> Message {
        Message { kind, xid: xid & 0x00ff_ffff, options: Options::default() }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.kind];
        out.extend_from_slice(&self.xid.to_be_bytes()[1..]);
        self.options.encode(&mut out);
        out
    }

    pub fn decode(data: &[u8]) -> Result<Message, PacketError> {
        if data.len() < 4 {
            return Err(PacketError::Truncated { len: data.len() });
        }
        let xid = u32::from_be_bytes([0, data[1], data[2], data[3]]);
        Ok(Message { kind: data[0], xid, options: Options::decode(&data[4..])? })
    }

    pub fn client_id(&self) -> Option<&[u8]> {
        self.options.get(code::CLIENT_ID)
    }

    pub fn server_id(&self) -> Option<&[u8]> {
        self.options.get(code::SERVER_ID)
    }

    /// The first IA_NA, if it decodes.
    pub fn ia_na(&self) -> Option<IaNa> {
        IaNa::decode(self.options.get(code::IA_NA)?).ok()
    }

    /// The message's own status code (0, success, when absent).
    pub fn status(&self) -> u16 {
        self.options.get(code::STATUS_CODE).and_then(status_of).unwrap_or(status::SUCCESS)
    }

    pub fn rapid_commit(&self) -> bool {
        self.options.get(code::RAPID_COMMIT).is_some()
    }

    fn addresses(&self, code: u16) -> Vec<Ipv6Addr> {
        self.options
            .get(code)
            .map(|v| v.chunks_exact(16).map(|c| Ipv6Addr::from(<[u8; 16]>::try_from(c).unwrap_or([0; 16]))).collect())
            .unwrap_or_default()
    }

    pub fn dns_servers(&self) -> Vec<Ipv6Addr> {
        self.addresses(code::DNS_SERVERS)
    }

    pub fn domain_list(&self) -> Vec<String> {
        self.options.get(code::DOMAIN_LIST).map(names).unwrap_or_default()
    }

    /// The server addresses (suboption 1) of the NTP server option.
    pub fn ntp_servers(&self) -> Vec<Ipv6Addr> {
        let Some(v) = self.options.get(code::NTP_SERVER) else { return Vec::new() };
        let Ok(sub) = Options::decode(v) else { return Vec::new() };
        sub.all(1).filter_map(|a| <[u8; 16]>::try_from(a).ok()).map(Ipv6Addr::from).collect()
    }

    /// The client FQDN option's name (after its flags byte).
    pub fn fqdn(&self) -> Option<String> {
        let v = self.options.get(code::CLIENT_FQDN)?;
        names(v.get(1..)?).into_iter().next()
    }
}

/// Uncompressed RFC 1035 names, one after the other.
fn names(mut data: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut labels = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        if len == 0 {
            out.push(labels.join("."));
            labels.clear();
            data = rest;
            continue;
        }
        let Some(label) = rest.get(..usize::from(len)) else { break };
        labels.push(String::from_utf8_lossy(label).to_string());
        data = &rest[usize::from(len)..];
    }
    // A name without its terminating zero (partial, as a client FQDN may be).
    if !labels.is_empty() {
        out.push(labels.join("."));
    }
    out.retain(|n| !n.is_empty());
    out
}

/// `name` as RFC 1035 labels.
pub fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len().min(63) as u8);
        out.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Message {
        let mut m = Message::new(kind::REPLY, 0xabcdef);
        m.options.push(code::CLIENT_ID, vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1]);
        m.options.push(code::SERVER_ID, vec![0, 1, 0, 1, 9, 9, 9, 9]);
        let ia = IaNa {
            iaid: 7,
            t1: 60,
            t2: 105,
            addresses: vec![IaAddress { address: "fd00:9::150".parse().unwrap(), preferred: 120, valid: 120 }],
            status: None,
        };
        m.options.push(code::IA_NA, ia.encode());
        m.options.push(code::DNS_SERVERS, "fd00:9::1".parse::<Ipv6Addr>().unwrap().octets().to_vec());
        let mut domains = encode_name("talosbox.test");
        domains.extend(encode_name("example.org"));
        m.options.push(code::DOMAIN_LIST, domains);
        let mut ntp = Options::default();
        ntp.push(1, "fd00:9::2".parse::<Ipv6Addr>().unwrap().octets().to_vec());
        ntp.push(3, encode_name("ntp.example.org"));
        let mut v = Vec::new();
        ntp.encode(&mut v);
        m.options.push(code::NTP_SERVER, v);
        let mut fqdn = vec![0];
        fqdn.extend(encode_name("node1.talosbox.test"));
        m.options.push(code::CLIENT_FQDN, fqdn);
        m
    }

    #[test]
    fn round_trip_and_typed_options() {
        let m = reply();
        let bytes = m.encode();
        assert_eq!(&bytes[..4], &[7, 0xab, 0xcd, 0xef]);
        assert_eq!(&bytes[4..8], &[0, 1, 0, 10], "client id, 10 bytes");
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back, m);
        let ia = back.ia_na().unwrap();
        assert_eq!((ia.iaid, ia.t1, ia.t2, ia.status), (7, 60, 105, None));
        assert_eq!(ia.addresses[0].address, "fd00:9::150".parse::<Ipv6Addr>().unwrap());
        assert_eq!((ia.addresses[0].preferred, ia.addresses[0].valid), (120, 120));
        assert_eq!(back.dns_servers(), ["fd00:9::1".parse::<Ipv6Addr>().unwrap()]);
        assert_eq!(back.domain_list(), ["talosbox.test", "example.org"]);
        assert_eq!(back.ntp_servers(), ["fd00:9::2".parse::<Ipv6Addr>().unwrap()], "addresses only, not FQDNs");
        assert_eq!(back.fqdn().as_deref(), Some("node1.talosbox.test"));
        assert_eq!(back.status(), status::SUCCESS);
        assert!(!back.rapid_commit());
    }

    #[test]
    fn status_codes_of_the_message_and_the_ia() {
        let mut m = Message::new(kind::ADVERTISE, 1);
        let mut ia = IaNa { iaid: 1, t1: 0, t2: 0, addresses: vec![], status: None }.encode();
        ia.extend_from_slice(&[0, 13, 0, 2, 0, 2]);
        m.options.push(code::IA_NA, ia);
        m.options.push(code::STATUS_CODE, vec![0, 2, b'n', b'o']);
        let back = Message::decode(&m.encode()).unwrap();
        assert_eq!(back.status(), status::NO_ADDRS_AVAIL);
        assert_eq!(back.ia_na().unwrap().status, Some(status::NO_ADDRS_AVAIL));
    }

    #[test]
    fn bad_messages_are_errors() {
        assert_eq!(Message::decode(&[7, 0, 0]), Err(PacketError::Truncated { len: 3 }));
        assert_eq!(Message::decode(&[7, 0, 0, 1, 0, 23, 0, 16, 1]), Err(PacketError::OptionOverrun { code: 23 }));
        assert!(IaNa::decode(&[0; 11]).is_err());
    }
}
