//! `herd eval compare A.jsonl B.jsonl`: pairs the rows of two runs by (id, repeat), refusing when
//! a pair's question (prompt hash) or gold differ, scores both sides and reports the paired table
//! with McNemar's exact p, plus a MIXED banner when either run's rows come from more than one
//! host/build/config/model. The comparison is a pure function of the rows; the CLI only reads and
//! prints.

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::record::{self, Record};
use super::score::Scorer;
use super::stats::mcnemar_exact;
use super::CompareArgs;

/// One pair's outcome (`None`: not scored — no gold, or an error on either side).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    pub id: serde_json::Value,
    pub repeat: u32,
    pub a: Option<bool>,
    pub b: Option<bool>,
    pub identical: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub items: usize,
    pub scored: usize,
    pub errors_a: usize,
    pub errors_b: usize,
    pub empty_a: usize,
    pub empty_b: usize,
    pub correct_a: usize,
    pub correct_b: usize,
    pub both_correct: usize,
    pub both_wrong: usize,
    pub a_only: usize,
    pub b_only: usize,
    pub mcnemar_p: f64,
    pub predictions_identical: usize,
    pub responses_identical: usize,
    /// The distinct sources of each run's rows; more than one = MIXED.
    pub sources_a: Vec<String>,
    pub sources_b: Vec<String>,
    pub verdicts: Vec<Verdict>,
}

impl Report {
    pub fn mixed(&self) -> bool {
        self.sources_a.len() > 1 || self.sources_b.len() > 1
    }
}

fn sources(rows: &[Record]) -> Vec<String> {
    let set: BTreeSet<String> = rows.iter().map(|r| r.provenance.label()).collect();
    set.into_iter().collect()
}

/// Pairs and scores. `scorer` (the CLI's) overrides each row's own, which overrides `exact`.
pub fn compare(a: &[Record], b: &[Record], scorer: Option<&Scorer>) -> anyhow::Result<Report> {
    let by_key: HashMap<(String, u32), &Record> = b.iter().map(|r| (r.key(), r)).collect();
    if a.len() != b.len() || a.iter().any(|r| !by_key.contains_key(&r.key())) {
        let a_keys: BTreeSet<_> = a.iter().map(Record::key).collect();
        let missing = a
            .iter()
            .find(|r| !by_key.contains_key(&r.key()))
            .map(|r| format!("item {} is in A but not in B", r.id))
            .or_else(|| {
                b.iter()
                    .find(|r| !a_keys.contains(&r.key()))
                    .map(|r| format!("item {} is in B but not in A", r.id))
            })
            .unwrap_or_else(|| "the runs have duplicate rows".into());
        bail!("cannot pair the runs: {missing}");
    }
    let mut rep = Report {
        items: a.len(),
        scored: 0,
        errors_a: 0,
        errors_b: 0,
        empty_a: 0,
        empty_b: 0,
        correct_a: 0,
        correct_b: 0,
        both_correct: 0,
        both_wrong: 0,
        a_only: 0,
        b_only: 0,
        mcnemar_p: 1.0,
        predictions_identical: 0,
        responses_identical: 0,
        sources_a: sources(a),
        sources_b: sources(b),
        verdicts: Vec::new(),
    };
    for ra in a {
        let rb = by_key[&ra.key()];
        if ra.prompt_hash != rb.prompt_hash {
            bail!(
                "cannot pair item {}: its prompt differs between A and B",
                ra.id
            );
        }
        if ra.gold != rb.gold {
            bail!(
                "cannot pair item {}: its gold differs between A and B",
                ra.id
            );
        }
        let s: Scorer = match (scorer, &ra.scorer) {
            (Some(s), _) => s.clone(),
            (None, Some(name)) => name.parse().with_context(|| format!("item {}", ra.id))?,
            (None, None) => Scorer::Exact,
        };
        rep.errors_a += usize::from(ra.error.is_some());
        rep.errors_b += usize::from(rb.error.is_some());
        let ok = ra.error.is_none() && rb.error.is_none();
        rep.empty_a += usize::from(ra.error.is_none() && ra.response.content.trim().is_empty());
        rep.empty_b += usize::from(rb.error.is_none() && rb.response.content.trim().is_empty());
        let identical = ok && ra.response == rb.response;
        rep.responses_identical += usize::from(identical);
        if ok && s.prediction(&ra.response.content) == s.prediction(&rb.response.content) {
            rep.predictions_identical += 1;
        }
        let (va, vb) = match (&ra.gold, ok) {
            (Some(gold), true) => (
                Some(s.correct(&ra.response.content, gold)?),
                Some(s.correct(&rb.response.content, gold)?),
            ),
            _ => (None, None),
        };
        if let (Some(x), Some(y)) = (va, vb) {
            rep.scored += 1;
            rep.correct_a += usize::from(x);
            rep.correct_b += usize::from(y);
            match (x, y) {
                (true, true) => rep.both_correct += 1,
                (false, false) => rep.both_wrong += 1,
                (true, false) => rep.a_only += 1,
                (false, true) => rep.b_only += 1,
            }
        }
        rep.verdicts.push(Verdict {
            id: ra.id.clone(),
            repeat: ra.repeat,
            a: va,
            b: vb,
            identical,
        });
    }
    rep.mcnemar_p = mcnemar_exact(rep.a_only as u64, rep.b_only as u64);
    Ok(rep)
}

fn pct(n: usize, d: usize) -> String {
    if d == 0 {
        format!("{n}/{d}")
    } else {
        format!("{n}/{d} ({:.1}%)", n as f64 * 100.0 / d as f64)
    }
}

/// The printed table (and the MIXED banner first, when it applies).
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    if r.mixed() {
        out.push_str("MIXED: a run's rows come from more than one host/build/config/model\n");
        for (name, src) in [("A", &r.sources_a), ("B", &r.sources_b)] {
            if src.len() > 1 {
                for s in src.iter() {
                    out.push_str(&format!("  {name}: {s}\n"));
                }
            }
        }
    }
    let rows = [
        ("items", r.items.to_string()),
        ("scored", r.scored.to_string()),
        ("errors A / B", format!("{} / {}", r.errors_a, r.errors_b)),
        ("empty A / B", format!("{} / {}", r.empty_a, r.empty_b)),
        ("correct A", pct(r.correct_a, r.scored)),
        ("correct B", pct(r.correct_b, r.scored)),
        ("both ✓", r.both_correct.to_string()),
        ("both ✗", r.both_wrong.to_string()),
        ("A only", r.a_only.to_string()),
        ("B only", r.b_only.to_string()),
        ("McNemar exact p", format!("{:.3}", r.mcnemar_p)),
        (
            "predictions identical",
            pct(r.predictions_identical, r.items),
        ),
        (
            "responses byte-identical",
            pct(r.responses_identical, r.items),
        ),
    ];
    for (k, v) in rows {
        out.push_str(&format!("{k:<26}{v}\n"));
    }
    out
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let read = |p: &std::path::Path| -> anyhow::Result<Vec<Record>> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        Ok(record::read(&text)
            .with_context(|| p.display().to_string())?
            .0)
    };
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let scorer = args.scorer.as_deref().map(str::parse).transpose()?;
    let rep = compare(&a, &b, scorer.as_ref())?;
    if let Some(png) = &args.plot {
        super::plot::draw(png, &rep, &a, &b)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print!("{}", render(&rep));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
