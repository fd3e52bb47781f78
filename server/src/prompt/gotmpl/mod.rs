//! A Go `text/template`-compatible engine (the subset Ollama's TEMPLATE layers use, with
//! `missingkey=zero` and Ollama's function table). Parse once with [`GoTemplate::parse`], then
//! [`GoTemplate::execute`] many times; the parsed tree is immutable and `Send + Sync`.
//!
//! We wrote our own instead of using the `gtmpl` crate (0.7): gtmpl has no `break`/`continue`,
//! no `missingkey` option, no struct-vs-map distinction (Go structs error on unknown fields,
//! maps yield zero values), no `Stringer` printing, and does not expose its tree, which Ollama's
//! rendering needs (identifier scan for `.Messages`, the legacy cut at `.Response`, capability
//! inference from the text around `.Thinking`/`.ToolCalls`).

mod exec;
mod funcs;
mod lexer;
pub mod limits;
mod parser;
mod value;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod limit_tests;
#[cfg(test)]
mod tests;

use std::fmt;

pub use funcs::{go_quote, ts_type};
pub use parser::{Arg, Branch, Command, Node, Pipe};
pub use value::{format_float_g, json_string, GoList, GoMap, GoStruct, Value};

use parser::Defines;

/// A parse or execution error with the 1-based line and column in the template source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub line: usize,
    pub col: usize,
    pub msg: String,
    /// The template hit one of the engine's resource bounds ([`limits`]): nesting, call depth,
    /// steps, output size. Callers answer these as a client error, never by aborting.
    pub limit: bool,
}

impl TemplateError {
    pub(crate) fn at(src: &str, pos: usize, msg: impl Into<String>) -> Self {
        let before = &src[..pos.min(src.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        TemplateError {
            line,
            col,
            msg: msg.into(),
            limit: false,
        }
    }

    /// A resource-bound error (see [`limits`]).
    pub(crate) fn limit_at(src: &str, pos: usize, msg: impl Into<String>) -> Self {
        TemplateError {
            limit: true,
            ..Self::at(src, pos, msg)
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template: :{}:{}: {}", self.line, self.col, self.msg)
    }
}

impl std::error::Error for TemplateError {}

/// A parsed Go template.
#[derive(Debug, Clone)]
pub struct GoTemplate {
    src: String,
    root: Vec<Node>,
    defines: Defines,
}

impl GoTemplate {
    /// Parses `src`, rejecting unknown functions (as Go's parser does with a FuncMap).
    pub fn parse(src: &str) -> Result<GoTemplate, TemplateError> {
        let items = lexer::lex(src)?;
        let mut p = parser::Parser::new(src, items);
        let root = p.parse_root()?;
        let t = GoTemplate {
            src: src.to_string(),
            root,
            defines: p.defines,
        };
        let mut bad = None;
        t.visit_args(&mut |a, pos| {
            if let Arg::Ident(name) = a {
                if bad.is_none() && !funcs::NAMES.contains(&name.as_str()) {
                    bad = Some(TemplateError::at(
                        src,
                        pos,
                        format!("function {name:?} not defined"),
                    ));
                }
            }
        });
        match bad {
            Some(e) => Err(e),
            None => Ok(t),
        }
    }

    pub fn source(&self) -> &str {
        &self.src
    }

    pub fn root(&self) -> &[Node] {
        &self.root
    }

    /// Appends `{{ .Response }}` to the root (Ollama does this when neither `.Messages` nor
    /// `.Response` appears).
    pub fn append_response(&mut self) {
        let pipe = Pipe {
            pos: self.src.len(),
            decl: Vec::new(),
            is_assign: false,
            cmds: vec![parser::Command {
                pos: self.src.len(),
                args: vec![Arg::Field(vec!["Response".into()])],
            }],
        };
        self.root.push(Node::Action(pipe));
    }

    pub fn execute(&self, data: &Value) -> Result<String, TemplateError> {
        self.execute_nodes(&self.root, data)
    }

    /// Executes `nodes` under [`limits::Budget::for_data`]: steps and output scale with the
    /// size of `data`, so a small request with a runaway template fails in milliseconds.
    pub fn execute_nodes(&self, nodes: &[Node], data: &Value) -> Result<String, TemplateError> {
        let budget = limits::Budget::for_data(data);
        let mut ex = exec::Exec::new(&self.src, &self.defines, data.clone(), budget);
        ex.run(nodes, data)?;
        Ok(ex.out)
    }

    /// Ollama's `Template.Vars`: every field-chain and variable identifier in the root and in
    /// defined templates, lower-cased, sorted, deduplicated (`$.Messages` yields `$` and
    /// `messages`).
    pub fn vars(&self) -> Vec<String> {
        let mut set = std::collections::BTreeSet::new();
        self.visit_args(&mut |a, _| match a {
            Arg::Field(chain) => set.extend(chain.iter().map(|s| s.to_lowercase())),
            Arg::Var(name, chain) => {
                set.insert(name.to_lowercase());
                set.extend(chain.iter().map(|s| s.to_lowercase()));
            }
            _ => {}
        });
        set.into_iter().collect()
    }

    /// Position of the first `{{ template "x" }}` without an argument, in the root or a define.
    /// (Ollama rejects such templates: its identifier scan errors on them.)
    pub fn bare_template_call(&self) -> Option<usize> {
        fn list(nodes: &[Node]) -> Option<usize> {
            nodes.iter().find_map(|n| match n {
                Node::Template {
                    pos, pipe: None, ..
                } => Some(*pos),
                Node::If(b) | Node::Range(b) | Node::With(b) => {
                    list(&b.list).or_else(|| b.else_list.as_deref().and_then(list))
                }
                _ => None,
            })
        }
        let mut names: Vec<_> = self.defines.keys().collect();
        names.sort();
        list(&self.root).or_else(|| names.into_iter().find_map(|n| list(&self.defines[n])))
    }

    /// Calls `f` on every operand (recursing into parenthesized pipelines) with its position.
    fn visit_args(&self, f: &mut dyn FnMut(&Arg, usize)) {
        fn pipe(p: &Pipe, f: &mut dyn FnMut(&Arg, usize)) {
            for c in &p.cmds {
                for a in &c.args {
                    arg(a, c.pos, f);
                }
            }
        }
        fn arg(a: &Arg, pos: usize, f: &mut dyn FnMut(&Arg, usize)) {
            f(a, pos);
            match a {
                Arg::Pipe(p) => pipe(p, f),
                Arg::Chain(t, _) => arg(t, pos, f),
                _ => {}
            }
        }
        fn list(nodes: &[Node], f: &mut dyn FnMut(&Arg, usize)) {
            for n in nodes {
                match n {
                    Node::Action(p) => pipe(p, f),
                    Node::If(b) | Node::Range(b) | Node::With(b) => {
                        pipe(&b.pipe, f);
                        list(&b.list, f);
                        if let Some(e) = &b.else_list {
                            list(e, f);
                        }
                    }
                    Node::Template { pipe: Some(p), .. } => pipe(p, f),
                    _ => {}
                }
            }
        }
        list(&self.root, f);
        let mut names: Vec<_> = self.defines.keys().collect();
        names.sort();
        for n in names {
            list(&self.defines[n], f);
        }
    }

    /// The root with everything after the first `.Response` field removed, as Ollama's legacy
    /// path does for the final turn: a pre-order walk that keeps nodes until it meets a field
    /// chain containing `Response` (kept) and then drops every later node, including the rest of
    /// enclosing lists. `if`/`with`/`range` conditions are not searched, only their bodies —
    /// so `{{ if .Response }}` alone does not start the cut.
    pub fn root_cut_at_response(&self) -> Vec<Node> {
        let mut cut = false;
        cut_list(&self.root, &mut cut)
    }
}

fn cut_list(nodes: &[Node], cut: &mut bool) -> Vec<Node> {
    nodes.iter().filter_map(|n| cut_node(n, cut)).collect()
}

fn cut_node(n: &Node, cut: &mut bool) -> Option<Node> {
    if *cut {
        return None;
    }
    match n {
        Node::Action(p) => cut_pipe(p, cut).map(Node::Action),
        Node::If(b) | Node::With(b) | Node::Range(b) => {
            let mut b = b.clone();
            b.list = cut_list(&b.list, cut);
            // Ollama would fail here (its walker returns nil for a cut else-list); an empty
            // else-list is the nearest non-crashing meaning.
            b.else_list = b.else_list.as_ref().map(|e| cut_list(e, cut));
            Some(match n {
                Node::If(_) => Node::If(b),
                Node::With(_) => Node::With(b),
                _ => Node::Range(b),
            })
        }
        other => Some(other.clone()),
    }
}

fn cut_pipe(p: &Pipe, cut: &mut bool) -> Option<Pipe> {
    let mut out = p.clone();
    out.cmds.clear();
    for c in &p.cmds {
        let mut args = Vec::new();
        for a in &c.args {
            if *cut {
                continue;
            }
            match a {
                Arg::Field(chain) if chain.iter().any(|s| s == "Response") => {
                    *cut = true;
                    args.push(a.clone());
                }
                Arg::Pipe(inner) => {
                    if let Some(q) = cut_pipe(inner, cut) {
                        args.push(Arg::Pipe(q));
                    }
                }
                a => args.push(a.clone()),
            }
        }
        if args.is_empty() {
            return None;
        }
        let mut c = c.clone();
        c.args = args;
        out.cmds.push(c);
    }
    if out.cmds.is_empty() {
        None
    } else {
        Some(out)
    }
}
