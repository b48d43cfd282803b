//! The one table of TFLite operators nnc lowers: for each builtin, the operator versions
//! its lowering handles and the lowering itself; for each custom operator (MediaPipe's),
//! its name, versions, input and output counts and lowering.
//!
//! The pre-pass that lists every operator without a lowering ([`refusal`]) and the
//! dispatch ([`super::Lowerer::lower`]) both read these tables, so they cannot disagree;
//! adding an operator is one row here plus its lowering.
//!
//! Builtin version bounds are the versions TFLite defines for the operator (LiteRT's
//! builtin resolver and converter, August 2026). A TFLite version adds a tensor type or
//! an option, which the lowerings check for themselves; a version above the bound has
//! not been looked at and is refused, naming the version, until someone does.

use super::super::model::{OpKind, OperatorDesc, builtin_name};
use super::super::schema_generated::tflite as fb;
use super::{Lowerer, OResult, invalid, unsupported};

use fb::BuiltinOperator as B;

/// The lowering of one operator.
pub type LowerFn = fn(&mut Lowerer<'_, '_>, &OperatorDesc<'_>) -> OResult<()>;

/// One builtin operator nnc lowers.
#[derive(Debug)]
pub struct Builtin {
    pub code: fb::BuiltinOperator,
    /// The oldest and newest operator versions the lowering handles.
    pub oldest: i32,
    pub newest: i32,
    pub lower: LowerFn,
}

/// One custom operator nnc lowers.
#[derive(Debug)]
pub struct Custom {
    pub name: &'static str,
    pub oldest: i32,
    pub newest: i32,
    /// The input and output counts the operator's kernel requires.
    pub inputs: usize,
    pub outputs: usize,
    pub lower: LowerFn,
}

/// A row's lowering: `method` alone, or `method(code)` for lowerings shared by several
/// builtins, which get the row's code.
macro_rules! lowering {
    ($code:ident, $method:ident) => {
        |l, op| l.$method(op)
    };
    ($code:ident, $method:ident(code)) => {
        |l, op| l.$method(op, B::$code)
    };
}

macro_rules! builtins {
    ($($code:ident, $oldest:literal ..= $newest:literal => $method:ident $(($arg:ident))?;)*) => {
        &[$(Builtin {
            code: B::$code,
            oldest: $oldest,
            newest: $newest,
            lower: lowering!($code, $method $(($arg))?),
        },)*]
    };
}

/// Every builtin operator nnc lowers, sorted by name.
pub static BUILTINS: &[Builtin] = builtins! {
    ADD, 1..=6 => arithmetic(code);
    ARG_MAX, 1..=3 => arg_reduce(code);
    ARG_MIN, 1..=3 => arg_reduce(code);
    AVERAGE_POOL_2D, 1..=3 => pool(code);
    BATCH_MATMUL, 1..=4 => batch_matmul;
    CONCATENATION, 1..=7 => concatenation;
    CONV_2D, 1..=8 => conv_2d;
    DENSIFY, 1..=1 => densify;
    DEPTHWISE_CONV_2D, 1..=7 => depthwise_conv_2d;
    DEPTH_TO_SPACE, 1..=2 => depth_space(code);
    DEQUANTIZE, 1..=9 => dequantize;
    DIV, 1..=2 => arithmetic(code);
    EXP, 1..=2 => float_unary(code);
    EXPAND_DIMS, 1..=1 => expand_dims;
    FULLY_CONNECTED, 1..=14 => fully_connected;
    GATHER, 1..=8 => gather;
    HARD_SWISH, 1..=1 => activation(code);
    L2_POOL_2D, 1..=1 => pool(code);
    LEAKY_RELU, 1..=2 => leaky_relu;
    LOG, 1..=2 => float_unary(code);
    LOGISTIC, 1..=3 => activation(code);
    MAXIMUM, 1..=4 => min_max(code);
    MAX_POOL_2D, 1..=3 => pool(code);
    MEAN, 1..=3 => reduce(code);
    MINIMUM, 1..=4 => min_max(code);
    MIRROR_PAD, 1..=3 => pad(code);
    MUL, 1..=8 => arithmetic(code);
    PACK, 1..=5 => pack;
    PAD, 1..=6 => pad(code);
    PADV2, 1..=6 => pad(code);
    PRELU, 1..=1 => prelu;
    QUANTIZE, 1..=6 => quantize;
    REDUCE_MAX, 1..=3 => reduce(code);
    RELU, 1..=3 => activation(code);
    RELU6, 1..=3 => activation(code);
    RELU_N1_TO_1, 1..=1 => activation(code);
    RESHAPE, 1..=1 => reshape;
    RESIZE_BILINEAR, 1..=4 => resize(code);
    RESIZE_NEAREST_NEIGHBOR, 1..=4 => resize(code);
    RSQRT, 1..=3 => float_unary(code);
    SHAPE, 1..=1 => shape;
    SLICE, 1..=8 => slice;
    SOFTMAX, 1..=4 => softmax;
    SPACE_TO_DEPTH, 1..=2 => depth_space(code);
    SPLIT, 1..=5 => split;
    SQRT, 1..=2 => float_unary(code);
    SQUEEZE, 1..=2 => squeeze;
    STRIDED_SLICE, 1..=8 => strided_slice;
    SUB, 1..=5 => arithmetic(code);
    SUM, 1..=2 => reduce(code);
    TANH, 1..=3 => activation(code);
    TRANSPOSE, 1..=9 => transpose;
    TRANSPOSE_CONV, 1..=5 => transpose_conv;
};

/// Every custom operator nnc lowers, sorted by name: MediaPipe's
/// (`mediapipe/util/tflite/operations/`, lowered in `custom.rs`).
pub static CUSTOM: &[Custom] = &[
    Custom {
        name: "Convolution2DTransposeBias",
        oldest: 1,
        newest: 1,
        inputs: 3,
        outputs: 1,
        lower: |l, op| l.transpose_conv_bias(op),
    },
    Custom {
        name: "Landmarks2TransformMatrix",
        oldest: 2,
        newest: 2,
        inputs: 1,
        outputs: 1,
        lower: |l, op| l.landmarks_to_matrix(op),
    },
    Custom {
        name: "MaxPoolingWithArgmax2D",
        oldest: 1,
        newest: 1,
        inputs: 1,
        outputs: 2,
        lower: |l, op| l.max_pool_argmax(op),
    },
    Custom {
        name: "MaxUnpooling2D",
        oldest: 1,
        newest: 1,
        inputs: 2,
        outputs: 1,
        lower: |l, op| l.max_unpooling(op),
    },
    Custom {
        name: "TransformLandmarks",
        oldest: 2,
        newest: 2,
        inputs: 2,
        outputs: 1,
        lower: |l, op| l.transform_landmarks(op),
    },
    Custom {
        name: "TransformTensorBilinear",
        oldest: 2,
        newest: 2,
        inputs: 2,
        outputs: 1,
        lower: |l, op| l.transform_tensor_bilinear(op),
    },
];

/// Builtins that call other subgraphs; nnc lowers the main subgraph only.
const CONTROL_FLOW: &[fb::BuiltinOperator] = &[B::IF, B::WHILE, B::CALL_ONCE, B::CALL];

/// The table row of a builtin operator.
pub fn builtin(code: fb::BuiltinOperator) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|row| row.code == code)
}

/// The table row of a custom operator.
pub fn custom(name: &str) -> Option<&'static Custom> {
    CUSTOM.iter().find(|row| row.name == name)
}

/// `version 2` or `versions 1 to 8`.
fn handled(oldest: i32, newest: i32) -> String {
    if oldest == newest {
        format!("version {oldest}")
    } else {
        format!("versions {oldest} to {newest}")
    }
}

impl Builtin {
    /// Why `version` of this builtin is not lowered, if so.
    pub fn version_refusal(&self, version: i32) -> Option<String> {
        (!(self.oldest..=self.newest).contains(&version)).then(|| {
            format!(
                "version {version} of {} is not supported (nnc lowers {})",
                builtin_name(self.code),
                handled(self.oldest, self.newest)
            )
        })
    }
}

impl Custom {
    /// Checks the operator's input and output counts (a wrong count breaks the
    /// operator's own rules) and its version.
    pub fn check(&self, op: &OperatorDesc) -> OResult<()> {
        let name = self.name;
        if op.inputs.len() != self.inputs || op.outputs.len() != self.outputs {
            return invalid(format!(
                "{name} takes {} inputs and {} outputs, got {} and {}",
                self.inputs,
                self.outputs,
                op.inputs.len(),
                op.outputs.len()
            ));
        }
        if !(self.oldest..=self.newest).contains(&op.version) {
            return unsupported(format!(
                "version {} of custom operator {name} is not supported (nnc lowers {})",
                op.version,
                handled(self.oldest, self.newest)
            ));
        }
        Ok(())
    }
}

/// Why an operator cannot be lowered whatever its options and inputs, if so: read by
/// the pre-pass that lists every such operator. A custom operator's counts and version
/// are checked when it is lowered.
pub fn refusal(kind: &OpKind, version: i32) -> Option<String> {
    match kind {
        OpKind::Custom(name) => custom(name)
            .is_none()
            .then(|| "custom operator: no lowering to the NN operation set".to_string()),
        OpKind::Builtin(code) if CONTROL_FLOW.contains(code) => Some(
            "control flow over subgraphs is not supported (nnc lowers the main subgraph only)"
                .to_string(),
        ),
        OpKind::Builtin(code) => match builtin(*code) {
            None => Some("no lowering to the NN operation set".to_string()),
            Some(row) => row.version_refusal(version),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_sorted_without_duplicates() {
        for pair in BUILTINS.windows(2) {
            let (a, b) = (builtin_name(pair[0].code), builtin_name(pair[1].code));
            assert!(a < b, "{b} is out of order or repeated");
        }
        let mut codes: Vec<i32> = BUILTINS.iter().map(|row| row.code.0).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), BUILTINS.len(), "two rows share a code");
        for pair in CUSTOM.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} is out of order or repeated",
                pair[1].name
            );
        }
    }

    #[test]
    fn every_row_is_found_and_accepted_at_its_versions() {
        for row in BUILTINS {
            let name = builtin_name(row.code);
            // A code the generated schema does not name would be a typo'd row.
            assert!(row.code.variant_name().is_some(), "{name}");
            assert!(1 <= row.oldest && row.oldest <= row.newest, "{name}");
            assert!(std::ptr::eq(builtin(row.code).unwrap(), row), "{name}");
            assert!(!CONTROL_FLOW.contains(&row.code), "{name}");
            for v in row.oldest..=row.newest {
                assert_eq!(refusal(&OpKind::Builtin(row.code), v), None, "{name} v{v}");
            }
            assert!(refusal(&OpKind::Builtin(row.code), row.newest + 1).is_some());
            assert!(refusal(&OpKind::Builtin(row.code), row.oldest - 1).is_some());
        }
        for row in CUSTOM {
            assert!(std::ptr::eq(custom(row.name).unwrap(), row), "{}", row.name);
            assert!(1 <= row.oldest && row.oldest <= row.newest, "{}", row.name);
            assert!(row.inputs > 0 && row.outputs > 0, "{}", row.name);
            assert_eq!(refusal(&OpKind::Custom(row.name.to_string()), 0), None);
        }
    }

    #[test]
    fn refusals_name_the_reason_and_the_versions() {
        assert_eq!(
            refusal(&OpKind::Builtin(B::CONV_2D), 9).as_deref(),
            Some("version 9 of CONV_2D is not supported (nnc lowers versions 1 to 8)")
        );
        assert_eq!(
            refusal(&OpKind::Builtin(B::RESHAPE), 2).as_deref(),
            Some("version 2 of RESHAPE is not supported (nnc lowers version 1)")
        );
        assert_eq!(
            refusal(&OpKind::Builtin(B::CUMSUM), 1).as_deref(),
            Some("no lowering to the NN operation set")
        );
        assert!(
            refusal(&OpKind::Builtin(B::WHILE), 1)
                .is_some_and(|r| r.starts_with("control flow over subgraphs"))
        );
        assert_eq!(
            refusal(&OpKind::Custom("NoSuchOp".into()), 1).as_deref(),
            Some("custom operator: no lowering to the NN operation set")
        );
    }
}
