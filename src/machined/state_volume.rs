//! The configuration's volume: on a node the store's file lives on STATE, so the store stays
//! pending until STATE is mounted at `/system/state`, then loads what STATE holds (or writes
//! there what was applied meanwhile). When STATE does not come — no system disk (META is
//! missing), no STATE on it yet (it is made once a configuration says how, since that may
//! encrypt it), or STATE failed (a key that does not open it, say) — the store settles on the
//! tmpfs under the mount point, says so on the console, and the node carries on: in
//! maintenance, or with a configuration applied or fetched. Should STATE be mounted after all
//! (made for the configuration just applied, or opened on a retry), the store adopts it: what
//! STATE holds is put in force, or, when it holds nothing, what was applied is written there.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config_store::{Adopted, ConfigStore};
use crate::controllers::block::volume_config::{META, STATE};
use crate::cosi::State;
use crate::kernel::console;
use crate::resources::block::{MountStatus, NAMESPACE, VolumePhase, VolumeStatus};

/// How long the store waits for STATE at most, whatever the volumes say.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);
/// How long META must stay missing before the store goes on without STATE.
const NO_DISK_GRACE: Duration = Duration::from_secs(10);
/// How long STATE must stay missing from a system disk before the store goes on without it.
const NO_STATE_GRACE: Duration = Duration::from_secs(3);

/// Why the store settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Mounted,
    Without(String),
}

/// Decides from META's and STATE's statuses and whether STATE is mounted.
pub fn decide(meta: Option<&VolumeStatus>, state: Option<&VolumeStatus>, state_mounted: bool) -> Option<Settled> {
    if state_mounted {
        return Some(Settled::Mounted);
    }
    if meta.is_some_and(|m| m.phase == VolumePhase::Missing) {
        return Some(Settled::Without("there is no system disk (no META partition)".to_string()));
    }
    match state {
        Some(s) if s.phase == VolumePhase::Failed => {
            Some(Settled::Without(format!("STATE failed: {}", s.error_message)))
        }
        Some(s) if s.phase == VolumePhase::Missing && meta.is_some_and(|m| m.phase == VolumePhase::Ready) => {
            Some(Settled::Without(
                "there is no STATE on the system disk yet (it is made once a configuration is applied)".into(),
            ))
        }
        _ => None,
    }
}

/// Waits for STATE (see the module's text), then settles the store.
pub async fn settle_store(state: State, store: Arc<ConfigStore>, cancel: CancellationToken) {
    let mut watch = state.watch_kind::<VolumeStatus>(NAMESPACE);
    let mut mounts = state.watch_kind::<MountStatus>(NAMESPACE);
    let deadline = tokio::time::Instant::now() + GIVE_UP_AFTER;
    // A disk's driver may load after machined starts: "no system disk" stands only once it
    // held for a while.
    let mut no_disk_since: Option<tokio::time::Instant> = None;
    let outcome = loop {
        let get = |id: &str| state.get::<VolumeStatus>(NAMESPACE, id).ok().map(|r| r.spec().clone());
        let mounted = state.get::<MountStatus>(NAMESPACE, STATE).is_ok();
        let meta = get(META);
        let mut wake = deadline;
        let state_missing = get(STATE).is_some_and(|s| s.phase == VolumePhase::Missing);
        match decide(meta.as_ref(), get(STATE).as_ref(), mounted) {
            // A missing META or STATE stands only once it held for a while: a disk's driver may
            // load late, and a partition may show in discovery a moment before what it holds.
            Some(s)
                if !mounted && (meta.as_ref().is_some_and(|m| m.phase == VolumePhase::Missing) || state_missing) =>
            {
                let grace = if state_missing { NO_STATE_GRACE } else { NO_DISK_GRACE };
                let since = *no_disk_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= grace {
                    break s;
                }
                wake = since + grace;
            }
            Some(s) => break s,
            None => no_disk_since = None,
        }
        tokio::select! {
            () = tokio::time::sleep_until(wake), if wake < deadline => {}
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(deadline) => break Settled::Without(format!("STATE was not ready after {GIVE_UP_AFTER:?}")),
            r = watch.next() => if r.is_err() { tokio::time::sleep(Duration::from_secs(1)).await },
            r = mounts.next() => if r.is_err() { tokio::time::sleep(Duration::from_secs(1)).await },
        }
    };
    match &outcome {
        Settled::Mounted => console::line(&format!("config: stored on STATE ({})", store.path().display())),
        Settled::Without(why) => {
            console::line(&format!("config: {why}; the configuration is kept in memory until STATE is mounted"))
        }
    }
    if let Err(e) = store.settle().await {
        console::line(&format!("config: {e}"));
    }
    check_loads(&store);
    if outcome == Settled::Mounted {
        return;
    }
    // STATE may still come: made for a configuration applied now, or opened on a retry.
    loop {
        if state.get::<MountStatus>(NAMESPACE, STATE).is_ok() {
            break;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            r = mounts.next() => if r.is_err() { tokio::time::sleep(Duration::from_secs(1)).await },
        }
    }
    match store.adopt_volume().await {
        Ok(how) => {
            let what = match how {
                Adopted::Loaded => "its configuration is in force",
                Adopted::Written => "the configuration applied is written to it",
                Adopted::Empty => "it holds no configuration yet",
            };
            console::line(&format!("config: stored on STATE ({}): {what}", store.path().display()));
            check_loads(&store);
        }
        Err(e) => console::line(&format!("config: STATE is mounted, but {e}")),
    }
}

/// Says so when the configuration in force does not load.
fn check_loads(store: &ConfigStore) {
    if let Some(text) = store.snapshot().active
        && let Err(e) = text.machine_config()
    {
        console::line(&format!(
            "machined: the stored configuration {} does not load, so it is not used (maintenance until one is applied): {e}",
            store.path().display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vs(phase: VolumePhase) -> VolumeStatus {
        VolumeStatus { phase, error_message: "no room".into(), ..VolumeStatus::default() }
    }

    #[test]
    fn settles_when_state_mounts_or_cannot() {
        use VolumePhase::*;
        let cases = [
            (None, None, false, None),
            (Some(vs(Waiting)), Some(vs(Waiting)), false, None),
            (Some(vs(Ready)), Some(vs(Prepared)), false, None),
            (Some(vs(Ready)), Some(vs(Ready)), true, Some(Settled::Mounted)),
            (
                Some(vs(Missing)),
                None,
                false,
                Some(Settled::Without("there is no system disk (no META partition)".into())),
            ),
            (Some(vs(Ready)), Some(vs(Failed)), false, Some(Settled::Without("STATE failed: no room".into()))),
            (
                Some(vs(Ready)),
                Some(vs(Missing)),
                false,
                Some(Settled::Without(
                    "there is no STATE on the system disk yet (it is made once a configuration is applied)".into(),
                )),
            ),
            // META not found yet either: nothing is decided.
            (Some(vs(Waiting)), Some(vs(Missing)), false, None),
        ];
        for (meta, st, mounted, want) in cases {
            assert_eq!(decide(meta.as_ref(), st.as_ref(), mounted), want, "{meta:?} {st:?} {mounted}");
        }
    }
}
