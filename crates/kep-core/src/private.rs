//! Folders and files only kep's user may open: the data dir and every folder in it 0700,
//! every file 0600, set where each is made rather than left to the umask, so that the
//! services run by a library user (a test's platform) are covered too. `kep serve` also
//! runs under umask 077 for what libraries make on their own.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Makes `path` and any missing parents, each 0700 (one already there is left as it is).
pub fn dir(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// [`dir`], off the async runtime's threads.
pub async fn dir_async(path: &Path) -> io::Result<()> {
    tokio::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
        .await
}

/// Opens for writing, creating the file 0600 if it is not there; add `truncate` or
/// `append` as the writer needs.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true).mode(FILE_MODE);
    o
}

/// Creates (or empties) the file at `path`, 0600.
pub async fn create_async(path: &Path) -> io::Result<tokio::fs::File> {
    let mut o = options();
    o.truncate(true);
    tokio::fs::OpenOptions::from(o).open(path).await
}

/// Writes `content` as the whole file at `path`, 0600.
pub fn write(path: &Path, content: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    options().truncate(true).open(path)?.write_all(content)
}

/// [`write`], off the async runtime's threads.
pub async fn write_async(path: &Path, content: &[u8]) -> io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let mut file = create_async(path).await?;
    file.write_all(content).await?;
    file.flush().await
}

/// Makes the folder at `path` (made if missing) 0700 when it lets its group or others in:
/// a data dir made before kep made it private. Whether it had to.
pub fn restrict(path: &Path) -> io::Result<bool> {
    dir(path)?;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 == 0 {
        return Ok(false);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o077))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn made_private_whatever_the_umask() {
        let tmp = tempfile::tempdir().unwrap();
        let nested = tmp.path().join("a/b");
        dir(&nested).unwrap();
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&nested), 0o700);
        let file = nested.join("f");
        write(&file, b"x").unwrap();
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn an_open_folder_is_closed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(restrict(tmp.path()).unwrap());
        assert_eq!(mode(tmp.path()), 0o700);
        assert!(!restrict(tmp.path()).unwrap());
    }
}
