"""Lays out an Ollama model store (blobs/sha256-<hex>, manifests/registry.ollama.ai/library/<m>/<tag>)
holding the test models, the way `ollama create` writes one: config blob, model layer, and the
optional template and params layers. Blobs are hard links to the cached GGUFs when possible.

    python3 make_store.py STORE_DIR MODELS_DIR
"""

import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Both models run with one inference thread and a small context: the test host is shared.
PARAMS = {"num_ctx": 2048, "num_thread": 1}

MODELS = [
    # (name, tag, gguf file, template file or None, extra params, family, parameter size, quant)
    ("smollm2", "135m", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2.gotmpl",
     {"stop": ["<|im_start|>", "<|im_end|>"]}, "llama", "135M", "Q4_1"),
    ("gemma3", "270m", "gemma-3-270m-q4_k_m.gguf", None, {}, "gemma3", "270M", "Q4_K_M"),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def put_blob(store, data=None, path=None):
    hexd = hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path)
    dst = os.path.join(store, "blobs", "sha256-" + hexd)
    if not os.path.exists(dst):
        if data is not None:
            with open(dst, "wb") as f:
                f.write(data)
        else:
            try:
                os.link(path, dst)
            except OSError:
                shutil.copyfile(path, dst)
    size = len(data) if data is not None else os.path.getsize(path)
    return "sha256:" + hexd, size


def main():
    store, models = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(store, "blobs"), exist_ok=True)
    for name, tag, gguf, template, params, family, psize, quant in MODELS:
        layers = []
        digest, size = put_blob(store, path=os.path.join(models, gguf))
        layers.append({"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": size})
        if template:
            with open(os.path.join(HERE, template), "rb") as f:
                digest, size = put_blob(store, data=f.read())
            layers.append({"mediaType": "application/vnd.ollama.image.template", "digest": digest, "size": size})
        p = dict(PARAMS, **params)
        digest, size = put_blob(store, data=json.dumps(p).encode())
        layers.append({"mediaType": "application/vnd.ollama.image.params", "digest": digest, "size": size})
        config = {
            "model_format": "gguf", "model_family": family, "model_families": [family],
            "model_type": psize, "file_type": quant, "architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]},
        }
        cdigest, csize = put_blob(store, data=json.dumps(config).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": cdigest, "size": csize},
            "layers": layers,
        }
        mdir = os.path.join(store, "manifests", "registry.ollama.ai", "library", name)
        os.makedirs(mdir, exist_ok=True)
        with open(os.path.join(mdir, tag), "w") as f:
            json.dump(manifest, f)


if __name__ == "__main__":
    main()
