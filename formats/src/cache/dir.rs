//! A cache directory: entries, the index, the lock.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::index::{Index, IndexEntry};
use super::{CacheError, CacheKey, MAX_CACHE_FILES, ModelDigest, Token};
use crate::crypto::{ct_eq, sha256};

/// Model-cache file header: magic, u16 version, u16 part, u16 count, u16 reserved,
/// token [32], u64 payload length, then the payload.
const MODEL_MAGIC: &[u8; 8] = b"NNCMCACH";
const MODEL_HEADER_LEN: usize = 8 + 2 + 2 + 2 + 2 + 32 + 8;

/// A cache directory. All access goes through its lock.
pub struct CacheDir {
    root: PathBuf,
    nnc_version: String,
}

/// A held lock on a cache directory (released when dropped).
pub struct CacheLock {
    _file: File,
}

/// The files of one cache entry: model-cache payloads read once into memory and checked
/// against the index; data-cache files open, to be read by [`super::open_data`] (they
/// authenticate themselves, segment by segment, as they are read).
#[derive(Debug)]
pub struct CacheEntry {
    /// Model-cache payloads (headers stripped), in order.
    pub model: Vec<Vec<u8>>,
    /// Data-cache files, open for reading. An open file keeps the contents it had when
    /// it was opened even if a store or a cleaning replaces or removes it afterwards.
    pub data: Vec<File>,
}

/// The outcome of looking a token up.
#[derive(Debug)]
pub enum Lookup {
    Hit(CacheEntry),
    Miss,
    /// The entry exists but failed validation, or was prepared from another model file;
    /// it must not be used (the caller warns and prepares afresh; the next store
    /// replaces it).
    Invalid(String),
    /// The index could not be used (corrupt or unreadable): a miss for every token, and
    /// the next store resets it, dropping every entry. The message says so and how many
    /// entries that loses; the caller reports it.
    IndexDamaged(String),
}

/// Why the index on disk was not used.
enum IndexReset {
    /// Written by another nnc version or in another layout: expected, and silent.
    Version,
    /// Unreadable or corrupt: every entry it listed is lost, and a user should hear why.
    Damaged(String),
}

/// One entry, for `nnc cache ls`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EntryInfo {
    pub token: String,
    pub bytes: u64,
    pub model_files: usize,
    pub data_files: usize,
    pub created: u64,
    /// Seconds since the Unix epoch of the last hit (or the creation).
    pub last_used: u64,
}

/// What `verify` found of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryStatus {
    Ok,
    /// Authenticated with a key that was not given: its tag was not checked.
    Unchecked(String),
    Damaged(String),
}

/// What `clean` removed.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CleanReport {
    pub removed_entries: Vec<String>,
    pub removed_bytes: u64,
    pub remaining_bytes: u64,
    /// Files and directories no index entry accounts for (interrupted writes).
    pub removed_strays: usize,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mtime(path: &Path) -> u64 {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

#[cfg(unix)]
fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn private_dir(path: &Path) -> std::io::Result<()> {
    fs::create_dir_all(path)
}

/// Writes `bytes` to `target` through a 0600 temporary file beside it and a rename.
fn write_private(target: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(|e| CacheError::io(dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| CacheError::io(target, e))?;
    }
    tmp.write_all(bytes)
        .map_err(|e| CacheError::io(target, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| CacheError::io(target, e))?;
    tmp.persist(target)
        .map_err(|e| CacheError::io(target, e.error))?;
    Ok(())
}

impl CacheDir {
    /// Opens (creating, mode 0700) a cache directory.
    pub fn open(root: &Path, nnc_version: &str) -> Result<CacheDir, CacheError> {
        private_dir(root).map_err(|e| CacheError::io(root, e))?;
        if !root.is_dir() {
            return Err(CacheError::io(root, "is not a directory"));
        }
        Ok(CacheDir {
            root: root.to_path_buf(),
            nnc_version: nnc_version.to_string(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lock file, 0600 like every other file of the cache (one an older nnc created
    /// 0644 is narrowed, best effort: only the lock matters here).
    fn lock_file(&self) -> Result<File, CacheError> {
        let path = self.root.join("lock");
        let mut options = OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(|e| CacheError::io(&path, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if file
                .metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
            {
                let _ = file.set_permissions(fs::Permissions::from_mode(0o600));
            }
        }
        Ok(file)
    }

    /// A shared lock: readers may run together, never beside a writer.
    pub fn lock_shared(&self) -> Result<CacheLock, CacheError> {
        let file = self.lock_file()?;
        file.lock_shared()
            .map_err(|e| CacheError::io(&self.root, e))?;
        Ok(CacheLock { _file: file })
    }

    /// An exclusive lock: one writer, no reader.
    pub fn lock_exclusive(&self) -> Result<CacheLock, CacheError> {
        let file = self.lock_file()?;
        file.lock().map_err(|e| CacheError::io(&self.root, e))?;
        Ok(CacheLock { _file: file })
    }

    fn index_path(&self) -> PathBuf {
        self.root.join("index.json")
    }

    fn entry_dir(&self, token: &Token) -> PathBuf {
        self.root.join(hex::encode(token))
    }

    /// The index as it stands; an index of another nnc version or layout, or an
    /// unreadable one, is treated as empty, so nothing it lists is ever used.
    fn read_index(&self) -> (Index, Option<IndexReset>) {
        let path = self.index_path();
        let empty = || Index::empty(&self.nnc_version);
        let damaged = |why: String| {
            let lost = self.entry_dirs();
            IndexReset::Damaged(format!(
                "the cache index {} {why}; it is reset, dropping the {lost} cached entr{} \
                 it held (they are prepared again when next used)",
                path.display(),
                if lost == 1 { "y" } else { "ies" }
            ))
        };
        match fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (empty(), None),
            Err(e) => (empty(), Some(damaged(format!("cannot be read ({e})")))),
            Ok(bytes) => match serde_json::from_slice::<Index>(&bytes) {
                Ok(index) if index.is_current(&self.nnc_version) => (index, None),
                Ok(_) => (empty(), Some(IndexReset::Version)),
                // An index of another layout may not parse as this one: not damage.
                Err(_) if older_layout(&bytes, &self.nnc_version) => {
                    (empty(), Some(IndexReset::Version))
                }
                Err(e) => (empty(), Some(damaged(format!("is corrupt ({e})")))),
            },
        }
    }

    /// How many entry directories (named by a token) the cache holds.
    fn entry_dirs(&self) -> usize {
        fs::read_dir(&self.root).map_or(0, |read| {
            read.flatten()
                .filter(|e| {
                    parse_hex_token(&e.file_name().to_string_lossy()).is_some() && e.path().is_dir()
                })
                .count()
        })
    }

    fn write_index(&self, index: &Index) -> Result<(), CacheError> {
        let bytes = serde_json::to_vec_pretty(index).map_err(|e| CacheError::Index {
            path: self.index_path().display().to_string(),
            message: e.to_string(),
        })?;
        write_private(&self.index_path(), &bytes)
    }

    /// Looks a token up under a shared lock. Every file is read once into memory, and
    /// that buffer is what is hashed and returned. `model` is the digest of the model
    /// file being prepared ([`IndexEntry::model_digest`]): an entry prepared from another
    /// is invalid. `key` is the entry's key when the model has one: the entry must then
    /// carry a tag that authenticates under it (and must carry none otherwise).
    pub fn lookup(
        &self,
        token: &Token,
        model: &ModelDigest,
        model_files: usize,
        data_files: usize,
        key: Option<&CacheKey>,
    ) -> Result<Lookup, CacheError> {
        let _lock = self.lock_shared()?;
        let index = match self.read_index() {
            (_, Some(IndexReset::Damaged(why))) => return Ok(Lookup::IndexDamaged(why)),
            (index, _) => index,
        };
        let hex_token = hex::encode(token);
        let Some(entry) = index.find(&hex_token) else {
            return Ok(Lookup::Miss);
        };
        if let Some(problem) = entry_auth_problem(entry, token, key) {
            return Ok(Lookup::Invalid(problem));
        }
        // After the tag (which covers the digest) so that, with a key, what differs is
        // the digest the model's own key holder recorded.
        if !ct_eq(entry.model_digest.as_bytes(), hex::encode(model).as_bytes()) {
            return Ok(Lookup::Invalid(
                "it was prepared from another model file (the token names a model whose \
                 weights or structure have changed since)"
                    .into(),
            ));
        }
        if entry.model.len() != model_files || entry.data.len() != data_files {
            return Ok(Lookup::Invalid(format!(
                "the entry has {} model and {} data files, the device needs {model_files} and {data_files}",
                entry.model.len(),
                entry.data.len()
            )));
        }
        let dir = self.entry_dir(token);
        let mut model = Vec::with_capacity(model_files);
        for (i, expected) in entry.model.iter().enumerate() {
            let path = dir.join(format!("model-{i}.bin"));
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) => return Ok(Lookup::Invalid(format!("model cache file {i}: {e}"))),
            };
            if !ct_eq(
                hex::encode(sha256(&[&bytes])).as_bytes(),
                expected.as_bytes(),
            ) {
                return Ok(Lookup::Invalid(format!(
                    "model cache file {i} does not match the index"
                )));
            }
            match parse_model_file(&bytes, token, i, model_files) {
                Ok(payload) => model.push(payload.to_vec()),
                Err(m) => return Ok(Lookup::Invalid(format!("model cache file {i}: {m}"))),
            }
        }
        let mut data = Vec::with_capacity(data_files);
        for i in 0..data_files {
            let path = dir.join(format!("data-{i}.bin"));
            match File::open(&path) {
                Ok(f) => data.push(f),
                Err(e) => return Ok(Lookup::Invalid(format!("data cache file {i}: {e}"))),
            }
        }
        // Last use, for least-recently-used cleaning; best effort.
        let _ = File::open(&dir).and_then(|f| f.set_modified(SystemTime::now()));
        Ok(Lookup::Hit(CacheEntry { model, data }))
    }

    /// Stores an entry of the model file with digest `model_digest` under an exclusive
    /// lock: files first (0600, renamed into place), the index last, so an interrupted
    /// store leaves nothing the index points to. An existing valid entry of the same
    /// model for the token (another process got there first) is kept; an entry of
    /// another model under the token is replaced.
    pub fn store(
        &self,
        token: &Token,
        model_digest: &ModelDigest,
        model: &[Vec<u8>],
        data: &[Vec<u8>],
        key: Option<&CacheKey>,
    ) -> Result<(), CacheError> {
        if model.len() > MAX_CACHE_FILES || data.len() > MAX_CACHE_FILES {
            return Err(CacheError::Options(format!(
                "at most {MAX_CACHE_FILES} cache files of each kind"
            )));
        }
        // Hash each buffer before it is written: the index records what was meant.
        let count = model.len();
        let model_files: Vec<Vec<u8>> = model
            .iter()
            .enumerate()
            .map(|(i, payload)| model_file(token, i, count, payload))
            .collect();
        let model_hashes: Vec<String> = model_files
            .iter()
            .map(|f| hex::encode(sha256(&[f])))
            .collect();
        let data_hashes: Vec<String> = data.iter().map(|f| hex::encode(sha256(&[f]))).collect();
        let _lock = self.lock_exclusive()?;
        let (mut index, reset) = self.read_index();
        if reset.is_some() {
            // A reset index orphans every entry directory: remove them.
            self.remove_strays(&index);
        }
        let hex_token = hex::encode(token);
        let model_digest = hex::encode(model_digest);
        if let Some(existing) = index.find(&hex_token)
            && existing.model_digest == model_digest
            && existing.model == model_hashes
            && existing.data.len() == data.len()
            && entry_auth_problem(existing, token, key).is_none()
        {
            return Ok(());
        }
        index.entries.retain(|e| e.token != hex_token);
        let dir = self.entry_dir(token);
        let _ = fs::remove_dir_all(&dir);
        private_dir(&dir).map_err(|e| CacheError::io(&dir, e))?;
        for (i, f) in model_files.iter().enumerate() {
            write_private(&dir.join(format!("model-{i}.bin")), f)?;
        }
        for (i, f) in data.iter().enumerate() {
            write_private(&dir.join(format!("data-{i}.bin")), f)?;
        }
        let bytes = model_files.iter().chain(data).map(|f| f.len() as u64).sum();
        let tag = key.map(|k| k.entry_tag(token, &model_digest, &model_hashes, &data_hashes));
        index.entries.push(IndexEntry {
            token: hex_token,
            model_digest,
            model: model_hashes,
            data: data_hashes,
            bytes,
            created: now(),
            tag,
        });
        self.write_index(&index)
    }

    /// Removes a token's entry (after it failed validation, or to evict it).
    pub fn remove(&self, token: &Token) -> Result<(), CacheError> {
        let _lock = self.lock_exclusive()?;
        let (mut index, reset) = self.read_index();
        if reset.is_some() {
            // As in `store`: the fresh index written below orphans every entry.
            self.remove_strays(&index);
        }
        let hex_token = hex::encode(token);
        index.entries.retain(|e| e.token != hex_token);
        let _ = fs::remove_dir_all(self.entry_dir(token));
        self.write_index(&index)
    }

    /// Every entry, most recently used first.
    pub fn list(&self) -> Result<Vec<EntryInfo>, CacheError> {
        let _lock = self.lock_shared()?;
        let (index, _) = self.read_index();
        let mut out: Vec<EntryInfo> = index
            .entries
            .iter()
            .map(|e| EntryInfo {
                token: e.token.clone(),
                bytes: e.bytes,
                model_files: e.model.len(),
                data_files: e.data.len(),
                created: e.created,
                last_used: mtime(&self.root.join(&e.token)).max(e.created),
            })
            .collect();
        out.sort_by_key(|e| std::cmp::Reverse(e.last_used));
        Ok(out)
    }

    /// Checks every entry against the index: each file present, model files hashing to
    /// the index, data files to their recorded hashes, and, given the models' master key,
    /// each authenticated entry's tag. Returns each entry with its problem, if any; an
    /// authenticated entry checked without a key reports that it could not be checked.
    pub fn verify(
        &self,
        master: Option<&[u8]>,
    ) -> Result<Vec<(EntryInfo, EntryStatus)>, CacheError> {
        let entries = self.list()?;
        let _lock = self.lock_shared()?;
        let (index, _) = self.read_index();
        let mut out = Vec::new();
        for info in entries {
            let Some(e) = index.find(&info.token) else {
                continue;
            };
            let dir = self.root.join(&e.token);
            let mut problem = None;
            let mut unchecked = false;
            let token = parse_hex_token(&e.token);
            match (&e.tag, master, token) {
                (_, _, None) => problem = Some("its token is not 64 hex digits".into()),
                (Some(_), Some(master), Some(token)) => {
                    let key = CacheKey::derive(master, &token)?;
                    problem = entry_auth_problem(e, &token, Some(&key));
                }
                (Some(_), None, Some(_)) => unchecked = true,
                (None, _, Some(_)) => {}
            }
            for (kind, hashes) in [("model", &e.model), ("data", &e.data)] {
                for (i, expected) in hashes.iter().enumerate() {
                    let path = dir.join(format!("{kind}-{i}.bin"));
                    match fs::read(&path) {
                        Err(err) => problem = Some(format!("{kind} cache file {i}: {err}")),
                        Ok(bytes) if hex::encode(sha256(&[&bytes])) != *expected => {
                            problem =
                                Some(format!("{kind} cache file {i} does not match the index"));
                        }
                        Ok(_) => {}
                    }
                }
            }
            let status = match (problem, unchecked) {
                (Some(p), _) => EntryStatus::Damaged(p),
                (None, true) => EntryStatus::Unchecked(
                    "authenticated with its model's key: give it (--key-file) to check the entry"
                        .into(),
                ),
                (None, false) => EntryStatus::Ok,
            };
            out.push((info, status));
        }
        Ok(out)
    }

    /// Removes least-recently-used entries until the cache holds at most `max_bytes`
    /// (all of them for 0), and anything no index entry accounts for.
    pub fn clean(&self, max_bytes: u64) -> Result<CleanReport, CacheError> {
        let entries = self.list()?;
        let _lock = self.lock_exclusive()?;
        let (mut index, _) = self.read_index();
        let mut report = CleanReport::default();
        let mut total: u64 = index.entries.iter().map(|e| e.bytes).sum();
        // `entries` is most recent first: evict from the end.
        for info in entries.iter().rev() {
            if total <= max_bytes {
                break;
            }
            index.entries.retain(|e| e.token != info.token);
            let _ = fs::remove_dir_all(self.root.join(&info.token));
            total -= info.bytes;
            report.removed_bytes += info.bytes;
            report.removed_entries.push(info.token.clone());
        }
        report.removed_strays = self.remove_strays(&index);
        report.remaining_bytes = total;
        self.write_index(&index)?;
        Ok(report)
    }

    /// Removes directory contents no index entry names (interrupted writes, old
    /// versions). Returns how many were removed.
    fn remove_strays(&self, index: &Index) -> usize {
        let Ok(read) = fs::read_dir(&self.root) else {
            return 0;
        };
        let mut removed = 0;
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "index.json" || name == "lock" || index.find(&name).is_some() {
                continue;
            }
            let path = entry.path();
            let ok = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed += usize::from(ok.is_ok());
        }
        removed
    }
}

/// Whether `bytes` is an index of an older layout of this or another nnc version (its
/// `format` below this one's), which a version change resets without a warning.
fn older_layout(bytes: &[u8], nnc_version: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Versions {
        format: u32,
        nnc_version: String,
    }
    serde_json::from_slice::<Versions>(bytes)
        .is_ok_and(|v| v.format < super::INDEX_FORMAT || v.nnc_version != nnc_version)
}

fn parse_hex_token(text: &str) -> Option<Token> {
    let mut t = [0u8; 32];
    hex::decode_to_slice(text, &mut t).ok().map(|()| t)
}

/// Why an index entry cannot be trusted for a model with key `key` (`None`: a model
/// without a key), if it cannot.
fn entry_auth_problem(entry: &IndexEntry, token: &Token, key: Option<&CacheKey>) -> Option<String> {
    match (key, &entry.tag) {
        (Some(k), Some(tag)) => {
            let expected = k.entry_tag(token, &entry.model_digest, &entry.model, &entry.data);
            (!ct_eq(expected.as_bytes(), tag.as_bytes())).then(|| {
                "its index entry does not authenticate under the model's key (altered, or \
                 written for another key)"
                    .to_string()
            })
        }
        (Some(_), None) => {
            Some("its index entry is not authenticated, but the model has a key".to_string())
        }
        (None, Some(_)) => {
            Some("its index entry is authenticated with a key, but the model has none".to_string())
        }
        (None, None) => None,
    }
}

fn model_file(token: &Token, part: usize, count: usize, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(MODEL_HEADER_LEN + payload.len());
    f.extend_from_slice(MODEL_MAGIC);
    f.extend_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(&(part as u16).to_le_bytes());
    f.extend_from_slice(&(count as u16).to_le_bytes());
    f.extend_from_slice(&0u16.to_le_bytes());
    f.extend_from_slice(token);
    f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    f.extend_from_slice(payload);
    f
}

fn parse_model_file<'b>(
    bytes: &'b [u8],
    token: &Token,
    part: usize,
    count: usize,
) -> Result<&'b [u8], String> {
    if bytes.len() < MODEL_HEADER_LEN || &bytes[..8] != MODEL_MAGIC {
        return Err("not a model-cache file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    if u16_at(8) != 1 || u16_at(10) != part || u16_at(12) != count {
        return Err("wrong version or slot".into());
    }
    if &bytes[16..48] != token {
        return Err("belongs to another entry".into());
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[48..56]);
    if u64::from_le_bytes(len) != (bytes.len() - MODEL_HEADER_LEN) as u64 {
        return Err("length does not match".into());
    }
    Ok(&bytes[MODEL_HEADER_LEN..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model file every entry of these tests is prepared from.
    const MODEL: ModelDigest = [0x4d; 32];

    fn dir() -> (tempfile::TempDir, CacheDir) {
        let t = tempfile::tempdir().unwrap();
        let c = CacheDir::open(&t.path().join("cache"), "test").unwrap();
        (t, c)
    }

    #[test]
    fn store_then_hit_then_clean() {
        let (_t, c) = dir();
        let token = [1u8; 32];
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 1, None).unwrap(),
            Lookup::Miss
        ));
        c.store(
            &token,
            &MODEL,
            &[b"program".to_vec()],
            &[b"weights".to_vec()],
            None,
        )
        .unwrap();
        match c.lookup(&token, &MODEL, 1, 1, None).unwrap() {
            Lookup::Hit(e) => {
                assert_eq!(e.model, vec![b"program".to_vec()]);
                assert_eq!(e.data.len(), 1);
                let mut read = Vec::new();
                std::io::Read::read_to_end(&mut &e.data[0], &mut read).unwrap();
                assert_eq!(read, b"weights");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.list().unwrap().len(), 1);
        let report = c.clean(0).unwrap();
        assert_eq!(report.removed_entries.len(), 1);
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 1, None).unwrap(),
            Lookup::Miss
        ));
    }

    #[test]
    #[cfg(unix)]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_t, c) = dir();
        let token = [2u8; 32];
        c.store(&token, &MODEL, &[b"p".to_vec()], &[b"d".to_vec()], None)
            .unwrap();
        let entry = c.root().join(hex::encode(token));
        for f in ["model-0.bin", "data-0.bin"] {
            assert_eq!(
                fs::metadata(entry.join(f)).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(
            fs::metadata(c.root().join("index.json"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(&entry).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let lock = c.root().join("lock");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&lock), 0o600);
        // A lock file an older nnc left 0644 is narrowed when next taken.
        fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
        drop(c.lock_shared().unwrap());
        assert_eq!(mode(&lock), 0o600);
    }

    #[test]
    fn altered_model_caches_are_invalid() {
        let (_t, c) = dir();
        let token = [3u8; 32];
        c.store(&token, &MODEL, &[b"program bytes".to_vec()], &[], None)
            .unwrap();
        let path = c.root().join(hex::encode(token)).join("model-0.bin");
        let good = fs::read(&path).unwrap();
        for pos in 0..good.len() {
            let mut bad = good.clone();
            bad[pos] ^= 1;
            fs::write(&path, &bad).unwrap();
            assert!(
                matches!(
                    c.lookup(&token, &MODEL, 1, 0, None).unwrap(),
                    Lookup::Invalid(_)
                ),
                "flip at {pos}"
            );
        }
        let mut longer = good.clone();
        longer.push(0);
        fs::write(&path, &longer).unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 0, None).unwrap(),
            Lookup::Invalid(_)
        ));
    }

    #[test]
    fn another_version_resets_the_index() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        let token = [4u8; 32];
        CacheDir::open(&root, "1.0")
            .unwrap()
            .store(&token, &MODEL, &[b"p".to_vec()], &[], None)
            .unwrap();
        let newer = CacheDir::open(&root, "2.0").unwrap();
        assert!(matches!(
            newer.lookup(&token, &MODEL, 1, 0, None).unwrap(),
            Lookup::Miss
        ));
        newer
            .store(&[5u8; 32], &MODEL, &[b"q".to_vec()], &[], None)
            .unwrap();
        // The old version's entry directory is gone.
        assert!(!root.join(hex::encode(token)).exists());
        assert_eq!(newer.list().unwrap().len(), 1);
    }

    #[test]
    fn entries_of_keyed_models_authenticate_their_files() {
        let (_t, c) = dir();
        let token = [9u8; 32];
        let key = CacheKey::derive(&[1u8; 16], &token).unwrap();
        c.store(
            &token,
            &MODEL,
            &[b"program".to_vec()],
            &[b"sealed".to_vec()],
            Some(&key),
        )
        .unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 1, Some(&key)).unwrap(),
            Lookup::Hit(_)
        ));
        // Another key, or none, is not this entry's.
        let other = CacheKey::derive(&[2u8; 16], &token).unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 1, Some(&other)).unwrap(),
            Lookup::Invalid(_)
        ));
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 1, None).unwrap(),
            Lookup::Invalid(_)
        ));
        // Editing a file and its digest in the index, as anyone with write access could,
        // no longer makes a valid entry.
        let path = c.root().join(hex::encode(token)).join("model-0.bin");
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let index_path = c.root().join("index.json");
        let mut index: Index = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
        index.entries[0].model[0] = hex::encode(sha256(&[&bytes]));
        fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
        match c.lookup(&token, &MODEL, 1, 1, Some(&key)).unwrap() {
            Lookup::Invalid(reason) => assert!(reason.contains("authenticate"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let report = c.verify(Some(&[1u8; 16])).unwrap();
        assert!(
            matches!(report[0].1, EntryStatus::Damaged(_)),
            "verify must find the altered entry"
        );
        let unchecked = c.verify(None).unwrap();
        assert!(matches!(&unchecked[0].1, EntryStatus::Unchecked(w) if w.contains("--key-file")));
    }

    #[test]
    fn a_corrupt_index_is_a_reported_miss_that_says_what_is_lost() {
        let (_t, c) = dir();
        let token = [6u8; 32];
        let other = [8u8; 32];
        c.store(&token, &MODEL, &[b"p".to_vec()], &[], None)
            .unwrap();
        c.store(&other, &MODEL, &[b"q".to_vec()], &[], None)
            .unwrap();
        fs::write(c.root().join("index.json"), b"{ not json").unwrap();
        match c.lookup(&token, &MODEL, 1, 0, None).unwrap() {
            Lookup::IndexDamaged(why) => {
                assert!(why.contains("index.json is corrupt"), "{why}");
                assert!(why.contains("dropping the 2 cached entries"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // Removing the bad entry (as the runtime does) resets the index and, with it,
        // the entries it no longer lists.
        c.remove(&token).unwrap();
        assert!(!c.root().join(hex::encode(other)).exists());
        c.store(&token, &MODEL, &[b"p".to_vec()], &[], None)
            .unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 0, None).unwrap(),
            Lookup::Hit(_)
        ));
        assert!(matches!(
            c.lookup(&other, &MODEL, 1, 0, None).unwrap(),
            Lookup::Miss
        ));
        // An index that cannot be read at all is damage too; one entry, in the singular.
        fs::remove_file(c.root().join("index.json")).unwrap();
        fs::create_dir(c.root().join("index.json")).unwrap();
        match c.lookup(&token, &MODEL, 1, 0, None).unwrap() {
            Lookup::IndexDamaged(why) => {
                assert!(why.contains("cannot be read"), "{why}");
                assert!(why.contains("dropping the 1 cached entry "), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_index_of_an_older_layout_is_reset_without_a_warning() {
        let (_t, c) = dir();
        let token = [6u8; 32];
        c.store(&token, &MODEL, &[b"p".to_vec()], &[], None)
            .unwrap();
        let path = c.root().join("index.json");
        let mut index: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        // Layout 2: no model digest.
        index["format"] = 2.into();
        index["entries"][0]
            .as_object_mut()
            .unwrap()
            .remove("model_digest");
        fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 0, None).unwrap(),
            Lookup::Miss
        ));
        // A layout this version cannot even parse is a version change too.
        index["entries"][0]["retired_field"] = 1.into();
        fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
        assert!(matches!(
            c.lookup(&token, &MODEL, 1, 0, None).unwrap(),
            Lookup::Miss
        ));
    }

    #[test]
    fn an_entry_of_another_model_is_invalid_and_replaced() {
        let (_t, c) = dir();
        let token = [10u8; 32];
        let second: ModelDigest = [0x4e; 32];
        for key in [None, Some(CacheKey::derive(&[1u8; 16], &token).unwrap())] {
            c.store(&token, &MODEL, &[b"program".to_vec()], &[], key.as_ref())
                .unwrap();
            match c.lookup(&token, &second, 1, 0, key.as_ref()).unwrap() {
                Lookup::Invalid(why) => assert!(why.contains("another model file"), "{why}"),
                other => panic!("{other:?}"),
            }
            // Storing the second model's entry replaces the first's, even with the same
            // files (a store of the same model would keep it).
            c.store(&token, &second, &[b"program".to_vec()], &[], key.as_ref())
                .unwrap();
            assert!(matches!(
                c.lookup(&token, &second, 1, 0, key.as_ref()).unwrap(),
                Lookup::Hit(_)
            ));
            assert!(matches!(
                c.lookup(&token, &MODEL, 1, 0, key.as_ref()).unwrap(),
                Lookup::Invalid(_)
            ));
            assert_eq!(c.list().unwrap().len(), 1);
            c.clean(0).unwrap();
        }
        // With a key, the digest is under the entry's tag: editing it is detected.
        let key = CacheKey::derive(&[1u8; 16], &token).unwrap();
        c.store(&token, &MODEL, &[b"program".to_vec()], &[], Some(&key))
            .unwrap();
        let path = c.root().join("index.json");
        let mut index: Index = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        index.entries[0].model_digest = hex::encode(second);
        fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
        match c.lookup(&token, &second, 1, 0, Some(&key)).unwrap() {
            Lookup::Invalid(why) => assert!(why.contains("authenticate"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
