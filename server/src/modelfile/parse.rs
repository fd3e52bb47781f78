//! The Modelfile tokenizer/parser: a character state machine with Ollama's rules.
//!
//! - A line is `COMMAND value`; commands are case-insensitive ASCII words; `#` starts a comment
//!   only where a command could start.
//! - `PARAMETER` takes a `[A-Za-z0-9_]+` name, `MESSAGE` a role word, then a value.
//! - A value runs to the end of the line, trimmed. It may be `"…"` or `"""…"""`; while a quote is
//!   open, line breaks belong to the value. Spaces and tabs inside a value are kept.
//! - Other non-printable characters (controls, format characters) are dropped, as Go's
//!   `strconv.IsPrint` filter does in Ollama.
//!
//! Deliberate differences from Ollama (all accept more, none accept less): error line numbers
//! count a CRLF once and name the line the offending character is on; extra spaces between
//! `PARAMETER`/`MESSAGE` and the name/role are skipped rather than yielding an empty name.

use std::fmt;

use super::{Command, Modelfile};

const INVALID_COMMAND: &str = "command must be one of \"from\", \"license\", \"template\", \
     \"system\", \"adapter\", \"draft\", \"renderer\", \"parser\", \"parameter\", \"message\", \
     or \"requires\"";
const INVALID_ROLE: &str = "message role must be one of \"system\", \"user\", or \"assistant\"";
const UNEXPECTED_EOF: &str = "unexpected EOF";
const NO_FROM: &str = "no FROM line";

/// A Modelfile syntax error. Displays as Ollama's `(line N): msg`, or `msg` without a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: Option<usize>,
    pub msg: String,
}

impl ParseError {
    fn at(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: Some(line),
            msg: msg.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(n) => write!(f, "(line {n}): {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    From,
    Parameter,
    Template,
    System,
    Adapter,
    License,
    Message,
    Requires,
    Draft,
    Renderer,
    Parser,
}

fn keyword(word: &str) -> Option<Kind> {
    Some(match word.to_ascii_lowercase().as_str() {
        "from" => Kind::From,
        "parameter" => Kind::Parameter,
        "template" => Kind::Template,
        "system" => Kind::System,
        "adapter" => Kind::Adapter,
        "license" => Kind::License,
        "message" => Kind::Message,
        "requires" => Kind::Requires,
        "draft" => Kind::Draft,
        "renderer" => Kind::Renderer,
        "parser" => Kind::Parser,
        _ => return None,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between commands.
    Idle,
    Comment,
    Keyword,
    ParamName,
    Role,
    Value,
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_newline(c: char) -> bool {
    c == '\n' || c == '\r'
}

/// Go's `strconv.IsPrint` for the characters that matter here: the ASCII space, and anything
/// that is not a control, a separator/other whitespace, or a common format character.
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format = matches!(c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}');
    !(c.is_control() || c.is_whitespace() || format)
}

/// Strips one level of `"""…"""` or `"…"`; `None` while a quote is still open.
fn unquote(s: &str) -> Option<&str> {
    if let Some(rest) = s.strip_prefix("\"\"\"") {
        return rest.strip_suffix("\"\"\"").filter(|_| s.len() >= 6);
    }
    if let Some(rest) = s.strip_prefix('"') {
        return rest.strip_suffix('"');
    }
    Some(s)
}

/// Parses Modelfile bytes: a UTF-8 BOM is skipped, a UTF-16 BOM selects UTF-16 (as Go's
/// `unicode.BOMOverride`), and invalid UTF-8 becomes U+FFFD.
pub fn parse_bytes(bytes: &[u8]) -> Result<Modelfile, ParseError> {
    let utf16 = |le: bool| {
        let units = bytes[2..].chunks_exact(2).map(|p| {
            let pair = [p[0], p[1]];
            if le {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        });
        char::decode_utf16(units)
            .map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect::<String>()
    };
    match bytes {
        [0xff, 0xfe, ..] => parse(&utf16(true)),
        [0xfe, 0xff, ..] => parse(&utf16(false)),
        _ => parse(&String::from_utf8_lossy(bytes)),
    }
}

/// Parses a Modelfile. A leading BOM (U+FEFF) is ignored.
pub fn parse(text: &str) -> Result<Modelfile, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser::default();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        p.step(c)?;
        // CRLF is one line break; a lone CR counts as one too.
        if c == '\n' || (c == '\r' && chars.peek() != Some(&'\n')) {
            p.line += 1;
        }
    }
    p.finish()
}

#[derive(Debug)]
struct Parser {
    state: State,
    line: usize,
    buf: String,
    kind: Option<Kind>,
    /// Parameter name or message role, once read.
    sub: String,
    out: Vec<Command>,
}

impl Default for Parser {
    fn default() -> Self {
        Parser {
            state: State::Idle,
            line: 1,
            buf: String::new(),
            kind: None,
            sub: String::new(),
            out: Vec::new(),
        }
    }
}

impl Parser {
    fn step(&mut self, c: char) -> Result<(), ParseError> {
        match self.state {
            State::Idle => {
                if c == '#' {
                    self.state = State::Comment;
                } else if !is_space(c) && !is_newline(c) {
                    self.state = State::Keyword;
                    if is_print(c) {
                        self.buf.push(c);
                    }
                }
            }
            State::Comment => {
                if is_newline(c) {
                    self.state = State::Idle;
                }
            }
            State::Keyword => {
                if c.is_ascii_alphabetic() {
                    self.buf.push(c);
                } else if is_space(c) {
                    let kind = keyword(&self.buf)
                        .ok_or_else(|| ParseError::at(self.line, INVALID_COMMAND))?;
                    self.kind = Some(kind);
                    self.buf.clear();
                    self.state = match kind {
                        Kind::Parameter => State::ParamName,
                        Kind::Message => State::Role,
                        _ => State::Value,
                    };
                } else {
                    return Err(ParseError::at(self.line, INVALID_COMMAND));
                }
            }
            State::ParamName => {
                if c.is_ascii_alphanumeric() || c == '_' {
                    self.buf.push(c);
                } else if is_space(c) {
                    if !self.buf.is_empty() {
                        self.sub = std::mem::take(&mut self.buf);
                        self.state = State::Value;
                    }
                } else {
                    return Err(self.eof_error());
                }
            }
            State::Role => {
                if c.is_ascii_alphabetic() {
                    self.buf.push(c);
                } else if is_space(c) {
                    if !self.buf.is_empty() {
                        if !matches!(self.buf.as_str(), "system" | "user" | "assistant") {
                            return Err(ParseError::at(self.line, INVALID_ROLE));
                        }
                        self.sub = std::mem::take(&mut self.buf);
                        self.state = State::Value;
                    }
                } else {
                    return Err(self.eof_error());
                }
            }
            State::Value => {
                if is_newline(c) {
                    // The line ends the value only when its quotes are closed.
                    if self.finish_value() {
                        self.state = State::Idle;
                    } else {
                        self.buf.push(c);
                    }
                } else if is_space(c) || is_print(c) {
                    self.buf.push(c);
                }
            }
        }
        Ok(())
    }

    fn eof_error(&self) -> ParseError {
        let msg = if self.buf.is_empty() {
            UNEXPECTED_EOF.to_owned()
        } else {
            format!("{UNEXPECTED_EOF}: {}", self.buf)
        };
        // Ollama wraps io.ErrUnexpectedEOF without a line number (`parser.go`); clients and
        // scripts see exactly "unexpected EOF[: value]".
        ParseError { line: None, msg }
    }

    /// Emits the command if the buffered value is complete; false while a quote is open.
    fn finish_value(&mut self) -> bool {
        let Some(value) = unquote(self.buf.trim()).map(str::to_owned) else {
            return false;
        };
        self.buf.clear();
        let sub = std::mem::take(&mut self.sub);
        let cmd = match self.kind.take().expect("a value always follows a keyword") {
            Kind::From => Command::From(value),
            Kind::Parameter => Command::Parameter { name: sub, value },
            Kind::Template => Command::Template(value),
            Kind::System => Command::System(value),
            Kind::Adapter => Command::Adapter(value),
            Kind::License => Command::License(value),
            Kind::Message => Command::Message {
                role: sub,
                content: value,
            },
            Kind::Requires => Command::Requires(value),
            Kind::Draft => Command::Draft(value),
            Kind::Renderer => Command::Renderer(value),
            Kind::Parser => Command::Parser(value),
        };
        self.out.push(cmd);
        true
    }

    fn finish(mut self) -> Result<Modelfile, ParseError> {
        match self.state {
            State::Idle | State::Comment => {}
            State::Value => {
                if !self.finish_value() {
                    return Err(ParseError {
                        line: None,
                        msg: UNEXPECTED_EOF.into(),
                    });
                }
            }
            State::Keyword | State::ParamName | State::Role => {
                return Err(ParseError {
                    line: None,
                    msg: UNEXPECTED_EOF.into(),
                })
            }
        }
        if !self.out.iter().any(|c| matches!(c, Command::From(_))) {
            return Err(ParseError {
                line: None,
                msg: NO_FROM.to_owned(),
            });
        }
        Ok(Modelfile { commands: self.out })
    }
}
