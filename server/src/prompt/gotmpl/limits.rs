//! Resource bounds for the Go template engine. A template comes from an unauthenticated request
//! (`template` on /api/generate) or a stored TEMPLATE layer, so parsing and executing it must
//! never abort the process (stack overflow, allocation failure) nor run unbounded. Every bound
//! fails with a [`TemplateError`](super::TemplateError) whose `limit` flag is set.
//!
//! Invariants:
//! - Parse nesting (`if`/`range`/`with`/`define`/`block` bodies and parentheses) is at most
//!   [`MAX_PARSE_DEPTH`], so every recursive walk over the tree (exec, vars, drop) is shallow.
//! - Execution recursion (bodies entered, `template` calls, parenthesized pipelines) is at most
//!   [`MAX_EXEC_DEPTH`], of which `template` calls at most [`MAX_TEMPLATE_DEPTH`]; this keeps
//!   the stack well inside a 2 MiB thread (tokio's and the test harness's default).
//! - Work is counted in steps (one per node, command, range iteration, plus one per
//!   [`BYTES_PER_STEP`] bytes a function produces or copies); the budget and the output cap grow
//!   linearly with the data the template reads, so legitimate long chats fit while a runaway
//!   template over a small request stops within milliseconds.
//! - `printf` widths and precisions follow Go's `fmt` bounds (at most 1e6 through `*`, a literal
//!   number stops parsing past 1e6), and every produced string is checked against the output cap
//!   before it is built.

use super::value::Value;

/// Deepest nesting of control bodies and parentheses the parser accepts.
pub const MAX_PARSE_DEPTH: usize = 100;
/// Deepest chain of nested `{{template}}` calls (Go allows 100000 on a growable stack).
pub const MAX_TEMPLATE_DEPTH: usize = 100;
/// Deepest execution recursion: bodies, template calls and parenthesized pipelines together.
pub const MAX_EXEC_DEPTH: usize = 200;
/// Go's `fmt` bound on a width or precision taken from an argument.
pub const MAX_FMT_NUM: i64 = 1_000_000;
/// Steps any execution may take, whatever its data.
pub const BASE_STEPS: u64 = 250_000;
/// Extra steps per value node of the data (a message is about ten).
pub const STEPS_PER_VALUE: u64 = 100;
/// Output any execution may produce, whatever its data.
pub const BASE_OUTPUT: usize = 16 << 20;
/// Extra output allowed per byte of the data.
pub const OUTPUT_PER_INPUT_BYTE: usize = 8;
/// Bytes of produced text charged as one step.
pub const BYTES_PER_STEP: usize = 64;

/// The bounds of one execution.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub steps: u64,
    pub output: usize,
}

impl Budget {
    /// The budget for executing with `data`: the base plus an allowance per value and byte.
    pub fn for_data(data: &Value) -> Budget {
        let (nodes, bytes) = size(data);
        Budget {
            steps: BASE_STEPS.saturating_add(nodes.saturating_mul(STEPS_PER_VALUE)),
            output: BASE_OUTPUT.saturating_add(bytes.saturating_mul(OUTPUT_PER_INPUT_BYTE)),
        }
    }
}

/// (value nodes, string bytes) of `v`, iteratively (data may be deep).
fn size(v: &Value) -> (u64, usize) {
    let (mut nodes, mut bytes) = (0u64, 0usize);
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        nodes += 1;
        bytes += 8;
        match v {
            Value::Str(s) => bytes += s.len(),
            Value::List(l) => stack.extend(l.iter()),
            Value::Map(m) => {
                for (k, v) in &m.entries {
                    bytes += k.len();
                    stack.push(v);
                }
            }
            Value::Struct(s) => {
                bytes += s.display.as_ref().map_or(0, String::len);
                stack.extend(s.fields.iter().map(|(_, v)| v));
            }
            Value::Nil | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {}
        }
    }
    (nodes, bytes)
}
