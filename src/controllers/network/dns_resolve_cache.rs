//! `DnsResolveCacheController` (Talos's `DNSResolveCacheController`): runs the host DNS
//! forwarder ([`crate::network::dns`]) on the listen address it was given, in the network
//! namespace its [`NetworkTarget`] names, while the `HostDNSConfig` has it enabled, and feeds
//! it the `ResolverStatus` servers as upstreams (port 53, in order). Each listener it runs is
//! reported as a `DNSResolveCache` (`udp-127.0.0.53:53`, `tcp-…`, status `running`).
//!
//! The forwarder runs on a thread of its own with its own small runtime, inside the target
//! namespace, so its sockets — listeners and upstream queries alike — are that namespace's.
//! It must never run in `--mode container`: port 53 there is the host's.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::dns::{DnsError, Forwarder, Listeners};
use crate::resources::network::{DnsResolveCache, HostDnsConfig, NAMESPACE, ResolverStatus};

use super::NetworkTarget;

/// Upstreams are asked on the DNS port.
const DNS_PORT: u16 = 53;

#[derive(Debug, thiserror::Error)]
pub enum DnsResolveCacheError {
    #[error("starting the host DNS forwarder: {0}")]
    Start(#[from] DnsError),
    #[error("starting the host DNS forwarder in its namespace: {0}")]
    Thread(std::io::Error),
    #[error("the host DNS forwarder's thread ended before it listened")]
    Ended,
}

struct Running {
    cancel: CancellationToken,
    upstreams: watch::Sender<Vec<SocketAddr>>,
    stopped: oneshot::Receiver<()>,
}

pub struct DnsResolveCacheController {
    target: NetworkTarget,
    listen: SocketAddr,
    running: Option<Running>,
}

impl DnsResolveCacheController {
    /// Listens on `listen` (`127.0.0.53:53` on a node) in the namespace `target` names.
    pub fn new(target: NetworkTarget, listen: SocketAddr) -> Self {
        DnsResolveCacheController { target, listen, running: None }
    }

    async fn start(&mut self, upstreams: Vec<SocketAddr>) -> Result<(), DnsResolveCacheError> {
        let (upstreams_tx, upstreams_rx) = watch::channel(upstreams);
        let cancel = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel::<Result<(), DnsError>>();
        let (stopped_tx, stopped_rx) = oneshot::channel();
        let (target, listen, token) = (self.target.clone(), self.listen, cancel.clone());
        let work = move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(DnsError::Bind { proto: "udp", addr: listen, source: e }));
                    return;
                }
            };
            runtime.block_on(async move {
                match Listeners::bind(listen).await {
                    Err(e) => drop(ready_tx.send(Err(e))),
                    Ok(listeners) => {
                        let _ = ready_tx.send(Ok(()));
                        Arc::new(Forwarder::new(listen, upstreams_rx)).serve(listeners, token).await;
                    }
                }
            });
        };
        std::thread::Builder::new()
            .name("host-dns".into())
            .spawn(move || {
                let outcome = match target {
                    NetworkTarget::Node => {
                        work();
                        Ok(())
                    }
                    NetworkTarget::Namespace(ns) => ns.run(work),
                };
                if let Err(e) = outcome {
                    tracing::warn!("host DNS: entering the network namespace: {e}");
                }
                let _ = stopped_tx.send(());
            })
            .map_err(DnsResolveCacheError::Thread)?;
        match ready_rx.await {
            Ok(Ok(())) => {
                self.running = Some(Running { cancel, upstreams: upstreams_tx, stopped: stopped_rx });
                Ok(())
            }
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(DnsResolveCacheError::Ended),
        }
    }

    /// Stops the forwarder and waits until its sockets are closed, so that it can listen
    /// again at once.
    async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.cancel.cancel();
            let _ = running.stopped.await;
        }
    }
}

impl Drop for DnsResolveCacheController {
    fn drop(&mut self) {
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
    }
}

/// The upstreams of `resolvers`: each server on the DNS port, in order.
pub(crate) fn upstreams(resolvers: Option<&ResolverStatus>) -> Vec<SocketAddr> {
    resolvers.map(|r| r.dns_servers.iter().map(|ip| SocketAddr::new(*ip, DNS_PORT)).collect()).unwrap_or_default()
}

#[async_trait::async_trait]
impl Controller for DnsResolveCacheController {
    fn name(&self) -> String {
        "DnsResolveCacheController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<ResolverStatus>(NAMESPACE).with_id(ResolverStatus::ID),
            Input::weak::<HostDnsConfig>(NAMESPACE).with_id(HostDnsConfig::ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<DnsResolveCache>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let enabled =
            ctx.get::<HostDnsConfig>(NAMESPACE, HostDnsConfig::ID)?.is_some_and(|c| c.is_running() && c.spec().enabled);
        let resolvers = ctx.get::<ResolverStatus>(NAMESPACE, ResolverStatus::ID)?.filter(|r| r.is_running());
        let wanted = upstreams(resolvers.as_ref().map(|r| r.spec()));
        ctx.start_tracking_outputs();
        if enabled {
            match &self.running {
                Some(running) => {
                    running.upstreams.send_if_modified(|current| {
                        let changed = *current != wanted;
                        *current = wanted;
                        changed
                    });
                }
                None => self.start(wanted).await?,
            }
            for proto in ["udp", "tcp"] {
                let status = DnsResolveCache { status: DnsResolveCache::RUNNING.to_string() };
                ctx.apply(NAMESPACE, &format!("{proto}-{}", self.listen), status)?;
            }
        } else {
            self.stop().await;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_are_the_resolvers_on_port_53() {
        let r = ResolverStatus {
            dns_servers: vec!["10.0.0.1".parse().unwrap(), "2001:db8::53".parse().unwrap()],
            search_domains: vec![],
        };
        let want: Vec<SocketAddr> = vec!["10.0.0.1:53".parse().unwrap(), "[2001:db8::53]:53".parse().unwrap()];
        assert_eq!(upstreams(Some(&r)), want);
        assert!(upstreams(None).is_empty());
    }
}
