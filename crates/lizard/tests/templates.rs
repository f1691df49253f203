//! User templates end to end: a Dockerfile built through the API inside a build sandbox, a
//! sandbox from it whose kernel sees the build's packages, files and environment; cache hits,
//! project isolation, delete; build steps that try to reach the host; hostile entries planted by
//! a build step, imported without following anything.

mod common;

use common::registries::TestPackage;
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A server whose template builds have no egress and that keeps no pool.
fn offline_builder() -> Server {
    Server::with_flags("--template-build-egress none --pool-size 0")
}

/// A build context (tar.gz) made by the host's Python: the files given, and a tiny pure-Python
/// wheel `tinypkg-1.0-py3-none-any.whl` when `wheel`.
fn context(files: &[(&str, &str)], wheel: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    if wheel {
        let tiny = TestPackage::new("tinypkg", "1.0", "VALUE = 'tiny-42'\n");
        registries::write_wheels(Path::new("python3"), &[tiny], dir.path());
    }
    let script = r#"
import sys, os, tarfile, base64
d = sys.argv[1]
if sys.argv[2] == "1":
    with tarfile.open(os.path.join(d, "bundle.tar.gz"), "w:gz") as t:
        inner = os.path.join(d, "..", "inner.txt")
        open(inner, "w").write("unpacked by ADD\n")
        t.add(inner, arcname="inner.txt")
        os.remove(inner)
out = os.path.join(d, "..", os.path.basename(d) + ".tgz")
with tarfile.open(out, "w:gz") as t:
    for n in sorted(os.listdir(d)):
        t.add(os.path.join(d, n), arcname=n)
sys.stdout.write(base64.b64encode(open(out, "rb").read()).decode())
os.remove(out)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir.path())
        .arg(if wheel { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// POST /v1/templates streamed as NDJSON: every event.
async fn build(s: &Server, key: &str, body: Value) -> (u16, Vec<Value>, String) {
    let headers = vec![
        ("authorization", format!("Bearer {key}")),
        ("content-type", "application/json".to_string()),
        ("accept", "application/x-ndjson".to_string()),
    ];
    let r = send(
        &s.addr,
        "POST",
        "/v1/templates",
        &headers,
        body.to_string().into_bytes(),
    )
    .await;
    let events = r
        .text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (r.status, events, r.text)
}

fn last(events: &[Value]) -> &Value {
    events.last().expect("at least one event")
}

fn python(s: &Server, id: &str, code: &str) -> impl std::future::Future<Output = Value> {
    let (s, id, code) = (
        Server::client_for(&s.addr, &s.admin_key),
        id.to_string(),
        code.to_string(),
    );
    async move { s.run(&id, json!({"code": code})).await }
}

const DOCKERFILE: &str = r#"# A user template over the default one.
FROM code-interpreter-v1
ARG GREETING_WORD=hello
USER user
WORKDIR /home/user/app
COPY data.txt ./
COPY tinypkg-1.0-py3-none-any.whl /home/user/wheels/
ADD bundle.tar.gz /home/user/bundle/
RUN pip install --no-index --no-deps \
      /home/user/wheels/tinypkg-1.0-py3-none-any.whl && \
    echo "built as $(id -un)"
ENV GREETING="${GREETING_WORD} template"
"#;

#[tokio::test]
async fn a_dockerfile_template_is_built_used_cached_isolated_and_deleted() {
    lizard_test_support::needs_root!();
    let s = offline_builder();
    let ka = s.project_key("alpha").await;
    let kb = s.project_key("beta").await;
    let body = json!({
        "name": "mytpl",
        "dockerfile": DOCKERFILE,
        "context": context(&[("data.txt", "from the context\n")], true),
    });

    // Bad requests are typed 4xx before anything is built.
    for (body, status, code) in [
        (
            json!({"name": "x", "dockerfile": "FROM code-interpreter-v1\n", "context": "!!"}),
            400,
            "invalid_request",
        ),
        (
            json!({"name": "x", "dockerfile": "FROM code-interpreter-v1\n", "public": true}),
            403,
            "permission_denied",
        ),
        (
            json!({"name": "x", "dockerfile": "FROM debian:buster\n"}),
            400,
            "invalid_dockerfile",
        ),
        (
            json!({"name": "../x", "dockerfile": "FROM code-interpreter-v1\n"}),
            400,
            "invalid_request",
        ),
        (json!({"name": "x"}), 400, "invalid_request"),
        (
            json!({"name": "x", "dockerfile": "FROM code-interpreter-v1\n", "nope": 1}),
            400,
            "invalid_request",
        ),
    ] {
        let r = s.post_as(&ka, "/v1/templates", body.clone()).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (status, Some(code)),
            "{body}: {}",
            r.text
        );
    }
    // Dockerfile errors are 400s that name the line, before anything is built.
    let r = s
        .post_as(
            &ka,
            "/v1/templates",
            json!({"name": "bad", "dockerfile": "FROM code-interpreter-v1\n\nEXPOSE 80\n"}),
        )
        .await;
    r.expect_error(400, "invalid_dockerfile");
    assert!(
        r.body["message"].as_str().unwrap().contains("line 3"),
        "{}",
        r.text
    );
    let r = s
        .post_as(
            &ka,
            "/v1/templates",
            json!({"name": "bad", "dockerfile": "FROM nope\n"}),
        )
        .await;
    r.expect_error(400, "invalid_dockerfile");
    let r = s
        .post_as(
            &ka,
            "/v1/templates",
            json!({"name": "code-interpreter-v1", "dockerfile": "FROM code-interpreter-v1\n"}),
        )
        .await;
    assert_eq!(r.status, 409, "built-in names are reserved: {}", r.text);

    let (status, events, text) = build(&s, &ka, body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let done = last(&events);
    assert_eq!(done["type"], "done", "{text}");
    assert_eq!(done["template"]["state"], "ready", "{text}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "step" && e["name"].as_str().unwrap().starts_with("RUN pip")),
        "{text}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "log" && e["text"].as_str().unwrap().contains("built as user")),
        "{text}"
    );
    let key = done["template"]["key"].as_str().unwrap().to_string();

    // A sandbox from it: the kernel imports the package, reads the copied file, sees the ENV and
    // starts in the WORKDIR.
    let id = s.create(&ka, json!({"template": "mytpl"})).await;
    let ex = python(
        &s,
        &id,
        "import os, tinypkg\nprint(tinypkg.VALUE, open('data.txt').read().strip(), os.environ['GREETING'], os.getcwd(), open('/home/user/bundle/inner.txt').read().strip())",
    )
    .await;
    assert_eq!(
        stdout(&ex).trim(),
        "tiny-42 from the context hello template /home/user/app unpacked by ADD",
        "{ex}"
    );

    // The same build again is a cache hit: at once, the same key.
    let r = s.post_as(&ka, "/v1/templates", body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.body["state"].as_str(), r.body["key"].as_str()),
        (Some("ready"), Some(key.as_str()))
    );

    // Listed and shown to its project, with the built-ins.
    let r = s.req(Some(&ka), "GET", "/v1/templates", None).await;
    let names: Vec<&str> = r.body["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"mytpl") && names.contains(&"code-interpreter-v1"),
        "{}",
        r.text
    );
    let r = s.req(Some(&ka), "GET", "/v1/templates/mytpl", None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["base"], "code-interpreter-v1");
    assert!(
        r.body["build_log"]
            .as_str()
            .unwrap()
            .contains("built as user"),
        "{}",
        r.text
    );
    assert_eq!(r.body["versions"].as_array().unwrap().len(), 1);
    // What the build installed, listed inside the build sandbox: the wheel `pip install`ed by
    // the RUN step (into the user site), and the base's Debian and Python packages.
    let pk = &r.body["packages"];
    assert_eq!(pk["python"]["tinypkg"], "1.0", "{}", r.text);
    assert!(pk["python"]["numpy"].is_string(), "{}", r.text);
    assert!(pk["debian"]["bash"].is_string(), "{}", r.text);
    assert!(
        pk["node"].as_object().is_some_and(|n| !n.is_empty()),
        "{}",
        r.text
    );
    // The built-in's, from its host-side build.
    let r = s
        .req(Some(&ka), "GET", "/v1/templates/code-interpreter-v1", None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.body["packages"]["python"]["numpy"].is_string()
            && r.body["packages"]["debian"]["python3"].is_string(),
        "{}",
        r.text
    );
    // Not in lists.
    let r = s.req(Some(&ka), "GET", "/v1/templates", None).await;
    assert!(!r.text.contains("\"packages\""), "{}", r.text);

    // An admin may publish one to every project: another project sees and uses it, but cannot
    // delete it.
    let r = s
        .post(
            "/v1/templates",
            json!({"name": "shared", "project": "alpha", "public": true,
                        "dockerfile": "FROM code-interpreter-v1\nENV SHARED=yes\n"}),
        )
        .await;
    assert!(r.status == 202 || r.status == 200, "{}", r.text);
    let ready = eventually(std::time::Duration::from_secs(120), || async {
        s.req(Some(&kb), "GET", "/v1/templates/shared", None)
            .await
            .body["state"]
            == "ready"
    })
    .await;
    assert!(ready, "the public template is not ready");
    let shared = s.create(&kb, json!({"template": "shared"})).await;
    let (out, _) = s.sh(&shared, "echo $SHARED").await;
    assert_eq!(out.trim(), "yes");
    let r = s
        .req(Some(&kb), "DELETE", "/v1/templates/shared", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);

    // Another project can neither list, see, use nor delete it: 404s, no existence oracle.
    let r = s.req(Some(&kb), "GET", "/v1/templates", None).await;
    assert!(!r.text.contains("mytpl"), "{}", r.text);
    let r = s.req(Some(&kb), "GET", "/v1/templates/mytpl", None).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = s
        .post_as(&kb, "/v1/sandboxes", json!({"template": "mytpl"}))
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = s
        .req(Some(&kb), "DELETE", "/v1/templates/mytpl", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    // Built-ins cannot be deleted.
    let r = s
        .req(
            Some(&ka),
            "DELETE",
            "/v1/templates/code-interpreter-v1",
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);

    // Delete: gone for new sandboxes; the running one keeps working on its layers.
    let r = s
        .req(Some(&ka), "DELETE", "/v1/templates/mytpl", None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let r = s
        .post_as(&ka, "/v1/sandboxes", json!({"template": "mytpl"}))
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    let ex = python(&s, &id, "import tinypkg; print(tinypkg.VALUE)").await;
    assert_eq!(stdout(&ex).trim(), "tiny-42", "{ex}");
    s.kill_all().await;
    let r = s
        .req(Some(&ka), "DELETE", "/v1/templates/mytpl", None)
        .await;
    assert_eq!(r.status, 404);
    let r = s
        .req(Some(&ka), "DELETE", "/v1/templates/shared", None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    // Once no sandbox uses them, their files go (at the next sweep: a delete, a build or a
    // restart).
    assert!(
        layers(s.data_dir.path()).is_empty(),
        "{:?}",
        layers(s.data_dir.path())
    );
    // Builds and deletes are audited (a streamed build's answer names it without being read).
    let r = s.admin("GET", "/v1/audit?limit=200", None).await;
    assert!(
        r.text.contains("template.build") && r.text.contains("template.delete"),
        "{}",
        r.text
    );
    assert!(r.text.contains("\"mytpl\""), "{}", r.text);
}

/// The template layers of a data dir (`templates/.user/<id>/<key>/layer`).
fn layers(data: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(data.join("templates/.user"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for v in std::fs::read_dir(t.path()).into_iter().flatten().flatten() {
            if v.path().join("layer").is_dir() {
                out.push(v.path().join("layer"));
            }
        }
    }
    out
}

#[tokio::test]
async fn build_steps_are_sandboxed_and_hostile_layers_import_safely() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags(
        "--template-build-egress none --pool-size 0 --template-build-max-files 5000",
    );
    let k = s.project_key("gamma").await;
    let host_data = s.data_dir.path().display().to_string();
    let port = s.addr.rsplit(':').next().unwrap().to_string();

    // A step that reaches for the host fails like any sandbox code: the server's own port (on
    // the sandbox's own loopback, and at slirp's old gateway address), the metadata address.
    let dockerfile = "FROM code-interpreter-v1\nUSER user\nCOPY probe.py /home/user/\nRUN python3 /home/user/probe.py\nRUN python3 -c \"import socket; socket.create_connection(('169.254.169.254', 80), timeout=3)\"\n";
    let probe_py = format!(
        "import socket\nfor host, port in [('127.0.0.1', {port}), ('10.0.2.2', {port}), ('169.254.169.254', 80)]:\n    try:\n        socket.create_connection((host, port), timeout=3).close()\n        print('REACHED', host)\n    except OSError as e:\n        print('blocked', host, e)\n"
    );
    let (status, events, text) = build(
        &s,
        &k,
        json!({"name": "netprobe", "dockerfile": dockerfile, "context": context(&[("probe.py", &probe_py)], false)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let end = last(&events);
    assert_eq!(end["type"], "error", "{text}");
    assert_eq!(end["error"]["code"], "build_failed", "{text}");
    assert!(
        end["error"]["message"].as_str().unwrap().contains("line 5"),
        "{text}"
    );
    assert_eq!(text.matches("blocked").count(), 3, "{text}");
    assert!(!text.contains("REACHED"), "{text}");
    let r = s.req(Some(&k), "GET", "/v1/templates/netprobe", None).await;
    assert_eq!(r.body["state"], "failed", "{}", r.text);

    // Hostile entries planted by a build step.
    let plant = format!(
        "set -e; cd /home/user; ln -s /etc/shadow shadow; ln -s {host_data} hostdata; ln -s / root; \
         mkfifo fifo; echo x > suid; chmod 4755 suid; echo data > a; ln a hard; \
         mkdir many; i=0; while [ $i -lt 50 ]; do : > many/f$i; i=$((i+1)); done"
    );
    let dockerfile = format!("FROM code-interpreter-v1\nUSER user\nRUN {plant}\n");
    let (status, events, text) =
        build(&s, &k, json!({"name": "hostile", "dockerfile": dockerfile})).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(last(&events)["type"], "done", "{text}");
    let r = s.req(Some(&k), "GET", "/v1/templates/hostile", None).await;
    let log = r.body["build_log"].as_str().unwrap();
    assert!(log.contains("/home/user/fifo: a fifo"), "{log}");
    assert!(log.contains("/home/user/suid: its setuid"), "{log}");
    // On the host: links stay links (never followed), no fifo, no setuid bit, owners in the
    // template's range.
    let ls = layers(s.data_dir.path());
    assert_eq!(ls.len(), 1, "{ls:?}");
    let home = ls[0].join("home/user");
    for (link, to) in [
        ("shadow", "/etc/shadow"),
        ("hostdata", host_data.as_str()),
        ("root", "/"),
    ] {
        let m = std::fs::symlink_metadata(home.join(link)).unwrap();
        assert!(m.file_type().is_symlink(), "{link}");
        assert_eq!(std::fs::read_link(home.join(link)).unwrap(), Path::new(to));
    }
    assert!(std::fs::symlink_metadata(home.join("fifo")).is_err());
    let suid = std::fs::metadata(home.join("suid")).unwrap();
    assert_eq!(suid.permissions().mode() & 0o7000, 0);
    assert!((100_000..165_536).contains(&suid.uid()), "{}", suid.uid());
    assert_eq!(
        std::fs::read_to_string(home.join("hard")).unwrap(),
        "data\n"
    );
    // Inside a sandbox of it: the links lead into the sandbox's own tree only.
    let id = s.create(&k, json!({"template": "hostile"})).await;
    let (out, _) = s
        .sh(&id, "cat ~/shadow 2>&1 | head -c 200; echo; ls ~/hostdata/ 2>&1 | head -n 3; ls -A ~/root/ | head -n 40 | tr '\\n' ' '")
        .await;
    assert!(
        out.contains("Permission denied") || out.contains("No such file"),
        "{out}"
    );
    assert!(
        out.contains("No such file"),
        "the host's data dir is not there: {out}"
    );
    assert!(
        !out.contains("admin-key") && !out.contains("lizard.db"),
        "{out}"
    );
    s.kill_all().await;

    // A layer over the import limits fails the build with a clear error (and leaves nothing).
    let dockerfile = "FROM code-interpreter-v1\nUSER user\nRUN mkdir /home/user/lots && cd /home/user/lots && seq 1 6000 | xargs touch\n";
    let (_, events, text) =
        build(&s, &k, json!({"name": "toomany", "dockerfile": dockerfile})).await;
    let end = last(&events);
    assert_eq!(end["type"], "error", "{text}");
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 5000 entries"),
        "{text}"
    );
    assert_eq!(
        layers(s.data_dir.path()).len(),
        1,
        "only the hostile template's layer"
    );
    // No build sandbox is left running.
    let r = s.admin("GET", "/v1/sandboxes", None).await;
    assert_eq!(r.body.as_array().map(Vec::len), Some(0), "{}", r.text);
    for name in ["hostile", "netprobe", "toomany"] {
        s.req(Some(&k), "DELETE", &format!("/v1/templates/{name}"), None)
            .await;
    }
}

/// `lizard template build --dockerfile … --context … --build-arg …`, `list`, `delete`: through
/// the API, progress streamed, exit status 1 when the build fails.
#[tokio::test]
async fn the_cli_builds_lists_and_deletes_templates() {
    lizard_test_support::needs_root!();
    let s = offline_builder();
    let work = tempfile::tempdir().unwrap();
    let ctx = work.path().join("ctx");
    std::fs::create_dir(&ctx).unwrap();
    std::fs::write(ctx.join("note.txt"), "from the cli\n").unwrap();
    let df = work.path().join("Dockerfile");
    std::fs::write(
        &df,
        "FROM code-interpreter-v1\nARG WORD=x\nUSER user\nCOPY note.txt /home/user/\nRUN echo \"word=$WORD\"\n",
    )
    .unwrap();
    let lizard = |args: &[&str]| s.cli(args, None);
    let (code, out, err) = lizard(&[
        "template",
        "build",
        "--dockerfile",
        df.to_str().unwrap(),
        "--context",
        ctx.to_str().unwrap(),
        "--build-arg",
        "WORD=bird",
        "clitpl",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("word=bird"), "{out}");
    assert!(
        err.contains("RUN echo") && err.contains("template clitpl ready"),
        "{err}"
    );
    let (code, out, _) = lizard(&["template", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("clitpl") && out.contains("code-interpreter-v1"),
        "{out}"
    );
    let id = s
        .create(&s.admin_key.clone(), json!({"template": "clitpl"}))
        .await;
    let (out, _) = s.sh(&id, "cat /home/user/note.txt").await;
    assert_eq!(out.trim(), "from the cli");
    s.kill_all().await;

    std::fs::write(&df, "FROM code-interpreter-v1\nUSER user\nRUN exit 3\n").unwrap();
    let (code, _, err) = lizard(&[
        "template",
        "build",
        "--dockerfile",
        df.to_str().unwrap(),
        "failing",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("line 3") && err.contains("exit code 3"),
        "{err}"
    );
    std::fs::write(&df, "FROM code-interpreter-v1\nCMD [\"x\"]\n").unwrap();
    let (code, _, err) = lizard(&[
        "template",
        "build",
        "--dockerfile",
        df.to_str().unwrap(),
        "bad",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("line 2") && err.contains("CMD"), "{err}");

    for name in ["clitpl", "failing"] {
        let (code, _, err) = lizard(&["template", "delete", name]);
        assert_eq!(code, 0, "{err}");
    }
    let (_, out, _) = lizard(&["template", "list"]);
    assert!(!out.contains("clitpl"), "{out}");
}

/// `POST /v1/templates {name, from_sandbox}`: a running sandbox's files become a template; the
/// sandbox keeps running with its state; another project cannot snapshot it.
#[tokio::test]
async fn a_template_from_a_running_sandbox() {
    lizard_test_support::needs_root!();
    let s = offline_builder();
    let ka = s.project_key("delta").await;
    let kb = s.project_key("epsilon").await;
    let id = s.create(&ka, json!({})).await;
    let ex = python(
        &s,
        &id,
        "x = 41\nopen('/home/user/snap.txt', 'w').write('snapped\\n')\nprint('ok')",
    )
    .await;
    assert_eq!(stdout(&ex).trim(), "ok", "{ex}");
    let r = s
        .post_as(
            &kb,
            "/v1/templates",
            json!({"name": "snap", "from_sandbox": id}),
        )
        .await;
    assert_eq!(r.status, 404, "another project's sandbox: {}", r.text);
    let r = s
        .post_as(
            &ka,
            "/v1/templates",
            json!({"name": "snap", "from_sandbox": id}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["state"], "ready", "{}", r.text);
    assert_eq!(r.body["base"], "code-interpreter-v1", "{}", r.text);
    // The sandbox was only frozen: its kernel state is still there.
    let ex = python(&s, &id, "print(x + 1)").await;
    assert_eq!(stdout(&ex).trim(), "42", "{ex}");
    let id2 = s.create(&ka, json!({"template": "snap"})).await;
    let (out, _) = s.sh(&id2, "cat /home/user/snap.txt").await;
    assert_eq!(out.trim(), "snapped");
    s.kill_all().await;
    let r = s.req(Some(&ka), "DELETE", "/v1/templates/snap", None).await;
    assert_eq!(r.status, 204, "{}", r.text);
}

/// A streaming client that goes away cancels the build only when it asked to
/// (`cancel_on_disconnect`): its build sandbox goes, the template is `failed`. SSE framing.
#[tokio::test]
async fn a_build_is_cancelled_on_disconnect_only_when_asked() {
    lizard_test_support::needs_root!();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = offline_builder();
    let k = s.project_key("zeta").await;
    let body = json!({
        "name": "slow",
        "dockerfile": "FROM code-interpreter-v1\nUSER user\nRUN echo started; sleep 600\n",
        "cancel_on_disconnect": true,
    })
    .to_string();
    let mut tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let req = format!(
        "POST /v1/templates HTTP/1.1\r\nHost: lizard\r\nAuthorization: Bearer {k}\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !String::from_utf8_lossy(&seen).contains("started") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&seen)
        );
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(120), tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("event: step\r\n") || text.contains("event: step\n"),
        "{text}"
    );
    assert!(text.contains("data: {\"type\":\"step\""), "{text}");
    drop(tcp);
    let failed = eventually(std::time::Duration::from_secs(60), || async {
        let r = s.req(Some(&k), "GET", "/v1/templates/slow", None).await;
        r.body["state"] == "failed"
    })
    .await;
    assert!(failed, "the build was not cancelled");
    let r = s.req(Some(&k), "GET", "/v1/templates/slow", None).await;
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{}",
        r.text
    );
    let gone = eventually(std::time::Duration::from_secs(60), || async {
        s.admin("GET", "/v1/sandboxes", None)
            .await
            .body
            .as_array()
            .map(Vec::len)
            == Some(0)
    })
    .await;
    assert!(gone, "the build sandbox is still there");
    s.req(Some(&k), "DELETE", "/v1/templates/slow", None).await;
}

/// `FROM debian:bookworm`: the built-in Debian base (no Python, no Node) is built by the host
/// builder on first use (cached in the templates data dir afterwards), the steps run in a build
/// sandbox of it (RUN as its root, COPY), and a sandbox of the result serves commands, files and
/// Bash while Python and JavaScript get a typed `unsupported`.
#[tokio::test]
async fn a_template_from_debian_bookworm_runs_commands_without_python() {
    lizard_test_support::needs_root!();
    let s = offline_builder();
    let k = s.project_key("delta").await;
    let dockerfile = "FROM debian:bookworm\n\
        RUN mkdir -p /opt/app && echo \"made by $(id -u)\" > /opt/app/made && chown -R user:user /opt/app\n\
        COPY hello.sh /opt/app/\n\
        USER user\n\
        RUN sh /opt/app/hello.sh > /opt/app/out\n\
        ENV APP_MODE=debian\n";
    let (status, events, text) = build(
        &s,
        &k,
        json!({"name": "plain", "dockerfile": dockerfile,
               "context": context(&[("hello.sh", "echo \"hello from $(id -un)\"\n")], false)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(last(&events)["type"], "done", "{text}");
    let r = s.req(Some(&k), "GET", "/v1/templates/plain", None).await;
    assert_eq!(
        (r.body["state"].as_str(), r.body["base"].as_str()),
        (Some("ready"), Some("debian-bookworm")),
        "{}",
        r.text
    );
    // The base is a built-in now, listed as such.
    let r = s
        .req(Some(&k), "GET", "/v1/templates/debian-bookworm", None)
        .await;
    assert_eq!(
        (r.status, r.body["builtin"].as_bool()),
        (200, Some(true)),
        "{}",
        r.text
    );

    let id = s.create(&k, json!({"template": "plain"})).await;
    // A command, through the commands API.
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"cmd": "cat /opt/app/made /opt/app/out; echo \"$APP_MODE $(id -un)\"; \
                . /etc/os-release; echo $VERSION_CODENAME; command -v python3 node || echo none"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = r.body["stdout"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        out, "made by 0\nhello from user\ndebian user\nbookworm\nnone\n",
        "{}",
        r.text
    );
    // Files: written and read back through the files API.
    let path = format!("/v1/sandboxes/{id}/files?path=/home/user/n.txt");
    let auth = [("authorization", format!("Bearer {}", s.admin_key))];
    let r = send(&s.addr, "PUT", &path, &auth, b"file api\n".to_vec()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = send(&s.addr, "GET", &path, &auth, Vec::new()).await;
    assert_eq!((r.status, r.text.as_str()), (200, "file api\n"));
    // A Bash context.
    let (out, _) = s.sh(&id, "echo bash:$((6*7)) $(cat /opt/app/out)").await;
    assert!(out.contains("bash:42 hello from user"), "{out}");
    // Python and JavaScript: a clear typed error, not a hang or a 500.
    for lang in ["python", "javascript"] {
        let r = s
            .post(
                &format!("/v1/sandboxes/{id}/execute"),
                json!({"code": "1+1", "language": lang}),
            )
            .await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (501, Some("unsupported")),
            "{lang}: {}",
            r.text
        );
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains(&format!("no {lang} interpreter")),
            "{}",
            r.text
        );
    }
    s.kill_all().await;
    s.req(Some(&k), "DELETE", "/v1/templates/plain", None).await;
}

/// `RUN` without `USER` runs as the build sandbox's root: it writes outside the home (`/opt`),
/// and what a root step does to gain privileges — a setuid/setgid binary, a file capability
/// (`security.capability`), other extended attributes — never reaches the template: the import
/// strips the bits and the attributes (each named in the build log), on the host and in a sandbox.
#[tokio::test]
async fn root_build_steps_write_anywhere_and_their_privileges_are_stripped() {
    lizard_test_support::needs_root!();
    let s = offline_builder();
    let k = s.project_key("epsilon").await;
    // A v2 file capability granting cap_net_raw (effective): what `setcap cap_net_raw+ep` writes.
    let setcap = "import os\n\
        blob = (0x02000001).to_bytes(4, 'little') + (1 << 13).to_bytes(4, 'little') + bytes(12)\n\
        for name, value in [('security.capability', blob), ('user.lizard', b'planted'), ('trusted.x', b'y')]:\n\
        \x20   try:\n\
        \x20       os.setxattr('/opt/x/suid', name, value)\n\
        \x20       print('set', name)\n\
        \x20   except OSError as e:\n\
        \x20       print('refused', name, e.errno)\n";
    let dockerfile = "FROM code-interpreter-v1\n\
        RUN mkdir /opt/x && echo hi > /opt/x/f && id -u > /opt/x/uid && echo root-etc > /etc/lizard-root-step\n\
        RUN cp /bin/true /opt/x/suid && chmod 6755 /opt/x/suid && mkdir /opt/x/sgid && chmod 2775 /opt/x/sgid && stat -c '%a' /opt/x/suid\n\
        COPY setcap.py /tmp/\n\
        RUN python3 /tmp/setcap.py\n";
    let (status, events, text) = build(
        &s,
        &k,
        json!({"name": "rooty", "dockerfile": dockerfile,
               "context": context(&[("setcap.py", setcap)], false)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(last(&events)["type"], "done", "{text}");
    // The root step did set the bits (and the user xattr) inside the build sandbox.
    assert!(text.contains("6755"), "{text}");
    assert!(text.contains("set user.lizard"), "{text}");
    let r = s.req(Some(&k), "GET", "/v1/templates/rooty", None).await;
    let log = r.body["build_log"].as_str().unwrap();
    assert!(log.contains("/opt/x/suid: its setuid"), "{log}");

    // On the host: a plain file, no privilege bits, no extended attribute, owned in the
    // template's range (root inside = the range's first id).
    let ls = layers(s.data_dir.path());
    assert_eq!(ls.len(), 1, "{ls:?}");
    let suid = ls[0].join("opt/x/suid");
    let m = std::fs::symlink_metadata(&suid).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert_eq!(
        m.uid(),
        100_000,
        "root inside, shifted to the template range"
    );
    let xattrs = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(sorted(os.listxattr(sys.argv[1], follow_symlinks=False)))",
        ])
        .arg(&suid)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&xattrs.stdout).trim(), "[]");
    // A step's setgid directory loses its bit too.
    let sgid = std::fs::metadata(ls[0].join("opt/x/sgid")).unwrap();
    assert_eq!(sgid.permissions().mode() & 0o7777, 0o775);

    // In a sandbox of it: the root step's files, root's, without privileges.
    let id = s.create(&k, json!({"template": "rooty"})).await;
    let (out, _) = s
        .sh(
            &id,
            "cat /opt/x/f /opt/x/uid /etc/lizard-root-step; stat -c '%a %u' /opt/x/suid; \
             python3 -c \"import os; print(os.listxattr('/opt/x/suid'))\"",
        )
        .await;
    assert_eq!(out, "hi\n0\nroot-etc\n755 0\n[]\n");
    s.kill_all().await;
    s.req(Some(&k), "DELETE", "/v1/templates/rooty", None).await;
}
