//! Fuzz target: the GGUF metadata reader on arbitrary bytes, in both array modes, plus the
//! derived facts. Any panic, abort, or sanitizer report is a bug; `Err` is the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use server::gguf::{read_bytes, ReadOptions};

fuzz_target!(|data: &[u8]| {
    for full_arrays in [false, true] {
        if let Ok(f) = read_bytes(data, ReadOptions { full_arrays }) {
            // Everything the API and scheduler derive must also be total on accepted files.
            let _ = f.model_info(full_arrays);
            let _ = f.details();
            let _ = f.capabilities();
            let _ = (f.context_length(), f.head_count_kv(), f.key_length(), f.value_length());
            let _ = server::gguf::GgufBuilder::new().build();
        }
    }
});
