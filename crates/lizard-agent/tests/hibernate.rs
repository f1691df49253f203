//! Hibernation through two real agents: one saves its contexts into a directory and is stopped, a
//! fresh one recreates them from it. Checks the per-language survival list item by item (the
//! sandbox-level path, with the server relaunching a sandbox, is `crates/lizard/tests/hibernate.rs`).

mod common;

use common::*;
use lizard_test_support::report_names;
use serde_json::json;

#[tokio::test]
async fn contexts_survive_a_new_agent() {
    lizard_test_support::needs_root!();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("hib");
    let a = Agent::start();
    let py = a.context("python").await;
    let js = a.context("javascript").await;
    let sh = a.context("bash").await;
    let setup = a
        .run_in(
            &py,
            "import numpy as np, pandas as pd, os, socket, threading\n\
             n = 7; s = 'héllo'; l = [1, 2, 3]; d = {'k': [1]}\n\
             arr = np.arange(10); df = pd.DataFrame({'a': [1, 2]})\n\
             def sq(x): return x * x\n\
             class P:\n    def __init__(self, v): self.v = v\n    def twice(self): return self.v * 2\n\
             p = P(21)\n\
             gen = (i for i in range(3))\n\
             sock = socket.socket()\n\
             th = threading.Thread(target=lambda: None)\n\
             os.makedirs('/tmp', exist_ok=True); os.chdir('/tmp')\n\
             os.environ['HIB_T'] = 'py'",
        )
        .await;
    assert_eq!(setup.error, None, "{setup:?}");
    let r = a
        .run_in(
            &js,
            "let a = 1; const o = {x: [1, 2]}; function f(v) { return v + 1 }\n\
             class K { constructor(v) { this.v = v } get2() { return this.v * 2 } }\n\
             var k = new K(4); const timer = setInterval(() => {}, 100000); process.chdir('/tmp');",
        )
        .await;
    assert_eq!(r.error, None, "{r:?}");
    let r = a
        .run_in(
            &sh,
            "v=5; export EXPV=yes; g() { echo g$1; }; alias hi='echo hi'; cd /tmp",
        )
        .await;
    assert_eq!(r.error, None, "{r:?}");

    let (st, snap) = a
        .post(
            "/hibernate/snapshot",
            json!({"dir": dir.display().to_string()}),
        )
        .await;
    assert_eq!(st, 200, "{snap}");
    let lost = report_names(&snap, &py, "lost");
    for n in ["gen", "sock", "th"] {
        assert!(lost.contains(&n.to_string()), "{n} not lost: {snap}");
    }
    assert!(
        report_names(&snap, &js, "lost").contains(&"timer".to_string()),
        "{snap}"
    );
    drop(a);

    let b = Agent::start();
    let (st, rep) = b
        .post(
            "/hibernate/restore",
            json!({"dir": dir.display().to_string()}),
        )
        .await;
    assert_eq!(st, 200, "{rep}");
    let restored = report_names(&rep, &py, "restored");
    for n in ["np", "pd", "n", "s", "l", "d", "arr", "df", "sq", "P", "p"] {
        assert!(restored.contains(&n.to_string()), "{n} not restored: {rep}");
    }
    // Lost at snapshot time is still reported at restore time.
    assert!(report_names(&rep, &py, "lost").contains(&"gen".to_string()));

    let check = b
        .run_in(
            &py,
            "print(n, s, l, d, int(arr.sum()), int(df['a'].sum()), sq(5), p.twice(), \
             isinstance(p, P), np.__name__, os.getcwd(), os.environ.get('HIB_T'))",
        )
        .await;
    assert_eq!(
        check.stdout_text(),
        "7 héllo [1, 2, 3] {'k': [1]} 45 3 25 42 True numpy /tmp py\n",
        "{check:?}"
    );
    // The execution count continues.
    assert_eq!(check.execution_count, 2, "{check:?}");

    let check = b
        .run_in(
            &js,
            "[a, o.x[1], f(1), k.get2(), k instanceof K, process.cwd()].join(',')",
        )
        .await;
    assert_eq!(
        main_text(&check).as_deref(),
        Some("'1,2,2,8,true,/tmp'"),
        "{check:?}"
    );
    let check = b
        .run_in(&sh, "echo $v $EXPV $(g 1) $(hi) $PWD; env | grep ^EXPV=")
        .await;
    assert_eq!(
        check.stdout_text(),
        "5 yes g1 hi /tmp\nEXPV=yes\n",
        "{check:?}"
    );
}

#[tokio::test]
async fn bad_hibernation_requests_are_typed_errors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let (st, v) = a
        .post("/hibernate/restore", json!({"dir": "relative"}))
        .await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = a
        .post(
            "/hibernate/restore",
            json!({"dir": "/nonexistent-lizard-hib"}),
        )
        .await;
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["code"], "not_found");
}
