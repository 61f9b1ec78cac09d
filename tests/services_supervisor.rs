//! The service supervisor with real processes: restart with back-off, output captured in a
//! bounded ring, stop with SIGTERM then SIGKILL (taking the service's children along), and
//! the Talos service user.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talosbox::resources::runtime::ServiceState;
use talosbox::services::{
    Backoff, Program, ReapMode, Reaper, RestartPolicy, ServiceDefinition, ServiceEvent, Supervisor,
};
use tokio_util::sync::CancellationToken;

type Events = Arc<Mutex<Vec<(Instant, ServiceEvent)>>>;

struct Rig {
    supervisor: Arc<Supervisor>,
    events: Events,
    cancel: CancellationToken,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn rig(stop_timeout: Duration) -> Rig {
    let reaper = Reaper::new(ReapMode::Own);
    let cancel = CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));
    let events: Events = Arc::default();
    let sink = events.clone();
    let supervisor = Supervisor::new(reaper, "/bin/false".into(), stop_timeout, move |e| {
        sink.lock().unwrap().push((Instant::now(), e.clone()));
    });
    Rig { supervisor, events, cancel }
}

fn shell(name: &str, script: &str, restart: RestartPolicy, log_capacity: usize) -> ServiceDefinition {
    ServiceDefinition {
        name: name.into(),
        program: Program::Exec { path: "/bin/sh".into(), args: vec![OsString::from("-c"), OsString::from(script)] },
        uid: None,
        gid: None,
        restart,
        log_capacity,
    }
}

/// Waits until `pred` holds: woken by the supervisor's change feed, and every 20 ms for
/// the log ring (which changes without a state change); bounded.
async fn until(rig: &Rig, what: &str, pred: impl Fn(&Supervisor) -> bool) {
    let mut changes = rig.supervisor.changes();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pred(&rig.supervisor) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; services: {:?}", rig.supervisor.snapshot());
        let _ = tokio::time::timeout(Duration::from_millis(20), changes.changed()).await;
    }
}

fn states(events: &Events, service: &str) -> Vec<ServiceState> {
    events.lock().unwrap().iter().filter(|(_, e)| e.service == service).map(|(_, e)| e.state).collect()
}

fn logs(rig: &Rig, name: &str) -> Vec<String> {
    rig.supervisor.logs(name).map(|l| l.lines()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exiting_service_is_restarted_with_growing_back_off() {
    let rig = rig(Duration::from_secs(5));
    let policy = RestartPolicy {
        backoff: Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(400) },
        reset_after: Duration::from_secs(60),
    };
    rig.supervisor.start(shell("flaky", "echo run $$; exit 3", policy, 4096)).unwrap();
    until(&rig, "five restarts", |s| s.service("flaky").is_some_and(|s| s.restarts >= 5)).await;

    let starts: Vec<Instant> = rig
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, e)| e.service == "flaky" && e.state == ServiceState::Starting)
        .map(|(t, _)| *t)
        .collect();
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 4, "{gaps:?}");
    for (gap, floor) in gaps.iter().zip([100u64, 200, 400, 400]) {
        assert!(*gap >= Duration::from_millis(floor), "back-off too short: {gaps:?}");
    }
    assert!(gaps[3] < Duration::from_secs(3), "back-off must stop growing at max: {gaps:?}");

    let seen = states(&rig.events, "flaky");
    assert_eq!(
        &seen[..5],
        &[
            ServiceState::Starting,
            ServiceState::Running,
            ServiceState::Failed,
            ServiceState::Waiting,
            ServiceState::Starting
        ],
        "{seen:?}"
    );
    let failed = rig
        .events
        .lock()
        .unwrap()
        .iter()
        .find(|(_, e)| e.state == ServiceState::Failed)
        .map(|(_, e)| e.message.clone());
    assert_eq!(failed.as_deref(), Some("exited with code 3"));
    let lines = logs(&rig, "flaky");
    assert!(lines.len() >= 4 && lines.iter().all(|l| l.starts_with("run ")), "{lines:?}");
    rig.supervisor.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_captured_in_a_bounded_ring() {
    let rig = rig(Duration::from_secs(5));
    let script =
        "echo to-stderr >&2; i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo line-$i; done; echo done; exec sleep 1000";
    rig.supervisor.start(shell("chatty", script, RestartPolicy::default(), 2000)).unwrap();
    until(&rig, "the last line in the ring", |s| {
        s.logs("chatty").is_some_and(|l| l.lines().last().is_some_and(|x| x == "done"))
    })
    .await;
    let ring = rig.supervisor.logs("chatty").unwrap();
    assert!(ring.len_bytes() <= 2000, "ring holds {} bytes", ring.len_bytes());
    assert!(ring.dropped() > 0);
    let lines = ring.lines();
    assert_eq!(lines[lines.len() - 2], "line-3000", "{:?}", &lines[lines.len() - 3..]);
    assert!(!lines.contains(&"to-stderr".to_string()), "the oldest line should have fallen off");
    rig.supervisor.stop_all().await;

    // stderr goes to the same ring.
    let rig2 = self::rig(Duration::from_secs(5));
    rig2.supervisor
        .start(shell("stderr", "echo out; echo err >&2; exec sleep 1000", RestartPolicy::default(), 2000))
        .unwrap();
    until(&rig2, "both streams", |s| s.logs("stderr").is_some_and(|l| l.lines().len() == 2)).await;
    assert_eq!(logs(&rig2, "stderr"), vec!["out", "err"]);
    rig2.supervisor.stop_all().await;
}

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purpose; it only waits for its reaper.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_terminates_the_service_and_its_children() {
    let rig = rig(Duration::from_secs(5));
    rig.supervisor.start(shell("parent", "sleep 1000 & echo child $!; wait", RestartPolicy::default(), 4096)).unwrap();
    until(&rig, "the child's pid", |s| s.logs("parent").is_some_and(|l| !l.lines().is_empty())).await;
    let child: i32 = logs(&rig, "parent")[0].strip_prefix("child ").unwrap().parse().unwrap();
    let main = rig.supervisor.service("parent").unwrap().pid.unwrap() as i32;
    assert!(alive(child) && alive(main));

    let started = Instant::now();
    rig.supervisor.stop_all().await;
    assert!(started.elapsed() < Duration::from_secs(4), "SIGTERM should have been enough");
    gone(main).await;
    gone(child).await;
    let last = rig.supervisor.service("parent").unwrap();
    assert_eq!(last.state, ServiceState::Finished);
    assert_eq!(last.message, "stopped: killed by signal 15");
    assert_eq!(
        states(&rig.events, "parent"),
        vec![ServiceState::Starting, ServiceState::Running, ServiceState::Stopping, ServiceState::Finished]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_ignoring_sigterm_is_killed_after_the_timeout() {
    let rig = rig(Duration::from_millis(300));
    rig.supervisor
        .start(shell("stubborn", "trap '' TERM; echo ready; while :; do sleep 1; done", RestartPolicy::default(), 4096))
        .unwrap();
    until(&rig, "ready", |s| s.logs("stubborn").is_some_and(|l| l.lines() == ["ready"])).await;
    let pid = rig.supervisor.service("stubborn").unwrap().pid.unwrap() as i32;
    let started = Instant::now();
    rig.supervisor.stop_all().await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    gone(pid).await;
    let last = rig.supervisor.service("stubborn").unwrap();
    assert_eq!(last.state, ServiceState::Finished);
    assert!(last.message.contains("killed by signal 9 after SIGKILL"), "{}", last.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_cannot_start_fails_and_is_retried() {
    let rig = rig(Duration::from_secs(1));
    let def = ServiceDefinition {
        name: "missing".into(),
        program: Program::Exec { path: "/nonexistent/program".into(), args: Vec::new() },
        uid: None,
        gid: None,
        restart: RestartPolicy {
            backoff: Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(50) },
            reset_after: Duration::from_secs(60),
        },
        log_capacity: 1024,
    };
    rig.supervisor.start(def).unwrap();
    until(&rig, "two restarts", |s| s.service("missing").is_some_and(|s| s.restarts >= 2)).await;
    let failure = rig
        .events
        .lock()
        .unwrap()
        .iter()
        .find(|(_, e)| e.state == ServiceState::Failed)
        .map(|(_, e)| e.message.clone());
    assert!(failure.as_deref().is_some_and(|m| m.contains("/nonexistent/program")), "{failure:?}");
    rig.supervisor.stop_all().await;
    assert_eq!(rig.supervisor.service("missing").unwrap().state, ServiceState::Finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_runs_as_its_talos_user() {
    if !rustix::process::geteuid().is_root() {
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: service_runs_as_its_talos_user needs root to change uid");
        }
        return;
    }
    let rig = rig(Duration::from_secs(5));
    let mut def = shell("apid-user", "id -u; id -g; id -G; exec sleep 1000", RestartPolicy::default(), 4096);
    def.uid = Some(talosbox::services::APID_USER_ID);
    def.gid = Some(talosbox::services::APID_USER_ID);
    rig.supervisor.start(def).unwrap();
    until(&rig, "id output", |s| s.logs("apid-user").is_some_and(|l| l.lines().len() == 3)).await;
    assert_eq!(logs(&rig, "apid-user"), vec!["50", "50", "50"], "uid, gid, and no supplementary groups");
    rig.supervisor.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applet_services_run_this_binary_under_their_name() {
    let reaper = Reaper::new(ReapMode::Own);
    let cancel = CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));
    let events: Events = Arc::default();
    let sink = events.clone();
    let supervisor = Supervisor::new(reaper, env!("CARGO_BIN_EXE_talosbox").into(), Duration::from_secs(5), move |e| {
        sink.lock().unwrap().push((Instant::now(), e.clone()));
    });
    let rig = Rig { supervisor, events, cancel };
    let mut def = ServiceDefinition::applet("talosctl");
    def.program = Program::Applet { args: vec!["version".into(), "--client".into()] };
    rig.supervisor.start(def).unwrap();
    // argv[0] = "talosctl" makes the binary dispatch to talosctl, which prints its version and exits 0.
    until(&rig, "a clean exit", |s| {
        let printed =
            s.logs("talosctl").is_some_and(|l| l.lines().iter().any(|x| x.contains(talosbox::version::VERSION)));
        printed && s.service("talosctl").is_some_and(|s| s.message == "exited with code 0" || s.restarts > 0)
    })
    .await;
    let finished = states(&rig.events, "talosctl");
    assert_eq!(
        &finished[..3],
        &[ServiceState::Starting, ServiceState::Running, ServiceState::Finished],
        "{finished:?}"
    );
    rig.supervisor.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_service_stops_starts_again_and_restarts_keeping_its_log() {
    let rig = rig(Duration::from_secs(5));
    rig.supervisor.start(shell("svc", "echo up $$; exec sleep 60", RestartPolicy::default(), 4096)).unwrap();
    let ups = |s: &Supervisor| s.logs("svc").map_or(0, |l| l.lines().iter().filter(|l| l.starts_with("up ")).count());
    let running = |n: usize| {
        move |s: &Supervisor| s.service("svc").is_some_and(|s| s.state == ServiceState::Running) && ups(s) == n
    };
    until(&rig, "running", running(1)).await;
    let first = rig.supervisor.service("svc").unwrap().pid;
    rig.supervisor.stop("svc").await.unwrap();
    let svc = rig.supervisor.service("svc").unwrap();
    assert_eq!((svc.state, svc.pid), (ServiceState::Finished, None));
    rig.supervisor.stop("svc").await.unwrap();
    rig.supervisor.start_again("svc").unwrap();
    until(&rig, "running again, its log kept", running(2)).await;
    rig.supervisor.restart("svc").await.unwrap();
    until(&rig, "running after restart", running(3)).await;
    let svc = rig.supervisor.service("svc").unwrap();
    assert_ne!(svc.pid, first);
    assert_eq!(svc.history.iter().filter(|e| e.state == ServiceState::Running).count(), 3, "{:?}", svc.history);
    assert!(rig.supervisor.stop("nosuch").await.is_err());
    assert!(rig.supervisor.start_again("nosuch").is_err());
    rig.supervisor.stop_all().await;
}
