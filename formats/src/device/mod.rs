//! Device profiles: what a device can run, how fast, and what it can decrypt.
//!
//! A profile mirrors the questions NNAPI's framework asks a driver (seed 004): its
//! capabilities (type, version, performance per operand type relative to the CPU, the
//! number of cache files it needs) and which operations of a model it supports. Here the
//! second answer comes from declarative rules (operation types, operand types, parameter
//! limits, an on-chip memory budget, decryption support), and
//! [`DeviceProfile::check`] is the single definition of those rules: the partitioner
//! calls it to decide, and the plan stores its [`Decline`] to explain.
//!
//! Profiles are JSON, documented in `docs/DEVICES.md`. Parsing is strict (unknown fields
//! are errors) and every error names the file and the field.

mod capabilities;
mod locate;
mod rules;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::crypto::{Algorithm, Mode};
use crate::nn::{OperandType, OperationType};
use crate::plan::PlanDevice;

pub use crate::plan::Decline;
pub use capabilities::{Capabilities, ExtensionSupport, OperandPerformance};
pub use rules::{RULE_ENCRYPTION, RULE_EXTENSIONS, RULE_MODEL, RULE_OPERATIONS};

/// The most cache files of each kind a device may ask for (NNAPI's limit).
pub const MAX_CACHE_FILES: u32 = 32;

/// The operation-type wildcard of a rule: every operation no other rule names.
pub const ANY_OPERATION: &str = "*";

/// What kind of device a profile describes (NNAPI's device type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Gpu,
    Dsp,
    Npu,
    Accelerator,
}

impl DeviceKind {
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
            DeviceKind::Dsp => "dsp",
            DeviceKind::Npu => "npu",
            DeviceKind::Accelerator => "accelerator",
        }
    }
}

/// Performance for one operand type, relative to the CPU (which reports 1.0): lower is
/// better.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerformanceInfo {
    /// Time to execute, as a ratio to the CPU.
    pub exec_time: f64,
    /// Energy used, as a ratio to the CPU.
    pub power_usage: f64,
}

impl PerformanceInfo {
    /// NNAPI's "no performance information" (FLT_MAX): such a device loses every
    /// comparison it can lose, but still takes operations nobody else supports.
    pub const UNKNOWN: PerformanceInfo = PerformanceInfo {
        exec_time: f32::MAX as f64,
        power_usage: f32::MAX as f64,
    };

    pub const CPU: PerformanceInfo = PerformanceInfo {
        exec_time: 1.0,
        power_usage: 1.0,
    };
}

/// One rule of supported operations: the operation types it covers and the limits they
/// must respect on this device. An operation is supported when the rule naming its type
/// (or the wildcard rule) accepts it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRule {
    /// NN operation names (`CONV_2D`), or `*` for every operation no other rule names.
    pub types: Vec<String>,
    /// Operand types allowed for the operation's data: its first tensor input and its
    /// outputs. Absent: any type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operand_types: Option<Vec<String>>,
    /// Largest kernel height and width of convolutions and pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_kernel_size: Option<u32>,
    /// Largest stride (either direction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stride: Option<u32>,
    /// Largest dilation (either direction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_dilation: Option<u32>,
    /// Largest channel count (NHWC's C; dimension 1 with the NCHW layout flag) of the
    /// operation's data tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_channels: Option<u32>,
    /// Largest rank of any tensor the operation reads or writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rank: Option<u32>,
    /// Largest size in bytes of any tensor the operation reads or writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tensor_bytes: Option<u64>,
}

/// The modes in which a device decrypts one algorithm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecryptSupport {
    pub algorithm: Algorithm,
    pub modes: Vec<Mode>,
}

/// How many cache files the device needs per prepared model (0..=32 each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFiles {
    pub model: u32,
    pub data: u32,
}

/// The cost of moving data between host memory and the device, in the partitioner's
/// cost units (one unit is one multiply-accumulate, or one element, on the CPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferCost {
    /// Units per byte moved into or out of the device.
    #[serde(default)]
    pub cost_per_byte: f64,
    /// Units per step the device runs (driver launch and synchronization).
    #[serde(default)]
    pub cost_per_step: f64,
}

/// A device profile (see `docs/DEVICES.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Unique among the devices of one compilation.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: DeviceKind,
    pub version: String,
    /// Performance per operand type name (`TENSOR_FLOAT32`).
    #[serde(default)]
    pub performance: BTreeMap<String, PerformanceInfo>,
    /// Performance for operand types `performance` does not list; absent: no information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_performance: Option<PerformanceInfo>,
    /// Performance of `FLOAT32` and `TENSOR_FLOAT32` when the model allows computing
    /// them as float16 (NNAPI's relaxedFloat32toFloat16Performance{Scalar,Tensor}).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relaxed_performance: BTreeMap<String, PerformanceInfo>,
    /// Supported operations.
    #[serde(default)]
    pub operations: Vec<OperationRule>,
    /// Vendor extensions the device implements (NNAPI's extension names, e.g.
    /// `org.nnc.core`): operations of any other extension never run on it, whatever
    /// `operations` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// On-chip memory for one operation's weights and activations together, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget_bytes: Option<u64>,
    /// The device runs control flow (IF and WHILE, with every operation of their
    /// subgraphs on the device). Default false; the CPU always does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub control_flow: bool,
    /// Encryption the device decrypts itself (weights stay on the device).
    #[serde(default)]
    pub decrypts: Vec<DecryptSupport>,
    #[serde(default)]
    pub cache_files: CacheFiles,
    #[serde(default)]
    pub transfer: TransferCost,
}

/// A device profile that could not be read; every variant names the file and field.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{file}: cannot read the device profile: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Malformed JSON, or JSON that does not fit the profile schema.
    #[error("{file}: {}{message} (line {line}, column {column})", field_prefix(.field))]
    Json {
        file: String,
        /// The path of the field at fault, e.g. `devices[0].performance`; empty at the
        /// top level.
        field: String,
        message: String,
        line: usize,
        column: usize,
    },
    /// Well-formed JSON whose values break a rule (a range, an unknown name, a duplicate).
    #[error("{file}: {field}: {message}")]
    Invalid {
        file: String,
        field: String,
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// The file forms: one profile, a list, or an object with a `devices` list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceList {
    devices: Vec<DeviceProfile>,
}

/// Parses a profile file's text: one profile object, an array of profiles, or
/// `{"devices": [...]}`. `origin` names the file in errors. Checks every profile and that
/// names are unique.
pub fn parse_profiles(text: &str, origin: &str) -> Result<Vec<DeviceProfile>, DeviceError> {
    // Paths in errors follow the file's form: `name`, `[1].name` or `devices[1].name`.
    let (profiles, prefix): (Vec<DeviceProfile>, Option<&str>) =
        if text.trim_start().starts_with('[') {
            (from_json(text, origin)?, Some(""))
        } else if is_device_list(text) {
            (
                from_json::<DeviceList>(text, origin)?.devices,
                Some("devices"),
            )
        } else {
            (vec![from_json::<DeviceProfile>(text, origin)?], None)
        };
    let field = |i: usize, rest: &str| -> String {
        match prefix {
            Some(prefix) => join_path(&format!("{prefix}[{i}]"), rest),
            None => rest.to_string(),
        }
    };
    for (i, p) in profiles.iter().enumerate() {
        p.check_fields()
            .map_err(|(f, message)| DeviceError::Invalid {
                file: origin.to_string(),
                field: field(i, &f),
                message,
            })?;
        if let Some(first) = profiles[..i].iter().position(|q| q.name == p.name) {
            return Err(DeviceError::Invalid {
                file: origin.to_string(),
                field: field(i, "name"),
                message: format!(
                    "device name '{}' is already used by {}",
                    p.name,
                    field(first, "")
                ),
            });
        }
    }
    Ok(profiles)
}

/// Reads a profile file (see [`parse_profiles`]).
pub fn load_profiles(path: &Path) -> Result<Vec<DeviceProfile>, DeviceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| DeviceError::Io {
        file: file.clone(),
        source,
    })?;
    parse_profiles(&text, &file)
}

/// Whether the text is an object whose only key is `devices` (as opposed to a profile).
fn is_device_list(text: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => map.contains_key("devices"),
        _ => false,
    }
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str, origin: &str) -> Result<T, DeviceError> {
    serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        let field = locate::path_at(text, locate::offset_of(text, line, column));
        // serde_json appends " at line L column C"; the error shows them once, its own way.
        let full = e.to_string();
        let suffix = format!(" at line {line} column {column}");
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        DeviceError::Json {
            file: origin.to_string(),
            field,
            message,
            line,
            column,
        }
    })
}

fn join_path(base: &str, rest: &str) -> String {
    match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (false, true) => base.to_string(),
        (false, false) if rest.starts_with('[') => format!("{base}{rest}"),
        (false, false) => format!("{base}.{rest}"),
    }
}

impl DeviceProfile {
    /// Parses one profile object (see [`parse_profiles`] for files holding several).
    pub fn from_json(text: &str, origin: &str) -> Result<DeviceProfile, DeviceError> {
        let profile: DeviceProfile = from_json(text, origin)?;
        profile.validate(origin)?;
        Ok(profile)
    }

    /// The built-in CPU: runs every operation (nnc's runtime implements all it accepts),
    /// performance 1.0 for every type (the reference the others are relative to), decrypts
    /// every algorithm and mode (in host memory), no transfer cost (it is the host).
    pub fn cpu() -> DeviceProfile {
        DeviceProfile {
            name: "cpu".into(),
            kind: DeviceKind::Cpu,
            version: env!("CARGO_PKG_VERSION").into(),
            performance: BTreeMap::new(),
            default_performance: Some(PerformanceInfo::CPU),
            relaxed_performance: BTreeMap::new(),
            operations: vec![OperationRule {
                types: vec![ANY_OPERATION.into()],
                ..OperationRule::default()
            }],
            extensions: vec![crate::nn::NNC_EXTENSION.into()],
            memory_budget_bytes: None,
            control_flow: true,
            decrypts: Algorithm::ALL
                .iter()
                .map(|&algorithm| DecryptSupport {
                    algorithm,
                    modes: Mode::EVERY.to_vec(),
                })
                .collect(),
            cache_files: CacheFiles::default(),
            transfer: TransferCost::default(),
        }
    }

    pub fn is_cpu(&self) -> bool {
        self.kind == DeviceKind::Cpu
    }

    /// The plan's record of this device.
    pub fn plan_device(&self) -> PlanDevice {
        PlanDevice {
            name: self.name.clone(),
            kind: self.kind.name().to_string(),
            version: self.version.clone(),
            model_cache_files: self.cache_files.model,
            data_cache_files: self.cache_files.data,
        }
    }

    /// Performance for an operand type; `relaxed` when the model lets float32 compute as
    /// float16 (the relaxed entry is used for FLOAT32 and TENSOR_FLOAT32 when present).
    /// [`PerformanceInfo::UNKNOWN`] when the profile says nothing about the type.
    pub fn performance_for(&self, operand_type: OperandType, relaxed: bool) -> PerformanceInfo {
        let name = operand_type.name();
        if relaxed
            && matches!(
                operand_type,
                OperandType::Float32 | OperandType::TensorFloat32
            )
            && let Some(p) = self.relaxed_performance.get(name)
        {
            return *p;
        }
        self.performance
            .get(name)
            .copied()
            .or(self.default_performance)
            .unwrap_or(PerformanceInfo::UNKNOWN)
    }

    /// Whether the device decrypts `algorithm` in `mode` itself.
    pub fn decrypts(&self, algorithm: Algorithm, mode: Mode) -> bool {
        self.decrypts
            .iter()
            .any(|d| d.algorithm == algorithm && d.modes.contains(&mode))
    }

    /// The rule covering an operation type: the one naming it, else the wildcard rule.
    pub fn rule_for(&self, op: OperationType) -> Option<&OperationRule> {
        let name = op.name();
        self.operations
            .iter()
            .find(|r| r.types.iter().any(|t| t == name))
            .or_else(|| {
                self.operations
                    .iter()
                    .find(|r| r.types.iter().any(|t| t == ANY_OPERATION))
            })
    }

    /// Checks the values serde cannot: ranges, names, duplicates. `origin` names the
    /// source in errors.
    pub fn validate(&self, origin: &str) -> Result<(), DeviceError> {
        self.check_fields()
            .map_err(|(field, message)| DeviceError::Invalid {
                file: origin.to_string(),
                field,
                message,
            })
    }

    /// The first broken field as (path within the profile, message).
    fn check_fields(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, message: String| Err((field.to_string(), message));
        if self.name.trim().is_empty() {
            return bad("name", "must not be empty".into());
        }
        if self.name.len() > 64 || self.name.chars().any(char::is_control) {
            return bad(
                "name",
                "must be at most 64 bytes without control characters".into(),
            );
        }
        if self.version.trim().is_empty() {
            return bad("version", "must not be empty".into());
        }
        for (key, p) in &self.performance {
            if OperandType::ALL.iter().all(|t| t.name() != key) {
                return bad(
                    &format!("performance.{key}"),
                    format!(
                        "unknown operand type '{key}' (expected an NN operand type name such as TENSOR_FLOAT32)"
                    ),
                );
            }
            check_performance(&format!("performance.{key}"), p)?;
        }
        if let Some(p) = &self.default_performance {
            check_performance("default_performance", p)?;
        }
        for (key, p) in &self.relaxed_performance {
            if key != "FLOAT32" && key != "TENSOR_FLOAT32" {
                return bad(
                    &format!("relaxed_performance.{key}"),
                    format!(
                        "'{key}' is not FLOAT32 or TENSOR_FLOAT32 (relaxed performance describes float32 computed as float16)"
                    ),
                );
            }
            check_performance(&format!("relaxed_performance.{key}"), p)?;
        }
        for (k, e) in self.extensions.iter().enumerate() {
            if e != crate::nn::NNC_EXTENSION {
                return bad(
                    &format!("extensions[{k}]"),
                    format!(
                        "unknown extension '{e}' (nnc knows {})",
                        crate::nn::NNC_EXTENSION
                    ),
                );
            }
        }
        let mut named: BTreeMap<&str, usize> = BTreeMap::new();
        for (r, rule) in self.operations.iter().enumerate() {
            let at = |f: &str| format!("operations[{r}].{f}");
            if rule.types.is_empty() {
                return bad(&at("types"), "must list at least one operation".into());
            }
            for (k, t) in rule.types.iter().enumerate() {
                if t != ANY_OPERATION && OperationType::from_name(t).is_none() {
                    return bad(
                        &at(&format!("types[{k}]")),
                        format!(
                            "unknown operation '{t}' (expected an NN operation name such as CONV_2D, or '*')"
                        ),
                    );
                }
                if let Some(ext) = OperationType::from_name(t).and_then(|o| o.extension())
                    && !self.extensions.iter().any(|e| e == ext)
                {
                    return bad(
                        &at(&format!("types[{k}]")),
                        format!(
                            "'{t}' is an operation of the extension {ext}, which `extensions` \
                             does not list"
                        ),
                    );
                }
                if let Some(&first) = named.get(t.as_str()) {
                    return bad(
                        &at(&format!("types[{k}]")),
                        format!("'{t}' is already covered by operations[{first}]"),
                    );
                }
                named.insert(t, r);
            }
            if let Some(types) = &rule.operand_types {
                if types.is_empty() {
                    return bad(
                        &at("operand_types"),
                        "must list at least one operand type (omit it to allow any)".into(),
                    );
                }
                for (k, t) in types.iter().enumerate() {
                    if OperandType::ALL.iter().all(|o| o.name() != t) {
                        return bad(
                            &at(&format!("operand_types[{k}]")),
                            format!("unknown operand type '{t}'"),
                        );
                    }
                    if types[..k].contains(t) {
                        return bad(
                            &at(&format!("operand_types[{k}]")),
                            format!("'{t}' is listed twice"),
                        );
                    }
                }
            }
            let limits = [
                ("max_kernel_size", rule.max_kernel_size.map(u64::from)),
                ("max_stride", rule.max_stride.map(u64::from)),
                ("max_dilation", rule.max_dilation.map(u64::from)),
                ("max_channels", rule.max_channels.map(u64::from)),
                ("max_rank", rule.max_rank.map(u64::from)),
                ("max_tensor_bytes", rule.max_tensor_bytes),
            ];
            for (name, value) in limits {
                if value == Some(0) {
                    return bad(
                        &at(name),
                        "must be at least 1 (omit it for no limit)".into(),
                    );
                }
            }
        }
        if self.memory_budget_bytes == Some(0) {
            return bad(
                "memory_budget_bytes",
                "must be at least 1 (omit it for no limit)".into(),
            );
        }
        for (d, support) in self.decrypts.iter().enumerate() {
            if let Some(first) = self.decrypts[..d]
                .iter()
                .position(|s| s.algorithm == support.algorithm)
            {
                return bad(
                    &format!("decrypts[{d}].algorithm"),
                    format!(
                        "{} is already listed in decrypts[{first}]",
                        support.algorithm
                    ),
                );
            }
            if support.modes.is_empty() {
                return bad(
                    &format!("decrypts[{d}].modes"),
                    "must list at least one mode".into(),
                );
            }
            for (k, m) in support.modes.iter().enumerate() {
                if support.modes[..k].contains(m) {
                    return bad(
                        &format!("decrypts[{d}].modes[{k}]"),
                        format!("{m} is listed twice"),
                    );
                }
            }
        }
        for (field, n) in [
            ("cache_files.model", self.cache_files.model),
            ("cache_files.data", self.cache_files.data),
        ] {
            if n > MAX_CACHE_FILES {
                return bad(
                    field,
                    format!("{n} is above the limit of {MAX_CACHE_FILES} cache files"),
                );
            }
        }
        for (field, v) in [
            ("transfer.cost_per_byte", self.transfer.cost_per_byte),
            ("transfer.cost_per_step", self.transfer.cost_per_step),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(field, format!("must be a finite number >= 0, got {v}"));
            }
        }
        Ok(())
    }
}

fn check_performance(field: &str, p: &PerformanceInfo) -> Result<(), (String, String)> {
    for (name, v) in [("exec_time", p.exec_time), ("power_usage", p.power_usage)] {
        // Zero would make every comparison meaningless; infinities and NaN cannot rank.
        if !v.is_finite() || v <= 0.0 {
            return Err((
                format!("{field}.{name}"),
                format!("must be a finite number > 0 (a ratio to the CPU's 1.0), got {v}"),
            ));
        }
    }
    Ok(())
}
