//! Chat truncation (Ollama's `chatPrompt`): when the rendered conversation does not fit the
//! context, drop the oldest non-system messages, keeping every system message that precedes the
//! kept window and always the last message. Token counts come from the caller (the runner's
//! `/tokenize` over the rendered prompt), so this module is the policy only.

use std::future::Future;

use crate::error::Result;
use crate::prompt::Message;

/// The messages for window start `i`: system messages before `i`, then `msgs[i..]`.
fn window(msgs: &[Message], i: usize) -> Vec<Message> {
    msgs[..i]
        .iter()
        .filter(|m| m.role == "system")
        .chain(&msgs[i..])
        .cloned()
        .collect()
}

/// The longest suffix of `msgs` (plus earlier system messages) whose token count is at most
/// `limit`. `count` renders and tokenizes a candidate. With `truncate` off, or when everything
/// fits, all messages are kept (one count at most).
pub async fn fit<F, Fut>(
    msgs: &[Message],
    limit: usize,
    truncate: bool,
    mut count: F,
) -> Result<Vec<Message>>
where
    F: FnMut(Vec<Message>) -> Fut,
    Fut: Future<Output = Result<usize>>,
{
    if !truncate || msgs.len() <= 1 || count(msgs.to_vec()).await? <= limit {
        return Ok(msgs.to_vec());
    }
    // Grow the window backwards from the last message while it still fits.
    let last = msgs.len() - 1;
    let mut start = last;
    for i in (1..last).rev() {
        if msgs[i].role == "system" {
            // A system message inside the window is kept anyway; it does not move the start.
            continue;
        }
        if count(window(msgs, i)).await? <= limit {
            start = i;
        } else {
            break;
        }
    }
    Ok(window(msgs, start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn msgs(spec: &[(&str, &str)]) -> Vec<Message> {
        spec.iter().map(|(r, c)| Message::new(r, c)).collect()
    }

    /// One token per character of content, plus one per message.
    fn cost(ms: &[Message]) -> usize {
        ms.iter().map(|m| m.content.len() + 1).sum()
    }

    async fn run(m: &[Message], limit: usize, truncate: bool) -> (Vec<String>, usize) {
        let calls = Cell::new(0);
        let kept = fit(m, limit, truncate, |w| {
            calls.set(calls.get() + 1);
            let n = cost(&w);
            async move { Ok(n) }
        })
        .await
        .unwrap();
        (kept.into_iter().map(|m| m.content).collect(), calls.get())
    }

    #[tokio::test]
    async fn truncation_table() {
        let conv = msgs(&[
            ("system", "S"),
            ("user", "aaaa"),
            ("assistant", "bbbb"),
            ("user", "cccc"),
            ("assistant", "dddd"),
            ("user", "q"),
        ]);
        // Everything: 2 + 5*4 + 2 = 24.
        assert_eq!(
            run(&conv, 24, true).await,
            (
                vec!["S", "aaaa", "bbbb", "cccc", "dddd", "q"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                1
            )
        );
        // Keeps the system message and the newest turns that fit.
        let (kept, _) = run(&conv, 14, true).await;
        assert_eq!(kept, vec!["S", "cccc", "dddd", "q"]);
        let (kept, _) = run(&conv, 9, true).await;
        assert_eq!(kept, vec!["S", "dddd", "q"]);
        // The last message stays even when nothing fits.
        let (kept, _) = run(&conv, 1, true).await;
        assert_eq!(kept, vec!["S", "q"]);
        // truncate:false keeps all, whatever the size.
        let (kept, calls) = run(&conv, 1, false).await;
        assert_eq!((kept.len(), calls), (6, 0));
    }

    #[tokio::test]
    async fn later_system_messages_stay_in_place() {
        let conv = msgs(&[
            ("user", "aaaaaaaa"),
            ("system", "S2"),
            ("user", "b"),
            ("user", "c"),
        ]);
        let (kept, _) = run(&conv, 9, true).await;
        assert_eq!(kept, vec!["S2", "b", "c"]);
    }
}
