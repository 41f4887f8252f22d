//! Handing freed heap memory back to the system: after a flood, a close, or when a holder
//! goes idle, the allocator keeps freed pages unless told otherwise, and there is one holder
//! (and one server) per many terminals.

/// Returns free heap memory at the top of each arena to the system.
pub fn trim_heap() {
    #[allow(unsafe_code, reason = "glibc's malloc_trim has no safe wrapper")]
    // SAFETY: malloc_trim only hands free heap memory back to the system; it touches no
    // memory still in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
