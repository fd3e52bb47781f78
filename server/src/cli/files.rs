//! Images (and WAV audio) named by path in a `herd run` prompt, as `ollama run` finds them for
//! a model that takes them (`cmd/interactive.go` `extractFileData`): paths that start with `/`,
//! `./` or `\` (spaces escaped or not) and end in a jpg/jpeg/png/webp/wav extension are read —
//! when the file exists and its first bytes say it is such a file — sent as the message's
//! images, and taken out of the text, with an "Added image '…'" line on stderr.

use base64::Engine as _;

/// Ollama's pattern: it also catches text that is no file name; only existing files count.
const PATTERN: &str = r"(?:[a-zA-Z]:)?(?:\./|/|\\)[\S\\ ]+?\.(?i:jpg|jpeg|png|webp|wav)\b";

/// Largest file taken (Ollama's limit).
const MAX_BYTES: u64 = 100 * 1024 * 1024;

/// The candidate paths in `input`, in order.
pub fn file_names(input: &str) -> Vec<String> {
    static RE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(PATTERN).expect("constant pattern"));
    RE.find_iter(input).map(|m| m.as_str().to_owned()).collect()
}

/// A shell-escaped path as the file system knows it (`\ ` → space, `\(` → `(`, …).
pub fn normalize(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&n) = chars.peek() {
                if " ()[]{}$&;'\\*?~".contains(n) {
                    out.push(n);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// Whether `head` (a file's first bytes) is a JPEG, PNG, WebP image or a WAV file (the types
/// Go's `http.DetectContentType` names that Ollama accepts).
fn allowed(head: &[u8]) -> bool {
    head.starts_with(&[0xFF, 0xD8, 0xFF])
        || head.starts_with(b"\x89PNG\r\n\x1a\n")
        || (head.len() >= 12
            && &head[..4] == b"RIFF"
            && (&head[8..12] == b"WEBP" || &head[8..12] == b"WAVE"))
}

/// The prompt with its files taken out (trimmed) and their contents, base64; `notes` gets one
/// "Added image '…'"/"Added audio '…'" line per file. A name that is no file is left alone; a
/// file of another type, or too large, is an error.
pub fn extract(
    input: &str,
    notes: &mut dyn FnMut(String),
) -> anyhow::Result<(String, Vec<String>)> {
    let mut text = input.to_owned();
    let mut images = Vec::new();
    for raw in file_names(input) {
        let path = normalize(&raw);
        let bytes = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(couldnt(e)),
            Ok(m) if m.len() > MAX_BYTES => {
                return Err(anyhow::anyhow!("file size exceeds maximum limit (100MB)"))
            }
            Ok(_) => std::fs::read(&path).map_err(couldnt)?,
        };
        if !allowed(&bytes[..bytes.len().min(512)]) {
            return Err(anyhow::anyhow!("invalid file type: {path}"));
        }
        let kind = if path.to_ascii_lowercase().ends_with(".wav") {
            "audio"
        } else {
            "image"
        };
        notes(format!("Added {kind} '{path}'"));
        for s in [format!("'{path}'"), format!("'{raw}'"), raw.clone()] {
            text = text.replace(&s, "");
        }
        images.push(base64::engine::general_purpose::STANDARD.encode(&bytes));
    }
    Ok((text.trim().to_owned(), images))
}

fn couldnt(e: std::io::Error) -> anyhow::Error {
    eprintln!("Couldn't process file: {:?}", e.to_string());
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_found_as_ollama_finds_them() {
        let table: [(&str, &[&str]); 5] = [
            ("describe /tmp/a.png please", &["/tmp/a.png"]),
            ("two ./x.JPG and /y z/w.webp", &["./x.JPG", "/y z/w.webp"]),
            ("escaped /my\\ pics/cat.jpeg!", &["/my\\ pics/cat.jpeg"]),
            ("no path here.png", &[]),
            ("C:/win/a.wav and \\rel.png", &["C:/win/a.wav", "\\rel.png"]),
        ];
        for (input, want) in table {
            assert_eq!(file_names(input), want, "{input}");
        }
        assert_eq!(normalize("/my\\ pics/\\(1\\).png"), "/my pics/(1).png");
    }

    #[test]
    fn existing_images_are_taken_out_of_the_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("cat photo.png");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\nrest").unwrap();
        let txt = dir.path().join("notes.png");
        std::fs::write(&txt, b"just text").unwrap();
        let escaped = png.display().to_string().replace(' ', "\\ ");
        let mut notes = Vec::new();
        let (text, images) = extract(
            &format!("what is in {escaped}? and /nope/missing.jpg"),
            &mut |n| notes.push(n),
        )
        .unwrap();
        assert_eq!(text, "what is in ? and /nope/missing.jpg");
        assert_eq!(images.len(), 1);
        assert_eq!(notes, [format!("Added image '{}'", png.display())]);
        let e = extract(&format!("look {}", txt.display()), &mut |_| {}).unwrap_err();
        assert!(e.to_string().starts_with("invalid file type"), "{e}");
    }
}
