//! Just enough of the DNS wire format (RFC 1035) for a forwarding cache: the header, the one
//! question, where every record's TTL sits, and the EDNS payload size of a query. Records are
//! walked, never decoded: the forwarder passes the upstream's bytes on as they came, changing
//! only the ID and the TTLs. Pure: bytes in, values out.

/// The wire header is 12 bytes.
pub const HEADER_LEN: usize = 12;
/// Without EDNS a UDP answer may be 512 bytes (RFC 1035 4.2.1).
pub const CLASSIC_UDP_LIMIT: usize = 512;

const QR: u16 = 0x8000;
const OPCODE_MASK: u16 = 0x7800;
const TC: u16 = 0x0200;
const RD: u16 = 0x0100;
const RA: u16 = 0x0080;
const RCODE_MASK: u16 = 0x000f;

/// Response codes the forwarder looks at or makes.
pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_REFUSED: u8 = 5;

const TYPE_OPT: u16 = 41;
/// How many compression pointers a name may follow: more is a loop.
const MAX_POINTER_HOPS: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("DNS message too short: {what} at byte {at}")]
    Short { what: &'static str, at: usize },
    #[error("DNS message: bad name at byte {at}")]
    BadName { at: usize },
    #[error("DNS message has {count} questions; one is supported")]
    Questions { count: u16 },
}

/// The question: the name in lower case, dotted, without the final dot (`""` is the root).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Question {
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// A parsed message: its header, question, and the places of its records' TTLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: u16,
    pub flags: u16,
    pub question: Question,
    /// Where the question section ends (the header and question, copied into replies).
    pub question_end: usize,
    pub answers: u16,
    pub authorities: u16,
    pub additionals: u16,
    /// Byte offset and value of the TTL of every record but EDNS's OPT.
    pub ttls: Vec<(usize, u32)>,
    /// The OPT record's UDP payload size, if the message has one.
    pub udp_payload: Option<u16>,
}

fn u16_at(buf: &[u8], at: usize, what: &'static str) -> Result<u16, MessageError> {
    buf.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or(MessageError::Short { what, at })
}

fn u32_at(buf: &[u8], at: usize, what: &'static str) -> Result<u32, MessageError> {
    buf.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or(MessageError::Short { what, at })
}

/// Reads the name at `start`: its text and where the bytes after it begin.
fn read_name(buf: &[u8], start: usize) -> Result<(String, usize), MessageError> {
    let mut labels: Vec<String> = Vec::new();
    let mut at = start;
    let mut end = None;
    let mut hops = 0;
    loop {
        let len = *buf.get(at).ok_or(MessageError::Short { what: "name", at })? as usize;
        match len & 0xc0 {
            0x00 if len == 0 => {
                return Ok((labels.join("."), end.unwrap_or(at + 1)));
            }
            0x00 => {
                let label = buf.get(at + 1..at + 1 + len).ok_or(MessageError::Short { what: "label", at })?;
                labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
                at += 1 + len;
            }
            0xc0 => {
                let pointer = (u16_at(buf, at, "pointer")? & 0x3fff) as usize;
                end.get_or_insert(at + 2);
                hops += 1;
                if hops > MAX_POINTER_HOPS || pointer >= buf.len() {
                    return Err(MessageError::BadName { at });
                }
                at = pointer;
            }
            _ => return Err(MessageError::BadName { at }),
        }
    }
}

/// Skips the name at `at` without reading it.
fn skip_name(buf: &[u8], mut at: usize) -> Result<usize, MessageError> {
    loop {
        let len = *buf.get(at).ok_or(MessageError::Short { what: "name", at })? as usize;
        match len & 0xc0 {
            0x00 if len == 0 => return Ok(at + 1),
            0x00 => at += 1 + len,
            0xc0 => return Ok(at + 2),
            _ => return Err(MessageError::BadName { at }),
        }
    }
}

pub fn parse(buf: &[u8]) -> Result<Message, MessageError> {
    let id = u16_at(buf, 0, "header")?;
    let flags = u16_at(buf, 2, "header")?;
    let questions = u16_at(buf, 4, "header")?;
    let answers = u16_at(buf, 6, "header")?;
    let authorities = u16_at(buf, 8, "header")?;
    let additionals = u16_at(buf, 10, "header")?;
    if questions != 1 {
        return Err(MessageError::Questions { count: questions });
    }
    let (name, at) = read_name(buf, HEADER_LEN)?;
    let qtype = u16_at(buf, at, "question")?;
    let qclass = u16_at(buf, at + 2, "question")?;
    let question_end = at + 4;
    let mut at = question_end;
    let mut ttls = Vec::new();
    let mut udp_payload = None;
    for _ in 0..u32::from(answers) + u32::from(authorities) + u32::from(additionals) {
        at = skip_name(buf, at)?;
        let rtype = u16_at(buf, at, "record")?;
        let class = u16_at(buf, at + 2, "record")?;
        let ttl = u32_at(buf, at + 4, "record")?;
        let rdlength = u16_at(buf, at + 8, "record")? as usize;
        if rtype == TYPE_OPT {
            udp_payload = Some(class);
        } else {
            ttls.push((at + 4, ttl));
        }
        at += 10 + rdlength;
        if at > buf.len() {
            return Err(MessageError::Short { what: "record data", at });
        }
    }
    Ok(Message {
        id,
        flags,
        question: Question { name, qtype, qclass },
        question_end,
        answers,
        authorities,
        additionals,
        ttls,
        udp_payload,
    })
}

impl Message {
    pub fn is_response(&self) -> bool {
        self.flags & QR != 0
    }

    pub fn truncated(&self) -> bool {
        self.flags & TC != 0
    }

    pub fn rcode(&self) -> u8 {
        (self.flags & RCODE_MASK) as u8
    }

    /// The smallest TTL of the records; `None` without records.
    pub fn min_ttl(&self) -> Option<u32> {
        self.ttls.iter().map(|(_, ttl)| *ttl).min()
    }

    /// The largest UDP answer the asker takes.
    pub fn udp_limit(&self) -> usize {
        self.udp_payload.map_or(CLASSIC_UDP_LIMIT, |p| usize::from(p).max(CLASSIC_UDP_LIMIT))
    }
}

/// A reply to `query` with only its question and `rcode` (SERVFAIL when every upstream
/// failed, FORMERR …), or with `TC` set (an answer too long for UDP).
fn bare_reply(query_bytes: &[u8], query: &Message, rcode: u8, truncated: bool) -> Vec<u8> {
    let mut flags = QR | (query.flags & (OPCODE_MASK | RD)) | RA | u16::from(rcode);
    if truncated {
        flags |= TC;
    }
    let mut out = Vec::with_capacity(query.question_end);
    out.extend_from_slice(&query.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&query_bytes[HEADER_LEN..query.question_end]);
    out
}

pub fn error_reply(query_bytes: &[u8], query: &Message, rcode: u8) -> Vec<u8> {
    bare_reply(query_bytes, query, rcode, false)
}

/// The header and question of `response` with `TC` set: the asker retries over TCP.
pub fn truncated_reply(response_bytes: &[u8], response: &Message) -> Vec<u8> {
    let mut out = bare_reply(response_bytes, response, response.rcode(), true);
    // Keep the upstream's own flags (AA …) but for the counts' meaning.
    let flags = response.flags | TC;
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out
}

/// A minimal FORMERR for bytes too broken to parse a question from: the ID, if there is one.
pub fn formerr_for(bytes: &[u8]) -> Option<Vec<u8>> {
    let id = bytes.get(0..2)?;
    let mut out = id.to_vec();
    out.extend_from_slice(&(QR | u16::from(RCODE_FORMERR)).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    Some(out)
}

/// Sets the message ID of `bytes` (a cached answer goes out under the asker's ID).
pub fn set_id(bytes: &mut [u8], id: u16) {
    if bytes.len() >= 2 {
        bytes[0..2].copy_from_slice(&id.to_be_bytes());
    }
}

/// Rewrites the TTLs at `ttls` to their value less `elapsed` seconds.
pub fn age_ttls(bytes: &mut [u8], ttls: &[(usize, u32)], elapsed: u32) {
    for (at, ttl) in ttls {
        if let Some(field) = bytes.get_mut(*at..*at + 4) {
            field.copy_from_slice(&ttl.saturating_sub(elapsed).to_be_bytes());
        }
    }
}

/// A query for `name` (dotted, no final dot) of `qtype`, class IN, recursion desired: for
/// tests and probes.
pub fn build_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&RD.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out
}

/// The IPv4 addresses of the A records of the answer section: for tests and probes.
pub fn answer_ipv4s(bytes: &[u8]) -> Result<Vec<std::net::Ipv4Addr>, MessageError> {
    let msg = parse(bytes)?;
    let mut at = msg.question_end;
    let mut out = Vec::new();
    for _ in 0..msg.answers {
        at = skip_name(bytes, at)?;
        let rtype = u16_at(bytes, at, "record")?;
        let rdlength = u16_at(bytes, at + 8, "record")? as usize;
        let data = bytes.get(at + 10..at + 10 + rdlength).ok_or(MessageError::Short { what: "record data", at })?;
        if rtype == 1 && rdlength == 4 {
            out.push(std::net::Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += 10 + rdlength;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer to `build_query(0x1234, "Example.TEST", 1)`: one A record with a compressed
    /// name, TTL 300, and an OPT record.
    fn answer() -> Vec<u8> {
        let mut m = build_query(0x1234, "Example.TEST", 1);
        m[2..4].copy_from_slice(&(QR | RD | RA).to_be_bytes());
        m[6..8].copy_from_slice(&1u16.to_be_bytes());
        m[10..12].copy_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 10, 1, 2, 3]);
        m.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0, 0, 0]);
        m
    }

    #[test]
    fn parses_header_question_and_ttls() {
        let q = build_query(7, "example.test", 28);
        let msg = parse(&q).unwrap();
        assert_eq!(msg.id, 7);
        assert!(!msg.is_response());
        assert_eq!(msg.question, Question { name: "example.test".into(), qtype: 28, qclass: 1 });
        assert_eq!(msg.question_end, q.len());
        assert_eq!(msg.udp_limit(), 512);

        let a = answer();
        let msg = parse(&a).unwrap();
        assert!(msg.is_response() && !msg.truncated());
        assert_eq!(msg.rcode(), RCODE_NOERROR);
        assert_eq!(msg.question.name, "example.test", "lower-cased");
        assert_eq!(msg.ttls, vec![(msg.question_end + 6, 300)], "the OPT record's TTL is not a TTL");
        assert_eq!(msg.udp_payload, Some(1232));
        assert_eq!(msg.udp_limit(), 1232);
        assert_eq!(answer_ipv4s(&a).unwrap(), [std::net::Ipv4Addr::new(10, 1, 2, 3)]);
        assert_eq!(parse(&build_query(1, "", 2)).unwrap().question.name, "", "the root");
    }

    #[test]
    fn refuses_broken_messages() {
        let a = answer();
        for cut in [0, 5, 12, 20, a.len() - 12, a.len() - 1] {
            assert!(parse(&a[..cut]).is_err(), "cut at {cut}");
        }
        let mut two = build_query(1, "a.test", 1);
        two[4..6].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(parse(&two), Err(MessageError::Questions { count: 2 }));
        let mut looped = build_query(1, "a", 1);
        looped[12..14].copy_from_slice(&[0xc0, 12]);
        assert_eq!(parse(&looped), Err(MessageError::BadName { at: 12 }), "a pointer loop");
        let mut bad_label = build_query(1, "a", 1);
        bad_label[12] = 0x80;
        assert!(matches!(parse(&bad_label), Err(MessageError::BadName { .. })));
    }

    #[test]
    fn replies_and_rewrites() {
        let q = build_query(0xbeef, "down.test", 1);
        let msg = parse(&q).unwrap();
        let fail = parse(&error_reply(&q, &msg, RCODE_SERVFAIL)).unwrap();
        assert_eq!((fail.id, fail.rcode(), fail.is_response()), (0xbeef, RCODE_SERVFAIL, true));
        assert_eq!(fail.flags & RD, RD, "recursion desired is echoed");
        assert_eq!((fail.question, fail.answers), (msg.question.clone(), 0));

        let a = answer();
        let parsed = parse(&a).unwrap();
        let tc = parse(&truncated_reply(&a, &parsed)).unwrap();
        assert!(tc.truncated());
        assert_eq!((tc.answers, tc.additionals, tc.question), (0, 0, parsed.question.clone()));

        let mut aged = a.clone();
        set_id(&mut aged, 0x4321);
        age_ttls(&mut aged, &parsed.ttls, 100);
        let again = parse(&aged).unwrap();
        assert_eq!((again.id, again.min_ttl()), (0x4321, Some(200)));
        age_ttls(&mut aged, &parsed.ttls, 1000);
        assert_eq!(parse(&aged).unwrap().min_ttl(), Some(0), "never below zero");

        let f = formerr_for(&[0xab, 0xcd, 0xff]).unwrap();
        assert_eq!(&f[..2], &[0xab, 0xcd]);
        assert_eq!(formerr_for(&[1]), None);
    }
}
