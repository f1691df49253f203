//! The local package registries of the test harness (`common::registries`), on the host alone (no
//! sandbox): the real pip and npm install the packages they serve, every download is counted, they
//! are offline (an unknown name is a 404, never a redirect or an uplink), verdaccio's tarball URLs
//! follow the request's `Host` header as documented on `NpmRegistry`, and a dropped registry leaves
//! no process and no directory behind.

mod common;

use common::gone_or_zombie;
use common::registries::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python of the pypiserver venv (installed with it by scripts/test-registries.sh).
fn python() -> PathBuf {
    let p = std::env::var_os("LIZARD_TEST_PYPISERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/test-registries/pypiserver-venv/bin/pypi-server")
        });
    p.with_file_name("python3")
}

#[test]
fn pip_installs_real_wheels_from_pypiserver() {
    let base = TestPackage::new("lizard-probe-base", "1.0.0", "VALUE = 42\n");
    let app = TestPackage::new(
        "Lizard.Probe_App",
        "2.0.0",
        "from lizard_probe_base import VALUE\nDOUBLE = VALUE * 2\n",
    )
    .requires("lizard-probe-base");
    let reg = PyPiServer::start(&[base.clone(), app.clone()]);
    assert_eq!(app.module(), "lizard_probe_app");
    let target = tempfile::tempdir().unwrap();
    let conf = target.path().join("pip.conf");
    std::fs::write(&conf, "").unwrap();
    run_ok(
        Command::new(python())
            .args([
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--disable-pip-version-check",
            ])
            .args(["--no-input", "--index-url", &reg.url(), "--target"])
            .arg(target.path().join("site"))
            .arg("lizard-probe-app")
            .env("PIP_CONFIG_FILE", &conf)
            .env_remove("PIP_EXTRA_INDEX_URL")
            .env_remove("PIP_FIND_LINKS"),
    );
    let out = run_ok(
        Command::new(python())
            .args([
                "-c",
                "import lizard_probe_app as a; print(a.DOUBLE, a.VALUE)",
            ])
            .env("PYTHONPATH", target.path().join("site")),
    );
    assert_eq!(out.trim(), "84 42");
    // Each wheel came from it, once; the dependency was found through its index.
    for p in [&base, &app] {
        let wheel = format!("GET /packages/{}", p.wheel_file());
        assert_eq!(reg.requests_matching(&wheel), 1, "{:?}", reg.requests());
    }
    assert!(reg.requests_matching("GET /simple/lizard-probe-base/") >= 1);
    // Offline: a name it does not hold is not sent elsewhere.
    let (status, _) = common::registries::http(reg.port(), "GET", "/simple/six/", &[], b"")
        .expect("pypiserver answers");
    assert_eq!(status, 404);
}

#[test]
fn npm_installs_published_packages_from_verdaccio() {
    let base = TestPackage::new(
        "lizard-probe-base",
        "1.0.0",
        "module.exports = { VALUE: 42 };\n",
    );
    let app = TestPackage::new(
        "@lizard-test/probe-app",
        "2.0.0",
        "const b = require('lizard-probe-base');\nmodule.exports = { DOUBLE: b.VALUE * 2 };\n",
    )
    .requires("lizard-probe-base");
    let reg = NpmRegistry::start(&[base.clone(), app.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let npmrc = dir.path().join("npmrc");
    std::fs::write(&npmrc, "").unwrap();
    run_ok(
        Command::new("npm")
            .args(["install", "--registry", &reg.url(), "--userconfig"])
            .arg(&npmrc)
            .arg("--cache")
            .arg(dir.path().join("npm-cache"))
            .args(["--no-audit", "--no-fund", "--no-update-notifier"])
            .arg("@lizard-test/probe-app")
            .current_dir(dir.path()),
    );
    let out = run_ok(
        Command::new("node")
            .args([
                "-e",
                "const a = require('@lizard-test/probe-app'); console.log(a.DOUBLE)",
            ])
            .current_dir(dir.path()),
    );
    assert_eq!(out.trim(), "84");
    for p in [&base, &app] {
        let tgz = format!("GET {}", p.tarball_path());
        assert_eq!(reg.requests_matching(&tgz), 1, "{:?}", reg.requests());
    }
    // Offline: no uplink to ask for a name it does not hold.
    let (status, _) = http(reg.port(), "GET", "/left-pad", &[], b"").expect("verdaccio answers");
    assert_eq!(status, 404);
}

fn tarball(reg: &NpmRegistry, p: &TestPackage, headers: &[(&str, &str)]) -> String {
    let (status, body) =
        http(reg.port(), "GET", &format!("/{}", p.name), headers, b"").expect("verdaccio answers");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let doc: Value = serde_json::from_slice(&body).unwrap();
    doc["versions"][&p.version]["dist"]["tarball"]
        .as_str()
        .unwrap_or_else(|| panic!("no tarball in {doc}"))
        .to_string()
}

#[test]
fn verdaccio_tarball_urls_follow_the_host_header() {
    let p = TestPackage::new("lizard-probe-url", "3.1.4", "module.exports = 1;\n");
    let reg = NpmRegistry::start(std::slice::from_ref(&p));
    let file = "/lizard-probe-url/-/lizard-probe-url-3.1.4.tgz";
    // What a proxy forwarding to it with its own address as Host gets.
    assert_eq!(tarball(&reg, &p, &[]), reg.tarball_url(&p));
    assert_eq!(
        reg.tarball_url(&p),
        format!("http://127.0.0.1:{}{file}", reg.port())
    );
    // The Host header, verbatim.
    assert_eq!(
        tarball(&reg, &p, &[("Host", "proxy.invalid:8080")]),
        format!("http://proxy.invalid:8080{file}")
    );
    // X-Forwarded-Proto sets the scheme; X-Forwarded-Host is ignored.
    assert_eq!(
        tarball(
            &reg,
            &p,
            &[
                ("Host", "127.0.0.1:1"),
                ("X-Forwarded-Proto", "https"),
                ("X-Forwarded-Host", "elsewhere.invalid")
            ]
        ),
        format!("https://127.0.0.1:1{file}")
    );
}

#[test]
fn dropped_registries_leave_no_process_or_directory() {
    let pypi = PyPiServer::start(&[]);
    let npm = NpmRegistry::start(&[]);
    let (pids, dirs) = (
        [pypi.pid(), npm.pid()],
        [pypi.dir().to_path_buf(), npm.dir().to_path_buf()],
    );
    assert!(dirs.iter().all(|d| d.is_dir()));
    drop(pypi);
    drop(npm);
    for pid in pids {
        assert!(gone_or_zombie(pid), "registry {pid} still running");
    }
    for d in dirs {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}
