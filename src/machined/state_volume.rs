//! The configuration's volume: on a node the store's file lives on STATE, so the store stays
//! pending until STATE is mounted at `/system/state`, then loads what STATE holds (or writes
//! there what was applied meanwhile). When STATE will not come — no system disk (META is
//! missing), or STATE failed — the store settles on the tmpfs under the mount point, says so
//! on the console, and the node carries on: in maintenance, or with a configuration applied or
//! fetched that lasts until the next boot.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config_store::ConfigStore;
use crate::controllers::block::volume_config::{META, STATE};
use crate::cosi::State;
use crate::kernel::console;
use crate::resources::block::{MountStatus, NAMESPACE, VolumePhase, VolumeStatus};

/// How long the store waits for STATE at most, whatever the volumes say.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);
/// How long META must stay missing before the store goes on without STATE.
const NO_DISK_GRACE: Duration = Duration::from_secs(10);

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
        match decide(meta.as_ref(), get(STATE).as_ref(), mounted) {
            Some(s) if meta.as_ref().is_some_and(|m| m.phase == VolumePhase::Missing) && !mounted => {
                let since = *no_disk_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= NO_DISK_GRACE {
                    break s;
                }
                wake = since + NO_DISK_GRACE;
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
            console::line(&format!("config: {why}; the configuration is kept in memory until the next boot"))
        }
    }
    if let Err(e) = store.settle().await {
        console::line(&format!("config: {e}"));
    }
    if let Some(text) = store.snapshot().active
        && let Err(e) = crate::config::load(&text)
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
        ];
        for (meta, st, mounted, want) in cases {
            assert_eq!(decide(meta.as_ref(), st.as_ref(), mounted), want, "{meta:?} {st:?} {mounted}");
        }
    }
}
