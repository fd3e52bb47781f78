//! Modelfiles: the parser (`parse`), the typed view of their commands, and the renderer
//! (`Display`) that writes one back so that `parse(&m.to_string()) == m` for every value the
//! parser can produce (see `quote`). Semantics follow Ollama's `parser/parser.go`
//! (shared/research/ollama.md §5); the Modelfile → create-request conversion (parameter typing,
//! deprecated-parameter warnings, REQUIRES validation) lives in `params`.
//!
//! Invariants:
//! - the parser never panics and never allocates more than a small multiple of its input;
//! - a successful parse contains at least one `FROM`;
//! - `MESSAGE` roles are exactly `system`, `user` or `assistant` (case-sensitive, as Ollama).

mod params;
mod parse;
#[cfg(test)]
mod tests;

use std::fmt;

pub(crate) use params::go_float_json;
pub use params::{
    format_param, parameters, satisfies, validate_requires, ParamKind, ParamsOut,
    DEPRECATED_PARAMETERS,
};
pub use parse::{parse, parse_bytes, ParseError};

/// One Modelfile command, in file order. Values are already unquoted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A model name or a path (resolved by the client, relative to the Modelfile).
    From(String),
    /// `PARAMETER name value`; the value is typed later (`format_param`).
    Parameter {
        name: String,
        value: String,
    },
    Template(String),
    System(String),
    Adapter(String),
    License(String),
    Message {
        role: String,
        content: String,
    },
    /// As written (a leading `v` is dropped when the request is built).
    Requires(String),
    Draft(String),
    Renderer(String),
    Parser(String),
}

/// A parsed Modelfile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Modelfile {
    pub commands: Vec<Command>,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::From(v) => write!(f, "FROM {}", quote(v)),
            Command::Parameter { name, value } => write!(f, "PARAMETER {name} {}", quote(value)),
            Command::Template(v) => write!(f, "TEMPLATE {}", quote(v)),
            Command::System(v) => write!(f, "SYSTEM {}", quote(v)),
            Command::Adapter(v) => write!(f, "ADAPTER {}", quote(v)),
            Command::License(v) => write!(f, "LICENSE {}", quote(v)),
            Command::Message { role, content } => write!(f, "MESSAGE {role} {}", quote(content)),
            Command::Requires(v) => write!(f, "REQUIRES {}", quote(v)),
            Command::Draft(v) => write!(f, "DRAFT {}", quote(v)),
            Command::Renderer(v) => write!(f, "RENDERER {}", quote(v)),
            Command::Parser(v) => write!(f, "PARSER {}", quote(v)),
        }
    }
}

/// One command per line, each ending in `\n` (Ollama's `Modelfile.String`).
impl fmt::Display for Modelfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.commands {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Quotes a value so the parser reads it back unchanged. Matches Ollama's `quote` (bare; `"…"`
/// when the text spans lines or has edge spaces; `"""…"""` when it also contains `"`) and
/// additionally quotes what Ollama would mangle: an empty value, edge tabs, a leading `"`, and a
/// lone `\r`. A value containing `"""` plus a line break has no exact spelling in the format; it
/// is written with triple quotes and may not round-trip.
pub fn quote(s: &str) -> String {
    let edge_ws = |c: char| c == ' ' || c == '\t';
    let needs = s.is_empty()
        || s.contains(['\n', '\r'])
        || s.starts_with(edge_ws)
        || s.ends_with(edge_ws)
        || s.starts_with('"');
    if !needs {
        return s.to_owned();
    }
    if s.contains('"') {
        format!("\"\"\"{s}\"\"\"")
    } else {
        format!("\"{s}\"")
    }
}
