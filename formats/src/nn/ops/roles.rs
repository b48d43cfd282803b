//! What each input of an operation is for: the names dumps print, device rules and the
//! partition cost model look inputs up by, and signature errors use.

use std::fmt;

macro_rules! roles {
    ($($variant:ident = $name:literal,)*) => {
        /// The role of one input of an operation (see [`super::input_role`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Role {
            $($variant,)*
        }

        impl Role {
            /// Every role.
            pub const ALL: &'static [Role] = &[$(Role::$variant,)*];

            /// The name dumps print and device profiles use (`bias`, `stride_w`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(Role::$variant => $name,)*
                }
            }
        }
    };
}

roles! {
    Input = "input",
    Filter = "filter",
    Bias = "bias",
    PadLeft = "pad_left",
    PadRight = "pad_right",
    PadTop = "pad_top",
    PadBottom = "pad_bottom",
    StrideW = "stride_w",
    StrideH = "stride_h",
    Activation = "activation",
    Layout = "layout",
    DilationW = "dilation_w",
    DilationH = "dilation_h",
    Padding = "padding",
    Multiplier = "multiplier",
    FilterW = "filter_w",
    FilterH = "filter_h",
    Axis = "axis",
    Input0 = "input0",
    Input1 = "input1",
    Groups = "groups",
    OutputShape = "output_shape",
    Weights = "weights",
    Shape = "shape",
    Perm = "perm",
    SqueezeDims = "squeeze_dims",
    Axes = "axes",
    KeepDims = "keep_dims",
    Beta = "beta",
    Paddings = "paddings",
    Value = "value",
    Indices = "indices",
    Fmod = "fmod",
    Function = "function",
    Taps = "taps",
    Grid = "grid",
    Mode = "mode",
    PaddingMode = "padding_mode",
    Extrapolation = "extrapolation",
    Exclusive = "exclusive",
    Reverse = "reverse",
    Landmarks = "landmarks",
    Subset = "subset",
    LeftIndex = "left_index",
    RightIndex = "right_index",
    TargetRotation = "target_rotation",
    OutputWidth = "output_width",
    OutputHeight = "output_height",
    ScaleX = "scale_x",
    ScaleY = "scale_y",
    Matrix = "matrix",
    BatchDims = "batch_dims",
    Updates = "updates",
    Reduction = "reduction",
    Gamma = "gamma",
    Epsilon = "epsilon",
    Approximate = "approximate",
    Begin = "begin",
    Size = "size",
    End = "end",
    Strides = "strides",
    BeginMask = "begin_mask",
    EndMask = "end_mask",
    ShrinkMask = "shrink_mask",
    NumSplits = "num_splits",
    Multiples = "multiples",
    K = "k",
    Alpha = "alpha",
    Lhs = "lhs",
    Rhs = "rhs",
    AdjLhs = "adj_lhs",
    AdjRhs = "adj_rhs",
    Width = "width",
    Height = "height",
    AlignCorners = "align_corners",
    HalfPixel = "half_pixel",
    BlockSize = "block_size",
    Radius = "radius",
    Condition = "condition",
    InputTrue = "input_true",
    InputFalse = "input_false",
    Then = "then",
    Else = "else",
    Body = "body",
    RecurrentWeights = "recurrent_weights",
    HiddenState = "hidden_state",
    TimeMajor = "time_major",
    InputToInputWeights = "input_to_input_weights",
    InputToForgetWeights = "input_to_forget_weights",
    InputToCellWeights = "input_to_cell_weights",
    InputToOutputWeights = "input_to_output_weights",
    RecurrentToInputWeights = "recurrent_to_input_weights",
    RecurrentToForgetWeights = "recurrent_to_forget_weights",
    RecurrentToCellWeights = "recurrent_to_cell_weights",
    RecurrentToOutputWeights = "recurrent_to_output_weights",
    CellToInputWeights = "cell_to_input_weights",
    CellToForgetWeights = "cell_to_forget_weights",
    CellToOutputWeights = "cell_to_output_weights",
    InputGateBias = "input_gate_bias",
    ForgetGateBias = "forget_gate_bias",
    CellBias = "cell_bias",
    OutputGateBias = "output_gate_bias",
    ProjectionWeights = "projection_weights",
    ProjectionBias = "projection_bias",
    OutputStateIn = "output_state_in",
    CellStateIn = "cell_state_in",
    CellClip = "cell_clip",
    ProjectionClip = "projection_clip",
    InputLayerNormWeights = "input_layer_norm_weights",
    ForgetLayerNormWeights = "forget_layer_norm_weights",
    CellLayerNormWeights = "cell_layer_norm_weights",
    OutputLayerNormWeights = "output_layer_norm_weights",
    Boxes = "boxes",
    Scores = "scores",
    MaxOutputBoxes = "max_output_boxes",
    IouThreshold = "iou_threshold",
    ScoreThreshold = "score_threshold",
    CenterPointBox = "center_point_box",
    Flatten = "flatten",
    Sorted = "sorted",
}

impl Role {
    /// The role a device profile or a message names, if it is one.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.iter().copied().find(|r| r.name() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
