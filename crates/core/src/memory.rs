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

/// What a holder hands back when it goes idle: the free heap ([`trim_heap`]) and the stack a
/// deeper call touched ([`release_unused_stack`]).
pub fn hand_back_idle_memory() {
    trim_heap();
    release_unused_stack();
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

/// Stack the caller keeps below its own frame when [`release_unused_stack`] hands the rest
/// back: what the next round of a loop's calls touches again.
const STACK_KEPT_BELOW_BYTES: usize = 8 * 1024;

/// Hands back the main thread's stack pages below the caller's frame (less 8 KiB,
/// `STACK_KEPT_BELOW_BYTES`) that an earlier, deeper call touched: the kernel keeps a
/// touched stack page for the life of the process, and a holder's start (its spec parsed,
/// its program spawned) goes deeper than its loop ever does again. The pages come back, as
/// zeros, the next time a call reaches that deep. Does nothing on another thread, whose
/// stack is not the `[stack]` mapping.
#[inline(never)]
pub fn release_unused_stack() {
    if rustix::thread::gettid() != rustix::process::getpid() {
        return;
    }
    let marker = 0u8;
    let here = std::ptr::from_ref(std::hint::black_box(&marker)) as usize;
    let Some(lowest) = main_stack_start() else {
        return;
    };
    let page = rustix::param::page_size();
    let end = here.saturating_sub(STACK_KEPT_BELOW_BYTES) & !(page - 1);
    if end <= lowest {
        return;
    }
    #[allow(unsafe_code, reason = "madvise has no safe form")]
    // SAFETY: [lowest, end) lies in the main thread's stack mapping, below this frame and a
    // margin under it: nothing lives there (the stack grows down), so its pages may be
    // dropped; the kernel maps zeros in when the stack grows into them again.
    unsafe {
        libc::madvise(
            lowest as *mut libc::c_void,
            end - lowest,
            libc::MADV_DONTNEED,
        );
    }
}

/// Where the main thread's stack mapping starts (its lowest address), from
/// `/proc/self/maps`.
fn main_stack_start() -> Option<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|line| line.ends_with("[stack]"))?;
    let (start, _) = line.split_once('-')?;
    usize::from_str_radix(start, 16).ok()
}
