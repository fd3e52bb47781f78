//! Fuzz target: the GGUF metadata reader on arbitrary bytes, in both array modes, plus the
//! derived facts. Any panic, abort, or sanitizer report is a bug; `Err` is the expected outcome.
//! Accepted files must also survive a metadata round trip through the writer unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use server::gguf::{read_bytes, GgufBuilder, ReadOptions};

fuzz_target!(|data: &[u8]| {
    for full_arrays in [false, true] {
        let Ok(f) = read_bytes(data, ReadOptions { full_arrays }) else {
            continue;
        };
        // Everything the API and scheduler derive must also be total on accepted files.
        let _ = f.model_info(full_arrays);
        let _ = f.tensors_json();
        let _ = f.details();
        let _ = f.capabilities();
        let _ = (
            f.context_length(),
            f.head_count_kv(),
            f.key_length(),
            f.value_length(),
        );
        if full_arrays {
            let rebuilt = f
                .kvs
                .iter()
                .fold(GgufBuilder::new(), |b, (k, v)| b.kv(k, v.clone()))
                .build()
                .expect("accepted metadata re-serializes");
            let again = read_bytes(&rebuilt, ReadOptions { full_arrays }).expect("re-reads");
            // NaN != NaN, so compare the encodings rather than the values.
            let again_bytes = again
                .kvs
                .iter()
                .fold(GgufBuilder::new(), |b, (k, v)| b.kv(k, v.clone()))
                .build()
                .expect("re-serializes");
            assert_eq!(rebuilt, again_bytes);
        }
    }
});
