//! Writing an export file: the `export` command.

use super::{
    for_each_row, ExportEnd, ExportError, ExportHeader, RowSums, EXPORT_FORMAT, EXPORT_VERSION,
};
use nqueens_core::JobList;
use nqueens_store::Store;
use std::io::{BufWriter, Write};
use std::path::Path;

/// What [`export_state`] wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The header written.
    pub header: ExportHeader,
    /// The last line written.
    pub end: ExportEnd,
    /// Bytes written (compressed, for a `.gz` file).
    pub bytes: u64,
}

/// Writes the export of the run in the state file `state` (read-only: safe beside a running
/// coordinator) to `to`, through a temporary file beside it renamed at the end (removed if
/// anything fails). `to` may not be the state file or one of its companions (`-wal`, `-shm`,
/// `.lock`), and may not exist unless `force`.
pub fn export_state(
    state: &Path,
    to: &Path,
    protocol_major: u32,
    force: bool,
) -> Result<Exported, ExportError> {
    refuse_target(state, to, force)?;
    let (store, list) = crate::verify::open_with_list(state, protocol_major)?;
    let io = |source| ExportError::Io { path: to.to_path_buf(), source };
    let name = to
        .file_name()
        .ok_or_else(|| ExportError::Refused { path: to.into(), reason: "names no file".into() })?;
    let tmp = to.with_file_name(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io)?;
    let written = write_file(&store, &list, file, to).and_then(|(header, end)| {
        refuse_target(state, to, force)?;
        std::fs::rename(&tmp, to).map_err(io)?;
        Ok((header, end))
    });
    let (header, end) = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    let bytes = std::fs::metadata(to).map_err(io)?.len();
    Ok(Exported { header, end, bytes })
}

/// Refuses to write an export over the state file (or its companions), or over any existing
/// file unless `force`.
fn refuse_target(state: &Path, to: &Path, force: bool) -> Result<(), ExportError> {
    use std::os::unix::fs::MetadataExt;
    let refused = |reason: String| Err(ExportError::Refused { path: to.into(), reason });
    let Ok(existing) = std::fs::metadata(to) else { return Ok(()) };
    let same = |path: &Path| {
        std::fs::metadata(path)
            .is_ok_and(|m| (m.dev(), m.ino()) == (existing.dev(), existing.ino()))
    };
    if same(state) {
        return refused(format!("it is the state file {}, left untouched", state.display()));
    }
    for suffix in ["-wal", "-shm", ".lock"] {
        let mut companion = state.as_os_str().to_owned();
        companion.push(suffix);
        if same(Path::new(&companion)) {
            return refused(format!("it is the state file's {suffix} file, left untouched"));
        }
    }
    if !force {
        return refused("it exists, left untouched (--force replaces it)".into());
    }
    Ok(())
}

/// Writes the export to `file`, compressed or not, to the end (the gzip trailer included) and
/// onto the disk.
fn write_file(
    store: &Store,
    list: &JobList,
    file: std::fs::File,
    to: &Path,
) -> Result<(ExportHeader, ExportEnd), ExportError> {
    let io = |source| ExportError::Io { path: to.to_path_buf(), source };
    let mut out = BufWriter::new(file);
    let written = if is_gz(to) {
        let mut encoder = flate2::write::GzEncoder::new(&mut out, flate2::Compression::new(6));
        let written = write_export(store, list, &mut encoder, to)?;
        encoder.finish().map_err(io)?;
        written
    } else {
        write_export(store, list, &mut out, to)?
    };
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(written)
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Writes the export of `store`'s run, whose job list is `list`, to `out`.
fn write_export(
    store: &Store,
    list: &JobList,
    out: &mut dyn Write,
    to: &Path,
) -> Result<(ExportHeader, ExportEnd), ExportError> {
    let io = |source| ExportError::Io { path: to.to_path_buf(), source };
    let header = ExportHeader {
        format: EXPORT_FORMAT.into(),
        version: EXPORT_VERSION,
        n: list.n,
        fingerprint: store.meta().fingerprint.clone(),
        jobs: list.jobs.len() as u64,
        target_jobs: list.params.target_for(list.n),
        depth: list.depth as u64,
    };
    writeln!(out, "{}", serde_json::to_string(&header).expect("serializes")).map_err(io)?;
    let mut sums = RowSums::new(list.n)?;
    for_each_row(store, &list.jobs, |row| {
        let line = sums.add(row)?;
        out.write_all(line.as_bytes()).map_err(io)
    })?;
    let end = sums.end(header.jobs)?;
    writeln!(out, "{}", serde_json::to_string(&end).expect("serializes")).map_err(io)?;
    out.flush().map_err(io)?;
    Ok((header, end))
}
