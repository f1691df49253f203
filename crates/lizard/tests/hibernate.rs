//! Hibernation to disk: contexts saved, processes stopped, the sandbox relaunched on resume with
//! its writable layer and its contexts restored, item by item as documented in
//! docs/ARCHITECTURE.md ("Hibernation"). Real server, real sandboxes.

mod common;

use common::*;
use lizard_test_support::report_names;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

fn has(list: &[String], name: &str) -> bool {
    list.iter().any(|n| n == name)
}

/// Every cgroup directory recorded in the sandbox's runtime file.
fn cgroup_dirs(data_dir: &Path, id: &str) -> Vec<String> {
    let rt: Value = serde_json::from_slice(
        &std::fs::read(data_dir.join("sandboxes").join(id).join("runtime.json")).unwrap(),
    )
    .unwrap();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.starts_with("/sys/fs/cgroup") => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&rt["cgroup"], &mut out);
    out
}

async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    s.run(id, json!({"code": code, "context": ctx})).await
}

#[tokio::test]
async fn hibernate_resume_restores_the_survival_list() {
    lizard_test_support::needs_root!();
    // The per-language save, asked for (with CRIU, the default, nothing is lost).
    let s = Server::with_flags("--criu none");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let py = context(&s, &id, "python").await;
    let sh = context(&s, &id, "bash").await;
    let js = context(&s, &id, "javascript").await;

    let ex = run_in(
        &s,
        &id,
        &py,
        "import numpy as np\nimport pandas as pd\nimport os, socket, threading\n\
         i = 42; s = 'héllo'; l = [1, 2, 3]; d = {'k': 'v'}\n\
         arr = np.arange(1_000_000, dtype=np.int64)\n\
         df = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n\
         def sq(x):\n    return x * x\n\
         class Point:\n    def __init__(self, x):\n        self.x = x\n    def norm(self):\n        return abs(self.x)\n\
         pt = Point(-5)\n\
         gen = (n for n in range(3))\n\
         sock = socket.socket()\n\
         th = threading.Thread(target=lambda: None)\n\
         os.makedirs('/home/user/work', exist_ok=True)\nos.chdir('/home/user/work')\n\
         open('/home/user/kept.txt', 'w').write('file kept')",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let ex = run_in(
        &s,
        &id,
        &sh,
        "v='a b'; export XV=exported; greet() { echo \"hi $1\"; }; alias ll='echo aliased'; cd /tmp",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let ex = run_in(
        &s,
        &id,
        &js,
        "let a = 1; const c = {k: [1, 2]}; function inc(x) { return x + 1 }\n\
         class Box { constructor(v) { this.v = v } get() { return this.v } }\n\
         const box = new Box(9);",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");

    let h = s.act(&id, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    assert_eq!(h.body["state"], "hibernated");
    let hib = &h.body["hibernation"];
    assert_eq!(hib["method"], "per-language", "{hib}");
    assert!(
        hib["method_reason"].as_str().unwrap().contains("CRIU"),
        "{hib}"
    );
    for lost in ["gen", "sock", "th"] {
        assert!(has(&report_names(hib, &py, "lost"), lost), "{lost}: {hib}");
    }

    // Nothing of it runs: its cgroups are gone, so it holds no memory.
    let dirs = cgroup_dirs(s.data_dir.path(), &id);
    assert!(!dirs.is_empty());
    for d in &dirs {
        assert!(!Path::new(d).exists(), "cgroup {d} still exists");
    }
    // Idempotent, and code cannot run meanwhile.
    let again = s.act(&id, "hibernate").await;
    assert_eq!(
        (again.status, again.body["state"].as_str()),
        (200, Some("hibernated"))
    );
    let e = s
        .post(&format!("/v1/sandboxes/{id}/execute"), json!({"code": "1"}))
        .await;
    assert_eq!(e.status, 409, "{}", e.text);
    assert!(e.body["message"].as_str().unwrap().contains("hibernated"));
    let l = s.admin("GET", "/v1/sandboxes?state=hibernated", None).await;
    assert_eq!(l.body.as_array().unwrap().len(), 1, "{}", l.text);

    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "running");
    let rep = &r.body["restore"];
    let py_restored = report_names(rep, &py, "restored");
    for n in [
        "np",
        "pd",
        "os",
        "i",
        "s",
        "l",
        "d",
        "arr",
        "df",
        "sq",
        "Point",
        "pt",
        "/home/user/work",
    ] {
        assert!(has(&py_restored, n), "python {n} not restored: {rep}");
    }
    let py_lost = report_names(rep, &py, "lost");
    for n in ["gen", "sock", "th"] {
        assert!(has(&py_lost, n), "python {n} not reported lost: {rep}");
    }
    let sh_restored = report_names(rep, &sh, "restored");
    for n in ["v", "XV", "greet", "ll", "/tmp"] {
        assert!(has(&sh_restored, n), "bash {n} not restored: {rep}");
    }
    let js_restored = report_names(rep, &js, "restored");
    for n in ["a", "c", "inc", "Box", "box"] {
        assert!(has(&js_restored, n), "javascript {n} not restored: {rep}");
    }

    // Item by item, in the relaunched sandbox.
    let ex = run_in(
        &s,
        &id,
        &py,
        "print(i, s, l, d, int(arr.sum()), df['b'].tolist(), sq(7), pt.norm(), isinstance(pt, Point), \
         np.__name__, pd.__name__, os.getcwd())\nprint(open('/home/user/kept.txt').read())",
    )
    .await;
    assert_eq!(
        stdout(&ex),
        "42 héllo [1, 2, 3] {'k': 'v'} 499999500000 ['x', 'y', 'z'] 49 5 True numpy pandas /home/user/work\nfile kept\n",
        "{ex}"
    );
    // The execution count goes on from where it was.
    assert_eq!(ex["execution_count"], 2, "{ex}");
    let ex = run_in(
        &s,
        &id,
        &sh,
        "echo \"$v|$XV|$(greet you)|$(ll)|$PWD\"; bash -c 'echo child:$XV'",
    )
    .await;
    assert_eq!(
        stdout(&ex),
        "a b|exported|hi you|aliased|/tmp\nchild:exported\n",
        "{ex}"
    );
    let ex = run_in(
        &s,
        &id,
        &js,
        "[a, c.k[1], inc(1), box.get(), box instanceof Box].join(',')",
    )
    .await;
    assert_eq!(
        ex["results"][0]["data"]["text/plain"], "'1,2,2,9,true'",
        "{ex}"
    );

    // Hibernated time is metered on its own.
    let project = r.body["project"].as_str().unwrap().to_string();
    let u = s
        .admin("GET", &format!("/v1/projects/{project}/usage"), None)
        .await;
    let row = u.body["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sandbox_id"] == id)
        .unwrap()
        .clone();
    assert!(
        row["hibernated_seconds"].as_f64().unwrap() > 0.0,
        "{}",
        u.text
    );
    assert!(u.body["totals"]["hibernated_seconds"].as_f64().unwrap() > 0.0);
    // The agent deleted its saved state once restored (the host never walks that tree).
    let ex = run_in(
        &s,
        &id,
        &sh,
        "[ -e /run/lizard/hibernate ] && echo kept || echo gone",
    )
    .await;
    assert_eq!(stdout(&ex).trim(), "gone", "{ex}");
}

#[tokio::test]
async fn hibernated_sandbox_survives_a_server_kill_9_and_kill_removes_it() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let ex = s
        .run(
            &id,
            json!({"code": "import numpy as np\nbig = np.ones(1000, dtype=np.float64)\nword = 'survivor'\nopen('/home/user/f.txt','w').write('on disk')"}),
        )
        .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    // From paused, too.
    let p = s.act(&id, "pause").await;
    assert_eq!(p.status, 200);
    let h = s.act(&id, "hibernate").await;
    assert_eq!(
        (h.status, h.body["state"].as_str()),
        (200, Some("hibernated")),
        "{}",
        h.text
    );

    let dir = s.stop("-KILL");
    let s = Server::start_in(dir, &[]);
    let g = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(g.body["state"], "hibernated", "{}", g.text);
    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ex = s
        .run(
            &id,
            json!({"code": "print(word, int(big.sum()), open('/home/user/f.txt').read())"}),
        )
        .await;
    assert_eq!(stdout(&ex), "survivor 1000 on disk\n", "{ex}");

    // Hibernate again and kill: the writable layer goes with it.
    let h = s.act(&id, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    let sandbox_dir = s.data_dir.path().join("sandboxes").join(&id);
    assert!(sandbox_dir.join("disk/upper").is_dir());
    let k = s
        .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(k.status, 204, "{}", k.text);
    assert!(
        !sandbox_dir.exists(),
        "the hibernated sandbox's files stayed"
    );
}

#[tokio::test]
async fn paused_sandboxes_hibernate_after_the_idle_period() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--hibernate-after 1s");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&id, json!({"code": "kept = 'idle'"})).await;
    // A running sandbox is never hibernated for idleness.
    let running = s.create(&s.admin_key.clone(), json!({})).await;
    let p = s.act(&id, "pause").await;
    assert_eq!(p.status, 200);
    let hibernated = s
        .reaches_state(&id, "hibernated", Duration::from_secs(60))
        .await;
    assert!(hibernated, "the paused sandbox was not hibernated");
    let g = s
        .admin("GET", &format!("/v1/sandboxes/{running}"), None)
        .await;
    assert_eq!(g.body["state"], "running");
    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        stdout(&s.run(&id, json!({"code": "print(kept)"})).await),
        "idle\n"
    );
}

#[tokio::test]
async fn concurrent_hibernate_and_resume_calls_are_safe() {
    lizard_test_support::needs_root!();
    concurrent_calls_keep_state("hibernate", 6).await;
}

#[tokio::test]
async fn memory_pressure_hibernates_paused_sandboxes_only() {
    lizard_test_support::needs_root!();
    // A threshold above any machine's memory: the server always sees pressure.
    let s = Server::with_flags("--hibernate-after 0 --hibernate-below-mb 1000000000");
    let paused = s.create(&s.admin_key.clone(), json!({})).await;
    let running = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&paused, json!({"code": "v = 'pressure'"})).await;
    let p = s.act(&paused, "pause").await;
    assert_eq!(p.status, 200);
    let hibernated = s
        .reaches_state(&paused, "hibernated", Duration::from_secs(60))
        .await;
    assert!(
        hibernated,
        "memory pressure did not hibernate the paused sandbox"
    );
    let g = s
        .admin("GET", &format!("/v1/sandboxes/{running}"), None)
        .await;
    assert_eq!(g.body["state"], "running");
    let r = s.act(&paused, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        stdout(&s.run(&paused, json!({"code": "print(v)"})).await),
        "pressure\n"
    );
}

/// A hibernated sandbox comes back with its volumes mounted where they were (the relaunch binds
/// them again) and the volume's data and the writable layer's files both there.
#[tokio::test]
async fn hibernation_keeps_volumes_mounted() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let r = s
        .post(
            "/v1/volumes",
            json!({"name": "hib-vol", "size_limit_bytes": 64 * 1024 * 1024}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = s
        .create(
            &s.admin_key.clone(),
            json!({"volumes": [{"name": "hib-vol", "mount_path": "/data/v"}]}),
        )
        .await;
    let (out, ex) = s
        .sh(
            &id,
            "echo kept > /data/v/a && echo layer > /home/user/b && echo ok",
        )
        .await;
    assert_eq!(out, "ok\n", "{ex}");
    for op in ["hibernate", "resume"] {
        let r = s.act(&id, op).await;
        assert_eq!(r.status, 200, "{op}: {}", r.text);
    }
    let (out, ex) = s
        .sh(
            &id,
            "cat /data/v/a /home/user/b; echo more >> /data/v/a && echo ok",
        )
        .await;
    assert_eq!(out, "kept\nlayer\nok\n", "{ex}");
    let r = s
        .admin("DELETE", "/v1/volumes/hib-vol?force=true", None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
}
