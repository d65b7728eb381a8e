//! The async runtime a command runs on.

/// The async runtime of a command; `None` (said on stderr) when it cannot start.
pub fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("tally: cannot start the runtime: {e}");
            None
        }
    }
}
