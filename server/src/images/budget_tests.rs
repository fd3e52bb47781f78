use super::*;

/// Gemma 4's real geometry: 16-pixel patches, 3×3 pooling, a 10240-entry position table.
const GEMMA4: Geometry = Geometry {
    cell: 48,
    max_tokens: 1120,
    max_cells: 10240 / 3,
};

#[test]
fn a_budget_fills_to_the_largest_aspect_grid_within_it() {
    // (w, h, budget) → grid; squares give the largest square ≤ the budget whatever their size
    // (a small image is scaled up, a large one down).
    let table = [
        (256, 256, 70, (8, 8)),
        (256, 256, 140, (11, 11)),
        (256, 256, 280, (16, 16)),
        (256, 256, 560, (23, 23)),
        (256, 256, 1120, (33, 33)),
        (4000, 4000, 280, (16, 16)),
        (16, 16, 1120, (33, 33)),
        // 4:3 and 16:9 keep their shape.
        (2048, 1536, 1120, (38, 28)),
        (1920, 1080, 280, (22, 12)),
        (1080, 1920, 280, (12, 22)),
        // Slivers: the short side is one cell, the long side takes the rest of the budget.
        (1, 4000, 70, (1, 70)),
        (4000, 1, 70, (70, 1)),
        (1, 1, 70, (8, 8)),
    ];
    for (w, h, b, want) in table {
        let got = grid(w, h, b, &GEMMA4);
        assert_eq!(got, want, "{w}x{h} at {b}");
        assert!(got.0 * got.1 <= b, "{w}x{h} at {b}: {got:?} over budget");
    }
}

#[test]
fn the_position_table_bounds_extreme_sides() {
    let g = Geometry {
        cell: 12,
        max_tokens: 1120,
        max_cells: 42,
    };
    assert_eq!(grid(1, 4000, 1120, &g), (1, 42));
    assert_eq!(grid(4000, 1, 1120, &g), (42, 1));
    assert_eq!(grid(3000, 1000, 1120, &g), (42, 14));
    // Never more than the ceiling, whatever the request says.
    let (x, y) = grid(500, 500, 5000, &g);
    assert!(x * y <= 1120 && x <= 42 && y <= 42, "{x}x{y}");
}

#[test]
fn each_image_picks_the_rung_nearest_its_resolution() {
    let table = [
        (128, 128, 70),
        (320, 240, 70),
        (512, 512, 140),
        (800, 600, 280),
        (1024, 1024, 560),
        (2048, 1536, 1120),
        (4096, 4096, 1120),
        // Aspect ratio respected: a portrait and its landscape pick alike.
        (600, 800, 280),
        // Slivers are bounded (a 1-cell side) and still pick a rung.
        (1, 4000, 70),
        (4000, 1, 70),
    ];
    for (w, h, want) in table {
        assert_eq!(select(w, h, &GEMMA4), want, "{w}x{h}");
    }
    assert!(select(128, 128, &GEMMA4) < select(2048, 1536, &GEMMA4));
}

#[test]
fn request_budgets_are_checked_and_resolved() {
    let b = |min, max| Budget { min, max };
    assert!(b(Some(70), Some(1120)).check(&GEMMA4).is_ok());
    assert!(b(Some(560), Some(280)).check(&GEMMA4).is_err());
    assert!(b(None, Some(2000)).check(&GEMMA4).is_err());
    assert!(b(Some(2000), None).check(&GEMMA4).is_err());
    // max names the budget; min alone raises the image's own choice.
    assert_eq!(b(Some(70), Some(560)).for_image(128, 128, &GEMMA4), 560);
    assert_eq!(b(None, None).for_image(128, 128, &GEMMA4), 70);
    assert_eq!(b(Some(300), None).for_image(128, 128, &GEMMA4), 300);
    assert_eq!(b(Some(300), None).for_image(4096, 4096, &GEMMA4), 1120);
}
