//! The native backend: a holder process per terminal on this machine
//! ([`crate::holder`]), reached over its unix socket. Starting one is [`HolderLauncher`]'s
//! job; everything the holder cannot do for itself because it no longer answers (ending its
//! process tree) is done here from `/proc`.

use std::path::Path;
use std::sync::Arc;

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::Seq;

use super::native_link::HolderLink;
use super::{Backend, BackendLink, BoxFuture, LaunchError, TerminalLog};
use crate::holder::HolderSpec;
use crate::holder::launch::HolderLauncher;
use crate::state_dir::TerminalMeta;

/// Terminals hosted by holder processes started from `launcher`.
#[derive(Clone, Debug)]
pub struct NativeBackend {
    launcher: HolderLauncher,
}

impl NativeBackend {
    pub fn new(launcher: HolderLauncher) -> Arc<Self> {
        Arc::new(Self { launcher })
    }
}

impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
        Box::pin(async move { self.launcher.launch(spec).await.map(|_| ()) })
    }

    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
        Box::pin(async move {
            let (link, lines) = HolderLink::connect(Path::new(&meta.socket), after).await?;
            Ok(BackendLink {
                requests: Box::new(link),
                lines: Box::new(lines),
            })
        })
    }

    fn log(&self, dir: &Path) -> TerminalLog {
        TerminalLog::in_dir(dir)
    }

    fn kill(&self, meta: &TerminalMeta) {
        let Some(holder) = meta.holder_pid else {
            return;
        };
        for pid in crate::process::descendants(holder)
            .into_iter()
            .chain([holder])
        {
            crate::process::kill(pid, rustix::process::Signal::KILL);
        }
    }
}
