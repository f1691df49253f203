//! Identifier newtypes, so a context id is never confused with any other string.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The id of a context inside one sandbox. Opaque to clients.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct ContextId(pub String);

impl ContextId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ContextId {
    fn from(s: &str) -> Self {
        ContextId(s.to_owned())
    }
}
