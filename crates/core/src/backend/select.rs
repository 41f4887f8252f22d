//! The set of backends a server runs with, and the choice of one for each terminal: by the
//! kind its `meta.json` names (a restarted server follows every terminal with the backend that
//! started it), and for a new terminal by what its creator asked for and the server's default
//! (`PTYHUB_BACKEND`, docs/backends.md#selection). It starts nothing itself.

use std::path::Path;
use std::sync::Arc;

use ptyhub_protocol::api::BackendKind;

use super::{Availability, Backend, TerminalLog};
use crate::cgroup::Cgroups;
use crate::error::TerminalError;

/// What an explicit create that names no backend gets (`PTYHUB_BACKEND`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DefaultBackend {
    /// tmux when a usable tmux was found, else native.
    #[default]
    Auto,
    /// Always this one (a create fails with `BACKEND_UNAVAILABLE` when it cannot host).
    Kind(BackendKind),
}

impl DefaultBackend {
    /// Parses `auto`, `native` or `tmux`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "auto" => Some(Self::Auto),
            other => BackendKind::parse(other).map(Self::Kind),
        }
    }
}

/// Which backend a new terminal asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// A terminal nobody created by name (made by exec, an anonymous WebSocket, or an API
    /// that takes no backend): always native, whatever the default.
    #[default]
    Implicit,
    /// An explicit create that named no backend: the server's default.
    ServerDefault,
    /// An explicit create that named this one.
    Named(BackendKind),
}

/// Every backend of a server, the fallback (`native`) first, and the cgroups every backend's
/// terminals are put in (one per terminal, [`Cgroups`]).
#[derive(Clone)]
pub struct Backends {
    first: Arc<dyn Backend>,
    all: Vec<Arc<dyn Backend>>,
    default: DefaultBackend,
    cgroups: Arc<Cgroups>,
}

impl Backends {
    /// The backends a server offers: `first` (the fallback for a kind it lacks), then
    /// `others`, and its default.
    pub fn new(
        first: Arc<dyn Backend>,
        others: Vec<Arc<dyn Backend>>,
        default: DefaultBackend,
    ) -> Self {
        let mut all = vec![Arc::clone(&first)];
        all.extend(others);
        Self {
            first,
            all,
            default,
            cgroups: Arc::new(Cgroups::default()),
        }
    }

    /// The same backends, putting each new terminal in a cgroup of its own where `cgroups`
    /// can (without it, terminals get none).
    #[must_use]
    pub fn with_cgroups(mut self, cgroups: Cgroups) -> Self {
        self.cgroups = Arc::new(cgroups);
        self
    }

    /// Where terminals' cgroups go, and their default limits.
    pub fn cgroups(&self) -> &Cgroups {
        &self.cgroups
    }

    /// The choice for an `expiring` terminal: under `auto` it is native, as terminals nobody
    /// created by name are; a named backend or a pinned default stays.
    pub fn for_expiring(&self, choice: BackendChoice) -> BackendChoice {
        match (choice, self.default) {
            (BackendChoice::ServerDefault, DefaultBackend::Auto) => BackendChoice::Implicit,
            (choice, _) => choice,
        }
    }

    /// One backend for every terminal (tests).
    pub fn single(backend: Arc<dyn Backend>) -> Self {
        Self::new(backend, Vec::new(), DefaultBackend::Auto)
    }

    /// The backend of `kind`, or the first one when this server has none of that kind (its
    /// terminals then fail to connect and are replayed from their logs).
    pub fn for_kind(&self, kind: BackendKind) -> Arc<dyn Backend> {
        Arc::clone(self.find(kind).unwrap_or(&self.first))
    }

    /// The event log of the terminal kept in `dir` (every backend keeps it the same way).
    pub fn log(&self, dir: &Path) -> TerminalLog {
        TerminalLog::in_dir(dir)
    }

    fn find(&self, kind: BackendKind) -> Option<&Arc<dyn Backend>> {
        self.all.iter().find(|backend| backend.kind() == kind)
    }

    /// What an explicit create without a backend gets now.
    pub fn default_kind(&self) -> BackendKind {
        match self.default {
            DefaultBackend::Kind(kind) => kind,
            DefaultBackend::Auto => match self.find(BackendKind::Tmux) {
                Some(tmux) if tmux.availability().is_ready() => BackendKind::Tmux,
                _ => BackendKind::Native,
            },
        }
    }

    /// The kind of backend `choice` asks for, whether or not it can host here.
    pub fn kind_of(&self, choice: BackendChoice) -> BackendKind {
        match choice {
            BackendChoice::Implicit => BackendKind::Native,
            BackendChoice::ServerDefault => self.default_kind(),
            BackendChoice::Named(kind) => kind,
        }
    }

    /// The backend a new terminal gets, or `BACKEND_UNAVAILABLE` when the one asked for (by
    /// name or as the configured default) cannot host terminals here.
    pub fn choose(&self, choice: BackendChoice) -> Result<Arc<dyn Backend>, TerminalError> {
        let kind = self.kind_of(choice);
        let found = match self.find(kind) {
            // A server with one backend (the tests' fake) hosts every implicit terminal.
            None if choice == BackendChoice::Implicit => Some(&self.first),
            found => found,
        };
        let Some(backend) = found else {
            return Err(TerminalError::LaunchFailed {
                reason: format!("the {kind} backend is not available on this server"),
            });
        };
        match backend.availability().failure {
            None => Ok(Arc::clone(backend)),
            Some(failure) => Err(TerminalError::LaunchFailed {
                reason: format!("the {kind} backend is not available: {failure}"),
            }),
        }
    }

    /// Every backend with its availability and whether it is the default, `native` first.
    pub fn describe(&self) -> Vec<(BackendKind, Availability, bool)> {
        let default = self.default_kind();
        self.all
            .iter()
            .map(|backend| {
                let kind = backend.kind();
                (kind, backend.availability(), kind == default)
            })
            .collect()
    }
}

/// What each backend supports, by the names docs/backends.md#supports lists.
pub fn supports(kind: BackendKind) -> Vec<&'static str> {
    let mut names = vec![
        "exec",
        "send",
        "signal",
        "resize",
        "attach",
        "watch",
        "server_restart",
    ];
    if kind == BackendKind::Tmux {
        names.push("tmux_attach");
    }
    if kind == BackendKind::Rootfs {
        names.extend(["workspaces", "network_none", "persistent_home"]);
    }
    names
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use ptyhub_protocol::api::BackendKind;
    use ptyhub_protocol::error::ErrorCode;
    use ptyhub_protocol::event::Seq;

    use super::{BackendChoice, Backends, DefaultBackend};
    use crate::backend::{Availability, Backend, BackendLink, BoxFuture, LaunchError, TerminalLog};
    use crate::holder::HolderSpec;
    use crate::state_dir::TerminalMeta;

    /// A backend that only has a kind and an availability.
    struct Named(BackendKind, Option<&'static str>);

    impl Backend for Named {
        fn kind(&self) -> BackendKind {
            self.0
        }

        fn availability(&self) -> Availability {
            Availability {
                failure: self.1.map(str::to_owned),
                version: None,
            }
        }

        fn launch<'a>(&'a self, _: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
            Box::pin(async { Err(LaunchError::new("not in these tests")) })
        }

        fn connect<'a>(
            &'a self,
            _: &'a TerminalMeta,
            _: Seq,
        ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
            Box::pin(async { Err(std::io::Error::other("not in these tests")) })
        }

        fn log(&self, dir: &Path) -> TerminalLog {
            TerminalLog::in_dir(dir)
        }

        fn kill(&self, _: &TerminalMeta) {}
    }

    fn set(tmux_failure: Option<&'static str>, default: DefaultBackend) -> Backends {
        Backends::new(
            Arc::new(Named(BackendKind::Native, None)),
            vec![Arc::new(Named(BackendKind::Tmux, tmux_failure))],
            default,
        )
    }

    fn chosen(backends: &Backends, choice: BackendChoice) -> Result<BackendKind, ErrorCode> {
        backends
            .choose(choice)
            .map(|backend| backend.kind())
            .map_err(|error| error.code())
    }

    #[test]
    fn auto_prefers_a_ready_tmux_for_explicit_creates_only() {
        let ready = set(None, DefaultBackend::Auto);
        assert_eq!(ready.default_kind(), BackendKind::Tmux);
        assert_eq!(
            chosen(&ready, BackendChoice::ServerDefault),
            Ok(BackendKind::Tmux)
        );
        assert_eq!(
            chosen(&ready, BackendChoice::Implicit),
            Ok(BackendKind::Native)
        );
        let missing = set(Some("no tmux binary on PATH"), DefaultBackend::Auto);
        assert_eq!(missing.default_kind(), BackendKind::Native);
        assert_eq!(
            chosen(&missing, BackendChoice::ServerDefault),
            Ok(BackendKind::Native)
        );
    }

    #[test]
    fn an_unavailable_backend_asked_for_is_backend_unavailable() {
        let missing = set(Some("no tmux binary on PATH"), DefaultBackend::Auto);
        assert_eq!(
            chosen(&missing, BackendChoice::Named(BackendKind::Tmux)),
            Err(ErrorCode::BackendUnavailable)
        );
        let pinned = set(
            Some("no tmux binary on PATH"),
            DefaultBackend::Kind(BackendKind::Tmux),
        );
        assert_eq!(
            chosen(&pinned, BackendChoice::ServerDefault),
            Err(ErrorCode::BackendUnavailable)
        );
        assert_eq!(
            chosen(&pinned, BackendChoice::Implicit),
            Ok(BackendKind::Native)
        );
    }

    #[test]
    fn terminals_are_followed_by_the_backend_their_meta_names() {
        let backends = set(None, DefaultBackend::Auto);
        assert_eq!(
            backends.for_kind(BackendKind::Tmux).kind(),
            BackendKind::Tmux
        );
        let native_only = Backends::single(Arc::new(Named(BackendKind::Native, None)));
        assert_eq!(
            native_only.for_kind(BackendKind::Tmux).kind(),
            BackendKind::Native
        );
        assert_eq!(DefaultBackend::parse("auto"), Some(DefaultBackend::Auto));
        assert_eq!(DefaultBackend::parse("screen"), None);
    }
}
