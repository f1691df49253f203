//! Launch latency, spec → `execve` of the sandbox's PID 1, measured with `sandbox::launch` called
//! in-process (this test has no libtest harness, so it is single-threaded, as `launch` requires)
//! and through the `lizard-jail-init` helper (what a multi-threaded server pays). Also checks that
//! `launch` refuses to run in a multi-threaded process. Prints the numbers; asserts only a loose
//! bound.

mod common;

use common::*;
use lizard_jail::process::try_reap;
use lizard_jail::sandbox::{launch, launch_with_helper, JailError, SandboxSpec};
use std::fs;
use std::time::{Duration, Instant};

const RUNS: usize = 20;

fn spec_for(t: &TestDir, i: usize, tag: &str) -> SandboxSpec {
    let mut spec = t.spec(&unique_id(&format!("{tag}{i}")), "");
    spec.program = "/usr/bin/true".into();
    spec.args.clear();
    // A fresh writable layer per sandbox (a layer belongs to one overlay at a time).
    for d in ["upper", "work"] {
        let p = t.path().join(format!("{d}-{tag}{i}"));
        fs::create_dir(&p).unwrap();
        if d == "upper" {
            spec.rootfs.upper = p;
        } else {
            spec.rootfs.work = p;
        }
    }
    spec.limits.memory_bytes = Some(256 << 20);
    spec.limits.pids_max = Some(64);
    spec.limits.cpu_millicores = Some(1000);
    spec
}

fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "min {:.2} ms, median {:.2} ms, p90 {:.2} ms, max {:.2} ms over {} runs",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() * 9 / 10]),
        ms(v[v.len() - 1]),
        v.len()
    )
}

fn reap(pid: i32) {
    poll(Duration::from_secs(5), "the sandbox to exit", || {
        try_reap(pid).unwrap()
    });
}

fn main() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();

    // A second thread makes `launch` refuse.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || rx.recv().ok());
    match launch(&spec_for(&t, 0, "threaded")) {
        Err(JailError::NotSingleThreaded { threads }) => assert_eq!(threads, 2),
        other => panic!("launch in a multi-threaded process: {other:?}"),
    }
    drop(tx);
    thread.join().unwrap();
    poll(Duration::from_secs(5), "the thread to be gone", || {
        let s = fs::read_to_string("/proc/self/status").unwrap();
        s.lines().any(|l| l == "Threads:\t1").then_some(())
    });

    let mut direct = Vec::new();
    for i in 0..RUNS {
        let spec = spec_for(&t, i, "direct");
        let start = Instant::now();
        let launched = launch(&spec).unwrap();
        direct.push(start.elapsed());
        reap(launched.pid);
        launched.cgroup.remove().unwrap();
    }

    lizard_jail::process::set_child_subreaper().unwrap();
    let helper = std::env::var("CARGO_BIN_EXE_lizard-jail-init")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_lizard-jail-init").to_string());
    let mut via_helper = Vec::new();
    for i in 0..RUNS {
        let spec = spec_for(&t, i, "helper");
        let start = Instant::now();
        let launched = launch_with_helper(std::process::Command::new(&helper), &spec).unwrap();
        via_helper.push(start.elapsed());
        reap(launched.pid);
        launched.cgroup.remove().unwrap();
    }

    let median = {
        let mut v = direct.clone();
        v.sort();
        v[v.len() / 2]
    };
    println!("launch in-process:  {}", summary(direct));
    println!("launch via helper:  {}", summary(via_helper));
    assert!(
        median < Duration::from_millis(250),
        "launch median {median:?} is implausibly slow"
    );
}
