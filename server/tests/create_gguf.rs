//! `create_model` on tiny GGUFs: the layers, blobs, config and progress it produces, `from`
//! inheritance, and the manifest it writes (as Ollama's server/create.go would).

mod create_util;

use serde_json::json;
use server::create::{CreateRequest, Message};
use server::gguf::{GgmlType, GgufBuilder};
use server::store::manifest::*;
use server::store::Digest;

use create_util::{files, store, tiny_gguf};

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
        ..Message::default()
    }
}

fn full_request(model: &Digest) -> CreateRequest {
    CreateRequest {
        model: "base".into(),
        files: files(&[("model.gguf", model)]),
        template: "{{ .System }} {{ .Prompt }}".into(),
        system: "You are terse.".into(),
        license: Some(json!(["MIT", "Apache-2.0"])),
        parameters: Some(
            json!({"temperature": 0.7, "stop": ["<|im_end|>", "</s>"], "num_ctx": 2048.0})
                .as_object()
                .unwrap()
                .clone(),
        ),
        messages: vec![msg("user", "hi"), msg("assistant", "hello <b>")],
        ..CreateRequest::default()
    }
}

#[test]
fn create_from_gguf_builds_layers_config_and_progress() {
    let t = store();
    let gguf = tiny_gguf();
    let model = t.upload(&gguf);
    let statuses = t.create(&full_request(&model)).unwrap();

    let entry = t.read("base").expect("manifest written");
    let m = &entry.manifest;
    let kinds: Vec<&str> = m.layers.iter().map(|l| l.media_type.as_str()).collect();
    assert_eq!(
        kinds,
        [
            MEDIA_TYPE_MODEL,
            MEDIA_TYPE_TEMPLATE,
            MEDIA_TYPE_SYSTEM,
            MEDIA_TYPE_LICENSE,
            MEDIA_TYPE_LICENSE,
            MEDIA_TYPE_PARAMS,
            MEDIA_TYPE_MESSAGES
        ]
    );
    // The model layer is the uploaded blob itself: same digest, same size, no copy.
    assert_eq!(m.layers[0].digest, model);
    assert_eq!(m.layers[0].size, gguf.len() as u64);
    assert_eq!(m.layers[0].from.as_deref(), Some("model.gguf"));
    let text = |i: usize| t.blob_text(&m.layers[i].digest);
    assert_eq!(text(1), "{{ .System }} {{ .Prompt }}");
    assert_eq!(text(2), "You are terse.");
    assert_eq!(text(3), "MIT");
    assert_eq!(text(4), "Apache-2.0");
    // Go map encoding: sorted keys, integral float written as an integer, newline.
    assert_eq!(
        text(5),
        "{\"num_ctx\":2048,\"stop\":[\"\\u003c|im_end|\\u003e\",\"\\u003c/s\\u003e\"],\"temperature\":0.7}\n"
    );
    assert_eq!(
        text(6),
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello \\u003cb\\u003e\"}]\n"
    );
    assert_eq!(
        t.blob_text(&m.config.digest),
        "{\"model_format\":\"gguf\",\"model_family\":\"llama\",\"model_families\":[\"llama\"],\"model_type\":\"24\",\"file_type\":\"F32\",\"architecture\":\"amd64\",\"os\":\"linux\"}\n"
    );
    for l in m.layers.iter().chain([&m.config]) {
        assert_eq!(
            std::fs::metadata(t.store.blobs().path(&l.digest))
                .unwrap()
                .len(),
            l.size
        );
    }
    // One GGUF + six text layers + config, and nothing else.
    assert_eq!(t.blob_count(), 8);

    let mut want = vec![
        "parsing GGUF".to_string(),
        format!("using existing layer {model}"),
    ];
    want.extend(
        m.layers[1..]
            .iter()
            .map(|l| format!("creating new layer {}", l.digest)),
    );
    want.extend(["writing manifest".into(), "success".into()]);
    assert_eq!(statuses, want);

    // Same request again: every layer exists now, and the manifest bytes are identical.
    let again = t.create(&full_request(&model)).unwrap();
    assert!(again.iter().all(|s| !s.starts_with("creating new layer")));
    assert_eq!(t.read("base").unwrap().bytes, entry.bytes);
}

#[test]
fn from_inherits_layers_merges_params_and_replaces_text() {
    let t = store();
    let model = t.upload(&tiny_gguf());
    let mut base = full_request(&model);
    // (RENDERER is refused at create: herd has no built-in renderers.)
    base.parser = "qwen3".into();
    base.requires = "0.14.0".into();
    t.create(&base).unwrap();
    let base_m = t.read("base").unwrap().manifest;

    let derived = CreateRequest {
        model: "derived".into(),
        from: "base".into(),
        system: "You are verbose.".into(),
        parameters: Some(
            json!({"temperature": 0.1, "top_k": 5})
                .as_object()
                .unwrap()
                .clone(),
        ),
        messages: vec![msg("user", "only this")],
        ..CreateRequest::default()
    };
    let statuses = t.create(&derived).unwrap();
    assert!(!statuses.contains(&"parsing GGUF".to_string()));
    let m = t.read("derived").unwrap().manifest;
    let by = |mt: &'static str| m.layers.iter().filter(move |l| l.media_type == mt);

    let model_layer = by(MEDIA_TYPE_MODEL).next().unwrap();
    assert_eq!(model_layer.digest, model);
    assert_eq!(model_layer.from.as_deref(), Some("base:latest"));
    // TEMPLATE and LICENSE inherited unchanged.
    let base_template = base_m
        .layers
        .iter()
        .find(|l| l.media_type == MEDIA_TYPE_TEMPLATE)
        .unwrap();
    assert_eq!(
        by(MEDIA_TYPE_TEMPLATE).next().unwrap().digest,
        base_template.digest
    );
    assert_eq!(by(MEDIA_TYPE_LICENSE).count(), 2);
    // SYSTEM and MESSAGE replaced (one layer each), params merged key by key.
    let systems: Vec<_> = by(MEDIA_TYPE_SYSTEM).collect();
    assert_eq!(systems.len(), 1);
    assert_eq!(t.blob_text(&systems[0].digest), "You are verbose.");
    let messages: Vec<_> = by(MEDIA_TYPE_MESSAGES).collect();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        t.blob_text(&messages[0].digest),
        "[{\"role\":\"user\",\"content\":\"only this\"}]\n"
    );
    let params: Vec<_> = by(MEDIA_TYPE_PARAMS).collect();
    assert_eq!(params.len(), 1);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&t.blob_text(&params[0].digest)).unwrap(),
        json!({"num_ctx": 2048, "stop": ["<|im_end|>", "</s>"], "temperature": 0.1, "top_k": 5})
    );
    // Parser and requires come from the base config; family from the GGUF.
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
    assert_eq!(config["parser"], "qwen3");
    assert_eq!(config["requires"], "0.14.0");
    assert_eq!(config["model_families"], json!(["llama"]));
    // The base model is untouched.
    assert_eq!(t.read("base").unwrap().manifest, base_m);
}

#[test]
fn create_to_case_variant_overwrites() {
    let t = store();
    let model = t.upload(&tiny_gguf());
    let mut req = CreateRequest {
        model: "Mixed/Case:Tag".into(),
        files: files(&[("m.gguf", &model)]),
        ..CreateRequest::default()
    };
    t.create(&req).unwrap();
    req.model = "mixed/case:tag".into();
    req.system = "second".into();
    t.create(&req).unwrap();
    let all = t.store.list().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].name.to_string(), "registry.ollama.ai/Mixed/Case:Tag");
    assert!(all[0]
        .manifest
        .layers
        .iter()
        .any(|l| l.media_type == MEDIA_TYPE_SYSTEM));
}

#[test]
fn general_type_selects_layer_media_type() {
    let t = store();
    let model = t.upload(&tiny_gguf());
    let adapter = t.upload(
        &GgufBuilder::new()
            .kv("general.architecture", "llama")
            .kv("general.type", "adapter")
            .kv("adapter.type", "lora")
            .zeros_f32("blk.0.attn_q.weight.lora_a", &[8, 2])
            .build()
            .unwrap(),
    );
    let projector = t.upload(
        &GgufBuilder::new()
            .kv("general.architecture", "clip")
            .kv("general.type", "mmproj")
            .kv("clip.has_vision_encoder", true)
            .kv("clip.projector_type", "gemma3")
            .zeros_f32("v.patch_embd.weight", &[8, 2])
            .build()
            .unwrap(),
    );
    let req = CreateRequest {
        model: "vision".into(),
        files: files(&[("a.gguf", &model), ("mmproj.gguf", &projector)]),
        adapters: files(&[("lora.gguf", &adapter)]),
        ..CreateRequest::default()
    };
    let statuses = t.create(&req).unwrap();
    assert_eq!(statuses.iter().filter(|s| *s == "parsing GGUF").count(), 3);
    let m = t.read("vision").unwrap().manifest;
    let got: Vec<(&str, &Digest)> = m
        .layers
        .iter()
        .map(|l| (l.media_type.as_str(), &l.digest))
        .collect();
    assert_eq!(
        got,
        [
            (MEDIA_TYPE_MODEL, &model),
            (MEDIA_TYPE_PROJECTOR, &projector),
            (MEDIA_TYPE_ADAPTER, &adapter)
        ]
    );
    // Only the model layer contributes a family.
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
    assert_eq!(config["model_families"], json!(["llama"]));
}

#[test]
fn quantize_requests() {
    let t = store();
    let q4_1 = t.upload(
        &GgufBuilder::new()
            .kv("general.architecture", "llama")
            .kv("general.file_type", 3u32)
            .tensor("token_embd.weight", GgmlType::Q4_1, &[32], vec![0; 20])
            .build()
            .unwrap(),
    );
    let f32 = t.upload(&tiny_gguf());
    let run = |d: &Digest, q: &str| {
        t.create(&CreateRequest {
            model: "q".into(),
            files: files(&[("m.gguf", d)]),
            quantize: q.into(),
            ..CreateRequest::default()
        })
    };
    let err = run(&q4_1, "q8_0").unwrap_err();
    assert_eq!(err.status(), 400);
    assert_eq!(
        err.to_string(),
        "quantization is only supported for F16, BF16 and F32 models"
    );
    let err = run(&f32, "q5_1").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported quantization type Q5_1 - supported types are F32, F16, Q4_K_S, Q4_K_M, Q8_0"
    );
    // Accepted: the create runs the quantizer (create_quantize.rs runs the real one). The default
    // one, next to this test executable, does not exist: the create fails and writes nothing.
    let err = run(&f32, "Q4_K").unwrap_err();
    assert!(
        err.to_string().contains("cannot start the quantizer"),
        "{err}"
    );
    assert!(t.read("q").is_none());
    // Asking for the type the file already has is a no-op, as in Ollama.
    run(&f32, "f32").unwrap();
    assert!(t.read("q").is_some());
}

#[test]
fn recreating_removes_blobs_only_the_old_manifest_used() {
    let t = store();
    let model = t.upload(&tiny_gguf());
    let mk = |name: &str, system: &str| CreateRequest {
        model: name.into(),
        files: files(&[("m.gguf", &model)]),
        system: system.into(),
        ..CreateRequest::default()
    };
    t.create(&mk("a", "first")).unwrap();
    t.create(&mk("b", "shared")).unwrap();
    let sys = |name: &str| {
        let m = t.read(name).unwrap().manifest;
        m.layers
            .iter()
            .find(|l| l.media_type == MEDIA_TYPE_SYSTEM)
            .unwrap()
            .digest
            .clone()
    };
    let first = sys("a");
    t.create(&mk("a", "second")).unwrap();
    assert!(!t.store.blobs().exists(&first), "old SYSTEM blob removed");
    assert!(t.store.blobs().exists(&model), "GGUF still used");
    let shared = sys("b");
    t.create(&mk("a", "shared")).unwrap();
    t.create(&mk("a", "third")).unwrap();
    assert!(t.store.blobs().exists(&shared), "still used by b");
}

#[test]
fn draft_files_become_the_draft_layer_and_config_draft() {
    let t = store();
    let model = t.upload(&tiny_gguf());
    let draft_bytes = GgufBuilder::tiny_llama()
        .kv("general.description", "the draft")
        .build()
        .unwrap();
    let draft = t.upload(&draft_bytes);
    let req = CreateRequest {
        model: "spec".into(),
        files: files(&[("model.gguf", &model)]),
        draft_files: files(&[("draft.gguf", &draft)]),
        ..CreateRequest::default()
    };
    let statuses = t.create(&req).unwrap();
    // Both GGUFs are parsed; the draft is its uploaded blob, under Ollama's media type.
    assert_eq!(statuses.iter().filter(|s| *s == "parsing GGUF").count(), 2);
    let m = t.read("spec").unwrap().manifest;
    let kinds: Vec<&str> = m.layers.iter().map(|l| l.media_type.as_str()).collect();
    assert_eq!(kinds, [MEDIA_TYPE_MODEL, MEDIA_TYPE_DRAFT]);
    assert_eq!(m.layers[1].digest, draft);
    assert_eq!(m.layers[1].from.as_deref(), Some("draft.gguf"));
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap();
    assert_eq!(
        config["draft"],
        json!({"model_format": "gguf", "architecture": "llama"})
    );
    // FROM it inherits the draft; a new DRAFT replaces it rather than adding a second.
    let derived = CreateRequest {
        model: "derived".into(),
        from: "spec".into(),
        ..CreateRequest::default()
    };
    t.create(&derived).unwrap();
    let d = t.read("derived").unwrap().manifest;
    assert_eq!(d.layers[1].media_type, MEDIA_TYPE_DRAFT);
    assert_eq!(d.layers[1].digest, draft);
    let config: serde_json::Value = serde_json::from_str(&t.blob_text(&d.config.digest)).unwrap();
    assert_eq!(config["draft"]["architecture"], "llama");
    let other = t.upload(
        &GgufBuilder::tiny_llama()
            .kv("general.description", "another")
            .build()
            .unwrap(),
    );
    let replaced = CreateRequest {
        model: "replaced".into(),
        from: "spec".into(),
        draft_files: files(&[("other.gguf", &other)]),
        ..CreateRequest::default()
    };
    t.create(&replaced).unwrap();
    let r = t.read("replaced").unwrap().manifest;
    let drafts: Vec<_> = r
        .layers
        .iter()
        .filter(|l| l.media_type == MEDIA_TYPE_DRAFT)
        .collect();
    assert_eq!(drafts.len(), 1);
    assert_eq!(drafts[0].digest, other);
}

/// Ollama's createModel names the built-in renderer and parser a gemma4, laguna or nemotron_h
/// GGUF needs when the create names none (gemma4 also gets `stop <turn|>` unless the request
/// sets a stop); an explicit or inherited pair is kept.
#[test]
fn architecture_brings_its_renderer_parser_and_stop() {
    let t = store();
    let gguf = |arch: &str| {
        t.upload(
            &GgufBuilder::new()
                .kv("general.architecture", arch)
                .zeros_f32("token_embd.weight", &[8, 2])
                .build()
                .unwrap(),
        )
    };
    let config = |name: &str| -> serde_json::Value {
        let m = t.read(name).unwrap().manifest;
        serde_json::from_str(&t.blob_text(&m.config.digest)).unwrap()
    };
    let params = |name: &str| -> Option<String> {
        let m = t.read(name).unwrap().manifest;
        m.layers
            .iter()
            .find(|l| l.media_type == MEDIA_TYPE_PARAMS)
            .map(|l| t.blob_text(&l.digest))
    };
    let create = |name: &str, d: &Digest, extra: serde_json::Value| {
        let mut req: CreateRequest = serde_json::from_value(extra).unwrap();
        req.model = name.into();
        req.files = files(&[("m.gguf", d)]);
        t.create(&req).unwrap();
    };

    let gemma4 = gguf("gemma4");
    create("g4", &gemma4, json!({}));
    assert_eq!(config("g4")["renderer"], "gemma4");
    assert_eq!(config("g4")["parser"], "gemma4");
    assert_eq!(
        params("g4").as_deref(),
        Some("{\"stop\":[\"\\u003cturn|\\u003e\"]}\n")
    );
    // A stop of the request's own wins; other parameters ride along.
    create(
        "g4-stop",
        &gemma4,
        json!({"parameters": {"stop": ["END"], "top_k": 5}}),
    );
    assert_eq!(
        params("g4-stop").as_deref(),
        Some("{\"stop\":[\"END\"],\"top_k\":5}\n")
    );
    // An explicit pair adds no stop.
    create(
        "g4-own",
        &gemma4,
        json!({"renderer": "gemma4-large", "parser": "gemma4"}),
    );
    assert_eq!(config("g4-own")["renderer"], "gemma4-large");
    assert_eq!(params("g4-own"), None);
    // A model derived from one inherits its pair (and its params layer) and adds nothing.
    let mut child: CreateRequest =
        serde_json::from_value(json!({"model": "g4-child", "from": "g4-own"})).unwrap();
    t.create(&child).unwrap();
    assert_eq!(config("g4-child")["renderer"], "gemma4-large");
    assert_eq!(params("g4-child"), None);
    child.from = "g4-stop".into();
    t.create(&child).unwrap();
    assert_eq!(config("g4-child")["renderer"], "gemma4");
    assert_eq!(params("g4-child"), params("g4-stop"));

    create("lag", &gguf("laguna"), json!({}));
    assert_eq!(config("lag")["renderer"], "laguna");
    assert_eq!(config("lag")["parser"], "laguna");
    assert_eq!(params("lag"), None);
    for arch in ["nemotron_h", "nemotron_h_moe", "nemotron_h_omni"] {
        create(arch, &gguf(arch), json!({}));
        assert_eq!(config(arch)["renderer"], "nemotron-3-nano", "{arch}");
        assert_eq!(config(arch)["parser"], "nemotron-3-nano", "{arch}");
    }
    // An explicit pair is kept.
    create(
        "nemo-own",
        &gguf("nemotron_h"),
        json!({"renderer": "qwen3-coder", "parser": "qwen3-coder"}),
    );
    assert_eq!(config("nemo-own")["renderer"], "qwen3-coder");
    assert_eq!(config("nemo-own")["parser"], "qwen3-coder");
    // Other families get neither.
    let c = {
        create("plain", &t.upload(&tiny_gguf()), json!({}));
        config("plain")
    };
    assert!(c.get("renderer").is_none_or(|r| r == ""), "{c}");
    assert!(c.get("parser").is_none_or(|r| r == ""), "{c}");
}

/// Ollama's addDefaultLlavaProjectorType: an uploaded vision `clip` projector without a
/// projector type (early llava converters) is rewritten with `clip.projector_type = mlp`, which
/// the runner's mtmd loader needs; its tensors are kept byte for byte. A typed one is untouched.
#[test]
fn legacy_llava_projector_gets_its_default_type() {
    use server::gguf::{read_bytes, ReadOptions, Value};
    let t = store();
    let model = t.upload(&tiny_gguf());
    let weights: Vec<u8> = (0u8..16).collect();
    let projector = |typed: bool| {
        let mut b = GgufBuilder::new()
            .kv("general.architecture", "clip")
            .kv("clip.has_vision_encoder", true)
            .kv("clip.vision.block_count", 1u32);
        if typed {
            b = b.kv("clip.vision.projector_type", "gemma3");
        }
        b.tensor("mm.0.weight", GgmlType::F32, &[4], weights.clone())
            .build()
            .unwrap()
    };
    let legacy = t.upload(&projector(false));
    let statuses = t
        .create(&CreateRequest {
            model: "llava".into(),
            files: files(&[("model.gguf", &model), ("mmproj.gguf", &legacy)]),
            ..CreateRequest::default()
        })
        .unwrap();
    assert!(
        statuses.contains(&"updating GGUF projector metadata".to_string()),
        "{statuses:?}"
    );
    let m = t.read("llava").unwrap().manifest;
    let p = m
        .layers
        .iter()
        .find(|l| l.media_type == MEDIA_TYPE_PROJECTOR)
        .expect("a projector layer");
    assert_ne!(p.digest, legacy, "the projector was rewritten");
    assert_eq!(p.from.as_deref(), Some("mmproj.gguf"));
    let bytes = std::fs::read(t.store.blobs().path(&p.digest)).unwrap();
    let g = read_bytes(&bytes, ReadOptions::default()).unwrap();
    assert!(matches!(g.get("clip.projector_type"), Some(Value::String(s)) if s == "mlp"));
    assert!(matches!(
        g.get("clip.has_vision_encoder"),
        Some(Value::Bool(true))
    ));
    let tensor = &g.tensors[0];
    assert_eq!(tensor.name, "mm.0.weight");
    let at = (g.data_offset + tensor.offset) as usize;
    assert_eq!(&bytes[at..at + 16], &weights[..]);
    assert!(statuses.contains(&format!("creating new layer {}", p.digest)));

    let typed = t.upload(&projector(true));
    let statuses = t
        .create(&CreateRequest {
            model: "typed".into(),
            files: files(&[("model.gguf", &model), ("mmproj.gguf", &typed)]),
            ..CreateRequest::default()
        })
        .unwrap();
    assert!(!statuses.iter().any(|s| s.contains("projector metadata")));
    let m = t.read("typed").unwrap().manifest;
    assert!(m
        .layers
        .iter()
        .any(|l| l.media_type == MEDIA_TYPE_PROJECTOR && l.digest == typed));
}
