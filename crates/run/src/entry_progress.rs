//! The progress bar of a read over a dataset's entries (`preprocess`, `scan`): how far the
//! events handed on have come through every sample's files, and the network's rate where files
//! are remote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use gnn4c_data::{DatasetConfig, OnBadFile, SampleConfig, open_tree};
use gnn4c_events::EventSample;
use gnn4c_training::{ProgressBar, progress_bar};

/// A progress bar over the entries a dataset config reads (every sample's files, within the
/// sample's entry range), advanced from the events handed on: their file and entry say how far
/// reading has come.
pub struct EntryProgress {
    bar: ProgressBar,
    /// Entries to read, per file.
    entries: BTreeMap<PathBuf, u64>,
    /// Entries of the files finished.
    done: u64,
    /// The file being read and the sample's first entry.
    file: Option<Arc<Path>>,
    entry_start: u64,
    /// When the bar began, and the bytes received from remote files then.
    network: (Instant, u64),
}

impl EntryProgress {
    /// A bar for the `samples` of `cfg` (hidden, and no file opened, unless `show`).
    pub fn new<'a>(
        show: bool,
        cfg: &DatasetConfig,
        samples: impl Iterator<Item = &'a SampleConfig>,
        base: &Path,
        what: &str,
    ) -> anyhow::Result<Self> {
        let mut entries = BTreeMap::new();
        if show {
            for s in samples {
                for (path, n) in sample_entries(cfg, s, base)? {
                    let stop = s.entry_stop.unwrap_or(u64::MAX).min(n);
                    entries.insert(path, stop.saturating_sub(s.entry_start));
                }
            }
        }
        let total = entries.values().sum();
        let mut progress = EntryProgress::with_total(show, total, what);
        progress.entries = entries;
        Ok(progress)
    }

    /// A bar over `total` entries, advanced with [`EntryProgress::advance`].
    pub fn with_total(show: bool, total: u64, what: &str) -> Self {
        EntryProgress {
            bar: progress_bar(show, total, what, "entries"),
            entries: BTreeMap::new(),
            done: 0,
            file: None,
            entry_start: 0,
            network: (Instant::now(), gnn4c_data::network_bytes_received()),
        }
    }

    /// Moves the bar to `position` entries, saying the rate of bytes received from remote
    /// files since the bar began, when there are any.
    fn show(&self, position: u64) {
        let (start, bytes) = self.network;
        let received = gnn4c_data::network_bytes_received().saturating_sub(bytes);
        let secs = start.elapsed().as_secs_f64();
        if received > 0 && secs > 0.0 {
            self.bar.set_message(format!(
                ", {:.1} MB/s from the network",
                received as f64 / secs / 1e6
            ));
        }
        self.bar.set_position(position);
    }

    /// Reading of `sample` begins.
    pub fn start_sample(&mut self, sample: &SampleConfig) {
        self.entry_start = sample.entry_start;
    }

    /// `events` were read (skipped entries in between count as read).
    pub fn saw(&mut self, events: &[EventSample]) {
        let Some(last) = events.last() else {
            return;
        };
        if self.file.as_ref() != Some(&last.id.source_file) {
            self.finish_file();
            self.file = Some(last.id.source_file.clone());
        }
        let in_file = (last.id.entry + 1).saturating_sub(self.entry_start);
        self.show(self.done + in_file);
    }

    /// The sample's files are all read.
    pub fn end_sample(&mut self) {
        self.finish_file();
        self.show(self.done);
    }

    fn finish_file(&mut self) {
        if let Some(f) = self.file.take() {
            self.done += self.entries.get(f.as_ref()).copied().unwrap_or(0);
        }
    }

    /// `entries` more were read (where files are read in parallel).
    pub fn advance(&mut self, entries: u64) {
        self.done += entries;
        self.show(self.done);
    }

    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// Every file of sample `s` with the number of entries its tree holds (a file that does not
/// open left out when the dataset skips bad files).
fn sample_entries(
    cfg: &DatasetConfig,
    s: &SampleConfig,
    base: &Path,
) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for path in cfg.sample_files(s, base)? {
        match open_tree(&path, cfg.tree_of(s)) {
            Ok(tree) => out.push((path, tree.entries())),
            Err(_) if cfg.on_bad_file == OnBadFile::Skip => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}
