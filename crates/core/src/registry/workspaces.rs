//! The registry's side of workspaces: which live terminals use each one, and the rule that a
//! workspace in use cannot be deleted (checked under the creation lock, so no terminal starts
//! in a workspace while it is deleted). The files are [`crate::workspace`]'s.

use std::collections::BTreeMap;

use ptyhub_protocol::rootfs::{WorkspaceId, WorkspaceInfo};

use super::Registry;
use crate::error::TerminalError;
use crate::state_dir;
use crate::workspace::Workspaces;

impl Registry {
    fn workspace_store(&self) -> Workspaces {
        Workspaces::under(self.config.state_dir.root())
    }

    /// The live terminals of `owner`, by the named workspace they use.
    async fn workspace_users(&self, owner: &str) -> BTreeMap<WorkspaceId, Vec<String>> {
        let dirs: Vec<_> = {
            let entries = self.entries.lock().await;
            entries
                .iter()
                .filter(|((o, _), e)| o == owner && !e.is_closed())
                .map(|(_, e)| e.dir.clone())
                .collect()
        };
        let mut users: BTreeMap<WorkspaceId, Vec<String>> = BTreeMap::new();
        for dir in dirs {
            let Ok(meta) = state_dir::read_meta(&dir) else {
                continue;
            };
            if let Some(id) = meta.rootfs.and_then(|guest| guest.workspace) {
                users.entry(id).or_default().push(meta.id.to_string());
            }
        }
        for terminals in users.values_mut() {
            terminals.sort();
        }
        users
    }

    /// Every workspace of `owner`.
    pub async fn workspaces(&self, owner: &str) -> Vec<WorkspaceInfo> {
        let store = self.workspace_store();
        let mut users = self.workspace_users(owner).await;
        store
            .list(owner)
            .into_iter()
            .map(|id| WorkspaceInfo {
                created_at: store.created_at(owner, &id).unwrap_or_default(),
                terminals: users.remove(&id).unwrap_or_default(),
                id: id.to_string(),
            })
            .collect()
    }

    /// One workspace of `owner` (`WORKSPACE_NOT_FOUND` for an id it does not have).
    pub async fn workspace(&self, owner: &str, id: &str) -> Result<WorkspaceInfo, TerminalError> {
        let store = self.workspace_store();
        let parsed = WorkspaceId::parse(id)
            .ok()
            .filter(|parsed| store.exists(owner, parsed))
            .ok_or_else(|| TerminalError::WorkspaceNotFound { id: id.to_owned() })?;
        let terminals = self
            .workspace_users(owner)
            .await
            .remove(&parsed)
            .unwrap_or_default();
        Ok(WorkspaceInfo {
            created_at: store.created_at(owner, &parsed).unwrap_or_default(),
            terminals,
            id: parsed.to_string(),
        })
    }

    /// Deletes a workspace of `owner` with its files; refused while a live terminal uses it.
    pub async fn delete_workspace(&self, owner: &str, id: &str) -> Result<(), TerminalError> {
        let _creating = self.creating.lock().await;
        let info = self.workspace(owner, id).await?;
        if !info.terminals.is_empty() {
            return Err(TerminalError::WorkspaceInUse {
                id: info.id,
                terminals: info.terminals,
            });
        }
        let parsed = WorkspaceId::parse(&info.id)?;
        match self.workspace_store().remove(owner, &parsed) {
            Ok(true) => Ok(()),
            Ok(false) => Err(TerminalError::WorkspaceNotFound { id: info.id }),
            Err(e) => Err(TerminalError::internal(format!(
                "cannot delete workspace {}: {e}",
                info.id
            ))),
        }
    }
}
