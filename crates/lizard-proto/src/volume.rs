//! Persistent volumes: the `/v1/volumes` types, the `volumes` option of a sandbox create, and the
//! pure rules for volume names and mount paths (shared by the server and the CLI).
//!
//! Not here: how a volume is stored or mounted (the server and `lizard-jail`).

use serde::{Deserialize, Serialize};

/// Size of a volume created without `size_limit_bytes`: 10 GiB.
pub const DEFAULT_VOLUME_SIZE_BYTES: u64 = 10 * 1024 * 1024 * 1024;
/// Smallest `size_limit_bytes`: 16 MiB.
pub const MIN_VOLUME_SIZE_BYTES: u64 = 16 * 1024 * 1024;
/// Largest `size_limit_bytes`: 1 TiB.
pub const MAX_VOLUME_SIZE_BYTES: u64 = 1024 * 1024 * 1024 * 1024;
/// Directories a volume may be mounted under (strictly below `/home/user` and `/mnt`; `/data` and
/// `/workspace` themselves too, as they are not part of the template).
pub const VOLUME_MOUNT_ROOTS: &[&str] = &["/home/user", "/mnt", "/data", "/workspace"];
/// Most volumes one sandbox mounts.
pub const MAX_VOLUMES_PER_SANDBOX: usize = 16;

/// `POST /v1/volumes`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    /// The owning project; a project key's own project when absent.
    pub project: Option<String>,
    /// Unique in the project: `[a-z0-9][a-z0-9._-]{0,62}`, not starting with `vol_`.
    pub name: String,
    /// Capacity of the volume's file system; [`DEFAULT_VOLUME_SIZE_BYTES`] when absent.
    pub size_limit_bytes: Option<u64>,
}

/// A volume as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VolumeInfo {
    /// `vol_` + 20 characters.
    pub volume_id: String,
    pub project: String,
    pub name: String,
    pub size_limit_bytes: u64,
    /// Bytes in use in the volume's file system now (data and metadata, as `df` counts them).
    pub used_bytes: u64,
    pub created_at_ms: u64,
    /// Running or paused sandboxes that mount the volume.
    #[serde(default)]
    pub mounted_by: Vec<String>,
}

/// One entry of `volumes` in `POST /v1/sandboxes`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeMountRequest {
    /// A volume of the sandbox's project, by name (or id).
    pub name: String,
    /// Absolute path inside the sandbox; `/home/user/<name>` when absent.
    pub mount_path: Option<String>,
    #[serde(default)]
    pub read_only: bool,
}

/// A volume mounted in a sandbox, as [`crate::SandboxInfo`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxVolume {
    pub volume_id: String,
    pub name: String,
    pub mount_path: String,
    pub read_only: bool,
}

/// Storage use of one volume in a project's usage report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VolumeUsage {
    pub volume_id: String,
    pub name: String,
    /// Bytes in use integrated over the volume's life (sampled), GiB-hours.
    pub gib_hours: f64,
    /// Bytes in use at the last sample.
    pub used_bytes: u64,
    /// Deleted volumes keep their usage.
    pub deleted: bool,
}

/// Whether `n` is a valid volume name: `[a-z0-9][a-z0-9._-]{0,62}`, not starting with `vol_`
/// (ids do, and the API accepts either).
pub fn valid_volume_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && !n.starts_with("vol_")
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// Check a volume mount path: absolute, normalised (no `.`, `..`, empty components or trailing
/// `/`), at most 1024 bytes, and inside [`VOLUME_MOUNT_ROOTS`]. Returns why not.
pub fn check_mount_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!("mount path {p:?} must be absolute"));
    }
    if p.len() > 1024 || p.contains('\0') {
        return Err(format!("mount path {p:?} is too long or contains NUL"));
    }
    if p.len() > 1 && p.ends_with('/') {
        return Err(format!("mount path {p:?} must not end with '/'"));
    }
    if p[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == ".." || c.len() > 255)
    {
        return Err(format!(
            "mount path {p:?} must be normalised (no '.', '..' or empty components)"
        ));
    }
    let allowed = VOLUME_MOUNT_ROOTS.iter().any(|root| {
        p.strip_prefix(root).is_some_and(|rest| {
            rest.starts_with('/') || (rest.is_empty() && !matches!(*root, "/home/user" | "/mnt"))
        })
    });
    if !allowed {
        return Err(format!(
            "mount path {p:?} is not allowed: volumes mount below /home/user or /mnt, or at or below /data or /workspace"
        ));
    }
    Ok(())
}

/// Whether mount paths `a` and `b` are the same or one contains the other.
pub fn mount_paths_overlap(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| x == y || x.strip_prefix(y).is_some_and(|r| r.starts_with('/'));
    under(a, b) || under(b, a)
}

/// `?project=&force=` of `GET /v1/volumes`, `GET|DELETE /v1/volumes/{volume}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeQuery {
    /// Project of a volume named by name (default: the key's own; `default` for an admin key).
    /// Listing with an admin key: only this project's (every project's when absent).
    pub project: Option<String>,
    /// Delete only: kill the sandboxes that mount the volume first.
    pub force: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "data", "0x", "my-vol.v2_x", &"a".repeat(63)] {
            assert!(valid_volume_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "A",
            "a/b",
            "a b",
            "..",
            &"a".repeat(64),
            "ü",
        ] {
            assert!(!valid_volume_name(bad), "{bad}");
        }
    }

    #[test]
    fn mount_paths() {
        for ok in [
            "/home/user/data",
            "/home/user/a/b",
            "/mnt/x",
            "/data",
            "/data/x",
            "/workspace",
        ] {
            assert_eq!(check_mount_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "data",
            "/",
            "/home/user",
            "/home/user/",
            "/home/userx",
            "/mnt",
            "/etc",
            "/proc",
            "/sys/x",
            "/dev",
            "/usr/lib",
            "/tmp/x",
            "/bin",
            "/lib64",
            "/run/lizard",
            "/opt/lizard",
            "/home/user/../../etc",
            "/home/user/./x",
            "/home/user//x",
            "/data/",
            "/datax",
            "/home/other/x",
        ] {
            assert!(check_mount_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overlaps() {
        assert!(mount_paths_overlap("/data", "/data"));
        assert!(mount_paths_overlap("/data", "/data/x"));
        assert!(mount_paths_overlap("/data/x", "/data"));
        assert!(!mount_paths_overlap("/data", "/datax"));
        assert!(!mount_paths_overlap("/mnt/a", "/mnt/b"));
    }
}
