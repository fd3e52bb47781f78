//! A small protobuf reader for SentencePiece's `tokenizer.model` (`ModelProto`): only the
//! repeated `pieces` field (1) is decoded — each piece's text (1), score (2) and type (3); every
//! other field is skipped by wire type. Bounded: every length is checked against the bytes left,
//! and nesting is one level (pieces inside the model), so hostile input fails with a 400.

use crate::error::{Error, Result};

/// SentencePiece piece types (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub text: String,
    pub score: f32,
    pub kind: PieceType,
}

fn bad(msg: &str) -> Error {
    Error::BadRequest(format!("invalid tokenizer.model: {msg}"))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| bad("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(bad("field extends past the end"));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// Reads a field key and returns (field number, wire type).
    fn key(&mut self) -> Result<(u64, u8)> {
        let k = self.varint()?;
        Ok((k >> 3, (k & 7) as u8))
    }

    /// Skips a value of `wire` type; groups (3, 4) are refused, which also bounds nesting.
    fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 => {
                self.take(8)?;
            }
            2 => {
                let n = self.varint()?;
                self.take(n)?;
            }
            5 => {
                self.take(4)?;
            }
            _ => return Err(bad("unsupported wire type")),
        }
        Ok(())
    }
}

/// Decodes the pieces of a `ModelProto`.
pub fn parse_pieces(buf: &[u8]) -> Result<Vec<Piece>> {
    let mut c = Cursor { buf, pos: 0 };
    let mut pieces = Vec::new();
    while !c.done() {
        let (field, wire) = c.key()?;
        if field == 1 && wire == 2 {
            let n = c.varint()?;
            pieces.push(parse_piece(c.take(n)?)?);
        } else {
            c.skip(wire)?;
        }
    }
    if pieces.is_empty() {
        return Err(bad("no pieces"));
    }
    Ok(pieces)
}

fn parse_piece(buf: &[u8]) -> Result<Piece> {
    let mut c = Cursor { buf, pos: 0 };
    let mut p = Piece {
        text: String::new(),
        score: 0.0,
        kind: PieceType::Normal,
    };
    while !c.done() {
        match c.key()? {
            (1, 2) => {
                let n = c.varint()?;
                p.text = std::str::from_utf8(c.take(n)?)
                    .map_err(|_| bad("piece is not UTF-8"))?
                    .to_owned();
            }
            (2, 5) => {
                let b = c.take(4)?;
                p.score = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            (3, 0) => {
                p.kind = match c.varint()? {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    _ => return Err(bad("unknown piece type")),
                }
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(p)
}

/// Encodes pieces as a minimal `ModelProto` (pieces only, plus the given raw trailing fields):
/// tests and the bench build tokenizer.model files with it.
pub fn encode_pieces(pieces: &[Piece], trailing: &[u8]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut out = Vec::new();
    for p in pieces {
        let mut body = Vec::new();
        body.push(0x0a);
        varint(&mut body, p.text.len() as u64);
        body.extend_from_slice(p.text.as_bytes());
        body.push(0x15);
        body.extend_from_slice(&p.score.to_le_bytes());
        let kind = match p.kind {
            PieceType::Normal => 1,
            PieceType::Unknown => 2,
            PieceType::Control => 3,
            PieceType::UserDefined => 4,
            PieceType::Unused => 5,
            PieceType::Byte => 6,
        };
        body.push(0x18);
        varint(&mut body, kind);
        out.push(0x0a);
        varint(&mut out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    out.extend_from_slice(trailing);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_skips_other_fields() {
        let pieces = vec![
            Piece {
                text: "<unk>".into(),
                score: 0.0,
                kind: PieceType::Unknown,
            },
            Piece {
                text: "▁the".into(),
                score: -1.5,
                kind: PieceType::Normal,
            },
            Piece {
                text: "<0x0A>".into(),
                score: 0.0,
                kind: PieceType::Byte,
            },
        ];
        // A trainer_spec (field 2) holding a varint and a string must be skipped whole.
        let trailing = [0x12, 0x05, 0x08, 0x02, 0x12, 0x01, b'x'];
        let buf = encode_pieces(&pieces, &trailing);
        assert_eq!(parse_pieces(&buf).unwrap(), pieces);
    }

    #[test]
    fn refuses_malformed_input() {
        let cases: &[&[u8]] = &[
            &[],                       // no pieces
            &[0x0a, 0x05, 0x0a],       // piece longer than the buffer
            &[0x0a, 0x02, 0x0a, 0x7f], // text longer than the piece
            &[0x0b],                   // a group (wire type 3)
            &[
                0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ], // varint > 10 bytes
            &[0x0a, 0x03, 0x0a, 0x01, 0xff], // text not UTF-8
            &[0x0a, 0x02, 0x18, 0x09], // unknown type
        ];
        for c in cases {
            assert!(
                matches!(parse_pieces(c), Err(Error::BadRequest(_))),
                "{c:?}"
            );
        }
    }
}
