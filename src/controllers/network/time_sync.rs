//! `TimeSyncController` (Talos's `time.SyncController`): keeps the node's clock with the
//! time servers of the `TimeServerStatus` over SNTP ([`crate::network::sntp`]) and reports
//! Talos's `TimeStatus`: synced (after the first adjustment, when sync is disabled, or once
//! the boot timeout passed), the epoch (bumped by every jump past the epoch limit) and
//! sync-disabled (`machine.time.disabled`, or a `TimeSyncConfig` with `enabled: false`).
//!
//! Servers are asked in order until one gives a usable reply; the poll interval follows
//! Talos's rule. The clock is an injected [`Clock`], so a test never moves the host's; the
//! queries go out from the network namespace its [`NetworkTarget`] names. It never runs in
//! `--mode container`: the clock there is the host's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, Path, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::kernel::clock::Clock;
use crate::network::sntp::{self, Poll, SntpError, Timestamp};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::network::{NAMESPACE, TimeServerStatus};
use crate::resources::time::{self, TimeStatus};

use super::NetworkTarget;

/// How long one server has to answer.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TimeSyncError {
    #[error("asking time server {server}: {source}")]
    Io {
        server: String,
        #[source]
        source: std::io::Error,
    },
    #[error("time server {server}: {source}")]
    Reply {
        server: String,
        #[source]
        source: SntpError,
    },
    #[error("time server {server} did not answer within {QUERY_TIMEOUT:?}")]
    Timeout { server: String },
    #[error("time server {server} has no address")]
    NoAddress { server: String },
}

/// How the machine config sets time sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TimeSettings {
    pub disabled: bool,
    pub boot_timeout: Option<Duration>,
}

/// A Go duration (`90s`, `2m30s`, `1h`, `500ms`).
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(value * scale).ok()?;
        rest = &rest[unit_len..];
    }
    Some(total)
}

/// The settings of `config`: a `TimeSyncConfig` document when there is one, else v1alpha1's
/// `machine.time`.
pub(crate) fn time_settings(config: Option<&Config>) -> TimeSettings {
    let Some(config) = config else { return TimeSettings::default() };
    let timeout = |v: Option<&Value>| v.and_then(Value::as_str).and_then(go_duration).filter(|d| !d.is_zero());
    if let Some(doc) = config.by_kind("TimeSyncConfig").next() {
        let v = doc.value();
        let enabled = v.at(&Path::keys("enabled")).and_then(Value::as_bool).unwrap_or(true);
        return TimeSettings { disabled: !enabled, boot_timeout: timeout(v.at(&Path::keys("bootTimeout"))) };
    }
    let Some(doc) = config.v1alpha1() else { return TimeSettings::default() };
    let v = doc.value();
    TimeSettings {
        disabled: v.at(&Path::keys("machine.time.disabled")).and_then(Value::as_bool).unwrap_or(false),
        boot_timeout: timeout(v.at(&Path::keys("machine.time.bootTimeout"))),
    }
}

/// The poll bounds (Talos's, unless a test shortens them).
#[derive(Debug, Clone, Copy)]
pub struct PollBounds {
    pub min: Duration,
    pub max: Duration,
    pub retry: Duration,
}

impl Default for PollBounds {
    fn default() -> Self {
        PollBounds { min: sntp::MIN_POLL, max: sntp::MAX_POLL, retry: sntp::RETRY_POLL }
    }
}

/// Where a time server named in config is: an address, an address and port (`10.0.2.2:1123`,
/// `[::1]:123`), a host name, or a host name and port. Port 123 unless named.
pub fn server_address(server: &str) -> (String, u16) {
    if let Ok(sa) = server.parse::<SocketAddr>() {
        return (sa.ip().to_string(), sa.port());
    }
    if server.parse::<IpAddr>().is_ok() {
        return (server.to_string(), sntp::PORT);
    }
    match server.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host.to_string(), port),
            Err(_) => (server.to_string(), sntp::PORT),
        },
        _ => (server.to_string(), sntp::PORT),
    }
}

fn socket(target: &NetworkTarget, server: &SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let any: SocketAddr = if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = match target {
        NetworkTarget::Node => std::net::UdpSocket::bind(any),
        NetworkTarget::Namespace(ns) => ns.run(|| std::net::UdpSocket::bind(any))?,
    }?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// One SNTP exchange with `server` from `target`'s network, timed by `clock`: the measured
/// offset and delay. Touches no clock. The API's `TimeCheck` asks through this too.
pub async fn query(
    target: &NetworkTarget,
    clock: &dyn Clock,
    server: &str,
) -> Result<sntp::Measurement, TimeSyncError> {
    let io = |source| TimeSyncError::Io { server: server.to_string(), source };
    let (host, port) = server_address(server);
    let addr = match host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(io)?
            .next()
            .ok_or_else(|| TimeSyncError::NoAddress { server: server.to_string() })?,
    };
    let socket = tokio::net::UdpSocket::from_std(socket(target, &addr).map_err(io)?).map_err(io)?;
    socket.connect(addr).await.map_err(io)?;
    let exchange = async {
        let t1 = Timestamp::from_system(clock.now());
        socket.send(&sntp::request(t1)).await.map_err(io)?;
        let mut buf = [0u8; 512];
        loop {
            let len = socket.recv(&mut buf).await.map_err(io)?;
            let t4 = Timestamp::from_system(clock.now());
            match sntp::parse_reply(&buf[..len], t1) {
                // A stray or late datagram: keep waiting for ours.
                Err(SntpError::NotOurs) => continue,
                Err(source) => return Err(TimeSyncError::Reply { server: server.to_string(), source }),
                Ok(reply) => return Ok(sntp::measure(t1, &reply, t4)),
            }
        }
    };
    tokio::time::timeout(QUERY_TIMEOUT, exchange)
        .await
        .map_err(|_| TimeSyncError::Timeout { server: server.to_string() })?
}

pub struct TimeSyncController {
    target: NetworkTarget,
    clock: Arc<dyn Clock>,
    bounds: PollBounds,
    started: Instant,
    servers: Vec<String>,
    poll: Duration,
    next: Option<Instant>,
    synced: bool,
    epoch: u64,
}

impl TimeSyncController {
    /// Keeps `clock` (the system clock on a node) with queries from `target`'s namespace.
    pub fn new(target: NetworkTarget, clock: Arc<dyn Clock>) -> Self {
        TimeSyncController {
            target,
            clock,
            bounds: PollBounds::default(),
            started: Instant::now(),
            servers: Vec::new(),
            poll: Duration::ZERO,
            next: None,
            synced: false,
            epoch: 0,
        }
    }

    pub fn with_poll_bounds(mut self, bounds: PollBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// One SNTP exchange with `server`: the measured offset.
    async fn query(&self, server: &str) -> Result<sntp::Measurement, TimeSyncError> {
        query(&self.target, self.clock.as_ref(), server).await
    }

    /// Asks the servers in order; adjusts the clock by the first usable answer.
    async fn poll_once(&mut self) -> Poll {
        let mut outcome = Poll::Failed;
        for server in self.servers.clone() {
            match self.query(&server).await {
                Ok(m) => {
                    let adjustment = sntp::adjustment(m.offset_nanos);
                    match self.clock.adjust(adjustment) {
                        Ok(()) => {
                            if sntp::epoch_change(m.offset_nanos) {
                                self.epoch += 1;
                            }
                            self.synced = true;
                        }
                        Err(e) => tracing::warn!("time sync: adjusting the clock by {adjustment:?}: {e}"),
                    }
                    return Poll::Offset(m.offset_nanos);
                }
                Err(TimeSyncError::Reply { source: SntpError::KissOfDeath { .. }, .. }) => outcome = Poll::KissOfDeath,
                Err(e) => tracing::debug!("time sync: {e}"),
            }
        }
        outcome
    }
}

#[async_trait::async_trait]
impl Controller for TimeSyncController {
    fn name(&self) -> String {
        "TimeSyncController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<TimeServerStatus>(NAMESPACE).with_id(TimeServerStatus::ID),
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<TimeStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        // As in Talos: nothing is reported until the time servers are known.
        let Some(servers) = ctx.get::<TimeServerStatus>(NAMESPACE, TimeServerStatus::ID)?.filter(|r| r.is_running())
        else {
            return Ok(());
        };
        let mc = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?.filter(|r| r.is_running());
        let settings = time_settings(mc.as_ref().and_then(|mc| mc.spec().parsed()).map(|p| &p.config));
        let now = Instant::now();
        if settings.disabled {
            self.next = None;
        } else {
            if servers.spec().time_servers != self.servers {
                // New servers: start over now, as Talos restarts its syncer's loop.
                self.servers = servers.spec().time_servers.clone();
                self.poll = Duration::ZERO;
                self.next = Some(now);
            }
            if self.next.is_none_or(|next| next <= now) {
                let outcome = self.poll_once().await;
                let b = self.bounds;
                self.poll = sntp::next_poll(self.poll, outcome, b.min, b.max, b.retry);
                self.next = Some(Instant::now() + self.poll);
            }
            if let Some(next) = self.next {
                ctx.requeue_after(next.saturating_duration_since(Instant::now()));
            }
        }
        let timed_out = settings.boot_timeout.is_some_and(|t| self.started.elapsed() >= t);
        if !self.synced
            && !settings.disabled
            && let Some(t) = settings.boot_timeout
            && !timed_out
        {
            ctx.requeue_after(t.saturating_sub(self.started.elapsed()));
        }
        let status = TimeStatus {
            synced: self.synced || settings.disabled || timed_out,
            epoch: self.epoch,
            sync_disabled: settings.disabled,
        };
        ctx.apply(time::NAMESPACE, TimeStatus::ID, status)?;
        Ok(())
    }
}

/// Container mode's `TimeStatus`: the node process keeps the host's clock, so sync is
/// disabled and the time counts as synced (as for Talos in Docker, `machine.time.disabled`).
pub struct HostClockController;

#[async_trait::async_trait]
impl Controller for HostClockController {
    fn name(&self) -> String {
        "HostClockController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<TimeStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let status = TimeStatus { synced: true, epoch: 0, sync_disabled: true };
        ctx.apply(time::NAMESPACE, TimeStatus::ID, status)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        crate::config::load(text).unwrap().config
    }

    #[test]
    fn server_addresses_with_and_without_ports() {
        let table = [
            ("10.0.2.2", ("10.0.2.2", 123)),
            ("10.0.2.2:1123", ("10.0.2.2", 1123)),
            ("fd00::1", ("fd00::1", 123)),
            ("[fd00::1]:1123", ("fd00::1", 1123)),
            ("time.cloudflare.com", ("time.cloudflare.com", 123)),
            ("ntp.example:4123", ("ntp.example", 4123)),
            ("ntp.example:x", ("ntp.example:x", 123)),
        ];
        for (server, (host, port)) in table {
            assert_eq!(server_address(server), (host.to_string(), port), "{server}");
        }
    }

    #[test]
    fn durations_as_go_writes_them() {
        let s = Duration::from_secs;
        assert_eq!(go_duration("90s"), Some(s(90)));
        assert_eq!(go_duration("2m30s"), Some(s(150)));
        assert_eq!(go_duration("1h"), Some(s(3600)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "5", "5x", "s"] {
            assert_eq!(go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn settings_table() {
        assert_eq!(time_settings(None), TimeSettings::default());
        let base = "version: v1alpha1\nmachine:\n  type: worker\n";
        assert_eq!(time_settings(Some(&config(base))), TimeSettings::default());
        let off = format!("{base}  time:\n    disabled: true\n    bootTimeout: 2m\n");
        assert_eq!(
            time_settings(Some(&config(&off))),
            TimeSettings { disabled: true, boot_timeout: Some(Duration::from_secs(120)) }
        );
        let doc = format!("{base}---\napiVersion: v1alpha1\nkind: TimeSyncConfig\nenabled: false\nbootTimeout: 30s\n");
        assert_eq!(
            time_settings(Some(&config(&doc))),
            TimeSettings { disabled: true, boot_timeout: Some(Duration::from_secs(30)) }
        );
        let on = format!("{off}---\napiVersion: v1alpha1\nkind: TimeSyncConfig\nntp:\n  servers: [10.0.0.1]\n");
        assert!(!time_settings(Some(&config(&on))).disabled, "the document wins; enabled by default");
    }
}
