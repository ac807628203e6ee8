//! Reading a file that somebody else controls: a PROJECT.md, a config, a skill, a role, a file
//! a model asked for. Only a regular file is read: a FIFO would block the reader forever and
//! `/dev/zero` would fill its memory, and either can sit behind a symlink with a harmless name.
//! The file is opened without blocking (`O_NONBLOCK`, so opening a FIFO cannot hang), checked
//! on the open handle (no swap between check and read), and read up to a cap, never past it.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Nothing is at the path.
    #[error("does not exist")]
    NotFound,
    /// The path names something other than a regular file.
    #[error("is not a regular file (a directory, FIFO, device or socket)")]
    NotRegular,
    /// The path is a symlink and the caller refuses to follow one.
    #[error("is a symbolic link, which is not followed here: make it a regular file")]
    Symlink,
    /// The file is larger than the caller reads.
    #[error("is {size} bytes, over the {cap}-byte limit")]
    TooLarge {
        /// The file's size when opened, in bytes.
        size: u64,
        /// The most the caller reads, in bytes.
        cap: u64,
    },
    /// Opening, inspecting or reading the file failed otherwise (permissions, I/O).
    #[error("{0}")]
    Io(std::io::Error),
}

/// What was read: the first bytes (at most the cap) and the file's size when opened.
pub struct Capped {
    /// The file's first bytes, at most the cap.
    pub bytes: Vec<u8>,
    /// The file's size in bytes when it was opened.
    pub size: u64,
}

impl Capped {
    /// Whether the file was longer than what was read.
    pub fn truncated(&self) -> bool {
        (self.bytes.len() as u64) < self.size
    }
}

/// Whether a symlink is followed to open a file: never for what is read as configuration or
/// policy from a folder a model's commands may have written (DESIGN.md §12).
#[derive(Clone, Copy, PartialEq)]
enum Links {
    Follow,
    Refuse,
}

fn open_regular(path: &Path) -> Result<(File, u64), ReadError> {
    open_file(path, Links::Follow)
}

fn open_file(path: &Path, links: Links) -> Result<(File, u64), ReadError> {
    let mut flags = nix::libc::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => ReadError::NotFound,
            _ if e.raw_os_error() == Some(nix::libc::ELOOP) && links == Links::Refuse => {
                ReadError::Symlink
            }
            _ => ReadError::Io(e),
        })?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.file_type().is_file() {
        return Err(ReadError::NotRegular);
    }
    Ok((file, meta.len()))
}

/// Reads at most `cap` bytes of the regular file at `path` (a longer file is cut, and
/// [`Capped::truncated`] says so).
pub fn read_capped(path: &Path, cap: u64) -> Result<Capped, ReadError> {
    let (file, size) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(size.min(cap).min(1 << 20) as usize);
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    Ok(Capped { bytes, size })
}

/// Reads the whole regular file at `path` as UTF-8 text, refusing one larger than `cap` bytes.
pub fn read_text_limited(path: &Path, cap: u64) -> Result<String, ReadError> {
    read_text_opened(open_regular(path)?, cap)
}

/// [`read_text_limited`] for configuration and policy (a role, a skill, the preferences):
/// a symlink as the file itself is refused ([`ReadError::Symlink`]), never followed, so a
/// link planted where such a file is read cannot make its reader show a file the sandbox
/// hides. The folders on the way are the caller's to check (a skill's folder is listed
/// without following links).
pub fn read_text_nofollow(path: &Path, cap: u64) -> Result<String, ReadError> {
    read_text_opened(open_file(path, Links::Refuse)?, cap)
}

fn read_text_opened((file, size): (File, u64), cap: u64) -> Result<String, ReadError> {
    if size > cap {
        return Err(ReadError::TooLarge { size, cap });
    }
    let mut text = String::with_capacity(size as usize);
    // `take(cap + 1)`: a file that grew since the check still cannot take more than the cap.
    file.take(cap + 1)
        .read_to_string(&mut text)
        .map_err(ReadError::Io)?;
    if text.len() as u64 > cap {
        return Err(ReadError::TooLarge {
            size: text.len() as u64,
            cap,
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn policy_reads_refuse_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/SKILL.md"), "body").unwrap();
        std::fs::write(root.join("secret"), "hidden").unwrap();
        std::os::unix::fs::symlink(root.join("secret"), root.join("real/link.md")).unwrap();
        assert_eq!(
            read_text_nofollow(&root.join("real/SKILL.md"), 100).unwrap(),
            "body"
        );
        assert!(matches!(
            read_text_nofollow(&root.join("real/link.md"), 100),
            Err(ReadError::Symlink)
        ));
        // The plain reader still follows links (files the user controls).
        assert_eq!(
            read_text_limited(&root.join("real/link.md"), 100).unwrap(),
            "hidden"
        );
    }

    #[test]
    fn a_fifo_is_refused_at_once_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("PROJECT.md");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_text_limited(&fifo, 1024),
            Err(ReadError::NotRegular)
        ));
        assert!(matches!(read_capped(&fifo, 10), Err(ReadError::NotRegular)));
    }

    #[test]
    fn a_device_behind_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("PROJECT.md");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_text_limited(&link, 1024),
            Err(ReadError::NotRegular)
        ));
    }

    #[test]
    fn a_large_sparse_file_is_read_only_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        let f = File::create(&big).unwrap();
        f.set_len(1 << 30).unwrap();
        let got = read_capped(&big, 1000).unwrap();
        assert_eq!((got.bytes.len(), got.size), (1000, 1 << 30));
        assert!(got.truncated());
        assert!(matches!(
            read_text_limited(&big, 1 << 20),
            Err(ReadError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_small_text_file_reads_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.md");
        std::fs::write(&p, "hello").unwrap();
        assert_eq!(read_text_limited(&p, 5).unwrap(), "hello");
        assert!(matches!(
            read_text_limited(&dir.path().join("nope"), 5),
            Err(ReadError::NotFound)
        ));
    }
}
