//! Configuration from the platform: `talos.config=<http URL>` on the kernel command line, or on
//! the nocloud platform without that key the seed's `user-data` when it is a machine
//! configuration. Either is retried until it arrives, validated like any apply, and stored, so
//! a node booted by a launcher that serves its configuration (as Talos's QEMU provisioner
//! does), or given a cidata disk, leaves maintenance without a manual
//! `apply-config --insecure`. `talos.config=none`, no source, or a configuration already
//! stored: nothing to do. A configuration applied through the maintenance API meanwhile wins.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config_store::{ConfigStore, ConfigText};
use crate::cosi::{Event, Resource, State};
use crate::kernel::cmdline::Cmdline;
use crate::kernel::console;
use crate::platform::nocloud::{self, Seed};
use crate::platform::{Platform, fetch};
use crate::resources::runtime::{KernelCmdline, NAMESPACE};

/// Largest configuration accepted.
const MAX_CONFIG: usize = 4 << 20;
const RETRY: Duration = Duration::from_secs(2);
const RETRY_INVALID: Duration = Duration::from_secs(15);

/// Waits for the kernel command line, then fetches and stores its `talos.config` URL.
pub async fn from_cmdline(state: State, store: Arc<ConfigStore>, cancel: CancellationToken) {
    let mut watch = state.watch::<KernelCmdline>(NAMESPACE, KernelCmdline::ID);
    let cmdline = loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = watch.next() => e,
        };
        match event {
            Ok(Event::Created(r) | Event::Updated { new: r, .. }) => {
                if let Some(c) = Resource::<KernelCmdline>::from_any(&r) {
                    break Cmdline::parse(&c.spec().cmdline);
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    };
    // What is stored is known once the store's volume is mounted.
    let mut settled = store.subscribe();
    tokio::select! {
        () = cancel.cancelled() => return,
        r = settled.wait_for(|s| !s.pending) => if r.is_err() { return },
    }
    if store.snapshot().persisted.is_some() {
        return;
    }
    match cmdline.get("talos.config").map(str::to_string) {
        Some(url) if url == "none" => {}
        Some(url) => {
            console::line(&format!("config: fetching talos.config={url}"));
            let fetched = || {
                let url = url.clone();
                async move { fetch(&url, MAX_CONFIG).await.map(Some).map_err(|e| e.to_string()) }
            };
            store_when_valid(&store, &cancel, &url, fetched).await;
        }
        None if Platform::from_cmdline(&cmdline) == Platform::Nocloud => {
            let Some(seed) = locate_seed(&cmdline, &cancel).await else { return };
            let from = format!("nocloud user-data of {}", seed.describe());
            let read = || {
                let seed = seed.clone();
                async move {
                    match seed.read(nocloud::USER_DATA).await.map_err(|e| e.to_string())? {
                        Some(text) if nocloud::is_machine_config(&text) => Ok(Some(text)),
                        Some(_) => {
                            console::line(
                                "config: the nocloud user-data is a cloud-init document, not a machine configuration",
                            );
                            Ok(None)
                        }
                        None => Ok(None),
                    }
                }
            };
            store_when_valid(&store, &cancel, &from, read).await;
        }
        None => {}
    }
}

/// Finds the nocloud seed, trying again while it is not there (a disk whose driver is still
/// loading, a seed URL before the network is up); `None` when cancelled.
async fn locate_seed(cmdline: &Cmdline, cancel: &CancellationToken) -> Option<Seed> {
    let mut reported = String::new();
    loop {
        let paths = nocloud::Paths::node();
        let c = cmdline.clone();
        let found = tokio::task::spawn_blocking(move || nocloud::locate(&c, &paths)).await;
        match found {
            Ok(Ok(seed)) => return Some(seed),
            Ok(Err(e)) => {
                let e = e.to_string();
                if e != reported {
                    console::line(&format!("config: {e}; looking again"));
                    reported = e;
                }
            }
            Err(e) => console::line(&format!("config: looking for the nocloud seed: {e}")),
        }
        tokio::select! {
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Gets a configuration with `get` until it arrives valid and is stored (or one is stored
/// otherwise, or `get` finds there is none). An unreachable source is tried again every 2 s, an
/// invalid document every 15 s; each distinct failure is reported once.
async fn store_when_valid<F, Fut>(store: &ConfigStore, cancel: &CancellationToken, from: &str, get: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<String>, String>>,
{
    let mut reported = String::new();
    let mut report = |line: String| {
        if line != reported {
            console::line(&line);
            reported = line;
        }
    };
    loop {
        if store.snapshot().persisted.is_some() {
            return;
        }
        let wait = match get().await {
            Err(e) => {
                report(format!("config: {from}: {e}; retrying"));
                RETRY
            }
            Ok(None) => {
                console::line(&format!("config: {from}: none; waiting for one through the API"));
                return;
            }
            Ok(Some(text)) => {
                // Parsed once: the parse validated here is the one the store publishes.
                let candidate = ConfigText::new(text);
                let checked = match candidate.parsed() {
                    Some(parsed) => crate::config::validate(&parsed.config).map(|_| ()),
                    None => candidate.machine_config().map(|_| ()).map_err(Clone::clone),
                };
                match checked {
                    Err(e) => {
                        report(format!("config: {from}: refused: {e}; retrying"));
                        RETRY_INVALID
                    }
                    Ok(()) => match store.begin_apply() {
                        None => RETRY,
                        Some(guard) => match store.apply_now(&guard, candidate) {
                            Ok(()) => {
                                console::line(&format!("config: stored the configuration from {from}"));
                                return;
                            }
                            Err(e) => {
                                report(format!("config: {e}"));
                                RETRY
                            }
                        },
                    },
                }
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
