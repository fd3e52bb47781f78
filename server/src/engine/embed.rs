//! The embedding job on a runner slot: the inputs go to the runner, which measures each one
//! against the context the request asked for (`runner_core::embed_cut`); the raw vectors come
//! back for the API layer to normalize. A refused overlong input is Ollama's 400 text.

use std::time::Instant;

use runner_protocol::{EmbedRequest, ErrorKind, Prompt};

use super::Engine;
use crate::api::inference::{EmbedJob, EmbedOutput};
use crate::error::{Error, Result};

pub(super) async fn embed(engine: Engine, job: EmbedJob) -> Result<EmbedOutput> {
    let started = Instant::now();
    let model = engine.prepare(job.model.clone()).await?;
    let (lease, load) = engine
        .acquire(&model, &job.options, Some(job.keep_alive))
        .await?;
    let req = EmbedRequest {
        inputs: job.inputs.into_iter().map(Prompt::Text).collect(),
        truncate: job.truncate,
        // The inputs are measured against the context asked for (0: the automatic one, which
        // the runner loaded with).
        num_ctx: u32::try_from(job.options.runner.num_ctx)
            .ok()
            .filter(|&n| n > 0),
    };
    let resp = lease.embed(&req).await.map_err(|e| match e {
        Error::Runner(r) if r.kind == ErrorKind::ContextOverflow => {
            Error::BadRequest("the input length exceeds the context length".into())
        }
        other => other,
    })?;
    // Embeddings generate nothing: only their input tokens count.
    lease
        .meter(started)
        .done(u64::from(resp.prompt_eval_count), 0);
    Ok(EmbedOutput {
        embeddings: resp.embeddings,
        prompt_eval_count: u64::from(resp.prompt_eval_count),
        load_duration: load,
    })
}
