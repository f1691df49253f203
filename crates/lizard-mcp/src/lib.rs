//! Lizard as a Model Context Protocol server: an agent framework or a desktop assistant picks up
//! sandboxes, stateful code (Python, JavaScript, Bash), commands and files as MCP tools, and a
//! sandbox's files as resources (`lizard://sandboxes/{id}/files/{path}`).
//!
//! One implementation ([`LizardMcp`], on the official Rust SDK `rmcp`), two transports: stdio
//! (`lizard mcp`, for assistants that launch a command; it talks to a running `lizard serve` with
//! `LIZARD_API_URL` / `LIZARD_API_KEY`) and Streamable HTTP ([`http_service`], mounted at `/mcp` on
//! `lizard serve`, where each request's own API key is used). Every tool is a call of Lizard's
//! public HTTP API with that key (`lizard-client`): what a key may do through MCP is exactly what
//! it may do through the API — a project key sees only its project.
//!
//! - `run_code` returns stdout, stderr, rich results and the error as MCP content (PNG and JPEG
//!   results as image content, everything else as text), streams output as progress
//!   notifications while it runs (when the client asks, with a progress token), and a
//!   cancellation from the client interrupts the cell (its state is kept), as a client
//!   disconnect does.
//! - Without a `sandbox_id`, the tools use one sandbox per MCP session, created on first use and
//!   killed when the session ends (kept if the server was told so).
//! - Large outputs are cut, with a notice, at [`MAX_TEXT`] characters per part.
//! - Errors are tool errors (`isError`) carrying Lizard's typed error body `{code, message}`,
//!   never a transport failure.

use base64::Engine as _;
use futures_util::StreamExt;
use lizard_client::{Client, ClientError, ListSandboxes};
use lizard_proto::{
    CreateContextRequest, CreateSandboxRequest, ExecuteRequest, ExecutionEvent, StartCommandRequest,
};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};
use std::sync::Arc;
use tokio::sync::Mutex;

/// The most characters of one text part (stdout, stderr, a result, a file) a tool answers with;
/// the rest is cut with a notice, so a large output does not flood a model's context.
pub const MAX_TEXT: usize = 100_000;

/// The HTTP header by which a Streamable HTTP client asks to keep its session's sandbox when the
/// session ends (`lizard mcp --keep-sandbox` for stdio).
pub const KEEP_HEADER: &str = "x-lizard-keep-sandbox";

/// The most bytes of rich results (images, tables) one `run_code` answers with; further results
/// are counted and left out.
pub const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// Text gathered from a sandbox (a stream's chunks), kept up to [`MAX_TEXT`] characters; what
/// comes past it is only counted, so a sandbox printing without end cannot grow this process's
/// memory.
#[derive(Default)]
struct Capped {
    text: String,
    chars: usize,
    dropped: usize,
}

impl Capped {
    fn push(&mut self, s: &str) {
        let room = MAX_TEXT - self.chars;
        let n = s.chars().count();
        if n <= room {
            self.text.push_str(s);
            self.chars += n;
        } else {
            let cut = s.char_indices().nth(room).map_or(s.len(), |(i, _)| i);
            self.text.push_str(&s[..cut]);
            self.chars = MAX_TEXT;
            self.dropped += n - room;
        }
    }

    fn is_empty(&self) -> bool {
        self.chars == 0 && self.dropped == 0
    }

    /// The text kept, with a notice of how much was left out.
    fn finish(self) -> String {
        if self.dropped == 0 {
            self.text
        } else {
            format!(
                "{}\n[… cut: {} more characters not shown]",
                self.text, self.dropped
            )
        }
    }
}

/// The most bytes of a file `read_file` reads.
pub const MAX_FILE: usize = 10 * 1024 * 1024;

/// Where Lizard's API is and which key a session uses.
#[derive(Clone, Debug)]
enum Credentials {
    /// stdio: one key for the whole process.
    Fixed(String),
    /// Streamable HTTP: each request's own `Authorization: Bearer` key.
    PerRequest,
}

/// The MCP server: its tools are Lizard's API, called with the session's key.
#[derive(Clone)]
pub struct LizardMcp {
    api_url: String,
    credentials: Credentials,
    /// The sandbox of this session (tools without `sandbox_id`), made on first use; killed when
    /// the last clone of this server goes (the session ended), unless kept.
    session: Arc<Session>,
}

/// The session's own sandbox.
struct Session {
    sandbox: Mutex<Option<SessionSandbox>>,
    keep: std::sync::atomic::AtomicBool,
}

impl Drop for Session {
    fn drop(&mut self) {
        let taken = self.sandbox.get_mut().take();
        if let (Some(s), false, Ok(rt)) = (
            taken,
            self.keep.load(std::sync::atomic::Ordering::SeqCst),
            tokio::runtime::Handle::try_current(),
        ) {
            rt.spawn(async move { s.kill().await });
        }
    }
}

#[derive(Clone, Debug)]
struct SessionSandbox {
    id: String,
    client: Client,
}

impl SessionSandbox {
    async fn kill(self) {
        if let Err(e) = self.client.kill_sandbox(&self.id).await {
            tracing::warn!(sandbox = %self.id, error = %e, "killing the MCP session's sandbox");
        }
    }
}

// ---- tool parameters ----------------------------------------------------------------------------

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct CreateSandboxArgs {
    /// The project to create it in (an admin key only; a project key's own project otherwise).
    #[serde(default)]
    pub project: Option<String>,
    /// Template name; `code-interpreter-v1` (Python, Node.js, Bash) when absent.
    #[serde(default)]
    pub template: Option<String>,
    /// Lifetime in milliseconds (the server's default, 5 minutes, when absent).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SandboxArg {
    /// The sandbox's id (from create_sandbox or list_sandboxes).
    pub sandbox_id: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ListSandboxesArgs {
    /// Only this project's sandboxes (an admin key sees every project's otherwise).
    #[serde(default)]
    pub project: Option<String>,
    /// `running` or `paused`.
    #[serde(default)]
    pub state: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct RunCodeArgs {
    /// The code to run. Variables, imports and functions persist between calls in one context.
    pub code: String,
    /// `python` (default), `javascript` or `bash`: runs in that language's default context.
    #[serde(default)]
    pub language: Option<String>,
    /// A context id from create_context (its language is the context's).
    #[serde(default)]
    pub context: Option<String>,
    /// The sandbox to run in; this session's own sandbox when absent (made on first use).
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Stop the cell after this many milliseconds (its state is kept).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct CreateContextArgs {
    /// `python` (default), `javascript` or `bash`.
    #[serde(default)]
    pub language: Option<String>,
    /// Working directory of the context's kernel.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The sandbox; this session's own sandbox when absent.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct RunCommandArgs {
    /// A shell command line, run with bash.
    pub command: String,
    /// Working directory (the user's home when absent).
    #[serde(default)]
    pub cwd: Option<String>,
    /// `user` (default) or `root` (the sandbox's own root).
    #[serde(default)]
    pub user: Option<String>,
    /// Stop it after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The sandbox; this session's own sandbox when absent.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ReadFileArgs {
    /// Absolute path, or relative to /home/user.
    pub path: String,
    /// The sandbox; this session's own sandbox when absent.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct WriteFileArgs {
    /// Absolute path, or relative to /home/user; parent directories are made.
    pub path: String,
    /// The file's new content (text).
    pub content: String,
    /// The sandbox; this session's own sandbox when absent.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ListFilesArgs {
    /// A directory (`/home/user` when absent).
    #[serde(default)]
    pub path: Option<String>,
    /// How many levels down (1 when absent).
    #[serde(default)]
    pub depth: Option<u32>,
    /// The sandbox; this session's own sandbox when absent.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

// ---- the server ---------------------------------------------------------------------------------

impl LizardMcp {
    /// A server for one stdio session: every call uses `api_key` against `api_url`.
    pub fn with_key(api_url: &str, api_key: &str) -> LizardMcp {
        LizardMcp::new(api_url, Credentials::Fixed(api_key.to_string()))
    }

    /// A server for one Streamable HTTP session: each call uses its request's own key.
    pub fn per_request(api_url: &str) -> LizardMcp {
        LizardMcp::new(api_url, Credentials::PerRequest)
    }

    fn new(api_url: &str, credentials: Credentials) -> LizardMcp {
        LizardMcp {
            api_url: api_url.trim_end_matches('/').to_string(),
            credentials,
            session: Arc::new(Session {
                sandbox: Mutex::new(None),
                keep: false.into(),
            }),
        }
    }

    /// Keep the session's own sandbox when the session ends (it is killed otherwise).
    pub fn keep_session_sandbox(self, keep: bool) -> LizardMcp {
        self.session
            .keep
            .store(keep, std::sync::atomic::Ordering::SeqCst);
        self
    }

    /// End the session now: its own sandbox is killed (unless kept). (A session also ends when
    /// its last server clone is dropped; this waits for the kill.)
    pub async fn end_session(&self) {
        let taken = self.session.sandbox.lock().await.take();
        if let (Some(s), false) = (
            taken,
            self.session.keep.load(std::sync::atomic::Ordering::SeqCst),
        ) {
            s.kill().await;
        }
    }

    /// The API client for a call: the fixed key, or the request's `Authorization: Bearer`. Over
    /// HTTP, a request with `X-Lizard-Keep-Sandbox: true` asks to keep the session's sandbox.
    fn client(&self, ctx: &RequestContext<RoleServer>) -> Result<Client, ErrorData> {
        let parts = ctx.extensions.get::<http::request::Parts>();
        if parts
            .and_then(|p| p.headers.get(KEEP_HEADER))
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
        {
            self.session
                .keep
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let key = match &self.credentials {
            Credentials::Fixed(k) => k.clone(),
            Credentials::PerRequest => parts
                .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|k| k.trim().to_string())
                .ok_or_else(|| {
                    ErrorData::invalid_request("send the API key as Authorization: Bearer", None)
                })?,
        };
        Client::new(&self.api_url, &key).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    /// `sandbox_id`, or the session's own sandbox (made now if there is none).
    async fn sandbox(
        &self,
        client: &Client,
        sandbox_id: Option<String>,
    ) -> Result<String, ClientError> {
        if let Some(id) = sandbox_id {
            return Ok(id);
        }
        let mut session = self.session.sandbox.lock().await;
        if let Some(s) = session.as_ref() {
            return Ok(s.id.clone());
        }
        let info = client
            .create_sandbox(&CreateSandboxRequest {
                metadata: [("lizard.mcp".to_string(), "session".to_string())].into(),
                ..Default::default()
            })
            .await?;
        *session = Some(SessionSandbox {
            id: info.sandbox_id.clone(),
            client: client.clone(),
        });
        Ok(info.sandbox_id)
    }
}

/// A Lizard error as a tool error: its typed body as JSON text.
fn tool_error(e: ClientError) -> CallToolResult {
    let body = match &e {
        ClientError::Api { body, .. } => serde_json::to_string(body).unwrap_or_default(),
        other => {
            serde_json::json!({"code": "unavailable", "message": other.to_string()}).to_string()
        }
    };
    CallToolResult::error(vec![ContentBlock::text(body)])
}

/// `s` cut at [`MAX_TEXT`] characters, with a notice saying how much was left out.
fn bounded(s: &str) -> String {
    match s.char_indices().nth(MAX_TEXT) {
        None => s.to_string(),
        Some((at, _)) => format!(
            "{}\n[… cut: {} more characters not shown]",
            &s[..at],
            s[at..].chars().count()
        ),
    }
}

fn json_text(v: &impl serde::Serialize) -> ContentBlock {
    ContentBlock::text(bounded(
        &serde_json::to_string_pretty(v).unwrap_or_default(),
    ))
}

fn language(s: Option<&str>) -> Result<Option<lizard_proto::Language>, ClientError> {
    s.map(|l| serde_json::from_value(serde_json::Value::String(l.to_ascii_lowercase())))
        .transpose()
        .map_err(ClientError::Decode)
}

/// One execution result as MCP content: PNG and JPEG as images, the rest as text (the richest
/// text form it has).
fn result_content(r: &lizard_proto::ExecutionResult) -> Vec<ContentBlock> {
    let mut out = Vec::new();
    for mime in ["image/png", "image/jpeg"] {
        if let Some(data) = r.data.get(mime).and_then(|v| v.as_str()) {
            out.push(ContentBlock::image(data.to_string(), mime));
        }
    }
    for mime in [
        "text/markdown",
        "text/html",
        "application/json",
        "text/plain",
    ] {
        if let Some(v) = r.data.get(mime) {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push(ContentBlock::text(bounded(&format!("[{mime}]\n{text}"))));
            break;
        }
    }
    out
}

#[tool_router]
impl LizardMcp {
    #[tool(
        description = "Create a new isolated sandbox (a small Linux machine with Python, \
        Node.js and Bash) and return its id and details. Most tools also work without one: they \
        then use this session's own sandbox, made on first use."
    )]
    async fn create_sandbox(
        &self,
        Parameters(a): Parameters<CreateSandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let req = CreateSandboxRequest {
            project: a.project,
            template: a.template,
            timeout_ms: a.timeout_ms,
            metadata: [("lizard.mcp".to_string(), "created".to_string())].into(),
            ..Default::default()
        };
        Ok(match client.create_sandbox(&req).await {
            Ok(info) => CallToolResult::success(vec![json_text(&info)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "List the sandboxes this key can see, with their state, project, \
        template and metadata."
    )]
    async fn list_sandboxes(
        &self,
        Parameters(a): Parameters<ListSandboxesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let q = ListSandboxes {
            project: a.project,
            state: a.state,
            ..Default::default()
        };
        Ok(match client.list_sandboxes(&q).await {
            Ok(list) => CallToolResult::success(vec![json_text(&list)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(description = "Kill a sandbox: its processes and files are gone.")]
    async fn kill_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArg>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        Ok(match client.kill_sandbox(&a.sandbox_id).await {
            Ok(()) => {
                let mut s = self.session.sandbox.lock().await;
                if s.as_ref().is_some_and(|s| s.id == a.sandbox_id) {
                    *s = None;
                }
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "sandbox {} killed",
                    a.sandbox_id
                ))])
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Pause a sandbox: its processes are frozen with all their state \
        (variables, running servers) until resume_sandbox."
    )]
    async fn pause_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArg>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        Ok(match client.pause(&a.sandbox_id).await {
            Ok(info) => CallToolResult::success(vec![json_text(&info)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(description = "Resume a paused or hibernated sandbox, its state as it was.")]
    async fn resume_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArg>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        Ok(match client.resume(&a.sandbox_id).await {
            Ok(info) => CallToolResult::success(vec![json_text(&info)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Create a new, isolated code context (its own variables and imports) \
        in a sandbox; pass its id as `context` to run_code."
    )]
    async fn create_context(
        &self,
        Parameters(a): Parameters<CreateContextArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let run = async {
            let sandbox = self.sandbox(&client, a.sandbox_id).await?;
            let req = CreateContextRequest {
                language: language(a.language.as_deref())?,
                cwd: a.cwd,
                ..Default::default()
            };
            client.create_context(&sandbox, &req).await
        };
        Ok(match run.await {
            Ok(c) => CallToolResult::success(vec![json_text(&c)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Run code in a stateful kernel (Python by default; JavaScript or Bash \
        with `language`): variables, imports and functions persist between calls. Returns \
        stdout, stderr, the results (charts as images, tables and values as text) and the \
        error with its traceback. Output is streamed as progress notifications while it runs; \
        cancelling the call interrupts the cell and keeps its state."
    )]
    async fn run_code(
        &self,
        Parameters(a): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let progress = ctx.meta.get_progress_token();
        let sandbox = match self.sandbox(&client, a.sandbox_id).await {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e)),
        };
        let lang = match language(a.language.as_deref()) {
            Ok(l) => l,
            Err(e) => return Ok(tool_error(e)),
        };
        let req = ExecuteRequest {
            code: a.code,
            context: a.context.as_deref().map(Into::into),
            language: lang,
            timeout_ms: a.timeout_ms,
            ..Default::default()
        };
        let mut stream = match client.execute(&sandbox, &req).await {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e)),
        };
        // What the cell sends is the sandbox's: kept only up to the limits, the rest counted, so
        // a cell printing without end cannot grow this process's memory.
        let (mut stdout, mut stderr) = (Capped::default(), Capped::default());
        let mut results = Vec::new();
        let (mut result_bytes, mut results_dropped) = (0usize, 0usize);
        let mut error = None;
        let mut step = 0u64;
        loop {
            let frame = tokio::select! {
                f = stream.next() => f,
                // The client cancelled: dropping the stream interrupts the cell (state kept).
                _ = ctx.ct.cancelled() => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        "cancelled: the cell was interrupted; the context keeps its state",
                    )]));
                }
            };
            let Some(frame) = frame else { break };
            let event = match frame {
                Ok(f) => f.event,
                Err(e) => return Ok(tool_error(e)),
            };
            if let (
                Some(token),
                ExecutionEvent::Stdout { text } | ExecutionEvent::Stderr { text },
            ) = (&progress, &event)
            {
                step += 1;
                let p = ProgressNotificationParam::new(token.clone(), step as f64)
                    .with_message(bounded(text));
                let _ = ctx.peer.notify_progress(p).await;
            }
            match event {
                ExecutionEvent::Stdout { text } => stdout.push(&text),
                ExecutionEvent::Stderr { text } => stderr.push(&text),
                ExecutionEvent::Result(r) => {
                    let size: usize = r
                        .data
                        .values()
                        .map(|v| v.as_str().map_or_else(|| v.to_string().len(), str::len))
                        .sum();
                    if result_bytes + size > MAX_RESULT_BYTES {
                        results_dropped += 1;
                    } else {
                        result_bytes += size;
                        results.push(r);
                    }
                }
                ExecutionEvent::Error(e) => error = Some(e),
                _ => {}
            }
        }
        let mut content = Vec::new();
        if !stdout.is_empty() {
            content.push(ContentBlock::text(format!("[stdout]\n{}", stdout.finish())));
        }
        if !stderr.is_empty() {
            content.push(ContentBlock::text(format!("[stderr]\n{}", stderr.finish())));
        }
        for r in &results {
            content.extend(result_content(r));
        }
        if results_dropped > 0 {
            content.push(ContentBlock::text(format!(
                "[… cut: {results_dropped} more results not shown (over {MAX_RESULT_BYTES} bytes)]"
            )));
        }
        Ok(match &error {
            Some(err) => {
                content.push(ContentBlock::text(bounded(&format!(
                    "[error] {}: {}\n{}",
                    err.name, err.value, err.traceback
                ))));
                CallToolResult::error(content)
            }
            None => {
                if content.is_empty() {
                    content.push(ContentBlock::text("(no output)"));
                }
                CallToolResult::success(content)
            }
        })
    }

    #[tool(
        description = "Run a shell command (bash) in a sandbox and return its stdout, stderr \
        and exit code."
    )]
    async fn run_command(
        &self,
        Parameters(a): Parameters<RunCommandArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let run = async {
            let sandbox = self.sandbox(&client, a.sandbox_id).await?;
            let req = StartCommandRequest {
                cmd: Some(a.command),
                cwd: a.cwd,
                user: a.user,
                timeout_ms: a.timeout_ms,
                ..Default::default()
            };
            let mut s = client.run_command(&sandbox, &req).await?;
            let (mut out, mut err, mut end) = (Capped::default(), Capped::default(), None);
            while let Some(ev) = s.next().await {
                match ev? {
                    lizard_proto::CommandEvent::Stdout { text, .. } => out.push(&text),
                    lizard_proto::CommandEvent::Stderr { text, .. } => err.push(&text),
                    lizard_proto::CommandEvent::End(e) => end = Some(e),
                    _ => {}
                }
            }
            Ok::<_, ClientError>((out, err, end))
        };
        Ok(match run.await {
            Ok((out, err, end)) => {
                let code = end.as_ref().and_then(|e| e.exit_code);
                let mut content = vec![ContentBlock::text(format!(
                    "exit code: {}",
                    code.map_or_else(|| "none (killed or timed out)".into(), |c| c.to_string())
                ))];
                if !out.is_empty() {
                    content.push(ContentBlock::text(format!("[stdout]\n{}", out.finish())));
                }
                if !err.is_empty() {
                    content.push(ContentBlock::text(format!("[stderr]\n{}", err.finish())));
                }
                if code == Some(0) {
                    CallToolResult::success(content)
                } else {
                    CallToolResult::error(content)
                }
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Read a file from a sandbox: text as text (cut beyond 100,000 \
        characters), PNG and JPEG images as images."
    )]
    async fn read_file(
        &self,
        Parameters(a): Parameters<ReadFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let run = async {
            let sandbox = self.sandbox(&client, a.sandbox_id).await?;
            read_bounded(&client, &sandbox, &a.path).await
        };
        Ok(match run.await {
            Ok((bytes, cut)) => CallToolResult::success(file_content(&a.path, &bytes, cut)),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Write a text file in a sandbox (parent directories are made; an \
        existing file is replaced)."
    )]
    async fn write_file(
        &self,
        Parameters(a): Parameters<WriteFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let run = async {
            let sandbox = self.sandbox(&client, a.sandbox_id).await?;
            client
                .write_file(&sandbox, &a.path, a.content.into_bytes())
                .await
        };
        Ok(match run.await {
            Ok(entry) => CallToolResult::success(vec![json_text(&entry)]),
            Err(e) => tool_error(e),
        })
    }

    #[tool(description = "List a directory of a sandbox (names, types, sizes).")]
    async fn list_files(
        &self,
        Parameters(a): Parameters<ListFilesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = self.client(&ctx)?;
        let run = async {
            let sandbox = self.sandbox(&client, a.sandbox_id).await?;
            let path = a.path.unwrap_or_else(|| "/home/user".into());
            client
                .list_files(&sandbox, &path, a.depth.unwrap_or(1))
                .await
        };
        Ok(match run.await {
            Ok(list) => CallToolResult::success(vec![json_text(&list)]),
            Err(e) => tool_error(e),
        })
    }
}

/// Up to [`MAX_FILE`] bytes of a file, and whether it was longer.
async fn read_bounded(
    client: &Client,
    sandbox: &str,
    path: &str,
) -> Result<(Vec<u8>, bool), ClientError> {
    let mut s = client.read_file(sandbox, path).await?;
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        let chunk = chunk?;
        if out.len() + chunk.len() > MAX_FILE {
            out.extend_from_slice(&chunk[..MAX_FILE - out.len()]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

/// A file's bytes as MCP content.
fn file_content(path: &str, bytes: &[u8], cut: bool) -> Vec<ContentBlock> {
    let lower = path.to_ascii_lowercase();
    let image = if bytes.starts_with(b"\x89PNG") || lower.ends_with(".png") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) || lower.ends_with(".jpg") {
        Some("image/jpeg")
    } else {
        None
    };
    if let (Some(mime), false) = (image, cut) {
        return vec![ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(bytes),
            mime,
        )];
    }
    let mut text = bounded(&String::from_utf8_lossy(bytes));
    if cut {
        text.push_str(&format!(
            "\n[… cut: the file is larger than {MAX_FILE} bytes]"
        ));
    }
    vec![ContentBlock::text(text)]
}

/// The URI of a sandbox's file: `lizard://sandboxes/{id}/files/{path}` (the path without its
/// leading `/`).
pub fn file_uri(sandbox: &str, path: &str) -> String {
    format!(
        "{URI_PREFIX}{sandbox}/files/{}",
        path.trim_start_matches('/')
    )
}

const URI_PREFIX: &str = "lizard://sandboxes/";

/// `(sandbox id, absolute path)` of a [`file_uri`].
fn parse_file_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix(URI_PREFIX)?;
    let (id, path) = rest.split_once("/files/")?;
    (!id.is_empty() && !id.contains('/')).then(|| (id.to_string(), format!("/{path}")))
}

#[tool_handler]
impl ServerHandler for LizardMcp {
    /// The files of this session's sandbox (its home, two levels down), when it has one.
    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let client = self.client(&ctx)?;
        let sandbox = self
            .session
            .sandbox
            .lock()
            .await
            .as_ref()
            .map(|s| s.id.clone());
        let Some(sandbox) = sandbox else {
            return Ok(rmcp::model::ListResourcesResult::with_all_items(Vec::new()));
        };
        let entries = client
            .list_files(&sandbox, "/home/user", 2)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let resources = entries
            .into_iter()
            .filter(|e| e.file_type == lizard_proto::FileType::File)
            .take(1000)
            .map(|e| {
                rmcp::model::Resource::new(file_uri(&sandbox, &e.path), e.name).with_size(e.size)
            })
            .collect();
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            vec![rmcp::model::ResourceTemplate::new(
                "lizard://sandboxes/{sandbox_id}/files/{path}",
                "sandbox-file",
            )
            .with_description("A file of a sandbox, by its absolute path (without the leading /)")],
        ))
    }

    /// A sandbox's file (`lizard://sandboxes/{id}/files/{path}`): text, or base64 for other
    /// bytes; at most [`MAX_FILE`] bytes.
    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let client = self.client(&ctx)?;
        let (sandbox, path) = parse_file_uri(&request.uri).ok_or_else(|| {
            ErrorData::invalid_params(
                "a resource is lizard://sandboxes/{sandbox_id}/files/{path}",
                None,
            )
        })?;
        let (bytes, _cut) =
            read_bounded(&client, &sandbox, &path)
                .await
                .map_err(|e| match e.code() {
                    Some(lizard_proto::ErrorCode::NotFound) => {
                        ErrorData::resource_not_found(e.to_string(), None)
                    }
                    _ => ErrorData::internal_error(e.to_string(), None),
                })?;
        let contents = match String::from_utf8(bytes) {
            Ok(text) => rmcp::model::ResourceContents::text(text, request.uri.clone()),
            Err(e) => rmcp::model::ResourceContents::BlobResourceContents {
                uri: request.uri.clone(),
                mime_type: Some("application/octet-stream".into()),
                blob: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                meta: None,
            },
        };
        Ok(rmcp::model::ReadResourceResult::new(vec![contents]).into())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(
            "Lizard runs code in isolated sandboxes with stateful Python, JavaScript and Bash \
             kernels. Call run_code directly (a sandbox is made for this session on first use), \
             or create_sandbox / create_context for more.",
        )
    }
}

/// The Streamable HTTP transport: a `tower` service to mount at `/mcp` (one session per MCP
/// client; each request's own API key is used for its calls to `api_url`).
pub fn http_service(
    api_url: &str,
) -> rmcp::transport::streamable_http_server::tower::StreamableHttpService<
    LizardMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let api_url = api_url.to_string();
    rmcp::transport::streamable_http_server::tower::StreamableHttpService::new(
        move || Ok(LizardMcp::per_request(&api_url)),
        Default::default(),
        Default::default(),
    )
}

/// Serve one MCP session on stdin/stdout until the client leaves; the session's own sandbox is
/// then killed (unless kept).
pub async fn serve_stdio(
    server: LizardMcp,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::ServiceExt;
    let handle = server.clone();
    let running = server.serve(rmcp::transport::stdio()).await?;
    let _ = running.waiting().await;
    handle.end_session().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_round_trip() {
        let uri = file_uri("abc1", "/home/user/a b.txt");
        assert_eq!(uri, "lizard://sandboxes/abc1/files/home/user/a b.txt");
        assert_eq!(
            parse_file_uri(&uri),
            Some(("abc1".into(), "/home/user/a b.txt".into()))
        );
        assert_eq!(parse_file_uri("lizard://sandboxes//files/x"), None);
        assert_eq!(parse_file_uri("file:///etc/passwd"), None);
    }

    #[test]
    fn gathered_text_stops_growing_at_the_limit() {
        let mut c = Capped::default();
        assert!(c.is_empty());
        for _ in 0..(MAX_TEXT / 1000 + 50) {
            c.push(&"é".repeat(1000));
        }
        assert_eq!(c.text.chars().count(), MAX_TEXT);
        assert_eq!(c.dropped, 50_000);
        assert!(c
            .finish()
            .ends_with("[… cut: 50000 more characters not shown]"));
    }

    #[test]
    fn long_text_is_cut_with_a_notice() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(MAX_TEXT + 5);
        let b = bounded(&long);
        assert!(
            b.ends_with("[… cut: 5 more characters not shown]"),
            "{}",
            &b[b.len() - 60..]
        );
    }

    #[test]
    fn images_are_image_content_and_the_rest_text() {
        let r = lizard_proto::ExecutionResult {
            is_main_result: true,
            data: [
                ("image/png".to_string(), serde_json::json!("iVBORw0KGgo=")),
                ("text/plain".to_string(), serde_json::json!("<Figure>")),
            ]
            .into(),
            metadata: None,
        };
        let c = result_content(&r);
        assert_eq!(c.len(), 2);
        assert!(matches!(&c[0], ContentBlock::Image(_)));
        assert!(matches!(&c[1], ContentBlock::Text(_)));
        assert!(matches!(
            &file_content("a.png", b"\x89PNG....", false)[0],
            ContentBlock::Image(_)
        ));
        assert!(matches!(
            &file_content("a.txt", b"hello", false)[0],
            ContentBlock::Text(_)
        ));
    }
}
