//! `TemplateError`: every way loading, finding or building a template can fail, with enough
//! context to act on (which spec, which build step, which command and the tail of its output).
//!
//! It does not log or retry anything; callers decide how to present it.

use std::path::PathBuf;
use std::process::ExitStatus;

/// A failure of the template builder.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The name is neither a built-in template nor found in the templates directory.
    #[error(
        "unknown template {name:?}: not built in ({builtins}) and no spec file found{searched}"
    )]
    UnknownTemplate {
        name: String,
        builtins: String,
        searched: String,
    },
    /// A spec (or a file it names) could not be read.
    #[error("reading {path}: {source}")]
    ReadSpec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A spec is not valid TOML for the schema.
    #[error("template spec {origin}: {source}")]
    ParseSpec {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    /// A spec parsed but says something the builder cannot do.
    #[error("template spec {origin}: {message}")]
    InvalidSpec { origin: String, message: String },
    /// Building needs root (debootstrap, chroot, mount, chown).
    #[error("building a template needs root (debootstrap, chroot, mount and chown); running as uid {uid}")]
    NotRoot { uid: u32 },
    /// A host program the build runs is not installed.
    #[error("building a template needs `{tool}` on the host (install {package})")]
    MissingTool {
        tool: &'static str,
        package: &'static str,
    },
    /// No Debian mirror was given and none could be read from the host's apt configuration.
    #[error("no Debian mirror for suite {suite:?}: none given and none found in {searched}")]
    NoMirror { suite: String, searched: String },
    /// A command could not be started.
    #[error("step {step}: starting `{command}`: {source}")]
    Spawn {
        step: &'static str,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("step {step}: `{command}` failed ({status}); last output:\n{tail}")]
    Command {
        step: &'static str,
        command: String,
        status: ExitStatus,
        tail: String,
    },
    /// A file-system operation failed.
    #[error("step {step}: {action} {path}: {source}")]
    Io {
        step: &'static str,
        action: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file in the built tree has an owner the user namespace cannot map.
    #[error("step {step}: {path} is owned by {id}, outside the sandbox's id range 0..{limit}")]
    IdOutOfRange {
        step: &'static str,
        path: PathBuf,
        id: u32,
        limit: u32,
    },
    /// A directory that must be deleted still has something mounted under it.
    #[error("refusing to delete {path}: {mount} is still mounted under it")]
    StillMounted { path: PathBuf, mount: PathBuf },
    /// `--locked`: the build installed other versions than the spec's lock names.
    #[error("template {name}: the build differs from its lock {lock} (--locked): {report}")]
    LockDrift {
        name: String,
        lock: String,
        report: String,
    },
    /// `--locked` or `--update-lock` with a spec that cannot do it.
    #[error("template {name}: {message}")]
    Lock { name: String, message: String },
    /// The metadata file of a build could not be written.
    #[error("writing template metadata {path}: {source}")]
    Metadata {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Short-hand for this crate's results.
pub type Result<T, E = TemplateError> = std::result::Result<T, E>;

/// Adds the build step, the action and the path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn at(self, step: &'static str, action: &str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, step: &'static str, action: &str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| TemplateError::Io {
            step,
            action: action.to_owned(),
            path: path.into(),
            source,
        })
    }
}
