//! Executes a parsed template against a `Value`: dot and `$` handling, variable scopes (popped at
//! the end of `if`/`with`/`range` and per range iteration, as Go does), `missingkey=zero` map
//! reads, range over slices/maps (sorted keys)/integers with `break`/`continue`, and nested
//! `template` calls (which see only `$` = their argument, never the caller's variables).

use super::funcs;
use super::parser::{Arg, Branch, Command, Defines, Node, Pipe};
use super::value::Value;
use super::TemplateError;

/// Go's limit is 100000; ours is lower so a self-recursive `template` cannot overflow the stack.
const MAX_DEPTH: usize = 1000;

pub struct Exec<'a> {
    src: &'a str,
    defines: &'a Defines,
    vars: Vec<(String, Value)>,
    depth: usize,
    pub out: String,
}

enum Flow {
    Normal,
    Break,
    Continue,
}

type R<T> = Result<T, TemplateError>;

impl<'a> Exec<'a> {
    pub fn new(src: &'a str, defines: &'a Defines, data: Value) -> Self {
        Exec {
            src,
            defines,
            vars: vec![("$".into(), data)],
            depth: 0,
            out: String::new(),
        }
    }

    fn err(&self, pos: usize, msg: impl Into<String>) -> TemplateError {
        TemplateError::at(self.src, pos, msg)
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
            match n {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(p) => {
                    let v = self.eval_pipe(dot, p)?;
                    if p.decl.is_empty() {
                        match v {
                            // A nil interface printed by an action is "<no value>" in Go.
                            Value::Nil => self.out.push_str("<no value>"),
                            v => v.write_v(&mut self.out),
                        }
                    }
                }
                Node::If(b) => {
                    if let f @ (Flow::Break | Flow::Continue) = self.if_with(b, dot, false)? {
                        return Ok(f);
                    }
                }
                Node::With(b) => {
                    if let f @ (Flow::Break | Flow::Continue) = self.if_with(b, dot, true)? {
                        return Ok(f);
                    }
                }
                Node::Range(b) => self.range(b, dot)?,
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
                    if self.depth >= MAX_DEPTH {
                        return Err(self.err(*pos, "exceeded maximum template depth"));
                    }
                    self.depth += 1;
                    let saved = std::mem::replace(&mut self.vars, vec![("$".into(), arg.clone())]);
                    let r = self.walk(body, &arg);
                    self.vars = saved;
                    self.depth -= 1;
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
        let items: Vec<(Value, Value)> = match &v {
            Value::List(l) => l
                .iter()
                .enumerate()
                .map(|(i, v)| (Value::Int(i as i64), v.clone()))
                .collect(),
            Value::Map(m) => m
                .entries
                .iter()
                .map(|(k, v)| (Value::str(k.as_str()), v.clone()))
                .collect(),
            Value::Int(n) => (0..*n).map(|i| (Value::Int(i), Value::Int(i))).collect(),
            Value::Nil => Vec::new(),
            other => {
                return Err(self.err(
                    b.pos,
                    format!("range can't iterate over {}", other.go_string()),
                ));
            }
        };
        if items.is_empty() {
            if let Some(e) = &b.else_list {
                let r = self.walk(e, dot);
                self.vars.truncate(mark);
                r?;
            }
            return Ok(());
        }
        for (k, v) in items {
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
            match r? {
                Flow::Break => break,
                Flow::Continue | Flow::Normal => {}
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
                let r = self.eval_pipe(dot, p);
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
        funcs::call(name, &vals).map_err(|m| self.err(pos, format!("error calling {name}: {m}")))
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
