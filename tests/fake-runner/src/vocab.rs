//! The fake model's vocabulary and embeddings: one token per byte (id = byte + 3; BOS = 1,
//! EOS = 2), and deterministic made-up vectors derived from each input's bytes.

use crate::script::Script;
use runner_protocol::{EmbedRequest, EmbedResponse, Prompt};

pub const BOS: i32 = 1;
pub const EOS: i32 = 2;
pub const BYTE_TOKEN_BASE: i32 = 3;
pub const N_VOCAB: u32 = 256 + BYTE_TOKEN_BASE as u32;

pub fn prompt_len(p: &Prompt, add_special: bool) -> u32 {
    match p {
        Prompt::Text(t) => tokenize(t, add_special).len() as u32,
        Prompt::Tokens(t) => t.len() as u32,
    }
}

pub fn tokenize(text: &str, add_special: bool) -> Vec<i32> {
    let bos = add_special.then_some(BOS);
    bos.into_iter()
        .chain(text.bytes().map(|b| b as i32 + BYTE_TOKEN_BASE))
        .collect()
}

pub fn detokenize(tokens: &[i32], render_special: bool) -> String {
    let mut bytes = Vec::new();
    for &t in tokens {
        match t {
            BOS if render_special => bytes.extend_from_slice(b"<s>"),
            EOS if render_special => bytes.extend_from_slice(b"</s>"),
            t if (BYTE_TOKEN_BASE..BYTE_TOKEN_BASE + 256).contains(&t) => {
                bytes.push((t - BYTE_TOKEN_BASE) as u8)
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Deterministic pseudo-random vector seeded by FNV-1a of the input.
pub fn embed(script: &Script, req: &EmbedRequest) -> EmbedResponse {
    let mut count = 0;
    let embeddings = req
        .inputs
        .iter()
        .map(|p| {
            count += prompt_len(p, false);
            let bytes: Vec<u8> = match p {
                Prompt::Text(t) => t.as_bytes().to_vec(),
                Prompt::Tokens(t) => t.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in bytes {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
            (0..script.n_embd)
                .map(|_| {
                    h = h
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect()
        })
        .collect();
    EmbedResponse {
        embeddings,
        prompt_eval_count: count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenize_round_trips_and_marks_specials() {
        let t = tokenize("hé", true);
        assert_eq!(t[0], BOS);
        assert_eq!(t.len(), 1 + "hé".len());
        assert_eq!(detokenize(&t, false), "hé");
        assert_eq!(detokenize(&t, true), "<s>hé");
    }

    #[test]
    fn embeddings_are_deterministic_and_input_dependent() {
        let s = Script::default();
        let req = EmbedRequest {
            inputs: vec![Prompt::Text("a".into()), Prompt::Text("b".into())],
            truncate: true,
            ..Default::default()
        };
        let a = embed(&s, &req);
        let b = embed(&s, &req);
        assert_eq!(a, b);
        assert_eq!(a.embeddings[0].len(), 16);
        assert_ne!(a.embeddings[0], a.embeddings[1]);
        assert!(a.embeddings[0].iter().all(|x| (-1.0..=1.0).contains(x)));
    }
}
