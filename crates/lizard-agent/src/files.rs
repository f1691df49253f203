//! Files: read, write, stat, list, make directories, rename, remove and watch paths of the sandbox's
//! filesystem.
//!
//! The agent runs inside the sandbox as its user, so every path (absolute, `..`, or through a
//! symlink) names a file of the sandbox's own filesystem, with the sandbox user's permissions: there
//! is no "outside" to escape to. Paths are still checked (empty or NUL → `invalid_request`) and
//! normalised lexically; relative paths (and `~`) resolve against the agent's default working
//! directory (`/home/user` in a sandbox).
//!
//! Content streams both ways: `GET /files` sends the file in chunks as it reads it, and
//! `PUT /files` writes the request body chunk by chunk into a temporary file next to the target
//! (`.lizard-upload-*`, hidden from watchers) and renames it over the target at the end, so a reader
//! never sees half a file (writing through a symlink replaces its target). Neither has a size limit
//! (the agent's 16 MiB body limit does not apply).
//!
//! Watching uses inotify: `GET /files/watch` streams [`FsEvent`]s as NDJSON until the client leaves.
//! A rename shows as `rename` (old path) and `create` (new path). A file written through `PUT`
//! appears as one `create` of its final name. E2B's file metadata (`user.e2b.*` extended
//! attributes, [`metadata`]) is stored by [`write_file_with`] and read by the E2B adapter; Lizard's
//! own routes neither set nor report it. Not here: quotas, ownership changes, other extended
//! attributes, partial reads (`Range`), compression.
//!
//! `user` (query or body): `user` (the default) or `root`, the sandbox's own root — the operation
//! then acts as the agent itself (uid 0 with its kept capabilities: any file of the sandbox's own
//! file system; what it makes is root's) and relative paths resolve against `/root`. Watching
//! always acts as the sandbox user.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use lizard_http::api::{stream_response, ApiError, ApiJson, ApiQuery};
use lizard_jail::inotify::{Event as InoEvent, Inotify, Watch};
use lizard_proto::{
    EntryInfo, ErrorCode, FileType, FsEvent, FsEventType, ListQuery, MakeDirRequest, PathQuery,
    RenameRequest, WatchQuery, NDJSON,
};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

/// Prefix of `PUT`'s temporary files.
const UPLOAD_PREFIX: &str = ".lizard-upload-";
/// Read size when streaming a file out.
const READ_CHUNK: usize = 256 * 1024;
/// Write size when streaming a body in.
const WRITE_CHUNK: usize = 1024 * 1024;

/// Failures of file operations, mapped to API errors.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("the path is empty")]
    EmptyPath,
    #[error("the path contains a NUL byte")]
    NulInPath,
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("{0} is a directory")]
    IsADirectory(String),
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("{0} is not a regular file")]
    NotAFile(String),
    #[error("refusing to {0} the root directory")]
    Root(&'static str),
    #[error("depth must be at least 1")]
    Depth,
    #[error(
        "{0} is on a kernel file system (/proc, /sys): the files API serves the sandbox's files \
         only (read such entries with a command)"
    )]
    KernelFs(String),
    /// File metadata refused (envd's limits) or that does not fit the file system.
    #[error("{0}")]
    Metadata(String),
    #[error("the upload of {path} was interrupted")]
    Upload {
        path: String,
        #[source]
        source: axum::Error,
    },
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

impl FilesError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> FilesError {
        let p = path.display().to_string();
        match source.raw_os_error() {
            Some(libc::ENOENT) => FilesError::NotFound(p),
            Some(libc::EEXIST) => FilesError::AlreadyExists(p),
            Some(libc::EISDIR) => FilesError::IsADirectory(p),
            Some(libc::ENOTDIR) => FilesError::NotADirectory(p),
            _ => FilesError::Io {
                op,
                path: p,
                source,
            },
        }
    }
}

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        let code = match &e {
            FilesError::EmptyPath
            | FilesError::NulInPath
            | FilesError::IsADirectory(_)
            | FilesError::NotADirectory(_)
            | FilesError::NotAFile(_)
            | FilesError::Root(_)
            | FilesError::Depth
            | FilesError::Metadata(_)
            | FilesError::Upload { .. } => ErrorCode::InvalidRequest,
            FilesError::NotFound(_) => ErrorCode::NotFound,
            FilesError::KernelFs(_) => ErrorCode::PermissionDenied,
            FilesError::AlreadyExists(_) => ErrorCode::Conflict,
            FilesError::Io { source, .. } => match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM | libc::EROFS) => ErrorCode::PermissionDenied,
                Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => ErrorCode::InsufficientStorage,
                Some(libc::ENOTEMPTY | libc::EBUSY | libc::ETXTBSY) => ErrorCode::Conflict,
                Some(
                    libc::EXDEV | libc::ENAMETOOLONG | libc::EINVAL | libc::ELOOP | libc::EMLINK,
                ) => ErrorCode::InvalidRequest,
                Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM) => ErrorCode::Unavailable,
                _ => ErrorCode::Internal,
            },
        };
        let message = match &e {
            FilesError::Io { source, .. } if source.raw_os_error() == Some(libc::EXDEV) => {
                format!("{e}: source and destination are on different filesystems")
            }
            FilesError::Io { source, .. } => format!("{e}: {source}"),
            FilesError::Upload { source, .. } => format!("{e}: {source}"),
            _ => e.to_string(),
        };
        if code == ErrorCode::Internal {
            tracing::warn!(error = %message, "file operation failed");
        }
        ApiError::new(code, message)
    }
}

/// Turn an API path into an absolute, lexically normalised path: relative paths (and `~`, `~/…`)
/// are taken from `base`; `.` is dropped and `..` removes the previous component (at `/` it stays
/// at `/`). Symlinks are not resolved.
pub fn resolve(base: &Path, path: &str) -> Result<PathBuf, FilesError> {
    if path.is_empty() {
        return Err(FilesError::EmptyPath);
    }
    if path.contains('\0') {
        return Err(FilesError::NulInPath);
    }
    let joined = if path == "~" {
        base.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/") {
        base.join(rest)
    } else {
        base.join(path) // an absolute `path` replaces `base`
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// Where the kernel's own file systems are mounted in a sandbox. The files API runs in the agent,
/// so `/proc/self` there is the agent itself (its memory, descriptors, environment), not a file of
/// the sandbox's: everything below these roots is refused, however the path gets there.
const KERNEL_ROOTS: &[&str] = &["/proc", "/sys"];

fn under_kernel_root(p: &Path) -> bool {
    KERNEL_ROOTS.iter().any(|r| p.starts_with(r))
}

/// Refuse `path` (absolute and normal, see [`resolve`]) when it is below a kernel root or leads
/// there through symlinks. Symlinks are followed by hand, component by component as the kernel
/// would, and the walk stops before it reads anything below a kernel root (not even `/proc/self`
/// is resolved). Opening is checked once more afterwards ([`refuse_kernel_file`]): a symlink
/// swapped between this check and the open is caught there.
fn refuse_kernel_fs(path: &Path) -> Result<(), FilesError> {
    let refused = || FilesError::KernelFs(path.display().to_string());
    if under_kernel_root(path) {
        return Err(refused());
    }
    let mut todo: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        })
        .collect();
    let mut cur = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            cur.pop();
            continue;
        }
        if name == "." || name.is_empty() {
            continue;
        }
        let next = cur.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                // Past the kernel's own limit the operation itself fails with ELOOP.
                if hops > 40 {
                    return Ok(());
                }
                let Ok(target) = std::fs::read_link(&next) else {
                    return Ok(());
                };
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                let parts: Vec<std::ffi::OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_os_string()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                todo.extend(parts.into_iter().rev());
            }
            // Missing or not a link: the rest of the path cannot be redirected from here.
            _ => cur = next,
        }
        if under_kernel_root(&cur) {
            return Err(refused());
        }
    }
    Ok(())
}

/// Refuse an opened file that is on a kernel file system (see [`refuse_kernel_fs`]).
fn refuse_kernel_file(f: &std::fs::File, path: &Path) -> Result<(), FilesError> {
    match lizard_jail::procfs::is_kernel_fs(f) {
        Ok(false) => Ok(()),
        Ok(true) => Err(FilesError::KernelFs(path.display().to_string())),
        Err(e) => Err(FilesError::io("stat", path, e)),
    }
}

/// [`resolve`], then [`refuse_kernel_fs`].
fn resolve_checked(base: &Path, path: &str) -> Result<PathBuf, FilesError> {
    let path = resolve(base, path)?;
    refuse_kernel_fs(&path)?;
    Ok(path)
}

/// The file-system calls of this module, each on a blocking thread acting on files as the sandbox
/// user (`crate::users::as_sandbox_user`): a path the user cannot reach is refused exactly as it
/// would be to the user, and what is made is the user's. (Outside a sandbox: as the agent.)
mod ufs {
    use crate::users::as_sandbox_user as run;
    use std::fs::{Metadata, Permissions};
    use std::io;
    use std::path::{Path, PathBuf};

    pub async fn metadata(p: &Path) -> io::Result<Metadata> {
        let p = p.to_path_buf();
        run(move || std::fs::metadata(p)).await
    }
    pub async fn symlink_metadata(p: &Path) -> io::Result<Metadata> {
        let p = p.to_path_buf();
        run(move || std::fs::symlink_metadata(p)).await
    }
    pub async fn canonicalize(p: &Path) -> io::Result<PathBuf> {
        let p = p.to_path_buf();
        run(move || std::fs::canonicalize(p)).await
    }
    pub async fn create_dir_all(p: &Path) -> io::Result<()> {
        let p = p.to_path_buf();
        run(move || std::fs::create_dir_all(p)).await
    }
    pub async fn remove_file(p: &Path) -> io::Result<()> {
        let p = p.to_path_buf();
        run(move || std::fs::remove_file(p)).await
    }
    pub async fn remove_dir_all(p: &Path) -> io::Result<()> {
        let p = p.to_path_buf();
        run(move || std::fs::remove_dir_all(p)).await
    }
    pub async fn set_permissions(p: &Path, perm: Permissions) -> io::Result<()> {
        let p = p.to_path_buf();
        run(move || std::fs::set_permissions(p, perm)).await
    }
    pub async fn rename(from: &Path, to: &Path) -> io::Result<()> {
        let (from, to) = (from.to_path_buf(), to.to_path_buf());
        run(move || std::fs::rename(from, to)).await
    }
    /// Open with `opts`; the file's later reads and writes need no permission check.
    pub async fn open(opts: std::fs::OpenOptions, p: &Path) -> io::Result<tokio::fs::File> {
        let p = p.to_path_buf();
        run(move || opts.open(p))
            .await
            .map(tokio::fs::File::from_std)
    }
    /// `statfs`'s file system type (its magic number).
    pub async fn fs_type(p: &Path) -> io::Result<u32> {
        let p = p.to_path_buf();
        run(move || lizard_jail::fileattrs::fs_magic(&p)).await
    }
    pub async fn open_read(p: &Path) -> io::Result<tokio::fs::File> {
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        open(opts, p).await
    }
}

struct FilesState {
    base: PathBuf,
}

type St = State<Arc<FilesState>>;

impl FilesState {
    /// Who a request acts as (its `user`) and where its relative paths resolve (that user's
    /// home).
    fn who(&self, user: Option<&str>) -> Result<(crate::users::RunAs, PathBuf), ApiError> {
        let who = crate::users::RunAs::parse(user)
            .map_err(|m| ApiError::new(lizard_proto::ErrorCode::InvalidRequest, m))?;
        let base = match who {
            crate::users::RunAs::Root if crate::users::sandbox_user().is_some() => {
                PathBuf::from(crate::users::ROOT_HOME)
            }
            _ => self.base.clone(),
        };
        Ok((who, base))
    }
}

/// The `/files` routes. `base` is where relative paths start.
pub fn routes<S: Clone + Send + Sync + 'static>(base: PathBuf) -> Router<S> {
    Router::new()
        .route(
            "/files",
            get(read)
                .put(write)
                .delete(remove)
                // Uploads stream to disk; the agent's 16 MiB limit is for JSON requests.
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/files/stat", get(stat))
        .route("/files/list", get(list))
        .route("/files/mkdir", post(mkdir))
        .route("/files/rename", post(rename))
        .route("/files/watch", get(watch))
        .with_state(Arc::new(FilesState { base }))
}

/// `mkdir -p dir`. A non-directory in the way is `NotADirectory` (not "already exists").
async fn create_dirs(dir: &Path) -> Result<(), FilesError> {
    match ufs::create_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTDIR)) => {
            Err(FilesError::NotADirectory(dir.display().to_string()))
        }
        Err(e) => Err(FilesError::io("create the directory", dir, e)),
    }
}

fn is_root(p: &Path) -> bool {
    p.parent().is_none()
}

/// `GET /files?path=`: the file's bytes.
async fn read(State(st): St, ApiQuery(q): ApiQuery<PathQuery>) -> Result<Response, ApiError> {
    let (who, base) = st.who(q.user.as_deref())?;
    Ok(crate::users::files_as(who, read_file(&base, &q.path)).await?)
}

/// A regular file's bytes as a streamed `application/octet-stream` response.
pub(crate) async fn read_file(base: &Path, path: &str) -> Result<Response, FilesError> {
    let path = resolve_checked(base, path)?;
    // Check before opening: opening a FIFO would wait for a writer.
    let meta = ufs::metadata(&path)
        .await
        .map_err(|e| FilesError::io("read", &path, e))?;
    if meta.is_dir() {
        return Err(FilesError::IsADirectory(path.display().to_string()));
    }
    if !meta.is_file() {
        return Err(FilesError::NotAFile(path.display().to_string()));
    }
    let file = ufs::open_read(&path)
        .await
        .map_err(|e| FilesError::io("open", &path, e))?;
    let file = file.into_std().await;
    refuse_kernel_file(&file, &path)?;
    let file = tokio::fs::File::from_std(file);
    let len = file
        .metadata()
        .await
        .map_err(|e| FilesError::io("stat", &path, e))?
        .len();
    // Files in /proc and friends say 0 and have content: stream those to the end, without a length.
    let limit = if len > 0 { len } else { u64::MAX };
    let reader = file.take(limit);
    let body = futures_util::stream::unfold(Some(reader), |state| async move {
        let mut reader = state?;
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(reader))),
            Err(e) => Some((Err(e), None)),
        }
    });
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if len > 0 {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    Ok(r)
}

/// `PUT /files?path=`: replace the file with the request body (parents are created).
async fn write(
    State(st): St,
    ApiQuery(q): ApiQuery<PathQuery>,
    body: Body,
) -> Result<Json<EntryInfo>, ApiError> {
    let (who, base) = st.who(q.user.as_deref())?;
    let mut body = body.into_data_stream();
    let written = crate::users::files_as(who, write_file(&base, &q.path, &mut body)).await;
    if written.is_err() {
        lizard_http::api::drain(&mut body).await;
    }
    Ok(Json(written?))
}

/// Replace the file at `path` with the bytes of `body`, atomically (parents are created).
pub(crate) async fn write_file<B>(base: &Path, path: &str, body: B) -> Result<EntryInfo, FilesError>
where
    B: futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    Ok(write_file_with(base, path, body, None).await?.0)
}

/// [`write_file`], and with `metadata` the file's metadata becomes exactly that map (see
/// [`metadata`]; an empty one clears what a file written in place had): it is stored before the
/// file takes its name, so whoever sees the file sees its metadata. The `bool` says whether it was
/// stored — `false` on a file system without extended attributes (as envd, the write still
/// succeeds) or without `metadata`.
pub(crate) async fn write_file_with<B>(
    base: &Path,
    path: &str,
    body: B,
    metadata: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(EntryInfo, bool), FilesError>
where
    B: futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    if let Some(m) = metadata {
        lizard_proto::e2b::envd::validate_metadata(m).map_err(FilesError::Metadata)?;
    }
    let path = resolve_checked(base, path)?;
    // Through a symlink, the link's target is written (as `echo > link` would); a dangling link is
    // replaced.
    let path = match ufs::symlink_metadata(&path).await {
        Ok(m) if m.file_type().is_symlink() => ufs::canonicalize(&path).await.unwrap_or(path),
        _ => path,
    };
    refuse_kernel_fs(&path)?;
    let Some(parent) = path.parent().map(Path::to_path_buf) else {
        return Err(FilesError::Root("write"));
    };
    create_dirs(&parent).await?;
    let existing = ufs::metadata(&path).await.ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(FilesError::IsADirectory(path.display().to_string()));
    }
    let tmp = parent.join(format!("{UPLOAD_PREFIX}{}", crate::ids::new_id()));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    let (mut file, in_place) = match ufs::open(opts, &tmp).await {
        Ok(f) => {
            let f = f.into_std().await;
            if let Err(e) = refuse_kernel_file(&f, &path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            (tokio::fs::File::from_std(f), false)
        }
        // A writable file in a directory the user cannot write to: write it in place.
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES)
                && existing.as_ref().is_some_and(|m| m.is_file()) =>
        {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).truncate(true);
            let f = ufs::open(opts, &path)
                .await
                .map_err(|e| FilesError::io("write", &path, e))?;
            let f = f.into_std().await;
            refuse_kernel_file(&f, &path)?;
            (tokio::fs::File::from_std(f), true)
        }
        Err(e) => return Err(FilesError::io("write", &path, e)),
    };
    let target = if in_place { &path } else { &tmp };
    let mut copied = copy_body(body, &mut file, target, &path).await;
    let mut stored = false;
    if let (Ok(()), Some(m)) = (&copied, metadata) {
        // A new file has none to clear; one written in place keeps its own (as `O_TRUNC` does).
        if in_place || !m.is_empty() {
            match metadata::store(file, m.clone(), in_place, &path).await {
                Ok(s) => stored = s && !m.is_empty(),
                Err(e) => copied = Err(e),
            }
        }
    }
    if let Err(e) = copied {
        if !in_place {
            let _ = ufs::remove_file(&tmp).await;
        }
        return Err(e);
    }
    if !in_place {
        if let Some(m) = &existing {
            let mode = m.permissions().mode() & 0o7777;
            let _ = ufs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).await;
        }
        if let Err(e) = ufs::rename(&tmp, &path).await {
            let _ = ufs::remove_file(&tmp).await;
            return Err(FilesError::io("write", &path, e));
        }
    }
    let names = Names::load().await;
    let meta = ufs::symlink_metadata(&path)
        .await
        .map_err(|e| FilesError::io("stat", &path, e))?;
    Ok((entry(&path, &meta, &names), stored))
}

async fn copy_body<B>(
    mut stream: B,
    file: &mut tokio::fs::File,
    written: &Path,
    target: &Path,
) -> Result<(), FilesError>
where
    B: futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
    let io_err = |e| FilesError::io("write", written, e);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| FilesError::Upload {
            path: target.display().to_string(),
            source,
        })?;
        if buf.is_empty() && chunk.len() >= WRITE_CHUNK {
            file.write_all(&chunk).await.map_err(io_err)?;
            continue;
        }
        buf.extend_from_slice(&chunk);
        if buf.len() >= WRITE_CHUNK {
            file.write_all(&buf).await.map_err(io_err)?;
            buf.clear();
        }
    }
    file.write_all(&buf).await.map_err(io_err)?;
    // tokio's File writes in the background: flush to see the last write's result.
    file.flush().await.map_err(io_err)?;
    Ok(())
}

/// `DELETE /files?path=`: a file, a symlink (not its target), or a directory with its contents.
async fn remove(State(st): St, ApiQuery(q): ApiQuery<PathQuery>) -> Result<StatusCode, ApiError> {
    let (who, base) = st.who(q.user.as_deref())?;
    crate::users::files_as(who, remove_path(&base, &q.path)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a file, a symlink (not its target), or a directory with its contents.
pub(crate) async fn remove_path(base: &Path, path: &str) -> Result<(), FilesError> {
    let path = resolve_checked(base, path)?;
    if is_root(&path) {
        return Err(FilesError::Root("remove"));
    }
    let meta = ufs::symlink_metadata(&path)
        .await
        .map_err(|e| FilesError::io("remove", &path, e))?;
    let r = if meta.is_dir() {
        ufs::remove_dir_all(&path).await
    } else {
        ufs::remove_file(&path).await
    };
    r.map_err(|e| FilesError::io("remove", &path, e))
}

/// `GET /files/stat?path=`.
async fn stat(
    State(st): St,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<EntryInfo>, ApiError> {
    let (who, base) = st.who(q.user.as_deref())?;
    Ok(Json(
        crate::users::files_as(who, stat_path(&base, &q.path)).await?,
    ))
}

/// The entry at `path` (a symlink itself, not its target).
pub(crate) async fn stat_path(base: &Path, path: &str) -> Result<EntryInfo, FilesError> {
    let path = resolve_checked(base, path)?;
    let meta = ufs::symlink_metadata(&path)
        .await
        .map_err(|e| FilesError::io("stat", &path, e))?;
    let names = Names::load().await;
    Ok(entry(&path, &meta, &names))
}

/// Where the symlink at `path` leads: its target's absolute path (every link on the way
/// resolved) and type, as the sandbox user sees them; `None` for a dangling link or one it cannot
/// follow.
pub(crate) async fn followed(path: &str) -> Option<(String, lizard_proto::FileType)> {
    let target = ufs::canonicalize(Path::new(path)).await.ok()?;
    let meta = ufs::metadata(&target).await.ok()?;
    let kind = if meta.is_dir() {
        lizard_proto::FileType::Dir
    } else if meta.is_file() {
        lizard_proto::FileType::File
    } else {
        lizard_proto::FileType::Other
    };
    Some((target.display().to_string(), kind))
}

/// `GET /files/list?path=&depth=`.
async fn list(
    State(st): St,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Vec<EntryInfo>>, ApiError> {
    let (who, base) = st.who(q.user.as_deref())?;
    let depth = q.depth.unwrap_or(1);
    Ok(Json(
        crate::users::files_as(who, list_dir(&base, &q.path, depth)).await?,
    ))
}

/// Entries below the directory `path`, `depth` levels deep, sorted by path.
pub(crate) async fn list_dir(
    base: &Path,
    path: &str,
    depth: u32,
) -> Result<Vec<EntryInfo>, FilesError> {
    let shown = path.to_string();
    let path = resolve_checked(base, path)?;
    if depth == 0 {
        return Err(FilesError::Depth);
    }
    let meta = ufs::metadata(&path)
        .await
        .map_err(|e| FilesError::io("list", &path, e))?;
    if !meta.is_dir() {
        return Err(FilesError::NotADirectory(path.display().to_string()));
    }
    let names = Names::load().await;
    let root = crate::users::files_root_flag();
    tokio::task::spawn_blocking(move || -> Result<Vec<EntryInfo>, FilesError> {
        let mut out = Vec::new();
        let walked = crate::users::with_root_flag(root, || {
            crate::users::with_sandbox_user(|| Ok(walk(&path, depth, &names, &mut out, true)))
        });
        walked.map_err(|e| FilesError::io("list", &path, e))??;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    })
    .await
    .map_err(|e| FilesError::Io {
        op: "list",
        path: shown,
        source: io::Error::other(e),
    })?
}

/// Entries of `dir` down to `depth` levels. Errors below the top level (e.g. an unreadable
/// subdirectory) leave that part out.
fn walk(
    dir: &Path,
    depth: u32,
    names: &Names,
    out: &mut Vec<EntryInfo>,
    top: bool,
) -> Result<(), FilesError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if top => return Err(FilesError::io("list", dir, e)),
        Err(_) => return Ok(()),
    };
    for de in rd.flatten() {
        let p = de.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        out.push(entry(&p, &meta, names));
        // `/proc` and `/sys` are listed as entries, never walked (see `KERNEL_ROOTS`).
        if depth > 1 && meta.is_dir() && !under_kernel_root(&p) {
            walk(&p, depth - 1, names, out, false)?;
        }
    }
    Ok(())
}

/// `POST /files/mkdir {path}`: 201 when created, 409 when it exists.
async fn mkdir(
    State(st): St,
    ApiJson(req): ApiJson<MakeDirRequest>,
) -> Result<(StatusCode, Json<EntryInfo>), ApiError> {
    let (who, base) = st.who(req.user.as_deref())?;
    Ok((
        StatusCode::CREATED,
        Json(crate::users::files_as(who, make_dir(&base, &req.path)).await?),
    ))
}

/// `mkdir -p path`; `AlreadyExists` when something is there.
pub(crate) async fn make_dir(base: &Path, path: &str) -> Result<EntryInfo, FilesError> {
    let path = resolve_checked(base, path)?;
    if ufs::symlink_metadata(&path).await.is_ok() {
        return Err(FilesError::AlreadyExists(path.display().to_string()));
    }
    create_dirs(&path).await?;
    let meta = ufs::symlink_metadata(&path)
        .await
        .map_err(|e| FilesError::io("stat", &path, e))?;
    let names = Names::load().await;
    Ok(entry(&path, &meta, &names))
}

/// `POST /files/rename {from, to}`.
async fn rename(
    State(st): St,
    ApiJson(req): ApiJson<RenameRequest>,
) -> Result<Json<EntryInfo>, ApiError> {
    let (who, base) = st.who(req.user.as_deref())?;
    Ok(Json(
        crate::users::files_as(who, rename_path(&base, &req.from, &req.to)).await?,
    ))
}

/// Move `from` to `to` (parents of `to` are created; across file systems it copies).
pub(crate) async fn rename_path(
    base: &Path,
    from: &str,
    to: &str,
) -> Result<EntryInfo, FilesError> {
    let from = resolve_checked(base, from)?;
    let to = resolve_checked(base, to)?;
    if is_root(&from) || is_root(&to) {
        return Err(FilesError::Root("rename"));
    }
    ufs::symlink_metadata(&from)
        .await
        .map_err(|e| FilesError::io("rename", &from, e))?;
    if let Some(parent) = to.parent() {
        create_dirs(parent).await?;
    }
    match ufs::rename(&from, &to).await {
        Ok(()) => {}
        // Across file systems (e.g. the home directory's overlay and the /tmp tmpfs) a rename is a
        // copy and a delete, which is what `mv` does (recursively, keeping modes and times).
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let mut mv = tokio::process::Command::new("mv");
            mv.arg("--").arg(&from).arg(&to);
            match crate::users::sandbox_user() {
                Some(_) if crate::users::files_root_flag() => {}
                Some(ids) => {
                    mv.uid(ids.uid).gid(ids.gid);
                }
                None => {}
            }
            let out = crate::procs::output_owned(&mut mv)
                .await
                .map_err(|e| FilesError::io("rename", &from, e))?;
            if !out.status.success() {
                return Err(FilesError::io(
                    "rename",
                    &from,
                    std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
                ));
            }
        }
        Err(e) => return Err(FilesError::io("rename", &from, e)),
    }
    let meta = ufs::symlink_metadata(&to)
        .await
        .map_err(|e| FilesError::io("stat", &to, e))?;
    let names = Names::load().await;
    Ok(entry(&to, &meta, &names))
}

/// User and group names from the sandbox's `/etc/passwd` and `/etc/group`.
#[derive(Default)]
struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    async fn load() -> Names {
        let parse = |text: String| -> HashMap<u32, String> {
            text.lines()
                .filter_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next()?;
                    let id = f.nth(1)?.parse().ok()?;
                    Some((id, name.to_string()))
                })
                .collect()
        };
        Names {
            users: parse(
                tokio::fs::read_to_string("/etc/passwd")
                    .await
                    .unwrap_or_default(),
            ),
            groups: parse(
                tokio::fs::read_to_string("/etc/group")
                    .await
                    .unwrap_or_default(),
            ),
        }
    }

    fn user(&self, uid: u32) -> String {
        self.users
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.to_string())
    }

    fn group(&self, gid: u32) -> String {
        self.groups
            .get(&gid)
            .cloned()
            .unwrap_or_else(|| gid.to_string())
    }
}

fn entry(path: &Path, meta: &std::fs::Metadata, names: &Names) -> EntryInfo {
    let ft = meta.file_type();
    let file_type = if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_dir() {
        FileType::Dir
    } else if ft.is_file() {
        FileType::File
    } else {
        FileType::Other
    };
    let mode = meta.mode();
    EntryInfo {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into()),
        path: path.to_string_lossy().into_owned(),
        file_type,
        size: meta.len(),
        mode: mode & 0o7777,
        permissions: permissions(mode),
        owner: names.user(meta.uid()),
        group: names.group(meta.gid()),
        modified_ms: meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000,
        symlink_target: ft
            .is_symlink()
            .then(|| std::fs::read_link(path).ok())
            .flatten()
            .map(|t| t.to_string_lossy().into_owned()),
    }
}

/// `ls -l` style permissions: type character plus rwx triplets (with s/S, t/T).
fn permissions(mode: u32) -> String {
    let kind = match mode & 0o170000 {
        0o040000 => 'd',
        0o120000 => 'l',
        0o020000 => 'c',
        0o060000 => 'b',
        0o010000 => 'p',
        0o140000 => 's',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    for (shift, special, on, off) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (mode & special != 0, x) {
            (true, true) => on,
            (true, false) => off,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `GET /files/watch?path=&recursive=`: NDJSON [`FsEvent`]s until the client leaves (or the watched
/// path itself is removed).
async fn watch(State(st): St, ApiQuery(q): ApiQuery<WatchQuery>) -> Result<Response, ApiError> {
    let (start, w) = open_watch(&st.base, &q.path, q.recursive).await?;
    let first = futures_util::stream::once(async move { ndjson(&[start]) });
    let rest = futures_util::stream::unfold(w, |mut w| async move {
        let events = w.next().await?;
        Some((ndjson(&events), w))
    });
    Ok(stream_response(
        NDJSON,
        Body::from_stream(first.chain(rest)),
    ))
}

/// Start watching `path` (and, with `recursive`, every directory below it): the `start` event and
/// the watcher whose [`Watcher::next`] yields the following events.
pub(crate) async fn open_watch(
    base: &Path,
    path: &str,
    recursive: bool,
) -> Result<(FsEvent, Watcher), FilesError> {
    let root = resolve_checked(base, path)?;
    let meta = ufs::metadata(&root)
        .await
        .map_err(|e| FilesError::io("watch", &root, e))?;
    let recursive = recursive && meta.is_dir();
    let watch_err = |e| FilesError::io("watch", &root, e);
    let ino = Inotify::new().map_err(watch_err)?;
    // Events are read through the reactor from a dup of the (non-blocking) inotify fd.
    let events = ino.fd().try_clone().map_err(watch_err)?;
    let events = pipe::Receiver::from_owned_fd_unchecked(events).map_err(watch_err)?;
    let root_watch = crate::users::with_sandbox_user(|| ino.watch(&root)).map_err(watch_err)?;
    let mut w = Watcher {
        ino,
        events,
        buf: vec![0u8; 64 * 1024],
        root: root.clone(),
        root_watch,
        recursive,
        paths: HashMap::from([(root_watch, root.clone())]),
        upload_moves: Default::default(),
        done: false,
    };
    if recursive {
        w.watch_tree_as_user(&root, false);
    }
    let start = FsEvent {
        event_type: FsEventType::Start,
        path: root.to_string_lossy().into_owned(),
        name: String::new(),
        is_dir: meta.is_dir(),
    };
    Ok((start, w))
}

fn ndjson(events: &[FsEvent]) -> Result<Bytes, Infallible> {
    let mut out = Vec::new();
    for e in events {
        out.extend_from_slice(&serde_json::to_vec(e).unwrap_or_default());
        out.push(b'\n');
    }
    Ok(Bytes::from(out))
}

/// One watch stream: an inotify instance and the directory each of its watches stands for.
pub(crate) struct Watcher {
    ino: Inotify,
    events: pipe::Receiver,
    buf: Vec<u8>,
    root: PathBuf,
    root_watch: Watch,
    recursive: bool,
    paths: HashMap<Watch, PathBuf>,
    /// Rename cookies of upload temporaries moved away (an upload writes `UPLOAD_PREFIX…` and
    /// renames it into place): their arrival is a write too. At most [`MAX_UPLOAD_COOKIES`].
    upload_moves: std::collections::VecDeque<u32>,
    done: bool,
}

/// Upload renames remembered at the most (their two halves normally come in one read).
const MAX_UPLOAD_COOKIES: usize = 64;

impl Watcher {
    /// [`Watcher::watch_tree`] as the sandbox user (what it may not read is not watched).
    fn watch_tree_as_user(&mut self, dir: &Path, skip_self: bool) {
        let _ = crate::users::with_sandbox_user(|| {
            self.watch_tree(dir, skip_self);
            Ok(())
        });
    }

    /// Watch every directory below `dir` (and `dir` itself unless `skip_self`), without following
    /// symlinks.
    fn watch_tree(&mut self, dir: &Path, skip_self: bool) {
        if !skip_self {
            if let Ok(w) = self.ino.watch(dir) {
                self.paths.insert(w, dir.to_path_buf());
            }
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for de in rd.flatten() {
            if de.file_type().is_ok_and(|t| t.is_dir()) {
                self.watch_tree(&de.path(), false);
            }
        }
    }

    /// The next non-empty batch of events; `None` when the stream is over.
    pub(crate) async fn next(&mut self) -> Option<Vec<FsEvent>> {
        loop {
            if self.done {
                return None;
            }
            let raw = match self.events.read(&mut self.buf).await {
                Ok(0) => return None,
                Ok(n) => lizard_jail::inotify::parse(&self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "reading inotify events");
                    return None;
                }
            };
            let events = self.translate(raw);
            if !events.is_empty() {
                return Some(events);
            }
        }
    }

    fn translate(&mut self, raw: Vec<InoEvent>) -> Vec<FsEvent> {
        let mut out = Vec::new();
        // Directories renamed within this batch: cookie → old path.
        let mut moved_dirs: HashMap<u32, PathBuf> = HashMap::new();
        for ev in raw {
            let m = ev.mask;
            if m.overflow {
                tracing::warn!(root = %self.root.display(), "inotify queue overflow: events lost");
                continue;
            }
            let Some(dir) = self.paths.get(&ev.watch).cloned() else {
                continue;
            };
            if m.ignored {
                self.paths.remove(&ev.watch);
                if ev.watch == self.root_watch {
                    self.done = true;
                }
                continue;
            }
            let is_root_event = ev.name.is_none();
            if is_root_event && ev.watch != self.root_watch {
                // A subdirectory's own delete/move: its parent's watch reports it by name.
                continue;
            }
            let path = match &ev.name {
                Some(n) => dir.join(n),
                None => dir.clone(),
            };
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(UPLOAD_PREFIX))
            {
                if m.moved_from {
                    if self.upload_moves.len() == MAX_UPLOAD_COOKIES {
                        self.upload_moves.pop_front();
                    }
                    self.upload_moves.push_back(ev.cookie);
                }
                continue;
            }
            // A file written through the files API arrives whole by a rename: a create and a
            // write, as the same write made in place shows them.
            let uploaded = m.moved_to
                && !m.is_dir
                && match self.upload_moves.iter().position(|c| *c == ev.cookie) {
                    Some(i) => self.upload_moves.remove(i).is_some(),
                    None => false,
                };
            let kinds: &[(bool, FsEventType)] = &[
                (m.create || m.moved_to, FsEventType::Create),
                (m.modify || uploaded, FsEventType::Write),
                (m.attrib, FsEventType::Chmod),
                (m.moved_from || m.move_self, FsEventType::Rename),
                (m.delete || m.delete_self, FsEventType::Remove),
            ];
            for (on, kind) in kinds {
                if *on {
                    out.push(self.event(*kind, &path, m.is_dir || is_root_event));
                }
            }
            if self.recursive && m.is_dir {
                if m.moved_from {
                    moved_dirs.insert(ev.cookie, path.clone());
                } else if m.moved_to {
                    match moved_dirs.remove(&ev.cookie) {
                        Some(old) => self.rebase(&old, &path),
                        None => self.watch_tree_as_user(&path, false),
                    }
                } else if m.create {
                    self.watch_tree_as_user(&path, false);
                }
            }
        }
        // Directories moved out of the tree: stop watching them.
        for old in moved_dirs.into_values() {
            let gone: Vec<Watch> = self
                .paths
                .iter()
                .filter(|(_, p)| p.starts_with(&old))
                .map(|(w, _)| *w)
                .collect();
            for w in gone {
                self.ino.unwatch(w);
                self.paths.remove(&w);
            }
        }
        out
    }

    /// A watched directory moved from `old` to `new` inside the tree: its watches follow it.
    fn rebase(&mut self, old: &Path, new: &Path) {
        for p in self.paths.values_mut() {
            if let Ok(rest) = p.strip_prefix(old) {
                *p = new.join(rest);
            }
        }
    }

    fn event(&self, kind: FsEventType, path: &Path, is_dir: bool) -> FsEvent {
        FsEvent {
            event_type: kind,
            path: path.to_string_lossy().into_owned(),
            name: path
                .strip_prefix(&self.root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default(),
            is_dir,
        }
    }
}

/// Whether `path` is on a network file system — NFS, CIFS/SMB or FUSE, by `statfs`'s magic number,
/// as E2B's envd tells them — which envd watches only when asked (`allowNetworkMounts`).
pub(crate) async fn on_network_fs(path: &str) -> Result<bool, FilesError> {
    const NETWORK: [u32; 5] = [0x6969, 0xFF53_4D42, 0x517B, 0xFE53_4D42, 0x6573_5546];
    let p = PathBuf::from(path);
    let kind = ufs::fs_type(&p)
        .await
        .map_err(|e| FilesError::io("watch", &p, e))?;
    Ok(NETWORK.contains(&kind))
}

/// File metadata as E2B's envd keeps it: key `k` is the extended attribute `user.e2b.k`
/// ([`lizard_proto::e2b::envd::METADATA_XATTR_PREFIX`]) of the file, value its bytes; other
/// attributes are not metadata. Keys and values are checked before they are stored
/// ([`lizard_proto::e2b::envd::validate_metadata`]: printable ASCII, envd's sizes); what is read
/// back is whatever UTF-8 is there (set with `setfattr` too). The kernel's own rules apply on
/// top: a `user.*` attribute is the file's, read with read permission and written with write
/// permission, on regular files and directories.
pub(crate) mod metadata {
    use super::FilesError;
    use lizard_jail::fileattrs;
    use lizard_proto::e2b::envd::METADATA_XATTR_PREFIX as PREFIX;
    use std::collections::BTreeMap;
    use std::ffi::CString;
    use std::io;
    use std::os::fd::AsFd;
    use std::path::Path;

    pub type Metadata = BTreeMap<String, String>;

    /// No extended attributes on this file system.
    fn unsupported(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::EOPNOTSUPP)
    }

    /// The metadata key of an attribute name (`None`: not metadata).
    fn key(name: &[u8]) -> Option<&[u8]> {
        name.strip_prefix(PREFIX.as_bytes())
            .filter(|k| !k.is_empty())
    }

    /// The metadata of the file at `path` (a symlink is followed), as the calling thread may read
    /// it. Best effort, like envd's: nothing on a file system without extended attributes or for a
    /// path that is gone, and an entry that cannot be read or is not UTF-8 is left out.
    pub fn read(path: &Path) -> Metadata {
        let mut out = Metadata::new();
        let Ok(names) = fileattrs::names(path) else {
            return out;
        };
        for name in names {
            let Some(k) = key(&name).and_then(|k| std::str::from_utf8(k).ok()) else {
                continue;
            };
            let Ok(cname) = CString::new(name.clone()) else {
                continue;
            };
            if let Ok(Some(v)) = fileattrs::value(path, &cname) {
                if let Ok(v) = String::from_utf8(v) {
                    out.insert(k.to_string(), v);
                }
            }
        }
        out
    }

    /// Make the metadata of the open `file` exactly `m` (with `clear`, keys not in `m` are removed;
    /// other attributes stay). `Ok(false)`: the file system has no extended attributes.
    pub fn write(file: &std::fs::File, m: &Metadata, clear: bool) -> io::Result<bool> {
        let fd = file.as_fd();
        if clear {
            let names = match fileattrs::fd_names(fd) {
                Ok(n) => n,
                Err(e) if unsupported(&e) => return Ok(false),
                Err(e) => return Err(e),
            };
            for name in names {
                let keep = key(&name)
                    .map(|k| std::str::from_utf8(k).is_ok_and(|k| m.contains_key(k)))
                    .unwrap_or(true);
                if !keep {
                    fileattrs::fd_remove(fd, &CString::new(name)?)?;
                }
            }
        }
        for (k, v) in m {
            match fileattrs::fd_set(fd, &CString::new(format!("{PREFIX}{k}"))?, v.as_bytes()) {
                Ok(()) => {}
                Err(e) if unsupported(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// [`write`] as the request's user (`crate::users::as_sandbox_user`), for the file written to
    /// `path`: whether it was stored, or the failure as a [`FilesError`].
    pub(super) async fn store(
        file: tokio::fs::File,
        m: Metadata,
        clear: bool,
        path: &Path,
    ) -> Result<bool, FilesError> {
        let file = file.into_std().await;
        match crate::users::as_sandbox_user(move || write(&file, &m, clear)).await {
            Ok(true) => Ok(true),
            Ok(false) => {
                tracing::info!(
                    path = %path.display(),
                    "file metadata not stored: the file system has no extended attributes"
                );
                Ok(false)
            }
            // ext4 keeps a file's attributes in one block: a set that does not fit is ENOSPC.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSPC | libc::E2BIG | libc::ERANGE)
                ) =>
            {
                Err(FilesError::Metadata(format!(
                    "the metadata does not fit in the extended attributes of {}: {e}",
                    path.display()
                )))
            }
            Err(e) => Err(FilesError::io("store the metadata of", path, e)),
        }
    }

    /// [`read`] for each of `paths`, as the request's user, in one blocking task.
    pub(crate) async fn read_all(paths: Vec<String>) -> Vec<Metadata> {
        let n = paths.len();
        crate::users::as_sandbox_user(move || {
            Ok(paths.iter().map(|p| read(Path::new(p))).collect())
        })
        .await
        .unwrap_or_else(|_| vec![Metadata::new(); n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_and_normalises() {
        let base = Path::new("/home/user");
        let r = |p: &str| resolve(base, p).map(|p| p.display().to_string());
        assert_eq!(r("a/b").unwrap(), "/home/user/a/b");
        assert_eq!(r("./a/../b/").unwrap(), "/home/user/b");
        assert_eq!(r("../../../../etc/passwd").unwrap(), "/etc/passwd");
        assert_eq!(r("/x/../../y").unwrap(), "/y");
        assert_eq!(r("~").unwrap(), "/home/user");
        assert_eq!(r("~/d").unwrap(), "/home/user/d");
        assert_eq!(r("/").unwrap(), "/");
        assert!(matches!(r(""), Err(FilesError::EmptyPath)));
        assert!(matches!(r("a\0b"), Err(FilesError::NulInPath)));
    }

    fn body(
        text: &'static str,
    ) -> impl futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin {
        futures_util::stream::iter(vec![Ok(Bytes::from(text))])
    }

    fn meta(pairs: &[(&str, &str)]) -> metadata::Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn metadata_is_stored_with_the_file_and_refused_past_envds_limits() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let m = meta(&[("author", "me"), ("purpose", "a test")]);
        let (e, stored) = write_file_with(base, "d/a.txt", body("x"), Some(&m))
            .await
            .unwrap();
        if !stored {
            return; // this file system keeps no extended attributes
        }
        assert_eq!(e.path, base.join("d/a.txt").display().to_string());
        assert_eq!(metadata::read(Path::new(&e.path)), m);
        // Through a symlink: the target's; a path that is not there has none.
        std::os::unix::fs::symlink("a.txt", base.join("d/link")).unwrap();
        assert_eq!(metadata::read(&base.join("d/link")), m);
        assert!(metadata::read(&base.join("d/missing")).is_empty());
        let all = metadata::read_all(vec![e.path.clone(), base.join("d").display().to_string()]);
        assert_eq!(all.await, vec![m.clone(), metadata::Metadata::new()]);
        // Written again with none (envd: the new write's set replaces the old), or with other
        // metadata: only that.
        let (_, stored) = write_file_with(base, "d/a.txt", body("y"), Some(&meta(&[])))
            .await
            .unwrap();
        assert!(!stored, "nothing to store");
        assert!(metadata::read(Path::new(&e.path)).is_empty());
        write_file_with(base, "d/a.txt", body("z"), Some(&meta(&[("k", "v")])))
            .await
            .unwrap();
        assert_eq!(metadata::read(Path::new(&e.path)), meta(&[("k", "v")]));
        // Past envd's limits: refused before anything is written (a 400).
        for bad in [
            meta(&[("k", &"v".repeat(5000))]),
            meta(&[("", "v")]),
            meta(&[("k", "tab\t")]),
        ] {
            let err = write_file_with(base, "d/b.txt", body("x"), Some(&bad))
                .await
                .unwrap_err();
            assert!(matches!(err, FilesError::Metadata(_)), "{err:?}");
            assert_eq!(ApiError::from(err).0.code, ErrorCode::InvalidRequest);
            assert!(!base.join("d/b.txt").exists());
        }
        // Without metadata (Lizard's own PUT) nothing is stored.
        let (_, stored) = write_file_with(base, "d/c.txt", body("x"), None)
            .await
            .unwrap();
        assert!(!stored);
    }

    #[test]
    fn metadata_writes_replace_the_set_and_leave_other_attributes() {
        use lizard_jail::fileattrs;
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        if !metadata::write(&f, &meta(&[("a", "1"), ("b", "2")]), true).unwrap() {
            return; // no extended attributes here
        }
        // Attributes that are not metadata: another `user.*` one, an empty key, a value that
        // is not UTF-8 (set from inside the sandbox, say).
        fileattrs::fd_set(f.as_fd(), c"user.foreign", b"kept").unwrap();
        fileattrs::fd_set(f.as_fd(), c"user.e2b.", b"no key").unwrap();
        fileattrs::fd_set(f.as_fd(), c"user.e2b.bin", &[0xff, 0xfe]).unwrap();
        assert_eq!(metadata::read(&p), meta(&[("a", "1"), ("b", "2")]));
        // Replacing: `b` (and the unreadable `bin`) go, `a` changes, the foreign one stays.
        assert!(metadata::write(&f, &meta(&[("a", "3")]), true).unwrap());
        assert_eq!(metadata::read(&p), meta(&[("a", "3")]));
        assert_eq!(
            fileattrs::value(&p, c"user.foreign").unwrap(),
            Some(b"kept".to_vec())
        );
        assert_eq!(fileattrs::value(&p, c"user.e2b.bin").unwrap(), None);
        // Without `clear`, keys are added to what is there.
        assert!(metadata::write(&f, &meta(&[("c", "4")]), false).unwrap());
        assert_eq!(metadata::read(&p), meta(&[("a", "3"), ("c", "4")]));
        // An empty set clears them all.
        metadata::write(&f, &meta(&[]), true).unwrap();
        assert!(metadata::read(&p).is_empty());
        assert!(fileattrs::value(&p, c"user.foreign").unwrap().is_some());
    }

    #[tokio::test]
    async fn local_file_systems_are_not_network_ones() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!on_network_fs(dir.path().to_str().unwrap()).await.unwrap());
        assert!(matches!(
            on_network_fs("/no/such/dir").await,
            Err(FilesError::NotFound(_))
        ));
    }

    #[test]
    fn permission_strings() {
        assert_eq!(permissions(0o100644), "-rw-r--r--");
        assert_eq!(permissions(0o040755), "drwxr-xr-x");
        assert_eq!(permissions(0o041777), "drwxrwxrwt");
        assert_eq!(permissions(0o104755), "-rwsr-xr-x");
        assert_eq!(permissions(0o120777), "lrwxrwxrwx");
    }

    proptest::proptest! {
        /// `resolve` on any input: an error for empty or NUL-carrying paths, else an absolute,
        /// lexically normal path (no `.`, `..` or empty components) that never leaves `/` — and
        /// resolving it again changes nothing.
        #[test]
        fn resolve_is_absolute_normal_and_idempotent(
            base in "(/[a-z][a-z.]{0,3}){0,3}",
            path in proptest::prop_oneof![
                ".{0,40}",
                "(\\.\\.|\\.|~|[a-z]{1,3}|)(/(\\.\\.|\\.|~|[a-z]{1,3}|)){0,8}",
            ],
        ) {
            let base = if base.is_empty() { "/".to_string() } else { base };
            match resolve(Path::new(&base), &path) {
                Err(_) => proptest::prop_assert!(path.is_empty() || path.contains('\0')),
                Ok(p) => {
                    let text = p.to_str().unwrap();
                    proptest::prop_assert!(text.starts_with('/'), "{text}");
                    proptest::prop_assert!(text == "/" || !text.ends_with('/'), "{text}");
                    proptest::prop_assert!(
                        text == "/" || text.split('/').skip(1).all(|c| !c.is_empty() && c != "." && c != ".."),
                        "{path:?} from {base:?} → {text:?}"
                    );
                    proptest::prop_assert_eq!(resolve(Path::new("/elsewhere"), text).unwrap(), p.clone());
                    // A path without `..` stays under the base when relative.
                    if !path.starts_with('/') && !path.split('/').any(|c| c == "..") && !path.starts_with('~') {
                        proptest::prop_assert!(p.starts_with(&base), "{path:?} from {base:?} → {text:?}");
                    }
                }
            }
        }
    }
}
