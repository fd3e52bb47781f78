//! Image token budgets end to end (issue 17) through the real `herd serve` and runner:
//! gemma3-270m with a generated tiny gemma4v projector (`vision_support`), mtmd's dynamic-
//! resolution type, whose token count follows the image's size. A budget fills (the image is
//! resized to the largest aspect grid within it), prompt_eval_count follows it exactly and
//! deterministically, and without a budget each image picks its own rung of the ladder, with
//! slivers bounded by the projector's position table.

mod quantize_support;
mod vision_support;

use base64::Engine as _;
use quantize_support::{native_runner, test_model, Serve};
use serde_json::{json, Value};
use server::images::budget::{grid, select, Geometry};
use vision_support::{png, tiny_gemma4v_mmproj, G4_CELL, G4_POSITIONS};

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

/// The geometry the server reads from the fixture (checked against it below).
const G4: Geometry = Geometry {
    cell: G4_CELL,
    max_tokens: 1120,
    max_cells: (G4_POSITIONS / 3) as u32,
};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn setup() -> Option<(Serve, tempfile::TempDir)> {
    let runner = native_runner()?;
    let gemma = test_model(GEMMA)?;
    let serve = Serve::start(&runner, &[("OLLAMA_DEBUG", "1")]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let mmproj = tiny_gemma4v_mmproj(5);
    let read = server::gguf::read_bytes(&mmproj, Default::default()).unwrap();
    assert_eq!(Geometry::of(&read), Some(G4), "the fixture's geometry");
    std::fs::write(p.join("mmproj.gguf"), mmproj).unwrap();
    std::fs::write(
        p.join("Modelfile"),
        format!("FROM {}\nFROM ./mmproj.gguf\n", gemma.display()),
    )
    .unwrap();
    let (ok, _, err) = serve.herd(&["create", "g4", "-f", "Modelfile"], p);
    assert!(ok, "{err}");
    Some((serve, dir))
}

async fn post(serve: &Serve, path: &str, body: Value) -> (u16, Value) {
    let (st, body) = serve.post(path, body).await;
    (
        st,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// The image token counts the runner logged (its debug line per evaluated image), in order.
fn logged_images(serve: &Serve) -> Vec<u64> {
    serve
        .log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| {
            let rest = &l[l.find(": image of ")? + 11..];
            rest.split(' ').next()?.parse().ok()
        })
        .collect()
}

/// One chat turn with `img` under `options`; returns prompt_eval_count and the tokens the
/// runner evaluated for the image.
async fn turn(serve: &Serve, img: &str, options: Value, keep_alive: i64) -> (u64, u64) {
    let before = logged_images(serve).len();
    let mut o = json!({"temperature": 0, "num_predict": 1});
    o.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    let (st, r) = post(
        serve,
        "/api/chat",
        json!({"model": "g4", "stream": false, "options": o, "keep_alive": keep_alive,
               "messages": [{"role": "user", "content": "Describe it.", "images": [img]}]}),
    )
    .await;
    assert_eq!(st, 200, "{options}: {r}");
    let logged = logged_images(serve);
    assert_eq!(logged.len(), before + 1, "one image evaluated: {logged:?}");
    (r["prompt_eval_count"].as_u64().unwrap(), logged[before])
}

#[tokio::test]
async fn a_budget_fills_and_prompt_eval_count_follows_it() {
    let Some((serve, _dir)) = setup() else { return };
    let img = b64(&png(200, 200, 7));

    // Five cold runs (the runner unloaded after each: nothing cached) give one count.
    let mut cold = Vec::new();
    for _ in 0..5 {
        cold.push(
            turn(
                &serve,
                &img,
                json!({"image_min_tokens": 70, "image_max_tokens": 70}),
                0,
            )
            .await,
        );
    }
    assert!(cold.iter().all(|c| *c == cold[0]), "{cold:?}");

    let mut counts = Vec::new();
    for b in [70u64, 140, 280, 560, 1120] {
        let (pe, n) = turn(
            &serve,
            &img,
            json!({"image_min_tokens": b, "image_max_tokens": b}),
            300,
        )
        .await;
        // A square image on the largest square grid within the budget.
        let side = (b as f64).sqrt().floor() as u64;
        assert_eq!(n, side * side, "budget {b}");
        counts.push((b, pe, n));
    }
    assert_eq!((counts[0].1, counts[0].2), cold[0], "warm = cold");
    // The text around the image is the same at every budget: prompt_eval_count moves by
    // exactly the image's tokens, and strictly grows with the budget.
    let text = counts[0].1 - counts[0].2;
    assert!(counts.iter().all(|c| c.1 - c.2 == text), "{counts:?}");
    assert!(counts.windows(2).all(|w| w[0].1 < w[1].1), "{counts:?}");

    // The same budget as an extra body field on /v1.
    let (st, v1) = post(
        &serve,
        "/v1/chat/completions",
        json!({"model": "g4", "max_tokens": 1, "temperature": 0, "image_max_tokens": 140,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Describe it."},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{img}")}}
        ]}]}),
    )
    .await;
    assert_eq!(st, 200, "{v1}");
    assert_eq!(logged_images(&serve).last(), Some(&121), "/v1 budget 140");

    // Out of bounds: 400s that name the option, and the server keeps serving.
    for (o, word) in [
        (json!({"image_max_tokens": 2000}), "image_max_tokens"),
        (
            json!({"image_min_tokens": 560, "image_max_tokens": 280}),
            "image_min_tokens",
        ),
        (json!({"image_max_tokens": 0}), "image_max_tokens"),
    ] {
        let (st, r) = post(
            &serve,
            "/api/chat",
            json!({"model": "g4", "stream": false, "options": o,
                   "messages": [{"role": "user", "content": "x", "images": [img]}]}),
        )
        .await;
        assert_eq!(st, 400, "{o}: {r}");
        assert!(r["error"].as_str().unwrap().contains(word), "{o}: {r}");
    }
    let (_, n) = turn(&serve, &img, json!({"image_max_tokens": 70}), 300).await;
    assert_eq!(n, 64);
}

#[tokio::test]
async fn each_image_picks_its_own_budget_without_one() {
    let Some((serve, _dir)) = setup() else { return };
    let mut seen = Vec::new();
    for (w, h) in [(128, 128), (2048, 1536), (1, 4000), (4000, 1)] {
        let img = b64(&png(w, h, 11));
        let (_, n) = turn(&serve, &img, json!({}), 300).await;
        let (gx, gy) = grid(w, h, select(w, h, &G4), &G4);
        assert_eq!(n, u64::from(gx * gy), "{w}x{h}");
        seen.push(n);
    }
    // A thumbnail costs fewer tokens than a photo (aspect ratios: the table tests).
    assert!(seen[0] < seen[1], "{seen:?}");
    // Slivers: one cell across, the position table's 42 cells along (not mtmd's thousands of
    // patches, which would index past the table), and the runner is still up.
    assert_eq!((seen[2], seen[3]), (42, 42), "{seen:?}");
}

/// Bench (scripts/bench vision): per budget, the image's tokens, its prompt time
/// (prompt_eval_duration of a turn whose only new tokens are the image and the short text
/// after it) and the runner's encode/decode split, for a 640×480 PNG on the tiny gemma4v
/// projector. One run; CPU.
#[tokio::test]
#[ignore]
async fn bench_image_budgets() {
    let Some((serve, _dir)) = setup() else { return };
    // Warm the runner.
    post(
        &serve,
        "/api/chat",
        json!({"model": "g4", "stream": false, "options": {"num_predict": 1},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    for (i, b) in [70u64, 140, 280, 560, 1120].into_iter().enumerate() {
        // A new image each time: nothing of it is cached.
        let img = b64(&png(640, 480, 200 + i as u64));
        let before = serve.log.lock().unwrap().len();
        let started = std::time::Instant::now();
        let (st, r) = post(
            &serve,
            "/api/chat",
            json!({"model": "g4", "stream": false,
                   "options": {"temperature": 0, "num_predict": 1, "image_max_tokens": b},
                   "messages": [{"role": "user", "content": "Describe it.", "images": [img]}]}),
        )
        .await;
        assert_eq!(st, 200, "{r}");
        let wall = started.elapsed().as_secs_f64() * 1e3;
        let split = serve.log.lock().unwrap()[before..]
            .iter()
            .find_map(|l| {
                let at = l.find("image of ")?;
                Some(l[at..].split(" stream=").next().unwrap_or("").to_owned())
            })
            .unwrap_or_default();
        println!(
            "\nvision: budget {b:>4}: prompt_eval {:>5} tokens in {:>7.1} ms (request {wall:.0} ms); runner {split}",
            r["prompt_eval_count"].as_u64().unwrap_or(0),
            r["prompt_eval_duration"].as_u64().unwrap_or(0) as f64 / 1e6,
        );
    }
}
