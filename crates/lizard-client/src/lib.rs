//! `lizard-client`: the typed async Rust client of the Lizard server's `/v1` API.
//!
//! Every request and response is a `lizard-proto` type; an execution is a [`futures_util::Stream`]
//! of [`EventFrame`]s as the server streams them (NDJSON), or an aggregated [`Execution`]. Errors
//! carry the server's `{code, message}` body. Plain HTTP only (the server is meant to listen on
//! loopback or behind a TLS-terminating proxy). Not here: the CLI's presentation (see the `lizard`
//! binary).

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lizard_proto::{
    CommandEvent, Context, CreateContextRequest, CreateProjectRequest, CreateSandboxRequest,
    CreateVolumeRequest, EntryInfo, ErrorBody, EventFrame, ExecuteRequest, Execution,
    ProcessInputRequest, ProjectCreated, ProjectUsage, SandboxInfo, SetTimeoutRequest,
    StartCommandRequest, StartPtyRequest, VolumeInfo, NDJSON,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The server address used when none is configured.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:8787";

/// Client failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("{body}")]
    Api { status: u16, body: ErrorBody },
    #[error("invalid client configuration: {0}")]
    Config(String),
    #[error("HTTP request to the Lizard server failed")]
    Http(#[from] hyper_util::client::legacy::Error),
    #[error("reading the response from the Lizard server failed")]
    Body(#[from] hyper::Error),
    #[error("unexpected response from the Lizard server")]
    Decode(#[from] serde_json::Error),
}

impl ClientError {
    /// The server's error code, when the server answered with one.
    pub fn code(&self) -> Option<lizard_proto::ErrorCode> {
        match self {
            ClientError::Api { body, .. } => Some(body.code),
            _ => None,
        }
    }
}

/// Filters of [`Client::list_sandboxes`].
#[derive(Debug, Clone, Default)]
pub struct ListSandboxes {
    pub project: Option<String>,
    /// `running` or `paused`.
    pub state: Option<String>,
    pub metadata: Vec<(String, String)>,
}

#[derive(Clone)]
pub struct Client {
    base: String,
    key: String,
    http: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// `?k=v&…` of the pairs that have a value (values percent-encoded), or nothing.
fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode_component(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    /// A client for the server at `api_url` (`http://host:port`) with an API key.
    pub fn new(api_url: &str, api_key: &str) -> Result<Client, ClientError> {
        let base = api_url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(ClientError::Config(format!(
                "API URL {api_url:?} must start with http:// (use a TLS-terminating proxy for https)"
            )));
        }
        if api_key.is_empty() {
            return Err(ClientError::Config("the API key is empty".into()));
        }
        let mut connector = HttpConnector::new();
        // Requests and frames are small: send them at once (no Nagle + delayed-ACK stalls).
        connector.set_nodelay(true);
        let http =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
        Ok(Client {
            base,
            key: api_key.to_string(),
            http,
        })
    }

    /// From `LIZARD_API_URL` (default [`DEFAULT_API_URL`]) and `LIZARD_API_KEY`.
    pub fn from_env() -> Result<Client, ClientError> {
        let url = std::env::var("LIZARD_API_URL").unwrap_or_else(|_| DEFAULT_API_URL.into());
        let key = std::env::var("LIZARD_API_KEY")
            .map_err(|_| ClientError::Config("LIZARD_API_KEY is not set".into()))?;
        Client::new(&url, &key)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        accept: &str,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let body = body.map(|b| (b, "application/json"));
        self.send_typed(method, path, body, accept).await
    }

    /// One request with an optional body of the given content type; a non-2xx answer becomes
    /// [`ClientError::Api`].
    async fn send_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &str)>,
        accept: &str,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path))
            .header("authorization", format!("Bearer {}", self.key))
            .header("accept", accept);
        let body = match body {
            Some((bytes, content_type)) => {
                b = b.header("content-type", content_type);
                bytes
            }
            None => Vec::new(),
        };
        let req = b
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::Config(e.to_string()))?;
        let resp = self.http.request(req).await?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let body = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or_else(|_| {
            ErrorBody::new(
                lizard_proto::ErrorCode::Internal,
                format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)),
            )
        });
        Err(ClientError::Api { status, body })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let body = body.map(serde_json::to_vec).transpose()?;
        let resp = self.send(method, path, body, "application/json").await?;
        let no_content = resp.status() == StatusCode::NO_CONTENT;
        let bytes = resp.into_body().collect().await?.to_bytes();
        if no_content || bytes.is_empty() {
            return Ok(serde_json::from_value(serde_json::Value::Null)?);
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// [`Self::call`] on `{base}/{id}[/{rest}]{query}` (`id` path-encoded, `query` from
    /// [`query`]).
    async fn on<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        (base, id, rest): (&str, &str, &str),
        query: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let mut path = format!("{base}/{}", encode_component(id));
        if !rest.is_empty() {
            path.push('/');
            path.push_str(rest);
        }
        path.push_str(query);
        self.call(method, &path, body).await
    }

    /// [`Self::on`] a sandbox: `/v1/sandboxes/{id}/{rest}` (`rest` empty for the sandbox itself).
    async fn on_sandbox<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        id: &str,
        rest: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        self.on(method, ("/v1/sandboxes", id, rest), "", body).await
    }

    // --- sandboxes --------------------------------------------------------------------------

    pub async fn create_sandbox(
        &self,
        req: &CreateSandboxRequest,
    ) -> Result<SandboxInfo, ClientError> {
        self.call(Method::POST, "/v1/sandboxes", Some(req)).await
    }

    pub async fn get_sandbox(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox::<(), _>(Method::GET, id, "", None).await
    }

    pub async fn list_sandboxes(&self, q: &ListSandboxes) -> Result<Vec<SandboxInfo>, ClientError> {
        let metadata = (!q.metadata.is_empty()).then(|| {
            let m: Vec<String> = q.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
            m.join(",")
        });
        let query = query(&[
            ("project", q.project.as_deref()),
            ("state", q.state.as_deref()),
            ("metadata", metadata.as_deref()),
        ]);
        self.call::<(), _>(Method::GET, &format!("/v1/sandboxes{query}"), None)
            .await
    }

    pub async fn kill_sandbox(&self, id: &str) -> Result<(), ClientError> {
        self.on_sandbox::<(), ()>(Method::DELETE, id, "", None)
            .await
    }

    pub async fn set_timeout(&self, id: &str, timeout_ms: u64) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox(
            Method::POST,
            id,
            "timeout",
            Some(&SetTimeoutRequest { timeout_ms }),
        )
        .await
    }

    /// `PATCH /v1/sandboxes/{id}/network`: replace a sandbox's egress and/or inject rules (a part
    /// not given is kept), live (its next connection and DNS query follow them). A sandbox
    /// created without egress is a `conflict`.
    pub async fn set_network(
        &self,
        id: &str,
        network: &lizard_proto::UpdateNetworkRequest,
    ) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox(Method::PATCH, id, "network", Some(network))
            .await
    }

    /// `GET /v1/sandboxes/{id}/network/log`: what the sandbox did through the package mirror and
    /// its egress, and what was refused.
    pub async fn network_log(&self, id: &str) -> Result<lizard_proto::NetworkLog, ClientError> {
        self.on_sandbox::<(), _>(Method::GET, id, "network/log", None)
            .await
    }

    pub async fn pause(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox::<(), _>(Method::POST, id, "pause", None)
            .await
    }

    /// Hibernate: contexts saved to disk, processes stopped. `hibernation` in the answer lists what
    /// each context saved and what it could not.
    pub async fn hibernate(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox::<(), _>(Method::POST, id, "hibernate", None)
            .await
    }

    /// Resume a paused or hibernated sandbox; after hibernation `restore` in the answer says what
    /// each context got back and what was lost.
    pub async fn resume(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox::<(), _>(Method::POST, id, "resume", None)
            .await
    }

    // --- contexts -----------------------------------------------------------------------------

    pub async fn create_context(
        &self,
        sandbox: &str,
        req: &CreateContextRequest,
    ) -> Result<Context, ClientError> {
        self.on_sandbox(Method::POST, sandbox, "contexts", Some(req))
            .await
    }

    pub async fn list_contexts(&self, sandbox: &str) -> Result<Vec<Context>, ClientError> {
        self.on_sandbox::<(), _>(Method::GET, sandbox, "contexts", None)
            .await
    }

    pub async fn restart_context(
        &self,
        sandbox: &str,
        context: &str,
    ) -> Result<Context, ClientError> {
        self.call::<(), _>(
            Method::POST,
            &format!(
                "/v1/sandboxes/{}/contexts/{}/restart",
                encode_component(sandbox),
                encode_component(context)
            ),
            None,
        )
        .await
    }

    /// Fork a context: a new context holding a copy of `context`'s live kernel (copy-on-write);
    /// `lost` in the answer says what the fork could not carry.
    pub async fn fork_context(
        &self,
        sandbox: &str,
        context: &str,
        req: &lizard_proto::ForkContextRequest,
    ) -> Result<lizard_proto::ContextFork, ClientError> {
        self.call(
            Method::POST,
            &format!(
                "/v1/sandboxes/{}/contexts/{}/fork",
                encode_component(sandbox),
                encode_component(context)
            ),
            Some(req),
        )
        .await
    }

    pub async fn delete_context(&self, sandbox: &str, context: &str) -> Result<(), ClientError> {
        self.call::<(), ()>(
            Method::DELETE,
            &format!(
                "/v1/sandboxes/{}/contexts/{}",
                encode_component(sandbox),
                encode_component(context)
            ),
            None,
        )
        .await
    }

    /// `POST /v1/sandboxes/{sandbox}/{rest}` with `req` as JSON, its answer read as NDJSON
    /// frames of `T` as they arrive.
    async fn stream_from<B: Serialize, T: DeserializeOwned + Send + 'static>(
        &self,
        sandbox: &str,
        rest: &str,
        req: &B,
    ) -> Result<impl Stream<Item = Result<T, ClientError>> + Send + Unpin + 'static, ClientError>
    {
        let body = serde_json::to_vec(req)?;
        let path = format!("/v1/sandboxes/{}/{rest}", encode_component(sandbox));
        let resp = self.send(Method::POST, &path, Some(body), NDJSON).await?;
        Ok(Box::pin(ndjson_frames(resp.into_body())))
    }

    // --- execution ----------------------------------------------------------------------------

    /// Run code; events arrive as the server streams them. Dropping the stream interrupts the cell.
    pub async fn execute(
        &self,
        sandbox: &str,
        req: &ExecuteRequest,
    ) -> Result<
        impl Stream<Item = Result<EventFrame, ClientError>> + Send + Unpin + 'static,
        ClientError,
    > {
        self.stream_from(sandbox, "execute", req).await
    }

    /// Run code and fold the events into an [`Execution`].
    pub async fn run(&self, sandbox: &str, req: &ExecuteRequest) -> Result<Execution, ClientError> {
        let mut s = self.execute(sandbox, req).await?;
        let mut ex = Execution::default();
        while let Some(f) = s.next().await {
            ex.apply(f?.event);
        }
        Ok(ex)
    }

    // --- commands and files -------------------------------------------------------------------

    /// Run a shell command in the sandbox; its events arrive as the server streams them.
    pub async fn run_command(
        &self,
        sandbox: &str,
        req: &StartCommandRequest,
    ) -> Result<
        impl Stream<Item = Result<CommandEvent, ClientError>> + Send + Unpin + 'static,
        ClientError,
    > {
        self.stream_from(sandbox, "commands", req).await
    }

    /// Start a process on a pseudo-terminal; its output arrives as `stdout` events (bytes in
    /// `data_b64`).
    pub async fn start_pty(
        &self,
        sandbox: &str,
        req: &StartPtyRequest,
    ) -> Result<
        impl Stream<Item = Result<CommandEvent, ClientError>> + Send + Unpin + 'static,
        ClientError,
    > {
        self.stream_from(sandbox, "pty", req).await
    }

    /// Send keystrokes (any bytes) to a terminal.
    pub async fn pty_input(&self, sandbox: &str, pid: u32, data: &[u8]) -> Result<(), ClientError> {
        use base64::Engine as _;
        let req = ProcessInputRequest {
            data: None,
            data_b64: Some(base64::engine::general_purpose::STANDARD.encode(data)),
        };
        self.call::<_, serde_json::Value>(
            Method::POST,
            &format!(
                "/v1/sandboxes/{}/pty/{pid}/input",
                encode_component(sandbox)
            ),
            Some(&req),
        )
        .await
        .map(|_| ())
    }

    /// Resize a terminal.
    pub async fn pty_resize(
        &self,
        sandbox: &str,
        pid: u32,
        cols: u16,
        rows: u16,
    ) -> Result<(), ClientError> {
        self.call::<_, serde_json::Value>(
            Method::POST,
            &format!(
                "/v1/sandboxes/{}/pty/{pid}/resize",
                encode_component(sandbox)
            ),
            Some(&lizard_proto::PtySize { cols, rows }),
        )
        .await
        .map(|_| ())
    }

    /// A file's bytes, streamed.
    pub async fn read_file(
        &self,
        sandbox: &str,
        path: &str,
    ) -> Result<impl Stream<Item = Result<Bytes, ClientError>> + Send + Unpin + 'static, ClientError>
    {
        let resp = self
            .send(
                Method::GET,
                &format!(
                    "/v1/sandboxes/{}/files?path={}",
                    encode_component(sandbox),
                    encode_component(path)
                ),
                None,
                "application/octet-stream",
            )
            .await?;
        Ok(Box::pin(stream::unfold(
            resp.into_body(),
            |mut body| async move {
                loop {
                    match body.frame().await {
                        Some(Ok(f)) => {
                            if let Ok(data) = f.into_data() {
                                return Some((Ok(data), body));
                            }
                        }
                        Some(Err(e)) => return Some((Err(ClientError::Body(e)), body)),
                        None => return None,
                    }
                }
            },
        )))
    }

    /// Write `data` to a file (parents created, replaced atomically).
    pub async fn write_file(
        &self,
        sandbox: &str,
        path: &str,
        data: Vec<u8>,
    ) -> Result<EntryInfo, ClientError> {
        let resp = self
            .send_typed(
                Method::PUT,
                &format!(
                    "/v1/sandboxes/{}/files?path={}",
                    encode_component(sandbox),
                    encode_component(path)
                ),
                Some((data, "application/octet-stream")),
                "application/json",
            )
            .await?;
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(serde_json::from_slice(&bytes)?)
    }

    pub async fn list_files(
        &self,
        sandbox: &str,
        path: &str,
        depth: u32,
    ) -> Result<Vec<EntryInfo>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            &format!(
                "/v1/sandboxes/{}/files/list?path={}&depth={depth}",
                encode_component(sandbox),
                encode_component(path)
            ),
            None,
        )
        .await
    }

    pub async fn remove_file(&self, sandbox: &str, path: &str) -> Result<(), ClientError> {
        self.call::<(), ()>(
            Method::DELETE,
            &format!(
                "/v1/sandboxes/{}/files?path={}",
                encode_component(sandbox),
                encode_component(path)
            ),
            None,
        )
        .await
    }

    // --- volumes --------------------------------------------------------------------------------

    pub async fn create_volume(
        &self,
        req: &CreateVolumeRequest,
    ) -> Result<VolumeInfo, ClientError> {
        self.call(Method::POST, "/v1/volumes", Some(req)).await
    }

    /// Volumes of `project` (the key's own; every project for an admin key when `None`).
    pub async fn list_volumes(
        &self,
        project: Option<&str>,
    ) -> Result<Vec<VolumeInfo>, ClientError> {
        let query = query(&[("project", project)]);
        self.call::<(), _>(Method::GET, &format!("/v1/volumes{query}"), None)
            .await
    }

    /// A volume by id (`vol_…`) or by name (in `project`, or the key's own).
    pub async fn get_volume(
        &self,
        volume: &str,
        project: Option<&str>,
    ) -> Result<VolumeInfo, ClientError> {
        let query = query(&[("project", project)]);
        self.on::<(), _>(Method::GET, ("/v1/volumes", volume, ""), &query, None)
            .await
    }

    /// Delete a volume; `force` kills the sandboxes that mount it first (otherwise a mounted
    /// volume is refused with `volume_in_use`).
    pub async fn delete_volume(
        &self,
        volume: &str,
        project: Option<&str>,
        force: bool,
    ) -> Result<(), ClientError> {
        let force = if force { "true" } else { "false" };
        let query = query(&[("force", Some(force)), ("project", project)]);
        self.on::<(), ()>(Method::DELETE, ("/v1/volumes", volume, ""), &query, None)
            .await
    }

    // --- snapshots ------------------------------------------------------------------------------

    /// Snapshot a running or paused sandbox (its kernels' state and its disk); it keeps running.
    /// `contexts` in the answer says what each context saved and what it could not.
    pub async fn create_snapshot(
        &self,
        sandbox_id: &str,
        req: &lizard_proto::CreateSnapshotRequest,
    ) -> Result<lizard_proto::SnapshotInfo, ClientError> {
        self.on_sandbox(Method::POST, sandbox_id, "snapshots", Some(req))
            .await
    }

    /// Snapshots the key sees (its project's; every project's for an admin key), of one sandbox
    /// when `sandbox_id` is given.
    pub async fn list_snapshots(
        &self,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<lizard_proto::SnapshotInfo>, ClientError> {
        let query = query(&[("sandbox_id", sandbox_id)]);
        self.call::<(), _>(Method::GET, &format!("/v1/snapshots{query}"), None)
            .await
    }

    pub async fn get_snapshot(&self, id: &str) -> Result<lizard_proto::SnapshotInfo, ClientError> {
        self.on::<(), _>(Method::GET, ("/v1/snapshots", id, ""), "", None)
            .await
    }

    pub async fn delete_snapshot(&self, id: &str) -> Result<(), ClientError> {
        self.on::<(), ()>(Method::DELETE, ("/v1/snapshots", id, ""), "", None)
            .await
    }

    /// Start a new sandbox from a snapshot (a clone); `restore` in the answer says what each
    /// context got back.
    pub async fn create_from_snapshot(
        &self,
        snapshot_id: &str,
        timeout_ms: Option<u64>,
    ) -> Result<SandboxInfo, ClientError> {
        let req = CreateSandboxRequest {
            snapshot_id: Some(snapshot_id.to_string()),
            timeout_ms,
            ..Default::default()
        };
        self.create_sandbox(&req).await
    }

    /// Fork a running sandbox: a new one with the same memory state and files, in one call.
    pub async fn fork_sandbox(
        &self,
        id: &str,
        req: &lizard_proto::ForkSandboxRequest,
    ) -> Result<SandboxInfo, ClientError> {
        self.on_sandbox(Method::POST, id, "fork", Some(req)).await
    }

    // --- templates ------------------------------------------------------------------------------

    /// Build a template (`POST /v1/templates`); its events arrive as the server streams them
    /// (the last is `done` or `error`). Dropping the stream does not cancel the build unless the
    /// request asked for `cancel_on_disconnect`. A cache hit is one `done` event.
    pub async fn build_template(
        &self,
        req: &lizard_proto::BuildTemplateRequest,
    ) -> Result<
        impl Stream<Item = Result<lizard_proto::TemplateBuildEvent, ClientError>>
            + Send
            + Unpin
            + 'static,
        ClientError,
    > {
        let body = serde_json::to_vec(req)?;
        let resp = self
            .send(Method::POST, "/v1/templates", Some(body), NDJSON)
            .await?;
        Ok(Box::pin(ndjson_frames(resp.into_body())))
    }

    /// Templates the key sees: its project's, the public ones and the built-ins (an admin key:
    /// every project's, unless it names one).
    pub async fn list_templates(
        &self,
        project: Option<&str>,
    ) -> Result<lizard_proto::TemplateList, ClientError> {
        let query = query(&[("project", project)]);
        self.call::<(), _>(Method::GET, &format!("/v1/templates{query}"), None)
            .await
    }

    pub async fn get_template(
        &self,
        name: &str,
        project: Option<&str>,
    ) -> Result<lizard_proto::TemplateInfo, ClientError> {
        let query = query(&[("project", project)]);
        self.on::<(), _>(Method::GET, ("/v1/templates", name, ""), &query, None)
            .await
    }

    pub async fn delete_template(
        &self,
        name: &str,
        project: Option<&str>,
    ) -> Result<(), ClientError> {
        let query = query(&[("project", project)]);
        self.on::<(), ()>(Method::DELETE, ("/v1/templates", name, ""), &query, None)
            .await
    }

    // --- projects and usage ---------------------------------------------------------------------

    pub async fn create_project(&self, name: &str) -> Result<ProjectCreated, ClientError> {
        self.call(
            Method::POST,
            "/v1/projects",
            Some(&CreateProjectRequest {
                name: name.to_string(),
                allow_egress: false,
                package_registries: true,
            }),
        )
        .await
    }

    pub async fn list_projects(&self) -> Result<Vec<String>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/projects", None).await
    }

    pub async fn usage(
        &self,
        project: &str,
        from_ms: Option<u64>,
        to_ms: Option<u64>,
    ) -> Result<ProjectUsage, ClientError> {
        let mut q = Vec::new();
        if let Some(f) = from_ms {
            q.push(format!("from={f}"));
        }
        if let Some(t) = to_ms {
            q.push(format!("to={t}"));
        }
        let query = if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        };
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/projects/{}/usage{query}", encode_component(project)),
            None,
        )
        .await
    }

    // --- secrets ------------------------------------------------------------------------------

    /// `POST /v1/projects/{project}/secrets`: set (create or replace) a secret; `true` if it was
    /// new. The answer, like every other, holds no value (secrets are write-only).
    pub async fn set_secret(
        &self,
        project: &str,
        name: &str,
        value: &str,
    ) -> Result<(lizard_proto::SecretInfo, bool), ClientError> {
        let body = serde_json::to_vec(&lizard_proto::SetSecretRequest {
            name: name.to_string(),
            value: value.to_string(),
        })?;
        let resp = self
            .send(
                Method::POST,
                &format!("/v1/projects/{}/secrets", encode_component(project)),
                Some(body),
                "application/json",
            )
            .await?;
        let created = resp.status() == StatusCode::CREATED;
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok((serde_json::from_slice(&bytes)?, created))
    }

    /// `GET /v1/projects/{project}/secrets`: the project's secrets, names and times only.
    pub async fn list_secrets(
        &self,
        project: &str,
    ) -> Result<Vec<lizard_proto::SecretInfo>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/projects/{}/secrets", encode_component(project)),
            None,
        )
        .await
    }

    /// `DELETE /v1/projects/{project}/secrets/{name}` (`not_found` if there is none). Running
    /// sandboxes keep the value until their next start or rule change.
    pub async fn delete_secret(&self, project: &str, name: &str) -> Result<(), ClientError> {
        self.call::<(), ()>(
            Method::DELETE,
            &format!(
                "/v1/projects/{}/secrets/{}",
                encode_component(project),
                encode_component(name)
            ),
            None,
        )
        .await
    }

    /// `GET /v1/audit`: audit events, newest first (an admin key sees all, a project key its own
    /// project's).
    pub async fn audit(
        &self,
        from_ms: Option<u64>,
        to_ms: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Vec<lizard_proto::AuditEvent>, ClientError> {
        let mut q = Vec::new();
        if let Some(f) = from_ms {
            q.push(format!("from={f}"));
        }
        if let Some(t) = to_ms {
            q.push(format!("to={t}"));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let query = if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        };
        self.call::<(), _>(Method::GET, &format!("/v1/audit{query}"), None)
            .await
    }
}

/// Split a streamed body into NDJSON values.
fn ndjson_frames<T: DeserializeOwned + Send + 'static>(
    body: Incoming,
) -> impl Stream<Item = Result<T, ClientError>> + Send {
    stream::unfold(
        (body, Vec::<u8>::new(), false),
        |(mut body, mut buf, mut done)| async move {
            loop {
                if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let item = serde_json::from_slice::<T>(&line).map_err(ClientError::from);
                    return Some((item, (body, buf, done)));
                }
                if done {
                    if buf.iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    let rest = std::mem::take(&mut buf);
                    let item = serde_json::from_slice::<T>(&rest).map_err(ClientError::from);
                    return Some((item, (body, buf, done)));
                }
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => return Some((Err(ClientError::Body(e)), (body, buf, true))),
                    None => done = true,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_the_given_pairs_in_order_encoded() {
        assert_eq!(query(&[("project", None)]), "");
        assert_eq!(
            query(&[
                ("force", Some("true")),
                ("x", None),
                ("project", Some("a b&c"))
            ]),
            "?force=true&project=a%20b%26c"
        );
    }

    #[test]
    fn config_is_checked() {
        assert!(matches!(
            Client::new("https://x", "k"),
            Err(ClientError::Config(_))
        ));
        assert!(matches!(
            Client::new("http://x", ""),
            Err(ClientError::Config(_))
        ));
        assert!(Client::new("http://127.0.0.1:1/", "k").is_ok());
    }

    #[test]
    fn path_components_are_encoded() {
        assert_eq!(encode_component("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_component("owner=t,x=y"), "owner%3Dt%2Cx%3Dy");
    }
}
