//! Device profiles: the shipped profiles parse, every malformed field is named in the
//! error, and each supported-operations rule declines with its own name and detail.

use std::path::PathBuf;

use nnc_formats::crypto::{Algorithm, Mode};
use nnc_formats::device::{
    DeviceError, DeviceKind, DeviceProfile, OperationRule, PerformanceInfo, load_profiles,
    parse_profiles,
};
use nnc_formats::nn::{
    IoInfo, Lifetime, Model, Operand, OperandType, OperationType, ops, validate,
};
use nnc_formats::tensor::DataType;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/devices")).join(name)
}

fn load_one(name: &str) -> DeviceProfile {
    let mut list = load_profiles(&testdata(name)).unwrap();
    assert_eq!(list.len(), 1);
    list.remove(0)
}

#[test]
fn shipped_profiles_parse() {
    let npu = load_one("npu-int8.json");
    assert_eq!(npu.kind, DeviceKind::Npu);
    assert_eq!(
        npu.performance_for(OperandType::TensorQuant8AsymmSigned, false)
            .exec_time,
        0.2
    );
    assert_eq!(
        npu.performance_for(OperandType::TensorFloat32, false),
        PerformanceInfo::UNKNOWN
    );
    assert!(npu.decrypts(Algorithm::Sm4, Mode::Cbc));
    assert!(npu.decrypts(Algorithm::Aes128, Mode::Ctr));
    assert!(!npu.decrypts(Algorithm::Aes256, Mode::Cbc));
    assert!(!npu.decrypts(Algorithm::Sm4, Mode::Ecb));

    let dsp = load_one("dsp-float.json");
    assert_eq!(dsp.kind, DeviceKind::Dsp);
    assert!(dsp.rule_for(OperationType::Conv2d).is_some());
    assert!(dsp.rule_for(OperationType::FullyConnected).is_none());
    assert!(dsp.rule_for(OperationType::Mean).is_none());
    // The relaxed entry applies to float32 only when the model allows it.
    assert_eq!(
        dsp.performance_for(OperandType::TensorFloat32, false)
            .exec_time,
        0.6
    );
    assert_eq!(
        dsp.performance_for(OperandType::TensorFloat32, true)
            .exec_time,
        0.35
    );
    assert_eq!(
        dsp.performance_for(OperandType::TensorFloat16, true)
            .exec_time,
        0.35
    );

    // cpu.json is the built-in CPU written out (its version follows nnc's).
    let mut cpu = load_one("cpu.json");
    cpu.version = DeviceProfile::cpu().version;
    assert_eq!(cpu, DeviceProfile::cpu());
}

#[test]
fn the_builtin_cpu_supports_and_decrypts_everything() {
    let cpu = DeviceProfile::cpu();
    assert!(cpu.is_cpu());
    cpu.validate("builtin").unwrap();
    for &op in OperationType::ALL {
        assert!(cpu.rule_for(op).is_some(), "{op}");
    }
    for &t in OperandType::ALL {
        assert_eq!(cpu.performance_for(t, false), PerformanceInfo::CPU);
        assert_eq!(cpu.performance_for(t, true), PerformanceInfo::CPU);
    }
    for a in Algorithm::ALL {
        for m in Mode::ALL {
            assert!(cpu.decrypts(a, m));
        }
    }
    let (m, conv) = conv_model(7, 1, 1, 3, 8);
    cpu.check(
        &m.main.operations[conv],
        &m,
        Some((Algorithm::Aes256, Mode::Ofb)),
    )
    .unwrap();
}

#[test]
fn profiles_round_trip_through_json() {
    for name in ["npu-int8.json", "dsp-float.json", "cpu.json"] {
        let p = load_one(name);
        let text = serde_json::to_string_pretty(&p).unwrap();
        assert_eq!(DeviceProfile::from_json(&text, name).unwrap(), p, "{name}");
    }
}

#[test]
fn list_forms_are_accepted() {
    let npu = std::fs::read_to_string(testdata("npu-int8.json")).unwrap();
    let dsp = std::fs::read_to_string(testdata("dsp-float.json")).unwrap();
    let array = format!("[{npu}, {dsp}]");
    let names = |v: Vec<DeviceProfile>| v.into_iter().map(|p| p.name).collect::<Vec<_>>();
    assert_eq!(
        names(parse_profiles(&array, "a.json").unwrap()),
        ["npu-int8", "dsp-float"]
    );
    let object = format!("{{\"devices\": [{npu}, {dsp}]}}");
    assert_eq!(
        names(parse_profiles(&object, "o.json").unwrap()),
        ["npu-int8", "dsp-float"]
    );
    assert_eq!(
        names(parse_profiles("[]", "e.json").unwrap()),
        Vec::<String>::new()
    );
}

/// A valid profile exercising every field, as JSON to mutate.
fn base() -> serde_json::Value {
    serde_json::json!({
        "name": "acc",
        "type": "accelerator",
        "version": "1",
        "performance": { "TENSOR_FLOAT32": { "exec_time": 0.5, "power_usage": 0.5 } },
        "default_performance": { "exec_time": 2.0, "power_usage": 2.0 },
        "relaxed_performance": { "TENSOR_FLOAT32": { "exec_time": 0.25, "power_usage": 0.25 } },
        "operations": [
            { "types": ["CONV_2D"], "operand_types": ["TENSOR_FLOAT32"], "max_kernel_size": 5,
              "max_stride": 2, "max_dilation": 1, "max_channels": 64, "max_rank": 4,
              "max_tensor_bytes": 1000000 },
            { "types": ["ADD", "MUL"] }
        ],
        "memory_budget_bytes": 1000000,
        "decrypts": [ { "algorithm": "sm4", "modes": ["cbc", "ctr"] } ],
        "cache_files": { "model": 1, "data": 2 },
        "transfer": { "cost_per_byte": 0.5, "cost_per_step": 100 }
    })
}

/// Sets `path` (dot- and index-separated) in `base()` to `value` and parses it.
fn mutate(path: &str, value: serde_json::Value) -> DeviceError {
    let mut doc = base();
    let mut at = &mut doc;
    let parts: Vec<&str> = path.split('.').collect();
    for (k, part) in parts.iter().enumerate() {
        let last = k + 1 == parts.len();
        let (key, index) = match part.split_once('[') {
            Some((key, rest)) => (
                key,
                Some(rest.trim_end_matches(']').parse::<usize>().unwrap()),
            ),
            None => (*part, None),
        };
        if last && index.is_none() {
            at.as_object_mut().unwrap().insert(key.to_string(), value);
            break;
        }
        at = &mut at[key];
        if let Some(i) = index {
            if last {
                at[i] = value;
                break;
            }
            at = &mut at[i];
        }
    }
    let text = serde_json::to_string_pretty(&doc).unwrap();
    parse_profiles(&text, "acc.json").expect_err(&format!("{path} = ... should be rejected"))
}

#[test]
fn the_base_profile_is_valid() {
    let text = serde_json::to_string(&base()).unwrap();
    let p = DeviceProfile::from_json(&text, "acc.json").unwrap();
    assert_eq!(p.transfer.cost_per_step, 100.0);
    assert_eq!(p.cache_files.data, 2);
}

#[test]
fn every_malformed_field_is_named() {
    use serde_json::json;
    let cases: Vec<(&str, serde_json::Value, &str, &str)> = vec![
        // (path to set, value, field the error must name, words it must contain)
        ("colour", json!("red"), "colour", "unknown field `colour`"),
        ("name", json!(""), "name", "must not be empty"),
        ("name", json!(7), "name", "invalid type"),
        ("type", json!("tpu"), "type", "unknown variant `tpu`"),
        ("version", json!(" "), "version", "must not be empty"),
        (
            "performance.TENSOR_FLAOT32",
            json!({"exec_time": 1, "power_usage": 1}),
            "performance.TENSOR_FLAOT32",
            "unknown operand type",
        ),
        (
            "performance.TENSOR_FLOAT32.exec_time",
            json!("fast"),
            "performance.TENSOR_FLOAT32.exec_time",
            "invalid type",
        ),
        (
            "performance.TENSOR_FLOAT32.exec_time",
            json!(-0.5),
            "performance.TENSOR_FLOAT32.exec_time",
            "finite number > 0",
        ),
        (
            "performance.TENSOR_FLOAT32.power_usage",
            json!(0),
            "performance.TENSOR_FLOAT32.power_usage",
            "finite number > 0",
        ),
        (
            "performance.TENSOR_FLOAT32.speed",
            json!(1),
            "performance.TENSOR_FLOAT32.speed",
            "unknown field `speed`",
        ),
        (
            "default_performance.exec_time",
            json!(-1),
            "default_performance.exec_time",
            "finite number > 0",
        ),
        (
            "relaxed_performance.TENSOR_INT32",
            json!({"exec_time": 1, "power_usage": 1}),
            "relaxed_performance.TENSOR_INT32",
            "not FLOAT32 or TENSOR_FLOAT32",
        ),
        (
            "operations[0].types",
            json!([]),
            "operations[0].types",
            "at least one operation",
        ),
        (
            "operations[0].types",
            json!(["CONV_2D", "CONV_3D"]),
            "operations[0].types[1]",
            "unknown operation 'CONV_3D'",
        ),
        (
            "operations[1].types",
            json!(["ADD", "CONV_2D"]),
            "operations[1].types[1]",
            "already covered by operations[0]",
        ),
        (
            "operations[1].types",
            json!(["*", "*"]),
            "operations[1].types[1]",
            "already covered",
        ),
        (
            "operations[0].operand_types",
            json!([]),
            "operations[0].operand_types",
            "at least one operand type",
        ),
        (
            "operations[0].operand_types",
            json!(["TENSOR_FLOAT64"]),
            "operations[0].operand_types[0]",
            "unknown operand type",
        ),
        (
            "operations[0].operand_types",
            json!(["TENSOR_FLOAT32", "TENSOR_FLOAT32"]),
            "operations[0].operand_types[1]",
            "listed twice",
        ),
        (
            "operations[0].max_kernel_size",
            json!(0),
            "operations[0].max_kernel_size",
            "at least 1",
        ),
        (
            "operations[0].max_stride",
            json!(-1),
            "operations[0].max_stride",
            "invalid value",
        ),
        (
            "operations[0].max_dilation",
            json!(1.5),
            "operations[0].max_dilation",
            "invalid type",
        ),
        (
            "operations[0].max_channels",
            json!(0),
            "operations[0].max_channels",
            "at least 1",
        ),
        (
            "operations[0].max_rank",
            json!(0),
            "operations[0].max_rank",
            "at least 1",
        ),
        (
            "operations[0].max_tensor_bytes",
            json!("big"),
            "operations[0].max_tensor_bytes",
            "invalid type",
        ),
        (
            "operations[1].max_kernal_size",
            json!(3),
            "operations[1].max_kernal_size",
            "unknown field",
        ),
        (
            "memory_budget_bytes",
            json!(0),
            "memory_budget_bytes",
            "at least 1",
        ),
        (
            "memory_budget_bytes",
            json!(-4),
            "memory_budget_bytes",
            "invalid value",
        ),
        (
            "decrypts[0].algorithm",
            json!("aes512"),
            "decrypts[0].algorithm",
            "aes512",
        ),
        (
            "decrypts[0].modes",
            json!(["cbc", "ccm"]),
            "decrypts[0].modes",
            "unknown cipher mode \"ccm\"",
        ),
        (
            "decrypts[0].modes",
            json!([]),
            "decrypts[0].modes",
            "at least one mode",
        ),
        (
            "decrypts[0].modes",
            json!(["cbc", "cbc"]),
            "decrypts[0].modes[1]",
            "listed twice",
        ),
        (
            "decrypts",
            json!([{"algorithm": "sm4", "modes": ["cbc"]}, {"algorithm": "sm4", "modes": ["ctr"]}]),
            "decrypts[1].algorithm",
            "already listed",
        ),
        (
            "cache_files.model",
            json!(33),
            "cache_files.model",
            "limit of 32",
        ),
        (
            "cache_files.data",
            json!(-1),
            "cache_files.data",
            "invalid value",
        ),
        (
            "cache_files.other",
            json!(1),
            "cache_files.other",
            "unknown field",
        ),
        (
            "transfer.cost_per_byte",
            json!(-0.5),
            "transfer.cost_per_byte",
            "finite number >= 0",
        ),
        (
            "transfer.cost_per_step",
            json!("x"),
            "transfer.cost_per_step",
            "invalid type",
        ),
    ];
    for (path, value, field, words) in cases {
        let err = mutate(path, value);
        let shown = err.to_string();
        let named = match &err {
            DeviceError::Json { field, .. } | DeviceError::Invalid { field, .. } => field.clone(),
            DeviceError::Io { .. } => String::new(),
        };
        assert_eq!(named, field, "{path}: {shown}");
        assert!(shown.starts_with("acc.json: "), "{path}: {shown}");
        assert!(shown.contains(field), "{path}: {shown}");
        assert!(shown.contains(words), "{path}: {shown}");
    }
}

#[test]
fn missing_required_fields_and_bad_syntax_are_located() {
    let err = parse_profiles(r#"{"type": "npu", "version": "1"}"#, "p.json").unwrap_err();
    assert!(err.to_string().contains("missing field `name`"), "{err}");
    let err =
        parse_profiles("{\n  \"name\": \"a\",\n  \"type\": \"npu\",,\n}", "p.json").unwrap_err();
    match err {
        DeviceError::Json { line, .. } => assert_eq!(line, 3),
        other => panic!("{other}"),
    }
    // JSON has no NaN: a literal NaN is a syntax error, located.
    let err = parse_profiles(r#"{"name": "a", "type": "npu", "version": "1", "performance": {"TENSOR_FLOAT32": {"exec_time": NaN, "power_usage": 1}}}"#, "p.json").unwrap_err();
    assert!(
        err.to_string()
            .contains("performance.TENSOR_FLOAT32.exec_time"),
        "{err}"
    );
    // Numbers beyond f64 are refused by the parser, located.
    let text = serde_json::to_string(&base())
        .unwrap()
        .replace("\"cost_per_step\":100", "\"cost_per_step\":1e999");
    let err = parse_profiles(&text, "p.json").unwrap_err();
    assert!(err.to_string().contains("transfer.cost_per_step"), "{err}");
    let err = load_profiles(&testdata("no-such-device.json")).unwrap_err();
    assert!(matches!(err, DeviceError::Io { .. }));
    assert!(err.to_string().contains("no-such-device.json"), "{err}");
}

#[test]
fn duplicate_names_in_a_list_are_named() {
    let one = serde_json::to_string(&base()).unwrap();
    let err = parse_profiles(&format!("[{one}, {one}]"), "l.json").unwrap_err();
    assert_eq!(
        err.to_string(),
        "l.json: [1].name: device name 'acc' is already used by [0]"
    );
    let err = parse_profiles(&format!("{{\"devices\": [{one}, {one}]}}"), "l.json").unwrap_err();
    assert!(
        err.to_string().starts_with("l.json: devices[1].name: "),
        "{err}"
    );
    let mut bad = base();
    bad["operations"][0]["max_stride"] = serde_json::json!(0);
    let text = format!("{{\"devices\": [{one}, {bad}]}}");
    let err = parse_profiles(&text, "l.json").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("l.json: devices[1].operations[0].max_stride: "),
        "{err}"
    );
    // A list's malformed element is located too.
    let text = format!("{{\"devices\": [{one}, {{\"name\": 3}}]}}");
    let err = parse_profiles(&text, "l.json").unwrap_err();
    assert!(err.to_string().contains("devices[1].name"), "{err}");
}

#[test]
fn profiles_built_in_code_are_checked_too() {
    let mut p = DeviceProfile::cpu();
    p.performance.insert(
        "TENSOR_FLOAT32".into(),
        PerformanceInfo {
            exec_time: f64::NAN,
            power_usage: 1.0,
        },
    );
    let err = p.validate("code").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("code: performance.TENSOR_FLOAT32.exec_time: "),
        "{err}"
    );
    let mut p = DeviceProfile::cpu();
    p.transfer.cost_per_byte = f64::INFINITY;
    assert!(
        p.validate("code")
            .unwrap_err()
            .to_string()
            .contains("transfer.cost_per_byte")
    );
}

// ---- rules ----

fn tensor(t: OperandType, dims: &[u32]) -> Operand {
    let o = Operand::new(t, dims.to_vec());
    if t.is_quantized() {
        o.with_quant(0.5, 0)
    } else {
        o
    }
}

/// input [1, 16, 16, cin] -> CONV_2D k x k, stride, dilation -> output; returns the model
/// and the operation index.
fn conv_model(k: u32, stride: i32, dilation: i32, cin: u32, cout: u32) -> (Model, usize) {
    let mut m = Model::default();
    let mut x = tensor(OperandType::TensorFloat32, &[1, 16, 16, cin]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let filter = m.add_f32_tensor(
        vec![cout, k, k, cin],
        &vec![0.0; (cout * k * k * cin) as usize],
    );
    let bias = m.add_f32_tensor(vec![cout], &vec![0.0; cout as usize]);
    let mut inputs = vec![x, filter, bias];
    for v in [0, 0, 0, 0, stride, stride, 0] {
        inputs.push(m.add_i32(v));
    }
    inputs.push(m.add_bool(false));
    inputs.push(m.add_i32(dilation));
    inputs.push(m.add_i32(dilation));
    finish_single(m, OperationType::Conv2d, inputs)
}

/// Adds `op` over `inputs` with its inferred output as the model output.
fn finish_single(mut m: Model, op: OperationType, inputs: Vec<u32>) -> (Model, usize) {
    let shape = {
        let views: Vec<ops::InputView> = inputs
            .iter()
            .map(|&i| ops::InputView {
                operand: &m.main.operands[i as usize],
                value: m.constant_bytes(i),
            })
            .collect();
        let template = Operand::new(OperandType::TensorFloat32, vec![]);
        ops::infer(op, &views, &[&template]).unwrap().remove(0)
    };
    let mut y = tensor(shape.operand_type, &shape.dimensions);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    let index = m.add_operation(op, inputs.clone(), vec![y], "node");
    m.main.inputs = inputs
        .iter()
        .copied()
        .filter(|&i| m.main.operands[i as usize].lifetime == Lifetime::SubgraphInput)
        .collect();
    m.main.outputs = vec![y];
    let info = |o: &Operand| IoInfo {
        name: "io".into(),
        dtype: DataType::F32,
        dims: o.dimensions.clone(),
    };
    m.input_info = m
        .main
        .inputs
        .iter()
        .map(|&i| info(&m.main.operands[i as usize]))
        .collect();
    m.output_info = vec![info(&m.main.operands[y as usize])];
    validate(&m).unwrap();
    (m, index)
}

fn device(rule: OperationRule) -> DeviceProfile {
    DeviceProfile {
        name: "acc".into(),
        kind: DeviceKind::Accelerator,
        operations: vec![rule],
        decrypts: Vec::new(),
        ..DeviceProfile::cpu()
    }
}

fn conv_rule() -> OperationRule {
    OperationRule {
        types: vec!["CONV_2D".into()],
        ..OperationRule::default()
    }
}

/// The (rule, detail) a device declines the model's operation with.
fn declined(d: &DeviceProfile, m: &Model, op: usize) -> (String, String) {
    let e = d.check(&m.main.operations[op], m, None).unwrap_err();
    assert_eq!(e.device, d.name);
    (e.rule, e.detail)
}

#[test]
fn kernel_size_limit() {
    let d = device(OperationRule {
        max_kernel_size: Some(5),
        ..conv_rule()
    });
    let (m, op) = conv_model(7, 1, 1, 3, 8);
    assert_eq!(
        declined(&d, &m, op),
        ("max_kernel_size".into(), "kernel 7x7 exceeds 5x5".into())
    );
    let (m, op) = conv_model(5, 1, 1, 3, 8);
    d.check(&m.main.operations[op], &m, None).unwrap();
}

#[test]
fn stride_dilation_channels_rank_and_bytes_limits() {
    let (m, op) = conv_model(3, 4, 1, 3, 8);
    let d = device(OperationRule {
        max_stride: Some(2),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        ("max_stride".into(), "stride 4x4 exceeds 2".into())
    );

    let (m, op) = conv_model(3, 1, 2, 3, 8);
    let d = device(OperationRule {
        max_dilation: Some(1),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        ("max_dilation".into(), "dilation 2x2 exceeds 1".into())
    );

    let (m, op) = conv_model(1, 1, 1, 3, 128);
    let d = device(OperationRule {
        max_channels: Some(64),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        (
            "max_channels".into(),
            "output 0 has 128 channels, above 64".into()
        )
    );

    let d = device(OperationRule {
        max_rank: Some(3),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        ("max_rank".into(), "input 0 has rank 4, above 3".into())
    );

    // input 1x16x16x3 f32 = 3072 bytes.
    let d = device(OperationRule {
        max_tensor_bytes: Some(2048),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        (
            "max_tensor_bytes".into(),
            "input 0 takes 3072 bytes, above 2048".into()
        )
    );

    // input 3072 + filter 1536 + bias 512 + output 131072 bytes.
    let mut d = device(conv_rule());
    d.memory_budget_bytes = Some(100_000);
    let (rule, detail) = declined(&d, &m, op);
    assert_eq!(rule, "memory_budget_bytes");
    assert!(
        detail.contains("136192 bytes, above the on-chip budget of 100000"),
        "{detail}"
    );
    d.memory_budget_bytes = Some(136_192);
    d.check(&m.main.operations[op], &m, None).unwrap();
}

#[test]
fn operation_and_operand_type_rules() {
    let (m, op) = conv_model(3, 1, 1, 3, 8);
    let d = device(OperationRule {
        types: vec!["ADD".into()],
        ..OperationRule::default()
    });
    assert_eq!(
        declined(&d, &m, op),
        (
            "operations".into(),
            "CONV_2D is not among its supported operations".into()
        )
    );
    let d = device(OperationRule {
        operand_types: Some(vec![
            "TENSOR_QUANT8_ASYMM_SIGNED".into(),
            "TENSOR_QUANT8_ASYMM".into(),
        ]),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        (
            "operand_types".into(),
            "input 0 is TENSOR_FLOAT32, not TENSOR_QUANT8_ASYMM_SIGNED or TENSOR_QUANT8_ASYMM"
                .into()
        )
    );
    // The wildcard covers what no rule names; a named rule takes precedence over it.
    let mut d = device(OperationRule {
        types: vec!["*".into()],
        ..OperationRule::default()
    });
    d.check(&m.main.operations[op], &m, None).unwrap();
    d.operations.push(OperationRule {
        max_kernel_size: Some(1),
        ..conv_rule()
    });
    assert_eq!(declined(&d, &m, op).0, "max_kernel_size");
}

#[test]
fn pools_use_their_filter_parameters() {
    let mut m = Model::default();
    let mut x = tensor(OperandType::TensorFloat32, &[1, 16, 16, 4]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let mut inputs = vec![x];
    // implicit padding: padding, stride_w, stride_h, filter_w, filter_h, activation
    for v in [2, 1, 1, 3, 9, 0] {
        inputs.push(m.add_i32(v));
    }
    let (m, op) = finish_single(m, OperationType::MaxPool2d, inputs);
    let d = device(OperationRule {
        types: vec!["MAX_POOL_2D".into()],
        max_kernel_size: Some(7),
        ..OperationRule::default()
    });
    assert_eq!(
        declined(&d, &m, op),
        ("max_kernel_size".into(), "kernel 9x3 exceeds 7x7".into())
    );
}

#[test]
fn implicit_padding_convolutions_with_dilation_name_their_roles() {
    // CONV_2D implicit form with layout and dilation has 10 inputs, like the explicit
    // form; the BOOL at position 7 tells them apart.
    let mut m = Model::default();
    let mut x = tensor(OperandType::TensorFloat32, &[1, 16, 16, 3]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let filter = m.add_f32_tensor(vec![4, 3, 3, 3], &[0.0; 108]);
    let bias = m.add_f32_tensor(vec![4], &[0.0; 4]);
    let mut inputs = vec![x, filter, bias];
    for v in [1, 3, 1, 0] {
        inputs.push(m.add_i32(v)); // padding SAME, stride_w 3, stride_h 1, activation
    }
    inputs.push(m.add_bool(false));
    inputs.push(m.add_i32(1));
    inputs.push(m.add_i32(1));
    let (m, op) = finish_single(m, OperationType::Conv2d, inputs);
    let d = device(OperationRule {
        max_stride: Some(2),
        ..conv_rule()
    });
    assert_eq!(
        declined(&d, &m, op),
        ("max_stride".into(), "stride 1x3 exceeds 2".into())
    );
}

#[test]
fn encryption_rule() {
    let (m, op) = conv_model(3, 1, 1, 3, 8);
    let mut d = device(conv_rule());
    d.decrypts = vec![nnc_formats::device::DecryptSupport {
        algorithm: Algorithm::Sm4,
        modes: vec![Mode::Cbc],
    }];
    let conv = &m.main.operations[op];
    d.check(conv, &m, None).unwrap();
    d.check(conv, &m, Some((Algorithm::Sm4, Mode::Cbc)))
        .unwrap();
    let e = d
        .check(conv, &m, Some((Algorithm::Aes256, Mode::Cbc)))
        .unwrap_err();
    assert_eq!(e.rule, "encryption");
    assert_eq!(
        e.detail,
        "its weights are encrypted with aes256-cbc; it decrypts sm4-cbc"
    );
    // An operation reading no weights needs no decryption.
    let mut m2 = Model::default();
    let mut x = tensor(OperandType::TensorFloat32, &[1, 4]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m2.add_operand(x);
    let (m2, relu) = finish_single(m2, OperationType::Relu, vec![x]);
    let d = device(OperationRule {
        types: vec!["RELU".into()],
        ..OperationRule::default()
    });
    d.check(
        &m2.main.operations[relu],
        &m2,
        Some((Algorithm::Aes256, Mode::Cbc)),
    )
    .unwrap();
}

#[test]
fn malformed_operations_are_declined_not_panicked_on() {
    let (mut m, op) = conv_model(3, 1, 1, 3, 8);
    m.main.operations[op].inputs[1] = 999;
    let d = device(conv_rule());
    assert_eq!(declined(&d, &m, op).0, "model");
    // Missing parameters: the rules that need them decline, the others pass.
    let (mut m, op) = conv_model(3, 1, 1, 3, 8);
    m.main.operations[op].inputs.truncate(3);
    let d = device(OperationRule {
        max_stride: Some(2),
        max_kernel_size: Some(5),
        ..conv_rule()
    });
    d.check(&m.main.operations[op], &m, None).unwrap();
}
