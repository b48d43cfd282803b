//! Typed access to a node's attributes, with errors that name the node and attribute.

use super::proto::attribute_proto::AttributeType;
use super::proto::{AttributeProto, NodeProto, TensorProto};

/// A node's attributes.
pub struct Attrs<'a> {
    node: &'a NodeProto,
}

/// The attribute is present but not of the expected kind.
fn kind_error(node: &NodeProto, a: &AttributeProto, expected: &str) -> String {
    let actual = a
        .attribute_type()
        .map(|t| t.name())
        .unwrap_or("an unknown type");
    format!(
        "node '{}' ({}): attribute '{}' must be {expected}, got {actual}",
        node.name, node.op_type, a.name
    )
}

impl<'a> Attrs<'a> {
    pub fn new(node: &'a NodeProto) -> Attrs<'a> {
        Attrs { node }
    }

    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Declared type, or the type implied by the one field present (pre-IR-2 files).
    fn kind(a: &AttributeProto) -> Option<AttributeType> {
        if let Some(t) = a.attribute_type() {
            return Some(t);
        }
        if a.f.is_some() {
            Some(AttributeType::Float)
        } else if a.i.is_some() {
            Some(AttributeType::Int)
        } else if a.s.is_some() {
            Some(AttributeType::String)
        } else if a.t.is_some() {
            Some(AttributeType::Tensor)
        } else if !a.ints.is_empty() {
            Some(AttributeType::Ints)
        } else if !a.floats.is_empty() {
            Some(AttributeType::Floats)
        } else {
            None
        }
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == Some(AttributeType::Int) => Ok(Some(a.i.unwrap_or(0))),
            Some(a) => Err(kind_error(self.node, a, "an INT")),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> Result<i64, String> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    pub fn float(&self, name: &str) -> Result<Option<f32>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == Some(AttributeType::Float) => Ok(Some(a.f.unwrap_or(0.0))),
            // Some exporters write integral floats as INT.
            Some(a) if Self::kind(a) == Some(AttributeType::Int) => {
                Ok(Some(a.i.unwrap_or(0) as f32))
            }
            Some(a) => Err(kind_error(self.node, a, "a FLOAT")),
        }
    }

    pub fn float_or(&self, name: &str, default: f32) -> Result<f32, String> {
        Ok(self.float(name)?.unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if matches!(Self::kind(a), Some(AttributeType::Ints) | None) => {
                Ok(Some(a.ints.clone()))
            }
            Some(a) => Err(kind_error(self.node, a, "INTS")),
        }
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if matches!(Self::kind(a), Some(AttributeType::Floats) | None) => {
                Ok(Some(a.floats.clone()))
            }
            Some(a) => Err(kind_error(self.node, a, "FLOATS")),
        }
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == Some(AttributeType::String) => {
                let bytes = a.s.clone().unwrap_or_default();
                String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| {
                    format!("node '{}': attribute '{name}' is not UTF-8", self.node.name)
                })
            }
            Some(a) => Err(kind_error(self.node, a, "a STRING")),
        }
    }

    pub fn string_or(&self, name: &str, default: &str) -> Result<String, String> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&'a TensorProto>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == Some(AttributeType::Tensor) => match &a.t {
                Some(t) => Ok(Some(t)),
                None => Err(format!(
                    "node '{}': attribute '{name}' has no tensor",
                    self.node.name
                )),
            },
            Some(a) => Err(kind_error(self.node, a, "a TENSOR")),
        }
    }

    /// Names of every attribute, to report ones a lowering does not understand.
    pub fn names(&self) -> impl Iterator<Item = &'a str> {
        self.node.attribute.iter().map(|a| a.name.as_str())
    }
}
