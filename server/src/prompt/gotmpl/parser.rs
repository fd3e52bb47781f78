//! Parser for Go `text/template`: turns lexer items into the node tree (`Node`), collecting
//! `define`/`block` bodies into the named-template table. Mirrors Go's grammar: pipelines with
//! declarations (`$x :=`, `$i, $v :=`, `$x =`), commands separated by `|`, operands with field
//! chains, parenthesized pipelines, and the control actions with `else if` / `else with` sugar.

use std::collections::HashMap;

use super::lexer::{Item, Tok};
use super::limits::MAX_PARSE_DEPTH;
use super::TemplateError;

#[derive(Debug, Clone)]
pub enum Node {
    Text(String),
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break(usize),
    Continue(usize),
}

#[derive(Debug, Clone)]
pub struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Debug, Clone)]
pub struct Pipe {
    pub pos: usize,
    /// Variables declared (`:=`) or assigned (`=`) by this pipeline, with `$`.
    pub decl: Vec<String>,
    pub is_assign: bool,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
pub struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone)]
pub enum Arg {
    /// `.A.B` (empty chain never occurs; `.` alone is `Dot`).
    Field(Vec<String>),
    /// `$x.A.B` — the variable name (with `$`) then the chain.
    Var(String, Vec<String>),
    /// `(pipeline).A.B` or a literal followed by fields.
    Chain(Box<Arg>, Vec<String>),
    Pipe(Pipe),
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String),
}

pub type Defines = HashMap<String, Vec<Node>>;

pub struct Parser<'a> {
    src: &'a str,
    items: Vec<Item>,
    i: usize,
    pub defines: Defines,
    /// Range nesting depth: `break`/`continue` are only legal inside a range.
    range_depth: usize,
    /// Nesting of bodies and parentheses being parsed; bounded by `MAX_PARSE_DEPTH` so the
    /// recursive descent (and every later walk of the tree) cannot overflow the stack.
    depth: usize,
}

/// What ended a list: `{{end}}`, `{{else ...}}` (items positioned after `else`), or EOF.
enum Stop {
    End,
    Else,
    Eof,
}

impl<'a> Parser<'a> {
    pub fn new(src: &'a str, items: Vec<Item>) -> Self {
        Parser {
            src,
            items,
            i: 0,
            defines: HashMap::new(),
            range_depth: 0,
            depth: 0,
        }
    }

    /// Runs `f` one nesting level deeper, failing once `MAX_PARSE_DEPTH` is reached.
    fn nested<T>(
        &mut self,
        pos: usize,
        f: impl FnOnce(&mut Self) -> Result<T, TemplateError>,
    ) -> Result<T, TemplateError> {
        if self.depth >= MAX_PARSE_DEPTH {
            return Err(TemplateError::limit_at(
                self.src,
                pos,
                format!("max nesting depth {MAX_PARSE_DEPTH} exceeded"),
            ));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn err(&self, pos: usize, msg: impl Into<String>) -> TemplateError {
        TemplateError::at(self.src, pos, msg)
    }

    fn peek(&self) -> &Tok {
        &self.items[self.i].tok
    }

    fn pos(&self) -> usize {
        self.items[self.i].pos
    }

    fn next(&mut self) -> Item {
        let it = self.items[self.i].clone();
        if self.i + 1 < self.items.len() {
            self.i += 1;
        }
        it
    }

    fn skip_space(&mut self) {
        while *self.peek() == Tok::Space {
            self.next();
        }
    }

    /// Next non-space item.
    fn next_ns(&mut self) -> Item {
        self.skip_space();
        self.next()
    }

    fn expect_close(&mut self, ctx: &str) -> Result<(), TemplateError> {
        let it = self.next_ns();
        if it.tok != Tok::Close {
            return Err(self.err(it.pos, format!("unexpected {:?} in {ctx}", it.tok)));
        }
        Ok(())
    }

    pub fn parse_root(&mut self) -> Result<Vec<Node>, TemplateError> {
        let (list, stop) = self.parse_list()?;
        match stop {
            Stop::Eof => Ok(list),
            Stop::End => Err(self.err(
                self.items[self.i.saturating_sub(1)].pos,
                "unexpected {{end}}",
            )),
            Stop::Else => Err(self.err(
                self.items[self.i.saturating_sub(1)].pos,
                "unexpected {{else}}",
            )),
        }
    }

    fn parse_list(&mut self) -> Result<(Vec<Node>, Stop), TemplateError> {
        let mut nodes = Vec::new();
        loop {
            let it = self.next();
            match it.tok {
                Tok::Eof => return Ok((nodes, Stop::Eof)),
                Tok::Text(t) => nodes.push(Node::Text(t)),
                Tok::Open => {
                    let kw = self.next_ns();
                    match &kw.tok {
                        Tok::Ident(w) if w == "end" => {
                            self.expect_close("end")?;
                            return Ok((nodes, Stop::End));
                        }
                        Tok::Ident(w) if w == "else" => return Ok((nodes, Stop::Else)),
                        Tok::Ident(w) if w == "if" => {
                            nodes.push(Node::If(self.parse_branch(kw.pos, "if")?))
                        }
                        Tok::Ident(w) if w == "with" => {
                            nodes.push(Node::With(self.parse_branch(kw.pos, "with")?))
                        }
                        Tok::Ident(w) if w == "range" => {
                            self.range_depth += 1;
                            let b = self.parse_branch(kw.pos, "range");
                            self.range_depth -= 1;
                            nodes.push(Node::Range(b?));
                        }
                        Tok::Ident(w) if w == "break" || w == "continue" => {
                            if self.range_depth == 0 {
                                return Err(
                                    self.err(kw.pos, format!("{{{{{w}}}}} outside {{{{range}}}}"))
                                );
                            }
                            self.expect_close(w)?;
                            nodes.push(if w == "break" {
                                Node::Break(kw.pos)
                            } else {
                                Node::Continue(kw.pos)
                            });
                        }
                        Tok::Ident(w) if w == "template" => {
                            nodes.push(self.parse_template(kw.pos)?)
                        }
                        Tok::Ident(w) if w == "define" => {
                            self.parse_define(kw.pos, false)?;
                        }
                        Tok::Ident(w) if w == "block" => {
                            let name = self.parse_define(kw.pos, true)?;
                            nodes.push(name);
                        }
                        _ => {
                            self.i -= 1;
                            let pipe = self.parse_pipe(kw.pos, false, Tok::Close)?;
                            nodes.push(Node::Action(pipe));
                        }
                    }
                }
                t => return Err(self.err(it.pos, format!("unexpected {t:?}"))),
            }
        }
    }

    /// `if`/`with`/`range` after the keyword, through the matching `{{end}}`.
    fn parse_branch(&mut self, pos: usize, ctx: &str) -> Result<Branch, TemplateError> {
        let pipe = self.parse_pipe(pos, ctx == "range", Tok::Close)?;
        if pipe.cmds.is_empty() {
            return Err(self.err(pos, format!("missing value for {ctx}")));
        }
        let (list, stop) = self.nested(pos, Self::parse_list)?;
        let else_list = match stop {
            Stop::End => None,
            Stop::Eof => return Err(self.err(pos, format!("unexpected EOF in {ctx}"))),
            Stop::Else => {
                self.skip_space();
                let chained = matches!(
                    self.peek(),
                    Tok::Ident(w) if (w == "if" && ctx == "if") || (w == "with" && ctx == "with")
                );
                if chained {
                    // `{{else if x}}` is `{{else}}{{if x}}...{{end}}{{end}}` sharing one `end`.
                    let kw = self.next();
                    let inner = self.nested(kw.pos, |p| p.parse_branch(kw.pos, ctx))?;
                    Some(vec![if ctx == "if" {
                        Node::If(inner)
                    } else {
                        Node::With(inner)
                    }])
                } else {
                    self.expect_close("else")?;
                    let (l, stop) = self.nested(pos, Self::parse_list)?;
                    match stop {
                        Stop::End => Some(l),
                        _ => {
                            return Err(
                                self.err(pos, format!("expected end; found else/EOF in {ctx}"))
                            )
                        }
                    }
                }
            }
        };
        Ok(Branch {
            pos,
            pipe,
            list,
            else_list,
        })
    }

    fn parse_template(&mut self, pos: usize) -> Result<Node, TemplateError> {
        let it = self.next_ns();
        let Tok::Str(name) = it.tok else {
            return Err(self.err(it.pos, "expected string constant in template clause"));
        };
        self.skip_space();
        let pipe = if *self.peek() == Tok::Close {
            self.next();
            None
        } else {
            Some(self.parse_pipe(pos, false, Tok::Close)?)
        };
        Ok(Node::Template { pos, name, pipe })
    }

    /// `define "name"` (returns nothing useful) or `block "name" pipeline` (returns the
    /// `template` invocation that replaces it).
    fn parse_define(&mut self, pos: usize, block: bool) -> Result<Node, TemplateError> {
        let it = self.next_ns();
        let Tok::Str(name) = it.tok else {
            return Err(self.err(it.pos, "expected name in define/block clause"));
        };
        let pipe = if block {
            Some(self.parse_pipe(pos, false, Tok::Close)?)
        } else {
            self.expect_close("define")?;
            None
        };
        // Range depth does not cross into a define body.
        let saved = std::mem::replace(&mut self.range_depth, 0);
        let res = self.nested(pos, Self::parse_list);
        self.range_depth = saved;
        let (body, stop) = res?;
        if !matches!(stop, Stop::End) {
            return Err(self.err(pos, "unexpected EOF or else in define"));
        }
        self.defines.insert(name.clone(), body);
        Ok(Node::Template { pos, name, pipe })
    }

    /// A pipeline up to `end` (Close or RParen), with an optional leading declaration.
    fn parse_pipe(&mut self, pos: usize, allow_two: bool, end: Tok) -> Result<Pipe, TemplateError> {
        let mut pipe = Pipe {
            pos,
            decl: Vec::new(),
            is_assign: false,
            cmds: Vec::new(),
        };
        self.skip_space();
        // Look ahead for `$x :=`, `$x =`, `$i, $v :=`.
        if let Tok::Var(v) = self.peek().clone() {
            let save = self.i;
            self.next();
            self.skip_space();
            match self.peek().clone() {
                Tok::Declare | Tok::Assign => {
                    pipe.is_assign = *self.peek() == Tok::Assign;
                    self.next();
                    pipe.decl.push(v);
                }
                Tok::Comma if allow_two => {
                    self.next();
                    self.skip_space();
                    let it = self.next();
                    let Tok::Var(v2) = it.tok else {
                        return Err(self.err(it.pos, "expected variable after comma in range"));
                    };
                    let it = self.next_ns();
                    match it.tok {
                        Tok::Declare => {}
                        Tok::Assign => pipe.is_assign = true,
                        _ => return Err(self.err(it.pos, "expected := in range declaration")),
                    }
                    pipe.decl.push(v);
                    pipe.decl.push(v2);
                }
                _ => self.i = save,
            }
        }
        loop {
            self.skip_space();
            if *self.peek() == end {
                self.next();
                if pipe.cmds.is_empty() && !pipe.decl.is_empty() {
                    return Err(self.err(pos, "missing value for command"));
                }
                return Ok(pipe);
            }
            let cmd = self.parse_command(&end)?;
            pipe.cmds.push(cmd);
            self.skip_space();
            if *self.peek() == Tok::Pipe {
                let p = self.pos();
                self.next();
                self.skip_space();
                if *self.peek() == end {
                    return Err(self.err(p, "missing command after |"));
                }
            }
        }
    }

    fn parse_command(&mut self, end: &Tok) -> Result<Command, TemplateError> {
        let pos = self.pos();
        let mut args = Vec::new();
        loop {
            self.skip_space();
            let t = self.peek().clone();
            if t == *end || t == Tok::Pipe {
                break;
            }
            args.push(self.parse_operand()?);
            // Operands must be separated by spaces: `.A.B` chains, `.A .B` are two operands.
            match self.peek() {
                Tok::Space | Tok::Pipe => {}
                t if t == end => {}
                t => return Err(self.err(self.pos(), format!("unexpected {t:?} in operand"))),
            }
        }
        if args.is_empty() {
            return Err(self.err(pos, "empty command"));
        }
        Ok(Command { pos, args })
    }

    fn parse_operand(&mut self) -> Result<Arg, TemplateError> {
        let it = self.next();
        let term = match it.tok {
            Tok::Field(f) => {
                let mut chain = vec![f];
                chain.extend(self.fields());
                return Ok(Arg::Field(chain));
            }
            Tok::Var(v) => {
                let chain = self.fields();
                return Ok(Arg::Var(v, chain));
            }
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Bool(b) => Arg::Bool(b),
            Tok::Str(s) => Arg::Str(s),
            Tok::Char(c) => Arg::Int(c as i64),
            Tok::Number(n) => parse_number(&n)
                .ok_or_else(|| self.err(it.pos, format!("bad number syntax: {n:?}")))?,
            Tok::Ident(w) => {
                if matches!(
                    w.as_str(),
                    "if" | "else"
                        | "end"
                        | "range"
                        | "with"
                        | "define"
                        | "template"
                        | "block"
                        | "break"
                        | "continue"
                ) {
                    return Err(self.err(it.pos, format!("unexpected <{w}> in command")));
                }
                Arg::Ident(w)
            }
            Tok::LParen => {
                Arg::Pipe(self.nested(it.pos, |p| p.parse_pipe(it.pos, false, Tok::RParen))?)
            }
            t => return Err(self.err(it.pos, format!("unexpected {t:?} in operand"))),
        };
        let chain = self.fields();
        if chain.is_empty() {
            Ok(term)
        } else {
            if matches!(term, Arg::Dot) {
                return Err(self.err(it.pos, "unexpected . after term"));
            }
            Ok(Arg::Chain(Box::new(term), chain))
        }
    }

    fn fields(&mut self) -> Vec<String> {
        let mut chain = Vec::new();
        while let Tok::Field(f) = self.peek().clone() {
            self.next();
            chain.push(f);
        }
        chain
    }
}

/// Go number literals as template constants: integers (decimal, hex, octal, binary, with `_`)
/// become ints, anything with a fraction or exponent a float.
fn parse_number(s: &str) -> Option<Arg> {
    let clean = s.replace('_', "");
    let (neg, body) = match clean.strip_prefix('-') {
        Some(b) => (true, b.to_string()),
        None => (false, clean.trim_start_matches('+').to_string()),
    };
    let lower = body.to_ascii_lowercase();
    let int = if let Some(h) = lower.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = lower.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(b) = lower.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|c| c.is_ascii_digit())
    {
        i64::from_str_radix(&lower[1..], 8).ok()
    } else {
        lower.parse::<i64>().ok()
    };
    if let Some(i) = int {
        return Some(Arg::Int(if neg { -i } else { i }));
    }
    let f: f64 = lower.parse().ok()?;
    Some(Arg::Float(if neg { -f } else { f }))
}
