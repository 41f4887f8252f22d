//! The writable layer over a sandbox's root: an overlay whose lower layer is the shared Debian
//! root (never written) and whose upper layer is the terminal's own, mounted in a mount
//! namespace of the sandbox's own by the holder's child just before it becomes bwrap. bwrap
//! then binds the overlay at `/`, so `apt-get install` and every other write to the root land
//! in the terminal's layer, and no other terminal (nor the shared root) sees them. The layer
//! lasts as long as the terminal's processes: the holder removes it once they are all gone. Which
//! directories make the layer is creation's (`crate::creation`); the flags bwrap gets are the
//! backend's (`crate::backend::rootfs`).

use std::ffi::CString;
use std::io;
use std::path::Path;

use crate::state_dir::GuestMeta;

/// The directories of a layer, under its host directory.
pub const UPPER: &str = "upper";
pub const WORK: &str = "work";
/// Where the overlay is mounted (and what bwrap binds at `/`).
pub const MERGED: &str = "merged";

/// An overlay to mount in the child, its strings made before the fork (the child allocates
/// nothing).
pub struct RootLayer {
    options: CString,
    target: CString,
}

impl RootLayer {
    /// The layer `guest` names, if it has one.
    pub fn of(guest: &GuestMeta) -> io::Result<Option<Self>> {
        let Some(layer) = &guest.layer else {
            return Ok(None);
        };
        let layer = Path::new(layer);
        let text = |path: &Path| {
            let text = path.to_string_lossy().into_owned();
            // The overlay's options are a comma-separated list, with `:` between lower layers.
            if text.contains([',', ':', '\0']) {
                return Err(io::Error::other(format!(
                    "{text} cannot be part of an overlay's options"
                )));
            }
            Ok(text)
        };
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            text(Path::new(&guest.tree))?,
            text(&layer.join(UPPER))?,
            text(&layer.join(WORK))?,
        );
        Ok(Some(Self {
            options: CString::new(options).map_err(io::Error::other)?,
            target: CString::new(text(&layer.join(MERGED))?).map_err(io::Error::other)?,
        }))
    }

    /// In the child, between fork and exec: a mount namespace of its own (nothing it mounts
    /// propagates to the host's), then the overlay. Only async-signal-safe system calls.
    pub fn mount_in_child(&self) -> io::Result<()> {
        #[allow(
            unsafe_code,
            reason = "unshare and mount have no safe spelling in std; the pointers are to \
                      strings this value owns"
        )]
        // SAFETY: plain system calls on NUL-terminated strings that outlive them.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) < 0 {
                return Err(io::Error::last_os_error());
            }
            let root = c"/";
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
            let overlay = c"overlay";
            if libc::mount(
                overlay.as_ptr(),
                self.target.as_ptr(),
                overlay.as_ptr(),
                0,
                self.options.as_ptr().cast(),
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Removes the layer `guest` names once every process of its terminal is gone (the overlay
/// went with its mount namespace; the shared root under it is untouched).
pub fn remove(guest: &GuestMeta) {
    if let Some(layer) = &guest.layer {
        let _ = std::fs::remove_dir_all(layer);
    }
}
