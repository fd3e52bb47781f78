//! OpenAI-compatible endpoints (`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
//! `/v1/models`, `/v1/models/{model}`, `/v1/responses`). Translation only (DESIGN, api/): each
//! request becomes the native request type and runs through the native handler (`native`);
//! the native reply is rewritten into OpenAI's shapes, streams as server-sent events (`sse`),
//! and errors keep the native status with OpenAI's error body (`error`).

pub mod chat;
pub mod common;
pub mod error;
pub mod native;
pub mod sse;
