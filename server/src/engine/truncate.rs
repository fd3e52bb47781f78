//! Chat truncation (Ollama's `chatPrompt`): when the rendered conversation does not fit the
//! context, drop the oldest non-system messages, keeping every system message that precedes the
//! kept window and always the last message, in O(log n) counts. Token counts come from the caller (the runner's
//! `/tokenize` over the rendered prompt, plus [`image_tokens`] for the window's images), so
//! this module is the policy only.

use std::future::Future;

use crate::error::Result;
use crate::images::Image;
use crate::prompt::Message;

/// Tokens Ollama counts for an image when trimming history (`chatPrompt`'s `imageNumTokens`)
/// whose size the server does not decide.
pub const IMAGE_TOKENS: usize = 768;

/// The image tokens of a window holding the last `n` of a conversation's `images` (truncation
/// drops the oldest turns, so a window's images are the newest): the exact grid of an image the
/// server sized for a dynamic-resolution projector, Ollama's 768 for any other.
pub fn image_tokens(images: &[Image], n: usize) -> usize {
    images[images.len().saturating_sub(n)..]
        .iter()
        .map(|i| i.tokens.map_or(IMAGE_TOKENS, |t| t as usize))
        .sum()
}

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
/// `limit`. `count` renders and tokenizes a candidate (it may answer any number above `limit`
/// for a window it knows is too long). With `truncate` off, or when everything fits, all
/// messages are kept.
///
/// Ollama grows the window one message at a time from the newest and stops at the first that
/// does not fit; counts grow with the window, so the same start is found here by doubling the
/// window, then bisecting: O(log n) counts of windows at most twice the kept one, never a
/// render of a 100k-message conversation in full.
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
    if !truncate || msgs.len() <= 1 {
        return Ok(msgs.to_vec());
    }
    // Window starts in growing order: the last message (always kept), each earlier non-system
    // message down to index 1, then 0 (everything). A system message inside the window is kept
    // anyway; it does not move the start.
    let last = msgs.len() - 1;
    let mut starts = vec![last];
    starts.extend((1..last).rev().filter(|&i| msgs[i].role != "system"));
    starts.push(0);
    // `good` fits (index 0 by definition); `bad` (if any) does not.
    let (mut good, mut bad) = (0usize, None::<usize>);
    let mut step = 1;
    while good + 1 < starts.len() {
        let j = (good + step).min(starts.len() - 1);
        if count(window(msgs, starts[j])).await? <= limit {
            good = j;
            step *= 2;
        } else {
            bad = Some(j);
            break;
        }
    }
    if let Some(mut hi) = bad {
        while hi - good > 1 {
            let mid = good + (hi - good) / 2;
            if count(window(msgs, starts[mid])).await? <= limit {
                good = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(window(msgs, starts[good]))
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
        let (kept, _) = run(&conv, 24, true).await;
        assert_eq!(kept, vec!["S", "aaaa", "bbbb", "cccc", "dddd", "q"]);
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
    async fn long_conversations_take_logarithmically_many_counts() {
        let spec: Vec<(&str, &str)> = (0..100_000)
            .map(|i| (if i % 2 == 0 { "user" } else { "assistant" }, "ab"))
            .collect();
        let conv = msgs(&spec);
        // 3 per message: the newest 33 fit in 100.
        let (kept, calls) = run(&conv, 100, true).await;
        assert_eq!(kept.len(), 33);
        assert!(calls <= 2 * 17 + 2, "{calls} counts");
        // The same start as growing one message at a time (Ollama's loop).
        for limit in [1, 3, 4, 50, 299_999, 300_000] {
            let (kept, _) = run(&conv, limit, true).await;
            let want = (limit / 3).clamp(1, conv.len());
            assert_eq!(kept.len(), want, "{limit}");
        }
    }

    #[tokio::test]
    async fn images_count_their_grid_or_ollamas_768() {
        let img = |tokens| Image {
            id: String::new(),
            width: 1,
            height: 1,
            rgb: vec![0; 3],
            tokens,
        };
        let imgs = [img(None), img(Some(64)), img(Some(1089))];
        assert_eq!(image_tokens(&imgs, 0), 0);
        assert_eq!(image_tokens(&imgs, 1), 1089, "the newest image first");
        assert_eq!(image_tokens(&imgs, 3), 768 + 64 + 1089);
        assert_eq!(image_tokens(&imgs, 9), 768 + 64 + 1089);
        // A window's images push it over the limit as its text would.
        let conv = vec![
            Message::new("user", "a"),
            Message::new("assistant", "b"),
            Message::new("user", "c"),
        ];
        let mut with_image = conv.clone();
        with_image[0].images = 1;
        let n_images = |w: &[Message]| w.iter().map(|m| m.images).sum::<usize>();
        let kept = fit(&with_image, 100, true, |w| {
            let n = cost(&w) + image_tokens(&imgs[..1], n_images(&w));
            async move { Ok(n) }
        })
        .await
        .unwrap();
        assert_eq!(
            kept.len(),
            2,
            "the turn with the 768-token image is dropped"
        );
        let kept = fit(&conv, 100, true, |w| {
            let n = cost(&w);
            async move { Ok(n) }
        })
        .await
        .unwrap();
        assert_eq!(kept.len(), 3);
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
