//! Turns a byte position in a JSON text into the path of the field there
//! (`devices[0].operations[2].max_stride`), so that serde_json's errors, which carry only
//! a line and column, name the field at fault.

/// One open container while scanning.
enum Frame {
    Object { key: Option<String> },
    Array { index: usize },
}

/// The path of the value being read at byte `offset` of `text` ("" at the top level).
///
/// A small scanner that tracks only strings, brackets, commas and colons; it never fails
/// (malformed text yields the best path it can).
pub(crate) fn path_at(text: &str, offset: usize) -> String {
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    // In an object, whether the next string is a key (after `{` or `,`) or a value.
    let mut want_key = false;
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                let stop = j.min(bytes.len());
                if want_key && let Some(Frame::Object { key }) = stack.last_mut() {
                    *key = Some(String::from_utf8_lossy(&bytes[start..stop]).into_owned());
                    want_key = false;
                }
                i = stop + 1;
                continue;
            }
            b'{' => {
                stack.push(Frame::Object { key: None });
                want_key = true;
            }
            b'[' => {
                stack.push(Frame::Array { index: 0 });
                want_key = false;
            }
            b'}' | b']' => {
                stack.pop();
                want_key = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { key }) => {
                    *key = None;
                    want_key = true;
                }
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(k) } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Frame::Object { key: None } => {}
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The byte offset of a 1-based line and a column (bytes into that line), as serde_json
/// reports them.
pub(crate) fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match text[start..].find('\n') {
            Some(n) => start += n + 1,
            None => return text.len(),
        }
    }
    (start + column).min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, needle: &str) -> String {
        let offset = text.find(needle).unwrap() + needle.len();
        path_at(text, offset)
    }

    #[test]
    fn paths_follow_objects_and_arrays() {
        let t = r#"{"devices": [{"name": "a"}, {"performance": {"TENSOR_FLOAT32": {"exec_time": "x"}}}]}"#;
        assert_eq!(at(t, r#""a""#), "devices[0].name");
        assert_eq!(
            at(t, r#""x""#),
            "devices[1].performance.TENSOR_FLOAT32.exec_time"
        );
        assert_eq!(path_at(t, 0), "");
        assert_eq!(path_at(t, t.len()), "");
    }

    #[test]
    fn escaped_quotes_and_bad_text_do_not_confuse_it() {
        let t = r#"{"na\"me": "v\"al", "x": [1, 2, {"y": "#;
        assert_eq!(path_at(t, t.len()), "x[2].y");
        assert_eq!(path_at("\"unterminated", 100), "");
        assert_eq!(path_at("]]}}", 4), "");
    }

    #[test]
    fn line_and_column_become_offsets() {
        let t = "ab\ncd\nef";
        assert_eq!(offset_of(t, 1, 1), 1);
        assert_eq!(offset_of(t, 2, 2), 5);
        assert_eq!(offset_of(t, 9, 9), t.len());
    }
}
