//! The configuration file (TOML): defaults for `serve` and the tokens that act for other owners
//! with chosen capabilities (docs/compatibility.md#capabilities). A flag or a `PTYHUB_*` variable
//! overrides the file, which overrides the built-in default.
//!
//! ```toml
//! listen = "127.0.0.1:18091"
//! max_terminals = 20
//! idle_close_secs = 3600
//! event_log_keep = "64M"
//! backend = "auto"                   # auto, native or tmux (docs/backends.md)
//! pids_max = 4096                    # each terminal's cgroup (docs/backends.md#cgroups)
//! memory_max = "4G"                  # default: no limit
//! log_format = "json"                # human (default) or json (docs/operations.md#logs)
//! metrics_listen = "127.0.0.1:9464"  # /metrics alone, without a token (default: none)
//! workers = 2                        # threads serving requests (default: half the cores)
//!
//! [agent_env]                        # what new terminals get (default: PAGER=cat and the like)
//! GIT_PAGER = "less -FRX"            # replaces a default
//! MANPAGER = ""                      # removes it
//!
//! [[tokens]]
//! token = "a-long-random-secret"     # 16 characters at least
//! owner = "ci-bot"                   # whose terminals it sees and creates
//! capabilities = ["terminal.create", "terminal.read", "terminal.write"]  # default: all
//! user = "ci-bot"                    # the OS account its terminals run as (server as root)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ptyhub_server::auth::{Capability, Grant};
use serde::Deserialize;

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_FILE: &str = "config.toml";
/// A configured token is at least this long.
const TOKEN_MIN_LEN: usize = 16;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub runtime_dir: Option<PathBuf>,
    pub max_terminals: Option<usize>,
    pub idle_close_secs: Option<u64>,
    /// Bytes, as a number or a string with a K/M/G suffix.
    pub event_log_keep: Option<ByteCount>,
    /// What an explicit create without `backend` gets: `auto`, `native` or `tmux`.
    pub backend: Option<String>,
    /// The tmux executable of the tmux backend.
    pub tmux: Option<PathBuf>,
    /// The default `pids.max` of each terminal's cgroup.
    pub pids_max: Option<u64>,
    /// The default memory limit of each terminal's cgroup: bytes, as a number or a string
    /// with a K/M/G suffix.
    pub memory_max: Option<ByteCount>,
    /// Where the rootfs backend keeps its Debian root (default `<state dir>/rootfs`).
    pub rootfs_dir: Option<PathBuf>,
    /// How log lines look: `human` or `json`.
    pub log_format: Option<String>,
    /// The server's worker threads (1 to 1024).
    pub workers: Option<usize>,
    /// A listener of its own for `/metrics`, without a token.
    pub metrics_listen: Option<SocketAddr>,
    /// Changes to the agent environment new terminals get (docs/compatibility.md#agent-env):
    /// a value replaces the default's, an empty one removes the variable.
    #[serde(default)]
    pub agent_env: std::collections::BTreeMap<String, String>,
    pub token: Option<String>,
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ByteCount {
    Number(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    token: String,
    owner: String,
    capabilities: Option<Vec<String>>,
    /// The OS account this owner's terminals run as (the server must run as root); absent:
    /// the server's own.
    user: Option<String>,
    /// The token's non-secret name, what its input is attributed to in the log and in
    /// presence (`<owner>/<name>`); absent: `token-<n>`, its place in the list from 1.
    name: Option<String>,
}

/// Reads `explicit`, or `<state dir>/config.toml` when it exists; nothing is an empty config.
pub fn load(explicit: Option<&Path>, state_dir: &Path) -> anyhow::Result<FileConfig> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let default = state_dir.join(DEFAULT_FILE);
            if !default.exists() {
                return Ok(FileConfig::default());
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let config: FileConfig = toml::from_str(&text)
        .with_context(|| format!("the config file {} is not valid", path.display()))?;
    if !config.tokens.is_empty() || config.token.is_some() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        if mode & 0o077 != 0 {
            bail!(
                "the config file {} holds tokens but others may read it (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(config)
}

impl FileConfig {
    /// The configured tokens as grants, checked: long enough, distinct (also from the server's
    /// own token), a valid owner name, known capabilities.
    pub fn grants(&self, server_token: &str) -> anyhow::Result<Vec<Grant>> {
        let mut grants: Vec<Grant> = Vec::new();
        for (i, entry) in self.tokens.iter().enumerate() {
            let which = format!("tokens[{i}] (owner {:?})", entry.owner);
            if entry.token.chars().count() < TOKEN_MIN_LEN {
                bail!("{which}: a token needs at least {TOKEN_MIN_LEN} characters");
            }
            if entry.token == server_token || grants.iter().any(|g| g.token == entry.token) {
                bail!("{which}: every token must be different");
            }
            ptyhub_protocol::ids::Name::parse(&entry.owner).map_err(|e| {
                anyhow::anyhow!("{which}: owner must be a plain name: {}", e.message)
            })?;
            let capabilities = match &entry.capabilities {
                None => Capability::ALL.to_vec(),
                Some(names) => names
                    .iter()
                    .map(|name| {
                        Capability::parse(name).ok_or_else(|| {
                            let known: Vec<&str> =
                                Capability::ALL.iter().map(|c| c.as_str()).collect();
                            anyhow::anyhow!(
                                "{which}: unknown capability {name:?} (known: {})",
                                known.join(", ")
                            )
                        })
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?,
            };
            let name = entry
                .name
                .clone()
                .unwrap_or_else(|| format!("token-{}", i + 1));
            ptyhub_protocol::ids::Name::parse(&name).map_err(|e| {
                anyhow::anyhow!("{which}: name must be a plain name: {}", e.message)
            })?;
            grants.push(Grant {
                token: entry.token.clone(),
                owner: entry.owner.clone(),
                capabilities,
                name,
            });
        }
        Ok(grants)
    }

    /// The account each owner's terminals run as, from the tokens that name one: the account
    /// must exist, the server must be root to switch to it, and every token of one owner
    /// names the same account (or none).
    pub fn os_users(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, ptyhub_core::os_user::OsUser>> {
        let mut users: std::collections::BTreeMap<String, ptyhub_core::os_user::OsUser> =
            std::collections::BTreeMap::new();
        for (i, entry) in self.tokens.iter().enumerate() {
            let which = format!("tokens[{i}] (owner {:?})", entry.owner);
            let named = self
                .tokens
                .iter()
                .filter(|other| other.owner == entry.owner)
                .map(|other| other.user.as_deref())
                .collect::<std::collections::BTreeSet<_>>();
            if named.len() > 1 {
                bail!("{which}: every token of one owner must name the same user (or none)");
            }
            let Some(name) = &entry.user else {
                continue;
            };
            if !ptyhub_core::os_user::can_switch_users() {
                bail!(
                    "{which}: its terminals run as user {name:?}, which needs the server to run as root"
                );
            }
            let user = ptyhub_core::os_user::OsUser::lookup(name)
                .map_err(|e| anyhow::anyhow!("{which}: user {name:?}: {e}"))?;
            if user.uid == 0 {
                bail!("{which}: user {name:?} is root; name an account of its own");
            }
            users.insert(entry.owner.clone(), user);
        }
        Ok(users)
    }

    /// `backend`, checked like the flag.
    pub fn backend(&self) -> anyhow::Result<Option<ptyhub_core::backend::DefaultBackend>> {
        self.backend
            .as_deref()
            .map(|name| crate::parse_backend(name).map_err(|e| anyhow::anyhow!("backend: {e}")))
            .transpose()
    }

    /// `log_format`, checked like the flag.
    pub fn log_format(&self) -> anyhow::Result<Option<crate::LogFormat>> {
        self.log_format
            .as_deref()
            .map(|name| {
                crate::parse_log_format(name).map_err(|e| anyhow::anyhow!("log_format: {e}"))
            })
            .transpose()
    }

    /// `pids_max`, checked like the flag.
    pub fn pids_max(&self) -> anyhow::Result<Option<u64>> {
        self.pids_max
            .map(|max| crate::parse_pids_max(&max.to_string()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("pids_max: {e}"))
    }

    /// `memory_max` in bytes, checked like the flag.
    pub fn memory_max(&self) -> anyhow::Result<Option<u64>> {
        let text = match &self.memory_max {
            None => return Ok(None),
            Some(ByteCount::Number(n)) => n.to_string(),
            Some(ByteCount::Text(text)) => text.clone(),
        };
        crate::parse_memory_max(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("memory_max: {e}"))
    }

    /// `event_log_keep` in bytes, checked like the flag.
    pub fn event_log_keep(&self) -> anyhow::Result<Option<u64>> {
        match &self.event_log_keep {
            None => Ok(None),
            Some(ByteCount::Number(n)) => crate::parse_event_log_keep(&n.to_string())
                .map(Some)
                .map_err(|e| anyhow::anyhow!("event_log_keep: {e}")),
            Some(ByteCount::Text(text)) => crate::parse_event_log_keep(text)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("event_log_keep: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_of_owners_are_checked() {
        let config = |users: [&str; 2]| -> FileConfig {
            let text = format!(
                "[[tokens]]\ntoken = \"first-token-0123456789\"\nowner = \"bot\"\n{}\n\
                 [[tokens]]\ntoken = \"second-token-0123456789\"\nowner = \"bot\"\n{}\n",
                users[0], users[1]
            );
            toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
        };
        let missing = config([
            r#"user = "ptyhub-no-such-user""#,
            r#"user = "ptyhub-no-such-user""#,
        ]);
        assert!(missing.os_users().is_err());
        let disagree = config([r#"user = "nobody""#, ""]);
        let error = disagree
            .os_users()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("same user"), "{error}");
        let root = config([r#"user = "root""#, r#"user = "root""#]);
        assert!(root.os_users().is_err());
        let none = config(["", ""]);
        assert!(none.os_users().is_ok_and(|users| users.is_empty()));
    }

    #[test]
    fn log_format_and_metrics_listen_are_read_and_checked() {
        let parse = |text: &str| toml::from_str::<FileConfig>(text).map_err(|e| e.to_string());
        let config = parse("log_format = \"json\"\nmetrics_listen = \"127.0.0.1:9464\"")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.log_format().ok().flatten(),
            Some(crate::LogFormat::Json)
        );
        assert_eq!(
            config
                .metrics_listen
                .map(|addr| addr.to_string())
                .as_deref(),
            Some("127.0.0.1:9464")
        );
        let bad = parse("log_format = \"xml\"").unwrap_or_else(|e| panic!("{e}"));
        assert!(bad.log_format().is_err(), "an unknown format is refused");
        assert!(parse("metrics_listen = \"nowhere\"").is_err());
    }

    #[test]
    fn tokens_are_checked() {
        let parse = |text: &str| toml::from_str::<FileConfig>(text).map_err(|e| e.to_string());
        let ok = parse(
            r#"
            max_terminals = 5
            event_log_keep = "1M"
            [[tokens]]
            token = "0123456789abcdef"
            owner = "bot"
            capabilities = ["terminal.read"]
            "#,
        );
        let ok = ok.unwrap_or_else(|e| panic!("{e}"));
        let grants = ok.grants("server-token").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(grants[0].capabilities, vec![Capability::Read]);
        assert_eq!(ok.event_log_keep().ok().flatten(), Some(1 << 20));
        assert!(parse("nonsense = 1").is_err(), "unknown keys are refused");
        let tmux = parse(r#"backend = "tmux""#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tmux.backend().ok().flatten(),
            Some(ptyhub_core::backend::DefaultBackend::Kind(
                ptyhub_protocol::api::BackendKind::Tmux
            ))
        );
        let bad = parse(r#"backend = "screen""#).unwrap_or_else(|e| panic!("{e}"));
        assert!(bad.backend().is_err(), "an unknown backend is refused");
        for bad in [
            r#"[[tokens]]
               token = "short"
               owner = "bot""#,
            r#"[[tokens]]
               token = "0123456789abcdef"
               owner = "../etc""#,
            r#"[[tokens]]
               token = "0123456789abcdef"
               owner = "bot"
               capabilities = ["terminal.everything"]"#,
        ] {
            let config = parse(bad).unwrap_or_else(|e| panic!("{e}"));
            assert!(config.grants("server-token").is_err(), "{bad}");
        }
    }
}
