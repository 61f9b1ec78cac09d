//! The little DER this crate writes by hand: splitting a structure into its elements and
//! wrapping content in a tag. Enough to move key bytes between PKCS#8 and SEC 1 and to put a
//! Go-shaped subject name into a certificate; full parsing is x509-parser's job.
//!
//! Only single-byte tags and definite lengths (DER allows nothing else) are accepted.

pub(crate) const SEQUENCE: u8 = 0x30;
pub(crate) const SET: u8 = 0x31;
pub(crate) const INTEGER: u8 = 0x02;
pub(crate) const BIT_STRING: u8 = 0x03;
pub(crate) const OCTET_STRING: u8 = 0x04;
pub(crate) const OID: u8 = 0x06;
pub(crate) const UTF8_STRING: u8 = 0x0c;
pub(crate) const PRINTABLE_STRING: u8 = 0x13;
/// `[0]` and `[1]`, constructed.
pub(crate) const CONTEXT_0: u8 = 0xa0;
pub(crate) const CONTEXT_1: u8 = 0xa1;

/// One element: its tag, its content, and its whole encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Element<'a> {
    pub tag: u8,
    pub content: &'a [u8],
    pub raw: &'a [u8],
}

/// The first element of `input` and what follows it.
pub(crate) fn read(input: &[u8]) -> Option<(Element<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tag
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    let element = Element { tag, content: &rest[..len], raw: &input[..header + len] };
    Some((element, &rest[len..]))
}

/// All elements of `content`, which must be consumed exactly.
pub(crate) fn elements(mut content: &[u8]) -> Option<Vec<Element<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (element, rest) = read(content)?;
        out.push(element);
        content = rest;
    }
    Some(out)
}

/// The elements inside a single `tag` element that makes up all of `input`.
pub(crate) fn children(input: &[u8], tag: u8) -> Option<Vec<Element<'_>>> {
    let (outer, rest) = read(input)?;
    if outer.tag != tag || !rest.is_empty() {
        return None;
    }
    elements(outer.content)
}

/// `content` wrapped in `tag` with a definite length.
pub(crate) fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = Vec::with_capacity(len + 6);
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The concatenation of several encodings wrapped in `tag`.
pub(crate) fn wrap_all(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    wrap(tag, &parts.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let content = vec![7u8; len];
            let enc = wrap(OCTET_STRING, &content);
            let (el, rest) = read(&enc).unwrap();
            assert!(rest.is_empty());
            assert_eq!((el.tag, el.content.len(), el.raw.len()), (OCTET_STRING, len, enc.len()));
        }
        assert_eq!(wrap(SEQUENCE, &[]), [0x30, 0x00]);
        assert_eq!(wrap(SEQUENCE, &[0; 200])[..3], [0x30, 0x81, 200]);
    }

    #[test]
    fn children_split_a_sequence() {
        let seq = wrap_all(SEQUENCE, &[&wrap(INTEGER, &[1]), &wrap(OID, &[0x2b, 0x65, 0x70])]);
        let kids = children(&seq, SEQUENCE).unwrap();
        assert_eq!(kids.len(), 2);
        assert_eq!(kids[1].content, [0x2b, 0x65, 0x70]);
        assert!(children(&seq, SET).is_none(), "wrong outer tag");
        assert!(read(&[0x30, 0x05, 0x00]).is_none(), "truncated");
        assert!(read(&[0x1f, 0x01, 0x00]).is_none(), "multi-byte tag");
    }
}
