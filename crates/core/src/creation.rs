//! Turning what a client asks for ([`CreateSpec`]) into a running terminal: the checks (the
//! working directory, the environment, the shell), the id, and then the terminal directory,
//! its shell integration, `meta.json` and the launch through the backend, undone when the
//! launch fails. The registry decides *whether* to create (an id exists once, the live
//! limit); this module knows *how*.

mod guest;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::TerminalError;
use ptyhub_protocol::ids::{Name, TermSize, TerminalId};

use crate::backend::{Backend, BackendChoice, rootfs};
use crate::cgroup::terminal_cgroup_name;
use crate::holder::HolderSpec;
use crate::registry::RegistryConfig;
use crate::secret::random_token;
use crate::shell;
use crate::state_dir::{self, TerminalMeta, TerminalState};
use ptyhub_protocol::api::{BackendKind, CgroupLimits, Retention};
use ptyhub_protocol::rootfs::{Network, WorkspaceId};

/// What a client asks for when it creates a terminal.
#[derive(Clone, Debug, Default)]
pub struct CreateSpec {
    pub id: Option<TerminalId>,
    pub agent: Option<Name>,
    pub session: Option<Name>,
    pub cwd: Option<String>,
    pub size: Option<TermSize>,
    pub env: BTreeMap<String, String>,
    pub shell: Option<String>,
    /// Lives and dies with one connection (`/v2/pty/ws`): never listed.
    pub anonymous: bool,
    /// What hosts it (the default: native, for terminals nobody created by name).
    pub backend: BackendChoice,
    /// The OS account to run it as, by name (see [`crate::registry::Registry::create`]).
    pub user: Option<String>,
    /// Limits of its cgroup asked for (over the server's defaults).
    pub limits: Option<CgroupLimits>,
    /// Whether its files outlive it (`expiring`: removed when it closes).
    pub retention: Retention,
    /// The workspace of a `rootfs` terminal, as the client wrote it.
    pub workspace: Option<String>,
    /// The network of a `rootfs` terminal, as the client wrote it.
    pub network: Option<String>,
}

/// A checked request: everything the terminal will be, before anything exists.
pub(crate) struct Plan {
    pub(crate) id: TerminalId,
    pub(crate) agent: Name,
    pub(crate) session: Name,
    pub(crate) anonymous: bool,
    /// The account the client asked for, by name.
    pub(crate) user: Option<String>,
    /// The cgroup limits asked for; [`Plan::start`] gets the checked ones.
    pub(crate) limits: Option<CgroupLimits>,
    pub(crate) retention: Retention,
    cwd: String,
    /// The client named the working directory (else a shell of another account starts in
    /// its home).
    is_cwd_given: bool,
    program: String,
    size: TermSize,
    env: BTreeMap<String, String>,
    /// What a `rootfs` terminal's sandbox is asked to be.
    guest: Option<GuestPlan>,
}

/// A `rootfs` terminal's sandbox as asked for (checked; nothing exists yet).
pub(crate) struct GuestPlan {
    workspace: Option<WorkspaceId>,
    network: Network,
    /// Where the shell starts, inside (`/workspace` unless `cwd` named a directory under
    /// `/workspace` or `/root`).
    cwd: String,
}

/// Where a new instance goes: a new directory, or a closed terminal's own (reopened with the
/// same id, it keeps its history and its names).
pub(crate) struct Placement {
    pub(crate) dir: PathBuf,
    pub(crate) instance: u32,
    pub(crate) agent: Name,
    pub(crate) session: Name,
    pub(crate) created_at: u64,
}

impl Plan {
    /// Checks `spec` for a terminal of backend `kind` and settles the id; creates nothing.
    pub(crate) fn new(spec: CreateSpec, kind: BackendKind) -> Result<Self, TerminalError> {
        let size = spec.size.unwrap_or(TermSize::DEFAULT);
        let guest = if kind == BackendKind::Rootfs {
            Some(GuestPlan::new(&spec)?)
        } else if spec.workspace.is_some() || spec.network.is_some() {
            return Err(TerminalError::invalid(format!(
                "workspace and network are for rootfs terminals (backend \"rootfs\"); a {kind} terminal works in its cwd on the host"
            )));
        } else {
            None
        };
        let (cwd, program) = match &guest {
            Some(guest) => (guest.cwd.clone(), rootfs::GUEST_SHELL.to_owned()),
            None => (
                resolve_cwd(spec.cwd.as_deref())?,
                shell::resolve_shell(spec.shell.as_deref())?,
            ),
        };
        validate_env(&spec.env)?;
        let agent = spec.agent.clone().unwrap_or_else(Name::default_name);
        let session = spec.session.clone().unwrap_or_else(Name::default_name);
        let id = match (&spec.id, &spec.agent) {
            (Some(id), _) => id.clone(),
            (None, Some(_)) => TerminalId::for_agent(&agent, &session)?,
            (None, None) => TerminalId::parse(&format!("t-{}", random_token(12)))?,
        };
        Ok(Self {
            id,
            agent,
            session,
            anonymous: spec.anonymous,
            is_cwd_given: spec.cwd.is_some(),
            user: spec.user.clone(),
            limits: spec.limits,
            retention: spec.retention,
            cwd,
            program,
            size,
            env: spec.env,
            guest,
        })
    }

    /// Writes the terminal's files, makes its cgroup with `limits` (checked by
    /// [`crate::cgroup::Cgroups::limits_for`]) and launches it; answers with its `meta.json`
    /// as the running terminal has it. A failed launch leaves the directory marked `error`
    /// (and closed), with its integration files and its cgroup removed.
    pub(crate) async fn start(
        &self,
        owner: &str,
        placement: Placement,
        config: &RegistryConfig,
        backend: &dyn Backend,
        user: Option<&crate::os_user::OsUser>,
        limits: CgroupLimits,
    ) -> Result<TerminalMeta, TerminalError> {
        let Placement {
            dir,
            instance,
            agent,
            session,
            created_at,
        } = placement;
        if user.is_some() && backend.kind() != BackendKind::Native {
            return Err(TerminalError::invalid(format!(
                "the terminals of owner {owner:?} run as an account of their own, which only the native backend does yet"
            )));
        }
        if user.is_some() && self.guest.is_some() {
            return Err(TerminalError::invalid(format!(
                "the terminals of owner {owner:?} run as an account of their own, which only the native backend does yet"
            )));
        }
        let (id, size) = (&self.id, self.size);
        let cwd = match user {
            Some(user) if !self.is_cwd_given => user.home.to_string_lossy().into_owned(),
            _ => self.cwd.clone(),
        };
        let cwd = &cwd;
        if let Some(plan) = &self.guest {
            plan.check_cwd(owner, &dir, config)?;
        }
        let nonce = random_token(24);
        // Not derived from the nonce: every program of the terminal can read its environment.
        let process_mark = random_token(24);
        // Before the shell exists: the holder puts it in (docs/backends.md#cgroups).
        let cgroup = config
            .backends
            .cgroups()
            .create(&terminal_cgroup_name(id.as_str(), &process_mark), limits)?;
        let remove_cgroup = || {
            if let Some(record) = &cgroup {
                crate::cgroup::tree::remove_dirs(record);
            }
        };
        if let Err(e) = state_dir::create_private_dir(&dir) {
            remove_cgroup();
            return Err(TerminalError::internal(format!(
                "cannot create {}: {e}",
                dir.display()
            )));
        }
        let guest = match &self.guest {
            Some(plan) => Some(
                plan.prepare(owner, &dir, config, backend)
                    .inspect_err(|_| {
                        remove_cgroup();
                    })?,
            ),
            None => None,
        };
        let launch = match (user, &guest) {
            (_, Some(guest)) => guest::prepare_guest(guest, &self.program, &nonce),
            (None, None) => shell::prepare(
                &self.program,
                &nonce,
                &config.runtime_dir,
                backend.kind() == BackendKind::Native,
            ),
            (Some(user), None) => prepare_for(user, &self.program, &nonce),
        }
        .map_err(|e| {
            remove_cgroup();
            TerminalError::internal(format!("cannot write shell integration: {e}"))
        })?;
        let socket = config.runtime_dir.join(format!("h-{}.sock", &nonce[..16]));
        let mut command = vec![launch.program.clone()];
        command.extend(launch.args.iter().cloned());
        let meta = TerminalMeta {
            id: id.clone(),
            agent,
            session,
            owner: owner.to_owned(),
            cwd: cwd.clone(),
            command,
            state: TerminalState::Created,
            socket: socket.to_string_lossy().into_owned(),
            created_at,
            instance,
            cols: size.cols,
            rows: size.rows,
            shell: launch.kind.as_str().to_owned(),
            holder_pid: None,
            pid: None,
            exit_code: None,
            signal: None,
            ended_at: None,
            closed: false,
            integration_nonce: nonce,
            process_mark: process_mark.clone(),
            anonymous: self.anonymous,
            backend: backend.kind(),
            tmux: None,
            user: user.map(|u| u.name.clone()),
            rootfs: guest.clone(),
            schema: state_dir::META_SCHEMA,
            retention: self.retention,
            cgroup: cgroup.clone(),
        };
        let holder_spec = HolderSpec {
            dir: dir.clone(),
            socket,
            program: launch.program.clone(),
            args: launch.args.clone(),
            env: shell_env(
                id,
                &process_mark,
                &config.agent_env,
                &self.env,
                &launch.env,
                match (user, &guest) {
                    (_, Some(_)) => Base::Guest,
                    (Some(user), None) => Base::Account(user),
                    (None, None) => Base::Server,
                },
            ),
            cwd: PathBuf::from(&cwd),
            cols: size.cols,
            rows: size.rows,
            event_log_keep: config.limits.event_log_keep,
            tmux: None,
            user: user.cloned(),
            sandbox: guest,
            protocol_claim: None,
            rc_text: launch.rc_text.clone(),
            // The holder writes it as the first meta.json; if it cannot start, the record
            // below says so.
            meta: Some(Box::new(meta.clone())),
        };
        if let Err(error) = backend.launch(&holder_spec).await {
            crate::stats::global().holder(backend.kind(), crate::stats::HolderEvent::Failed);
            for file in &launch.files {
                let _ = std::fs::remove_file(file).or_else(|_| std::fs::remove_dir_all(file));
            }
            let mut failed = meta;
            if let Some(record) = failed.cgroup.as_mut() {
                // A holder that started the program and then failed leaves it in there.
                crate::cgroup::tree::teardown(record);
            }
            failed.state = TerminalState::Error;
            failed.closed = true;
            let _ = state_dir::write_meta(&dir, &failed);
            return Err(TerminalError::LaunchFailed {
                reason: error.to_string(),
            });
        }
        crate::stats::global().holder(backend.kind(), crate::stats::HolderEvent::Started);
        state_dir::read_meta(&dir)
            .map_err(|e| TerminalError::internal(format!("cannot read meta.json: {e}")))
    }
}

/// The shell integration of a terminal that runs as `user`: in a directory of its own under
/// the system's temporary directory (a fresh name, so nobody can have made it first), which
/// `user` owns and may read, and the integration removes once read. The server's runtime dir
/// stays closed to every other account.
fn prepare_for(
    user: &crate::os_user::OsUser,
    program: &str,
    nonce: &str,
) -> std::io::Result<shell::ShellLaunch> {
    use std::os::unix::fs::DirBuilderExt;
    let scratch = std::env::temp_dir().join(format!("ptyhub-{}", random_token(16)));
    std::fs::DirBuilder::new().mode(0o700).create(&scratch)?;
    let launch = shell::prepare_in(program, nonce, &scratch, true).and_then(|mut launch| {
        let owner = (
            Some(rustix::fs::Uid::from_raw(user.uid)),
            Some(rustix::fs::Gid::from_raw(user.gid)),
        );
        for entry in std::fs::read_dir(&scratch)? {
            rustix::fs::chown(entry?.path(), owner.0, owner.1)?;
        }
        rustix::fs::chown(&scratch, owner.0, owner.1)?;
        launch.files = vec![scratch.clone()];
        Ok(launch)
    });
    if launch.is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    launch
}

fn resolve_cwd(cwd: Option<&str>) -> Result<String, TerminalError> {
    let cwd = match cwd {
        Some(cwd) => cwd.to_owned(),
        None => std::env::var("HOME").unwrap_or_else(|_| "/".to_owned()),
    };
    let path = Path::new(&cwd);
    if !path.is_absolute() {
        return Err(TerminalError::invalid(format!(
            "cwd must be an absolute path, not {cwd:?}"
        )));
    }
    if !path.is_dir() {
        return Err(TerminalError::invalid(format!(
            "cwd {cwd:?} is not an existing directory"
        )));
    }
    Ok(cwd)
}

fn validate_env(env: &BTreeMap<String, String>) -> Result<(), TerminalError> {
    for (key, value) in env {
        let key_ok = !key.is_empty() && !key.contains(['=', '\0']) && key.len() <= 1024;
        if !key_ok || value.contains('\0') || value.len() > 128 * 1024 {
            return Err(TerminalError::invalid(format!(
                "invalid environment variable {:?}",
                ptyhub_protocol::ids::truncate_for_message(key)
            )));
        }
    }
    Ok(())
}

/// Whose environment a shell's starts from.
#[derive(Clone, Copy)]
enum Base<'a> {
    /// The server's own (less ptyhub's settings).
    Server,
    /// Another account's: its home, name and shell, the server's `PATH` and locale.
    Account(&'a crate::os_user::OsUser),
    /// A sandbox's: root's home and name inside, the root's `PATH`, the server's locale.
    Guest,
}

/// The agent environment every new terminal gets by default: pagers that print instead of
/// holding the terminal (`git log`, `man`, `systemctl` and the like then simply print).
pub fn agent_env() -> BTreeMap<String, String> {
    ["PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER"]
        .into_iter()
        .map(|name| (name.to_owned(), "cat".to_owned()))
        .collect()
}

/// The agent environment with the configuration's changes: a variable set to a value replaces
/// the default's, one set to the empty string is left out.
pub fn agent_env_with(changes: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = agent_env();
    for (name, value) in changes {
        if value.is_empty() {
            env.remove(name);
        } else {
            env.insert(name.clone(), value.clone());
        }
    }
    env
}

/// The shell's environment: the server's own without ptyhub's settings, a capable `TERM`, the
/// agent environment, the integration's variables, the client's, and the instance's process
/// mark (last: a client cannot override it).
fn shell_env(
    id: &TerminalId,
    process_mark: &str,
    agent: &BTreeMap<String, String>,
    extra: &BTreeMap<String, String>,
    integration: &[(String, String)],
    base: Base<'_>,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !k.starts_with("PTYHUB_") && k != "ZDOTDIR" && k != "ENV")
        // Another account gets none of the server's own environment but where programs are
        // and its locale: the server's secrets and its runtime dir are not its business. A
        // sandbox gets only the locale (its programs are the root's, not the host's).
        .filter(|(k, _)| match base {
            Base::Server => true,
            Base::Account(_) => k == "PATH" || k == "LANG" || k.starts_with("LC_") || k == "TZ",
            Base::Guest => k == "LANG" || k.starts_with("LC_") || k == "TZ",
        })
        .collect();
    match base {
        Base::Server => {}
        Base::Account(user) => env.extend(user.env()),
        Base::Guest => env.extend(
            [
                ("PATH", rootfs::GUEST_PATH),
                ("HOME", rootfs::GUEST_HOME),
                ("USER", "root"),
                ("LOGNAME", "root"),
                ("SHELL", rootfs::GUEST_SHELL),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        ),
    }
    env.insert("TERM".to_owned(), "xterm-256color".to_owned());
    env.insert("COLORTERM".to_owned(), "truecolor".to_owned());
    env.entry("LANG".to_owned())
        .or_insert_with(|| "C.UTF-8".to_owned());
    env.insert("PTYHUB_TERMINAL_ID".to_owned(), id.to_string());
    env.extend(agent.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(integration.iter().cloned());
    env.insert(
        crate::process::PROCESS_MARK_VAR.to_owned(),
        process_mark.to_owned(),
    );
    env.into_iter().collect()
}
