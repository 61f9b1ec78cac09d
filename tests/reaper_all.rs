//! The reaper in PID 1's mode, in a test binary of its own (it reaps every child of the
//! process, which would steal from other tests). This process becomes a child subreaper, so
//! orphans are re-parented to it as they are to PID 1 on a node: the supervised exit must
//! still reach its waiter, and the orphan must not stay a zombie.

use std::process::Command;
use std::time::{Duration, Instant};

use talosbox::services::{Exit, ReapMode, Reaper};

fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaps_orphans_and_still_delivers_supervised_exits() {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).expect("PR_SET_CHILD_SUBREAPER");
    let reaper = Reaper::new(ReapMode::All);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));

    let dir = std::env::temp_dir().join(format!("talosbox-reaper-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("orphan");
    // The shell leaves a short-lived orphan behind and exits 7.
    let script = format!("sleep 0.3 & echo $! > {}; exit 7", pidfile.display());
    let (_, exit) = reaper.spawn(Command::new("/bin/sh").args(["-c", &script])).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), exit).await.expect("exit delivered in time").unwrap();
    assert_eq!(exit, Exit::Code(7));

    let orphan: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // It runs, exits, is re-parented to us and must be reaped: gone, not a zombie.
    while let Some(state) = state_of(orphan) {
        assert!(Instant::now() < deadline, "orphan {orphan} still present in state {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let _ = std::fs::remove_dir_all(dir);
}
