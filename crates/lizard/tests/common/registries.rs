//! Local package registries for the package-install tests (issue #19): a real pypiserver (PyPI) and
//! a real verdaccio (npm), each on 127.0.0.1 on a free port, in its own temporary directory, offline
//! (pypiserver never redirects to another index, verdaccio has no uplinks), serving real packages
//! generated here from [`TestPackage`]s. Both log every request they receive, so a test can assert
//! how often a file was fetched ([`PyPiServer::requests_matching`],
//! [`NpmRegistry::requests_matching`]). Each is killed (its whole process group) and its directory
//! removed on drop.
//!
//! The programs are installed by `scripts/test-registries.sh` (run by `scripts/test.sh`, which exports
//! `LIZARD_TEST_PYPISERVER` and `LIZARD_TEST_VERDACCIO`; without them the default paths under
//! `target/test-registries` are used). A missing program is a panic naming that script: the tests
//! fail, they never skip.

#[allow(unused_imports)] // each test binary uses a part of the harness
pub use lizard_test_support::run_within;
use lizard_test_support::{self as support, free_port, nonce, tail, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long a registry may take to answer after it was started (a noisy 2-core machine).
const START_DEADLINE: Duration = Duration::from_secs(120);
/// How many times a start is tried on a new port when the server exits first (a port race).
const START_ATTEMPTS: usize = 5;
/// How long one helper command (wheel build, `npm publish`) may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(300);

/// A package to serve. The same description gives a wheel for [`PyPiServer`] and an npm package
/// for [`NpmRegistry`].
#[derive(Clone, Debug)]
pub struct TestPackage {
    /// The distribution name: for PyPI the wheel is `<normalized>-<version>-py3-none-any.whl` and
    /// the module imported is `<normalized>` (runs of `-`, `_`, `.` become `_`, lower case: see
    /// [`TestPackage::module`]); for npm the package name as is (`@scope/name` works).
    pub name: String,
    /// The version, already in normal form (e.g. `1.0.0`).
    pub version: String,
    /// The module's source: `<module>/__init__.py` of the wheel, `index.js` of the npm package
    /// (e.g. `VALUE = 42` and `module.exports = { VALUE: 42 };`).
    pub body: String,
    /// Names of packages it depends on, any version (`Requires-Dist: <name>` in the wheel's
    /// METADATA; `"dependencies": {"<name>": "*"}` in package.json).
    pub requires: Vec<String>,
}

impl TestPackage {
    pub fn new(name: &str, version: &str, body: &str) -> TestPackage {
        TestPackage {
            name: name.to_string(),
            version: version.to_string(),
            body: body.to_string(),
            requires: Vec::new(),
        }
    }

    /// The same package, depending on `name` too.
    pub fn requires(mut self, name: &str) -> TestPackage {
        self.requires.push(name.to_string());
        self
    }

    /// The normalized distribution name, also the Python module the wheel holds.
    pub fn module(&self) -> String {
        let mut out = String::new();
        for c in self.name.chars() {
            if matches!(c, '-' | '_' | '.') {
                if !out.ends_with('_') {
                    out.push('_');
                }
            } else {
                out.extend(c.to_lowercase());
            }
        }
        out
    }

    /// The wheel's file name, as served under `/packages/` by [`PyPiServer`].
    pub fn wheel_file(&self) -> String {
        format!("{}-{}-py3-none-any.whl", self.module(), self.version)
    }

    /// The npm tarball's path on [`NpmRegistry`]: `/<name>/-/<name without scope>-<version>.tgz`.
    pub fn tarball_path(&self) -> String {
        let base = self.name.rsplit('/').next().unwrap_or(&self.name);
        format!("/{}/-/{base}-{}.tgz", self.name, self.version)
    }
}

/// The program named by `var`, else `target/test-registries/<default>`; a panic naming the install
/// script if it is not there.
fn tool(var: &str, default: &str) -> PathBuf {
    support::built(
        var,
        &format!("test-registries/{default}"),
        Path::is_file,
        "a local package registry",
        "run scripts/test-registries.sh, which scripts/test.sh runs, to install the local \
         package registries the tests use",
    )
}

/// Start a server on a free port: `make(port)` builds its command, `ready(port, daemon)` says
/// whether it answers as the server we started (not another one that took the port). A server that
/// exits before it is ready (e.g. the port was taken between choosing and binding it) is started
/// again on another port, [`START_ATTEMPTS`] times; one not ready within [`START_DEADLINE`] is a
/// panic with the tail of its output.
fn start_daemon(
    what: &str,
    out: &Path,
    mut make: impl FnMut(u16) -> Command,
    mut ready: impl FnMut(u16) -> bool,
) -> (Daemon, u16) {
    let mut last = String::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let mut d =
            Daemon::spawn(make(port), out).unwrap_or_else(|e| panic!("{what}: cannot start ({e})"));
        let up = support::wait_for(START_DEADLINE, || match d.exited() {
            Some(status) => Some(Err(status)),
            None => ready(port).then_some(Ok(())),
        });
        match up {
            Some(Ok(())) => return (d, port),
            Some(Err(status)) => last = format!("exited ({status}):\n{}", tail(out, 30)),
            None => panic!(
                "{what}: not answering on 127.0.0.1:{port} after {START_DEADLINE:?}:\n{}",
                tail(out, 30)
            ),
        }
    }
    panic!("{what}: did not start in {START_ATTEMPTS} attempts; last {last}");
}

/// [`run_within`] [`COMMAND_DEADLINE`], a panic with its output unless it succeeds: its output.
pub fn run_ok(cmd: &mut Command) -> String {
    support::run_ok(cmd, COMMAND_DEADLINE)
}

/// One HTTP/1.1 request to `127.0.0.1:port` on a fresh connection (`Connection: close`; a `Host:
/// 127.0.0.1:<port>` header unless `headers` has one): the status and body, or `None` if nothing
/// answered (within 30 s).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    support::http(addr, method, path, headers, body).map(|a| (a.status, a.body))
}

/// What both registries have: a server process on `127.0.0.1:<port>`, the log of the requests it
/// received, its temporary directory. [`PyPiServer`] and [`NpmRegistry`] dereference to it.
pub struct LocalRegistry {
    daemon: Daemon,
    port: u16,
    log: PathBuf,
    /// One line of the log as `METHOD PATH`, if it records a request received.
    parse: fn(&str) -> Option<String>,
    dir: tempfile::TempDir,
}

impl LocalRegistry {
    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (also its process group's).
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// Its temporary directory (packages or storage, config, log), removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every request received so far, in order, as `METHOD PATH`. pypiserver: e.g. `GET
    /// /simple/foo/`, `GET /packages/foo-1.0.0-py3-none-any.whl`, and the harness's readiness probe
    /// `GET /lizard-health-…`. verdaccio: the URL as sent, query included (a scoped package's
    /// document is `GET /@scope%2fname`), and the harness's own: the probe `GET /-/ping?lizard=…`,
    /// adduser, the publishes (`PUT /<name>`).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(self.parse)
            .collect()
    }

    /// How many requests received so far contain `needle` in their `METHOD PATH` (so a test can
    /// assert that a file was downloaded from it exactly once).
    pub fn requests_matching(&self, needle: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.contains(needle))
            .count()
    }
}

/// Defines `make_wheels(packages, out)`, which builds real wheels into the directory `out`: for
/// each package (the JSON of [`wheel_spec`]) a zip of `<module>/__init__.py` and
/// `<dist>.dist-info/{METADATA,WHEEL,RECORD}` (RECORD with each file's sha256 and size), written
/// by Python's zipfile.
const MAKE_WHEELS: &str = r#"
import base64, hashlib, os, zipfile
def make_wheels(packages, out):
    for p in packages:
        dist = p["module"] + "-" + p["version"]
        meta = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (p["name"], p["version"])
        meta += "".join("Requires-Dist: %s\n" % r for r in p["requires"])
        files = [
            (p["module"] + "/__init__.py", p["body"]),
            (dist + ".dist-info/METADATA", meta),
            (dist + ".dist-info/WHEEL",
             "Wheel-Version: 1.0\nGenerator: lizard-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        ]
        record = ""
        for path, text in files:
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record += "%s,sha256=%s,%d\n" % (path, digest, len(data))
        files.append((dist + ".dist-info/RECORD", record + dist + ".dist-info/RECORD,,\n"))
        with zipfile.ZipFile(os.path.join(out, p["file"]), "w", zipfile.ZIP_DEFLATED) as z:
            for path, text in files:
                z.writestr(path, text)
"#;

/// What `make_wheels` ([`MAKE_WHEELS`]) is given: one JSON object per package.
fn wheel_spec(packages: &[TestPackage]) -> Value {
    packages
        .iter()
        .map(|p| {
            json!({"name": p.name, "version": p.version, "body": p.body,
                   "requires": p.requires, "module": p.module(), "file": p.wheel_file()})
        })
        .collect()
}

/// Build the wheels of `packages` into the directory `out` with the host's `python`.
pub fn write_wheels(python: &Path, packages: &[TestPackage], out: &Path) {
    let script = format!(
        "{MAKE_WHEELS}\nimport json, sys\nmake_wheels(json.loads(sys.argv[1]), sys.argv[2])\n"
    );
    run_ok(
        Command::new(python)
            .args(["-c", &script])
            .arg(wheel_spec(packages).to_string())
            .arg(out),
    );
}

/// A Python cell that builds the wheels of `packages` into the sandbox's directory `out` (a
/// sandbox has no registry to fetch them from unless a test starts one).
pub fn wheels_cell(packages: &[TestPackage], out: &str) -> String {
    // JSON of strings and lists is a Python literal.
    format!(
        "{MAKE_WHEELS}\nmake_wheels({}, {out:?})\n",
        wheel_spec(packages)
    )
}

/// A real pypiserver on `127.0.0.1:<port>` serving wheels of the given packages, offline
/// (`--disable-fallback`: a name it does not have is a 404, never a redirect to another index).
/// Its simple index links the files by absolute path (`/packages/<wheel>#sha256=…`), not by URL.
pub struct PyPiServer(LocalRegistry);

impl std::ops::Deref for PyPiServer {
    type Target = LocalRegistry;
    fn deref(&self) -> &LocalRegistry {
        &self.0
    }
}

/// A real published wheel that `scripts/test-registries.sh` downloaded (pinned and hashed in
/// `tests/registries/pypiserver/*.txt`) into `target/test-registries/wheels` (or
/// `LIZARD_TEST_WHEELS`), by its file name's start (`uv-`).
pub fn published_wheel(prefix: &str) -> PathBuf {
    let dir = support::built(
        "LIZARD_TEST_WHEELS",
        "test-registries/wheels",
        Path::is_dir,
        "the published test wheels",
        "run scripts/test-registries.sh, which scripts/test.sh runs",
    );
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(prefix) && name.ends_with(".whl")
        })
        .unwrap_or_else(|| panic!("no {prefix}*.whl in {}", dir.display()))
}

impl PyPiServer {
    pub fn start(packages: &[TestPackage]) -> PyPiServer {
        Self::start_with(packages, &[])
    }

    /// [`PyPiServer::start`] serving `wheels` (real published ones, [`published_wheel`]) too.
    pub fn start_with(packages: &[TestPackage], wheels: &[PathBuf]) -> PyPiServer {
        let program = tool("LIZARD_TEST_PYPISERVER", "pypiserver-venv/bin/pypi-server");
        let python = program.with_file_name("python3");
        let dir = tempfile::tempdir().unwrap();
        let pkgs = dir.path().join("packages");
        std::fs::create_dir(&pkgs).unwrap();
        write_wheels(&python, packages, &pkgs);
        for w in wheels {
            std::fs::copy(w, pkgs.join(w.file_name().unwrap())).unwrap();
        }
        let log = dir.path().join("access.log");
        let out = dir.path().join("pypiserver.out");
        // Answered only by the server started here: another on a raced port 404s it.
        let health = format!("/lizard-health-{}", nonce());
        let (daemon, port) = start_daemon(
            "pypiserver",
            &out,
            |port| {
                let _ = std::fs::remove_file(&log);
                let mut c = Command::new(&program);
                c.args(["run", "-v", "--log-stream", "none", "--hash-algo", "sha256"])
                    .args(["--disable-fallback", "--health-endpoint", &health])
                    .args(["--log-req-frmt", "REQUEST %(REQUEST_METHOD)s %(PATH_INFO)s"])
                    .arg("--log-file")
                    .arg(&log)
                    .args(["-i", "127.0.0.1", "-p", &port.to_string()])
                    .arg(&pkgs)
                    .current_dir(dir.path());
                c
            },
            |port| matches!(http(port, "GET", &health, &[], b""), Some((200, _))),
        );
        PyPiServer(LocalRegistry {
            daemon,
            port,
            log,
            parse: |l| l.split_once("|REQUEST ").map(|(_, r)| r.to_string()),
            dir,
        })
    }

    /// The index for pip: `http://127.0.0.1:<port>/simple`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/simple", self.port)
    }

    /// The directory holding the served wheels.
    pub fn packages_dir(&self) -> PathBuf {
        self.dir().join("packages")
    }
}

/// A real verdaccio on `127.0.0.1:<port>` holding the given packages, published with the host's
/// `npm publish` by a user made through its adduser API; no uplinks (offline: a name it does not
/// hold is a 404), its own storage in a temporary directory, its JSON log (one line per request
/// received) in a file.
///
/// **Tarball URLs.** Verdaccio does not store the `dist.tarball` URLs of the package documents
/// (`GET /<name>`): it writes them for each answer from the request (`getPublicUrl` of
/// `@verdaccio/url` 6.8.0), as `<proto>://<Host header>/<name>/-/<file>.tgz`, where `<proto>` is
/// the first value of `X-Forwarded-Proto` if it is `http` or `https`, else the connection's (`http`
/// here). The `Host` header is copied verbatim, port included; `X-Forwarded-Host` and
/// `X-Forwarded-For` are ignored (no `trustProxy` is set); a request without a `Host` header gets
/// root-relative paths. Only `VERDACCIO_PUBLIC_URL` in its environment would override this, and
/// the harness removes it. So a request with `Host: 127.0.0.1:<port>` (what a proxy forwarding to
/// [`NpmRegistry::addr`] sends) gets `http://127.0.0.1:<port>/<name>/-/<file>.tgz`
/// ([`NpmRegistry::tarball_url`]): a proxy that serves those documents under its own address
/// rewrites the prefix `http://127.0.0.1:<port>` to its own, or passes its own `Host` through. The
/// harness test `verdaccio_tarball_urls_follow_the_host_header` checks this.
pub struct NpmRegistry(LocalRegistry);

impl std::ops::Deref for NpmRegistry {
    type Target = LocalRegistry;
    fn deref(&self) -> &LocalRegistry {
        &self.0
    }
}

impl NpmRegistry {
    pub fn start(packages: &[TestPackage]) -> NpmRegistry {
        let program = tool(
            "LIZARD_TEST_VERDACCIO",
            "verdaccio/node_modules/.bin/verdaccio",
        );
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let log = root.join("verdaccio.log");
        let config = root.join("config.yaml");
        let out = root.join("verdaccio.out");
        let probe = format!("/-/ping?lizard={}", nonce());
        let (daemon, port) = start_daemon(
            "verdaccio",
            &out,
            |port| {
                let _ = std::fs::remove_file(&log);
                // YAML is a superset of JSON: no quoting to get wrong.
                let c = json!({
                    "storage": root.join("storage"),
                    "auth": {"htpasswd": {"file": root.join("htpasswd")}},
                    "uplinks": {},
                    "packages": {"**": {
                        "access": "$all", "publish": "$authenticated", "unpublish": "$authenticated"
                    }},
                    "listen": format!("127.0.0.1:{port}"),
                    "web": {"enable": false},
                    "log": {"type": "file", "path": log, "format": "json", "level": "http"},
                });
                std::fs::write(&config, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
                let mut cmd = Command::new(&program);
                cmd.arg("--config")
                    .arg(&config)
                    .current_dir(root)
                    .env_remove("VERDACCIO_PUBLIC_URL")
                    .env_remove("VERDACCIO_FORWARDED_PROTO");
                cmd
            },
            // Ours if our log has the probe: verdaccio logs a request before it answers it.
            |port| {
                matches!(http(port, "GET", &probe, &[], b""), Some((200, _)))
                    && std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&probe))
            },
        );
        let reg = NpmRegistry(LocalRegistry {
            daemon,
            port,
            log,
            parse: |l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let req = v.get("req")?;
                let (method, url) = (req.get("method")?.as_str()?, req.get("url")?.as_str()?);
                Some(format!("{method} {url}"))
            },
            dir,
        });
        reg.publish(packages);
        reg
    }

    fn publish(&self, packages: &[TestPackage]) {
        if packages.is_empty() {
            return;
        }
        let root = self.dir();
        let user = json!({"name": "lizard-test", "password": format!("pw-{}", nonce()),
                          "type": "user", "roles": []});
        let (status, body) = http(
            self.port,
            "PUT",
            "/-/user/org.couchdb.user:lizard-test",
            &[("Content-Type", "application/json")],
            user.to_string().as_bytes(),
        )
        .expect("verdaccio: no answer to adduser");
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let token = body["token"]
            .as_str()
            .unwrap_or_else(|| panic!("verdaccio adduser: {status} {body}"));
        let npmrc = root.join("npmrc");
        std::fs::write(
            &npmrc,
            format!("//127.0.0.1:{}/:_authToken={token}\n", self.port),
        )
        .unwrap();
        for (i, p) in packages.iter().enumerate() {
            let pkg = root.join(format!("publish-{i}"));
            std::fs::create_dir(&pkg).unwrap();
            let deps: serde_json::Map<String, Value> =
                p.requires.iter().map(|r| (r.clone(), json!("*"))).collect();
            let manifest = json!({"name": p.name, "version": p.version, "main": "index.js",
                                  "license": "MIT", "dependencies": deps});
            std::fs::write(pkg.join("package.json"), manifest.to_string()).unwrap();
            std::fs::write(pkg.join("index.js"), &p.body).unwrap();
            run_ok(
                Command::new("npm")
                    .args(["publish", "--registry", &self.url(), "--userconfig"])
                    .arg(&npmrc)
                    .arg("--cache")
                    .arg(root.join("npm-cache"))
                    .args(["--access", "public", "--no-update-notifier", "--no-audit"])
                    .args(["--no-fund", "--loglevel", "error"])
                    .current_dir(&pkg),
            );
        }
    }

    /// The registry for npm: `http://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The `dist.tarball` URL verdaccio writes for `p` when asked with `Host: 127.0.0.1:<port>`.
    pub fn tarball_url(&self, p: &TestPackage) -> String {
        format!("http://127.0.0.1:{}{}", self.port, p.tarball_path())
    }
}
