//! The controller runtime through the harness: ownership and declaration checks, output
//! tracking and the lifecycle of held outputs, strong inputs, coalescing, restarts with
//! back-off, per-key errors, event sources, cancellation, the registry and the role-scoped
//! view. The tests named `defect_*` each failed on the runtime before it owned these
//! lifecycles.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use talosbox::controllers::generic_merge::{GenericMergeController, Mergeable};
use talosbox::controllers::generic_transform::TransformController;
use talosbox::cosi::{
    Access, AnyResource, Context, Controller, EventRing, EventSource, Harness, InMemoryState, Input, ListOptions,
    Output, Phase, Pointer, PrintColumn, ReconcileError, Registry, Resource, ResourceDefinition,
    ResourceDefinitionSpec, ResourceSpec, Runtime, RuntimeError, Sensitivity, SourceError, State, StateBackend,
    StateError, StateView, Timer, Waker, Watch, WatchOptions,
};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Number {
    value: i64,
}

impl ResourceSpec for Number {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Numbers.test.talos.dev",
        aliases: &["num"],
        default_namespace: "in",
        print_columns: &[PrintColumn { name: "Value", json_path: "{.value}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Doubled {
    value: i64,
}

impl ResourceSpec for Doubled {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Doubleds.test.talos.dev",
        aliases: &[],
        default_namespace: "out",
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A count another controller publishes, to observe how often something ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Runs {
    n: usize,
}

impl ResourceSpec for Runs {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Runs.test.talos.dev",
        aliases: &[],
        default_namespace: "out",
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Secret {
    key: String,
}

impl ResourceSpec for Secret {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Secrets.test.talos.dev",
        aliases: &[],
        default_namespace: "secrets",
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };
}

/// Doubles every Number into a Doubled of the same id; fails its first `failures` runs and
/// panics its first `panics` runs; counts runs. With `strong`, it holds each input and lets
/// go only once the output derived from it is destroyed.
#[derive(Default)]
struct Doubler {
    name: &'static str,
    failures: usize,
    panics: usize,
    runs: Arc<AtomicUsize>,
    strong: bool,
}

#[async_trait::async_trait]
impl Controller for Doubler {
    fn name(&self) -> String {
        self.name.to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        if self.strong { vec![Input::strong::<Number>("in")] } else { vec![Input::weak::<Number>("in")] }
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Doubled>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.panics > 0 {
            self.panics -= 1;
            panic!("deliberate panic");
        }
        if self.failures > 0 {
            self.failures -= 1;
            return Err("deliberate failure".into());
        }
        ctx.start_tracking_outputs();
        for n in ctx.list::<Number>("in")? {
            if n.phase() == Phase::TearingDown {
                if ctx.remove::<Doubled>("out", n.id())? && self.strong {
                    ctx.release(&n)?;
                }
                continue;
            }
            if self.strong {
                ctx.hold(&n)?;
            }
            ctx.apply("out", n.id(), Doubled { value: n.spec().value * 2 })?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

fn doubler(name: &'static str) -> Doubler {
    Doubler { name, ..Default::default() }
}

fn phase_is<T: ResourceSpec>(phase: Phase) -> impl Fn(Option<&Resource<T>>) -> bool {
    move |r| r.is_some_and(|r| r.phase() == phase)
}

#[tokio::test]
async fn outputs_follow_inputs_and_untracked_outputs_are_destroyed() {
    let h = Harness::start(vec![Box::new(doubler("DoublerController"))]).unwrap();
    h.seed("in", "a", Number { value: 2 }).unwrap();
    h.seed("in", "b", Number { value: 5 }).unwrap();
    let a = h.assert_spec("out", "a", &Doubled { value: 4 }).await;
    assert_eq!(a.metadata().owner, "DoublerController");
    h.assert_spec("out", "b", &Doubled { value: 10 }).await;
    h.seed("in", "a", Number { value: 3 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 6 }).await;
    h.unseed::<Number>("in", "b").unwrap();
    h.assert_absent::<Doubled>("out", "b").await;
    h.stop().await;
}

#[tokio::test]
async fn outside_writers_cannot_touch_controller_outputs() {
    let h = Harness::start(vec![Box::new(doubler("DoublerController"))]).unwrap();
    h.seed("in", "a", Number { value: 1 }).unwrap();
    let out = h.assert_spec("out", "a", &Doubled { value: 2 }).await;
    let err = h.state().update(out.with_spec(Doubled { value: 99 }), "").unwrap_err();
    assert!(err.to_string().contains("owned by \"DoublerController\""), "{err}");
    h.stop().await;
}

/// Fails until `healthy` is set; writes Runs.
struct Gated {
    healthy: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Controller for Gated {
    fn name(&self) -> String {
        "GatedController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<Number>("in")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Runs>()]
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.healthy.load(Ordering::SeqCst) {
            return Err(format!("not yet (run {n})").into());
        }
        ctx.apply("out", "gated", Runs { n })?;
        Ok(())
    }
}

#[tokio::test]
async fn a_failing_controller_is_retried_while_others_keep_running() {
    let healthy = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let gated = Gated { healthy: healthy.clone(), runs: runs.clone() };
    let h = Harness::start(vec![Box::new(gated), Box::new(doubler("DoublerController"))]).unwrap();
    h.seed("in", "a", Number { value: 21 }).unwrap();
    // The other controller works while this one fails and backs off.
    h.assert_spec("out", "a", &Doubled { value: 42 }).await;
    h.seed("in", "a", Number { value: 4 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 8 }).await;
    assert!(h.state().find::<Runs>("out", "gated").unwrap().is_none(), "the failing controller wrote");
    healthy.store(true, Ordering::SeqCst);
    let done = h.assert_eventually::<Runs, _>("out", "gated", "retried to success", |r| r.is_some()).await.unwrap();
    assert!(done.spec().n >= 2, "a success after failures, yet only {} runs", done.spec().n);
    h.stop().await;
}

#[tokio::test]
async fn a_panicking_controller_is_restarted_not_fatal() {
    let runs = Arc::new(AtomicUsize::new(0));
    let panicky = Doubler { name: "PanickyController", panics: 2, runs: runs.clone(), ..Default::default() };
    let h = Harness::start(vec![Box::new(panicky)]).unwrap();
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 2 }).await;
    assert!(runs.load(Ordering::SeqCst) >= 3);
    h.stop().await;
}

#[tokio::test]
async fn a_strong_input_is_held_until_released() {
    let strong = Doubler { name: "HolderController", strong: true, ..Default::default() };
    let h = Harness::start(vec![Box::new(strong)]).unwrap();
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_eventually::<Number, _>("in", "a", "held by HolderController", |r| {
        r.is_some_and(|r| r.metadata().finalizers.contains("HolderController"))
    })
    .await;
    // Outside destroy is refused while held; teardown lets the holder release it.
    h.state().teardown::<Number>("in", "a", "").unwrap();
    assert!(matches!(h.state().destroy::<Number>("in", "a", ""), Err(StateError::PendingFinalizers { .. })));
    h.assert_eventually::<Number, _>("in", "a", "released", |r| r.is_some_and(|r| r.metadata().finalizers.is_empty()))
        .await;
    h.state().destroy::<Number>("in", "a", "").unwrap();
    h.assert_absent::<Doubled>("out", "a").await;
    h.stop().await;
}

/// The doubler as a transform instance.
fn doubling_transform() -> TransformController<Number, Doubled> {
    TransformController::new("DoublerTransform", "in", "out", |_, n: &Resource<Number>| {
        Ok(Some(Doubled { value: n.spec().value * 2 }))
    })
    .with_input_finalizers()
}

/// Defect 2: an input is held until every output derived from it is destroyed, including
/// an output another controller still holds downstream.
async fn strong_input_outlives_its_held_output(controller: Box<dyn Controller>, holder: &str) {
    let h = Harness::start(vec![controller]).unwrap();
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 2 }).await;
    h.state().add_finalizer::<Doubled>("out", "a", "DownstreamController").unwrap();
    h.state().teardown::<Number>("in", "a", "").unwrap();
    h.assert_eventually("out", "a", "output tearing down", phase_is::<Doubled>(Phase::TearingDown)).await;
    let input = h.state().get::<Number>("in", "a").unwrap();
    assert!(
        input.metadata().finalizers.contains(holder),
        "input released while its output is still held downstream: {:?}",
        input.metadata()
    );
    h.state().remove_finalizer::<Doubled>("out", "a", "DownstreamController").unwrap();
    h.assert_absent::<Doubled>("out", "a").await;
    h.assert_eventually::<Number, _>("in", "a", "released", |r| r.is_some_and(|r| r.metadata().finalizers.is_empty()))
        .await;
    h.state().destroy::<Number>("in", "a", "").unwrap();
    h.stop().await;
}

#[tokio::test]
async fn defect_2_strong_input_stays_held_until_its_output_is_destroyed() {
    strong_input_outlives_its_held_output(Box::new(doubling_transform()), "DoublerTransform").await;
    let pattern = Doubler { name: "HolderController", strong: true, ..Default::default() };
    strong_input_outlives_its_held_output(Box::new(pattern), "HolderController").await;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Candidate {
    key: String,
    layer: u8,
}

impl ResourceSpec for Candidate {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Candidates.test.talos.dev",
        aliases: &[],
        default_namespace: "merged",
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

// A merge instance: this is all it takes.
impl Mergeable for Candidate {
    type Layer = u8;
    fn layer(&self) -> u8 {
        self.layer
    }
    fn merge_id(&self) -> String {
        self.key.clone()
    }
}

fn candidate(key: &str) -> Candidate {
    Candidate { key: key.into(), layer: 1 }
}

/// Defect 1: a held merged output whose last candidate goes away during a full reconcile
/// (forced by overrunning the input watch) is destroyed once the holder lets go.
#[tokio::test(flavor = "current_thread")]
async fn defect_1_held_output_is_not_leaked_by_a_full_reconcile() {
    let state = State::new(Arc::new(InMemoryState::with_history(4)));
    let h = Harness::start_on(state, vec![Box::new(GenericMergeController::<Candidate>::new("candidates", "merged"))])
        .unwrap();
    h.seed("candidates", "c1", candidate("a")).unwrap();
    h.assert_spec("merged", "a", &candidate("a")).await;
    h.state().add_finalizer::<Candidate>("merged", "a", "Holder").unwrap();
    // Without yielding: far more writes than the history holds, so the controller's input
    // watch falls behind and the next reconcile is a full one.
    for i in 0..20 {
        h.seed("candidates", &format!("x{i}"), candidate(&format!("k{i}"))).unwrap();
    }
    h.unseed::<Candidate>("candidates", "c1").unwrap();
    h.assert_eventually("merged", "a", "tearing down", phase_is::<Candidate>(Phase::TearingDown)).await;
    h.assert_list::<Candidate, _>("merged", "every other key merged", |l| l.len() == 21).await;
    h.state().remove_finalizer::<Candidate>("merged", "a", "Holder").unwrap();
    h.assert_absent::<Candidate>("merged", "a").await;
    // Wanted again later: created anew.
    h.seed("candidates", "c1", candidate("a")).unwrap();
    let back = h.assert_spec("merged", "a", &candidate("a")).await;
    assert_eq!(back.phase(), Phase::Running);
    h.stop().await;
}

/// Applies once; every later run returns early ("link not up yet") after counting itself.
struct EarlyReturner {
    runs: usize,
}

#[async_trait::async_trait]
impl Controller for EarlyReturner {
    fn name(&self) -> String {
        "EarlyReturnController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<Number>("in")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Doubled>(), Output::exclusive::<Runs>()]
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        self.runs += 1;
        ctx.apply("out", "runs", Runs { n: self.runs })?;
        if self.runs > 1 {
            return Ok(());
        }
        ctx.start_tracking_outputs();
        ctx.apply("out", "b", Doubled { value: 14 })?;
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

/// Defect 6: outputs are cleaned up only when the controller tracks them and asks.
#[tokio::test]
async fn defect_6_an_early_return_destroys_nothing() {
    let h = Harness::start(vec![Box::new(EarlyReturner { runs: 0 })]).unwrap();
    h.assert_spec("out", "b", &Doubled { value: 14 }).await;
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_spec("out", "runs", &Runs { n: 2 }).await;
    assert!(h.state().find::<Doubled>("out", "b").unwrap().is_some(), "an early return destroyed an output");
    h.stop().await;
}

/// A backend whose first `closing` kind watches end right after they start.
struct Closing {
    inner: InMemoryState,
    closing: AtomicUsize,
}

impl StateBackend for Closing {
    fn get(&self, n: &str, t: &str, i: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.get(n, t, i)
    }
    fn list(&self, n: &str, t: &str, o: &ListOptions) -> Vec<Arc<AnyResource>> {
        self.inner.list(n, t, o)
    }
    fn create(&self, r: AnyResource, o: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.create(r, o)
    }
    fn update(&self, r: AnyResource, v: u64, o: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.update(r, v, o)
    }
    fn teardown(&self, n: &str, t: &str, i: &str, o: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.teardown(n, t, i, o)
    }
    fn destroy(&self, n: &str, t: &str, i: &str, o: &str) -> Result<(), StateError> {
        self.inner.destroy(n, t, i, o)
    }
    fn add_finalizer(&self, n: &str, t: &str, i: &str, f: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.add_finalizer(n, t, i, f)
    }
    fn remove_finalizer(&self, n: &str, t: &str, i: &str, f: &str) -> Result<Arc<AnyResource>, StateError> {
        self.inner.remove_finalizer(n, t, i, f)
    }
    fn watch_kind(&self, n: &str, t: &str, o: &WatchOptions) -> Watch {
        if t == Number::DEFINITION.type_name
            && self.closing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1)).is_ok()
        {
            let ring = EventRing::new(4);
            ring.close();
            return Watch::new(Vec::new(), ring.live(), ListOptions::default());
        }
        self.inner.watch_kind(n, t, o)
    }
    fn watch(&self, n: &str, t: &str, i: &str) -> Watch {
        self.inner.watch(n, t, i)
    }
}

/// Captures log lines of the current thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber writing here, for `tracing::subscriber::set_default` in a current-thread
    /// test (every task runs on the test's thread).
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let me = self.clone();
        tracing_subscriber::fmt().with_ansi(false).with_writer(move || me.clone()).finish()
    }
}

/// Defect 7, first half: an input watch that ends is logged and re-subscribed, and the
/// controller hears changes again.
#[tokio::test(flavor = "current_thread")]
async fn defect_7_a_dead_input_watch_is_logged_and_restarted() {
    let log = Captured::default();
    let _guard = tracing::subscriber::set_default(log.subscriber());
    let backend = Closing { inner: InMemoryState::new(), closing: AtomicUsize::new(1) };
    let h = Harness::start_on(State::new(Arc::new(backend)), vec![Box::new(doubler("DoublerController"))]).unwrap();
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 2 }).await;
    h.seed("in", "a", Number { value: 5 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 10 }).await;
    let text = log.text();
    assert!(text.contains("input watch ended; re-subscribing"), "no log line for the dead watch: {text}");
    assert!(text.contains("Numbers.test.talos.dev"), "{text}");
    h.stop().await;
}

struct Stuck {
    entered: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl Controller for Stuck {
    fn name(&self) -> String {
        "StuckController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Runs>()]
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.apply("out", "stuck", Runs { n: 1 })?;
        self.entered.store(true, Ordering::SeqCst);
        std::future::pending().await
    }
}

/// Defect 7, second half: a reconcile in flight is dropped when the runtime stops.
#[tokio::test]
async fn defect_7_a_reconcile_in_flight_is_cancelled_on_shutdown() {
    let entered = Arc::new(AtomicBool::new(false));
    let h = Harness::start(vec![Box::new(Stuck { entered: entered.clone() })]).unwrap();
    h.assert_spec("out", "stuck", &Runs { n: 1 }).await;
    assert!(entered.load(Ordering::SeqCst));
    let stopped = tokio::time::timeout(Duration::from_secs(5), h.stop()).await;
    assert!(stopped.is_ok(), "stop did not finish: the reconcile in flight was not cancelled");
}

/// Reads or writes what it never declared.
struct Trespasser {
    write: bool,
    runs: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Controller for Trespasser {
    fn name(&self) -> String {
        "TrespasserController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<Number>("in")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.write {
            ctx.apply("out", "x", Doubled { value: 1 })?;
        } else {
            ctx.list::<Doubled>("out")?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn undeclared_reads_and_writes_stop_the_controller_instead_of_retrying() {
    for write in [false, true] {
        let runs = Arc::new(AtomicUsize::new(0));
        let h = Harness::start(vec![Box::new(Trespasser { write, runs: runs.clone() })]).unwrap();
        let message = h.assert_stopped("TrespasserController").await;
        let want = if write { "is not a declared output" } else { "is neither an input nor an output" };
        assert!(message.contains(want), "write={write}: {message:?}");
        h.seed("in", "a", Number { value: 1 }).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "a declaration mistake was retried");
        assert!(h.state().list::<Doubled>("out").is_empty());
        h.stop().await;
    }
}

fn registry() -> Arc<Registry> {
    let mut r = Registry::new();
    for ns in ["in", "out", "secrets"] {
        r.add_namespace(ns, "").unwrap();
    }
    r.register::<Number>().unwrap();
    r.register::<Doubled>().unwrap();
    r.register::<Secret>().unwrap();
    Arc::new(r)
}

#[test]
fn registration_checks_ownership_and_declarations() {
    let mut rt = Runtime::new(State::in_memory(), registry());
    rt.register(doubler("A")).unwrap();
    assert_eq!(rt.register(doubler("A")), Err(RuntimeError::DuplicateController { name: "A".into() }));
    match rt.register(doubler("B")) {
        Err(RuntimeError::ExclusiveOutputTaken { other, .. }) => assert_eq!(other, "A"),
        other => panic!("second exclusive writer: {other:?}"),
    }
    struct Declares(Vec<Input>, Vec<Output>);
    #[async_trait::async_trait]
    impl Controller for Declares {
        fn name(&self) -> String {
            "Declares".into()
        }
        fn inputs(&self) -> Vec<Input> {
            self.0.clone()
        }
        fn outputs(&self) -> Vec<Output> {
            self.1.clone()
        }
        async fn reconcile(&mut self, _: &mut Context) -> Result<(), ReconcileError> {
            Ok(())
        }
    }
    match rt.register(Declares(vec![], vec![Output::shared::<Doubled>()])) {
        Err(RuntimeError::OutputOwnedExclusively { owner, .. }) => assert_eq!(owner, "A"),
        other => panic!("shared writer of an exclusive type: {other:?}"),
    }
    let cases: Vec<(Declares, &str)> = vec![
        (Declares(vec![Input::weak::<Runs>("out")], vec![]), "Runs.test.talos.dev, which is not a registered type"),
        (Declares(vec![], vec![Output::exclusive::<Runs>()]), "Runs.test.talos.dev, which is not a registered type"),
        (Declares(vec![Input::weak::<Number>("nowhere")], vec![]), "namespace \"nowhere\", which is not registered"),
        (Declares(vec![Input::weak::<Number>("in"), Input::weak::<Number>("in")], vec![]), "twice"),
    ];
    for (c, want) in cases {
        let err = rt.register(c).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
    }
}

#[test]
fn dependency_graph_is_dot() {
    let mut rt = Runtime::new(State::in_memory(), registry());
    rt.register(doubler("DoublerController")).unwrap();
    let dot = rt.dependency_graph();
    let want = "digraph controllers {\n  rankdir=LR;\n  \"DoublerController\" [shape=box];\n  \
        \"Numbers.test.talos.dev\" -> \"DoublerController\" [style=dashed, label=\"in\"];\n  \
        \"DoublerController\" -> \"Doubleds.test.talos.dev\";\n  \
        \"Doubleds.test.talos.dev\" [shape=ellipse];\n  \"Numbers.test.talos.dev\" [shape=ellipse];\n}\n";
    assert_eq!(dot, want);
}

#[tokio::test]
async fn input_bursts_coalesce() {
    let runs = Arc::new(AtomicUsize::new(0));
    let h = Harness::start(vec![Box::new(Doubler { name: "C", runs: runs.clone(), ..Default::default() })]).unwrap();
    h.seed("in", "first", Number { value: 1 }).unwrap();
    h.assert_spec("out", "first", &Doubled { value: 2 }).await;
    let before = runs.load(Ordering::SeqCst);
    // Writes made without yielding to the runtime land as few wake-ups.
    for i in 0..500 {
        h.seed("in", &format!("n{i:03}"), Number { value: i }).unwrap();
    }
    h.assert_list::<Doubled, _>("out", "all 500 doubled", |l| l.len() == 501).await;
    let n = runs.load(Ordering::SeqCst) - before;
    assert!(n < 50, "500 input events took {n} reconciles");
    h.stop().await;
}

#[tokio::test]
async fn timeout_message_shows_the_last_value() {
    let h =
        Harness::start(vec![Box::new(doubler("DoublerController"))]).unwrap().with_timeout(Duration::from_millis(300));
    h.seed("in", "a", Number { value: 1 }).unwrap();
    h.assert_spec("out", "a", &Doubled { value: 2 }).await;
    let err = h
        .eventually::<Doubled, _>("out", "a", "value 3", |r| r.is_some_and(|r| r.spec().value == 3))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("value 3 (out/Doubleds.test.talos.dev/a)"), "{message}");
    assert!(message.contains("Doubled { value: 2 }"), "{message}");
    h.stop().await;
}

#[tokio::test]
async fn resources_created_before_start_are_seen() {
    let state = State::in_memory();
    state.create(Resource::new("in", "early", Number { value: 7 }), "").unwrap();
    let h = Harness::start_on(state, vec![Box::new(doubler("DoublerController"))]).unwrap();
    h.assert_spec("out", "early", &Doubled { value: 14 }).await;
    h.stop().await;
}

/// Fails for inputs named `bad*`, recording when; doubles the rest.
fn picky_transform(
    attempts: Arc<tokio::sync::watch::Sender<Vec<tokio::time::Instant>>>,
) -> TransformController<Number, Doubled> {
    TransformController::new("PickyTransform", "in", "out", move |_, n: &Resource<Number>| {
        if n.id().starts_with("bad") {
            attempts.send_modify(|a| a.push(tokio::time::Instant::now()));
            return Err(format!("{} is bad", n.id()).into());
        }
        Ok(Some(Doubled { value: n.spec().value * 2 }))
    })
}

#[tokio::test]
async fn a_failing_key_backs_off_alone() {
    let attempts = Arc::new(tokio::sync::watch::channel(Vec::new()).0);
    let mut seen = attempts.subscribe();
    let h = Harness::start(vec![Box::new(picky_transform(attempts.clone()))]).unwrap();
    h.seed("in", "good", Number { value: 1 }).unwrap();
    h.assert_spec("out", "good", &Doubled { value: 2 }).await;
    h.seed("in", "bad", Number { value: 1 }).unwrap();
    // Retried on its own, with no input change at all, each wait longer than the last: the
    // harness's back-off starts at 10 ms, so the wait after the fourth failure is 80 ms.
    let five = tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|a| a.len() >= 5)).await;
    let times = five.expect("the bad key was not retried five times").expect("sender alive").clone();
    assert!(times[4] - times[3] >= Duration::from_millis(80), "no back-off between retries: {times:?}");
    // Its siblings are not held back while it fails.
    h.seed("in", "good", Number { value: 50 }).unwrap();
    h.assert_spec("out", "good", &Doubled { value: 100 }).await;
    assert!(h.state().find::<Doubled>("out", "bad").unwrap().is_none());
    h.stop().await;
}

/// A source that fails on its first run and wakes the controller with a key on the next.
struct FlakySource {
    starts: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl EventSource for FlakySource {
    fn name(&self) -> String {
        "flaky source".into()
    }
    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        if self.starts.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err("socket closed".into());
        }
        waker.changed(Pointer::new("", "netlink", "eth0"));
        cancel.cancelled().await;
        Ok(())
    }
}

/// Counts wake-ups by cause into Runs resources.
struct Sourced {
    starts: Arc<AtomicUsize>,
    keyed: usize,
    ticks: usize,
}

#[async_trait::async_trait]
impl Controller for Sourced {
    fn name(&self) -> String {
        "SourcedController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Runs>()]
    }
    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(FlakySource { starts: self.starts.clone() }), Box::new(Timer::every(Duration::from_millis(20)))]
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let keyed = ctx.changed().filter(|p| p.type_name == "netlink" && p.id == "eth0").count();
        self.keyed += keyed;
        self.ticks += 1;
        ctx.apply("out", "keyed", Runs { n: self.keyed })?;
        ctx.apply("out", "runs", Runs { n: self.ticks })?;
        let value = ctx.blocking("reading a file", || std::fs::read_to_string("/proc/self/stat").is_ok()).await?;
        assert!(value);
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn event_sources_wake_the_controller_and_are_restarted() {
    let log = Captured::default();
    let _guard = tracing::subscriber::set_default(log.subscriber());
    let starts = Arc::new(AtomicUsize::new(0));
    let h = Harness::start(vec![Box::new(Sourced { starts: starts.clone(), keyed: 0, ticks: 0 })]).unwrap();
    h.assert_spec("out", "keyed", &Runs { n: 1 }).await;
    assert_eq!(starts.load(Ordering::SeqCst), 2, "the failed source was not restarted once");
    assert!(log.text().contains("event source failed: socket closed"), "{}", log.text());
    // The timer keeps waking it.
    h.assert_eventually::<Runs, _>("out", "runs", "ticks", |r| r.is_some_and(|r| r.spec().n >= 5)).await;
    h.stop().await;
}

#[tokio::test]
async fn the_registry_is_published_and_the_view_enforces_sensitivity() {
    let state = State::in_memory();
    let h = Harness::start_with(state.clone(), registry(), vec![Box::new(doubler("DoublerController"))]).unwrap();
    h.assert_eventually::<ResourceDefinitionSpec, _>("meta", "numbers.test.talos.dev", "published", |r| r.is_some())
        .await;
    state.create(Resource::new("secrets", "k", Secret { key: "hunter2".into() }), "").unwrap();
    state.create(Resource::new("in", "n", Number { value: 1 }), "").unwrap();
    let reader = StateView::new(state.clone(), registry(), Access::for_roles(&["os:reader"]));
    let admin = StateView::new(state.clone(), registry(), Access::for_roles(&["os:reader", "os:admin"]));
    let secrets = Secret::DEFINITION.type_name;
    let denied = |r: Result<(), StateError>| matches!(r, Err(StateError::PermissionDenied { .. }));
    assert!(denied(reader.get("secrets", secrets, "k").map(drop)));
    assert!(denied(reader.list("secrets", secrets, &ListOptions::default()).map(drop)));
    assert!(denied(reader.watch_kind("secrets", secrets, &WatchOptions::default()).map(drop)));
    assert!(denied(reader.watch("secrets", secrets, "k").map(drop)));
    assert_eq!(reader.list("in", Number::DEFINITION.type_name, &ListOptions::default()).unwrap().len(), 1);
    assert_eq!(admin.list("secrets", secrets, &ListOptions::default()).unwrap().len(), 1);
    let yaml = admin.get("secrets", secrets, "k").unwrap().spec.to_yaml().unwrap();
    assert_eq!(yaml, "key: hunter2\n");
    assert!(matches!(reader.get("in", "Nopes.test.talos.dev", "x"), Err(StateError::UnknownType { .. })));
    let err = reader.get("secrets", secrets, "k").unwrap_err().to_string();
    assert_eq!(err, "Secrets.test.talos.dev is sensitive: reading it needs the os:admin role");
    h.stop().await;
}
