//! `--profile-trace`: every tracing span of a run recorded into a Chrome trace file.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gnn4c_distributed::World;

/// Records every tracing span into a Chrome trace at `path` until dropped; the file appears
/// (atomically renamed) when the guard is dropped.
pub(crate) struct ProfileTrace {
    guard: Option<tracing_chrome::FlushGuard>,
    tmp: PathBuf,
    path: PathBuf,
}

impl ProfileTrace {
    pub(crate) fn start(path: &Path, world: &World) -> anyhow::Result<ProfileTrace> {
        use tracing_subscriber::layer::SubscriberExt;
        let path = if world.is_distributed() {
            PathBuf::from(format!("{}.rank{}", path.display(), world.rank()))
        } else {
            path.to_path_buf()
        };
        gnn4c_data::check_output_path(&path, true)?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".tmp-{}.{name}", std::process::id()));
        let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
            .file(&tmp)
            .include_args(true)
            .build();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .context("installing the trace recorder")?;
        Ok(ProfileTrace {
            guard: Some(guard),
            tmp,
            path,
        })
    }
}

impl Drop for ProfileTrace {
    fn drop(&mut self) {
        drop(self.guard.take()); // flushes and closes the file
        if std::fs::rename(&self.tmp, &self.path).is_ok() {
            let _ = writeln!(
                std::io::stdout(),
                "wrote the trace {} (open in https://ui.perfetto.dev or chrome://tracing)",
                self.path.display()
            );
        }
        if let Some(mb) = crate::device::peak_rss_mb() {
            let _ = writeln!(std::io::stdout(), "peak resident memory: {mb:.0} MB");
        }
    }
}
