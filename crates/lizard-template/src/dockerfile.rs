//! The Dockerfile front end of user templates: parses the subset Lizard builds (see
//! `templates/README.md`) into a [`Plan`] of steps, each carrying the environment, working
//! directory and user it runs with. Pure: no file system, no process; the server's build engine
//! runs the plan inside a build sandbox.
//!
//! Supported: `FROM` (a Lizard template, or `debian:<suite>`), `RUN` (shell form, run as
//! `/bin/sh -c`, and exec form), `COPY` / `ADD` (from the build context, `--chown`; ADD extracts
//! local tar archives, and refuses URLs), `ENV` (`k=v …` and `k v`), `WORKDIR`, `USER`, `ARG`
//! (before and after `FROM`, defaults, build args), comments, line continuations, case-insensitive
//! instructions, `$VAR` / `${VAR}` / `${VAR:-x}` / `${VAR:+x}` substitution where Docker does it
//! (not in `RUN`: there the shell sees ARG and ENV values as its environment). Anything else is an
//! error naming the line and the instruction.

use std::collections::BTreeMap;

/// At most this many bytes of Dockerfile.
pub const MAX_DOCKERFILE_BYTES: usize = 256 * 1024;
/// At most this many instructions.
pub const MAX_INSTRUCTIONS: usize = 512;
/// The Debian suites `FROM debian:<suite>` accepts.
pub const DEBIAN_SUITES: &[&str] = &["bookworm", "trixie", "forky"];

/// The built-in template `FROM debian:<suite>` starts from: `debian-<suite>`
/// (`templates/debian-<suite>.toml`, built by the host builder from that fixed spec on first use).
pub fn debian_base(suite: &str) -> String {
    format!("debian-{suite}")
}

/// A Dockerfile error: the 1-based line of the instruction (0: the file as a whole) and what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if *line > 0 { format!("line {line}: ") } else { String::new() })]
pub struct DockerfileError {
    pub line: usize,
    pub message: String,
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, DockerfileError> {
    Err(DockerfileError {
        line,
        message: message.into(),
    })
}

/// What the template starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// An existing Lizard template, by name.
    Template(String),
    /// A minimal Debian of this suite (one of [`DEBIAN_SUITES`]).
    Debian(String),
}

/// One step the build runs, with the state it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The instruction's first line in the Dockerfile.
    pub line: usize,
    /// The instruction as written (one line, shortened), for progress messages.
    pub text: String,
    pub action: Action,
    /// The environment of a `RUN`: every `ENV` so far, then the `ARG` values in scope.
    pub env: BTreeMap<String, String>,
    /// The working directory (`WORKDIR` so far; `None`: the base's).
    pub workdir: Option<String>,
    /// The user (`USER` so far; `None`: root).
    pub user: Option<String>,
}

/// What a [`Step`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run this argv (a shell form is `["/bin/sh", "-c", text]`).
    Run(Vec<String>),
    /// Copy context paths to `dest` (relative `dest`: under the step's workdir).
    Copy {
        sources: Vec<String>,
        dest: String,
        /// `--chown=user[:group]`.
        chown: Option<String>,
        /// ADD: a local tar archive source is extracted at `dest`.
        extract: bool,
    },
    /// Make the working directory (WORKDIR creates it when missing).
    Workdir(String),
}

/// A parsed Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub from: Base,
    /// The `FROM` line.
    pub from_line: usize,
    pub steps: Vec<Step>,
    /// The final `ENV` values (recorded in the template).
    pub env: BTreeMap<String, String>,
    /// The final `WORKDIR`, if any.
    pub workdir: Option<String>,
    /// The final `USER`, if any.
    pub user: Option<String>,
}

/// One logical instruction.
struct Instruction {
    line: usize,
    keyword: String,
    args: String,
}

/// Split into instructions: comments and blank lines dropped, continuations (`\` at the end of
/// a line) joined (comment lines inside a continuation are dropped, as Docker does).
fn instructions(text: &str) -> Result<Vec<Instruction>, DockerfileError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_none()) {
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        let (body, cont) = match raw.trim_end().strip_suffix('\\') {
            Some(b) => (b, true),
            None => (raw.trim_end(), false),
        };
        match &mut current {
            Some((_, acc)) => acc.push_str(body),
            None => current = Some((n, body.trim_start().to_owned())),
        }
        if !cont {
            let (line, acc) = current.take().expect("set above");
            out.push(split_instruction(line, &acc)?);
        }
    }
    if let Some((line, acc)) = current {
        out.push(split_instruction(line, &acc)?);
    }
    if out.len() > MAX_INSTRUCTIONS {
        return err(0, format!("more than {MAX_INSTRUCTIONS} instructions"));
    }
    Ok(out)
}

fn split_instruction(line: usize, text: &str) -> Result<Instruction, DockerfileError> {
    let text = text.trim();
    let (kw, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    if !kw.chars().all(|c| c.is_ascii_alphabetic()) {
        return err(line, format!("not an instruction: {kw:?}"));
    }
    Ok(Instruction {
        line,
        keyword: kw.to_ascii_uppercase(),
        args: rest.to_owned(),
    })
}

/// Expand `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR:+alternative}` from `vars` (unset: empty);
/// `\$` is a literal `$`.
pub fn substitute(
    line: usize,
    s: &str,
    vars: &BTreeMap<String, String>,
) -> Result<String, DockerfileError> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$') => {
                    out.push('$');
                    chars.next();
                }
                _ => out.push('\\'),
            }
            continue;
        }
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('{') => {
                chars.next();
                let mut inner = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    inner.push(c);
                }
                if !closed {
                    return err(line, format!("unterminated ${{ in {s:?}"));
                }
                let (name, op) = match inner.find(':') {
                    Some(i) => (&inner[..i], Some(&inner[i..])),
                    None => (inner.as_str(), None),
                };
                if !valid_name(name) {
                    return err(line, format!("bad variable name in ${{{inner}}}"));
                }
                let value = vars.get(name).filter(|v| !v.is_empty());
                match op {
                    None => out.push_str(value.map(String::as_str).unwrap_or("")),
                    Some(op) if op.starts_with(":-") => match value {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&substitute(line, &op[2..], vars)?),
                    },
                    Some(op) if op.starts_with(":+") => {
                        if value.is_some() {
                            out.push_str(&substitute(line, &op[2..], vars)?);
                        }
                    }
                    Some(op) => {
                        return err(line, format!("unsupported substitution ${{{name}{op}}}"))
                    }
                }
            }
            Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                let mut name = String::new();
                while let Some(c) = chars.peek() {
                    if c.is_ascii_alphanumeric() || *c == '_' {
                        name.push(*c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push_str(vars.get(&name).map(String::as_str).unwrap_or(""));
            }
            _ => out.push('$'),
        }
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Split shell-like words: whitespace separates, `"…"` and `'…'` quote, `\` escapes the next
/// character (outside single quotes).
fn words(line: usize, s: &str) -> Result<Vec<String>, DockerfileError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' | '\'' => {
                in_word = true;
                let mut closed = false;
                while let Some(n) = chars.next() {
                    if n == c {
                        closed = true;
                        break;
                    }
                    if n == '\\' && c == '"' {
                        if let Some(e) = chars.next() {
                            cur.push(e);
                        }
                        continue;
                    }
                    cur.push(n);
                }
                if !closed {
                    return err(line, format!("unterminated quote in {s:?}"));
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// The JSON (exec) form `["a", "b"]`, if `args` is one.
fn exec_form(args: &str) -> Option<Vec<String>> {
    let t = args.trim();
    if !t.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(t).ok()
}

fn shorten(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 120 {
        format!("{}…", one.chars().take(119).collect::<String>())
    } else {
        one
    }
}

/// Join a WORKDIR onto the current one (absolute paths replace it), normalising `.` and `..`.
fn join_workdir(current: Option<&str>, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", current.unwrap_or("/"))
    };
    for p in full.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Parse a Dockerfile with the given build args (`--build-arg K=V`).
pub fn parse(text: &str, build_args: &BTreeMap<String, String>) -> Result<Plan, DockerfileError> {
    if text.len() > MAX_DOCKERFILE_BYTES {
        return err(0, format!("longer than {MAX_DOCKERFILE_BYTES} bytes"));
    }
    for k in build_args.keys() {
        if !valid_name(k) {
            return err(0, format!("bad build arg name {k:?}"));
        }
    }
    let mut from: Option<(Base, usize)> = None;
    // ARGs declared before FROM: usable in FROM only (unless declared again after it).
    let mut global_args: BTreeMap<String, String> = BTreeMap::new();
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut workdir: Option<String> = None;
    let mut user: Option<String> = None;
    let mut steps = Vec::new();
    for ins in instructions(text)? {
        let line = ins.line;
        let kw = ins.keyword.as_str();
        // Substitution sees ARGs, then ENVs (ENV wins, as in Docker).
        let vars = || {
            let mut v = args.clone();
            v.extend(env.clone());
            v
        };
        if from.is_none() && !matches!(kw, "FROM" | "ARG") {
            return err(line, format!("{kw} before FROM"));
        }
        match kw {
            "ARG" => {
                let ws = words(line, &ins.args)?;
                if ws.is_empty() {
                    return err(line, "ARG needs a name");
                }
                for w in ws {
                    let (name, default) = match w.split_once('=') {
                        Some((n, d)) => (n.to_owned(), Some(d.to_owned())),
                        None => (w.clone(), None),
                    };
                    if !valid_name(&name) {
                        return err(line, format!("bad ARG name {name:?}"));
                    }
                    let scope = if from.is_none() { &global_args } else { &args };
                    let default = match default {
                        Some(d) => Some(substitute(line, &d, scope)?),
                        None => global_args.get(&name).cloned(),
                    };
                    let value = build_args
                        .get(&name)
                        .cloned()
                        .or(default)
                        .unwrap_or_default();
                    if from.is_none() {
                        global_args.insert(name, value);
                    } else {
                        args.insert(name, value);
                    }
                }
            }
            "FROM" => {
                if from.is_some() {
                    return err(line, "a second FROM: multi-stage builds are not supported");
                }
                let ws = words(line, &substitute(line, &ins.args, &global_args)?)?;
                let image = match ws.as_slice() {
                    [image] => image.clone(),
                    [_, as_kw, _] if as_kw.eq_ignore_ascii_case("as") => {
                        return err(line, "FROM … AS: multi-stage builds are not supported")
                    }
                    [] => return err(line, "FROM needs a base"),
                    _ => {
                        return err(
                            line,
                            "FROM takes one base (flags such as --platform are not supported)",
                        )
                    }
                };
                let base = if let Some(suite) = image.strip_prefix("debian:") {
                    if !DEBIAN_SUITES.contains(&suite) {
                        return err(
                            line,
                            format!(
                                "unsupported Debian suite {suite:?} (one of {})",
                                DEBIAN_SUITES.join(", ")
                            ),
                        );
                    }
                    Base::Debian(suite.to_owned())
                } else if image == "scratch" || image.contains([':', '/', '@']) {
                    return err(
                        line,
                        format!(
                            "FROM {image}: a base is a Lizard template name or debian:<suite> \
                             (container images are not supported)"
                        ),
                    );
                } else if !crate::layer::valid_name(&image) {
                    return err(line, format!("FROM {image}: not a template name"));
                } else {
                    Base::Template(image)
                };
                from = Some((base, line));
            }
            "RUN" => {
                if ins.args.is_empty() {
                    return err(line, "RUN needs a command");
                }
                if ins.args.trim_start().starts_with("--") {
                    return err(line, "RUN flags (--mount, --network, …) are not supported");
                }
                let argv = match exec_form(&ins.args) {
                    Some(v) if v.is_empty() => return err(line, "RUN [] runs nothing"),
                    Some(v) => v,
                    None => vec!["/bin/sh".into(), "-c".into(), ins.args.clone()],
                };
                let mut step_env = args.clone();
                step_env.extend(env.clone());
                steps.push(Step {
                    line,
                    text: shorten(&format!("RUN {}", ins.args)),
                    action: Action::Run(argv),
                    env: step_env,
                    workdir: workdir.clone(),
                    user: user.clone(),
                });
            }
            "COPY" | "ADD" => {
                let add = kw == "ADD";
                let mut list = match exec_form(&ins.args) {
                    Some(v) => v
                        .iter()
                        .map(|a| substitute(line, a, &vars()))
                        .collect::<Result<Vec<_>, _>>()?,
                    None => words(line, &substitute(line, &ins.args, &vars())?)?,
                };
                let mut chown = None;
                while list.first().is_some_and(|a| a.starts_with("--")) {
                    let flag = list.remove(0);
                    match flag.split_once('=') {
                        Some(("--chown", v)) if !v.is_empty() => chown = Some(v.to_owned()),
                        _ => {
                            let name = flag.split('=').next().unwrap_or(&flag).to_owned();
                            let why = if name == "--from" {
                                " (multi-stage builds are not supported)"
                            } else {
                                ""
                            };
                            return err(line, format!("{kw} {name} is not supported{why}"));
                        }
                    }
                }
                if list.len() < 2 {
                    return err(line, format!("{kw} needs a source and a destination"));
                }
                let dest = list.pop().expect("two or more");
                for s in &list {
                    if add && (s.contains("://") || s.starts_with("git@")) {
                        return err(
                            line,
                            format!("ADD {s}: URLs are not supported (download it in a RUN step)"),
                        );
                    }
                    if s.is_empty() {
                        return err(line, format!("{kw}: an empty source"));
                    }
                }
                if list.len() > 1 && !dest.ends_with('/') {
                    return err(
                        line,
                        format!("{kw} with several sources needs a destination ending in /"),
                    );
                }
                steps.push(Step {
                    line,
                    text: shorten(&format!("{kw} {}", ins.args)),
                    action: Action::Copy {
                        sources: list,
                        dest,
                        chown,
                        extract: add,
                    },
                    env: BTreeMap::new(),
                    workdir: workdir.clone(),
                    user: user.clone(),
                });
            }
            "ENV" => {
                let subst = substitute(line, &ins.args, &vars())?;
                let ws = words(line, &subst)?;
                let first_is_pair = ws.first().is_some_and(|w| w.contains('='));
                let pairs: Vec<(String, String)> = if first_is_pair {
                    ws.iter()
                        .map(|w| match w.split_once('=') {
                            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
                            None => err(line, format!("ENV {w}: expected name=value")),
                        })
                        .collect::<Result<_, _>>()?
                } else {
                    // `ENV name value with spaces`.
                    match ins.args.trim().split_once(char::is_whitespace) {
                        Some((k, v)) => {
                            let v = substitute(line, v.trim(), &vars())?;
                            vec![(k.to_owned(), words(line, &v)?.join(" "))]
                        }
                        None => return err(line, "ENV needs name=value"),
                    }
                };
                for (k, v) in pairs {
                    if !valid_name(&k) {
                        return err(line, format!("bad ENV name {k:?}"));
                    }
                    if k.starts_with("LIZARD_") {
                        return err(
                            line,
                            format!("ENV {k}: names starting with LIZARD_ are reserved"),
                        );
                    }
                    env.insert(k, v);
                }
            }
            "WORKDIR" => {
                let ws = words(line, &substitute(line, &ins.args, &vars())?)?;
                let [path] = ws.as_slice() else {
                    return err(line, "WORKDIR takes one path");
                };
                let dir = join_workdir(workdir.as_deref(), path);
                steps.push(Step {
                    line,
                    text: shorten(&format!("WORKDIR {}", ins.args)),
                    action: Action::Workdir(dir.clone()),
                    env: BTreeMap::new(),
                    workdir: None,
                    user: user.clone(),
                });
                workdir = Some(dir);
            }
            "USER" => {
                let ws = words(line, &substitute(line, &ins.args, &vars())?)?;
                let [u] = ws.as_slice() else {
                    return err(line, "USER takes one user[:group]");
                };
                let ok = u.split(':').count() <= 2
                    && u.split(':').all(|p| {
                        !p.is_empty()
                            && p.len() <= 32
                            && p.chars()
                                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    });
                if !ok {
                    return err(line, format!("USER {u}: not a user name or id"));
                }
                user = Some(u.clone());
            }
            "MAINTAINER" | "LABEL" => {
                // Metadata only: harmless, but Lizard keeps none of it.
                return err(
                    line,
                    format!("{kw} is not supported (Lizard templates keep no labels)"),
                );
            }
            other => {
                let what = match other {
                    "EXPOSE" => "sandboxes expose ports through the API",
                    "CMD" | "ENTRYPOINT" => {
                        "a sandbox runs Lizard's agent, not a command of its own"
                    }
                    "HEALTHCHECK" | "STOPSIGNAL" | "VOLUME" | "ONBUILD" | "SHELL" => {
                        "not part of the supported subset"
                    }
                    _ => "unknown instruction",
                };
                return err(line, format!("{other} is not supported: {what}"));
            }
        }
    }
    let Some((from, from_line)) = from else {
        return err(0, "no FROM");
    };
    Ok(Plan {
        from,
        from_line,
        steps,
        env,
        workdir,
        user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Plan, DockerfileError> {
        parse(s, &BTreeMap::new())
    }

    #[test]
    fn the_supported_subset() {
        let text = r#"
# a comment
ARG BASE=code-interpreter-v1
from ${BASE}
ARG VERSION=1.0
ENV APP_HOME=/opt/app GREETING="hello world"
ENV PLAIN some value
RUN pip install \
    # a comment inside a continuation
    --no-index pkg==$VERSION
RUN ["python3", "-c", "print(1)"]
WORKDIR $APP_HOME
WORKDIR sub
COPY --chown=user:user a.txt b/ ./
add pkg.tar.gz /opt/
USER user
"#;
        let plan = p(text).unwrap();
        assert_eq!(plan.from, Base::Template("code-interpreter-v1".into()));
        assert_eq!(plan.from_line, 4);
        assert_eq!(plan.env["APP_HOME"], "/opt/app");
        assert_eq!(plan.env["GREETING"], "hello world");
        assert_eq!(plan.env["PLAIN"], "some value");
        assert_eq!(plan.workdir.as_deref(), Some("/opt/app/sub"));
        assert_eq!(plan.user.as_deref(), Some("user"));
        let s = &plan.steps;
        assert_eq!(s.len(), 6);
        assert_eq!(s[0].line, 8);
        match &s[0].action {
            Action::Run(argv) => {
                assert_eq!(argv[..2], ["/bin/sh".to_string(), "-c".to_string()]);
                // Not substituted: the shell sees VERSION in its environment.
                assert!(
                    argv[2].contains("pkg==$VERSION") && !argv[2].contains('#'),
                    "{argv:?}"
                );
            }
            a => panic!("{a:?}"),
        }
        assert_eq!(s[0].env["VERSION"], "1.0");
        assert_eq!(s[0].user, None);
        assert_eq!(
            s[1].action,
            Action::Run(vec!["python3".into(), "-c".into(), "print(1)".into()])
        );
        assert_eq!(s[2].action, Action::Workdir("/opt/app".into()));
        assert_eq!(
            s[4].action,
            Action::Copy {
                sources: vec!["a.txt".into(), "b/".into()],
                dest: "./".into(),
                chown: Some("user:user".into()),
                extract: false,
            }
        );
        assert_eq!(s[4].workdir.as_deref(), Some("/opt/app/sub"));
        assert!(matches!(s[5].action, Action::Copy { extract: true, .. }));
    }

    #[test]
    fn build_args_override_defaults() {
        let mut a = BTreeMap::new();
        a.insert("V".to_string(), "2".to_string());
        let plan = parse("FROM t\nARG V=1\nENV X=$V\nARG W\nENV Y=${W:-none}", &a).unwrap();
        assert_eq!(plan.env["X"], "2");
        assert_eq!(plan.env["Y"], "none");
        let plan = parse("FROM debian:trixie", &a).unwrap();
        assert_eq!(plan.from, Base::Debian("trixie".into()));
    }

    #[test]
    fn every_debian_suite_has_a_builtin_base_without_python_or_node() {
        for suite in DEBIAN_SUITES {
            let name = debian_base(suite);
            assert!(crate::builtin_names().contains(&name.as_str()), "{name}");
            let spec = crate::spec::load_builtin(&name).unwrap().unwrap();
            assert_eq!(spec.spec.debian.suite, *suite);
            assert_eq!(spec.spec.debian.variant, "minbase");
            assert!(spec.spec.python.is_none() && spec.spec.node.is_none());
            // The agent runs commands and Bash contexts with it.
            assert!(spec.spec.debian.packages.iter().any(|p| p == "bash"));
        }
    }

    #[test]
    fn substitution_forms() {
        let mut v = BTreeMap::new();
        v.insert("A".to_string(), "x".to_string());
        let s = |t: &str| substitute(1, t, &v).unwrap();
        assert_eq!(s("$A-${A}-${B:-d}-${A:+y}-${B:+z}-\\$A-$"), "x-x-d-y--$A-$");
        assert!(substitute(1, "${A", &v).is_err());
        assert!(substitute(1, "${A:?x}", &v).is_err());
    }

    #[test]
    fn errors_name_the_line_and_instruction() {
        let cases = [
            ("FROM t\n\nEXPOSE 80", 3, "EXPOSE"),
            ("FROM t\nCMD [\"x\"]", 2, "CMD"),
            ("FROM t\nENTRYPOINT x", 2, "ENTRYPOINT"),
            ("FROM t\nHEALTHCHECK NONE", 2, "HEALTHCHECK"),
            ("FROM t\nFROM u", 2, "multi-stage"),
            ("FROM t AS build", 1, "multi-stage"),
            ("FROM t\nCOPY --from=x a b", 2, "--from"),
            ("FROM t\nADD https://example.com/x /x", 2, "URLs"),
            ("FROM ubuntu:22.04", 1, "container images"),
            ("FROM debian:buster", 1, "suite"),
            ("RUN true", 1, "before FROM"),
            ("FROM t\nRUN", 2, "RUN"),
            ("FROM t\nCOPY a", 2, "source and a destination"),
            ("FROM t\nBOGUS x", 2, "unknown instruction"),
            ("FROM t\nENV LIZARD_X=1", 2, "reserved"),
            ("FROM t\nUSER a b", 2, "USER"),
            ("FROM t\nCOPY a b c", 2, "ending in /"),
            ("FROM t\nRUN --mount=type=cache x", 2, "flags"),
        ];
        for (text, line, word) in cases {
            let e = p(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.to_string().contains(word), "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
        assert_eq!(p("# nothing").unwrap_err().line, 0);
        assert!(p(&"#".repeat(MAX_DOCKERFILE_BYTES + 1)).is_err());
    }

    #[test]
    fn continuation_line_numbers_are_the_first_line() {
        let plan = p("FROM t\nRUN a \\\n  b \\\n  c\nRUN d").unwrap();
        assert_eq!(plan.steps[0].line, 2);
        assert_eq!(plan.steps[1].line, 5);
        assert_eq!(
            plan.steps[0].action,
            Action::Run(vec!["/bin/sh".into(), "-c".into(), "a   b   c".into()])
        );
    }
}
