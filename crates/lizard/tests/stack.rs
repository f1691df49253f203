//! End-to-end tests of the default template's stack: Python 3.14 with every package of the pinned
//! data-science stack importable, the npm packages, the versions recorded with the build, PIL images
//! as results (last value and `.show()`), and a kernel start that imports none of the stack.

mod common;

use common::*;
use serde_json::{json, Value};

/// Every top-level package of `templates/code-interpreter-v1.requirements.in`, by import name.
const STACK: &[&str] = &[
    "IPython",
    "aiohttp",
    "bs4",
    "bokeh",
    "cloudpickle",
    "cv2",
    "docx",
    "e2b_charts",
    "imageio",
    "joblib",
    "librosa",
    "lxml",
    "matplotlib",
    "matplotlib_inline",
    "networkx",
    "nltk",
    "numba",
    "numpy",
    "openpyxl",
    "orjson",
    "pandas",
    "PIL",
    "plotly",
    "polars",
    "pyarrow",
    "pytest",
    "pytz",
    "requests",
    "scipy",
    "seaborn",
    "skimage",
    "sklearn",
    "soundfile",
    "spacy",
    "statsmodels",
    "sympy",
    "textblob",
    "tornado",
    "urllib3",
    "xarray",
    "xlrd",
];

/// Modules a kernel must not have imported before user code asks for them (each costs start time
/// and memory in every context).
const HEAVY: &[&str] = &[
    "numpy",
    "pandas",
    "matplotlib",
    "PIL",
    "scipy",
    "sklearn",
    "cv2",
    "polars",
    "pyarrow",
    "torch",
    "spacy",
    "e2b_charts",
    "cloudpickle",
];

async fn py(s: &Server, id: &str, code: &str, context: Option<&str>) -> Value {
    let mut body = json!({"code": code, "timeout_ms": 300_000});
    match context {
        Some(c) => body["context"] = json!(c),
        None => body["language"] = json!("python"),
    }
    s.run(id, body).await
}

#[tokio::test]
async fn python_3_14_imports_the_whole_stack() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let ex = py(&s, &id, "import sys; print(sys.version)", None).await;
    assert!(stdout(&ex).starts_with("3.14."), "{ex}");
    // One cell importing everything, and each package's version (a broken wheel fails here).
    let code = format!(
        "import importlib\nfor name in {names:?}:\n    m = importlib.import_module(name)\nprint('ok', len({names:?}))\n\
         import numpy, pandas, sklearn, cv2\nprint(numpy.__version__, pandas.__version__, sklearn.__version__, cv2.__version__)",
        names = STACK
    );
    let ex = py(&s, &id, &code, None).await;
    assert!(ex["error"].is_null(), "{ex}");
    let out = stdout(&ex);
    assert!(out.starts_with(&format!("ok {}\n", STACK.len())), "{out}");
    // A bit of real work from a few of them (numba compiles, spaCy tokenizes without a model).
    let work = "import numba, numpy as np\n@numba.njit\ndef f(a):\n    return (a * 2).sum()\n\
                import spacy\nnlp = spacy.blank('en')\n\
                import polars as pl\n\
                print(f(np.arange(4)), len(nlp('Hello big world')), pl.DataFrame({'a': [1, 2]}).height)";
    let ex = py(&s, &id, work, None).await;
    assert_eq!(stdout(&ex), "12 3 2\n", "{ex}");
    // The npm packages of the template, from NODE_PATH.
    let js = "const _ = require('lodash'); const { z } = require('zod'); \
              const { format } = require('date-fns'); require('dayjs'); require('papaparse'); \
              const { v4 } = require('uuid'); \
              [_.chunk([1, 2, 3], 2).length, z.string().parse('x'), format(new Date(0), 'yyyy'), v4().length].join(' ')";
    let ex = s
        .run(&id, json!({"code": js, "language": "javascript"}))
        .await;
    assert_eq!(
        ex["results"][0]["data"]["text/plain"], "'2 x 1970 36'",
        "{ex}"
    );
}

#[tokio::test]
async fn the_build_records_its_versions() {
    let t = lizard_template::find(&templates_from(), "code-interpreter-v1")
        .unwrap()
        .expect("code-interpreter-v1 is built");
    assert_eq!(t.meta.debian.suite, "forky");
    assert!(
        t.meta
            .python_version
            .as_deref()
            .unwrap()
            .starts_with("3.14."),
        "{:?}",
        t.meta.python_version
    );
    let v = t.meta.versions.as_ref().expect("versions recorded");
    assert!(v.debian.contains_key("python3") && v.debian.contains_key("libc6"));
    // The Python versions are the lock's, exactly (they are pinned by the requirements).
    let req = include_str!("../../../templates/code-interpreter-v1.requirements.txt");
    for line in req.lines().filter(|l| l.contains("==")) {
        let (name, version) = line.split_once("==").unwrap();
        assert_eq!(
            v.python.get(name).map(String::as_str),
            Some(version.trim()),
            "{name}"
        );
    }
    assert_eq!(v.node.get("lodash").map(String::as_str), Some("4.18.1"));
}

#[tokio::test]
async fn pil_images_are_results() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let png_results = |ex: &Value| -> Vec<(bool, usize)> {
        ex["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| {
                let png = r["data"]["image/png"].as_str()?;
                Some((r["is_main_result"].as_bool().unwrap_or(false), png.len()))
            })
            .collect()
    };
    // The last value of a cell.
    let ex = py(
        &s,
        &id,
        "from PIL import Image\nimg = Image.new('RGB', (32, 16), 'red')\nimg",
        None,
    )
    .await;
    let r = png_results(&ex);
    assert!(r.len() == 1 && r[0].0 && r[0].1 > 20, "{ex}");
    // `show()` displays it (no viewer is started), in the cell it is first imported in too.
    let ctx = context(&s, &id, "python").await;
    let ex = py(
        &s,
        &id,
        "from PIL import Image\nimg = Image.new('L', (8, 8), 128)\nimg.save('/tmp/x.png')\n\
         Image.open('/tmp/x.png').show()\nprint('after')",
        Some(&ctx),
    )
    .await;
    assert_eq!(stdout(&ex), "after\n", "{ex}");
    let r = png_results(&ex);
    assert!(r.len() == 1 && !r[0].0, "{ex}");
    // matplotlib figures still carry their chart data.
    let ex = py(
        &s,
        &id,
        "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [1, 2])\nplt.title('t')\nplt.show()",
        Some(&ctx),
    )
    .await;
    let chart = ex["results"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|r| r["data"].get("application/vnd.lizard.chart+json"))
        .unwrap_or_else(|| panic!("no chart: {ex}"));
    assert_eq!(chart["type"], "bar", "{chart}");
    assert!(!png_results(&ex).is_empty(), "{ex}");
}

/// The template holds the agent's Python runner compiled by its venv (`lizard-template`'s
/// `python venv` step), root's; kernels and zygotes run it when it is this agent's runner (a
/// template built from another version of the runner has another name: the source runs then).
#[tokio::test]
async fn python_kernels_run_the_runner_compiled_in_the_template() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let out = s.root_cmd(&id, "ls -ln /opt/lizard/venv/lizard/").await;
    let text = out["stdout"].as_str().unwrap_or_default().to_string();
    let pyc = text
        .lines()
        .find(|l| l.ends_with(".pyc"))
        .unwrap_or_else(|| panic!("no compiled runner in the template: {out}"));
    // Root's (uid 0 inside), not writable by others: the zygote runs it as root.
    let f: Vec<&str> = pyc.split_whitespace().collect();
    assert!(f[0].starts_with("-rw-r--r--") && f[2] == "0", "{pyc}");
    let name = f.last().unwrap().to_string();
    // A kernel runs (the default context's, once it has answered a cell).
    let ex = s.run(&id, json!({ "code": "1" })).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let ps = s
        .root_cmd(
            &id,
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep runner",
        )
        .await;
    let ps = ps["stdout"].as_str().unwrap_or_default().to_string();
    let uses_pyc = ps.contains(&format!("/opt/lizard/venv/lizard/{name}"));
    // The source: the agent's copy, or given inline to the host zygote (whose forks the kernels
    // are) when the template holds no compiled runner of this build.
    let uses_source = ps.contains("/tmp/.lizard-agent/runner.py")
        || ps.contains("-s -c \"\"\"Lizard's Python kernel runner");
    assert!(uses_pyc || uses_source, "no Python runner running: {ps}");
    // This build's runner was compiled into this template (a fresh build, as scripts/test.sh's on
    // CI): then it is what runs. (A template built before runner.py last changed holds another.)
    if template_runner_is_current(&s, &id).await {
        assert!(uses_pyc && !uses_source, "{ps}");
    }
}

/// Whether the template's compiled runner is of this build's `runner.py` (its source, kept next to
/// it, is byte for byte the repository's).
async fn template_runner_is_current(s: &Server, id: &str) -> bool {
    let r = s
        .root_cmd(id, "sha256sum /opt/lizard/venv/lizard/runner.py")
        .await;
    let theirs = r["stdout"].as_str().unwrap_or_default().to_string();
    let ours = std::process::Command::new("sha256sum")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../kernels/python/runner.py"
        ))
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).to_string();
    theirs.split(' ').next() == ours.split(' ').next()
}

#[tokio::test]
async fn kernel_start_imports_none_of_the_stack() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let probe = format!("import sys\nprint([m for m in {HEAVY:?} if m in sys.modules])");
    let ex = py(&s, &id, &probe, None).await;
    assert_eq!(stdout(&ex), "[]\n", "default context: {ex}");
    let ctx = context(&s, &id, "python").await;
    let ex = py(&s, &id, &probe, Some(&ctx)).await;
    assert_eq!(stdout(&ex), "[]\n", "fresh context: {ex}");
    // An import in one context does not reach another (each is its own process).
    py(&s, &id, "import pandas", Some(&ctx)).await;
    let ex = py(&s, &id, &probe, None).await;
    assert_eq!(stdout(&ex), "[]\n", "{ex}");
}

/// Python 3.13+ raises `_IncompleteInputError` for incomplete input; the kernel names it by its
/// public base, `SyntaxError`, as on 3.11 and in E2B.
#[tokio::test]
async fn incomplete_input_is_a_syntax_error() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let ex = py(&s, &id, "fib(", None).await;
    assert_eq!(ex["error"]["name"], "SyntaxError", "{ex}");
    let ex = py(&s, &id, "def f(:\n    pass", None).await;
    assert_eq!(ex["error"]["name"], "SyntaxError", "{ex}");
    let ex = py(&s, &id, "if True:\npass", None).await;
    assert_eq!(ex["error"]["name"], "IndentationError", "{ex}");
}
