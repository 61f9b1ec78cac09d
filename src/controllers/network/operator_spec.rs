//! `OperatorSpecController`: runs one operator (a DHCPv4 or DHCPv6 client) per merged
//! `OperatorSpec` of `network`, and writes what each operator offers into `network-config`
//! at the operator layer, under the operator's prefix (`dhcp4/eth0/eth0/10.0.0.5/24`, as
//! Talos names them), so a lease re-enters the merge like any other config source.
//!
//! As Talos's: an operator runs only while its link exists (and is up, if the spec requires
//! it); a spec that changes restarts it, except when only its layer changed (the same
//! operator, [`OperatorSpec::same_operator`]); a spec that goes stops it, which lets the
//! operator release its lease, and its specs go with it. Each operator is a task of its own
//! whose panics are caught and which is restarted with back-off: machined is PID 1 and no
//! operator may take it down. Which operators should exist is decided upstream
//! (OperatorConfigController); nothing here chooses links.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cosi::{Backoff, Context, Controller, Input, Output, ReconcileError};
use crate::network::dhcp4::Dhcp4Operator;
use crate::network::dhcp6::Dhcp6Operator;
use crate::network::operator::{Notifier, Operator};
use crate::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, HostnameSpec, LinkSpec, LinkStatus, NAMESPACE, OperationalState,
    Operator as OperatorKind, OperatorSpec, ResolverSpec, RouteSpec, TimeServerSpec, address_id, link_id,
};

use super::NetworkTarget;

/// How long a stopping operator gets to release what it holds before it is left behind.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Makes the operator for a spec; `None` for an operator this build does not run (VIP).
pub type OperatorFactory = Box<dyn Fn(&OperatorSpec) -> Option<Arc<dyn Operator>> + Send>;

pub struct OperatorSpecController {
    factory: OperatorFactory,
    backoff: Backoff,
    operators: BTreeMap<String, RunState>,
}

impl OperatorSpecController {
    /// Runs the DHCP clients in the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        Self::with_factory(Box::new(move |spec| default_operator(&target, spec)))
    }

    /// Runs the operators `factory` makes (tests hand in their own).
    pub fn with_factory(factory: OperatorFactory) -> Self {
        OperatorSpecController {
            factory,
            backoff: Backoff { initial: Duration::from_millis(500), max: Duration::from_secs(30) },
            operators: BTreeMap::new(),
        }
    }

    /// The back-off between restarts of an operator that failed or panicked.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

fn default_operator(target: &NetworkTarget, spec: &OperatorSpec) -> Option<Arc<dyn Operator>> {
    let netns = target.namespace().cloned();
    match spec.operator {
        OperatorKind::Dhcp4 => Some(Arc::new(Dhcp4Operator::new(netns, &spec.link_name, spec.dhcp4.clone()))),
        OperatorKind::Dhcp6 => Some(Arc::new(Dhcp6Operator::new(netns, &spec.link_name, spec.dhcp6.clone()))),
        // A VIP needs an etcd election, which this build does not have.
        OperatorKind::Vip => None,
    }
}

/// One running operator.
struct RunState {
    spec: OperatorSpec,
    operator: Arc<dyn Operator>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunState {
    fn start(id: &str, spec: OperatorSpec, operator: Arc<dyn Operator>, notify: Notifier, backoff: Backoff) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(supervise(id.to_string(), Arc::clone(&operator), stop.clone(), notify, backoff));
        RunState { spec, operator, stop, task }
    }

    /// Stops the operator and waits (a bounded time) for it to let go of what it holds.
    async fn stop(mut self) {
        self.stop.cancel();
        if tokio::time::timeout(STOP_GRACE, &mut self.task).await.is_err() {
            tracing::warn!(operator = %self.operator.prefix(), "operator did not stop within {STOP_GRACE:?}; left to finish");
        }
    }
}

impl Drop for RunState {
    // The controller going away (the runtime shutting down) stops every operator; their
    // tasks finish their release on their own.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Runs `operator` until `stop`, restarting it with back-off when it returns early or panics.
async fn supervise(
    id: String,
    operator: Arc<dyn Operator>,
    stop: CancellationToken,
    notify: Notifier,
    backoff: Backoff,
) {
    let mut delay = None;
    loop {
        let outcome = AssertUnwindSafe(operator.run(stop.clone(), notify.clone())).catch_unwind().await;
        if stop.is_cancelled() {
            return;
        }
        let wait = backoff.next(delay);
        delay = Some(wait);
        match outcome {
            Ok(()) => tracing::warn!(operator = %id, retry_in = ?wait, "operator returned; restarting"),
            Err(panic) => tracing::error!(
                operator = %id,
                retry_in = ?wait,
                "operator panicked: {}; restarting",
                crate::panic::message(&*panic)
            ),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The operators that should run: those whose link exists, and is up when they require it
/// (operational state up or unknown, as Talos counts it).
pub(crate) fn should_run(
    specs: &[(String, OperatorSpec)],
    links: &HashMap<String, bool>,
) -> BTreeMap<String, OperatorSpec> {
    specs
        .iter()
        .filter(|(_, spec)| links.get(&spec.link_name).is_some_and(|&up| up || !spec.require_up))
        .map(|(id, spec)| (id.clone(), spec.clone()))
        .collect()
}

/// What to stop and what to start, given what runs and what should: a spec whose layer alone
/// changed keeps its operator.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub stop: Vec<String>,
    pub start: Vec<String>,
}

pub(crate) fn plan(running: &BTreeMap<String, OperatorSpec>, wanted: &BTreeMap<String, OperatorSpec>) -> Plan {
    let mut plan = Plan::default();
    for (id, spec) in running {
        match wanted.get(id) {
            Some(want) if spec.same_operator(want) => {}
            Some(_) => {
                plan.stop.push(id.clone());
                plan.start.push(id.clone());
            }
            None => plan.stop.push(id.clone()),
        }
    }
    plan.start.extend(wanted.keys().filter(|id| !running.contains_key(*id)).cloned());
    plan.start.sort();
    plan
}

impl OperatorSpecController {
    async fn reconcile_operators(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let links: HashMap<String, bool> = ctx
            .list::<LinkStatus>(NAMESPACE)?
            .iter()
            .filter(|l| l.is_running())
            .map(|l| {
                let state = l.spec().operational_state;
                (l.id().to_string(), state == OperationalState::UP || state == OperationalState::UNKNOWN)
            })
            .collect();
        let specs: Vec<(String, OperatorSpec)> = ctx
            .list::<OperatorSpec>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running())
            .map(|r| (r.id().to_string(), r.spec().clone()))
            .collect();
        let wanted = should_run(&specs, &links);
        let running: BTreeMap<String, OperatorSpec> =
            self.operators.iter().map(|(id, run)| (id.clone(), run.spec.clone())).collect();
        let plan = plan(&running, &wanted);
        for id in &plan.stop {
            if let Some(run) = self.operators.remove(id) {
                tracing::debug!(operator = %id, "stopping operator");
                run.stop().await;
            }
        }
        for id in &plan.start {
            let Some(spec) = wanted.get(id) else { continue };
            let Some(operator) = (self.factory)(spec) else {
                tracing::warn!(operator = %id, "operator {} is not supported; not run", spec.operator);
                continue;
            };
            let waker = ctx.waker();
            let notify = Notifier::new(move || waker.wake());
            tracing::debug!(operator = %id, "starting operator");
            self.operators.insert(id.clone(), RunState::start(id, spec.clone(), operator, notify, self.backoff));
        }
        // Keep the running ones' spec current (a layer-only change).
        for (id, run) in &mut self.operators {
            if let Some(spec) = wanted.get(id) {
                run.spec = spec.clone();
            }
        }
        Ok(())
    }

    /// Writes every running operator's offer into `network-config`, each spec under
    /// `<prefix>/<its own id>` as Talos's OperatorSpecController names them, and removes
    /// what no operator offers any more.
    fn write_outputs(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        for run in self.operators.values() {
            let prefix = run.operator.prefix();
            let id = |own: &str| format!("{prefix}/{own}");
            let specs = run.operator.specs();
            for spec in specs.addresses {
                ctx.apply(CONFIG_NAMESPACE, &id(&address_id(&spec.link_name, &spec.address)), spec)?;
            }
            for spec in specs.routes {
                ctx.apply(CONFIG_NAMESPACE, &id(&spec.id()), spec)?;
            }
            for spec in specs.links {
                ctx.apply(CONFIG_NAMESPACE, &id(&link_id(&spec.name)), spec)?;
            }
            for spec in specs.hostnames {
                ctx.apply(CONFIG_NAMESPACE, &id(HostnameSpec::ID), spec)?;
            }
            for spec in specs.resolvers {
                ctx.apply(CONFIG_NAMESPACE, &id(ResolverSpec::ID), spec)?;
            }
            for spec in specs.time_servers {
                ctx.apply(CONFIG_NAMESPACE, &id(TimeServerSpec::ID), spec)?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Controller for OperatorSpecController {
    fn name(&self) -> String {
        "OperatorSpecController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<OperatorSpec>(NAMESPACE), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![
            Output::shared::<AddressSpec>(),
            Output::shared::<LinkSpec>(),
            Output::shared::<RouteSpec>(),
            Output::shared::<HostnameSpec>(),
            Output::shared::<ResolverSpec>(),
            Output::shared::<TimeServerSpec>(),
        ]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        // Woken by its inputs and by the operators' notifiers alike; either way the whole
        // picture is small, so it is looked at whole.
        self.reconcile_operators(ctx).await?;
        self.write_outputs(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Harness;
    use crate::network::operator::OperatorSpecs;
    use crate::resources::network::{ConfigLayer, Dhcp4OperatorSpec};
    use crate::types::IpPrefix;
    use std::sync::Mutex;
    use tokio::sync::watch;

    fn op(link: &str, layer: ConfigLayer, metric: u32, require_up: bool) -> OperatorSpec {
        OperatorSpec {
            operator: OperatorKind::Dhcp4,
            link_name: link.into(),
            require_up,
            dhcp4: Dhcp4OperatorSpec { route_metric: metric, ..Default::default() },
            config_layer: layer,
            ..Default::default()
        }
    }

    #[test]
    fn the_default_factory_runs_dhcp_and_no_vip() {
        let target = NetworkTarget::Node;
        let made = |kind| {
            default_operator(&target, &OperatorSpec { operator: kind, ..op("eth0", ConfigLayer::Default, 0, true) })
        };
        assert_eq!(made(OperatorKind::Dhcp4).map(|o| o.prefix()).as_deref(), Some("dhcp4/eth0"));
        assert_eq!(made(OperatorKind::Dhcp6).map(|o| o.prefix()).as_deref(), Some("dhcp6/eth0"));
        assert!(made(OperatorKind::Vip).is_none(), "a VIP needs an etcd election");
    }

    #[test]
    fn should_run_table() {
        let links: HashMap<String, bool> = [("up".to_string(), true), ("down".to_string(), false)].into();
        let specs = vec![
            ("dhcp4/up".to_string(), op("up", ConfigLayer::Default, 0, true)),
            ("dhcp4/down".to_string(), op("down", ConfigLayer::Default, 0, true)),
            (
                "dhcp6/down".to_string(),
                OperatorSpec { operator: OperatorKind::Dhcp6, ..op("down", ConfigLayer::Default, 0, false) },
            ),
            ("dhcp4/gone".to_string(), op("gone", ConfigLayer::Default, 0, false)),
        ];
        let got: Vec<String> = should_run(&specs, &links).into_keys().collect();
        assert_eq!(got, ["dhcp4/up", "dhcp6/down"], "no link: not run; down and required up: not run");
    }

    #[test]
    fn plan_table() {
        let map = |items: &[(&str, OperatorSpec)]| -> BTreeMap<String, OperatorSpec> {
            items.iter().map(|(id, s)| (id.to_string(), s.clone())).collect()
        };
        let a = op("a", ConfigLayer::Default, 1024, true);
        type Specs = BTreeMap<String, OperatorSpec>;
        let cases: Vec<(&str, Specs, Specs, Plan)> = vec![
            ("nothing", map(&[]), map(&[]), Plan::default()),
            ("new: started", map(&[]), map(&[("x", a.clone())]), Plan { stop: vec![], start: vec!["x".into()] }),
            ("gone: stopped", map(&[("x", a.clone())]), map(&[]), Plan { stop: vec!["x".into()], start: vec![] }),
            ("same: kept", map(&[("x", a.clone())]), map(&[("x", a.clone())]), Plan::default()),
            (
                "only the layer changed: kept",
                map(&[("x", a.clone())]),
                map(&[("x", op("a", ConfigLayer::MachineConfiguration, 1024, true))]),
                Plan::default(),
            ),
            (
                "the metric changed: restarted",
                map(&[("x", a.clone())]),
                map(&[("x", op("a", ConfigLayer::Default, 512, true))]),
                Plan { stop: vec!["x".into()], start: vec!["x".into()] },
            ),
        ];
        for (name, running, wanted, want) in cases {
            assert_eq!(plan(&running, &wanted), want, "case {name:?}");
        }
    }

    /// An operator whose offer a test sets, counting its starts and stops; it panics on its
    /// first run when asked to.
    struct Fake {
        link: String,
        offer: Mutex<OperatorSpecs>,
        notify: Mutex<Option<Notifier>>,
        starts: watch::Sender<usize>,
        stops: watch::Sender<usize>,
        panic_first: bool,
    }

    #[async_trait::async_trait]
    impl Operator for Fake {
        async fn run(&self, stop: CancellationToken, notify: Notifier) {
            let first = *self.starts.borrow() == 0;
            self.starts.send_modify(|n| *n += 1);
            if self.panic_first && first {
                panic!("first run of the fake operator");
            }
            *self.notify.lock().unwrap() = Some(notify.clone());
            notify.notify();
            stop.cancelled().await;
            // What a DHCP client does on stop: release, and offer nothing any more.
            *self.offer.lock().unwrap() = OperatorSpecs::default();
            self.stops.send_modify(|n| *n += 1);
        }

        fn prefix(&self) -> String {
            format!("dhcp4/{}", self.link)
        }

        fn specs(&self) -> OperatorSpecs {
            self.offer.lock().unwrap().clone()
        }
    }

    impl Fake {
        fn offer(&self, specs: OperatorSpecs) {
            *self.offer.lock().unwrap() = specs;
            if let Some(n) = self.notify.lock().unwrap().as_ref() {
                n.notify();
            }
        }
    }

    /// Waits on `rx` until `pred` holds.
    async fn wait<T>(what: &str, rx: &watch::Sender<T>, pred: impl FnMut(&T) -> bool) {
        let mut rx = rx.subscribe();
        match tokio::time::timeout(Duration::from_secs(10), rx.wait_for(pred)).await {
            Ok(Ok(_)) => {}
            _ => panic!("timed out waiting for {what}"),
        }
    }

    fn lease(link: &str, address: &str) -> OperatorSpecs {
        let prefix: IpPrefix = address.parse().unwrap();
        OperatorSpecs {
            addresses: vec![AddressSpec::static_address(link, prefix, ConfigLayer::Operator)],
            resolvers: vec![ResolverSpec {
                dns_servers: vec!["10.0.0.1".parse().unwrap()],
                config_layer: ConfigLayer::Operator,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn link_up(h: &Harness, name: &str) {
        let status = LinkStatus { operational_state: OperationalState::UP, ..Default::default() };
        h.seed(NAMESPACE, name, status).unwrap();
    }

    type Fakes = Arc<watch::Sender<Vec<Arc<Fake>>>>;

    fn harness(panic_first: bool) -> (Harness, Fakes) {
        let fakes: Fakes = Arc::new(watch::Sender::new(Vec::new()));
        let made = Arc::clone(&fakes);
        let factory: OperatorFactory = Box::new(move |spec: &OperatorSpec| {
            let fake = Arc::new(Fake {
                link: spec.link_name.clone(),
                offer: Mutex::new(OperatorSpecs::default()),
                notify: Mutex::new(None),
                starts: watch::Sender::new(0),
                stops: watch::Sender::new(0),
                panic_first,
            });
            made.send_modify(|v| v.push(Arc::clone(&fake)));
            Some(fake as Arc<dyn Operator>)
        });
        let controller = OperatorSpecController::with_factory(factory)
            .with_backoff(Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(50) });
        (Harness::start(vec![Box::new(controller)]).unwrap(), fakes)
    }

    async fn nth(fakes: &Fakes, n: usize) -> Arc<Fake> {
        wait(&format!("operator #{n}"), fakes, |v| v.len() > n).await;
        Arc::clone(&fakes.borrow()[n])
    }

    #[tokio::test]
    async fn offers_land_at_the_operator_layer_and_leave_with_the_operator() {
        let (h, fakes) = harness(false);
        h.seed(NAMESPACE, "dhcp4/eth0", op("eth0", ConfigLayer::Default, 1024, true)).unwrap();
        link_up(&h, "eth0");
        let fake = nth(&fakes, 0).await;
        wait("the operator to run", &fake.starts, |n| *n == 1).await;
        fake.offer(lease("eth0", "10.0.0.5/24"));
        let address = "dhcp4/eth0/eth0/10.0.0.5/24";
        h.assert_spec(CONFIG_NAMESPACE, address, &lease("eth0", "10.0.0.5/24").addresses[0]).await;
        h.assert_eventually::<ResolverSpec, _>(CONFIG_NAMESPACE, "dhcp4/eth0/resolvers", "the resolver", |r| {
            r.is_some()
        })
        .await;

        // A new lease replaces the old address.
        fake.offer(lease("eth0", "10.0.0.6/24"));
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "dhcp4/eth0/eth0/10.0.0.6/24", "new", |r| r.is_some())
            .await;
        h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, address).await;

        // Only the layer changes, then the metric: one restart, for the metric only.
        h.seed(NAMESPACE, "dhcp4/eth0", op("eth0", ConfigLayer::MachineConfiguration, 1024, true)).unwrap();
        h.seed(NAMESPACE, "dhcp4/eth0", op("eth0", ConfigLayer::MachineConfiguration, 5, true)).unwrap();
        let second = nth(&fakes, 1).await;
        wait("the first to stop", &fake.stops, |n| *n == 1).await;
        assert_eq!(*fake.starts.borrow(), 1, "the layer-only change kept the first running");
        assert_eq!(fakes.borrow().len(), 2, "one restart, not two");
        h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, "dhcp4/eth0/eth0/10.0.0.6/24").await;

        wait("the second to run", &second.starts, |n| *n == 1).await;
        second.offer(lease("eth0", "10.0.0.7/24"));
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "dhcp4/eth0/eth0/10.0.0.7/24", "second", |r| {
            r.is_some()
        })
        .await;
        // The spec goes: the operator stops, and its specs go.
        h.unseed::<OperatorSpec>(NAMESPACE, "dhcp4/eth0").unwrap();
        h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, "dhcp4/eth0/eth0/10.0.0.7/24").await;
        h.assert_absent::<ResolverSpec>(CONFIG_NAMESPACE, "dhcp4/eth0/resolvers").await;
        assert_eq!(*second.stops.borrow(), 1, "stopped, and waited for");
        h.stop().await;
    }

    #[tokio::test]
    async fn a_panicking_operator_is_restarted_and_the_controller_lives_on() {
        let (h, fakes) = harness(true);
        link_up(&h, "eth0");
        h.seed(NAMESPACE, "dhcp4/eth0", op("eth0", ConfigLayer::Default, 1024, false)).unwrap();
        let fake = nth(&fakes, 0).await;
        wait("a restart after the panic", &fake.starts, |n| *n == 2).await;
        fake.offer(lease("eth0", "10.0.0.5/24"));
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "dhcp4/eth0/eth0/10.0.0.5/24", "offer", |r| {
            r.is_some()
        })
        .await;
        assert_eq!(fakes.borrow().len(), 1, "the same operator restarted, not a new one");
        h.stop().await;
    }

    #[tokio::test]
    async fn a_link_going_down_stops_an_operator_that_requires_it_up() {
        let (h, fakes) = harness(false);
        link_up(&h, "eth0");
        h.seed(NAMESPACE, "dhcp4/eth0", op("eth0", ConfigLayer::Default, 1024, true)).unwrap();
        let fake = nth(&fakes, 0).await;
        wait("running", &fake.starts, |n| *n == 1).await;
        let down = LinkStatus { operational_state: OperationalState::DOWN, ..Default::default() };
        h.seed(NAMESPACE, "eth0", down).unwrap();
        wait("stopped with its link down", &fake.stops, |n| *n == 1).await;
        link_up(&h, "eth0");
        let again = nth(&fakes, 1).await;
        wait("started again with its link up", &again.starts, |n| *n == 1).await;
        h.stop().await;
    }
}
