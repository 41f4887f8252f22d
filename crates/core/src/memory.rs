//! Handing freed heap memory back to the system: after a flood, a close, or when a holder
//! goes idle, the allocator keeps freed pages unless told otherwise, and there is one holder
//! (and one server) per many terminals. The server also tells the allocator once how to serve
//! it ([`tune_for_server`]). What each part of a terminal keeps is in docs/memory.md.

/// Allocations at least this large get pages of their own, handed back the moment they are
/// freed (log reads, a command's text read back, big answers). Setting it also stops glibc
/// from raising the threshold after such a free, which would put the next big buffers on the
/// heap, between small allocations that keep their pages from ever being given back.
pub const MMAP_THRESHOLD_BYTES: i32 = 256 * 1024;
/// Heap arenas the server's threads share. glibc gives each new thread its own, up to eight
/// per core, and each keeps what its threads freed; the server's threads (the runtime's
/// workers, the screen thread, blocking reads) are few and not allocation-bound.
pub const SERVER_ARENAS_MAX: i32 = 2;

/// Returns free heap memory at the top of each arena to the system.
pub fn trim_heap() {
    #[allow(unsafe_code, reason = "glibc's malloc_trim has no safe wrapper")]
    // SAFETY: malloc_trim only hands free heap memory back to the system; it touches no
    // memory still in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Sets the server's allocator options ([`MMAP_THRESHOLD_BYTES`], [`SERVER_ARENAS_MAX`]).
/// Best called before the runtime starts its threads; later calls apply to what follows.
pub fn tune_for_server() {
    #[allow(unsafe_code, reason = "glibc's mallopt has no safe wrapper")]
    // SAFETY: mallopt only changes the allocator's parameters; an unknown value is refused
    // with a return of 0, which leaves the defaults.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_ARENA_MAX, SERVER_ARENAS_MAX);
    }
}
