//! The persistent index: token -> SHA-256 of each model-cache file, kept apart from the
//! cache entries and reset when the nnc version changes.

use serde::{Deserialize, Serialize};

/// Version of the index file's layout (2: entries of models with a key carry a tag;
/// 3: every entry names the model file it was prepared from).
pub const INDEX_FORMAT: u32 = 3;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: u32,
    /// The nnc version that wrote every entry; another version resets the index.
    pub nnc_version: String,
    pub entries: Vec<IndexEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// The token, hex.
    pub token: String,
    /// The model file the entry was prepared from: its metadata tag, hex (HMAC-SHA-256,
    /// or SHA-256 without a key, over every byte before the weights, which includes every
    /// weight field's tag), so any changed weight changes it. A caller's token stands for
    /// a model but does not prove which: an entry of another model is a miss. Empty only
    /// in an index of an older layout, which is reset unread.
    #[serde(default)]
    pub model_digest: String,
    /// SHA-256 of each model-cache file, hex, in file order.
    pub model: Vec<String>,
    /// SHA-256 of each data-cache file, hex (the files also authenticate themselves).
    pub data: Vec<String>,
    /// Total bytes of the entry's files.
    pub bytes: u64,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// For a model with a key: HMAC-SHA-256 under the entry's [`super::CacheKey`] over the
    /// token, the model digest and every file digest above, hex. Absent for a model without a key, whose entry
    /// is protected against corruption only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

impl Index {
    pub fn empty(nnc_version: &str) -> Index {
        Index {
            format: INDEX_FORMAT,
            nnc_version: nnc_version.to_string(),
            entries: Vec::new(),
        }
    }

    pub fn find(&self, token: &str) -> Option<&IndexEntry> {
        self.entries.iter().find(|e| e.token == token)
    }

    /// True when this index was written by `nnc_version` in the current layout.
    pub fn is_current(&self, nnc_version: &str) -> bool {
        self.format == INDEX_FORMAT && self.nnc_version == nnc_version
    }
}
