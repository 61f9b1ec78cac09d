//! The conformance suite every state backend must pass.
//!
//! Each check takes a factory that makes a fresh, empty backend able to keep at least the
//! given number of events for a slow watcher. `state_conformance_tests!` turns the suite into
//! one test per check for a backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::query::{IdQuery, LabelQuery, LabelTerm, ListOptions, WatchOptions};
use super::resource::{AnyResource, Phase, PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};
use super::state::{Event, StateBackend, StateError, Watch, WatchError};

pub type Factory = dyn Fn(usize) -> Arc<dyn StateBackend> + Sync;
pub type CheckResult = Result<(), String>;

/// The spec the suite writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub value: u64,
}

impl ResourceSpec for Sample {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Samples.conformance.talos.dev",
        aliases: &[],
        default_namespace: "conformance",
        print_columns: &[PrintColumn { name: "Value", json_path: "{.value}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

const NS: &str = "conformance";
const TY: &str = Sample::DEFINITION.type_name;

fn sample(id: &str, value: u64) -> AnyResource {
    AnyResource::new(NS, id, Sample { value })
}

fn value_of(r: &Arc<AnyResource>) -> u64 {
    r.spec.as_any().downcast_ref::<Sample>().map_or(u64::MAX, |s| s.value)
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn expect_err<T: std::fmt::Debug>(
    what: &str,
    got: Result<T, StateError>,
    want: impl Fn(&StateError) -> bool,
) -> CheckResult {
    match got {
        Err(e) if want(&e) => Ok(()),
        other => Err(format!("{what}: unexpected result {other:?}")),
    }
}

fn describe(event: &Event) -> String {
    match event {
        Event::Created(r) => format!("created {} v{} = {}", r.metadata.id, r.metadata.version, value_of(r)),
        Event::Updated { new, .. } => {
            format!("updated {} v{} = {}", new.metadata.id, new.metadata.version, value_of(new))
        }
        Event::Destroyed(r) => format!("destroyed {}", r.metadata.id),
        Event::Bootstrapped => "bootstrapped".to_string(),
    }
}

async fn next_events(watch: &mut Watch, n: usize) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for _ in 0..n {
        match tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await {
            Ok(Ok(e)) => out.push(describe(&e)),
            Ok(Err(e)) => return Err(format!("watch failed after {out:?}: {e}")),
            Err(_) => return Err(format!("watch stalled after {out:?}")),
        }
    }
    Ok(out)
}

/// Versions start at 1 and bump on each write; a stale version conflicts; create refuses
/// duplicates; get reports absence.
pub async fn versions_and_conflicts(factory: &Factory) -> CheckResult {
    let s = factory(64);
    let created = s.create(sample("a", 1), "owner").map_err(|e| e.to_string())?;
    ensure!(created.metadata.version == 1, "first version is {}", created.metadata.version);
    ensure!(created.metadata.owner == "owner", "owner is {:?}", created.metadata.owner);
    let updated = s.update(sample("a", 2), 1, "owner").map_err(|e| e.to_string())?;
    ensure!(updated.metadata.version == 2, "version after update is {}", updated.metadata.version);
    ensure!(updated.metadata.created == created.metadata.created, "update changed the creation time");
    expect_err("stale update", s.update(sample("a", 3), 1, "owner"), |e| {
        matches!(e, StateError::VersionConflict { expected: 1, actual: 2, .. })
    })?;
    ensure!(value_of(&s.get(NS, TY, "a").map_err(|e| e.to_string())?) == 2, "stale update was applied");
    expect_err("duplicate create", s.create(sample("a", 9), "owner"), |e| {
        matches!(e, StateError::AlreadyExists { .. })
    })?;
    expect_err("get missing", s.get(NS, TY, "zz"), StateError::is_not_found)?;
    expect_err("update missing", s.update(sample("zz", 1), 1, "owner"), StateError::is_not_found)?;
    Ok(())
}

/// Only the owner may update, tear down or destroy.
pub async fn owners_enforced(factory: &Factory) -> CheckResult {
    let s = factory(64);
    s.create(sample("a", 1), "ctrl-a").map_err(|e| e.to_string())?;
    let is_owner_conflict = |e: &StateError| matches!(e, StateError::OwnerConflict { .. });
    expect_err("update by another", s.update(sample("a", 2), 1, "ctrl-b"), is_owner_conflict)?;
    expect_err("update from outside", s.update(sample("a", 2), 1, ""), is_owner_conflict)?;
    expect_err("teardown by another", s.teardown(NS, TY, "a", "ctrl-b"), is_owner_conflict)?;
    expect_err("destroy by another", s.destroy(NS, TY, "a", "ctrl-b"), is_owner_conflict)?;
    s.destroy(NS, TY, "a", "ctrl-a").map_err(|e| e.to_string())?;
    Ok(())
}

/// Finalizers block destroy until removed; adding one twice changes nothing.
pub async fn finalizers_block_destroy(factory: &Factory) -> CheckResult {
    let s = factory(64);
    s.create(sample("a", 1), "owner").map_err(|e| e.to_string())?;
    let held = s.add_finalizer(NS, TY, "a", "holder").map_err(|e| e.to_string())?;
    ensure!(held.metadata.version == 2, "finalizer did not bump the version");
    let again = s.add_finalizer(NS, TY, "a", "holder").map_err(|e| e.to_string())?;
    ensure!(again.metadata.version == 2, "adding a present finalizer bumped the version");
    expect_err(
        "destroy while held",
        s.destroy(NS, TY, "a", "owner"),
        |e| matches!(e, StateError::PendingFinalizers { finalizers, .. } if finalizers == &["holder".to_string()]),
    )?;
    s.remove_finalizer(NS, TY, "a", "holder").map_err(|e| e.to_string())?;
    s.destroy(NS, TY, "a", "owner").map_err(|e| e.to_string())?;
    expect_err("get destroyed", s.get(NS, TY, "a"), StateError::is_not_found)?;
    Ok(())
}

/// Teardown moves to the tearing-down phase once and refuses updates; finalizers can be added
/// and released in any phase.
pub async fn teardown(factory: &Factory) -> CheckResult {
    let s = factory(64);
    s.create(sample("a", 1), "owner").map_err(|e| e.to_string())?;
    s.add_finalizer(NS, TY, "a", "holder").map_err(|e| e.to_string())?;
    let down = s.teardown(NS, TY, "a", "owner").map_err(|e| e.to_string())?;
    ensure!(down.metadata.phase == Phase::TearingDown, "phase after teardown is {}", down.metadata.phase);
    ensure!(down.metadata.version == 3, "teardown version is {}", down.metadata.version);
    let again = s.teardown(NS, TY, "a", "owner").map_err(|e| e.to_string())?;
    ensure!(again.metadata.version == 3, "second teardown bumped the version");
    let late = s.add_finalizer(NS, TY, "a", "late").map_err(|e| format!("finalizer during teardown: {e}"))?;
    ensure!(late.metadata.finalizers.contains("late"), "late finalizer missing: {:?}", late.metadata.finalizers);
    ensure!(late.metadata.phase == Phase::TearingDown, "adding a finalizer changed the phase");
    expect_err("update during teardown", s.update(sample("a", 9), 4, "owner"), |e| {
        matches!(e, StateError::PhaseConflict { .. })
    })?;
    s.remove_finalizer(NS, TY, "a", "holder").map_err(|e| e.to_string())?;
    expect_err("destroy while the late holder holds", s.destroy(NS, TY, "a", "owner"), |e| {
        matches!(e, StateError::PendingFinalizers { .. })
    })?;
    let released = s.remove_finalizer(NS, TY, "a", "late").map_err(|e| e.to_string())?;
    ensure!(released.metadata.finalizers.is_empty(), "finalizer still there");
    s.destroy(NS, TY, "a", "owner").map_err(|e| e.to_string())?;
    Ok(())
}

/// Lists filter by labels.
pub async fn label_queries(factory: &Factory) -> CheckResult {
    let s = factory(64);
    for (id, zone) in [("a", "east"), ("b", "west"), ("c", "east")] {
        let mut r = sample(id, 0);
        r.metadata.labels = BTreeMap::from([("zone".to_string(), zone.to_string())]);
        s.create(r, "owner").map_err(|e| e.to_string())?;
    }
    let east = ListOptions { labels: LabelQuery::all().with(LabelTerm::equal("zone", "east")), ..Default::default() };
    let ids: Vec<String> = s.list(NS, TY, &east).iter().map(|r| r.metadata.id.clone()).collect();
    ensure!(ids == ["a", "c"], "east lists {ids:?}");
    let not_b = ListOptions { ids: IdQuery::regex("^[ac]$").map_err(|e| e.to_string())?, ..Default::default() };
    let ids: Vec<String> = s.list(NS, TY, &not_b).iter().map(|r| r.metadata.id.clone()).collect();
    ensure!(ids == ["a", "c"], "id query lists {ids:?}");
    ensure!(s.list(NS, TY, &ListOptions::default()).len() == 3, "unfiltered list is short");
    ensure!(s.list("elsewhere", TY, &ListOptions::default()).is_empty(), "another namespace is not empty");
    Ok(())
}

/// A kind watch delivers every change in the order it happened.
pub async fn watch_ordering(factory: &Factory) -> CheckResult {
    let s = factory(64);
    let mut w = s.watch_kind(NS, TY, &WatchOptions::default());
    s.create(sample("a", 1), "o").map_err(|e| e.to_string())?;
    s.create(sample("b", 1), "o").map_err(|e| e.to_string())?;
    s.update(sample("a", 2), 1, "o").map_err(|e| e.to_string())?;
    s.teardown(NS, TY, "b", "o").map_err(|e| e.to_string())?;
    s.destroy(NS, TY, "b", "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut w, 6).await?;
    let want =
        ["bootstrapped", "created a v1 = 1", "created b v1 = 1", "updated a v2 = 2", "updated b v2 = 1", "destroyed b"];
    ensure!(got == want, "events {got:?}, want {want:?}");
    Ok(())
}

/// A kind watch first replays what exists, then marks the end of that snapshot.
pub async fn bootstrapped_snapshot(factory: &Factory) -> CheckResult {
    let s = factory(64);
    for id in ["c", "a", "b"] {
        s.create(sample(id, 7), "o").map_err(|e| e.to_string())?;
    }
    let mut w = s.watch_kind(NS, TY, &WatchOptions::default());
    s.update(sample("a", 8), 1, "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut w, 5).await?;
    let want = ["created a v1 = 7", "created b v1 = 7", "created c v1 = 7", "bootstrapped", "updated a v2 = 8"];
    ensure!(got == want, "events {got:?}, want {want:?}");
    Ok(())
}

/// A watch on one id sees only that id, starting from its current value (or nothing).
pub async fn watch_one(factory: &Factory) -> CheckResult {
    let s = factory(64);
    let mut absent = s.watch(NS, TY, "a");
    s.create(sample("b", 1), "o").map_err(|e| e.to_string())?;
    s.create(sample("a", 1), "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut absent, 2).await?;
    ensure!(got == ["bootstrapped", "created a v1 = 1"], "absent watch saw {got:?}");
    let mut present = s.watch(NS, TY, "b");
    s.update(sample("a", 2), 1, "o").map_err(|e| e.to_string())?;
    s.update(sample("b", 2), 1, "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut present, 3).await?;
    ensure!(got == ["created b v1 = 1", "bootstrapped", "updated b v2 = 2"], "present watch saw {got:?}");
    Ok(())
}

/// A watcher that falls behind the bounded history gets an error, not unbounded memory, and
/// its watch is over: it does not go on with a gap.
pub async fn slow_watcher_overrun(factory: &Factory) -> CheckResult {
    let s = factory(8);
    let mut w = s.watch_kind(NS, TY, &WatchOptions::default());
    s.create(sample("a", 0), "o").map_err(|e| e.to_string())?;
    for v in 1..200 {
        s.update(sample("a", v), v, "o").map_err(|e| e.to_string())?;
    }
    ensure!(matches!(w.next().await, Ok(Event::Bootstrapped)), "no bootstrap marker");
    match w.next().await {
        Err(WatchError::Overrun { missed }) if missed > 0 => {}
        other => {
            return Err(format!("a watcher 200 events behind with history 8 got {:?}", other.map(|e| describe(&e))));
        }
    }
    s.update(sample("a", 999), 200, "o").map_err(|e| e.to_string())?;
    for _ in 0..2 {
        match w.next().await {
            Err(WatchError::Overrun { .. }) => {}
            other => return Err(format!("after an overrun the watch went on with {:?}", other.map(|e| describe(&e)))),
        }
    }
    ensure!(matches!(w.try_next(), Some(Err(WatchError::Overrun { .. }))), "try_next after an overrun");
    Ok(())
}

/// A watch of one id keeps its own history: writes to other ids never push it behind.
pub async fn watch_one_not_overrun_by_others(factory: &Factory) -> CheckResult {
    let s = factory(8);
    s.create(sample("x", 0), "o").map_err(|e| e.to_string())?;
    s.create(sample("y", 0), "o").map_err(|e| e.to_string())?;
    let mut w = s.watch(NS, TY, "x");
    for v in 1..100 {
        s.update(sample("y", v), v, "o").map_err(|e| e.to_string())?;
    }
    s.update(sample("x", 5), 1, "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut w, 3).await?;
    ensure!(got == ["created x v1 = 0", "bootstrapped", "updated x v2 = 5"], "x's watcher saw {got:?}");
    Ok(())
}

/// A kind watch narrowed by labels and ids: the snapshot and the events are filtered; a
/// resource that stops matching arrives as destroyed, one that starts matching as created.
pub async fn watch_queries(factory: &Factory) -> CheckResult {
    let s = factory(64);
    let labeled = |id: &str, value: u64, zone: &str| {
        let mut r = sample(id, value);
        r.metadata.labels = BTreeMap::from([("zone".to_string(), zone.to_string())]);
        r
    };
    s.create(labeled("a", 1, "east"), "o").map_err(|e| e.to_string())?;
    s.create(labeled("b", 1, "west"), "o").map_err(|e| e.to_string())?;
    let east = WatchOptions::default().with_labels(LabelQuery::all().with(LabelTerm::equal("zone", "east")));
    let mut w = s.watch_kind(NS, TY, &east);
    s.update(labeled("a", 2, "west"), 1, "o").map_err(|e| e.to_string())?;
    s.update(labeled("b", 2, "east"), 1, "o").map_err(|e| e.to_string())?;
    s.update(labeled("a", 3, "west"), 2, "o").map_err(|e| e.to_string())?;
    s.update(labeled("b", 3, "east"), 2, "o").map_err(|e| e.to_string())?;
    s.create(labeled("c", 1, "west"), "o").map_err(|e| e.to_string())?;
    s.create(labeled("d", 1, "east"), "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut w, 6).await?;
    let want =
        ["created a v1 = 1", "bootstrapped", "destroyed a", "created b v2 = 2", "updated b v3 = 3", "created d v1 = 1"];
    ensure!(got == want, "label watch saw {got:?}, want {want:?}");
    ensure!(w.try_next().is_none(), "label watch has more events");

    let ids = WatchOptions::default().with_ids(IdQuery::regex("^[bc]$").map_err(|e| e.to_string())?);
    let mut w = s.watch_kind(NS, TY, &ids);
    s.update(labeled("a", 4, "west"), 3, "o").map_err(|e| e.to_string())?;
    s.update(labeled("c", 2, "west"), 1, "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut w, 4).await?;
    let want = ["created b v3 = 3", "created c v1 = 1", "bootstrapped", "updated c v2 = 2"];
    ensure!(got == want, "id watch saw {got:?}, want {want:?}");
    Ok(())
}

/// A live watch starts with nothing; a tail watch replays the last events it still holds.
pub async fn watch_tail_and_live(factory: &Factory) -> CheckResult {
    let s = factory(4);
    s.create(sample("a", 0), "o").map_err(|e| e.to_string())?;
    for v in 1..=5 {
        s.update(sample("a", v), v, "o").map_err(|e| e.to_string())?;
    }
    let mut live = s.watch_kind(NS, TY, &WatchOptions::live());
    let mut tail = s.watch_kind(NS, TY, &WatchOptions::tail(2));
    let mut long_tail = s.watch_kind(NS, TY, &WatchOptions::tail(100));
    ensure!(live.try_next().is_none(), "a live watch started with an event");
    s.update(sample("a", 6), 6, "o").map_err(|e| e.to_string())?;
    let got = next_events(&mut live, 1).await?;
    ensure!(got == ["updated a v7 = 6"], "live watch saw {got:?}");
    let got = next_events(&mut tail, 3).await?;
    ensure!(got == ["updated a v5 = 4", "updated a v6 = 5", "updated a v7 = 6"], "tail(2) saw {got:?}");
    // As far back as the history goes, less a gap so the next write does not push it out.
    let got = next_events(&mut long_tail, 4).await?;
    ensure!(
        got == ["updated a v4 = 3", "updated a v5 = 4", "updated a v6 = 5", "updated a v7 = 6"],
        "tail(100) with history 4 saw {got:?}"
    );
    Ok(())
}

/// Concurrent writers: a watcher started mid-way sees, per id, its snapshot version followed
/// by every later version exactly once and in order.
pub async fn concurrent_writers(factory: &Factory) -> CheckResult {
    const WRITERS: u64 = 4;
    const UPDATES: u64 = 500;
    let s = factory((WRITERS * (UPDATES + 1)) as usize + 16);
    let barrier = Arc::new(std::sync::Barrier::new(WRITERS as usize + 1));
    let mut threads = Vec::new();
    for w in 0..WRITERS {
        let s = Arc::clone(&s);
        let barrier = Arc::clone(&barrier);
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let id = format!("w{w}");
            s.create(sample(&id, 0), "o").map_err(|e| e.to_string())?;
            barrier.wait();
            for v in 1..=UPDATES {
                s.update(sample(&id, v), v, "o").map_err(|e| e.to_string())?;
            }
            Ok(())
        }));
    }
    barrier.wait();
    let mut watch = s.watch_kind(NS, TY, &WatchOptions::default());
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut bootstrapped = false;
    loop {
        let done = last.len() == WRITERS as usize && last.values().all(|v| *v == UPDATES + 1);
        if done && bootstrapped {
            break;
        }
        let event = match tokio::time::timeout(std::time::Duration::from_secs(10), watch.next()).await {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => return Err(format!("watch failed: {e} (seen {last:?})")),
            Err(_) => return Err(format!("watch stalled (seen {last:?})")),
        };
        match event {
            Event::Bootstrapped => bootstrapped = true,
            Event::Created(r) => {
                ensure!(!bootstrapped || r.metadata.version == 1, "late create at v{}", r.metadata.version);
                ensure!(
                    last.insert(r.metadata.id.clone(), r.metadata.version).is_none(),
                    "{} seen twice",
                    r.metadata.id
                );
            }
            Event::Updated { old, new } => {
                let id = &new.metadata.id;
                let prev = last.get(id).copied();
                ensure!(prev == Some(new.metadata.version - 1), "{id}: v{} after {prev:?}", new.metadata.version);
                ensure!(old.metadata.version + 1 == new.metadata.version, "{id}: old/new versions disagree");
                last.insert(id.clone(), new.metadata.version);
            }
            Event::Destroyed(r) => return Err(format!("unexpected destroy of {}", r.metadata.id)),
        }
    }
    for t in threads {
        t.join().map_err(|_| "writer panicked".to_string())??;
    }
    ensure!(watch.try_next().is_none(), "events after the last write");
    Ok(())
}

/// Every check, by name.
pub const CHECKS: &[&str] = &[
    "versions_and_conflicts",
    "owners_enforced",
    "finalizers_block_destroy",
    "teardown",
    "label_queries",
    "watch_ordering",
    "bootstrapped_snapshot",
    "watch_one",
    "slow_watcher_overrun",
    "watch_one_not_overrun_by_others",
    "watch_queries",
    "watch_tail_and_live",
    "concurrent_writers",
];

/// Expands to one `#[tokio::test]` per check for the backend `$factory` makes.
#[macro_export]
macro_rules! state_conformance_tests {
    ($factory:expr) => {
        $crate::state_conformance_tests!(@each $factory;
            versions_and_conflicts owners_enforced finalizers_block_destroy teardown label_queries
            watch_ordering bootstrapped_snapshot watch_one slow_watcher_overrun watch_one_not_overrun_by_others
            watch_queries watch_tail_and_live concurrent_writers);
    };
    (@each $factory:expr; $($check:ident)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let factory = $factory;
                if let Err(failure) = $crate::cosi::conformance::$check(&factory).await {
                    panic!("state conformance check {} failed: {failure}", stringify!($check));
                }
            }
        )+
    };
}
