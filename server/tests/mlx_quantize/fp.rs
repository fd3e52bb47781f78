//! The fp block formats end to end (mlx_quantize.rs's module): SmolLM2's MLX checkpoint (int4
//! affine, 8-bit embedding) dequantized to bf16 is the float source; `herd create
//! --experimental -q nvfp4|mxfp8` through the real `herd serve`, then the stored blobs,
//! `/api/show`, greedy `/api/generate`, and a corrupted nvfp4 blob's load error.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use server::store::{ModelName, Store};

use super::herd_proc::{HerdServe, HERD};
use super::mlx_support::{blob_header, smollm2_mlx, write_safetensors};

fn bf16_bits(x: f32) -> [u8; 2] {
    // Round to nearest even (the values are finite).
    let b = x.to_bits();
    (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16).to_le_bytes()
}

fn f16_to_f32(h: u16) -> f32 {
    let (s, e, m) = ((h >> 15) as u32, ((h >> 10) & 31) as i32, (h & 1023) as f32);
    let v = if e == 0 {
        m / 1024.0 * 2f32.powi(-14)
    } else {
        (1.0 + m / 1024.0) * 2f32.powi(e - 15)
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// SmolLM2's MLX checkpoint with every affine weight dequantized (w = scale · q + bias; groups
/// of 32, bits from the packed width) to bf16, in `out`.
fn smollm2_bf16(out: &Path) {
    let src = smollm2_mlx();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let (h, data) = blob_header(&src.join("model.safetensors"));
    let get = |k: &str| -> Option<(Vec<u64>, &[u8], String)> {
        let t = h.get(k)?;
        let o = &t["data_offsets"];
        let (a, b) = (o[0].as_u64()? as usize, o[1].as_u64()? as usize);
        let shape = t["shape"]
            .as_array()?
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        Some((
            shape,
            &bytes[data + a..data + b],
            t["dtype"].as_str()?.to_owned(),
        ))
    };
    let f16s = |b: &[u8]| -> Vec<f32> {
        b.chunks(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect()
    };
    let mut tensors = Vec::new();
    for name in h.as_object().unwrap().keys() {
        if name == "__metadata__" || name.ends_with(".scales") || name.ends_with(".biases") {
            continue;
        }
        let (shape, raw, dtype) = get(name).unwrap();
        let base = name.trim_end_matches(".weight");
        let Some((sshape, s, sd)) = get(&format!("{base}.scales")) else {
            tensors.push((
                name.clone(),
                if dtype == "F32" { "F32" } else { "F16" },
                shape,
                raw.to_vec(),
            ));
            assert!(dtype == "F32" || dtype == "F16", "{name} {dtype}");
            continue;
        };
        assert_eq!(sd, "F16");
        let (_, b, _) = get(&format!("{base}.biases")).unwrap();
        let (scales, biases) = (f16s(s), f16s(b));
        let (rows, words, groups) = (shape[0] as usize, shape[1] as usize, sshape[1] as usize);
        let cols = groups * 32;
        let bits = words * 32 / cols;
        let per_word = 32 / bits;
        let mut out = Vec::with_capacity(rows * cols * 2);
        for r in 0..rows {
            for c in 0..cols {
                let i = r * cols + c;
                let w = u32::from_le_bytes(raw[i / per_word * 4..][..4].try_into().unwrap());
                let q = (w >> (bits * (c % per_word))) & ((1 << bits) - 1);
                let g = r * groups + c / 32;
                out.extend(bf16_bits(scales[g] * q as f32 + biases[g]));
            }
        }
        tensors.push((name.clone(), "BF16", vec![rows as u64, cols as u64], out));
    }
    std::fs::create_dir_all(out).unwrap();
    write_safetensors(&out.join("model.safetensors"), &tensors);
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("quantization");
    config
        .as_object_mut()
        .unwrap()
        .remove("quantization_config");
    config["torch_dtype"] = json!("bfloat16");
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), out.join(f)).unwrap();
    }
}

/// `herd create NAME --experimental [-q Q]` of `dir`.
fn create(herd: &HerdServe, name: &str, dir: &Path, q: Option<&str>) {
    let mf = dir.with_extension("Modelfile");
    std::fs::write(&mf, format!("FROM {}\n", dir.display())).unwrap();
    let mut cmd = std::process::Command::new(HERD);
    cmd.args(["create", name, "--experimental", "-f"]).arg(&mf);
    if let Some(q) = q {
        cmd.args(["-q", q]);
    }
    let out = cmd
        .env("OLLAMA_HOST", &herd.addr)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "herd create {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn post(herd: &HerdServe, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(herd.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

const PROMPT: &str =
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

async fn generate(herd: &HerdServe, model: &str) -> Value {
    let body = json!({"model": model, "prompt": PROMPT, "raw": true, "stream": false,
        "options": {"temperature": 0, "num_predict": 12}});
    let (status, v) = post(herd, "/api/generate", body).await;
    assert_eq!(status, 200, "{model}: {v}\n{}", herd.log_text());
    v
}

/// A stored tensor layer's blob header of model `name`.
fn layer_header(store: &Store, name: &str, tensor: &str) -> Value {
    let m = store
        .read(&ModelName::parse(name).unwrap())
        .unwrap()
        .unwrap()
        .manifest;
    let l = m
        .layers
        .iter()
        .find(|l| l.name.as_deref() == Some(tensor))
        .unwrap_or_else(|| panic!("{name}: no layer {tensor}"));
    blob_header(&store.blobs().path(&l.digest)).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvfp4_and_mxfp8_create_store_show_and_generate() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("smol-bf16");
    smollm2_bf16(&src);
    let models = work.path().join("models");
    let herd = HerdServe::start(
        &models,
        &[("HERD_MLX_RUNNER", super::runner_mlx().to_str().unwrap())],
    );
    create(&herd, "smol-bf16", &src, None);
    create(&herd, "smol-nvfp4", &src, Some("nvfp4"));
    create(&herd, "smol-mxfp8", &src, Some("MXFP8"));
    let store = Store::open(&models).unwrap();

    // The stored blobs: Ollama's names, metadata and dtypes.
    let q = "model.layers.3.self_attn.q_proj.weight";
    let h = layer_header(&store, "smol-nvfp4", q);
    assert_eq!(
        h["__metadata__"],
        json!({"quant_type": "nvfp4", "group_size": "16"})
    );
    assert_eq!(
        (&h[q]["dtype"], &h[q]["shape"]),
        (&json!("U32"), &json!([576, 72]))
    );
    let s = &h[format!("{q}.scale")];
    assert_eq!(
        (&s["dtype"], &s["shape"]),
        (&json!("U8"), &json!([576, 36]))
    );
    let g = &h[format!("{q}.global_scale")];
    assert_eq!((&g["dtype"], &g["shape"]), (&json!("F32"), &json!([])));
    assert!(h.get(format!("{q}.bias")).is_none(), "{h}");
    let e = "model.embed_tokens.weight";
    let h = layer_header(&store, "smol-nvfp4", e);
    assert_eq!(
        h["__metadata__"],
        json!({"quant_type": "mxfp8", "group_size": "32"})
    );
    assert_eq!(h[format!("{e}.scale")]["shape"], json!([49152, 18]));
    let h = layer_header(&store, "smol-mxfp8", q);
    assert_eq!(
        h["__metadata__"],
        json!({"quant_type": "mxfp8", "group_size": "32"})
    );
    assert_eq!(h[q]["shape"], json!([576, 144]));
    assert_eq!(h[format!("{q}.scale")]["dtype"], "U8");
    assert!(h.get(format!("{q}.global_scale")).is_none(), "{h}");

    // /api/show's level is the type asked for.
    for (name, level) in [("smol-nvfp4", "nvfp4"), ("smol-mxfp8", "mxfp8")] {
        let (status, v) = post(&herd, "/api/show", json!({"model": name})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["details"]["quantization_level"], level, "{name}");
        assert_eq!(v["details"]["format"], "safetensors");
    }

    // Greedy answers: the bf16 model's, recognisably, from both formats.
    let base = generate(&herd, "smol-bf16").await;
    let base_text = base["response"].as_str().unwrap().to_owned();
    assert!(base_text.contains("Paris"), "bf16: {base}");
    for name in ["smol-nvfp4", "smol-mxfp8"] {
        let v = generate(&herd, name).await;
        let text = v["response"].as_str().unwrap();
        eprintln!("{name}: {text:?} (bf16: {base_text:?})");
        assert!(text.contains("Paris"), "{name}: {v}");
        assert!(
            v["done_reason"] == "stop" || v["done_reason"] == "length",
            "{v}"
        );
        let first = |t: &str| t.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        assert_eq!(first(text), first(&base_text), "{name}");
    }

    // A blob that claims nvfp4 but whose scales have half the columns: a load error naming
    // the tensor, not a crash.
    let mut m = store
        .read(&ModelName::parse("smol-nvfp4").unwrap())
        .unwrap()
        .unwrap()
        .manifest;
    let l = m
        .layers
        .iter_mut()
        .find(|l| l.name.as_deref() == Some(q))
        .unwrap();
    let blob = std::fs::read(store.blobs().path(&l.digest)).unwrap();
    let (h, data) = blob_header(&store.blobs().path(&l.digest));
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        json!({"quant_type": "nvfp4", "group_size": "16"}),
    );
    let mut body = Vec::new();
    let tensors: BTreeMap<&String, &Value> = h
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    for (k, t) in tensors {
        let o = &t["data_offsets"];
        let (a, b) = (
            data + o[0].as_u64().unwrap() as usize,
            data + o[1].as_u64().unwrap() as usize,
        );
        let mut bytes = &blob[a..b];
        let mut shape = t["shape"].clone();
        if k.ends_with(".scale") {
            bytes = &bytes[..bytes.len() / 2];
            shape = json!([576, 18]);
        }
        header.insert(
            k.clone(),
            json!({"dtype": t["dtype"], "shape": shape,
                "data_offsets": [body.len(), body.len() + bytes.len()]}),
        );
        body.extend_from_slice(bytes);
    }
    let hb = serde_json::to_vec(&Value::Object(header)).unwrap();
    let (digest, size) = store
        .blobs()
        .write_with(|w| {
            w.write_all(&(hb.len() as u64).to_le_bytes())?;
            w.write_all(&hb)?;
            w.write_all(&body)?;
            Ok(())
        })
        .unwrap();
    l.digest = digest;
    l.size = size;
    store
        .write_manifest(&ModelName::parse("smol-bad").unwrap(), &m)
        .unwrap();
    let body = json!({"model": "smol-bad", "prompt": "hi", "stream": false});
    let (status, v) = post(&herd, "/api/generate", body).await;
    assert!(status == 400 || status == 500, "{status}: {v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("model.layers.3.self_attn.q_proj") && err.contains("scales"),
        "{status}: {v}"
    );
    // The server lives on and the good model still answers.
    let v = generate(&herd, "smol-nvfp4").await;
    assert!(!v["response"].as_str().unwrap().is_empty(), "{v}");
}
