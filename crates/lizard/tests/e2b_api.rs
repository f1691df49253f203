//! E2B's control plane where E2B's own SDKs (the `tests/e2b` suite) cannot look closely: the
//! metrics series behind `getMetrics`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

async fn metrics(s: &Server, key: &str, id: &str, query: &str) -> (u16, Value) {
    raw(
        &s.addr,
        "GET",
        &format!("/sandboxes/{id}/metrics{query}"),
        &[("X-API-Key", key), ("Connection", "close")],
        "",
    )
    .await
}

/// `GET /sandboxes/{id}/metrics` is the usage sampler's series: a sample per interval with the CPU
/// used since the one before (a busy loop shows), memory against the sandbox's limit and its disk
/// image in use against `disk_mb`; `start`/`end` select a window; a bad query is a 400.
#[tokio::test]
async fn e2b_metrics_are_a_series_of_samples() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0 --sample-interval-s 1");
    let key = s.project_key("metrics").await;
    let (id, _token) = e2b_create(&s, &key).await;
    let busy = s
        .run(
            &id,
            json!({"code": "import time\nt = time.time()\nwhile time.time() - t < 3: pass"}),
        )
        .await;
    assert_eq!(busy["status"], "ok", "{busy}");

    // The sampler adds a sample a second: poll (with a generous deadline) until there are a few.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut series = Vec::new();
    let mut enough = false;
    while !enough && std::time::Instant::now() < deadline {
        let (status, m) = metrics(&s, &key, &id, "").await;
        assert_eq!(status, 200, "{m}");
        series = m.as_array().cloned().unwrap_or_default();
        enough = series.len() >= 4;
        if !enough {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(enough, "the series did not grow: {series:#?}");
    let unix: Vec<u64> = series
        .iter()
        .map(|m| m["timestampUnix"].as_u64().unwrap())
        .collect();
    assert!(unix.windows(2).all(|w| w[0] <= w[1]), "{unix:?}");
    for m in &series {
        assert_eq!(m["memTotal"], 1024 * 1024 * 1024u64, "{m}");
        assert_eq!(m["diskTotal"], 1024 * 1024 * 1024u64, "{m}");
        assert!(m["memUsed"].as_u64().unwrap() > 0, "{m}");
        assert!(m["diskUsed"].as_u64().unwrap() > 0, "{m}");
        let pct = m["cpuUsedPct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&pct), "{m}");
        assert!(m["timestamp"].as_str().unwrap().ends_with('Z'), "{m}");
    }
    assert!(
        series
            .iter()
            .any(|m| m["cpuUsedPct"].as_f64().unwrap() > 20.0),
        "the busy loop does not show: {series:#?}"
    );

    // A window: from the newest sample's second on; and one before any sample.
    let last = *unix.last().unwrap();
    let (status, from_last) = metrics(&s, &key, &id, &format!("?start={last}")).await;
    assert_eq!(status, 200, "{from_last}");
    let from_last = from_last.as_array().unwrap();
    assert!(!from_last.is_empty());
    assert!(from_last
        .iter()
        .all(|m| m["timestampUnix"].as_u64().unwrap() >= last));
    let (status, none) = metrics(&s, &key, &id, "?end=1").await;
    assert_eq!((status, none), (200, json!([])));

    for bad in ["?start=soon", "?nope=1"] {
        let (status, body) = metrics(&s, &key, &id, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let other = s.project_key("someone-else").await;
    let (status, _) = metrics(&s, &other, &id, "").await;
    assert_eq!(status, 404, "another project's sandbox is not found");
}

/// E2B sandbox traffic is no existence oracle: without the sandbox's token (none, a wrong one, or
/// another sandbox's), an existing, a killed and a never-created id all get the same 401 with the
/// same body. With its token, a killed sandbox's traffic says it is gone (502).
#[tokio::test]
async fn sandbox_traffic_does_not_tell_which_ids_exist() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let key = s.project_key("oracle").await;
    let (live, live_token) = e2b_create(&s, &key).await;
    let (dead, dead_token) = e2b_create(&s, &key).await;
    let (status, _) = raw(
        &s.addr,
        "DELETE",
        &format!("/sandboxes/{dead}"),
        &[("X-API-Key", &key), ("Connection", "close")],
        "",
    )
    .await;
    assert_eq!(status, 204);
    let traffic = |id: String, token: Option<String>| {
        let addr = s.addr.clone();
        async move {
            let mut h = vec![
                ("E2b-Sandbox-Id", id.as_str()),
                ("E2b-Sandbox-Port", "49999"),
                ("Connection", "close"),
            ];
            if let Some(t) = &token {
                h.push(("X-Access-Token", t.as_str()));
            }
            raw(&addr, "GET", "/health", &h, "").await
        }
    };
    let mut answers = Vec::new();
    for id in [
        live.clone(),
        dead.clone(),
        "i0000000000000000000".to_string(),
    ] {
        for token in [None, Some("wrong".to_string()), Some(live_token.clone())] {
            if token.as_deref() == Some(live_token.as_str()) && id == live {
                continue;
            }
            let (status, body) = traffic(id.clone(), token).await;
            let message = body["message"].as_str().unwrap_or_default().to_string();
            answers.push((id.clone(), status, message));
        }
    }
    for (id, status, message) in &answers {
        assert_eq!(*status, 401, "{id}: {answers:?}");
        assert_eq!(message, &answers[0].2, "{id}: {answers:?}");
    }
    // The owner of a killed sandbox's token learns that it is gone; its live one answers.
    let (status, _) = traffic(dead.clone(), Some(dead_token)).await;
    assert_eq!(status, 502);
    let (status, _) = traffic(live.clone(), Some(live_token)).await;
    assert_eq!(status, 200);
}

/// E2B's multi-fork (`count` > 1) is one snapshot cloned `count` times in a task of its own: a
/// caller that hangs up right after sending it still gets every fork started (in its project) and
/// the passing snapshot deleted — none is left behind, to E2B's list or Lizard's.
#[tokio::test]
async fn a_multi_fork_leaves_no_snapshot_behind_when_the_caller_hangs_up() {
    lizard_test_support::needs_root!();
    use tokio::io::AsyncWriteExt;
    let s = Server::with_flags("--pool-size 0");
    let key = s.project_key("forks").await;
    let (id, _token) = e2b_create(&s, &key).await;
    let body = r#"{"count":3,"timeout":120}"#;
    let mut tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let req = format!(
        "POST /sandboxes/{id}/fork HTTP/1.1\r\nHost: lizard\r\nX-API-Key: {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    // Hang up once the fork is under way (its passing snapshot exists, or a fork already runs).
    let started = eventually(Duration::from_secs(60), || async {
        let snaps = s.admin("GET", "/v1/snapshots?project=forks", None).await;
        let sandboxes = s.admin("GET", "/v1/sandboxes?project=forks", None).await;
        snaps.body.as_array().is_some_and(|a| !a.is_empty())
            || sandboxes.body.as_array().is_some_and(|a| a.len() > 1)
    })
    .await;
    assert!(started, "the fork never started");
    drop(tcp);

    let done = eventually(Duration::from_secs(120), || async {
        let sandboxes = s.admin("GET", "/v1/sandboxes?project=forks", None).await;
        let snapshots = s.admin("GET", "/v1/snapshots?project=forks", None).await;
        sandboxes.body.as_array().map(Vec::len) == Some(4)
            && snapshots.body.as_array().is_some_and(Vec::is_empty)
    })
    .await;
    let sandboxes = s.admin("GET", "/v1/sandboxes?project=forks", None).await;
    let snapshots = s.admin("GET", "/v1/snapshots?project=forks", None).await;
    assert!(
        done,
        "sandboxes {} snapshots {}",
        sandboxes.body, snapshots.body
    );
    // Each fork is an ordinary sandbox of the project with the source's state.
    for sb in sandboxes.body.as_array().unwrap() {
        let sid = sb["sandbox_id"].as_str().unwrap();
        if sid != id {
            let ex = s.run(sid, json!({"code": "print(1 + 1)"})).await;
            assert_eq!(stdout(&ex), "2\n", "{ex}");
        }
    }
    // E2B's list does not show the passing snapshot either, and its usage row is kept.
    let (status, listed) = raw(
        &s.addr,
        "GET",
        "/snapshots",
        &[("X-API-Key", &key), ("Connection", "close")],
        "",
    )
    .await;
    assert_eq!((status, listed), (200, json!([])));
}

/// E2B's lifecycle calls as E2B's SDKs rely on them: `connect` with a timeout only ever extends a
/// running sandbox's time (a shorter one leaves its end as it was); `setTimeout(0)` is accepted and
/// ends its time now, so its timeout action (here a kill) follows.
#[tokio::test]
async fn connect_only_extends_and_a_zero_timeout_ends_the_sandbox_now() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let key = s.project_key("lifecycle").await;
    let (id, _) = e2b_create(&s, &key).await;
    let call = |method: &'static str, path: String, body: &'static str| {
        let (addr, key) = (s.addr.clone(), key.clone());
        async move {
            raw(
                &addr,
                method,
                &path,
                &[
                    ("X-API-Key", key.as_str()),
                    ("Content-Type", "application/json"),
                    ("Connection", "close"),
                ],
                body,
            )
            .await
        }
    };
    let end = |info: &Value| info["endAt"].as_str().unwrap().to_string();
    let (status, before) = call("GET", format!("/sandboxes/{id}"), "").await;
    assert_eq!(status, 200, "{before}");
    // A shorter timeout than the one in force: the end stays.
    let (status, c) = call(
        "POST",
        format!("/sandboxes/{id}/connect"),
        r#"{"timeout":5}"#,
    )
    .await;
    assert_eq!(status, 200, "{c}");
    let (_, after) = call("GET", format!("/sandboxes/{id}"), "").await;
    assert_eq!(
        end(&after),
        end(&before),
        "connect shortened the sandbox's time"
    );
    // A longer one extends it.
    let (status, c) = call(
        "POST",
        format!("/sandboxes/{id}/connect"),
        r#"{"timeout":7200}"#,
    )
    .await;
    assert_eq!(status, 200, "{c}");
    let (_, longer) = call("GET", format!("/sandboxes/{id}"), "").await;
    assert!(end(&longer) > end(&before), "{longer} vs {before}");
    // setTimeout(0): accepted, and the sandbox goes.
    let (status, t) = call(
        "POST",
        format!("/sandboxes/{id}/timeout"),
        r#"{"timeout":0}"#,
    )
    .await;
    assert_eq!(status, 204, "{t}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, _) = call("GET", format!("/sandboxes/{id}"), "").await;
        if status == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still there 60 s after setTimeout(0): {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A key's `e2b_<hex>` form (what E2B's SDKs from about Python 2.24 / JS 2.26 to mid-2026 insist
/// on before sending anything) is the same key, on E2B's control plane and on Lizard's API alike;
/// a made-up one is a 401.
#[tokio::test]
async fn a_keys_e2b_form_is_the_same_key() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let key = s.project_key("e2bform").await;
    let e2b = format!("e2b_{}", key.strip_prefix("lz_").unwrap());
    let (id, _) = e2b_create(&s, &e2b).await;
    let r = s
        .req(Some(&e2b), "GET", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["project"], "e2bform");
    let made_up = format!("e2b_{}", "0".repeat(64));
    let (status, _) = raw(
        &s.addr,
        "GET",
        "/v2/sandboxes",
        &[("X-API-Key", made_up.as_str()), ("Connection", "close")],
        "",
    )
    .await;
    assert_eq!(status, 401);
}

/// E2B's `Sandbox.list` as its SDKs page through it: `limit` pages with `X-Next-Token` until the
/// last one, newest first or `order=asc`, `startedAfter` and `template` filter (a cleanup job that
/// filters by template must not list, and then kill, other sandboxes), and a filter it cannot read
/// is a 400 rather than ignored.
#[tokio::test]
async fn list_pages_orders_and_filters_as_e2b_does() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let key = s.project_key("listing").await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(e2b_create(&s, &key).await.0);
        // Distinct start times (milliseconds) for the order and the startedAfter filter.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let list = |q: String| {
        let (s, key) = (&s, key.clone());
        async move {
            let r = s
                .req(Some(&key), "GET", &format!("/v2/sandboxes?{q}"), None)
                .await;
            assert_eq!(r.status, 200, "{q}: {}", r.text);
            let ids: Vec<String> = r
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["sandboxID"].as_str().unwrap().to_string())
                .collect();
            let next = r
                .headers
                .get("x-next-token")
                .map(|v| v.to_str().unwrap().to_string());
            (ids, next, r.body)
        }
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let (all, next, body) = list(String::new()).await;
    assert_eq!(all, newest_first);
    assert!(next.is_none());
    // One at a time, following the token.
    let (mut paged, mut token) = (Vec::new(), None::<String>);
    loop {
        let q = match &token {
            Some(t) => format!("limit=1&nextToken={t}"),
            None => "limit=1".to_string(),
        };
        let (page, next, _) = list(q).await;
        assert!(page.len() <= 1);
        paged.extend(page);
        match next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(paged, newest_first);
    let (asc, _, _) = list("order=asc".into()).await;
    assert_eq!(asc, ids);
    // startedAfter: the second sandbox's start (an RFC 3339 time E2B's answer gave) and later.
    let started = body.as_array().unwrap()[1]["startedAt"]
        .as_str()
        .unwrap()
        .to_string();
    let q: String = form_urlencoded_pair("startedAfter", &started);
    let (after, _, _) = list(q).await;
    assert_eq!(after, newest_first[..2].to_vec());
    // template: `base` is the default template every one of these runs; another has none.
    let (base, _, _) = list("template=base".into()).await;
    assert_eq!(base, newest_first);
    let (none, _, _) = list("template=someone-elses-template".into()).await;
    assert!(none.is_empty(), "{none:?}");
    for bad in ["startedAfter=yesterday", "nextToken=garbage"] {
        let r = s
            .req(Some(&key), "GET", &format!("/v2/sandboxes?{bad}"), None)
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
    }
}

fn form_urlencoded_pair(k: &str, v: &str) -> String {
    let enc: String = v
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    format!("{k}={enc}")
}
