// herd's request router for nginx's njs module (Debian's libnginx-mod-http-js, njs 0.7.9).
//
// Every request enters `route` (js_content). It reads the JSON body's model name — Ollama's
// /api/generate, /api/chat, /api/embed(dings), /api/show, /api/pull, /api/push, /api/delete,
// /api/create (`model`, or the older `name`), OpenAI's and Anthropic's /v1/* (`model`), and
// GET /v1/models/NAME — stores it, normalised, in $herd_model and redirects internally:
//   @herd_model  requests that name a model: upstream `hash $herd_model consistent`, so each
//                model stays on one replica (which keeps it loaded);
//   @herd_any    everything else (/api/tags, /api/ps, /api/version, probes): least_conn.
// Invariants: the body is never changed (nginx forwards the bytes it buffered); a body that
// is not JSON, has no model, or was too large to stay in memory (client_body_buffer_size) is
// routed as model-less rather than refused — herd answers it as it would directly.

var DEFAULT_HOST = 'registry.ollama.ai';
var DEFAULT_NAMESPACE = 'library';
var DEFAULT_TAG = 'latest';

// The canonical form of an Ollama model name, so that every spelling herd resolves to one
// model hashes to one replica: "smol", "smol:latest", "library/smol" and
// "registry.ollama.ai/library/smol:latest" are one key. Names compare case-insensitively in
// Ollama, so the key is lower-cased. A digest reference (NAME@sha256:...) keeps its digest.
function canonical(name) {
    if (typeof name !== 'string') {
        return '';
    }
    var n = name.trim().toLowerCase();
    if (n === '') {
        return '';
    }
    var digest = '';
    var at = n.indexOf('@');
    if (at >= 0) {
        digest = n.slice(at);
        n = n.slice(0, at);
    }
    var slash = n.lastIndexOf('/');
    var colon = n.lastIndexOf(':');
    var tag = DEFAULT_TAG;
    // A ':' before the last '/' is a host's port (127.0.0.1:5000/ns/model), not a tag.
    if (colon > slash) {
        tag = n.slice(colon + 1) || DEFAULT_TAG;
        n = n.slice(0, colon);
    }
    var parts = n.split('/');
    if (parts.length === 1) {
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0]];
    } else if (parts.length === 2) {
        parts = [DEFAULT_HOST, parts[0], parts[1]];
    }
    return parts.join('/') + ':' + tag + digest;
}

// The model a request names, or '' when it names none.
function modelOf(r) {
    var prefix = '/v1/models/';
    if (r.method === 'GET' && r.uri.indexOf(prefix) === 0) {
        return canonical(decodeURIComponent(r.uri.slice(prefix.length)));
    }
    var text;
    try {
        // Throws when nginx spilled the body to a temporary file (larger than
        // client_body_buffer_size); undefined when there is no body.
        text = r.requestText;
    } catch (e) {
        return '';
    }
    if (!text) {
        return '';
    }
    var body;
    try {
        body = JSON.parse(text);
    } catch (e) {
        return '';
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        return '';
    }
    return canonical(body.model) || canonical(body.name);
}

function route(r) {
    var model = modelOf(r);
    r.variables.herd_model = model;
    r.internalRedirect(model ? '@herd_model' : '@herd_any');
}

export default { route, canonical };
