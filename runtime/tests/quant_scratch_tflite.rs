//! SCRATCH (not to be committed): replays /tmp/qh cases from the TFLite reference.
mod quant_common;
use nnc_formats::nn::{OperandType, OperationType};
use quant_common::*;

fn ty(s: &str) -> OperandType {
    match s {
        "TQ8A" => OperandType::TensorQuant8Asymm,
        "TQ8AS" => OperandType::TensorQuant8AsymmSigned,
        "TQ8SC" => OperandType::TensorQuant8SymmPerChannel,
        "TI32" => OperandType::TensorInt32,
        "TF32" => OperandType::TensorFloat32,
        "TBOOL" => OperandType::TensorBool8,
        _ => panic!("type {s}"),
    }
}

fn bytes(t: OperandType, vals: &[&str]) -> Vec<u8> {
    match t {
        OperandType::TensorInt32 => vals
            .iter()
            .flat_map(|v| v.parse::<i32>().unwrap().to_le_bytes())
            .collect(),
        OperandType::TensorFloat32 => vals
            .iter()
            .flat_map(|v| (v.parse::<f64>().unwrap() as f32).to_le_bytes())
            .collect(),
        _ => vals
            .iter()
            .map(|v| v.parse::<i32>().unwrap() as u8)
            .collect(),
    }
}

fn operand(t: &str, dims: &str, q: &str) -> nnc_formats::nn::Operand {
    let t = ty(t);
    let dims: Vec<usize> = if dims == "-" {
        vec![]
    } else {
        dims.split(',').map(|d| d.parse().unwrap()).collect()
    };
    if let Some(rest) = q.strip_prefix("pc:") {
        let (dim, scales) = rest.split_once(':').unwrap();
        return per_channel(
            &dims,
            dim.parse().unwrap(),
            scales
                .split(';')
                .map(|s| s.parse::<f64>().unwrap() as f32)
                .collect(),
        );
    }
    let (s, z) = q.split_once(':').unwrap();
    qoperand(
        t,
        &dims,
        s.parse::<f64>().unwrap() as f32,
        z.parse().unwrap(),
    )
}

#[test]
fn replay() {
    let path = std::env::var("QH_CASES").unwrap_or("/tmp/qh/cases.txt".into());
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let mut stats: std::collections::BTreeMap<String, (usize, usize, i32, usize)> =
        Default::default();
    let mut lines = text.lines();
    let mut shown = 0;
    while let Some(l) = lines.next() {
        let Some(name) = l.strip_prefix("case ") else {
            continue;
        };
        let op_name = lines
            .next()
            .unwrap()
            .strip_prefix("op ")
            .unwrap()
            .to_string();
        let op = OperationType::from_name(&op_name).unwrap();
        let mut args = Vec::new();
        let mut outv = None;
        for l in lines.by_ref() {
            if l == "end" {
                break;
            }
            let f: Vec<&str> = l.split(' ').collect();
            match (f[0], f[1]) {
                ("arg", "input") | ("arg", "const") => {
                    let o = operand(f[2], f[3], f[4]);
                    let data = bytes(o.operand_type, &f[5..]);
                    args.push(if f[1] == "input" {
                        input(o, data)
                    } else {
                        constant(o, data)
                    });
                }
                ("arg", "i32") => args.push(QArg::I32(f[2].parse().unwrap())),
                ("arg", "f32") => args.push(QArg::F32(f[2].parse::<f64>().unwrap() as f32)),
                ("arg", "bool") => args.push(QArg::Bool(f[2] != "0")),
                ("out", _) => {
                    let o = operand(f[1], f[2], f[3]);
                    let data = bytes(o.operand_type, &f[4..]);
                    outv = Some((o, data));
                }
                _ => panic!("{l}"),
            }
        }
        let (o, want) = outv.unwrap();
        let e = stats.entry(op_name.clone()).or_default();
        e.0 += 1;
        match run_q(op, args, std::slice::from_ref(&o)) {
            Err(err) => {
                e.3 += 1;
                if shown < 40 {
                    println!("{name} {op_name}: ERROR {err}");
                    shown += 1;
                }
            }
            Ok(got) => {
                let got = &got[0].data;
                let (diff, n) = match o.operand_type {
                    OperandType::TensorQuant8Asymm => (
                        got.iter()
                            .zip(&want)
                            .map(|(a, b)| (*a as i32 - *b as i32).abs())
                            .max()
                            .unwrap_or(0),
                        got.iter().zip(&want).filter(|(a, b)| a != b).count(),
                    ),
                    OperandType::TensorQuant8AsymmSigned => (
                        got.iter()
                            .zip(&want)
                            .map(|(a, b)| (*a as i8 as i32 - *b as i8 as i32).abs())
                            .max()
                            .unwrap_or(0),
                        got.iter().zip(&want).filter(|(a, b)| a != b).count(),
                    ),
                    _ => (i32::from(got != &want), usize::from(got != &want)),
                };
                if got.len() != want.len() {
                    println!("{name} {op_name}: LEN {} vs {}", got.len(), want.len());
                }
                if n > 0 {
                    e.1 += 1;
                    e.2 = e.2.max(diff);
                    if shown < 40 {
                        println!("{name} {op_name}: {n} mismatches, max diff {diff}");
                        shown += 1;
                    }
                }
            }
        }
    }
    for (k, (total, bad, maxd, errs)) in &stats {
        println!("{k:24} cases {total:4} mismatched {bad:4} maxdiff {maxd} errors {errs}");
    }
}
