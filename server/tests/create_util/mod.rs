//! Shared helpers for the create tests: a temp store, tiny GGUFs, and running a create.
#![allow(dead_code)]

use std::collections::BTreeMap;

use server::create::{create_model, CreateRequest, Progress};
use server::error::Result;
use server::gguf::GgufBuilder;
use server::store::{Digest, ManifestEntry, ModelName, Store};

pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub store: Store,
}

pub fn store() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("models")).unwrap();
    TestStore { dir, store }
}

impl TestStore {
    pub fn upload(&self, bytes: &[u8]) -> Digest {
        self.store.blobs().write_bytes(bytes).unwrap()
    }

    pub fn blob_text(&self, d: &Digest) -> String {
        String::from_utf8(std::fs::read(self.store.blobs().path(d)).unwrap()).unwrap()
    }

    pub fn read(&self, name: &str) -> Option<ManifestEntry> {
        self.store.read(&ModelName::parse(name).unwrap()).unwrap()
    }

    pub fn blob_count(&self) -> usize {
        std::fs::read_dir(self.store.blobs().dir())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("sha256-")
            })
            .count()
    }

    /// Runs a create; returns the progress statuses.
    pub fn create(&self, req: &CreateRequest) -> Result<Vec<String>> {
        let mut seen = Vec::new();
        let mut push = |p: Progress| seen.push(p.status);
        create_model(&self.store, req, &mut push)?;
        Ok(seen)
    }
}

/// The gguf stream's tiny llama (24 F32 parameters) with a chat template.
pub fn tiny_gguf() -> Vec<u8> {
    GgufBuilder::tiny_llama()
        .kv("tokenizer.chat_template", "{{ messages }}")
        .build()
        .unwrap()
}

pub fn files(pairs: &[(&str, &Digest)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, d)| (k.to_string(), d.to_string()))
            .collect(),
    )
}
