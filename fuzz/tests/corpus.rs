//! Replays every fuzz target's committed corpus (`fuzz/corpus/<target>/`)
//! through the same function the fuzzer runs, then a bounded number of
//! mutations of it from a fixed seed, so plain `cargo test` (the README's
//! test command) keeps every input the fuzzer ever kept, and explores a
//! little on stable Rust without the fuzzer. A failing input is written to
//! the test's output directory with the command to reproduce it.

use std::path::{Path, PathBuf};

use skewscope_fuzz::TARGETS;

/// Mutated inputs per target: about a second in a debug build for all.
const MUTATIONS: usize = 2_000;
/// The mutation seed; `SKEWSCOPE_FUZZ_SEED` picks another.
const DEFAULT_SEED: u64 = 0x5ce5_5c0e;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let bytes = std::fs::read(&path).expect("corpus file");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Runs `input` through `run`, and on a panic says which input and how to
/// run it again before failing.
fn check(target: &str, run: fn(&[u8]), input: &[u8], origin: &str) {
    if std::panic::catch_unwind(|| run(input)).is_err() {
        let out = std::env::temp_dir().join(format!("skewscope-fuzz-{target}-failing"));
        std::fs::write(&out, input).expect("write the failing input");
        panic!(
            "fuzz target {target} failed on {origin}; the input is in {} \
             (reproduce: cd fuzz/libfuzzer && cargo fuzz run {target} {})",
            out.display(),
            out.display()
        );
    }
}

#[test]
fn every_target_has_a_corpus() {
    for (target, _) in TARGETS {
        assert!(
            !corpus(target).is_empty(),
            "{target}: no corpus (cargo run -p skewscope-fuzz --example write-seeds)"
        );
    }
}

#[test]
fn the_corpus_replays_clean() {
    for (target, run) in TARGETS {
        for (path, bytes) in corpus(target) {
            check(target, *run, &bytes, &path.display().to_string());
        }
    }
}

#[test]
fn mutations_of_the_corpus_hold_the_invariants() {
    let seed = std::env::var("SKEWSCOPE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let mut rng = fastrand::Rng::with_seed(seed);
    for (target, run) in TARGETS {
        let inputs: Vec<Vec<u8>> = corpus(target).into_iter().map(|(_, b)| b).collect();
        for i in 0..MUTATIONS {
            let base = &inputs[rng.usize(..inputs.len())];
            let other = &inputs[rng.usize(..inputs.len())];
            let input = mutate(&mut rng, base, other);
            check(
                target,
                *run,
                &input,
                &format!("mutation {i} of seed {seed}"),
            );
        }
    }
}

/// A few of libFuzzer's kinds of mutation: flip, set, insert, erase,
/// interesting values, and splicing two inputs.
fn mutate(rng: &mut fastrand::Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let at = rng.usize(..=out.len());
        match rng.u8(..6) {
            0 if at < out.len() => out[at] ^= 1 << rng.u8(..8),
            1 if at < out.len() => out[at] = rng.u8(..),
            2 => {
                let n = rng.usize(1..=8);
                out.splice(at..at, (0..n).map(|_| rng.u8(..)));
            }
            3 if at < out.len() => {
                let end = (at + rng.usize(1..=16)).min(out.len());
                out.drain(at..end);
            }
            4 if at + 4 <= out.len() => {
                let v: [u8; 4] = *[[0xff; 4], [0; 4], [0x7f, 0xff, 0xff, 0xff], [0x80, 0, 0, 0]]
                    .get(rng.usize(..4))
                    .expect("in range");
                out[at..at + 4].copy_from_slice(&v);
            }
            _ => {
                let from = rng.usize(..=other.len());
                out.truncate(at);
                out.extend_from_slice(&other[from..]);
            }
        }
    }
    out
}
