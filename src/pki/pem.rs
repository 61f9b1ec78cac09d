//! PEM text: the `-----BEGIN LABEL-----` blocks certificates, keys and CSRs travel in, written
//! the way Go's `encoding/pem` writes them (64-column base64, a newline after the END line) so
//! files stay byte-for-byte what Talos would write.
//!
//! Labels are compared exactly; this module never guesses what a block holds.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::PkiError;

pub const CERTIFICATE: &str = "CERTIFICATE";
pub const CERTIFICATE_REQUEST: &str = "CERTIFICATE REQUEST";
/// Talos labels Ed25519 keys with their algorithm; the body is PKCS#8.
pub const ED25519_PRIVATE_KEY: &str = "ED25519 PRIVATE KEY";
/// SEC 1 elliptic-curve keys.
pub const EC_PRIVATE_KEY: &str = "EC PRIVATE KEY";
/// PKCS#8 of any algorithm.
pub const PRIVATE_KEY: &str = "PRIVATE KEY";

/// One decoded block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub label: String,
    pub der: Vec<u8>,
}

/// Every block in `text`, in order; text between blocks is ignored. `what` names the input
/// in errors.
pub fn decode_all(text: &str, what: &str) -> Result<Vec<Block>, PkiError> {
    let err = |detail: String| PkiError::Pem { what: what.to_owned(), detail };
    let mut blocks = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line.strip_prefix("-----BEGIN ").and_then(|l| l.strip_suffix("-----")) else { continue };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        loop {
            match lines.next() {
                Some(l) if l == end => break,
                Some(l) if l.contains(':') => continue, // RFC 1421 headers (Proc-Type and such)
                Some(l) => body.push_str(l),
                None => return Err(err(format!("{label} block has no END line"))),
            }
        }
        let der = STANDARD.decode(body.as_bytes()).map_err(|e| err(format!("{label} block: {e}")))?;
        blocks.push(Block { label: label.to_owned(), der });
    }
    Ok(blocks)
}

/// The first block, which must carry one of `labels`.
pub fn decode_one(text: &str, labels: &[&str], what: &str) -> Result<Block, PkiError> {
    let block = decode_all(text, what)?
        .into_iter()
        .next()
        .ok_or_else(|| PkiError::Pem { what: what.to_owned(), detail: "no PEM block found".into() })?;
    if !labels.contains(&block.label.as_str()) {
        return Err(PkiError::Pem {
            what: what.to_owned(),
            detail: format!("found a {:?} block, expected {}", block.label, labels.join(" or ")),
        });
    }
    Ok(block)
}

/// Every `CERTIFICATE` block in `text` (a CA bundle may hold several); other blocks are an error.
pub fn decode_certificates(text: &str, what: &str) -> Result<Vec<Vec<u8>>, PkiError> {
    let blocks = decode_all(text, what)?;
    if blocks.is_empty() {
        return Err(PkiError::Pem { what: what.to_owned(), detail: "no certificate found".into() });
    }
    blocks
        .into_iter()
        .map(|b| {
            if b.label == CERTIFICATE {
                Ok(b.der)
            } else {
                Err(PkiError::Pem {
                    what: what.to_owned(),
                    detail: format!("found a {:?} block among certificates", b.label),
                })
            }
        })
        .collect()
}

pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 2 * label.len() + 32);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_wraps_at_64_columns_like_go() {
        let der: Vec<u8> = (0..=99).collect();
        let text = encode(CERTIFICATE, &der);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines.last(), Some(&"-----END CERTIFICATE-----"));
        assert!(text.ends_with("-----\n"));
        assert_eq!(decode_one(&text, &[CERTIFICATE], "test").unwrap().der, der);
    }

    #[test]
    fn several_blocks_and_surrounding_text() {
        let text = format!("leading\n{}between\n{}", encode(CERTIFICATE, b"one"), encode(PRIVATE_KEY, b"two"));
        let blocks = decode_all(&text, "test").unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1], Block { label: PRIVATE_KEY.into(), der: b"two".to_vec() });
        let err = decode_certificates(&text, "the CA bundle").unwrap_err().to_string();
        assert!(err.contains("the CA bundle") && err.contains("PRIVATE KEY"), "{err}");
    }

    #[test]
    fn errors_name_the_input() {
        let err = decode_one("nothing", &[CERTIFICATE], "machine.ca.crt").unwrap_err().to_string();
        assert_eq!(err, "reading machine.ca.crt: no PEM block found");
        let err = decode_one(&encode(EC_PRIVATE_KEY, b"k"), &[CERTIFICATE], "x").unwrap_err().to_string();
        assert!(err.contains("\"EC PRIVATE KEY\"") && err.contains("expected CERTIFICATE"), "{err}");
        let err = decode_all("-----BEGIN CERTIFICATE-----\nAAAA\n", "x").unwrap_err().to_string();
        assert!(err.contains("no END line"), "{err}");
        let err = decode_all("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "x").unwrap_err();
        assert!(err.to_string().contains("CERTIFICATE block"), "{err}");
    }
}
