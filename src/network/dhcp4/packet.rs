//! The DHCPv4 message (RFC 2131) and the options the client sends and reads (RFC 2132,
//! RFC 3442 classless static routes, RFC 3397 domain search, RFC 3396 long options): a pure
//! codec from bytes to a [`Message`] and back.

use std::net::Ipv4Addr;

pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;

const MAGIC: [u8; 4] = [99, 130, 83, 99];
/// The fixed part before the magic cookie: op … file.
const FIXED: usize = 236;
/// BOOTP's minimum message size; some servers drop shorter requests.
const MIN_SIZE: usize = 300;

pub const BOOTREQUEST: u8 = 1;
pub const BOOTREPLY: u8 = 2;
/// The flag asking the server to broadcast its replies (the client has no address yet).
pub const FLAG_BROADCAST: u16 = 0x8000;

/// Option codes.
pub mod code {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const DNS: u8 = 6;
    pub const HOSTNAME: u8 = 12;
    pub const DOMAIN_NAME: u8 = 15;
    pub const INTERFACE_MTU: u8 = 26;
    pub const NTP: u8 = 42;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const OVERLOAD: u8 = 52;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_LIST: u8 = 55;
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLIENT_ID: u8 = 61;
    pub const DOMAIN_SEARCH: u8 = 119;
    pub const CLASSLESS_ROUTE: u8 = 121;
    pub const END: u8 = 255;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Decline = 4,
    Ack = 5,
    Nak = 6,
    Release = 7,
    Inform = 8,
}

impl MessageType {
    fn from_u8(n: u8) -> Option<MessageType> {
        use MessageType::*;
        [Discover, Offer, Request, Decline, Ack, Nak, Release, Inform].into_iter().find(|t| *t as u8 == n)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("DHCPv4 message of {len} bytes is shorter than its fixed part")]
    Truncated { len: usize },
    #[error("DHCPv4 message has no magic cookie")]
    NoMagic,
    #[error("DHCPv4 option {code} runs past the end of the message")]
    OptionOverrun { code: u8 },
    #[error("DHCPv4 hardware address length {hlen} is more than 16")]
    HardwareLength { hlen: u8 },
}

/// The options of a message in the order they came, each code once: an option split over
/// several instances (RFC 3396) is joined on decode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options(Vec<(u8, Vec<u8>)>);

impl Options {
    pub fn get(&self, code: u8) -> Option<&[u8]> {
        self.0.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    /// Sets `code` to `value`, replacing an earlier value.
    pub fn set(&mut self, code: u8, value: Vec<u8>) {
        match self.0.iter_mut().find(|(c, _)| *c == code) {
            Some(slot) => slot.1 = value,
            None => self.0.push((code, value)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8])> {
        self.0.iter().map(|(c, v)| (*c, v.as_slice()))
    }

    /// Appends the options of `data` (a run of code, length, value) to these; stops at END.
    fn parse_into(&mut self, data: &[u8]) -> Result<(), PacketError> {
        let mut i = 0;
        while i < data.len() {
            let code = data[i];
            i += 1;
            match code {
                code::PAD => continue,
                code::END => break,
                _ => {}
            }
            let len = *data.get(i).ok_or(PacketError::OptionOverrun { code })? as usize;
            i += 1;
            let value = data.get(i..i + len).ok_or(PacketError::OptionOverrun { code })?;
            i += len;
            match self.0.iter_mut().find(|(c, _)| *c == code) {
                Some(slot) => slot.1.extend_from_slice(value),
                None => self.0.push((code, value.to_vec())),
            }
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        for (code, value) in &self.0 {
            // Long values are split into 255-byte instances (RFC 3396); an empty one stays.
            let mut chunks = value.chunks(255).peekable();
            if chunks.peek().is_none() {
                out.extend_from_slice(&[*code, 0]);
            }
            for chunk in chunks {
                out.push(*code);
                out.push(chunk.len() as u8);
                out.extend_from_slice(chunk);
            }
        }
        out.push(code::END);
    }
}

/// A DHCPv4 message: the BOOTP header and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub op: u8,
    /// `htype`: 1 for Ethernet.
    pub hardware_type: u8,
    pub hops: u8,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    /// `chaddr`, its first `hlen` bytes.
    pub hardware_addr: Vec<u8>,
    pub options: Options,
}

impl Message {
    /// A request from the client with hardware address `hw`.
    pub fn request(xid: u32, kind: MessageType, hw: &[u8]) -> Message {
        let mut options = Options::default();
        options.set(code::MESSAGE_TYPE, vec![kind as u8]);
        Message {
            op: BOOTREQUEST,
            hardware_type: 1,
            hops: 0,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            hardware_addr: hw.iter().copied().take(16).collect(),
            options,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MIN_SIZE + 64);
        out.push(self.op);
        out.push(self.hardware_type);
        out.push(self.hardware_addr.len().min(16) as u8);
        out.push(self.hops);
        out.extend_from_slice(&self.xid.to_be_bytes());
        out.extend_from_slice(&self.secs.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        for a in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            out.extend_from_slice(&a.octets());
        }
        let mut chaddr = [0u8; 16];
        let n = self.hardware_addr.len().min(16);
        chaddr[..n].copy_from_slice(&self.hardware_addr[..n]);
        out.extend_from_slice(&chaddr);
        out.resize(FIXED, 0); // sname and file: unused
        out.extend_from_slice(&MAGIC);
        self.options.encode(&mut out);
        if out.len() < MIN_SIZE {
            out.resize(MIN_SIZE, code::PAD);
        }
        out
    }

    pub fn decode(data: &[u8]) -> Result<Message, PacketError> {
        if data.len() < FIXED + MAGIC.len() {
            return Err(PacketError::Truncated { len: data.len() });
        }
        if data[FIXED..FIXED + 4] != MAGIC {
            return Err(PacketError::NoMagic);
        }
        let hlen = data[2];
        if hlen > 16 {
            return Err(PacketError::HardwareLength { hlen });
        }
        let ip = |at: usize| Ipv4Addr::new(data[at], data[at + 1], data[at + 2], data[at + 3]);
        let mut options = Options::default();
        options.parse_into(&data[FIXED + 4..])?;
        // Option overload (52): more options in `file` (1), `sname` (2) or both (3), in
        // that order.
        if let Some(&[overload]) = options.get(code::OVERLOAD) {
            if overload & 1 != 0 {
                options.parse_into(&data[108..236])?;
            }
            if overload & 2 != 0 {
                options.parse_into(&data[44..108])?;
            }
        }
        Ok(Message {
            op: data[0],
            hardware_type: data[1],
            hops: data[3],
            xid: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
            secs: u16::from_be_bytes([data[8], data[9]]),
            flags: u16::from_be_bytes([data[10], data[11]]),
            ciaddr: ip(12),
            yiaddr: ip(16),
            siaddr: ip(20),
            giaddr: ip(24),
            hardware_addr: data[28..28 + hlen as usize].to_vec(),
            options,
        })
    }

    // Typed views of the options.

    pub fn message_type(&self) -> Option<MessageType> {
        match self.options.get(code::MESSAGE_TYPE)? {
            [n] => MessageType::from_u8(*n),
            _ => None,
        }
    }

    fn ip_option(&self, code: u8) -> Option<Ipv4Addr> {
        self.ip_list(code).into_iter().next()
    }

    fn ip_list(&self, code: u8) -> Vec<Ipv4Addr> {
        self.options
            .get(code)
            .map(|v| v.chunks_exact(4).map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3])).collect())
            .unwrap_or_default()
    }

    fn u32_option(&self, code: u8) -> Option<u32> {
        let v: [u8; 4] = self.options.get(code)?.try_into().ok()?;
        Some(u32::from_be_bytes(v))
    }

    fn text_option(&self, code: u8) -> Option<String> {
        let v = self.options.get(code)?;
        let text = String::from_utf8_lossy(v).trim_end_matches('\0').to_string();
        (!text.is_empty()).then_some(text)
    }

    pub fn subnet_mask(&self) -> Option<Ipv4Addr> {
        self.ip_option(code::SUBNET_MASK)
    }

    pub fn routers(&self) -> Vec<Ipv4Addr> {
        self.ip_list(code::ROUTER)
    }

    pub fn dns_servers(&self) -> Vec<Ipv4Addr> {
        self.ip_list(code::DNS)
    }

    pub fn ntp_servers(&self) -> Vec<Ipv4Addr> {
        self.ip_list(code::NTP)
    }

    pub fn hostname(&self) -> Option<String> {
        self.text_option(code::HOSTNAME)
    }

    pub fn domain_name(&self) -> Option<String> {
        self.text_option(code::DOMAIN_NAME)
    }

    pub fn interface_mtu(&self) -> Option<u16> {
        let v: [u8; 2] = self.options.get(code::INTERFACE_MTU)?.try_into().ok()?;
        Some(u16::from_be_bytes(v))
    }

    /// Seconds.
    pub fn lease_time(&self) -> Option<u32> {
        self.u32_option(code::LEASE_TIME)
    }

    /// T1, seconds.
    pub fn renewal_time(&self) -> Option<u32> {
        self.u32_option(code::RENEWAL_TIME)
    }

    /// T2, seconds.
    pub fn rebinding_time(&self) -> Option<u32> {
        self.u32_option(code::REBINDING_TIME)
    }

    pub fn server_id(&self) -> Option<Ipv4Addr> {
        self.ip_option(code::SERVER_ID)
    }

    pub fn client_id(&self) -> Option<&[u8]> {
        self.options.get(code::CLIENT_ID)
    }

    /// Option 121: (destination, prefix length, router) triples; `None` when absent or
    /// malformed (a malformed option is ignored as a whole, as RFC 3442 asks).
    pub fn classless_routes(&self) -> Option<Vec<ClasslessRoute>> {
        let data = self.options.get(code::CLASSLESS_ROUTE)?;
        let mut routes = Vec::new();
        let mut i = 0;
        while i < data.len() {
            let width = data[i];
            if width > 32 {
                return None;
            }
            let significant = usize::from(width).div_ceil(8);
            let dst = data.get(i + 1..i + 1 + significant)?;
            let router = data.get(i + 1 + significant..i + 5 + significant)?;
            let mut octets = [0u8; 4];
            octets[..significant].copy_from_slice(dst);
            routes.push(ClasslessRoute {
                destination: Ipv4Addr::from(octets),
                prefix_len: width,
                router: Ipv4Addr::new(router[0], router[1], router[2], router[3]),
            });
            i += 5 + significant;
        }
        Some(routes)
    }

    /// Option 119: the search domains (RFC 1035 names, compressed within the option).
    pub fn domain_search(&self) -> Vec<String> {
        let Some(data) = self.options.get(code::DOMAIN_SEARCH) else { return Vec::new() };
        let mut names = Vec::new();
        let mut i = 0;
        while i < data.len() {
            match read_name(data, i) {
                Some((name, next)) => {
                    if !name.is_empty() {
                        names.push(name);
                    }
                    i = next;
                }
                None => break,
            }
        }
        names
    }
}

/// A route of option 121.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClasslessRoute {
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    /// 0.0.0.0 for a destination on the link itself.
    pub router: Ipv4Addr,
}

impl ClasslessRoute {
    /// The option 121 encoding of `routes`.
    pub fn encode(routes: &[ClasslessRoute]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in routes {
            out.push(r.prefix_len);
            out.extend_from_slice(&r.destination.octets()[..usize::from(r.prefix_len).div_ceil(8)]);
            out.extend_from_slice(&r.router.octets());
        }
        out
    }
}

/// A name at `at` of `data`, following compression pointers inside `data`; returns it and
/// where the next name starts.
fn read_name(data: &[u8], at: usize) -> Option<(String, usize)> {
    let mut labels = Vec::new();
    let mut i = at;
    let mut next = None;
    // Bounded: a pointer loop cannot spin forever.
    for _ in 0..128 {
        let len = *data.get(i)?;
        match len {
            0 => {
                return Some((labels.join("."), next.unwrap_or(i + 1)));
            }
            l if l & 0xc0 == 0xc0 => {
                let target = (usize::from(l & 0x3f) << 8) | usize::from(*data.get(i + 1)?);
                next.get_or_insert(i + 2);
                i = target;
            }
            l => {
                let label = data.get(i + 1..i + 1 + usize::from(l))?;
                labels.push(String::from_utf8_lossy(label).to_string());
                i += 1 + usize::from(l);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack() -> Message {
        let mut m = Message::request(0x1234_5678, MessageType::Ack, &[2, 0, 0, 0, 0, 1]);
        m.op = BOOTREPLY;
        m.yiaddr = Ipv4Addr::new(10, 9, 0, 50);
        m.options.set(code::SUBNET_MASK, vec![255, 255, 255, 0]);
        m.options.set(code::ROUTER, vec![10, 9, 0, 1]);
        m.options.set(code::DNS, vec![10, 9, 0, 1, 1, 1, 1, 1]);
        m.options.set(code::NTP, vec![10, 9, 0, 2]);
        m.options.set(code::HOSTNAME, b"node1\0".to_vec());
        m.options.set(code::DOMAIN_NAME, b"example.org".to_vec());
        m.options.set(code::INTERFACE_MTU, 1400u16.to_be_bytes().to_vec());
        m.options.set(code::LEASE_TIME, 120u32.to_be_bytes().to_vec());
        m.options.set(code::RENEWAL_TIME, 5u32.to_be_bytes().to_vec());
        m.options.set(code::REBINDING_TIME, 100u32.to_be_bytes().to_vec());
        m.options.set(code::SERVER_ID, vec![10, 9, 0, 1]);
        m.options.set(code::CLIENT_ID, vec![1, 2, 0, 0, 0, 0, 1]);
        m
    }

    #[test]
    fn round_trip_and_typed_options() {
        let m = ack();
        let bytes = m.encode();
        assert!(bytes.len() >= MIN_SIZE);
        assert_eq!(&bytes[236..240], &MAGIC);
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.message_type(), Some(MessageType::Ack));
        assert_eq!(back.subnet_mask(), Some(Ipv4Addr::new(255, 255, 255, 0)));
        assert_eq!(back.routers(), [Ipv4Addr::new(10, 9, 0, 1)]);
        assert_eq!(back.dns_servers(), [Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(1, 1, 1, 1)]);
        assert_eq!(back.ntp_servers(), [Ipv4Addr::new(10, 9, 0, 2)]);
        assert_eq!(back.hostname().as_deref(), Some("node1"), "trailing NULs dropped");
        assert_eq!(back.domain_name().as_deref(), Some("example.org"));
        assert_eq!(back.interface_mtu(), Some(1400));
        assert_eq!((back.lease_time(), back.renewal_time(), back.rebinding_time()), (Some(120), Some(5), Some(100)));
        assert_eq!(back.server_id(), Some(Ipv4Addr::new(10, 9, 0, 1)));
        assert_eq!(back.client_id(), Some(&[1, 2, 0, 0, 0, 0, 1][..]));
        assert_eq!(back.classless_routes(), None);
    }

    #[test]
    fn header_fields_at_their_offsets() {
        let mut m = Message::request(0xdead_beef, MessageType::Discover, &[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        m.flags = FLAG_BROADCAST;
        m.ciaddr = Ipv4Addr::new(1, 2, 3, 4);
        let b = m.encode();
        assert_eq!(&b[..4], &[1, 1, 6, 0], "op, htype, hlen, hops");
        assert_eq!(&b[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&b[10..12], &[0x80, 0]);
        assert_eq!(&b[12..16], &[1, 2, 3, 4]);
        assert_eq!(&b[28..34], &[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        assert_eq!(&b[240..243], &[53, 1, 1], "message type first");
    }

    #[test]
    fn classless_routes_as_rfc_3442_encodes_them() {
        // The RFC's examples: 0/0 via 10.0.0.1, 10/8 via 10.0.0.6, 10.17.0.0/16, 10.27.129/24,
        // 10.229.0.128/25 and a host route.
        let routes = vec![
            ClasslessRoute { destination: Ipv4Addr::UNSPECIFIED, prefix_len: 0, router: Ipv4Addr::new(10, 0, 0, 1) },
            ClasslessRoute {
                destination: Ipv4Addr::new(10, 0, 0, 0),
                prefix_len: 8,
                router: Ipv4Addr::new(10, 0, 0, 6),
            },
            ClasslessRoute {
                destination: Ipv4Addr::new(10, 229, 0, 128),
                prefix_len: 25,
                router: Ipv4Addr::new(10, 0, 0, 1),
            },
            ClasslessRoute { destination: Ipv4Addr::new(10, 1, 2, 3), prefix_len: 32, router: Ipv4Addr::UNSPECIFIED },
        ];
        let bytes = ClasslessRoute::encode(&routes);
        assert_eq!(&bytes[..5], &[0, 10, 0, 0, 1]);
        assert_eq!(&bytes[5..11], &[8, 10, 10, 0, 0, 6]);
        assert_eq!(&bytes[11..20], &[25, 10, 229, 0, 128, 10, 0, 0, 1]);
        let mut m = ack();
        m.options.set(code::CLASSLESS_ROUTE, bytes);
        let back = Message::decode(&m.encode()).unwrap();
        assert_eq!(back.classless_routes(), Some(routes));
        // Malformed (width 33, or cut short): ignored as a whole.
        m.options.set(code::CLASSLESS_ROUTE, vec![33, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m.classless_routes(), None);
        m.options.set(code::CLASSLESS_ROUTE, vec![24, 10, 1]);
        assert_eq!(m.classless_routes(), None);
    }

    #[test]
    fn long_options_split_and_join() {
        let mut m = ack();
        let long: Vec<u8> = (0..600u16).map(|n| n as u8).collect();
        m.options.set(code::CLASSLESS_ROUTE + 1, long.clone());
        let bytes = m.encode();
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back.options.get(code::CLASSLESS_ROUTE + 1), Some(&long[..]));
    }

    #[test]
    fn overloaded_file_field_carries_options() {
        let mut b = ack().encode();
        // Option 52 = 1: more options in `file` (offset 108), here the domain name.
        let end = b.iter().rposition(|&x| x == code::END).unwrap();
        b.splice(end..end, [code::OVERLOAD, 1, 1]);
        b[108..108 + 7].copy_from_slice(&[code::DOMAIN_NAME, 4, b'x', b'.', b'i', b'o', code::END]);
        let m = Message::decode(&b).unwrap();
        assert_eq!(m.domain_name().as_deref(), Some("example.orgx.io"), "joined onto the earlier instance");
    }

    #[test]
    fn domain_search_with_compression() {
        // RFC 3397's example: eng.apple.com, marketing.apple.com (pointer to apple.com).
        let mut data = vec![3, b'e', b'n', b'g', 5, b'a', b'p', b'p', b'l', b'e', 3, b'c', b'o', b'm', 0];
        data.extend_from_slice(&[9]);
        data.extend_from_slice(b"marketing");
        data.extend_from_slice(&[0xc0, 4]);
        let mut m = ack();
        m.options.set(code::DOMAIN_SEARCH, data);
        assert_eq!(m.domain_search(), ["eng.apple.com", "marketing.apple.com"]);
        m.options.set(code::DOMAIN_SEARCH, vec![0xc0, 0]);
        assert!(m.domain_search().is_empty(), "a pointer loop ends");
    }

    #[test]
    fn bad_messages_are_errors() {
        assert_eq!(Message::decode(&[0; 100]), Err(PacketError::Truncated { len: 100 }));
        assert_eq!(Message::decode(&[0; 300]), Err(PacketError::NoMagic));
        let mut b = ack().encode();
        let end = b.iter().rposition(|&x| x == code::END).unwrap();
        b.truncate(end);
        b.extend_from_slice(&[code::HOSTNAME, 10, b'a']);
        assert_eq!(Message::decode(&b), Err(PacketError::OptionOverrun { code: code::HOSTNAME }));
        let mut b = ack().encode();
        b[2] = 17;
        assert_eq!(Message::decode(&b), Err(PacketError::HardwareLength { hlen: 17 }));
    }
}
