//! Which of a model's two templates renders its chats, as Ollama chooses (`server/images.go`,
//! `shouldPreferChatTemplate`): a model with a Go TEMPLATE layer whose GGUF also carries a
//! `tokenizer.chat_template` renders with the GGUF (Jinja) template when that one offers more
//! capabilities (unless only the Go template can carry a tool call and its result back), or
//! the same ones including tools with a tool round trip the Go template lacks. The model's
//! capabilities then come from the Jinja template too. `OLLAMA_GO_TEMPLATE` ([`GoTemplate`])
//! overrides that choice either way. Pure, table-tested.

use super::{caps, Template};

/// Capabilities a Jinja template offers, in Ollama's order (`chatTemplateCapabilities`).
pub fn jinja_caps(src: &str) -> Vec<&'static str> {
    let mut c = Vec::new();
    if caps::jinja_uses_tools(src) {
        c.push("tools");
    }
    if caps::jinja_thinks(src) {
        c.push("thinking");
    }
    c
}

/// Capabilities a Go template offers (`goTemplateCapabilities`).
fn go_caps(t: &Template) -> Vec<&'static str> {
    let mut c = Vec::new();
    if t.uses_tools() {
        c.push("tools");
    }
    if t.uses_suffix() {
        c.push("insert");
    }
    if t.thinking_tags().is_some() {
        c.push("thinking");
    }
    c
}

/// Can a Jinja template render a tool call and then its result?
fn jinja_round_trip(src: &str) -> bool {
    if !caps::jinja_uses_tools(src) {
        return false;
    }
    let calls = src.contains("tool_calls") || src.contains("assistant_tool_call");
    calls
        && [
            "tool_response",
            "tool_results",
            "role'] == 'tool'",
            "role'] == \"tool\"",
            "role\"] == 'tool'",
            "role\"] == \"tool\"",
            "message.role == 'tool'",
            "message.role == \"tool\"",
            "ipython",
        ]
        .iter()
        .any(|s| src.contains(s))
}

/// Can a Go template render a tool call and then its result?
fn go_round_trip(t: &Template) -> bool {
    let Template::Go(g) = t else {
        return false;
    };
    let has = |v: &str| g.vars.iter().any(|x| x == v);
    let src = t.source();
    has("tools")
        && has("toolcalls")
        && (src.contains("eq .Role \"tool\"")
            || src.contains("tool_response")
            || src.contains("TOOL_RESULTS"))
}

/// `OLLAMA_GO_TEMPLATE`, read once at startup (Ollama's `envconfig.GoTemplate`, default true).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoTemplate {
    /// Unset: a TEMPLATE layer renders unless the GGUF template is preferred
    /// ([`prefer_chat_template`]).
    #[default]
    Auto,
    /// Set true: a TEMPLATE layer always renders (no preference check).
    On,
    /// Set false: the GGUF chat template renders whenever the GGUF has one.
    Off,
}

impl GoTemplate {
    /// The variable's value for the startup log (empty when unset).
    pub fn as_str(self) -> &'static str {
        match self {
            GoTemplate::Auto => "",
            GoTemplate::On => "true",
            GoTemplate::Off => "false",
        }
    }
}

/// Whether a model's TEMPLATE layer renders (Ollama's `shouldUseGoTemplate`), given whether its
/// GGUF carries a chat template and, lazily, whether that one is preferred. With the variable
/// false and no GGUF template, the TEMPLATE still renders: Ollama hands such a chat to
/// llama-server, whose built-in ChatML fallback herd does not imitate, and renders its
/// /api/generate prompts with the TEMPLATE anyway.
pub fn go_template_renders(
    mode: GoTemplate,
    has_chat_template: bool,
    prefer: impl FnOnce() -> bool,
) -> bool {
    match mode {
        GoTemplate::On => true,
        GoTemplate::Off => !has_chat_template,
        GoTemplate::Auto => !(has_chat_template && prefer()),
    }
}

/// Whether the GGUF chat template `jinja` renders instead of the Go template `go`.
pub fn prefer_chat_template(jinja: &str, go: &Template) -> bool {
    let (j, g) = (jinja_caps(jinja), go_caps(go));
    if j.len() > g.len() {
        return !go_round_trip(go) || jinja_round_trip(jinja);
    }
    let same = j.len() == g.len() && j.iter().all(|c| g.contains(c));
    if !same || !j.contains(&"tools") {
        return false;
    }
    jinja_round_trip(jinja) && !go_round_trip(go)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_overrides_the_preference_either_way() {
        use GoTemplate::{Auto, Off, On};
        // (mode, GGUF has a chat template, it is preferred, TEMPLATE renders)
        let cases = [
            (Auto, false, false, true),
            (Auto, true, false, true),
            (Auto, true, true, false),
            (On, true, true, true),
            (On, false, false, true),
            (Off, true, false, false),
            (Off, true, true, false),
            // Nothing else to render with: the TEMPLATE stays (see go_template_renders).
            (Off, false, false, true),
        ];
        for (mode, has, prefer, want) in cases {
            assert_eq!(
                go_template_renders(mode, has, || prefer),
                want,
                "{mode:?} {has} {prefer}"
            );
        }
    }

    const TOOLS_JINJA: &str = "{% if tools %}{{ tools }}{% endif %}{% for message in messages %}\
        {% if message.tool_calls %}call{% endif %}{% if message.role == 'tool' %}<tool_response>\
        {% endif %}{{ message['content'] }}{% endfor %}";

    fn go(src: &str) -> Template {
        Template::parse_go(src).unwrap()
    }

    #[test]
    fn the_jinja_template_renders_when_it_offers_more() {
        let plain = go("{{ range .Messages }}go: {{ .Content }}{{ end }}");
        let tools_go = go(
            "{{ if .Tools }}{{ .Tools }}{{ end }}{{ range .Messages }}{{ if .ToolCalls }}c{{ end }}\
             {{ if eq .Role \"tool\" }}r{{ end }}{{ .Content }}{{ end }}",
        );
        let one_way_go =
            go("{{ if .Tools }}{{ .Tools }}{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}");
        let cases = [
            // Ollama's own case: a tool-less TEMPLATE over a GGUF whose template has tools.
            (
                "{% if tools %}{{ tools }}{% endif %}{{ messages[0]['content'] }}",
                &plain,
                true,
            ),
            (TOOLS_JINJA, &plain, true),
            // No more capabilities and no tools: the Go template stays.
            ("{{ messages[0]['content'] }}", &plain, false),
            // Same capabilities; the Jinja template carries a tool round trip the Go one lacks.
            (TOOLS_JINJA, &one_way_go, true),
            // Both carry it: the Go template stays.
            (TOOLS_JINJA, &tools_go, false),
            // More capabilities, but only the Go template carries the round trip.
            (
                "{% if tools %}{{ tools }}{% endif %}<think></think>{{ messages[0]['content'] }}",
                &tools_go,
                false,
            ),
        ];
        for (jinja, go, want) in cases {
            assert_eq!(prefer_chat_template(jinja, go), want, "{jinja}");
        }
    }
}
