//! `POST /api/show`: a model's Modelfile, parameters, template, details, `model_info` (GGUF
//! keys, or what a safetensors checkpoint or a cloud stub's config says) and capabilities, in
//! Ollama's shape (its `ShowHandler`).

use super::*;

#[derive(Debug, Default, Deserialize)]
pub struct ShowRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// Deprecated spelling of `model`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub verbose: bool,
}

#[derive(Debug, Serialize)]
pub struct ShowResponse {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub license: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub modelfile: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parameters: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub template: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub renderer: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parser: String,
    pub details: ModelDetails,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// A stub's upstream model and server (`crate::remote`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote_model: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    /// Always an object: several integrations crash on a missing one.
    pub model_info: Map<String, Json_>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projector_info: Option<Map<String, Json_>>,
    /// `{name, type, shape}` per tensor (Ollama sends them with or without `verbose`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<Json_>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    pub modified_at: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub requires: String,
}

/// User agents whose `/api/show` gets `general.basename` = the requested name
/// (`server/routes.go` `copilotChatUserAgentPrefix`): Copilot Chat labels models by that key.
const COPILOT_CHAT_AGENT: &str = "GitHubCopilotChat/";

pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    OJson(req): OJson<ShowRequest>,
) -> Result<Json<ShowResponse>> {
    let raw = req
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .or_else(|| req.name.clone().filter(|n| !n.is_empty()))
        // `modelref.ParseRef` trims: a blank name is no name.
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| Error::BadRequest("model is required".into()))?;
    // `name:local` shows only a local model; two suffixes are Ollama's 400. (A cloud
    // reference was proxied before this handler: `remote::cloud`.)
    let (lookup, local_only) =
        match crate::remote::modelref::parse(&raw).map_err(Error::BadRequest)? {
            Some(r) if r.source == crate::remote::modelref::Source::Local => (r.base, true),
            _ => (raw.trim().to_owned(), false),
        };
    let name = ModelName::parse(&lookup).map_err(|_| Error::InvalidModelName)?;
    let store = state.store.clone();
    let remote = state.remote.clone();
    let mode = state.defaults.go_template;
    let mut resp = blocking(move || show_model(&store, &remote, &name, &req, mode)).await?;
    if local_only && !resp.remote_host.is_empty() {
        return Err(Error::NotFound(format!("model '{}' not found", raw.trim())));
    }
    let agent = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if agent.starts_with(COPILOT_CHAT_AGENT) {
        resp.model_info
            .insert("general.basename".into(), Json_::String(raw));
    }
    Ok(Json(resp))
}

fn show_model(
    store: &Store,
    state_remote: &crate::remote::Remote,
    name: &ModelName,
    req: &ShowRequest,
    mode: GoTemplate,
) -> Result<ShowResponse> {
    let resolved = store.resolve(name)?;
    let short = resolved.display_shortest();
    let Some(entry) = store.read(&resolved)? else {
        return Err(Error::NotFound(format!("model '{short}' not found")));
    };
    // A layer blob missing from disk reads as "no such model", as in Ollama (os.IsNotExist).
    let missing = |e: Error| match e {
        Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Error::NotFound(format!("model '{short}' not found"))
        }
        e => e,
    };
    let mut view = ModelView::load(store, &entry, mode).map_err(missing)?;
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        view.system = system.to_owned();
    }
    if !view.config.remote_host.is_empty() {
        state_remote.check_enabled(crate::remote::policy::DETAILS_UNAVAILABLE)?;
        return Ok(show_remote(view, &short, entry.modified));
    }
    if view.is_safetensors() {
        return show_safetensors(view, &short, entry.modified, req.verbose).map_err(missing);
    }
    let gguf = view.gguf(req.verbose).map_err(missing)?;
    // The template that renders (Ollama's selectedModelTemplate: the GGUF one when the
    // TEMPLATE layer is set aside, `ModelView::go_template_renders`).
    let go = view.go_template_renders(gguf.as_ref());
    let template = match (
        view.template.as_ref().filter(|_| go),
        gguf.as_ref().and_then(|g| g.chat_template()),
    ) {
        (Some(t), _) => t.clone(),
        (None, Some(jinja)) => jinja.to_owned(),
        (None, None) => view.go_template().to_owned(),
    };
    let projector_info = match view.projector_paths.first() {
        Some(p) => Some(
            crate::gguf::read_path(
                p,
                crate::gguf::ReadOptions {
                    full_arrays: req.verbose,
                },
            )?
            .model_info(req.verbose),
        ),
        None => None,
    };
    Ok(ShowResponse {
        license: view.licenses.join("\n"),
        modelfile: view.modelfile(&short),
        parameters: view.parameters(),
        template,
        system: view.system.clone(),
        renderer: view.config.renderer.clone(),
        parser: view.config.parser.clone(),
        details: view.details(gguf.as_ref()),
        messages: view.messages.clone(),
        remote_model: view.config.remote_model.clone(),
        remote_host: view.config.remote_host.clone(),
        model_info: gguf
            .as_ref()
            .map(|g| g.model_info(req.verbose))
            .unwrap_or_default(),
        projector_info,
        tensors: gguf.as_ref().map(|g| g.tensors_json()).unwrap_or_default(),
        capabilities: view.capabilities(gguf.as_ref()),
        modified_at: rfc3339_nano(entry.modified),
        requires: view.config.requires.clone(),
    })
}

/// `/api/show` of a stub (Ollama's `GetModelInfo` for a remote model): the config's details
/// and capabilities, `model_info` from the config's family and lengths, no tensors.
fn show_remote(view: ModelView, short: &str, modified: std::time::SystemTime) -> ShowResponse {
    let c = &view.config;
    let mut model_info = Map::new();
    if !c.model_family.is_empty() {
        model_info.insert(
            "general.architecture".into(),
            Json_::String(c.model_family.clone()),
        );
        if !c.base_name.is_empty() {
            model_info.insert(
                "general.basename".into(),
                Json_::String(c.base_name.clone()),
            );
        }
        if c.context_length > 0 {
            model_info.insert(
                format!("{}.context_length", c.model_family),
                c.context_length.into(),
            );
        }
        if c.embedding_length > 0 {
            model_info.insert(
                format!("{}.embedding_length", c.model_family),
                c.embedding_length.into(),
            );
        }
    }
    ShowResponse {
        license: view.licenses.join("\n"),
        modelfile: view.modelfile(short),
        parameters: view.parameters(),
        template: view.go_template().to_owned(),
        system: view.system.clone(),
        renderer: c.renderer.clone(),
        parser: c.parser.clone(),
        details: view.details(None),
        messages: view.messages.clone(),
        remote_model: c.remote_model.clone(),
        remote_host: c.remote_host.clone(),
        model_info,
        projector_info: None,
        tensors: Vec::new(),
        capabilities: view.capabilities(None),
        modified_at: rfc3339_nano(modified),
        requires: c.requires.clone(),
    }
}

/// `/api/show` of a safetensors (MLX) model: Ollama's details and `model_info` from
/// config.json and the tensor headers; tensors only when verbose (as Ollama).
fn show_safetensors(
    view: ModelView,
    short: &str,
    modified: std::time::SystemTime,
    verbose: bool,
) -> Result<ShowResponse> {
    use crate::mlx::view as mv;
    let template = match &view.template {
        Some(t) => t.clone(),
        None => mv::chat_template(&view)?.unwrap_or_else(|| view.go_template().to_owned()),
    };
    Ok(ShowResponse {
        license: view.licenses.join("\n"),
        modelfile: view.modelfile(short),
        parameters: view.parameters(),
        template,
        system: view.system.clone(),
        renderer: view.config.renderer.clone(),
        parser: view.config.parser.clone(),
        details: mv::details(&view)?,
        messages: view.messages.clone(),
        remote_model: String::new(),
        remote_host: String::new(),
        model_info: mv::model_info(&view)?,
        projector_info: None,
        tensors: if verbose {
            mv::tensors_json(&view)?
        } else {
            Vec::new()
        },
        capabilities: view.capabilities(None),
        modified_at: rfc3339_nano(modified),
        requires: view.config.requires.clone(),
    })
}
