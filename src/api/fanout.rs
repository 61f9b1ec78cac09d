//! One-to-many proxying (`nodes` metadata), as Talos's apid does it for `machine.MachineService`
//! (and `storage.StorageService`, whose replies have the same shape),
//! for clients that still send it (talosctl before client-side fan-out): the same call to every
//! node, the replies merged into one, each message tagged with the node it came from.
//!
//! This works without decoding any message type because every MachineService reply follows
//! Talos's convention: a unary reply is `repeated X messages = 1`, and every `X` (and every
//! streamed message) has `common.Metadata metadata = 1`. Protobuf merges repeated occurrences of
//! an embedded message field, so appending an encoded `metadata { hostname }` to a message's bytes
//! sets its hostname; and concatenating two replies concatenates their `messages`. A node that
//! fails contributes a message holding only `metadata { hostname, error, status }`.
//!
//! Pure byte surgery on the protobuf wire format, table-tested.

use prost::Message;
use prost::encoding::{decode_varint, encode_varint};

use crate::proto::common::Metadata;
use crate::proto::google::rpc::Status;

/// The encoded field `metadata = 1` carrying `hostname` (and, for a failure, the error).
#[allow(deprecated)]
fn metadata_field(hostname: &str, error: Option<(i32, &str)>) -> Vec<u8> {
    let metadata = Metadata {
        hostname: hostname.to_string(),
        error: error.map(|(_, m)| m.to_string()).unwrap_or_default(),
        status: error.map(|(code, message)| Status { code, message: message.to_string(), details: Vec::new() }),
    };
    length_delimited(1, &metadata.encode_to_vec())
}

fn length_delimited(field: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 6);
    encode_varint(u64::from(field << 3 | 2), &mut out);
    encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// A streamed message from `hostname`, with its metadata set.
pub fn tag_streamed(message: &[u8], hostname: &str) -> Vec<u8> {
    let mut out = message.to_vec();
    out.extend_from_slice(&metadata_field(hostname, None));
    out
}

/// A streamed message standing for `hostname`'s failure.
pub fn streamed_error(hostname: &str, code: i32, message: &str) -> Vec<u8> {
    metadata_field(hostname, Some((code, message)))
}

/// A unary reply from `hostname` with every `messages` element tagged; `None` if the bytes are
/// not a protobuf message.
pub fn tag_unary(reply: &[u8], hostname: &str) -> Option<Vec<u8>> {
    let tag = metadata_field(hostname, None);
    let mut out = Vec::with_capacity(reply.len() + tag.len() * 2);
    let mut rest = reply;
    while !rest.is_empty() {
        let before = rest;
        let key = decode_varint(&mut rest).ok()?;
        let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
        match wire {
            0 => {
                decode_varint(&mut rest).ok()?;
            }
            1 => rest = rest.get(8..)?,
            5 => rest = rest.get(4..)?,
            2 => {
                let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
                let value = rest.get(..len)?;
                rest = &rest[len..];
                if field == 1 {
                    let mut tagged = value.to_vec();
                    tagged.extend_from_slice(&tag);
                    out.extend_from_slice(&length_delimited(1, &tagged));
                    continue;
                }
            }
            _ => return None,
        }
        let consumed = before.len() - rest.len();
        out.extend_from_slice(&before[..consumed]);
    }
    Some(out)
}

/// A unary reply standing for `hostname`'s failure: one `messages` element with the error.
pub fn unary_error(hostname: &str, code: i32, message: &str) -> Vec<u8> {
    length_delimited(1, &metadata_field(hostname, Some((code, message))))
}

/// Splits a gRPC body into its messages' payloads; `None` when it is malformed or compressed.
pub fn frames(body: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let header = rest.get(..5)?;
        if header[0] != 0 {
            return None;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        out.push(rest.get(5..5 + len)?);
        rest = &rest[5 + len..];
    }
    Some(out)
}

/// One uncompressed gRPC frame holding `payload`.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.push(0);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::common::Data;
    use crate::proto::machine::{Version, VersionInfo, VersionResponse};

    fn reply(tag: &str) -> VersionResponse {
        VersionResponse {
            messages: vec![Version {
                metadata: None,
                version: Some(VersionInfo { tag: tag.into(), ..Default::default() }),
                platform: None,
                features: None,
            }],
        }
    }

    #[test]
    #[allow(deprecated)]
    fn unary_replies_merge_with_their_hostnames() {
        let a = tag_unary(&reply("v1").encode_to_vec(), "10.5.0.2").unwrap();
        let b = tag_unary(&reply("v2").encode_to_vec(), "10.5.0.3").unwrap();
        let failed = unary_error("10.5.0.4", 14, "connection refused");
        let merged = VersionResponse::decode([a, b, failed].concat().as_slice()).unwrap();
        let seen: Vec<(String, String, String)> = merged
            .messages
            .iter()
            .map(|m| {
                let md = m.metadata.clone().unwrap();
                (md.hostname, m.version.clone().map(|v| v.tag).unwrap_or_default(), md.error)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("10.5.0.2".into(), "v1".into(), "".into()),
                ("10.5.0.3".into(), "v2".into(), "".into()),
                ("10.5.0.4".into(), "".into(), "connection refused".into())
            ]
        );
        assert_eq!(merged.messages[2].metadata.clone().unwrap().status.unwrap().code, 14);
    }

    #[test]
    #[allow(deprecated)]
    fn streamed_messages_get_their_hostname() {
        let data = Data { metadata: None, bytes: b"line\n".to_vec() };
        let tagged = Data::decode(tag_streamed(&data.encode_to_vec(), "cp1").as_slice()).unwrap();
        assert_eq!((tagged.metadata.unwrap().hostname, tagged.bytes), ("cp1".to_string(), b"line\n".to_vec()));
        let err = Data::decode(streamed_error("w1", 2, "boom").as_slice()).unwrap();
        assert_eq!(err.metadata.unwrap().error, "boom");
    }

    #[test]
    fn frames_split_and_join() {
        let body = [frame(b"ab"), frame(b""), frame(b"cde")].concat();
        assert_eq!(frames(&body).unwrap(), [&b"ab"[..], b"", b"cde"]);
        assert!(frames(&body[..body.len() - 1]).is_none(), "a cut frame");
        assert!(frames(&[1, 0, 0, 0, 0]).is_none(), "compressed");
        assert!(tag_unary(&[0x0a, 0x05, 1], "x").is_none(), "a cut field");
        assert_eq!(tag_unary(&[], "x").unwrap(), Vec::<u8>::new());
    }
}
