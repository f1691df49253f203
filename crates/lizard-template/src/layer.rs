//! Layered templates: a template that is a read-only layer over a base template (built inside a
//! build sandbox from a Dockerfile, see the server's `templates` module), and the chain of layers
//! a sandbox of it mounts.
//!
//! ```text
//! <data_dir>/templates/.user/<id>/<key>/layer/          the layer (owners in the template range)
//! <data_dir>/templates/.user/<id>/<key>/template.json   LayerMeta: the effective TemplateMeta + base
//! <data_dir>/templates/.user/<id>/<key>/complete        the completion marker (the key), written last
//! ```
//!
//! `<id>` is the server's id of the template (its name is the project's, not a path); `.user`
//! starts with a dot, so a name lookup of the built-in store ([`crate::find_built`]) never reaches
//! it. A layer's base is named by its build directory's absolute host path (a built-in's
//! `<templates data dir>/templates/code-interpreter-v1/<key>` or another layer's
//! `<data_dir>/templates/.user/<id>/<key>`; `template.json` is the host's, never the sandbox's):
//! a base keeps its build while a layer or a sandbox uses it (pinned, see [`crate::store::pin`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::meta::TemplateMeta;
use crate::store::{templates_root, MARKER, META_FILE};
use crate::Template;

/// The directory of user templates under `<data_dir>/templates`.
pub const USER_DIR: &str = ".user";
/// The layer directory of a layered build.
pub const LAYER_DIR: &str = "layer";
/// At most this many layers in a chain (the launcher's limit too).
pub const MAX_CHAIN: usize = 16;

/// A template name: 1-64 of `[A-Za-z0-9._-]`, not starting with `.` (never a path).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The base of a layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRef {
    pub name: String,
    pub key: String,
    /// The base's build directory (an absolute host path).
    pub dir: PathBuf,
}

/// `template.json` of a layered build: the effective metadata of the whole chain (the base's,
/// with the build's environment and user), its base, and the final working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerMeta {
    #[serde(flatten)]
    pub meta: TemplateMeta,
    pub base: BaseRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

/// A template with every layer a sandbox of it mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The top build (for a layer: `rootfs` is its `layer/` directory, `meta` the effective one).
    pub top: Template,
    /// The lower layers, top first (the last is a full rootfs).
    pub lower: Vec<PathBuf>,
    /// Every build directory of the chain, top first (each pinned by a sandbox that uses it).
    pub builds: Vec<PathBuf>,
    /// The final WORKDIR of the top layer, if any.
    pub workdir: Option<String>,
}

/// `<data_dir>/templates/.user/<id>`: every build of user template `id`.
pub fn user_dir(data_dir: &Path, id: &str) -> PathBuf {
    templates_root(data_dir).join(USER_DIR).join(id)
}

fn plain_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::RootDir))
}

/// The complete build in `dir` (a built-in's `<data>/templates/<name>/<key>` or a layer's),
/// read without a name check: the caller found `dir` through its own records.
pub fn read_build_dir(dir: &Path) -> Option<(Template, Option<LayerMeta>)> {
    let key = dir.file_name()?.to_str()?.to_owned();
    let marker = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    if marker.trim() != key {
        return None;
    }
    let bytes = std::fs::read(dir.join(META_FILE)).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    if value.get("base").is_some() {
        let lm: LayerMeta = serde_json::from_value(value).ok()?;
        let layer = dir.join(LAYER_DIR);
        if lm.meta.key != key || !layer.is_dir() {
            return None;
        }
        let t = Template {
            name: lm.meta.name.clone(),
            key,
            dir: dir.to_path_buf(),
            rootfs: layer,
            meta: lm.meta.clone(),
        };
        return Some((t, Some(lm)));
    }
    let name = value.get("name")?.as_str()?.to_owned();
    // `<data>/templates/<name>/<key>`.
    let data_dir = dir.parent()?.parent()?.parent()?;
    if dir.parent()?.file_name()? != name.as_str() {
        return None;
    }
    crate::store::read_build(data_dir, &name, &key).map(|t| (t, None))
}

/// The chain of `top`: its layers down to a full rootfs. Fails when a base is gone or the chain
/// is longer than [`MAX_CHAIN`].
pub fn resolve(top: &Template) -> Result<Chain, String> {
    let (first, lm) = read_build_dir(&top.dir)
        .ok_or_else(|| format!("the build {} is not complete", top.dir.display()))?;
    let workdir = lm.as_ref().and_then(|l| l.workdir.clone());
    let mut lower = vec![first.rootfs.clone()];
    let mut builds = vec![first.dir.clone()];
    let mut next = lm.map(|l| l.base);
    while let Some(base) = next {
        if lower.len() >= MAX_CHAIN {
            return Err(format!("more than {MAX_CHAIN} layers"));
        }
        if !plain_absolute(&base.dir) {
            return Err(format!("bad base directory {:?}", base.dir));
        }
        let (t, lm) = read_build_dir(&base.dir)
            .ok_or_else(|| format!("its base {} ({}) is gone", base.name, base.key))?;
        if t.key != base.key {
            return Err(format!("its base {} changed", base.name));
        }
        lower.push(t.rootfs.clone());
        builds.push(t.dir.clone());
        next = lm.map(|l| l.base);
    }
    Ok(Chain {
        top: first,
        lower,
        builds,
        workdir,
    })
}

/// The content key of a Dockerfile build: sha256 of the base's key, the Dockerfile, the build
/// args and the context archive's bytes (and this scheme's version).
pub fn build_key(
    base_key: &str,
    dockerfile: &str,
    build_args: &BTreeMap<String, String>,
    context: &[u8],
) -> String {
    let mut h = Sha256::new();
    let mut part = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(b"lizard-layer-v1");
    part(base_key.as_bytes());
    part(dockerfile.as_bytes());
    for (k, v) in build_args {
        part(k.as_bytes());
        part(v.as_bytes());
    }
    part(context);
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Finish a layered build made in `build_dir` (holding `layer/`): write its meta and marker, then
/// rename it to `<user_dir>/<key>` (one rename: readers see all or nothing).
pub fn commit(build_dir: &Path, meta: &LayerMeta) -> std::io::Result<PathBuf> {
    let final_dir = build_dir
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent"))?
        .join(&meta.meta.key);
    std::fs::write(
        build_dir.join(META_FILE),
        serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?,
    )?;
    std::fs::write(build_dir.join(MARKER), format!("{}\n", meta.meta.key))?;
    std::fs::rename(build_dir, &final_dir)?;
    Ok(final_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, key: &str) -> TemplateMeta {
        crate::meta::test_meta(name, key)
    }

    #[test]
    fn a_chain_resolves_top_first_and_breaks_when_a_base_is_gone() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path();
        let base = crate::store::template_dir(d, "base").join("k0");
        std::fs::create_dir_all(base.join("rootfs")).unwrap();
        std::fs::write(
            base.join(META_FILE),
            serde_json::to_vec(&meta("base", "k0")).unwrap(),
        )
        .unwrap();
        std::fs::write(base.join(MARKER), "k0\n").unwrap();
        let mut prev = BaseRef {
            name: "base".into(),
            key: "k0".into(),
            dir: base.clone(),
        };
        let mut tops = Vec::new();
        for (i, id) in ["a", "b"].iter().enumerate() {
            let key = format!("k{}", i + 1);
            let b = user_dir(d, id).join(format!(".build-{key}"));
            std::fs::create_dir_all(b.join(LAYER_DIR)).unwrap();
            let lm = LayerMeta {
                meta: meta(id, &key),
                base: prev.clone(),
                workdir: Some(format!("/w{i}")),
            };
            let fin = commit(&b, &lm).unwrap();
            prev = BaseRef {
                name: id.to_string(),
                key: key.clone(),
                dir: fin.clone(),
            };
            tops.push(fin);
        }
        let (top, _) = read_build_dir(&tops[1]).unwrap();
        let c = resolve(&top).unwrap();
        assert_eq!(
            c.lower,
            vec![
                tops[1].join(LAYER_DIR),
                tops[0].join(LAYER_DIR),
                base.join("rootfs")
            ]
        );
        assert_eq!(c.workdir.as_deref(), Some("/w1"));
        assert_eq!(c.builds.len(), 3);
        std::fs::remove_file(tops[0].join(MARKER)).unwrap();
        assert!(resolve(&top).unwrap_err().contains("gone"));
    }

    #[test]
    fn keys_depend_on_every_input() {
        let a = BTreeMap::new();
        let mut b = BTreeMap::new();
        b.insert("X".to_string(), "1".to_string());
        let k = build_key("base", "FROM x", &a, b"ctx");
        assert_eq!(k, build_key("base", "FROM x", &a, b"ctx"));
        assert_ne!(k, build_key("base2", "FROM x", &a, b"ctx"));
        assert_ne!(k, build_key("base", "FROM y", &a, b"ctx"));
        assert_ne!(k, build_key("base", "FROM x", &b, b"ctx"));
        assert_ne!(k, build_key("base", "FROM x", &a, b"ctx2"));
        assert!(!plain_absolute(Path::new("/a/../x")) && !plain_absolute(Path::new("x")));
        assert!(plain_absolute(Path::new("/d/templates/.user/a/k")));
    }
}
