//! How long an embedding input may be, as Ollama's `/api/embed` measures it (server/routes.go
//! `EmbedHandler`): against the `num_ctx` the request asked for (at most the loaded context),
//! less one position for a BOS and one for an EOS the text does not carry itself. Ollama looks
//! the two `add_*_token` flags up under the architecture's prefix, where GGUFs never store them,
//! so both default to true: every input reserves two positions whatever the tokenizer adds. A
//! limit of zero or less fails every input; a longer input is cut (its content tokens, the
//! tokenizer's own BOS/EOS kept around them) or, with `truncate: false`, refused. Pooled models
//! also take an input in one micro-batch, so the batch bounds the whole sequence too. Pure,
//! table-tested; `http::embed` applies it.

use crate::Token;
use runner_protocol::{ErrorKind, RunnerError};

/// Ollama's error when no content token fits (the limit after the reservation is <= 0).
pub const NOTHING_FITS: &str = "input after truncation exceeds maximum context length";

/// An input's tokens as the tokenizer gave them: `lead` special tokens it put first (a BOS),
/// then content, then `tail` it appended (an EOS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub lead: usize,
    pub len: usize,
    pub tail: usize,
}

impl Shape {
    /// The shape of `tokens`, given what the tokenizer adds to an empty text (`added`: its BOS
    /// and/or EOS).
    pub fn of(added: &[Token], tokens: &[Token]) -> Shape {
        let (bos, eos) = match added {
            [bos, eos] => (Some(*bos), Some(*eos)),
            // One added token: a BOS if the tokens start with it, else an appended EOS.
            [one] if tokens.first() == Some(one) => (Some(*one), None),
            [one] => (None, Some(*one)),
            _ => (None, None),
        };
        let lead = usize::from(bos.is_some() && tokens.first().copied() == bos);
        let rest = tokens.len() - lead;
        let tail = usize::from(rest > 0 && eos.is_some() && tokens.last().copied() == eos);
        Shape {
            lead,
            len: tokens.len(),
            tail,
        }
    }

    fn content(self) -> usize {
        self.len - self.lead - self.tail
    }
}

/// How many content tokens of an input of `shape` to keep (`None`: all of it), for a request
/// context `ctx` and a micro-batch `batch` (0: no batch bound).
pub fn keep(
    shape: Shape,
    ctx: usize,
    batch: usize,
    truncate: bool,
) -> Result<Option<usize>, RunnerError> {
    let mut limit = ctx as i64 - 2;
    if batch > 0 {
        limit = limit.min(batch as i64 - (shape.lead + shape.tail) as i64);
    }
    if limit <= 0 {
        return Err(RunnerError::new(ErrorKind::BadRequest, NOTHING_FITS));
    }
    let limit = limit as usize;
    if shape.content() <= limit {
        return Ok(None);
    }
    if !truncate {
        return Err(RunnerError::new(
            ErrorKind::ContextOverflow,
            format!("input is {} tokens, the limit is {limit}", shape.content()),
        ));
    }
    Ok(Some(limit))
}

/// `tokens` with only the first `n` of its content tokens, the specials around them kept.
pub fn cut(tokens: &mut Vec<Token>, shape: Shape, n: usize) {
    let end = tokens.split_off(shape.len - shape.tail);
    tokens.truncate(shape.lead + n);
    tokens.extend(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_by_what_the_tokenizer_adds() {
        let s = |lead, len, tail| Shape { lead, len, tail };
        // (added, tokens, shape)
        let cases: [(&[Token], &[Token], Shape); 7] = [
            (&[], &[5, 6, 7], s(0, 3, 0)),
            (&[1], &[1, 5, 6], s(1, 3, 0)),
            (&[2], &[5, 6, 2], s(0, 3, 1)),
            (&[1, 2], &[1, 5, 6, 2], s(1, 4, 1)),
            (&[1, 2], &[1, 2], s(1, 2, 1)),
            // A BOS alone is not also the EOS.
            (&[1], &[1], s(1, 1, 0)),
            (&[1, 2], &[5, 6], s(0, 2, 0)),
        ];
        for (added, tokens, want) in cases {
            assert_eq!(Shape::of(added, tokens), want, "{added:?} {tokens:?}");
        }
    }

    #[test]
    fn limits_as_ollama_measures_them() {
        let shape = |content: usize| Shape {
            lead: 1,
            len: content + 1,
            tail: 0,
        };
        let kind = |r: Result<Option<usize>, RunnerError>| r.map_err(|e| e.kind);
        // (content tokens, num_ctx, batch, truncate, result)
        let cases = [
            (7, 3, 0, true, Ok(Some(1))),
            (1, 3, 0, true, Ok(None)),
            (7, 9, 0, true, Ok(None)),
            (8, 9, 0, true, Ok(Some(7))),
            (8, 9, 0, false, Err(ErrorKind::ContextOverflow)),
            // num_ctx 2 or less leaves nothing, whatever the input or the flag.
            (1, 2, 0, true, Err(ErrorKind::BadRequest)),
            (1, 1, 0, false, Err(ErrorKind::BadRequest)),
            // The micro-batch bounds the whole sequence, BOS included.
            (600, 2048, 512, true, Ok(Some(511))),
            (600, 2048, 512, false, Err(ErrorKind::ContextOverflow)),
        ];
        for (content, ctx, batch, truncate, want) in cases {
            assert_eq!(
                kind(keep(shape(content), ctx, batch, truncate)),
                want,
                "{content} {ctx} {batch} {truncate}"
            );
        }
        let err = keep(shape(3), 1, 0, true).unwrap_err();
        assert_eq!(err.message, NOTHING_FITS);
    }

    #[test]
    fn a_cut_keeps_the_specials_around_the_content() {
        let mut t = vec![1, 5, 6, 7, 8, 2];
        let shape = Shape::of(&[1, 2], &t);
        cut(&mut t, shape, 2);
        assert_eq!(t, vec![1, 5, 6, 2]);
        let mut t = vec![5, 6, 7];
        let shape = Shape::of(&[], &t);
        cut(&mut t, shape, 1);
        assert_eq!(t, vec![5]);
    }
}
