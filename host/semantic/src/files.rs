//! Reading the small files a dataset folder holds (its definition, a fetch record), the same
//! way in the server, `tally check` and `tally add`: whole, and never more than a limit.

use std::path::Path;

/// Reads a small file whole, refusing one larger than `limit` before reading it (a definition
/// or a sidecar is a few kilobytes; a huge one is a mistake or an attack).
pub fn read_small(path: &Path, limit: usize) -> Result<String, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadError::Unreadable)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > limit as u64 {
        return Err(ReadError::TooLarge {
            size: Some(size),
            limit,
        });
    }
    let mut text = String::new();
    file.take(limit as u64 + 1)
        .read_to_string(&mut text)
        .map_err(ReadError::NotText)?;
    if text.len() > limit {
        return Err(ReadError::TooLarge { size: None, limit });
    }
    Ok(text)
}

/// Why a small file (a definition, a fetch record) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the file: {0}")]
    Unreadable(std::io::Error),
    #[error("cannot read the file as UTF-8 text: {0}")]
    NotText(std::io::Error),
    #[error("{}", match size {
        Some(size) => format!("the file is {size} bytes; at most {limit} bytes are read"),
        None => format!("the file is larger than {limit} bytes"),
    })]
    TooLarge { size: Option<u64>, limit: usize },
}
