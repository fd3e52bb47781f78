//! Capability inference from a template, as Ollama does it: tools/insert from the identifiers a
//! Go template reads, thinking tags from the text around `.Thinking` inside `range .Messages`
//! (`thinking.InferTags`), the tool-call tag from the first text inside `if ...ToolCalls`
//! (`tools.parseTag`), and substring checks for Jinja templates.

use super::gotmpl::{Arg, GoTemplate, Node, Pipe};

/// Does any command of `pipe` (recursing into parenthesized pipelines) have a field chain whose
/// first identifier is `first`?
fn pipe_has_field_first(p: &Node, first: &str) -> bool {
    let pipe = match p {
        Node::Action(p) => p,
        Node::If(b) | Node::With(b) | Node::Range(b) => &b.pipe,
        Node::Template { pipe: Some(p), .. } => p,
        _ => return false,
    };
    field_first(pipe, first)
}

fn field_first(p: &Pipe, first: &str) -> bool {
    p.cmds.iter().flat_map(|c| c.args.iter()).any(|a| match a {
        Arg::Field(chain) => chain.first().is_some_and(|f| f == first),
        Arg::Pipe(p) => field_first(p, first),
        _ => false,
    })
}

/// Ollama's `InferTags`: for each `.Thinking` reference whose nearest enclosing `range` ranges
/// over `.Messages`, the trimmed first and last text nodes of the list holding it become the
/// opening and closing tags (later references overwrite earlier ones).
pub fn thinking_tags(t: &GoTemplate) -> Option<(String, String)> {
    let (mut open, mut close) = (String::new(), String::new());
    infer(t.root(), false, &mut open, &mut close);
    (!open.is_empty() && !close.is_empty()).then_some((open, close))
}

fn infer(list: &[Node], in_messages: bool, open: &mut String, close: &mut String) {
    let take = |open: &mut String, close: &mut String| {
        if let Some(Node::Text(t)) = list.first() {
            *open = t.trim().to_string();
        }
        if let Some(Node::Text(t)) = list.last() {
            *close = t.trim().to_string();
        }
    };
    for n in list {
        // A range's own pipeline is already "inside" that range.
        let here = match n {
            Node::Range(b) => field_first(&b.pipe, "Messages"),
            _ => in_messages,
        };
        if here && pipe_has_field_first(n, "Thinking") {
            take(open, close);
        }
        match n {
            Node::If(b) | Node::With(b) | Node::Range(b) => {
                infer(&b.list, here, open, close);
                if let Some(e) = &b.else_list {
                    infer(e, here, open, close);
                }
            }
            _ => {}
        }
    }
}

/// Ollama's tool-call tag: the text before the first `{` in the first non-blank text inside the
/// first `if` whose condition names `ToolCalls`; `{` when there is none.
pub fn tool_call_tag(t: &GoTemplate) -> String {
    let tag = find_tool_if(t.root())
        .and_then(first_text)
        .map(|s| {
            s.replace("\r\n", "\n")
                .split('{')
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default();
    if tag.is_empty() {
        "{".into()
    } else {
        tag
    }
}

fn find_tool_if(nodes: &[Node]) -> Option<&[Node]> {
    for n in nodes {
        match n {
            Node::If(b) => {
                let names_calls = b.pipe.cmds.iter().flat_map(|c| c.args.iter()).any(
                    |a| matches!(a, Arg::Field(chain) if chain.iter().any(|f| f == "ToolCalls")),
                );
                if names_calls {
                    return Some(&b.list);
                }
                if let Some(r) =
                    find_tool_if(&b.list).or_else(|| b.else_list.as_deref().and_then(find_tool_if))
                {
                    return Some(r);
                }
            }
            Node::Range(b) | Node::With(b) => {
                if let Some(r) =
                    find_tool_if(&b.list).or_else(|| b.else_list.as_deref().and_then(find_tool_if))
                {
                    return Some(r);
                }
            }
            _ => {}
        }
    }
    None
}

fn first_text(nodes: &[Node]) -> Option<&str> {
    for n in nodes {
        match n {
            Node::Text(t) if !t.trim().is_empty() => return Some(t),
            // Ollama stops at the first action or nested block, found or not.
            Node::Action(_) => return None,
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                return first_text(&b.list).or_else(|| b.else_list.as_deref().and_then(first_text));
            }
            _ => {}
        }
    }
    None
}

/// Jinja: Ollama's `chatTemplateHasToolSupport`.
pub fn jinja_uses_tools(src: &str) -> bool {
    src.contains("tools") || src.contains("tool_call")
}

/// Jinja: Ollama's `chatTemplateHasThinkingSupport`.
pub fn jinja_thinks(src: &str) -> bool {
    if src.contains("<think>") && src.contains("</think>") {
        return true;
    }
    (src.contains("content.split('</think>')") || src.contains("content.split(\"</think>\")"))
        && !src.contains("reasoning_content")
        && !src.contains("<SPECIAL_12>")
}
