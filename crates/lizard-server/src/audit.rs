//! The audit log: which lifecycle calls (create, kill, pause, resume, hibernate, set-timeout of
//! sandboxes; project create; volume create and delete; E2B's create, kill, connect, pause and
//! timeout) and which authentication failures happened, by whom, on what, when, with what result
//! and from which address. Events go to the store's `audit` table and, as they are written, to a
//! `tracing` event with target `audit`; `GET /v1/audit` reads them back (an admin key sees all, a
//! project key its own project's).
//!
//! Retention ([`Retention`]): events older than `--audit-retention` (default 90 days) are deleted
//! at start-up and hourly, and beyond `--audit-max-events` (default one million) the oldest go as
//! new ones are written, so the log cannot grow without bound.
//!
//! This module decides *what* a request is ([`classify`], a pure function of method and path);
//! `lizard_lifecycle::audit` (re-exported here) writes events and applies the retention. It does not see requests go by: [`crate::gate`] calls it around every
//! request. It never records a key, only its stored prefix, and never a request or response body.

use axum::http::Method;

/// Writing, pruning and retention of the log (the lifecycle's side).
pub use lizard_lifecycle::audit::*;

/// What an audited request does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// `sandbox.create`, `e2b.kill`, … (see [`AuditEvent::action`]).
    pub name: &'static str,
    /// The object named by the path (sandbox id, volume id or name), if any.
    pub object: Option<String>,
    /// For creates: the field of the (JSON) answer that names the new object.
    pub created_field: Option<&'static str>,
    /// Whether `object` is a sandbox id (so its project can be looked up).
    pub sandbox: bool,
}

/// The object a create made, put into its answer's extensions by the handler, so the audit log
/// learns the id from the handler rather than by reading the answer back (which could fail
/// after the object exists). Creates that do not set it are read back (small answers only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub id: String,
    pub project: Option<String>,
}

/// Whether `method path` is an audited lifecycle call (E2B sandbox traffic — requests carrying
/// `E2b-Sandbox-Id` — never is; the gate does not ask for those).
pub fn classify(method: &Method, path: &str) -> Option<Action> {
    let segs: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let act = |name, object: Option<&str>, sandbox| Action {
        name,
        object: object.map(cut),
        created_field: None,
        sandbox,
    };
    let create = |name, field| Action {
        name,
        object: None,
        created_field: Some(field),
        sandbox: false,
    };
    let m = method.as_str();
    Some(match (m, segs.as_slice()) {
        ("POST", ["v1", "sandboxes"]) => create("sandbox.create", "sandbox_id"),
        ("DELETE", ["v1", "sandboxes", id]) => act("sandbox.kill", Some(id), true),
        ("POST", ["v1", "sandboxes", id, op]) => {
            let name = match *op {
                "pause" => "sandbox.pause",
                "resume" => "sandbox.resume",
                "hibernate" => "sandbox.hibernate",
                "timeout" => "sandbox.set_timeout",
                "fork" => "sandbox.fork",
                "snapshots" => "snapshot.create",
                _ => return None,
            };
            act(name, Some(id), true)
        }
        ("PATCH", ["v1", "sandboxes", id, "network"]) => act("sandbox.set_network", Some(id), true),
        ("PUT", ["sandboxes", id, "network"]) => act("e2b.set_network", Some(id), true),
        ("POST", ["v1", "projects"]) => create("project.create", "project"),
        // The secret's name is in the body, never read here: the project is the object.
        ("POST", ["v1", "projects", p, "secrets"]) => act("secret.set", Some(p), false),
        ("DELETE", ["v1", "projects", p, "secrets", n]) => {
            act("secret.delete", Some(&format!("{p}/{n}")), false)
        }
        ("POST", ["v1", "volumes"]) => create("volume.create", "volume_id"),
        ("DELETE", ["v1", "volumes", v]) => act("volume.delete", Some(v), false),
        ("DELETE", ["v1", "snapshots", s]) => act("snapshot.delete", Some(s), false),
        // The handler names the template (`Created`): a streamed answer is never read here.
        ("POST", ["v1", "templates"]) => create("template.build", "name"),
        ("DELETE", ["v1", "templates", t]) => act("template.delete", Some(t), false),
        // E2B's template build start (`Template.build`): the template is the path's.
        ("POST", ["v2", "templates", t, "builds", _]) => act("e2b.template_build", Some(t), false),
        ("POST", ["sandboxes"] | ["v2", "sandboxes"]) => create("e2b.create", "sandboxID"),
        ("DELETE", ["sandboxes", id]) => act("e2b.kill", Some(id), true),
        ("POST", ["sandboxes", id, "connect" | "resume"] | ["v2", "sandboxes", id, "connect"]) => {
            act("e2b.connect", Some(id), true)
        }
        ("POST", ["sandboxes", id, "pause"]) => act("e2b.pause", Some(id), true),
        ("POST", ["sandboxes", id, "fork"]) => act("e2b.fork", Some(id), true),
        ("POST", ["sandboxes", id, "snapshots"]) => act("e2b.snapshot_create", Some(id), true),
        // E2B's `delete_snapshot` (a snapshot is a template there).
        ("DELETE", ["templates", t]) => act("e2b.snapshot_delete", Some(t), false),
        ("POST", ["sandboxes", id, "timeout" | "refreshes"]) => {
            act("e2b.set_timeout", Some(id), true)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(m: Method, p: &str) -> Option<&'static str> {
        classify(&m, p).map(|a| a.name)
    }

    #[test]
    fn lifecycle_calls_are_classified() {
        assert_eq!(name(Method::POST, "/v1/sandboxes"), Some("sandbox.create"));
        assert_eq!(
            name(Method::POST, "/v2/templates/my-tpl/builds/b-1"),
            Some("e2b.template_build")
        );
        let kill = classify(&Method::DELETE, "/v1/sandboxes/sbx_1").unwrap();
        assert_eq!(kill.name, "sandbox.kill");
        assert_eq!(kill.object.as_deref(), Some("sbx_1"));
        assert!(kill.sandbox);
        for (op, n) in [
            ("pause", "sandbox.pause"),
            ("resume", "sandbox.resume"),
            ("hibernate", "sandbox.hibernate"),
            ("timeout", "sandbox.set_timeout"),
        ] {
            assert_eq!(
                name(Method::POST, &format!("/v1/sandboxes/x/{op}")),
                Some(n)
            );
        }
        assert_eq!(
            name(Method::PATCH, "/v1/sandboxes/x/network"),
            Some("sandbox.set_network")
        );
        assert_eq!(
            name(Method::PUT, "/sandboxes/x/network"),
            Some("e2b.set_network")
        );
        assert_eq!(
            name(Method::POST, "/v1/projects/p/secrets"),
            Some("secret.set")
        );
        assert_eq!(
            name(Method::DELETE, "/v1/projects/p/secrets/n"),
            Some("secret.delete")
        );
        assert_eq!(name(Method::GET, "/v1/projects/p/secrets"), None);
        assert_eq!(name(Method::POST, "/v1/projects"), Some("project.create"));
        assert_eq!(name(Method::POST, "/v1/volumes"), Some("volume.create"));
        assert_eq!(name(Method::DELETE, "/v1/volumes/v"), Some("volume.delete"));
        assert_eq!(
            name(Method::DELETE, "/v1/snapshots/snap_x"),
            Some("snapshot.delete")
        );
        assert_eq!(
            name(Method::POST, "/v1/sandboxes/a/snapshots"),
            Some("snapshot.create")
        );
        assert_eq!(
            name(Method::POST, "/v1/sandboxes/a/fork"),
            Some("sandbox.fork")
        );
        assert_eq!(name(Method::POST, "/v1/templates"), Some("template.build"));
        assert_eq!(
            name(Method::DELETE, "/v1/templates/t"),
            Some("template.delete")
        );
        assert_eq!(name(Method::GET, "/v1/templates/t"), None);
        assert_eq!(name(Method::POST, "/sandboxes"), Some("e2b.create"));
        assert_eq!(name(Method::POST, "/v2/sandboxes"), Some("e2b.create"));
        assert_eq!(name(Method::DELETE, "/sandboxes/i"), Some("e2b.kill"));
        assert_eq!(
            name(Method::POST, "/v2/sandboxes/i/connect"),
            Some("e2b.connect")
        );
        assert_eq!(
            name(Method::POST, "/sandboxes/i/resume"),
            Some("e2b.connect")
        );
        assert_eq!(name(Method::POST, "/sandboxes/i/pause"), Some("e2b.pause"));
        assert_eq!(name(Method::POST, "/sandboxes/i/fork"), Some("e2b.fork"));
        assert_eq!(
            name(Method::DELETE, "/templates/snap_x"),
            Some("e2b.snapshot_delete")
        );
        assert_eq!(
            name(Method::POST, "/sandboxes/i/refreshes"),
            Some("e2b.set_timeout")
        );
    }

    #[test]
    fn other_calls_are_not() {
        for (m, p) in [
            (Method::GET, "/v1/sandboxes"),
            (Method::GET, "/v1/sandboxes/x"),
            (Method::POST, "/v1/sandboxes/x/execute"),
            (Method::POST, "/v1/sandboxes/x/files"),
            (Method::DELETE, "/v1/sandboxes/x/contexts/c"),
            (Method::GET, "/v1/audit"),
            (Method::GET, "/health"),
            (Method::POST, ""),
            (Method::POST, "v1/sandboxes"),
            (Method::POST, "/v1/sandboxes/"),
        ] {
            assert_eq!(name(m.clone(), p), None, "{m} {p}");
        }
    }

    #[test]
    fn long_objects_are_cut() {
        let long = "x".repeat(10_000);
        let a = classify(&Method::DELETE, &format!("/v1/volumes/{long}")).unwrap();
        assert_eq!(a.object.unwrap().len(), MAX_OBJECT_CHARS);
    }
}
