//! Wire types of the `rootfs` backend and of workspaces (docs/backends.md#rootfs,
//! docs/rest-v2.md#workspaces): the install of the root filesystem and its progress, what a
//! sandboxed terminal runs in, and the workspace records `GET /v2/workspaces` answers with.
//! The rules behind them (where the root lives, how a workspace is made) are the core's.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// A `rootfs` terminal's network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The host's network (interfaces, routes, DNS through the root's own resolver config).
    #[default]
    Shared,
    /// A network namespace of its own with only a loopback interface.
    None,
}

impl Network {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::None => "none",
        }
    }

    /// The network a create's `network` names, or `INVALID_INPUT`.
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        match name {
            "shared" => Ok(Self::Shared),
            "none" => Ok(Self::None),
            other => Err(ApiError::invalid(format!(
                "network must be \"shared\" or \"none\", not {:?}",
                crate::ids::truncate_for_message(other)
            ))),
        }
    }
}

/// A workspace id: `^[a-z0-9][a-z0-9_-]{0,63}$` (so it is one safe path component).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkspaceId(String);

impl WorkspaceId {
    /// Most characters of an id.
    pub const MAX_LEN: usize = 64;

    /// Checks `text` against the id pattern.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut chars = text.chars();
        let is_valid = text.len() <= Self::MAX_LEN
            && chars
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if is_valid {
            Ok(Self(text.to_owned()))
        } else {
            Err(ApiError::invalid(format!(
                "invalid workspace id {:?} (1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit)",
                crate::ids::truncate_for_message(text)
            )))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for WorkspaceId {
    type Error = ApiError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<WorkspaceId> for String {
    fn from(id: WorkspaceId) -> Self {
        id.0
    }
}

impl std::fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an install of the root filesystem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InstallState {
    /// debootstrap runs.
    Running,
    /// The root is installed and ready (also the answer when it already was).
    Done,
    /// The install failed; `error` says why. Asking again starts a new one, which reuses
    /// what the failed one downloaded.
    Failed,
}

/// The progress of an install of the root filesystem (`POST /v2/backends/rootfs/install`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstallProgress {
    /// Where the install is.
    pub state: InstallState,
    /// 0 to 100, from debootstrap's output (docs/backends.md#provisioning says how).
    pub percent: u8,
    /// The step debootstrap is in: `resolving`, `retrieving`, `extracting`, `unpacking`,
    /// `configuring`, `finishing` or `done`.
    pub phase: String,
    /// Packages of the step handled so far.
    pub packages_done: u32,
    /// Packages of the whole root (known once the download ended; until then an estimate).
    pub packages_total: u32,
    /// debootstrap's last line, for people.
    pub message: String,
    /// Why it failed (state `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The Debian suite being installed (`bookworm`).
    pub suite: String,
    /// The mirror it is installed from.
    pub mirror: String,
    /// Unix seconds when it started.
    pub started_at: u64,
    /// Unix seconds when it ended; null while it runs.
    pub finished_at: Option<u64>,
}

/// What a `rootfs` terminal runs in, as its info shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GuestInfo {
    /// The named workspace at `/workspace`; null for the terminal's own.
    pub workspace: Option<String>,
    /// `shared` or `none`.
    pub network: Network,
    /// The directory the shell started in, as the shell sees it.
    pub guest_cwd: String,
    /// Whether the root takes writes (into the terminal's own layer, removed once its
    /// processes are gone; the shared root is never written). False on a server that is not
    /// root.
    #[serde(default)]
    pub writable_root: bool,
}

/// One workspace of an owner (`GET /v2/workspaces`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspaceInfo {
    /// Its id.
    pub id: String,
    /// Unix seconds when it was made.
    pub created_at: u64,
    /// The live terminals that use it (a workspace with any cannot be deleted).
    pub terminals: Vec<String>,
}

/// `GET /v2/workspaces`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspacesResponse {
    /// The caller's workspaces, by id.
    pub workspaces: Vec<WorkspaceInfo>,
}

#[cfg(test)]
mod tests {
    use super::{Network, WorkspaceId};

    #[test]
    fn workspace_ids_are_one_safe_path_component() {
        for good in ["a", "0", "proj-1", "a_b", &"x".repeat(64)] {
            assert!(WorkspaceId::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "A",
            "a.b",
            "..",
            "../x",
            "a/b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(WorkspaceId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn networks_are_shared_or_none() {
        assert_eq!(Network::parse("shared").ok(), Some(Network::Shared));
        assert_eq!(Network::parse("none").ok(), Some(Network::None));
        assert!(Network::parse("host").is_err());
    }
}
