//! Where a run that makes its own logs (the demo, a sweep) keeps them: the
//! directory `--keep` names, created if need be, or a temporary one removed
//! when the run is done.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The directory to write in, and the temporary directory to hold until
/// the run ends (`None` when `keep` was given: nothing to remove).
pub fn kept_or_temporary(
    keep: Option<&Path>,
) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    match keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Ok((dir.to_owned(), None))
        }
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary directory")?;
            Ok((t.path().to_owned(), Some(t)))
        }
    }
}
