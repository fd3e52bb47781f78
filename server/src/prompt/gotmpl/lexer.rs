//! Tokenizer for Go `text/template` source: splits text from `{{ }}` actions, applies the trim
//! markers (`{{- ` / ` -}}`), drops comments, and lexes the inside of actions into items.
//! Invariant: every item carries the byte offset where it starts, so parse and exec errors can
//! report line:col against the original source.

use super::TemplateError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Text(String),
    /// `{{` (after trimming is applied; the marker itself is consumed).
    Open,
    /// `}}`.
    Close,
    Space,
    Ident(String),
    /// `.Name` — one link of a field chain.
    Field(String),
    Dot,
    /// `$` or `$name` (the text including the `$`).
    Var(String),
    Str(String),
    Number(String),
    Char(char),
    Bool(bool),
    Nil,
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
    Eof,
}

#[derive(Debug, Clone)]
pub struct Item {
    pub tok: Tok,
    pub pos: usize,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Lexes the whole source. Text items between actions are already trimmed.
pub fn lex(src: &str) -> Result<Vec<Item>, TemplateError> {
    let b = src.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    // Set by ` -}}`: the next text item loses its leading whitespace.
    let mut trim_next = false;
    loop {
        let start = i;
        let open = src[i..].find("{{").map(|o| i + o);
        let text_end = open.unwrap_or(b.len());
        let mut text = &src[start..text_end];
        if trim_next {
            text = text.trim_start_matches([' ', '\t', '\r', '\n']);
        }
        let Some(open) = open else {
            if !text.is_empty() {
                items.push(Item {
                    tok: Tok::Text(text.to_string()),
                    pos: start,
                });
            }
            items.push(Item {
                tok: Tok::Eof,
                pos: b.len(),
            });
            return Ok(items);
        };
        let mut j = open + 2;
        // `{{-` followed by whitespace trims the text before; `{{-3}}` is a number.
        if b.get(j) == Some(&b'-') && b.get(j + 1).is_some_and(|&c| is_space(c)) {
            text = text.trim_end_matches([' ', '\t', '\r', '\n']);
            j += 2;
        }
        if !text.is_empty() {
            items.push(Item {
                tok: Tok::Text(text.to_string()),
                pos: start,
            });
        }
        // Comments: `{{/* ... */}}`, optionally with trim markers around them.
        let k = j;
        if src[k..].starts_with("/*") {
            let end = src[k + 2..]
                .find("*/")
                .map(|e| k + 2 + e + 2)
                .ok_or_else(|| TemplateError::at(src, open, "unclosed comment"))?;
            let (close_at, trims) = if src[end..].starts_with("}}") {
                (end + 2, false)
            } else if src[end..].starts_with(" -}}") {
                (end + 4, true)
            } else {
                return Err(TemplateError::at(
                    src,
                    end,
                    "comment ends before closing delimiter",
                ));
            };
            trim_next = trims;
            i = close_at;
            continue;
        }
        items.push(Item {
            tok: Tok::Open,
            pos: open,
        });
        let (next, trims) = lex_action(src, j, &mut items)?;
        trim_next = trims;
        i = next;
    }
}

/// Lexes from inside an action to its closing `}}`; returns the offset after it and whether the
/// close carried a trim marker.
fn lex_action(
    src: &str,
    mut i: usize,
    items: &mut Vec<Item>,
) -> Result<(usize, bool), TemplateError> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    loop {
        if i >= b.len() {
            return Err(TemplateError::at(src, i, "unclosed action"));
        }
        let c = b[i];
        if is_space(c) {
            let s = i;
            while i < b.len() && is_space(b[i]) {
                i += 1;
            }
            if src[i..].starts_with("-}}") {
                items.push(Item {
                    tok: Tok::Close,
                    pos: i,
                });
                return Ok((i + 3, true));
            }
            items.push(Item {
                tok: Tok::Space,
                pos: s,
            });
            continue;
        }
        if src[i..].starts_with("}}") {
            if depth > 0 {
                return Err(TemplateError::at(src, i, "unclosed left paren"));
            }
            items.push(Item {
                tok: Tok::Close,
                pos: i,
            });
            return Ok((i + 2, false));
        }
        let pos = i;
        let tok = match c {
            b'(' => {
                depth += 1;
                i += 1;
                Tok::LParen
            }
            b')' => {
                if depth == 0 {
                    return Err(TemplateError::at(src, i, "unexpected right paren"));
                }
                depth -= 1;
                i += 1;
                Tok::RParen
            }
            b'|' => {
                i += 1;
                Tok::Pipe
            }
            b',' => {
                i += 1;
                Tok::Comma
            }
            b'=' => {
                i += 1;
                Tok::Assign
            }
            b':' => {
                if b.get(i + 1) != Some(&b'=') {
                    return Err(TemplateError::at(src, i, "expected :="));
                }
                i += 2;
                Tok::Declare
            }
            b'"' => {
                let (s, n) = lex_quoted(src, i)?;
                i = n;
                Tok::Str(s)
            }
            b'`' => {
                let end = src[i + 1..]
                    .find('`')
                    .ok_or_else(|| TemplateError::at(src, i, "unterminated raw quoted string"))?;
                let s = src[i + 1..i + 1 + end].to_string();
                i = i + 1 + end + 1;
                Tok::Str(s)
            }
            b'\'' => {
                let (s, n) = lex_quoted(src, i)?;
                let mut cs = s.chars();
                let (Some(ch), None) = (cs.next(), cs.next()) else {
                    return Err(TemplateError::at(src, i, "malformed character constant"));
                };
                i = n;
                Tok::Char(ch)
            }
            b'$' => {
                i += 1;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                Tok::Var(src[pos..i].to_string())
            }
            b'.' => {
                if b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
                    i = lex_number(b, i);
                    Tok::Number(src[pos..i].to_string())
                } else {
                    i += 1;
                    let s = i;
                    while i < b.len() && is_ident(b[i]) {
                        i += 1;
                    }
                    if s == i {
                        Tok::Dot
                    } else {
                        Tok::Field(src[s..i].to_string())
                    }
                }
            }
            b'0'..=b'9' | b'+' | b'-' => {
                i = lex_number(b, i);
                if i == pos + 1 && !c.is_ascii_digit() {
                    return Err(TemplateError::at(
                        src,
                        pos,
                        format!("bad character {:?}", c as char),
                    ));
                }
                Tok::Number(src[pos..i].to_string())
            }
            c if is_ident(c) => {
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                match &src[pos..i] {
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    "nil" => Tok::Nil,
                    w => Tok::Ident(w.to_string()),
                }
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(TemplateError::at(
                    src,
                    i,
                    format!("unexpected {ch:?} in command"),
                ));
            }
        };
        items.push(Item { tok, pos });
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

fn lex_number(b: &[u8], mut i: usize) -> usize {
    if matches!(b[i], b'+' | b'-') {
        i += 1;
    }
    while i < b.len() {
        let c = b[i];
        let exp_sign =
            matches!(c, b'+' | b'-') && i > 0 && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P');
        if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || exp_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// Decodes a Go interpreted string or rune literal starting at `start` (the quote).
fn lex_quoted(src: &str, start: usize) -> Result<(String, usize), TemplateError> {
    let quote = src.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        let at = start + 1 + off;
        match c {
            '\n' => return Err(TemplateError::at(src, at, "unterminated quoted string")),
            c if c == quote => return Ok((out, at + 1)),
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                let simple = match e {
                    'a' => Some('\x07'),
                    'b' => Some('\x08'),
                    'f' => Some('\x0c'),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'v' => Some('\x0b'),
                    '\\' => Some('\\'),
                    '"' => Some('"'),
                    '\'' => Some('\''),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    continue;
                }
                let digits = match e {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    '0'..='7' => 2,
                    _ => return Err(TemplateError::at(src, at, "unknown escape sequence")),
                };
                let mut hex = String::new();
                for _ in 0..digits {
                    hex.push(chars.next().map(|(_, c)| c).unwrap_or('?'));
                }
                let code = if e.is_ascii_digit() {
                    u32::from_str_radix(&format!("{e}{hex}"), 8)
                } else {
                    u32::from_str_radix(&hex, 16)
                };
                match code.ok() {
                    // \x and octal escapes are bytes; ASCII is all we can represent in a str.
                    Some(v) if matches!(e, 'x' | '0'..='7') && v < 0x80 => {
                        out.push(v as u8 as char)
                    }
                    Some(v) if matches!(e, 'u' | 'U') => match char::from_u32(v) {
                        Some(ch) => out.push(ch),
                        None => return Err(TemplateError::at(src, at, "invalid escape")),
                    },
                    _ => return Err(TemplateError::at(src, at, "invalid escape")),
                }
            }
            c => out.push(c),
        }
    }
    Err(TemplateError::at(src, start, "unterminated quoted string"))
}
