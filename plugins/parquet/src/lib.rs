//! The built-in Parquet backend: registers a dataset from its file footer (schema, row count)
//! and reads data only when queried. It arrives with the engine issue.
