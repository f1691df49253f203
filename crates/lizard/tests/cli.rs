//! The `lizard` CLI's client commands and the Rust client, against a real server.

mod common;

use common::*;
use futures_util::StreamExt;
use lizard_proto::{ExecuteRequest, ExecutionEvent};
use std::time::{Duration, Instant};

#[tokio::test]
async fn sandbox_run_and_context_commands() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let (code, id, err) = s.cli(&["sandbox", "create", "--metadata", "who=cli"], None);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();
    let (_, list, _) = s.cli(&["sandbox", "list"], None);
    assert!(list.contains(&id), "{list}");
    let (_, json, _) = s.cli(
        &["sandbox", "list", "--json", "--metadata", "who=cli"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["sandbox_id"], id.as_str());
    // Network and disk options reach the create request.
    let (code, json, err) = s.cli(
        &[
            "sandbox",
            "create",
            "--json",
            "--allow",
            "10.9.8.0/24",
            "--allow",
            "10.9.7.6:443",
            "--disk-mb",
            "512",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["network"]["egress"]["allow"],
        serde_json::json!(["10.9.8.0/24", "10.9.7.6:443"])
    );
    assert_eq!(v["limits"]["disk_mb"], 512);
    let net_id = v["sandbox_id"].as_str().unwrap();
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{net_id}"), None)
        .await;
    assert_eq!(r.status, 204);

    assert_eq!(s.cli(&["run", "--sandbox", &id, "x = 42"], None).0, 0);
    let (code, out, _) = s.cli(&["run", "--sandbox", &id, "print(x * 2)\nx"], None);
    assert_eq!((code, out.as_str()), (0, "84\n42\n"));
    let (code, _, err) = s.cli(&["run", "--sandbox", &id, "1/0"], None);
    assert_eq!(code, 1);
    assert!(err.contains("ZeroDivisionError"), "{err}");
    let (code, out, _) = s.cli(
        &["run", "--sandbox", &id, "--language", "bash", "-"],
        Some("echo piped"),
    );
    assert_eq!((code, out.as_str()), (0, "piped\n"));
    let (code, out, _) = s.cli(
        &["run", "--sandbox", &id, "--language", "sh", "exit 3"],
        None,
    );
    assert_eq!(code, 1, "{out}");

    let (code, ctx, _) = s.cli(
        &["context", "create", "--sandbox", &id, "--language", "js"],
        None,
    );
    assert_eq!(code, 0);
    let ctx = ctx.trim();
    let (_, out, _) = s.cli(&["run", "--sandbox", &id, "--context", ctx, "1 + 1"], None);
    assert_eq!(out, "2\n");
    let (_, list, _) = s.cli(&["context", "list", "--sandbox", &id], None);
    assert!(list.contains(ctx) && list.contains("javascript"), "{list}");
    assert_eq!(
        s.cli(&["context", "delete", "--sandbox", &id, ctx], None).0,
        0
    );

    assert_eq!(s.cli(&["sandbox", "pause", &id], None).0, 0);
    let (_, info, _) = s.cli(&["sandbox", "info", &id], None);
    assert!(info.contains("paused"), "{info}");
    assert_eq!(s.cli(&["sandbox", "resume", &id], None).0, 0);
    let (_, usage, _) = s.cli(&["usage", "--project", "default"], None);
    assert!(usage.contains(&id) && usage.contains("total"), "{usage}");
    assert_eq!(s.cli(&["sandbox", "kill", &id], None).0, 0);
    let (code, _, err) = s.cli(&["sandbox", "info", &id], None);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "errors are one line: {err}");
    assert!(err.contains("not_found"), "{err}");

    // Without --sandbox, run uses a fresh sandbox and kills it.
    // (The context's kernel runs as a uid of its own: the first context's is 2000.)
    let (code, out, _) = s.cli(&["run", "import os; print(os.getuid())"], None);
    assert_eq!((code, out.as_str()), (0, "2000\n"));
    let (_, list, _) = s.cli(&["sandbox", "list", "--json"], None);
    assert_eq!(list.trim(), "[]");
}

#[tokio::test]
async fn rust_client_streams_events_as_they_happen() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let c = lizard_client::Client::new(&format!("http://{}", s.addr), &s.admin_key).unwrap();
    let sb = c.create_sandbox(&Default::default()).await.unwrap();
    let t0 = Instant::now();
    let mut events = c
        .execute(
            &sb.sandbox_id,
            &ExecuteRequest {
                code: "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')"
                    .into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut first_at = None;
    let mut end_at = None;
    while let Some(f) = events.next().await {
        match f.unwrap().event {
            ExecutionEvent::Stdout { text } if text.contains("first") => {
                first_at = Some(t0.elapsed())
            }
            ExecutionEvent::End { .. } => end_at = Some(t0.elapsed()),
            _ => {}
        }
    }
    let (first, end) = (first_at.unwrap(), end_at.unwrap());
    assert!(
        end - first > Duration::from_millis(1000),
        "first {first:?}, end {end:?}"
    );

    let ex = c
        .run(
            &sb.sandbox_id,
            &ExecuteRequest {
                code: "1 + 1".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ex.main_result().unwrap().data["text/plain"], "2");
    let err = c.get_sandbox("nope").await.unwrap_err();
    assert_eq!(err.code(), Some(lizard_proto::ErrorCode::NotFound));
    c.kill_sandbox(&sb.sandbox_id).await.unwrap();
}

#[tokio::test]
async fn exec_and_files_commands() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let (_, id, _) = s.cli(&["sandbox", "create"], None);
    let id = id.trim().to_string();
    let (code, out, err) = s.cli(
        &["exec", "--sandbox", &id, "echo hi; echo oops >&2; exit 7"],
        None,
    );
    assert_eq!((code, out.as_str(), err.as_str()), (7, "hi\n", "oops\n"));
    let (code, out, _) = s.cli(
        &[
            "exec",
            "--sandbox",
            &id,
            "--env",
            "A=1",
            "--cwd",
            "/tmp",
            "echo $A $PWD",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (0, "1 /tmp\n"));
    assert_eq!(
        s.cli(
            &["files", "put", "--sandbox", &id, "dir/note.txt"],
            Some("some text\n")
        )
        .0,
        0
    );
    let (_, out, _) = s.cli(&["files", "cat", "--sandbox", &id, "dir/note.txt"], None);
    assert_eq!(out, "some text\n");
    let (_, out, _) = s.cli(&["files", "ls", "--sandbox", &id, "dir"], None);
    assert!(out.contains("note.txt") && out.contains("10"), "{out}");
    assert_eq!(
        s.cli(&["files", "rm", "--sandbox", &id, "dir/note.txt"], None)
            .0,
        0
    );
    let (code, _, err) = s.cli(&["files", "cat", "--sandbox", &id, "dir/note.txt"], None);
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");
}

#[tokio::test]
async fn shell_and_host_commands() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let (_, id, _) = s.cli(&["sandbox", "create"], None);
    let id = id.trim().to_string();
    // Piped keystrokes reach an interactive bash on a terminal; its exit status is ours.
    let (code, out, err) = s.cli(
        &["shell", "--sandbox", &id],
        Some("echo $((6*7)); tty -s && echo on-a-tty\nexit 3\n"),
    );
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("42") && out.contains("on-a-tty"), "{out}");
    let (code, out, _) = s.cli(&["sandbox", "host", &id, "8000"], None);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("http://{}/v1/sandboxes/{id}/ports/8000", s.addr)
    );
}

/// `lizard volume create|list|info|delete` and `lizard sandbox create --volume NAME:/PATH[:ro]`.
#[tokio::test]
async fn volume_commands() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let (code, vid, err) = s.cli(&["volume", "create", "cli-vol", "--size", "16M"], None);
    assert_eq!(code, 0, "{err}");
    let vid = vid.trim().to_string();
    assert!(vid.starts_with("vol_"), "{vid}");
    let (code, _, err) = s.cli(&["volume", "create", "cli-vol"], None);
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");
    let (_, list, _) = s.cli(&["volume", "list"], None);
    assert!(
        list.contains("cli-vol") && list.contains("16.0 MiB"),
        "{list}"
    );

    let (code, id, err) = s.cli(&["sandbox", "create", "--volume", "cli-vol:/data/v"], None);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();
    let (code, _, err) = s.cli(&["exec", "--sandbox", &id, "echo hi > /data/v/f"], None);
    assert_eq!(code, 0, "{err}");
    let (_, info, _) = s.cli(&["sandbox", "info", &id], None);
    assert!(
        info.contains("cli-vol") && info.contains("/data/v"),
        "{info}"
    );
    let (_, info, _) = s.cli(&["volume", "info", "cli-vol", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["mounted_by"][0], id.as_str());

    let (code, ro, err) = s.cli(
        &[
            "sandbox",
            "create",
            "--volume",
            &format!("{vid}:/mnt/ro:ro"),
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let ro: serde_json::Value = serde_json::from_str(&ro).unwrap();
    assert_eq!(ro["volumes"][0]["read_only"], true);
    let (code, _, _) = s.cli(
        &["sandbox", "create", "--volume", "cli-vol:/mnt/x:rx"],
        None,
    );
    assert_ne!(code, 0);

    let (code, _, err) = s.cli(&["volume", "delete", "cli-vol"], None);
    assert_ne!(code, 0);
    assert!(
        err.contains("volume_in_use") || err.contains("mounted"),
        "{err}"
    );
    let (code, usage, err) = s.cli(&["usage", "--project", "default"], None);
    assert_eq!(code, 0, "{err}");
    assert!(usage.contains(&vid) && usage.contains("GiB·h"), "{usage}");
    let (code, _, err) = s.cli(&["volume", "delete", "cli-vol", "--force"], None);
    assert_eq!(code, 0, "{err}");
    let (_, list, _) = s.cli(&["volume", "list", "--json"], None);
    assert_eq!(list.trim(), "[]");
}

#[tokio::test]
async fn sandbox_hibernate_and_resume_print_the_reports() {
    lizard_test_support::needs_root!();
    // The per-language report (its `lost` lines), asked for: CRIU is the default.
    let s = Server::with_flags("--criu none");
    let (code, id, err) = s.cli(&["sandbox", "create"], None);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();
    let (code, _, err) = s.cli(
        &["run", "--sandbox", &id, "kept = 1\ngen = (i for i in [1])"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = s.cli(&["sandbox", "hibernate", &id], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("per-language"), "{out}");
    assert!(out.contains("lost    gen: generator"), "{out}");
    let (_, out, _) = s.cli(&["sandbox", "hibernate", &id], None);
    assert!(out.contains("already hibernated"), "{out}");
    let (code, json, err) = s.cli(&["sandbox", "resume", &id, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["state"], "running");
    assert_eq!(v["restore"]["contexts"][0]["lost"][0]["name"], "gen");
    let (code, out, _) = s.cli(&["run", "--sandbox", &id, "print(kept)"], None);
    assert_eq!((code, out.as_str()), (0, "1\n"));
}

#[tokio::test]
async fn secret_commands() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let r = s
        .post("/v1/projects", serde_json::json!({"name": "cli-sec"}))
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    const VALUE: &str = "tok-3f9a0c1d-never-shown";

    // The value comes from stdin (one trailing newline dropped) or a file, never an argument.
    let (code, out, err) = s.cli(
        &["secret", "set", "cli-sec", "token"],
        Some(&format!("{VALUE}\n")),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "created secret token of project cli-sec");
    let (code, out, err) = s.cli(
        &["secret", "set", "cli-sec", "token", "--json"],
        Some(VALUE),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], "token");
    assert!(v.get("value").is_none() && !out.contains(VALUE), "{out}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "other-value\r\n").unwrap();
    let path = file.path().to_str().unwrap();
    let (code, out, err) = s.cli(
        &["secret", "set", "cli-sec", "other", "--value-file", path],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("created"), "{out}");

    // Names and times only.
    let (code, list, err) = s.cli(&["secret", "list", "cli-sec"], None);
    assert_eq!(code, 0, "{err}");
    assert!(list.contains("token") && list.contains("other"), "{list}");
    assert!(
        !list.contains(VALUE) && !list.contains("other-value"),
        "{list}"
    );
    let (_, list, _) = s.cli(&["secret", "list", "cli-sec", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{list}");
    assert!(
        names.contains(&"token") && names.contains(&"other"),
        "{list}"
    );
    assert!(
        !list.contains(VALUE) && !list.contains("\"value\""),
        "{list}"
    );

    // The server's checks reach the user.
    let (code, _, err) = s.cli(&["secret", "set", "cli-sec", "a b"], Some("x"));
    assert_ne!(code, 0);
    assert!(err.contains("a b"), "{err}");
    let (code, _, err) = s.cli(&["secret", "set", "cli-sec", "empty"], Some("\n"));
    assert_ne!(code, 0);
    assert!(err.contains("value"), "{err}");
    let (code, _, err) = s.cli(&["secret", "list", "no-such-project"], None);
    assert_ne!(code, 0);
    assert!(err.contains("no-such-project"), "{err}");

    // `--inject` at create: the templates, never the values, come back.
    let (v, json) = s.cli_json(&[
        "sandbox",
        "create",
        "--project",
        "cli-sec",
        "--allow",
        "api.example.com",
        "--inject",
        "api.example.com=Authorization: Bearer ${secret:token}",
        "--inject",
        "api.example.com=X-Other:${secret:other}",
    ]);
    assert_eq!(
        v["network"]["inject"],
        serde_json::json!([{"host": "api.example.com", "headers": {
            "Authorization": "Bearer ${secret:token}",
            "X-Other": "${secret:other}",
        }}])
    );
    assert!(
        !json.contains(VALUE) && !json.contains("other-value"),
        "{json}"
    );
    let id = v["sandbox_id"].as_str().unwrap().to_string();
    let (_, info, _) = s.cli(&["sandbox", "info", &id], None);
    assert!(
        info.contains("inject    api.example.com: Authorization: Bearer ${secret:token}"),
        "{info}"
    );
    // A rule change keeps the injection unless told otherwise.
    let (v, out) = s.cli_json(&[
        "sandbox",
        "network",
        &id,
        "--allow",
        "api.example.com",
        "--allow",
        "pypi.org",
    ]);
    assert_eq!(
        v["egress"]["allow"],
        serde_json::json!(["api.example.com", "pypi.org"])
    );
    assert_eq!(v["inject"][0]["host"], "api.example.com", "{out}");
    let (v, _) = s.cli_json(&[
        "sandbox",
        "network",
        &id,
        "--inject",
        "pypi.org=X-Token: $${secret:other}",
    ]);
    assert_eq!(
        v["inject"],
        serde_json::json!([{"host": "pypi.org", "headers": {"X-Token": "$${secret:other}"}}])
    );
    assert_eq!(v["egress"]["allow"][1], "pypi.org");
    let (v, out) = s.cli_json(&["sandbox", "network", &id, "--no-inject"]);
    assert!(v.get("inject").is_none(), "{out}");

    // An unknown secret, a host the egress does not allow, a malformed --inject: refused.
    for (args, want) in [
        (
            vec![
                "--allow",
                "api.example.com",
                "--inject",
                "api.example.com=A: ${secret:nope}",
            ],
            "nope",
        ),
        (
            vec![
                "--allow",
                "pypi.org",
                "--inject",
                "api.example.com=A: ${secret:token}",
            ],
            "api.example.com",
        ),
        (
            vec!["--allow", "api.example.com", "--inject", "api.example.com"],
            "HOST=HEADER",
        ),
        (
            vec!["--inject", "api.example.com=A: ${secret:token}"],
            "egress",
        ),
    ] {
        let mut all = vec!["sandbox", "create", "--project", "cli-sec"];
        all.extend(args);
        let (code, _, err) = s.cli(&all, None);
        assert_ne!(code, 0, "{all:?}");
        assert!(err.contains(want), "{all:?}: {err}");
        assert!(!err.contains(VALUE), "{err}");
    }

    let (code, _, err) = s.cli(&["secret", "delete", "cli-sec", "token"], None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = s.cli(&["secret", "delete", "cli-sec", "token"], None);
    assert_ne!(code, 0);
    assert!(err.contains("token"), "{err}");
    let (_, list, _) = s.cli(&["secret", "list", "cli-sec", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{list}");
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(r.status, 204);
}
