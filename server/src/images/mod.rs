//! Images from requests: base64 → bounded decode → RGB pixels, and their placement in a
//! rendered prompt. This module owns every decision about image bytes; nothing past it (the
//! engine, a runner) ever parses an image file.
//!
//! Invariants:
//! - Only PNG, JPEG and WebP are decoded (sniffed from the bytes, never from a declared type).
//! - The dimensions in the header are checked before any pixel is decoded, and the decoder runs
//!   under the same limits, so a decompression bomb costs a header read (issue 17).
//! - EXIF orientation is applied: pixels reach the projector the way a viewer shows them.
//! - Error messages name the image's position and at most its size, never its content.
//! - For a dynamic-resolution projector every image leaves here resized to the exact grid its
//!   budget gives (`budget`), with an id naming both its bytes and that grid, so the runner's
//!   prefix cache never mistakes one budget's image tokens for another's.

pub mod budget;

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use runner_protocol::PromptImage;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Most pixels one image may decode to (4096 × 4096; 48 MiB of RGB).
pub const MAX_PIXELS: u64 = 4096 * 4096;
/// Most pixels all images of one request may decode to (what a runner is sent as RGB).
pub const MAX_REQUEST_PIXELS: u64 = 4 * MAX_PIXELS;
/// Longest side accepted (a 1 × 4000 strip is fine, a 20000-pixel side is not).
pub const MAX_SIDE: u32 = 16384;

/// A decoded request image.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// Hex SHA-256 of the file bytes as sent.
    pub id: String,
    pub width: u32,
    pub height: u32,
    /// `width * height * 3` bytes, row-major RGB8, orientation applied.
    pub rgb: Vec<u8>,
    /// The tokens the projector will make of it, when the server sized it (dynamic-resolution
    /// projectors); `None` when the projector's own fixed size decides.
    pub tokens: Option<u32>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({}x{}, {})", self.width, self.height, self.id)
    }
}

fn bad(index: usize, why: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("invalid image {index}: {why}"))
}

/// Decodes image `index` of a request from base64 (no `data:` prefix), bounded as above.
pub fn decode(index: usize, b64: &str) -> Result<Image> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim().as_bytes())
        .map_err(|e| bad(index, format!("illegal base64 data ({e})")))?;
    decode_bytes(index, &bytes)
}

/// Decodes an image file's bytes (see [`decode`]).
pub fn decode_bytes(index: usize, bytes: &[u8]) -> Result<Image> {
    let format = match image::guess_format(bytes) {
        Ok(f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP)) => f,
        Ok(other) => {
            return Err(bad(
                index,
                format!(
                    "{} images are not supported (send PNG, JPEG or WebP)",
                    other.extensions_str().first().unwrap_or(&"this kind of")
                ),
            ))
        }
        Err(_) => return Err(bad(index, "unknown image format (send PNG, JPEG or WebP)")),
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    // The decoded buffer (up to 4 channels of 16 bits) plus the decoder's working memory.
    limits.max_alloc = Some(MAX_PIXELS * 8 + (64 << 20));
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| decode_error(index, bytes.len(), &e))?;
    let (w, h) = decoder.dimensions();
    check_size(index, w, h)?;
    let orientation = decoder
        .orientation()
        .map_err(|e| decode_error(index, bytes.len(), &e))?;
    let mut img =
        DynamicImage::from_decoder(decoder).map_err(|e| decode_error(index, bytes.len(), &e))?;
    img.apply_orientation(orientation);
    let rgb = img.into_rgb8();
    let (width, height) = rgb.dimensions();
    Ok(Image {
        id: hex::encode(Sha256::digest(bytes)),
        width,
        height,
        rgb: rgb.into_raw(),
        tokens: None,
    })
}

/// The size policy on header dimensions: no empty images, no side over [`MAX_SIDE`], no more
/// than [`MAX_PIXELS`] pixels.
pub fn check_size(index: usize, w: u32, h: u32) -> Result<()> {
    if w == 0 || h == 0 {
        return Err(bad(
            index,
            format!("the image is {w}x{h}: it has no pixels"),
        ));
    }
    if w > MAX_SIDE || h > MAX_SIDE || u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(bad(
            index,
            format!(
                "{w}x{h} is larger than this server decodes (at most {MAX_PIXELS} pixels and \
                 {MAX_SIDE} per side)"
            ),
        ));
    }
    Ok(())
}

fn decode_error(index: usize, len: usize, e: &image::ImageError) -> Error {
    match e {
        image::ImageError::Limits(_) => bad(
            index,
            format!("the image is larger than this server decodes ({len} bytes sent)"),
        ),
        _ => bad(
            index,
            format!("corrupt or truncated image data ({len} bytes)"),
        ),
    }
}

/// Decodes every image of a request, off the async threads (decoding is CPU work), and sizes
/// each for the model's projector (`projector`, its GGUF): to its budget's grid when the
/// projector's resolution is dynamic; a request naming a budget for a projector whose image
/// size is fixed is refused.
pub async fn decode_all(
    images: Vec<String>,
    projector: Option<PathBuf>,
    budget: budget::Budget,
) -> Result<Arc<Vec<Image>>> {
    if images.is_empty() {
        return Ok(Arc::new(Vec::new()));
    }
    tokio::task::spawn_blocking(move || {
        let geometry = geometry(projector.as_deref(), &budget)?;
        let mut out = Vec::with_capacity(images.len());
        let mut total = 0u64;
        for (i, b) in images.iter().enumerate() {
            let mut img = decode(i, b)?;
            total += u64::from(img.width) * u64::from(img.height);
            if total > MAX_REQUEST_PIXELS {
                return Err(Error::BadRequest(format!(
                    "the request's images hold more than {MAX_REQUEST_PIXELS} pixels together"
                )));
            }
            if let Some(g) = &geometry {
                let (gx, gy) = budget::grid(
                    img.width,
                    img.height,
                    budget.for_image(img.width, img.height, g),
                    g,
                );
                img = fit(img, gx * g.cell, gy * g.cell);
                img.tokens = Some(gx * gy);
            }
            out.push(img);
        }
        Ok(out)
    })
    .await
    .map_err(|e| Error::Internal(format!("image decoding failed: {e}")))?
    .map(Arc::new)
}

/// The projector's geometry when it resizes per image; a budget for any other is a 400.
fn geometry(
    projector: Option<&std::path::Path>,
    b: &budget::Budget,
) -> Result<Option<budget::Geometry>> {
    let Some(path) = projector else {
        return Ok(None);
    };
    let gguf = crate::gguf::read_path(path, crate::gguf::ReadOptions::default())?;
    let g = budget::Geometry::of(&gguf);
    match &g {
        Some(g) => b.check(g)?,
        None if b.is_set() => {
            let kind = gguf
                .get("clip.projector_type")
                .and_then(|v| v.as_str())
                .unwrap_or("unknown");
            return Err(Error::BadRequest(format!(
                "image_min_tokens and image_max_tokens need a projector whose image resolution \
                 is dynamic (gemma4v); this model's ({kind}) gives every image the same tokens"
            )));
        }
        None => {}
    }
    Ok(g)
}

/// `img` resized to `w`×`h` (bicubic, the publisher's filter); its id then names the bytes it
/// came from and the size, since the same file at another budget is other pixels.
pub fn fit(img: Image, w: u32, h: u32) -> Image {
    let id = hex::encode(Sha256::digest(format!("{}@{w}x{h}", img.id)));
    if (img.width, img.height) == (w, h) {
        return Image { id, ..img };
    }
    let src = image::RgbImage::from_raw(img.width, img.height, img.rgb)
        .expect("an Image holds width*height*3 bytes");
    let out = image::imageops::resize(&src, w, h, image::imageops::FilterType::CatmullRom);
    Image {
        id,
        width: w,
        height: h,
        rgb: out.into_raw(),
        tokens: img.tokens,
    }
}

/// Takes the `[img-N]` markers out of a rendered prompt and places image N where its marker
/// was, as Ollama's runner does (a marker naming no image is an error; an image whose marker
/// the template left out is not shown to the model). With no images the prompt is untouched.
pub fn place(prompt: &str, images: &[Image]) -> Result<(String, Vec<PromptImage>)> {
    if images.is_empty() {
        return Ok((prompt.to_owned(), Vec::new()));
    }
    let mut out = String::with_capacity(prompt.len());
    let mut placed = Vec::new();
    let mut rest = prompt;
    while let Some(at) = rest.find("[img-") {
        let after = &rest[at + 5..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || !after[digits..].starts_with(']') {
            out.push_str(&rest[..at + 5]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        let n: usize = after[..digits].parse().unwrap_or(usize::MAX);
        let img = images
            .get(n)
            .ok_or_else(|| Error::BadRequest(format!("invalid image index: {n}")))?;
        placed.push(PromptImage {
            offset: out.len(),
            id: img.id.clone(),
            width: img.width,
            height: img.height,
            rgb: img.rgb.clone(),
        });
        rest = &after[digits + 1..];
    }
    out.push_str(rest);
    Ok((out, placed))
}

#[cfg(test)]
mod tests;
