//! Go's `encoding/json` error wording for request bodies, which Ollama returns verbatim
//! (`c.ShouldBindJSON` → `{"error": err.Error()}`) and which clients and scripts match on.
//!
//! Owns two pure translations:
//! - [`syntax_error`]: the first syntax error of the first JSON value, found by a scanner with
//!   Go's states and texts ("invalid character 'm' looking for beginning of object key string",
//!   "unexpected EOF", …). Trailing data after the first value is not looked at (Go's
//!   `Decoder.Decode` reads one value).
//! - [`type_error`]: a serde type mismatch, given the JSON path where it happened, as Go's
//!   `UnmarshalTypeError` ("json: cannot unmarshal string into Go struct field
//!   ChatRequest.options of type map[string]interface {}"), using a table of Ollama's request
//!   structs ([`STRUCTS`]). Paths the table does not know keep serde's text.

/// One Ollama request struct: its Go package and name and its fields' JSON names with their Go
/// types.
pub struct GoStruct {
    pub pkg: &'static str,
    pub name: &'static str,
    pub fields: &'static [(&'static str, GoType)],
}

/// A field's Go type as `reflect.Type.String()` prints it (pointers are dereferenced before Go
/// reports, so `*bool` is `bool`). `Any` accepts every JSON value.
#[derive(Clone, Copy)]
pub enum GoType {
    Plain(&'static str),
    /// A slice of `elem` (`name` is the slice's own type string).
    Slice(&'static str, &'static GoType),
    Struct(&'static GoStruct),
    /// A slice of structs.
    Structs(&'static str, &'static GoStruct),
    Any,
}

use GoType::{Any, Plain, Slice, Struct, Structs};

const MAP: GoType = Plain("map[string]interface {}");
const STR: GoType = Plain("string");
const BOOL: GoType = Plain("bool");
const INT: GoType = Plain("int");
const IMAGES: GoType = Slice("[]api.ImageData", &Plain("api.ImageData"));

pub static MESSAGE: GoStruct = GoStruct {
    pkg: "api",
    name: "Message",
    fields: &[
        ("role", STR),
        ("content", STR),
        ("thinking", STR),
        ("images", IMAGES),
        ("tool_calls", Plain("[]api.ToolCall")),
        ("tool_name", STR),
        ("tool_call_id", STR),
    ],
};

/// Ollama's request structs (api/types.go), by the name of herd's Rust type that decodes them;
/// the OpenAI layer's are `api::openai::gostructs`.
pub static STRUCTS: &[(&str, GoStruct)] = &[
    (
        "GenerateRequest",
        GoStruct {
            pkg: "api",
            name: "GenerateRequest",
            fields: &[
                ("model", STR),
                ("prompt", STR),
                ("suffix", STR),
                ("system", STR),
                ("template", STR),
                ("context", Slice("[]int", &INT)),
                ("stream", BOOL),
                ("raw", BOOL),
                ("format", Any),
                ("images", IMAGES),
                ("options", MAP),
                ("truncate", BOOL),
                ("shift", BOOL),
                ("logprobs", BOOL),
                ("top_logprobs", INT),
                ("_debug_render_only", BOOL),
            ],
        },
    ),
    (
        "ChatRequest",
        GoStruct {
            pkg: "api",
            name: "ChatRequest",
            fields: &[
                ("model", STR),
                ("messages", Structs("[]api.Message", &MESSAGE)),
                ("stream", BOOL),
                ("format", Any),
                ("tools", Plain("api.Tools")),
                ("options", MAP),
                ("truncate", BOOL),
                ("shift", BOOL),
                ("logprobs", BOOL),
                ("top_logprobs", INT),
                ("_debug_render_only", BOOL),
            ],
        },
    ),
    (
        "EmbedRequest",
        GoStruct {
            pkg: "api",
            name: "EmbedRequest",
            fields: &[
                ("model", STR),
                ("input", Any),
                ("truncate", BOOL),
                ("dimensions", INT),
                ("options", MAP),
            ],
        },
    ),
    (
        "EmbeddingRequest",
        GoStruct {
            pkg: "api",
            name: "EmbeddingRequest",
            fields: &[("model", STR), ("prompt", STR), ("options", MAP)],
        },
    ),
    (
        "ShowRequest",
        GoStruct {
            pkg: "api",
            name: "ShowRequest",
            fields: &[
                ("model", STR),
                ("name", STR),
                ("system", STR),
                ("template", STR),
                ("verbose", BOOL),
                ("options", MAP),
            ],
        },
    ),
    (
        "CopyRequest",
        GoStruct {
            pkg: "api",
            name: "CopyRequest",
            fields: &[("source", STR), ("destination", STR)],
        },
    ),
    (
        "DeleteRequest",
        GoStruct {
            pkg: "api",
            name: "DeleteRequest",
            fields: &[("model", STR), ("name", STR)],
        },
    ),
    // herd decodes pull and push bodies with one type; Go's PushRequest has the same fields.
    (
        "TransferRequest",
        GoStruct {
            pkg: "api",
            name: "PullRequest",
            fields: &[
                ("model", STR),
                ("name", STR),
                ("insecure", BOOL),
                ("username", STR),
                ("password", STR),
                ("stream", BOOL),
            ],
        },
    ),
    (
        "CreateRequest",
        GoStruct {
            pkg: "api",
            name: "CreateRequest",
            fields: &[
                ("model", STR),
                ("name", STR),
                ("stream", BOOL),
                ("quantize", STR),
                ("from", STR),
                ("files", Plain("map[string]string")),
                ("adapters", Plain("map[string]string")),
                ("template", STR),
                ("license", Any),
                ("system", STR),
                ("parameters", MAP),
                ("messages", Structs("[]api.Message", &MESSAGE)),
                ("renderer", STR),
                ("parser", STR),
                ("requires", STR),
            ],
        },
    ),
    (
        "MessagesRequest",
        GoStruct {
            pkg: "anthropic",
            name: "MessagesRequest",
            fields: &[
                ("model", STR),
                ("max_tokens", INT),
                ("messages", Plain("[]anthropic.MessageParam")),
                ("system", Any),
                ("stream", BOOL),
                ("temperature", Plain("float64")),
                ("top_p", Plain("float64")),
                ("top_k", INT),
                ("stop_sequences", Slice("[]string", &STR)),
            ],
        },
    ),
];

/// The Go struct a Rust request type decodes as (by its type name's last segment).
pub fn go_struct(rust_type: &str) -> Option<&'static GoStruct> {
    let short = rust_type.rsplit("::").next().unwrap_or(rust_type);
    STRUCTS
        .iter()
        .chain(super::openai::gostructs::STRUCTS)
        .find(|(n, _)| *n == short)
        .map(|(_, s)| s)
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index,
}

/// Go's `UnmarshalTypeError` text for a value of `found` kind (Go's words: string, number,
/// "number 1.5", bool, object, array) at `path` in a body decoded as `root`. `None` when the
/// table does not know the path (the caller keeps serde's text).
pub fn type_error(root: &'static GoStruct, path: &[Step], found: &str) -> Option<String> {
    let mut current = root;
    let mut fields: Vec<&str> = Vec::new();
    let mut ty = Struct(root);
    for step in path {
        match (step, ty) {
            (Step::Key(k), Struct(s)) => {
                let (_, t) = s.fields.iter().find(|(n, _)| n == k)?;
                current = s;
                fields.push(k);
                ty = *t;
            }
            (Step::Index, Slice(_, elem)) => ty = *elem,
            (Step::Index, Structs(_, s)) => ty = Struct(s),
            _ => return None,
        }
    }
    let type_name = match ty {
        Plain(n) | Slice(n, _) | Structs(n, _) => n.to_owned(),
        Struct(s) => format!("{}.{}", s.pkg, s.name),
        Any => return None,
    };
    if fields.is_empty() {
        return Some(format!(
            "json: cannot unmarshal {found} into Go value of type {}.{}",
            root.pkg, root.name
        ));
    }
    Some(format!(
        "json: cannot unmarshal {found} into Go struct field {}.{} of type {type_name}",
        current.name,
        fields.join(".")
    ))
}

/// The kind Go names for serde's "invalid type: …" / "invalid value: …" message, e.g.
/// `invalid type: string "x", expected a map` → `string`; an integer or float that does not fit
/// the target is `number <literal>` as Go prints it.
pub fn found_kind(serde_msg: &str) -> Option<String> {
    let rest = serde_msg
        .strip_prefix("invalid type: ")
        .or_else(|| serde_msg.strip_prefix("invalid value: "))?;
    let invalid_value = serde_msg.starts_with("invalid value: ");
    let literal = || rest.split('`').nth(1).unwrap_or_default().to_owned();
    let kind = if rest.starts_with("string") {
        "string".to_owned()
    } else if rest.starts_with("integer") || rest.starts_with("floating point") {
        let wants_int = rest.contains("expected i") || rest.contains("expected u");
        if invalid_value || (wants_int && rest.starts_with("floating point")) {
            format!("number {}", literal())
        } else {
            "number".to_owned()
        }
    } else if rest.starts_with("boolean") {
        "bool".to_owned()
    } else if rest.starts_with("map") {
        "object".to_owned()
    } else if rest.starts_with("sequence") {
        "array".to_owned()
    } else {
        return None;
    };
    Some(kind)
}

/// Go's `quoteChar`: the offending byte as Go quotes it in scanner errors.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        _ => {
            let ch = char::from(c);
            let inner = match ch {
                '\x07' => r"\a".to_owned(),
                '\x08' => r"\b".to_owned(),
                '\x0c' => r"\f".to_owned(),
                '\n' => r"\n".to_owned(),
                '\r' => r"\r".to_owned(),
                '\t' => r"\t".to_owned(),
                '\x0b' => r"\v".to_owned(),
                '\\' => r"\\".to_owned(),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => format!(r"\x{:02x}", c as u32),
                // strconv.IsPrint: C1 controls, NBSP and the soft hyphen are escaped.
                c if (0x80..=0xa0).contains(&(c as u32)) || c as u32 == 0xad => {
                    format!(r"\u{:04x}", c as u32)
                }
                c => c.to_string(),
            };
            format!("'{inner}'")
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

type Found = Result<(), String>;

fn eof() -> String {
    "unexpected EOF".to_owned()
}

fn invalid(c: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(c))
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn next_non_ws(&mut self) -> Result<u8, String> {
        self.ws();
        self.peek().ok_or_else(eof)
    }

    fn value(&mut self, depth: usize) -> Found {
        if depth > 10_000 {
            // Go: "exceeded max depth".
            return Err("exceeded max depth".to_owned());
        }
        let c = self.next_non_ws()?;
        match c {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            c => Err(invalid(c, "looking for beginning of value")),
        }
    }

    fn object(&mut self, depth: usize) -> Found {
        self.i += 1;
        let mut first = true;
        loop {
            let c = self.next_non_ws()?;
            if first && c == b'}' {
                self.i += 1;
                return Ok(());
            }
            if c != b'"' {
                return Err(invalid(c, "looking for beginning of object key string"));
            }
            self.string()?;
            let c = self.next_non_ws()?;
            if c != b':' {
                return Err(invalid(c, "after object key"));
            }
            self.i += 1;
            self.value(depth + 1)?;
            match self.next_non_ws()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Ok(());
                }
                c => return Err(invalid(c, "after object key:value pair")),
            }
            first = false;
        }
    }

    fn array(&mut self, depth: usize) -> Found {
        self.i += 1;
        if self.next_non_ws()? == b']' {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value(depth + 1)?;
            match self.next_non_ws()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Ok(());
                }
                c => return Err(invalid(c, "after array element")),
            }
        }
    }

    fn string(&mut self) -> Found {
        self.i += 1;
        loop {
            let c = self.peek().ok_or_else(eof)?;
            self.i += 1;
            match c {
                b'"' => return Ok(()),
                b'\\' => {
                    let e = self.peek().ok_or_else(eof)?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            for _ in 0..4 {
                                let h = self.peek().ok_or_else(eof)?;
                                if !h.is_ascii_hexdigit() {
                                    return Err(invalid(h, r"in \u hexadecimal character escape"));
                                }
                                self.i += 1;
                            }
                        }
                        e => return Err(invalid(e, "in string escape code")),
                    }
                }
                c if c < 0x20 => return Err(invalid(c, "in string literal")),
                _ => {}
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Found {
        if self.peek() == Some(b'-') {
            self.i += 1;
            match self.peek() {
                Some(b'0'..=b'9') => {}
                Some(c) => return Err(invalid(c, "in numeric literal")),
                None => return Err(eof()),
            }
        }
        if self.peek() == Some(b'0') {
            self.i += 1;
        } else {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            match self.peek() {
                Some(b'0'..=b'9') => self.digits(),
                Some(c) => return Err(invalid(c, "after decimal point in numeric literal")),
                None => return Err(eof()),
            };
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            match self.peek() {
                Some(b'0'..=b'9') => self.digits(),
                Some(c) => return Err(invalid(c, "in exponent of numeric literal")),
                None => return Err(eof()),
            };
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Found {
        let name = std::str::from_utf8(word).unwrap_or_default();
        for &want in word {
            let c = self.peek().ok_or_else(eof)?;
            if c != want {
                return Err(invalid(
                    c,
                    &format!("in literal {name} (expecting {})", quote_char(want)),
                ));
            }
            self.i += 1;
        }
        Ok(())
    }
}

/// The first syntax error of the first JSON value in `body`, in Go's words; `None` when that
/// value is well formed. An empty body is the caller's case ("missing request body").
pub fn syntax_error(body: &[u8]) -> Option<String> {
    Scan { b: body, i: 0 }.value(0).err()
}

#[cfg(test)]
#[path = "gojson_tests.rs"]
mod tests;
