//! The kernel languages Lizard runs, with the aliases users type.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::str::FromStr;

/// A kernel language. Serialized as `python`, `javascript` or `bash`; parsed from those and the
/// aliases `py`, `python3`, `js`, `node`, `typescript`, `ts` (the JavaScript kernel runs
/// TypeScript with its types stripped), `sh`, `shell` (case-insensitive).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Javascript,
    Bash,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::Python, Language::Javascript, Language::Bash];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Bash => "bash",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A language name that is not one of Lizard's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLanguage(pub String);

impl fmt::Display for UnknownLanguage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown language {:?}: expected python, javascript (js, typescript) or bash (sh)",
            self.0
        )
    }
}

impl std::error::Error for UnknownLanguage {}

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Ok(Language::Python),
            // TypeScript runs in the JavaScript kernel (types stripped, see kernels/js/runner.js).
            "javascript" | "js" | "node" | "nodejs" | "typescript" | "ts" => {
                Ok(Language::Javascript)
            }
            "bash" | "sh" | "shell" => Ok(Language::Bash),
            _ => Err(UnknownLanguage(s.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for Language {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_parse() {
        for (s, l) in [
            ("python", Language::Python),
            ("Python3", Language::Python),
            ("js", Language::Javascript),
            ("JavaScript", Language::Javascript),
            ("ts", Language::Javascript),
            ("TypeScript", Language::Javascript),
            ("sh", Language::Bash),
            ("bash", Language::Bash),
        ] {
            assert_eq!(s.parse::<Language>().unwrap(), l, "{s}");
        }
        assert!("ruby".parse::<Language>().is_err());
    }

    #[test]
    fn serde_round_trip_uses_canonical_names() {
        let l: Language = serde_json::from_str("\"js\"").unwrap();
        assert_eq!(serde_json::to_string(&l).unwrap(), "\"javascript\"");
        let err = serde_json::from_str::<Language>("\"cobol\"").unwrap_err();
        assert!(err.to_string().contains("unknown language"));
    }
}
