//! Workspaces on disk: the directories `rootfs` terminals work in (`/workspace` inside their
//! sandbox), one per owner and id under `<state>/workspaces/<owner>/<id>/`, made on first
//! use (docs/storage.md#workspaces). This module owns the layout and the file operations; who
//! may delete one (no live terminal uses it) is the registry's rule
//! (`crate::registry::Registry::delete_workspace`).

use std::io;
use std::path::{Path, PathBuf};

use ptyhub_protocol::rootfs::WorkspaceId;

/// The directory of the state dir that holds every owner's workspaces.
const WORKSPACES_DIR: &str = "workspaces";

/// The workspaces of one state dir.
#[derive(Clone, Debug)]
pub struct Workspaces {
    root: PathBuf,
}

impl Workspaces {
    /// The workspaces kept under the state dir `state_root`.
    pub fn under(state_root: &Path) -> Self {
        Self {
            root: state_root.join(WORKSPACES_DIR),
        }
    }

    /// Where `owner`'s workspace `id` lives (whether or not it exists).
    pub fn dir(&self, owner: &str, id: &WorkspaceId) -> PathBuf {
        self.root.join(owner).join(id.as_str())
    }

    /// The workspace's directory, made (mode 0700) when it does not exist yet.
    pub fn ensure(&self, owner: &str, id: &WorkspaceId) -> io::Result<PathBuf> {
        let dir = self.dir(owner, id);
        crate::state_dir::create_private_dir(&dir)?;
        Ok(dir)
    }

    /// Whether `owner` has the workspace `id`.
    pub fn exists(&self, owner: &str, id: &WorkspaceId) -> bool {
        std::fs::symlink_metadata(self.dir(owner, id)).is_ok_and(|m| m.is_dir())
    }

    /// When the workspace was made (Unix seconds), if it exists.
    pub fn created_at(&self, owner: &str, id: &WorkspaceId) -> Option<u64> {
        let meta = std::fs::symlink_metadata(self.dir(owner, id)).ok()?;
        let time = meta.created().or_else(|_| meta.modified()).ok()?;
        time.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs())
    }

    /// Every workspace of `owner`, by id (entries that are not valid ids are not workspaces).
    pub fn list(&self, owner: &str) -> Vec<WorkspaceId> {
        let Ok(entries) = std::fs::read_dir(self.root.join(owner)) else {
            return Vec::new();
        };
        let mut ids: Vec<WorkspaceId> = entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|entry| WorkspaceId::parse(entry.file_name().to_str()?).ok())
            .collect();
        ids.sort();
        ids
    }

    /// Deletes the workspace and everything in it. Returns whether it existed.
    pub fn remove(&self, owner: &str, id: &WorkspaceId) -> io::Result<bool> {
        let dir = self.dir(owner, id);
        if !self.exists(owner, id) {
            return Ok(false);
        }
        // Renamed first, so a half-deleted workspace is never found under its id.
        let doomed = self
            .root
            .join(owner)
            .join(format!(".deleting-{}-{}", id, std::process::id()));
        std::fs::rename(&dir, &doomed)?;
        std::fs::remove_dir_all(&doomed)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::Workspaces;
    use ptyhub_protocol::rootfs::WorkspaceId;

    #[test]
    fn a_workspace_is_made_on_first_use_listed_and_removed() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let spaces = Workspaces::under(temp.path());
        let id = WorkspaceId::parse("proj").unwrap_or_else(|e| panic!("{e}"));
        assert!(!spaces.exists("alice", &id));
        assert!(spaces.list("alice").is_empty());
        let dir = spaces
            .ensure("alice", &id)
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("file"), "x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spaces.list("alice"), vec![id.clone()]);
        assert!(spaces.list("bob").is_empty());
        assert!(spaces.created_at("alice", &id).is_some());
        assert!(
            spaces
                .remove("alice", &id)
                .unwrap_or_else(|e| panic!("{e}"))
        );
        assert!(!spaces.exists("alice", &id));
        assert!(
            !spaces
                .remove("alice", &id)
                .unwrap_or_else(|e| panic!("{e}"))
        );
    }
}
