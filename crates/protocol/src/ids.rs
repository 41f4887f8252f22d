//! Identifiers and positions shared by every surface.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ErrorCode};

/// Longest terminal id accepted: an id is `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`
/// (docs/terminology.md#terminal).
pub const TERMINAL_ID_MAX_LEN: usize = 128;

/// A terminal's id: safe as a single path component and in a URL path segment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TerminalId(String);

impl TerminalId {
    /// Validates `raw` against the id grammar.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        if !is_path_safe(raw, TERMINAL_ID_MAX_LEN) {
            return Err(ApiError::new(
                ErrorCode::InvalidInput,
                format!(
                    "invalid id {:?}: use 1-128 of [A-Za-z0-9_.-], starting with a letter or digit",
                    truncate_for_message(raw)
                ),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id of an agent's default terminal: `terminal-<agent>-<session>`
    /// (docs/terminology.md#terminal).
    pub fn for_agent(agent: &Name, session: &Name) -> Result<Self, ApiError> {
        Self::parse(&format!("terminal-{}-{}", agent.as_str(), session.as_str()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TerminalId {
    type Error = ApiError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TerminalId> for String {
    fn from(value: TerminalId) -> Self {
        value.0
    }
}

impl fmt::Display for TerminalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An agent or session name (a path component under the owner's home).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

impl Name {
    /// Longest agent or session name accepted.
    pub const MAX_LEN: usize = 64;

    /// Validates `raw`: 1 to 64 of `[A-Za-z0-9_.-]`, starting with a letter or digit.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        if !is_path_safe(raw, Self::MAX_LEN) {
            return Err(ApiError::new(
                ErrorCode::InvalidInput,
                format!(
                    "invalid name {:?}: use 1-64 of [A-Za-z0-9_.-], starting with a letter or digit",
                    truncate_for_message(raw)
                ),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The default agent and session name.
    pub fn default_name() -> Self {
        Self("default".to_owned())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Name {
    type Error = ApiError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Name> for String {
    fn from(value: Name) -> Self {
        value.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A terminal size in character cells.
#[derive(utoipa::ToSchema, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermSize {
    /// Width in character cells.
    pub cols: u16,
    /// Height in character cells.
    pub rows: u16,
}

impl TermSize {
    /// The size a terminal gets when the client names none.
    pub const DEFAULT: Self = Self {
        cols: 120,
        rows: 40,
    };
    /// Largest accepted dimension in either direction.
    pub const MAX_DIM: u16 = 1000;

    /// Checks both dimensions are in `1..=MAX_DIM`.
    pub fn new(cols: u16, rows: u16) -> Result<Self, ApiError> {
        if cols == 0 || rows == 0 || cols > Self::MAX_DIM || rows > Self::MAX_DIM {
            return Err(ApiError::new(
                ErrorCode::InvalidInput,
                format!(
                    "invalid size {cols}x{rows}: cols and rows must be between 1 and {}",
                    Self::MAX_DIM
                ),
            ));
        }
        Ok(Self { cols, rows })
    }
}

/// Whether `raw` is 1..=`max_len` of `[A-Za-z0-9_.-]` starting with a letter or digit: safe as
/// one path component (no `/`, no `..`, no hidden file) and in a URL path segment.
fn is_path_safe(raw: &str, max_len: usize) -> bool {
    let mut chars = raw.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    first_ok && rest_ok && raw.len() <= max_len
}

/// Shortens untrusted text before it is echoed in an error message.
pub fn truncate_for_message(raw: &str) -> String {
    const KEEP: usize = 80;
    if raw.chars().count() <= KEEP {
        raw.to_owned()
    } else {
        let head: String = raw.chars().take(KEEP).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_a_directory_are_refused() {
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "-x",
            "a b",
            "é",
            &"a".repeat(129),
        ] {
            assert!(TerminalId::parse(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "terminal-coder-default", "A1_.-z", &"a".repeat(128)] {
            assert!(TerminalId::parse(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn zero_and_huge_sizes_are_refused() {
        assert!(TermSize::new(0, 10).is_err());
        assert!(TermSize::new(10, 0).is_err());
        assert!(TermSize::new(1001, 10).is_err());
        assert!(TermSize::new(80, 24).is_ok());
    }
}
