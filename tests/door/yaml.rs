//! A YAML alias bomb sent without credentials to a node in maintenance mode: machined (PID 1
//! on a real node) refuses it before it is expanded, with the limit it hit named, and its
//! peak memory does not move. Addresses 127.0.12.x.

use std::time::Instant;

use super::harness::{self, Maintenance};

/// The classic billion laughs: nine levels of nine aliases, 10^9 nodes once expanded, in
/// under 400 bytes.
fn billion_laughs() -> String {
    let mut text = String::from("lol: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for w in names.windows(2) {
        let refs = vec![format!("*{}", w[0]); 9].join(",");
        text.push_str(&format!("l{}: &{} [{refs}]\n", w[1], w[1]));
    }
    text
}

#[test]
fn an_alias_bomb_is_refused_with_its_limit_and_machined_stays_flat() {
    let m = Maintenance::up("yaml", "127.0.12.1");
    let bomb = billion_laughs();
    std::fs::write(m.ctl.dir.join("bomb.yaml"), &bomb).unwrap();
    let pid = m.node.pid();

    // VmHWM is a peak since start: reset it to the resident set now ("5" to clear_refs), so
    // the peak after the apply is what the apply cost.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = m.node.rss_kib();
    let peak_before = harness::peak_rss_kib(pid);
    let started = Instant::now();
    let said = m.ctl.fails(&["-e", "127.0.12.1", "--insecure", "apply-config", "-f", "bomb.yaml"]);
    let took = started.elapsed();
    let peak = harness::peak_rss_kib(pid);
    let after = m.node.rss_kib();
    println!(
        "alias bomb ({} bytes): refused in {took:?}; machined RSS {before} KiB before, {after} KiB after, \
         peak {peak_before} -> {peak} KiB (+{} KiB); said: {}",
        bomb.len(),
        peak.saturating_sub(peak_before),
        said.trim()
    );
    assert!(said.contains("YAML alias expansion exceeds 10000 nodes (limit max_alias_nodes)"), "{said}");
    assert!(peak_before > 0 && peak > 0, "no VmHWM for {pid}");
    assert!(peak.saturating_sub(peak_before) < 10 * 1024, "machined's peak grew {} KiB", peak - peak_before);

    // Still in maintenance, answering, and nothing stored.
    m.ctl.ok(&["-e", "127.0.12.1", "version", "--insecure", "--short"]);
    assert!(!m.node.log().contains("config: stored"), "{}", m.node.log());
}
