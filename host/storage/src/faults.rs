//! Plugin calls the sandbox stopped, by kind, counted for `/metrics` (the plugin host counts,
//! the MCP layer reads; both sit above storage).

/// Why the sandbox stopped a plugin call (counted for `/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Past its memory limit.
    Memory,
    /// Past its deadline.
    Deadline,
    /// A Rust panic in the guest.
    Panic,
    /// Another trap (an `abort()`, an out-of-bounds access, unreachable code).
    Trap,
    /// Any other failure of the call.
    Other,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::Memory,
        Fault::Deadline,
        Fault::Panic,
        Fault::Trap,
        Fault::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Memory => "memory",
            Fault::Deadline => "deadline",
            Fault::Panic => "panic",
            Fault::Trap => "trap",
            Fault::Other => "other",
        }
    }
}

static FAULTS: [std::sync::atomic::AtomicU64; 5] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 5];

/// Counts one stopped call.
pub fn count(kind: Fault) {
    FAULTS[kind as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The plugin calls the sandbox stopped in this process, by kind.
pub fn faults() -> Vec<(&'static str, u64)> {
    Fault::ALL
        .iter()
        .map(|k| {
            (
                k.name(),
                FAULTS[*k as usize].load(std::sync::atomic::Ordering::Relaxed),
            )
        })
        .collect()
}
