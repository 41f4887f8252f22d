//! A counter in memory a holder shares with the server that types into its PTY: the server
//! bumps it once it sent a `typed` record, before it writes the bytes, and the holder, before it
//! logs output it read from the PTY, compares it with the last value it saw. A change means a
//! record may wait on the typing connection (to be logged ahead of that output); no change
//! means none can, and costs no system call, which matters in a flood, when the holder logs
//! output thousands of times a second (docs/storage.md#holder-protocol-versions).
//!
//! Order: the server sends the record, bumps, then writes to the PTY; the holder looks after
//! its read of what that write caused. The kernel's PTY orders the write before that read, so a
//! holder that read output a typed command caused sees the bumped value, and then finds the
//! record, which was on its socket before the bump.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared memory: one page of a `memfd`, mapped in each process that holds it.
pub struct TypingCounter {
    counter: NonNull<AtomicU64>,
    /// The memory's descriptor, kept by its creator to hand out (again after a server's
    /// restart); the mapping needs none, so a side that only maps it keeps none.
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is shared memory accessed only through an `AtomicU64`, which is `Sync`;
// the pointer stays valid until `Drop` unmaps it.
#[allow(unsafe_code, reason = "a raw pointer into a shared mapping")]
unsafe impl Send for TypingCounter {}
// SAFETY: as above: every access is atomic.
#[allow(unsafe_code, reason = "a raw pointer into a shared mapping")]
unsafe impl Sync for TypingCounter {}

const PAGE_BYTES: usize = 4096;

impl TypingCounter {
    /// A new counter at zero (the holder's side).
    pub fn create() -> io::Result<Self> {
        let fd = rustix::fs::memfd_create("ptyhub-typing", rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, PAGE_BYTES as u64)?;
        let mut counter = Self::map(&fd)?;
        counter.fd = Some(fd);
        Ok(counter)
    }

    /// Maps a counter another process created and sent (the server's side; the descriptor
    /// may be closed afterwards).
    pub fn map(fd: &OwnedFd) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let size = rustix::fs::fstat(fd)?.st_size;
        if usize::try_from(size).ok() != Some(PAGE_BYTES) {
            return Err(io::Error::other("not a typing counter"));
        }
        #[allow(unsafe_code, reason = "mmap has no safe form")]
        // SAFETY: a fresh shared mapping of the whole (one page) file; nothing else is mapped
        // there, and the result is checked before use.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let counter = NonNull::new(address.cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap gave a null address"))?;
        Ok(Self { counter, fd: None })
    }

    /// The descriptor to hand to the other side, kept by the side that created it.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.fd.as_ref().map(AsFd::as_fd)
    }

    fn atomic(&self) -> &AtomicU64 {
        #[allow(unsafe_code, reason = "the counter lives in a shared mapping")]
        // SAFETY: the page is mapped (and page-aligned, so aligned for a u64) until `Drop`,
        // and only ever accessed atomically, by this process and the other side.
        unsafe {
            self.counter.as_ref()
        }
    }

    /// Says a `typed` record was sent (before its bytes are written).
    pub fn bump(&self) {
        self.atomic().fetch_add(1, Ordering::Release);
    }

    /// The count now.
    pub fn get(&self) -> u64 {
        self.atomic().load(Ordering::Acquire)
    }
}

impl Drop for TypingCounter {
    fn drop(&mut self) {
        #[allow(unsafe_code, reason = "munmap has no safe form")]
        // SAFETY: the mapping was made in `map` with this address and size and is not used
        // after this point (the counter is being dropped).
        unsafe {
            libc::munmap(self.counter.as_ptr().cast(), PAGE_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_see_one_count() -> io::Result<()> {
        let holder = TypingCounter::create()?;
        let fd = holder
            .fd()
            .ok_or_else(|| io::Error::other("the creator keeps its descriptor"))?
            .try_clone_to_owned()?;
        let server = TypingCounter::map(&fd)?;
        drop(fd);
        assert!(
            server.fd().is_none(),
            "a side that maps it keeps no descriptor"
        );
        assert_eq!(holder.get(), 0);
        server.bump();
        server.bump();
        assert_eq!(holder.get(), 2);
        drop(server);
        assert_eq!(
            holder.get(),
            2,
            "the holder's mapping outlives the server's"
        );
        let not_a_counter = rustix::fs::memfd_create("other", rustix::fs::MemfdFlags::CLOEXEC)?;
        assert!(TypingCounter::map(&not_a_counter).is_err());
        Ok(())
    }
}
