//! An add's input opened: the dataset id and folder checked, the folder's definition read,
//! the file opened and its header read, with the null markers that apply.

use std::path::{Path, PathBuf};

use tally_semantic::DatasetDef;

use super::header::{Header, read_header};
use super::options::AddOptions;
use crate::error::IngestError;
use crate::folder::{check_id, read_definition, remove_stale_staging};
use crate::input::Input;
use crate::sheet::DEFAULT_MAX_UNPACKED;

/// An add's input, opened, and what it is checked against.
pub(super) struct Opened {
    /// The dataset's folder in the datasets directory (not there yet for a new dataset).
    pub(super) folder: PathBuf,
    /// The folder's definition, when it has one.
    pub(super) def: Option<DatasetDef>,
    /// The name of the Parquet file in the folder.
    pub(super) data_file: String,
    pub(super) input: Input,
    pub(super) header: Header,
    /// Header rows given by `--header-rows` or `source.csv_header_rows`.
    pub(super) given_rows: Option<u32>,
    /// `--null-markers` and `source.null_markers`, sorted, each once.
    pub(super) null_markers: Vec<String>,
}

/// Checks the dataset id and the datasets directory, reads the folder's definition, and opens
/// the file and reads its header.
pub(super) fn open(options: &AddOptions) -> Result<Opened, IngestError> {
    check_id(&options.dataset_id)?;
    if !options.datasets.is_dir() {
        return Err(IngestError::dataset(
            format!(
                "the datasets directory {} does not exist",
                options.datasets.display()
            ),
            "create it, run from the folder that holds datasets/, or pass --datasets DIR",
        ));
    }
    // First, whatever this add goes on to do: a killed add's half-written files go now, not
    // at the next add that gets as far as writing.
    remove_stale_staging(&options.datasets);
    let folder = options.datasets.join(&options.dataset_id);
    let def = if folder.is_dir() {
        read_definition(&folder, &options.dataset_id)?
    } else {
        None
    };
    let data_file = data_file_of(def.as_ref())?;
    let input = open_input(options)?;
    let given_rows = options
        .header_rows
        .or_else(|| def.as_ref().and_then(|d| d.source.csv_header_rows));
    if !input.format.has_header_rows() && options.header_rows.is_some() {
        return Err(IngestError::input(
            input.place(),
            format!(
                "--header-rows applies to CSV and workbooks; a {} file names its columns itself",
                input.format.name()
            ),
            "leave out --header-rows",
        ));
    }
    let header = read_header(
        &input,
        if input.format.has_header_rows() {
            given_rows
        } else {
            Some(1)
        },
        def.is_none() && input.format.has_header_rows(),
    )?;
    let mut null_markers: Vec<String> = options.null_markers.clone();
    if let Some(d) = &def {
        null_markers.extend(d.source.null_markers.iter().cloned());
    }
    null_markers.sort();
    null_markers.dedup();
    Ok(Opened {
        folder,
        def,
        data_file,
        input,
        header,
        given_rows,
        null_markers,
    })
}

/// Opens `options.file` for reading, naming it in an error that names no file.
fn open_input(options: &AddOptions) -> Result<Input, IngestError> {
    let mut read_options = options.read.clone();
    if read_options.max_unpacked_bytes == 0 {
        read_options.max_unpacked_bytes = DEFAULT_MAX_UNPACKED;
    }
    Input::open(&options.file, &read_options).map_err(|e| match e {
        IngestError::Input {
            mut place,
            message,
            hint,
        } if place.file.as_os_str().is_empty() => {
            place.file = options.file.clone();
            IngestError::Input {
                place,
                message,
                hint,
            }
        }
        other => other,
    })
}

/// The file the Parquet backend reads for `def`: one plain file inside the folder.
fn data_file_of(def: Option<&DatasetDef>) -> Result<String, IngestError> {
    let Some(def) = def else {
        return Ok("data.parquet".to_string());
    };
    if def.backend.kind != tally_semantic::definition::BackendKind::Parquet {
        return Err(IngestError::dataset(
            format!(
                "dataset `{}` is served by a {} plugin, not from a Parquet file",
                def.id,
                def.backend.kind.as_str()
            ),
            "tally add writes Parquet datasets; add the file to a new dataset id",
        ));
    }
    let f = &def.data_file;
    if f.contains(['*', '?', '['])
        || f.ends_with('/')
        || f.contains("..")
        || f.contains('/')
        || Path::new(f).is_absolute()
    {
        return Err(IngestError::dataset(
            format!(
                "data_file `{f}` names a set of files or a path in a subfolder; tally add writes one file"
            ),
            "set data_file to a file name such as data.parquet, or convert each part yourself",
        ));
    }
    Ok(f.clone())
}
