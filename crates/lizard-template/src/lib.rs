//! Lizard's template builder: turns a template spec (`templates/<name>.toml`, schema in
//! `templates/README.md`) into a root file system for sandboxes, cached by content hash under a data
//! directory.
//!
//! ```no_run
//! use lizard_template::{build, BuildOptions, NoProgress};
//! let opts = BuildOptions::new("/var/lib/lizard");
//! let t = build("code-interpreter-v1", &opts, &mut NoProgress)?; // at once when already built
//! println!("{} -> {}", t.key, t.rootfs.display());
//! # Ok::<(), lizard_template::TemplateError>(())
//! ```
//!
//! - [`spec`]: the schema, loading (from a file, a templates directory or the built-in copies
//!   embedded in this crate, so a binary run from anywhere can build `code-interpreter-v1`) and the
//!   cache key.
//! - [`build()`] / [`build_spec`]: the build (debootstrap, user, Python venv, Node, cleanup, id
//!   shift); blocking, needs root; callers in async code run it on a blocking thread.
//! - [`find`] / [`find_spec`]: a complete, up-to-date build, if any; no root needed.
//! - [`dockerfile`]: the Dockerfile front end of user templates (pure: parse to a plan).
//! - [`layer`]: layered templates (a read-only layer over a base) and their chain of layers.
//! - [`TemplateMeta`]: `template.json`, what a sandbox launcher needs to know about a build.
//!
//! It does not start sandboxes, mount the rootfs or know about the server: the launcher in
//! `lizard-jail` / the server uses the [`Template`] it returns.

mod build;
pub use build::{compiled_runner_path, PYTHON_RUNNER};
pub mod dockerfile;
mod error;
pub mod layer;
pub mod lock;
pub mod meta;
pub mod mirror;
mod run;
pub mod shift;
pub mod spec;
pub mod store;

use std::path::{Path, PathBuf};

pub use error::{Result, TemplateError};
pub use meta::TemplateMeta;
pub use spec::{builtin_names, load, spec_path, LoadedSpec, Spec, BUILDER_VERSION};

/// The name of the template sandboxes use when none is given.
pub const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";
/// The default id shift: sandboxes map inside ids 0..65536 to host ids 100000..165536.
pub const DEFAULT_ID_SHIFT: u32 = 100_000;

/// How to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOptions {
    /// Builds live in `<data_dir>/templates/<name>/<key>/`.
    pub data_dir: PathBuf,
    /// Rebuild even when an up-to-date build exists.
    pub force: bool,
    /// Added to every owner in the rootfs (see [`shift`]); a build with another shift is rebuilt.
    pub id_shift: u32,
    /// The Debian mirror; `None` reads it from the host's apt configuration.
    pub mirror: Option<String>,
    /// Where `build(name)` looks for `<name>.toml` before the built-in templates.
    pub templates_dir: Option<PathBuf>,
    /// What a difference between the spec's lock and the installed versions does (see [`lock`]).
    /// [`lock::LockMode::Update`] always builds afresh.
    pub lock: lock::LockMode,
}

impl BuildOptions {
    /// Defaults: no force, id shift 100000, the host's mirror, built-in templates only.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        BuildOptions {
            data_dir: data_dir.into(),
            force: false,
            id_shift: DEFAULT_ID_SHIFT,
            mirror: None,
            templates_dir: None,
            lock: lock::LockMode::Report,
        }
    }
}

/// Receives the build's progress. Steps are numbered from 1 to `total`; `message` gets notable
/// lines (the output of the commands the build runs, and the builder's own notes).
pub trait Progress: Send {
    fn step(&mut self, index: usize, total: usize, name: &str);
    fn message(&mut self, line: &str);
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn step(&mut self, _: usize, _: usize, _: &str) {}
    fn message(&mut self, _: &str) {}
}

/// A complete build of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    /// The cache key (content hash of the spec, the files it names and the builder version).
    pub key: String,
    /// `<data_dir>/templates/<name>/<key>`: holds `rootfs/`, `template.json`, `complete`.
    pub dir: PathBuf,
    /// The root file system (owners shifted by `meta.id_shift`).
    pub rootfs: PathBuf,
    /// The contents of `template.json`.
    pub meta: TemplateMeta,
}

/// The complete, up-to-date build of the template `name_or_path` (a built-in name or a spec file
/// path, see [`spec::load`]), if there is one. Does not check the id shift; see `meta.id_shift`.
pub fn find(data_dir: &Path, name_or_path: &str) -> Result<Option<Template>> {
    let spec = load(name_or_path, None)?;
    Ok(find_spec(data_dir, &spec))
}

/// The newest complete build named `name` in `data_dir`, whatever spec it came from: how a server
/// finds a user's own template (built from a spec file it does not have) by name. `name` must be a
/// plain template name, never a path.
pub fn find_built(data_dir: &Path, name: &str) -> Option<Template> {
    if name.is_empty() || name.starts_with('.') || name.contains('/') {
        return None;
    }
    let dir = store::template_dir(data_dir, name);
    let mut builds: Vec<Template> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let key = e.file_name().to_str()?.to_owned();
            store::read_build(data_dir, name, &key)
        })
        .collect();
    builds.sort_by(|a, b| a.meta.created.cmp(&b.meta.created));
    builds.pop()
}

/// The complete build of a loaded spec (its key), if there is one.
pub fn find_spec(data_dir: &Path, spec: &LoadedSpec) -> Option<Template> {
    let data_dir = std::path::absolute(data_dir).ok()?;
    store::read_build(&data_dir, &spec.spec.name, &spec.key)
}

/// Builds the template `name_or_path` (looked up in `opts.templates_dir`, then among the built-in
/// ones; or a spec file path), or returns the existing build at once when it is up to date.
pub fn build(
    name_or_path: &str,
    opts: &BuildOptions,
    progress: &mut dyn Progress,
) -> Result<Template> {
    let spec = load(name_or_path, opts.templates_dir.as_deref())?;
    build_spec(&spec, opts, progress)
}

/// Builds a loaded spec (see [`build()`]). Only one build of a template runs at a time (a lock
/// file); a second caller waits and then gets the first one's result. On success, older builds of
/// the same template are removed unless a sandbox still uses them (see [`store::pin`]); on failure,
/// the partial build is.
pub fn build_spec(
    spec: &LoadedSpec,
    opts: &BuildOptions,
    progress: &mut dyn Progress,
) -> Result<Template> {
    build::build(spec, opts, progress)
}
