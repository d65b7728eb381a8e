//! Exports `tally:plugin/source@9.0.0`: a host speaking another version must refuse it before
//! instantiating it, naming both versions.

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code, missing_debug_implementations, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "source-plugin" });

    use exports::tally::plugin::source::Guest;
    use tally::plugin::types::{Description, ScanRequest, ScanResult};

    struct Future;

    impl Guest for Future {
        fn describe(_config: String) -> Result<Description, String> {
            Err("a host of another API version must never call this".to_string())
        }

        fn scan(_request: ScanRequest) -> Result<ScanResult, String> {
            Err("a host of another API version must never call this".to_string())
        }
    }

    export!(Future);
}
