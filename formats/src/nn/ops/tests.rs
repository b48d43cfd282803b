//! Shape rules and the table, checked on hand-made operations.

use super::shape::reshape_dims;
use super::window::conv_out_implicit;
use super::*;
use crate::nn::types::{GridSampleMode, GridSamplePadding, Lifetime, PaddingScheme};

fn t(dims: &[u32]) -> Operand {
    Operand::new(OperandType::TensorFloat32, dims.to_vec())
}

fn c_i32(v: i32) -> (Operand, Vec<u8>) {
    let mut o = Operand::new(OperandType::Int32, vec![]);
    o.lifetime = Lifetime::ConstantCopy;
    (o, v.to_le_bytes().to_vec())
}

fn run(
    op: OperationType,
    tensors: &[Operand],
    scalars: &[(Operand, Vec<u8>)],
) -> Result<Vec<OutputShape>> {
    let mut views: Vec<InputView> = tensors
        .iter()
        .map(|o| InputView {
            operand: o,
            value: None,
        })
        .collect();
    views.extend(scalars.iter().map(|(o, v)| InputView {
        operand: o,
        value: Some(v.as_slice()),
    }));
    let out = t(&[]);
    infer(op, &views, &[&out])
}

#[test]
fn broadcasting() {
    assert_eq!(broadcast_dims(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
    assert_eq!(broadcast_dims(&[0, 3], &[5, 3]).unwrap(), vec![5, 3]);
    assert!(broadcast_dims(&[2, 3], &[4, 3]).is_err());
}

#[test]
fn conv_explicit_padding_and_dilation() {
    let input = t(&[1, 10, 10, 3]);
    let filter = t(&[8, 3, 3, 3]);
    let bias = t(&[8]);
    let mut scalars: Vec<_> = [1, 1, 1, 1, 2, 2, 0].into_iter().map(c_i32).collect();
    let out = run(
        OperationType::Conv2d,
        &[input.clone(), filter.clone(), bias.clone()],
        &scalars,
    )
    .unwrap();
    assert_eq!(out[0].dimensions, vec![1, 5, 5, 8]);
    // layout false, dilation 2x2: effective kernel 5 -> (10 + 2 - 5) / 2 + 1 = 4
    scalars.push({
        let mut o = Operand::new(OperandType::Bool, vec![]);
        o.lifetime = Lifetime::ConstantCopy;
        (o, vec![0])
    });
    scalars.push(c_i32(2));
    scalars.push(c_i32(2));
    let out = run(OperationType::Conv2d, &[input, filter, bias], &scalars).unwrap();
    assert_eq!(out[0].dimensions, vec![1, 4, 4, 8]);
}

#[test]
fn conv_rejects_bad_stride_and_channel_mismatch() {
    let scalars: Vec<_> = [0, 0, 0, 0, 0, 1, 0].into_iter().map(c_i32).collect();
    let err = run(
        OperationType::Conv2d,
        &[t(&[1, 4, 4, 3]), t(&[2, 1, 1, 3]), t(&[2])],
        &scalars,
    )
    .unwrap_err();
    assert!(err.to_string().contains("stride_width"), "{err}");
    let scalars: Vec<_> = [0, 0, 0, 0, 1, 1, 0].into_iter().map(c_i32).collect();
    let err = run(
        OperationType::Conv2d,
        &[t(&[1, 4, 4, 3]), t(&[2, 1, 1, 4]), t(&[2])],
        &scalars,
    )
    .unwrap_err();
    assert!(err.to_string().contains("input channels"), "{err}");
}

#[test]
fn same_padding_matches_tensorflow() {
    assert_eq!(implicit_padding(224, 3, 2, 1, PaddingScheme::Same), (0, 1));
    assert_eq!(implicit_padding(5, 3, 1, 1, PaddingScheme::Same), (1, 1));
    assert_eq!(
        conv_out_implicit(224, 3, 2, 1, PaddingScheme::Same).unwrap(),
        112
    );
    assert_eq!(
        conv_out_implicit(224, 3, 2, 1, PaddingScheme::Valid).unwrap(),
        111
    );
}

#[test]
fn reshape_resolves_minus_one() {
    let input = t(&[2, 3, 4]);
    assert_eq!(reshape_dims(&input, &[-1, 4]).unwrap(), vec![6, 4]);
    assert!(reshape_dims(&input, &[5, -1]).is_err());
    assert!(reshape_dims(&input, &[-1, -1]).is_err());
}

#[test]
fn unknown_dimensions_propagate() {
    let scalars = vec![c_i32(0)];
    let out = run(OperationType::Add, &[t(&[0, 3]), t(&[1, 3])], &scalars).unwrap();
    assert_eq!(out[0].dimensions, vec![0, 3]);
}

#[test]
fn strided_slice_ranges() {
    assert_eq!(
        strided_slice_range(10, 2, 8, 2, false, false, false),
        (2, 8)
    );
    assert_eq!(
        strided_slice_range(10, -1, 0, -1, false, true, false),
        (9, -1)
    );
    assert_eq!(
        strided_slice_range(10, 0, 100, 1, false, false, false),
        (0, 10)
    );
}

#[test]
fn scatter_shapes_and_reductions() {
    let idx = |dims: &[u32]| Operand::new(OperandType::TensorInt32, dims.to_vec());
    // SCATTER_ELEMENTS: input, indices, updates, axis, reduction.
    let out = run(
        OperationType::ScatterElements,
        &[t(&[3, 4]), idx(&[2, 4]), t(&[2, 4])],
        &[c_i32(-2), c_i32(1)],
    )
    .unwrap();
    assert_eq!(out[0].dimensions, vec![3, 4]);
    // Updates must match the indices; the indices fit the input off the axis.
    let wrong = [
        (vec![t(&[3, 4]), idx(&[2, 4]), t(&[2, 3])], 0),
        (vec![t(&[3, 4]), idx(&[2, 5]), t(&[2, 5])], 0),
        (vec![t(&[3, 4]), idx(&[2]), t(&[2])], 0),
        (vec![t(&[3, 4]), idx(&[2, 4]), t(&[2, 4])], 5),
    ];
    for (tensors, reduction) in wrong {
        let scalars = [c_i32(0), c_i32(reduction)];
        assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_err());
    }
    // Reductions need numbers.
    let bools = |n: u32| Operand::new(OperandType::TensorBool8, vec![n]);
    let scalars = [c_i32(0), c_i32(1)];
    let tensors = [bools(3), idx(&[2]), bools(2)];
    assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_err());
    let scalars = [c_i32(0), c_i32(0)];
    assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_ok());
    // SCATTER_ND: updates are indices[..-1] ++ input[k..].
    let nd = |tensors: &[Operand]| run(OperationType::ScatterNd, tensors, &[c_i32(2)]);
    assert_eq!(
        nd(&[t(&[4, 3, 2]), idx(&[5, 1]), t(&[5, 3, 2])]).unwrap()[0].dimensions,
        vec![4, 3, 2]
    );
    assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 2]), t(&[5, 2])]).is_ok());
    assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 2]), t(&[5, 3])]).is_err());
    assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 4]), t(&[5])]).is_err());
    assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 3]), t(&[5, 1])]).is_err());
    // One tuple naming one element: a one-element update.
    assert!(nd(&[t(&[4, 3, 2]), idx(&[3]), t(&[1])]).is_ok());
}

#[test]
fn half_floats_decode() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
    assert!(f16_to_f32(0x7e00).is_nan());
}

#[test]
fn every_operation_type_has_a_row() {
    // `schema` is an exhaustive match, so a type without a row does not compile; this
    // checks what each row says: a supported type has a shape rule that answers for
    // itself, an unsupported one is refused by name.
    let mut unsupported = Vec::new();
    for &op in OperationType::ALL {
        let answer = infer(op, &[], &[]);
        if schema(op).is_supported() {
            assert!(
                !matches!(answer, Err(SignatureError::Unsupported(_))),
                "{op:?} has a row but no shape rule"
            );
        } else {
            assert_eq!(answer, Err(SignatureError::Unsupported(op)));
            unsupported.push(op);
        }
    }
    assert_eq!(unsupported.len(), 21, "{unsupported:?}");
    assert!(!unsupported.contains(&OperationType::Conv2d));
}

#[test]
fn roles_have_one_name_each() {
    for &role in Role::ALL {
        assert_eq!(Role::from_name(role.name()), Some(role));
    }
    assert_eq!(input_role(OperationType::Conv2d, 2, 10), Role::Bias);
    assert_eq!(input_role(OperationType::Conv2d, 3, 7), Role::Padding);
    assert_eq!(input_role(OperationType::Concatenation, 3, 4), Role::Axis);
    assert_eq!(input_role(OperationType::Concatenation, 2, 4), Role::Input);
    assert_eq!(Role::from_name("no such role"), None);
}

/// Encodes `params` into a model as a frontend does, then decodes them from the
/// operation's inputs as the runtime does.
fn window_round_trip<T>(
    tensors: usize,
    encode: impl FnOnce(&mut crate::nn::Model) -> Vec<crate::nn::OperandIndex>,
    decode: impl FnOnce(&[InputView]) -> Result<T>,
) -> T {
    let inputs = vec![t(&[1, 8, 8, 4]); tensors];
    round_trip_with(inputs, encode, decode).0
}

#[test]
fn window_parameters_decode_what_they_encode() {
    let explicit = WindowPadding::Explicit {
        left: 1,
        right: 2,
        top: 3,
        bottom: 4,
    };
    let same = WindowPadding::Implicit(PaddingScheme::Same);
    let convs = [
        (ConvKind::Plain, explicit, Hw::ONE, false),
        (ConvKind::Plain, same, Hw { h: 2, w: 3 }, false),
        (ConvKind::Plain, explicit, Hw::ONE, true),
        (
            ConvKind::Depthwise { multiplier: 2 },
            same,
            Hw { h: 2, w: 2 },
            true,
        ),
        (
            ConvKind::Depthwise { multiplier: 1 },
            explicit,
            Hw::ONE,
            false,
        ),
        (ConvKind::Grouped { groups: 4 }, explicit, Hw::ONE, false),
        (ConvKind::Grouped { groups: 2 }, same, Hw::ONE, true),
    ];
    for (kind, padding, dilation, nchw) in convs {
        let conv = Conv2d {
            kind,
            padding,
            stride: Hw { h: 2, w: 1 },
            dilation,
            activation: crate::nn::FusedActivation::Relu6,
            nchw,
        };
        let back = window_round_trip(3, |m| conv.encode(m), |v| Conv2d::decode(conv.op_type(), v));
        assert_eq!(back, conv);
    }
    for padding in [explicit, same] {
        for nchw in [false, true] {
            let pool = Pool2d {
                padding,
                stride: Hw { h: 2, w: 3 },
                filter: Hw { h: 3, w: 2 },
                activation: crate::nn::FusedActivation::None,
                nchw,
            };
            let back = window_round_trip(1, |m| pool.encode(m), Pool2d::decode);
            assert_eq!(back, pool);
        }
    }
    let transpose = TransposeConv2d {
        padding: TransposePadding::Explicit {
            left: 0,
            right: 1,
            top: 1,
            bottom: 0,
        },
        stride: Hw { h: 2, w: 2 },
        activation: crate::nn::FusedActivation::Relu,
        nchw: true,
    };
    let back = window_round_trip(3, |m| transpose.encode(m, None), TransposeConv2d::decode);
    assert_eq!(back, transpose);
    let implicit = TransposeConv2d {
        padding: TransposePadding::Implicit(PaddingScheme::Valid),
        ..transpose
    };
    let back = window_round_trip(
        3,
        |m| {
            let shape = m.add_i32_vector(&[1, 16, 16, 4]);
            implicit.encode(m, Some(shape))
        },
        TransposeConv2d::decode,
    );
    assert_eq!(back, implicit);
}

#[test]
fn rows_say_which_input_is_a_fused_clamp_and_what_the_work_is() {
    use OperationType as O;
    assert_eq!(fused_activation_input(O::Add, 3), Some(2));
    assert_eq!(fused_activation_input(O::FullyConnected, 4), Some(3));
    assert_eq!(fused_activation_input(O::Conv2d, 10), Some(9));
    assert_eq!(fused_activation_input(O::Conv2d, 7), Some(6));
    // The recurrent operations' `activation` is the cell's function, not a clamp.
    assert_eq!(
        fused_activation_input(O::UnidirectionalSequenceRnn, 7),
        None
    );
    assert_eq!(fused_activation_input(O::Relu, 1), None);
    assert_eq!(
        schema(O::DepthwiseConv2d).work_kind(),
        Some(Work::DepthwiseConvolution)
    );
    assert_eq!(schema(O::MaxPoolWithArgmax).work_kind(), Some(Work::Pool));
    assert_eq!(schema(O::Add).work_kind(), None);
}

#[test]
fn resize_parameters_decode_what_they_encode() {
    let sizes = [
        ResizeSize::Output {
            width: 7,
            height: 3,
        },
        ResizeSize::Scale {
            width: 2.0,
            height: 0.5,
        },
    ];
    // align_corners and half_pixel_centers exclude each other.
    let flags = [(false, false), (true, false), (false, true)];
    for op in [
        OperationType::ResizeBilinear,
        OperationType::ResizeNearestNeighbor,
    ] {
        for size in sizes {
            for nchw in [false, true] {
                for (align_corners, half_pixel_centers) in flags {
                    let resize = Resize2d {
                        size,
                        nchw,
                        align_corners,
                        half_pixel_centers,
                    };
                    let mut count = 0;
                    let back = window_round_trip(
                        1,
                        |m| {
                            let params = resize.encode(m);
                            count = params.len();
                            params
                        },
                        |v| Resize2d::decode(op, v),
                    );
                    assert_eq!(back, resize);
                    // Size and all three flags, as the frontends always wrote them.
                    assert_eq!(count, 5);
                }
            }
        }
    }
}

#[test]
fn resize_parameters_default_the_absent_flags_and_refuse_both_alignments() {
    let input = t(&[1, 8, 8, 4]);
    let (w, h) = (c_i32(5), c_i32(6));
    let views = [
        InputView {
            operand: &input,
            value: None,
        },
        InputView {
            operand: &w.0,
            value: Some(&w.1),
        },
        InputView {
            operand: &h.0,
            value: Some(&h.1),
        },
    ];
    let plain = Resize2d::decode(OperationType::ResizeBilinear, &views).expect("decodes");
    assert_eq!(
        plain,
        Resize2d {
            size: ResizeSize::Output {
                width: 5,
                height: 6
            },
            nchw: false,
            align_corners: false,
            half_pixel_centers: false,
        }
    );
    // RESIZE_NEAREST_NEIGHBOR needs the layout flag.
    assert!(matches!(
        Resize2d::decode(OperationType::ResizeNearestNeighbor, &views),
        Err(SignatureError::InputCount { actual: 3, .. })
    ));
    let both = Resize2d {
        align_corners: true,
        half_pixel_centers: true,
        ..plain
    };
    let mut model = crate::nn::Model::default();
    let mut inputs = vec![model.add_operand(t(&[1, 8, 8, 4]))];
    inputs.extend(both.encode(&mut model));
    let views: Vec<InputView> = inputs
        .iter()
        .map(|&i| InputView {
            operand: model.operand(i).expect("operand"),
            value: model.constant_bytes(i),
        })
        .collect();
    assert!(matches!(
        Resize2d::decode(OperationType::ResizeBilinear, &views),
        Err(SignatureError::Parameter {
            index: 5,
            role: "half_pixel_centers",
            ..
        })
    ));
}

/// An LSTM with `terms` as a frontend writes it: time 5, batch 2, input size 3, 4 units,
/// output size 6 with projection (4 without); the layer-norm tail whenever `tail`.
fn lstm_model(
    params: &SequenceLstm,
    tail: bool,
) -> (crate::nn::Model, Vec<crate::nn::OperandIndex>) {
    let terms = params.terms;
    let (units, out) = (4, if terms.projection { 6 } else { 4 });
    let mut model = crate::nn::Model::default();
    let tensor = |m: &mut crate::nn::Model, present: bool, dims: &[u32]| {
        if present {
            m.add_operand(t(dims))
        } else {
            m.add_no_value(OperandType::TensorFloat32)
        }
    };
    let input = if params.time_major {
        [5, 2, 3]
    } else {
        [2, 5, 3]
    };
    let mut inputs = vec![tensor(&mut model, true, &input)];
    for gate in 0..4 {
        inputs.push(tensor(&mut model, gate > 0 || !terms.cifg, &[units, 3]));
    }
    for gate in 0..4 {
        inputs.push(tensor(&mut model, gate > 0 || !terms.cifg, &[units, out]));
    }
    for gate in 0..3 {
        let present = terms.peephole && (gate > 0 || !terms.cifg);
        inputs.push(tensor(&mut model, present, &[units]));
    }
    for gate in 0..4 {
        inputs.push(tensor(&mut model, gate > 0 || !terms.cifg, &[units]));
    }
    inputs.push(tensor(&mut model, terms.projection, &[out, units]));
    inputs.push(tensor(&mut model, terms.projection_bias, &[out]));
    inputs.push(tensor(&mut model, true, &[2, out]));
    inputs.push(tensor(&mut model, true, &[2, units]));
    inputs.extend(params.encode(&mut model));
    if tail {
        for gate in 0..4 {
            let present = terms.layer_norm && (gate > 0 || !terms.cifg);
            inputs.push(tensor(&mut model, present, &[units]));
        }
    }
    (model, inputs)
}

fn views_of<'a>(
    model: &'a crate::nn::Model,
    inputs: &[crate::nn::OperandIndex],
) -> Vec<InputView<'a>> {
    inputs
        .iter()
        .map(|&i| InputView {
            operand: model.operand(i).expect("operand"),
            value: model.constant_bytes(i),
        })
        .collect()
}

#[test]
fn sequence_rnn_parameters_decode_what_they_encode() {
    use crate::nn::FusedActivation as F;
    for activation in [F::None, F::Relu, F::Relu1, F::Relu6] {
        for time_major in [false, true] {
            let rnn = SequenceRnn {
                activation,
                time_major,
            };
            let mut count = 0;
            let back = window_round_trip(
                5,
                |m| {
                    let params = rnn.encode(m);
                    count = params.len();
                    params
                },
                SequenceRnn::decode,
            );
            assert_eq!(back, rnn);
            assert_eq!(count, 2);
        }
    }
}

#[test]
fn sequence_lstm_parameters_decode_what_they_encode_and_the_rule_agrees() {
    use LstmActivation as A;
    let mut checked = 0;
    for bits in 0..32u32 {
        let flag = |k: u32| bits & (1 << k) != 0;
        let terms = LstmTerms {
            cifg: flag(0),
            peephole: flag(1),
            projection: flag(2),
            projection_bias: flag(2) && flag(3),
            layer_norm: flag(4),
        };
        if flag(3) && !flag(2) {
            continue;
        }
        for (activation, time_major) in [(A::Tanh, false), (A::Sigmoid, true), (A::None, true)] {
            let lstm = SequenceLstm {
                activation,
                cell_clip: 0.5,
                projection_clip: if terms.projection { 3.0 } else { 0.0 },
                time_major,
                terms,
            };
            for tail in [false, true] {
                if terms.layer_norm && !tail {
                    continue;
                }
                let (model, inputs) = lstm_model(&lstm, tail);
                assert_eq!(inputs.len(), if tail { 28 } else { 24 });
                let views = views_of(&model, &inputs);
                assert_eq!(SequenceLstm::decode(&views), Ok(lstm));
                // The shape rule reads the same terms: the output size follows the
                // projection, the layout time_major.
                let out = t(&[]);
                let shapes = infer(
                    OperationType::UnidirectionalSequenceLstm,
                    &views,
                    &[&out, &out, &out],
                )
                .expect("the rule accepts what the frontend encodes");
                let size = if terms.projection { 6 } else { 4 };
                let sequence = if time_major {
                    vec![5, 2, size]
                } else {
                    vec![2, 5, size]
                };
                assert_eq!(shapes[0].dimensions, sequence);
                assert_eq!(shapes[1].dimensions, vec![2, size]);
                assert_eq!(shapes[2].dimensions, vec![2, 4]);
                checked += 1;
            }
        }
    }
    // 24 term combinations, the 12 without layer norm with and without the tail.
    assert_eq!(checked, 3 * (24 + 12));
    assert_eq!(A::from_code(2), None);
    for a in [A::None, A::Relu, A::Relu6, A::Tanh, A::Sigmoid] {
        assert_eq!(A::from_code(a.code()), Some(a));
        assert!(LSTM_ACTIVATIONS.contains(&a.code()));
    }
}

#[test]
fn sequence_parameters_refuse_what_nnapi_refuses() {
    let plain = SequenceLstm {
        activation: LstmActivation::Tanh,
        cell_clip: 0.0,
        projection_clip: 0.0,
        time_major: true,
        terms: LstmTerms {
            cifg: false,
            peephole: false,
            projection: false,
            projection_bias: false,
            layer_norm: false,
        },
    };
    let refused =
        |lstm: &SequenceLstm,
         edit: &dyn Fn(&mut crate::nn::Model, &mut Vec<crate::nn::OperandIndex>)| {
            let (mut model, mut inputs) = lstm_model(lstm, false);
            edit(&mut model, &mut inputs);
            let views = views_of(&model, &inputs);
            let decoded = SequenceLstm::decode(&views);
            let out = t(&[]);
            let rule = infer(OperationType::UnidirectionalSequenceLstm, &views, &[&out]);
            // The runtime's reader and the shape rule refuse alike.
            assert_eq!(decoded.clone().err(), rule.err());
            match decoded {
                Err(SignatureError::Parameter { index, .. }) => index,
                other => panic!("expected a parameter error, got {other:?}"),
            }
        };
    // The input gate's recurrent weights without its input weights.
    let no_input_gate = |m: &mut crate::nn::Model, inputs: &mut Vec<crate::nn::OperandIndex>| {
        inputs[1] = m.add_no_value(OperandType::TensorFloat32);
    };
    assert_eq!(refused(&plain, &no_input_gate), 5);
    let bad_clip = SequenceLstm {
        cell_clip: -1.0,
        ..plain
    };
    assert_eq!(refused(&bad_clip, &|_, _| {}), 21);
    let bad_activation = |m: &mut crate::nn::Model, inputs: &mut Vec<crate::nn::OperandIndex>| {
        inputs[20] = m.add_i32(2);
    };
    assert_eq!(refused(&plain, &bad_activation), 20);
    // An RNN's time_major is an INT32 of 0 or 1.
    let (w, r, b, h, x) = (t(&[4, 3]), t(&[4, 4]), t(&[4]), t(&[2, 4]), t(&[5, 2, 3]));
    let err = run(
        OperationType::UnidirectionalSequenceRnn,
        &[x, w, r, b, h],
        &[c_i32(0), c_i32(2)],
    );
    assert!(matches!(
        err,
        Err(SignatureError::Parameter { index: 6, .. })
    ));
}

#[test]
fn weighted_int8_rows_have_a_filter_layout() {
    // The quantizer reads a weighted operation's filter layout from its `Work`; a row
    // marked weighted without one would be silently left in float.
    for &op in OperationType::ALL {
        let row = schema(op);
        if row.int8_form() == Int8::Weighted {
            assert!(
                matches!(
                    row.work_kind(),
                    Some(
                        Work::Convolution
                            | Work::GroupedConvolution
                            | Work::DepthwiseConvolution
                            | Work::TransposedConvolution
                            | Work::FullyConnected
                    )
                ),
                "{op:?} is int8-weighted without a filter layout"
            );
        }
    }
}

/// Encodes parameters after `input` (and `tensors - 1` more float tensors), then decodes.
fn round_trip_on<T>(
    input: Operand,
    tensors: usize,
    encode: impl FnOnce(&mut crate::nn::Model) -> Vec<crate::nn::OperandIndex>,
    decode: impl FnOnce(&[InputView]) -> Result<T>,
) -> (T, usize) {
    let mut inputs = vec![input];
    inputs.extend((1..tensors).map(|_| t(&[4])));
    round_trip_with(inputs, encode, decode)
}

/// Adds `tensors` to a model, encodes parameters after them and decodes the whole input
/// list; returns the decoded parameters and how many operands `encode` wrote.
fn round_trip_with<T>(
    tensors: Vec<Operand>,
    encode: impl FnOnce(&mut crate::nn::Model) -> Vec<crate::nn::OperandIndex>,
    decode: impl FnOnce(&[InputView]) -> Result<T>,
) -> (T, usize) {
    let mut model = crate::nn::Model::default();
    let mut inputs: Vec<crate::nn::OperandIndex> =
        tensors.into_iter().map(|o| model.add_operand(o)).collect();
    let params = encode(&mut model);
    let count = params.len();
    inputs.extend(params);
    let views: Vec<InputView> = inputs
        .iter()
        .map(|&i| InputView {
            operand: model.operand(i).expect("operand"),
            value: model.constant_bytes(i),
        })
        .collect();
    (decode(&views).expect("decodes"), count)
}

#[test]
fn reduction_and_normalization_parameters_decode_what_they_encode() {
    use OperationType as O;
    for op in [O::Mean, O::ReduceSum, O::ReduceMax, O::ReduceAny] {
        for keep_dims in [false, true] {
            let (back, _) = round_trip_on(
                t(&[2, 3, 4]),
                1,
                |m| {
                    let axes = m.add_i32_vector(&[0, -1]);
                    Reduce { axes, keep_dims }.encode(op, m)
                },
                |v| Reduce::decode(op, v),
            );
            assert_eq!(back.axes, Some(vec![0, -1]), "{op:?}");
            assert_eq!(back.keep_dims, keep_dims, "{op:?}");
        }
    }
    // SOFTMAX over the last axis keeps NN API 1.0's two-input form.
    for (op, axis, count) in [
        (O::Softmax, -1, 1),
        (O::Softmax, 1, 2),
        (O::LogSoftmax, -1, 2),
    ] {
        let softmax = Softmax { beta: 0.5, axis };
        let (back, n) = round_trip_on(
            t(&[2, 3]),
            1,
            |m| softmax.encode(op, m),
            |v| Softmax::decode(op, v),
        );
        assert_eq!((back, n), (softmax, count));
    }
    for axis in [-1, 0] {
        let l2 = L2Normalization { axis };
        let (back, _) = round_trip_on(t(&[2, 3]), 1, |m| l2.encode(m), L2Normalization::decode);
        assert_eq!(back, l2);
        let lrn = LocalResponse {
            radius: 2,
            bias: 1.0,
            alpha: 1e-4,
            beta: 0.75,
            axis,
        };
        let (back, _) = round_trip_on(
            t(&[1, 4, 4, 8]),
            1,
            |m| lrn.encode(m),
            LocalResponse::decode,
        );
        assert_eq!(back, lrn);
    }
    let instance = InstanceNormalization {
        gamma: 2.0,
        beta: -1.0,
        epsilon: 1e-5,
        nchw: true,
    };
    let (back, _) = round_trip_on(
        t(&[1, 4, 4, 8]),
        1,
        |m| instance.encode(m),
        InstanceNormalization::decode,
    );
    assert_eq!(back, instance);
    for (mode, padding, align_corners) in [
        (GridSampleMode::Bilinear, GridSamplePadding::Zeros, false),
        (GridSampleMode::Bicubic, GridSamplePadding::Reflection, true),
    ] {
        let grid = GridSample {
            mode,
            padding,
            align_corners,
        };
        let (back, _) = round_trip_on(t(&[1, 4, 4, 2]), 2, |m| grid.encode(m), GridSample::decode);
        assert_eq!(back, grid);
    }
    let layer = LayerNormalization {
        epsilon: 1e-6,
        axis: -1,
    };
    let (back, _) = round_trip_on(
        t(&[2, 4]),
        3,
        |m| layer.encode(m),
        LayerNormalization::decode,
    );
    assert_eq!(back, layer);
}

#[test]
fn slice_and_pad_parameters_decode_what_they_encode() {
    let (back, _) = round_trip_on(
        t(&[4, 6]),
        1,
        |m| {
            let slice = StridedSlice {
                begin: m.add_i32_vector(&[1, 0]),
                end: m.add_i32_vector(&[3, -1]),
                strides: m.add_i32_vector(&[1, 2]),
                begin_mask: 2,
                end_mask: 1,
                shrink_axis_mask: 0,
            };
            slice.encode(m)
        },
        StridedSlice::decode,
    );
    assert_eq!(
        back,
        StridedSlice {
            begin: Some(vec![1, 0]),
            end: Some(vec![3, -1]),
            strides: Some(vec![1, 2]),
            begin_mask: 2,
            end_mask: 1,
            shrink_axis_mask: 0,
        }
    );
    let mut int8 = Operand::new(OperandType::TensorQuant8AsymmSigned, vec![2, 2]);
    int8.scale = 0.5;
    let cases = [
        (t(&[2, 2]), PadFill::Zeros),
        (t(&[2, 2]), PadFill::Value(PadValue::Float(-3.5))),
        (int8, PadFill::Value(PadValue::Int(-7))),
        (t(&[2, 2]), PadFill::Mirror { symmetric: false }),
        (t(&[2, 2]), PadFill::Mirror { symmetric: true }),
    ];
    for (input, fill) in cases {
        let (back, _) = round_trip_on(
            input,
            1,
            |m| {
                let paddings = m.add_i32_vector(&[0, 1, 1, 0]);
                Pad { paddings, fill }.encode(m)
            },
            |v| Pad::decode(fill.op_type(), v),
        );
        assert_eq!(back.fill, fill);
        assert_eq!(back.paddings, Some(vec![0, 1, 1, 0]));
    }
}
