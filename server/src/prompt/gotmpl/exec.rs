//! Executes a parsed template against a `Value`: dot and `$` handling, variable scopes (popped at
//! the end of `if`/`with`/`range` and per range iteration, as Go does), `missingkey=zero` map
//! reads, range over slices/maps (sorted keys)/integers with `break`/`continue`, and nested
//! `template` calls (which see only `$` = their argument, never the caller's variables).

use super::funcs;
use super::limits::{Budget, BYTES_PER_STEP, MAX_EXEC_DEPTH, MAX_TEMPLATE_DEPTH};
use super::parser::{Arg, Branch, Command, Defines, Node, Pipe};
use super::value::Value;
use super::TemplateError;

pub struct Exec<'a> {
    src: &'a str,
    defines: &'a Defines,
    vars: Vec<(String, Value)>,
    /// Nested `template` calls in progress (at most `MAX_TEMPLATE_DEPTH`).
    tdepth: usize,
    /// All execution recursion in progress: bodies, calls, parentheses (at most
    /// `MAX_EXEC_DEPTH`), so the native stack stays bounded whatever the template.
    depth: usize,
    /// Steps left before the execution fails (see `limits`).
    steps: u64,
    /// The most bytes `out` (and any one produced string) may hold.
    out_max: usize,
    pub out: String,
}

enum Flow {
    Normal,
    Break,
    Continue,
}

type R<T> = Result<T, TemplateError>;

impl<'a> Exec<'a> {
    pub fn new(src: &'a str, defines: &'a Defines, data: Value, budget: Budget) -> Self {
        Exec {
            src,
            defines,
            vars: vec![("$".into(), data)],
            tdepth: 0,
            depth: 0,
            steps: budget.steps,
            out_max: budget.output,
            out: String::new(),
        }
    }

    fn err(&self, pos: usize, msg: impl Into<String>) -> TemplateError {
        TemplateError::at(self.src, pos, msg)
    }

    /// Spends `n` steps; fails once the budget is gone.
    fn charge(&mut self, pos: usize, n: u64) -> R<()> {
        match self.steps.checked_sub(n) {
            Some(left) => {
                self.steps = left;
                Ok(())
            }
            None => {
                self.steps = 0;
                Err(TemplateError::limit_at(
                    self.src,
                    pos,
                    "template execution exceeded its step limit",
                ))
            }
        }
    }

    /// Appends to the output, failing (before growing it) past the output cap.
    fn emit(&mut self, pos: usize, s: &str) -> R<()> {
        if self.out.len().saturating_add(s.len()) > self.out_max {
            return Err(self.too_big(pos));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn too_big(&self, pos: usize) -> TemplateError {
        TemplateError::limit_at(
            self.src,
            pos,
            format!("template output exceeds {} bytes", self.out_max),
        )
    }

    /// Runs `f` one recursion level deeper, failing past `MAX_EXEC_DEPTH`.
    fn deeper<T>(&mut self, pos: usize, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.depth >= MAX_EXEC_DEPTH {
            return Err(TemplateError::limit_at(
                self.src,
                pos,
                format!("exceeded maximum execution depth {MAX_EXEC_DEPTH}"),
            ));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    pub fn run(&mut self, nodes: &[Node], dot: &Value) -> R<()> {
        match self.walk(nodes, dot)? {
            Flow::Normal => Ok(()),
            // The parser rejects break/continue outside range.
            Flow::Break | Flow::Continue => Ok(()),
        }
    }

    fn walk(&mut self, nodes: &[Node], dot: &Value) -> R<Flow> {
        for n in nodes {
            self.charge(node_pos(n), 1)?;
            match n {
                Node::Text(t) => self.emit(0, t)?,
                Node::Action(p) => {
                    let v = self.eval_pipe(dot, p)?;
                    if p.decl.is_empty() {
                        match v {
                            // A nil interface printed by an action is "<no value>" in Go.
                            Value::Nil => self.emit(p.pos, "<no value>")?,
                            Value::Str(s) => self.emit(p.pos, &s)?,
                            v => {
                                let mut s = String::new();
                                v.write_v(&mut s);
                                self.charge(p.pos, (s.len() / BYTES_PER_STEP) as u64)?;
                                self.emit(p.pos, &s)?;
                            }
                        }
                    }
                }
                Node::If(b) => {
                    let f = self.deeper(b.pos, |ex| ex.if_with(b, dot, false))?;
                    if let f @ (Flow::Break | Flow::Continue) = f {
                        return Ok(f);
                    }
                }
                Node::With(b) => {
                    let f = self.deeper(b.pos, |ex| ex.if_with(b, dot, true))?;
                    if let f @ (Flow::Break | Flow::Continue) = f {
                        return Ok(f);
                    }
                }
                Node::Range(b) => self.deeper(b.pos, |ex| ex.range(b, dot))?,
                Node::Break(_) => return Ok(Flow::Break),
                Node::Continue(_) => return Ok(Flow::Continue),
                Node::Template { pos, name, pipe } => {
                    let Some(body) = self.defines.get(name) else {
                        return Err(self.err(*pos, format!("no such template {name:?}")));
                    };
                    let arg = match pipe {
                        Some(p) => self.eval_pipe(dot, p)?,
                        None => Value::Nil,
                    };
                    if self.tdepth >= MAX_TEMPLATE_DEPTH {
                        return Err(TemplateError::limit_at(
                            self.src,
                            *pos,
                            format!("exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})"),
                        ));
                    }
                    self.tdepth += 1;
                    let saved = std::mem::replace(&mut self.vars, vec![("$".into(), arg.clone())]);
                    let r = self.deeper(*pos, |ex| ex.walk(body, &arg));
                    self.vars = saved;
                    self.tdepth -= 1;
                    r?;
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn if_with(&mut self, b: &Branch, dot: &Value, with: bool) -> R<Flow> {
        let mark = self.vars.len();
        let r = (|| {
            let v = self.eval_pipe(dot, &b.pipe)?;
            if v.truthy() {
                let d = if with { v } else { dot.clone() };
                self.walk(&b.list, &d)
            } else if let Some(e) = &b.else_list {
                self.walk(e, dot)
            } else {
                Ok(Flow::Normal)
            }
        })();
        self.vars.truncate(mark);
        r
    }

    fn range(&mut self, b: &Branch, dot: &Value) -> R<()> {
        let mark = self.vars.len();
        // The declaration names the iteration variables; evaluate the pipeline without it.
        let bare = Pipe {
            decl: Vec::new(),
            is_assign: false,
            ..b.pipe.clone()
        };
        let v = self.eval_pipe(dot, &bare)?;
        // Iterate lazily: `range 1000000000000` must cost steps, not an upfront allocation.
        let n: usize = match &v {
            Value::List(l) => l.len(),
            Value::Map(m) => m.entries.len(),
            Value::Int(n) => usize::try_from(*n).unwrap_or(0),
            Value::Nil => 0,
            other => {
                return Err(self.err(
                    b.pos,
                    format!("range can't iterate over {}", other.go_string()),
                ));
            }
        };
        if n == 0 {
            if let Some(e) = &b.else_list {
                let r = self.walk(e, dot);
                self.vars.truncate(mark);
                r?;
            }
            return Ok(());
        }
        let mut map_iter = match &v {
            Value::Map(m) => Some(m.entries.iter()),
            _ => None,
        };
        for i in 0..n {
            if let Err(e) = self.charge(b.pos, 1) {
                self.vars.truncate(mark);
                return Err(e);
            }
            let (k, v) = match (&v, map_iter.as_mut()) {
                (Value::List(l), _) => (Value::Int(i as i64), l[i].clone()),
                (_, Some(it)) => match it.next() {
                    Some((k, v)) => (Value::str(k.as_str()), v.clone()),
                    None => break,
                },
                _ => (Value::Int(i as i64), Value::Int(i as i64)),
            };
            let iter_mark = self.vars.len();
            match b.pipe.decl.as_slice() {
                [] => {}
                [one] => self.set_var(b.pos, one, v.clone(), b.pipe.is_assign)?,
                [key, val, ..] => {
                    self.set_var(b.pos, key, k, b.pipe.is_assign)?;
                    self.set_var(b.pos, val, v.clone(), b.pipe.is_assign)?;
                }
            }
            let r = self.walk(&b.list, &v);
            self.vars.truncate(iter_mark.max(mark));
            match r {
                Err(e) => {
                    self.vars.truncate(mark);
                    return Err(e);
                }
                Ok(Flow::Break) => break,
                Ok(Flow::Continue | Flow::Normal) => {}
            }
        }
        self.vars.truncate(mark);
        Ok(())
    }

    fn set_var(&mut self, pos: usize, name: &str, v: Value, assign: bool) -> R<()> {
        if assign {
            match self.vars.iter_mut().rev().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = v,
                None => return Err(self.err(pos, format!("undefined variable: {name}"))),
            }
        } else {
            self.vars.push((name.to_string(), v));
        }
        Ok(())
    }

    fn eval_pipe(&mut self, dot: &Value, p: &Pipe) -> R<Value> {
        let mut val: Option<Value> = None;
        for c in &p.cmds {
            val = Some(self.eval_cmd(dot, c, val)?);
        }
        let v = val.unwrap_or_default();
        for name in &p.decl {
            self.set_var(p.pos, name, v.clone(), p.is_assign)?;
        }
        Ok(v)
    }

    fn eval_cmd(&mut self, dot: &Value, c: &Command, piped: Option<Value>) -> R<Value> {
        self.charge(c.pos, 1)?;
        let first = &c.args[0];
        if let Arg::Ident(name) = first {
            return self.call(dot, c.pos, name, &c.args[1..], piped);
        }
        if c.args.len() > 1 || piped.is_some() {
            return Err(self.err(
                c.pos,
                format!("can't give argument to non-function {}", arg_text(first)),
            ));
        }
        if matches!(first, Arg::Nil) {
            return Err(self.err(c.pos, "nil is not a command"));
        }
        self.eval_arg(dot, c.pos, first)
    }

    fn eval_arg(&mut self, dot: &Value, pos: usize, a: &Arg) -> R<Value> {
        Ok(match a {
            Arg::Dot => dot.clone(),
            Arg::Nil => Value::Nil,
            Arg::Bool(b) => Value::Bool(*b),
            Arg::Int(i) => Value::Int(*i),
            Arg::Float(f) => Value::Float(*f),
            Arg::Str(s) => Value::str(s.as_str()),
            Arg::Field(chain) => self.fields(pos, dot.clone(), chain)?,
            Arg::Var(name, chain) => {
                let Some((_, v)) = self.vars.iter().rev().find(|(n, _)| n == name) else {
                    return Err(self.err(pos, format!("undefined variable: {name}")));
                };
                let v = v.clone();
                self.fields(pos, v, chain)?
            }
            Arg::Chain(term, chain) => {
                let v = self.eval_arg(dot, pos, term)?;
                self.fields(pos, v, chain)?
            }
            Arg::Pipe(p) => {
                let mark = self.vars.len();
                let r = self.deeper(pos, |ex| ex.eval_pipe(dot, p));
                self.vars.truncate(mark);
                r?
            }
            // A function name used as an argument is a call with no arguments.
            Arg::Ident(name) => self.call(dot, pos, name, &[], None)?,
        })
    }

    fn fields(&self, pos: usize, mut v: Value, chain: &[String]) -> R<Value> {
        for name in chain {
            v = match &v {
                // missingkey=zero: an absent key reads as the element's zero value.
                Value::Map(m) => m.entries.get(name).cloned().unwrap_or_default(),
                Value::Struct(s) => match s.field(name) {
                    Some(f) => f.clone(),
                    None => {
                        return Err(
                            self.err(pos, format!("can't evaluate field {name} in type struct"))
                        );
                    }
                },
                Value::Nil => {
                    return Err(
                        self.err(pos, format!("nil pointer evaluating interface {{}}.{name}"))
                    );
                }
                other => {
                    return Err(self.err(
                        pos,
                        format!("can't evaluate field {name} in type {}", other.type_name()),
                    ));
                }
            };
        }
        Ok(v)
    }

    fn call(
        &mut self,
        dot: &Value,
        pos: usize,
        name: &str,
        args: &[Arg],
        piped: Option<Value>,
    ) -> R<Value> {
        // `and`/`or` evaluate lazily and return the deciding operand itself.
        if name == "and" || name == "or" {
            let n = args.len() + usize::from(piped.is_some());
            if n == 0 {
                return Err(self.err(
                    pos,
                    format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            let mut last = Value::Nil;
            for a in args {
                last = self.eval_arg(dot, pos, a)?;
                if last.truthy() != (name == "and") {
                    return Ok(last);
                }
            }
            if let Some(p) = piped {
                last = p;
            }
            return Ok(last);
        }
        let mut vals = Vec::with_capacity(args.len() + 1);
        for a in args {
            vals.push(self.eval_arg(dot, pos, a)?);
        }
        if let Some(p) = piped {
            vals.push(p);
        }
        let v = funcs::call(name, &vals, self.out_max).map_err(|e| match e {
            funcs::FnError::TooBig => self.too_big(pos),
            funcs::FnError::Msg(m) => self.err(pos, format!("error calling {name}: {m}")),
        })?;
        // What a function builds or copies costs in proportion to its size.
        let cost = match (&v, name) {
            (Value::Str(s), _) => s.len() / BYTES_PER_STEP,
            (Value::List(l), "slice") => l.len() / BYTES_PER_STEP,
            _ => 0,
        };
        self.charge(pos, cost as u64)?;
        Ok(v)
    }
}

/// A node's source offset for error messages (text has none: the start).
fn node_pos(n: &Node) -> usize {
    match n {
        Node::Text(_) => 0,
        Node::Action(p) => p.pos,
        Node::If(b) | Node::Range(b) | Node::With(b) => b.pos,
        Node::Template { pos, .. } | Node::Break(pos) | Node::Continue(pos) => *pos,
    }
}

fn arg_text(a: &Arg) -> String {
    match a {
        Arg::Field(c) => format!(".{}", c.join(".")),
        Arg::Var(n, c) if c.is_empty() => n.clone(),
        Arg::Var(n, c) => format!("{n}.{}", c.join(".")),
        Arg::Str(s) => format!("{s:?}"),
        Arg::Int(i) => i.to_string(),
        Arg::Float(f) => f.to_string(),
        Arg::Bool(b) => b.to_string(),
        Arg::Dot => ".".into(),
        _ => "operand".into(),
    }
}
