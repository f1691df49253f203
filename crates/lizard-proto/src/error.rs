//! The one error body every Lizard API returns: `{"code": "...", "message": "..."}`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Stable, machine-readable error codes. Clients switch on these; messages are for humans.
/// This list may expand over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed: bad JSON, wrong types, unknown fields, invalid values.
    InvalidRequest,
    /// Missing or wrong credentials.
    Unauthenticated,
    /// The addressed object does not exist (or is not visible to the caller).
    NotFound,
    /// The caller may not do this (e.g. a file the sandbox user cannot write).
    PermissionDenied,
    /// The request conflicts with the object's current state (e.g. it already exists).
    Conflict,
    /// The volume is mounted by a running or paused sandbox (delete with `force=true` to kill those
    /// sandboxes first).
    VolumeInUse,
    /// The template is the base of another template (delete that one first), or a built-in.
    TemplateInUse,
    /// The Dockerfile is not valid or uses an instruction Lizard does not build; the message names
    /// the line.
    InvalidDockerfile,
    /// A template build step failed (the message says which; the build log has its output).
    BuildFailed,
    /// The request body is larger than the API accepts.
    PayloadTooLarge,
    /// The request body is not `application/json`.
    UnsupportedMediaType,
    /// Too many requests.
    RateLimited,
    /// A dependency (kernel, sandbox) could not be started or reached.
    Unavailable,
    /// The disk (the sandbox's writable layer) is full.
    InsufficientStorage,
    /// The feature is not available where the request ran (e.g. per-context limits in an agent
    /// without a delegated cgroup).
    Unsupported,
    /// Something failed inside Lizard; the details are in its log, not in the response.
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code is sent with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest | ErrorCode::InvalidDockerfile => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict | ErrorCode::VolumeInUse | ErrorCode::TemplateInUse => 409,
            ErrorCode::BuildFailed => 422,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RateLimited => 429,
            ErrorCode::Unavailable => 503,
            ErrorCode::InsufficientStorage => 507,
            ErrorCode::Unsupported => 501,
            ErrorCode::Internal => 500,
        }
    }
}

/// The body of every non-2xx response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
        }
    }

    /// The answer to a failure of the server's own (a store, a task): it says nothing of the
    /// cause, which goes to the server's log.
    pub fn internal() -> Self {
        ErrorBody::new(ErrorCode::Internal, "internal error (see the server log)")
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            serde_json::to_value(self.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            self.message
        )
    }
}

impl std::error::Error for ErrorBody {}

/// An error that knows what the API answers for it (its code and message). The lifecycle's errors
/// implement it without knowing HTTP; the HTTP edge (`lizard_http::api::ApiError`) takes any of
/// them with `?`.
pub trait ToErrorBody {
    fn to_error_body(self) -> ErrorBody;
}
