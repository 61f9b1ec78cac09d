//! The watcher's metrics, with the names, types and labels of the Go watcher library's
//! (`kube_external_watcher_*`), rendered in the Prometheus text exposition format (0.0.4) that
//! `promtool check metrics` and every Prometheus scrapes.
//!
//! Written here rather than with `prometheus-client`: that crate speaks OpenMetrics and appends
//! `_total` to counter names itself, so the exact names would come out as `..._total_total` or
//! need renaming tricks. The format is small; the escaping rules are tested below.
//!
//! Per-machine label sets are removed when a machine is unregistered, so the series count
//! follows the fleet, not its history.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use super::model::MachineKey;

pub const POLL_TOTAL: &str = "kube_external_watcher_poll_total";
pub const DRIFT_DETECTED_TOTAL: &str = "kube_external_watcher_drift_detected_total";
pub const FETCH_DURATION: &str = "kube_external_watcher_fetch_external_duration_seconds";
pub const FETCH_ERRORS_TOTAL: &str = "kube_external_watcher_fetch_external_errors_total";
pub const REGISTERED: &str = "kube_external_watcher_registered_resources";

/// The `controller` label's value, as the Go operator passes it to `WithMetrics`.
pub const CONTROLLER: &str = "TalosMachine";

/// client_golang's default histogram buckets.
const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The outcome label of a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PollResult {
    Success,
    Error,
}

impl PollResult {
    fn as_str(self) -> &'static str {
        match self {
            PollResult::Success => "success",
            PollResult::Error => "error",
        }
    }
}

#[derive(Default, Clone)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Inner {
    polls: BTreeMap<(MachineKey, PollResult), u64>,
    drifts: BTreeMap<MachineKey, u64>,
    errors: BTreeMap<MachineKey, u64>,
    durations: BTreeMap<MachineKey, Histogram>,
    registered: i64,
}

/// The metrics of one operator process.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn poll(&self, key: &MachineKey, result: PollResult) {
        *self.lock().polls.entry((key.clone(), result)).or_default() += 1;
    }

    pub fn drift(&self, key: &MachineKey) {
        *self.lock().drifts.entry(key.clone()).or_default() += 1;
    }

    pub fn fetch_error(&self, key: &MachineKey) {
        *self.lock().errors.entry(key.clone()).or_default() += 1;
    }

    pub fn fetch_duration(&self, key: &MachineKey, d: Duration) {
        let secs = d.as_secs_f64();
        let mut inner = self.lock();
        let h = inner.durations.entry(key.clone()).or_default();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    pub fn registered(&self, delta: i64) {
        self.lock().registered += delta;
    }

    /// Forgets every series of `key` (the machine is no longer watched).
    pub fn remove(&self, key: &MachineKey) {
        let mut inner = self.lock();
        inner.polls.retain(|(k, _), _| k != key);
        inner.drifts.remove(key);
        inner.errors.remove(key);
        inner.durations.remove(key);
    }

    /// The value of a counter series, for tests and the CLI: `poll_total` by result, or the
    /// others by machine.
    pub fn count(&self, name: &str, key: &MachineKey, result: Option<PollResult>) -> u64 {
        let inner = self.lock();
        match name {
            POLL_TOTAL => inner.polls.get(&(key.clone(), result.unwrap_or(PollResult::Success))).copied().unwrap_or(0),
            DRIFT_DETECTED_TOTAL => inner.drifts.get(key).copied().unwrap_or(0),
            FETCH_ERRORS_TOTAL => inner.errors.get(key).copied().unwrap_or(0),
            FETCH_DURATION => inner.durations.get(key).map(|h| h.count).unwrap_or(0),
            _ => 0,
        }
    }

    pub fn registered_now(&self) -> i64 {
        self.lock().registered
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        let machine = |k: &MachineKey| {
            format!("controller=\"{CONTROLLER}\",namespace=\"{}\",name=\"{}\"", escape(&k.namespace), escape(&k.name))
        };
        header(&mut out, POLL_TOTAL, "counter", "Total number of polls per resource, by result.");
        for ((k, r), v) in &inner.polls {
            let _ = writeln!(out, "{POLL_TOTAL}{{{},result=\"{}\"}} {v}", machine(k), r.as_str());
        }
        header(
            &mut out,
            DRIFT_DETECTED_TOTAL,
            "counter",
            "Total number of drift detections that enqueued a reconcile.",
        );
        for (k, v) in &inner.drifts {
            let _ = writeln!(out, "{DRIFT_DETECTED_TOTAL}{{{}}} {v}", machine(k));
        }
        header(&mut out, FETCH_DURATION, "histogram", "Latency of fetching the external resource (the Talos node).");
        for (k, h) in &inner.durations {
            let labels = machine(k);
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "{FETCH_DURATION}_bucket{{{labels},le=\"{}\"}} {}", float(*le), h.buckets[i]);
            }
            let _ = writeln!(out, "{FETCH_DURATION}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{FETCH_DURATION}_sum{{{labels}}} {}", float(h.sum));
            let _ = writeln!(out, "{FETCH_DURATION}_count{{{labels}}} {}", h.count);
        }
        header(&mut out, FETCH_ERRORS_TOTAL, "counter", "Total number of errors fetching the external resource.");
        for (k, v) in &inner.errors {
            let _ = writeln!(out, "{FETCH_ERRORS_TOTAL}{{{}}} {v}", machine(k));
        }
        header(&mut out, REGISTERED, "gauge", "Number of resources currently registered for polling.");
        let _ = writeln!(out, "{REGISTERED}{{controller=\"{CONTROLLER}\"}} {}", inner.registered);
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format wants it: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A float as Go's strconv prints it for Prometheus: integers without a fraction.
fn float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_the_exact_names_types_and_labels() {
        let m = Metrics::new();
        let k = MachineKey::new("default", "cp-1");
        m.registered(1);
        m.poll(&k, PollResult::Success);
        m.poll(&k, PollResult::Error);
        m.poll(&k, PollResult::Success);
        m.fetch_error(&k);
        m.drift(&k);
        m.fetch_duration(&k, Duration::from_millis(30));
        let text = m.render();
        for line in [
            "# TYPE kube_external_watcher_poll_total counter",
            "kube_external_watcher_poll_total{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\",result=\"success\"} 2",
            "kube_external_watcher_poll_total{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\",result=\"error\"} 1",
            "# TYPE kube_external_watcher_drift_detected_total counter",
            "kube_external_watcher_drift_detected_total{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\"} 1",
            "# TYPE kube_external_watcher_fetch_external_duration_seconds histogram",
            "kube_external_watcher_fetch_external_duration_seconds_bucket{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\",le=\"0.025\"} 0",
            "kube_external_watcher_fetch_external_duration_seconds_bucket{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\",le=\"0.05\"} 1",
            "kube_external_watcher_fetch_external_duration_seconds_bucket{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\",le=\"+Inf\"} 1",
            "kube_external_watcher_fetch_external_duration_seconds_count{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\"} 1",
            "kube_external_watcher_fetch_external_errors_total{controller=\"TalosMachine\",namespace=\"default\",name=\"cp-1\"} 1",
            "# TYPE kube_external_watcher_registered_resources gauge",
            "kube_external_watcher_registered_resources{controller=\"TalosMachine\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("_total_total"));
        assert!(
            !text.contains("result=")
                || text.lines().filter(|l| l.contains("result=")).all(|l| l.starts_with(POLL_TOTAL))
        );
    }

    #[test]
    fn a_removed_machine_leaves_no_series() {
        let m = Metrics::new();
        let (a, b) = (MachineKey::new("default", "a"), MachineKey::new("default", "b"));
        for k in [&a, &b] {
            m.poll(k, PollResult::Success);
            m.drift(k);
            m.fetch_error(k);
            m.fetch_duration(k, Duration::from_millis(1));
        }
        m.remove(&a);
        let text = m.render();
        assert!(!text.contains("name=\"a\""), "{text}");
        assert!(text.contains("name=\"b\""), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(float(10.0), "10");
        assert_eq!(float(0.005), "0.005");
    }
}
