//! The fuzzing entry point of the API's request decoding: any bytes in, decoded as each request
//! message the node accepts and run through the request-dependent code that needs no node
//! (the config loader for applies, label queries, durations, the metadata router, the gRPC
//! frame scanner). It must never panic; a panic is a bug to fix where it happens.

use prost::Message;

use super::grpc_body::FrameScanner;
use super::router::{keys, route};
use crate::proto::cosi::resource as wire;
use crate::proto::machine as m;

/// Runs `data` through every decoder; the first byte picks a metadata shape for the router.
pub fn fuzz_request(data: &[u8]) {
    if let Ok(r) = m::ApplyConfigurationRequest::decode(data) {
        let _ = m::apply_configuration_request::Mode::try_from(r.mode);
        if let Some(d) = r.try_mode_timeout {
            let _ = std::time::Duration::try_from(d).map(super::apply::go_duration);
        }
        crate::config::fuzz_load(&r.data);
    }
    for q in [
        wire::ListRequest::decode(data).ok().and_then(|r| r.options).map(|o| o.label_query),
        wire::WatchRequest::decode(data).ok().and_then(|r| r.options).map(|o| o.label_query),
    ]
    .into_iter()
    .flatten()
    .flatten()
    {
        let _ = super::state_service::label_query(&q);
    }
    let _ = wire::GetRequest::decode(data);
    let _ = m::LogsRequest::decode(data);
    let _ = m::ListRequest::decode(data);
    let _ = m::ReadRequest::decode(data);
    let _ = m::EventsRequest::decode(data);
    let _ = m::ResetRequest::decode(data);
    let _ = m::GenerateClientConfigurationRequest::decode(data)
        .map(|r| (crate::pki::RoleSet::parse(&r.roles), r.crt_ttl.map(std::time::Duration::try_from)));

    // Metadata: the bytes as values of node / nodes / proxyfrom, split on newlines.
    let mut headers = http::HeaderMap::new();
    let key = match data.first().map(|b| b % 3) {
        Some(0) => keys::NODE,
        Some(1) => keys::NODES,
        _ => keys::PROXY_FROM,
    };
    for value in data.split(|b| *b == b'\n').take(4) {
        if let Ok(v) = http::HeaderValue::from_bytes(value) {
            headers.append(key, v);
        }
    }
    let local = |t: &str| t == "127.0.0.1";
    let _ = route(&headers, &local, true);

    // Framing: the bytes as a request body, in chunks of varying size.
    let mut scanner = FrameScanner::new(1 << 16);
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    for chunk in data.chunks(step) {
        if scanner.scan(chunk).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encoded requests of every kind, the mutator's starting points.
    fn seeds() -> Vec<Vec<u8>> {
        let apply = m::ApplyConfigurationRequest {
            data: b"version: v1alpha1\nmachine:\n  type: worker\n  token: abcdef.0123456789abcdef\n".to_vec(),
            mode: 4,
            dry_run: true,
            try_mode_timeout: Some(prost_types::Duration { seconds: 90, nanos: 5 }),
        };
        let list = wire::ListRequest {
            namespace: "runtime".into(),
            r#type: "MachineStatuses.runtime.talos.dev".into(),
            options: Some(wire::ListOptions {
                label_query: vec![wire::LabelQuery {
                    terms: vec![wire::LabelTerm { key: "a".into(), value: vec!["b".into()], op: 3, invert: true }],
                }],
                id_query: None,
            }),
        };
        vec![
            apply.encode_to_vec(),
            list.encode_to_vec(),
            m::LogsRequest { namespace: "system".into(), id: "apid".into(), driver: 0, follow: true, tail_lines: -1 }
                .encode_to_vec(),
            m::GenerateClientConfigurationRequest {
                roles: vec!["os:reader".into(), "os:nope".into()],
                crt_ttl: Some(prost_types::Duration { seconds: -5, nanos: 0 }),
            }
            .encode_to_vec(),
            b"\x00\x00\x00\x00\x05hello\x01\xff\xff\xff\xff".to_vec(),
            b"10.5.0.2\n10.5.0.3\n".to_vec(),
        ]
    }

    #[test]
    fn mutated_requests_never_panic() {
        let seeds = seeds();
        // splitmix64 with a fixed seed, so a failure reproduces from its round number.
        let mut state: u64 = 0x5eed_a9d1;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let rounds: usize = std::env::var("TALOSBOX_FUZZ_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5000);
        for round in 0..rounds {
            let mut input = seeds[(next() % seeds.len() as u64) as usize].clone();
            for _ in 0..=next() % 4 {
                let len = input.len();
                match next() % 4 {
                    0 if len > 0 => input[(next() % len as u64) as usize] ^= 1 << (next() % 8),
                    1 => input.truncate((next() % (len as u64 + 1)) as usize),
                    2 => {
                        let at = (next() % (len as u64 + 1)) as usize;
                        input.insert(at, next() as u8);
                    }
                    _ => {
                        let other = &seeds[(next() % seeds.len() as u64) as usize];
                        let from = (next() % (other.len() as u64 + 1)) as usize;
                        input.extend_from_slice(&other[from..]);
                    }
                }
            }
            if std::panic::catch_unwind(|| fuzz_request(&input)).is_err() {
                panic!("round {round} panicked on {input:?}");
            }
        }
    }
}
