//! The one table of ONNX operators nnc lowers: for each operator, its domain, the
//! definitions (ONNX "since versions") its lowering handles, and the lowering itself.
//!
//! A node is resolved to the definition in force at the model's operator set for the
//! node's domain: the newest since version not above it ([`crate::onnx::versions`] lists every
//! definition ONNX has). A node is lowered only when that definition is one its entry
//! handles; otherwise it is refused naming the operator, the definition and the model's
//! opset, never the whole model. The supported-operator list, the refusal messages and
//! the dispatch all read this table, so they cannot disagree; adding an operator is one
//! line here plus its lowering.
//!
//! Why explicit upper bounds: a definition newer than the bound has not been reviewed
//! (ONNX sometimes changes semantics in a new version), so regenerating the version table
//! for a newer ONNX release refuses the new definitions until someone checks them.

use super::{Lowerer, NResult, Node};
use crate::onnx::versions;

/// The lowering of one node.
pub type LowerFn = fn(&mut Lowerer<'_>, &Node<'_>) -> NResult<()>;

/// One operator nnc lowers.
#[derive(Debug)]
pub struct OnnxOp {
    /// `""` for the default domain (`ai.onnx`), otherwise the domain's name.
    pub domain: &'static str,
    pub name: &'static str,
    /// The oldest and newest definitions (since versions) the lowering handles.
    pub oldest: i64,
    pub newest: i64,
    pub lower: LowerFn,
}

impl OnnxOp {
    /// The operator's name as users see it: `Gelu`, `com.microsoft.Gelu`.
    pub fn qualified_name(&self) -> String {
        qualified(self.domain, self.name)
    }
}

/// `name` for the default domain, `domain.name` otherwise.
pub fn qualified(domain: &str, name: &str) -> String {
    if is_default_domain(domain) {
        name.to_string()
    } else {
        format!("{domain}.{name}")
    }
}

pub fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// The domain of ONNX's classical machine-learning operators.
pub const ML: &str = "ai.onnx.ml";

/// The Microsoft domain of the operators ONNX Runtime's transformer optimizer writes.
pub const MICROSOFT: &str = "com.microsoft";

macro_rules! ops {
    ($($domain:expr, $name:literal, $oldest:literal ..= $newest:literal => $method:ident;)*) => {
        &[$(OnnxOp {
            domain: $domain,
            name: $name,
            oldest: $oldest,
            newest: $newest,
            lower: |l, n| l.$method(n),
        },)*]
    };
}

/// Every operator nnc lowers, sorted by domain and name. Definitions before opset 7
/// differ from later ones in `consumed_inputs` (an optimization hint nnc ignores), legacy
/// broadcasting (`broadcast`/`axis`, lowered as such) and per-channel PRelu slopes.
pub static OPERATORS: &[OnnxOp] = ops! {
    "", "Abs", 1..=13 => unary;
    "", "Acos", 7..=22 => math_unary;
    "", "Acosh", 9..=22 => math_unary;
    "", "Add", 1..=14 => binary;
    "", "AffineGrid", 20..=20 => affine_grid;
    "", "And", 7..=7 => binary;
    "", "ArgMax", 1..=13 => arg_reduce;
    "", "ArgMin", 1..=13 => arg_reduce;
    "", "Asin", 7..=22 => math_unary;
    "", "Asinh", 9..=22 => math_unary;
    "", "Atan", 7..=22 => math_unary;
    "", "Atanh", 9..=22 => math_unary;
    "", "Attention", 23..=25 => attention;
    "", "AveragePool", 1..=22 => pool;
    "", "BatchNormalization", 1..=15 => batch_norm;
    "", "BitShift", 11..=28 => bitwise;
    "", "BitwiseAnd", 18..=18 => bitwise;
    "", "BitwiseNot", 18..=18 => bitwise;
    "", "BitwiseOr", 18..=18 => bitwise;
    "", "BitwiseXor", 18..=18 => bitwise;
    "", "Cast", 6..=28 => cast;
    "", "CastLike", 15..=25 => cast;
    "", "Ceil", 1..=13 => unary;
    "", "Celu", 12..=28 => activation;
    "", "Clip", 6..=13 => activation;
    "", "Compress", 9..=28 => compress;
    "", "Concat", 4..=13 => concat;
    "", "Constant", 1..=25 => constant_node;
    "", "ConstantOfShape", 9..=25 => constant_of_shape;
    "", "Conv", 1..=22 => conv;
    "", "ConvInteger", 10..=10 => conv_integer;
    "", "ConvTranspose", 1..=22 => conv_transpose;
    "", "Cos", 7..=22 => unary;
    "", "Cosh", 9..=22 => math_unary;
    "", "CumSum", 11..=14 => cumsum;
    "", "DepthToSpace", 1..=28 => depth_space;
    "", "DequantizeLinear", 10..=28 => dequantize_linear;
    "", "Div", 1..=14 => binary;
    "", "Dropout", 7..=22 => identity;
    "", "DynamicQuantizeLinear", 11..=11 => dynamic_quantize_linear;
    "", "Einsum", 12..=28 => einsum;
    "", "Elu", 1..=22 => activation;
    "", "Equal", 7..=19 => binary;
    "", "Erf", 9..=13 => erf;
    "", "Exp", 1..=13 => unary;
    "", "Expand", 8..=13 => expand;
    "", "EyeLike", 9..=22 => eye_like;
    "", "Flatten", 1..=25 => flatten;
    "", "Floor", 1..=13 => unary;
    "", "GRU", 7..=22 => recurrent;
    "", "Gather", 1..=13 => gather;
    "", "GatherElements", 11..=13 => gather_elements;
    "", "GatherND", 11..=13 => gather_nd;
    "", "Gelu", 20..=20 => gelu;
    "", "Gemm", 1..=13 => gemm;
    "", "GlobalAveragePool", 1..=22 => global_pool;
    "", "GlobalLpPool", 1..=22 => global_lp_pool;
    "", "GlobalMaxPool", 1..=22 => global_pool;
    "", "Greater", 7..=13 => binary;
    "", "GreaterOrEqual", 12..=16 => binary;
    "", "GridSample", 16..=22 => grid_sample;
    "", "GroupNormalization", 21..=21 => group_norm;
    "", "HardSigmoid", 1..=22 => activation;
    "", "HardSwish", 14..=22 => activation;
    "", "Hardmax", 1..=13 => hardmax;
    "", "Identity", 1..=25 => identity;
    "", "If", 1..=25 => if_node;
    "", "InstanceNormalization", 6..=22 => instance_norm;
    "", "IsInf", 10..=20 => is_nan_inf;
    "", "IsNaN", 9..=20 => is_nan_inf;
    "", "LRN", 1..=13 => lrn;
    "", "LSTM", 7..=22 => recurrent;
    "", "LayerNormalization", 17..=17 => layer_norm;
    "", "LeakyRelu", 1..=16 => activation;
    "", "Less", 7..=13 => binary;
    "", "LessOrEqual", 12..=16 => binary;
    "", "Log", 1..=13 => unary;
    "", "LogSoftmax", 1..=13 => softmax;
    "", "Loop", 1..=25 => loop_node;
    "", "LpPool", 1..=22 => lp_pool;
    "", "MatMul", 1..=13 => matmul;
    "", "MatMulInteger", 10..=10 => matmul_integer;
    "", "Max", 1..=13 => binary;
    "", "MaxPool", 1..=22 => pool;
    "", "Mean", 1..=13 => binary;
    "", "MeanVarianceNormalization", 9..=13 => mean_variance_norm;
    "", "Min", 1..=13 => binary;
    "", "Mish", 18..=22 => activation;
    "", "Mod", 10..=28 => mod_op;
    "", "Mul", 1..=14 => binary;
    "", "Neg", 1..=13 => unary;
    "", "NegativeLogLikelihoodLoss", 12..=22 => nll_loss;
    "", "NonMaxSuppression", 10..=11 => non_max_suppression;
    "", "NonZero", 9..=13 => non_zero;
    "", "Not", 1..=1 => unary;
    "", "OneHot", 9..=28 => one_hot;
    "", "Or", 7..=7 => binary;
    "", "PRelu", 1..=16 => activation;
    "", "Pad", 2..=25 => pad;
    "", "Pow", 1..=15 => binary;
    "", "QLinearConv", 10..=10 => qlinear_conv;
    "", "QLinearMatMul", 10..=21 => qlinear_matmul;
    "", "QuantizeLinear", 10..=28 => quantize_linear;
    "", "RMSNormalization", 23..=23 => rms_norm;
    "", "RNN", 7..=22 => recurrent;
    "", "Range", 11..=27 => range;
    "", "Reciprocal", 1..=13 => unary;
    "", "ReduceL1", 1..=18 => reduce;
    "", "ReduceL2", 1..=18 => reduce;
    "", "ReduceLogSum", 1..=28 => reduce;
    "", "ReduceLogSumExp", 1..=28 => reduce;
    "", "ReduceMax", 1..=20 => reduce;
    "", "ReduceMean", 1..=18 => reduce;
    "", "ReduceMin", 1..=20 => reduce;
    "", "ReduceProd", 1..=18 => reduce;
    "", "ReduceSum", 1..=13 => reduce;
    "", "ReduceSumSquare", 1..=18 => reduce;
    "", "Relu", 1..=14 => activation;
    "", "Reshape", 5..=25 => reshape;
    "", "Resize", 10..=19 => resize;
    "", "ReverseSequence", 10..=28 => reverse_sequence;
    "", "Round", 11..=22 => math_unary;
    "", "Scan", 8..=25 => scan_node;
    "", "Scatter", 9..=11 => scatter_elements;
    "", "ScatterElements", 11..=18 => scatter_elements;
    "", "ScatterND", 11..=18 => scatter_nd;
    "", "Selu", 1..=22 => activation;
    "", "Shape", 1..=25 => shape_of;
    "", "Shrink", 9..=9 => shrink;
    "", "Sigmoid", 1..=13 => activation;
    "", "Sign", 9..=13 => unary;
    "", "Sin", 7..=22 => unary;
    "", "Sinh", 9..=22 => math_unary;
    "", "Size", 1..=25 => shape_of;
    "", "Slice", 1..=13 => slice;
    "", "Softmax", 1..=13 => softmax;
    "", "SoftmaxCrossEntropyLoss", 12..=13 => softmax_cross_entropy_loss;
    "", "Softplus", 1..=22 => activation;
    "", "Softsign", 1..=22 => activation;
    "", "SpaceToDepth", 1..=28 => depth_space;
    "", "Split", 2..=18 => split;
    "", "Sqrt", 1..=13 => unary;
    "", "Squeeze", 1..=25 => squeeze_unsqueeze;
    "", "Sub", 1..=14 => binary;
    "", "Sum", 1..=13 => binary;
    "", "Tan", 7..=22 => math_unary;
    "", "Tanh", 1..=13 => activation;
    "", "ThresholdedRelu", 10..=22 => activation;
    "", "Tile", 6..=13 => tile;
    "", "TopK", 1..=24 => topk;
    "", "Transpose", 1..=25 => transpose;
    "", "Trilu", 14..=14 => trilu;
    "", "Unique", 11..=28 => unique;
    "", "Unsqueeze", 1..=25 => squeeze_unsqueeze;
    "", "Upsample", 7..=10 => resize;
    "", "Where", 9..=16 => where_op;
    "", "Xor", 7..=7 => binary;
    ML, "Binarizer", 1..=1 => binarizer;
    ML, "LinearClassifier", 1..=1 => linear_classifier;
    ML, "LinearRegressor", 1..=1 => linear_regressor;
    ML, "Normalizer", 1..=1 => normalizer;
    ML, "Scaler", 1..=1 => scaler;
    MICROSOFT, "Attention", 1..=1 => microsoft_attention;
    MICROSOFT, "BiasGelu", 1..=1 => microsoft_gelu;
    MICROSOFT, "DynamicQuantizeMatMul", 1..=1 => dynamic_quantize_matmul;
    MICROSOFT, "FastGelu", 1..=1 => microsoft_gelu;
    MICROSOFT, "Gelu", 1..=1 => microsoft_gelu;
    MICROSOFT, "MultiHeadAttention", 1..=1 => multi_head_attention;
    MICROSOFT, "SkipLayerNormalization", 1..=1 => skip_layer_norm;
};

/// Why a node cannot be lowered before looking at its attributes.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A valid operator nnc does not lower (exit 69).
    Unsupported(String),
    /// A node the model's own operator sets do not define (exit 65).
    Invalid(String),
}

/// The operator sets a model imports: domain -> version.
#[derive(Clone, Debug, Default)]
pub struct Opsets {
    imports: Vec<(String, i64)>,
}

impl Opsets {
    pub fn new(imports: impl IntoIterator<Item = (String, i64)>) -> Opsets {
        Opsets {
            imports: imports
                .into_iter()
                .map(|(d, v)| {
                    (
                        if is_default_domain(&d) {
                            String::new()
                        } else {
                            d
                        },
                        v,
                    )
                })
                .collect(),
        }
    }

    /// The version the model imports for `domain`.
    pub fn version(&self, domain: &str) -> Option<i64> {
        let domain = if is_default_domain(domain) {
            ""
        } else {
            domain
        };
        self.imports
            .iter()
            .find(|(d, _)| d == domain)
            .map(|&(_, v)| v)
    }
}

/// The ONNX definitions of `name` in `domain` (since versions), when ONNX defines it.
pub fn onnx_definitions(domain: &str, name: &str) -> Option<&'static [i64]> {
    let table = match domain {
        d if is_default_domain(d) => versions::DEFAULT,
        "ai.onnx.ml" => versions::ML,
        "ai.onnx.preview.training" => versions::PREVIEW_TRAINING,
        "ai.onnx.preview" => versions::PREVIEW,
        _ => return None,
    };
    table
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| table[i].1)
}

/// The registry entry of `name` in `domain`.
pub fn entry(domain: &str, name: &str) -> Option<&'static OnnxOp> {
    let domain = if is_default_domain(domain) {
        ""
    } else {
        domain
    };
    // The table is sorted by (domain, name); a unit test holds it so.
    OPERATORS
        .binary_search_by(|op| (op.domain, op.name).cmp(&(domain, name)))
        .ok()
        .map(|i| &OPERATORS[i])
}

/// Resolves a node to its entry and the definition (since version) in force.
pub fn resolve(
    domain: &str,
    name: &str,
    opsets: &Opsets,
) -> Result<(&'static OnnxOp, i64), Refusal> {
    let shown = qualified(domain, name);
    let Some(opset) = opsets.version(domain) else {
        return Err(Refusal::Invalid(format!(
            "operator {shown} is in domain '{domain}', which the model does not import \
             (opset_import has no entry for it)"
        )));
    };
    let definitions = onnx_definitions(domain, name);
    // The definition in force: ONNX's own table for ONNX domains; for other domains
    // (com.microsoft) the domain's single version.
    let version = match definitions {
        Some(defs) => match defs.iter().rev().find(|&&v| v <= opset) {
            Some(&v) => v,
            None => {
                return Err(Refusal::Invalid(format!(
                    "operator {shown} does not exist in opset {opset} (it was introduced in \
                     opset {})",
                    defs[0]
                )));
            }
        },
        None => opset,
    };
    let Some(op) = entry(domain, name) else {
        let onnx_domain = is_default_domain(domain) || domain.starts_with("ai.onnx.");
        let why = if definitions.is_some() {
            if is_default_domain(domain) {
                format!("no lowering for {shown}")
            } else {
                format!("no lowering for the {domain} operator {name}")
            }
        } else if onnx_domain {
            format!("{shown} is not an operator of onnx's operator sets")
        } else {
            format!("no lowering for {shown} (custom operator domain '{domain}')")
        };
        return Err(Refusal::Unsupported(why));
    };
    if version < op.oldest || version > op.newest {
        let handled = if op.oldest == op.newest {
            format!("version {}", op.oldest)
        } else {
            format!("versions {} to {}", op.oldest, op.newest)
        };
        return Err(Refusal::Unsupported(format!(
            "{shown} version {version} (model opset {opset}) is not supported; nnc lowers \
             {handled}"
        )));
    }
    Ok((op, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opsets(v: i64) -> Opsets {
        Opsets::new([(String::new(), v), (MICROSOFT.to_string(), 1)])
    }

    #[test]
    fn the_table_is_sorted_and_names_real_onnx_definitions() {
        for pair in OPERATORS.windows(2) {
            assert!(
                (pair[0].domain, pair[0].name) < (pair[1].domain, pair[1].name),
                "{} is out of order",
                pair[1].name
            );
        }
        for op in OPERATORS {
            assert!(op.oldest <= op.newest, "{}", op.name);
            if let Some(defs) = onnx_definitions(op.domain, op.name) {
                assert!(
                    defs.contains(&op.newest),
                    "{}: {} is not a definition",
                    op.name,
                    op.newest
                );
                assert!(
                    defs.iter().any(|&v| v <= op.oldest),
                    "{}: nothing at or before {}",
                    op.name,
                    op.oldest
                );
            }
        }
        for table in [
            versions::DEFAULT,
            versions::ML,
            versions::PREVIEW_TRAINING,
            versions::PREVIEW,
        ] {
            for pair in table.windows(2) {
                assert!(pair[0].0 < pair[1].0);
            }
        }
    }

    #[test]
    fn a_node_resolves_to_the_definition_in_force_at_its_opset() {
        assert_eq!(resolve("", "Softmax", &opsets(12)).unwrap().1, 11);
        assert_eq!(resolve("ai.onnx", "Softmax", &opsets(13)).unwrap().1, 13);
        assert_eq!(resolve("", "Reshape", &opsets(28)).unwrap().1, 25);
    }

    #[test]
    fn refusals_name_the_operator_and_version() {
        match resolve("", "Dropout", &opsets(6)) {
            Err(Refusal::Unsupported(m)) => {
                assert!(m.contains("Dropout version 6 (model opset 6)"), "{m}");
                assert!(m.contains("versions 7 to 22"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resolve("", "HardSwish", &opsets(13)),
            Err(Refusal::Invalid(m)) if m.contains("introduced in opset 14")
        ));
        assert!(matches!(
            resolve("", "NoSuchOp", &opsets(13)),
            Err(Refusal::Unsupported(m)) if m.contains("not an operator")
        ));
        assert!(matches!(
            resolve("ai.onnx.ml", "TreeEnsembleClassifier", &Opsets::new([("ai.onnx.ml".into(), 3)])),
            Err(Refusal::Unsupported(m)) if m.contains("ai.onnx.ml operator TreeEnsembleClassifier")
        ));
        assert!(matches!(
            resolve("com.example", "Fancy", &opsets(13)),
            Err(Refusal::Invalid(m)) if m.contains("does not import")
        ));
    }
}
