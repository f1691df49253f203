//! What the API answers for each lifecycle error (`lizard_proto::ToErrorBody`): its code and a
//! message for the caller. Internal failures are logged with their sources and answered without
//! them.

use crate::sandboxes::SandboxError;
use crate::store::StoreError;
use crate::templates::TemplateError;
use crate::volumes::VolumeError;
use lizard_proto::{ErrorBody, ErrorCode, ToErrorBody};

fn invalid(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::InvalidRequest, message)
}

/// A 500 whose message says nothing of the cause; the cause goes to the log.
fn internal(e: &dyn std::error::Error) -> ErrorBody {
    tracing::error!(error = %lizard_jail::error_chain(e), "internal error");
    ErrorBody::internal()
}

impl ToErrorBody for StoreError {
    fn to_error_body(self) -> ErrorBody {
        let e = self;
        match e {
            StoreError::ProjectExists(p) => {
                ErrorBody::new(ErrorCode::Conflict, format!("project {p:?} already exists"))
            }
            StoreError::VolumeExists(_) => VolumeError::from(e).to_error_body(),
            StoreError::TemplateExists(n) => ErrorBody::new(
                ErrorCode::Conflict,
                format!("template {n:?} already exists"),
            ),
            StoreError::TooMany(m) => ErrorBody::new(ErrorCode::Conflict, m),
            other => internal(&other),
        }
    }
}

impl ToErrorBody for SandboxError {
    fn to_error_body(self) -> ErrorBody {
        let e = self;
        let e = match e {
            SandboxError::Volume(v) => return v.to_error_body(),
            SandboxError::Agent(body) => return body,
            e => e,
        };
        match &e {
            SandboxError::NotFound(_) => ErrorBody::new(ErrorCode::NotFound, "sandbox not found"),
            SandboxError::UnknownTemplate(_) => ErrorBody::new(ErrorCode::NotFound, e.to_string()),
            SandboxError::Invalid(m) => invalid(m.clone()),
            SandboxError::Launch(_) | SandboxError::NotReady(_) => {
                tracing::error!(error = %lizard_jail::error_chain(&e), "sandbox start failed");
                ErrorBody::new(ErrorCode::Unavailable, e.to_string())
            }
            SandboxError::NoSpace(_) => {
                ErrorBody::new(ErrorCode::InsufficientStorage, e.to_string())
            }
            SandboxError::Conflict(m) => ErrorBody::new(ErrorCode::Conflict, m.clone()),
            SandboxError::SnapshotNotFound(_) => ErrorBody::new(ErrorCode::NotFound, e.to_string()),
            SandboxError::Capture(_) => {
                tracing::warn!(error = %lizard_jail::error_chain(&e), "snapshot failed");
                ErrorBody::new(ErrorCode::Unavailable, e.to_string())
            }
            SandboxError::Io { .. } | SandboxError::Store(_) => internal(&e),
            SandboxError::Volume(_) | SandboxError::Agent(_) => unreachable!("returned above"),
        }
    }
}

impl ToErrorBody for VolumeError {
    fn to_error_body(self) -> ErrorBody {
        let e = self;
        match &e {
            VolumeError::NotFound(_) => ErrorBody::new(ErrorCode::NotFound, e.to_string()),
            VolumeError::Exists(_) => ErrorBody::new(ErrorCode::Conflict, e.to_string()),
            VolumeError::InUse { .. } => ErrorBody::new(ErrorCode::VolumeInUse, e.to_string()),
            VolumeError::Invalid(m) => invalid(m.clone()),
            VolumeError::NoSpace(_) => {
                ErrorBody::new(ErrorCode::InsufficientStorage, e.to_string())
            }
            VolumeError::Host(_) | VolumeError::Task(_) | VolumeError::Store(_) => internal(&e),
        }
    }
}

impl ToErrorBody for TemplateError {
    fn to_error_body(self) -> ErrorBody {
        let e = self;
        if let crate::templates::TemplateError::Store(s) = &e {
            tracing::error!(error = %lizard_jail::error_chain(s), "internal error");
        }
        e.body()
    }
}
