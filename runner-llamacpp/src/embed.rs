//! Embeddings on one sequence of the shared context (embeddings mode on; the engine toggles it).
//!
//! Models that declare a pooling (embedding models) return llama.cpp's pooled vector from one
//! decode of the whole input. Models that declare none (generative models such as gemma3) are
//! mean-pooled here over the per-token hidden states, decoded in small chunks so the per-token
//! output buffers (which include logits) stay small. Vectors are raw: normalisation is the
//! server's job.

use crate::ffi::{Batch, Context, DecodeError, Pooling, Token};
use runner_protocol::{EmbedResponse, ErrorKind, RunnerError};

/// Tokens per decode when mean-pooling per-token states: each output row also carries a logits
/// row (n_vocab floats), so this bounds that buffer.
const MEAN_CHUNK: usize = 32;

pub fn run(
    ctx: &mut Context,
    batch: &mut Batch,
    seq: i32,
    inputs: &[Vec<Token>],
) -> Result<EmbedResponse, RunnerError> {
    let pooling = ctx.pooling();
    if pooling == Pooling::Rank {
        return Err(RunnerError::new(
            ErrorKind::BadRequest,
            "this is a reranking model, not an embedding model",
        ));
    }
    let mut embeddings = Vec::with_capacity(inputs.len());
    let mut count = 0u32;
    for toks in inputs {
        if toks.is_empty() {
            return Err(RunnerError::new(
                ErrorKind::BadRequest,
                "cannot embed an empty input",
            ));
        }
        ctx.seq_rm(seq, -1, -1);
        let v = match pooling {
            Pooling::None => mean_of_tokens(ctx, batch, seq, toks)?,
            _ => pooled(ctx, batch, seq, toks)?,
        };
        count += toks.len() as u32;
        embeddings.push(v);
    }
    ctx.seq_rm(seq, -1, -1);
    Ok(EmbedResponse {
        embeddings,
        prompt_eval_count: count,
    })
}

fn decode(ctx: &mut Context, batch: &Batch) -> Result<(), RunnerError> {
    ctx.decode(batch).map_err(|e| match e {
        DecodeError::Aborted => RunnerError::new(ErrorKind::Cancelled, "runner is shutting down"),
        DecodeError::NoKvSlot => RunnerError::new(
            ErrorKind::ContextOverflow,
            "input does not fit the KV cache",
        ),
        DecodeError::Failed(c) => {
            RunnerError::new(ErrorKind::Internal, format!("llama_decode failed ({c})"))
        }
    })
}

fn mean_of_tokens(
    ctx: &mut Context,
    batch: &mut Batch,
    seq: i32,
    toks: &[Token],
) -> Result<Vec<f32>, RunnerError> {
    let mut sum: Vec<f64> = Vec::new();
    let chunk = MEAN_CHUNK.min(batch.capacity());
    for (c, part) in toks.chunks(chunk).enumerate() {
        batch.clear();
        for (j, &t) in part.iter().enumerate() {
            batch.push(t, (c * chunk + j) as i32, seq, true);
        }
        decode(ctx, batch)?;
        for j in 0..part.len() {
            let e = ctx.embedding(j as i32).ok_or_else(|| {
                RunnerError::new(ErrorKind::Internal, "llama.cpp returned no embedding")
            })?;
            if sum.is_empty() {
                sum = vec![0.0; e.len()];
            }
            for (s, x) in sum.iter_mut().zip(e) {
                *s += *x as f64;
            }
        }
    }
    let n = toks.len() as f64;
    Ok(sum.into_iter().map(|s| (s / n) as f32).collect())
}

fn pooled(
    ctx: &mut Context,
    batch: &mut Batch,
    seq: i32,
    toks: &[Token],
) -> Result<Vec<f32>, RunnerError> {
    if toks.len() > batch.capacity() {
        return Err(RunnerError::new(
            ErrorKind::ContextOverflow,
            "input longer than the batch size",
        ));
    }
    batch.clear();
    for (j, &t) in toks.iter().enumerate() {
        batch.push(t, j as i32, seq, true);
    }
    decode(ctx, batch)?;
    ctx.embedding_seq(seq).map(<[f32]>::to_vec).ok_or_else(|| {
        RunnerError::new(
            ErrorKind::Internal,
            "llama.cpp returned no pooled embedding",
        )
    })
}
