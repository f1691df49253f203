//! Files: the sandbox's filesystem as the agent exposes it.
//!
//! Paths are strings; relative ones resolve against the sandbox user's home (`/home/user`), and
//! every path is normalised lexically (`.` and `..` removed; `..` at `/` stays at `/`). The agent
//! runs inside the sandbox, so every path, symlinks included, names a file of the sandbox's own
//! filesystem. Empty paths and paths with NUL bytes are `invalid_request`s.
//!
//! Routes: `GET|PUT|DELETE /files?path=` (raw bytes both ways, streamed), `GET /files/stat?path=`,
//! `GET /files/list?path=&depth=`, `POST /files/mkdir`, `POST /files/rename`, and
//! `GET /files/watch?path=&recursive=` (an NDJSON stream of [`FsEvent`]s).

use serde::{Deserialize, Serialize};

/// What kind of filesystem object an entry is (symlinks are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One filesystem entry (`GET /files/stat`, `GET /files/list`, and the answer to writes).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EntryInfo {
    /// The last path component (`/` for the root).
    pub name: String,
    /// The normalised absolute path.
    pub path: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// Bytes (of the link itself for a symlink).
    pub size: u64,
    /// Permission bits, e.g. 420 (= 0o644).
    pub mode: u32,
    /// `ls -l` style, e.g. `-rw-r--r--` or `drwxr-xr-x`.
    pub permissions: String,
    /// User and group names (numeric ids when the sandbox's `/etc/passwd`/`/etc/group` has none).
    pub owner: String,
    pub group: String,
    /// Last modification, milliseconds since the Unix epoch.
    pub modified_ms: i64,
    /// Where a symlink points (as written in the link).
    pub symlink_target: Option<String>,
}

/// `?path=` of `GET|PUT|DELETE /files` and `GET /files/stat`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    /// Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
    /// normalised; empty or with a NUL byte is a 400.
    pub path: String,
    /// Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
    /// then resolve against `/root`).
    pub user: Option<String>,
}

/// `GET /files/list?path=&depth=`: entries below `path`, `depth` levels deep (default 1), sorted by
/// path. Symlinked directories are listed but not entered.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
    /// normalised; empty or with a NUL byte is a 400.
    pub path: String,
    /// How many levels deep (default 1).
    pub depth: Option<u32>,
    /// Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
    /// then resolve against `/root`).
    pub user: Option<String>,
}

/// `GET /files/watch?path=&recursive=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Relative paths resolve against the user's home (`/home/user`, or `/root` as `root`);
    /// normalised; empty or with a NUL byte is a 400.
    pub path: String,
    /// Also every directory below `path`.
    #[serde(default)]
    pub recursive: bool,
}

/// `POST /files/mkdir`: create a directory and its missing parents. 201 with the new
/// [`EntryInfo`]; 409 `conflict` when `path` already exists.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MakeDirRequest {
    pub path: String,
    /// Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
    /// then resolve against `/root`).
    pub user: Option<String>,
}

/// `POST /files/rename`: move `from` to `to` (missing parents of `to` are created; an existing file
/// at `to` is replaced, like `rename(2)`). Answers the moved entry.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    pub from: String,
    pub to: String,
    /// Act as this user: `user` (the default) or `root` (the sandbox's own root; relative paths
    /// then resolve against `/root`).
    pub user: Option<String>,
}

/// Kinds of [`FsEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FsEventType {
    /// First event of every watch stream: the watch is in place (`path` is the watched path).
    Start,
    /// A file or directory appeared (including as the target of a rename).
    Create,
    /// A file's content changed.
    Write,
    /// A file or directory was deleted.
    Remove,
    /// A file or directory was renamed away from `path` (its new name arrives as a `create`).
    Rename,
    /// Permissions, ownership or timestamps changed.
    Chmod,
}

/// One line of `GET /files/watch` (NDJSON). Clients must ignore types they do not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsEvent {
    #[serde(rename = "type")]
    pub event_type: FsEventType,
    /// Absolute path of the affected entry.
    pub path: String,
    /// `path` relative to the watched directory (empty for the watched path itself).
    pub name: String,
    pub is_dir: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_wire_shape() {
        let e = EntryInfo {
            name: "a.txt".into(),
            path: "/home/user/a.txt".into(),
            file_type: FileType::File,
            size: 3,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_ms: 1,
            symlink_target: None,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "file");
        assert_eq!(v["mode"], 420);
        assert!(v.get("symlink_target").is_none());
        let ev = FsEvent {
            event_type: FsEventType::Create,
            path: "/x/y".into(),
            name: "y".into(),
            is_dir: false,
        };
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"type":"create","path":"/x/y","name":"y","is_dir":false}"#
        );
    }
}
