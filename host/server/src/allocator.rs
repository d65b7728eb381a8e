//! The process's allocator, set up for a server that holds little between calls. The binary
//! owns the allocator, so this is here and not in a library: with glibc's malloc, what was
//! freed is handed back to the system (`malloc_trim`) when the storage layer says much was
//! freed: after a preparation, after a large call
//! (`tally_engine::storage::give_memory_back_with`). glibc keeps what a thread freed in that thread's arena for its next allocations, so the server
//! otherwise held its busiest moment for as long as it ran: 316 MiB anonymous after
//! preparing a 7.5M-record table into the cache, 164 MiB with it; 51–58 MiB after
//! preparing the 75k-record survey, 25 MiB with it. Other allocators are left alone.

/// Called first in `main`, before any thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tally_engine::storage::give_memory_back_with(glibc_trim);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn glibc_trim() {
    // SAFETY: malloc_trim walks glibc's arenas under their own locks and returns free pages
    // to the system; it has no preconditions and may be called from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
