//! Property tests of every parser of untrusted input in `lizard-proto`: each request type's serde
//! from arbitrary JSON values (biased towards the types' own field names, so parsing gets past the
//! first field) and from arbitrary bytes never panics, and whatever parses survives a round trip;
//! Connect envelopes, language names and volume names/mount paths on arbitrary input.
//!
//! Bounded: `PROPTEST_CASES` (default 256 per property) keeps `cargo test` fast.

use lizard_proto::e2b::{api, ci, envd};
use lizard_proto::*;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;

/// Field names of the request types (and a few strangers), so objects look almost right.
const KEYS: &[&str] = &[
    "code",
    "language",
    "context_id",
    "env_vars",
    "envs",
    "env",
    "timeout_ms",
    "timeout",
    "cwd",
    "name",
    "path",
    "paths",
    "cmd",
    "argv",
    "args",
    "stdin",
    "tag",
    "background",
    "rows",
    "cols",
    "cols",
    "signal",
    "data",
    "depth",
    "recursive",
    "from",
    "to",
    "source",
    "destination",
    "template",
    "templateID",
    "metadata",
    "limits",
    "memory_mb",
    "cpu_millicores",
    "pids",
    "tmp_mb",
    "disk_mb",
    "on_timeout",
    "volumes",
    "volume",
    "mount_path",
    "read_only",
    "network",
    "egress",
    "allow",
    "allow_egress",
    "project",
    "size_limit_bytes",
    "dir",
    "process",
    "pid",
    "input",
    "stdout",
    "pty",
    "size",
    "selector",
    "config",
    "user",
    "autoPause",
    "allow_internet_access",
    "envVars",
    "duration",
    "secure",
    "lang",
    "seq",
    "stream",
    "include_entry",
    "limit",
    "",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::String),
        prop::sample::select(vec![
            "python",
            "js",
            "bash",
            "kill",
            "pause",
            "all",
            "none",
            "/",
            "..",
            "~",
            "SIGKILL",
            "1.2.3.4",
            "10.0.0.0/8",
            "example.com:443",
            "/mnt/data",
            "code-interpreter-v1",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    3 => prop::sample::select(KEYS).prop_map(str::to_string),
                    1 => ".{0,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Parsing never panics; what parses round-trips (through a JSON value and through text).
fn check<T>(v: &Value, bytes: &[u8])
where
    T: DeserializeOwned + Serialize + PartialEq + Debug,
{
    if let Ok(t) = serde_json::from_value::<T>(v.clone()) {
        let again = serde_json::to_value(&t).expect("a parsed request serializes");
        let back: T = serde_json::from_value(again.clone())
            .unwrap_or_else(|e| panic!("{again} does not parse back: {e}"));
        assert_eq!(back, t, "round trip of {v}");
        let text = serde_json::to_string(&t).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t, "text round trip of {text}");
    }
    let _ = serde_json::from_slice::<T>(bytes);
    let _ = serde_json::from_slice::<T>(v.to_string().as_bytes());
}

macro_rules! every_request {
    ($v:expr, $b:expr) => {{
        let (v, b): (&Value, &[u8]) = ($v, $b);
        check::<CreateContextRequest>(v, b);
        check::<ExecuteRequest>(v, b);
        check::<StartCommandRequest>(v, b);
        check::<StartPtyRequest>(v, b);
        check::<ProcessInputRequest>(v, b);
        check::<SignalRequest>(v, b);
        check::<ResizePtyRequest>(v, b);
        check::<StreamQuery>(v, b);
        check::<MakeDirRequest>(v, b);
        check::<RenameRequest>(v, b);
        check::<files::ListQuery>(v, b);
        check::<PathQuery>(v, b);
        check::<WatchQuery>(v, b);
        check::<CreateVolumeRequest>(v, b);
        check::<VolumeMountRequest>(v, b);
        check::<CreateSandboxRequest>(v, b);
        check::<NetworkRequest>(v, b);
        check::<LimitsRequest>(v, b);
        check::<SetTimeoutRequest>(v, b);
        check::<CreateProjectRequest>(v, b);
        check::<HibernateDirRequest>(v, b);
        check::<AuditQuery>(v, b);
        check::<Language>(v, b);
        check::<ci::ExecuteRequest>(v, b);
        check::<ci::CreateContextRequest>(v, b);
        check::<envd::StartRequest>(v, b);
        check::<envd::SelectRequest>(v, b);
        check::<envd::SendSignalRequest>(v, b);
        check::<envd::SendInputRequest>(v, b);
        check::<envd::UpdateRequest>(v, b);
        check::<envd::PathRequest>(v, b);
        check::<envd::ListDirRequest>(v, b);
        check::<envd::MoveRequest>(v, b);
        check::<envd::WatchDirRequest>(v, b);
        check::<envd::WatcherRequest>(v, b);
        check::<api::NewSandbox>(v, b);
        check::<api::TimeoutRequest>(v, b);
        check::<api::RefreshRequest>(v, b);
        check::<api::ConnectSandbox>(v, b);
        // What clients parse from a server (or a compromised agent).
        let _ = serde_json::from_value::<EventFrame>(v.clone());
        let _ = serde_json::from_value::<CommandEvent>(v.clone());
        let _ = serde_json::from_value::<ErrorBody>(v.clone());
        let _ = serde_json::from_slice::<EventFrame>(b);
    }};
}

proptest! {
    #[test]
    fn request_types_parse_arbitrary_json_without_panicking(v in json(), b in prop::collection::vec(any::<u8>(), 0..256)) {
        every_request!(&v, &b);
    }

    #[test]
    fn request_types_parse_almost_json_without_panicking(v in json(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        // Valid JSON, cut short or with one byte changed.
        let text = v.to_string().into_bytes();
        let i = cut.index(text.len().max(1)).min(text.len());
        every_request!(&v, &text[..i]);
        let mut changed = text.clone();
        if !changed.is_empty() {
            let j = i.min(changed.len() - 1);
            changed[j] = byte;
        }
        every_request!(&v, &changed);
    }

    #[test]
    fn envelopes_never_panic_and_frame_what_they_split(body in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(parts) = envd::envelopes(&body) {
            // Re-framing the parts gives the body back, byte for byte.
            let again: Vec<u8> = parts.iter().flat_map(|(f, m)| envd::envelope(*f, m)).collect();
            prop_assert_eq!(again, body);
        }
    }

    #[test]
    fn envelopes_round_trip(msgs in prop::collection::vec((any::<u8>().prop_map(|f| f & !envd::FLAG_COMPRESSED), prop::collection::vec(any::<u8>(), 0..64)), 0..5)) {
        let body: Vec<u8> = msgs.iter().flat_map(|(f, m)| envd::envelope(*f, m)).collect();
        let parts = envd::envelopes(&body).unwrap();
        prop_assert_eq!(parts.len(), msgs.len());
        for ((f, m), (pf, pm)) in msgs.iter().zip(parts) {
            prop_assert_eq!(*f, pf);
            prop_assert_eq!(&m[..], pm);
        }
        // Any strict prefix that cuts a message is refused, never misread.
        if let Some(last) = body.len().checked_sub(1) {
            if !msgs.is_empty() {
                prop_assert!(envd::envelopes(&body[..last]).is_err());
            }
        }
    }

    #[test]
    fn normalize_language_is_total_and_agrees_with_the_language_parser(name in prop_oneof![".{0,12}", prop::sample::select(vec![" JS ", "Python3", "node", "SH", "", "r", "java"]).prop_map(str::to_string)]) {
        match ci::normalize_language(Some(&name)) {
            Ok(l) => {
                let n = name.trim();
                prop_assert!(n.is_empty() || n.parse::<Language>() == Ok(l), "{name:?} → {l:?}");
            }
            Err(m) => prop_assert!(m.contains("not available")),
        }
        prop_assert_eq!(ci::normalize_language(None), Ok(Language::Python));
    }

    #[test]
    fn volume_names_and_mount_paths_are_checked_totally(s in prop_oneof![".{0,80}", "[a-z0-9._/-]{0,40}", "/(mnt|home/user|data|workspace)(/[a-z.]{0,5}){0,4}/?"]) {
        if valid_volume_name(&s) {
            prop_assert!(!s.is_empty() && s.len() <= 63 && !s.contains('/') && !s.starts_with("vol_"));
        }
        if check_mount_path(&s).is_ok() {
            prop_assert!(s.starts_with('/'));
            prop_assert!(!s.ends_with('/'));
            prop_assert!(s.split('/').skip(1).all(|c| !c.is_empty() && c != "." && c != ".."), "{s}");
        }
    }
}
