//! apid's routing decision: where one call goes, from its gRPC metadata alone.
//!
//! Pure and table-tested. No `node` (or `proxyfrom`, the mark of a call another apid already
//! forwarded: the loop guard) → the local machined. `node` naming this node → local too, with no
//! second hop. Any other `node` → a one-to-one proxy to that node's apid, if this apid may
//! forward at all (control planes may; maintenance mode and workers, which hold no client
//! certificate, may not). Two `node` values, or `node` and `nodes` together, are malformed.
//! `nodes` (the older one-to-many form) is the same call to every node listed, each answered
//! locally or forwarded like a `node`, the replies merged (see `fanout`); with no forwarding only
//! this node may be listed.

use http::HeaderMap;

/// The metadata keys apid reads and writes (Talos's names), shared with the client.
pub use crate::proto::keys;

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This node's machined, over its unix socket.
    Local,
    /// Another node's apid, at this address (a host or IP, optionally with a port).
    Remote(String),
    /// Each of these targets (as named in `nodes`, and where it goes), replies merged.
    Many(Vec<(String, Route)>),
}

/// A routing refusal: a gRPC code and a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: tonic::Code,
    pub message: String,
}

/// What the router knows of this node.
pub trait LocalTargets {
    /// Whether `target` names this node (one of its addresses, its hostname).
    fn is_local(&self, target: &str) -> bool;
}

impl<F: Fn(&str) -> bool> LocalTargets for F {
    fn is_local(&self, target: &str) -> bool {
        self(target)
    }
}

/// Decides the route of one call. `forwarding` says whether this apid may proxy to others.
pub fn route(headers: &HeaderMap, local: &dyn LocalTargets, forwarding: bool) -> Result<Route, Refusal> {
    use tonic::Code;
    let refuse = |code, message: &str| Err(Refusal { code, message: message.to_string() });
    if headers.contains_key(keys::PROXY_FROM) {
        return Ok(Route::Local);
    }
    let nodes = values(headers, keys::NODE);
    let fanout = values(headers, keys::NODES);
    if nodes.len() > 1 {
        return refuse(Code::InvalidArgument, "node metadata must be single-valued");
    }
    if !fanout.is_empty() {
        if !nodes.is_empty() {
            return refuse(Code::InvalidArgument, "node and nodes metadata cannot be combined");
        }
        let mut targets = Vec::new();
        for n in fanout {
            match n {
                Err(()) => return refuse(Code::InvalidArgument, "nodes metadata is not valid text"),
                Ok("") => return refuse(Code::InvalidArgument, "nodes metadata holds an empty name"),
                Ok(n) if local.is_local(n) => targets.push((n.to_string(), Route::Local)),
                Ok(_) if !forwarding => return refuse(Code::PermissionDenied, "no request forwarding"),
                Ok(n) => targets.push((n.to_string(), Route::Remote(n.to_string()))),
            }
        }
        return Ok(Route::Many(targets));
    }
    let Some(node) = nodes.into_iter().next() else {
        return Ok(Route::Local);
    };
    match node {
        Err(()) => refuse(Code::InvalidArgument, "node metadata is not valid text"),
        Ok("") => refuse(Code::InvalidArgument, "node metadata is empty"),
        Ok(n) if local.is_local(n) => Ok(Route::Local),
        Ok(_) if !forwarding => refuse(Code::PermissionDenied, "no request forwarding"),
        Ok(n) => Ok(Route::Remote(n.to_string())),
    }
}

/// The roles claimed in `talos-role`, from every value, comma-joined or not.
pub fn claimed_roles(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(keys::ROLE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Every value of `key`, splitting comma-joined values as gRPC metadata allows.
fn values<'a>(headers: &'a HeaderMap, key: &str) -> Vec<Result<&'a str, ()>> {
    let mut out = Vec::new();
    for v in headers.get_all(key) {
        match v.to_str() {
            Ok(s) => out.extend(s.split(',').map(|p| Ok(p.trim()))),
            Err(_) => out.push(Err(())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    fn local(t: &str) -> bool {
        t == "10.5.0.2" || t == "cp1"
    }

    #[test]
    fn routes_by_metadata() {
        type Case = (&'static [(&'static str, &'static str)], bool, Result<Route, Code>);
        let cases: &[Case] = &[
            (&[], true, Ok(Route::Local)),
            (&[("node", "10.5.0.2")], true, Ok(Route::Local)),
            (&[("node", "cp1")], false, Ok(Route::Local)),
            (&[("node", "10.5.0.3")], true, Ok(Route::Remote("10.5.0.3".into()))),
            (&[("node", "10.5.0.3")], false, Err(Code::PermissionDenied)),
            (&[("node", "10.5.0.3"), ("proxyfrom", "10.5.0.2:50000")], true, Ok(Route::Local)),
            (&[("node", "a"), ("node", "b")], true, Err(Code::InvalidArgument)),
            (&[("node", "a,b")], true, Err(Code::InvalidArgument)),
            (&[("node", "")], true, Err(Code::InvalidArgument)),
            (&[("nodes", "a")], true, Ok(Route::Many(vec![("a".into(), Route::Remote("a".into()))]))),
            (
                &[("nodes", "cp1,10.5.0.3")],
                true,
                Ok(Route::Many(vec![
                    ("cp1".into(), Route::Local),
                    ("10.5.0.3".into(), Route::Remote("10.5.0.3".into())),
                ])),
            ),
            (&[("nodes", "cp1")], false, Ok(Route::Many(vec![("cp1".into(), Route::Local)]))),
            (&[("nodes", "cp1,10.5.0.3")], false, Err(Code::PermissionDenied)),
            (&[("nodes", "a,")], true, Err(Code::InvalidArgument)),
            (&[("nodes", "a"), ("node", "b")], true, Err(Code::InvalidArgument)),
        ];
        for (pairs, forwarding, want) in cases {
            let mut h = HeaderMap::new();
            for (k, v) in pairs.iter() {
                h.append(*k, http::HeaderValue::from_str(v).unwrap());
            }
            let got = route(&h, &local, *forwarding).map_err(|r| r.code);
            assert_eq!(&got, want, "{pairs:?} forwarding={forwarding}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let r = route(&headers(&[("node", "10.9.9.9")]), &local, false).unwrap_err();
        assert_eq!(r.message, "no request forwarding");
        let r = route(&headers(&[("nodes", "x"), ("node", "y")]), &local, true).unwrap_err();
        assert!(r.message.contains("cannot be combined"), "{}", r.message);
    }
}
