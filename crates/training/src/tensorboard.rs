//! TensorBoard event files: what a run writes so that `tensorboard --logdir runs/` shows it.
//!
//! The format is TensorFlow's record file of `Event` protocol buffers: each record is its
//! length (u64, little-endian), the length's masked CRC-32C, the bytes, and their masked
//! CRC-32C. An event holds a wall time, a step and one of: the file version (the first
//! record), a `Summary` of scalars (`simple_value`, as PyTorch's `SummaryWriter` writes them),
//! or a `SessionLog`. The hyperparameters go in summaries of the `hparams` plugin
//! (`HParamsPluginData`: the session's start and its end). The messages are
//! encoded here, field by field, from TensorBoard's `.proto` files (`event.proto`,
//! `summary.proto`, `plugins/hparams/{api,plugin_data}.proto`); nothing else is needed to read
//! them back than TensorBoard itself.
//!
//! A resumed run opens a new file in the same folder that starts with `SessionLog.START` at the
//! step after its checkpoint: TensorBoard then drops what the interrupted run logged past the
//! checkpoint, so each step appears once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::TrainingError;
use crate::history::{EpochRecord, MetricsRecord};

/// A hyperparameter's value as the `hparams` plugin shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum HParam {
    /// A number.
    Number(f64),
    /// A string.
    Text(String),
    /// A flag.
    Flag(bool),
}

/// One TensorBoard event file, appended to record by record (each record written whole and
/// flushed, so that a reader following the file never sees half of one).
pub struct EventWriter {
    path: PathBuf,
    file: std::fs::File,
    /// The model's outputs' names, for the per-output AUCs' tags.
    outputs: Vec<String>,
}

impl EventWriter {
    /// A new event file in `dir` (created if missing), named as TensorFlow names them
    /// (`events.out.tfevents.<seconds>.<host>.<pid>.<n>`), sorting after those already there;
    /// `outputs` name the model's outputs in the per-output AUCs' tags.
    pub fn create(dir: &Path, outputs: Vec<String>) -> Result<EventWriter, TrainingError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| TrainingError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // After every file already there, so that a resumed run's file is read after the
        // interrupted one's (TensorBoard reads a folder's files in name order).
        let latest = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("events.out.tfevents.")?
                    .split('.')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .max();
        let secs = (now().floor() as u64).max(latest.map_or(0, |s| s + 1));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().replace(['/', '\\'], "_"))
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let pid = std::process::id();
        let (path, file) = (0u32..)
            .map(|n| dir.join(format!("events.out.tfevents.{secs:010}.{host}.{pid}.{n}")))
            .find_map(|path| {
                match std::fs::OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .open(&path)
                {
                    Ok(file) => Some(Ok((path, file))),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
                    Err(e) => Some(Err(io(&path)(e))),
                }
            })
            .expect("some file number is free")?;
        let mut writer = EventWriter {
            path,
            file,
            outputs,
        };
        let mut version = Proto::default();
        version.string(3, "brain.Event:2");
        writer.event(0, &version)?;
        Ok(writer)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Scalars at `step`, under their tags (non-finite values are left out: TensorBoard has no
    /// place for an undefined AUC).
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> Result<(), TrainingError> {
        let mut summary = Proto::default();
        for (tag, v) in values.iter().filter(|(_, v)| v.is_finite()) {
            let mut value = Proto::default();
            value.string(1, tag);
            value.f32(2, *v as f32);
            summary.message(1, &value);
        }
        let mut event = Proto::default();
        event.message(5, &summary);
        self.event(step, &event)
    }

    /// The training at optimiser step `step`: the global batch's loss, the learning rate and
    /// the events per second since the last such line.
    pub fn step(
        &mut self,
        step: u64,
        loss: f64,
        lr: f64,
        events_per_s: f64,
    ) -> Result<(), TrainingError> {
        self.scalars(
            step,
            &[
                ("train/loss".into(), loss),
                ("train/lr".into(), lr),
                ("train/events_per_s".into(), events_per_s),
            ],
        )
    }

    /// An epoch's history line, at the step it ended on (`epoch/…` tags).
    pub fn epoch(&mut self, r: &EpochRecord) -> Result<(), TrainingError> {
        let mut values = vec![
            ("epoch/epoch".into(), r.epoch as f64),
            ("epoch/lr".into(), r.lr),
            ("epoch/train_loss".into(), r.train_loss),
            ("epoch/val_objective".into(), r.val_objective),
            ("epoch/events_per_s".into(), r.events_per_s),
            ("epoch/epoch_s".into(), r.epoch_s),
        ];
        if let Some(t) = &r.train {
            let mut train = self.metrics("epoch/train_", t);
            // The training split's loss is `train_loss`, over every batch.
            train.retain(|(tag, _)| tag != "epoch/train_loss");
            values.extend(train);
        }
        values.extend(self.metrics("epoch/val_", &r.val));
        self.scalars(r.global_step, &values)
    }

    /// The best model's test metrics (`test/…` tags) at the run's last step.
    pub fn test(&mut self, step: u64, m: &MetricsRecord) -> Result<(), TrainingError> {
        let values = self.metrics("test/", m);
        self.scalars(step, &values)
    }

    /// `m`'s values under `prefix`: loss, accuracy, the macro AUCs, and each output's AUC.
    fn metrics(&self, prefix: &str, m: &MetricsRecord) -> Vec<(String, f64)> {
        let undefined = f64::NAN;
        let mut v = vec![
            (format!("{prefix}loss"), m.loss),
            (format!("{prefix}accuracy"), m.accuracy),
            (
                format!("{prefix}auc_macro"),
                m.auc_macro.unwrap_or(undefined),
            ),
            (
                format!("{prefix}auc_macro_weighted"),
                m.auc_macro_weighted.unwrap_or(undefined),
            ),
        ];
        for (i, auc) in m.auc.iter().enumerate() {
            let name = self
                .outputs
                .get(i)
                .cloned()
                .unwrap_or_else(|| i.to_string());
            v.push((format!("{prefix}auc/{name}"), auc.unwrap_or(undefined)));
        }
        v
    }

    /// `SessionLog.START` at `step`: TensorBoard forgets what earlier files logged from `step` on.
    pub fn restart(&mut self, step: u64) -> Result<(), TrainingError> {
        let mut log = Proto::default();
        log.varint(1, 1); // SessionLog.START
        let mut event = Proto::default();
        event.message(7, &log);
        self.event(step, &event)
    }

    /// The `hparams` plugin's start of this session, with the run's hyperparameters.
    /// TensorBoard makes the experiment (the table's columns) from every run's session: a
    /// sweep's runs show side by side, the settings that differ among them first.
    pub fn hparams_start(&mut self, hparams: &[(String, HParam)]) -> Result<(), TrainingError> {
        let mut start = Proto::default();
        for (name, value) in hparams {
            let mut v = Proto::default();
            match value {
                HParam::Number(x) => v.f64(2, *x),
                HParam::Text(s) => v.string(3, s),
                HParam::Flag(b) => v.varint(4, u64::from(*b)),
            }
            let mut entry = Proto::default();
            entry.string(1, name);
            entry.message(2, &v);
            start.message(1, &entry);
        }
        start.f64(5, now());
        self.hparams_summary("_hparams_/session_start_info", 3, &start)
    }

    /// The `hparams` plugin's end of this session, a success.
    pub fn hparams_end(&mut self) -> Result<(), TrainingError> {
        let mut end = Proto::default();
        end.varint(1, 1); // Status.STATUS_SUCCESS
        end.f64(2, now());
        self.hparams_summary("_hparams_/session_end_info", 4, &end)
    }

    /// A summary of the `hparams` plugin holding `data` as field `field` of `HParamsPluginData`.
    fn hparams_summary(
        &mut self,
        tag: &str,
        field: u32,
        data: &Proto,
    ) -> Result<(), TrainingError> {
        let mut content = Proto::default();
        content.varint(1, 0); // version
        content.message(field, data);
        let mut plugin = Proto::default();
        plugin.string(1, "hparams");
        plugin.bytes(2, &content.0);
        let mut metadata = Proto::default();
        metadata.message(1, &plugin);
        let mut value = Proto::default();
        value.string(1, tag);
        value.message(9, &metadata);
        let mut summary = Proto::default();
        summary.message(1, &value);
        let mut event = Proto::default();
        event.message(5, &summary);
        self.event(0, &event)
    }

    /// One event: `body` (its other fields) after the wall time and step.
    fn event(&mut self, step: u64, body: &Proto) -> Result<(), TrainingError> {
        let mut event = Proto::default();
        event.f64(1, now());
        event.varint(2, step);
        event.0.extend_from_slice(&body.0);
        let record = record(&event.0);
        self.file
            .write_all(&record)
            .and_then(|()| self.file.flush())
            .map_err(|source| TrainingError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

/// Seconds since the Unix epoch.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `data` framed as a TFRecord: length, its masked CRC, the data, its masked CRC.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// TFRecord's masked CRC-32C.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78), a byte at a time through a table.
fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x82f6_3b78
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// A protocol-buffer message being encoded: fields appended in the order written.
#[derive(Default)]
struct Proto(Vec<u8>);

impl Proto {
    fn key(&mut self, field: u32, wire: u8) {
        self.raw_varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn varint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.raw_varint(v);
    }

    fn f64(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn f32(&mut self, field: u32, v: f32) {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.raw_varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn message(&mut self, field: u32, m: &Proto) {
        self.bytes(field, &m.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_gives_the_standard_check_value() {
        // The CRC catalogue's check value of CRC-32/ISCSI (CRC-32C) for "123456789".
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn a_record_frames_its_data_with_the_length_and_both_checksums() {
        let r = record(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(&r[..8], &3u64.to_le_bytes());
        assert_eq!(&r[8..12], &masked_crc(&3u64.to_le_bytes()).to_le_bytes());
        assert_eq!(&r[12..15], b"abc");
        assert_eq!(&r[15..], &masked_crc(b"abc").to_le_bytes());
    }

    #[test]
    fn varints_and_fields_encode_as_protocol_buffers_do() {
        // The protocol-buffer documentation's example: field 1 = 150 is 08 96 01.
        let mut p = Proto::default();
        p.varint(1, 150);
        assert_eq!(p.0, [0x08, 0x96, 0x01]);
        let mut s = Proto::default();
        s.string(2, "testing");
        assert_eq!(s.0, b"\x12\x07testing");
    }

    #[test]
    fn files_in_one_folder_get_distinct_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = EventWriter::create(dir.path(), Vec::new()).expect("first");
        let b = EventWriter::create(dir.path(), Vec::new()).expect("second");
        assert_ne!(a.path(), b.path());
        assert!(
            a.path()
                .file_name()
                .is_some_and(|n| { n.to_string_lossy().starts_with("events.out.tfevents.") })
        );
    }
}
