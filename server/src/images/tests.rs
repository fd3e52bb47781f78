use super::*;
use image::ImageEncoder;

fn png(w: u32, h: u32, exif: Option<Vec<u8>>) -> Vec<u8> {
    // Left half red, right half blue: orientation is visible in the pixels.
    let img = image::RgbImage::from_fn(w, h, |x, _| {
        if x < w / 2 {
            image::Rgb([255, 0, 0])
        } else {
            image::Rgb([0, 0, 255])
        }
    });
    let mut out = Vec::new();
    let mut enc = image::codecs::png::PngEncoder::new(&mut out);
    if let Some(e) = exif {
        enc.set_exif_metadata(e).unwrap();
    }
    enc.write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// A big-endian TIFF holding one IFD entry: Orientation = `o`.
fn exif_orientation(o: u16) -> Vec<u8> {
    let mut t = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01".to_vec();
    t.extend([0x01, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01]);
    t.extend(o.to_be_bytes());
    t.extend([0, 0, 0, 0, 0, 0]);
    t
}

#[test]
fn decodes_png_to_rgb_with_a_content_id() {
    let bytes = png(4, 2, None);
    let img = decode_bytes(0, &bytes).unwrap();
    assert_eq!((img.width, img.height), (4, 2));
    assert_eq!(img.rgb.len(), 4 * 2 * 3);
    assert_eq!(&img.rgb[..3], &[255, 0, 0]);
    assert_eq!(img.id, hex::encode(Sha256::digest(&bytes)));
}

#[test]
fn exif_orientation_is_applied() {
    // Orientation 6: the stored image is shown rotated 90° clockwise, so a 4×2 file is 2×4
    // and its left (red) half ends on top.
    let img = decode_bytes(0, &png(4, 2, Some(exif_orientation(6)))).unwrap();
    assert_eq!((img.width, img.height), (2, 4));
    assert_eq!(&img.rgb[..3], &[255, 0, 0], "top row is red");
    let last = img.rgb.len() - 3;
    assert_eq!(&img.rgb[last..], &[0, 0, 255], "bottom row is blue");
}

#[test]
fn size_policy() {
    for (w, h, ok) in [
        (1, 1, true),
        (1, 4000, true),
        (4000, 1, true),
        (4096, 4096, true),
        (4097, 4096, false),
        (0, 10, false),
        (10, 0, false),
        (20000, 20000, false),
        (16385, 1, false),
    ] {
        assert_eq!(check_size(0, w, h).is_ok(), ok, "{w}x{h}");
    }
}

#[test]
fn bad_inputs_say_what_is_wrong() {
    let cases: [(&[u8], &str); 3] = [
        (
            b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
            "gif images are not supported",
        ),
        (
            b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>",
            "unknown image format",
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "corrupt or truncated"),
    ];
    for (bytes, want) in cases {
        let e = decode_bytes(2, bytes).unwrap_err().to_string();
        assert!(e.starts_with("invalid image 2: "), "{e}");
        assert!(e.contains(want), "{e}");
    }
    assert!(decode(0, "not base64!")
        .unwrap_err()
        .to_string()
        .contains("base64"));
}

fn image(id: &str) -> Image {
    Image {
        id: id.into(),
        width: 1,
        height: 1,
        rgb: vec![0, 0, 0],
        tokens: None,
    }
}

#[test]
fn markers_become_placed_images() {
    let imgs = [image("a"), image("b")];
    let (text, placed) = place("x[img-1]yy[img-0][img-][img-9z]", &imgs).unwrap();
    assert_eq!(text, "xyy[img-][img-9z]");
    let got: Vec<(usize, &str)> = placed.iter().map(|p| (p.offset, p.id.as_str())).collect();
    assert_eq!(got, [(1, "b"), (3, "a")]);
    // No images: markers are plain text.
    let (text, placed) = place("[img-0]", &[]).unwrap();
    assert_eq!((text.as_str(), placed.len()), ("[img-0]", 0));
    assert_eq!(
        place("[img-2]", &imgs).unwrap_err().to_string(),
        "invalid image index: 2"
    );
}

#[test]
fn fitting_resizes_exactly_and_renames_by_size() {
    let img = decode_bytes(0, &png(40, 30, None)).unwrap();
    let a = fit(img.clone(), 96, 72);
    assert_eq!((a.width, a.height, a.rgb.len()), (96, 72, 96 * 72 * 3));
    let b = fit(img.clone(), 48, 36);
    assert_ne!(
        a.id, b.id,
        "another size is another image to the prefix cache"
    );
    assert_ne!(a.id, img.id);
    assert_eq!(
        fit(img.clone(), 96, 72).id,
        a.id,
        "the same size, the same id"
    );
    let same = fit(img.clone(), 40, 30);
    assert_eq!(same.rgb, img.rgb, "no resampling at the image's own size");
}
