//! E2B's envd wire: the Connect-protocol JSON messages of the `process.Process` and
//! `filesystem.Filesystem` services, Connect's envelope framing for streams, and the `/files`
//! answer.
//!
//! Proto3 JSON rules as the SDKs apply them: output field names are lowerCamelCase (input accepts
//! snake_case too), `bytes` are base64 strings (carried as `String` here, encoded by the caller),
//! `int64` is a decimal string, enums are names (numbers accepted), defaults may be omitted.
//! Streams are a sequence of envelopes (1 flag byte, 4-byte big-endian length, JSON) ending with an
//! end-of-stream envelope (flag `0x02`) that carries `{}` or the error.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// Media type of a Connect stream with the JSON codec.
pub const CONNECT_STREAM_JSON: &str = "application/connect+json";
/// Envelope flag: end of stream.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Envelope flag: compressed message (Lizard never sends or accepts compression).
pub const FLAG_COMPRESSED: u8 = 0x01;

// ---- framing ----

/// One envelope: flags, then the JSON message.
pub fn envelope(flags: u8, json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + json.len());
    v.push(flags);
    v.extend_from_slice(&(json.len() as u32).to_be_bytes());
    v.extend_from_slice(json);
    v
}

/// A malformed envelope stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeError {
    /// Fewer bytes than the header or the announced length.
    Truncated,
    /// The compressed flag is set (no compression was negotiated).
    Compressed,
}

impl std::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvelopeError::Truncated => f.write_str("truncated Connect envelope"),
            EnvelopeError::Compressed => {
                f.write_str("compressed Connect messages are not supported (send identity)")
            }
        }
    }
}

impl std::error::Error for EnvelopeError {}

/// Split a whole request body into its envelopes (flags, message).
pub fn envelopes(mut body: &[u8]) -> Result<Vec<(u8, &[u8])>, EnvelopeError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(EnvelopeError::Truncated);
        }
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let rest = &body[5..];
        if rest.len() < len {
            return Err(EnvelopeError::Truncated);
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(EnvelopeError::Compressed);
        }
        out.push((flags, &rest[..len]));
        body = &rest[len..];
    }
    Ok(out)
}

// ---- errors ----

/// A Connect error: `{"code": "not_found", "message": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectError {
    pub code: String,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ConnectError {
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// The HTTP status of a unary call failing with this code.
    pub fn http_status(&self) -> u16 {
        match self.code.as_str() {
            "invalid_argument" | "out_of_range" | "failed_precondition" => 400,
            "unauthenticated" => 401,
            "permission_denied" => 403,
            "not_found" => 404,
            "already_exists" | "aborted" => 409,
            "resource_exhausted" => 429,
            "canceled" => 499,
            "unimplemented" => 501,
            "unavailable" => 503,
            "deadline_exceeded" => 504,
            _ => 500,
        }
    }
}

/// The end-of-stream message: `{}` on success, `{"error": …}` on failure.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndStream {
    pub error: Option<ConnectError>,
}

impl EndStream {
    /// The whole end-of-stream envelope.
    pub fn envelope(&self) -> Vec<u8> {
        envelope(
            FLAG_END_STREAM,
            &serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec()),
        )
    }
}

// ---- process ----

/// What to run.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessConfig {
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    #[serde(default)]
    pub cols: u32,
    #[serde(default)]
    pub rows: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pty {
    #[serde(default)]
    pub size: Option<PtySize>,
}

/// `Process/Start`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRequest {
    pub process: ProcessConfig,
    #[serde(default)]
    pub pty: Option<Pty>,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub stdin: Option<bool>,
}

/// Which process: by pid or by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSelector {
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub tag: Option<String>,
}

/// `Process/Connect`, `Process/CloseStdin`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectRequest {
    pub process: ProcessSelector,
}

/// `Process/SendSignal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSignalRequest {
    pub process: ProcessSelector,
    #[serde(deserialize_with = "enum_value")]
    pub signal: EnumValue,
}

/// `Process/SendInput`: base64 bytes for stdin or the terminal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInput {
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub pty: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInputRequest {
    pub process: ProcessSelector,
    #[serde(default)]
    pub input: ProcessInput,
}

/// `Process/Update` (terminal resize).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRequest {
    pub process: ProcessSelector,
    #[serde(default)]
    pub pty: Option<Pty>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedProcess {
    pub config: ProcessConfig,
    pub pid: u32,
    pub tag: Option<String>,
}

/// `Process/List`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    pub processes: Vec<ListedProcess>,
}

/// Output bytes (base64) of one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Output {
    Stdout(String),
    Stderr(String),
    Pty(String),
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    pub error: Option<String>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// One event of a process stream (`StartResponse` / `ConnectResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessEvent {
    Start { pid: u32 },
    Data(Output),
    End(EndEvent),
    Keepalive {},
}

/// `{"event": …}`: the message of every process stream envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEventMessage {
    pub event: ProcessEvent,
}

impl ProcessEvent {
    /// The event as one stream envelope.
    pub fn envelope(self) -> Vec<u8> {
        let msg = ProcessEventMessage { event: self };
        envelope(0, &serde_json::to_vec(&msg).unwrap_or_default())
    }
}

// ---- filesystem ----

/// `Filesystem/Stat`, `MakeDir`, `Remove`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRequest {
    pub path: String,
}

/// `Filesystem/ListDir`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListDirRequest {
    pub path: String,
    #[serde(default)]
    pub depth: Option<u32>,
}

/// `Filesystem/Move`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRequest {
    pub source: String,
    pub destination: String,
}

/// `Filesystem/WatchDir` and `CreateWatcher`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchDirRequest {
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
    /// Each create, write and chmod event carries the entry's info (envd 0.6.3).
    #[serde(default, rename = "includeEntry", alias = "include_entry")]
    pub include_entry: bool,
    /// Watching a directory on a network file system (NFS, CIFS/SMB, FUSE) is refused unless
    /// this is set (envd 0.6.4).
    #[serde(default, rename = "allowNetworkMounts", alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

/// `Filesystem/GetWatcherEvents`, `RemoveWatcher`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatcherRequest {
    #[serde(alias = "watcher_id", rename = "watcherId")]
    pub watcher_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    #[serde(rename = "FILE_TYPE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "FILE_TYPE_FILE")]
    File,
    #[serde(rename = "FILE_TYPE_DIRECTORY")]
    Directory,
    #[serde(rename = "FILE_TYPE_SYMLINK")]
    Symlink,
}

/// A filesystem entry as envd describes it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    pub path: String,
    /// int64 → decimal string.
    pub size: String,
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    /// RFC 3339.
    pub modified_time: String,
    pub symlink_target: Option<String>,
    /// The file's user metadata ([`METADATA_XATTR_PREFIX`] extended attributes), envd 0.6.2.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl From<&crate::EntryInfo> for EntryInfo {
    fn from(e: &crate::EntryInfo) -> Self {
        EntryInfo {
            name: e.name.clone(),
            file_type: match e.file_type {
                crate::FileType::File => FileType::File,
                crate::FileType::Dir => FileType::Directory,
                crate::FileType::Symlink => FileType::Symlink,
                crate::FileType::Other => FileType::Unspecified,
            },
            path: e.path.clone(),
            size: e.size.to_string(),
            mode: e.mode,
            permissions: e.permissions.clone(),
            owner: e.owner.clone(),
            group: e.group.clone(),
            modified_time: super::rfc3339_ms(e.modified_ms),
            symlink_target: e.symlink_target.clone(),
            metadata: BTreeMap::new(),
        }
    }
}

/// `{"entry": …}`: the answer of `Stat`, `MakeDir` and `Move`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryResponse {
    pub entry: EntryInfo,
}

/// `{"entries": […]}`: the answer of `ListDir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListDirResponse {
    pub entries: Vec<EntryInfo>,
}

/// A watch event's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "EVENT_TYPE_CREATE")]
    Create,
    #[serde(rename = "EVENT_TYPE_WRITE")]
    Write,
    #[serde(rename = "EVENT_TYPE_REMOVE")]
    Remove,
    #[serde(rename = "EVENT_TYPE_RENAME")]
    Rename,
    #[serde(rename = "EVENT_TYPE_CHMOD")]
    Chmod,
}

impl EventType {
    /// Lizard's watch event kind; `start` has no E2B event (a stream announces itself otherwise).
    pub fn from_lizard(t: crate::FsEventType) -> Option<Self> {
        Some(match t {
            crate::FsEventType::Start => return None,
            crate::FsEventType::Create => EventType::Create,
            crate::FsEventType::Write => EventType::Write,
            crate::FsEventType::Remove => EventType::Remove,
            crate::FsEventType::Rename => EventType::Rename,
            crate::FsEventType::Chmod => EventType::Chmod,
        })
    }
}

/// One filesystem event: `name` is relative to the watched directory; `entry` (asked for with
/// `includeEntry`) is what is at the path as the event is sent, for creates, writes and chmods
/// (never for removes and renames, whose entry is gone), and absent when it is gone by then.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub entry: Option<Box<EntryInfo>>,
}

impl EventType {
    /// Whether an event of this kind names an entry that is still at its path (envd attaches
    /// entries to these only).
    pub fn carries_entry(self) -> bool {
        matches!(
            self,
            EventType::Create | EventType::Write | EventType::Chmod
        )
    }
}

/// The messages of a `WatchDir` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WatchDirResponse {
    Start {},
    Filesystem(FilesystemEvent),
    Keepalive {},
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    pub watcher_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetWatcherEventsResponse {
    pub events: Vec<FilesystemEvent>,
}

/// One written file in `POST /files`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenFile {
    pub path: String,
    pub name: String,
    #[serde(rename = "type")]
    pub file_type: String,
    /// The metadata stored on it (the request's `X-Metadata-*`, keys lowercased).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

// ---- file metadata (envd 0.6.2) ----

/// The extended-attribute namespace of file metadata: key `k` is the xattr `user.e2b.k`, as in
/// E2B's envd (`user.` is the namespace unprivileged users may write; other `user.*` attributes
/// are not metadata).
pub const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// The request headers that carry metadata on `POST /files`: `X-Metadata-<key>: <value>`.
pub const METADATA_HEADER_PREFIX: &str = "x-metadata-";
/// The longest key: Linux limits an xattr name (prefix included) to 255 bytes.
pub const MAX_METADATA_KEY_LEN: usize = 255 - METADATA_XATTR_PREFIX.len();
/// The most metadata one file takes, counted as envd counts it: every key's stored name
/// (prefix + key) plus its value. ext4 keeps a file's xattrs in one 4 KiB block.
pub const MAX_METADATA_TOTAL_LEN: usize = 4096;

/// Why metadata is refused: envd's checks and wording.
pub fn validate_metadata(metadata: &BTreeMap<String, String>) -> Result<(), String> {
    let printable = |label: &str, s: &str| match s.bytes().position(|c| !(0x20..=0x7e).contains(&c))
    {
        Some(i) => Err(format!(
            "metadata {label} contains non-printable-ASCII byte 0x{:02x} at offset {i}",
            s.as_bytes()[i]
        )),
        None => Ok(()),
    };
    let mut total = 0;
    for (k, v) in metadata {
        if k.is_empty() {
            return Err("metadata key must not be empty".into());
        }
        if k.len() > MAX_METADATA_KEY_LEN {
            return Err(format!(
                "metadata key {k:?} exceeds {MAX_METADATA_KEY_LEN} bytes"
            ));
        }
        printable("key", k)?;
        printable(&format!("value for key {k:?}"), v)?;
        total += METADATA_XATTR_PREFIX.len() + k.len() + v.len();
    }
    if total > MAX_METADATA_TOTAL_LEN {
        return Err(format!(
            "total metadata size {total} exceeds {MAX_METADATA_TOTAL_LEN} bytes"
        ));
    }
    Ok(())
}

/// The metadata of an upload from its request headers (name, value): every `X-Metadata-<key>`,
/// the key lowercased (header names are case-insensitive; envd lowercases them too), the first
/// value of a repeated one, a header with an empty key ignored; then [`validate_metadata`].
pub fn metadata_from_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let Some(key) = name.strip_prefix(METADATA_HEADER_PREFIX) else {
            continue;
        };
        if key.is_empty() || out.contains_key(key) {
            continue;
        }
        let value = match std::str::from_utf8(value) {
            Ok(v) => v.to_string(),
            Err(_) => {
                let i = value.iter().position(|c| !c.is_ascii()).unwrap_or(0);
                return Err(format!(
                    "metadata value for key {key:?} contains non-printable-ASCII byte 0x{:02x} \
                     at offset {i}",
                    value[i]
                ));
            }
        };
        out.insert(key.to_string(), value);
    }
    validate_metadata(&out)?;
    Ok(out)
}

// ---- enums as names or numbers ----

/// A proto enum value as sent: its name or its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnumValue {
    Name(String),
    Number(i64),
}

fn enum_value<'de, D: Deserializer<'de>>(d: D) -> Result<EnumValue, D::Error> {
    EnumValue::deserialize(d)
}

impl EnumValue {
    /// The `process.Signal` as a signal name (`SIGTERM`, `SIGKILL`).
    pub fn signal_name(&self) -> Option<&'static str> {
        match self {
            EnumValue::Name(n) => match n.trim_start_matches("SIGNAL_") {
                "SIGTERM" => Some("SIGTERM"),
                "SIGKILL" => Some("SIGKILL"),
                _ => None,
            },
            EnumValue::Number(15) => Some("SIGTERM"),
            EnumValue::Number(9) => Some("SIGKILL"),
            EnumValue::Number(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_round_trip_and_reject_garbage() {
        let mut body = envelope(0, b"{\"a\":1}");
        body.extend(EndStream::default().envelope());
        let parts = envelopes(&body).unwrap();
        assert_eq!(
            parts,
            vec![(0, &b"{\"a\":1}"[..]), (FLAG_END_STREAM, &b"{}"[..])]
        );
        assert_eq!(envelopes(&body[..3]), Err(EnvelopeError::Truncated));
        assert_eq!(envelopes(&body[..8]), Err(EnvelopeError::Truncated));
        assert_eq!(
            envelopes(&envelope(1, b"x")),
            Err(EnvelopeError::Compressed)
        );
        assert_eq!(envelopes(b"").unwrap(), vec![]);
    }

    #[test]
    fn sdk_requests_parse() {
        let s: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"}},"stdin":false}"#,
        )
        .unwrap();
        assert_eq!(s.process.args[2], "echo hi");
        assert_eq!(s.stdin, Some(false));
        let sig: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":12},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(sig.signal.signal_name(), Some("SIGKILL"));
        let sig: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":12},"signal":15}"#).unwrap();
        assert_eq!(sig.signal.signal_name(), Some("SIGTERM"));
        let inp: SendInputRequest =
            serde_json::from_str(r#"{"process":{"pid":12},"input":{"stdin":"aGkK"}}"#).unwrap();
        assert_eq!(inp.input.stdin.as_deref(), Some("aGkK"));
        let w: WatcherRequest = serde_json::from_str(r#"{"watcher_id":"w1"}"#).unwrap();
        assert_eq!(w.watcher_id, "w1");
    }

    #[test]
    fn events_serialize_as_the_sdks_expect() {
        let v = |e: ProcessEvent| serde_json::to_value(ProcessEventMessage { event: e }).unwrap();
        assert_eq!(
            v(ProcessEvent::Start { pid: 7 }),
            json!({"event": {"start": {"pid": 7}}})
        );
        assert_eq!(
            v(ProcessEvent::Data(Output::Stdout("aGkK".into()))),
            json!({"event": {"data": {"stdout": "aGkK"}}})
        );
        assert_eq!(
            v(ProcessEvent::End(EndEvent {
                exit_code: 1,
                exited: true,
                status: "exit status 1".into(),
                error: None
            })),
            json!({"event": {"end": {"exitCode": 1, "exited": true, "status": "exit status 1"}}})
        );
        assert_eq!(
            v(ProcessEvent::Keepalive {}),
            json!({"event": {"keepalive": {}}})
        );
        let end = EndStream {
            error: Some(ConnectError::new("deadline_exceeded", "too slow")),
        };
        assert_eq!(
            serde_json::to_value(end).unwrap(),
            json!({"error": {"code": "deadline_exceeded", "message": "too slow"}})
        );
    }

    #[test]
    fn entries_use_proto_json() {
        let e = crate::EntryInfo {
            name: "a.txt".into(),
            path: "/home/user/a.txt".into(),
            file_type: crate::FileType::File,
            size: 5,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_ms: 0,
            symlink_target: None,
        };
        assert_eq!(
            serde_json::to_value(EntryInfo::from(&e)).unwrap(),
            json!({"name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/a.txt",
                   "size": "5", "mode": 420, "permissions": "-rw-r--r--", "owner": "user",
                   "group": "user", "modifiedTime": "1970-01-01T00:00:00.000000Z"})
        );
        // Metadata and watch entries, as the SDKs read them (envd 0.6.2, 0.6.3).
        let mut with_meta = EntryInfo::from(&e);
        with_meta.metadata = BTreeMap::from([("author".to_string(), "me".to_string())]);
        assert_eq!(
            serde_json::to_value(&with_meta).unwrap()["metadata"],
            json!({"author": "me"})
        );
        let ev = FilesystemEvent {
            name: "a.txt".into(),
            event_type: EventType::Create,
            entry: Some(Box::new(with_meta)),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["type"], "EVENT_TYPE_CREATE");
        assert_eq!(v["entry"]["path"], "/home/user/a.txt");
        assert_eq!(v["entry"]["metadata"]["author"], "me");
        let bare = FilesystemEvent { entry: None, ..ev };
        assert_eq!(
            serde_json::to_value(&bare).unwrap(),
            json!({"name": "a.txt", "type": "EVENT_TYPE_CREATE"})
        );
        assert!(EventType::Write.carries_entry() && EventType::Chmod.carries_entry());
        assert!(!EventType::Remove.carries_entry() && !EventType::Rename.carries_entry());
        let w = WrittenFile {
            path: "/a".into(),
            name: "a".into(),
            file_type: "file".into(),
            metadata: BTreeMap::new(),
        };
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            json!({"path": "/a", "name": "a", "type": "file"})
        );
    }

    #[test]
    fn watch_requests_take_both_spellings() {
        let w: WatchDirRequest = serde_json::from_str(
            r#"{"path":"/d","recursive":true,"includeEntry":true,"allowNetworkMounts":true}"#,
        )
        .unwrap();
        assert!(w.recursive && w.include_entry && w.allow_network_mounts);
        let w: WatchDirRequest =
            serde_json::from_str(r#"{"path":"/d","include_entry":true}"#).unwrap();
        assert!(w.include_entry && !w.allow_network_mounts);
        let w: WatchDirRequest = serde_json::from_str(r#"{"path":"/d"}"#).unwrap();
        assert!(!w.include_entry && !w.recursive);
    }

    #[test]
    fn metadata_headers_and_limits_are_envds() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            metadata_from_headers(pairs.iter().map(|(n, v)| (*n, v.as_bytes())))
        };
        assert_eq!(h(&[("x-access-token", "t")]).unwrap(), BTreeMap::new());
        assert_eq!(
            h(&[
                ("X-Metadata-Author", "first"),
                ("x-metadata-author", "second"),
                ("x-metadata-Purpose", "upload"),
                ("x-metadata-", "dropped"),
                ("content-type", "application/octet-stream"),
            ])
            .unwrap(),
            BTreeMap::from([
                ("author".to_string(), "first".to_string()),
                ("purpose".to_string(), "upload".to_string())
            ])
        );
        let e = metadata_from_headers([("x-metadata-k", "café".as_bytes())]).unwrap_err();
        assert!(
            e.contains("non-printable-ASCII byte 0xc3 at offset 3"),
            "{e}"
        );
        let e = metadata_from_headers([("x-metadata-k", &b"\xff"[..])]).unwrap_err();
        assert!(e.contains("non-printable-ASCII byte 0xff"), "{e}");
        let m = |pairs: Vec<(String, String)>| validate_metadata(&pairs.into_iter().collect());
        assert!(m(vec![]).is_ok());
        assert!(m(vec![("k".into(), "v".repeat(2048))]).is_ok());
        assert!(m(vec![("".into(), "v".into())])
            .unwrap_err()
            .contains("must not be empty"));
        let long = "k".repeat(MAX_METADATA_KEY_LEN + 1);
        assert!(m(vec![(long, "v".into())])
            .unwrap_err()
            .contains("exceeds 246 bytes"));
        assert!(m(vec![("k".repeat(MAX_METADATA_KEY_LEN), "".into())]).is_ok());
        assert!(m(vec![("k".into(), "tab\there".into())])
            .unwrap_err()
            .contains("non-printable"));
        assert!(m(vec![("k".into(), "v".repeat(MAX_METADATA_TOTAL_LEN))])
            .unwrap_err()
            .contains("total metadata size"));
        let half = "v".repeat(MAX_METADATA_TOTAL_LEN / 2);
        assert!(m(vec![("a".into(), half.clone()), ("b".into(), half)])
            .unwrap_err()
            .contains("total metadata size"));
        // Exactly at the limit: 9 + 1 + 4086.
        assert!(m(vec![("k".into(), "v".repeat(4086))]).is_ok());
        assert!(m(vec![("k".into(), "v".repeat(4087))]).is_err());
    }
}
