//! Secrets that never enter the sandbox (issue #19 part 3): a project's secret, set write-only,
//! is added by the host's egress proxy to the sandbox's HTTPS requests to one host — which sees
//! it — while nothing inside the sandbox (its processes' environments and memory, its files)
//! ever holds the value; every use is in the audit log, by name only.
//!
//! The HTTPS server is "outside" ([`Outside`]: a network namespace of the test's own) with a
//! certificate of a test CA the server is told to trust (`--egress-ca`), reached by name
//! (`--egress-host`).

mod common;

use common::outside::Outside;
use common::*;
use serde_json::{json, Value};

/// An HTTPS server (args: cert, key, log file): answers every request `seen <path>` and appends
/// the request's `Authorization` header to the log file (one line each).
const HTTPS_SERVER: &str = r#"
import http.server, ssl, sys, threading
cert, key, log = sys.argv[1], sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        with open(log, 'a') as f:
            f.write((self.headers.get('Authorization') or '-') + '\n')
        body = ('seen ' + self.path).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(('0.0.0.0', 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

const SECRET: &str = "s3cr3t-Zq8vW2-never-inside";
const ROTATED: &str = "r0tated-Kp4xN7-never-inside";

struct Fixture {
    s: Server,
    key: String,
    outside: Outside,
    log: std::path::PathBuf,
    _certs: tempfile::TempDir,
}

/// A test CA and a leaf for `api.secret.test` (PEM files in a temporary directory).
fn certs() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "secrets test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["api.secret.test".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.path().join("leaf.key"), leaf_key.serialize_pem()).unwrap();
    let ca_path = dir.path().join("ca.pem");
    (dir, ca_path)
}

async fn fixture() -> Fixture {
    let (certs, ca) = certs();
    let log = certs.path().join("seen.log");
    std::fs::write(&log, "").unwrap();
    let outside = Outside::start(
        HTTPS_SERVER,
        &[
            certs.path().join("leaf.pem").to_str().unwrap(),
            certs.path().join("leaf.key").to_str().unwrap(),
            log.to_str().unwrap(),
        ],
    );
    let hosts = format!(
        "api.secret.test={ip},other.secret.test={ip}",
        ip = outside.ip
    );
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--egress-host", &hosts, "--egress-ca", ca.to_str().unwrap()],
    );
    let r = s
        .post(
            "/v1/projects",
            json!({"name": "vault", "allow_egress": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let key = r.body["api_key"].as_str().unwrap().to_string();
    Fixture {
        s,
        key,
        outside,
        log,
        _certs: certs,
    }
}

impl Fixture {
    /// `POST /v1/projects/vault/secrets` with the project's key and `body`.
    async fn post_secret(&self, body: Value) -> Resp {
        self.s
            .post_as(&self.key, "/v1/projects/vault/secrets", body)
            .await
    }

    /// Set the secret `token` to `value`.
    async fn set_secret(&self, value: &str) -> Resp {
        self.post_secret(json!({"name": "token", "value": value}))
            .await
    }

    /// Delete the secret `token` with the project's key, which must succeed.
    async fn delete_secret(&self) {
        let path = "/v1/projects/vault/secrets/token";
        let r = self.s.req(Some(&self.key), "DELETE", path, None).await;
        r.expect_status(204);
    }

    /// Create a sandbox with the project's key and `network`: the answer.
    async fn create_with(&self, network: Value) -> Resp {
        let body = json!({ "network": network });
        self.s.post_as(&self.key, "/v1/sandboxes", body).await
    }

    /// `PATCH /v1/sandboxes/{id}/network` with the project's key.
    async fn patch_network(&self, id: &str, network: Value) -> Resp {
        let path = format!("/v1/sandboxes/{id}/network");
        self.s
            .req(Some(&self.key), "PATCH", &path, Some(network))
            .await
    }

    /// GET `https://{host}:<the outside's port>{path}` from sandbox `id` (see [`get`]): what it
    /// printed, trimmed.
    async fn fetch(&self, id: &str, host: &str, path: &str) -> String {
        let url = format!("https://{host}:{}{path}", self.outside.port);
        stdout(&self.s.run(id, get(&url)).await).trim().to_string()
    }
}

/// Python: GET `url` with `Authorization: Bearer fake` (the sandbox's own guess), verifying TLS
/// with the sandbox's default trust; prints the status and body, or the error.
fn get(url: &str) -> Value {
    let code = format!(
        r#"import urllib.request
req = urllib.request.Request({url:?}, headers={{'Authorization': 'Bearer fake'}})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status, r.read().decode())
except Exception as e:
    print('error', type(e).__name__, e)
"#
    );
    json!({"code": code, "timeout_ms": 60000})
}

/// The `secret.use` events of the audit log once there are at least `n` (waiting up to 30 s: they
/// are written about once a second), checked to hold no secret value.
async fn secret_uses(f: &Fixture, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let audit = f.s.admin("GET", "/v1/audit", None).await;
        assert!(!audit.text.contains(SECRET), "{}", audit.text);
        let uses: Vec<Value> = audit
            .body
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] == "secret.use")
            .cloned()
            .collect();
        if uses.len() >= n || std::time::Instant::now() > deadline {
            return uses;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// How many requests a `secret.use` event stands for (its ` xN`, else one).
fn times(object: &str) -> u64 {
    object
        .split(" (sandbox")
        .next()
        .and_then(|head| head.rsplit_once(" x"))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(1)
}

fn seen(f: &Fixture) -> Vec<String> {
    std::fs::read_to_string(&f.log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Every byte of the memory of every process of sandbox `id` (read from the host: the test is
/// root), its processes' environments, and its writable layer's files: whether `needle` is in
/// any of them.
fn sandbox_holds(s: &Server, id: &str, needle: &[u8]) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut found = Vec::new();
    let has = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for pid in sandbox_pids(s, id) {
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if has(&env) {
                found.push(format!("environment of {pid}"));
            }
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        let Ok(mut mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
            continue;
        };
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
                continue;
            }
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            let mut buf = vec![0u8; (b - a) as usize];
            if mem.seek(SeekFrom::Start(a)).is_ok() && mem.read_exact(&mut buf).is_ok() && has(&buf)
            {
                found.push(format!("memory of {pid} at {range}"));
            }
        }
    }
    let upper = s.data_dir.path().join(format!("sandboxes/{id}/disk/upper"));
    let mut stack = vec![upper];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() && std::fs::read(e.path()).is_ok_and(|b| has(&b)) {
                found.push(format!("file {}", e.path().display()));
            }
        }
    }
    found
}

/// Assert that nothing inside sandbox `id` holds the secret `value` (see [`sandbox_holds`]).
#[track_caller]
fn assert_not_inside(s: &Server, id: &str, value: &str) {
    let holders = sandbox_holds(s, id, value.as_bytes());
    assert!(holders.is_empty(), "the secret is inside {id}: {holders:?}");
}

/// Assert that `r` (the answer to `request`) is a 400 whose message says `says`, and that it
/// does not hold `never`.
#[track_caller]
fn assert_refused(r: &Resp, request: &Value, says: &str, never: &str) {
    assert_eq!(r.status, 400, "{request}: {}", r.text);
    let message = r.body["message"].as_str().unwrap();
    assert!(message.contains(says), "{request}: {}", r.text);
    assert!(!r.text.contains(never), "{}", r.text);
}

/// The whole path: a secret set write-only (never in any answer), injected into the sandbox's
/// HTTPS requests to its host (which sees it) but not to another name of the same address, a
/// TLS connection the sandbox verifies with its own trust (the sandbox's CA), nothing of the
/// value in the sandbox (memory, environment, files), each use audited by name, a rotation
/// taking effect at the next rule change.
#[tokio::test]
async fn a_secret_reaches_its_host_and_nothing_inside_the_sandbox() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let r = f.set_secret(SECRET).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(!r.text.contains(SECRET), "{}", r.text);
    assert_eq!(r.body["name"], "token");
    let r =
        f.s.req(Some(&f.key), "GET", "/v1/projects/vault/secrets", None)
            .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body[0]["name"], "token");
    assert!(!r.text.contains(SECRET), "{}", r.text);
    let port = f.outside.port;
    let network = json!({
        "egress": {"allow": ["api.secret.test", "other.secret.test"]},
        "inject": [{"host": format!("api.secret.test:{port}"),
                    "headers": {"Authorization": "Bearer ${secret:token}"}}]
    });
    let id =
        f.s.create(&f.key, json!({ "network": network.clone() }))
            .await;
    assert_eq!(
        f.fetch(&id, "api.secret.test", "/hello?x=1").await,
        "200 seen /hello?x=1"
    );
    assert_eq!(seen(&f), vec![format!("Bearer {SECRET}")]);
    // Another name of the same address gets nothing: its TLS is the upstream's own, which the
    // sandbox does not trust (the test CA is the host's, not the sandbox's).
    let got = f.fetch(&id, "other.secret.test", "/x").await;
    assert!(got.starts_with("error"), "{got}");
    assert_eq!(seen(&f).len(), 1, "{:?}", seen(&f));
    // Nothing inside holds the value — where the sandbox's own header value is found (the search
    // does look at its memory).
    assert!(
        sandbox_holds(&f.s, &id, b"Bearer fake")
            .iter()
            .any(|w| w.starts_with("memory")),
        "the search does not see the kernel's memory"
    );
    assert_not_inside(&f.s, &id, SECRET);
    // Audited by name, never by value, with the execution it happened in (the key that ran it);
    // uses are written off the relay's path, within about a second.
    let uses = secret_uses(&f, 1).await;
    assert_eq!(uses.len(), 1, "{uses:?}");
    let object = uses[0]["object"].as_str().unwrap();
    assert!(
        object.contains("token -> api.secret.test GET /hello") && !object.contains("x=1"),
        "{object}"
    );
    let key_prefix = &f.s.admin_key[..8]; // `run` executes as admin
    assert!(
        object.contains("during 1 execution(s) since ") && object.contains(key_prefix),
        "{object}"
    );
    assert_eq!(uses[0]["key_prefix"], key_prefix, "{:?}", uses[0]);
    assert_eq!(uses[0]["project"], "vault");
    // A burst of requests is counted in a few events, not written one by one.
    let burst = format!(
        r#"import urllib.request
n = 0
for i in range(60):
    req = urllib.request.Request("https://api.secret.test:{port}/burst", headers={{'Authorization': 'Bearer fake'}})
    with urllib.request.urlopen(req, timeout=20) as r:
        n += r.status == 200
print(n)
"#
    );
    let ex =
        f.s.run(&id, json!({"code": burst, "timeout_ms": 120000}))
            .await;
    assert_eq!(stdout(&ex).trim(), "60", "{ex}");
    let mut counted = 0;
    for _ in 0..100 {
        let burst: Vec<String> = secret_uses(&f, 2)
            .await
            .iter()
            .filter_map(|e| e["object"].as_str())
            .filter(|o| o.contains("GET /burst"))
            .map(String::from)
            .collect();
        counted = burst.iter().map(|o| times(o)).sum::<u64>();
        if counted == 60 {
            assert!(burst.len() < 60, "{burst:?}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(counted, 60, "every request of the burst is counted");
    // A rotated value applies from the next rule change (here the same rules again).
    f.set_secret(ROTATED).await.expect_status(200);
    f.patch_network(&id, network).await.expect_status(200);
    assert_eq!(
        f.fetch(&id, "api.secret.test", "/again").await,
        "200 seen /again"
    );
    assert_eq!(seen(&f).last().unwrap(), &format!("Bearer {ROTATED}"));
    assert_not_inside(&f.s, &id, ROTATED);
    // A fork has the same rules and trusts the same CA (its layer is a copy).
    let r = f.s.act(&id, "fork").await;
    assert_eq!(r.status, 201, "{}", r.text);
    let fork = r.body["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(
        f.fetch(&fork, "api.secret.test", "/forked").await,
        "200 seen /forked"
    );
    assert_eq!(seen(&f).last().unwrap(), &format!("Bearer {ROTATED}"));
    assert_not_inside(&f.s, &fork, ROTATED);
}

/// Bad secrets and rules are typed errors that name what is wrong (never a value): a name or a
/// value that cannot be one, an unknown secret, a host the egress does not allow, injection
/// without egress, a reserved header; another project cannot see or delete the secrets; a
/// deleted secret cannot be used by a new sandbox.
#[tokio::test]
async fn secrets_and_rules_are_checked() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    for (body, says) in [
        (json!({"name": "a b", "value": "x"}), "secret name"),
        (
            json!({"name": "ok", "value": "line\r\nX-Evil: 1"}),
            "secret value",
        ),
        (json!({"name": "ok", "value": ""}), "secret value"),
        (json!({"name": "ok"}), "value"),
    ] {
        let r = f.post_secret(body.clone()).await;
        assert_refused(&r, &body, says, "X-Evil");
    }
    assert_eq!(f.set_secret(SECRET).await.status, 201);
    let rule = |host: &str, header: &str, value: &str| {
        json!({"egress": {"allow": ["api.secret.test"]},
               "inject": [{"host": host, "headers": {header: value}}]})
    };
    for (network, says) in [
        (
            rule("api.secret.test", "Authorization", "${secret:nope}"),
            "no secret \"nope\"",
        ),
        (
            rule("evil.test", "Authorization", "${secret:token}"),
            "not allowed by network.egress",
        ),
        (rule("api.secret.test", "Host", "${secret:token}"), "Host"),
        (rule("api.secret.test", "X-Key", "$oops"), "${secret:NAME}"),
        (
            json!({"inject": [{"host": "api.secret.test", "headers": {"A": "${secret:token}"}}]}),
            "needs network.egress",
        ),
    ] {
        let r = f.create_with(network.clone()).await;
        assert_refused(&r, &network, says, SECRET);
    }
    // Another project's key sees no such project.
    let other = f.s.project_key("other").await;
    for (method, path) in [
        ("GET", "/v1/projects/vault/secrets"),
        ("DELETE", "/v1/projects/vault/secrets/token"),
    ] {
        let r = f.s.req(Some(&other), method, path, None).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text);
    }
    f.delete_secret().await;
    let r = f
        .create_with(rule("api.secret.test", "Authorization", "${secret:token}"))
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    // The audit log has the set and the delete, by name.
    let audit = f.s.admin("GET", "/v1/audit", None).await;
    let actions: Vec<&str> = audit
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("secret."))
        .collect();
    assert!(
        actions.contains(&"secret.set") && actions.contains(&"secret.delete"),
        "{actions:?}"
    );
    assert!(!audit.text.contains(SECRET));
}

/// A PATCH that gives only the egress rules keeps the inject rules; a secret deleted while a
/// sandbox's rules name it costs that sandbox its injection at its next start (a resume here),
/// never its start or the rest of its egress.
#[tokio::test]
async fn a_deleted_secret_costs_only_its_injection() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    f.set_secret(SECRET).await.expect_status(201);
    let port = f.outside.port;
    let id =
        f.s.create(
            &f.key,
            json!({"network": {
                "egress": {"allow": ["api.secret.test"]},
                "inject": [{"host": format!("api.secret.test:{port}"),
                            "headers": {"Authorization": "Bearer ${secret:token}"}}]}}),
        )
        .await;
    let r = f
        .patch_network(
            &id,
            json!({"egress": {"allow": ["api.secret.test", "other.secret.test"]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["network"]["inject"][0]["host"],
        format!("api.secret.test:{port}"),
        "{}",
        r.text
    );
    assert_eq!(
        f.fetch(&id, "api.secret.test", "/one").await,
        "200 seen /one"
    );
    f.delete_secret().await;
    for op in ["hibernate", "resume"] {
        let r = f.s.act(&id, op).await;
        assert_eq!(r.status, 200, "{op}: {}", r.text);
    }
    // No injection now: the upstream's own certificate, which the sandbox does not trust.
    let got = f.fetch(&id, "api.secret.test", "/two").await;
    assert!(got.starts_with("error"), "{got}");
    assert_eq!(seen(&f), vec![format!("Bearer {SECRET}")]);
    // A PATCH naming the deleted secret is refused, and changes nothing.
    let r = f.patch_network(&id, json!({"egress": "all"})).await;
    assert_eq!(r.status, 400, "{}", r.text);
}
