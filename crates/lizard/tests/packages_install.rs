//! `pip install` and `npm install` in sandboxes with no egress at all, from real local registries
//! (pypiserver and verdaccio on the host's loopback, `common::registries`) through the package
//! registries' mirror (`lizard serve --package-registry`): as the seeds do it, from a Python cell
//! and from the shell; a second sandbox's install of the same packages does not reach the
//! registry again (the host's shared cache).

mod common;

use common::registries::*;
use common::*;
use serde_json::json;

#[tokio::test]
async fn pip_and_npm_install_without_egress_and_the_second_sandbox_installs_from_the_cache() {
    lizard_test_support::needs_root!();
    let py_pkg = TestPackage::new("lizard-probe", "1.0.0", "VALUE = 42\n");
    let js_pkg = TestPackage::new("lizard-probe-js", "1.0.0", "module.exports = 42;\n");
    let pypi = PyPiServer::start(std::slice::from_ref(&py_pkg));
    let npm = NpmRegistry::start(std::slice::from_ref(&js_pkg));
    // The mirror's `pypi` is the registry's root (pip asks for `/simple/<name>/`).
    let pypi_root = pypi.url().trim_end_matches("/simple").to_string();
    let registries = format!("pypi={pypi_root},npm={}", npm.url());
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--package-registry", &registries],
    );
    let wheel = format!("GET /packages/{}", py_pkg.wheel_file());
    let tarball = format!("GET {}", js_pkg.tarball_path());

    let mut ids = Vec::new();
    for round in ["first", "second"] {
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        ids.push(id.clone());
        // As the seeds do it: pip from a Python cell, then the package is importable there.
        let ex = s
            .run(
                &id,
                json!({"code": "import subprocess\n\
                    r = subprocess.run(['pip', 'install', '--disable-pip-version-check', 'lizard-probe'], capture_output=True, text=True)\n\
                    print(r.returncode, r.stdout[-2000:], r.stderr[-2000:])\n\
                    import lizard_probe\n\
                    lizard_probe.VALUE"}),
            )
            .await;
        assert!(ex["error"].is_null(), "{round} sandbox, pip: {ex}");
        assert_eq!(
            ex["results"][0]["data"]["text/plain"], "42",
            "{round} sandbox, pip: {ex}"
        );
        // npm from the shell, then Node requires it.
        let (out, ex) = s
            .sh(
                &id,
                "mkdir -p /tmp/js && cd /tmp/js && npm install --no-progress lizard-probe-js 2>&1 | tail -5; \
                 node -e \"console.log('value', require('lizard-probe-js'))\"",
            )
            .await;
        assert!(out.contains("value 42"), "{round} sandbox, npm: {ex}");
        // Each download left the machine once: the second sandbox's came from the cache.
        assert_eq!(
            pypi.requests_matching(&wheel),
            1,
            "after the {round} sandbox: {:?}",
            pypi.requests()
        );
        assert_eq!(
            npm.requests_matching(&tarball),
            1,
            "after the {round} sandbox: {:?}",
            npm.requests()
        );
    }
    // The operator sees it in /metrics.
    let r = s.admin("GET", "/metrics", None).await;
    let hits: f64 = r
        .text
        .lines()
        .find_map(|l| l.strip_prefix("lizard_package_cache_hits_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(hits >= 2.0, "{}", r.text);
    // Each sandbox's traffic through the mirror is metered (its final sample at the kill):
    // pip's index page and wheel, npm's metadata and tarball at least.
    for id in &ids {
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204, "{}", r.text);
    }
    let r = s.admin("GET", "/v1/projects/default/usage", None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for id in &ids {
        let u = r.body["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["sandbox_id"] == json!(id))
            .unwrap_or_else(|| panic!("no usage for {id}: {}", r.text));
        assert!(u["mirror_requests"].as_u64().unwrap() >= 4, "{u}");
        assert!(u["mirror_bytes"].as_u64().unwrap() > 1000, "{u}");
    }
    assert!(
        r.body["totals"]["mirror_bytes"].as_u64().unwrap() > 2000,
        "{}",
        r.text
    );
    let m = s.admin("GET", "/metrics", None).await;
    assert!(
        m.text
            .contains("lizard_sandbox_mirror_bytes_total{project=\"default\"}"),
        "{}",
        m.text
    );
}

/// `uv` in a sandbox with no egress at all: `pip install uv` (a real published wheel, from the
/// local registry through the mirror), then `uv venv` and `uv pip install` of a package — uv
/// finds the mirror through the sandbox's `UV_DEFAULT_INDEX`, with no flag — and the package is
/// importable from that environment.
#[tokio::test]
async fn uv_installs_without_egress_through_the_mirror() {
    lizard_test_support::needs_root!();
    let py_pkg = TestPackage::new("lizard-probe-uv", "1.0.0", "VALUE = 7\n");
    let pypi = PyPiServer::start_with(std::slice::from_ref(&py_pkg), &[published_wheel("uv-")]);
    let pypi_root = pypi.url().trim_end_matches("/simple").to_string();
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--package-registry", &format!("pypi={pypi_root}")],
    );
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let (out, ex) = s
        .sh(
            &id,
            "pip install --disable-pip-version-check --quiet uv 2>&1 | tail -3; \
             export PATH=$HOME/.local/bin:$PATH; \
             uv venv --quiet /tmp/uvenv 2>&1 | tail -3; \
             VIRTUAL_ENV=/tmp/uvenv uv pip install --quiet lizard-probe-uv 2>&1 | tail -3; \
             /tmp/uvenv/bin/python -c 'import lizard_probe_uv; print(\"value\", lizard_probe_uv.VALUE)'",
        )
        .await;
    assert!(out.contains("value 7"), "{ex}");
    // The package came from the local registry, through the mirror (nothing else is reachable;
    // uv may read a wheel's metadata with a range request before fetching it whole).
    let wheel = format!("GET /packages/{}", py_pkg.wheel_file());
    assert!(pypi.requests_matching(&wheel) >= 1, "{:?}", pypi.requests());
}
