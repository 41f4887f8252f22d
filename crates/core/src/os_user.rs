//! The operating-system account an owner's terminals run as, when the configuration names one:
//! looking it up (`getpwnam_r`), and what a shell started as it needs (its home, its
//! identity). Switching to it happens in the holder, between fork and exec
//! (`holder::pty::spawn`); which owner gets which account is the configuration's.
//!
//! The model (docs/security.md, "Owners and OS accounts"): the server and the holders run as
//! one account and keep the state dir, the runtime dir, the tokens and the configuration
//! private to it; a terminal whose owner has an account of its own runs its shell as that
//! account, which can read none of them, nor another owner's terminals, sockets or processes.

use std::ffi::{CStr, CString};
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// An account terminals run as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl OsUser {
    /// The account called `name`, as the system's user database knows it.
    pub fn lookup(name: &str) -> io::Result<Self> {
        let c_name = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a user name has no NUL"))?;
        let mut buffer = vec![0u8; 16 * 1024];
        // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids) for getpwnam_r to fill.
        #[allow(unsafe_code, reason = "getpwnam_r fills a C struct")]
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: the name is NUL-terminated, `entry`
        // and `found` are ours, and `buffer` is writable for its length.
        #[allow(unsafe_code, reason = "getpwnam_r is the system's user database")]
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &raw mut entry,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &raw mut found,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if found.is_null() || entry.pw_dir.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no user {name:?} on this system"),
            ));
        }
        // SAFETY: getpwnam_r succeeded: `pw_dir` points to a NUL-terminated string in `buffer`.
        #[allow(unsafe_code, reason = "reading the string getpwnam_r wrote")]
        let home = unsafe { CStr::from_ptr(entry.pw_dir) };
        Ok(Self {
            name: name.to_owned(),
            uid: entry.pw_uid,
            gid: entry.pw_gid,
            home: PathBuf::from(home.to_string_lossy().into_owned()),
        })
    }

    /// The variables that say who the shell is: `HOME`, `USER` and `LOGNAME`.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".to_owned(), self.home.to_string_lossy().into_owned()),
            ("USER".to_owned(), self.name.clone()),
            ("LOGNAME".to_owned(), self.name.clone()),
        ]
    }
}

/// Whether this process may run terminals as other accounts (it is root).
pub fn can_switch_users() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::OsUser;

    #[test]
    fn root_is_found_and_a_missing_user_is_an_error() {
        let root = OsUser::lookup("root").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(root.uid, 0);
        assert!(root.home.is_absolute());
        let missing = OsUser::lookup("ptyhub-no-such-user-x");
        assert!(missing.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound));
    }
}
