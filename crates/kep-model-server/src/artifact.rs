//! Model files as their frameworks save them (CONTRACT §3): what an uploaded file is, read
//! from its bytes, and a SavedModel archive unpacked into its versions without ever
//! writing outside the folder it is given.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::{Component, Path, PathBuf};

use crate::model::ModelError;

/// What a model file is, by its first bytes and, for a zip archive, its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// A protobuf message: an ONNX model or a TensorFlow frozen GraphDef, which
    /// [`crate::model::inspect`] tells apart.
    Protobuf,
    /// A SavedModel in a `.tar.gz`/`.tgz` archive.
    SavedModelTar,
    /// A SavedModel in a `.zip` archive.
    SavedModelZip,
    /// A TorchScript file: `torch.jit.save` writes a zip archive with the module's pickled
    /// data (`<name>/data.pkl`) and its code (`<name>/code/`).
    TorchScript,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZIP_MAGIC: [u8; 4] = *b"PK\x03\x04";

/// An unpacked archive may hold at most this many times the archive's own size (plus
/// [`UNPACK_SLACK_BYTES`]): a SavedModel's variables barely compress, a zip bomb does.
const UNPACK_RATIO: u64 = 20;
const UNPACK_SLACK_BYTES: u64 = 1 << 20;
/// And at most this many entries.
const MAX_ENTRIES: usize = 100_000;

impl Artifact {
    pub fn of(path: &Path) -> Result<Artifact, ModelError> {
        let mut file = File::open(path).map_err(unreadable)?;
        let mut head = [0u8; 4];
        let n = read_up_to(&mut file, &mut head).map_err(unreadable)?;
        if head[..n].starts_with(&GZIP_MAGIC) {
            return Ok(Artifact::SavedModelTar);
        }
        if !head[..n].starts_with(&ZIP_MAGIC) {
            return Ok(Artifact::Protobuf);
        }
        file.rewind().map_err(unreadable)?;
        let zip = zip::ZipArchive::new(file).map_err(|e| bad_archive(&e))?;
        let names: Vec<String> = (zip.file_names())
            .map(|n| n.map(|n| n.into_owned()))
            .collect::<Result<_, _>>()
            .map_err(|e| bad_archive(&e))?;
        let torchscript = names.iter().any(|n| n.ends_with("/data.pkl"))
            && names.iter().any(|n| n.contains("/code/"));
        Ok(if torchscript {
            Artifact::TorchScript
        } else {
            Artifact::SavedModelZip
        })
    }

    pub fn is_saved_model(self) -> bool {
        matches!(self, Artifact::SavedModelTar | Artifact::SavedModelZip)
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            read => n += read,
        }
    }
    Ok(n)
}

fn unreadable(e: io::Error) -> ModelError {
    ModelError::Unreadable(e.to_string())
}

fn bad_archive(e: &dyn std::fmt::Display) -> ModelError {
    ModelError::Unreadable(format!("the archive cannot be read: {e}"))
}

/// One version of a SavedModel: its number and the folder holding its `saved_model.pb`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedModelVersion {
    pub version: u64,
    pub dir: PathBuf,
}

/// Unpacks a SavedModel archive into `into` (an empty folder) and finds its versions,
/// ascending: one SavedModel (version 1), or TF Serving's base path of numbered versions
/// (`1/saved_model.pb`) or Triton's (`1/model.savedmodel/saved_model.pb`), at the archive's
/// root or under its one top-level folder. Entries that would land outside `into` (`..`,
/// absolute paths) and links are refused, as is an archive that unpacks far larger than
/// itself.
pub fn unpack_saved_model(
    archive: &Path,
    kind: Artifact,
    into: &Path,
) -> Result<Vec<SavedModelVersion>, ModelError> {
    let size = std::fs::metadata(archive).map_err(unreadable)?.len();
    let mut budget = Budget {
        bytes: size
            .saturating_mul(UNPACK_RATIO)
            .saturating_add(UNPACK_SLACK_BYTES),
        entries: MAX_ENTRIES,
    };
    let file = File::open(archive).map_err(unreadable)?;
    match kind {
        Artifact::SavedModelTar => unpack_tar(file, into, &mut budget)?,
        Artifact::SavedModelZip => unpack_zip(file, into, &mut budget)?,
        _ => {
            return Err(ModelError::Unreadable(
                "the file is not a SavedModel archive".into(),
            ));
        }
    }
    versions(into)
}

/// What an archive may still unpack.
struct Budget {
    bytes: u64,
    entries: usize,
}

impl Budget {
    fn entry(&mut self) -> Result<(), ModelError> {
        self.entries = self.entries.checked_sub(1).ok_or_else(|| {
            ModelError::Unreadable(format!("the archive holds over {MAX_ENTRIES} entries"))
        })?;
        Ok(())
    }

    /// Copies `from` to a new file at `to`, within the budget.
    fn copy(&mut self, from: &mut impl Read, to: &Path) -> Result<(), ModelError> {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(unreadable)?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(to)
            .map_err(|e| ModelError::Unreadable(format!("{}: {e}", to.display())))?;
        let copied = io::copy(&mut from.take(self.bytes + 1), &mut out).map_err(unreadable)?;
        self.bytes = self.bytes.checked_sub(copied).ok_or_else(|| {
            ModelError::Unreadable(
                "the archive unpacks to far more than its own size: refused".into(),
            )
        })?;
        Ok(())
    }
}

/// `name` as a path under `into`, or an error where it would leave it.
fn inside(into: &Path, name: &Path) -> Result<PathBuf, ModelError> {
    let mut path = into.to_path_buf();
    for part in name.components() {
        match part {
            Component::Normal(p) => path.push(p),
            Component::CurDir => {}
            _ => {
                return Err(ModelError::Unreadable(format!(
                    "the archive's entry {} leaves its folder: refused",
                    name.display()
                )));
            }
        }
    }
    Ok(path)
}

fn link_refused(name: &Path) -> ModelError {
    ModelError::Unreadable(format!(
        "the archive's entry {} is a link: links are refused",
        name.display()
    ))
}

fn unpack_tar(file: File, into: &Path, budget: &mut Budget) -> Result<(), ModelError> {
    use tar::EntryType;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().map_err(|e| bad_archive(&e))? {
        let mut entry = entry.map_err(|e| bad_archive(&e))?;
        budget.entry()?;
        let name = entry.path().map_err(|e| bad_archive(&e))?.into_owned();
        let kind = entry.header().entry_type();
        match kind {
            EntryType::Directory => {
                std::fs::create_dir_all(inside(into, &name)?).map_err(unreadable)?;
            }
            EntryType::Regular | EntryType::Continuous => {
                budget.copy(&mut entry, &inside(into, &name)?)?;
            }
            EntryType::Symlink | EntryType::Link => return Err(link_refused(&name)),
            // Metadata of the archive itself (pax global headers): nothing to write.
            EntryType::XGlobalHeader | EntryType::XHeader => {}
            other => {
                return Err(ModelError::Unreadable(format!(
                    "the archive's entry {} is a {other:?}: only files and folders are read",
                    name.display()
                )));
            }
        }
    }
    Ok(())
}

fn unpack_zip(file: File, into: &Path, budget: &mut Budget) -> Result<(), ModelError> {
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad_archive(&e))?;
    for i in 0..archive.len() {
        budget.entry()?;
        let mut entry = archive.by_index(i).map_err(|e| bad_archive(&e))?;
        let name = PathBuf::from(entry.name().map_err(|e| bad_archive(&e))?.into_owned());
        if entry.is_symlink() {
            return Err(link_refused(&name));
        }
        let path = inside(into, &name)?;
        if entry.is_dir() {
            std::fs::create_dir_all(&path).map_err(unreadable)?;
        } else {
            budget.copy(&mut entry, &path)?;
        }
    }
    Ok(())
}

const SAVED_MODEL_PB: &str = "saved_model.pb";
/// Triton's folder for a SavedModel inside a version folder.
const TRITON_SAVED_MODEL: &str = "model.savedmodel";

/// The versions under an unpacked archive's root, or under its one top-level folder.
fn versions(root: &Path) -> Result<Vec<SavedModelVersion>, ModelError> {
    let found = versions_at(root)?;
    if !found.is_empty() {
        return Ok(found);
    }
    let entries = children(root)?;
    if let [only] = entries.as_slice()
        && only.is_dir()
    {
        let found = versions_at(only)?;
        if !found.is_empty() {
            return Ok(found);
        }
    }
    Err(ModelError::Unreadable(
        "the archive holds no saved_model.pb: at its root, under its one top-level folder, or in numbered version folders"
            .into(),
    ))
}

fn children(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(unreadable)?;
    entries.sort();
    Ok(entries)
}

/// A SavedModel at `dir` itself is version 1; else each numbered folder holding one (TF
/// Serving's layout, or Triton's) is that version; other folders are ignored, as TF
/// Serving ignores them.
fn versions_at(dir: &Path) -> Result<Vec<SavedModelVersion>, ModelError> {
    if dir.join(SAVED_MODEL_PB).is_file() {
        return Ok(vec![SavedModelVersion {
            version: 1,
            dir: dir.to_path_buf(),
        }]);
    }
    let mut found = Vec::new();
    for child in children(dir)? {
        let Some(version) = (child.file_name())
            .and_then(|n| n.to_str())
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let at = [child.clone(), child.join(TRITON_SAVED_MODEL)]
            .into_iter()
            .find(|d| d.join(SAVED_MODEL_PB).is_file());
        if let Some(dir) = at {
            found.push(SavedModelVersion { version, dir });
        }
    }
    found.sort_by_key(|v| v.version);
    Ok(found)
}

#[cfg(test)]
mod tests;
