//! The committed `openapi.json` is the generated document, and the document names every route of
//! the router (and no route it does not have).

use std::collections::BTreeSet;

const COMMITTED: &str = include_str!("../openapi.json");

#[test]
fn the_committed_document_is_the_generated_one() {
    let now = lizard_server::openapi::document_text();
    if std::env::var_os("LIZARD_UPDATE_OPENAPI").is_some() {
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"), &now).unwrap();
        return;
    }
    assert!(
        COMMITTED == now,
        "crates/lizard-server/openapi.json differs from the document generated from lizard-proto's \
         types and lizard_server::openapi::operations(): regenerate it with \
         `LIZARD_UPDATE_OPENAPI=1 cargo test -p lizard-server --test openapi` (or `lizard openapi \
         > crates/lizard-server/openapi.json`) and commit it, then update the SDKs if a wire type changed"
    );
}

/// `(path, handlers)` of every `.route("path", handlers)` in a router's source.
fn route_args(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        // The route's arguments: up to the parenthesis that closes `.route(`.
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map(|(i, _)| i)
            .expect("a .route( is closed");
        let args = &rest[..end];
        let Some(q) = args.find('"') else { continue };
        let path = &args[q + 1..];
        let path = &path[..path.find('"').unwrap()];
        out.push((path.to_string(), args[q + path.len() + 2..].to_string()));
    }
    out
}

/// The handler each method of a route's `handlers` names: `get(a).post(b)` → get: a, post: b
/// (`any` for a route that takes every method).
fn handlers_of(handlers: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in ["get", "post", "put", "patch", "delete", "any"] {
        let mut from = 0;
        while let Some(i) = handlers[from..].find(&format!("{m}(")) {
            let i = from + i;
            from = i + m.len() + 1;
            let before = handlers[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name = &handlers[from..];
            let name = name[..name.find(')').unwrap_or(name.len())].trim();
            out.push((m.to_string(), name.rsplit("::").next().unwrap().to_string()));
        }
    }
    out
}

/// `(path, methods)` of every route in a router's source, methods as the document spells them.
fn routes_in(src: &str) -> Vec<(String, BTreeSet<String>)> {
    route_args(src)
        .into_iter()
        .map(|(path, handlers)| {
            (
                path,
                handlers_of(&handlers).into_iter().map(|(m, _)| m).collect(),
            )
        })
        .collect()
}

/// A path with its parameters' names (and catch-alls) erased: `/a/{}/b/{}`.
fn shape(path: &str) -> String {
    path.split('/')
        .map(|s| if s.starts_with('{') { "{}" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

const SERVER_ROUTER: &str = include_str!("../src/api.rs");
const AGENT_ROUTERS: &[&str] = &[
    include_str!("../../lizard-agent/src/api.rs"),
    include_str!("../../lizard-agent/src/commands.rs"),
    include_str!("../../lizard-agent/src/files.rs"),
    include_str!("../../lizard-agent/src/ports.rs"),
    include_str!("../../lizard-agent/src/pty.rs"),
];

#[test]
fn every_route_is_documented_and_every_documented_route_exists() {
    let doc = lizard_server::openapi::document();
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(p, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |m| (shape(p), m.clone()))
        })
        .collect();
    let mut routed = BTreeSet::new();
    let agent: Vec<(String, BTreeSet<String>)> =
        AGENT_ROUTERS.iter().flat_map(|s| routes_in(s)).collect();
    let prefix = "/v1/sandboxes/{id}";
    for (path, methods) in routes_in(SERVER_ROUTER) {
        if !methods.contains("any") {
            for m in methods {
                routed.insert((shape(&path), m));
            }
            continue;
        }
        // Forwarded to the sandbox's agent: the agent's routes below it, with the agent's methods.
        let inside = path
            .strip_prefix(prefix)
            .expect("forwarded routes are a sandbox's");
        let base = inside.strip_suffix("/{*rest}").unwrap_or(inside);
        let mut any = false;
        for (apath, amethods) in &agent {
            let under = if inside.ends_with("/{*rest}") {
                apath.starts_with(&format!("{base}/"))
            } else {
                apath == base
            };
            if !under {
                continue;
            }
            for m in amethods {
                if m == "any" {
                    any = true;
                    continue;
                }
                routed.insert((shape(&format!("{prefix}{apath}")), m.clone()));
            }
        }
        if any {
            // A proxy of any method (a sandbox's ports): documented as the methods the document
            // names; it must name at least one.
            let s = shape(&path);
            let named: Vec<_> = documented.iter().filter(|(p, _)| *p == s).collect();
            assert!(!named.is_empty(), "{path} is routed but not documented");
            routed.extend(named.into_iter().cloned());
        }
    }
    let missing: Vec<_> = routed.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&routed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routes without an entry in lizard_server::openapi::operations(): {missing:?}\n\
         entries without a route: {extra:?}"
    );
}

#[test]
fn the_route_reader_reads_chained_methods_and_layers() {
    let src = r#"Router::new()
        .route("/a/{id}", get(get_a).delete(delete_a))
        .route(
            "/b",
            get(list_b)
                .post(build_b)
                .layer(DefaultBodyLimit::max(SIZE)),
        )
        .route("/c/{*rest}", any(crate::proxy::forward))
        .route("/d", axum::routing::delete(delete_d))"#;
    let got = routes_in(src);
    let want: Vec<(String, BTreeSet<String>)> = [
        ("/a/{id}", &["delete", "get"][..]),
        ("/b", &["get", "post"]),
        ("/c/{*rest}", &["any"]),
        ("/d", &["delete"]),
    ]
    .iter()
    .map(|(p, m)| (p.to_string(), m.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(got, want);
}

/// The last path segment of a type, without generics: `lizard_proto::SnapshotInfo` → `SnapshotInfo`.
fn type_name(t: &str) -> String {
    t.trim().rsplit("::").next().unwrap().trim().to_string()
}

/// In a handler `async fn name(...) -> ...` of `src`: the `ApiJson<T>` body type and the `Json<T>`
/// answer type (`Vec<T>` as `[T]`), where it has them.
fn handler_types(src: &str, name: &str) -> (Option<String>, Option<String>) {
    let Some(at) = src.find(&format!("async fn {name}(")) else {
        return (None, None);
    };
    let sig = &src[at..];
    let sig = &sig[..sig.find('{').unwrap()];
    let inner = |s: &str, open: &str| -> Option<String> {
        let i = s.find(open)? + open.len();
        let mut depth = 1;
        let end = s[i..].char_indices().find(|(_, c)| {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            depth == 0
        })?;
        Some(s[i..i + end.0].to_string())
    };
    // `ApiJson<T, LIMIT>`: the type is before the limit.
    let body = inner(sig, "ApiJson<").map(|t| type_name(t.split(',').next().unwrap_or(&t)));
    let answer = sig
        .split("->")
        .nth(1)
        .and_then(|r| inner(r, "Json<"))
        .map(|t| {
            match t
                .trim()
                .strip_prefix("Vec<")
                .and_then(|v| v.strip_suffix('>'))
            {
                Some(item) => format!("[{}]", type_name(item)),
                None => type_name(&t),
            }
        });
    (body, answer)
}

/// A schema's type as [`handler_types`] spells it: `X` for a `$ref`, `[X]` for an array of them.
fn doc_type(schema: &serde_json::Value) -> Option<String> {
    let r = |v: &serde_json::Value| match v["type"].as_str() {
        Some("string") => Some("String".to_string()),
        _ => v["$ref"].as_str().map(|s| type_name(&s.replace('/', "::"))),
    };
    r(schema).or_else(|| r(&schema["items"]).map(|t| format!("[{t}]")))
}

/// The server's own handlers take and answer the types the document names for their routes (a
/// handler changed to another request or answer type fails here until the document follows).
#[test]
fn the_server_handlers_take_and_answer_the_documented_types() {
    let doc = lizard_server::openapi::document();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, handlers) in route_args(SERVER_ROUTER) {
        for (m, handler) in handlers_of(&handlers) {
            if m == "any" {
                continue;
            }
            let m = m.as_str();
            let (body, answer) = handler_types(SERVER_ROUTER, &handler);
            let op = &doc["paths"][&path][m];
            if let Some(body) = body {
                let documented =
                    doc_type(&op["requestBody"]["content"]["application/json"]["schema"]);
                if documented.as_deref() != Some(&body) {
                    wrong.push(format!(
                        "{m} {path}: body {body}, documented {documented:?}"
                    ));
                }
                checked += 1;
            }
            // A free-form JSON answer (`/health`) names no type.
            if let Some(answer) = answer.filter(|a| a != "Value") {
                let ok = op["responses"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .any(|(status, r)| {
                        status.starts_with('2')
                            && doc_type(&r["content"]["application/json"]["schema"]).as_deref()
                                == Some(&answer)
                    });
                if !ok {
                    wrong.push(format!("{m} {path}: answers {answer}, not documented so"));
                }
                checked += 1;
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        checked >= 30,
        "only {checked} handler types read: the reader no longer finds them"
    );
}

/// The `T` of `ApiQuery<T>` in handler `name`'s signature in `src`, by its last path segment.
fn query_type(src: &str, name: &str) -> Option<String> {
    let at = src.find(&format!("async fn {name}("))?;
    let sig = &src[at..];
    let sig = &sig[..sig.find('{')?];
    let i = sig.find("ApiQuery<")? + "ApiQuery<".len();
    let end = sig[i..].find('>')?;
    Some(type_name(&sig[i..i + end]))
}

/// Every handler, the server's and the agent's (for the routes forwarded to it), takes the query
/// type whose properties the document lists as its parameters (`Operation::query`), and a route
/// with no query type documents no query parameters: a field added to a query type is documented,
/// and a handler changed to another query type fails here.
#[test]
fn handlers_take_the_documented_query_types() {
    let ops = lizard_server::openapi::operations();
    let documented: std::collections::BTreeMap<(String, String), Option<&str>> = ops
        .iter()
        .map(|o| ((o.method.to_string(), shape(o.path)), o.query.map(|q| q.0)))
        .collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    let sources = std::iter::once(("", SERVER_ROUTER))
        .chain(AGENT_ROUTERS.iter().map(|s| ("/v1/sandboxes/{id}", *s)));
    for (prefix, src) in sources {
        for (path, handlers) in route_args(src) {
            for (m, handler) in handlers_of(&handlers) {
                let key = (m.clone(), shape(&format!("{prefix}{path}")));
                // The agent's host-only routes and the proxies of any method are not documented
                // operations of their own.
                let Some(doc) = documented.get(&key) else {
                    continue;
                };
                let taken = query_type(src, &handler);
                if taken.as_deref() != *doc {
                    wrong.push(format!(
                        "{m} {prefix}{path} ({handler}): takes {taken:?}, documented {doc:?}"
                    ));
                }
                checked += usize::from(taken.is_some());
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        checked >= 15,
        "only {checked} query types read: the reader no longer finds them"
    );
}

/// A query type's fields are the operation's parameters, with their documentation; `Option`
/// fields are optional parameters of the inner type.
#[test]
fn query_parameters_come_from_the_query_type() {
    let doc = lizard_server::openapi::document();
    let params = doc["paths"]["/v1/projects/{project}/executions"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(limit["in"], "query");
    assert_eq!(limit["required"], false);
    assert_eq!(limit["schema"]["type"], "integer");
    assert_eq!(limit["description"], "At most this many runs.");
    let read = doc["paths"]["/v1/sandboxes/{id}/files"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = read.iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(
        names.contains(&"path") && names.contains(&"user"),
        "{names:?}"
    );
    assert!(read
        .iter()
        .any(|p| p["name"] == "path" && p["required"] == true));
}
